/**
 * What the HTTP routes under `/v1/sessions/<session_id>/…` share (docs/PROTOCOL.md "Staged documents",
 * "Downloads", "Clipboard"): the path and the session id's form, the JSON answer, the one `404` for a
 * session that is not live, a body read whole within a bound, and the answer to a refused upload, which drops
 * the rest of its body. The profiles' routes (src/profiles/routes.ts) answer and read bodies the same way.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

export const SESSIONS_PATH = '/v1/sessions';

/** A session id as newSessionId makes them (session.ts); anything else is not looked up. */
const SESSION_ID = /^s_[A-Za-z0-9_-]{1,64}$/;

/**
 * A refused upload's body is read and dropped up to this much, so a client still sending reads the answer on a
 * live connection (a closed one would cut its write first, and many clients then report the reset, not the
 * answer); past it the connection is closed.
 */
const DRAIN_MAX_BYTES = 64 * 1024 ** 2;

/**
 * `[sessionId, ...rest]` of `/v1/sessions/<session_id>/<rest>` (the query left out) when the id has the form of
 * one, else undefined.
 */
export function sessionPath(path: string): [string, ...string[]] | undefined {
  const pathname = path.split('?')[0]!;
  if (!pathname.startsWith(`${SESSIONS_PATH}/`)) return undefined;
  const [sessionId, ...rest] = pathname.slice(SESSIONS_PATH.length + 1).split('/');
  return sessionId && SESSION_ID.test(sessionId) ? [sessionId, ...rest] : undefined;
}

/** Answers `status` with `body` as JSON, never cached. */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(JSON.stringify(body));
}

/** The one answer for a session id that names no live session, whatever the reason. */
export function sessionNotFound(res: ServerResponse): void {
  sendJson(res, 404, { error: 'session_not_found', message: 'no live session with this id' });
}

/** Answers a refused upload (`answer`), and drops the rest of its body as it comes, up to DRAIN_MAX_BYTES. */
export function refuseUpload(req: IncomingMessage, res: ServerResponse, answer: () => void): void {
  let drained = 0;
  req.on('data', (chunk: Buffer) => {
    drained += chunk.length;
    if (drained > DRAIN_MAX_BYTES) req.socket.destroy();
  });
  req.resume();
  answer();
}

/** The body, whole, or 'too_large' as soon as it passes `max` bytes. */
export function readBody(req: IncomingMessage, max: number): Promise<Buffer | 'too_large'> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let length = 0;
    const onData = (chunk: Buffer): void => {
      length += chunk.length;
      if (length > max) {
        req.off('data', onData);
        req.off('end', onEnd);
        resolve('too_large');
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = (): void => resolve(Buffer.concat(chunks, length));
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', reject);
    req.once('close', () => {
      if (!req.complete) reject(new Error('the request was aborted'));
    });
  });
}
