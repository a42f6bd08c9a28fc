/**
 * The load's client: the one recording client (testkit/ws-client.ts), every message
 * validated, nothing thrown from a handler, with what the harness looks up indexed by batch.
 */
import { setTimeout as delay } from 'node:timers/promises';
import type { BatchResult, ErrorMessage, ServerMessage, ToolEvent, Welcome } from '../../src/base/protocol.ts';
import { HandshakeError, RecordingClient } from '../ws-client.ts';

/** How often, and how long apart, a session is tried again while the daemon is at capacity. */
const CAPACITY_ATTEMPTS = 120;
const CAPACITY_RETRY_MS = 1_000;

export class LoadClient extends RecordingClient {
  /** batch_result messages by batch_id, in arrival order, with their arrival time. */
  readonly results = new Map<string, { result: BatchResult; at: number }[]>();
  /** tool_event messages by batch_id, with whether their batch_result had already arrived. */
  readonly events = new Map<string, { event: ToolEvent; at: number; late: boolean }[]>();
  /** Arrival time of the first `started` event of each batch (the lane was taken, for lane batches). */
  readonly firstStarted = new Map<string, number>();
  readonly errors: ErrorMessage[] = [];
  readonly welcomes: Welcome[] = [];
  pongs = 0;

  static async open(url: string, token: string): Promise<LoadClient> {
    const ws = await RecordingClient.connect(url, token);
    return new LoadClient(ws, { onInvalid: 'record', keep: false });
  }

  /**
   * A connection and a session, tried again while the daemon is at capacity (a 503 or 429 handshake,
   * or `too_many_sessions`: sessions that just ended may still hold their places for a resume), up to
   * CAPACITY_ATTEMPTS times; `onRefused` counts each refusal. Anything else is returned as a problem.
   */
  static async openWhenFree(
    url: string,
    token: string,
    options: { signal?: AbortSignal; onRefused?: () => void } = {},
  ): Promise<{ client: LoadClient; welcome: Welcome } | { problem: string } | undefined> {
    for (let attempt = 1; ; attempt++) {
      if (options.signal?.aborted) return undefined;
      const last = attempt >= CAPACITY_ATTEMPTS;
      let client: LoadClient;
      try {
        client = await LoadClient.open(url, token);
      } catch (err) {
        if (err instanceof HandshakeError && (err.status === 503 || err.status === 429) && !last) {
          options.onRefused?.();
          await delay(CAPACITY_RETRY_MS);
          continue;
        }
        return { problem: `could not connect: ${String(err)}` };
      }
      let answer: Welcome | ErrorMessage;
      try {
        answer = await client.hello();
      } catch (err) {
        client.terminate();
        return { problem: `no welcome: ${String(err)}` };
      }
      if (answer.type === 'welcome') return { client, welcome: answer };
      client.close();
      if (answer.code === 'too_many_sessions' && !last) {
        options.onRefused?.();
        await delay(CAPACITY_RETRY_MS);
        continue;
      }
      return { problem: `hello refused: ${answer.code} ${answer.message}` };
    }
  }

  protected override onMessage(msg: ServerMessage, at: number): void {
    switch (msg.type) {
      case 'batch_result': {
        const list = this.results.get(msg.batch_id) ?? [];
        list.push({ result: msg, at });
        this.results.set(msg.batch_id, list);
        break;
      }
      case 'tool_event': {
        const list = this.events.get(msg.batch_id) ?? [];
        list.push({ event: msg, at, late: this.results.has(msg.batch_id) });
        this.events.set(msg.batch_id, list);
        if (msg.phase === 'started' && !this.firstStarted.has(msg.batch_id)) this.firstStarted.set(msg.batch_id, at);
        break;
      }
      case 'error':
        this.errors.push(msg);
        break;
      case 'welcome':
        this.welcomes.push(msg);
        break;
      case 'pong':
        this.pongs++;
        break;
    }
  }

  /** The next `error` message. */
  nextError(timeoutMs: number): Promise<ErrorMessage> {
    return this.until(() => this.errors.shift(), timeoutMs, 'an error message');
  }

  /** hello → welcome, or the error that refused it (too_many_sessions, session_not_found, …). */
  async hello(resume?: string, timeoutMs = 60_000): Promise<Welcome | ErrorMessage> {
    this.send({ type: 'hello', client: 'deskbatch-load/1', ...(resume ? { resume_session_id: resume } : {}) });
    return this.until<Welcome | ErrorMessage>(() => this.welcomes.shift() ?? this.errors.shift(), timeoutMs, 'welcome');
  }

  /** Sends a ping and waits for its pong: every message the daemon sent before it has arrived. */
  async flush(timeoutMs = 30_000): Promise<void> {
    const want = this.pongs + 1;
    this.send({ type: 'ping' });
    await this.until(() => (this.pongs >= want ? true : undefined), timeoutMs, 'pong');
  }
}
