/**
 * The soak's verdict (bench/soak.ts): from what the run recorded
 * (bench/soak-record.ts), the daemon's RSS and fds over the thirds of the run
 * after warm-up and the RSS trend, the screenshots directory against its
 * bounds, results lost, duplicated or crossed, failures the faults do not
 * explain, recovery, the result cache probe and the shutdown. Writes
 * soak-results.json in the cwd and prints the summary table and each check.
 */
import { writeFile } from 'node:fs/promises';
import type { DaemonProcess } from '../testkit/daemon-process.ts';
import { violations, type LoadStats } from '../testkit/load.ts';
import {
  batchLog,
  DURATION_MS,
  elapsed,
  extra,
  FAULT_SHADOW_MS,
  faults,
  FD_GROWTH_MAX,
  mb,
  MINUTES,
  noRecovery,
  problems,
  RESULT_CACHE,
  RETENTION,
  RSS_GROWTH_MAX,
  RSS_TREND_MAX,
  RSS_TREND_R2,
  samples,
  SESSIONS,
  WARMUP_MS,
} from './soak-record.ts';

/** What the run leaves for its verdict. */
export interface SoakOutcome {
  stats: LoadStats;
  /** The result cache probe (bench/soak-faults.ts cacheProbe). */
  cache: { ok: boolean; detail: string };
  shutdown: { code: number | null; signal: NodeJS.Signals | null; ms: number; clean: boolean };
  diedEarly: boolean;
  /** What seeding left in the screenshots directory before the run. */
  seeded: { files: number; bytes: number };
  daemon: DaemonProcess | undefined;
}

/** Least-squares line through (x, y) points: its slope, and r², the share of y's variance it explains. */
function linearTrend(points: [number, number][]): { slope: number; r2: number } {
  const n = points.length;
  if (n < 2) return { slope: 0, r2: 0 };
  const mx = mean(points.map(([x]) => x));
  const my = mean(points.map(([, y]) => y));
  let sxx = 0;
  let sxy = 0;
  let syy = 0;
  for (const [x, y] of points) {
    sxx += (x - mx) ** 2;
    sxy += (x - mx) * (y - my);
    syy += (y - my) ** 2;
  }
  if (sxx === 0) return { slope: 0, r2: 0 };
  return { slope: sxy / sxx, r2: syy === 0 ? 0 : (sxy * sxy) / (sxx * syy) };
}

function mean(xs: number[]): number {
  return xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
}
function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? NaN;
}

