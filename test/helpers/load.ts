/**
 * The load harness (issue 4, promise 4 "Load holds"), shared by the short run
 * in test/load.test.ts (every CI run) and the long one in test/soak.ts
 * (`npm run soak`).
 *
 * `runLoad` opens many real ws sessions against a running daemon; each sends
 * batches back to back (the next one only after the previous result), mixing
 * computer batches (they hold the one desktop lane for the whole batch),
 * browser batches (each session's own browser context, no lane) and mixed
 * batches (both toolsets, so they hold the lane too), with malformed traffic,
 * replays of earlier batches and dropped-and-resumed connections interleaved.
 * Every batch is checked, and the harness never throws on a violation: it
 * counts it and keeps a description in `problems`, so a soak can report
 * figures. What it proves:
 *
 * - lost: a tool_use without a tool_result (no batch_result, or one missing an id);
 * - duplicated: a second batch_result for a batch_id that was sent once, or a
 *   tool_result twice;
 * - crossed: anything that belongs to another batch or session — a result id
 *   or event of a batch this connection never sent; a `cursor_position` that is
 *   not the coordinate this very batch moved to (a computer batch holds the lane
 *   for its whole length, so another batch's `mouse_move` in between is a
 *   crossing); a page, tab, cookie or localStorage value of another session
 *   (every page shows the Cookie header the browser sent and the localStorage
 *   value left by the session's previous page: with shared contexts they would
 *   carry another session's marker); a screenshot file under another session's folder;
 * - fairness of the desktop lane: see `laneOvertakes`.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import {
  type BatchResult,
  type ErrorInfo,
  type ErrorMessage,
  type ServerMessage,
  type ToolEvent,
  type ToolUse,
  type Welcome,
} from '../../src/protocol.ts';
import { REPEAT_ADVICE, REPEAT_THRESHOLD } from '../../src/executor/repeats.ts';
import { assertApiValid } from './api-rules.ts';
import { HandshakeError, RecordingClient } from './ws-client.ts';

// ---------------------------------------------------------------------------
// A web server whose pages carry the session's marker.

export interface MarkerServer {
  /** http://127.0.0.1:PORT */
  origin: string;
  /** Pages served so far. */
  served(): number;
  close(): Promise<void>;
}

const TAG = /^[A-Za-z0-9_-]{1,40}$/;
const escapeHtml = (s: string): string =>
  s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`).replace(/[\p{Cc}]/gu, ' ');

/**
 * `/s/<tag>/<n>`: a page titled `load <tag> <n>` that reads `marker <tag> round <n>`,
 * shows the Cookie header the browser sent (`request-cookie=[…]`) and the
 * localStorage value an earlier page of the same origin left (`prev-storage=[…]`),
 * then sets the cookie `who=<tag>` and localStorage `who` = `<tag>:<n>`.
 * Within one browser context, the next page of the session sees its own values;
 * a context shared with another session would show that session's tag.
 */
export async function startMarkerServer(): Promise<MarkerServer> {
  let served = 0;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0]!;
    const m = /^\/s\/([^/]+)\/(\d{1,9})$/.exec(path);
    if (!m || !TAG.test(m[1]!)) {
      res.writeHead(path === '/favicon.ico' ? 204 : 404, { 'content-type': 'text/plain' }).end();
      return;
    }
    served++;
    const [, tag, n] = m;
    const cookie = escapeHtml(req.headers.cookie ?? '');
    res
      .writeHead(200, {
        'content-type': 'text/html; charset=utf-8',
        'cache-control': 'no-store',
        'set-cookie': `who=${tag}; Path=/`,
      })
      .end(
        `<!doctype html><title>load ${tag} ${n}</title>
