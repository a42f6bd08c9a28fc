/**
 * The one WebSocket client of the tests, the load harness and the bench.
 *
 * `RecordingClient` opens a connection the way docs/PROTOCOL.md asks (bearer
 * token, or a subprotocol), parses every frame, counts frames and bytes, keeps
 * every message (unless told not to) with its arrival time, and resolves waits
 * that are checked again on every message: `next(match)` takes the first
 * matching message off the record, `until(check)` waits for any condition.
 * A closed connection rejects every wait at once.
 *
 * What it does with a frame that is not a valid server message is the caller's
 * choice (`onInvalid`):
 * - `throw`: the tests; the error escapes the socket's handler and fails the
 *   test;
 * - `record`: the load harness, which never throws from a handler but counts
 *   the frame in `invalid`;
 * - `skip-validation`: the bench, which only does what an agent must do with a
 *   reply (JSON.parse): checking each message against the zod schemas would add
 *   the client's own work to every round trip it times.
 *
 * The roles add only what is theirs: `TestClient` (testkit/daemon.ts)
 * hello and batch, `LoadClient` (testkit/load/client.ts) its indexes by
 * batch, `BenchClient` (bench/client.ts) the rate limit and timed requests.
 */
import { performance } from 'node:perf_hooks';
import WebSocket, { type RawData } from 'ws';
import { ServerMessageSchema, type ServerMessage } from '../src/base/protocol.ts';

export class HandshakeError extends Error {
  constructor(readonly status: number) {
    super(`handshake refused with HTTP ${status}`);
  }
}

export interface OpenOptions {
  /** The bearer token; null sends none. Not sent when `protocols` are given (they carry it). */
  token?: string | null;
  headers?: Record<string, string>;
  protocols?: string[];
  /** The ws default (on) unless set; the bench turns it off. */
  perMessageDeflate?: boolean;
}

export type OnInvalid = 'throw' | 'record' | 'skip-validation';

export interface ClientOptions {
  onInvalid: OnInvalid;
  /** Keep every message in `messages` (for `next`); off for clients that index what they need themselves. */
  keep: boolean;
}

interface Waiter {
  check: () => unknown;
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

export class RecordingClient {
  /** Messages not yet taken by `next`, in arrival order (only with `keep`). */
  readonly messages: ServerMessage[] = [];
  /** Frames that were not a valid server message (with `onInvalid: 'record'`). */
  readonly invalid: string[] = [];
  /** Frames and bytes received so far. */
  frames = 0;
  bytes = 0;
  /** Set once the connection has closed. */
  closedWith: { code: number; reason: string } | undefined;
  private waiters: Waiter[] = [];

  constructor(
    readonly ws: WebSocket,
    private readonly options: ClientOptions,
  ) {
    ws.on('message', (data, isBinary) => this.receive(data, isBinary));
    ws.on('close', (code, reason) => {
      this.closedWith = { code, reason: reason.toString() };
      for (const w of this.waiters.splice(0)) {
        clearTimeout(w.timer);
        w.reject(new Error(`connection closed (${code})`));
      }
    });
    // An error (a reset connection: a test may kill the daemon) is always followed by 'close', which ends the waits.
    ws.on('error', () => undefined);
  }

  /** Opens a socket to `url`: resolves once open, rejects with HandshakeError when the daemon refuses it. */
  static connect(url: string, token: string | null, options: OpenOptions = {}): Promise<WebSocket> {
    const headers: Record<string, string> = { ...options.headers };
    const bearer = options.token === undefined ? token : options.token;
    if (bearer !== null && !options.protocols) headers.authorization = `Bearer ${bearer}`;
    const ws = new WebSocket(url, options.protocols ?? [], {
      headers,
      ...(options.perMessageDeflate === undefined ? {} : { perMessageDeflate: options.perMessageDeflate }),
    });
    return new Promise((resolve, reject) => {
      ws.once('open', () => resolve(ws));
      ws.once('unexpected-response', (_req, res) => {
        reject(new HandshakeError(res.statusCode ?? 0));
        ws.terminate();
      });
      ws.once('error', reject);
    });
  }

