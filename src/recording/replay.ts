/**
 * `deskbatch replay`: sends a recorded session's batches to another daemon
 * and compares what it answers with what was recorded (docs/RECORDING.md,
 * "Replay").
 *
 * The trajectory (`deskbatch.trajectory`, version 1) is read line by line:
 * its `tools` line goes into the `hello` of one session opened with the
 * project's own client (src/client/), each `batch_started` is sent as a batch
 * under its recorded id and waited for, and each `batch_finished` is compared
 * with the answer to that batch. Unknown line types and fields are ignored,
 * as the format asks of readers.
 *
 * The comparison of each answer with its recorded result, and the element
 * references it matches between the two daemons (which later calls' inputs
 * are sent with), is src/recording/replay-compare.ts.
 */
import { createReadStream } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { BatchRefusedError, DeskbatchClient } from '../client/index.ts';
import type { ToolUseBlockLike } from '../client/index.ts';
import type { AgentToolEntry, Welcome } from '../base/protocol.ts';
import type { Logger } from '../base/log.ts';
import { TRAJECTORY_FORMAT, TRAJECTORY_VERSION } from './recorder.ts';
import {
  Comparison,
  DEFAULT_IMAGE_TOLERANCE,
  isObject,
  isSize,
  type Json,
  type Outcome,
  type ReplayReport,
} from './replay-compare.ts';

/** How long the target daemon may take to welcome the replay's session (the daemon's own --desktop-wait-ms default). */
const HELLO_TIMEOUT_MS = 120_000;
/** How long one batch may take before replay cancels it. The daemon's own budget is 10 minutes by default. */
export const DEFAULT_BATCH_TIMEOUT_MS = 11 * 60_000;

export interface ReplayOptions {
  /** The trajectory, `<recordings-dir>/<session id>/trajectory.jsonl`; images are read beside it. */
  file: string;
  /** The daemon to replay on, `ws://host:port/v1`. */
  url: string;
  token: string;
  log?: Logger;
  /** Aborting cancels the running batch, closes the session and rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Limit of one batch, after which it is cancelled (and compared as cancelled). Default DEFAULT_BATCH_TIMEOUT_MS. */
  timeoutMs?: number;
  /** Largest thumbnail difference (0–255) of two images that count as alike. Default DEFAULT_IMAGE_TOLERANCE. */
  imageTolerance?: number;
  /**
   * Called before each batch is sent, with the session it goes to; the batch waits for it. For a
   * step-by-step replay, or a caller that waits for something on the desktop first.
   */
  beforeBatch?: (batch: ReplayBatch) => void | Promise<void>;
}

export interface ReplayBatch {
  batchId: string;
  /** The session on the replaying daemon. */
  sessionId: string;
  /** As they will be sent: element references already renumbered. */
  toolUses: readonly ToolUseBlockLike[];
}

/** The trajectory cannot be replayed: unreadable, not a trajectory, a newer format; or the session could not be held. */
export class ReplayError extends Error {
  override name = 'ReplayError';
  readonly code = 'ERR_REPLAY';
}

const isPlaceholder = (v: unknown): boolean => typeof v === 'string' && /^\[\d+ characters?\]$/.test(v);

/** Replays `options.file` on the daemon at `options.url` and reports how the answers differ from the recording. */
export async function replayTrajectory(options: ReplayOptions): Promise<ReplayReport> {
  const replay = new Replay(options);
  try {
    return await replay.run();
  } finally {
    await replay.close();
  }
}

class Replay {
  private readonly timeoutMs: number;
  private readonly report: ReplayReport;
  private client: DeskbatchClient | undefined;
  private sessionLost: string | undefined;
  private tools: AgentToolEntry[] | undefined;
  private display: { width: number; height: number } | undefined;
  private redaction = { typed: false, passwords: false };
  private redactedCalls = 0;
  /** A `stopped` line's reason: the recorder wrote no more lines after it. */
  private stoppedBecause: string | undefined;
  /** Batches sent whose recorded result has not been read yet, in the order they were sent. */
  private readonly waiting = new Map<string, Outcome>();
  /** Batch ids already sent in this session (a second `batch_started` of one is not sent again). */
  private readonly sent = new Set<string>();
  private readonly comparison: Comparison;

