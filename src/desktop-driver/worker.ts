/**
 * Desktop worker: the child process that touches the X display. This file is
 * its message loop; the parts live beside it in worker/:
 * - operations.ts: the operations, one table entry each, with their argument checks;
 * - typing.ts and keymap.ts: keys, chords and typing, and the keymap they bind;
 * - capture.ts: grabbing, settling and encoding the screen;
 * - devices.ts: nut-js and our X client, loaded once;
 * - context.ts: cancellation, sleeps, errors and logging, shared by all.
 *
 * Started by WorkerDesktopDriver (worker-driver.ts) with `child_process.fork`
 * and `serialization: 'advanced'` (Buffers cross IPC as bytes): compiled, as
 * dist/src/desktop-driver/worker.js with no loader, by a compiled daemon; from
 * this file with `--import tsx` by one run from the sources (the tests).
 * It is a separate process because nut-js segfaults, with nothing catchable
 * in JS, when the X server goes away under it (docs/MEASURED.md);
 * here a crash only costs the in-flight call, and the parent starts a new
 * worker for the next one.
 *
 * The messages and the operations are typed once, for both sides, in
 * worker-protocol.ts. A message is still only bytes from another process: one
 * that is not an object is logged and dropped, and an unknown op or bad
 * arguments get an error answer; nothing a message holds ends this process.
 *
 * Input paths:
 * - The screen and most keys go through nut-js. We call its provider
 *   (libnut) for key toggles: nut-js's KeyboardClass/MouseClass
 *   methods `await sleep(autoDelayMs)` first, and even with autoDelayMs = 0
 *   that is a setTimeout (≈1.2 ms per toggle measured, 40x the toggle itself).
 *   The pointer goes through our own XTEST connection (pointer.ts says why).
 * - A small X11 protocol client (x11.ts; the keymap in worker/keymap.ts) reads the keymap and
 *   sends XTEST key events itself, for what nut-js cannot do safely:
 *   non-ASCII characters (nut-js types nothing for them, docs/MEASURED.md), keys
 *   whose keysym has no keycode in the current keymap (libnut then sends
 *   keycode 0 and Xlib kills the process with BadValue: measured for F13–F24
 *   on Xvfb, and for dead keys under non-US layouts), and keys libnut does not
 *   know on Linux (Menu: error; Pause: silently nothing).
 *   Such keysyms are bound to spare keycodes and left bound (a cache), then
 *   pressed by keycode. We do NOT use `xdotool type` for this: measured here,
 *   it binds a scratch keycode and presses it at once, and chromium reads the
 *   key before it has reloaded the keymap, so 5 out of 5 runs of
 *   "héllo wörld — 你好 ✓ 😀 ñÑ€" arrived garbled even at --delay 12. Binding
 *   first, waiting until Chromium has re-read the keymap (keymap-reads.ts), then
 *   pressing was exact in every run.
 */
import type { WireError } from './worker-protocol.ts';
import { log, send, type OpContext } from './worker/context.ts';
import { devices, releaseAll, startedDevices } from './worker/devices.ts';
import { isOpName, runOperation } from './worker/operations.ts';

let current: { id: number; ctx: OpContext } | undefined;
let chain: Promise<void> = Promise.resolve();
let shuttingDown = false;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null;
}

/** What crosses back for a failure: the class name (the parent rebuilds ToolInputError and CancelledError) and message. */
function wireError(err: unknown): WireError {
  const name = isRecord(err) && typeof err.name === 'string' ? err.name : 'Error';
  const message = isRecord(err) && typeof err.message === 'string' ? err.message : String(err);
  return { name, message };
}

/** Best-effort cleanup, then exit. Never loads nut-js just to clean up. */
async function shutdown(code: number, id?: number): Promise<void> {
  if (shuttingDown) return;
  shuttingDown = true;
  if (current) {
    current.ctx.cancelled = true;
    current.ctx.wake?.();
  }
  const started = startedDevices();
  if (started) {
    try {
      const d = await started;
      await chain.catch(() => {}); // let the cancelled op release what it holds
      await releaseAll(d);
      if (d.xkb && !d.xkb.conn.closed) {
        d.xkb.conn.onClose = () => {};
        await d.xkb.unbindAll();
        d.xkb.conn.close();
      }
    } catch (err) {
      log('warn', 'cleanup on exit failed', { error: wireError(err).message });
    }
  }
  if (id !== undefined && send({ id, ok: true, result: null }, () => process.exit(code))) {
    setTimeout(() => process.exit(code), 500).unref();
  } else {
    process.exit(code);
  }
}

process.on('message', (msg: unknown) => {
  if (!isRecord(msg)) {
    log('warn', 'ignored a message that is not an object', { type: typeof msg });
    return;
  }
  const { id, op } = msg;
  if (op === 'cancel') {
    if (current && current.id === id) {
      current.ctx.cancelled = true;
      current.ctx.wake?.();
    }
    return;
  }
  if (op === 'shutdown') {
    void shutdown(0, typeof id === 'number' ? id : undefined);
    return;
  }
  if (typeof id !== 'number') {
    // Without an id there is no one to answer.
    log('warn', 'ignored a message without a numeric id', { op: String(op) });
    return;
  }
  chain = chain.then(async () => {
    const ctx: OpContext = { cancelled: false };
    current = { id, ctx };
    try {
      if (!isOpName(op)) throw new Error(`unknown op ${JSON.stringify(op)}`);
      const result = await runOperation(op, msg.args, ctx);
      send({ id, ok: true, result: result ?? null });
    } catch (err) {
      send({ id, ok: false, error: wireError(err) });
    } finally {
      current = undefined;
    }
  });
});

// Parent gone (crash or kill): release what we hold and leave.
process.on('disconnect', () => void shutdown(0));
process.on('SIGTERM', () => void shutdown(0));
process.on('SIGINT', () => void shutdown(0));

// Load nut-js and connect to X before saying ready, so the parent's start timeout covers that
// (0.9-2.8 s measured) rather than the first op's deadline: with a short --call-timeout-ms the
// first op was killed every time, and the worker never became usable. A failure here is
// reported by the first op that needs the devices.
await devices().catch(() => undefined);
send({ type: 'ready' });
