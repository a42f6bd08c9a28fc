/**
 * The bench's numbers: how a series of timings becomes a figure (median, p95,
 * n), the iteration counts, and progress lines on stderr. Pure helpers; no
 * process, display or socket is started here.
 */
import { performance } from 'node:perf_hooks';

/** Timed iterations per figure; `BENCH_ITERATIONS` overrides. */
export const ITERATIONS = positiveInt(process.env.BENCH_ITERATIONS, 30);
/** Untimed iterations first (JIT, caches, the worker's first grab). */
export const WARMUP = Math.min(5, Math.max(2, Math.round(ITERATIONS / 6)));

export interface Figure {
  /** Stable key, used by the ratios and in results.json. */
  id: string;
  /** What a reader sees in the table. */
  name: string;
  median_ms: number;
  p95_ms: number;
  n: number;
  /** Bytes of the image itself (binary), when the figure produces one. */
  image_bytes?: number;
  /** Bytes that crossed the socket for one iteration (every frame, as sent). */
  sent_bytes?: number;
  /** Set when the figure could not be measured here; the timings are then NaN. */
  unavailable?: string;
  note?: string;
}

export function positiveInt(raw: string | undefined, fallback: number): number {
  const n = Number(raw);
  return Number.isInteger(n) && n > 0 ? n : fallback;
}

export const round2 = (v: number): number => Math.round(v * 100) / 100;

/** Median (mean of the middle two for an even count). */
export function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** Nearest-rank percentile: the smallest value with at least q of the samples at or below it. */
export function percentile(values: readonly number[], q: number): number {
  const s = [...values].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
}

export function figure(
  id: string,
  name: string,
  times: readonly number[],
  extra: Partial<Pick<Figure, 'image_bytes' | 'sent_bytes' | 'note'>> = {},
): Figure {
  return {
    id,
    name,
    median_ms: round2(median(times)),
    p95_ms: round2(percentile(times, 0.95)),
    n: times.length,
    ...(extra.image_bytes !== undefined ? { image_bytes: Math.round(extra.image_bytes) } : {}),
    ...(extra.sent_bytes !== undefined ? { sent_bytes: Math.round(extra.sent_bytes) } : {}),
    ...(extra.note ? { note: extra.note } : {}),
  };
}

/** A figure that could not be measured on this machine, with the reason shown in its place. */
export function unavailableFigure(id: string, name: string, reason: string): Figure {
  return { id, name, median_ms: NaN, p95_ms: NaN, n: 0, unavailable: reason };
}

/**
 * Runs `fn` WARMUP + `iterations` times and returns the timed durations.
 * `fn` may time itself (return a number, in ms) when only part of it counts;
 * otherwise the whole call is timed.
 */
export async function timeLoop(
  fn: (i: number) => Promise<number | void>,
  iterations = ITERATIONS,
  warmup = WARMUP,
): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < warmup + iterations; i++) {
    const t0 = performance.now();
    const own = await fn(i);
    const dt = typeof own === 'number' ? own : performance.now() - t0;
    if (i >= warmup) times.push(dt);
  }
  return times;
}

/**
 * Runs every variant once per iteration, each iteration starting with the
 * next variant in turn, so load that drifts during the run falls on all of
 * them alike: the ratios between them are then fair on a shared machine.
 * A variant may time itself (return ms), or sit an iteration out (return
 * null: nothing is recorded). `i` counts warm-up iterations too.
 */
export type Variant = (i: number) => Promise<number | void | null>;

export async function interleave<K extends string>(
  variants: Record<K, Variant>,
  iterations = ITERATIONS,
  warmup = WARMUP,
): Promise<Record<K, number[]>> {
  const names = Object.keys(variants) as K[];
  const times = Object.fromEntries(names.map((n) => [n, [] as number[]])) as Record<K, number[]>;
  for (let i = 0; i < warmup + iterations; i++) {
    for (let k = 0; k < names.length; k++) {
      const name = names[(i + k) % names.length]!;
      const t0 = performance.now();
      const own = await variants[name](i);
      if (i >= warmup && own !== null) times[name].push(typeof own === 'number' ? own : performance.now() - t0);
    }
  }
  return times;
}

export const mean = (values: readonly number[]): number =>
  values.length ? values.reduce((a, b) => a + b, 0) / values.length : NaN;

/** One progress line on stderr (stdout carries only the tables). */
export function progress(message: string): void {
  process.stderr.write(`[bench ${(performance.now() / 1000).toFixed(1).padStart(6)} s] ${message}\n`);
}