  constructor(private readonly options: ReplayOptions) {
    const tolerance = options.imageTolerance ?? DEFAULT_IMAGE_TOLERANCE;
    if (!(tolerance >= 0 && tolerance <= 255)) {
      throw new ReplayError(`the image tolerance must be 0–255, got ${tolerance}`);
    }
    this.timeoutMs = options.timeoutMs ?? DEFAULT_BATCH_TIMEOUT_MS;
    this.report = {
      file: options.file,
      batches: 0,
      compared: 0,
      differences: [],
      notComparable: [],
      images: [],
      failures: [],
      refs_mapped: 0,
      image_tolerance: tolerance,
      warnings: [],
    };
    this.comparison = new Comparison(this.report, dirname(resolve(options.file)), tolerance, (text) => this.warn(text));
  }

  async run(): Promise<ReplayReport> {
    const signal = this.options.signal;
    signal?.throwIfAborted();
    const input = createReadStream(this.options.file, { encoding: 'utf8' });
    const opened = new Promise<void>((res, rej) => {
      input.once('open', () => res());
      input.once('error', rej);
    });
    try {
      await opened;
    } catch (err) {
      input.destroy();
      throw new ReplayError(`cannot read ${this.options.file}: ${(err as Error).message}`);
    }
    const lines = createInterface({ input, crlfDelay: Infinity });
    let lineNo = 0;
    let headerSeen = false;
    try {
      for await (const line of lines) {
        lineNo++;
        signal?.throwIfAborted();
        if (line.trim() === '') continue;
        let entry: unknown;
        try {
          entry = JSON.parse(line);
        } catch {
          // A complete line is always valid JSON (docs/RECORDING.md); this is a damaged or cut-off file.
          this.warn(`line ${lineNo} is not JSON (a damaged or cut-off line): skipped`);
          continue;
        }
        if (!isObject(entry) || typeof entry.type !== 'string') {
          this.warn(`line ${lineNo} has no type: skipped`);
          continue;
        }
        if (!headerSeen) {
          if (entry.type !== 'recording') {
            throw new ReplayError(
              `${this.options.file} is not a deskbatch trajectory: its first line is a "${String(entry.type).slice(0, 40)}" line, not "recording"`,
            );
          }
          this.readHeader(entry);
          headerSeen = true;
          continue;
        }
        await this.readLine(entry, lineNo);
      }
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (!(err instanceof ReplayError) && !signal?.aborted && typeof code === 'string' && code.startsWith('E')) {
        throw new ReplayError(`cannot read ${this.options.file}: ${(err as Error).message}`, { cause: err });
      }
      throw err;
    } finally {
      lines.close();
      input.destroy();
    }
    if (!headerSeen) throw new ReplayError(`${this.options.file} is empty: it has no "recording" line`);
    for (const batchId of this.waiting.keys()) {
      this.report.notComparable.push({
        batch_id: batchId,
        reason: this.stoppedBecause
          ? `the recording stopped during the batch (${this.stoppedBecause})`
          : 'the recording has no batch_finished for it (the recording daemon stopped during the batch)',
      });
    }
    this.waiting.clear();
    if (this.redactedCalls > 0) {
      const which = [this.redaction.typed ? 'typed' : '', this.redaction.passwords ? 'passwords' : '']
        .filter(Boolean)
        .join(', ');
      this.warn(
        `typed text was redacted in this recording (redaction: ${which}): ${this.redactedCalls} call${this.redactedCalls === 1 ? '' : 's'} sent the placeholder (such as "[12 characters]") instead of the text typed`,
      );
    }
    this.report.refs_mapped = this.comparison.refsMapped;
    return this.report;
  }

  async close(): Promise<void> {
    await this.client?.close();
  }

  private warn(text: string): void {
    this.report.warnings.push(text);
    this.options.log?.warn(`replay: ${text}`);
  }

