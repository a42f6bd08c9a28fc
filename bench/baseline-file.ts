/**
 * bench/baseline.json: the previous recorded figures every bench row is printed
 * beside (bench/baseline.ts compares). Read from there, or from the file
 * BENCH_BASELINE names: a baseline, or a bench/results.json of an earlier run.
 * Written only when asked, `BENCH_RECORD=1`, from the run's own results,
 * merged into what the file held: rows this run did not measure (a section
 * not run, BENCH_ONLY, BENCH_SKIP) keep their previous figure, as
 * bench/results.json keeps the sections a BENCH_ONLY run leaves out.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import {
  Comparison,
  ratioKey,
  type Baseline,
  type FigureRow,
  type Measured,
  type RatioRow,
  type SandboxRowLike,
} from './baseline.ts';
import { LEASE_ROWS, type LeaseSeries } from './density-report.ts';
import type { MachineInfo } from './machine.ts';

const BASELINE = new URL('./baseline.json', import.meta.url);
const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** What a run measured, as its tables print it: the rows a baseline is made of. */
export interface RunRows {
  figures?: readonly FigureRow[];
  ratios?: readonly RatioRow[];
  /** Section `density`: its lease and recycle series, its ratio lines and its targets. */
  density?: {
    leases?: Partial<Record<LeaseSeries, { median_ms: number; p95_ms: number; n: number }>>;
    ratios: readonly RatioRow[];
    targets: readonly RatioRow[];
  };
  sandbox?: { rows: readonly SandboxRowLike[] };
}

const empty = (): Baseline => ({ runs: {}, figures: {}, ratios: {}, sandbox: {} });

export function measuredOf(
  info: Pick<MachineInfo, 'date' | 'loadavg_start' | 'loadavg_end'>,
  source: { commit: string; uncommitted: string[] } | null,
): Measured {
  return {
    commit: source?.commit ?? 'unknown',
    ...(source?.uncommitted.length ? { uncommitted: source.uncommitted } : {}),
    date: info.date,
    loadavg_start: info.loadavg_start,
    loadavg_end: info.loadavg_end,
  };
}

/** A baseline of one run's rows; a row this run could not measure (n/a) is left out. */
export function baselineOf(rows: RunRows, measured: Measured): Baseline {
  const run = measured.date;
  const out: Baseline = { ...empty(), runs: { [run]: measured } };
  for (const f of rows.figures ?? []) {
    if (f.unavailable || !Number.isFinite(f.median_ms)) continue;
    out.figures[f.id] = {
      name: f.name,
      median_ms: f.median_ms,
      ...(Number.isFinite(f.p95_ms) ? { p95_ms: f.p95_ms } : {}),
      ...(f.n !== undefined ? { n: f.n } : {}),
      run,
    };
  }
  const ratio = (r: RatioRow, section?: string): void => {
    if (!Number.isFinite(r.value)) return;
    const target = r.target === undefined ? {} : { target: r.target };
    out.ratios[ratioKey(r.name, section)] = { name: r.name, value: r.value, unit: r.unit, ...target, run };
  };
  for (const r of rows.ratios ?? []) ratio(r);
  const density = rows.density;
  if (density) {
    for (const { key, id, name } of LEASE_ROWS) {
      const s = density.leases?.[key];
      if (s && Number.isFinite(s.median_ms)) out.figures[id] = { name, ...s, run };
    }
    for (const r of [...density.ratios, ...density.targets]) ratio(r, 'density');
  }
  for (const r of rows.sandbox?.rows ?? []) {
    if (Number.isFinite(r.on)) out.sandbox[r.id] = { name: r.name, unit: r.unit, off: r.off, on: r.on, run };
  }
  return out;
}

/** `old` with every row of `fresh` in place of its own; the runs no row refers to any more are dropped. */
export function merged(old: Baseline, fresh: Baseline): Baseline {
  const out: Baseline = {
    runs: { ...old.runs, ...fresh.runs },
    figures: { ...old.figures, ...fresh.figures },
    ratios: { ...old.ratios, ...fresh.ratios },
    sandbox: { ...old.sandbox, ...fresh.sandbox },
  };
  const used = new Set([out.figures, out.ratios, out.sandbox].flatMap((rows) => Object.values(rows).map((r) => r.run)));
  for (const key of Object.keys(out.runs)) if (!used.has(key)) delete out.runs[key];
  return out;
}

// ---------------------------------------------------------------------------
// The two formats read: a baseline, and bench/results.json (bench/bench.ts writes it; NaN is null in JSON).

const num = z
  .number()
  .nullable()
  .transform((v) => v ?? NaN);
const measuredSchema = z.object({
  commit: z.string(),
  uncommitted: z.array(z.string()).optional(),
  date: z.string(),
  loadavg_start: z.array(z.number()).optional(),
  loadavg_end: z.array(z.number()).optional(),
  note: z.string().optional(),
});
const baselineSchema = z.object({
  runs: z.record(z.string(), measuredSchema),
  figures: z.record(
    z.string(),
    z.object({
      name: z.string(),
      median_ms: z.number(),
      p95_ms: z.number().optional(),
      n: z.number().optional(),
      run: z.string(),
    }),
  ),
  ratios: z.record(
    z.string(),
    z.object({ name: z.string(), value: z.number(), unit: z.string(), target: z.string().optional(), run: z.string() }),
  ),
  sandbox: z.record(
    z.string(),
    z.object({ name: z.string(), unit: z.string(), off: z.number(), on: z.number(), run: z.string() }),
  ),
});

