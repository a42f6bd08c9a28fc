/**
 * Each bench row beside its previous recorded figure (issue 31): the new median
 * or value, the previous one, the change, and a flag when the row got more than
 * SLOWER_LIMIT worse, so that a slowdown reads as one and not as "a target not
 * met". The previous figures come from bench/baseline.json (bench/baseline-file.ts
 * reads and writes it); this file only compares, and holds no process, file or
 * socket.
 *
 * Which way is worse: a figure (a time) is worse higher; a ratio with a target
 * is worse in the direction its target forbids (`<= 1.5x`: higher; `>= 10x`:
 * lower); a ratio shown for information has no direction, so its change is
 * shown and never flagged (its figures have rows of their own, which are).
 */
import type { Figure } from './stats.ts';

/** A row more than this much worse than its previous figure is flagged (0.2: 20%). */
export const SLOWER_LIMIT = 0.2;

/** When and on what a recorded run was measured. */
export interface Measured {
  /** The commit measured (bench/machine.ts sourceState). */
  commit: string;
  /** Files of src/, toolsets/ and bin/ that differed from the commit. */
  uncommitted?: string[];
  /** When the run started (ISO 8601). */
  date: string;
  /** Load average (1, 5, 15 min) at the start and the end of the run. */
  loadavg_start?: number[];
  loadavg_end?: number[];
  /** Where the figures were read from when not from the run's own output (the seed from docs/PERFORMANCE.md). */
  note?: string;
}

export interface FigureEntry {
  name: string;
  median_ms: number;
  p95_ms?: number;
  n?: number;
  /** The key of its run in `Baseline.runs`. */
  run: string;
}

export interface RatioEntry {
  name: string;
  value: number;
  unit: string;
  target?: string;
  run: string;
}

/** A row of section `sandbox` (bench/sandbox.ts): the desktop without and with its sandbox. */
export interface SandboxEntry {
  name: string;
  unit: string;
  off: number;
  on: number;
  run: string;
}

/** The previous figures: figures by id, ratios by key (`ratioKey`), sandbox rows by id, and the runs they came from. */
export interface Baseline {
  runs: Record<string, Measured>;
  figures: Record<string, FigureEntry>;
  ratios: Record<string, RatioEntry>;
  sandbox: Record<string, SandboxEntry>;
}

export type FigureRow = Pick<Figure, 'id' | 'name' | 'median_ms'> &
  Partial<Pick<Figure, 'p95_ms' | 'n' | 'unavailable'>>;
export interface RatioRow {
  name: string;
  value: number;
  unit: string;
  target?: string;
}
export interface SandboxRowLike {
  id: string;
  name: string;
  unit: string;
  off: number;
  on: number;
}

/**
 * A ratio's key in the baseline: its name, prefixed by its section's where the section prints ratios of its
 * own (density's), so that two sections' lines of the same name stay apart.
 */
export const ratioKey = (name: string, section?: string): string => (section ? `${section}: ${name}` : name);

export type Better = 'lower' | 'higher';

/** Which way a target wants its value, from how it reads: `<= 1.2x`, `< 100 ms`, `on/off <= 1.05` → lower. */
export function betterOf(target: string | undefined): Better | undefined {
  const op = target?.match(/[<>]/)?.[0];
  return op === undefined ? undefined : op === '<' ? 'lower' : 'higher';
}

export interface Change {
  /** The previous figure; absent when the baseline has none (a new row). */
  prev?: number;
  /** (now − prev) / |prev|: 0.34 is 34% higher. NaN when this run has no value. */
  change: number;
  /** More than SLOWER_LIMIT in the worse direction. */
  worse: boolean;
}

export function compare(prev: number | undefined, now: number, better: Better | undefined): Change {
  if (prev === undefined || !Number.isFinite(prev)) return { change: NaN, worse: false };
  const change = prev === 0 ? (now === 0 ? 0 : Math.sign(now) * Infinity) : (now - prev) / Math.abs(prev);
  const worse = better === 'lower' ? change > SLOWER_LIMIT : better === 'higher' ? change < -SLOWER_LIMIT : false;
  return { prev, change, worse };
}

/** `+34%`, `-5%`; a change from 0 has no percentage. */
function percent(change: number): string {
  if (!Number.isFinite(change)) return change > 0 ? 'up from 0' : 'down from 0';
  const p = Math.round(change * 100);
  return `${p > 0 ? '+' : ''}${p}%`;
}

/** A row's two cells beside its new value: the previous value, and the change (flagged when worse). */
export interface Cells {
  prev: string;
  change: string;
}

