/**
 * Setting and reading a session's desktop clipboard over the daemon's HTTP
 * routes (docs/PROTOCOL.md "Clipboard"): a text or a PNG image put on the
 * CLIPBOARD selection, so the model pastes it with ctrl+v, and what is there
 * read back. `DeskbatchClient.setClipboard` and `clipboard` call these with
 * the client's URL, token and session.
 */
import type { IncomingMessage } from 'node:http';
import { DeskbatchError } from './errors.ts';
import { readBounded, refusalOf, send, sessionUrl } from './session-http.ts';

/** What a clipboard is set to: a text (sent as UTF-8), or a PNG image's bytes. */
export type ClipboardContent = string | { png: Buffer | Uint8Array };

/**
 * The daemon refused a clipboard call (`code`: `session_not_found`, `clipboard_too_large`, `empty_clipboard`,
 * `no_desktop`, `clipboard_not_offered`, `desktop_unavailable`, … or `http_<status>`).
 */
export class ClipboardError extends DeskbatchError {
  override name = 'ClipboardError';
  constructor(
    override readonly code: string,
    message: string,
    readonly status?: number,
  ) {
    super(message);
  }
}

/** Where a session's clipboard is, on the daemon that `wsUrl` (`ws://host:port/v1`) names. */
export function clipboardUrl(wsUrl: string, sessionId: string): URL {
  return sessionUrl(wsUrl, sessionId, 'clipboard');
}

/** Largest answer read: the daemon's own bound on a clipboard read is at most 64 MiB (src/base/config.ts). */
const MAX_ANSWER_BYTES = 64 * 1024 ** 2;

async function refused(res: IncomingMessage): Promise<ClipboardError> {
  const { code, message, status } = await refusalOf(res);
  return new ClipboardError(code, message, status);
}

/** Puts a text or a PNG image on the session's desktop clipboard; resolves once it is there. */
export async function setClipboard(url: URL, token: string, content: ClipboardContent): Promise<void> {
  const [type, data] =
    typeof content === 'string'
      ? ['text/plain; charset=utf-8', Buffer.from(content, 'utf8')]
      : ['image/png', Buffer.from(content.png)];
  const headers = { 'content-type': type, 'content-length': String(data.length) };
  const res = await send(url, token, { method: 'PUT', headers, body: data });
  if (res.statusCode !== 204) throw await refused(res);
  res.resume();
}

/** The session's desktop clipboard as text, or (`type: 'image/png'`) a PNG's bytes; undefined when it is empty. */
export async function readClipboard(url: URL, token: string, type: 'text'): Promise<string | undefined>;
export async function readClipboard(url: URL, token: string, type: 'image/png'): Promise<Buffer | undefined>;
export async function readClipboard(
  url: URL,
  token: string,
  type: 'text' | 'image/png',
): Promise<string | Buffer | undefined> {
  const target = new URL(url);
  if (type === 'image/png') target.searchParams.set('type', 'image/png');
  const res = await send(target, token);
  if (res.statusCode === 204) {
    res.resume();
    return undefined;
  }
  if (res.statusCode !== 200) throw await refused(res);
  const data = await readBounded(res, MAX_ANSWER_BYTES);
  return type === 'text' ? data.toString('utf8') : data;
}
