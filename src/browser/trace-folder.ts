/**
 * Where one browser's traces are written while they run (Playwright's
 * `tracesDir`, set at launch): Playwright keeps a trace's files there after
 * `tracing.stop`, unredacted, until the browser closes. A shared desktop's
 * browser runs for days, so each recorded session removes its own files
 * when its trace is saved (BrowserSession.saveTrace). `resources/` files are
 * named by their content's hash and may be shared by traces of other
 * sessions that still run: those wait until no trace runs in this browser.
 * The whole folder goes with the browser.
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Logger } from '../log.ts';

/** A file a trace wrote under the folder, as its zip names it: `resources/x` or `screencast/x`, nothing else. */
const TRACE_FILE = /^(resources|screencast)\/[^/\\]+$/;

export class TraceFolder {
  private running = 0;
  private readonly waiting = new Set<string>();

  private constructor(
    readonly dir: string,
    private readonly log: Logger,
  ) {}

  static async create(log: Logger): Promise<TraceFolder> {
    return new TraceFolder(await mkdtemp(join(tmpdir(), 'deskbatch-traces-')), log);
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
    await rm(this.dir, { recursive: true, force: true }).catch((err: unknown) =>
      this.log.warn('could not remove the browser trace folder', { error: String(err) }),
    );
  }
}
