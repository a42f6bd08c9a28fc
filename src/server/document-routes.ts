/**
 * The HTTP routes a harness stages documents through, on the daemon's port
 * behind its token (docs/PROTOCOL.md "Staged documents"):
 *
 *   POST   /v1/sessions/<session_id>/documents?name=<name>   the body, raw; answers the document's info
 *   GET    /v1/sessions/<session_id>/documents               the session's documents and the bounds
 *   DELETE /v1/sessions/<session_id>/documents/<document_id>
 *
 * HTTP rather than a protocol frame: the body streams to disk with
 * backpressure, with no base64 and no WebSocket frame bound, and `curl -T`
 * or Python's `requests` can send it. The session id with the token is the
 * credential a resume takes already; a session that is not live answers 404
 * as a malformed id does, and a document is looked up only in its session.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { PassThrough } from 'node:stream';
import type { DocumentSettings } from '../base/config.ts';
import type { HttpRoute } from './server.ts';
import { FileRefusal, type FileInfo, type SessionFiles } from './session-files.ts';
import { refuseUpload, sendJson, sessionNotFound, sessionPath, SESSIONS_PATH } from './session-routes.ts';

const DOCUMENT_ID = /^doc_[A-Za-z0-9_-]{1,64}$/;

export interface DocumentRouteDeps {
  /** The live session's files, or undefined when there is no live session by that id. */
  filesOf(sessionId: string): SessionFiles | undefined;
  settings: DocumentSettings;
  /** A document was staged or removed (the activity stream: recording, viewer). */
  staged(sessionId: string, info: FileInfo): void;
  removed(sessionId: string, documentId: string): void;
}

/** The session and document of `/v1/sessions/<id>/documents[/<document_id>]`, or undefined for any other path. */
function parse(req: IncomingMessage): { sessionId: string; documentId?: string; url: URL } | undefined {
  const url = new URL(req.url ?? '/', 'http://daemon');
  const [sessionId, what, documentId, ...more] = sessionPath(url.pathname) ?? [];
  if (!sessionId || what !== 'documents' || more.length) return undefined;
  if (documentId === undefined) return { sessionId, url };
  return { sessionId, documentId, url };
}

export function documentRoutes(deps: DocumentRouteDeps): HttpRoute[] {
  const stage = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const target = parse(req);
    const files = target && target.documentId === undefined ? deps.filesOf(target.sessionId) : undefined;
    if (!target || !files) return refuseUpload(req, res, () => sessionNotFound(res));
    const name = target.url.searchParams.get('name');
    if (name === null) {
      return refuseUpload(req, res, () =>
        sendJson(res, 400, { error: 'bad_name', message: 'give the name as ?name=' }),
      );
    }
    const length = req.headers['content-length'];
    const declared = length === undefined ? undefined : Number(length);
    // The request is piped, not handed over: a refusal mid-stream destroys the copy, and the answer still goes out.
    const body = new PassThrough();
    req.pipe(body);
    // pipe() passes no abort on: a client gone mid-body would leave the write, its place and its bytes held.
    req.once('close', () => {
      if (!req.complete) body.destroy(new Error('the upload was aborted'));
    });
    try {
      const info = await files.add('document', name, req.headers['content-type'], body, declared);
      deps.staged(target.sessionId, info);
      sendJson(res, 201, info);
    } catch (err) {
      req.unpipe(body);
      if (!(err instanceof FileRefusal)) {
        req.socket.destroy();
        throw err;
      }
      if (err.code === 'session_gone') return refuseUpload(req, res, () => sessionNotFound(res));
      refuseUpload(req, res, () => sendJson(res, err.status, { error: err.code, message: err.message }));
    }
  };

  const list = (req: IncomingMessage, res: ServerResponse): void => {
    const target = parse(req);
    const files = target && target.documentId === undefined ? deps.filesOf(target.sessionId) : undefined;
    if (!files) return sessionNotFound(res);
    const { maxPerSession, maxFileBytes, maxSessionBytes } = deps.settings;
    sendJson(res, 200, {
      documents: files.list('document'),
      limits: { max_documents: maxPerSession, max_document_bytes: maxFileBytes, max_session_bytes: maxSessionBytes },
    });
  };

  const remove = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const target = parse(req);
    const files = target ? deps.filesOf(target.sessionId) : undefined;
    if (!target || !files) return sessionNotFound(res);
    const id = target.documentId;
    if (!id || !DOCUMENT_ID.test(id) || !(await files.delete(id, 'document'))) {
      return sendJson(res, 404, {
        error: 'document_not_found',
        message: 'this session staged no document with this id',
      });
    }
    deps.removed(target.sessionId, id);
    res.writeHead(204).end();
  };

  return [
    { method: 'POST', path: SESSIONS_PATH, prefix: true, auth: 'token', handle: stage },
    { method: 'GET', path: SESSIONS_PATH, prefix: true, auth: 'token', handle: list },
    { method: 'DELETE', path: SESSIONS_PATH, prefix: true, auth: 'token', handle: remove },
  ];
}
