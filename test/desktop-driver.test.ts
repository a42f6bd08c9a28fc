/**
 * Desktop driver tests: the WorkerDesktopDriver against a private Xvfb, with
 * Debian chromium (through Playwright) as the app that reports what really
 * arrived: typed text, key events, clicks, wheel directions, drags and pixel
 * colours. (Key-name parsing, which needs no display: desktop-keys.test.ts.) Ends with the crash path: the
 * X server is killed under the driver and restarted on the same number.
 *
 * Run: node --import tsx --test test/desktop-driver.test.ts
 *
 * Prints `[measure]` lines with median latencies.
 *
 * Nothing here sleeps to let input "arrive": a test waits on what it observes
 * (a recorded event, the textarea's value, the X server's modifier state),
 * with a deadline and a message naming what did not happen. To assert exactly
 * what the page got, or that something did NOT arrive, a test first passes
 * the input fence (helpers/input-fence.ts): once the page reports the fence's
 * marker, every X input event sent before it is in the page's record.
 */
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { fork, type Serializable } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import sharp from 'sharp';
import { chromium, type Browser, type Page } from 'playwright';
import { parseChord } from '../src/desktop-driver/keys.ts';
import { WorkerDesktopDriver } from '../src/desktop-driver/worker-driver.ts';
import { XConnection } from '../src/desktop-driver/x11.ts';
import { CancelledError, DisplayUnavailableError, DriverCrashedError, ToolInputError } from '../src/base/errors.ts';
import { COMPUTER_SCROLL_AMOUNT_MAX, type DriverKey } from '../src/desktop-driver/driver.ts';
import type { CapturedImage, ImageFormat } from '../src/base/image.ts';
import type { Point, Size } from '../src/base/geometry.ts';
import { pickFreeDisplay, startBareXvfb, type BareXvfb } from '../testkit/display.ts';
import type { RecordedEvent } from '../testkit/event-page.ts';
import { InputFence, isWheelMarker } from '../testkit/input-fence.ts';
import { failsWith } from '../testkit/errors.ts';
import { until } from '../testkit/wait.ts';

const WIDTH = 1280;
const HEIGHT = 800;

const unhandled: unknown[] = [];
process.on('unhandledRejection', (err) => unhandled.push(err));

// ---------------------------------------------------------------------------
// Local helpers

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function timeIt(n: number, fn: () => Promise<unknown>): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn();
    times.push(performance.now() - t0);
  }
  return median(times);
}

function measure(what: string, ms: number): void {
  console.log(`[measure] ${what}: median ${ms.toFixed(1)} ms`);
}

/** The first truthy value of `fn`, polled with a deadline (helpers/wait.ts); the failure names `what`. */
function waitFor<T>(fn: () => Promise<T | undefined | false>, what: string, timeoutMs = 10_000): Promise<T> {
  return until(what, fn, { timeoutMs });
}

/** Chromium's wheel delta (CSS px) for one X wheel click (button 4-7 press). */
const WHEEL_CLICK_PX = 120;

/** X's modifier mask bit for Shift (QueryPointer state). */
const SHIFT_MASK = 0x01;

/** Waits until the X server on `display` reports Shift held (a hold has really started there). */
async function waitForShiftDown(display: string): Promise<void> {
  const conn = await XConnection.open(display);
  try {
    let mask = 0;
    await until(
      `the X server on ${display} to report Shift held`,
      async () => ((mask = await conn.modifierState()) & SHIFT_MASK) !== 0,
      { seen: () => `modifier mask 0x${mask.toString(16)}` },
    );
  } finally {
    conn.close();
  }
}

async function pixelAt(png: Buffer, x: number, y: number): Promise<[number, number, number]> {
  const { data, info } = await sharp(png).removeAlpha().raw().toBuffer({ resolveWithObject: true });
  const i = (y * info.width + x) * info.channels;
  return [data[i]!, data[i + 1]!, data[i + 2]!];
}

