/**
 * The density section's agents (bench/density.ts): sessions opened on a
 * daemon (hello → welcome timed), K agents each with its page open, and a
 * segment of load in which every agent loops its batch [left_click, type,
 * screenshot], with the CPU of the daemon and its desktops by part, of this
 * process and of the machine, and the daemon's own call durations over it;
 * then the segments of one mode summed into its row.
 */
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ServerMessage, ToolUse, Welcome } from '../src/base/protocol.ts';
import { BenchClient, imageBytes, nextId, toolUse } from './client.ts';
import { metrics, type Daemon } from './density-daemon.ts';
import { CPU_PARTS, cpuByProcess, machineCpu, type CpuPart } from './density-procs.ts';
import type { ModeRun } from './density-report.ts';
import { BENCH_TOKEN } from './daemon-process.ts';
import { median, percentile, round2 } from './stats.ts';

/** Untimed batches per agent before the first segment (the worker's first grab, sharp's first encode). */
const WARMUP_BATCHES = 3;

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
export const TYPED = 'hello ';

const isWelcome = (m: ServerMessage): m is Welcome => m.type === 'welcome';

/** A new session that asks for `welcome.desktop` and no tool_event frames; the time is hello → welcome. */
export async function openSession(d: Daemon): Promise<{ client: BenchClient; welcome: Welcome; ms: number }> {
  const client = await BenchClient.open(d.url, BENCH_TOKEN);
  try {
    const reply = await client.request({ type: 'hello', events: false, desktop: {} }, isWelcome);
    return { client, welcome: reply.message, ms: reply.ms };
  } catch (err) {
    client.close();
    throw err;
  }
}

export const computer = (name: string, input: Record<string, unknown> = {}): ToolUse =>
  toolUse('computer', name, input);
const agentBatch = (a: Agent): ToolUse[] => [
  computer('left_click', { coordinate: clickPoint(a.index, a.batches++) }),
  computer('type', { text: TYPED }),
  computer('screenshot'),
];

export interface Agent {
  client: BenchClient;
  desktop: string;
  /** Its place among the K agents of its daemon: where it clicks. */
  index: number;
  /** Batches sent so far: which point the next click goes to. */
  batches: number;
}

/** K sessions on `d`, each with the page open in its browser, warmed up. */
export async function openAgents(d: Daemon, k: number, pageUrl: string): Promise<Agent[]> {
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

const MEMBERS = ['left_click', 'type', 'screenshot'] as const;
type Member = (typeof MEMBERS)[number];

export interface Segment {
  times: number[];
  images: number[];
  errors: number;
  elapsedMs: number;
  /** CPU seconds over the segment: the daemon and its desktops by part, this bench process (the K clients), the machine. */
  cpu: { parts: Record<CpuPart, number>; bench: number; machineBusy: number; machineTotal: number };
  /** The daemon's call durations over the segment (deskbatch_call_duration_seconds): seconds and calls by member. */
  calls: Record<Member, { seconds: number; count: number }>;
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
export async function segment(d: Daemon, agents: readonly Agent[], ms: number): Promise<Segment> {
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

export function modeRun(segments: readonly Segment[]): ModeRun {
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
