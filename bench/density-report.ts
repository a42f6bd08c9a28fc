/**
 * The density section's report (bench/density.ts), as results.json keeps it and
 * the printed table reads it (bench/report.ts): in a file of its own, so the
 * table does not import the run that prints it.
 */
import type { MachineInfo } from './machine.ts';
import { median, percentile, round2 } from './stats.ts';

export type Part = 'xvfb' | 'openbox' | 'worker' | 'chromium';
export const PARTS: readonly Part[] = ['xvfb', 'openbox', 'worker', 'chromium'];

export interface PartFigure {
  processes: number;
  pss_mib: number;
  /** The file-backed part of PSS (program code, libraries, fonts): split among every process mapping it. */
  pss_file_mib: number;
  uss_mib: number;
  /** % of one core, over the rest interval (absent where CPU was not counted). */
  cpu_pct?: number;
}

export interface DesktopFigure {
  id: string;
  parts: Record<Part, PartFigure>;
  total: PartFigure;
  /** What the daemon itself reports for it (deskbatch_desktop_memory_bytes, PSS), MiB. */
  daemon_metric_mib?: number;
}

export interface RestReport {
  /** Desktops warm (or leased, `after_run`) at the time. */
  desktops: number;
  state: 'warm' | 'leased_after_run';
  per_desktop: DesktopFigure[];
  /** Mean over the desktops. */
  mean: { parts: Record<Part, PartFigure>; total: PartFigure };
  /** The daemon process and its own children (under tsx, before issue 31 item 5: esbuild): shared by all desktops, not per desktop. */
  daemon: PartFigure;
  rest_s?: number;
}

export interface Series {
  median_ms: number;
  p95_ms: number;
  n: number;
  samples_ms: number[];
}

/** The median, p95 and every sample of a set of times (ms, two decimals). */
export function series(samples: readonly number[]): Series {
  return {
    median_ms: round2(median(samples)),
    p95_ms: round2(percentile(samples, 0.95)),
    n: samples.length,
    samples_ms: samples.map(round2),
  };
}

export interface LeaseReport {
  warm_lease: Series;
  cold_lease: Series;
  /** The daemon's own lease wait (deskbatch_desktop_lease_wait_seconds), per sample. */
  warm_lease_daemon: Series;
  cold_lease_daemon: Series;
  /** deskbatch_desktop_recycle_seconds: a used desktop's teardown. */
  teardown: Series;
  /** deskbatch_desktop_start_seconds: a fresh warm desktop, after a teardown. */
  start: Series;
  /** From the client's close to /readyz saying a fresh warm desktop is there. */
  end_to_warm: Series;
  /** The desktop ids the warm leases got (each a fresh one). */
  warm_ids: string[];
}

export type LeaseSeries = Exclude<keyof LeaseReport, 'warm_ids'>;

/**
 * The lease and recycle rows of the printed table (bench/report.ts), in order, each with its figure id: the key
 * of its previous figure in bench/baseline.json (bench/baseline.ts).
 */
export const LEASE_ROWS: readonly { key: LeaseSeries; id: string; name: string }[] = (
  [
    { key: 'warm_lease', name: 'warm lease: hello → welcome (--warm 1)' },
    { key: 'warm_lease_daemon', name: "  the daemon's lease wait (deskbatch_desktop_lease_wait_seconds)" },
    { key: 'cold_lease', name: 'cold lease: hello → welcome (--warm 0: Xvfb, openbox, worker, Chromium)' },
    { key: 'cold_lease_daemon', name: "  the daemon's lease wait" },
    { key: 'teardown', name: 'recycle: teardown (deskbatch_desktop_recycle_seconds)' },
    { key: 'start', name: 'recycle: a fresh desktop started (deskbatch_desktop_start_seconds)' },
    { key: 'end_to_warm', name: 'recycle: session end → a fresh warm desktop (its warm count, observed)' },
  ] satisfies { key: LeaseSeries; name: string }[]
).map((row) => ({ ...row, id: `density.${row.key}` }));

export interface ModeRun {
  batches: number;
  errors: number;
  elapsed_s: number;
  batches_per_s: number;
  p50_ms: number;
  p95_ms: number;
  /** Mean PNG bytes per screenshot: both modes encode pages alike. */
  image_bytes: number;
  /** Cores the daemon and all its desktops' processes used, on average over the run. */
  daemon_cores: number;
  /** Cores this bench process (the K clients) used. */
  bench_cores: number;
  /** Cores busy on the whole machine (other jobs included), from /proc/stat. */
  machine_busy_cores: number;
  /** CPU time of the daemon and its desktops per batch. */
  daemon_cpu_ms_per_batch: number;
  /** The same by part: the daemon process itself, and its desktops' Xvfb, openbox, worker and Chromium. */
  cpu_ms_per_batch: Record<'daemon' | Part, number>;
  /** Mean time of each call in the batch, as the daemon times it (deskbatch_call_duration_seconds). */
  call_ms: Record<'left_click' | 'type' | 'screenshot', number>;
}

export interface AgentsRow {
  k: number;
  cap: boolean;
  pool: ModeRun;
  shared: ModeRun;
  /** pool / shared total batches per second. */
  throughput_ratio: number;
  /** Load average (1 min) at the start and end of this K. */
  load: [number, number];
}

export interface Target {
  name: string;
  /** The target as it reads; absent for a line shown beside a target, for information. */
  target?: string;
  value: number;
  unit: string;
  met?: boolean;
}

export interface DensityReport {
  machine: MachineInfo;
  source: { commit: string; uncommitted: string[] } | null;
  settings: {
    display: string;
    format: 'png';
    batch: string;
    agent_seconds_per_mode: number;
    segments: number;
    leases: number;
    rest_s: number;
    default_cap: number;
    ks: number[];
  };
  rest: RestReport[];
  after_run: RestReport[];
  leases: LeaseReport;
  agents: AgentsRow[];
  ratios: { name: string; value: number; unit: string }[];
  targets: Target[];
  duration_s: number;
}