  private readHeader(entry: Json): void {
    if (entry.format !== TRAJECTORY_FORMAT) {
      throw new ReplayError(
        `${this.options.file} has format ${JSON.stringify(entry.format)}; deskbatch replays "${TRAJECTORY_FORMAT}"`,
      );
    }
    const version = entry.version;
    if (typeof version !== 'number' || !Number.isInteger(version) || version < 1) {
      throw new ReplayError(`${this.options.file} has no valid format version (${JSON.stringify(version)})`);
    }
    if (version > TRAJECTORY_VERSION) {
      throw new ReplayError(
        `${this.options.file} is version ${version} of ${TRAJECTORY_FORMAT}; this deskbatch reads version ${TRAJECTORY_VERSION}: replay it with a newer deskbatch`,
      );
    }
    if (typeof entry.session_id === 'string') this.report.recorded_session_id = entry.session_id;
    const display = isObject(entry.desktop) ? entry.desktop.display : undefined;
    if (isObject(display) && isSize(display.width) && isSize(display.height)) {
      this.display = { width: display.width, height: display.height };
    }
    if (isObject(entry.redaction)) {
      this.redaction = { typed: entry.redaction.typed === true, passwords: entry.redaction.passwords === true };
    }
  }

  private async readLine(entry: Json, lineNo: number): Promise<void> {
    switch (entry.type) {
      case 'tools':
        if (!Array.isArray(entry.tools) || !entry.tools.every(isObject)) {
          this.warn(`line ${lineNo}: a tools line without a list of tools: skipped`);
        } else if (this.client) {
          // The client sends hello.tools when it connects only; a new session would lose the desktop's state.
          this.warn(
            `line ${lineNo}: the agent changed its tools during the session; the replay keeps the first list (the client sends tools only in its first hello)`,
          );
        } else {
          this.tools = entry.tools as AgentToolEntry[];
        }
        return;
      case 'batch_started':
        return this.startBatch(entry, lineNo);
      case 'batch_finished':
        return this.finishBatch(entry, lineNo);
      case 'stopped':
        // The recorder wrote nothing more after this (its byte budget): later batches are not in the file.
        this.stoppedBecause = typeof entry.reason === 'string' ? entry.reason.slice(0, 100) : 'no reason given';
        this.warn(
          `the recording stopped before the session ended (${this.stoppedBecause}): later batches were not recorded`,
        );
        return;
      default:
        return; // tool_event, batch_replayed, video, session_closed and any type added later
    }
  }

  // ---------------------------------------------------------------- sending

