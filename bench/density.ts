/**
 * `npm run bench` section `density` (issue 15, "Measured"): what a desktop of
 * its own per session costs and buys on this machine. Also runnable alone:
 * `BENCH_ONLY=density npm run bench` or `node --import tsx bench/density.ts`.
 *
 * Every daemon here is its own process, started as an operator starts it
 * (`node bin/deskbatch.js serve`, test/helpers/daemon-process.ts) with no
 * DISPLAY, so it runs its pool (`--desktops K --warm N`), or starts one
 * desktop every session shares (`--shared-desktop`). It binds 127.0.0.1 and
 * is stopped by its pid in a `finally` (and on SIGINT/SIGTERM), which ends
 * its desktops with it. The pool's `list()` lives inside the daemon, so a
 * desktop's processes are found from outside by walking the daemon's process
 * tree: Xvfb (by its `-auth` folder), openbox (its `--config-file` in the same
 * folder), the worker (`src/desktop/worker.ts`, with its esbuild child) and
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
 */
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import os, { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { defaultDesktopCap } from '../src/config.ts';
import type { ServerMessage, ToolUse, Welcome } from '../src/protocol.ts';
import { startDaemonProcess, type DaemonProcess } from '../test/helpers/daemon-process.ts';
import { startWebServer } from '../test/helpers/web.ts';
import { BenchClient, imageBytes, nextId, toolUse } from './client.ts';
import { BENCH_TOKEN } from './daemon-process.ts';
import { machine, sourceState } from './machine.ts';
import { densityTable } from './report.ts';
import {
  PARTS,
  type AgentsRow,
  type DensityReport,
  type DesktopFigure,
  type LeaseReport,
  type ModeRun,
  type Part,
  type PartFigure,
  type RestReport,
  type Series,
  type Target,
} from './density-report.ts';
import { median, percentile, positiveInt, progress, round2 } from './stats.ts';

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
/** Untimed batches per agent before the first segment (the worker's first grab, sharp's first encode). */
const WARMUP_BATCHES = 3;
const STOP_GRACE_MS = 20_000;
/** Starting 8 desktops at once on 2 loaded cores takes a while. */
const WARM_TIMEOUT_MS = 240_000;
const POLL_MS = 20;
/** src/ops/metrics.ts DESKTOP_MEMORY_CACHE_MS, and a little more. */
const METRIC_MEMORY_CACHE_MS = 10_500;
const MIB = 1024 * 1024;

export const DENSITY_SIZE = { width: 1280, height: 800 };
/**
 * Where agent `i` clicks in its `n`th batch: inside the page's text area, at one of two points of its own, in
 * turn. A click at the same point as the one before it on that display within the double-click time (batches
 * take 100–300 ms) is a double and then a triple click, which selects the typed text for the next `type` to
 * replace: a different amount of work per batch. With points of its own per agent, no click on the pool or on
 * the shared lane (where the agents' batches alternate) repeats the point of the click before it.
 */
function clickPoint(i: number, n: number): [number, number] {
  return [200 + (i % 10) * 80, (n % 2 ? 580 : 420) + (Math.floor(i / 10) % 4) * 20];
}
const TYPED = 'hello ';

const PAGE = `<!doctype html><title>density</title>
<body style="margin:0;font:16px sans-serif;padding:8px">
<h1>Density bench</h1>
<p>An agent's page: it clicks into the text area below, types a few characters and takes a screenshot, in a loop.
Each session has a page of its own; on the pool each page is on a desktop of its own.</p>
<textarea autofocus style="width:90vw;height:60vh;font-size:20px;caret-color:transparent"></textarea>`;

// ---------------------------------------------------------------- daemons

interface Daemon {
  proc: DaemonProcess;
  /** http://127.0.0.1:PORT */
  base: string;
  url: string;
  label: string;
  /** When /metrics was last read (performance.now()): its per-desktop memory is cached for a while. */
  scrapedAt: number;
  stop(): Promise<void>;
}

/** Stops for every daemon still running: called in `finally`s, and on SIGINT/SIGTERM. */
const live = new Set<() => Promise<void>>();

async function startDaemon(label: string, flags: string[]): Promise<Daemon> {
  const dir = await mkdtemp(join(tmpdir(), 'deskbatch-density-'));
  const args = [
    ...['--host', '127.0.0.1', '--port', '0'],
    ...['--browser', 'headful', '--screenshot-format', 'png'],
    ...['--display-size', `${DENSITY_SIZE.width}x${DENSITY_SIZE.height}`],
    ...['--screenshots-dir', join(dir, 'screenshots'), '--downloads-dir', join(dir, 'downloads')],
    // A closed session ends (and its desktop goes) at once: no resume is wanted here.
    ...['--resume-window-ms', '1'],
    ...['--log-level', 'info'],
    // The agents' page is served on 127.0.0.1, which the browser reaches only through this opt-in.
    '--allow-private-networks',
    ...flags,
  ];
  // DISPLAY empty: the daemon owns its displays (a pool, or with --shared-desktop one Xvfb of its own).
  const proc = await startDaemonProcess({ display: '', token: BENCH_TOKEN, args, echo: true }).catch(
    async (err: unknown) => {
      await rm(dir, { recursive: true, force: true });
      throw err;
    },
  );
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> =>
    (stopping ??= (async () => {
      live.delete(stop);
      const exit = await proc.stop(STOP_GRACE_MS);
      if (exit.killed) progress(`${label}: the daemon had to be killed (SIGKILL) after ${STOP_GRACE_MS} ms`);
      await rm(dir, { recursive: true, force: true });
    })());
  live.add(stop);
  const base = proc.url.replace(/^ws:/, 'http:').replace(/\/v1$/, '');
  return { proc, base, url: proc.url, label, scrapedAt: -Infinity, stop };
}

async function stopAll(): Promise<void> {
  await Promise.all([...live].map((stop) => stop().catch(() => undefined)));
}

async function metrics(d: Daemon): Promise<string> {
  d.scrapedAt = performance.now();
  const res = await fetch(`${d.base}/metrics`, { headers: { authorization: `Bearer ${BENCH_TOKEN}` } });
  if (!res.ok) throw new Error(`${d.label}: /metrics answered ${res.status}`);
  return res.text();
}

/** One sample's value from Prometheus text, e.g. `deskbatch_desktops{state="warm"}`; NaN when absent. */
function metric(text: string, name: string): number {
  for (const line of text.split('\n')) {
    if (line.startsWith(name) && line.charAt(name.length) === ' ') return Number(line.slice(name.length + 1));
  }
  return NaN;
}

/** `deskbatch_desktop_memory_bytes{desktop="dN"}` of every desktop, MiB. */
function desktopMemoryMetric(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of text.matchAll(/^deskbatch_desktop_memory_bytes\{desktop="([^"]+)"\} (\S+)$/gm)) {
    out.set(m[1]!, Number(m[2]) / MIB);
  }
  return out;
}

