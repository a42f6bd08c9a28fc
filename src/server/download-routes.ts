/**
 * The HTTP routes a harness fetches its session's downloads through, on the
 * daemon's port behind its token (docs/PROTOCOL.md "Downloads"):
 *
 *   GET /v1/sessions/<session_id>/downloads                 the session's downloads (id, name, size, sha256, state)
 *   GET /v1/sessions/<session_id>/downloads/<download_id>   one download's bytes, streamed
 *   GET /v1/sessions/<session_id>/downloads.zip             every kept download in one zip (stored), streamed
 *
 * A download is kept in the session's files (session-files.ts, kind
 * `download`) when Chromium completes it, under the `download_id` its
 * `download_completed` carried, copied from the daemon's saved file opened
 * without following a link and hashed as it is copied: what is served is the
 * daemon's private copy, never a file a sandboxed desktop can still change.
 * As for documents, a session that is not live answers 404 as a malformed id
 * does, and a download is looked up only in its own session.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { HttpRoute } from './server.ts';
import { DOWNLOAD_ID, type SessionFiles } from './session-files.ts';
import { sendJson, sessionNotFound, sessionPath, SESSIONS_PATH } from './session-routes.ts';
import { zipLength, zipStream, type ZipStreamEntry } from './zip-stream.ts';

export interface DownloadRouteDeps {
  /** The live session's files, or undefined when there is no live session by that id. */
  filesOf(sessionId: string): SessionFiles | undefined;
}

/**
 * `{ sessionId, downloadId?, zip? }` of `/v1/sessions/<id>/downloads[/<download_id>]` or
 * `/v1/sessions/<id>/downloads.zip`, or undefined for any other path.
 */
function parse(path: string): { sessionId: string; downloadId?: string; zip?: true } | undefined {
  const [sessionId, what, downloadId, ...more] = sessionPath(path) ?? [];
  if (!sessionId || more.length) return undefined;
  if (what === 'downloads.zip') return downloadId === undefined ? { sessionId, zip: true } : undefined;
  if (what !== 'downloads') return undefined;
  return downloadId === undefined ? { sessionId } : { sessionId, downloadId };
}

/** Each name once in an archive: a name seen already gets its download's id in front (`dl-2-report.pdf`). */
function archiveNames(names: readonly { id: string; name: string }[]): string[] {
  const seen = new Set<string>();
  return names.map(({ id, name }) => {
    const unique = seen.has(name) ? `${id}-${name}` : name;
    seen.add(unique);
    return unique;
  });
}

/** Every download the session kept, in one stored zip: its length known up front, each file read as it goes. */
async function sendZip(files: SessionFiles, sessionId: string, req: IncomingMessage, res: ServerResponse) {
  const kept = files.downloads().filter((d) => d.state === 'complete');
  const names = archiveNames(kept.map((d) => ({ id: d.download_id, name: d.name })));
  const entries: ZipStreamEntry[] = kept.map((d, i) => ({
    name: names[i]!,
    size: d.size,
    mtime: new Date(d.created_at),
    open: () => {
      const found = files.handOut(d.download_id, 'download');
      if (!found) throw new Error('the session ended');
      return found.body;
    },
  }));
  const length = zipLength(entries);
  if (length === undefined) {
    return sendJson(res, 413, {
      error: 'archive_too_large',
      message: 'the downloads are too many or too large for one zip',
    });
  }
  res.writeHead(200, {
    'content-type': 'application/zip',
    'content-length': String(length),
    'content-disposition': contentDisposition(`${sessionId}-downloads.zip`),
    'x-content-type-options': 'nosniff',
    'cache-control': 'no-store',
  });
  if (req.method === 'HEAD') return void res.end();
  await pipeline(Readable.from(zipStream(entries)), res).catch(() => res.destroy());
}

/** Whether a path is one of these routes' (the server asks before it hands a request to them). */
export function isDownloadPath(path: string): boolean {
  return parse(path) !== undefined;
}

/**
 * `attachment` with the name twice: an ASCII `filename` (anything else, and `"` `\` `%`, as `_`) for old
 * readers, and the exact UTF-8 name as `filename*` (RFC 5987 percent-encoding), which readers prefer.
 */
export function contentDisposition(name: string): string {
  const ascii = name.replace(/[^\x20-\x7e]|["\\%]/g, '_');
  const exact = encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `attachment; filename="${ascii}"; filename*=UTF-8''${exact}`;
}

export function downloadRoutes(deps: DownloadRouteDeps): HttpRoute[] {
  const get = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const target = parse((req.url ?? '').split('?')[0] ?? '');
    const files = target ? deps.filesOf(target.sessionId) : undefined;
    if (!target || !files) {
      return sessionNotFound(res);
    }
    if (target.zip) return sendZip(files, target.sessionId, req, res);
    if (target.downloadId === undefined) return sendJson(res, 200, { downloads: files.downloads() });
    const found = DOWNLOAD_ID.test(target.downloadId) ? files.handOut(target.downloadId, 'download') : undefined;
    if (!found) {
      const message = 'this session kept no download with this id (GET …/downloads lists them)';
      return sendJson(res, 404, { error: 'download_not_found', message });
    }
    const { info, body } = found;
    res.writeHead(200, {
      'content-type': info.media_type,
      'content-length': String(info.size),
      'content-disposition': contentDisposition(info.name),
      'x-content-sha256': info.sha256,
      'x-content-type-options': 'nosniff',
      'cache-control': 'no-store',
    });
    if (req.method === 'HEAD') {
      body.destroy();
      res.end();
      return;
    }
    // Streamed with backpressure: a slow harness holds one chunk at a time, never the file.
    await pipeline(body, res).catch(() => {
      // The harness went away, or the session ended mid-way (its file removed): the response is cut short.
      res.destroy();
    });
  };

  return [{ method: 'GET', path: SESSIONS_PATH, prefix: true, auth: 'token', accepts: isDownloadPath, handle: get }];
}
