/**
 * Issue 5's targets (item 3), as issue 16 tightened them, as ratios, each computed from figures of the
 * same run, plus the lines shown for information beside them. A ratio whose
 * figures could not be measured is NaN ("n/a"), never a pass.
 */
import { SLIDE_MS, sizeTag, type Size } from './desktop.ts';
import { cheapestFloor } from './floor.ts';
import { MEMORY_SCREENSHOTS, type MemoryReport, type RssSample } from './memory.ts';
import { round2, type Figure } from './stats.ts';
import { TARGET_MS as TAKEOVER_TARGET_MS } from './takeover-report.ts';

/** The display sizes and formats the run measures, in order (bench/bench.ts uses them too). */
export const SIZES: Size[] = [
  { width: 1280, height: 800 },
  { width: 1920, height: 1080 },
];
export const FORMATS = ['png', 'jpeg', 'webp'] as const;
/** Half the simulated link's round-trip time. */
export const ONE_WAY_MS = 10;

export interface Ratio {
  name: string;
  /** numerator / denominator of medians, or a difference in ms where `unit` says so. */
  value: number;
  unit: 'x' | 'ms' | 'MiB';
  /** How the target reads, e.g. "<= 1.5x"; absent for informational lines. */
  target?: string;
  met?: boolean;
  /** The figure ids it was computed from. */
  from: string[];
}

type Compare = (value: number) => boolean;

export class RatioBook {
  readonly ratios: Ratio[] = [];
  private readonly byId: Map<string, Figure>;

  constructor(figures: readonly Figure[]) {
    this.byId = new Map(figures.map((f) => [f.id, f]));
  }

  private med(id: string): number {
    const f = this.byId.get(id);
    return f && !f.unavailable ? f.median_ms : NaN;
  }

  /** median(a) / median(b). */
  quotient(name: string, a: string, b: string, target?: { text: string; ok: Compare }): void {
    this.add(name, this.med(a) / this.med(b), 'x', [a, b], target);
  }

  /** median(a) − median(b), divided by `per` (e.g. 9 extra calls). */
  difference(name: string, a: string, b: string, per = 1): void {
    this.add(name, (this.med(a) - this.med(b)) / per, 'ms', [a, b]);
  }

  /** Any combination of medians (`m(id)` is a figure's median), in ms. */
  derived(
    name: string,
    from: string[],
    compute: (m: (id: string) => number) => number,
    target?: { text: string; ok: Compare },
  ): void {
    this.add(
      name,
      compute((id) => this.med(id)),
      'ms',
      from,
      target,
    );
  }

  /** A figure's own median against a target. */
  absolute(name: string, id: string, target: { text: string; ok: Compare }): void {
    this.add(name, this.med(id), 'ms', [id], target);
  }

  add(name: string, value: number, unit: Ratio['unit'], from: string[], target?: { text: string; ok: Compare }): void {
    const known = Number.isFinite(value);
    this.ratios.push({
      name,
      value: known ? round2(value) : NaN,
      unit,
      from,
      ...(target ? { target: target.text, ...(known ? { met: target.ok(value) } : {}) } : {}),
    });
  }
}

const below = (limit: number) => ({ text: `<= ${limit}x`, ok: (v: number) => v <= limit });
const atLeast = (limit: number) => ({ text: `>= ${limit}x`, ok: (v: number) => v >= limit });

