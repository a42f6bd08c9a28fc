/**
 * `npm run bench` section `sandbox` (issue 30): what a desktop's sandbox
 * (src/desktop-pool/sandbox.ts) costs, before and after in one run. Runnable
 * alone: `BENCH_ONLY=sandbox npm run bench` or `node --import tsx bench/sandbox.ts`.
 *
 * Two pool daemons, each its own process started as an operator starts it
 * (bench/density-daemon.ts: `--desktops 2 --warm 1`, headful browser, PNG,
 * 1280x800, no DISPLAY), one with `--sandbox off` and one with
 * `--sandbox auto`, side by side; every sample alternates between them (the
 * order flips sample by sample), so the load of this shared machine falls on
 * both alike. Measured, each beside the other:
 *
 * - cold desktop start: the daemon's own time to build one desktop
 *   (`deskbatch_desktop_start_seconds`, its _sum before and after each fresh
 *   start: the first, and each one that replaces a leased desktop); and, as
 *   information, one sample of daemon spawn → its first desktop warm;
 * - warm lease: hello → welcome with a warm desktop waiting (the first lease
 *   of each daemon is not timed);
 * - a one-call `left_click` batch and a one-call `screenshot` batch, medians
 *   of SANDBOX_CALLS samples each (interleaved: off click, on click, off shot,
 *   on shot, the order rotating);
 * - PSS of one warm desktop at rest, no session: every process in the
 *   daemon's process tree but the daemon itself (with one desktop that is the
 *   desktop: Xvfb, openbox, worker, Chromium, and with the sandbox also
 *   bubblewrap, its holder and the nsenter/setpriv parents), plus Chromium's
 *   crashpad handlers that left the tree (found by their XAUTHORITY, as
 *   bench/density-procs.ts does); the median of three readings. The daemon's
 *   own figure (`deskbatch_desktop_memory_bytes`) is shown beside it.
 *
 * Prints one row per figure: off, on, their ratio (or difference), the
 * target, and whether it was met; writes `sandbox` into bench/results.json.
 */
import { readdir, readFile } from 'node:fs/promises';
import { writeResultsSection } from './results-file.ts';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { processTree, pssBytes, treePssBytes } from '../src/ops/memory.ts';
import type { Comparison } from './baseline.ts';
import { loadComparison, measuredOf, recordIfAsked } from './baseline-file.ts';
import { imageBytes, nextId, type BenchClient } from './client.ts';
import { computer, openSession } from './density-agents.ts';
import {
  DENSITY_SIZE,
  desktopMemoryMetric,
  hasWarm,
  metric,
  metrics,
  MIB,
  startDaemon,
  stopAll,
  waitUntil,
  waitWarm,
  WARM_TIMEOUT_MS,
  type Daemon,
} from './density-daemon.ts';
import { environ } from './density-procs.ts';
import { series, type Series } from './density-report.ts';
import { machine, sourceState } from './machine.ts';
import { interleave, median, positiveInt, progress, round2 } from './stats.ts';

/** Warm leases per mode (each also gives a fresh desktop start). */
const LEASES = positiveInt(process.env.SANDBOX_LEASES, 5);
/** Timed one-call batches of each kind per mode. */
const CALLS = positiveInt(process.env.SANDBOX_CALLS, 24);
const CALL_WARMUP = 3;
/** After the desktop is warm, before its memory is read: Chromium's own start-up work settles. */
const SETTLE_MS = 3_000;

const MODES = ['off', 'auto'] as const;
type Mode = (typeof MODES)[number];

export type SandboxSeries = Series;

export interface SandboxRow {
  /** A stable key (the name carries sample counts), `sandbox.…`: its previous figure's in bench/baseline.json. */
  id: string;
  name: string;
  unit: 'ms' | 'MiB' | 'KiB' | 'procs' | '';
  off: number;
  on: number;
  /** on / off */
  ratio: number;
  /** on − off */
  delta: number;
  target?: string;
  met?: boolean;
}