const figureSchema = z.object({
  id: z.string(),
  name: z.string(),
  median_ms: num,
  p95_ms: num.optional(),
  n: z.number().optional(),
  unavailable: z.string().optional(),
});
const ratioSchema = z.object({ name: z.string(), value: num, unit: z.string(), target: z.string().optional() });
const machineSchema = z.object({
  date: z.string(),
  loadavg_start: z.array(z.number()),
  loadavg_end: z.array(z.number()),
});
const sourceSchema = z.object({ commit: z.string(), uncommitted: z.array(z.string()) }).nullable();
/** A part of results.json measured by a run of its own: the whole run, or a section a BENCH_ONLY run wrote. */
const ranSchema = z.object({ machine: machineSchema, source: sourceSchema.optional() });
const seriesSchema = z.object({ median_ms: num, p95_ms: num, n: z.number() });
const resultsSchema = z.object({
  machine: machineSchema.optional(),
  source: sourceSchema.optional(),
  figures: z.array(figureSchema).optional(),
  ratios: z.array(ratioSchema).optional(),
  browser: z.unknown().optional(),
  recording: z.unknown().optional(),
  takeover: z.unknown().optional(),
  density: z.unknown().optional(),
  sandbox: z.unknown().optional(),
});
const sectionSchema = ranSchema.extend({
  figures: z.array(figureSchema).optional(),
  ratios: z.array(ratioSchema).optional(),
});
const densitySchema = ranSchema.extend({
  leases: z.record(z.string(), seriesSchema).optional(),
  ratios: z.array(ratioSchema),
  targets: z.array(ratioSchema),
});
const sandboxSchema = ranSchema.extend({
  // Rows without an id were written before rows had one; they have no stable key to be matched by.
  rows: z.array(z.object({ id: z.string().optional(), name: z.string(), unit: z.string(), off: num, on: num })),
});

const measuredFrom = (part: z.infer<typeof ranSchema>): Measured => measuredOf(part.machine, part.source ?? null);

/**
 * A bench/results.json as a baseline. The whole run's figures and ratios first; then each section that a
 * BENCH_ONLY run wrote after it (a section with its own `machine`: the whole run writes its sections without),
 * whose rows replace the whole run's, being newer.
 */
export function fromResults(json: unknown): Baseline {
  const r = resultsSchema.parse(json);
  let out = empty();
  if (r.machine && (r.figures || r.ratios)) {
    const measured = measuredFrom({ machine: r.machine, source: r.source });
    out = merged(out, baselineOf({ figures: r.figures ?? [], ratios: r.ratios ?? [] }, measured));
  }
  for (const part of [r.browser, r.recording, r.takeover]) {
    const s = sectionSchema.safeParse(part);
    if (s.success)
      out = merged(out, baselineOf({ figures: s.data.figures, ratios: s.data.ratios }, measuredFrom(s.data)));
  }
  const d = densitySchema.safeParse(r.density);
  if (d.success) out = merged(out, baselineOf({ density: d.data }, measuredFrom(d.data)));
  const s = sandboxSchema.safeParse(r.sandbox);
  if (s.success) {
    const rows = s.data.rows.flatMap((row) => (row.id ? [{ ...row, id: row.id }] : []));
    out = merged(out, baselineOf({ sandbox: { rows } }, measuredFrom(s.data)));
  }
  return out;
}

/** A baseline file's content, in either format: a baseline (it has `runs`) or a bench/results.json. */
export function parseBaseline(json: unknown): Baseline {
  const isBaseline = typeof json === 'object' && json !== null && 'runs' in json;
  return isBaseline ? baselineSchema.parse(json) : fromResults(json);
}

/** A path as printed: from the repository's root when inside it, else as it is. */
function shown(url: URL | string): string {
  const path = resolve(typeof url === 'string' ? url : fileURLToPath(url));
  const inside = relative(ROOT, path);
  return inside.startsWith('..') ? path : inside;
}

/**
 * The comparison of this run with the file BENCH_BASELINE names, or with bench/baseline.json; without that one,
 * every row prints as new (a file named on purpose must be there).
 */
export async function loadComparison(): Promise<Comparison> {
  const asked = process.env.BENCH_BASELINE;
  const path = asked || BASELINE;
  const name = shown(path);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if (asked || (err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    return new Comparison(undefined, `${name} not found`);
  }
  try {
    return new Comparison(parseBaseline(JSON.parse(text)), name);
  } catch (err) {
    throw new Error(`${name} is neither a baseline nor a bench/results.json: ${(err as Error).message}`);
  }
}

/**
 * With BENCH_RECORD=1: this run's rows into bench/baseline.json, merged into what it held (rows not measured
 * keep their previous figure). Returns the line to print, or undefined when not asked.
 */
export async function recordIfAsked(rows: RunRows, measured: Measured): Promise<string | undefined> {
  if (process.env.BENCH_RECORD !== '1') return undefined;
  const old = await readFile(BASELINE, 'utf8').then(
    (text) => baselineSchema.parse(JSON.parse(text)),
    (err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return empty();
      throw err;
    },
  );
  const fresh = baselineOf(rows, measured);
  await writeFile(BASELINE, `${JSON.stringify(merged(old, fresh), null, 2)}\n`);
  const counts = [
    [Object.keys(fresh.figures).length, 'figures'],
    [Object.keys(fresh.ratios).length, 'ratios'],
    [Object.keys(fresh.sandbox).length, 'sandbox rows'],
  ]
    .filter(([n]) => n)
    .map(([n, what]) => `${n} ${what}`);
  return `BENCH_RECORD=1: ${counts.join(', ') || 'no row'} of this run recorded in ${shown(BASELINE)} (commit ${measured.commit}).`;
}