/** Every ratio of the run: issue 5's targets, and the lines shown for information. */
export function ratios(figures: readonly Figure[], memory: MemoryReport | undefined): RatioBook {
  const book = new RatioBook(figures);
  for (const size of SIZES) {
    const t = sizeTag(size);
    for (const f of FORMATS)
      book.quotient(`screenshot ${f} ${t}: ours / floor`, `shot.${f}.${t}`, `floor.${f}.${t}`, below(1.2));
    book.quotient(`grab ${t}: nut-js XGetImage / framebuffer read`, `stage.nutgrab.${t}`, `stage.grab.${t}`);
    const cheapest = cheapestFloor(figures, t);
    const fastest = fastestScreenshot(figures, t);
    if (cheapest && fastest) {
      book.quotient(`screenshot ${t}: our fastest format / cheapest floor`, fastest.id, cheapest.id);
    }
    book.quotient(`screenshot ${t}: shell-out / ours (png)`, `shell.screenshot.${t}`, `shot.png.${t}`, atLeast(10));
  }
  const t = sizeTag(SIZES[0]!);
  book.quotient(`click ${t}: shell-out / ours`, `shell.click.${t}`, `click.${t}`, atLeast(50));
  book.quotient(`click ${t}: shell-out --delay 0 / ours`, `shell.click.nodelay.${t}`, `click.${t}`);
  callRatios(book, t);
  // The kiosk's Chromium is not the daemon's: it gives no word, and the settle step waits out its reaction window.
  settleRatios(book, t, { prefix: '', link: `${2 * ONE_WAY_MS}ms-link`, label: '', targets: false });
  // The daemon's own Chromium says when it drew (bench/settle-browser.ts): the targets are for this one.
  settleRatios(book, t, {
    prefix: 'own.',
    link: `own-${2 * ONE_WAY_MS}ms-link`,
    label: ', own browser under the pointer',
    targets: true,
  });
  book.quotient(
    `10 actions + screenshot ${t}, loopback: 11 round trips / 1 batch`,
    `seq11.loopback.${t}`,
    `batch11.loopback.${t}`,
  );
  if (memory) memoryRatios(book, memory);
  browserRatios(book);
  recordingRatios(book);
  takeoverRatios(book);
  return book;
}

/**
 * What the settle step adds to a screenshot right after a move and after a click that starts an animation, and
 * ten actions plus a screenshot over the 20 ms link: figures `<prefix>…` (bench/desktop.ts, bench/settle-browser.ts).
 */
function settleRatios(
  book: RatioBook,
  t: string,
  { prefix, link, label, targets }: { prefix: string; link: string; label: string; targets: boolean },
): void {
  const afterInput = [`${prefix}move-shot.png.${t}`, `${prefix}move.${t}`, `${prefix}shot.png.${t}`];
  book.derived(
    `screenshot right after input ${t}${label}: extra time (settle step)`,
    afterInput,
    (m) => {
      const [both, move, shot] = afterInput.map(m) as [number, number, number];
      return both - move - shot;
    },
    targets ? { text: '<= 10 ms', ok: (v) => v <= 10 } : undefined,
  );
  const afterChange = [`${prefix}click-anim-shot.png.${t}`, `${prefix}click.${t}`, `${prefix}shot.png.${t}`];
  book.derived(
    `screenshot after a click starting a ${SLIDE_MS} ms animation ${t}${label}: extra time (settle step)`,
    afterChange,
    (m) => {
      const [both, click, shot] = afterChange.map(m) as [number, number, number];
      return both - click - shot;
    },
    targets ? { text: `<= ${SLIDE_MS + 40} ms`, ok: (v) => v <= SLIDE_MS + 40 } : undefined,
  );
  book.quotient(
    `10 actions + screenshot ${t}, ${link}: 11 round trips / 1 batch`,
    `seq11.${link}.${t}`,
    `batch11.${link}.${t}`,
    targets ? atLeast(5) : undefined,
  );
}

/**
 * The per-call path (issue 16, item 3): a one-call `cursor_position` batch against a `ping` on the same
 * connection, measured interleaved; then, for information, the same as differences in ms and the marginal cost
 * of a call inside a batch. `BENCH_ONLY=calls` prints these alone.
 */
export function callRatios(book: RatioBook, t: string): void {
  book.quotient(`one-call cursor_position batch / ws ping ${t}`, `cursor.${t}`, `ping.${t}`, below(1.5));
  book.quotient(`the same, hello.events false / ws ping ${t}`, `cursor-quiet.${t}`, `ping.${t}`);
  book.difference(`per-call overhead ${t}: cursor_position − ping`, `cursor.${t}`, `ping.${t}`);
  book.difference(`per-call overhead ${t}: cursor_position − replayed batch`, `cursor.${t}`, `replay.${t}`);
  book.difference(`marginal cost of a call inside a batch ${t}`, `cursor10.${t}`, `cursor.${t}`, 9);
}

