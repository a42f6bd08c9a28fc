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
 * What is compared, per batch: every `tool_result` by position (its
 * `tool_use_id`, `toolset_name`, `is_error`, its blocks' number and types;
 * texts equal, `browser_state` tabs and changes equal, images of the same
 * media type and size that look alike), the `failures` (indices, names and
 * error types: messages hold host details, so they are reported, not
 * compared), `halted` and `cancelled`. Times never are.
 *
 * Element references (`ref_N`) come from one counter per daemon process
 * (src/browser/snapshot.ts), so the same element gets another number on
 * another daemon: texts are compared with each reference matched to its
 * counterpart, and later calls' inputs are sent with the replayed numbers.
 */
import { TRAJECTORY_FORMAT, TRAJECTORY_VERSION } from './recorder.ts';
import { createReadStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, isAbsolute, relative, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { createHash } from 'node:crypto';
import sharp, { type Metadata } from 'sharp';
import { BatchRefusedError, DeskbatchClient } from '../client/index.ts';
import type { ToolUseBlockLike } from '../client/index.ts';
import type { AgentToolEntry, BatchResult, Welcome } from '../protocol.ts';
import type { Logger } from '../log.ts';

/**
 * Default largest mean absolute difference (0–255) between two images'
 * grayscale thumbnails for them to count as the same picture. Measured
 * (docs/RECORDING.md "Replay"): the same state on two desktops 0–0.01, the
 * same picture as a JPEG 0.43, the same page in another host's fonts 3.9;
 * another page 165, an empty desktop against one showing the browser 250. A
 * line of typed text (2–3) or a small box (1.5–3.3) stays under it: texts are
 * compared exactly, images only for a screen that shows something else.
 */
export const DEFAULT_IMAGE_TOLERANCE = 8;
/** The thumbnail both images are reduced to before they are compared (16:10, as the default display). */
export const THUMBNAIL = { width: 32, height: 20 } as const;
/** How long one batch may take before replay cancels it. The daemon's own budget is 10 minutes by default. */
/** How long the target daemon may take to welcome the replay's session (the daemon's own --desktop-wait-ms default). */
const HELLO_TIMEOUT_MS = 120_000;
export const DEFAULT_BATCH_TIMEOUT_MS = 11 * 60_000;
/** Longest message or text quoted in a report entry; longer ones are cut with `…`. */
const QUOTE_MAX = 500;

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

export interface ReplayDifference {
  batch_id: string;
  /** Position of the tool_result (or failure) in the batch, when the difference is inside one. */
  index?: number;
  tool_use_id?: string;
  /** What differs: `text`, `image size`, `image`, `failure type`, `halted`, … */
  what: string;
  recorded: unknown;
  replayed: unknown;
}

export interface NotComparable {
  batch_id: string;
  reason: string;
}

/** One image compared, differing or not. */
export interface ImageComparison {
  batch_id: string;
  index: number;
  tool_use_id: string;
  /** Position of the block in the tool_result's content. */
  block: number;
  media_type: string;
  recorded: { width: number; height: number; bytes: number };
  replayed: { width: number; height: number; bytes: number };
  /** Mean absolute difference of the grayscale thumbnails, 0–255; absent when the recorded file was unreadable. */
  difference?: number;
}

/** A failure both runs had, of the same type, with both messages (they name host details, so they are not compared). */
export interface FailureMessages {
  batch_id: string;
  index: number;
  name: string;
  type: string;
  recorded: string;
  replayed: string;
}

export interface ReplayReport {
  file: string;
  /** The recorded session's id, and the session the replay ran in. */
  recorded_session_id?: string;
  replayed_session_id?: string;
  /** Batches sent to the daemon. */
  batches: number;
  /** Batches whose answer was compared with a recorded result. */
  compared: number;
  differences: ReplayDifference[];
  notComparable: NotComparable[];
  images: ImageComparison[];
  failures: FailureMessages[];
  /** Element references renumbered to the replaying daemon's (recorded → replayed). */
  refs_mapped: number;
  image_tolerance: number;
  /** Redacted input, skipped lines, a later `tools` line, … */
  warnings: string[];
}

/** The trajectory cannot be replayed: unreadable, not a trajectory, a newer format; or the session could not be held. */
export class ReplayError extends Error {
  override name = 'ReplayError';
  readonly code = 'ERR_REPLAY';
}

// ---------------------------------------------------------------- the trajectory's lines, as far as replay reads them

type Json = Record<string, unknown>;

interface RecordedImageFile {
  type: 'image_file';
  path: string;
  media_type: string;
  width: number;
  height: number;
  bytes?: number;
  sha256?: string;
}

/** A `batch_finished.result` as recorded: a `batch_result` whose image blocks are `image_file` references. */
interface RecordedResult {
  tool_results: Json[];
  failures: Json[];
  halted: Record<string, unknown>;
  cancelled: boolean;
}

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
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

type Outcome = { kind: 'result'; result: BatchResult } | { kind: 'refused'; code: string; message: string };

class Replay {
  private readonly dir: string;
  private readonly tolerance: number;
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
  /** Recorded ref number → the replaying daemon's, learnt from texts that match but for their numbers. */
  private readonly refs = new Map<string, string>();
  private readonly refsTaken = new Map<string, string>();

  constructor(private readonly options: ReplayOptions) {
    this.dir = dirname(resolve(options.file));
    this.tolerance = options.imageTolerance ?? DEFAULT_IMAGE_TOLERANCE;
    if (!(this.tolerance >= 0 && this.tolerance <= 255)) {
      throw new ReplayError(`the image tolerance must be 0–255, got ${this.tolerance}`);
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
      image_tolerance: this.tolerance,
      warnings: [],
    };
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
    this.report.refs_mapped = this.refs.size;
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
    const uses = toolUses.map((tu) => ({ ...tu, input: this.mapRefs(tu.input) }));
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

  /** The input with every whole-string element reference (`ref_7`, `[ref_7]`) renumbered to the replaying daemon's. */
  private mapRefs(input: unknown): unknown {
    if (this.refs.size === 0) return input;
    if (typeof input === 'string') {
      const m = /^(\[?ref_)(\d+)(\]?)$/.exec(input);
      const to = m ? this.refs.get(m[2]!) : undefined;
      return to !== undefined ? `${m![1]}${to}${m![3]}` : input;
    }
    if (Array.isArray(input)) return input.map((v) => this.mapRefs(v));
    if (isObject(input)) return Object.fromEntries(Object.entries(input).map(([k, v]) => [k, this.mapRefs(v)]));
    return input;
  }

  // ---------------------------------------------------------------- comparing

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
    const result = asRecordedResult(recorded);
    if (!result) {
      this.report.notComparable.push({ batch_id: batchId, reason: 'its recorded result is malformed' });
      return;
    }
    this.report.compared++;
    if (outcome.kind === 'refused') {
      this.differ({
        batch_id: batchId,
        what: 'batch refused',
        recorded: 'ran',
        replayed: `${outcome.code}: ${quote(outcome.message)}`,
      });
      return;
    }
    await this.compareBatch(batchId, result, outcome.result);
  }

  private differ(d: ReplayDifference): void {
    this.report.differences.push(d);
  }

  private async compareBatch(batchId: string, recorded: RecordedResult, replayed: BatchResult): Promise<void> {
    const n = Math.max(recorded.tool_results.length, replayed.tool_results.length);
    if (recorded.tool_results.length !== replayed.tool_results.length) {
      this.differ({
        batch_id: batchId,
        what: 'number of tool_results',
        recorded: recorded.tool_results.length,
        replayed: replayed.tool_results.length,
      });
    }
    for (let i = 0; i < n; i++) {
      const a = recorded.tool_results[i];
      const b = replayed.tool_results[i] as unknown as Json | undefined;
      if (!a || !b) continue;
      await this.compareResult(batchId, i, a, b);
    }
    this.compareFailures(batchId, recorded.failures, replayed.failures as unknown as Json[]);
    if (!sameHalted(recorded.halted, replayed.halted)) {
      this.differ({ batch_id: batchId, what: 'halted', recorded: recorded.halted, replayed: replayed.halted });
    }
    if (recorded.cancelled !== replayed.cancelled) {
      this.differ({ batch_id: batchId, what: 'cancelled', recorded: recorded.cancelled, replayed: replayed.cancelled });
    }
  }

  private async compareResult(batchId: string, index: number, a: Json, b: Json): Promise<void> {
    const id = typeof a.tool_use_id === 'string' ? a.tool_use_id : String(b.tool_use_id);
    const at = { batch_id: batchId, index, tool_use_id: id };
    for (const field of ['tool_use_id', 'toolset_name', 'is_error'] as const) {
      if (a[field] !== b[field])
        this.differ({ ...at, what: field, recorded: a[field] ?? null, replayed: b[field] ?? null });
    }
    const ca = Array.isArray(a.content) ? a.content.filter(isObject) : [];
    const cb = Array.isArray(b.content) ? b.content.filter(isObject) : [];
    const kinds = (c: Json[]): string[] => c.map((x) => (x.type === 'image_file' ? 'image' : String(x.type)));
    if (kinds(ca).join() !== kinds(cb).join()) {
      this.differ({ ...at, what: 'content blocks', recorded: kinds(ca), replayed: kinds(cb) });
      return;
    }
    for (let j = 0; j < ca.length; j++) {
      const x = ca[j]!;
      const y = cb[j]!;
      if (y.type === 'text') this.compareText(at, String(x.text), String(y.text));
      else if (y.type === 'browser_state') this.compareState(at, x, y);
      else if (y.type === 'image') await this.compareImage(at, j, x, y);
    }
  }

  private compareText(at: Omit<ReplayDifference, 'what' | 'recorded' | 'replayed'>, a: string, b: string): void {
    const pairs = refPairs(a, b);
    if (a === b) {
      // The same numbers on both daemons: they map to themselves (unless that contradicts what is known).
      if (pairs) this.learnRefs(pairs.filter(([from]) => !this.refs.has(from)));
      return;
    }
    if (pairs && this.learnRefs(pairs)) return;
    this.differ({ ...at, what: pairs ? 'text (element references)' : 'text', recorded: quote(a), replayed: quote(b) });
  }

  /** Takes the pairs of references from two texts equal but for them; false when they contradict earlier pairs. */
  private learnRefs(pairs: [string, string][]): boolean {
    for (const [from, to] of pairs) {
      const known = this.refs.get(from);
      const taken = this.refsTaken.get(to);
      if ((known !== undefined && known !== to) || (taken !== undefined && taken !== from)) return false;
    }
    for (const [from, to] of pairs) {
      this.refs.set(from, to);
      this.refsTaken.set(to, from);
    }
    return true;
  }

  private compareState(at: Omit<ReplayDifference, 'what' | 'recorded' | 'replayed'>, a: Json, b: Json): void {
    const tabs = (s: Json): unknown[] =>
      (Array.isArray(s.tabs) ? s.tabs.filter(isObject) : []).map((t) => ({
        tab_id: t.tab_id,
        url: t.url,
        title: t.title,
        active: t.active === true,
      }));
    // A completed download's path names the host's folder and the session: never the same on two daemons.
    const changes = (s: Json): unknown[] =>
      (Array.isArray(s.state_changes) ? s.state_changes.filter(isObject) : []).map(({ path: _path, ...rest }) => rest);
    if (!deepEqual(tabs(a), tabs(b)))
      this.differ({ ...at, what: 'browser_state tabs', recorded: tabs(a), replayed: tabs(b) });
    if (!deepEqual(changes(a), changes(b))) {
      this.differ({ ...at, what: 'browser_state state_changes', recorded: changes(a), replayed: changes(b) });
    }
  }

  private async compareImage(
    at: Omit<ReplayDifference, 'what' | 'recorded' | 'replayed' | 'index' | 'tool_use_id'> & {
      index: number;
      tool_use_id: string;
    },
    block: number,
    a: Json,
    b: Json,
  ): Promise<void> {
    const source = isObject(b.source) ? b.source : {};
    const replayedBytes = Buffer.from(typeof source.data === 'string' ? source.data : '', 'base64');
    const replayedMedia = String(source.media_type);
    let meta: Metadata;
    try {
      meta = await sharp(replayedBytes).metadata();
    } catch (err) {
      this.differ({ ...at, what: 'image', recorded: 'an image', replayed: `undecodable: ${(err as Error).message}` });
      return;
    }
    const replayed = { width: meta.width ?? 0, height: meta.height ?? 0, bytes: replayedBytes.length };
    const recordedImage = await this.recordedImage(at.batch_id, a);
    const recorded = recordedImage.size;
    const media = recordedImage.media_type;
    const comparison: ImageComparison = {
      batch_id: at.batch_id,
      index: at.index,
      tool_use_id: at.tool_use_id,
      block,
      media_type: replayedMedia,
      recorded,
      replayed,
    };
    if (media !== replayedMedia)
      this.differ({ ...at, what: 'image media type', recorded: media, replayed: replayedMedia });
    const sizeKnown = recorded.width > 0 && recorded.height > 0;
    if (sizeKnown && (recorded.width !== replayed.width || recorded.height !== replayed.height)) {
      this.differ({
        ...at,
        what: 'image size',
        recorded: `${recorded.width}x${recorded.height}`,
        replayed: `${replayed.width}x${replayed.height}`,
      });
    }
    if (recordedImage.data) {
      const difference = await imageDifference(recordedImage.data, replayedBytes);
      comparison.difference = round2(difference);
      if (difference > this.tolerance) {
        this.differ({
          ...at,
          what: 'image',
          recorded: `${recorded.width}x${recorded.height}, ${recorded.bytes} bytes`,
          replayed: `${replayed.width}x${replayed.height}, ${replayed.bytes} bytes; differs by ${round2(difference)} (tolerance ${this.tolerance})`,
        });
      }
    }
    this.report.images.push(comparison);
  }

  /** A recorded image block: an `image_file` beside the trajectory (or, should a writer inline one, a base64 image). */
  private async recordedImage(
    batchId: string,
    a: Json,
  ): Promise<{ media_type: string; size: { width: number; height: number; bytes: number }; data?: Buffer }> {
    if (a.type === 'image') {
      const source = isObject(a.source) ? a.source : {};
      const data = Buffer.from(typeof source.data === 'string' ? source.data : '', 'base64');
      const meta = await sharp(data)
        .metadata()
        .catch(() => ({ width: 0, height: 0 }));
      return {
        media_type: String(source.media_type),
        size: { width: meta.width ?? 0, height: meta.height ?? 0, bytes: data.length },
        data,
      };
    }
    const file = a as Partial<RecordedImageFile>;
    const size = {
      width: isSize(file.width) ? file.width : 0,
      height: isSize(file.height) ? file.height : 0,
      bytes: typeof file.bytes === 'number' ? file.bytes : 0,
    };
    const media_type = String(file.media_type);
    const path = this.insideRecording(file.path);
    if (!path) {
      this.warn(`batch ${batchId}: an image_file whose path is not inside the recording's folder was not read`);
      return { media_type, size };
    }
    let data: Buffer;
    try {
      data = await readFile(path);
    } catch (err) {
      this.warn(
        `batch ${batchId}: the recorded image ${file.path} could not be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
      );
      return { media_type, size };
    }
    if (size.bytes === 0) size.bytes = data.length;
    if (size.width === 0 || size.height === 0) {
      // The recorder names the size only when it knows it: then it is the file's own.
      const meta = await sharp(data)
        .metadata()
        .catch(() => undefined);
      size.width = meta?.width ?? 0;
      size.height = meta?.height ?? 0;
    }
    if (typeof file.sha256 === 'string' && createHash('sha256').update(data).digest('hex') !== file.sha256) {
      this.warn(
        `batch ${batchId}: the recorded image ${file.path} does not match its sha256: it changed after recording`,
      );
    }
    return { media_type, size, data };
  }

  /** `images/…` resolved inside the trajectory's folder, or undefined for a path that leaves it. */
  private insideRecording(path: unknown): string | undefined {
    if (typeof path !== 'string' || path === '' || path.includes('\0') || isAbsolute(path)) return undefined;
    const full = resolve(this.dir, path);
    const rel = relative(this.dir, full);
    return rel === '' || rel.startsWith('..') || isAbsolute(rel) ? undefined : full;
  }

  private compareFailures(batchId: string, a: Json[], b: Json[]): void {
    const byIndex = (list: Json[]): Map<number, Json> =>
      new Map(list.filter((f) => typeof f.index === 'number').map((f) => [f.index as number, f]));
    const fa = byIndex(a);
    const fb = byIndex(b);
    const indices = [...new Set([...fa.keys(), ...fb.keys()])].sort((x, y) => x - y);
    for (const index of indices) {
      const x = fa.get(index);
      const y = fb.get(index);
      const ex = isObject(x?.error) ? x.error : {};
      const ey = isObject(y?.error) ? y.error : {};
      const at = {
        batch_id: batchId,
        index,
        tool_use_id: String((x ?? y)!.tool_use_id),
      };
      const summary = (f: Json | undefined, e: Json): unknown =>
        f ? { name: f.name, type: e.type, message: quote(String(e.message ?? '')) } : null;
      if (!x || !y) {
        this.differ({ ...at, what: 'failure', recorded: summary(x, ex), replayed: summary(y, ey) });
        continue;
      }
      if (x.name !== y.name) this.differ({ ...at, what: 'failure name', recorded: x.name, replayed: y.name });
      if (ex.type !== ey.type) {
        this.differ({ ...at, what: 'failure type', recorded: summary(x, ex), replayed: summary(y, ey) });
        continue;
      }
      this.report.failures.push({
        batch_id: batchId,
        index,
        name: String(x.name),
        type: String(ex.type),
        recorded: quote(String(ex.message ?? '')),
        replayed: quote(String(ey.message ?? '')),
      });
    }
  }
}

// ---------------------------------------------------------------- helpers

function isSize(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v > 0;
}

function isToolUse(v: unknown): v is ToolUseBlockLike {
  return isObject(v) && v.type === 'tool_use' && typeof v.id === 'string' && typeof v.name === 'string';
}

function hasPlaceholder(v: unknown): boolean {
  if (isPlaceholder(v)) return true;
  if (Array.isArray(v)) return v.some(hasPlaceholder);
  if (isObject(v)) return Object.values(v).some(hasPlaceholder);
  return false;
}

function asRecordedResult(r: Json): RecordedResult | undefined {
  if (!Array.isArray(r.tool_results) || !r.tool_results.every(isObject)) return undefined;
  return {
    tool_results: r.tool_results,
    failures: Array.isArray(r.failures) ? r.failures.filter(isObject) : [],
    halted: isObject(r.halted) ? r.halted : {},
    cancelled: r.cancelled === true,
  };
}

/**
 * The pairs of element references (`ref_N`) at the same places in two texts
 * that are otherwise equal, or undefined when the texts differ elsewhere.
 */
export function refPairs(a: string, b: string): [string, string][] | undefined {
  const REF = /\bref_(\d+)\b/g;
  const split = (s: string): { rest: string; refs: string[] } => {
    const refs: string[] = [];
    const rest = s.replace(REF, (_m, n: string) => {
      refs.push(n);
      return 'ref_#';
    });
    return { rest, refs };
  };
  const x = split(a);
  const y = split(b);
  if (x.refs.length === 0 || x.rest !== y.rest) return undefined;
  return x.refs.map((n, i) => [n, y.refs[i]!]);
}

function sameHalted(a: Record<string, unknown>, b: Record<string, unknown>): boolean {
  const ka = Object.keys(a).sort();
  const kb = Object.keys(b).sort();
  return ka.join('\0') === kb.join('\0') && ka.every((k) => a[k] === b[k]);
}

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((v, i) => deepEqual(v, b[i]));
  if (isObject(a) && isObject(b)) {
    const ka = Object.keys(a).filter((k) => a[k] !== undefined);
    const kb = Object.keys(b).filter((k) => b[k] !== undefined);
    return ka.length === kb.length && ka.every((k) => deepEqual(a[k], b[k]));
  }
  return false;
}

function quote(s: string): string {
  return s.length > QUOTE_MAX ? `${s.slice(0, QUOTE_MAX)}…` : s;
}

function round2(n: number): number {
  return Math.round(n * 100) / 100;
}

/**
 * How different two images look, 0 (the same picture) to 255: each is
 * reduced to a THUMBNAIL-sized grayscale picture (stretched to fill it, so
 * images of different sizes can still be compared) and the thumbnails'
 * pixels' mean absolute difference is taken.
 */
export async function imageDifference(a: Buffer, b: Buffer): Promise<number> {
  const thumb = (img: Buffer): Promise<Buffer> =>
    sharp(img)
      .flatten({ background: '#ffffff' })
      .grayscale()
      .resize(THUMBNAIL.width, THUMBNAIL.height, { fit: 'fill' })
      .raw()
      .toBuffer();
  const [x, y] = await Promise.all([thumb(a), thumb(b)]);
  let sum = 0;
  for (let i = 0; i < x.length; i++) sum += Math.abs(x[i]! - y[i]!);
  return sum / x.length;
}
