/**
 * What the tests of human takeover's VNC side share (takeover-vnc and
 * takeover-vnc-server.test.ts): the size of their display, a logger for
 * x11vnc, a private folder for its socket, and the System V shared memory a
 * process made (x11vnc's, which must not outlive it).
 */
import { chmodSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, type Logger } from '../src/base/log.ts';

export const WIDTH = 1024;
export const HEIGHT = 768;

/** Warnings and errors reach the test output; x11vnc's own lines (debug) do not. */
export const log: Logger = createLogger(
  (process.env.VNC_LOG as 'warn') ?? 'warn',
  (line) => process.stderr.write(`[vnc] ${line}`),
  {},
  { format: 'pretty' },
);

/** A fresh folder of its own (0700) under the system temp folder, for x11vnc's socket. */
export function privateDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'deskbatch-vnc-test-'));
  chmodSync(dir, 0o700);
  return dir;
}

/** System V shared memory segments made by `pid` (/proc/sysvipc/shm). */
export function sharedMemoryOf(pid: number): string[] {
  const [head, ...rows] = readFileSync('/proc/sysvipc/shm', 'utf8')
    .trim()
    .split('\n')
    .map((l) => l.trim().split(/\s+/));
  const id = head!.indexOf('shmid');
  const cpid = head!.indexOf('cpid');
  return rows.filter((r) => Number(r[cpid]) === pid).map((r) => r[id]!);
}