/** Issue 16's browser rows (bench/browser.ts, section `browser`). */
export function browserRatios(book: RatioBook): void {
  book.quotient(
    "browser left_click / Playwright's own click, one process",
    'bclick.ours',
    'bclick.playwright',
    below(1.5),
  );
  book.quotient(
    'first browser call after start / a new session on a running browser',
    'bstart.first-browser',
    'bstart.session-warm',
    below(1.2),
  );
  book.quotient('first browser call after start / a warm navigate', 'bstart.first-browser', 'bstart.navigate-warm');
  book.quotient(
    'first computer call after start / a warm screenshot',
    'bstart.first-computer',
    'bstart.screenshot-warm',
  );
}

/** Our fastest screenshot figure at this size (by median), whatever its format. */
function fastestScreenshot(figures: readonly Figure[], tag: string): Figure | undefined {
  const shots = figures.filter((f) => f.id.startsWith('shot.') && f.id.endsWith(`.${tag}`) && !f.unavailable);
  return shots.reduce<Figure | undefined>((best, f) => (!best || f.median_ms < best.median_ms ? f : best), undefined);
}

function memoryRatios(book: RatioBook, m: MemoryReport): void {
  const n = MEMORY_SCREENSHOTS;
  const rss = (s: RssSample): number => s.daemon_gc_mib;
  const within = { text: `<= ${m.result_cache_bound_mib} MiB`, ok: (v: number) => v <= m.result_cache_bound_mib };
  book.add(`daemon RSS growth over ${n} screenshots (after GC)`, rss(m.after) - rss(m.rest), 'MiB', ['memory'], within);
  book.add(`daemon RSS growth, as found`, m.after.daemon_mib - m.rest.daemon_mib, 'MiB', ['memory']);
  book.add(`daemon RSS growth, 2nd half (caches full, after GC)`, rss(m.after) - rss(m.half), 'MiB', ['memory']);
  if (m.after.daemon_heap_mib !== null && m.half.daemon_heap_mib !== null && m.rest.daemon_heap_mib !== null) {
    book.add(`daemon V8 heap growth over ${n} (after GC)`, m.after.daemon_heap_mib - m.rest.daemon_heap_mib, 'MiB', [
      'memory',
    ]);
    book.add(`daemon V8 heap growth, 2nd half (caches full)`, m.after.daemon_heap_mib - m.half.daemon_heap_mib, 'MiB', [
      'memory',
    ]);
  }
  if (m.after.worker_gc_mib !== null && m.rest.worker_gc_mib !== null) {
    const worker = m.after.worker_gc_mib - m.rest.worker_gc_mib;
    book.add(`desktop worker RSS growth over ${n} (after GC)`, worker, 'MiB', ['memory']);
  }
}

/** Issue 17: what recording a session adds to a screenshot batch (bench/recording.ts). */
export function recordingRatios(book: RatioBook): void {
  book.quotient(
    'screenshot batch, recorded / not recorded',
    'recording.shot.recorded',
    'recording.shot.plain',
    below(1.1),
  );
}

/**
 * Issue 18: input to photon through the viewer's takeover (bench/takeover.ts) against the target on
 * loopback, and the lowest latency a frame stream of the daemon's own could have beside VNC's, per page.
 */
export function takeoverRatios(book: RatioBook): void {
  const under = { text: `< ${TAKEOVER_TARGET_MS} ms`, ok: (v: number) => v < TAKEOVER_TARGET_MS };
  for (const page of ['solid', 'text'])
    for (const what of ['click', 'key'])
      book.absolute(`takeover: ${what} → photon, ${page} page, median`, `takeover.${what}.${page}.photon`, under);
  for (const page of ['solid', 'text']) {
    const alt = `takeover.alt.${page}`;
    const parts = [`${alt}.click`, `${alt}.capture`, `${alt}.shot`, `${alt}.decode`];
    const floor = (m: (id: string) => number): number => {
      const [click, capture, shot, decode] = parts.map(m) as [number, number, number, number];
      return click + capture / 2 + shot + decode;
    };
    book.derived(`frame stream floor, ${page} page (click → drawn)`, parts, floor);
    const vnc = `takeover.click.${page}.drawn`;
    book.derived(`frame stream floor − VNC click → drawn, ${page} page`, [...parts, vnc], (m) => floor(m) - m(vnc));
  }
}
