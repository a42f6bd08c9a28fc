/**
 * `npm run bench` section `density` (issue 15, "Measured"): what a desktop of
 * its own per session costs and buys on this machine. Also runnable alone:
 * `BENCH_ONLY=density npm run bench` or `node --import tsx bench/density.ts`.
 *
 * Every daemon here is its own process, started as an operator starts it
 * (`node bin/deskbatch.js serve`, testkit/daemon-process.ts) with no
 * DISPLAY, so it runs its pool (`--desktops K --warm N`), or starts one
 * desktop every session shares (`--shared-desktop`). It binds 127.0.0.1 and
 * is stopped by its pid in a `finally` (and on SIGINT/SIGTERM), which ends
 * its desktops with it. The pool's `list()` lives inside the daemon, so a
 * desktop's processes are found from outside by walking the daemon's process
 * tree: Xvfb (by its `-auth` folder), openbox (its `--config-file` in the same
 * folder), the worker (`dist/src/desktop-driver/worker.js`, compiled: no loader, no esbuild child) and
 * Chromium (the browser process without `--type=`, and all its children),
 * the last two by the XAUTHORITY in their environment, which names that same
 * folder. Chromium's crashpad handlers leave the tree (they are reparented to
 * init), so they are found by that XAUTHORITY too. The daemon's own figure
 * (`deskbatch_desktop_memory_bytes` on /metrics) is shown beside ours.
 *
 * Measured:
 * - per warm desktop, idle: PSS and USS (private pages) by part, and CPU at
 *   rest (utime+stime from /proc over DENSITY_REST_S seconds, % of one core);
 * - lease time (hello → welcome) with a warm desktop (`--warm 1`) and a cold
 *   start (`--warm 0`), sample by sample in turn; the recycle: teardown and
 *   fresh start from the daemon's histograms (their _sum, read before and
 *   after each sample), and session end → a fresh warm desktop, observed on
 *   /readyz;
 * - K agents at once, each looping one batch [left_click, type, screenshot]
 *   on a page of its own: on the pool (`--desktops K --warm K`) and on the
 *   shared lane (`--shared-desktop`), in alternating segments (ABBA), so the
 *   load of this shared machine falls on both alike.
 *
 * This file runs the section and sets its targets; the daemons and what is
 * read from them over HTTP are bench/density-daemon.ts, the desktops' processes,
 * memory and CPU from /proc bench/density-procs.ts, the agents and their
 * segments of load bench/density-agents.ts, the report's types
 * bench/density-report.ts and its table bench/report.ts.
 */
import { writeResultsSection } from './results-file.ts';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { defaultDesktopCap } from '../src/base/config.ts';
import { startWebServer } from '../testkit/web.ts';
import { loadComparison, measuredOf, recordIfAsked } from './baseline-file.ts';
import { nextId } from './client.ts';
import {
  computer,
  modeRun,
  openAgents,
  openSession,
  segment,
  TYPED,
  type Agent,
  type Segment,
} from './density-agents.ts';
import {
  DENSITY_SIZE,
  metric,
  metrics,
  METRICS_POLL_MS,
  POLL_MS,
  ready,
  startDaemon,
  stopAll,
  waitUntil,
  waitWarm,
  hasWarm,
  WARM_TIMEOUT_MS,
  type Daemon,
} from './density-daemon.ts';
import { measureDesktops } from './density-procs.ts';
import { series, type AgentsRow, type DensityReport, type LeaseReport, type Target } from './density-report.ts';
import { machine, sourceState } from './machine.ts';
import { densityTable } from './report.ts';
import { positiveInt, progress, round2 } from './stats.ts';

/** Lease samples of each kind (warm, cold). */
const LEASES = positiveInt(process.env.DENSITY_LEASES, 8);
/** Seconds of K-agent load per mode and K, cut into SEGMENTS alternating segments. */
const AGENT_SECONDS = positiveInt(process.env.DENSITY_SECONDS, 24);
const SEGMENTS = 4;
/** The K agents runs: 1, 2, 4, 8 and the default cap; DENSITY_KS=1,2 runs only those (a shorter trial). */
const agentCounts = (cap: number): number[] =>
  process.env.DENSITY_KS
    ? process.env.DENSITY_KS.split(',')
        .map((v) => positiveInt(v.trim(), 0))
        .filter((v) => v > 0)
    : [1, 2, 4, 8, cap];
