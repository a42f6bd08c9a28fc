/**
 * The bench's previous figures (bench/baseline.ts, bench/baseline-file.ts): which rows are flagged as more than
 * 20% worse, which way is worse for a ratio, new rows, and the baseline file's two formats and its merge.
 * Pure logic: no daemon, display or file.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { betterOf, compare, Comparison, type Baseline, type Measured } from '../bench/baseline.ts';
import { baselineOf, merged, parseBaseline } from '../bench/baseline-file.ts';

const RUN: Measured = { commit: 'abc1234', date: '2026-12-01T10:00:00.000Z', loadavg_start: [1, 2, 3] };

const baseline = (): Baseline => ({
  runs: { [RUN.date]: RUN },
  figures: { 'click.1280x800': { name: 'left_click', median_ms: 2.2, run: RUN.date } },
  ratios: {
    'cursor / ping': { name: 'cursor / ping', value: 2, unit: 'x', target: '<= 1.5x', run: RUN.date },
    'shell-out / ours': { name: 'shell-out / ours', value: 20, unit: 'x', target: '>= 10x', run: RUN.date },
    'grab: nut-js / framebuffer': { name: 'grab: nut-js / framebuffer', value: 10, unit: 'x', run: RUN.date },
    'density: K=4: pool / shared': { name: 'K=4: pool / shared', value: 2, unit: 'x', run: RUN.date },
  },
  sandbox: { 'sandbox.left_click': { name: 'left_click', unit: 'ms', off: 10, on: 10, run: RUN.date } },
});

const click = (median_ms: number) => ({ id: 'click.1280x800', name: 'left_click (with coordinate)', median_ms });

describe('the 20% rule', () => {
  test('a figure 25% slower is flagged, one 15% slower or faster is not', () => {
    const c = new Comparison(baseline(), 'bench/baseline.json');
    assert.deepEqual(c.figure(click(2.75)), { prev: '2.20', change: 'SLOWER +25%' });
    assert.deepEqual(c.figure(click(2.53)), { prev: '2.20', change: '+15%' });
    assert.deepEqual(c.figure(click(1.1)), { prev: '2.20', change: '-50%' });
    const summary = c.summary();
    assert.match(summary, /^1 row slower than the baseline by more than 20%/m);
    assert.match(summary, /left_click \(with coordinate\): 2\.75 ms, was 2\.20 ms \(SLOWER \+25%\)/);
    assert.match(summary, /3 rows of commit abc1234 \(2026-12-01T10:00:00\.000Z, load average 1 2 3\)/);
  });

  test('a <= target is worse higher, a >= target worse lower', () => {
    const c = new Comparison(baseline(), 'b');
    const r = (name: string, value: number, target?: string) => c.ratio({ name, value, unit: 'x', target });
    assert.equal(r('cursor / ping', 2.6, '<= 1.5x').change, 'WORSE +30%');
    assert.equal(r('cursor / ping', 1.4, '<= 1.5x').change, '-30%');
    assert.equal(r('shell-out / ours', 14, '>= 10x').change, 'WORSE -30%');
    assert.equal(r('shell-out / ours', 26, '>= 10x').change, '+30%');
    const summary = c.summary();
    assert.match(summary, /^2 rows slower/m);
    assert.match(summary, /shell-out \/ ours: 14\.00 x, was 20\.00 x \(WORSE -30%; target >= 10x\)/);
  });

  test('a ratio shown for information notes its change and is never flagged', () => {
    const c = new Comparison(baseline(), 'b');
    assert.deepEqual(c.ratio({ name: 'grab: nut-js / framebuffer', value: 20, unit: 'x' }), {
      prev: '10.00',
      change: '+100%',
    });
    assert.match(c.summary(), /^No row slower than the baseline by more than 20%\.$/m);
  });

  test("a section's ratios are keyed apart from the main table's", () => {
    const c = new Comparison(baseline(), 'b');
    assert.equal(c.ratio({ name: 'K=4: pool / shared', value: 2, unit: 'x' }, 'density').prev, '2.00');
    assert.equal(c.ratio({ name: 'K=4: pool / shared', value: 2, unit: 'x' }).change, 'new');
  });

  test('a sandbox row is judged by its sandboxed value', () => {
    const c = new Comparison(baseline(), 'b');
    const row = { id: 'sandbox.left_click', name: 'left_click', unit: 'ms', off: 10, on: 13 };
    assert.equal(c.sandbox(row).change, 'SLOWER +30%');
    assert.equal(c.sandbox({ ...row, off: 20, on: 11 }).change, '+10%');
  });

  test('a row without a previous figure prints as new, and one without a value now is not flagged', () => {
    const c = new Comparison(baseline(), 'b');
    assert.deepEqual(c.figure({ id: 'shot.png.1280x800', name: 'screenshot png', median_ms: 99 }), {
      prev: '-',
      change: 'new',
    });
    assert.deepEqual(c.figure({ ...click(NaN), unavailable: 'not installed' }), { prev: '2.20', change: '' });
    const summary = c.summary();
    assert.match(summary, /^No row slower/m);
    assert.match(summary, /^1 row has no previous figure \(new\)\.$/m);
  });

  test('without a baseline every row is new', () => {
    const c = new Comparison(undefined, 'bench/baseline.json not found');
    assert.deepEqual(c.figure(click(5)), { prev: '-', change: 'new' });
    assert.match(c.summary(), /No previous figures \(bench\/baseline\.json not found\): every row is new/);
  });

  test('which way a target wants its value', () => {
    assert.equal(betterOf('<= 1.2x'), 'lower');
    assert.equal(betterOf('< 100 ms'), 'lower');
    assert.equal(betterOf('on − off <= 300 ms'), 'lower');
    assert.equal(betterOf('>= 2.5x'), 'higher');
    assert.equal(betterOf(undefined), undefined);
  });

  test('a change from 0 is worse in the direction it went', () => {
    assert.equal(compare(0, 1, 'lower').worse, true);
    assert.equal(compare(0, 0, 'lower').worse, false);
    assert.equal(compare(-5, -3, 'lower').change, 0.4);
  });
});

describe('the baseline file', () => {
  const later: Measured = { commit: 'def5678', date: '2026-12-02T10:00:00.000Z' };

  test('a run recorded replaces its own rows and keeps the rest; runs no row uses are dropped', () => {
    const fresh = baselineOf(
      {
        figures: [click(3), { id: 'gone', name: 'n/a', median_ms: NaN, unavailable: 'not installed' }],
        ratios: [{ name: 'cursor / ping', value: NaN, unit: 'x' }],
      },
      later,
    );
    assert.deepEqual(Object.keys(fresh.figures), ['click.1280x800']);
    assert.deepEqual(fresh.ratios, {});
    const out = merged(baseline(), fresh);
    assert.equal(out.figures['click.1280x800']?.median_ms, 3);
    assert.equal(out.figures['click.1280x800']?.run, later.date);
    assert.equal(out.ratios['cursor / ping']?.value, 2);
    assert.deepEqual(Object.keys(out.runs).sort(), [RUN.date, later.date]);
    const all = merged(
      { ...baseline(), ratios: {}, sandbox: {} },
      baselineOf({ figures: [click(3)], sandbox: { rows: [] } }, later),
    );
    assert.deepEqual(Object.keys(all.runs), [later.date]);
  });

  test("a density report's lease series, ratios and targets", () => {
    const series = { median_ms: 2.41, p95_ms: 4.46, n: 8 };
    const b = baselineOf(
      {
        density: {
          leases: { warm_lease: series },
          ratios: [{ name: 'K=4: pool / shared throughput', value: 2.05, unit: 'x' }],
          targets: [{ name: 'warm lease (hello → welcome), median', value: 2.41, unit: 'ms', target: '< 50 ms' }],
        },
      },
      later,
    );
    assert.equal(b.figures['density.warm_lease']?.median_ms, 2.41);
    assert.deepEqual(Object.keys(b.ratios), [
      'density: K=4: pool / shared throughput',
      'density: warm lease (hello → welcome), median',
    ]);
  });

  test('a bench/results.json reads as a baseline; a section a BENCH_ONLY run wrote later replaces its rows', () => {
    const machine = (date: string) => ({ date, loadavg_start: [1, 1, 1], loadavg_end: [2, 2, 2] });
    const results = {
      machine: machine('2026-12-01T00:00:00.000Z'),
      source: { commit: 'aaa', uncommitted: [] },
      figures: [
        { id: 'bclick.ours', name: 'browser: left_click', median_ms: 10, p95_ms: 12, n: 30 },
        { id: 'shell.click.1280x800', name: 'xdotool', median_ms: null, p95_ms: null, n: 0, unavailable: 'no' },
      ],
      ratios: [{ name: 'browser / Playwright', value: 2.5, unit: 'x', target: '<= 1.5x', from: [] }],
      browser: {
        machine: machine('2026-12-03T00:00:00.000Z'),
        source: { commit: 'bbb', uncommitted: ['src/a.ts'] },
        figures: [{ id: 'bclick.ours', name: 'browser: left_click', median_ms: 8, p95_ms: 9, n: 30 }],
        ratios: [],
      },
      // The whole run's own sections have no machine of their own: their rows are the top-level ones.
      recording: { figures: [{ id: 'recording.shot.plain', name: 'x', median_ms: 99, p95_ms: 99, n: 1 }] },
      density: null,
      sandbox: null,
    };
    const b = parseBaseline(JSON.parse(JSON.stringify(results)));
    assert.equal(b.figures['bclick.ours']?.median_ms, 8);
    assert.equal(b.runs[b.figures['bclick.ours']!.run]?.commit, 'bbb');
    assert.deepEqual(b.runs[b.figures['bclick.ours']!.run]?.uncommitted, ['src/a.ts']);
    assert.equal(b.figures['shell.click.1280x800'], undefined);
    assert.equal(b.figures['recording.shot.plain'], undefined);
    assert.equal(b.ratios['browser / Playwright']?.value, 2.5);
  });

  test('a baseline reads as itself, and a malformed one is refused', () => {
    assert.deepEqual(parseBaseline(JSON.parse(JSON.stringify(baseline()))), baseline());
    assert.throws(() => parseBaseline({ runs: {}, figures: { x: { median_ms: 'fast' } } }));
  });
});
