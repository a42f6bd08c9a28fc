/**
 * A local HTTP test server (127.0.0.1, port 0) whose pages each test sets,
 * and a daemon with the browser toolset (headless by default) to drive them.
 * Requests the server received are recorded, so a test can check effects at
 * the server (a form submitted, a link followed).
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer } from 'ws';
import type { ToolUse } from '../src/base/protocol.ts';
import { startTestDaemon, type TestClient, type TestDaemon } from './daemon.ts';

export interface Route {
  status?: number;
  headers?: Record<string, string>;
  body: string | Buffer;
  /** The response waits for this (a test's signal), so a page's request ends when the test says. */
  until?: Promise<unknown>;
}

export interface ReceivedRequest {
  method: string;
  path: string;
  body: string;
  /** The body's bytes as received (a page's binary upload). */
  bytes: Buffer;
  /** Its headers (a page's cookies, as the browser sent them). */
  headers: IncomingHttpHeaders;
}

/** A route made for each request from what it carried (a page that echoes the request's Cookie header). */
export type RouteMaker = (request: ReceivedRequest) => Route | string;

export interface WebServer {
  /** http://127.0.0.1:PORT */
  origin: string;
  /** Sets (or replaces) what a path serves. */
  route(path: string, route: Route | string | RouteMaker): void;
  requests: ReceivedRequest[];
  close(): Promise<void>;
}

/** Listens on 127.0.0.1, on `port` (default 0: a free one). */
export async function startWebServer(port = 0): Promise<WebServer> {
  const routes = new Map<string, Route | RouteMaker>();
  const requests: ReceivedRequest[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const path = req.url ?? '/';
      const bytes = Buffer.concat(chunks);
      const received = { method: req.method ?? 'GET', path, body: bytes.toString(), bytes, headers: req.headers };
      requests.push(received);
      const found = routes.get(path) ?? routes.get(path.split('?')[0]!);
      const made = typeof found === 'function' ? found(received) : found;
      const route = typeof made === 'string' ? { body: made } : made;
      if (!route) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
        return;
      }
      const answer = (): void =>
        void res
          .writeHead(route.status ?? 200, { 'content-type': 'text/html; charset=utf-8', ...route.headers })
          .end(route.body);
      if (route.until) void route.until.then(answer, answer);
      else answer();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  const bound = (server.address() as AddressInfo).port;
  return {
    origin: `http://127.0.0.1:${bound}`,
    route: (path, route) => routes.set(path, typeof route === 'string' ? { body: route } : route),
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

export interface BrowserFixture {
  web: WebServer;
  daemon: TestDaemon;
  client: TestClient;
  close(): Promise<void>;
}

/** A web server plus a daemon serving the browser toolset (headless, no display needed). */
export async function startBrowserFixture(
  overrides: Parameters<typeof startTestDaemon>[0] = {},
): Promise<BrowserFixture> {
  const web = await startWebServer();
  const daemon = await startTestDaemon({ display: undefined, browser: 'headless', ...overrides });
  const client = await daemon.connect();
  return {
    web,
    daemon,
    client,
    async close() {
      await daemon.close();
      await web.close();
    },
  };
}

/**
 * A daemon whose headless browser is contained as by default (no private
 * address) except for `web`'s own host and port, as an operator serving one
 * local site would allow it.
 */
export function startContainedDaemon(web: WebServer, sandbox: 'auto' | 'off' = 'auto'): Promise<TestDaemon> {
  return startTestDaemon({
    display: undefined,
    browser: 'headless',
    browserSettings: { allowPrivateNetworks: false, privateAllow: [`127.0.0.1:${new URL(web.origin).port}`] },
    sandbox: { mode: sandbox, uids: { first: 2_000_000_000, count: 1000 } },
  });
}

let counter = 0;
/** A browser tool_use block as the API would send it. */
export function browserUse(name: string, input: Record<string, unknown> = {}, id?: string): ToolUse {
  return {
    type: 'tool_use',
    id: id ?? `toolu_b${(counter++).toString().padStart(4, '0')}`,
    name,
    toolset_name: 'browser',
    input,
  };
}

/** A server on a private address (loopback) that a contained browser must never reach. */
export interface Victim {
  origin: string;
  port: number;
  /** Every request and WebSocket that reached it. */
  hits: string[];
  close(): Promise<void>;
}

/** Starts a Victim on 127.0.0.1, port 0: it records what reaches it and answers with a secret-looking page. */
export async function startVictim(): Promise<Victim> {
  const hits: string[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    hits.push(`${req.method} ${req.url}`);
    res.writeHead(200, { 'content-type': 'text/html' }).end('<title>victim</title>victim-secret-7781');
  });
  const wss = new WebSocketServer({ server });
  wss.on('connection', (ws) => {
    hits.push('websocket');
    ws.close();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    port,
    hits,
    close: () =>
      new Promise<void>((resolve) => {
        wss.close();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
