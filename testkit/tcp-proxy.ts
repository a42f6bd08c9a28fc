/**
 * A small TCP proxy in front of a daemon that a test can cut, so a client sees
 * what a real network failure looks like (test/client.test.ts), and that gives
 * a daemon an address of its own (test/fleet.test.ts: each pod's DNS records
 * name its proxy). It listens on 127.0.0.1, on a port of its own.
 */
import { createServer, connect as tcpConnect, type AddressInfo, type Socket } from 'node:net';

export interface Proxy {
  url: string;
  port: number;
  /** Connections accepted so far. */
  accepted(): number;
  /** Destroys every proxied connection, both sides (a network failure). */
  cut(): void;
  /** New connections wait, unanswered, until `release()`. */
  hold(): void;
  release(): void;
  /** Later connections go to this daemon port. */
  retarget(port: number): void;
  /** Cuts every connection and refuses new ones. */
  close(): Promise<void>;
}

export async function startProxy(daemonUrl: string): Promise<Proxy> {
  let port = Number(new URL(daemonUrl).port);
  let accepted = 0;
  let held: Socket[] | undefined;
  const live = new Set<Socket>();
  const pipe = (client: Socket): void => {
    const upstream = tcpConnect(port, '127.0.0.1');
    for (const s of [client, upstream]) {
      live.add(s);
      s.on('error', () => undefined);
      s.on('close', () => {
        live.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream).pipe(client);
  };
  const server = createServer((socket) => {
    accepted++;
    if (!held) return pipe(socket);
    socket.on('error', () => undefined);
    held.push(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const cut = (): void => {
    for (const s of live) s.destroy();
  };
  const own = (server.address() as AddressInfo).port;
  return {
    url: `ws://127.0.0.1:${own}/v1`,
    port: own,
    accepted: () => accepted,
    cut,
    hold: () => void (held ??= []),
    release: () => {
      const queue = held ?? [];
      held = undefined;
      for (const s of queue) if (!s.destroyed) pipe(s);
    },
    retarget: (p) => void (port = p),
    close: async () => {
      for (const s of held ?? []) s.destroy();
      held = undefined;
      cut();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