async function ready(d: Daemon): Promise<boolean> {
  const res = await fetch(`${d.base}/readyz`);
  await res.arrayBuffer();
  return res.status === 200;
}

async function waitUntil(what: string, probe: () => Promise<boolean>, timeoutMs: number, everyMs = POLL_MS) {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await probe()) return performance.now();
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

async function waitWarm(d: Daemon, n: number): Promise<void> {
  await waitUntil(
    `${n} warm desktops on ${d.label}`,
    async () => metric(await metrics(d), 'deskbatch_desktops{state="warm"}') >= n,
    WARM_TIMEOUT_MS,
    200,
  );
}

// ---------------------------------------------------------------- processes

interface Proc {
  pid: number;
  ppid: number;
  cmd: string;
}

async function processes(): Promise<Map<number, Proc>> {
  const out = new Map<number, Proc>();
  const entries = (await readdir('/proc')).filter((e) => /^\d+$/.test(e));
  await Promise.all(
    entries.map(async (e) => {
      const stat = await readFile(`/proc/${e}/stat`, 'utf8').catch(() => '');
      if (!stat) return;
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const cmd = (await readFile(`/proc/${e}/cmdline`, 'utf8').catch(() => '')).split('\0').join(' ').trim();
      out.set(Number(e), { pid: Number(e), ppid, cmd });
    }),
  );
  return out;
}

