/**
 * Desktop driver tests, keyboard: the WorkerDesktopDriver typing text and
 * pressing and holding keys on a private Xvfb, with Debian chromium (through
 * Playwright) as the app that reports what really arrived: the textarea's
 * value and the key events (testkit/driver-page.ts). ASCII, non-ASCII and
 * more characters than spare keycodes, Caps Lock, an aborted typeText, a
 * worker killed while holding a key, chords, keys missing from the keymap.
 * (Key-name parsing, which needs no display: desktop-keys.test.ts.)
 *
 * Run: node --import tsx --test test/desktop-keyboard.test.ts
 *
 * Prints `[measure]` lines with median latencies.
 *
 * Nothing here sleeps to let input "arrive": a test waits on what it observes
 * (a recorded event, the textarea's value), with a deadline and a message
 * naming what did not happen. To assert exactly what the page got, or that
 * something did NOT arrive, a test first passes the input fence
 * (testkit/input-fence.ts): once the page reports the fence's marker, every X
 * input event sent before it is in the page's record.
 */
import { before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Page } from 'playwright';
import { parseChord } from '../src/desktop-driver/keys.ts';
import type { WorkerDesktopDriver } from '../src/desktop-driver/worker-driver.ts';
import { CancelledError, DriverCrashedError, ToolInputError } from '../src/base/errors.ts';
import { failsWith } from '../testkit/errors.ts';
import { measure, median, useDriverPage, waitFor } from '../testkit/driver-page.ts';

// A rejection nobody handled (a driver call left dangling) fails the file, as in the other driver tests.
const unhandled: unknown[] = [];
process.on('unhandledRejection', (err) => unhandled.push(err));

describe('WorkerDesktopDriver on Xvfb', () => {
  describe('with chromium', () => {
    const rig = useDriverPage();
    const {
      logs,
      workerPids,
      events,
      clearEvents,
      value,
      passFence,
      drain,
      expectValue,
      focusTextarea,
      clearTextarea,
    } = rig;
    let driver: WorkerDesktopDriver;
    let page: Page;
    before(() => {
      ({ driver, page } = rig);
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
  });
});

test('no unhandled rejections', () => {
  assert.deepEqual(unhandled, []);
});
