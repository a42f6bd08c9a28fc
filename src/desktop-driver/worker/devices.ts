/**
 * The worker's input and screen devices: nut-js (with libnut, its provider)
 * and our own X client (keymap.ts, pointer.ts), loaded once, lazily.
 */
import type { DriverKey } from '../driver.ts';
import type { Size } from '../../base/geometry.ts';
import { KEYSYMS } from '../keys.ts';
import { XPointer } from '../pointer.ts';
import { log } from './context.ts';
import { XKeyboard } from './keymap.ts';
import { Framebuffer, ScreenChanges } from './screen.ts';
import { FRAMEBUFFER_ENV } from '../worker-protocol.ts';

type Nut = typeof import('@nut-tree-fork/nut-js');

export interface Devices {
  nut: Nut;
  keyboard: ReturnType<Nut['providerRegistry']['getKeyboard']>;
  /**
   * Undefined when the X client could not connect: ASCII then trusts a US
   * keymap, non-ASCII fails, and so does every pointer op.
   */
  xkb: XKeyboard | undefined;
  pointer: XPointer | undefined;
  xkbError: string | undefined;
  /** DriverKeys pressed through libnut and not yet released. */
  nutPressed: Set<DriverKey>;
  /** When the screen last changed (DAMAGE); undefined without the extension or the X client. */
  changes: ScreenChanges | undefined;
  /** Xvfb's framebuffer, read directly; undefined where libnut grabs instead. */
  framebuffer: Framebuffer | undefined;
}

let devicesPromise: Promise<Devices> | undefined;

export function devices(): Promise<Devices> {
  devicesPromise ??= (async () => {
    const display = process.env.DISPLAY ?? '';
    // Lazy: loading nut-js loads libnut, which must only meet a display the parent has probed.
    // A CommonJS module: depending on the loader its exports arrive as the namespace or as `default`.
    const mod = (await import('@nut-tree-fork/nut-js')) as Nut & { default?: Nut };
    const nut = mod.default ?? mod;
    // Defaults are 300 ms per key and 100 ms per click (docs/MEASURED.md).
    nut.keyboard.config.autoDelayMs = 0;
    const keyboard = nut.providerRegistry.getKeyboard();
    keyboard.setKeyboardDelay(0); // KeyboardClass's constructor set libnut's delay to 300
    let xkb: XKeyboard | undefined;
    let pointer: XPointer | undefined;
    let xkbError: string | undefined;
    try {
      xkb = await XKeyboard.open(display);
      pointer = new XPointer(xkb.conn, xkb.xtest, (msg, fields) => log('debug', msg, fields));
      await xkb.refresh();
      // Keys or buttons a previous, killed worker left down would corrupt everything we type.
      await xkb.releaseEverything();
      xkb.conn.onClose = () => {
        // The X server went away. The next libnut call would segfault; leave now so the
        // parent sees it and probes the display before starting a new worker.
        log('warn', 'X connection closed; desktop worker exiting');
        process.exit(70);
      };
    } catch (err) {
      xkbError = (err as Error).message;
      log('warn', 'X keyboard client unavailable; non-ASCII typing and keys missing from the keymap will fail', {
        error: xkbError,
      });
    }
    const { changes, framebuffer } = xkb ? await screenReaders(nut, xkb) : {};
    log('debug', 'screen readers', { damage: changes !== undefined, framebuffer: framebuffer !== undefined });
    return { nut, keyboard, xkb, pointer, xkbError, nutPressed: new Set<DriverKey>(), changes, framebuffer };
  })();
  // A failed start (nut-js would not load) is retried by the next op rather than cached.
  devicesPromise.catch(() => {
    devicesPromise = undefined;
  });
  return devicesPromise;
}

/** DAMAGE and the framebuffer file, each where available; what is missing is logged once, with the fallback. */
async function screenReaders(
  nut: Nut,
  xkb: XKeyboard,
): Promise<{ changes?: ScreenChanges; framebuffer?: Framebuffer }> {
  let changes: ScreenChanges | undefined;
  try {
    changes = await ScreenChanges.open(xkb.conn);
    if (!changes) log('info', 'the X server has no DAMAGE 1.1: screenshots after input settle by comparing frames');
  } catch (err) {
    log('warn', 'cannot watch the screen for changes: screenshots after input settle by comparing frames', {
      error: (err as Error).message,
    });
  }
  const path = process.env[FRAMEBUFFER_ENV];
  if (!path) return { changes };
  try {
    const size = { width: await nut.screen.width(), height: await nut.screen.height() };
    const opened = await Framebuffer.open(path, xkb.conn, size);
    if (opened.framebuffer) return { changes, framebuffer: opened.framebuffer };
    log('warn', 'cannot read the framebuffer directly: screenshots grab through libnut', { why: opened.why });
  } catch (err) {
    log('warn', 'cannot read the framebuffer directly: screenshots grab through libnut', {
      error: (err as Error).message,
    });
  }
  return { changes };
}

/** The devices if loading them has begun, else undefined: cleanup never loads nut-js just to clean up. */
export function startedDevices(): Promise<Devices> | undefined {
  return devicesPromise;
}

/** libnut's number for a DriverKey; throws for a name it or our keysym table does not know. */
export function nutKey(d: Devices, key: DriverKey): number {
  const value = (d.nut.Key as unknown as Record<string, number>)[key];
  if (typeof value !== 'number' || !(key in KEYSYMS)) throw new Error(`unknown DriverKey ${JSON.stringify(key)}`);
  return value;
}

export function pointerOf(d: Devices): XPointer {
  if (!d.pointer) throw new Error(`cannot use the pointer: ${d.xkbError ?? 'no X client'}`);
  return d.pointer;
}

export async function displaySize(d: Devices): Promise<Size> {
  return { width: await d.nut.screen.width(), height: await d.nut.screen.height() };
}

/** Releases every key and button we (or a dead predecessor) may hold. */
export async function releaseAll(d: Devices): Promise<void> {
  const errors: unknown[] = [];
  for (const key of [...d.nutPressed].reverse()) {
    try {
      await d.keyboard.releaseKey(nutKey(d, key));
    } catch (err) {
      errors.push(err);
    }
  }
  d.nutPressed.clear();
  if (d.pointer && !d.xkb?.conn.closed) {
    try {
      await d.pointer.releaseAll();
    } catch (err) {
      errors.push(err);
    }
  }
  if (d.xkb && !d.xkb.conn.closed) await d.xkb.releaseEverything();
  if (errors.length) throw errors[0];
}
