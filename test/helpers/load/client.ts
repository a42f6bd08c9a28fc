/**
 * The load's client: the one recording client (test/helpers/ws-client.ts), every message
 * validated, nothing thrown from a handler, with what the harness looks up indexed by batch.
 */
import type { BatchResult, ErrorMessage, ServerMessage, ToolEvent, Welcome } from '../../../src/protocol.ts';
import { RecordingClient } from '../ws-client.ts';

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
