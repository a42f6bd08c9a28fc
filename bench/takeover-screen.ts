/**
 * What the takeover section (bench/takeover.ts) sees of the desktop and the
 * viewer: the desktop's own screen, one pixel read from Xvfb's framebuffer
 * file (where the agent's page lies on it, and when it flipped), the viewer
 * page's clock against ours, and the viewer's own UI driven as a person does
 * (take, hand back, a key pressed through noVNC).
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Page } from 'playwright';
import { until } from '../testkit/wait.ts';
import { nextId, toolUse, type BenchClient } from './client.ts';
import { round2 } from './stats.ts';
import { DESKTOP, FLIP_THRESHOLD } from './takeover-pages.ts';

/** How long one input may take to show before the run fails (naming what it saw). */
export const TRIAL_TIMEOUT_MS = 5_000;
/**
 * The row of the desktop the pixel read lies on (in desktop pixels, which are
 * the noVNC canvas's): below the browser's toolbar. Its x is found at run time
 * (findProbe): 20 px into the agent's page, whose window the window manager
 * places where it likes; the text page leaves its first 160 px blank, so the
 * pixel is plain black or white on both pages.
 */
const PROBE_Y = 600;
/** The middle of the desktop, where clicks go: on the page. */
export const MIDDLE = { x: DESKTOP.width / 2, y: DESKTOP.height / 2 };

/** Now on the wall clock, in ms with a fraction: comparable with `performance.timeOrigin + t` in Chromium. */
export const epochNow = (): number => performance.timeOrigin + performance.now();

/**
 * The desktop's own screen, read where Xvfb keeps it (its framebuffer file,
 * src/desktop-driver/worker/screen.ts): one pixel (the probe), polled every
 * millisecond while a trial waits, to see when the desktop's page repainted.
 */
export class DesktopScreen {
  private readonly pixel = Buffer.alloc(4);
  private probeAt = -1;
  probe = { x: -1, y: -1 };

  private constructor(
    private readonly fd: number,
    private readonly base: number,
    private readonly bytesPerLine: number,
    private readonly width: number,
  ) {}

