/**
 * The density section's view of a daemon's desktops from outside
 * (bench/density.ts): their processes found by walking the daemon's process
 * tree in /proc (Xvfb by its `-auth` folder, openbox by its `--config-file`,
 * the worker and Chromium by their XAUTHORITY; crashpad handlers, reparented
 * to init, by theirs), each desktop's memory (PSS, USS) and CPU by part beside
 * the daemon's own figure, and the CPU seconds of each process and of the
 * machine. Only reads /proc; never signals a process.
 */
import { execFileSync } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { desktopMemoryMetric, metrics, MIB, type Daemon } from './density-daemon.ts';
import { PARTS, type DesktopFigure, type Part, type PartFigure, type RestReport } from './density-report.ts';
import { round2 } from './stats.ts';

/** src/ops/metrics.ts DESKTOP_MEMORY_CACHE_MS, and a little more. */
const METRIC_MEMORY_CACHE_MS = 10_500;

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

export async function environ(pid: number): Promise<Record<string, string>> {
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
/** The compiled worker (dist/…/worker.js), or under tsx (src/…/worker.ts) in a run of an older commit. */
const WORKER = /\/src\/desktop-driver\/worker\.(ts|js)(\s|$)/;
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
export async function measureDesktops(
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

export type CpuPart = 'daemon' | Part;
export const CPU_PARTS: readonly CpuPart[] = ['daemon', ...PARTS];

/** utime + stime, in seconds, of each process of the daemon and its desktops now, with the part it belongs to. */
export async function cpuByProcess(daemonPid: number): Promise<Map<number, { part: CpuPart; seconds: number }>> {
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
export async function machineCpu(): Promise<{ busy: number; total: number }> {
  const line = (await readFile('/proc/stat', 'utf8')).split('\n')[0]!;
  const v = line.trim().split(/\s+/).slice(1, 9).map(Number); // user nice system idle iowait irq softirq steal
  const total = v.reduce((a, b) => a + b, 0);
  return { busy: (total - v[3]! - v[4]!) / ticksPerSecond(), total: total / ticksPerSecond() };
}