<p>marker ${tag} round ${n}</p>
<p>request-cookie=[${cookie}]</p>
<p id="s">prev-storage=[?]</p>
<script>
const prev = localStorage.getItem('who');
localStorage.setItem('who', '${tag}:${n}');
document.getElementById('s').textContent = 'prev-storage=[' + (prev === null ? '' : prev) + ']';
</script>`,
      );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    served: () => served,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

// ---------------------------------------------------------------------------
// The load's client (test/helpers/ws-client.ts): every message validated, nothing thrown from a handler.

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

// ---------------------------------------------------------------------------
// Fairness of the desktop lane.

export interface LaneRecord {
  session: string;
  /** When the client sent the batch. */
  sentAt: number;
  /** When its batch_result arrived. */
  doneAt: number;
}

/**
 * The most lane batches any one other session may see completed while one lane
 * batch of ours is outstanding, in a FIFO lane, when every session keeps at
 * most one batch outstanding (each sends its next only after the previous
 * result). Measured at the client, between our send and our result, another
 * session B can complete at most:
 *  1. one batch that finished before ours reached the lane but whose result
 *     arrived after we sent;
 *  2. one batch already in the lane queue ahead of ours (B has at most one
 *     outstanding, and FIFO serves it before us);
 *  3. one batch B sent after that, queued behind ours, whose result reached the
 *     client just before ours (two sockets: arrival order between them is free).
 * A fourth means B's batch entered the lane after ours and was still served
 * before ours: an overtaking, which FIFO forbids. A LIFO lane, or one that lets
 * the session that just finished go again, makes a waiting batch watch other
 * sessions go round many times (or forever: starvation), and fails this check;
 * see the simulation in test/load.test.ts.
 */
export const FIFO_OVERTAKE_BOUND = 3;

export interface OvertakeReport {
  /** The most batches of one other session completed while one batch waited. */
  max: number;
  /** Lane batches that saw more than FIFO_OVERTAKE_BOUND batches of one other session complete. */
  violations: number;
  worst?: { session: string; other: string; count: number };
}

export function laneOvertakes(records: readonly LaneRecord[], bound = FIFO_OVERTAKE_BOUND): OvertakeReport {
  const bySession = new Map<string, number[]>();
  for (const r of records) bySession.set(r.session, [...(bySession.get(r.session) ?? []), r.doneAt]);
  for (const list of bySession.values()) list.sort((a, b) => a - b);
  // Number of values in the sorted list strictly inside (lo, hi).
  const countInside = (list: number[], lo: number, hi: number): number => {
    const firstAbove = (x: number): number => {
      let a = 0;
      let b = list.length;
      while (a < b) {
        const mid = (a + b) >> 1;
        if (list[mid]! <= x) a = mid + 1;
        else b = mid;
      }
      return a;
    };
    let lastBelow = firstAbove(hi);
    while (lastBelow > 0 && list[lastBelow - 1]! >= hi) lastBelow--;
    return Math.max(0, lastBelow - firstAbove(lo));
  };
  const report: OvertakeReport = { max: 0, violations: 0 };
  for (const r of records) {
    let worstHere = 0;
    for (const [other, list] of bySession) {
      if (other === r.session) continue;
      const n = countInside(list, r.sentAt, r.doneAt);
      if (n > worstHere) worstHere = n;
      if (n > report.max) {
        report.max = n;
        report.worst = { session: r.session, other, count: n };
      }
    }
    if (worstHere > bound) report.violations++;
  }
  return report;
}

// ---------------------------------------------------------------------------
// The load run.

export type BatchKind = 'computer' | 'browser' | 'mixed' | 'malformed' | 'resumed';

export interface BatchRecord {
  session: string;
  batchId: string;
  kind: BatchKind;
  sentAt: number;
  doneAt: number;
  /** No call failed. */
  ok: boolean;
  failureTypes: string[];
  /** A browser call that ran and succeeded / a computer call that ran and succeeded. */
  browserOk: boolean;
  computerOk: boolean;
}

export interface LoadOptions {
  /** ws://…/v1 of the daemon. */
  url: string;
  token: string;
  /** Origin of a startMarkerServer(). */
  webOrigin: string;
  /** Sessions open at once (slots). */
  sessions: number;
  /** Batches per session life (Infinity: until durationMs ends). A number or one per slot. */
  rounds: number | ((slot: number) => number);
  /** When set, a slot whose session finished its rounds opens a new one until this much time has passed (churn). */
  durationMs?: number;
  /** Prefix of session tags (letters and digits), to tell runs apart. */
  label?: string;
  /** The kinds of batches sessions cycle through (default all three). */
  kinds?: readonly BatchMix[];
  /** Every n-th batch of a session, when it is a computer batch, also takes a screenshot (0: never). */
  screenshotEvery?: number;
  /** The same for browser batches (a browser screenshot costs seconds on a loaded machine). */
  browserScreenshotEvery?: number;
  /** Before every n-th batch, one malformed input (0: never). */
  malformedEvery?: number;
  /** After every n-th batch, resend it: it must be answered from the stored result (0: never). */
  replayEvery?: number;
  /** Every n-th session life ends with a dropped connection mid-batch, a resume and a resend (0: never). */
  dropResumeEvery?: number;
  /**
   * Failures that are expected (a fault was injected, or the machine is starved of CPU);
   * anything else is an unexpected failure. Expected ones are counted by type.
   */
  expectFailure?: (error: ErrorInfo) => boolean;
  /**
   * Slot i opens its first session after i × rampUpMs / sessions: all sessions are soon open
   * at once, but 32 browser contexts are not all created in the same instant.
   */
  rampUpMs?: number;
  /**
   * Each session's first life stays open, once its rounds are done, until every
   * slot's first session has opened (or failed to): so all of them are open at
   * once however fast a machine runs the rounds, and `maxConcurrentSessions`
   * equals `sessions` unless a session failed to open. Not with `durationMs`.
   */
  holdOpenUntilAllOpened?: boolean;
  /**
   * At most this many browser batches in flight at once, across sessions (the client waits):
   * on two shared cores each new browser context costs about a second of CPU, and 32 at once
   * outlast navigate's own 20 s limit. Sessions, the lane and mixed batches are not limited.
   */
  browserConcurrency?: number;
  /** A browser batch whose navigation failed (expectedly) is followed by another, at most this many times. */
  browserRetries?: number;
  /** How long a batch may take before its results count as lost. */
  batchTimeoutMs?: number;
  onBatch?: (record: BatchRecord) => void;
  /** Aborts: no new batches start; in-flight ones finish. */
  signal?: AbortSignal;
}

export interface Quantiles {
  n: number;
  p50: number;
  p95: number;
  max: number;
}

export interface LoadStats {
  durationMs: number;
  /** Session lives started (hello answered with welcome). */
  sessionsOpened: number;
  maxConcurrentSessions: number;
  /** Handshakes or hellos refused for capacity (503, too_many_sessions), then retried. */
  sessionRefusals: number;
  /** Batches accepted (including malformed-input batches and resumed ones; replays are counted apart). */
  batches: number;
  batchesByKind: Record<string, number>;
  /** tool_uses in those batches. */
  calls: number;
  /** tool_results received for them. */
  results: number;
  lost: number;
  duplicated: number;
  crossed: number;
  /** Calls whose result was checked against what this session and batch did. */
  contentChecks: number;
  /** Pages that showed this session's own cookie and earlier localStorage value (isolation exercised). */
  isolationChecks: number;
  /** Marker pages read and checked (marker, cookie, storage). */
  pageChecks: number;
  /** Browser batches sent again because their navigation failed in an expected way. */
  browserRetries: number;
  replays: number;
  replaysOk: number;
  dropResumes: number;
  dropResumesOk: number;
  malformedSent: number;
  malformedAnswered: number;
  malformedByKind: Record<string, number>;
  expectedFailures: Record<string, number>;
  unexpectedFailures: number;
  /** tool_event streams that broke the rules (missing, doubled, late, foreign). */
  eventProblems: number;
  /** Messages that failed the protocol schema, and errors nobody asked for. */
  protocolProblems: number;
  laneBatches: number;
  /** Longest time from sending a lane batch to its first call starting. */
  maxLaneWaitMs: number;
  fairness: OvertakeReport;
  /** Session lives that ended before their rounds (a batch without result, a refused session): never expected. */
  unfinishedSessions: number;
  /** Max − min lane batches completed across sessions when the first session finished its last one. */
  spreadAtFirstFinish: number | undefined;
  batchMs: Record<string, Quantiles>;
  /** Call durations by toolset and member, from the daemon's succeeded events. */
  callMs: Record<string, Quantiles>;
  maxScreenshotBytes: number;
  screenshotsWritten: number;
  /** The first descriptions of anything wrong (at most 60). */
  problems: string[];
}

const COMPUTER_NOT_EXECUTED = 'Not executed: an earlier computer action in this turn failed.';
/**
 * The batch kinds of a session, by round: computer, browser and mixed in turn, each
 * session starting at a different point of the cycle, so that all kinds run at once.
 */
export function kindOf(
  round: number,
  slot: number,
  kinds: readonly BatchMix[] = ['computer', 'browser', 'mixed'],
): BatchMix {
  return kinds[(round + slot) % kinds.length]!;
}

export type BatchMix = 'computer' | 'browser' | 'mixed';

/** Globally unique mouse coordinates: consecutive batches (of any session, any run in this process) get different ones. */
let coordinateCounter = 0;
export function nextCoordinate(size: { width: number; height: number }): [number, number] {
  const w = size.width - 20;
  const h = size.height - 20;
  const c = coordinateCounter++;
  return [10 + (c % w), 10 + (Math.floor(c / w) % h)];
}

function quantiles(values: number[]): Quantiles {
  const s = [...values].sort((a, b) => a - b);
  const q = (p: number): number => Math.round(s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? 0);
  return { n: s.length, p50: q(0.5), p95: q(0.95), max: Math.round(s[s.length - 1] ?? 0) };
}

const textOf = (r: BatchResult['tool_results'][number] | undefined): string =>
  (r?.content ?? [])
    .filter((b) => b.type === 'text')
    .map((b) => (b.type === 'text' ? b.text : ''))
    .join('\n');

const MALFORMED_KINDS = [
  'not_json',
  'wrong_type_input',
  'unknown_field',
  'unknown_member',
  'bad_batch_id',
  'binary_frame',
] as const;
type MalformedKind = (typeof MALFORMED_KINDS)[number];

/** What a call was meant to show, checked when it succeeded. */
type Expectation =
  | { kind: 'cursor'; coordinate: [number, number]; moveIndex: number }
  | { kind: 'image' }
  | { kind: 'navigate'; url: string; title: string }
  | { kind: 'page'; tag: string; n: number }
  | { kind: 'tabs'; tag: string; atLeast: number }
  | { kind: 'outline'; tag: string; n: number }
  | { kind: 'error'; type: string; text: RegExp }
  | { kind: 'not_executed'; text: string }
  | { kind: 'ack' };

interface Planned {
  kind: BatchKind;
  toolUses: ToolUse[];
  expect: Expectation[];
}

function semaphore(size: number): { take(): Promise<void>; give(): void } {
  let free = size;
  const waiting: (() => void)[] = [];
  return {
    take: () => {
      if (free > 0) {
        free--;
        return Promise.resolve();
      }
      return new Promise<void>((resolve) => waiting.push(resolve));
    },
    give: () => {
      const next = waiting.shift();
      if (next) next();
      else free++;
    },
  };
}

export async function runLoad(opts: LoadOptions): Promise<LoadStats> {
  const started = performance.now();
  const label = opts.label ?? 'L';
  const batchTimeoutMs = opts.batchTimeoutMs ?? 120_000;
  const deadline = opts.durationMs !== undefined ? started + opts.durationMs : Infinity;
  const expectFailure = opts.expectFailure ?? (() => false);
  const stats: LoadStats = {
    durationMs: 0,
    sessionsOpened: 0,
    maxConcurrentSessions: 0,
    sessionRefusals: 0,
    batches: 0,
    batchesByKind: {},
    calls: 0,
    results: 0,
    lost: 0,
    duplicated: 0,
    crossed: 0,
    contentChecks: 0,
    isolationChecks: 0,
    pageChecks: 0,
    browserRetries: 0,
    replays: 0,
    replaysOk: 0,
    dropResumes: 0,
    dropResumesOk: 0,
    malformedSent: 0,
    malformedAnswered: 0,
    malformedByKind: {},
    expectedFailures: {},
    unexpectedFailures: 0,
    eventProblems: 0,
    protocolProblems: 0,
    laneBatches: 0,
    maxLaneWaitMs: 0,
    fairness: { max: 0, violations: 0 },
    unfinishedSessions: 0,
    spreadAtFirstFinish: undefined,
    batchMs: {},
    callMs: {},
    maxScreenshotBytes: 0,
    screenshotsWritten: 0,
    problems: [],
  };
  const durations = new Map<string, number[]>();
  const callDurations = new Map<string, number[]>();
  const lane: LaneRecord[] = [];
  /** Per batch result: how many of its results were lost, duplicated or crossed (judged when it arrived). */
  const wrongResults = new WeakMap<BatchResult, number>();
  /** Per session: lane completion times, and how many lane batches its life was meant to run. */
  const laneDone = new Map<string, { times: number[]; planned: number }>();
  let open = 0;
  const browserSlots = semaphore(opts.browserConcurrency ?? Infinity);
  const stopped = (): boolean => opts.signal?.aborted === true || performance.now() >= deadline;

  const problem = (what: string): void => {
    if (stats.problems.length < 60) stats.problems.push(what);
  };

  /** Opens a connection and a session, retrying while the daemon is at capacity. */
  async function openSession(tag: string): Promise<{ client: LoadClient; welcome: Welcome } | undefined> {
    for (let attempt = 0; ; attempt++) {
      if (opts.signal?.aborted) return undefined;
      let client: LoadClient;
      try {
        client = await LoadClient.open(opts.url, opts.token);
      } catch (err) {
        if (err instanceof HandshakeError && (err.status === 503 || err.status === 429) && attempt < 120) {
          stats.sessionRefusals++;
          await delay(1_000);
          continue;
        }
        problem(`${tag}: could not connect: ${String(err)}`);
        return undefined;
      }
      let answer: Welcome | ErrorMessage;
      try {
        answer = await client.hello();
      } catch (err) {
        client.terminate();
        problem(`${tag}: no welcome: ${String(err)}`);
        return undefined;
      }
      if (answer.type === 'welcome') return { client, welcome: answer };
      client.close();
      if (answer.code === 'too_many_sessions' && attempt < 120) {
        stats.sessionRefusals++;
        await delay(1_000);
        continue;
      }
      problem(`${tag}: hello refused: ${answer.code} ${answer.message}`);
      return undefined;
    }
  }

  /** Checks one batch's events: one terminal phase per call, in order, before the result, none foreign. */
  function checkEvents(tag: string, client: LoadClient, batchId: string, toolUses: ToolUse[], r: BatchResult): void {
    const events = client.events.get(batchId) ?? [];
    const phases = toolUses.map(() => [] as string[]);
    let bad = '';
    for (const { event, late } of events) {
      const tu = toolUses[event.index];
      if (!tu || tu.id !== event.tool_use_id) {
        stats.crossed++;
        bad ||= `event for a foreign call ${event.tool_use_id}@${event.index}`;
        continue;
      }
      if (late) bad ||= `event ${event.phase} of ${tu.id} after the batch_result`;
      phases[event.index]!.push(event.phase);
      if (event.phase === 'succeeded' && event.duration_ms !== undefined) {
        const key = `${event.toolset_name}.${event.name}`;
        callDurations.set(key, [...(callDurations.get(key) ?? []), event.duration_ms]);
      }
    }
    phases.forEach((p, i) => {
      const seq = p.join(',');
      const result = r.tool_results[i];
      const okSeq = ['started,succeeded', 'started,failed', 'not_executed', 'cancelled', 'started,cancelled'];
      if (!okSeq.includes(seq)) bad ||= `call ${i} has events [${seq}]`;
      else if (seq.endsWith('succeeded') && result?.is_error) bad ||= `call ${i}: succeeded event, error result`;
      else if (seq.endsWith('failed') && !r.failures.some((f) => f.index === i))
        bad ||= `call ${i}: failed, no failure`;
    });
    if (bad) {
      stats.eventProblems++;
      problem(`${tag} ${batchId}: ${bad}`);
    }
  }

  /** A marker page: this session's marker and round, and only this session's cookie and (earlier) storage. */
  function checkPage(text: string, tag: string, n: number, crossed: (what: string) => void): void {
    if (!text.includes(`marker ${tag} round ${n}`)) crossed(`page text lacks its marker: ${text}`);
    for (const m of text.matchAll(/marker (\S+) round (\d+)/g)) {
      if (m[1] !== tag || Number(m[2]) !== n) crossed(`page text shows ${m[0]}`);
    }
    const cookie = /request-cookie=\[([^\]]*)\]/.exec(text)?.[1];
    if (cookie === undefined || (cookie !== '' && cookie !== `who=${tag}`)) {
      crossed(`the browser sent cookies ${JSON.stringify(cookie)}; only who=${tag} may be there`);
    }
    const prev = /prev-storage=\[([^\]]*)\]/.exec(text)?.[1];
    const pm = prev === undefined ? null : /^([A-Za-z0-9_-]+):(\d+)$/.exec(prev);
    if (prev === undefined || (prev !== '' && (!pm || pm[1] !== tag || Number(pm[2]) >= n))) {
      crossed(`localStorage held ${JSON.stringify(prev)}; only ${tag}:<earlier round> may be there`);
    }
    if (cookie === `who=${tag}` && pm) stats.isolationChecks++;
  }

  /** Checks what succeeded calls returned against what the batch did; returns whether anything was crossed. */
  function checkContent(
    tag: string,
    sessionId: string,
    batchId: string,
    plan: Planned,
    r: BatchResult,
    welcome: Welcome,
  ): void {
    const halt = new Map(welcome.toolsets.map((t) => [t.toolset_name, t.not_executed_text]));
    const cancelledText = new Map(welcome.toolsets.map((t) => [t.toolset_name, t.cancelled_text]));
    const failed = new Set(r.failures.map((f) => f.index));
    plan.expect.forEach((exp, i) => {
      const tu = plan.toolUses[i]!;
      const res = r.tool_results[i];
      if (!res || res.tool_use_id !== tu.id) return; // counted as lost/crossed already
      const text = textOf(res);
      const crossed = (what: string): void => {
        stats.crossed++;
        problem(`${tag} ${batchId} call ${i} (${tu.name}): ${what}`);
      };
      if (exp.kind === 'error' || exp.kind === 'not_executed') {
        // A malformed input: its refusal is the answer we wanted.
        if (exp.kind === 'error') {
          const f = r.failures.find((x) => x.index === i);
          if (!res.is_error || f?.error.type !== exp.type || !exp.text.test(text)) {
            if (f && expectFailure(f.error)) return;
            crossed(`expected ${exp.type} matching ${exp.text}, got ${f?.error.type} ${JSON.stringify(text)}`);
          }
        } else if (text !== exp.text) crossed(`expected the not-executed text, got ${JSON.stringify(text)}`);
        return;
      }
      if (res.is_error) {
        if (failed.has(i)) return; // judged with the failures
        const family = tu.toolset_name ?? '';
        if (text === halt.get(family)) return;
        if (r.cancelled && text === cancelledText.get(family)) return;
        crossed(`an error result that is neither a failure, the halt text nor a cancellation: ${text}`);
        return;
      }
      stats.contentChecks++;
      switch (exp.kind) {
        case 'cursor': {
          const move = r.tool_results[exp.moveIndex];
          if (move?.is_error) return; // the pointer was not moved by us: nothing to compare
          const want = `X=${exp.coordinate[0]}, Y=${exp.coordinate[1]}`;
          if (text !== want) crossed(`cursor_position read ${JSON.stringify(text)}, this batch moved to ${want}`);
          return;
        }
        case 'image': {
          if (!res.content.some((b) => b.type === 'image')) crossed('no image block');
          const file = r.screenshots.find((s) => s.tool_use_id === tu.id);
          if (!file) crossed('no screenshot file listed');
          else {
            stats.screenshotsWritten++;
            stats.maxScreenshotBytes = Math.max(stats.maxScreenshotBytes, file.bytes);
            if (!file.path.startsWith(`${sessionId.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 96)}/`)) {
              crossed(`screenshot file ${file.path} is not in this session's folder`);
            }
          }
          return;
        }
        case 'navigate': {
          const want = `Navigated to ${exp.url} — ${exp.title} (HTTP 200)`;
          if (text.split('\n')[0] !== want) crossed(`navigate said ${JSON.stringify(text)}, want ${want}`);
          return;
        }
        case 'page':
          stats.pageChecks++;
          checkPage(text, exp.tag, exp.n, crossed);
          return;
        case 'outline': {
          if (!text.includes(`marker ${exp.tag} round ${exp.n}`)) crossed(`read_page lacks the marker: ${text}`);
          return;
        }
        case 'tabs': {
          const state = res.content.find((b) => b.type === 'browser_state');
          const tabs = state?.type === 'browser_state' ? state.tabs : [];
          if (tabs.length < exp.atLeast) crossed(`list_tabs shows ${tabs.length} tabs after a navigation`);
          for (const t of tabs) {
            if (t.url !== 'about:blank' && !t.url.startsWith(`${opts.webOrigin}/s/${exp.tag}/`)) {
              crossed(`list_tabs shows a tab of someone else: ${t.url}`);
            }
          }
          return;
        }
        case 'ack':
          return;
      }
    });
  }

  /**
   * Sends one batch and waits for its result; checks it. Returns the result, or
   * undefined when none came (its calls are lost and the session must end).
   */
  async function runBatch(
    tag: string,
    client: LoadClient,
    welcome: Welcome,
    batchId: string,
    plan: Planned,
  ): Promise<BatchResult | undefined> {
    const sentAt = performance.now();
    stats.batches++;
    stats.batchesByKind[plan.kind] = (stats.batchesByKind[plan.kind] ?? 0) + 1;
    stats.calls += plan.toolUses.length;
    client.send({ type: 'batch', batch_id: batchId, tool_uses: plan.toolUses });
    let entry: { result: BatchResult; at: number };
    try {
      entry = await client.until(() => client.results.get(batchId)?.[0], batchTimeoutMs, `batch_result ${batchId}`);
    } catch (err) {
      stats.lost += plan.toolUses.length;
      problem(`${tag} ${batchId} (${plan.kind}): ${String(err)}`);
      // A batch that never got its result waited all that time: the fairness check sees it too.
      if (plan.kind === 'computer' || plan.kind === 'mixed')
        lane.push({ session: tag, sentAt, doneAt: performance.now() });
      return undefined;
    }
    const r = entry.result;
    const doneAt = entry.at;
    recordDuration(plan.kind, doneAt - sentAt);
    if (r.replayed) problem(`${tag} ${batchId}: a first send was answered as a replay`);
    // judge is synchronous, so no other session's batch can move the global counts in between.
    const before = stats.crossed + stats.lost + stats.duplicated;
    judge(tag, client, welcome, batchId, plan, r);
    wrongResults.set(r, stats.crossed + stats.lost + stats.duplicated - before);
    checkEvents(tag, client, batchId, plan.toolUses, r);
    const usesLane = plan.toolUses.some((tu) => tu.toolset_name === 'computer');
    if (usesLane && (plan.kind === 'computer' || plan.kind === 'mixed')) {
      stats.laneBatches++;
      lane.push({ session: tag, sentAt, doneAt });
      laneDone.get(tag)?.times.push(doneAt);
      const startedAt = client.firstStarted.get(batchId);
      if (startedAt !== undefined) stats.maxLaneWaitMs = Math.max(stats.maxLaneWaitMs, startedAt - sentAt);
    }
    const byToolset = (name: string): boolean =>
      plan.toolUses.some((tu, i) => tu.toolset_name === name && r.tool_results[i] && !r.tool_results[i]!.is_error);
    opts.onBatch?.({
      session: tag,
      batchId,
      kind: plan.kind,
      sentAt,
      doneAt,
      ok: r.failures.length === 0,
      failureTypes: r.failures.map((f) => f.error.type),
      browserOk: byToolset('browser'),
      computerOk: byToolset('computer'),
    });
    return r;
  }

  function recordDuration(kind: string, ms: number): void {
    durations.set(kind, [...(durations.get(kind) ?? []), ms]);
  }

  /** The API rules, one result per tool_use, the failures, and the content. */
  function judge(tag: string, client: LoadClient, welcome: Welcome, batchId: string, plan: Planned, r: BatchResult) {
    const ids = new Set(plan.toolUses.map((tu) => tu.id));
    const seen = new Map<string, number>();
    for (const res of r.tool_results) {
      if (!ids.has(res.tool_use_id)) {
        stats.crossed++;
        problem(`${tag} ${batchId}: a result for a foreign tool_use ${res.tool_use_id}`);
      }
      seen.set(res.tool_use_id, (seen.get(res.tool_use_id) ?? 0) + 1);
    }
    for (const tu of plan.toolUses) {
      const n = seen.get(tu.id) ?? 0;
      if (n === 0) {
        stats.lost++;
        problem(`${tag} ${batchId}: no result for ${tu.id}`);
      } else {
        stats.results++;
        if (n > 1) {
          stats.duplicated += n - 1;
          problem(`${tag} ${batchId}: ${n} results for ${tu.id}`);
        }
      }
    }
    try {
      assertApiValid(plan.toolUses, r);
    } catch (err) {
      stats.crossed++;
      problem(`${tag} ${batchId}: API rules: ${String(err).slice(0, 400)}`);
    }
    for (const f of r.failures) {
      const planned = plan.expect[f.index];
      if (planned?.kind === 'error' && planned.type === f.error.type) continue; // the malformed input's refusal
      if (expectFailure(f.error)) {
        stats.expectedFailures[f.error.type] = (stats.expectedFailures[f.error.type] ?? 0) + 1;
        continue;
      }
      stats.unexpectedFailures++;
      problem(`${tag} ${batchId}: unexpected failure of ${f.name}: ${f.error.type}: ${f.error.message.slice(0, 200)}`);
    }
    checkContent(tag, welcome.session_id, batchId, plan, r, welcome);
  }

  function plan(kind: BatchMix, tag: string, n: number, size: { width: number; height: number }): Planned {
    let i = 0;
    const id = (): string => `toolu_${tag}_${n}_${i++}`;
    const computer = (name: string, input: Record<string, unknown> = {}): ToolUse => ({
      type: 'tool_use',
      id: id(),
      name,
      toolset_name: 'computer',
      input,
    });
    const browser = (name: string, input: Record<string, unknown> = {}): ToolUse => ({
      type: 'tool_use',
      id: id(),
      name,
      toolset_name: 'browser',
      input,
    });
    const toolUses: ToolUse[] = [];
    const expect: Expectation[] = [];
    const add = (tu: ToolUse, e: Expectation): void => {
      toolUses.push(tu);
      expect.push(e);
    };
    const every = (k: number | undefined): boolean => (k ? n % k === k - 1 : false);
    const coordinate = nextCoordinate(size);
    if (kind === 'computer') {
      add(computer('mouse_move', { coordinate }), { kind: 'ack' });
      add(computer('cursor_position'), { kind: 'cursor', coordinate, moveIndex: 0 });
      if (every(opts.screenshotEvery)) add(computer('screenshot'), { kind: 'image' });
      if (n % 5 === 2) add(computer('zoom', { region: [0, 0, 200, 100] }), { kind: 'image' });
    } else if (kind === 'browser') {
      // Two pages of the session's own, one after the other: the second shows the cookie and the
      // localStorage value the first left in this session's context, and nobody else's.
      for (const page of [2 * n, 2 * n + 1]) {
        const url = `${opts.webOrigin}/s/${tag}/${page}`;
        add(browser('navigate', { url }), { kind: 'navigate', url, title: `load ${tag} ${page}` });
        add(browser('get_page_text'), { kind: 'page', tag, n: page });
      }
      if (n % 4 === 1) add(browser('list_tabs'), { kind: 'tabs', tag, atLeast: 1 });
      if (n % 4 === 3) add(browser('read_page', { filter: 'all' }), { kind: 'outline', tag, n: 2 * n + 1 });
      if (every(opts.browserScreenshotEvery)) add(browser('screenshot'), { kind: 'image' });
    } else {
      // Mixed batches hold the lane for the whole batch, browser calls included: a cheap browser
      // call keeps the lane moving (reading a page under 32 sessions takes seconds on two cores).
      add(computer('mouse_move', { coordinate }), { kind: 'ack' });
      add(browser('list_tabs'), { kind: 'tabs', tag, atLeast: 0 });
      add(computer('cursor_position'), { kind: 'cursor', coordinate, moveIndex: 0 });
    }
    return { kind, toolUses, expect };
  }

  /** One malformed input; returns whether it got its right answer. The connection must stay usable after it. */
  async function malformed(
    tag: string,
    client: LoadClient,
    welcome: Welcome,
    n: number,
    which: MalformedKind,
    failedBefore: Map<MalformedKind, number>,
  ): Promise<boolean> {
    stats.malformedSent++;
    stats.malformedByKind[which] = (stats.malformedByKind[which] ?? 0) + 1;
    const expectError = async (payload: string | Buffer, code: string): Promise<boolean> => {
      if (Buffer.isBuffer(payload)) client.ws.send(payload, { binary: true });
      else client.send(payload);
      try {
        const e = await client.nextError(30_000);
        if (e.code === code) return true;
        problem(`${tag} malformed ${which}: got error ${e.code}, want ${code}`);
      } catch (err) {
        problem(`${tag} malformed ${which}: ${String(err)}`);
      }
      return false;
    };
    const base = `toolu_${tag}_m${n}`;
    switch (which) {
      case 'not_json':
        return expectError('{"type": "batch", "batch_id": ', 'invalid_json');
      case 'unknown_field':
        return expectError(JSON.stringify({ type: 'ping', extra: n }), 'invalid_message');
      case 'bad_batch_id':
        return expectError(
          JSON.stringify({
            type: 'batch',
            batch_id: `bad id ${n}!`,
            tool_uses: [{ type: 'tool_use', id: `${base}_0`, name: 'screenshot', toolset_name: 'computer', input: {} }],
          }),
          'invalid_message',
        );
      case 'binary_frame':
        return expectError(Buffer.from([0xde, 0xad, 0xbe, 0xef]), 'binary_frame');
      case 'wrong_type_input':
      case 'unknown_member': {
        // The same failing call again in this session: from the third time on, loop detection
        // (src/executor/repeats.ts) adds its advice, with the count.
        const times = (failedBefore.get(which) ?? 0) + 1;
        failedBefore.set(which, times);
        const advice = times >= REPEAT_THRESHOLD ? `\n\n${REPEAT_ADVICE(times)}` : '';
        const exactly = (head: string, rest = ''): RegExp =>
          new RegExp(`^${escapeRegExp(head)}${rest}${escapeRegExp(advice)}$`, 's');
        const toolUses: ToolUse[] =
          which === 'wrong_type_input'
            ? [
                {
                  type: 'tool_use',
                  id: `${base}_0`,
                  name: 'mouse_move',
                  toolset_name: 'computer',
                  input: { coordinate: 'x' },
                },
                { type: 'tool_use', id: `${base}_1`, name: 'cursor_position', toolset_name: 'computer', input: {} },
              ]
            : [
                { type: 'tool_use', id: `${base}_0`, name: 'teleport', toolset_name: 'computer', input: {} },
                { type: 'tool_use', id: `${base}_1`, name: 'list_tabs', toolset_name: 'browser', input: {} },
              ];
        const expect: Expectation[] =
          which === 'wrong_type_input'
            ? [
                {
                  kind: 'error',
                  type: 'ToolInputError',
                  text: exactly("invalid input for computer member 'mouse_move'", '[^\\n]*'),
                },
                { kind: 'not_executed', text: COMPUTER_NOT_EXECUTED },
              ]
            : [
                {
                  kind: 'error',
                  type: 'ToolRefusedError',
                  text: exactly("Error: unknown computer toolset member 'teleport'"),
                },
                // The browser is not halted by a computer failure: list_tabs runs (and shows only our tabs).
                { kind: 'tabs', tag, atLeast: 0 },
              ];
        const r = await runBatch(tag, client, welcome, `${tag}-m${n}`, { kind: 'malformed', toolUses, expect });
        if (r && which === 'unknown_member' && r.tool_results[1]?.is_error) {
          const f = r.failures.find((x) => x.index === 1);
          if (!f || !expectFailure(f.error)) problem(`${tag} ${tag}-m${n}: list_tabs was halted by a computer error`);
        }
        // This batch's own count: the global one also moves with other sessions' batches while this one runs
        // (which made the soak report answered malformed inputs as unanswered).
        return r !== undefined && wrongResults.get(r) === 0;
      }
    }
  }

  /** Resends an earlier batch: it must be answered from the stored result, identical, with no new events. */
  async function replay(tag: string, client: LoadClient, batchId: string, toolUses: ToolUse[]): Promise<void> {
    stats.replays++;
    const original = client.results.get(batchId)?.[0]?.result;
    const eventsBefore = client.events.get(batchId)?.length ?? 0;
    client.send({ type: 'batch', batch_id: batchId, tool_uses: toolUses });
    let again: BatchResult;
    try {
      again = (await client.until(() => client.results.get(batchId)?.[1], batchTimeoutMs, `replay of ${batchId}`))
        .result;
    } catch (err) {
      stats.lost += toolUses.length;
      problem(`${tag} replay ${batchId}: ${String(err)}`);
      return;
    }
    const same =
      again.replayed &&
      original !== undefined &&
      JSON.stringify(again.tool_results) === JSON.stringify(original.tool_results) &&
      (client.events.get(batchId)?.length ?? 0) === eventsBefore;
    if (same) stats.replaysOk++;
    else problem(`${tag} replay ${batchId}: replayed=${again.replayed}, or results differ, or it ran again`);
  }

  /**
   * Sends a computer batch and drops the connection at once; resumes the session on a
   * new connection and sends the same batch again: its one result must come there
   * (replayed when the daemon had the first send; cancelled calls carry the cancelled text).
   */
  async function dropAndResume(tag: string, client: LoadClient, welcome: Welcome, n: number): Promise<LoadClient> {
    stats.dropResumes++;
    const p = plan('computer', tag, n, welcome.screenshot ?? { width: 1280, height: 800 });
    p.kind = 'resumed';
    const batchId = `${tag}-${n}`;
    client.send({ type: 'batch', batch_id: batchId, tool_uses: p.toolUses });
    client.terminate();
    const sentAt = performance.now();
    stats.batches++;
    stats.batchesByKind.resumed = (stats.batchesByKind.resumed ?? 0) + 1;
    stats.calls += p.toolUses.length;
    const lose = (what: string): void => {
      stats.lost += p.toolUses.length;
      problem(`${tag} ${batchId}: ${what}`);
    };
    let next: LoadClient;
    try {
      next = await LoadClient.open(opts.url, opts.token);
    } catch (err) {
      lose(`could not reconnect to resume: ${String(err)}`);
      return client;
    }
    try {
      const answer = await next.hello(welcome.session_id);
      if (answer.type !== 'welcome' || !answer.resumed) {
        lose(`resume refused: ${JSON.stringify(answer).slice(0, 300)}`);
        return next;
      }
      next.send({ type: 'batch', batch_id: batchId, tool_uses: p.toolUses });
      const { result: r, at } = await next.until(() => next.results.get(batchId)?.[0], batchTimeoutMs, 'resumed');
      recordDuration('resumed', at - sentAt);
      const before = stats.lost + stats.duplicated + stats.crossed + stats.unexpectedFailures;
      // Events went partly to the dropped connection: only the result is judged.
      judge(tag, next, answer, batchId, p, r);
      if (stats.lost + stats.duplicated + stats.crossed + stats.unexpectedFailures === before) stats.dropResumesOk++;
    } catch (err) {
      lose(String(err));
    }
    return next;
  }

  /** Resolves once every slot's first session has opened or failed to (for holdOpenUntilAllOpened). */
  let firstOpensSettled = 0;
  let allFirstOpened!: () => void;
  const allFirstOpenedPromise = new Promise<void>((resolve) => (allFirstOpened = resolve));
  const firstOpenSettled = (generation: number): void => {
    if (generation === 0 && ++firstOpensSettled === opts.sessions) allFirstOpened();
  };

  /** One session's life: open, run its rounds, close. Returns whether it ran all its rounds. */
  async function sessionLife(slot: number, generation: number): Promise<boolean> {
    const tag = `${label}${slot}g${generation}`;
    const opened = await openSession(tag);
    firstOpenSettled(generation);
    if (!opened) return false;
    let { client } = opened;
    const { welcome } = opened;
    stats.sessionsOpened++;
    open++;
    stats.maxConcurrentSessions = Math.max(stats.maxConcurrentSessions, open);
    const rounds = typeof opts.rounds === 'function' ? opts.rounds(slot) : opts.rounds;
    const size = welcome.screenshot ?? { width: 1280, height: 800 };
    // How many lane batches this life plans (for the spread figure of round-based runs).
    let plannedLane = 0;
    if (Number.isFinite(rounds))
      for (let k = 0; k < rounds; k++) if (kindOf(k, slot, opts.kinds) !== 'browser') plannedLane++;
    laneDone.set(tag, { times: [], planned: plannedLane });
    let finished = true;
    let malformedCount = 0;
    /** How often each failing malformed call has failed in this session so far (for loop detection's advice). */
    const failedBefore = new Map<MalformedKind, number>();
    /** Batch numbers of this session (ids, pages): increasing, so a page can tell an earlier one. */
    let seq = 0;
    try {
      for (let k = 0; k < rounds; k++) {
        if (stopped()) break; // the run's deadline: not a starved session
        if (opts.malformedEvery && k % opts.malformedEvery === opts.malformedEvery - 1) {
          const which = MALFORMED_KINDS[(slot + malformedCount++) % MALFORMED_KINDS.length]!;
          if (await malformed(tag, client, welcome, k, which, failedBefore)) stats.malformedAnswered++;
          if (client.closedWith) {
            problem(`${tag}: the connection closed after a malformed ${which}`);
            finished = false;
            break;
          }
        }
        const kind = kindOf(k, slot, opts.kinds);
        let r: BatchResult | undefined;
        let p: Planned;
        let batchId: string;
        let skipped = false;
        for (let attempt = 0; ; attempt++) {
          const n = seq++;
          p = plan(kind, tag, n, size);
          batchId = `${tag}-${n}`;
          if (kind === 'browser') await browserSlots.take();
          if (kind === 'browser' && stopped()) {
            // The deadline passed while this batch waited for a browser slot: it is not sent.
            browserSlots.give();
            skipped = true;
            break;
          }
          try {
            r = await runBatch(tag, client, welcome, batchId, p);
          } finally {
            if (kind === 'browser') browserSlots.give();
          }
          // A navigation that failed in an expected way (a fault, a starved machine) is tried again in a new
          // batch, so that the page checks run.
          const navFailed = kind === 'browser' && r !== undefined && r.failures.some((f) => f.name === 'navigate');
          if (!navFailed || attempt >= (opts.browserRetries ?? 0) || stopped()) break;
          stats.browserRetries++;
        }
        if (skipped) break;
        if (!r) {
          finished = false;
          break;
        }
        if (opts.replayEvery && k % opts.replayEvery === opts.replayEvery - 1)
          await replay(tag, client, batchId, p.toolUses);
      }
      if (finished && opts.dropResumeEvery && (slot + generation) % opts.dropResumeEvery === 0 && !stopped()) {
        client = await dropAndResume(tag, client, welcome, seq++);
      }
      // Anything still in flight (a duplicate result, a stray event) arrives before the pong.
      if (!client.closedWith) await client.flush().catch((err: unknown) => problem(`${tag}: no pong: ${String(err)}`));
      for (const [id, list] of client.results) {
        const firsts = list.filter((x) => !x.result.replayed).length;
        if (firsts > 1) {
          stats.duplicated += firsts - 1;
          problem(`${tag}: ${firsts} batch_results for ${id}`);
        }
      }
      for (const id of client.events.keys()) {
        if (!client.results.has(id)) {
          stats.eventProblems++;
          problem(`${tag}: events for ${id} but no batch_result on this connection`);
        }
      }
      if (client.errors.length) {
        stats.protocolProblems += client.errors.length;
        problem(`${tag}: unasked errors: ${JSON.stringify(client.errors).slice(0, 300)}`);
      }
      if (client.invalid.length) {
        stats.protocolProblems += client.invalid.length;
        problem(`${tag}: messages outside the protocol: ${client.invalid[0]}`);
      }
      if (opts.holdOpenUntilAllOpened && generation === 0 && opts.durationMs === undefined) await allFirstOpenedPromise;
    } finally {
      client.close();
      open--;
    }
    return finished;
  }

  async function slot(index: number): Promise<void> {
    if (opts.rampUpMs) await delay((index * opts.rampUpMs) / opts.sessions);
    for (let generation = 0; ; generation++) {
      const ok = await sessionLife(index, generation);
      if (!ok) stats.unfinishedSessions++;
      if (opts.durationMs === undefined || stopped()) return;
      if (!ok) await delay(1_000);
    }
  }

  await Promise.all(Array.from({ length: opts.sessions }, (_, i) => slot(i)));

  stats.durationMs = Math.round(performance.now() - started);
  stats.fairness = laneOvertakes(lane);
  for (const [kind, list] of durations) stats.batchMs[kind] = quantiles(list);
  for (const [key, list] of [...callDurations].sort()) stats.callMs[key] = quantiles(list);
  const lives = [...laneDone.values()].filter((l) => l.planned > 0 && l.times.length === l.planned);
  if (opts.durationMs === undefined && lives.length > 1) {
    const firstFinish = Math.min(...lives.map((l) => Math.max(...l.times)));
    const counts = lives.map((l) => l.times.filter((t) => t <= firstFinish).length);
    stats.spreadAtFirstFinish = Math.max(...counts) - Math.min(...counts);
  }
  return stats;
}

/** The figures that must be zero for a run to pass. */
export type Violations = Record<
  | 'lost'
  | 'duplicated'
  | 'crossed'
  | 'unexpectedFailures'
  | 'eventProblems'
  | 'protocolProblems'
  | 'malformedUnanswered'
  | 'replaysWrong'
  | 'fairnessViolations',
  number
>;

export function violations(stats: LoadStats): Violations {
  return {
    lost: stats.lost,
    duplicated: stats.duplicated,
    crossed: stats.crossed,
    unexpectedFailures: stats.unexpectedFailures,
    eventProblems: stats.eventProblems,
    protocolProblems: stats.protocolProblems,
    malformedUnanswered: stats.malformedSent - stats.malformedAnswered,
    replaysWrong: stats.replays - stats.replaysOk,
    fairnessViolations: stats.fairness.violations,
  };
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