  static open(path: string): DesktopScreen {
    const fd = openSync(path, 'r');
    try {
      const head = Buffer.alloc(100);
      if (readSync(fd, head, 0, 100, 0) < 100) throw new Error('the framebuffer file is short');
      const field = (i: number): number => head.readUInt32BE(4 * i);
      // XWD: header size (0), width (4), bits per pixel (11), bytes per line (12), colours (19, 12 bytes each).
      if (field(11) !== 32) throw new Error(`the framebuffer has ${field(11)} bits per pixel, not 32`);
      return new DesktopScreen(fd, field(0) + field(19) * 12, field(12), field(4));
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  setProbe(x: number, y: number): void {
    this.probe = { x, y };
    this.probeAt = this.base + y * this.bytesPerLine + x * 4;
  }

  /** B + G + R of the probe's pixel. */
  read(): number {
    readSync(this.fd, this.pixel, 0, 4, this.probeAt);
    return this.pixel[0]! + this.pixel[1]! + this.pixel[2]!;
  }

  /** B + G + R of every pixel of row `y`. */
  row(y: number): number[] {
    const buf = Buffer.alloc(this.width * 4);
    readSync(this.fd, buf, 0, buf.length, this.base + y * this.bytesPerLine);
    return Array.from({ length: this.width }, (_, x) => buf[4 * x]! + buf[4 * x + 1]! + buf[4 * x + 2]!);
  }

  /** The wall-clock time (epochNow) at which the probe was first seen flipped from `from`. */
  async change(from: number, what: string): Promise<number> {
    const deadline = performance.now() + TRIAL_TIMEOUT_MS;
    for (;;) {
      if (Math.abs(this.read() - from) > FLIP_THRESHOLD) return epochNow();
      if (performance.now() > deadline) {
        throw new Error(`the desktop's screen did not flip within ${TRIAL_TIMEOUT_MS} ms of ${what}`);
      }
      await sleep(1);
    }
  }

  close(): void {
    closeSync(this.fd);
  }
}

/**
 * Where the agent's page is on row PROBE_Y: the row is read, the agent clicks
 * the middle of the desktop (the page flips), and the row is read again; the
 * probe is 20 px into the first run of 40 pixels that flipped.
 */
export async function findProbe(screen: DesktopScreen, agent: BenchClient): Promise<void> {
  const before = screen.row(PROBE_Y);
  await agent.batch(nextId('tk'), [toolUse('computer', 'left_click', { coordinate: [MIDDLE.x, MIDDLE.y] })]);
  const after = await until(
    `row ${PROBE_Y} of the desktop to flip after a click on the agent's page`,
    () => {
      const row = screen.row(PROBE_Y);
      return row.filter((v, x) => Math.abs(v - before[x]!) > FLIP_THRESHOLD).length > 40 ? row : undefined;
    },
    { timeoutMs: 10_000 },
  );
  let run = 0;
  for (let x = 0; x < after.length; x++) {
    run = Math.abs(after[x]! - before[x]!) > FLIP_THRESHOLD ? run + 1 : 0;
    if (run === 40) return screen.setProbe(x - 39 + 20, PROBE_Y);
  }
  throw new Error(`no 40 pixels in a row of row ${PROBE_Y} flipped after a click on the agent's page`);
}

/**
 * The viewer page's clock against ours: (its timeOrigin + now) − our epochNow(),
 * from the evaluate with the shortest round trip of ten; `uncertainty` is half
 * that round trip. Both read the same system clock, so it is near 0.
 */
export async function clockOffset(page: Page): Promise<{ offset: number; uncertainty: number }> {
  let best = { offset: NaN, rtt: Infinity };
  for (let i = 0; i < 10; i++) {
    const t0 = epochNow();
    const theirs = await inPage<number>(page, 'performance.timeOrigin + performance.now()');
    const t1 = epochNow();
    if (t1 - t0 < best.rtt) best = { offset: theirs - (t0 + t1) / 2, rtt: t1 - t0 };
  }
  return { offset: round2(best.offset), uncertainty: round2(best.rtt / 2) };
}

export const inPage = <T>(page: Page, expression: string): Promise<T> => page.evaluate(expression) as Promise<T>;

/** What a section step needs of the viewer. */
export interface Viewer {
  page: Page;
  desktop: string;
  /** The pixel read, in desktop (canvas) pixels. */
  probe: { x: number; y: number };
}

/** Clicks "Take control" and waits for noVNC connected; returns the take's time as the page measured it. */
export async function take(v: Viewer): Promise<number> {
  await inPage(v.page, 'window.__takeTimer.reset()');
  await v.page.click(`#take-${v.desktop}`);
  return until('noVNC connected after "Take control"', () => inPage<number | null>(v.page, 'window.__takeTimer.ms()'), {
    timeoutMs: 30_000,
    seen: () => v.page.textContent('#vnc-status'),
  });
}

export async function handBack(v: Viewer): Promise<void> {
  await v.page.check('#handback-resolved');
  await v.page.click('#handback-button');
  await v.page.locator('#takeover-ended').waitFor({ state: 'visible', timeout: 30_000 });
  await v.page.locator(`#take-${v.desktop}:not([disabled])`).waitFor({ timeout: 30_000 });
}

/** Distinct colours in a square of the canvas right of the probe: 1 on the plain page, many on the text page. */
const colours = (v: Viewer): string => `window.__lat.colours(${v.probe.x + 200}, 300, 200, 200)`;

/** Presses `key` on the desktop through noVNC and waits until the canvas shows what `ok` wants. */
export async function toggle(v: Viewer, key: string, what: string, ok: (colours: number) => boolean): Promise<void> {
  await v.page.keyboard.press(key);
  await until(what, async () => ok(await inPage<number>(v.page, colours(v))), {
    timeoutMs: 10_000,
    seen: () => inPage<number>(v.page, colours(v)),
  });
}
