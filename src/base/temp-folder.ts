/**
 * The daemon's private folders under the system's temporary folder: a
 * pooled desktop's HOME, its display's files (X cookie, logs), a takeover's
 * VNC socket. Each is named `deskbatch-<kind>-p<pid>-XXXXXX` after the
 * process that made it, and goes with what uses it (or with the process's
 * exit hooks). A daemon killed with SIGKILL runs none of that: the next one
 * of the same user removes, as it starts, the folders of processes that no
 * longer run (sweepOwnedTempFolders), never a running daemon's. Browser
 * trace folders have their own sweep (src/browser/trace-folder.ts), and so
 * do the framebuffer files on /dev/shm (src/desktop-driver/xvfb.ts).
 */
import { lstat, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** `deskbatch-<kind>-p<pid>-` and mkdtemp's six characters. */
const OWNED_NAME = /^deskbatch-[a-z0-9-]+-p(\d+)-[A-Za-z0-9]{6}$/;

/** Whether process `pid` runs (a zombie counts: its parent has yet to reap it; EPERM: another user's). */
export function processRuns(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** A new private folder (0700) under `root`, named after `kind` (lower case, digits, `-`) and this process. */
export function ownedTempFolder(kind: string, root = tmpdir()): Promise<string> {
  if (!/^[a-z0-9-]+$/.test(kind)) throw new Error(`a temporary folder's kind is [a-z0-9-]+, got ${kind}`);
  return mkdtemp(join(root, `deskbatch-${kind}-p${process.pid}-`));
}

/**
 * Removes the folders under `root` that ownedTempFolder made for a process
 * that no longer runs: real folders (a link is never followed) of this user.
 * Returns their names; one it cannot read or remove is left.
 */
export async function sweepOwnedTempFolders(root = tmpdir()): Promise<string[]> {
  const uid = process.getuid?.();
  const removed: string[] = [];
  for (const name of await readdir(root).catch(() => [] as string[])) {
    const pid = Number(OWNED_NAME.exec(name)?.[1]);
    if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid || processRuns(pid)) continue;
    const dir = join(root, name);
    const s = await lstat(dir).catch(() => undefined);
    if (!s?.isDirectory() || (uid !== undefined && s.uid !== uid)) continue;
    try {
      await rm(dir, { recursive: true, force: true });
      removed.push(name);
    } catch {
      // another process's removal, or a folder we may not remove: left
    }
  }
  return removed;
}