export interface SandboxReport {
  machine: ReturnType<typeof machine>;
  source: Awaited<ReturnType<typeof sourceState>>;
  settings: Record<string, unknown>;
  series: Record<string, Record<Mode, SandboxSeries>>;
  rows: SandboxRow[];
  duration_s: number;
}

interface Counts {
  startSumMs: number;
  starts: number;
  recycles: number;
  warm: number;
}

async function counts(d: Daemon): Promise<Counts> {
  const text = await metrics(d);
  return {
    startSumMs: metric(text, 'deskbatch_desktop_start_seconds_sum') * 1000,
    starts: metric(text, 'deskbatch_desktop_start_seconds_count'),
    recycles: metric(text, 'deskbatch_desktop_recycle_seconds_count'),
    warm: metric(text, 'deskbatch_desktops{state="warm"}'),
  };
}

const CRASHPAD = /(^|\/)chrome_crashpad_handler(\s|$)/;

/**
 * PSS (MiB) of everything in `d`'s process tree but the daemon itself, and the crashpad handlers that left
 * it (reparented to init) with an XAUTHORITY one of its processes has.
 */
async function desktopPss(d: Daemon): Promise<{ mib: number; processes: number; sandboxed: boolean }> {
  const tree = (await processTree([d.proc.pid])).filter((pid) => pid !== d.proc.pid);
  const inTree = new Set(tree);
  const xauth = new Set<string>();
  for (const pid of tree) {
    const x = (await environ(pid)).XAUTHORITY;
    if (x) xauth.add(x);
  }
  const extra: number[] = [];
  for (const e of await readdir('/proc')) {
    if (!/^\d+$/.test(e) || inTree.has(Number(e))) continue;
    const cmd = (await readFile(`/proc/${e}/cmdline`, 'utf8').catch(() => '')).split('\0').join(' ');
    if (!CRASHPAD.test(cmd)) continue;
    const x = (await environ(Number(e))).XAUTHORITY;
    if (x && xauth.has(x)) extra.push(Number(e));
  }
  const bytes = (await treePssBytes(tree)) + (await Promise.all(extra.map(pssBytes))).reduce((a, b) => a + b, 0);
  // Whether the desktop really runs in a sandbox: bubblewrap's holder is in the daemon's tree.
  let sandboxed = false;
  for (const pid of tree) {
    const cmd = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (/(^|\/)bwrap\0/.test(cmd)) sandboxed = true;
  }
  return { mib: bytes / MIB, processes: tree.length + extra.length, sandboxed };
}

/** One warm lease on `d`: hello → welcome (ms), then the session ends; waits until its fresh desktop is warm. */
async function leaseSample(d: Daemon): Promise<{ leaseMs: number; startMs: number }> {
  await waitUntil(`${d.label} to hold a warm desktop`, () => hasWarm(d, 1), WARM_TIMEOUT_MS);
  const c0 = await counts(d);
  const { client, welcome, ms } = await openSession(d);
  try {
    if (welcome.desktop?.mode !== 'pool') throw new Error(`${d.label}: welcome.desktop is not a pool's`);
  } finally {
    client.close();
  }
  // The lease took the warm desktop: the pool starts a fresh one (to keep one warm) and tears the leased one down.
  let c1 = c0;
  await waitUntil(
    `${d.label}: a fresh desktop warm and the leased one torn down`,
    async () => {
      c1 = await counts(d);
      return c1.starts >= c0.starts + 1 && c1.recycles >= c0.recycles + 1 && c1.warm >= 1;
    },
    WARM_TIMEOUT_MS,
    // /metrics is rate limited: every 50 ms is too often over a slow start.
    200,
  );
  if (c1.starts !== c0.starts + 1)
    throw new Error(`${d.label}: expected one fresh start per lease, saw ${c1.starts - c0.starts}`);
  return { leaseMs: ms, startMs: c1.startSumMs - c0.startSumMs };
}

const POINTS = [
  [200, 600],
  [260, 640],
] as const;

