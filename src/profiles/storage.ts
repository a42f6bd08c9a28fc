/**
 * Where sealed profiles live (src/profiles/store.ts seals them first: what
 * reaches a `ProfileStorage` is ciphertext). One small interface, so a fleet
 * could keep them elsewhere (an object store, a database) with a class of its
 * own; `FolderStorage` is the one the daemon uses: a folder it owns (0700),
 * one file per profile (0600, `<name>.profile`), each written whole to a
 * temporary file and renamed over the old one, so a reader (this daemon, or
 * another on the same shared volume: docs/DEPLOY.md) sees the old bytes or
 * the new, never half of them.
 *
 * Names reach this file already checked (PROFILE_NAME in src/base/protocol.ts:
 * no `/`, never `.` or `..`), and are checked again here: a name is never a
 * path.
 */
import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { chmod, lstat, lutimes, mkdir, open, readdir, rename, rm } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { PROFILE_NAME } from '../base/protocol.ts';
import { processRuns } from '../base/temp-folder.ts';

/** One stored profile: its name, the bytes stored, and when it was last written or touched (ms since the epoch). */
export interface StoredProfile {
  name: string;
  bytes: number;
  modifiedMs: number;
}

export interface ProfileStorage {
  /** The bytes stored under `name`, or undefined when there are none. */
  read(name: string): Promise<Buffer | undefined>;
  /** Stores `bytes` under `name`, replacing what was there at once: a reader never sees part of a write. */
  write(name: string, bytes: Buffer): Promise<void>;
  /** Removes `name`; false when nothing was stored under it. */
  remove(name: string): Promise<boolean>;
  /** Every stored profile, in no order. */
  list(): Promise<StoredProfile[]>;
  /**
   * Marks `name` used now without changing its bytes (a session leased it): `modifiedMs` is the retention's
   * clock, "saved or used". No error when nothing is stored under it.
   */
  touch(name: string): Promise<void>;
}

const SUFFIX = '.profile';
/** `.<host>.<pid>.<random>.tmp`: a write in progress, by which process on which host. */
const TEMP_NAME = /^\.([A-Za-z0-9-]{1,64})\.(\d{1,10})\.[A-Za-z0-9_-]{12}\.tmp$/;
/** A temporary file older than this is a dead writer's on any host (a write takes milliseconds). */
const STALE_TEMP_MS = 3_600_000;

/** This host's name as it goes into a temporary file's name. */
function hostTag(): string {
  return (
    hostname()
      .replace(/[^A-Za-z0-9-]/g, '-')
      .slice(0, 64) || 'host'
  );
}

function checkName(name: string): void {
  if (!PROFILE_NAME.test(name)) throw new Error(`not a profile name: ${JSON.stringify(name)}`);
}

/** Profiles as files in one folder of the daemon's own. */
export class FolderStorage implements ProfileStorage {
  readonly root: string;
  private readonly host = hostTag();

  private constructor(root: string) {
    this.root = root;
  }

  /**
   * The folder `dir` (made 0700 if missing; made 0700 again if it had other bits: it holds logins), and the
   * temporary files a writer left when it died swept: this host's whose process no longer runs, and any
   * host's older than an hour (another daemon on a shared volume may be writing one now). Refused when `dir` is
   * a link or not a folder, or not the daemon's user's.
   */
  static async open(dir: string): Promise<FolderStorage> {
    const root = resolve(dir);
    await mkdir(root, { recursive: true, mode: 0o700 });
    const s = await lstat(root);
    if (!s.isDirectory()) throw new Error(`${root} is not a folder (a link is not followed)`);
    const uid = process.getuid?.();
    if (uid !== undefined && s.uid !== uid) {
      throw new Error(`${root} belongs to uid ${s.uid}, not the daemon's (${uid})`);
    }
    if ((s.mode & 0o777) !== 0o700) await chmod(root, 0o700);
    const storage = new FolderStorage(root);
    await storage.sweepTemporary(true);
    return storage;
  }

  private path(name: string): string {
    checkName(name);
    return join(this.root, `${name}${SUFFIX}`);
  }

  async read(name: string): Promise<Buffer | undefined> {
    // O_NOFOLLOW: a link planted in the folder is not read through.
    const file = await open(this.path(name), constants.O_RDONLY | constants.O_NOFOLLOW).catch(
      (err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT') return undefined;
        throw err;
      },
    );
    if (!file) return undefined;
    try {
      return await file.readFile();
    } finally {
      await file.close();
    }
  }

  async write(name: string, bytes: Buffer): Promise<void> {
    const target = this.path(name);
    const temp = join(this.root, `.${this.host}.${process.pid}.${randomBytes(9).toString('base64url')}.tmp`);
    const file = await open(temp, 'wx', 0o600);
    try {
      try {
        await file.writeFile(bytes);
        // On disk before the rename: after a crash the name holds the old bytes or the new, never an empty file.
        await file.sync();
      } finally {
        await file.close();
      }
      await rename(temp, target);
    } catch (err) {
      await rm(temp, { force: true });
      throw err;
    }
    // The rename itself, on disk: a crash now does not bring the old bytes back.
    const folder = await open(this.root, constants.O_RDONLY | constants.O_DIRECTORY).catch(() => undefined);
    await folder
      ?.sync()
      .catch(() => undefined)
      .finally(() => folder.close());
  }

  async remove(name: string): Promise<boolean> {
    try {
      await rm(this.path(name));
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw err;
    }
  }

  async list(): Promise<StoredProfile[]> {
    const out: StoredProfile[] = [];
    for (const entry of await readdir(this.root)) {
      if (!entry.endsWith(SUFFIX)) continue;
      const name = entry.slice(0, -SUFFIX.length);
      if (!PROFILE_NAME.test(name)) continue;
      const s = await lstat(join(this.root, entry)).catch(() => undefined);
      if (!s?.isFile()) continue;
      out.push({ name, bytes: s.size, modifiedMs: s.mtimeMs });
    }
    return out;
  }

  async touch(name: string): Promise<void> {
    const now = new Date();
    await lutimes(this.path(name), now, now).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
  }

  /**
   * Removes the temporary files of writers that died: any host's older than STALE_TEMP_MS, and (`atStart`) this
   * host's whose process no longer runs, or is this one (which, starting, has none under way). Returns how many.
   */
  async sweepTemporary(atStart = false): Promise<number> {
    let removed = 0;
    const now = Date.now();
    for (const entry of await readdir(this.root).catch(() => [] as string[])) {
      const m = TEMP_NAME.exec(entry);
      if (!m) continue;
      const path = join(this.root, entry);
      const s = await lstat(path).catch(() => undefined);
      if (!s?.isFile()) continue;
      const pid = Number(m[2]);
      const dead = atStart && m[1] === this.host && (pid === process.pid || !processRuns(pid));
      if (!dead && now - s.mtimeMs < STALE_TEMP_MS) continue;
      await rm(path, { force: true });
      removed++;
    }
    return removed;
  }
}
