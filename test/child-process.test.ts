/**
 * The one way the daemon runs a program (src/base/child-process.ts), with real
 * child processes: Node.js itself stands in for a program, doing on cue what
 * Xvfb, ffmpeg or x11vnc do when they fail (exit early, hang, ignore SIGTERM).
 * Xvfb, openbox, ffmpeg and x11vnc themselves are started through it in
 * test/computer.test.ts, test/recording-video.test.ts and
 * test/takeover-vnc.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  OutputLines,
  runTool,
  startChild,
  StartError,
  stopChild,
  type ChildProcess,
  type StartOptions,
} from '../src/base/child-process.ts';
import { processRuns } from '../src/base/temp-folder.ts';

class ProgramError extends StartError {
  override readonly name = 'ProgramError';
}

/** Starts `node -e script` as a program whose stderr is read into `lines`, and which is ready when it prints "ready". */
function startNode(
  script: string,
  lines: OutputLines,
  overrides: Partial<StartOptions<void>> = {},
): Promise<{ child: ChildProcess }> {
  return startChild({
    name: 'program',
    command: process.execPath,
    args: ['-e', script],
    spawn: { stdio: ['ignore', 'pipe', 'pipe'] },
    error: ProgramError,
    notInstalled: 'program not found',
    timeoutMs: 10_000,
    exitedBefore: 'before it was ready',
    notReady: 'was not ready',
    tail: () => lines.quoted(),
    ready: (child) =>
      new Promise<void>((resolve) => {
        lines.read(child.stderr);
        child.stdout?.on('data', (chunk: Buffer) => chunk.toString().includes('ready') && resolve());
      }),
    ...overrides,
  });
}

describe('startChild: one error, with a stable code, for every way a start fails', () => {
  test('a program that is not installed: not_installed', async () => {
    await assert.rejects(
      startNode('', new OutputLines(), { command: 'deskbatch-no-such-program' }),
      (err: unknown) =>
        err instanceof ProgramError && err.code === 'not_installed' && err.message.startsWith('program not found'),
    );
  });

  test('a program that exits first: start_failed, quoting its last words', async () => {
    await assert.rejects(
      startNode(`console.error('no screen here'); process.exit(3)`, new OutputLines()),
      (err: unknown) =>
        err instanceof ProgramError &&
        err.code === 'start_failed' &&
        err.message === 'program exited with code 3 before it was ready:\nno screen here',
    );
  });

  test('a program never ready: start_timeout, and it is stopped before the error', async () => {
    let pid: number | undefined;
    const lines = new OutputLines();
    await assert.rejects(
      startNode(`console.error('waiting'); setInterval(() => {}, 1000)`, lines, {
        timeoutMs: 1_000,
        ready: (child) => {
          pid = child.pid;
          lines.read(child.stderr);
          return new Promise<void>(() => {});
        },
      }),
      (err: unknown) =>
        err instanceof ProgramError &&
        err.code === 'start_timeout' &&
        /^program was not ready within 1000 ms/.test(err.message),
    );
    assert.ok(pid !== undefined && !processRuns(pid), `the program (pid ${pid}) no longer runs`);
  });

  test('a failing readiness check fails the start with its own error, and the program is stopped', async () => {
    let pid: number | undefined;
    await assert.rejects(
      startNode('setInterval(() => {}, 1000)', new OutputLines(), {
        ready: async (child) => {
          pid = child.pid;
          throw new ProgramError('not_installed', 'xprop not found');
        },
      }),
      /xprop not found/,
    );
    assert.ok(pid !== undefined && !processRuns(pid), `the program (pid ${pid}) no longer runs`);
  });
});

describe('stopChild', () => {
  test('its signal first; SIGKILL for a program that ignores it, after the deadline', async () => {
    const polite = await startNode(`console.log('ready'); setInterval(() => {}, 1000)`, new OutputLines());
    assert.equal(await stopChild(polite.child), 'stopped');
    assert.equal(polite.child.signalCode, 'SIGTERM');

    const stubborn = await startNode(
      `process.on('SIGTERM', () => {}); console.log('ready'); setInterval(() => {}, 1000)`,
      new OutputLines(),
    );
    assert.equal(await stopChild(stubborn.child, { deadlineMs: 300 }), 'killed');
    assert.equal(stubborn.child.signalCode, 'SIGKILL');
    assert.equal(await stopChild(stubborn.child), 'not running');
  });
});

describe('OutputLines and runTool', () => {
  test('keeps the last lines, each cut, and a stream without newlines cannot grow it', () => {
    const seen: string[] = [];
    const lines = new OutputLines({ lines: 2, lineChars: 5, onLine: (line) => void seen.push(line) });
    lines.write('one\r\ntwo\n\n  three  \nfour');
    assert.equal(lines.text(), 'two\nthree');
    assert.deepEqual(seen, ['one', 'two', 'three']);
    lines.write('x'.repeat(1_000));
    assert.equal(lines.text(), 'three\nfourx', 'a line over 64 times the cut is ended');
    assert.equal(new OutputLines().quoted(), '');
    const filtered = new OutputLines({ onLine: (line) => line.startsWith('[error]') });
    filtered.write('[info] fine\n[error] broken\n');
    assert.equal(filtered.quoted(), ':\n[error] broken');
  });

  test('runTool gives the output, or the error (ENOENT for a missing tool), and never throws', async () => {
    const ok = await runTool(process.execPath, ['-e', 'process.stdout.write("hi")'], { timeoutMs: 10_000 });
    assert.deepEqual(ok, { stdout: 'hi', stderr: '' });
    const missing = await runTool('deskbatch-no-such-tool', [], { timeoutMs: 10_000 });
    assert.equal(missing.error?.code, 'ENOENT');
    const slow = await runTool(process.execPath, ['-e', 'setTimeout(() => {}, 10_000)'], { timeoutMs: 200 });
    assert.equal(slow.error?.killed, true);
  });
});