async function environ(pid: number): Promise<Record<string, string>> {
  const text = await readFile(`/proc/${pid}/environ`, 'utf8').catch(() => '');
  const env: Record<string, string> = {};
  for (const kv of text.split('\0')) {
    const i = kv.indexOf('=');
    if (i > 0) env[kv.slice(0, i)] = kv.slice(i + 1);
  }
  return env;
}

interface DesktopProcs {
  /** The desktop's Xvfb folder (its -auth file and XAUTHORITY live there): the grouping key. */
  key: string;
  id: string;
  parts: Record<Part, number[]>;
}

const XVFB = /(^|\/)Xvfb\s/;
const OPENBOX = /(^|\/)openbox\s/;
const WORKER = /\/src\/desktop\/worker\.ts(\s|$)/;
// The browser process: the `chromium` program itself, not a helper (`--type=`), not the crashpad handler.
const BROWSER = /^\S*\/chromium(\s|$)/;
const HELPER = /(^|\s)--type=/;
const CRASHPAD = /(^|\/)chrome_crashpad_handler(\s|$)/;

/**
 * The processes of each of a daemon's desktops, and the daemon's own (itself
 * and children that belong to no desktop), from /proc. Only read, never signalled.
 */
async function desktopProcesses(daemonPid: number): Promise<{ desktops: DesktopProcs[]; daemon: number[] }> {
  const all = await processes();
  const children = new Map<number, number[]>();
  for (const p of all.values()) children.set(p.ppid, [...(children.get(p.ppid) ?? []), p.pid]);
  const subtree = (root: number): number[] => {
    const out: number[] = [];
    const todo = [root];
    while (todo.length) {
      const pid = todo.pop()!;
      out.push(pid);
      todo.push(...(children.get(pid) ?? []));
    }
    return out;
  };
  const byKey = new Map<string, DesktopProcs>();
  const desktop = (key: string): DesktopProcs => {
    let d = byKey.get(key);
    if (!d) {
      d = { key, id: '', parts: { xvfb: [], openbox: [], worker: [], chromium: [] } };
      byKey.set(key, d);
    }
    return d;
  };
  const idFromHome = (home: string | undefined): string => /deskbatch-(d\d+)-home-/.exec(home ?? '')?.[1] ?? '';
  const daemon: number[] = [daemonPid];
  const todo = [...(children.get(daemonPid) ?? [])];
  while (todo.length) {
    const pid = todo.shift()!;
    const cmd = all.get(pid)?.cmd ?? '';
    let part: Part | undefined;
    let key: string | undefined;
    if (XVFB.test(cmd)) {
      part = 'xvfb';
      key = /\s-auth\s+(\S+)/.exec(cmd)?.[1];
    } else if (OPENBOX.test(cmd)) {
      part = 'openbox';
      key = /\s--config-file\s+(\S+)/.exec(cmd)?.[1];
    } else if (WORKER.test(cmd) || (BROWSER.test(cmd) && !HELPER.test(cmd))) {
      part = WORKER.test(cmd) ? 'worker' : 'chromium';
      const env = await environ(pid);
      key = env.XAUTHORITY;
      const id = idFromHome(env.HOME);
      if (key && id) desktop(dirname(key)).id = id;
    }
    if (part && key) {
      desktop(dirname(key)).parts[part].push(...subtree(pid));
    } else {
      daemon.push(pid);
      todo.push(...(children.get(pid) ?? []));
    }
  }
  // Crashpad handlers are reparented to init: theirs by the XAUTHORITY they inherited.
  const inTree = new Set([...daemon, ...[...byKey.values()].flatMap((d) => Object.values(d.parts).flat())]);
  for (const p of all.values()) {
    if (inTree.has(p.pid) || !CRASHPAD.test(p.cmd)) continue;
    const xauth = (await environ(p.pid)).XAUTHORITY;
    const d = xauth ? byKey.get(dirname(xauth)) : undefined;
    if (d) d.parts.chromium.push(p.pid);
  }
  const desktops = [...byKey.values()].map((d) => ({ ...d, id: d.id || 'shared' }));
  desktops.sort((a, b) => Number(a.id.slice(1)) - Number(b.id.slice(1)));
  return { desktops, daemon };
}

