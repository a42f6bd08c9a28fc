/**
 * The browser's side of the harness's CDP door (docs/PROTOCOL.md "CDP for the
 * harness"): a WebSocket client to Chromium's own DevTools endpoint, which
 * listens on DEVTOOLS_PORT inside the desktop's sandbox only.
 *
 * A pool desktop's Chromium is launched (manager.ts) with
 * `--remote-debugging-port=9222` next to Playwright's
 * `--remote-debugging-pipe`; both work at once. The port is in the sandbox's
 * own network namespace (src/desktop-pool/sandbox.ts: loopback only), so it is
 * always free there (the egress listener takes an ephemeral port, at least
 * 32768) and nothing outside the sandbox reaches it. The daemon reaches it
 * through a socket a process inside connects and hands over
 * (`DesktopSandbox.connectInside`), and speaks WebSocket over that socket: the
 * server relays frames between this client and the harness unchanged
 * (src/server/cdp-relay.ts).
 */
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { WebSocket } from 'ws';

/** The port Chromium's DevTools listen on inside a pool desktop's sandbox (see above: always free there). */
export const DEVTOOLS_PORT = 9222;

/** What the door needs of the desktop's sandbox: a connection to a port on its own loopback. */
export interface DevtoolsSandbox {
  connectInside(port: number): Promise<{ socket: Socket; path: string }>;
}

export interface DevtoolsOptions {
  /** Largest frame Chromium may send, in bytes; a larger one closes the client with 1009. */
  maxPayload: number;
  /** How long the WebSocket handshake over the handed socket may take, in ms. */
  handshakeMs: number;
}

/**
 * A WebSocket client connected to the browser's DevTools endpoint in
 * `sandbox` on `port`, once open. Never compressed (frames pass through the
 * relay as they are), never an Origin (Chromium refuses DevTools clients that
 * send one unless allowed by a switch). Rejects with an Error saying why.
 */
export async function openDevtools(
  sandbox: DevtoolsSandbox,
  port: number,
  options: DevtoolsOptions,
): Promise<WebSocket> {
  const { socket, path } = await sandbox.connectInside(port);
  // Host: 127.0.0.1:<port>, as Chromium wants (it refuses a DevTools request naming another host).
  const ws = new WebSocket(`ws://127.0.0.1:${port}${path}`, {
    createConnection: () => socket,
    perMessageDeflate: false,
    maxPayload: options.maxPayload,
    handshakeTimeout: options.handshakeMs,
  });
  // An error is always followed by 'close', which the relay hears; unheard, it would end the daemon.
  ws.on('error', () => undefined);
  const listeners: (() => void)[] = [];
  try {
    await new Promise<void>((resolve, reject) => {
      const on = <A extends unknown[]>(event: string, fn: (...args: A) => void): void => {
        ws.on(event, fn as (...args: unknown[]) => void);
        listeners.push(() => ws.off(event, fn as (...args: unknown[]) => void));
      };
      on('open', () => resolve());
      on('error', (err: Error) => reject(new Error(`the browser's DevTools WebSocket did not open: ${err.message}`)));
      on('unexpected-response', (_req: unknown, res: IncomingMessage) => {
        res.resume();
        reject(new Error(`the browser's DevTools endpoint answered HTTP ${res.statusCode} to ${path}`));
      });
      on('close', () => reject(new Error("the browser's DevTools WebSocket closed before it opened")));
    });
  } catch (err) {
    ws.terminate();
    socket.destroy();
    throw err;
  } finally {
    for (const off of listeners) off();
  }
  return ws;
}