/** A one-call batch on `client`, paced (untimed) under the daemon's rate limit; returns its round trip (ms). */
async function oneCall(
  client: BenchClient,
  name: string,
  input: Record<string, unknown> = {},
  image?: (bytes: number) => void,
): Promise<number> {
  await client.paceFor(1);
  const reply = await client.batch(nextId('sb'), [computer(name, input)]);
  image?.(imageBytes(reply.message));
  return reply.ms;
}

function row(
  id: string,
  name: string,
  unit: SandboxRow['unit'],
  off: number,
  on: number,
  target?: {
    text: string;
    ok: (r: { off: number; on: number; ratio: number; delta: number }) => boolean;
  },
): SandboxRow {
  const r = { off: round2(off), on: round2(on), ratio: round2(on / off), delta: round2(on - off) };
  const finite = Number.isFinite(off) && Number.isFinite(on);
  return {
    id: `sandbox.${id}`,
    name,
    unit,
    ...r,
    ...(target
      ? { target: target.text, ...(finite ? { met: target.ok({ off, on, ratio: on / off, delta: on - off }) } : {}) }
      : {}),
  };
}

/** The rows; beside `on`, its previous figure and the change (bench/baseline.ts). */
export function sandboxTable(r: SandboxReport, previous: Comparison): string {
  const w = Math.max(...r.rows.map((x) => x.name.length), 6);
  const cell = (v: number, unit: string): string => (Number.isFinite(v) ? `${v.toFixed(2)} ${unit}` : 'n/a');
  const head =
    `${'figure'.padEnd(w)}  ${'off'.padStart(12)}  ${'on (auto)'.padStart(12)}  ${'prev on'.padStart(9)}  ` +
    `${'vs prev'.padStart(12)}  ${'on/off'.padStart(7)}  ${'on−off'.padStart(12)}  ${'target'.padEnd(22)}  met`;
  const lines = [
    `Sandbox: off beside auto, in one run (pool --desktops 2 --warm 1, ${r.settings.display} png, headful; ` +
      `${r.machine.cpus} CPUs, load average ${r.machine.loadavg_start.join(' ')} → ${r.machine.loadavg_end.join(' ')})`,
    head,
    '-'.repeat(head.length),
  ];
  for (const x of r.rows) {
    const met = x.target === undefined ? '' : x.met === undefined ? 'n/a' : x.met ? 'yes' : 'NO  <-- target not met';
    const c = previous.sandbox(x);
    lines.push(
      `${x.name.padEnd(w)}  ${cell(x.off, x.unit).padStart(12)}  ${cell(x.on, x.unit).padStart(12)}  ` +
        `${c.prev.padStart(9)}  ${c.change.padStart(12)}  ` +
        `${(Number.isFinite(x.ratio) ? `${x.ratio.toFixed(3)}x` : 'n/a').padStart(7)}  ` +
        `${cell(x.delta, x.unit).padStart(12)}  ${(x.target ?? '(info)').padEnd(22)}  ${met}`.trimEnd(),
    );
  }
  return lines.join('\n');
}

