/**
 * Desktop driver tests, pointer: the WorkerDesktopDriver's wheel, clicks,
 * presses and drags on a private Xvfb, with Debian chromium (through
 * Playwright) as the app that reports what really arrived: wheel directions
 * and deltas, click counts and buttons with modifiers, positions
 * (testkit/driver-page.ts).
 *
 * Run: node --import tsx --test test/desktop-pointer.test.ts
 *
 * Nothing here sleeps to let input "arrive": a test waits on what it observes
 * (a recorded event, the textarea's value), with a deadline and a message
 * naming what did not happen. To assert exactly what the page got, or that
 * something did NOT arrive, a test first passes the input fence
 * (testkit/input-fence.ts): once the page reports the fence's marker, every X
 * input event sent before it is in the page's record.
 * Wheel events have their own fence (`drainWheel`).
 */
import { before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { WorkerDesktopDriver } from '../src/desktop-driver/worker-driver.ts';
import type { DriverKey } from '../src/desktop-driver/driver.ts';
import type { Point } from '../src/base/geometry.ts';
import { WHEEL_CLICK_PX, isMarker, useDriverPage, waitFor, type PageEvent } from '../testkit/driver-page.ts';

// A rejection nobody handled (a driver call left dangling) fails the file, as in the other driver tests.
const unhandled: unknown[] = [];
process.on('unhandledRejection', (err) => unhandled.push(err));

describe('WorkerDesktopDriver on Xvfb', () => {
  describe('with chromium', () => {
    const rig = useDriverPage();
    const { events, clearEvents, screenOf, drain, drainWheel } = rig;
    let driver: WorkerDesktopDriver;
    let offset: Point;
    before(() => {
      ({ driver, offset } = rig);
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
  });
});

test('no unhandled rejections', () => {
  assert.deepEqual(unhandled, []);
});