/** Seconds the warm desktops sit idle while their CPU is counted. */
const REST_SECONDS = positiveInt(process.env.DENSITY_REST_S, 10);
/** After the last desktop is warm, before the rest is counted: Chromium's own start-up work settles. */
const SETTLE_MS = 3_000;

const PAGE = `<!doctype html><title>density</title>
<body style="margin:0;font:16px sans-serif;padding:8px">
<h1>Density bench</h1>
<p>An agent's page: it clicks into the text area below, types a few characters and takes a screenshot, in a loop.
Each session has a page of its own; on the pool each page is on a desktop of its own.</p>
<textarea autofocus style="width:90vw;height:60vh;font-size:20px;caret-color:transparent"></textarea>`;

// ---------------------------------------------------------------- the parts

interface Histograms {
  lease: number;
  start: number;
  recycle: number;
  starts: number;
  recycles: number;
}

async function histograms(d: Daemon): Promise<Histograms> {
  const text = await metrics(d);
  return {
    lease: metric(text, 'deskbatch_desktop_lease_wait_seconds_sum') * 1000,
    start: metric(text, 'deskbatch_desktop_start_seconds_sum') * 1000,
    recycle: metric(text, 'deskbatch_desktop_recycle_seconds_sum') * 1000,
    starts: metric(text, 'deskbatch_desktop_start_seconds_count'),
    recycles: metric(text, 'deskbatch_desktop_recycle_seconds_count'),
  };
}

/**
 * Warm and cold leases in turn (the order alternates), each from an idle daemon: a one-desktop pool kept warm
 * (`--warm 1`) and one that starts a desktop only when asked (`--warm 0`).
 */
async function leaseRun(): Promise<LeaseReport> {
  progress('leases: starting a warm pool (--desktops 1 --warm 1) and a cold one (--desktops 1 --warm 0)');
  const [warm, cold] = await Promise.all([
    startDaemon('warm pool', ['--desktops', '1', '--warm', '1']),
    startDaemon('cold pool', ['--desktops', '1', '--warm', '0']),
  ]);
  const s = {
    warm: [] as number[],
    cold: [] as number[],
    warmDaemon: [] as number[],
    coldDaemon: [] as number[],
    teardown: [] as number[],
    start: [] as number[],
    toWarm: [] as number[],
    ids: [] as string[],
  };
  try {
    await waitWarm(warm, 1);
    // The first lease of each is not timed: the daemon's own first-time work (its first welcome) is not a lease's.
    for (const d of [warm, cold]) {
      const first = await openSession(d);
      first.client.close();
      await sleep(100);
      await waitUntil(`${d.label} to be free again`, () => ready(d), WARM_TIMEOUT_MS);
    }
    for (let i = 0; i < LEASES; i++) {
      for (const kind of i % 2 ? (['cold', 'warm'] as const) : (['warm', 'cold'] as const)) {
        const d = kind === 'warm' ? warm : cold;
        await waitUntil(`${d.label} to be free`, () => ready(d), WARM_TIMEOUT_MS);
        const h0 = await histograms(d);
        const { client, welcome, ms } = await openSession(d);
        if (welcome.desktop?.mode !== 'pool') throw new Error(`${d.label}: welcome.desktop is not a pool's`);
        await client.batch(nextId('used'), [computer('screenshot')]);
        const closed = performance.now();
        client.close();
        // Not free while the session's desktop is leased or torn down (max 1). The warm pool is waited
        // for until its fresh desktop is warm: /readyz already counts a desktop still starting as free
        // (room for a session, which then waits for it), so it says too little here. The cold pool is
        // free again once there is room to start one.
        await sleep(POLL_MS);
        const free =
          kind === 'warm'
            ? await waitUntil(
                `${d.label} to hold a warm desktop again`,
                () => hasWarm(d, 1),
                WARM_TIMEOUT_MS,
                METRICS_POLL_MS,
              )
            : await waitUntil(`${d.label} to be free again`, () => ready(d), WARM_TIMEOUT_MS);
        const h1 = await histograms(d);
        if (h1.recycles - h0.recycles !== 1) throw new Error(`${d.label}: expected one teardown per sample`);
        s.teardown.push(h1.recycle - h0.recycle);
        if (kind === 'warm') {
          if (h1.starts - h0.starts !== 1) throw new Error(`${d.label}: expected one fresh start per sample`);
          s.warm.push(ms);
          s.warmDaemon.push(h1.lease - h0.lease);
          s.start.push(h1.start - h0.start);
          s.toWarm.push(free - closed);
          s.ids.push(welcome.desktop.id);
        } else {
          s.cold.push(ms);
          s.coldDaemon.push(h1.lease - h0.lease);
        }
      }
      progress(
        `leases ${i + 1}/${LEASES}: warm ${s.warm.at(-1)!.toFixed(1)} ms, cold ${s.cold.at(-1)!.toFixed(0)} ms, ` +
          `session end → warm again ${s.toWarm.at(-1)!.toFixed(0)} ms`,
      );
    }
  } finally {
    await Promise.all([warm.stop(), cold.stop()]);
  }
  return {
    warm_lease: series(s.warm),
    cold_lease: series(s.cold),
    warm_lease_daemon: series(s.warmDaemon),
    cold_lease_daemon: series(s.coldDaemon),
    teardown: series(s.teardown),
    start: series(s.start),
    end_to_warm: series(s.toWarm),
    warm_ids: s.ids,
  };
}

