/**
 * The load harness (issue 4, promise 4 "Load holds"), shared by the short run
 * in test/load.test.ts (every CI run) and the long one in bench/soak.ts
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
 *
 * The parts, under testkit/load/: a driver per batch kind (computer.ts,
 * browser.ts, mixed.ts, malformed.ts, and resumed.ts for replays and dropped
 * connections), the one checker (check.ts) every batch passes through, the
 * client (client.ts), the marker pages (marker-server.ts) and the lane's
 * fairness (fairness.ts); this file runs the sessions.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { performance } from 'node:perf_hooks';
import type { BatchResult, Welcome } from '../src/base/protocol.ts';
import { runBatch } from './load/batch.ts';
import { planBrowser } from './load/browser.ts';
import { LoadClient } from './load/client.ts';
import { planComputer } from './load/computer.ts';
import { laneOvertakes, type LaneRecord } from './load/fairness.ts';
import { malformed, MALFORMED_KINDS, type MalformedKind } from './load/malformed.ts';
import { planMixed } from './load/mixed.ts';
import { kindOf } from './load/plan.ts';
import { dropAndResume, replay } from './load/resumed.ts';
import { quantiles, type BatchMix, type LoadOptions, type LoadRun, type LoadStats, type Planned } from './load/run.ts';

export { LoadClient } from './load/client.ts';
export { FIFO_OVERTAKE_BOUND, laneOvertakes, type LaneRecord, type OvertakeReport } from './load/fairness.ts';
export { startMarkerServer, type MarkerServer } from './load/marker-server.ts';
export { kindOf, nextCoordinate } from './load/plan.ts';
export type { BatchKind, BatchMix, BatchRecord, LoadOptions, LoadStats, Quantiles } from './load/run.ts';

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
  const laneDone = new Map<string, { times: number[]; planned: number }>();
  let open = 0;
  const browserSlots = semaphore(opts.browserConcurrency ?? Infinity);
  const stopped = (): boolean => opts.signal?.aborted === true || performance.now() >= deadline;

  const problem = (what: string): void => {
    if (stats.problems.length < 60) stats.problems.push(what);
  };
  const run: LoadRun = {
    opts,
    stats,
    batchTimeoutMs,
    expectFailure,
    problem,
    recordDuration: (kind, ms) => durations.set(kind, [...(durations.get(kind) ?? []), ms]),
    callDurations,
    lane,
    laneDone,
    wrongResults: new WeakMap(),
  };
  const plan = (kind: BatchMix, tag: string, n: number, size: { width: number; height: number }): Planned =>
    kind === 'computer'
      ? planComputer(opts, tag, n, size)
      : kind === 'browser'
        ? planBrowser(opts, tag, n)
        : planMixed(tag, n, size);

  /** Opens a connection and a session, retrying while the daemon is at capacity. */
  async function openSession(tag: string): Promise<{ client: LoadClient; welcome: Welcome } | undefined> {
    const opened = await LoadClient.openWhenFree(opts.url, opts.token, {
      signal: opts.signal,
      onRefused: () => stats.sessionRefusals++,
    });
    if (opened && 'problem' in opened) {
      problem(`${tag}: ${opened.problem}`);
      return undefined;
    }
    return opened;
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
          if (await malformed(run, tag, client, welcome, k, which, failedBefore)) stats.malformedAnswered++;
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
            r = await runBatch(run, tag, client, welcome, batchId, p);
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
          await replay(run, tag, client, batchId, p.toolUses);
      }
      if (finished && opts.dropResumeEvery && (slot + generation) % opts.dropResumeEvery === 0 && !stopped()) {
        client = await dropAndResume(run, tag, client, welcome, seq++);
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