interface Mem {
  pss: number;
  pssFile: number;
  uss: number;
}

async function memOf(pid: number): Promise<Mem> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
  const kb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0) * 1024;
  return { pss: kb('Pss'), pssFile: kb('Pss_File'), uss: kb('Private_Clean') + kb('Private_Dirty') };
}

let clockTicks: number | undefined;
function ticksPerSecond(): number {
  if (clockTicks === undefined) {
    try {
      clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clockTicks = 100;
    }
  }
  return clockTicks;
}

/** utime + stime of a process, in clock ticks; undefined when it is gone. */
async function cpuTicks(pid: number): Promise<number | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  if (!stat) return undefined;
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]); // fields 14 and 15
}

async function partFigure(pids: readonly number[], cpu?: Map<number, number>, seconds?: number): Promise<PartFigure> {
  const mems = await Promise.all(pids.map(memOf));
  const fig: PartFigure = {
    processes: pids.length,
    pss_mib: round2(mems.reduce((a, m) => a + m.pss, 0) / MIB),
    pss_file_mib: round2(mems.reduce((a, m) => a + m.pssFile, 0) / MIB),
    uss_mib: round2(mems.reduce((a, m) => a + m.uss, 0) / MIB),
  };
  if (cpu && seconds) {
    let ticks = 0;
    for (const pid of pids) {
      const before = cpu.get(pid);
      const after = await cpuTicks(pid);
      if (before !== undefined && after !== undefined) ticks += after - before;
    }
    fig.cpu_pct = round2((ticks / ticksPerSecond() / seconds) * 100);
  }
  return fig;
}

function sumFigures(figs: readonly PartFigure[], divideBy = 1): PartFigure {
  const cpu = figs.every((f) => f.cpu_pct !== undefined);
  return {
    processes: round2(figs.reduce((a, f) => a + f.processes, 0) / divideBy),
    pss_mib: round2(figs.reduce((a, f) => a + f.pss_mib, 0) / divideBy),
    pss_file_mib: round2(figs.reduce((a, f) => a + f.pss_file_mib, 0) / divideBy),
    uss_mib: round2(figs.reduce((a, f) => a + f.uss_mib, 0) / divideBy),
    ...(cpu ? { cpu_pct: round2(figs.reduce((a, f) => a + (f.cpu_pct ?? 0), 0) / divideBy) } : {}),
  };
}

/**
 * Memory of each desktop of `d` by part, and with `restSeconds` its CPU over
 * that many idle seconds (counted for the processes there at both ends).
 */
