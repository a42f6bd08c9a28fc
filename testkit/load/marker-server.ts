/**
 * The load's web server (testkit/load.ts): its pages carry the session's marker, the
 * Cookie header the browser sent and the localStorage value an earlier page left, so a
 * page of another session's browser context shows at once.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface MarkerServer {
  /** http://127.0.0.1:PORT */
  origin: string;
  /** Pages served so far. */
  served(): number;
  close(): Promise<void>;
}

const TAG = /^[A-Za-z0-9_-]{1,40}$/;
const escapeHtml = (s: string): string =>
  s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`).replace(/[\p{Cc}]/gu, ' ');

/**
 * `/s/<tag>/<n>`: a page titled `load <tag> <n>` that reads `marker <tag> round <n>`,
 * shows the Cookie header the browser sent (`request-cookie=[…]`) and the
 * localStorage value an earlier page of the same origin left (`prev-storage=[…]`),
 * then sets the cookie `who=<tag>` and localStorage `who` = `<tag>:<n>`.
 * Within one browser context, the next page of the session sees its own values;
 * a context shared with another session would show that session's tag.
 */
export async function startMarkerServer(): Promise<MarkerServer> {
  let served = 0;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0]!;
    const m = /^\/s\/([^/]+)\/(\d{1,9})$/.exec(path);
    if (!m || !TAG.test(m[1]!)) {
      res.writeHead(path === '/favicon.ico' ? 204 : 404, { 'content-type': 'text/plain' }).end();
      return;
    }
    served++;
    const [, tag, n] = m;
    const cookie = escapeHtml(req.headers.cookie ?? '');
    res
      .writeHead(200, {
        'content-type': 'text/html; charset=utf-8',
        'cache-control': 'no-store',
        'set-cookie': `who=${tag}; Path=/`,
      })
      .end(
        `<!doctype html><title>load ${tag} ${n}</title>
<p>marker ${tag} round ${n}</p>
<p>request-cookie=[${cookie}]</p>
<p id="s">prev-storage=[?]</p>
<script>
const prev = localStorage.getItem('who');
localStorage.setItem('who', '${tag}:${n}');
document.getElementById('s').textContent = 'prev-storage=[' + (prev === null ? '' : prev) + ']';
</script>`,
      );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    served: () => served,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
