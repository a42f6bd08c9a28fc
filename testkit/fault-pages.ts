/**
 * A local web server for the fault tests (test/faults-*.test.ts): plain
 * pages, a counter whose clicks the server sees (`/hit`), and a page that
 * never answers (`/slow`), so a navigation is still running when the browser
 * is killed under it. Requests are recorded in order.
 */
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Pages {
  origin: string;
  /** Paths requested so far, in order. */
  requested: string[];
  count(path: string): number;
  close(): Promise<void>;
}

const COUNTER_PAGE = `<!doctype html><title>Counter</title>
<style>body { margin: 0 } #b { position: fixed; left: 0; top: 0; width: 400px; height: 300px; font-size: 30px }</style>
<button id="b">add one</button><p id="n">count: 0</p>
<script>
let n = 0;
document.getElementById('b').addEventListener('click', () => {
  n++;
  document.getElementById('n').textContent = 'count: ' + n;
  fetch('/hit?n=' + n);
});
</script>`;

export async function startPages(): Promise<Pages> {
  const requested: string[] = [];
  const hanging = new Set<ServerResponse>();
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    requested.push(path);
    const html = (body: string): void => {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(body);
    };
    if (path === '/a') html('<title>Page A</title><p>alpha page</p>');
    else if (path === '/counter') html(COUNTER_PAGE);
    else if (path === '/hit' || path === '/favicon.ico') res.writeHead(204).end();
    else if (path === '/slow')
      hanging.add(res); // answered never: the navigation is still running when the browser dies
    else res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    requested,
    count: (path) => requested.filter((p) => p === path).length,
    close: () =>
      new Promise<void>((resolve) => {
        for (const res of hanging) res.destroy();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