async function measureDesktops(
  d: Daemon,
  state: RestReport['state'],
  expected: number,
  restSeconds?: number,
): Promise<RestReport> {
  let cpu: Map<number, number> | undefined;
  const t0 = performance.now();
  if (restSeconds) {
    cpu = new Map();
    const before = await desktopProcesses(d.proc.pid);
    const pids = [...before.daemon, ...before.desktops.flatMap((x) => Object.values(x.parts).flat())];
    for (const pid of pids) {
      const t = await cpuTicks(pid);
      if (t !== undefined) cpu.set(pid, t);
    }
  }
  // The daemon reuses its per-desktop memory reading for DESKTOP_MEMORY_CACHE_MS (src/ops/metrics.ts, 10 s):
  // wait until the one it has is stale, so its figure below is taken now, beside ours.
  const cacheLeft = d.scrapedAt + METRIC_MEMORY_CACHE_MS - performance.now();
  const restLeft = restSeconds ? restSeconds * 1000 - (performance.now() - t0) : 0;
  if (Math.max(cacheLeft, restLeft) > 0) await sleep(Math.max(cacheLeft, restLeft));
  const found = await desktopProcesses(d.proc.pid);
  if (found.desktops.length !== expected) {
    throw new Error(`${d.label}: found ${found.desktops.length} desktops in its process tree, expected ${expected}`);
  }
  const reported = desktopMemoryMetric(await metrics(d));
  const seconds = restSeconds ? (performance.now() - t0) / 1000 : undefined;
  const perDesktop: DesktopFigure[] = [];
  for (const desk of found.desktops) {
    const parts = {} as Record<Part, PartFigure>;
    for (const part of PARTS) parts[part] = await partFigure(desk.parts[part], cpu, seconds);
    const metricMib = reported.get(desk.id);
    perDesktop.push({
      id: desk.id,
      parts,
      total: sumFigures(PARTS.map((p) => parts[p])),
      ...(metricMib !== undefined ? { daemon_metric_mib: round2(metricMib) } : {}),
    });
  }
  const meanParts = {} as Record<Part, PartFigure>;
  for (const part of PARTS)
    meanParts[part] = sumFigures(
      perDesktop.map((x) => x.parts[part]),
      perDesktop.length,
    );
  return {
    desktops: perDesktop.length,
    state,
    per_desktop: perDesktop,
    mean: {
      parts: meanParts,
      total: sumFigures(
        perDesktop.map((x) => x.total),
        perDesktop.length,
      ),
    },
    daemon: await partFigure(found.daemon, cpu, seconds),
    ...(seconds ? { rest_s: round2(seconds) } : {}),
  };
}

// ---------------------------------------------------------------- sessions

const isWelcome = (m: ServerMessage): m is Welcome => m.type === 'welcome';

/** A new session that asks for `welcome.desktop` and no tool_event frames; the time is hello → welcome. */
async function openSession(d: Daemon): Promise<{ client: BenchClient; welcome: Welcome; ms: number }> {
  const client = await BenchClient.open(d.url, BENCH_TOKEN);
  try {
    const reply = await client.request({ type: 'hello', events: false, desktop: {} }, isWelcome);
    return { client, welcome: reply.message, ms: reply.ms };
  } catch (err) {
    client.close();
    throw err;
  }
}

const computer = (name: string, input: Record<string, unknown> = {}): ToolUse => toolUse('computer', name, input);
const agentBatch = (a: Agent): ToolUse[] => [
  computer('left_click', { coordinate: clickPoint(a.index, a.batches++) }),
  computer('type', { text: TYPED }),
  computer('screenshot'),
];

interface Agent {
  client: BenchClient;
  desktop: string;
  /** Its place among the K agents of its daemon: where it clicks. */
  index: number;
  /** Batches sent so far: which point the next click goes to. */
  batches: number;
}

/** K sessions on `d`, each with the page open in its browser, warmed up. */
async function openAgents(d: Daemon, k: number, pageUrl: string): Promise<Agent[]> {
  const agents: Agent[] = [];
  try {
    for (let i = 0; i < k; i++) {
      const { client, welcome } = await openSession(d);
      agents.push({ client, desktop: welcome.desktop?.id ?? '?', index: i, batches: 0 });
    }
    await Promise.all(
      agents.map(async (a) => {
        await a.client.batch(nextId('nav'), [toolUse('browser', 'navigate', { url: pageUrl })]);
      }),
    );
    // The window is mapped and focused a moment after the load.
    await sleep(1_000);
    await Promise.all(
      agents.map(async (a) => {
        for (let i = 0; i < WARMUP_BATCHES; i++) await a.client.batch(nextId('warm'), agentBatch(a));
      }),
    );
    return agents;
  } catch (err) {
    for (const a of agents) a.client.close();
    throw err;
  }
}

