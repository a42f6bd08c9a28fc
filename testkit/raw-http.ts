/**
 * HTTP requests whose path is sent exactly as written. fetch() resolves `..`
 * and `%2e` path segments before the request leaves (the URL standard), so a
 * test of how the daemon answers a path that climbs out of a folder never
 * reaches the daemon through it.
 */
import { request } from 'node:http';
import { within } from './wait.ts';

export interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/**
 * One request to 127.0.0.1:`port` with `path` untouched, on a connection of its own (the daemon closes one whose
 * refused request left a body unread, as after a 401): its status, headers and body as text.
 */
export function rawRequest(
  port: number,
  path: string,
  options: { method?: string; headers?: Record<string, string>; body?: string | Buffer } = {},
): Promise<RawResponse> {
  const method = options.method ?? 'GET';
  return within(
    new Promise((resolve, reject) => {
      const req = request({ agent: false, host: '127.0.0.1', port, path, method, headers: options.headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }),
        );
      });
      req.on('error', reject);
      req.end(options.body);
    }),
    `an answer to ${method} ${path}`,
  );
}

/** GET (or HEAD) `path` on 127.0.0.1:`port`, the path untouched. */
export function rawGet(
  port: number,
  path: string,
  options: { method?: 'GET' | 'HEAD'; headers?: Record<string, string> } = {},
): Promise<RawResponse> {
  return rawRequest(port, path, options);
}
