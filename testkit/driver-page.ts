/**
 * The WorkerDesktopDriver on a real display, for the desktop driver tests
 * (desktop-driver, desktop-capture, desktop-keyboard and desktop-pointer):
 * `startDriverOnXvfb()` is a private bare Xvfb with a driver on it;
 * `useDriverPage()`, called in a describe, adds Debian chromium (through
 * Playwright) in kiosk mode on that display, showing a page that records every
 * input event it gets (a textarea, a grey pad, an orange and a blue band),
 * calibrates page → screen coordinates and opens an input fence
 * (input-fence.ts) on it, all in the describe's `before`, and closes them all
 * in its `after`.
 *
 * Nothing here sleeps to let input "arrive": `drain()` and `expectValue()`
 * pass the fence first, so what they read is everything sent before them.
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import sharp from 'sharp';
import { chromium, type Browser, type Page } from 'playwright';
import { WorkerDesktopDriver } from '../src/desktop-driver/worker-driver.ts';
import type { Point } from '../src/base/geometry.ts';
import { startBareXvfb, type BareXvfb } from './display.ts';
import type { RecordedEvent } from './event-page.ts';
import { InputFence, isWheelMarker } from './input-fence.ts';
import { until } from './wait.ts';

/** The size of the bare Xvfb (startBareXvfb's default), and of the chromium window on it. */
export const WIDTH = 1280;
export const HEIGHT = 800;

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

export async function timeIt(n: number, fn: () => Promise<unknown>): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn();
    times.push(performance.now() - t0);
  }
  return median(times);
}

export function measure(what: string, ms: number): void {
  console.log(`[measure] ${what}: median ${ms.toFixed(1)} ms`);
}

/** The first truthy value of `fn`, polled with a deadline (wait.ts); the failure names `what`. */
export function waitFor<T>(fn: () => Promise<T | undefined | false>, what: string, timeoutMs = 10_000): Promise<T> {
  return until(what, fn, { timeoutMs });
}

/** Chromium's wheel delta (CSS px) for one X wheel click (button 4-7 press). */
export const WHEEL_CLICK_PX = 120;

export async function pixelAt(png: Buffer, x: number, y: number): Promise<[number, number, number]> {
  const { data, info } = await sharp(png).removeAlpha().raw().toBuffer({ resolveWithObject: true });
  const i = (y * info.width + x) * info.channels;
  return [data[i]!, data[i + 1]!, data[i + 2]!];
}

export function assertColor(
  actual: [number, number, number],
  expected: [number, number, number],
  tolerance: number,
): void {
  const ok = actual.every((v, i) => Math.abs(v - expected[i]!) <= tolerance);
  assert.ok(ok, `pixel ${JSON.stringify(actual)} is not ≈ ${JSON.stringify(expected)}`);
}

const PAGE = `<!doctype html><html><head><meta charset="utf-8"><style>
html, body { margin: 0; padding: 0; overflow: hidden; width: 100%; height: 100%; background: #fff; }
#t { position: absolute; left: 20px; top: 20px; width: 560px; height: 160px; font: 14px monospace; }
#pad { position: absolute; left: 20px; top: 220px; width: 560px; height: 300px; background: #ddd; }
#orange { position: absolute; left: 640px; top: 0; width: 320px; height: 100%; background: #ff8000; }
#blue { position: absolute; left: 960px; top: 0; width: 320px; height: 100%; background: #0040ff; }
</style></head><body>
<textarea id="t" spellcheck="false" autocomplete="off"></textarea>
<div id="pad"></div><div id="orange"></div><div id="blue"></div>
<script>
window.__events = [];
// The input fence (input-fence.ts) reads __lastMove, and wheel events' ctrlKey and time.
window.__lastMove = null;
for (const type of ['mousedown', 'mouseup', 'click', 'dblclick', 'auxclick', 'contextmenu', 'mousemove', 'wheel', 'keydown', 'keyup']) {
  window.addEventListener(type, (e) => {
    const time = performance.now();
    window.__events.push({ type, target: e.target.id || e.target.tagName, button: e.button, buttons: e.buttons,
      detail: e.detail, x: e.clientX, y: e.clientY, shiftKey: e.shiftKey, ctrlKey: e.ctrlKey, altKey: e.altKey,
      key: e.key, code: e.code, deltaX: e.deltaX, deltaY: e.deltaY, time });
    if (type === 'mousemove') window.__lastMove = { clientX: e.clientX, clientY: e.clientY, time };
    if (type === 'contextmenu' || type === 'wheel') e.preventDefault();
  }, { capture: true, passive: false });
}
const ta = document.getElementById('t');
// Tab would move focus out of the textarea: insert it instead, so typed tabs can be read back.
ta.addEventListener('keydown', (e) => {
  if (e.key === 'Tab' && !e.ctrlKey && !e.altKey && !e.shiftKey) {
    e.preventDefault();
    ta.setRangeText('\\t', ta.selectionStart, ta.selectionEnd, 'end');
  }
});
</script></body></html>`;

