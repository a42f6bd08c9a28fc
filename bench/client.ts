/**
 * The bench's client: the one recording client (testkit/ws-client.ts)
 * without schema checks and without keeping messages. It does what an agent
 * must do with each reply (JSON.parse) and nothing more: the tests' check of
 * every message against the zod schemas is right for tests but would add the
 * client's own work to every round trip timed here.
 *
 * One request at a time: `send` a message, resolve on the first reply that
 * matches, counting every frame and byte received meanwhile (tool_event
 * frames included). It also mirrors the daemon's per-connection message rate
 * limit (a burst, then N per second; src/base/config.ts limits.messageBurst and
 * messagesPerSecond), so the bench never sends a message the daemon would
 * refuse with `rate_limited`.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULT_CONFIG } from '../src/base/config.ts';
import type { BatchResult, ServerMessage, ToolUse } from '../src/base/protocol.ts';
import { RecordingClient } from '../testkit/ws-client.ts';

export interface Reply<T extends ServerMessage = ServerMessage> {
  /** From just before the send to just after the matching reply was parsed. */
  ms: number;
  frames: number;
  bytes: number;
  message: T;
}

/** A little under the daemon's limits, so a timer's jitter never tips us over. */
const BURST = DEFAULT_CONFIG.limits.messageBurst - 10;
const PER_SECOND = DEFAULT_CONFIG.limits.messagesPerSecond * 0.9;
const REPLY_TIMEOUT_MS = 60_000;

/** An `error` message from the daemon in answer to a request. */
class DaemonError extends Error {}

export class BenchClient extends RecordingClient {
  private tokens = BURST;
  private tokensAt = performance.now();
  private failure: Error | undefined;
  private busy = false;
  /** The newest message, for the one request waiting. */
  private latest: ServerMessage | undefined;

  static async open(url: string, token: string): Promise<BenchClient> {
    const ws = await RecordingClient.connect(url, token, { perMessageDeflate: false });
    return new BenchClient(ws, { onInvalid: 'skip-validation', keep: false });
  }

  protected override onMessage(message: ServerMessage): void {
    this.latest = message;
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
  async request<T extends ServerMessage>(message: object, match: (m: ServerMessage) => m is T): Promise<Reply<T>> {
    if (this.failure) throw this.failure;
    if (this.busy) throw new Error('one request at a time');
    this.busy = true;
    this.refill();
    this.tokens -= 1;
    const frames0 = this.frames;
    const bytes0 = this.bytes;
    this.latest = undefined;
    const t0 = performance.now();
    let ms = 0;
    this.send(message);
    try {
      const reply = await this.until(
        () => {
          const m = this.latest;
          if (m?.type === 'error') throw new DaemonError(`daemon error ${m.code}: ${m.message}`);
          if (!m || !match(m)) return undefined;
          ms = performance.now() - t0;
          return m;
        },
        REPLY_TIMEOUT_MS,
        'a reply',
      );
      return { ms, frames: this.frames - frames0, bytes: this.bytes - bytes0, message: reply };
    } catch (err) {
      // A closed connection or a missing reply ends the client; a refused request does not.
      if (!(err instanceof DaemonError)) this.failure ??= err as Error;
      throw err;
    } finally {
      this.busy = false;
    }
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

  override close(): void {
    this.failure ??= new Error('closed by the bench');
    super.close();
  }
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
