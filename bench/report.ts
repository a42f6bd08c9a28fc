/**
 * The printed tables: figures (median, p95, n, bytes), ratios with their
 * target and whether it was met (bench/ratios.ts), memory, and the density
 * section (bench/density.ts). Each figure, ratio and density row shows its
 * previous figure and the change beside its new one (bench/baseline.ts).
 */
import type { Comparison } from './baseline.ts';
import { LEASE_ROWS, type DensityReport, type RestReport, type Series } from './density-report.ts';
import type { MemoryReport } from './memory.ts';
import type { Ratio } from './ratios.ts';
import type { Figure } from './stats.ts';

const pad = (s: string, n: number): string => s.padEnd(n);
const num = (v: number | undefined, width: number): string =>
  (v === undefined ? '' : Number.isFinite(v) ? v.toFixed(2) : 'n/a').padStart(width);
const int = (v: number | undefined, width: number): string => (v === undefined ? '' : String(v)).padStart(width);
/** Width of the change column: `SLOWER +100%`. */
const CHANGE_W = 12;

export function figureTable(figures: readonly Figure[], previous: Comparison): string {
  const w = Math.max(...figures.map((f) => f.name.length), 6);
  const columns = (name: string, ...cells: string[]): string => [pad(name, w), ...cells].join('  ');
  const head = columns(
    'figure',
    'median ms'.padStart(9),
    'prev ms'.padStart(9),
    'vs prev'.padStart(CHANGE_W),
    'p95 ms'.padStart(8),
    'n'.padStart(4),
    'image B'.padStart(8),
    'sent B'.padStart(8),
  );
  const rows = figures.map((f) => {
    const c = previous.figure(f);
    const changed = [c.prev.padStart(9), c.change.padStart(CHANGE_W)];
    return f.unavailable
      ? columns(f.name, 'n/a'.padStart(9), ...changed, f.unavailable)
      : columns(
          f.name,
          num(f.median_ms, 9),
          ...changed,
          num(f.p95_ms, 8),
          int(f.n, 4),
          int(f.image_bytes, 8),
          int(f.sent_bytes, 8),
        );
  });
  return [head, '-'.repeat(head.length), ...rows].join('\n');
}

