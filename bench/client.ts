/**
 * A lean ws client for the bench: it does what an agent must do with each
 * reply (JSON.parse) and nothing more. The test client (test/helpers/daemon.ts)
 * validates every message against the zod schemas, which is right for tests
 * but would add the client's own work to every round trip timed here.
 *
 * One request at a time: `send` a message, resolve on the first reply that
 * matches, counting every frame and byte received meanwhile (tool_event
 * frames included). It also mirrors the daemon's per-connection message rate
 * limit (a burst, then N per second; src/config.ts limits.messageBurst and
 * messagesPerSecond), so the bench never sends a message the daemon would
 * refuse with `rate_limited`.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import WebSocket, { type RawData } from 'ws';
import { DEFAULT_CONFIG } from '../src/config.ts';
import type { BatchResult, ServerMessage, ToolUse } from '../src/protocol.ts';

export interface Reply<T extends ServerMessage = ServerMessage> {
  /** From just before the send to just after the matching reply was parsed. */
  ms: number;
  frames: number;
  bytes: number;
  message: T;
}

interface Waiter {
  match: (m: ServerMessage) => boolean;
  resolve: (m: ServerMessage) => void;
  reject: (e: Error) => void;
}

/** A little under the daemon's limits, so a timer's jitter never tips us over. */
const BURST = DEFAULT_CONFIG.limits.messageBurst - 10;
const PER_SECOND = DEFAULT_CONFIG.limits.messagesPerSecond * 0.9;

export class BenchClient {
  private waiter: Waiter | undefined;
  private frames = 0;
  private bytes = 0;
  private tokens = BURST;
  private tokensAt = performance.now();
  private failure: Error | undefined;

  private constructor(private readonly ws: WebSocket) {
    ws.on('message', (data: RawData) => this.onMessage(toBuffer(data)));
    ws.on('close', (code) => this.fail(new Error(`connection closed (${code})`)));
    ws.on('error', (err) => this.fail(err));
  }

  static open(url: string, token: string): Promise<BenchClient> {
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${token}` }, perMessageDeflate: false });
    return new Promise((resolve, reject) => {
      ws.once('open', () => resolve(new BenchClient(ws)));
      ws.once('unexpected-response', (_req, res) => reject(new Error(`handshake refused: HTTP ${res.statusCode}`)));
      ws.once('error', reject);
    });
  }

  private onMessage(data: Buffer): void {
    this.frames++;
    this.bytes += data.length;
    const message = JSON.parse(data.toString('utf8')) as ServerMessage;
    const w = this.waiter;
    if (message.type === 'error' && w) {
      this.waiter = undefined;
      w.reject(new Error(`daemon error ${message.code}: ${message.message}`));
      return;
    }
    if (w?.match(message)) {
      this.waiter = undefined;
      w.resolve(message);
    }
  }

  private fail(err: Error): void {
    this.failure ??= err;
    const w = this.waiter;
    this.waiter = undefined;
    w?.reject(err);
  }

  private refill(): void {
    const now = performance.now();
    this.tokens = Math.min(BURST, this.tokens + ((now - this.tokensAt) / 1000) * PER_SECOND);
    this.tokensAt = now;
  }

  /** Whether `n` messages can be sent now without waiting for the rate limit. */
  hasTokens(n: number): boolean {
    this.refill();
    return this.tokens >= n;
  }

  /** Waits (untimed) until `n` messages may be sent. */
  async paceFor(n: number): Promise<void> {
    while (!this.hasTokens(n)) await sleep(Math.ceil(((n - this.tokens) / PER_SECOND) * 1000) + 1);
  }

  /** Sends one message and waits for the first reply that `match`es. */
  request<T extends ServerMessage>(message: object, match: (m: ServerMessage) => m is T): Promise<Reply<T>> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.waiter) return Promise.reject(new Error('one request at a time'));
    this.refill();
    this.tokens -= 1;
    const frames0 = this.frames;
    const bytes0 = this.bytes;
    const t0 = performance.now();
    return new Promise<Reply<T>>((resolve, reject) => {
      const timer = setTimeout(() => this.fail(new Error('no reply within 60 s')), 60_000);
      this.waiter = {
        match,
        resolve: (m) => {
          clearTimeout(timer);
          const ms = performance.now() - t0;
          resolve({ ms, frames: this.frames - frames0, bytes: this.bytes - bytes0, message: m as T });
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      this.ws.send(JSON.stringify(message));
    });
  }

  /** `hello` with `events: false`: the daemon then answers a batch with its result frame only. */
  async quiet(): Promise<BenchClient> {
    await this.request({ type: 'hello', events: false }, (m): m is ServerMessage => m.type === 'welcome');
    return this;
  }

  ping(): Promise<Reply> {
    return this.request({ type: 'ping' }, (m): m is ServerMessage => m.type === 'pong');
  }

  /** Sends a batch and waits for its batch_result; a failed call is an error (the bench only sends valid calls). */
  async batch(batchId: string, toolUses: ToolUse[]): Promise<Reply<BatchResult>> {
    const reply = await this.request(
      { type: 'batch', batch_id: batchId, tool_uses: toolUses },
      (m): m is BatchResult => m.type === 'batch_result' && m.batch_id === batchId,
    );
    const failure = reply.message.failures[0];
    if (failure) throw new Error(`${failure.name} failed in the bench: ${JSON.stringify(failure.error)}`);
    return reply;
  }

  close(): void {
    this.failure ??= new Error('closed by the bench');
    this.ws.close();
  }
}

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  return Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
}

/** Binary bytes of every image in a batch result (base64 decoded). */
export function imageBytes(result: BatchResult): number {
  let n = 0;
  for (const r of result.tool_results) {
    for (const block of r.content) {
      if (block.type === 'image') n += Buffer.byteLength(block.source.data, 'base64');
    }
  }
  return n;
}

let seq = 0;
/** A unique id for batch ids and tool_use ids (the daemon refuses reused ones within a session). */
export const nextId = (prefix: string): string => `${prefix}_${(seq++).toString(36)}`;

/** A computer or browser tool_use block as the API would send it. */
export function toolUse(toolset: 'computer' | 'browser', name: string, input: Record<string, unknown> = {}): ToolUse {
  return { type: 'tool_use', id: nextId('toolu_bench'), name, toolset_name: toolset, input };
}
