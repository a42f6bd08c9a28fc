/**
 * Desktop driver tests: the WorkerDesktopDriver itself, against a private
 * bare Xvfb: a display that is not there, round trips, ordering and
 * cancellation, the worker's checks of malformed messages. Ends with the
 * crash path: the X server is killed under the driver and restarted on the
 * same number; and a capture on an X server without DAMAGE. What the driver's
 * input does in an app, and its captures of one: desktop-capture,
 * desktop-keyboard and desktop-pointer.test.ts; key-name parsing:
 * desktop-keys.test.ts.
 *
 * Run: node --import tsx --test test/desktop-driver.test.ts
 */
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { fork, type Serializable } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { parseChord } from '../src/desktop-driver/keys.ts';
import { WorkerDesktopDriver } from '../src/desktop-driver/worker-driver.ts';
import { XConnection } from '../src/desktop-driver/x11.ts';
import { CancelledError, DisplayUnavailableError, DriverCrashedError, ToolInputError } from '../src/base/errors.ts';
import { COMPUTER_SCROLL_AMOUNT_MAX } from '../src/desktop-driver/driver.ts';
import { pickFreeDisplay, startBareXvfb, type BareXvfb } from '../testkit/display.ts';
import { HEIGHT, WIDTH, startDriverOnXvfb, waitFor } from '../testkit/driver-page.ts';
import { failsWith } from '../testkit/errors.ts';
import { until } from '../testkit/wait.ts';

const unhandled: unknown[] = [];
process.on('unhandledRejection', (err) => unhandled.push(err));

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

// ---------------------------------------------------------------------------

describe('WorkerDesktopDriver on Xvfb', () => {
  let xvfb: BareXvfb;
  let driver: WorkerDesktopDriver;

  before(async () => {
    ({ xvfb, driver } = await startDriverOnXvfb());
  });

  after(async () => {
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
    // What the daemon sends itself (worker-driver.ts) it checks as the worker does at its boundary.
    await assert.rejects(driver.click('left', 4, []), ToolInputError);
    await assert.rejects(driver.moveMouse({ x: Number.NaN, y: 1 }), ToolInputError);
    await assert.rejects(driver.click('left', 1, [], undefined, { x: 1, y: 40_000 }), ToolInputError);
    await driver.moveMouse({ x: 10.4, y: 20.6 });
    assert.deepEqual(await driver.cursorPosition(), { x: 10, y: 21 });
  });

  describe('crash path', () => {
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

    test("a stuck X server: the calls time out, the worker is killed, the daemon's own connection dropped, and the next calls work", async () => {
      const d = new WorkerDesktopDriver({ display: xvfb.display, callTimeoutMs: 1000 });
      try {
        await d.moveMouse({ x: 1, y: 2 });
        const shot = { output: { width: 32, height: 20 }, format: 'png', quality: 80 } as const;
        await d.capture(shot);
        xvfb.proc.kill('SIGSTOP');
        try {
          // Ended by the 1 s call limit, where a stuck X server would otherwise hold them for ever.
          let t0 = performance.now();
          await assert.rejects(
            d.capture(shot),
            failsWith(DriverCrashedError, 'desktop worker killed: capture did not finish within 1000 ms'),
          );
          assert.ok(performance.now() - t0 < 15_000, `rejected after ${Math.round(performance.now() - t0)} ms`);
          // The pointer is the daemon's own X connection (worker-driver.ts): dropped, not a child killed.
          t0 = performance.now();
          await assert.rejects(
            d.moveMouse({ x: 3, y: 4 }),
            failsWith(DisplayUnavailableError, `X display ${xvfb.display} did not answer within 1000 ms`),
          );
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
      const settle = { afterInputMs: 1_000, quietMs: 32, reactionMs: 50, drawnMs: 5, intervalMs: 20, maxMs: 2_000 };
      // The worker first: the move is the daemon's own (worker-driver.ts), and a worker starting after it
      // could take longer than afterInputMs, after which the input is too old to wait for.
      await d.displaySize();
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
