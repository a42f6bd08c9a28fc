/**
 * KeymapReads (src/desktop-driver/keymap-reads.ts) on a real Xvfb: after the worker
 * changes the keymap, it presses a newly bound key only once the process that
 * owns the focused window has re-read the keymap, seen through RECORD in the
 * server's own order. The readers here are real X clients: connections of this
 * process and a second process (testkit/keymap-reader.ts).
 *
 * Run: node --import tsx --test test/keymap-reads.test.ts
 */
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface, type Interface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { KeymapReads } from '../src/desktop-driver/keymap-reads.ts';
import { XConnection } from '../src/desktop-driver/x11.ts';
import { startBareXvfb, type BareXvfb } from '../testkit/display.ts';

/** Long enough that a wait which should end does so on a loaded machine; the false cases wait it out. */
const CAP_MS = 2000;

/** The reader process: `read()` resolves once it has read the keymap. */
interface Reader {
  base: number;
  read(): Promise<void>;
  stop(): Promise<void>;
}

async function startReader(display: string): Promise<Reader> {
  const script = fileURLToPath(new URL('../testkit/keymap-reader.ts', import.meta.url));
  const proc: ChildProcess = spawn(process.execPath, ['--import', 'tsx', script], {
    env: { ...process.env, DISPLAY: display },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines: Interface = createInterface({ input: proc.stdout! });
  /** Its next line, or a failure naming what did not come. */
  const next = (what: string): Promise<string> =>
    new Promise((resolve, reject) => {
      const fail = (why: string): void => {
        done();
        reject(new Error(`the keymap reader process ${why} before its ${what} line`));
      };
      const onExit = (): void => fail('exited');
      const timer = setTimeout(() => fail('said nothing for 30 s'), 30_000);
      const onLine = (l: string): void => {
        done();
        resolve(l);
      };
      const done = (): void => {
        clearTimeout(timer);
        proc.off('exit', onExit);
        lines.off('line', onLine);
      };
      proc.once('exit', onExit);
      lines.once('line', onLine);
    });
  const ready = await next('ready');
  const base = Number(/^ready (\d+)$/.exec(ready)?.[1]);
  assert.ok(Number.isInteger(base), `reader said ${JSON.stringify(ready)}`);
  return {
    base,
    async read() {
      const answer = next('read');
      proc.stdin!.write('read\n');
      assert.equal(await answer, 'read');
    },
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const exited = new Promise((resolve) => proc.once('exit', resolve));
      proc.kill();
      await exited;
    },
  };
}

describe('KeymapReads on Xvfb', () => {
  let xvfb: BareXvfb;
  let control: XConnection;
  let reads: KeymapReads;
  let spare = 0;
  let changes = 0;
  const never = (): void => {};

  /** Binds the spare keycode to a new keysym, as the worker does, and waits until the server has it. */
  async function change(): Promise<number> {
    control.changeKeyboardMapping(spare, 0x1000100 + changes);
    await control.sync();
    return ++changes;
  }

  before(async () => {
    xvfb = await startBareXvfb();
    control = await XConnection.open(xvfb.display);
    const opened = await KeymapReads.open(xvfb.display, control);
    assert.ok(opened, 'Xvfb has the RECORD extension');
    reads = opened;
    const map = await control.getKeyboardMapping();
    for (let kc = control.maxKeycode; kc >= control.minKeycode && !spare; kc--) {
      const row = map.keysyms.subarray(
        (kc - control.minKeycode) * map.perKeycode,
        (kc - control.minKeycode + 1) * map.perKeycode,
      );
      if (row.every((s) => s === 0)) spare = kc;
    }
    assert.ok(spare, 'Xvfb has an empty keycode');
  });

  after(async () => {
    reads?.close();
    control?.close();
    await xvfb?.stop();
  });

  test('a read after the change ends the wait; one from before the change does not', async () => {
    const client = await XConnection.open(xvfb.display);
    try {
      const window = client.resourceIdBase | 1;
      await client.getKeyboardMapping(); // read before the change: stale afterwards
      const n = await change();
      assert.equal(await reads.waitForRead(window, n, 300, never), false, 'a read from before the change counts');
      const waiting = reads.waitForRead(window, n, CAP_MS, never);
      await client.getKeyboardMapping();
      assert.equal(await waiting, true, 'the read after the change was not seen');
      // A second change needs a second read.
      const n2 = await change();
      assert.equal(await reads.waitForRead(window, n2, 300, never), false, 'the read before the second change counts');
    } finally {
      client.close();
    }
  });

  test('another connection of the same process may read for the window (as Chromium does); another process may not', async () => {
    const owner = await XConnection.open(xvfb.display); // makes the "window", never reads
    const sibling = await XConnection.open(xvfb.display); // same process: reads
    const other = await startReader(xvfb.display); // another process: reads
    try {
      const window = owner.resourceIdBase | 1;
      const n = await change();
      await other.read();
      assert.equal(await reads.waitForRead(window, n, 300, never), false, "another process's read counts");
      const waiting = reads.waitForRead(window, n, CAP_MS, never);
      await sibling.getKeyboardMapping();
      assert.equal(await waiting, true, "the owner's process read, and the wait did not end");
      // And the other process's own window waits for the other process.
      const n2 = await change();
      const forOther = reads.waitForRead(other.base | 1, n2, CAP_MS, never);
      await other.read();
      assert.equal(await forOther, true, "the other process's read for its own window was not seen");
    } finally {
      await other.stop();
      owner.close();
      sibling.close();
    }
  });

  test('a departed client is forgotten: the next client given its ids is judged by its own process', async () => {
    // The case this guards: Chromium's window made by a connection that reuses the ids of an
    // earlier client from another process (measured in the desktop driver tests).
    const other = await startReader(xvfb.display);
    const base = other.base;
    const n0 = await change();
    const seen = reads.waitForRead(base | 1, n0, CAP_MS, never);
    await other.read();
    assert.equal(await seen, true, "the other process's read for its own window was not seen");
    await control.sync(); // the question about the reader's process (asked on seeing its read) is answered
    await other.stop();
    // Once the server has let it go, the next client gets the same ids (Xvfb reuses the lowest free slot).
    let next = await XConnection.open(xvfb.display);
    for (let i = 0; next.resourceIdBase !== base && i < 50; i++) {
      next.close();
      await control.sync();
      next = await XConnection.open(xvfb.display);
    }
    const sibling = await XConnection.open(xvfb.display);
    try {
      assert.equal(next.resourceIdBase, base, "the server did not give the next client the departed one's ids");
      const n = await change();
      const waiting = reads.waitForRead(base | 1, n, CAP_MS, never);
      await sibling.getKeyboardMapping();
      assert.equal(await waiting, true, "the window's new owner's process read, and the wait did not end");
    } finally {
      next.close();
      sibling.close();
    }
  });

  test('the abort ends a wait at once, unread', async () => {
    const client = await XConnection.open(xvfb.display);
    try {
      const n = await change();
      let abort = (): void => assert.fail('no abort was offered');
      const waiting = reads.waitForRead(client.resourceIdBase | 1, n, 60_000, (a) => (abort = a));
      abort();
      assert.equal(await waiting, false);
    } finally {
      client.close();
    }
  });
});
