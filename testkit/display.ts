/**
 * Virtual displays for tests: each test file gets its own Xvfb (+ openbox),
 * whatever `DISPLAY` the test runner has, so tests never share pointer,
 * focus or clipboard state.
 *
 *   const d = await startTestDisplay({ width: 1024, height: 768 });
 *   after(() => d.stop());
 *
 * or, scoped:
 *
 *   await withDisplay({ width: 1024, height: 768 }, async (d) => { ... });
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { isDisplayReachable } from '../src/desktop-driver/display.ts';
import { newLogDir } from './artifacts.ts';
import { startVirtualDisplay, type VirtualDisplay } from '../src/desktop-driver/xvfb.ts';

export { displaySize, startVirtualDisplay, type VirtualDisplay } from '../src/desktop-driver/xvfb.ts';

export interface TestDisplayOptions {
  width: number;
  height: number;
  /** Start openbox; default true. */
  windowManager?: boolean;
}

/** Warnings and errors from the display go to stderr, so a display that dies mid-test shows in the output. */
function testLog(level: 'debug' | 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>): void {
  if (level === 'warn' || level === 'error') console.error(`[display] ${level}: ${msg}`, fields ?? '');
}

/**
 * The displays' X servers admit only clients holding their cookie. Every
 * display a test process starts puts its cookie in this one file, and the
 * process's XAUTHORITY names it, so every X client the tests start (the
 * daemon's worker, Chromium, xev, xdotool, the input fence) inherits it.
 */
const XAUTHORITY = join(tmpdir(), `deskbatch-test-xauth-${process.pid}`);
process.env.XAUTHORITY = XAUTHORITY;
process.on('exit', () => rmSync(XAUTHORITY, { force: true }));

/** Xvfb's and openbox's logs stay in the test file's log folder (testkit/artifacts.ts). */
export function startTestDisplay(options: TestDisplayOptions): Promise<VirtualDisplay> {
  return startVirtualDisplay({ ...options, log: testLog, logDir: newLogDir('display'), xauthority: XAUTHORITY });
}

/** Runs `fn` with a fresh display, and stops the display afterwards whatever happens. */
export async function withDisplay<T>(
  options: TestDisplayOptions,
  fn: (display: VirtualDisplay) => Promise<T>,
): Promise<T> {
  const display = await startTestDisplay(options);
  try {
    return await fn(display);
  } finally {
    await display.stop();
  }
}

/** A bare Xvfb (no window manager) on a display number the test chooses, so it can be killed and started again. */
export interface BareXvfb {
  number: number;
  display: string;
  proc: ChildProcess;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/** A display number between 50 and 99 with no X socket or lock file. */
export function pickFreeDisplay(): number {
  const start = 50 + Math.floor(Math.random() * 50);
  for (let i = 0; i < 50; i++) {
    const n = 50 + ((start - 50 + i) % 50);
    if (!existsSync(`/tmp/.X11-unix/X${n}`) && !existsSync(`/tmp/.X${n}-lock`)) return n;
  }
  throw new Error('no free X display number between 50 and 99');
}

/** Starts Xvfb on `number` (a free one by default) and waits until its socket answers. */
export async function startBareXvfb(
  number = pickFreeDisplay(),
  size: { width: number; height: number } = { width: 1280, height: 800 },
  /** More Xvfb arguments, e.g. `['-extension', 'DAMAGE']` to leave an extension out. */
  extraArgs: readonly string[] = [],
): Promise<BareXvfb> {
  const display = `:${number}`;
  const screen = `${size.width}x${size.height}x24`;
  const args = [display, '-screen', '0', screen, '-nolisten', 'tcp', '-noreset', ...extraArgs];
  const proc = spawn('Xvfb', args, { stdio: 'ignore' });
  let exited = false;
  const exit = new Promise<void>((r) => proc.once('exit', () => ((exited = true), r())));
  const deadline = Date.now() + 10_000;
  while (!(await isDisplayReachable(display))) {
    if (exited) throw new Error(`Xvfb ${display} exited at start`);
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`Xvfb ${display} did not start`);
    }
    await delay(50);
  }
  return {
    number,
    display,
    proc,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (exited) return;
      proc.kill(signal);
      const timer = setTimeout(() => proc.kill('SIGKILL'), 3000);
      await exit;
      clearTimeout(timer);
    },
  };
}
