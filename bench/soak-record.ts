/**
 * The soak's settings and what it records as it goes (bench/soak.ts): the
 * SOAK_* knobs and the limits of its checks, the clock and progress line,
 * the daemon's samples every 5 s (its RSS and open fds, its children's PSS,
 * the screenshots directory), the faults injected, the load's batches and the
 * problems seen. Shared by the run, its faults (bench/soak-faults.ts) and its
 * verdict (bench/soak-report.ts); starts nothing.
 */
import { randomBytes } from 'node:crypto';
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { DEFAULT_CONFIG } from '../src/base/config.ts';
import type { DaemonProcess } from '../testkit/daemon-process.ts';
import { RESOURCE_DOWN_TYPES, descendants, processFootprint } from '../testkit/faults.ts';
import type { BatchRecord } from '../testkit/load.ts';

export const MINUTES = Number(process.env.SOAK_MINUTES ?? 5);
export const SESSIONS = Number(process.env.SOAK_SESSIONS ?? 32);
export const DURATION_MS = Math.round(MINUTES * 60_000);
/** Samples before this are warm-up (the first sessions, Chromium, 32 contexts): not compared. */
export const WARMUP_MS = Math.min(60_000, Math.round(DURATION_MS * 0.2));
export const FAULT_EVERY_MS =
  Number(process.env.SOAK_FAULT_EVERY_S ?? 0) * 1000 || clamp(DURATION_MS / 8, 7_500, 30_000);
export const SAMPLE_EVERY_MS = 5_000;
/**
 * The daemon's per-call limit. Longer than the default 30 s: on two shared cores, creating
 * 32 browser contexts at once can take that long by itself, and the soak is about what stays
 * flat, not about speed.
 */
export const CALL_TIMEOUT_MS = Number(process.env.SOAK_CALL_TIMEOUT_MS ?? 60_000);
/** Slots whose sessions live a few rounds each (churn); the others hold their session for the whole run. */
export const CHURN_SLOTS = Math.max(1, Math.round(SESSIONS * 0.2));
export const CHURN_ROUNDS = 4;
/** Limits of the checks. */
export const RSS_GROWTH_MAX = 0.3;
/**
 * A steady leak shows as a trend: the least-squares line through the RSS samples after warm-up
 * rises by more than this over the window, and explains most of their variance (r² ≥ 0.5).
 * Measured here: healthy runs fit +3% (r² 0.07) and −0.5% (r² 0.03); a daemon made to leak
 * 1 MiB per batch fit +23% (r² 0.72) while its thirds grew only 15%.
 */
export const RSS_TREND_MAX = 0.1;
export const RSS_TREND_R2 = 0.5;
export const FD_GROWTH_MAX = 8;
export const RECOVERY_MAX_MS = 90_000;
/** A retryable failure this long after a fault is still explained by it. */
export const FAULT_SHADOW_MS = 60_000;
export const RETRYABLE_TYPES = [
  ...RESOURCE_DOWN_TYPES,
  // navigate's own limits (20 s to DOMContentLoaded) on a machine starved of CPU
  'NavigationError',
];
export const RETENTION = DEFAULT_CONFIG.retention;
export const RESULT_CACHE = DEFAULT_CONFIG.resultCache;
export const TOKEN = `soak-${randomBytes(16).toString('hex')}`;

function clamp(v: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, v));
}

export const t0 = performance.now();
export const elapsed = (): number => performance.now() - t0;
export const say = (line: string): void => console.log(`[soak ${(elapsed() / 1000).toFixed(0).padStart(4)} s] ${line}`);

// ---------------------------------------------------------------------------------------------
// Figures

interface Sample {
  t: number;
  rssBytes: number;
  fds: number;
  childrenPssBytes: number;
  shotFiles: number;
  shotBytes: number;
  shotDirs: number;
}

export type FaultKind = 'desktop_worker' | 'browser' | 'malformed_burst' | 'attack';

export interface Fault {
  kind: FaultKind;
  at: number;
  /** Processes signalled (SIGKILL), frames sent for a burst, or attacks tried. */
  count: number;
  /** The batch running under the fault failed with a retryable error, as it should. */
  hit: boolean;
  /** ms from the fault until a batch of the affected toolset succeeded again. */
  recoveredMs?: number;
  note?: string;
}

/** Faults that take nothing down, so there is no recovery to wait for. */
export const noRecovery = (f: Fault): boolean => f.kind === 'malformed_burst' || f.kind === 'attack';

export const samples: Sample[] = [];
export const faults: Fault[] = [];
export const batchLog: { at: number; record: BatchRecord }[] = [];
export const problems: string[] = [];
/** Batches, calls, results and malformed frames of the fault and probe sessions (outside the harness). */
export const extra = {
  batches: 0,
  calls: 0,
  results: 0,
  lost: 0,
  duplicated: 0,
  crossed: 0,
  malformedSent: 0,
  malformedAnswered: 0,
};
export const problem = (what: string): void => {
  say(`PROBLEM: ${what}`);
  if (problems.length < 100) problems.push(what);
};

export const mb = (b: number): string => `${(b / 1024 / 1024).toFixed(1)} MiB`;

// ---------------------------------------------------------------------------------------------
// Samples

async function walk(dir: string): Promise<{ files: number; bytes: number; dirs: number }> {
  const out = { files: 0, bytes: 0, dirs: 0 };
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  for (const e of entries) {
    const path = join(dir, e.name);
    if (e.isDirectory()) {
      out.dirs++;
      const sub = await walk(path);
      out.files += sub.files;
      out.bytes += sub.bytes;
      out.dirs += sub.dirs;
    } else if (e.isFile()) {
      const s = await stat(path).catch(() => undefined);
      if (s) {
        out.files++;
        out.bytes += s.size;
      }
    }
  }
  return out;
}

/** Proportional set size of the daemon's children (Chromium, the desktop worker): shared pages counted once. */
async function childrenPss(pid: number): Promise<number> {
  let total = 0;
  for (const p of await descendants(pid)) {
    const rollup = await readFile(`/proc/${p.pid}/smaps_rollup`, 'utf8').catch(() => '');
    total += Number(/^Pss:\s+(\d+)\s+kB/m.exec(rollup)?.[1] ?? 0) * 1024;
  }
  return total;
}

export async function sample(daemon: DaemonProcess, shots: string): Promise<Sample | undefined> {
  if (daemon.hasExited()) return undefined;
  try {
    const fp = await processFootprint(daemon.pid);
    const dir = await walk(shots);
    const s: Sample = {
      t: elapsed(),
      rssBytes: fp.rssBytes,
      fds: fp.fds,
      childrenPssBytes: await childrenPss(daemon.pid),
      shotFiles: dir.files,
      shotBytes: dir.bytes,
      shotDirs: dir.dirs,
    };
    samples.push(s);
    return s;
  } catch {
    return undefined;
  }
}