/** K agents on a pool of K warm desktops and on the shared lane, segment by segment in turn (ABBA). */
async function agentsRow(
  k: number,
  cap: boolean,
  shared: Daemon,
  pageUrl: string,
  report: DensityReport,
): Promise<AgentsRow> {
  const load0 = os.loadavg()[0]!;
  progress(`K=${k}: starting a pool daemon (--desktops ${k} --warm ${k})`);
  const pool = await startDaemon(`pool K=${k}`, ['--desktops', String(k), '--warm', String(k)]);
  try {
    await waitWarm(pool, k);
    await sleep(SETTLE_MS);
    progress(`K=${k}: ${k} warm desktops; memory, and CPU over ${REST_SECONDS} s at rest`);
    report.rest.push(await measureDesktops(pool, 'warm', k, REST_SECONDS));
    progress(`K=${k}: opening ${k} sessions on each daemon, each with its page`);
    const onPool = await openAgents(pool, k, pageUrl);
    let onShared: Agent[] = [];
    try {
      if (new Set(onPool.map((a) => a.desktop)).size !== k) {
        throw new Error(`K=${k}: the pool's sessions do not each have a desktop of their own`);
      }
      onShared = await openAgents(shared, k, pageUrl);
      const runs = { pool: [] as Segment[], shared: [] as Segment[] };
      const segMs = (AGENT_SECONDS * 1000) / SEGMENTS;
      for (let i = 0; i < SEGMENTS; i++) {
        // ABBA: pool first in segments 0 and 3, shared first in 1 and 2.
        const order = i === 1 || i === 2 ? (['shared', 'pool'] as const) : (['pool', 'shared'] as const);
        for (const mode of order) {
          runs[mode].push(await segment(mode === 'pool' ? pool : shared, mode === 'pool' ? onPool : onShared, segMs));
        }
      }
      report.after_run.push(await measureDesktops(pool, 'leased_after_run', k));
      const row: AgentsRow = {
        k,
        cap,
        pool: modeRun(runs.pool),
        shared: modeRun(runs.shared),
        throughput_ratio: NaN,
        load: [round2(load0), round2(os.loadavg()[0]!)],
      };
      row.throughput_ratio = round2(row.pool.batches_per_s / row.shared.batches_per_s);
      progress(
        `K=${k}: pool ${row.pool.batches_per_s} batches/s (p95 ${row.pool.p95_ms} ms), ` +
          `shared ${row.shared.batches_per_s} batches/s (p95 ${row.shared.p95_ms} ms)`,
      );
      return row;
    } finally {
      for (const a of [...onPool, ...onShared]) a.client.close();
    }
  } finally {
    await pool.stop();
  }
}

const MIN_RATIO = 2.5;
const MAX_P95_GROWTH = 2;
const MAX_WARM_LEASE_MS = 50;
const MAX_DESKTOP_PSS_MIB = 250;

