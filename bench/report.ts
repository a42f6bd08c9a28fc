/**
 * The printed tables: figures (median, p95, n, bytes), ratios with their
 * target and whether it was met (bench/ratios.ts), and memory.
 */
import type { MemoryReport } from './memory.ts';
import type { Ratio } from './ratios.ts';
import type { Figure } from './stats.ts';

const pad = (s: string, n: number): string => s.padEnd(n);
const num = (v: number | undefined, width: number): string =>
  (v === undefined ? '' : Number.isFinite(v) ? v.toFixed(2) : 'n/a').padStart(width);
const int = (v: number | undefined, width: number): string => (v === undefined ? '' : String(v)).padStart(width);

export function figureTable(figures: readonly Figure[]): string {
  const w = Math.max(...figures.map((f) => f.name.length), 6);
  const columns = (name: string, ...cells: string[]): string => [pad(name, w), ...cells].join('  ');
  const head = columns(
    'figure',
    'median ms'.padStart(9),
    'p95 ms'.padStart(8),
    'n'.padStart(4),
    'image B'.padStart(8),
    'sent B'.padStart(8),
  );
  const rows = figures.map((f) =>
    f.unavailable
      ? columns(f.name, f.unavailable)
      : columns(
          f.name,
          num(f.median_ms, 9),
          num(f.p95_ms, 8),
          int(f.n, 4),
          int(f.image_bytes, 8),
          int(f.sent_bytes, 8),
        ),
  );
  return [head, '-'.repeat(head.length), ...rows].join('\n');
}

export function ratioTable(ratios: readonly Ratio[]): string {
  const w = Math.max(...ratios.map((r) => r.name.length), 5);
  const head = `${pad('ratio', w)}  ${'value'.padStart(9)}  ${pad('target', 12)}  met`;
  const rows = ratios.map((r) => {
    const value = Number.isFinite(r.value) ? `${r.value.toFixed(2)} ${r.unit}` : 'n/a';
    const met = r.target === undefined ? '' : r.met === undefined ? 'n/a' : r.met ? 'yes' : 'NO';
    return `${pad(r.name, w)}  ${value.padStart(9)}  ${pad(r.target ?? '(info)', 12)}  ${met}`;
  });
  return [head, '-'.repeat(head.length), ...rows].join('\n');
}

export function memoryTable(m: MemoryReport): string {
  const cell = (v: number | null, width = 8): string => (v === null ? 'n/a' : v.toFixed(1)).padStart(width);
  const lines = [
    `Memory (MiB) by screenshots taken; ${m.settings}`,
    '             daemon RSS  |------ daemon after a full GC ------|  worker RSS',
    'screenshots    as found    RSS  anon RSS   V8 used  V8 total  external    as found  after GC',
  ];
  for (const s of m.samples) {
    lines.push(
      [
        String(s.screenshots).padStart(11),
        cell(s.daemon_mib, 11),
        cell(s.daemon_gc_mib, 6),
        cell(s.daemon_gc_anon_mib, 9),
        cell(s.daemon_heap_mib, 9),
        cell(s.daemon_heap_total_mib, 9),
        cell(s.daemon_external_mib, 9),
        cell(s.worker_mib, 11),
        cell(s.worker_gc_mib, 9),
      ].join(' '),
    );
  }
  lines.push(
    `bounded: the result caches hold at most ${m.result_cache_bound_mib} MiB in this run, as the daemon counts them ` +
      '(2 sessions × 256 results, 32 MiB cap each); screenshots go to disk (2,000 files kept); ' +
      'libvips keeps its own bounded operation cache in the worker.',
  );
  return lines.join('\n');
}