function assertColor(actual: [number, number, number], expected: [number, number, number], tolerance: number): void {
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
// The input fence (helpers/input-fence.ts) reads __lastMove, and wheel events' ctrlKey and time.
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

interface PageEvent {
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
const isMarker = (e: PageEvent): boolean => isWheelMarker(e as unknown as RecordedEvent);

// ---------------------------------------------------------------------------

describe('WorkerDesktopDriver on Xvfb', () => {
  let xvfb: BareXvfb;
  let driver: WorkerDesktopDriver;
  let browser: Browser | undefined;
  let page: Page;
  /** Opened once the page is up: see the file comment. */
  let fence: InputFence | undefined;
  /** screen = page client + offset */
  let offset: Point = { x: 0, y: 0 };
  const logs: string[] = [];
  const workerPids: number[] = [];

  const events = (): Promise<PageEvent[]> => page.evaluate('window.__events') as Promise<PageEvent[]>;
  const clearEvents = (): Promise<unknown> => page.evaluate('window.__events = []');
  const screenOf = (p: Point): Point => ({ x: p.x + offset.x, y: p.y + offset.y });
  const value = (): Promise<string> => page.inputValue('#t');
  /**
   * Waits until everything sent so far has reached the page (and been
   * handled: typed text is in the textarea). Moves the pointer to the
   * bottom-left corner of the screen, still on the page, so keyboard focus
   * stays.
   */
  async function passFence(): Promise<void> {
    if (!fence) throw new Error('the input fence is not open');
    await fence.pass(page);
  }
  /** The page's record once everything sent so far has reached it. */
  async function drain(): Promise<PageEvent[]> {
    await passFence();
    return events();
  }
  /** The same for wheel events, which Chromium queues apart; leave the marker's events out with `isMarker`. */
  async function drainWheel(): Promise<PageEvent[]> {
    if (!fence) throw new Error('the input fence is not open');
    await fence.passWheel(page);
    return events();
  }
  /**
   * The driver returns once the X server has the events; the app may still be
   * working through them. After the fence it has them all, so the value is
   * final: exactly `expected`, nothing missing and nothing more to come.
   */
  async function expectValue(expected: string): Promise<void> {
    await passFence();
    assert.equal(await value(), expected);
  }

  async function focusTextarea(): Promise<void> {
    // No window manager: keyboard focus follows the pointer, so the pointer must be over the page.
    await driver.moveMouse(screenOf({ x: 300, y: 100 }));
    await driver.click('left', 1, []);
    await waitFor(async () => (await page.evaluate('document.activeElement?.id')) === 't', 'textarea focus');
  }

  async function clearTextarea(): Promise<void> {
    await page.fill('#t', '');
  }

  before(async () => {
    xvfb = await startBareXvfb();
    driver = new WorkerDesktopDriver({
      display: xvfb.display,
      log: (level, msg, fields) => {
        logs.push(`${level} ${msg}`);
        if (msg === 'desktop worker started') workerPids.push((fields as { pid: number }).pid);
        if (level === 'error' || process.env.DESKBATCH_TEST_VERBOSE) {
          console.error(`[driver] ${level}: ${msg}`, JSON.stringify(fields ?? {}));
        }
      },
    });
  });

  after(async () => {
    await browser?.close().catch(() => {});
    await driver?.close();
    await xvfb?.stop();
  });

  test('a display that does not exist gives DisplayUnavailableError without spawning', async () => {
    const n = pickFreeDisplay();
    const seen: string[] = [];
    const d = new WorkerDesktopDriver({ display: `:${n}`, log: (_l, m) => seen.push(m) });
    await assert.rejects(d.displaySize(), failsWith(DisplayUnavailableError, `X display :${n} is not reachable`));
    await assert.rejects(
      d.moveMouse({ x: 1, y: 1 }),
      failsWith(DisplayUnavailableError, `X display :${n} is not reachable`),
    );
    assert.ok(!seen.some((m) => m.includes('started')), 'no worker was started');
    await d.close();
  });

  test('displaySize and cursor round trip', async () => {
    assert.deepEqual(await driver.displaySize(), { width: WIDTH, height: HEIGHT });
    for (const p of [
      { x: 123, y: 456 },
      { x: 0, y: 0 },
      { x: WIDTH - 1, y: HEIGHT - 1 },
      { x: 640, y: 400 },
    ]) {
      await driver.moveMouse(p);
      assert.deepEqual(await driver.cursorPosition(), p);
    }
  });

  test('cursorPosition (on the daemon side) answers after the ops asked before it; cancelled while waiting, at once', async () => {
    await driver.moveMouse({ x: 77, y: 88 });
    const order: string[] = [];
    const hold = driver.holdKeys(parseChord('shift'), 2_000).then(() => void order.push('hold'));
    const ac = new AbortController();
    const waiting = driver.cursorPosition(ac.signal);
    ac.abort();
    await assert.rejects(waiting, failsWith(CancelledError, 'This operation was aborted'));
    assert.equal(order.length, 0, 'rejected while the hold still ran');
    const where = await driver.cursorPosition().then((p) => {
      order.push('cursor');
      return p;
    });
    await hold;
    assert.deepEqual(order, ['hold', 'cursor']);
    assert.deepEqual(where, { x: 77, y: 88 });
  });

  test('an already aborted signal rejects with CancelledError', async () => {
    await assert.rejects(
      driver.displaySize(AbortSignal.abort()),
      failsWith(CancelledError, 'This operation was aborted'),
    );
  });

  test('the worker answers malformed messages with errors, and keeps working', async () => {
    // The driver's side is typed (worker-protocol.ts); the worker still checks what arrives.
    const proc = fork(fileURLToPath(new URL('../src/desktop-driver/worker.ts', import.meta.url)), [], {
      execArgv: ['--import', import.meta.resolve('tsx')],
      serialization: 'advanced',
      stdio: ['ignore', 'ignore', 'ignore', 'ipc'],
      env: { ...process.env, DISPLAY: xvfb.display },
    });
    type Reply = { id: number; ok: boolean; result?: unknown; error?: { name: string; message: string } };
    const replies = new Map<number, Reply>();
    let ready = false;
    proc.on('message', (m: { type?: string; id?: number }) => {
      if (m.type === 'ready') ready = true;
      else if (typeof m.id === 'number') replies.set(m.id, m as Reply);
    });
    try {
      await waitFor(async () => ready, 'the worker to say ready', 30_000);
      const bad: Array<[unknown, string, RegExp]> = [
        [{ id: 1, op: 'nope' }, 'Error', /unknown op "nope"/],
        [{ id: 2, op: 'toString' }, 'Error', /unknown op "toString"/],
        [{ id: 3, op: 'scroll', args: 'down' }, 'ToolInputError', /arguments must be an object/],
        [
          { id: 4, op: 'scroll', args: { direction: 'down', amount: COMPUTER_SCROLL_AMOUNT_MAX + 1, modifiers: [] } },
          'ToolInputError',
          new RegExp(`amount must be an integer from 1 to ${COMPUTER_SCROLL_AMOUNT_MAX}`),
        ],
        [{ id: 5, op: 'moveMouse', args: { to: { x: 'a', y: 1 } } }, 'ToolInputError', /to must have numeric x and y/],
        [{ id: 6, op: 'pressKeys', args: { chord: [5], repeat: 1 } }, 'ToolInputError', /list of key names/],
        [{ id: 7, op: 'capture', args: { options: null } }, 'ToolInputError', /capture options/],
        [{ id: 8, op: 'holdKeys', args: { chord: ['LeftShift'], durationMs: -1 } }, 'ToolInputError', /durationMs/],
      ];
      // Not objects, or no id: nothing to answer, and nothing to crash on.
      const junk: unknown[] = [null, 'hello', 42, [], { op: 'moveMouse', args: { to: { x: 1, y: 1 } } }];
      for (const msg of junk) proc.send(msg as Serializable);
      for (const [msg] of bad) proc.send(msg as Serializable);
      proc.send({ id: 9, op: 'displaySize', args: {} });
      await waitFor(async () => replies.has(9), 'the answer to displaySize');
      for (const [msg, name, message] of bad) {
        const id = (msg as { id: number }).id;
        const reply = replies.get(id);
        assert.equal(reply?.ok, false, `message ${id} is refused`);
        assert.equal(reply.error?.name, name, `message ${id}`);
        assert.match(reply.error?.message ?? '', message, `message ${id}`);
      }
      assert.deepEqual(replies.get(9), { id: 9, ok: true, result: { width: WIDTH, height: HEIGHT } });
      assert.equal(proc.exitCode, null, 'the worker is still running');
    } finally {
      if (proc.exitCode === null && proc.signalCode === null) {
        const exited = once(proc, 'exit');
        const killer = setTimeout(() => proc.kill('SIGKILL'), 5_000);
        if (proc.connected) proc.disconnect(); // the worker releases what it holds and exits
        await exited;
        clearTimeout(killer);
      }
    }
  });

  test('the worker accepts what the computer schemas accept: fractional holds, the largest scroll', async () => {
    // hold_key takes seconds with fractions: 1.1 s is 1100.0000000000002 ms.
    await driver.holdKeys(parseChord('shift'), 1.1 * 1000);
    await driver.scroll('down', COMPUTER_SCROLL_AMOUNT_MAX, []);
    await assert.rejects(driver.scroll('down', COMPUTER_SCROLL_AMOUNT_MAX + 1, []), ToolInputError);
  });

  describe('with chromium', () => {
    before(async () => {
      browser = await chromium.launch({
        executablePath: '/usr/bin/chromium',
        headless: false,
        env: { ...process.env, DISPLAY: xvfb.display },
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
      page = await browser.newPage({ viewport: null });
      await page.setContent(PAGE);
      // Two animation frames: the page has been painted before anything captures it.
      await page.evaluate('new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))');
      // Calibrate page → screen: press on a known screen point and read where the page saw the
      // press. (A press, not a move: Chromium coalesces moves, so the last move the page has
      // reported may not be the last one sent, while every press is reported, in order.)
      const lastMove = async (): Promise<PageEvent | undefined> =>
        (await events()).filter((e) => e.type === 'mousemove').at(-1);
      const probe = { x: 700, y: 500 };
      await clearEvents();
      await driver.moveMouse(probe);
      await driver.click('left', 1, []);
      const seen = await waitFor(
        async () => (await events()).find((e) => e.type === 'mousedown'),
        `the page to report the calibration press at screen (${probe.x}, ${probe.y})`,
      );
      offset = { x: probe.x - seen.x, y: probe.y - seen.y };
      // Check it on a second point.
      await driver.moveMouse({ x: 650, y: 450 });
      await waitFor(
        async () => {
          const m = await lastMove();
          return m && m.x === 650 - offset.x && m.y === 450 - offset.y;
        },
        `the page to see the pointer at (650, 450) with offset ${JSON.stringify(offset)}`,
      );
      // The page starts at `offset` on the screen (the browser's toolbar is above it); the fence's
      // marker, near the bottom-left corner of the screen, is on the page either way.
      fence = await InputFence.open(xvfb.display, HEIGHT, offset);
      await passFence(); // the fence works on this page
      await clearEvents();
    });

    after(() => {
      fence?.close();
      fence = undefined;
    });

    test('capture: full screen png, BGRX converted to the right RGB', async () => {
      const orange = screenOf({ x: 800, y: 400 });
      const blue = screenOf({ x: 1100, y: 400 });
      const full = await driver.capture({ output: { width: WIDTH, height: HEIGHT }, format: 'png', quality: 80 });
      assert.equal(full.mediaType, 'image/png');
      assert.ok(Buffer.isBuffer(full.data));
      const meta = await sharp(full.data).metadata();
      assert.equal(meta.width, WIDTH);
      assert.equal(meta.height, HEIGHT);
      assertColor(await pixelAt(full.data, orange.x, orange.y), [255, 128, 0], 2);
      assertColor(await pixelAt(full.data, blue.x, blue.y), [0, 64, 255], 2);
      // Not black overall.
      const stats = await sharp(full.data).stats();
      assert.ok(stats.channels[0]!.mean > 100, `mean red ${stats.channels[0]!.mean}`);
    });

    test('capture: downscaled png, jpeg, webp have the requested size and colours', async () => {
      const orange = screenOf({ x: 800, y: 400 });
      for (const format of ['png', 'jpeg', 'webp'] as const) {
        const img = await driver.capture({ output: { width: 1024, height: 640 }, format, quality: 85 });
        assert.equal(img.mediaType, `image/${format}`);
        const meta = await sharp(img.data).metadata();
        assert.equal(meta.format, format);
        assert.deepEqual([meta.width, meta.height, img.width, img.height], [1024, 640, 1024, 640]);
        const px = await pixelAt(
          img.data,
          Math.round((orange.x * 1024) / WIDTH),
          Math.round((orange.y * 640) / HEIGHT),
        );
        assertColor(px, [255, 128, 0], format === 'png' ? 2 : 12);
      }
    });

    test('capture: region, resized up and down', async () => {
      const b = screenOf({ x: 1000, y: 300 });
      const region = { x: b.x, y: b.y, width: 200, height: 100 };
      const small = await driver.capture({ region, output: { width: 100, height: 50 }, format: 'png', quality: 80 });
      let meta = await sharp(small.data).metadata();
      assert.deepEqual([meta.width, meta.height], [100, 50]);
      const stats = await sharp(small.data).stats();
      assert.ok(Math.abs(stats.channels[2]!.mean - 255) < 2 && stats.channels[0]!.mean < 2, 'all blue');
      // Zoom: a region straddling orange|blue, upscaled.
      const edge = screenOf({ x: 960 - 32, y: 300 });
      const zoom = await driver.capture({
        region: { x: edge.x, y: edge.y, width: 64, height: 40 },
        output: { width: 640, height: 400 },
        format: 'png',
        quality: 80,
      });
      meta = await sharp(zoom.data).metadata();
      assert.deepEqual([meta.width, meta.height], [640, 400]);
      assertColor(await pixelAt(zoom.data, 100, 200), [255, 128, 0], 2);
      assertColor(await pixelAt(zoom.data, 540, 200), [0, 64, 255], 2);
    });

    test('settle: a capture right after input waits for an animation to end; on a still screen it grabs once', async () => {
      const settle = { afterInputMs: 1_000, quietMs: 32, reactionMs: 50, intervalMs: 50, maxMs: 3_000 };
      const output = { width: WIDTH, height: HEIGHT };
      const end = screenOf({ x: 520, y: 620 });
      const start = screenOf({ x: 120, y: 620 });
      // Settling waits for quietMs without a change (the X server's DAMAGE reports), so it cannot
      // tell an animation that the machine starved for longer than that from one that ended: such an
      // attempt proves nothing, and is tried again. The page records when it drew each step, which
      // says whether it was starved.
      const ATTEMPTS = 4;
      let inputEnded = 0;
      for (let attempt = 1; ; attempt++) {
        // A green box slides from x=100 to x=500 over 400 ms, then stays (a string: tsx would wrap a function).
        await page.evaluate(`(() => {
          document.getElementById('slider')?.remove();
          const box = document.createElement('div');
          box.id = 'slider';
          box.style.cssText = 'position:fixed;top:600px;left:100px;width:40px;height:40px;background:#00ff00;z-index:99';
          document.body.append(box);
          window.__steps = [];
          const t0 = performance.now();
          const step = (now) => {
            window.__steps.push(now);
            const f = Math.min(1, (performance.now() - t0) / 400);
            box.style.left = (100 + 400 * f) + 'px';
            if (f < 1) requestAnimationFrame(step);
          };
          requestAnimationFrame(step);
        })()`);
        await driver.moveMouse({ x: 5, y: 5 }); // input: the next capture settles
        // The worker notes the input's time before it answers, so this is no earlier than its note.
        inputEnded = performance.now();
        const shot = await driver.capture({ output, format: 'png', quality: 80, settle });
        assert.ok(shot.settled, 'the settle step ran');
        assert.equal(shot.settled.stable, true);
        const steps = (await page.evaluate('window.__steps')) as number[];
        const longestGap = Math.max(...steps.slice(1).map((t, i) => t - steps[i]!));
        const atEnd = await pixelAt(shot.data, end.x, end.y);
        const missed = !(Math.abs(atEnd[0]) <= 2 && Math.abs(atEnd[1] - 255) <= 2 && Math.abs(atEnd[2]) <= 2);
        if (missed && longestGap >= settle.quietMs && attempt < ATTEMPTS) {
          console.log(`# settle attempt ${attempt}: the page was starved for ${Math.round(longestGap)} ms; again`);
          continue;
        }
        assert.equal(shot.settled.method, 'damage', 'Xvfb reports drawing (DAMAGE)');
        assert.ok(shot.settled.changes >= 2, `the animation's steps were reported: ${shot.settled.changes}`);
        assertColor(atEnd, [0, 255, 0], 2);
        assert.notDeepEqual(await pixelAt(shot.data, start.x, start.y), [0, 255, 0]);
        console.log(`# settle after input: ${shot.settled.ms} ms, ${shot.settled.changes} changes`);
        break;
      }
      try {
        // What is under test here is a quiet time: no input for afterInputMs. Wait out exactly
        // the rest of it, counted from the input above (not a guess at how long anything takes).
        await delay(Math.max(0, inputEnded + settle.afterInputMs + 50 - performance.now()));
        const still = await driver.capture({ output, format: 'png', quality: 80, settle });
        assert.equal(still.settled, undefined, 'no input for afterInputMs: one grab');
      } finally {
        await page.evaluate(`document.getElementById('slider')?.remove()`);
      }
    });

    test('capture: a region off the display is a ToolInputError', async () => {
      await assert.rejects(
        driver.capture({
          region: { x: 1200, y: 0, width: 200, height: 10 },
          output: { width: 10, height: 10 },
          format: 'png',
          quality: 80,
        }),
        ToolInputError,
      );
      // The worker is still fine.
      assert.deepEqual(await driver.displaySize(), { width: WIDTH, height: HEIGHT });
    });

    test('typing all 95 printable ASCII characters arrives exactly', async () => {
      await focusTextarea();
      let ascii = '';
      for (let c = 0x20; c <= 0x7e; c++) ascii += String.fromCharCode(c);
      await clearTextarea();
      await driver.typeText(ascii);
      await expectValue(ascii);
      // Newline and tab.
      await clearTextarea();
      await driver.typeText('line 1\nline\t2\n');
      await expectValue('line 1\nline\t2\n');
      const times: number[] = [];
      for (let i = 0; i < 7; i++) {
        await clearTextarea();
        const t0 = performance.now();
        await driver.typeText(ascii);
        times.push(performance.now() - t0);
        await expectValue(ascii);
      }
      measure('typeText 95 printable ASCII chars', median(times));
    });

    test('typing non-ASCII text arrives exactly, interleaved with ASCII', async () => {
      const logsBefore = logs.length;
      await focusTextarea();
      const text = 'héllo wörld — 你好 ✓ 😀 ñÑ€ "Ωmega" aéaéaé {x: ü}';
      await clearTextarea();
      const tCold = performance.now();
      await driver.typeText(text);
      const cold = performance.now() - tCold;
      await expectValue(text);
      measure('typeText non-ASCII, first time (binds keysyms, waits for clients)', cold);
      const times: number[] = [];
      for (let i = 0; i < 5; i++) {
        await clearTextarea();
        const t0 = performance.now();
        await driver.typeText(text);
        times.push(performance.now() - t0);
        await expectValue(text);
      }
      measure(`typeText mixed non-ASCII text, keysyms already bound (${[...text].length} chars)`, median(times));
      const fresh = 'ĀāĂăĄą';
      await clearTextarea();
      const tFresh = performance.now();
      await driver.typeText(fresh);
      measure(`typeText ${fresh.length} new non-ASCII chars (bind + wait for the re-read)`, performance.now() - tFresh);
      await expectValue(fresh);
      // The worker saw Chromium re-read its keymap (RECORD), at least once, rather than only waiting.
      const mine = logs.slice(logsBefore);
      assert.ok(
        mine.some((l) => l.endsWith('the focused client re-read the keymap')),
        mine.join('\n'),
      );
    });

    test('typing more distinct characters than spare keycodes rebinds and stays exact', async () => {
      await focusTextarea();
      const text = '一二三四五六七八九十百千万亿甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未申酉戌亥春夏秋冬 ÀÁÂÃÄÅÆÇÈÉ';
      await clearTextarea();
      await driver.typeText(text);
      await expectValue(text);
    });

    test('Caps Lock on: typed text is still exact', async () => {
      await focusTextarea();
      await driver.pressKeys(parseChord('Caps_Lock'), 1);
      try {
        await clearTextarea();
        await driver.typeText('Hello World, ÀÉ é! abcXYZ');
        await expectValue('Hello World, ÀÉ é! abcXYZ');
      } finally {
        await driver.pressKeys(parseChord('Caps_Lock'), 1);
      }
      await clearTextarea();
      await driver.typeText('aA');
      await expectValue('aA');
    });

    test('aborting a long typeText stops it promptly; the next call works', async () => {
      await focusTextarea();
      await clearTextarea();
      // About 20 s of typing here, far longer than the signal below takes: with 6,000 characters (about 2 s on a
      // quiet machine) a busy one once finished typing before the page's first-key message came back, and the
      // abort found nothing left to stop.
      const long = 'abcdefghij'.repeat(6_000);
      // Abort once typing is under way: when the page handles the first key. The page reports it by
      // pushing a console message from its key handler; polling the page instead would be answered
      // only after the whole flood of key events, which Chromium handles first.
      const signal = 'desktop-driver test: first keydown';
      await page.evaluate(
        `window.addEventListener('keydown', () => console.log(${JSON.stringify(signal)}), { once: true, capture: true })`,
      );
      const firstKey = page.waitForEvent('console', { predicate: (m) => m.text() === signal, timeout: 10_000 });
      const ac = new AbortController();
      const typing = driver.typeText(long, ac.signal);
      await firstKey.catch((err: unknown) => {
        ac.abort();
        typing.catch(() => {}); // failing already: do not add an unhandled rejection
        throw new Error(`the page did not report the first typed key: ${(err as Error).message}`);
      });
      ac.abort();
      // Cancelled, not finished: that fewer keys than the whole text arrived is checked below.
      await assert.rejects(typing, failsWith(CancelledError, 'This operation was aborted'));
      // It runs once the worker has stopped typing (the driver orders it after the ops asked before it,
      // though the daemon's own X connection answers it). Then the fence: every key it sent has reached the page.
      await driver.cursorPosition();
      await passFence();
      const typed = await value();
      assert.ok(typed.length < long.length && long.startsWith(typed), `typed ${typed.length} chars`);
      assert.ok(typed.length > 0, 'the abort came while typing, not before');
      // Nothing more arrives after the fence: the typing really stopped.
      await passFence();
      assert.equal(await value(), typed, 'nothing typed after the abort settled');
      await clearTextarea();
      await driver.typeText('after');
      await expectValue('after');
    });

    test('worker killed while holding Shift: DriverCrashedError, and the next worker releases the stuck key', async () => {
      await focusTextarea();
      const pidsBefore = workerPids.length;
      await clearEvents();
      const hold = driver.holdKeys(parseChord('shift'), 10_000);
      await waitFor(
        async () => (await events()).some((e) => e.type === 'keydown' && e.key === 'Shift'),
        'the page to see Shift go down (the hold has started)',
      );
      const pid = workerPids.at(-1)!;
      assert.ok(pid && workerPids.length === pidsBefore, 'the hold ran in the existing worker');
      process.kill(pid, 'SIGKILL');
      await assert.rejects(
        hold,
        failsWith(DriverCrashedError, 'desktop worker exited during holdKeys (signal SIGKILL)'),
      );
      await clearTextarea();
      await driver.typeText('abc');
      await expectValue('abc'); // not "ABC": the new worker released the Shift the dead one held
      assert.equal(workerPids.length, pidsBefore + 1, 'a new worker was started');
    });

    test('control characters are refused before anything is typed', async () => {
      await focusTextarea();
      await clearTextarea();
      await clearEvents();
      await assert.rejects(
        driver.typeText('abc\u0007def'),
        failsWith(
          ToolInputError,
          'Cannot type control character U+0007 at position 3. Text may contain printable characters, \\n (Return) and \\t (Tab); send other keys with the key action.',
        ),
      );
      await assert.rejects(driver.typeText('abc\rdef'), /carriage return/);
      await expectValue(''); // after the fence: nothing was typed, and nothing is on its way
      assert.deepEqual(
        (await events()).filter((e) => e.type === 'keydown' || e.type === 'keyup'),
        [],
        'no key events',
      );
    });

    test('key chords: ctrl+a, BackSpace, shifted keys, Return vs KP_Enter', async () => {
      await focusTextarea();
      await clearTextarea();
      await driver.typeText('some text');
      await driver.pressKeys(parseChord('ctrl+a'), 1);
      await driver.pressKeys(parseChord('BackSpace'), 1);
      await expectValue('');
      await driver.pressKeys(parseChord('A'), 1);
      await driver.pressKeys(parseChord('!'), 2);
      await driver.pressKeys(parseChord('x'), 3);
      await driver.pressKeys(parseChord('Return'), 1);
      await expectValue('A!!xxx\n');
      await clearEvents();
      await driver.pressKeys(parseChord('ctrl+shift+x'), 1);
      await driver.pressKeys(parseChord('Return'), 1);
      await driver.pressKeys(parseChord('KP_Enter'), 1);
      await driver.pressKeys(parseChord('alt+shift+F5'), 1);
      // After the fence: all of them, and only them.
      const downs = (await drain()).filter((e) => e.type === 'keydown' && !['Shift', 'Control', 'Alt'].includes(e.key));
      assert.deepEqual(
        downs.map((e) => [e.key, e.code, e.ctrlKey, e.shiftKey, e.altKey]),
        [
          ['X', 'KeyX', true, true, false],
          ['Enter', 'Enter', false, false, false],
          ['Enter', 'NumpadEnter', false, false, false],
          ['F5', 'F5', false, true, true],
        ],
      );
    });

    test('keys missing from the keymap (F13, F24) and keys libnut lacks (Menu) arrive, and do not kill the worker', async () => {
      await focusTextarea();
      await clearEvents();
      // On Xvfb's keymap F13–F24 have no keycode: libnut would send keycode 0 and the
      // worker would die of BadValue. The worker binds them to a spare keycode instead.
      await driver.pressKeys(parseChord('F13'), 1);
      await driver.pressKeys(parseChord('ctrl+F24'), 1);
      // After the fence: all of them, and only them.
      const downs = (await drain()).filter((e) => e.type === 'keydown' && e.key !== 'Control');
      // Chromium names a keysym on a keycode it has no physical-key code for "\0"
      // (xdotool key F13 gives the same); xev shows F13 and F24 (checked by hand).
      assert.deepEqual(
        downs.map((e) => [['F13', 'F24', '\0'].includes(e.key), e.ctrlKey]),
        [
          [true, false],
          [true, true],
        ],
      );
      await clearEvents();
      await driver.pressKeys(parseChord('Menu'), 1);
      const menu = await waitFor(
        async () => (await events()).find((e) => e.key === 'ContextMenu' || e.type === 'contextmenu'),
        'Menu key',
      );
      assert.ok(menu);
      await driver.pressKeys(parseChord('Escape'), 1);
      await clearTextarea();
      await driver.typeText('still alive');
      await expectValue('still alive');
    });

    test('holdKeys holds then releases; abort ends the hold early and releases', async () => {
      await focusTextarea();
      await clearEvents();
      const t0 = performance.now();
      await driver.holdKeys(parseChord('shift'), 300);
      assert.ok(performance.now() - t0 >= 290);
      let evs = await waitFor(async () => {
        const e = await events();
        return e.some((x) => x.type === 'keyup' && x.key === 'Shift') ? e : undefined;
      }, 'shift keyup');
      assert.ok(evs.some((x) => x.type === 'keydown' && x.key === 'Shift'));

      await clearEvents();
      const ac = new AbortController();
      const hold = driver.holdKeys(parseChord('ctrl'), 10_000, ac.signal);
      await waitFor(
        async () => (await events()).some((e) => e.type === 'keydown' && e.key === 'Control'),
        'the page to see Control go down (the hold has started)',
      );
      const tAbort = performance.now();
      ac.abort();
      await assert.rejects(hold, failsWith(CancelledError, 'This operation was aborted'));
      // Long before the 10 s hold would have ended, however busy the machine.
      assert.ok(
        performance.now() - tAbort < 5_000,
        `rejected ${Math.round(performance.now() - tAbort)} ms after the abort`,
      );
      evs = await waitFor(async () => {
        const e = await events();
        return e.some((x) => x.type === 'keyup' && x.key === 'Control') ? e : undefined;
      }, 'ctrl keyup after abort');
      // The next call runs normally and Ctrl is not stuck.
      await clearTextarea();
      await driver.typeText('ok');
      await expectValue('ok');
    });

    test('scroll directions: down/up/right/left give the right wheel delta signs', async () => {
      await driver.moveMouse(screenOf({ x: 300, y: 370 }));
      const cases = [
        ['down', 'deltaY', 1],
        ['up', 'deltaY', -1],
        ['right', 'deltaX', 1],
        ['left', 'deltaX', -1],
      ] as const;
      for (const [direction, axis, sign] of cases) {
        // The previous case ended with a wheel fence: all its wheel events are in, none can land here.
        await clearEvents();
        await driver.scroll(direction, 2, []);
        // After the wheel fence every wheel event of this case has arrived (Chromium may merge queued ones).
        const wheels = (await drainWheel()).filter((e) => e.type === 'wheel' && !isMarker(e));
        assert.ok(wheels.length >= 1, `wheel ${direction}: no wheel event arrived`);
        for (const w of wheels) {
          assert.equal(Math.sign(w[axis]), sign, `${direction}: ${axis} = ${w[axis]}`);
          assert.ok(w[axis === 'deltaX' ? 'deltaY' : 'deltaX'] === 0, `${direction}: other axis`);
          assert.equal(w.ctrlKey, false, `${direction}: no Control`);
        }
        // Merged or not, the deltas add up to exactly the two wheel clicks sent.
        assert.equal(
          wheels.reduce((sum, w) => sum + w[axis], 0),
          2 * sign * WHEEL_CLICK_PX,
          `${direction}: total ${axis} of ${JSON.stringify(wheels.map((w) => w[axis]))}`,
        );
      }
      await clearEvents();
      await driver.scroll('down', 1, ['LeftControl']);
      const w = await waitFor(async () => (await events()).find((e) => e.type === 'wheel'), 'ctrl+wheel');
      assert.equal(w.ctrlKey, true);
      assert.equal(w.deltaY, WHEEL_CLICK_PX, 'one wheel click down');
      assert.ok(w.deltaX === 0, `ctrl+wheel: deltaX = ${w.deltaX}`); // === : Chromium may give -0 here
    });

    test('click buttons and counts', async () => {
      // Chromium counts a press as a repeat (detail 2, 3) only within ~500 ms AND a few px of the
      // previous press with the same button and modifiers. Each case clicks 60 px right of the
      // one before, so no case can count as a repeat of the last, however fast they follow.
      let nextX = 60;
      let at = screenOf({ x: nextX, y: 370 });
      /** The key events of the last run. */
      let keys: string[][] = [];
      const run = async (button: 'left' | 'right' | 'middle', count: number, modifiers: DriverKey[] = []) => {
        at = screenOf({ x: nextX, y: 370 });
        nextX += 60;
        await driver.moveMouse(at);
        await clearEvents();
        await driver.click(button, count, modifiers);
        // After the fence: every event of this click, and none of the next.
        const all = await drain();
        keys = all.filter((e) => e.type === 'keydown' || e.type === 'keyup').map((e) => [e.type, e.key]);
        const mouse = all.filter((e) => e.type !== 'mousemove' && e.type !== 'keydown' && e.type !== 'keyup');
        for (const e of mouse) {
          assert.deepEqual([e.x + offset.x, e.y + offset.y], [at.x, at.y], `${button} ${e.type} position`);
        }
        return mouse;
      };
      const sequence = (evs: PageEvent[]) => evs.map((e) => [e.type, e.button, e.detail]);
      let evs = await run('left', 1);
      assert.deepEqual(
        evs.map((e) => [e.type, e.button, e.detail]),
        [
          ['mousedown', 0, 1],
          ['mouseup', 0, 1],
          ['click', 0, 1],
        ],
      );
      assert.deepEqual([evs[0]!.x + offset.x, evs[0]!.y + offset.y], [at.x, at.y]);
      evs = await run('left', 2);
      assert.ok(evs.some((e) => e.type === 'dblclick'));
      assert.deepEqual(
        evs.filter((e) => e.type === 'click').map((e) => e.detail),
        [1, 2],
      );
      assert.deepEqual(sequence(evs), [
        ['mousedown', 0, 1],
        ['mouseup', 0, 1],
        ['click', 0, 1],
        ['mousedown', 0, 2],
        ['mouseup', 0, 2],
        ['click', 0, 2],
        ['dblclick', 0, 2],
      ]);
      evs = await run('left', 3);
      assert.deepEqual(
        evs.filter((e) => e.type === 'click').map((e) => e.detail),
        [1, 2, 3],
      );
      assert.deepEqual(sequence(evs), [
        ['mousedown', 0, 1],
        ['mouseup', 0, 1],
        ['click', 0, 1],
        ['mousedown', 0, 2],
        ['mouseup', 0, 2],
        ['click', 0, 2],
        ['dblclick', 0, 2],
        ['mousedown', 0, 3],
        ['mouseup', 0, 3],
        ['click', 0, 3],
      ]);
      evs = await run('right', 1);
      assert.ok(evs.some((e) => e.type === 'mousedown' && e.button === 2));
      assert.ok(evs.some((e) => e.type === 'contextmenu'));
      // Chromium on Linux fires contextmenu on the press (its detail is 0).
      assert.deepEqual(sequence(evs), [
        ['mousedown', 2, 1],
        ['contextmenu', 2, 0],
        ['mouseup', 2, 1],
        ['auxclick', 2, 1],
      ]);
      evs = await run('middle', 1);
      assert.ok(evs.some((e) => e.type === 'mousedown' && e.button === 1));
      assert.ok(evs.some((e) => e.type === 'auxclick' && e.button === 1));
      assert.deepEqual(sequence(evs), [
        ['mousedown', 1, 1],
        ['mouseup', 1, 1],
        ['auxclick', 1, 1],
      ]);
      evs = await run('left', 1, ['LeftShift']);
      const click = evs.find((e) => e.type === 'click')!;
      assert.equal(click.shiftKey, true);
      assert.equal(click.ctrlKey, false);
      assert.deepEqual(sequence(evs), [
        ['mousedown', 0, 1],
        ['mouseup', 0, 1],
        ['click', 0, 1],
      ]);
      assert.ok(
        evs.every((e) => e.shiftKey && !e.ctrlKey && !e.altKey),
        'Shift, and only Shift, on every event',
      );
      assert.deepEqual(keys, [
        ['keydown', 'Shift'],
        ['keyup', 'Shift'],
      ]);
      evs = await run('left', 1, ['LeftControl', 'LeftAlt']);
      const c2 = evs.find((e) => e.type === 'mousedown')!;
      assert.deepEqual([c2.ctrlKey, c2.altKey, c2.shiftKey], [true, true, false]);
      assert.deepEqual(sequence(evs), [
        ['mousedown', 0, 1],
        ['mouseup', 0, 1],
        ['click', 0, 1],
      ]);
      assert.ok(
        evs.every((e) => e.ctrlKey && e.altKey && !e.shiftKey),
        'Control and Alt on every event',
      );
      assert.deepEqual(keys, [
        ['keydown', 'Control'],
        ['keydown', 'Alt'],
        ['keyup', 'Alt'],
        ['keyup', 'Control'],
      ]);
      // Modifiers were released: a plain click has none.
      evs = await run('left', 1);
      const c3 = evs.find((e) => e.type === 'click')!;
      assert.deepEqual([c3.ctrlKey, c3.altKey, c3.shiftKey], [false, false, false]);
      assert.deepEqual(sequence(evs), [
        ['mousedown', 0, 1],
        ['mouseup', 0, 1],
        ['click', 0, 1],
      ]);
      assert.deepEqual(keys, []);
    });

    test('mouseDown / mouseUp', async () => {
      await driver.moveMouse(screenOf({ x: 200, y: 300 }));
      await clearEvents();
      await driver.mouseDown('left');
      await driver.moveMouse(screenOf({ x: 260, y: 320 }));
      await driver.mouseUp('left');
      const evs = await waitFor(async () => {
        const e = await events();
        return e.some((x) => x.type === 'mouseup') ? e : undefined;
      }, 'mouseup');
      const down = evs.find((e) => e.type === 'mousedown')!;
      const up = evs.find((e) => e.type === 'mouseup')!;
      assert.deepEqual([down.x, down.y, up.x, up.y], [200, 300, 260, 320]);
    });

    test('drag: press at A, moves with the button down, release at B', async () => {
      // No wait for a double-click timer: the last press (the test above) was at (200, 300), far from A.
      await clearEvents();
      const a = { x: 100, y: 250 };
      const b = { x: 500, y: 480 };
      await driver.drag(screenOf(a), screenOf(b), []);
      const evs = await waitFor(async () => {
        const e = await events();
        return e.some((x) => x.type === 'mouseup') ? e : undefined;
      }, 'mouseup');
      const downIdx = evs.findIndex((e) => e.type === 'mousedown');
      const upIdx = evs.findIndex((e) => e.type === 'mouseup');
      assert.ok(downIdx >= 0 && upIdx > downIdx);
      assert.deepEqual([evs[downIdx]!.x, evs[downIdx]!.y], [a.x, a.y]);
      assert.equal(evs[downIdx]!.detail, 1, 'a fresh press, not a repeat of the last one');
      assert.deepEqual([evs[upIdx]!.x, evs[upIdx]!.y], [b.x, b.y]);
      const moves = evs.slice(downIdx, upIdx).filter((e) => e.type === 'mousemove');
      assert.ok(moves.length >= 3, `only ${moves.length} mousemoves during the drag`);
      assert.ok(
        moves.every((m) => m.buttons === 1),
        'button held during moves',
      );
      // With a modifier held throughout.
      await clearEvents();
      await driver.drag(screenOf(b), screenOf(a), ['LeftShift']);
      const evs2 = await waitFor(async () => {
        const e = await events();
        return e.some((x) => x.type === 'mouseup') ? e : undefined;
      }, 'mouseup');
      assert.ok(evs2.filter((e) => e.type.startsWith('mouse')).every((e) => e.shiftKey));
    });

    test('latency: moveMouse + click, capture; each timed call did what it was timed for', async () => {
      // The times are printed, never asserted (these machines are shared). What is asserted is the work
      // they timed, so a call that returned without doing it cannot pass for a fast one.
      await clearEvents();
      const sent: number[][] = [];
      const mc = await timeIt(21, async () => {
        const at = { x: 300 + (sent.length % 20), y: 370 };
        sent.push([at.x, at.y]);
        await driver.moveMouse(screenOf(at));
        await driver.click('left', 1, []);
      });
      measure('moveMouse + click', mc);
      const pressed = (await drain()).filter((e) => e.type === 'mousedown').map((e) => [e.x, e.y]);
      assert.deepEqual(pressed, sent, 'every timed click reached the page, where it was sent');
      const full = { width: WIDTH, height: HEIGHT };
      const scaled = { width: 1024, height: 640 };
      const timed: { what: string; output: Size; format: ImageFormat; runs: number }[] = [
        { what: 'capture png 1280x800', output: full, format: 'png', runs: 15 },
        { what: 'capture jpeg q80 1280x800', output: full, format: 'jpeg', runs: 15 },
        { what: 'capture png 1280x800→1024x640', output: scaled, format: 'png', runs: 15 },
        { what: 'capture jpeg q80 1280x800→1024x640', output: scaled, format: 'jpeg', runs: 15 },
        { what: 'capture webp q80 1280x800→1024x640', output: scaled, format: 'webp', runs: 7 },
      ];
      const sizes: string[] = [];
      for (const { what, output, format, runs } of timed) {
        const shots: CapturedImage[] = [];
        const ms = await timeIt(runs, async () => {
          shots.push(await driver.capture({ output, format, quality: 80 }));
        });
        measure(what, ms);
        for (const shot of shots) {
          const meta = await sharp(shot.data).metadata();
          assert.deepEqual([meta.format, meta.width, meta.height], [format, output.width, output.height], what);
        }
        if (output === full) sizes.push(`${format === 'jpeg' ? 'jpeg q80' : format} ${shots[0]!.data.length} B`);
      }
      console.log(`[measure] sizes 1280x800: ${sizes.join(', ')}`);
    });
  });

  describe('crash path', () => {
    before(async () => {
      // Chromium dies with its X server; close it first so it does not log noise.
      await browser?.close().catch(() => {});
      browser = undefined;
    });

    test('X server killed during a hold: DriverCrashedError, parent survives, restart works', async () => {
      assert.deepEqual(await driver.displaySize(), { width: WIDTH, height: HEIGHT });
      const hold = driver.holdKeys(parseChord('shift'), 10_000);
      await waitForShiftDown(xvfb.display); // the hold is under way in the X server
      await xvfb.stop('SIGKILL');
      await assert.rejects(
        hold,
        failsWith(DriverCrashedError, /^desktop worker exited during holdKeys \((code \d+|signal SIG[A-Z0-9]+)\)$/),
      );
      // Stale socket file, nobody listening.
      await assert.rejects(
        driver.displaySize(),
        (e: unknown) => e instanceof DisplayUnavailableError || e instanceof DriverCrashedError,
      );
      xvfb = await startBareXvfb(xvfb.number);
      assert.deepEqual(await driver.displaySize(), { width: WIDTH, height: HEIGHT });
      await driver.moveMouse({ x: 10, y: 20 });
      assert.deepEqual(await driver.cursorPosition(), { x: 10, y: 20 });
    });

    test('X server stopped while idle: the next call fails cleanly, then works after a restart', async () => {
      await driver.moveMouse({ x: 5, y: 5 });
      await xvfb.stop('SIGTERM');
      await assert.rejects(
        driver.cursorPosition(),
        (e: unknown) => e instanceof DisplayUnavailableError || e instanceof DriverCrashedError,
      );
      await assert.rejects(
        driver.cursorPosition(),
        (e: unknown) => e instanceof DisplayUnavailableError || e instanceof DriverCrashedError,
      );
      xvfb = await startBareXvfb(xvfb.number);
      await driver.moveMouse({ x: 50, y: 60 });
      assert.deepEqual(await driver.cursorPosition(), { x: 50, y: 60 });
    });

    test('X server restarted between two calls: the next call just works', async () => {
      await driver.moveMouse({ x: 7, y: 8 });
      await xvfb.stop('SIGTERM');
      xvfb = await startBareXvfb(xvfb.number);
      await driver.moveMouse({ x: 70, y: 80 });
      assert.deepEqual(await driver.cursorPosition(), { x: 70, y: 80 });
    });

    test('a stuck X server: the call times out, the worker is killed, and the next call works', async () => {
      const d = new WorkerDesktopDriver({ display: xvfb.display, callTimeoutMs: 1000 });
      try {
        await d.moveMouse({ x: 1, y: 2 });
        xvfb.proc.kill('SIGSTOP');
        try {
          const t0 = performance.now();
          await assert.rejects(
            d.moveMouse({ x: 3, y: 4 }),
            failsWith(DriverCrashedError, 'desktop worker killed: moveMouse did not finish within 1000 ms'),
          );
          // Ended by the 1 s call limit, where a stuck X server would otherwise hold it for ever.
          assert.ok(performance.now() - t0 < 15_000, `rejected after ${Math.round(performance.now() - t0)} ms`);
        } finally {
          xvfb.proc.kill('SIGCONT');
        }
        await d.moveMouse({ x: 30, y: 40 });
        assert.deepEqual(await d.cursorPosition(), { x: 30, y: 40 });
      } finally {
        await d.close();
      }
    });

    test('close is idempotent and later calls reject, as retryable (a pooled desktop replaced under a call)', async () => {
      await driver.close();
      await driver.close();
      await assert.rejects(
        driver.displaySize(),
        failsWith(DisplayUnavailableError, 'the desktop was closed (shut down, or replaced after its display died)'),
      );
    });

    test('no unhandled rejections', () => {
      assert.deepEqual(unhandled, []);
    });
  });
});

describe('settle without DAMAGE: an X server that does not report drawing', () => {
  test('a capture after input falls back to comparing frames, and ends on a stable one', async () => {
    const bare = await startBareXvfb(undefined, { width: 320, height: 200 }, ['-extension', 'DAMAGE']);
    const logs: string[] = [];
    const d = new WorkerDesktopDriver({ display: bare.display, log: (level, msg) => logs.push(`${level} ${msg}`) });
    try {
      const settle = { afterInputMs: 1_000, quietMs: 32, reactionMs: 50, intervalMs: 20, maxMs: 2_000 };
      await d.moveMouse({ x: 10, y: 10 });
      const shot = await d.capture({ output: { width: 320, height: 200 }, format: 'png', quality: 80, settle });
      assert.ok(shot.settled, 'the settle step ran');
      assert.equal(shot.settled.method, 'frames');
      assert.ok(shot.settled.frames >= 2, `frames ${shot.settled.frames}`);
      assert.equal(shot.settled.stable, true, 'nothing draws on a bare root window: two frames match');
      assert.ok(
        logs.some((l) => l.includes('no DAMAGE')),
        `the worker said why it compares frames: ${logs.join('; ')}`,
      );
    } finally {
      await d.close();
      await bare.stop();
    }
  });
});