const value = (v: number, unit: string): string => (Number.isFinite(v) ? `${v.toFixed(2)} ${unit}` : 'n/a');

/**
 * The comparison of one run's rows with the baseline: each table asks it for a row's cells as it prints the
 * row, and it keeps the rows that got worse for the summary printed after the tables.
 */
export class Comparison {
  private readonly worse: string[] = [];
  /** Rows matched per run of the baseline, to say which runs this one was compared with. */
  private readonly matched = new Map<string, number>();
  private fresh = 0;

  /** `from` names the baseline (its path), or says why there is none. */
  constructor(
    private readonly baseline: Baseline | undefined,
    private readonly from: string,
  ) {}

  figure(f: FigureRow): Cells {
    const entry = this.baseline?.figures[f.id];
    const now = f.unavailable ? NaN : f.median_ms;
    return this.row(f.name, entry, entry?.median_ms, now, 'ms', 'lower', 'SLOWER');
  }

  /** A ratio or target line; `section` as in `ratioKey`. */
  ratio(r: RatioRow, section?: string): Cells {
    const entry = this.baseline?.ratios[ratioKey(r.name, section)];
    const better = betterOf(r.target);
    const flag = r.unit === 'ms' ? 'SLOWER' : 'WORSE';
    return this.row(r.name, entry, entry?.value, r.value, r.unit, better, flag, r.target);
  }

  /**
   * A sandbox row, by its sandboxed value (`on`). Times and memory are worse higher; the other rows (the PNG's
   * size, process and failure counts) are shown for information.
   */
  sandbox(r: SandboxRowLike): Cells {
    const entry = this.baseline?.sandbox[r.id];
    const judged = r.unit === 'ms' || r.unit === 'MiB';
    const flag = r.unit === 'ms' ? 'SLOWER' : 'WORSE';
    return this.row(r.name, entry, entry?.on, r.on, r.unit, judged ? 'lower' : undefined, flag);
  }

  private row(
    name: string,
    entry: { run: string } | undefined,
    prev: number | undefined,
    now: number,
    unit: string,
    better: Better | undefined,
    flag: string,
    target?: string,
  ): Cells {
    if (!entry || prev === undefined) {
      this.fresh++;
      return { prev: '-', change: 'new' };
    }
    this.matched.set(entry.run, (this.matched.get(entry.run) ?? 0) + 1);
    const c = compare(prev, now, better);
    const cells = { prev: prev.toFixed(2), change: Number.isNaN(c.change) ? '' : percent(c.change) };
    if (!c.worse) return cells;
    const why = `${flag} ${percent(c.change)}`;
    this.worse.push(
      `  ${name.trim()}: ${value(now, unit)}, was ${value(prev, unit)} (${why}${target ? `; target ${target}` : ''})`,
    );
    return { ...cells, change: why };
  }

  /** What the tables were compared with, and every row more than SLOWER_LIMIT worse, so no one has to scan them. */
  summary(): string {
    const limit = `${Math.round(SLOWER_LIMIT * 100)}%`;
    if (!this.baseline) {
      return `No previous figures (${this.from}): every row is new. BENCH_RECORD=1 records this run's as the baseline.`;
    }
    const runs = [...this.matched].map(([key, rows]) => {
      const m = this.baseline!.runs[key];
      if (!m) return `${rows} rows of run ${key}`;
      const dirty = m.uncommitted?.length ? ` + uncommitted changes in ${m.uncommitted.length} files` : '';
      const load = m.loadavg_start
        ? `, load average ${m.loadavg_start.join(' ')}${m.loadavg_end ? ` → ${m.loadavg_end.join(' ')}` : ''}`
        : '';
      return `${rows} rows of commit ${m.commit}${dirty} (${m.date}${load})`;
    });
    const lines = [`Previous figures: ${this.from}${runs.length ? `: ${runs.join('; ')}` : ', no row matched'}.`];
    const n = this.worse.length;
    if (n === 0) lines.push(`No row slower than the baseline by more than ${limit}.`);
    else {
      lines.push(
        `${n} ${n === 1 ? 'row' : 'rows'} slower than the baseline by more than ${limit} ` +
          '(each a defect to explain, like a failing test: docs/PERFORMANCE.md "Method"):',
        ...this.worse,
      );
    }
    if (this.fresh) lines.push(`${this.fresh} ${this.fresh === 1 ? 'row has' : 'rows have'} no previous figure (new).`);
    return lines.join('\n');
  }
}
