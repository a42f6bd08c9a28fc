/**
 * A delaying TCP proxy on 127.0.0.1 (port 0): every chunk, in each direction,
 * is held for `oneWayMs` before it is written on, so a 10 ms delay each way
 * makes a 20 ms round-trip link, the way an agent reaches a desktop over a
 * network. Order is kept by construction: chunks wait in a FIFO queue per
 * direction and leave it in arrival order once their time has come. Nagle is
 * off on both legs, so the delay is the only one added.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';

export interface DelayProxy {
  port: number;
  /** The same ws URL with the daemon's port replaced by the proxy's. */
  via(url: string): string;
  close(): Promise<void>;
}

export async function startDelayProxy(targetPort: number, oneWayMs: number): Promise<DelayProxy> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    for (const s of [client, upstream]) {
      s.setNoDelay(true);
      sockets.add(s);
      s.once('close', () => sockets.delete(s));
      s.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    delayedPipe(client, upstream, oneWayMs);
    delayedPipe(upstream, client, oneWayMs);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    via: (url) => {
      const u = new URL(url);
      u.port = String(port);
      return u.toString();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

interface Pending {
  due: number;
  /** A chunk to forward, or undefined for the end of the stream. */
  chunk: Buffer | undefined;
}

/** Forwards `from` → `to`, each chunk (and the end) `delayMs` after it arrived, in arrival order. */
function delayedPipe(from: Socket, to: Socket, delayMs: number): void {
  const queue: Pending[] = [];
  let timer: NodeJS.Timeout | undefined;

  const flush = (): void => {
    timer = undefined;
    const now = performance.now();
    while (queue.length > 0 && queue[0]!.due <= now) {
      const { chunk } = queue.shift()!;
      if (chunk === undefined) to.end();
      else if (!to.destroyed) to.write(chunk);
    }
    arm();
  };
  const arm = (): void => {
    if (timer || queue.length === 0) return;
    timer = setTimeout(flush, Math.max(0, queue[0]!.due - performance.now()));
  };

  from.on('data', (chunk: Buffer) => {
    queue.push({ due: performance.now() + delayMs, chunk });
    arm();
  });
  from.on('end', () => {
    queue.push({ due: performance.now() + delayMs, chunk: undefined });
    arm();
  });
  from.on('close', () => {
    // A reset (no 'end'): drop what is queued, there is no one to read it in order.
    if (!from.readableEnded) {
      clearTimeout(timer);
      to.destroy();
    }
  });
}
