/**
 * The HTTP routes a harness sets and reads its session's desktop clipboard
 * through, on the daemon's port behind its token (docs/PROTOCOL.md
 * "Clipboard"):
 *
 *   PUT /v1/sessions/<session_id>/clipboard                  the body, text/plain (UTF-8) or image/png; 204
 *   GET /v1/sessions/<session_id>/clipboard[?type=image/png] the CLIPBOARD selection; 204 when empty
 *
 * Only the session's own desktop: a pooled desktop is the session's alone,
 * and the shared desktop (one display for every session and its operator)
 * is refused, as reading its clipboard would hand one session what another,
 * or the operator, copied. The bytes reach xclip on its stdin
 * (src/desktop-driver/clipboard.ts), bounded by --max-clipboard-*-bytes.
 */
import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ClipboardActivity } from '../base/activity.ts';
import type { ClipboardSettings } from '../base/config.ts';
import { ClipboardUnavailable, type ClipboardType, type DesktopResources } from '../desktop-pool/desktop.ts';
import { readBody, refuseUpload, sendJson, sessionNotFound, sessionPath, SESSIONS_PATH } from './session-routes.ts';
import type { HttpRoute } from './server.ts';

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

export interface ClipboardRouteDeps {
  /** The live session's desktop (`desktop` undefined while it has none), or undefined when no session is live by that id. */
  sessionOf(sessionId: string): { desktop: DesktopResources | undefined } | undefined;
  settings: ClipboardSettings;
  /** The clipboard was set or read (the activity stream: metrics, recording); never the content. */
  used(sessionId: string, op: 'set' | 'read', info: ClipboardActivity): void;
}

const json = (res: ServerResponse, status: number, error: string, message: string): void =>
  sendJson(res, status, { error, message });

/** The session id of `/v1/sessions/<id>/clipboard`, or undefined for any other path. */
function parse(path: string): string | undefined {
  const [sessionId, what, ...more] = sessionPath(path) ?? [];
  return what === 'clipboard' && !more.length ? sessionId : undefined;
}

/** Whether a path is these routes' (the server asks before it hands a request to them). */
export function isClipboardPath(path: string): boolean {
  return parse(path) !== undefined;
}

/** `text` for text/plain (UTF-8 or no charset), `image/png`, or undefined for any other media type. */
function mediaType(header: string | undefined): ClipboardType | undefined {
  const [type, ...params] = (header ?? '').split(';').map((p) => p.trim().toLowerCase());
  if (type === 'image/png') return 'image/png';
  if (type !== 'text/plain') return undefined;
  const charset = params
    .find((p) => p.startsWith('charset='))
    ?.slice('charset='.length)
    .replace(/"/g, '');
  return charset === undefined || charset === 'utf-8' || charset === 'utf8' ? 'text' : undefined;
}

const isUtf8 = (data: Buffer): boolean => {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(data);
    return true;
  } catch {
    return false;
  }
};

const activity = (type: ClipboardType, data: Buffer): ClipboardActivity => ({
  media_type: type === 'text' ? 'text/plain; charset=utf-8' : 'image/png',
  size: data.length,
});