export async function sandboxRun(): Promise<SandboxReport> {
  const started = performance.now();
  const load = os.loadavg();
  const daemons = {} as Record<Mode, Daemon>;
  const spawnToWarm = {} as Record<Mode, number>;
  /** Desktop starts that failed (and were retried by the pool), over the whole run. */
  const failedStarts = { off: NaN, auto: NaN };
  const s = {
    start: { off: [] as number[], auto: [] as number[] },
    lease: { off: [] as number[], auto: [] as number[] },
    pss: { off: [] as number[], auto: [] as number[] },
    metricPss: { off: [] as number[], auto: [] as number[] },
    procs: { off: [] as number[], auto: [] as number[] },
    image: { off: 0, auto: 0 },
  };
  const onSignal = (signal: NodeJS.Signals): void => {
    progress(`${signal}: stopping every daemon started`);
    void stopAll().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let calls: Record<string, number[]> = {};
  try {
    // One after the other, so each first desktop starts on a machine not also starting the other's.
    for (const mode of MODES) {
      progress(`sandbox: starting a pool daemon with --sandbox ${mode} (--desktops 2 --warm 1)`);
      const t0 = performance.now();
      const d = await startDaemon(`sandbox ${mode}`, ['--desktops', '2', '--warm', '1', '--sandbox', mode]);
      daemons[mode] = d;
      await waitWarm(d, 1);
      spawnToWarm[mode] = performance.now() - t0;
      const c = await counts(d);
      if (c.starts !== 1) throw new Error(`${d.label}: expected one desktop started, saw ${c.starts}`);
      s.start[mode].push(c.startSumMs);
      progress(
        `sandbox ${mode}: spawn → warm ${spawnToWarm[mode].toFixed(0)} ms, desktop start ${c.startSumMs.toFixed(0)} ms`,
      );
    }
    await sleep(SETTLE_MS);
    for (let i = 0; i < 3; i++) {
      for (const mode of i % 2 ? [...MODES].reverse() : MODES) {
        const p = await desktopPss(daemons[mode]);
        if (p.sandboxed !== (mode === 'auto')) {
          throw new Error(
            `sandbox ${mode}: bubblewrap ${p.sandboxed ? 'found' : 'not found'} in the daemon's process tree`,
          );
        }
        s.pss[mode].push(p.mib);
        s.procs[mode].push(p.processes);
      }
      await sleep(500);
    }
    // The daemon's own figure is cached for 10 s (src/ops/metrics.ts, from its first scrape, when the desktop
    // was still starting): wait until it is stale, then read it once, fresh.
    const stale = Math.max(...MODES.map((mode) => daemons[mode].scrapedAt)) + 10_500 - performance.now();
    if (stale > 0) await sleep(stale);
    for (const mode of MODES) {
      const m = desktopMemoryMetric(await metrics(daemons[mode]));
      for (const v of m.values()) s.metricPss[mode].push(v);
    }
    progress(`sandbox: PSS off ${median(s.pss.off).toFixed(1)} MiB, auto ${median(s.pss.auto).toFixed(1)} MiB`);
    // The first lease of each is not timed (the daemon's own first-time work).
    for (const mode of MODES) await leaseSample(daemons[mode]);
    for (let i = 0; i < LEASES; i++) {
      for (const mode of i % 2 ? [...MODES].reverse() : MODES) {
        const { leaseMs, startMs } = await leaseSample(daemons[mode]);
        s.lease[mode].push(leaseMs);
        s.start[mode].push(startMs);
      }
      progress(
        `sandbox leases ${i + 1}/${LEASES}: off ${s.lease.off.at(-1)!.toFixed(1)} ms / start ${s.start.off.at(-1)!.toFixed(0)} ms, ` +
          `auto ${s.lease.auto.at(-1)!.toFixed(1)} ms / start ${s.start.auto.at(-1)!.toFixed(0)} ms`,
      );
    }
    progress(`sandbox: ${CALLS} one-call left_click and screenshot batches on each`);
    const off = await openSession(daemons.off);
    const on = await openSession(daemons.auto);
    try {
      let k = 0;
      const at = (): { coordinate: number[] } => ({ coordinate: [...POINTS[k++ % POINTS.length]!] });
      calls = await interleave(
        {
          clickOff: () => oneCall(off.client, 'left_click', at()),
          clickOn: () => oneCall(on.client, 'left_click', at()),
          shotOff: () => oneCall(off.client, 'screenshot', {}, (b) => (s.image.off = b)),
          shotOn: () => oneCall(on.client, 'screenshot', {}, (b) => (s.image.auto = b)),
        },
        CALLS,
        CALL_WARMUP,
      );
    } finally {
      off.client.close();
      on.client.close();
    }
    for (const mode of MODES) {
      const v = metric(await metrics(daemons[mode]), 'deskbatch_desktop_faults_total{kind="start_failed"}');
      failedStarts[mode] = Number.isFinite(v) ? v : 0;
    }
  } finally {
    await stopAll();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  const both = (a: number[], b: number[]): Record<Mode, SandboxSeries> => ({ off: series(a), auto: series(b) });
  const report: SandboxReport = {
    machine: machine(load),
    source: await sourceState(),
    settings: {
      display: `${DENSITY_SIZE.width}x${DENSITY_SIZE.height}`,
      pool: '--desktops 2 --warm 1',
      browser: 'headful',
      format: 'png',
      leases: LEASES,
      calls: CALLS,
    },
    series: {
      desktop_start: both(s.start.off, s.start.auto),
      warm_lease: both(s.lease.off, s.lease.auto),
      left_click: both(calls.clickOff ?? [], calls.clickOn ?? []),
      screenshot: both(calls.shotOff ?? [], calls.shotOn ?? []),
      pss_mib: both(s.pss.off, s.pss.auto),
    },
    rows: [],
    duration_s: 0,
  };
  const m = (key: string, mode: Mode): number => report.series[key]![mode].median_ms;
  report.rows = [
    row(
      'desktop_start',
      `cold desktop start, median of ${s.start.off.length} (daemon's start histogram)`,
      'ms',
      m('desktop_start', 'off'),
      m('desktop_start', 'auto'),
      {
        text: 'on − off <= 300 ms',
        ok: (x) => x.delta <= 300,
      },
    ),
    row(
      'failed_starts',
      '  desktop starts that failed and were retried (count)',
      '',
      failedStarts.off,
      failedStarts.auto,
    ),
    row('spawn_to_warm', '  daemon spawn → first desktop warm (1 sample)', 'ms', spawnToWarm.off, spawnToWarm.auto),
    row(
      'warm_lease',
      `warm lease hello → welcome, median of ${s.lease.off.length}`,
      'ms',
      m('warm_lease', 'off'),
      m('warm_lease', 'auto'),
      {
        text: 'on < 50 ms',
        ok: (x) => x.on < 50,
      },
    ),
    row(
      'left_click',
      `left_click one-call batch, median of ${report.series.left_click!.off.n}`,
      'ms',
      m('left_click', 'off'),
      m('left_click', 'auto'),
      {
        text: 'on/off <= 1.05',
        ok: (x) => x.ratio <= 1.05,
      },
    ),
    row(
      'screenshot',
      `screenshot one-call batch (png), median of ${report.series.screenshot!.off.n}`,
      'ms',
      m('screenshot', 'off'),
      m('screenshot', 'auto'),
      {
        text: 'on/off <= 1.05',
        ok: (x) => x.ratio <= 1.05,
      },
    ),
    row('screenshot_bytes', '  the screenshot itself (PNG bytes)', 'KiB', s.image.off / 1024, s.image.auto / 1024),
    row('pss', 'PSS of one warm desktop at rest (process tree)', 'MiB', median(s.pss.off), median(s.pss.auto), {
      text: 'on/off <= 1.10',
      ok: (x) => x.ratio <= 1.1,
    }),
    row('processes', '  its processes', 'procs', median(s.procs.off), median(s.procs.auto)),
    row(
      'pss_daemon_metric',
      "  the daemon's own figure (deskbatch_desktop_memory_bytes)",
      'MiB',
      median(s.metricPss.off),
      median(s.metricPss.auto),
    ),
  ];
  report.duration_s = round2((performance.now() - started) / 1000);
  return report;
}

/** Runs the section alone: prints its table and sets `sandbox` in bench/results.json (keeping what else is there). */
export async function sandboxMain(): Promise<void> {
  const previous = await loadComparison();
  const report = await sandboxRun();
  console.log(sandboxTable(report, previous));
  await writeResultsSection('sandbox', report);
  console.log(`sandbox: ${report.duration_s} s; written to bench/results.json (key "sandbox")`);
  console.log(`\n${previous.summary()}`);
  const recorded = await recordIfAsked({ sandbox: report }, measuredOf(report.machine, report.source));
  if (recorded) console.log(recorded);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await sandboxMain();
