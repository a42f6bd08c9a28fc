/**
 * The HTTP side of a session on its daemon (docs/PROTOCOL.md "Staged documents", "Downloads", "Clipboard"):
 * where its routes are, one request with the token, an answer read within a bound, and what a refusal says.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { DeskbatchError } from './errors.ts';

/** `/v1/sessions/<id>/<what>` on the daemon that `wsUrl` (`ws://host:port/v1`) names, over http(s). */
export function sessionUrl(wsUrl: string, sessionId: string, what: string): URL {
  const url = new URL(wsUrl);
  url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
  url.pathname = `/v1/sessions/${encodeURIComponent(sessionId)}/${what}`;
  url.search = '';
  return url;
}

/** One request with the token, `body` sent whole; resolves with the answer as it starts. */
export function send(
  url: URL,
  token: string,
  options: { method?: string; headers?: Record<string, string>; body?: Buffer; signal?: AbortSignal } = {},
): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const request = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, {
      method: options.method ?? 'GET',
      headers: { authorization: `Bearer ${token}`, ...options.headers },
      ...(options.signal ? { signal: options.signal } : {}),
    });
    request.on('response', resolve);
    request.on('error', reject);
    request.end(options.body);
  });
}

/** The whole answer, or a DeskbatchError once it passes `maxBytes` (the connection is then dropped). */
export async function readBounded(res: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) {
      res.destroy();
      throw new DeskbatchError('the daemon answered more than expected');
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, size);
}

export interface Refusal {
  /** The daemon's stable code (`session_not_found`, …), or `http_<status>` when the answer had none. */
  code: string;
  message: string;
  status: number;
}

/** What a refusal's JSON body (`{"error", "message"}`) says, or its status alone when it is not that. */
export function refusalFrom(status: number, body: unknown): Refusal {
  const b = (typeof body === 'object' && body !== null ? body : {}) as { error?: unknown; message?: unknown };
  return {
    code: typeof b.error === 'string' ? b.error : `http_${status}`,
    message: typeof b.message === 'string' ? b.message : `the daemon answered HTTP ${status}`,
    status,
  };
}

/** Reads a refusal's answer (a short JSON body; a 401's plain text says nothing more than its status). */
export async function refusalOf(res: IncomingMessage): Promise<Refusal> {
  let body: unknown;
  try {
    body = JSON.parse((await readBounded(res, 64 * 1024)).toString('utf8'));
  } catch {
    body = undefined;
  }
  return refusalFrom(res.statusCode ?? 0, body);
}