export function clipboardRoutes(deps: ClipboardRouteDeps): HttpRoute[] {
  const { settings } = deps;
  const bound = (type: ClipboardType): number => (type === 'text' ? settings.maxTextBytes : settings.maxImageBytes);

  /**
   * The session's desktop clipboard, or the answer that says why there is none: 404 (no live session),
   * 409 (no desktop yet, or the shared desktop's).
   */
  const clipboardOf = (req: IncomingMessage, res: ServerResponse, answer: (a: () => void) => void) => {
    const sessionId = parse((req.url ?? '').split('?')[0] ?? '');
    const session = sessionId ? deps.sessionOf(sessionId) : undefined;
    if (!sessionId || !session) {
      return void answer(() => sessionNotFound(res));
    }
    const desktop = session.desktop;
    if (!desktop) {
      return void answer(() =>
        json(res, 409, 'no_desktop', 'the session has no desktop yet (it is still queued for one)'),
      );
    }
    if (!desktop.clipboard) {
      const message =
        "the shared desktop's clipboard is its display's, every session's and the operator's: it is not offered";
      return void answer(() => json(res, 409, 'clipboard_not_offered', message));
    }
    return { sessionId, clipboard: desktop.clipboard };
  };

  const put = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const found = clipboardOf(req, res, (a) => refuseUpload(req, res, a));
    if (!found) return;
    const type = mediaType(req.headers['content-type']);
    if (!type) {
      const message = 'give Content-Type text/plain; charset=utf-8, or image/png';
      return refuseUpload(req, res, () => json(res, 415, 'unsupported_media_type', message));
    }
    const max = bound(type);
    const tooLarge = () =>
      json(
        res,
        413,
        'clipboard_too_large',
        `the clipboard takes at most ${max} bytes of ${type === 'text' ? 'text' : 'image'}`,
      );
    const declared = Number(req.headers['content-length'] ?? NaN);
    if (declared > max) return refuseUpload(req, res, tooLarge);
    // A client gone mid-body: nobody is left to answer.
    const data = await readBody(req, max).catch(() => undefined);
    if (data === undefined) return;
    if (data === 'too_large') return refuseUpload(req, res, tooLarge);
    if (!data.length) {
      return json(res, 400, 'empty_clipboard', 'the body is empty: give the text or image to put on the clipboard');
    }
    if (type === 'text' && !isUtf8(data)) return json(res, 400, 'bad_text', 'the text is not valid UTF-8');
    if (type === 'image/png' && !data.subarray(0, 8).equals(PNG_SIGNATURE)) {
      return json(res, 400, 'bad_image', 'the body is not a PNG image');
    }
    // The session may have ended while the body came: its desktop is not its any more.
    if (deps.sessionOf(found.sessionId)?.desktop?.clipboard !== found.clipboard) {
      return sessionNotFound(res);
    }
    try {
      await found.clipboard.set(data, type);
    } catch (err) {
      if (!(err instanceof ClipboardUnavailable)) throw err;
      return json(res, 503, 'desktop_unavailable', `the clipboard cannot be set: ${err.message}`);
    }
    deps.used(found.sessionId, 'set', activity(type, data));
    res.writeHead(204, { 'cache-control': 'no-store' }).end();
  };

  const get = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    // The server answers HEAD as GET: here that would read the clipboard (and count and record a read) for nothing.
    if (req.method === 'HEAD') {
      res.setHeader('allow', 'GET, PUT');
      return json(res, 405, 'method_not_allowed', 'HEAD would read the clipboard; use GET');
    }
    const found = clipboardOf(req, res, (a) => a());
    if (!found) return;
    const asked = new URL(req.url ?? '/', 'http://daemon').searchParams.get('type');
    const type = asked === null || asked === 'text/plain' ? 'text' : asked === 'image/png' ? 'image/png' : undefined;
    if (!type) return json(res, 400, 'bad_type', 'give ?type=text/plain (the default) or ?type=image/png');
    let read;
    try {
      read = await found.clipboard.read(type, bound(type));
    } catch (err) {
      if (!(err instanceof ClipboardUnavailable)) throw err;
      return json(res, 503, 'desktop_unavailable', `the clipboard cannot be read: ${err.message}`);
    }
    if (read.kind === 'too_large') {
      return json(res, 413, 'clipboard_too_large', `the clipboard holds more than ${bound(type)} bytes of it`);
    }
    if (read.kind === 'empty') return void res.writeHead(204, { 'cache-control': 'no-store' }).end();
    const info = activity(type, read.data);
    deps.used(found.sessionId, 'read', info);
    res
      .writeHead(200, {
        'content-type': info.media_type,
        'content-length': String(info.size),
        'x-content-sha256': createHash('sha256').update(read.data).digest('hex'),
        'x-content-type-options': 'nosniff',
        'cache-control': 'no-store',
      })
      .end(read.data);
  };

  return [
    { method: 'PUT', path: SESSIONS_PATH, prefix: true, auth: 'token', accepts: isClipboardPath, handle: put },
    { method: 'GET', path: SESSIONS_PATH, prefix: true, auth: 'token', accepts: isClipboardPath, handle: get },
  ];
}