/** Figures and verdicts: writes soak-results.json and prints the summary; true when no check failed. */
export async function verdict(outcome: SoakOutcome): Promise<boolean> {
  const { cache, shutdown, diedEarly, seeded, daemon } = outcome;
  const s = outcome.stats;
  // Warm-up ends when every slot has had a batch answered (all sessions and browser contexts exist).
  const firstAnswer = new Map<string, number>();
  for (const b of batchLog) {
    const slot = /^S(\d+)g/.exec(b.record.session)?.[1] ?? '';
    if (!firstAnswer.has(slot)) firstAnswer.set(slot, b.at);
  }
  // (Never, when some slot got no answer at all: then nothing is compared.)
  const warmupEnd = firstAnswer.size >= SESSIONS ? Math.max(WARMUP_MS, ...firstAnswer.values()) : Infinity;
  const load = samples.filter((x) => x.t >= warmupEnd && x.t <= DURATION_MS);
  const third = Math.max(1, Math.floor(load.length / 3));
  const first = load.slice(0, third);
  const last = load.slice(-third);
  const middle = load.slice(third, load.length - third);
  const rss = {
    start: mean(first.map((x) => x.rssBytes)),
    middle: mean(middle.map((x) => x.rssBytes)),
    end: mean(last.map((x) => x.rssBytes)),
  };
  const fds = {
    start: median(first.map((x) => x.fds)),
    middle: median(middle.map((x) => x.fds)),
    end: median(last.map((x) => x.fds)),
  };
  const children = {
    start: mean(first.map((x) => x.childrenPssBytes)),
    end: mean(last.map((x) => x.childrenPssBytes)),
  };
  const rssGrowth = rss.end / rss.start - 1;
  const trend = linearTrend(load.map((x) => [x.t, x.rssBytes]));
  const rssTrend = load.length > 1 ? (trend.slope * (load.at(-1)!.t - load[0]!.t)) / load[0]!.rssBytes : 0;
  const shotSlack = SESSIONS + 4;
  const maxShot = Math.max(s.maxScreenshotBytes, 1024 * 1024);
  const shotMax = {
    files: Math.max(0, ...samples.map((x) => x.shotFiles)),
    bytes: Math.max(0, ...samples.map((x) => x.shotBytes)),
  };
  const shotEnd = samples.at(-1) ?? { shotFiles: 0, shotBytes: 0, shotDirs: 0 };
  const faultCounts: Record<string, number> = {};
  for (const f of faults) faultCounts[f.kind] = (faultCounts[f.kind] ?? 0) + 1;
  const unexplained = batchLog.filter(
    (b) =>
      !b.record.ok &&
      b.record.kind !== 'malformed' &&
      !faults.some((f) => b.at >= f.at && b.at - f.at <= FAULT_SHADOW_MS),
  );

  const v = violations(s);
  const totals = {
    lost: s.lost + extra.lost,
    duplicated: s.duplicated + extra.duplicated,
    crossed: s.crossed + extra.crossed,
  };
  const attacks = faults.filter((f) => f.kind === 'attack');
  // Too few samples after warm-up (a quick SOAK_MINUTES=0.5 run) to compare: those checks are skipped.
  const enough = load.length >= 6;
  const checks: [string, boolean | 'skip', string][] = [
    ['no result lost', totals.lost === 0, String(totals.lost)],
    ['no result duplicated', totals.duplicated === 0, String(totals.duplicated)],
    ['no result crossed', totals.crossed === 0, String(totals.crossed)],
    ['no unexpected failure', v.unexpectedFailures === 0, String(v.unexpectedFailures)],
    [
      'events and protocol well-formed',
      v.eventProblems + v.protocolProblems === 0,
      `${v.eventProblems} + ${v.protocolProblems}`,
    ],
    [
      'every malformed input answered',
      v.malformedUnanswered === 0 && extra.malformedAnswered === extra.malformedSent,
      `${s.malformedAnswered + extra.malformedAnswered}/${s.malformedSent + extra.malformedSent}`,
    ],
    ['replays answered from the store', v.replaysWrong === 0, `${s.replaysOk}/${s.replays}`],
    ['dropped connections resumed', s.dropResumesOk === s.dropResumes, `${s.dropResumesOk}/${s.dropResumes}`],
    [
      'lane first come, first served',
      v.fairnessViolations === 0,
      `max ${s.fairness.max} ≤ 3, ${s.fairness.violations} violations`,
    ],
    ['no session broken', s.unfinishedSessions === 0, String(s.unfinishedSessions)],
    [
      'containment held: attacks refused, private server silent',
      attacks.length > 0 ? attacks.every((f) => f.hit) : 'skip',
      attacks.length > 0
        ? `${attacks.filter((f) => f.hit).length}/${attacks.length} rounds, ${attacks.reduce((n, f) => n + f.count, 0)} attacks`
        : 'no attack round ran (run longer)',
    ],
    [
      'every fault recovered',
      faults.every((f) => noRecovery(f) || f.recoveredMs !== undefined),
      faults
        .map((f) => (noRecovery(f) ? '' : `${f.kind}:${f.recoveredMs ?? 'NO'}`))
        .filter(Boolean)
        .join(' '),
    ],
    [
      `daemon RSS growth ≤ ${RSS_GROWTH_MAX * 100}%`,
      enough ? rssGrowth <= RSS_GROWTH_MAX : 'skip',
      enough ? `${(rssGrowth * 100).toFixed(1)}%` : `only ${load.length} samples after warm-up`,
    ],
    [
      `daemon RSS trend ≤ ${RSS_TREND_MAX * 100}% (or r² < ${RSS_TREND_R2})`,
      enough ? rssTrend <= RSS_TREND_MAX || trend.r2 < RSS_TREND_R2 : 'skip',
      enough
        ? `${(rssTrend * 100).toFixed(1)}% over ${((load.at(-1)!.t - load[0]!.t) / 60_000).toFixed(1)} min, r² ${trend.r2.toFixed(2)}`
        : `only ${load.length} samples after warm-up`,
    ],
    [
      `daemon fds growth ≤ ${FD_GROWTH_MAX}`,
      enough ? fds.end - fds.start <= FD_GROWTH_MAX : 'skip',
      enough ? `${fds.start} → ${fds.end}` : `only ${load.length} samples after warm-up`,
    ],
    [
      'screenshots dir within bounds during the run',
      shotMax.files <= RETENTION.maxFiles + shotSlack && shotMax.bytes <= RETENTION.maxBytes + shotSlack * maxShot,
      `max ${shotMax.files} files, ${mb(shotMax.bytes)} (bounds ${RETENTION.maxFiles}, ${mb(RETENTION.maxBytes)}, + ${shotSlack} writes in flight)`,
    ],
    [
      'screenshots dir within bounds at rest',
      shotEnd.shotFiles <= RETENTION.maxFiles && shotEnd.shotBytes <= RETENTION.maxBytes,
      `${shotEnd.shotFiles} files, ${mb(shotEnd.shotBytes)}`,
    ],
    ['result cache within its bound', cache.ok, cache.detail],
    ['no other problem in the soak itself', problems.length === 0, `${problems.length}`],
    [
      'daemon alive throughout, clean shutdown',
      !diedEarly && shutdown.clean,
      `exit ${shutdown.code ?? shutdown.signal} in ${shutdown.ms} ms`,
    ],
  ];
  const passed = checks.every(([, ok]) => ok !== false);

  const figures = {
    duration_s: Math.round(elapsed() / 1000),
    load_s: Math.round(s.durationMs / 1000),
    sessions: {
      slots: SESSIONS,
      max_concurrent: s.maxConcurrentSessions,
      total: s.sessionsOpened,
      refusals_at_capacity: s.sessionRefusals,
    },
    batches: s.batches + extra.batches,
    batches_by_kind: { ...s.batchesByKind, fault_and_probe: extra.batches },
    calls: s.calls + extra.calls,
    results: s.results + extra.results,
    ...totals,
    faults_injected: faultCounts,
    faults,
    malformed_inputs_tried: s.malformedSent + extra.malformedSent,
    malformed_answered: s.malformedAnswered + extra.malformedAnswered,
    replays: s.replays,
    drop_resumes: s.dropResumes,
    expected_failures: s.expectedFailures,
    failed_batches_outside_fault_windows: unexplained.length,
    content_checks: s.contentChecks,
    isolation_checks: s.isolationChecks,
    lane: { batches: s.laneBatches, max_wait_ms: Math.round(s.maxLaneWaitMs), fairness: s.fairness },
    batch_ms: s.batchMs,
    call_ms: s.callMs,
    warmup_s: Number.isFinite(warmupEnd) ? Math.round(warmupEnd / 1000) : null,
    daemon_rss: {
      start: rss.start,
      middle: rss.middle,
      end: rss.end,
      growth: rssGrowth,
      trend: rssTrend,
      r2: trend.r2,
    },
    daemon_fds: { ...fds, growth: fds.end - fds.start },
    children_pss: children,
    screenshots: {
      bounds: RETENTION,
      seeded,
      max_files: shotMax.files,
      max_bytes: shotMax.bytes,
      end_files: shotEnd.shotFiles,
      end_bytes: shotEnd.shotBytes,
      end_dirs: shotEnd.shotDirs,
      written_by_load: s.screenshotsWritten,
    },
    result_cache: { bounds: RESULT_CACHE, probe: cache },
    shutdown,
    daemon_log: daemon?.logCounts,
    daemon_warnings: Object.fromEntries([...(daemon?.warnings ?? [])].sort((a, b) => b[1] - a[1]).slice(0, 12)),
    samples,
    checks: checks.map(([name, ok, detail]) => ({ name, ok, detail })),
    problems: [...s.problems, ...problems],
    passed,
  };
  await writeFile('soak-results.json', `${JSON.stringify(figures, null, 2)}\n`);

  const row = (a: string, b: string): string => `  ${a.padEnd(44)} ${b}`;
  const lines = [
    '',
    `deskbatch soak: ${MINUTES} min of load (${figures.duration_s} s in all)`,
    row(
      'sessions held (max at once / total)',
      `${s.maxConcurrentSessions} / ${s.sessionsOpened} (${s.sessionRefusals} refused at capacity, retried)`,
    ),
    row(
      'batches run',
      `${figures.batches} (${Object.entries(figures.batches_by_kind)
        .map(([k, n]) => `${k} ${n}`)
        .join(', ')})`,
    ),
    row('calls / results', `${figures.calls} / ${figures.results}`),
    row(
      'faults injected',
      Object.entries(faultCounts)
        .map(([k, n]) => `${k} ${n}`)
        .join(', ') || 'none',
    ),
    row('malformed inputs tried / answered', `${figures.malformed_inputs_tried} / ${figures.malformed_answered}`),
    row('results lost / duplicated / crossed', `${totals.lost} / ${totals.duplicated} / ${totals.crossed}`),
    row('expected failures (retryable, by type)', JSON.stringify(s.expectedFailures)),
    row('failed batches outside fault windows', String(unexplained.length)),
    row('lane batches, max wait', `${s.laneBatches}, ${Math.round(s.maxLaneWaitMs)} ms`),
    row(
      'warm-up (not compared)',
      Number.isFinite(warmupEnd)
        ? `${Math.round(warmupEnd / 1000)} s; ${load.length} samples compared`
        : 'never over: some session slot got no answer in the run',
    ),
    row(
      'daemon RSS start / middle / end',
      `${mb(rss.start)} / ${mb(rss.middle)} / ${mb(rss.end)} (${(rssGrowth * 100).toFixed(1)}%)`,
    ),
    row('daemon fds start / middle / end', `${fds.start} / ${fds.middle} / ${fds.end}`),
    row('children PSS start / end', `${mb(children.start)} / ${mb(children.end)}`),
    row(
      'screenshots dir max files / bytes',
      `${shotMax.files} / ${mb(shotMax.bytes)} (bounds ${RETENTION.maxFiles} / ${mb(RETENTION.maxBytes)})`,
    ),
    row('result cache probe', cache.detail),
    row('shutdown', `exit ${shutdown.code ?? shutdown.signal} in ${shutdown.ms} ms`),
    '',
    ...checks.map(
      ([name, ok, detail]) => `  ${ok === 'skip' ? 'SKIP' : ok ? 'PASS' : 'FAIL'}  ${name.padEnd(44)} ${detail}`,
    ),
    '',
    ...figures.problems.slice(0, 30).map((p) => `  problem: ${p}`),
    `${passed ? 'PASSED' : 'FAILED'}; figures in soak-results.json`,
  ];
  console.log(lines.join('\n'));
  return passed;
}
