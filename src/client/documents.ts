/**
 * Staging documents for a session over the daemon's HTTP routes
 * (docs/PROTOCOL.md "Staged documents"): the bytes stream to the daemon as
 * they are read, from a Buffer, a stream or a file, with the token in
 * `Authorization`. `DeskbatchClient.stage` and friends call these with the
 * client's URL, token and session.
 */
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { Readable } from 'node:stream';
import type { StagedDocumentInfo } from '../base/protocol.ts';
import { DeskbatchError } from './errors.ts';
import { refusalFrom, sessionUrl } from './session-http.ts';

export type { StagedDocumentInfo };

/** The session's documents and the bounds they are held to. */
export interface StagedDocumentList {
  documents: StagedDocumentInfo[];
  limits: { max_documents: number; max_document_bytes: number; max_session_bytes: number };
}

/** What to stage: bytes, a stream of bytes, or a file of the harness's own (`{ path }`). */
export type DocumentSource = Uint8Array | Readable | AsyncIterable<Uint8Array> | { path: string };

export interface StageOptions {
  /** The media type the page will read (`File.type`); default application/octet-stream. */
  mediaType?: string;
  signal?: AbortSignal;
}

/**
 * The daemon refused a staging call: `code` is its stable code (`file_too_large`, `too_many_files`,
 * `session_bytes`, `daemon_bytes`, `empty`, `bad_name`, `bad_media_type`, `session_not_found`,
 * `document_not_found`), `status` the HTTP status.
 */
export class DocumentRefusedError extends DeskbatchError {
  override name = 'DocumentRefusedError';
  constructor(
    override readonly code: string,
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

/** Where a session's documents are, on the daemon that `wsUrl` (`ws://host:port/v1`) names. */
export function documentsUrl(wsUrl: string, sessionId: string): URL {
  return sessionUrl(wsUrl, sessionId, 'documents');
}

/** Largest answer read: a list of the session's documents. */
const MAX_ANSWER_BYTES = 1024 * 1024;

interface Answer {
  status: number;
  body: unknown;
}

/** One request; the answer is read whole (bounded). A body the daemon refused part-way is not an error here. */
function send(
  url: URL,
  token: string,
  method: string,
  headers: Record<string, string>,
  body: Readable | undefined,
  signal: AbortSignal | undefined,
): Promise<Answer> {
  return new Promise<Answer>((resolve, reject) => {
    const request = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, {
      method,
      headers: { authorization: `Bearer ${token}`, ...headers },
      ...(signal ? { signal } : {}),
    });
    let answered = false;
    request.on('response', (res: IncomingMessage) => {
      answered = true;
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size > MAX_ANSWER_BYTES) res.destroy(new DeskbatchError('the daemon answered more than expected'));
        else chunks.push(c);
      });
      res.on('error', reject);
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        let parsed: unknown = undefined;
        try {
          parsed = text ? JSON.parse(text) : undefined;
        } catch {
          parsed = { error: 'unexpected_answer', message: text.slice(0, 200) };
        }
        resolve({ status: res.statusCode ?? 0, body: parsed });
        // Answered before the whole body went (a refusal): this request's socket can serve no other.
        if (!request.writableFinished) request.destroy();
      });
      // The daemon answered before taking the whole body (a refusal): the rest is not sent.
      body?.unpipe(request);
      body?.destroy();
    });
    // Once answered, a write cut off by the daemon's close is expected: the answer says why.
    request.on('error', (err) => {
      if (!answered) reject(err);
    });
    if (!body) request.end();
    else {
      body.on('error', (err) => {
        request.destroy(err);
        if (!answered) reject(err);
      });
      body.pipe(request);
    }
  });
}

function refused(answer: Answer): DocumentRefusedError {
  const { code, message, status } = refusalFrom(answer.status, answer.body);
  return new DocumentRefusedError(code, message, status);
}

/** Stages `source` as `name` for the session whose documents are at `url`. */
export async function stageDocument(
  url: URL,
  token: string,
  name: string,
  source: DocumentSource,
  options: StageOptions = {},
): Promise<StagedDocumentInfo> {
  const target = new URL(url);
  target.searchParams.set('name', name);
  const headers: Record<string, string> = { 'content-type': options.mediaType ?? 'application/octet-stream' };
  let body: Readable;
  if (source instanceof Uint8Array) {
    headers['content-length'] = String(source.byteLength);
    body = Readable.from([source]);
  } else if (source instanceof Readable) body = source;
  else if ('path' in source) {
    headers['content-length'] = String((await stat(source.path)).size);
    body = createReadStream(source.path);
  } else body = Readable.from(source);
  const answer = await send(target, token, 'POST', headers, body, options.signal);
  if (answer.status !== 201) throw refused(answer);
  return answer.body as StagedDocumentInfo;
}

export async function listDocuments(url: URL, token: string): Promise<StagedDocumentList> {
  const answer = await send(url, token, 'GET', {}, undefined, undefined);
  if (answer.status !== 200) throw refused(answer);
  return answer.body as StagedDocumentList;
}

export async function removeDocument(url: URL, token: string, documentId: string): Promise<void> {
  const target = new URL(url);
  target.pathname += `/${encodeURIComponent(documentId)}`;
  const answer = await send(target, token, 'DELETE', {}, undefined, undefined);
  if (answer.status !== 204) throw refused(answer);
}