export function ratioTable(ratios: readonly Ratio[], previous: Comparison): string {
  const w = Math.max(...ratios.map((r) => r.name.length), 5);
  const head =
    `${pad('ratio', w)}  ${'value'.padStart(9)}  ${'prev'.padStart(7)}  ${'vs prev'.padStart(CHANGE_W)}  ` +
    `${pad('target', 12)}  met`;
  const rows = ratios.map((r) => {
    const value = Number.isFinite(r.value) ? `${r.value.toFixed(2)} ${r.unit}` : 'n/a';
    const met = r.target === undefined ? '' : r.met === undefined ? 'n/a' : r.met ? 'yes' : 'NO';
    const c = previous.ratio(r);
    return (
      `${pad(r.name, w)}  ${value.padStart(9)}  ${c.prev.padStart(7)}  ${c.change.padStart(CHANGE_W)}  ` +
      `${pad(r.target ?? '(info)', 12)}  ${met}`.trimEnd()
    );
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

const mib = (v: number | undefined, width: number): string => num(v, width);
const pct = (v: number | undefined, width: number): string => (v === undefined ? '' : v.toFixed(2)).padStart(width);

/**
 * Section `density` (bench/density.ts): desktops at rest, leases and recycling, K agents, ratios and targets.
 * The lease rows, the ratios and the targets show their previous figures; the rows at rest and of the K agents
 * are the parts those lines are computed from.
 */
export function densityTable(r: DensityReport, previous: Comparison): string {
  const m = r.machine;
  const lines: string[] = [
    `Density: a desktop per session (${r.settings.display} ${r.settings.format}; ${m.cpus} CPUs, ` +
      `${Math.round(m.total_mem_mib / 1024)} GiB; load average ${m.loadavg_start.join(' ')} → ${m.loadavg_end.join(' ')}; ` +
      `${m.date.slice(0, 10)})`,
    `default cap here (src/base/config.ts defaultDesktopCap): ${r.settings.default_cap} desktops`,
    '',
    `Warm desktops at rest, no session: mean per desktop (MiB; CPU over ${r.settings.rest_s} s idle, % of one core)`,
    '   K  |  PSS: Xvfb  openbox  worker  Chromium   total  (file) |  USS total | daemon metric |  CPU: Xvfb  openbox  worker  Chromium  total | daemon PSS',
  ];
  const restRow = (x: RestReport, label: string): string => {
    const p = x.mean.parts;
    const metric = x.per_desktop.map((d) => d.daemon_metric_mib).filter((v): v is number => v !== undefined);
    const metricMean = metric.length ? metric.reduce((a, b) => a + b, 0) / metric.length : undefined;
    return [
      label.padStart(4),
      ' |',
      mib(p.xvfb.pss_mib, 10),
      mib(p.openbox.pss_mib, 8),
      mib(p.worker.pss_mib, 7),
      mib(p.chromium.pss_mib, 9),
      mib(x.mean.total.pss_mib, 7),
      `(${num(x.mean.total.pss_file_mib, 0)})`.padStart(8),
      ' |',
      mib(x.mean.total.uss_mib, 10),
      ' |',
      mib(metricMean, 13),
      ' |',
      pct(p.xvfb.cpu_pct, 10),
      pct(p.openbox.cpu_pct, 8),
      pct(p.worker.cpu_pct, 7),
      pct(p.chromium.cpu_pct, 9),
      pct(x.mean.total.cpu_pct, 6),
      ' |',
      mib(x.daemon.pss_mib, 10),
    ].join(' ');
  };
  for (const x of r.rest) lines.push(restRow(x, String(x.desktops)));
  if (r.after_run.length) {
    lines.push(
      '',
      `The same desktops after the run (leased, the page open, after ${r.settings.agent_seconds_per_mode} s of ` +
        'batches each): mean per desktop (MiB)',
    );
    lines.push('   K  |  PSS: Xvfb  openbox  worker  Chromium   total  (file) |  USS total | daemon metric');
    for (const x of r.after_run) {
      lines.push(restRow(x, String(x.desktops)).split(' |').slice(0, 4).join(' |').trimEnd());
    }
  }
  const series = (id: string, name: string, s: Series): string => {
    const c = previous.figure({ id, name, median_ms: s.median_ms });
    return (
      `${name.padEnd(62)} ${num(s.median_ms, 9)} ${c.prev.padStart(9)} ${c.change.padStart(CHANGE_W)} ` +
      `${num(s.p95_ms, 9)} ${int(s.n, 4)}`
    );
  };
  lines.push(
    '',
    `Lease and recycle (samples in turn, warm and cold)${' '.repeat(12)}  median ms   prev ms  ${'vs prev'.padStart(CHANGE_W)}` +
      '    p95 ms    n',
    ...LEASE_ROWS.map(({ key, id, name }) => series(id, name, r.leases[key])),
  );
  lines.push(
    '',
    `K agents at once, each looping [${r.settings.batch}]; ` +
      `${r.settings.agent_seconds_per_mode} s per mode in ${r.settings.segments} alternating segments`,
    '   K  | pool: batch/s   p50 ms   p95 ms | shared: batch/s   p50 ms   p95 ms | pool/shared | PNG KiB pool/shared | errors',
  );
  for (const a of r.agents) {
    lines.push(
      [
        `${a.k}${a.cap ? '*' : ''}`.padStart(4),
        ' |',
        num(a.pool.batches_per_s, 13),
        num(a.pool.p50_ms, 8),
        num(a.pool.p95_ms, 8),
        ' |',
        num(a.shared.batches_per_s, 15),
        num(a.shared.p50_ms, 8),
        num(a.shared.p95_ms, 8),
        ' |',
        `${num(a.throughput_ratio, 10)}x`,
        ' |',
        `${num(a.pool.image_bytes / 1024, 0)} / ${num(a.shared.image_bytes / 1024, 0)}`.padStart(19),
        ' |',
        `${a.pool.errors}/${a.shared.errors}`.padStart(6),
      ].join(' '),
    );
  }
  lines.push(
    '   (* the default cap)',
    '',
    'Where a batch goes: mean ms per call as the daemon times it (deskbatch_call_duration_seconds); CPU ms per',
    'batch by process (the daemon itself, and its desktops: Xvfb, openbox, worker, Chromium); cores used on',
    'average by the daemon with its desktops, by this bench (the K clients), and by the whole machine (other jobs too)',
    '   K  mode   | click    type  screenshot | CPU ms: daemon   Xvfb  openbox  worker  Chromium   total | cores: daemon  bench  machine',
  );
  for (const a of r.agents) {
    for (const mode of ['pool', 'shared'] as const) {
      const m = a[mode];
      const c = m.cpu_ms_per_batch;
      lines.push(
        [
          `${a.k}${a.cap ? '*' : ''}`.padStart(4),
          ` ${mode.padEnd(6)} |`,
          num(m.call_ms.left_click, 5),
          num(m.call_ms.type, 7),
          num(m.call_ms.screenshot, 11),
          ' |',
          num(c.daemon, 14),
          num(c.xvfb, 6),
          num(c.openbox, 8),
          num(c.worker, 7),
          num(c.chromium, 9),
          num(m.daemon_cpu_ms_per_batch, 7),
          ' |',
          num(m.daemon_cores, 13),
          num(m.bench_cores, 6),
          num(m.machine_busy_cores, 8),
        ].join(' '),
      );
    }
  }
  lines.push('', ratioLines(r, previous), '', targetLines(r, previous));
  return lines.join('\n');
}

function ratioLines(r: DensityReport, previous: Comparison): string {
  const w = Math.max(...r.ratios.map((x) => x.name.length), 5);
  return [
    `${'ratio'.padEnd(w)}  ${'value'.padStart(8)}  ${'prev'.padStart(7)}  ${'vs prev'.padStart(CHANGE_W)}`,
    ...r.ratios.map((x) => {
      const c = previous.ratio(x, 'density');
      return `${x.name.padEnd(w)}  ${num(x.value, 7)}${x.unit}  ${c.prev.padStart(7)}  ${c.change.padStart(CHANGE_W)}`;
    }),
  ].join('\n');
}

function targetLines(r: DensityReport, previous: Comparison): string {
  const w = Math.max(...r.targets.map((x) => x.name.length), 6);
  return [
    `${'target'.padEnd(w)}  ${'value'.padStart(11)}  ${'prev'.padStart(7)}  ${'vs prev'.padStart(CHANGE_W)}  ` +
      `${'wanted'.padEnd(12)}  met`,
    ...r.targets.map((t) => {
      const c = previous.ratio(t, 'density');
      return (
        `${t.name.padEnd(w)}  ${`${num(t.value, 0)} ${t.unit}`.padStart(11)}  ${c.prev.padStart(7)}  ` +
        `${c.change.padStart(CHANGE_W)}  ${(t.target ?? '(info)').padEnd(12)}  ` +
        (t.target === undefined ? '' : t.met === undefined ? 'n/a' : t.met ? 'yes' : 'NO')
      ).trimEnd();
    }),
  ].join('\n');
}