  private async connect(): Promise<DeskbatchClient> {
    if (this.client) return this.client;
    let client: DeskbatchClient;
    try {
      client = await DeskbatchClient.connect(this.options.url, {
        token: this.options.token,
        clientName: 'deskbatch-replay/1',
        events: false,
        // A pooled daemon may build the session's desktop first (Xvfb, the worker, Chromium): seconds, more on
        // a busy host. Its `desktop_wait` frames reset this only while it queues.
        handshakeTimeoutMs: HELLO_TIMEOUT_MS,
        ...(this.tools ? { agentTools: this.tools } : {}),
        // The recorded display size, so screenshots and coordinates are the recording's.
        ...(this.display ? { desktop: { display: this.display } } : {}),
        ...(this.options.signal ? { signal: this.options.signal } : {}),
      });
    } catch (err) {
      this.options.signal?.throwIfAborted();
      const size = this.display ? ` with a ${this.display.width}x${this.display.height} display` : '';
      throw new ReplayError(`could not open a session${size} on ${this.options.url}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    this.client = client;
    this.report.replayed_session_id = client.sessionId;
    client.on('session_lost', (info) => {
      this.sessionLost = `the daemon lost session ${info.previousSessionId} during the replay (it restarted, or the connection was away too long)`;
    });
    this.checkWelcome(client.welcome);
    this.options.log?.info('replay: session opened', { session_id: client.sessionId, url: this.options.url });
    return client;
  }

  private checkWelcome(welcome: Welcome): void {
    const display = welcome.desktop?.display ?? welcome.display;
    if (this.display && display && (display.width !== this.display.width || display.height !== this.display.height)) {
      this.warn(
        `the recording's display was ${this.display.width}x${this.display.height}, this daemon's is ${display.width}x${display.height}`,
      );
    }
  }

  private async startBatch(entry: Json, lineNo: number): Promise<void> {
    const batchId = typeof entry.batch_id === 'string' ? entry.batch_id : undefined;
    if (batchId === undefined) {
      this.warn(`line ${lineNo}: a batch_started without a batch_id: skipped`);
      return;
    }
    const toolUses = Array.isArray(entry.tool_uses) ? entry.tool_uses : [];
    if (toolUses.length === 0 || !toolUses.every(isToolUse)) {
      this.report.notComparable.push({ batch_id: batchId, reason: 'its batch_started has no valid tool_uses' });
      return;
    }
    if (this.sent.has(batchId)) {
      // The agent sent it again; the daemon answered from its stored result and nothing ran again.
      return;
    }
    const uses = toolUses.map((tu) => ({ ...tu, input: this.comparison.mapRefs(tu.input) }));
    if (this.redaction.typed || this.redaction.passwords) {
      this.redactedCalls += uses.filter((tu) => hasPlaceholder(tu.input)).length;
    }
    const client = await this.connect();
    await this.options.beforeBatch?.({ batchId, sessionId: client.sessionId, toolUses: uses });
    this.options.signal?.throwIfAborted();
    this.sent.add(batchId);
    this.report.batches++;
    this.waiting.set(batchId, await this.send(client, batchId, uses));
  }

  private async send(client: DeskbatchClient, batchId: string, uses: ToolUseBlockLike[]): Promise<Outcome> {
    const outer = this.options.signal;
    const timeout = AbortSignal.timeout(this.timeoutMs);
    const signal = outer ? AbortSignal.any([outer, timeout]) : timeout;
    const started = Date.now();
    let outcome: Outcome;
    try {
      const { result } = await client.runBatch(uses, { batchId, signal });
      outcome = { kind: 'result', result };
    } catch (err) {
      outer?.throwIfAborted();
      if (err instanceof BatchRefusedError) {
        outcome = { kind: 'refused', code: err.code, message: err.message };
      } else if (this.sessionLost) {
        throw new ReplayError(this.sessionLost);
      } else {
        throw new ReplayError(`batch ${batchId} got no result: ${(err as Error).message}`, { cause: err });
      }
    }
    outer?.throwIfAborted();
    if (this.sessionLost) throw new ReplayError(this.sessionLost);
    if (timeout.aborted) this.warn(`batch ${batchId} ran longer than ${this.timeoutMs} ms and was cancelled`);
    this.options.log?.info('replay: batch answered', { batch_id: batchId, ms: Date.now() - started });
    return outcome;
  }

  // ---------------------------------------------------------------- the recorded results

  private async finishBatch(entry: Json, lineNo: number): Promise<void> {
    const recorded = isObject(entry.result) ? entry.result : undefined;
    const batchId =
      typeof recorded?.batch_id === 'string'
        ? recorded.batch_id
        : typeof entry.batch_id === 'string'
          ? entry.batch_id
          : undefined;
    if (!recorded || batchId === undefined) {
      this.warn(`line ${lineNo}: a batch_finished without a result: skipped`);
      return;
    }
    const outcome = this.waiting.get(batchId);
    if (!outcome) {
      if (!this.sent.has(batchId)) {
        this.report.notComparable.push({ batch_id: batchId, reason: 'the recording has no batch_started for it' });
      }
      return;
    }
    this.waiting.delete(batchId);
    await this.comparison.compare(batchId, recorded, outcome);
  }
}

// ---------------------------------------------------------------- helpers

function isToolUse(v: unknown): v is ToolUseBlockLike {
  return isObject(v) && v.type === 'tool_use' && typeof v.id === 'string' && typeof v.name === 'string';
}

function hasPlaceholder(v: unknown): boolean {
  if (isPlaceholder(v)) return true;
  if (Array.isArray(v)) return v.some(hasPlaceholder);
  if (isObject(v)) return Object.values(v).some(hasPlaceholder);
  return false;
}
