/**
 * Where the processes a test file starts leave their logs: one folder per
 * test file, `test-artifacts/logs/<file>/`, with a subfolder per daemon,
 * display (Xvfb, openbox) and Chromium. The folder is emptied when the file's
 * first log folder is made, so it holds the latest run only.
 *
 * When the file's run fails, its last line says where they are:
 *   # logs of the daemons, displays and browsers this file started: test-artifacts/logs/computer
 */
import { mkdirSync, rmSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../test-artifacts/logs/', import.meta.url));
let fileDir: string | undefined;
const counters = new Map<string, number>();

function testFileDir(): string {
  if (fileDir) return fileDir;
  const entry = process.argv[1] ? basename(process.argv[1]).replace(/(\.test)?\.[cm]?[jt]s$/, '') : 'unknown';
  fileDir = join(ROOT, entry);
  rmSync(fileDir, { recursive: true, force: true });
  mkdirSync(fileDir, { recursive: true });
  process.on('exit', (code) => {
    // Pipes are written synchronously on Linux, so this line makes it out.
    if (code !== 0 || process.exitCode) {
      console.error(
        `logs of the daemons, displays and browsers this file started: ${relative(process.cwd(), fileDir!) || fileDir}`,
      );
    }
  });
  return fileDir;
}

/** A new, empty folder for the logs of one `kind` of process: `daemon-1`, `display-2`, ... */
export function newLogDir(kind: string): string {
  const n = (counters.get(kind) ?? 0) + 1;
  counters.set(kind, n);
  const dir = join(testFileDir(), `${kind}-${n}`);
  mkdirSync(dir, { recursive: true });
  return dir;
}