export interface PageEvent {
  type: string;
  target: string;
  button: number;
  buttons: number;
  detail: number;
  x: number;
  y: number;
  shiftKey: boolean;
  ctrlKey: boolean;
  altKey: boolean;
  key: string;
  code: string;
  deltaX: number;
  deltaY: number;
  /** performance.now() on the page when it was recorded. */
  time: number;
}

/** Whether `e` belongs to an input fence's Ctrl+wheel marker (its wheel, or its Control key). */
export const isMarker = (e: PageEvent): boolean => isWheelMarker(e as unknown as RecordedEvent);

/** A bare Xvfb and a WorkerDesktopDriver on it; the driver's log lines go to `logs`, its workers' pids to `workerPids`. */
export async function startDriverOnXvfb(
  logs: string[] = [],
  workerPids: number[] = [],
): Promise<{ xvfb: BareXvfb; driver: WorkerDesktopDriver }> {
  const xvfb = await startBareXvfb();
  const driver = new WorkerDesktopDriver({
    display: xvfb.display,
    log: (level, msg, fields) => {
      logs.push(`${level} ${msg}`);
      if (msg === 'desktop worker started') workerPids.push((fields as { pid: number }).pid);
      if (level === 'error' || process.env.DESKBATCH_TEST_VERBOSE) {
        console.error(`[driver] ${level}: ${msg}`, JSON.stringify(fields ?? {}));
      }
    },
  });
  return { xvfb, driver };
}

/**
 * The driver, chromium and the recording page of one describe (see
 * `useDriverPage`). The helpers are arrow functions: a test file may take
 * them out of the object.
 */
export class DriverPage {
  xvfb!: BareXvfb;
  driver!: WorkerDesktopDriver;
  browser: Browser | undefined;
  page!: Page;
  /** Opened once the page is up. */
  fence: InputFence | undefined;
  /** screen = page client + offset */
  offset: Point = { x: 0, y: 0 };
  readonly logs: string[] = [];
  readonly workerPids: number[] = [];

  readonly events = (): Promise<PageEvent[]> => this.page.evaluate('window.__events') as Promise<PageEvent[]>;
  readonly clearEvents = (): Promise<unknown> => this.page.evaluate('window.__events = []');
  readonly screenOf = (p: Point): Point => ({ x: p.x + this.offset.x, y: p.y + this.offset.y });
  readonly value = (): Promise<string> => this.page.inputValue('#t');
  /**
   * Waits until everything sent so far has reached the page (and been
   * handled: typed text is in the textarea). Moves the pointer to the
   * bottom-left corner of the screen, still on the page, so keyboard focus
   * stays.
   */
  readonly passFence = async (): Promise<void> => {
    if (!this.fence) throw new Error('the input fence is not open');
    await this.fence.pass(this.page);
  };
  /** The page's record once everything sent so far has reached it. */
  readonly drain = async (): Promise<PageEvent[]> => {
    await this.passFence();
    return this.events();
  };
  /** The same for wheel events, which Chromium queues apart; leave the marker's events out with `isMarker`. */
  readonly drainWheel = async (): Promise<PageEvent[]> => {
    if (!this.fence) throw new Error('the input fence is not open');
    await this.fence.passWheel(this.page);
    return this.events();
  };
  /**
   * The driver returns once the X server has the events; the app may still be
   * working through them. After the fence it has them all, so the value is
   * final: exactly `expected`, nothing missing and nothing more to come.
   */
  readonly expectValue = async (expected: string): Promise<void> => {
    await this.passFence();
    assert.equal(await this.value(), expected);
  };