type CpuPart = 'daemon' | Part;
const CPU_PARTS: readonly CpuPart[] = ['daemon', ...PARTS];
const MEMBERS = ['left_click', 'type', 'screenshot'] as const;
type Member = (typeof MEMBERS)[number];

interface Segment {
  times: number[];
  images: number[];
  errors: number;
  elapsedMs: number;
  /** CPU seconds over the segment: the daemon and its desktops by part, this bench process (the K clients), the machine. */
  cpu: { parts: Record<CpuPart, number>; bench: number; machineBusy: number; machineTotal: number };
  /** The daemon's call durations over the segment (deskbatch_call_duration_seconds): seconds and calls by member. */
  calls: Record<Member, { seconds: number; count: number }>;
}

/** utime + stime, in seconds, of each process of the daemon and its desktops now, with the part it belongs to. */
async function cpuByProcess(daemonPid: number): Promise<Map<number, { part: CpuPart; seconds: number }>> {
  const { desktops, daemon } = await desktopProcesses(daemonPid);
  const out = new Map<number, { part: CpuPart; seconds: number }>();
  const add = async (pid: number, part: CpuPart): Promise<void> => {
    const t = await cpuTicks(pid);
    if (t !== undefined) out.set(pid, { part, seconds: t / ticksPerSecond() });
  };
  for (const pid of daemon) await add(pid, 'daemon');
  for (const d of desktops) for (const part of PARTS) for (const pid of d.parts[part]) await add(pid, part);
  return out;
}

/** Busy and total CPU seconds of the whole machine since boot, from /proc/stat. */
async function machineCpu(): Promise<{ busy: number; total: number }> {
  const line = (await readFile('/proc/stat', 'utf8')).split('\n')[0]!;
  const v = line.trim().split(/\s+/).slice(1, 9).map(Number); // user nice system idle iowait irq softirq steal
  const total = v.reduce((a, b) => a + b, 0);
  return { busy: (total - v[3]! - v[4]!) / ticksPerSecond(), total: total / ticksPerSecond() };
}

async function callDurations(d: Daemon): Promise<Record<Member, { seconds: number; count: number }>> {
  const text = await metrics(d);
  const read = (member: Member, what: 'sum' | 'count'): number => {
    const m = new RegExp(
      `^deskbatch_call_duration_seconds_${what}\\{(?=[^}]*toolset="computer")(?=[^}]*member="${member}")[^}]*\\} (\\S+)$`,
      'm',
    ).exec(text);
    return m ? Number(m[1]) : 0;
  };
  const out = {} as Record<Member, { seconds: number; count: number }>;
  for (const member of MEMBERS) out[member] = { seconds: read(member, 'sum'), count: read(member, 'count') };
  return out;
}

/** Every agent loops its batch until `ms` have passed; the batch in flight at the deadline still counts. */
async function segment(d: Daemon, agents: readonly Agent[], ms: number): Promise<Segment> {
  const times: number[] = [];
  const images: number[] = [];
  let errors = 0;
  const calls0 = await callDurations(d);
  const cpu0 = await cpuByProcess(d.proc.pid);
  const machine0 = await machineCpu();
  const bench0 = process.cpuUsage();
  const t0 = performance.now();
  const deadline = t0 + ms;
  await Promise.all(
    agents.map(async (a) => {
      while (performance.now() < deadline) {
        try {
          const reply = await a.client.batch(nextId('k'), agentBatch(a));
          times.push(reply.ms);
          images.push(imageBytes(reply.message));
        } catch (err) {
          errors++;
          // A closed connection ends the run; a failed call is counted and the loop goes on.
          if (a.client.closedWith || errors > 20) throw err;
        }
      }
    }),
  );
  const elapsedMs = performance.now() - t0;
  const bench = process.cpuUsage(bench0);
  const machine1 = await machineCpu();
  const cpu1 = await cpuByProcess(d.proc.pid);
  const calls1 = await callDurations(d);
  const parts = Object.fromEntries(CPU_PARTS.map((p) => [p, 0])) as Record<CpuPart, number>;
  // A process there at both ends only: one that started or ended within the segment is not counted.
  for (const [pid, now] of cpu1) parts[now.part] += now.seconds - (cpu0.get(pid)?.seconds ?? now.seconds);
  const calls = {} as Segment['calls'];
  for (const m of MEMBERS) {
    calls[m] = { seconds: calls1[m].seconds - calls0[m].seconds, count: calls1[m].count - calls0[m].count };
  }
  return {
    times,
    images,
    errors,
    elapsedMs,
    cpu: {
      parts,
      bench: (bench.user + bench.system) / 1e6,
      machineBusy: machine1.busy - machine0.busy,
      machineTotal: machine1.total - machine0.total,
    },
    calls,
  };
}

