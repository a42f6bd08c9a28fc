/**
 * A desktop's clipboard as its harness sets and reads it (docs/PROTOCOL.md
 * "Clipboard"): the X display's CLIPBOARD selection, which ctrl+v pastes.
 *
 * Set: an `xclip -quiet -selection clipboard -i` of our own takes the
 * selection and stays in the foreground serving it (the bytes come on its
 * stdin, never as an argument) until another client takes it over (the
 * model copies something) or the next set replaces it; the desktop stops it
 * when it is torn down (src/desktop-pool/desktop.ts `destroyParts`). xclip
 * rather than selection ownership in JavaScript on an X connection
 * (src/desktop-driver/x11.ts): it already answers TARGETS and hands out data
 * larger than one X request in INCR chunks, which a 10 MiB image needs.
 *
 * Only CLIPBOARD, not PRIMARY: PRIMARY is what a middle click pastes, and
 * every selection the model makes replaces it; owning it too would take a
 * second process per set for a paste the model does not make with keys.
 *
 * Read: `xclip -o` under a deadline (an owner that never answers cannot hold
 * the caller) and a byte bound, after asking the owner's TARGETS, so a text
 * is never answered with an image's bytes or the other way round.
 *
 * Every xclip runs in the desktop's sandbox when it has one, with only the
 * display's name and cookie in its environment.
 */
import {
  OutputLines,
  StartError,
  runToolBytes,
  startChild,
  stopChild,
  type ChildProcess,
} from '../base/child-process.ts';
import type { Confinement } from '../base/child-process.ts';

/** What a clipboard holds: UTF-8 text, or a PNG image. */
export type ClipboardType = 'text' | 'image/png';

const XCLIP = 'xclip';
const XCLIP_NOT_FOUND = 'xclip not found: run `npm run setup` (Debian package xclip)';
/** How long xclip gets to take the selection, and a read to be answered. */
const SET_TIMEOUT_MS = 5_000;
const READ_TIMEOUT_MS = 5_000;
/** The TARGETS list is short; more than this is not a list worth reading. */
const TARGETS_MAX_BYTES = 64 * 1024;
/** What xclip -quiet prints once it owns the selection (xclip 0.13). */
const OWNING = /^Waiting for selection requests/;
/** Targets a UTF-8 text is read as, in order of preference. */
const TEXT_TARGETS = ['UTF8_STRING', 'text/plain;charset=utf-8'];

/** xclip could not take the selection (it is missing, or the display refused it). */
export class ClipboardStartError extends StartError {}

/** The clipboard cannot be reached: the desktop is gone, its X server does not answer, or xclip is missing. */
export class ClipboardUnavailable extends Error {}

export interface ClipboardOptions {
  /** The X display's name (`:5`) and its cookie file. */
  display: string;
  xauthority?: string;
  /** The desktop's sandbox, which xclip then runs in. */
  within?: Confinement;
}

/** What a read found: the bytes, nothing (no owner, or none of that type), or more than the bound. */
export type ClipboardRead = { kind: 'data'; data: Buffer } | { kind: 'empty' } | { kind: 'too_large' };

export class DesktopClipboard {
  /** The xclip serving our last set, until another client takes the selection (it then exits). */
  private owner: ChildProcess | undefined;
  /** Sets, one after another: two at once must not leave two owners. */
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(private readonly options: ClipboardOptions) {}

  private env(): NodeJS.ProcessEnv {
    return {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      DISPLAY: this.options.display,
      ...(this.options.xauthority ? { XAUTHORITY: this.options.xauthority } : {}),
    };
  }

  /** The pid of the xclip serving the last set, while it still owns the selection (tests, the recycle's check). */
  get ownerPid(): number | undefined {
    return this.owner?.pid;
  }

