/**
 * Two WebSockets joined for the harness's CDP door (docs/PROTOCOL.md "CDP for
 * the harness"): the harness's, accepted by the server, and the daemon's
 * client to the session's Chromium (src/browser/cdp-door.ts). Every frame
 * passes as it came, its bytes and its kind (text or binary): nothing is
 * parsed, rewritten or dropped, as Playwright's client expects the browser's
 * own messages and target ids.
 *
 * What waits is bounded: frames the harness sends before the browser's side
 * opens are queued up to `maxBufferedBytes`; past the same bound of unread
 * bytes on either side (`bufferedAmount`: the harness reads too slowly) both
 * sides are closed with 4008. Either side closing closes the other. A harness
 * that misses a ping by the next one is dropped (a vanished peer would hold the
 * browser's side open for ever).
 */
import type { WebSocket, RawData } from 'ws';
import { CLOSE_SEND_BUFFER_FULL } from '../base/protocol.ts';
import type { CdpDetachActivity } from '../base/activity.ts';

export interface RelayBounds {
  /** Bytes that may wait on either side (queued before the browser's side opened, or unread); then 4008. */
  maxBufferedBytes: number;
  /** Largest frame either side may send (the sockets' maxPayload): named in the 1009 close reason. */
  maxFrameBytes: number;
  /** How often the harness is pinged; one that has not answered the previous ping is dropped. */
  heartbeatMs: number;
}

/** A close code a WebSocket endpoint may send (RFC 6455 7.4; ws refuses the others). */
function sendable(code: number): boolean {
  return (code >= 1000 && code <= 1014 && ![1004, 1005, 1006].includes(code)) || (code >= 3000 && code <= 4999);
}

/** A close reason cut to the 123 bytes a close frame holds, on a character boundary. */
function closeReason(text: string): string {
  let out = text.replace(/\s+/g, ' ');
  while (Buffer.byteLength(out) > 123) out = out.slice(0, -1);
  return out;
}

/** How long a harness closed by the daemon may take to read what waits and the close frame, before it is cut. */
const CLOSE_WAIT_MS = 10_000;

const bytesOf = (data: RawData): number =>
  Array.isArray(data)
    ? data.reduce((n, b) => n + b.length, 0)
    : data instanceof ArrayBuffer
      ? data.byteLength
      : data.length;

/** What a relay tells its owner. */
export interface RelayEvents {
  /** The browser's side opened: frames flow (those the harness sent meanwhile first). */
  opened(): void;
  /** Called once, when the first side closes (or a bound, or `close`, ends it): who ended it, and the counts. */
  ended(end: CdpDetachActivity): void;
}

/** Relays frames between `harness` and the browser's side once `browser` resolves. */
export class CdpRelay {
  private browser: WebSocket | undefined;
  private queue: { data: RawData; isBinary: boolean }[] = [];
  private queued = 0;
  private ended = false;
  private alive = true;
  private readonly heartbeat: NodeJS.Timeout;
  private readonly started = performance.now();
  private readonly counts = { messages_in: 0, bytes_in: 0, messages_out: 0, bytes_out: 0 };

  constructor(
    private readonly harness: WebSocket,
    browser: Promise<WebSocket>,
    private readonly bounds: RelayBounds,
    private readonly events: RelayEvents,
  ) {
    harness.binaryType = 'nodebuffer';
    harness.on('message', (data, isBinary) => this.fromHarness(data, isBinary));
    harness.on('pong', () => (this.alive = true));
    harness.on('error', (err: Error & { code?: string }) => {
      if (err.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') {
        this.end('daemon', 1009, `a message from the harness passed ${bounds.maxFrameBytes} bytes`);
      }
    });
    harness.on('close', (code, reason) => this.end('harness', code, reason.toString()));
    this.heartbeat = setInterval(() => {
      if (!this.alive) return this.end('daemon', 1001, 'the harness missed its pong', true);
      this.alive = false;
      harness.ping();
    }, bounds.heartbeatMs);
    this.heartbeat.unref();
    browser.then(
      (ws) => this.opened(ws),
      (err: unknown) =>
        this.end('daemon', 1011, `cannot reach the session's browser: ${err instanceof Error ? err.message : err}`),
    );
  }

