/**
 * Desktop driver tests, capture: the WorkerDesktopDriver's screenshots of a
 * private Xvfb, with Debian chromium (through Playwright) showing a page of
 * known colours (testkit/driver-page.ts): full screen, downscaled, regions,
 * png, jpeg and webp, settling after input (the X server's DAMAGE reports),
 * and the latency of clicks and captures.
 *
 * Run: node --import tsx --test test/desktop-capture.test.ts
 *
 * Prints `[measure]` lines with median latencies.
 */
import { before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as delay } from 'node:timers/promises';
import sharp from 'sharp';
import type { Page } from 'playwright';
import type { WorkerDesktopDriver } from '../src/desktop-driver/worker-driver.ts';
import { ToolInputError } from '../src/base/errors.ts';
import type { CapturedImage, ImageFormat } from '../src/base/image.ts';
import type { Size } from '../src/base/geometry.ts';
import { HEIGHT, WIDTH, assertColor, measure, pixelAt, timeIt, useDriverPage } from '../testkit/driver-page.ts';

// A rejection nobody handled (a driver call left dangling) fails the file, as in the other driver tests.
const unhandled: unknown[] = [];
process.on('unhandledRejection', (err) => unhandled.push(err));

describe('WorkerDesktopDriver on Xvfb', () => {
  describe('with chromium', () => {
    const rig = useDriverPage();
    const { clearEvents, screenOf, drain } = rig;
    let driver: WorkerDesktopDriver;
    let page: Page;
    before(() => {
      ({ driver, page } = rig);
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
      const settle = { afterInputMs: 1_000, quietMs: 32, reactionMs: 50, drawnMs: 5, intervalMs: 50, maxMs: 3_000 };
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
            window.__steps.push(performance.timeOrigin + now);
            const f = Math.min(1, (performance.now() - t0) / 400);
            box.style.left = (100 + 400 * f) + 'px';
            if (f < 1) requestAnimationFrame(step);
          };
          requestAnimationFrame(step);
        })()`);
        await driver.moveMouse({ x: 5, y: 5 }); // input: the next capture settles
        // The worker notes the input's time before it answers, so this is no earlier than its note.
        inputEnded = performance.now();
        const captureFrom = Date.now(); // the page's steps are stamped on the same wall clock
        const shot = await driver.capture({ output, format: 'png', quality: 80, settle });
        const capturedAt = Date.now();
        assert.ok(shot.settled, 'the settle step ran');
        assert.equal(shot.settled.stable, true);
        const steps = (await page.evaluate('window.__steps')) as number[];
        const longestGap = Math.max(...steps.slice(1).map((t, i) => t - steps[i]!));
        const atEnd = await pixelAt(shot.data, end.x, end.y);
        const green = ([r, g, b]: number[]): boolean => r! <= 2 && Math.abs(g! - 255) <= 2 && b! <= 2;
        const missed = !green(atEnd);
        if (missed && longestGap >= settle.quietMs && attempt < ATTEMPTS) {
          console.log(`# settle attempt ${attempt}: the page was starved for ${Math.round(longestGap)} ms; again`);
          continue;
        }
        // The page kept stepping after the capture had returned, yet the X server reported no drawing for
        // quietMs: its frames were not put on the screen (the compositor starved, seen in CI with the two cores
        // shared by three test runs). That attempt proves nothing; a settle step that ends early by itself fails
        // every attempt.
        const stepsAfter = steps.filter((t) => t > capturedAt).length;
        if (missed && stepsAfter > 0 && attempt < ATTEMPTS) {
          console.log(`# settle attempt ${attempt}: ${stepsAfter} step(s) drawn after the capture returned; again`);
          continue;
        }
        // The page drew its last steps before the capture returned, with no gap, yet their pixels reached the
        // X server after quietMs without a change (the compositor starved at the end, seen once in a fresh-clone
        // CI run): a capture straight after shows the box at its end. That attempt proves nothing either; a
        // settle step that ends early by itself still fails every attempt.
        if (missed && attempt < ATTEMPTS) {
          const after = await driver.capture({ output, format: 'png', quality: 80 });
          if (green(await pixelAt(after.data, end.x, end.y))) {
            console.log(`# settle attempt ${attempt}: the last step's pixels came after the capture; again`);
            continue;
          }
        }
        // A machine too busy to send the input before the animation was (nearly) over leaves no steps
        // for the settle to see: that attempt proves nothing either (seen once at a load of 10).
        const drawnDuring = steps.filter((t) => t >= captureFrom).length;
        if (shot.settled.changes < 2 && drawnDuring < 2 && attempt < ATTEMPTS) {
          console.log(`# settle attempt ${attempt}: ${drawnDuring} step(s) drawn after the input; again`);
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
});

test('no unhandled rejections', () => {
  assert.deepEqual(unhandled, []);
});