function targets(report: DensityReport): { ratios: DensityReport['ratios']; targets: Target[] } {
  const row = (k: number): AgentsRow | undefined => report.agents.find((r) => r.k === k);
  const one = row(1);
  const four = row(4);
  const ratios = report.agents.map((r) => ({
    name: `K=${r.k}: pool / shared throughput`,
    value: r.throughput_ratio,
    unit: 'x',
  }));
  for (const r of report.agents) {
    if (one && r.k !== 1) {
      ratios.push({
        name: `K=${r.k}: pool throughput / K=1`,
        value: round2(r.pool.batches_per_s / one.pool.batches_per_s),
        unit: 'x',
      });
    }
  }
  const p95Growth = four && one ? round2(four.pool.p95_ms / one.pool.p95_ms) : NaN;
  ratios.push({ name: 'p95 per batch, K=4 pool / K=1', value: p95Growth, unit: 'x' });
  const lone = report.rest.find((r) => r.desktops === 1);
  const atCap = report.rest.find((r) => r.desktops === report.settings.default_cap && r.desktops !== 1);
  const ok = (v: number, good: (v: number) => boolean): boolean | undefined =>
    Number.isFinite(v) ? good(v) : undefined;
  const list: Target[] = [
    {
      name: 'warm lease (hello → welcome), median',
      target: `< ${MAX_WARM_LEASE_MS} ms`,
      value: report.leases.warm_lease.median_ms,
      unit: 'ms',
      met: ok(report.leases.warm_lease.median_ms, (v) => v < MAX_WARM_LEASE_MS),
    },
    {
      name: '4 agents: pool / shared throughput',
      target: `>= ${MIN_RATIO}x`,
      value: four?.throughput_ratio ?? NaN,
      unit: 'x',
      met: ok(four?.throughput_ratio ?? NaN, (v) => v >= MIN_RATIO),
    },
    {
      name: '4 agents: p95 per batch / one agent alone',
      target: `<= ${MAX_P95_GROWTH}x`,
      value: p95Growth,
      unit: 'x',
      met: ok(p95Growth, (v) => v <= MAX_P95_GROWTH),
    },
    {
      name: 'a warm desktop alone (K=1): PSS',
      target: `<= ${MAX_DESKTOP_PSS_MIB} MiB`,
      value: lone?.mean.total.pss_mib ?? NaN,
      unit: 'MiB',
      met: ok(lone?.mean.total.pss_mib ?? NaN, (v) => v <= MAX_DESKTOP_PSS_MIB),
    },
    ...(atCap
      ? [
          {
            name: `  beside it: mean of the cap's ${atCap.desktops} warm desktops: PSS`,
            value: atCap.mean.total.pss_mib,
            unit: 'MiB',
          },
        ]
      : []),
  ];
  return { ratios, targets: list };
}

/** The whole section: leases, then for each K its pool beside the shared lane. */
export async function densityRun(): Promise<DensityReport> {
  const started = performance.now();
  const load = os.loadavg();
  const cap = defaultDesktopCap();
  const ks = [...new Set(agentCounts(cap))].sort((a, b) => a - b);
  const report: DensityReport = {
    machine: machine(load),
    source: await sourceState(),
    settings: {
      display: `${DENSITY_SIZE.width}x${DENSITY_SIZE.height}`,
      format: 'png',
      batch: `left_click (two points of its own in turn), type ${JSON.stringify(TYPED)}, screenshot (computer toolset)`,
      agent_seconds_per_mode: AGENT_SECONDS,
      segments: SEGMENTS,
      leases: LEASES,
      rest_s: REST_SECONDS,
      default_cap: cap,
      ks,
    },
    rest: [],
    after_run: [],
    leases: undefined as unknown as LeaseReport,
    agents: [],
    ratios: [],
    targets: [],
    duration_s: 0,
  };
  const onSignal = (signal: NodeJS.Signals): void => {
    progress(`${signal}: stopping every daemon started`);
    void stopAll().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const web = await startWebServer();
  try {
    web.route('/', PAGE);
    report.leases = await leaseRun();
    progress('the shared lane: starting a daemon with --shared-desktop');
    const shared = await startDaemon('shared lane', ['--shared-desktop']);
    try {
      for (const k of ks) report.agents.push(await agentsRow(k, k === cap, shared, `${web.origin}/`, report));
    } finally {
      await shared.stop();
    }
  } finally {
    await stopAll();
    await web.close();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  Object.assign(report, targets(report));
  report.machine = machine(load);
  report.duration_s = round2((performance.now() - started) / 1000);
  return report;
}

/** Runs the section alone: prints its table and sets `density` in bench/results.json (keeping what else is there). */
export async function densityMain(): Promise<void> {
  const previous = await loadComparison();
  const report = await densityRun();
  console.log(densityTable(report, previous));
  await writeResultsSection('density', report);
  console.log(`density: ${report.duration_s} s; written to bench/results.json (key "density")`);
  console.log(`\n${previous.summary()}`);
  const recorded = await recordIfAsked({ density: report }, measuredOf(report.machine, report.source));
  if (recorded) console.log(recorded);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await densityMain();
