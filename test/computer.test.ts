/**
 * Every computer member, end to end: a real daemon drives a real Xvfb, and a
 * real application (the event recorder page in kiosk Chromium) reports what
 * arrived. Every batch_result is checked against the API's rules.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, beforeEach, describe, test } from 'node:test';
import sharp from 'sharp';
import { assertApiValid, imageSize } from '../testkit/api-rules.ts';
import { computerUse as use, startedEvent, startTestDaemon } from '../testkit/daemon.ts';
import {
  COMPUTER_NOT_EXECUTED,
  drainWheels,
  firstImage,
  mouseEvents as mouse,
  mousePoints,
  runBatch as run,
  startTestDesktop,
  texts,
  type TestDesktop,
} from '../testkit/desktop.ts';
import type { RecordedKey } from '../testkit/event-page.ts';
import { until } from '../testkit/wait.ts';
import { WorkerDesktopDriver } from '../src/desktop-driver/worker-driver.ts';
import { FRAMEBUFFER_ENV } from '../src/desktop-driver/worker-protocol.ts';
import { sweepStaleFramebuffers } from '../src/desktop-driver/xvfb.ts';

const PRINTABLE_ASCII = Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i)).join('');

/** Waits until a screenshot of the display shows `rgb` at screenshot pixel (x, y): the page's change is on the screen. */
async function painted(d: TestDesktop, [x, y]: [number, number], rgb: [number, number, number]): Promise<void> {
  const deadline = Date.now() + 10_000;
  let last: number[] = [];
  for (;;) {
    const { result } = await d.client.batch(`paint-${Date.now()}`, [use('screenshot')]);
    const block = firstImage(result);
    const { data, info } = await sharp(Buffer.from(block.source.data, 'base64'))
      .removeAlpha()
      .raw()
      .toBuffer({ resolveWithObject: true });
    const i = (y * info.width + x) * info.channels;
    last = [data[i]!, data[i + 1]!, data[i + 2]!];
    if (last.every((v, c) => v === rgb[c])) return;
    if (Date.now() > deadline) throw new Error(`the screen never showed ${rgb} at ${x},${y}; last ${last}`);
  }
}