  private receive(data: RawData, isBinary: boolean): void {
    const at = performance.now();
    const raw = toBuffer(data);
    this.frames++;
    this.bytes += raw.length;
    const text = raw.toString('utf8');
    let message: ServerMessage;
    if (this.options.onInvalid === 'skip-validation') {
      message = JSON.parse(text) as ServerMessage;
    } else if (this.options.onInvalid === 'throw') {
      if (isBinary) throw new Error('binary frame from the daemon');
      message = ServerMessageSchema.parse(JSON.parse(text));
    } else {
      try {
        if (isBinary) throw new Error('binary frame from the daemon');
        const parsed = ServerMessageSchema.safeParse(JSON.parse(text));
        if (!parsed.success) throw new Error(parsed.error.message);
        message = parsed.data;
      } catch (err) {
        this.invalid.push(`${String(err).slice(0, 300)}: ${text.slice(0, 300)}`);
        return;
      }
    }
    if (this.options.keep) this.messages.push(message);
    this.onMessage(message, at);
    this.waiters = this.waiters.filter((w) => {
      let v: unknown;
      try {
        v = w.check();
      } catch (err) {
        clearTimeout(w.timer);
        w.reject(err as Error);
        return false;
      }
      if (v === undefined) return true;
      clearTimeout(w.timer);
      w.resolve(v);
      return false;
    });
  }

  /** For the roles: sees each valid message (after it is recorded, before the waits are checked). */
  protected onMessage(_message: ServerMessage, _at: number): void {}

  /**
   * Resolves with the first value `check` returns other than undefined, checked now and on
   * every message; rejects when `check` throws, the connection closes, or `timeoutMs` passes.
   */
  until<T>(check: () => T | undefined, timeoutMs: number, what: string | (() => string)): Promise<T> {
    let now: T | undefined;
    try {
      now = check();
    } catch (err) {
      return Promise.reject(err as Error);
    }
    if (now !== undefined) return Promise.resolve(now);
    const describe = (): string => (typeof what === 'string' ? what : what());
    if (this.closedWith) {
      return Promise.reject(new Error(`connection closed (${this.closedWith.code}) waiting for ${describe()}`));
    }
    return new Promise<T>((resolve, reject) => {
      const waiter: Waiter = {
        check,
        resolve: resolve as (v: unknown) => void,
        reject,
        timer: setTimeout(() => {
          this.waiters = this.waiters.filter((w) => w !== waiter);
          reject(new Error(`timed out after ${timeoutMs} ms waiting for ${describe()}`));
        }, timeoutMs),
      };
      this.waiters.push(waiter);
    });
  }

  /** The first message (already received or future) that matches, taken off `messages`. */
  next<T extends ServerMessage>(match: (m: ServerMessage) => m is T, timeoutMs = 60_000): Promise<T> {
    return this.until(
      () => {
        const i = this.messages.findIndex(match);
        return i === -1 ? undefined : (this.messages.splice(i, 1)[0] as T);
      },
      timeoutMs,
      // The newest messages, in short: what did arrive says where it stopped.
      () => `a message; the latest: ${this.messages.slice(-12).map(brief).join(' | ')}`,
    );
  }

  send(message: unknown): void {
    this.ws.send(typeof message === 'string' ? message : JSON.stringify(message));
  }

  /** Resolves with the close code and reason, at once when already closed. */
  closed(): Promise<{ code: number; reason: string }> {
    if (this.closedWith) return Promise.resolve(this.closedWith);
    return new Promise((resolve) =>
      this.ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })),
    );
  }

  /** A close handshake (1000). */
  close(): void {
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.close(1000);
  }

  /** Drops the TCP connection without a close handshake. */
  terminate(): void {
    this.ws.terminate();
  }
}

function brief(m: ServerMessage): string {
  return [m.type, 'batch_id' in m ? m.batch_id : '', 'name' in m ? m.name : '', 'phase' in m ? m.phase : '']
    .filter(Boolean)
    .join(' ');
}

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  return Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
}
