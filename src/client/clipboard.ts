/**
 * Setting and reading a session's desktop clipboard over the daemon's HTTP
 * routes (docs/PROTOCOL.md "Clipboard"): a text or a PNG image put on the
 * CLIPBOARD selection, so the model pastes it with ctrl+v, and what is there
 * read back. `DeskbatchClient.setClipboard` and `clipboard` call these with
 * the client's URL, token and session.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { DeskbatchError } from './errors.ts';

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
  const url = new URL(wsUrl);
  url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
  url.pathname = `/v1/sessions/${encodeURIComponent(sessionId)}/clipboard`;
  url.search = '';
  return url;
}

/** Largest answer read: the daemon's own bound on a clipboard read is at most 64 MiB (src/base/config.ts). */
const MAX_ANSWER_BYTES = 64 * 1024 ** 2;

function send(
  url: URL,
  token: string,
  method: 'GET' | 'PUT',
  body?: { type: string; data: Buffer },
): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const request = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body ? { 'content-type': body.type, 'content-length': String(body.data.length) } : {}),
      },
    });
    request.on('response', resolve);
    request.on('error', reject);
    request.end(body?.data);
  });
}

async function readAll(res: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_ANSWER_BYTES) {
      res.destroy();
      throw new DeskbatchError('the daemon answered more than expected');
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, size);
}

async function refused(res: IncomingMessage): Promise<ClipboardError> {
  let body: { error?: unknown; message?: unknown } = {};
  try {
    body = JSON.parse((await readAll(res)).toString('utf8')) as typeof body;
  } catch {
    // Not JSON (401's plain text): the status says it.
  }
  const status = res.statusCode ?? 0;
  const code = typeof body.error === 'string' ? body.error : `http_${status}`;
  const message = typeof body.message === 'string' ? body.message : `the daemon answered HTTP ${status}`;
  return new ClipboardError(code, message, status);
}

/** Puts a text or a PNG image on the session's desktop clipboard; resolves once it is there. */
export async function setClipboard(url: URL, token: string, content: ClipboardContent): Promise<void> {
  const body =
    typeof content === 'string'
      ? { type: 'text/plain; charset=utf-8', data: Buffer.from(content, 'utf8') }
      : { type: 'image/png', data: Buffer.from(content.png) };
  const res = await send(url, token, 'PUT', body);
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
  const res = await send(target, token, 'GET');
  if (res.statusCode === 204) {
    res.resume();
    return undefined;
  }
  if (res.statusCode !== 200) throw await refused(res);
  const data = await readAll(res);
  return type === 'text' ? data.toString('utf8') : data;
}