function modeRun(segments: readonly Segment[]): ModeRun {
  const times = segments.flatMap((s) => s.times);
  const images = segments.flatMap((s) => s.images);
  const elapsed = segments.reduce((a, s) => a + s.elapsedMs, 0) / 1000;
  const cpu = (pick: (s: Segment) => number): number => segments.reduce((a, s) => a + pick(s), 0);
  const daemonCpu = cpu((s) => CPU_PARTS.reduce((a, p) => a + s.cpu.parts[p], 0));
  const n = Math.max(1, times.length);
  return {
    batches: times.length,
    errors: segments.reduce((a, s) => a + s.errors, 0),
    elapsed_s: round2(elapsed),
    batches_per_s: round2(times.length / elapsed),
    p50_ms: round2(median(times)),
    p95_ms: round2(percentile(times, 0.95)),
    image_bytes: Math.round(images.reduce((a, b) => a + b, 0) / Math.max(1, images.length)),
    daemon_cores: round2(daemonCpu / elapsed),
    bench_cores: round2(cpu((s) => s.cpu.bench) / elapsed),
    // /proc/stat counts every CPU: its total over the time is cores × seconds.
    machine_busy_cores: round2((cpu((s) => s.cpu.machineBusy) / cpu((s) => s.cpu.machineTotal)) * os.cpus().length),
    daemon_cpu_ms_per_batch: round2((daemonCpu / n) * 1000),
    cpu_ms_per_batch: Object.fromEntries(
      CPU_PARTS.map((p) => [p, round2((cpu((s) => s.cpu.parts[p]) / n) * 1000)]),
    ) as Record<CpuPart, number>,
    call_ms: Object.fromEntries(
      MEMBERS.map((m) => [
        m,
        round2(
          (cpu((s) => s.calls[m].seconds) /
            Math.max(
              1,
              cpu((s) => s.calls[m].count),
            )) *
            1000,
        ),
      ]),
    ) as Record<Member, number>,
  };
}

// ---------------------------------------------------------------- the parts

function series(samples: readonly number[]): Series {
  return {
    median_ms: round2(median(samples)),
    p95_ms: round2(percentile(samples, 0.95)),
    n: samples.length,
    samples_ms: samples.map(round2),
  };
}

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
        // Not free while the session's desktop is leased or torn down (max 1): free again means a fresh
        // warm desktop (warm pool), or the room to start one (cold pool).
        await sleep(POLL_MS);
        const free = await waitUntil(`${d.label} to be free again`, () => ready(d), WARM_TIMEOUT_MS);
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

const RESULTS = new URL('./results.json', import.meta.url);

/** Runs the section alone: prints its table and sets `density` in bench/results.json (keeping what else is there). */
export async function densityMain(): Promise<void> {
  const report = await densityRun();
  console.log(densityTable(report));
  const existing = await readFile(RESULTS, 'utf8').then(
    (text) => JSON.parse(text) as Record<string, unknown>,
    () => ({}),
  );
  await writeFile(RESULTS, `${JSON.stringify({ ...existing, density: report }, null, 2)}\n`);
  console.log(`density: ${report.duration_s} s; written to bench/results.json (key "density")`);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await densityMain();
