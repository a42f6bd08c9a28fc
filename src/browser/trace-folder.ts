/**
 * Where one browser's traces are written while they run (Playwright's
 * `tracesDir`, set at launch): Playwright keeps a trace's files there after
 * `tracing.stop`, unredacted, until the browser closes. A shared desktop's
 * browser runs for days, so each recorded session removes its own files
 * when its trace is saved (BrowserSession.saveTrace). `resources/` files are
 * named by their content's hash and may be shared by traces of other
 * sessions that still run: those wait until no trace runs in this browser.
 * The whole folder goes with the browser, and with this process however it
 * exits, but for SIGKILL: a folder whose owner (the pid in its `owner` file)
 * is gone is swept when this process first makes one (sweepStale).
 */
import { rmSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Logger } from '../base/log.ts';
import { processRuns } from '../base/temp-folder.ts';

const PREFIX = 'deskbatch-traces-';
/** The file in each folder that names the process that made it. */
const OWNER_FILE = 'owner';
/** rm's retries of a removal that meets ENOTEMPTY (a file written meanwhile): after 50, 100, … 500 ms. */
const REMOVE_RETRIES = 10;
const REMOVE_RETRY_MS = 50;
/** A folder without an owner file (made before it had one) counts as stale after this long. */
const UNOWNED_STALE_MS = 60 * 60_000;
let swept: Promise<void> | undefined;

/** Folders of this process's browsers not removed yet: removed if the process exits first (one hook for all). */
const liveDirs = new Set<string>();
let exitHookInstalled = false;

function ownDir(dir: string): void {
  liveDirs.add(dir);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const d of liveDirs) rmSync(d, { recursive: true, force: true });
  });
}

/** A file a trace wrote under the folder, as its zip names it: `resources/x` or `screencast/x`, nothing else. */
const TRACE_FILE = /^(resources|screencast)\/[^/\\]+$/;

export class TraceFolder {
  private running = 0;
  private readonly waiting = new Set<string>();

  private constructor(
    readonly dir: string,
    private readonly log: Logger,
  ) {
    ownDir(dir);
  }

  static async create(log: Logger): Promise<TraceFolder> {
    swept ??= TraceFolder.sweepStale(log);
    await swept;
    const dir = await mkdtemp(join(tmpdir(), PREFIX));
    await writeFile(join(dir, OWNER_FILE), `${process.pid}\n`, { mode: 0o600 });
    return new TraceFolder(dir, log);
  }

  /**
   * Removes the trace folders a process killed with SIGKILL left behind (they hold unredacted trace files):
   * ours (this uid), whose owner no longer runs, or, without an owner file, older than an hour. Another
   * running daemon's folders are left alone. Returns nothing; a folder it cannot read is skipped.
   */
  static async sweepStale(log: Logger, root = tmpdir()): Promise<void> {
    const uid = process.getuid?.();
    for (const name of await readdir(root).catch(() => [] as string[])) {
      if (!name.startsWith(PREFIX)) continue;
      const dir = join(root, name);
      const s = await stat(dir).catch(() => undefined);
      if (!s?.isDirectory() || (uid !== undefined && s.uid !== uid)) continue;
      const owner = Number((await readFile(join(dir, OWNER_FILE), 'utf8').catch(() => '')).trim());
      const stale =
        Number.isSafeInteger(owner) && owner > 0 ? !processRuns(owner) : Date.now() - s.mtimeMs > UNOWNED_STALE_MS;
      if (!stale) continue;
      await rm(dir, { recursive: true, force: true }).catch(() => undefined);
      log.info('removed a browser trace folder a killed daemon left behind', { folder: name });
    }
  }

  /** A trace started in this browser. */
  opened(): void {
    this.running++;
  }

  /**
   * A trace named `name` ended (saved or not) whose zip held `entries`:
   * removes its own files now, its `resources/` once no trace runs here.
   */
  async ended(name: string, entries: readonly string[]): Promise<void> {
    this.running = Math.max(0, this.running - 1);
    const own = entries.filter((e) => TRACE_FILE.test(e) && e.startsWith('screencast/'));
    for (const e of entries) if (TRACE_FILE.test(e) && e.startsWith('resources/')) this.waiting.add(e);
    try {
      // The trace's own JSON Lines: `<name>.trace`, `<name>.network`, `<name>-pwnetcopy-1.network` …
      for (const file of await readdir(this.dir)) {
        if (file.startsWith(`${name}.`) || file.startsWith(`${name}-`)) own.push(file);
      }
    } catch (err) {
      this.log.warn('could not list the browser trace folder', { error: String(err) });
    }
    const remove = this.running === 0 ? [...own, ...this.waiting] : own;
    if (this.running === 0) this.waiting.clear();
    await Promise.all(remove.map((file) => rm(join(this.dir, file), { force: true }).catch(() => undefined)));
  }

  /** With the browser: everything still in it. */
  async remove(): Promise<void> {
    try {
      // A browser that died: Playwright may still be writing its traces' files here as the folder is
      // removed (ENOTEMPTY, seen in CI), so the removal is tried again, for up to about 3 s.
      await rm(this.dir, { recursive: true, force: true, maxRetries: REMOVE_RETRIES, retryDelay: REMOVE_RETRY_MS });
      liveDirs.delete(this.dir);
    } catch (err) {
      // Left for the exit hook (still in liveDirs), or for the next daemon's sweep.
      this.log.warn('could not remove the browser trace folder', { error: String(err) });
    }
  }
}