  readonly focusTextarea = async (): Promise<void> => {
    // No window manager: keyboard focus follows the pointer, so the pointer must be over the page.
    await this.driver.moveMouse(this.screenOf({ x: 300, y: 100 }));
    await this.driver.click('left', 1, []);
    // The click has reached the page before this returns: a textarea focused already would let the wait below
    // pass at once, and a click landing later collapses the selection clearTextarea makes, which then clears
    // nothing (a fresh-clone CI run saw the last test's text still there).
    if (this.fence) await this.passFence();
    await waitFor(async () => (await this.page.evaluate('document.activeElement?.id')) === 't', 'textarea focus');
  };

  readonly clearTextarea = async (): Promise<void> => {
    await this.page.fill('#t', '');
  };

  /** Starts the Xvfb and the driver, then chromium on the page; calibrates and opens the fence. */
  async start(): Promise<void> {
    ({ xvfb: this.xvfb, driver: this.driver } = await startDriverOnXvfb(this.logs, this.workerPids));
    this.browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      headless: false,
      env: { ...process.env, DISPLAY: this.xvfb.display },
      args: [
        '--kiosk',
        '--window-position=0,0',
        `--window-size=${WIDTH},${HEIGHT}`,
        '--force-device-scale-factor=1',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
      ],
    });
    this.page = await this.browser.newPage({ viewport: null });
    await this.page.setContent(PAGE);
    // Two animation frames: the page has been painted before anything captures it.
    await this.page.evaluate('new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))');
    // Calibrate page → screen: press on a known screen point and read where the page saw the
    // press. (A press, not a move: Chromium coalesces moves, so the last move the page has
    // reported may not be the last one sent, while every press is reported, in order.)
    const lastMove = async (): Promise<PageEvent | undefined> =>
      (await this.events()).filter((e) => e.type === 'mousemove').at(-1);
    const probe = { x: 700, y: 500 };
    await this.clearEvents();
    await this.driver.moveMouse(probe);
    await this.driver.click('left', 1, []);
    const seen = await waitFor(
      async () => (await this.events()).find((e) => e.type === 'mousedown'),
      `the page to report the calibration press at screen (${probe.x}, ${probe.y})`,
    );
    this.offset = { x: probe.x - seen.x, y: probe.y - seen.y };
    // Check it on a second point.
    await this.driver.moveMouse({ x: 650, y: 450 });
    await waitFor(
      async () => {
        const m = await lastMove();
        return m && m.x === 650 - this.offset.x && m.y === 450 - this.offset.y;
      },
      `the page to see the pointer at (650, 450) with offset ${JSON.stringify(this.offset)}`,
    );
    // The page starts at `offset` on the screen (the browser's toolbar is above it); the fence's
    // marker, near the bottom-left corner of the screen, is on the page either way.
    this.fence = await InputFence.open(this.xvfb.display, HEIGHT, this.offset);
    await this.passFence(); // the fence works on this page
    await this.clearEvents();
  }

  async close(): Promise<void> {
    this.fence?.close();
    this.fence = undefined;
    await this.browser?.close().catch(() => {});
    await this.driver?.close();
    await this.xvfb?.stop();
  }
}

/** A DriverPage started in the calling describe's `before` and closed in its `after`. */
export function useDriverPage(): DriverPage {
  const d = new DriverPage();
  before(() => d.start());
  after(() => d.close());
  return d;
}