describe('computer toolset on 1280x800 (screenshot = display)', () => {
  let d: TestDesktop;
  before(async () => (d = await startTestDesktop({ width: 1280, height: 800 })));
  after(() => d?.close());
  beforeEach(() => d.reset());

  test('welcome reports the display and screenshot sizes', async () => {
    const w = await d.client.hello();
    assert.deepEqual(w.display, { width: 1280, height: 800 });
    assert.deepEqual(w.screenshot, { width: 1280, height: 800 });
  });

  test('left, right and middle clicks land exactly, with the right buttons', async () => {
    const { result } = await run(d, [
      use('left_click', { coordinate: [300, 600] }),
      use('right_click', { coordinate: [310, 610] }),
      use('middle_click', { coordinate: [320, 620] }),
    ]);
    assert.deepEqual(texts(result), ['Clicked.', 'Right-clicked.', 'Middle-clicked.']);
    const ev = await d.drain();
    const downs = mouse(ev, 'mousedown');
    assert.deepEqual(
      downs.map((e) => [e.button, e.clientX, e.clientY]),
      [
        [0, 300, 600],
        [2, 310, 610],
        [1, 320, 620],
      ],
    );
    assert.equal(mouse(ev, 'contextmenu').length, 1);
    assert.equal(mouse(ev, 'auxclick').filter((e) => e.button === 1).length, 1);
  });

  test('double and triple clicks have the right click counts', async () => {
    await run(d, [use('double_click', { coordinate: [500, 700] })]);
    let ev = await d.drain();
    assert.equal(mouse(ev, 'dblclick').length, 1);
    assert.deepEqual(
      mouse(ev, 'click').map((e) => e.detail),
      [1, 2],
    );
    await d.reset();
    // Far from the last click, so it starts a new click sequence however soon it comes.
    await run(d, [use('triple_click', { coordinate: [900, 650] })]);
    ev = await d.drain();
    assert.deepEqual(
      mouse(ev, 'click').map((e) => e.detail),
      [1, 2, 3],
    );
  });

  test('a click without a coordinate clicks at the pointer; modifiers are held for that click only', async () => {
    await run(d, [
      use('mouse_move', { coordinate: [700, 650] }),
      use('left_click', {}),
      use('left_click', { text: 'shift' }),
      use('left_click', { text: 'ctrl+alt' }),
      use('left_click', {}),
    ]);
    const downs = mouse(await d.drain(), 'mousedown');
    assert.deepEqual(
      downs.map((e) => [e.clientX, e.clientY, e.shiftKey, e.ctrlKey, e.altKey]),
      [
        [700, 650, false, false, false],
        [700, 650, true, false, false],
        [700, 650, false, true, true],
        [700, 650, false, false, false],
      ],
    );
  });

  test("a click gives the window under it the focus, as a person's click does, and lands", async () => {
    // Two xev windows (each takes the focus when it opens and prints what it gets), above the page.
    const xev = (geometry: string, ...events: string[]) => {
      const args = geometry ? ['-geometry', geometry, '-event', 'focus', '-event', 'keyboard'] : events;
      const child = spawn('xev', args, {
        env: { ...process.env, ...d.display.env },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      const w = { child, out: '' };
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => (w.out += chunk));
      return w;
    };
    // What the window manager is asked (ClientMessages to the root); listening once it sees a property we set.
    const root = xev('', '-root', '-event', 'substructure', '-event', 'property');
    const windows = [root];
    try {
      const ping = ['-root', '-f', '_DESKBATCH_TEST_PING', '8s', '-set', '_DESKBATCH_TEST_PING', 'x'];
      await until(
        'the root watcher to see a property change',
        async () => {
          await promisify(execFile)('xprop', ping, { env: d.display.env });
          return root.out.includes('_DESKBATCH_TEST_PING');
        },
        { intervalMs: 100, seen: () => root.out },
      );
      const a = xev('300x200+700+80');
      windows.push(a);
      await until('xev A to take the focus', () => a.out.includes('FocusIn event'), { seen: () => a.out });
      const b = xev('300x200+700+420');
      windows.push(b);
      await until('xev B to take the focus', () => b.out.includes('FocusIn event'), { seen: () => b.out });
      await until('xev A to lose the focus', () => a.out.includes('FocusOut event'), { seen: () => a.out });
      // A is not focused; xev never takes the focus itself, so only click-to-focus gives it the key.
      const first = await run(d, [use('left_click', { coordinate: [850, 180] }), use('type', { text: 'k' })]);
      assert.deepEqual(texts(first.result), ['Clicked.', 'Typed.']);
      await until('xev A to get the key', () => a.out.includes('KeyPress event'), { seen: () => a.out });
      assert.ok(!b.out.includes('KeyPress event'), 'xev B got no key');
      // The window manager's word can lag the focus: openbox moves the focus first and says so
      // (_NET_ACTIVE_WINDOW) only when the FocusIn comes back to it. That gap, held open: openbox
      // paused, the focus moved to B by another client, the root still naming A. A click on A asks
      // openbox to activate A (a ClientMessage the root watcher sees); openbox goes on then.
      const wm = d.display.windowManagerPid!;
      const asks = () => root.out.match(/message_type \S+ \(_NET_ACTIVE_WINDOW\)/g)?.length ?? 0;
      const asked = asks();
      const windowB = /Outer window is (0x[0-9a-f]+)/.exec(b.out)![1]!;
      let batch: ReturnType<typeof run> | undefined;
      process.kill(wm, 'SIGSTOP');
      try {
        await promisify(execFile)('xdotool', ['windowfocus', '--sync', windowB], { env: d.display.env });
        batch = run(d, [use('left_click', { coordinate: [850, 180] }), use('type', { text: 'm' })]);
        let done = false;
        void batch.finally(() => (done = true)).catch(() => {});
        await until('the click to ask for A, or the batch to end', () => asks() > asked || done, {
          seen: () => root.out,
        });
      } finally {
        process.kill(wm, 'SIGCONT');
      }
      await until(
        'xev A or B to get the key after a stale word',
        () => a.out.split('KeyPress event').length >= 3 || b.out.includes('KeyPress event'),
        { seen: () => a.out },
      );
      assert.deepEqual(texts((await batch).result), ['Clicked.', 'Typed.']);
      assert.ok(!b.out.includes('KeyPress event'), 'xev B got no key: the click activated A though the root named it');
      // Back to the page, outside both windows.
      await d.reset();
      await run(d, [use('left_click', { coordinate: [200, 600] }), use('type', { text: 'j' })]);
      const ev = await d.waitFor('the key typed after the click', (e) =>
        e.some((k) => k.type === 'keyup' && (k as RecordedKey).key === 'j'),
      );
      assert.deepEqual(mousePoints(ev, 'mousedown'), [[200, 600]]);
      assert.equal((a.out.match(/KeyPress event/g) ?? []).length, 2, 'xev A got only the first two keys');
    } finally {
      for (const w of windows) {
        w.child.kill();
        if (w.child.exitCode === null && w.child.signalCode === null) await once(w.child, 'exit');
      }
    }
  });

  test('typing delivers all 95 printable ASCII characters exactly, and non-ASCII text too', async () => {
    const unicode = ' héllo wörld — 你好 ✓ Ωμέγα ñ';
    const { result } = await run(d, [
      use('left_click', { coordinate: [200, 200] }),
      use('type', { text: PRINTABLE_ASCII }),
      use('type', { text: `\n${unicode}` }),
    ]);
    assert.deepEqual(texts(result), ['Clicked.', 'Typed.', 'Typed.']);
    await d.drain();
    assert.equal(await d.page.inputValue('#t'), `${PRINTABLE_ASCII}\n${unicode}`);
  });

  test('keys and chords, case-insensitive, with repeat', async () => {
    await run(d, [
      use('left_click', { coordinate: [200, 200] }),
      use('type', { text: 'abc def' }),
      use('key', { text: 'BackSpace', repeat: 2 }),
      use('key', { text: 'return' }),
      use('type', { text: 'x' }),
    ]);
    await d.drain();
    assert.equal(await d.page.inputValue('#t'), 'abc d\nx');
    const { result } = await run(d, [use('key', { text: 'ctrl+a' }), use('key', { text: 'Delete' })]);
    assert.deepEqual(texts(result), ['Pressed ctrl+a.', 'Pressed Delete.']);
    await d.drain();
    assert.equal(await d.page.inputValue('#t'), '');
    const keys = (await d.events()).filter((e) => e.type === 'keydown').map((e) => (e as { key: string }).key);
    assert.ok(keys.includes('Enter') && !keys.includes('NumpadEnter'));
  });

  test('hold_key holds the key for the duration', async () => {
    const { result } = await run(d, [
      use('left_click', { coordinate: [200, 200] }),
      use('hold_key', { text: 'shift', duration: 0.5 }),
    ]);
    assert.equal(texts(result)[1], 'Held shift for 0.5s.');
    const ev = (await d.drain()).filter((e): e is RecordedKey => e.type === 'keydown' || e.type === 'keyup');
    const down = ev.find((e) => e.type === 'keydown' && e.key === 'Shift')!;
    const up = ev.find((e) => e.type === 'keyup' && e.key === 'Shift')!;
    // The events' own time stamps: when the X server made them, whenever the page handled them.
    assert.ok(up.stamp - down.stamp >= 450, `held ${up.stamp - down.stamp} ms`);
  });

  test('scroll goes the right way in all four directions', async () => {
    // Chromium coalesces quick wheel events, so each direction gets its own batch.
    const expected = { down: [0, 1], up: [0, -1], right: [1, 0], left: [-1, 0] } as const;
    for (const [direction, signs] of Object.entries(expected)) {
      await d.reset();
      const { result } = await run(d, [
        use('scroll', { coordinate: [960, 200], scroll_direction: direction, scroll_amount: 2 }),
      ]);
      assert.equal(texts(result)[0], `Scrolled ${direction}.`);
      const wheels = await drainWheels(d);
      assert.ok(wheels.length > 0, `${direction}: a wheel event arrived`);
      for (const w of wheels) {
        assert.deepEqual([Math.sign(w.deltaX) || 0, Math.sign(w.deltaY) || 0], signs, direction);
        assert.deepEqual([w.clientX, w.clientY], [960, 200]);
      }
    }
  });

  test('scroll holds modifiers given in text for that scroll only', async () => {
    await run(d, [
      use('scroll', { coordinate: [960, 200], scroll_direction: 'down', scroll_amount: 1, text: 'shift' }),
    ]);
    await d.drainWheel();
    await run(d, [use('scroll', { coordinate: [960, 200], scroll_direction: 'down', scroll_amount: 1 })]);
    const wheels = await drainWheels(d);
    assert.ok(wheels.length >= 2);
    assert.equal(wheels[0]!.shiftKey, true);
    assert.equal(wheels.at(-1)!.shiftKey, false);
  });

  test('drag, and mouse down / move / up', async () => {
    await run(d, [use('left_click_drag', { start_coordinate: [100, 500], coordinate: [600, 700] })]);
    let ev = await d.drain();
    assert.deepEqual(mousePoints(ev, 'mousedown'), [[100, 500]]);
    assert.deepEqual(mousePoints(ev, 'mouseup'), [[600, 700]]);
    // The pointer reached the end with the button held, before the release.
    // (How many moves the page saw is Chromium's business: it coalesces them under load.)
    const down = ev.findIndex((e) => e.type === 'mousedown');
    const up = ev.findIndex((e) => e.type === 'mouseup');
    const held = ev.slice(down, up).filter((e) => e.type === 'mousemove');
    assert.ok(
      held.some((e) => e.buttons === 1 && e.clientX === 600 && e.clientY === 700),
      `no move to [600, 700] with the left button held between mousedown and mouseup: ${JSON.stringify(held)}`,
    );
    await d.reset();
    const { result } = await run(d, [
      use('mouse_move', { coordinate: [150, 450] }),
      use('left_mouse_down'),
      use('mouse_move', { coordinate: [400, 550] }),
      use('left_mouse_up'),
    ]);
    assert.deepEqual(texts(result), [
      'Moved the mouse.',
      'Left mouse button pressed.',
      'Moved the mouse.',
      'Left mouse button released.',
    ]);
    ev = await d.drain();
    assert.deepEqual(mousePoints(ev, 'mousedown'), [[150, 450]]);
    assert.deepEqual(mousePoints(ev, 'mouseup'), [[400, 550]]);
  });

  test('cursor_position round-trips', async () => {
    const { result } = await run(d, [use('mouse_move', { coordinate: [1279, 799] }), use('cursor_position')]);
    assert.equal(texts(result)[1], 'X=1279,Y=799');
  });

  test('cursor_position reports where the pointer is after another X client moved it, not where we left it', async () => {
    await run(d, [use('mouse_move', { coordinate: [100, 200] })]);
    // Another client on the display (a person's input would do the same); --sync returns once the pointer is there.
    await promisify(execFile)('xdotool', ['mousemove', '--sync', '640', '321'], {
      env: { ...process.env, DISPLAY: d.display.display },
      timeout: 10_000,
    });
    const { result } = await run(d, [
      use('cursor_position'),
      use('mouse_move', { coordinate: [5, 6] }),
      use('cursor_position'),
    ]);
    assert.deepEqual(texts(result), ['X=640,Y=321', 'Moved the mouse.', 'X=5,Y=6']);
  });

  test('a coordinate outside the screenshot fails, nothing is clicked, and the rest is not executed', async () => {
    const { result, events } = await run(d, [
      use('left_click', { coordinate: [1280, 10] }),
      use('left_click', { coordinate: [10, 10] }),
    ]);
    assert.deepEqual(texts(result), [
      'coordinate [1280, 10] is outside the screenshot: x must be 0–1279 and y 0–799.',
      COMPUTER_NOT_EXECUTED,
    ]);
    assert.equal(result.failures[0]!.error.type, 'ToolInputError');
    assert.deepEqual(
      events.map((e) => e.phase),
      ['started', 'failed', 'not_executed'],
    );
    assert.equal(mouse(await d.drain(), 'mousedown').length, 0);
  });

  test('screenshot: a real PNG of the display, also written to the screenshots directory', async () => {
    const { result } = await run(d, [use('screenshot')], 'shot-1');
    const block = firstImage(result);
    assert.equal(block.source.media_type, 'image/png');
    const png = Buffer.from(block.source.data, 'base64');
    assert.deepEqual(imageSize(png), { width: 1280, height: 800 });
    // The page is white with a grey-ish textarea border; a black frame would mean the BGRX trap.
    const { channels } = await sharp(png).stats();
    assert.ok(channels[0]!.mean > 100, `mean red ${channels[0]!.mean}`);
    const file = result.screenshots[0]!;
    assert.match(file.path, /^s_[A-Za-z0-9_-]+\/shot-1_toolu_\d+_\w+\.png$/);
    assert.deepEqual(await readFile(join(d.daemon.screenshotsDir, file.path)), png);
    assert.equal(file.bytes, png.length);
  });

  test("screenshots read Xvfb's framebuffer, and it shows what libnut's X grab shows, pixel for pixel", async () => {
    const output = { width: 1280, height: 800 };
    const raw = async (png: Buffer | Uint8Array): Promise<Buffer> => sharp(png).raw().toBuffer();
    const logs: string[] = [];
    const worker = (framebuffer: string): WorkerDesktopDriver =>
      new WorkerDesktopDriver({
        display: d.display.display,
        env: { [FRAMEBUFFER_ENV]: framebuffer },
        log: (level, msg) => logs.push(`${level} ${msg}`),
      });
    assert.ok(d.display.framebuffer, 'the test display was started with -fbdir');
    const direct = worker(d.display.framebuffer);
    const grabbed = worker('');
    try {
      // No caret blinking between the captures.
      await d.page.evaluate('document.activeElement?.blur()');
      for (let attempt = 1; ; attempt++) {
        const before = await raw((await grabbed.capture({ output, format: 'png', quality: 80 })).data);
        const fromFile = await raw((await direct.capture({ output, format: 'png', quality: 80 })).data);
        const after = await raw((await grabbed.capture({ output, format: 'png', quality: 80 })).data);
        if (!before.equals(after) && attempt < 4) continue; // the screen changed between the grabs: again
        assert.ok(before.equals(after), 'the screen kept changing between grabs');
        assert.ok(fromFile.equals(before), 'the framebuffer file and XGetImage differ');
        break;
      }
      assert.deepEqual(
        logs.filter((l) => l.includes('framebuffer')),
        [],
        'neither worker complained about the framebuffer',
      );
    } finally {
      await direct.close();
      await grabbed.close();
    }
  });

  test("framebuffer folders a killed daemon left are swept; a live display's and a young one are kept", async () => {
    const hourAgo = new Date(Date.now() - 3_600_000);
    const live = dirname(d.display.framebuffer!);
    const stale = await mkdtemp('/dev/shm/deskbatch-fb-');
    const young = await mkdtemp('/dev/shm/deskbatch-fb-');
    try {
      await writeFile(join(stale, 'Xvfb_screen0'), Buffer.alloc(4096));
      await utimes(stale, hourAgo, hourAgo);
      await utimes(live, hourAgo, hourAgo); // old, but its Xvfb maps the file
      const removed = await sweepStaleFramebuffers();
      assert.ok(removed.includes(stale), `the stale folder was removed: ${JSON.stringify(removed)}`);
      assert.ok(!removed.includes(live) && !removed.includes(young), JSON.stringify(removed));
      assert.equal(existsSync(stale), false);
      assert.equal(existsSync(d.display.framebuffer!), true);
      assert.equal(existsSync(young), true);
      // The live display still answers from its file.
      const { result } = await run(d, [use('screenshot')]);
      assert.equal(firstImage(result).source.media_type, 'image/png');
    } finally {
      await rm(stale, { recursive: true, force: true });
      await rm(young, { recursive: true, force: true });
    }
  });

  test('zoom captures the region at display resolution, fitted to the screenshot size', async () => {
    // Paint a known colour into the pad so the zoomed region is predictable.
    await d.page.evaluate(`document.getElementById('pad').style.background = 'rgb(0, 160, 255)'`);
    await painted(d, [110, 510], [0, 160, 255]);
    const { result } = await run(d, [use('zoom', { region: [100, 500, 420, 700] })]);
    const block = firstImage(result);
    const png = Buffer.from(block.source.data, 'base64');
    assert.deepEqual(imageSize(png), { width: 1280, height: 800 }, '320x200 region upscaled 4x, aspect kept');
    const { data } = await sharp(png).removeAlpha().raw().toBuffer({ resolveWithObject: true });
    assert.deepEqual([data[0], data[1], data[2]], [0, 160, 255]);
    await d.page.evaluate(`document.getElementById('pad').style.background = ''`);
    const bad = await run(d, [use('zoom', { region: [100, 100, 50, 200] })]);
    assert.match(texts(bad.result)[0]!, /^region \[100, 100, 50, 200\] is not a region of the screenshot/);
  });

  test('a resent batch is answered from the store: the click happens once', async () => {
    const uses = [use('left_click', { coordinate: [640, 600] })];
    const first = await run(d, uses, 'once');
    const second = await run(d, uses, 'once');
    assert.equal(second.result.replayed, true);
    assert.deepEqual(second.result.tool_results, first.result.tool_results);
    assert.equal(mouse(await d.drain(), 'mousedown').length, 1);
  });

  test('cancel stops the running call and everything after it; nothing after runs', async () => {
    const uses = [use('wait', { duration: 20 }), use('left_click', { coordinate: [640, 600] })];
    d.client.send({ type: 'batch', batch_id: 'to-cancel', tool_uses: uses });
    await d.client.next(startedEvent('to-cancel', uses[0]!.id));
    d.client.send({ type: 'cancel', batch_id: 'to-cancel' });
    const { result, events } = await d.client.batch('to-cancel', uses);
    assertApiValid(uses, result);
    assert.equal(result.cancelled, true);
    assert.deepEqual(result.failures, []);
    assert.ok(result.duration_ms < 15_000, `cancelled after ${result.duration_ms} ms, not at the end of its 20 s`);
    const cancelled = 'Not completed: the computer actions of this turn were cancelled before this one finished.';
    assert.deepEqual(texts(result), [cancelled, cancelled]);
    assert.ok(!events.some((e) => e.phase === 'failed'));
    assert.equal(mouse(await d.drain(), 'mousedown').length, 0);
  });

  test('a disconnect mid-batch stops it; the resumed session returns the stored result', async () => {
    const w = await d.client.hello();
    const other = await d.daemon.connect();
    const mine = await other.hello();
    const uses = [use('wait', { duration: 20 }), use('left_click', { coordinate: [640, 600] })];
    other.send({ type: 'batch', batch_id: 'dropped', tool_uses: uses });
    await other.next(startedEvent('dropped', uses[0]!.id));
    other.close();
    const back = await d.daemon.connect();
    assert.equal((await back.hello(mine.session_id)).resumed, true);
    const { result } = await back.batch('dropped', uses);
    assert.equal(result.replayed, true);
    assert.equal(result.cancelled, true);
    assert.equal(mouse(await d.drain(), 'mousedown').length, 0, 'the click never ran');
    assert.notEqual(w.session_id, mine.session_id);
  });
});

describe('computer toolset on 2560x1440 (screenshots scaled to 2000x1125)', () => {
  let d: TestDesktop;
  before(async () => (d = await startTestDesktop({ width: 2560, height: 1440 })));
  after(() => d?.close());
  beforeEach(() => d.reset());

  test('welcome and screenshot sizes follow the limits', async () => {
    const w = await d.client.hello();
    assert.deepEqual(w.screenshot, { width: 2000, height: 1125 });
    const { result } = await run(d, [use('screenshot')]);
    const block = firstImage(result);
    assert.deepEqual(imageSize(Buffer.from(block.source.data, 'base64')), { width: 2000, height: 1125 });
  });

  test('clicks land within 1 display pixel of the target at this scaling, press and release, however fast', async () => {
    // Corners, then 45 points far apart, one batch each: back-to-back clicks once lost or moved
    // a release or a press to the next target (src/desktop-driver/pointer.ts).
    let seed = 7;
    const next = (n: number) => (seed = (seed * 48271) % 2147483647) % n;
    const targets = [
      [0, 0],
      [1999, 1124],
      [1000, 700],
      [123, 987],
      [1777, 1001],
    ];
    while (targets.length < 50) targets.push([next(2000), next(1125)]);
    for (let from = 0; from < targets.length; from += 25) {
      await d.reset();
      const chunk = targets.slice(from, from + 25);
      await run(
        d,
        chunk.map((t) => use('left_click', { coordinate: t })),
      );
      const ev = await d.drain();
      for (const type of ['mousedown', 'mouseup'] as const) {
        const seen = mouse(ev, type);
        assert.equal(seen.length, chunk.length, `${type} count`);
        seen.forEach((e, i) => {
          const [sx, sy] = chunk[i]!;
          const ex = ((sx! + 0.5) * 2560) / 2000 - 0.5;
          const ey = ((sy! + 0.5) * 1440) / 1125 - 0.5;
          assert.ok(
            Math.abs(e.clientX - ex) <= 1 && Math.abs(e.clientY - ey) <= 1,
            `${type} ${from + i}: ${e.clientX},${e.clientY} vs ${ex},${ey}`,
          );
        });
      }
      assert.ok(
        mouse(ev, 'click').every((e) => e.detail === 1),
        'no click was taken for a repeat of the one before',
      );
    }
    const { result } = await run(d, [use('mouse_move', { coordinate: [1234, 567] }), use('cursor_position')]);
    assert.equal(texts(result)[1], 'X=1234,Y=567');
  });

  test('a smaller screenshot setting scales further, and clicks still land', async () => {
    const other = await startTestDaemon({
      display: d.display.display,
      screenshot: { format: 'jpeg', limits: { maxSidePx: 1024, maxVisualTokens: 4784 } },
    });
    try {
      const c = await other.connect();
      assert.deepEqual((await c.hello()).screenshot, { width: 1024, height: 576 });
      const uses = [use('left_click', { coordinate: [512, 400] }), use('screenshot')];
      const { result } = await c.batch('small', uses);
      assertApiValid(uses, result);
      const shot = result.tool_results[1]!.content[0]!;
      assert.ok(shot.type === 'image' && shot.source.media_type === 'image/jpeg');
      assert.deepEqual(imageSize(Buffer.from(shot.source.data, 'base64')), { width: 1024, height: 576 });
      assert.match(result.screenshots[0]!.path, /\.jpg$/);
      const [e] = mouse(await d.drain(), 'mousedown');
      assert.ok(Math.abs(e!.clientX - (512.5 * 2.5 - 0.5)) <= 1 && Math.abs(e!.clientY - (400.5 * 2.5 - 0.5)) <= 1);
    } finally {
      await other.close();
    }
  });
});