  /** Puts `data` on the CLIPBOARD selection; resolves once our xclip owns it. */
  set(data: Buffer, type: ClipboardType): Promise<void> {
    const run = this.queue.then(() => this.replace(data, type));
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async replace(data: Buffer, type: ClipboardType): Promise<void> {
    if (this.closed) throw new ClipboardUnavailable('the desktop is gone');
    await this.stopOwner();
    const lines = new OutputLines();
    let owning: (() => void) | undefined;
    const owned = new Promise<void>((resolve) => (owning = resolve));
    const watch = new OutputLines({
      onLine: (line) => {
        if (OWNING.test(line)) owning?.();
        else lines.write(`${line}\n`);
        return false;
      },
    });
    try {
      const { child } = await startChild({
        name: 'xclip',
        command: XCLIP,
        args: ['-quiet', '-selection', 'clipboard', '-i', ...(type === 'image/png' ? ['-t', 'image/png'] : [])],
        spawn: { stdio: ['pipe', 'ignore', 'pipe'], env: this.env() },
        error: ClipboardStartError,
        notInstalled: XCLIP_NOT_FOUND,
        timeoutMs: SET_TIMEOUT_MS,
        exitedBefore: 'before it owned the clipboard',
        notReady: 'did not own the clipboard',
        tail: () => lines.quoted(),
        ...(this.options.within ? { within: this.options.within } : {}),
        ready: async (started) => {
          // Read all along, so its line per request never fills the pipe and blocks it.
          watch.read(started.stderr);
          started.stdin?.on('error', () => undefined); // it exited first: its exit says why
          started.stdin?.end(data);
          await owned;
        },
      });
      this.owner = child;
      child.once('exit', () => {
        if (this.owner === child) this.owner = undefined;
      });
      if (this.closed) await this.stopOwner();
    } catch (err) {
      if (err instanceof ClipboardStartError) throw new ClipboardUnavailable(err.message);
      throw err;
    }
  }

  /** Reads the CLIPBOARD selection as `type`, at most `maxBytes` of it. */
  async read(type: ClipboardType, maxBytes: number): Promise<ClipboardRead> {
    if (this.closed) throw new ClipboardUnavailable('the desktop is gone');
    const targets = await this.xclipOut('TARGETS', TARGETS_MAX_BYTES);
    if (targets === undefined || targets === 'too_large') return { kind: 'empty' };
    const offered = targets.toString('utf8').split('\n');
    const target =
      type === 'image/png'
        ? ['image/png'].find((t) => offered.includes(t))
        : TEXT_TARGETS.find((t) => offered.includes(t));
    if (!target) return { kind: 'empty' };
    const data = await this.xclipOut(target, maxBytes);
    if (data === 'too_large') return { kind: 'too_large' };
    return data && data.length ? { kind: 'data', data } : { kind: 'empty' };
  }

  /** `xclip -o -t target`: its bytes, undefined when nothing is there (no owner, no such target), 'too_large' past the bound. */
  private async xclipOut(target: string, maxBytes: number): Promise<Buffer | 'too_large' | undefined> {
    const run = await runToolBytes(XCLIP, ['-o', '-selection', 'clipboard', '-t', target], {
      env: this.env(),
      timeoutMs: READ_TIMEOUT_MS,
      maxBytes,
      ...(this.options.within ? { within: this.options.within } : {}),
    });
    if (run.truncated) return 'too_large';
    if (!run.error) return run.stdout;
    if (run.error.code === 'ENOENT') throw new ClipboardUnavailable(XCLIP_NOT_FOUND);
    if (run.error.killed)
      throw new ClipboardUnavailable(`the clipboard's owner did not answer within ${READ_TIMEOUT_MS} ms`);
    if (/can't open display/i.test(run.stderr))
      throw new ClipboardUnavailable("the desktop's X server does not answer");
    // xclip exits 1 with nothing to say when the selection has no owner, and names the target when it lacks one.
    return undefined;
  }

  private async stopOwner(): Promise<void> {
    const owner = this.owner;
    this.owner = undefined;
    if (owner) await stopChild(owner);
  }

  /** Stops our owner (the clipboard empties with it); later sets and reads fail. Never throws. */
  async close(): Promise<void> {
    this.closed = true;
    await this.queue;
    await this.stopOwner().catch(() => undefined);
  }
}