  /** Ends the relay from the daemon's side (the session ended, the daemon stops): both sides are closed. */
  close(code: number, reason: string): void {
    this.end('daemon', code, reason);
  }

  private opened(ws: WebSocket): void {
    if (this.ended) return void ws.close(1000);
    this.browser = ws;
    this.events.opened();
    ws.binaryType = 'nodebuffer';
    ws.on('message', (data, isBinary) => this.fromBrowser(data, isBinary));
    ws.on('error', (err: Error & { code?: string }) => {
      if (err.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') {
        this.end('daemon', 1009, `a message from the browser passed ${this.bounds.maxFrameBytes} bytes`);
      }
    });
    ws.on('close', (code, reason) => this.end('browser', code, reason.toString()));
    const queue = this.queue;
    this.queue = [];
    this.queued = 0;
    for (const { data, isBinary } of queue) this.toBrowser(data, isBinary);
  }

  private fromHarness(data: RawData, isBinary: boolean): void {
    if (this.ended) return;
    this.counts.messages_in++;
    this.counts.bytes_in += bytesOf(data);
    if (this.browser) return this.toBrowser(data, isBinary);
    this.queue.push({ data, isBinary });
    this.queued += bytesOf(data);
    if (this.queued > this.bounds.maxBufferedBytes) {
      this.end(
        'daemon',
        CLOSE_SEND_BUFFER_FULL,
        `more than ${this.bounds.maxBufferedBytes} bytes came before the browser's side opened`,
      );
    }
  }

  private toBrowser(data: RawData, isBinary: boolean): void {
    const browser = this.browser!;
    browser.send(data, { binary: isBinary });
    if (browser.bufferedAmount > this.bounds.maxBufferedBytes) {
      this.end('daemon', CLOSE_SEND_BUFFER_FULL, `the browser read too slowly: ${browser.bufferedAmount} bytes waited`);
    }
  }

  private fromBrowser(data: RawData, isBinary: boolean): void {
    if (this.ended) return;
    this.counts.messages_out++;
    this.counts.bytes_out += bytesOf(data);
    this.harness.send(data, { binary: isBinary });
    if (this.harness.bufferedAmount > this.bounds.maxBufferedBytes) {
      this.end(
        'daemon',
        CLOSE_SEND_BUFFER_FULL,
        `the harness read too slowly: more than ${this.bounds.maxBufferedBytes} bytes waited`,
      );
    }
  }

  /**
   * The first end wins: both sides are closed (the other side with the code and reason of the first, where
   * a close frame may carry them), and `ended` is told. `drop`: the harness is cut at once (it stopped
   * answering pings).
   */
  private end(by: CdpDetachActivity['by'], code: number, reason: string, drop = false): void {
    if (this.ended) return;
    this.ended = true;
    clearInterval(this.heartbeat);
    this.queue = [];
    const said =
      reason ||
      (by === 'browser'
        ? "the session's browser closed its DevTools connection"
        : by === 'harness'
          ? 'the harness closed'
          : '');
    const toHarness = by === 'browser' && !sendable(code) ? 1001 : sendable(code) ? code : 1011;
    if (by !== 'harness') {
      if (drop) this.harness.terminate();
      else {
        this.harness.close(toHarness, closeReason(said));
        // Its close frame waits behind what the harness has not read: cut it after a while (ws's own is 30 s).
        setTimeout(() => this.harness.terminate(), CLOSE_WAIT_MS).unref();
      }
    }
    if (by !== 'browser' && this.browser) this.browser.close(1000);
    this.events.ended({
      by,
      code: by === 'harness' ? code : toHarness,
      reason: closeReason(said),
      duration_ms: Math.round(performance.now() - this.started),
      ...this.counts,
    });
  }
}
