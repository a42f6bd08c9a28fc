/**
 * Human takeover's x11vnc (src/takeover/vnc-server.ts) as a process: it
 * outlives no owner, whether the owner exits without stop() or is killed
 * (test/fixtures/vnc-child.ts is the owner), and leaves no shared memory
 * behind; and it refuses bad options, or fails cleanly with nothing left
 * running when it cannot start. x11vnc serving viewers through the bridge,
 * and its stop(): takeover-vnc.test.ts.
 *
 * Run: node --import tsx --test --test-concurrency=1 test/takeover-vnc-server.test.ts
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { VncError, startVncServer, type VncServer } from '../src/takeover/vnc-server.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { isRunning, processesMentioning } from '../testkit/recording.ts';
import { HEIGHT, WIDTH, log, privateDir, sharedMemoryOf } from '../testkit/vnc.ts';
import { until, within } from '../testkit/wait.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const CHILD = fileURLToPath(new URL('./fixtures/vnc-child.ts', import.meta.url));

describe('x11vnc outlives no owner', () => {
  let display: VirtualDisplay;
  before(async () => {
    display = await startTestDisplay({ width: WIDTH, height: HEIGHT });
  });
  after(() => display?.stop());

  /** Starts test/fixtures/vnc-child.ts; resolves with it and its x11vnc's pid. */
  async function child(dir: string): Promise<{ proc: ChildProcess; pid: number; gone: Promise<void> }> {
    const proc = spawn(
      process.execPath,
      ['--import', 'tsx', CHILD, JSON.stringify({ display: display.display, xauthority: display.xauthority, dir })],
      { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] },
    );
    const gone = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    let out = '';
    proc.stdout!.setEncoding('utf8');
    proc.stdout!.on('data', (chunk: string) => (out += chunk));
    const line = await until('the child to report x11vnc started', () => /^\{.*\}\n/.exec(out), {
      timeoutMs: 30_000,
      seen: () => ({ out, exitCode: proc.exitCode }),
    });
    const { pid } = JSON.parse(line[0]) as { pid: number };
    assert.match(readFileSync(`/proc/${pid}/cmdline`, 'latin1'), /x11vnc/);
    return { proc, pid, gone };
  }

  test('a process that exits without stop() takes its x11vnc and its shared memory with it', async () => {
    const dir = privateDir();
    try {
      const { proc, pid, gone } = await child(dir);
      await until('x11vnc to have shared memory for its screen reads', () => sharedMemoryOf(pid).length > 0);
      proc.stdin!.end('exit\n');
      await within(gone, 'the child to exit');
      await until('x11vnc to be gone', () => !isRunning(pid));
      assert.deepEqual(sharedMemoryOf(pid), [], 'its shared memory is removed');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a process killed with SIGKILL takes its x11vnc with it (setpriv --pdeathsig)', async () => {
    const dir = privateDir();
    try {
      const { proc, pid, gone } = await child(dir);
      const segments = sharedMemoryOf(pid);
      proc.kill('SIGKILL');
      await within(gone, 'the child to die');
      await until('x11vnc to be gone', () => !isRunning(pid));
      // Nothing of the owner runs any more to remove x11vnc's shared memory: the test does.
      if (segments.length)
        execFileSync(
          'ipcrm',
          segments.flatMap((id) => ['-m', id]),
        );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('x11vnc that cannot start', () => {
  test('bad options: a folder others can read, a relative folder, a display name that is not one', async () => {
    const dir = privateDir();
    try {
      chmodSync(dir, 0o755);
      const start = (o: Partial<Parameters<typeof startVncServer>[0]>): Promise<VncServer> =>
        startVncServer({ display: ':0', dir, log, ...o });
      await assert.rejects(start({}), (e: unknown) => e instanceof VncError && e.code === 'bad_options');
      chmodSync(dir, 0o700);
      await assert.rejects(
        start({ dir: 'relative' }),
        (e: unknown) => e instanceof VncError && e.code === 'bad_options',
      );
      await assert.rejects(
        start({ display: ':0; rm' }),
        (e: unknown) => e instanceof VncError && e.code === 'bad_options',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('no X server on the display: start_failed, quoting x11vnc, and nothing left running', async () => {
    const dir = privateDir();
    try {
      await assert.rejects(
        startVncServer({ display: ':4999', dir, log }),
        (e: unknown) => e instanceof VncError && e.code === 'start_failed' && /exited with code 1/.test(e.message),
      );
      assert.deepEqual(processesMentioning(join(dir, 'vnc.sock')), []);
      assert.ok(!existsSync(join(dir, 'vnc.sock')));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('x11vnc not on the PATH: not_installed', async () => {
    const dir = privateDir();
    const path = process.env.PATH;
    process.env.PATH = dir;
    try {
      await assert.rejects(
        startVncServer({ display: ':4999', dir, log }),
        (e: unknown) => e instanceof VncError && e.code === 'not_installed',
      );
    } finally {
      process.env.PATH = path;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
