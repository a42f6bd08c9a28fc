/**
 * Typing and keys: sending key events through libnut or our own XTEST
 * connection (keymap.ts), chords, held modifiers, and typing text exactly.
 */
import type { DriverKey } from '../driver.ts';
import { KEYSYMS, MODIFIER_KEYS, charKeysym, checkTypeable, usStroke, type Stroke } from '../keys.ts';
import { LOCK_MASK } from '../x11.ts';
import { WorkerInputError, sleep, throwIfCancelled, yieldToLoop, type OpContext } from './context.ts';
import { nutKey, type Devices } from './devices.ts';

/** Typing yields to the event loop this often, so a 'cancel' can arrive. */
const YIELD_EVERY_KEYS = 16;

/** DriverKeys libnut cannot press on Linux: "menu" is an invalid key there, Pause maps to nothing. */
const LIBNUT_UNSUPPORTED: ReadonlySet<DriverKey> = new Set(['Menu', 'Pause']);

/**
 * Sends key events in order through either path. Events through our X
 * connection are synced (a round trip) before the next libnut event, and
 * libnut flushes each of its own synchronously, so the server sees them in the
 * order given (the interleaved "aéaéaé" typing test checks this).
 */
class KeySender {
  private xPending = false;
  constructor(private readonly d: Devices) {}

  /** Whether `key` can go through libnut: it knows the key, and the keysym sits unshifted on some keycode. */
  viaNut(key: DriverKey): boolean {
    if (LIBNUT_UNSUPPORTED.has(key)) return false;
    if (!this.d.xkb) return true;
    return this.d.xkb.keycodeOf(KEYSYMS[key]!) !== undefined;
  }

  /** Whether `stroke` typed with libnut gives exactly `keysym` under the live keymap (it does on a US layout). */
  typesExactly(stroke: Stroke, keysym: number): boolean {
    const xkb = this.d.xkb;
    if (!xkb) return true;
    const kc = xkb.keycodeOf(KEYSYMS[stroke.key]!);
    if (kc === undefined) return false;
    const level = stroke.shift ? 1 : 0;
    const got = xkb.sym(kc, level);
    // A letter key with an empty Shift column still gives the capital (Xlib case conversion).
    if (got === 0 && level === 1 && keysym >= 0x41 && keysym <= 0x5a) return xkb.sym(kc, 0) === keysym + 0x20;
    return got === keysym;
  }

  async nut(key: DriverKey, down: boolean): Promise<void> {
    if (this.xPending) await this.flush();
    const k = nutKey(this.d, key);
    if (down) {
      await this.d.keyboard.pressKey(k);
      this.d.nutPressed.add(key);
    } else {
      await this.d.keyboard.releaseKey(k);
      this.d.nutPressed.delete(key);
    }
  }

  /** Presses or releases `keysym` on its keycode; returns the keycode (release that one, even if the keymap changes). */
  x(keysym: number, down: boolean): number {
    const kc = this.d.xkb!.key(keysym, down);
    this.xPending = true;
    return kc;
  }

  xKeycode(keycode: number, down: boolean): void {
    this.d.xkb!.toggleKeycode(keycode, down);
    this.xPending = true;
  }

  async flush(): Promise<void> {
    if (this.xPending) {
      this.xPending = false;
      await this.d.xkb!.conn.sync();
    }
  }
}

type Pressed = { via: 'nut'; key: DriverKey } | { via: 'x'; keycode: number };

/** Presses `keys` in order (binding any the keymap lacks). Returns what to release, in press order. */
export async function pressChord(d: Devices, keys: DriverKey[], ctx: OpContext): Promise<Pressed[]> {
  for (const k of keys) nutKey(d, k); // validate all before pressing any
  if (d.xkb) await d.xkb.refresh();
  const sender = new KeySender(d);
  const viaNut = keys.map((key) => sender.viaNut(key));
  const extra = keys.filter((_, i) => !viaNut[i]).map((key) => KEYSYMS[key]!);
  if (extra.length) {
    if (!d.xkb) throw new Error(`cannot press ${keys.join('+')}: ${d.xkbError ?? 'no X keyboard client'}`);
    await d.xkb.ensure(extra, ctx);
  }
  const done: Pressed[] = [];
  try {
    for (const [i, key] of keys.entries()) {
      if (viaNut[i]) {
        await sender.nut(key, true);
        done.push({ via: 'nut', key });
      } else {
        done.push({ via: 'x', keycode: sender.x(KEYSYMS[key]!, true) });
      }
    }
    await sender.flush();
  } catch (err) {
    await releaseChord(d, done);
    throw err;
  }
  return done;
}

export async function releaseChord(d: Devices, pressed: Pressed[]): Promise<void> {
  const sender = new KeySender(d);
  let firstError: unknown;
  for (const p of [...pressed].reverse()) {
    try {
      if (p.via === 'nut') await sender.nut(p.key, false);
      else sender.xKeycode(p.keycode, false);
    } catch (err) {
      firstError ??= err;
    }
  }
  await sender.flush();
  if (firstError) throw firstError;
}

/** Runs `action` with `modifiers` held, releasing them afterwards even if it fails or is cancelled. */
export async function withModifiers<T>(
  d: Devices,
  modifiers: DriverKey[],
  ctx: OpContext,
  action: () => Promise<T>,
): Promise<T> {
  for (const m of modifiers) {
    if (!MODIFIER_KEYS.has(m)) throw new WorkerInputError(`${m} is not a modifier key`);
  }
  const held = await pressChord(d, modifiers, ctx);
  try {
    return await action();
  } finally {
    await releaseChord(d, held);
  }
}

type TypeItem = { via: 'nut'; stroke: Stroke } | { via: 'x'; keysym: number };

export async function typeText(d: Devices, text: string, ctx: OpContext): Promise<void> {
  checkTypeable(text); // refuse control characters before typing anything
  if (d.xkb) await d.xkb.refresh();
  const sender = new KeySender(d);
  const items: TypeItem[] = [];
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    const named = ch === '\n' ? 'Return' : ch === '\t' ? 'Tab' : undefined;
    if (named) {
      items.push(
        sender.viaNut(named)
          ? { via: 'nut', stroke: { key: named, shift: false } }
          : { via: 'x', keysym: KEYSYMS[named]! },
      );
      continue;
    }
    const keysym = charKeysym(cp);
    // Printable ASCII: press the US base key, with Shift when needed. nut-js's own
    // keyboard.type loses Shift for ! # $ % & * + : > ? @ ^ _ { | } ~ and drops " (docs/MEASURED.md).
    const stroke = usStroke(ch);
    if (stroke && sender.typesExactly(stroke, keysym)) items.push({ via: 'nut', stroke });
    else items.push({ via: 'x', keysym });
  }
  if (!d.xkb && items.some((i) => i.via === 'x')) {
    const bad = [...text].find((ch) => !usStroke(ch) && ch !== '\n' && ch !== '\t');
    throw new Error(`cannot type ${JSON.stringify(bad)}: ${d.xkbError ?? 'no X keyboard client'}`);
  }

  // Caps Lock would capitalise letters, also non-ASCII ones on bound keycodes (measured:
  // "é" arrived as "É"). Switch it off while typing and back on afterwards.
  const capsLock = d.xkb && text.length > 0 ? ((await d.xkb.conn.modifierState()) & LOCK_MASK) !== 0 : false;
  if (capsLock) await tapKey(d, 'CapsLock', ctx);
  try {
    await typeItems(d, sender, items, ctx);
  } finally {
    if (capsLock) await tapKey(d, 'CapsLock', { cancelled: false });
  }
}

async function tapKey(d: Devices, key: DriverKey, ctx: OpContext): Promise<void> {
  await releaseChord(d, await pressChord(d, [key], ctx));
}

async function typeItems(d: Devices, sender: KeySender, items: TypeItem[], ctx: OpContext): Promise<void> {
  let i = 0;
  while (i < items.length) {
    // Bind as many distinct extra characters as there are spare keycodes, type up to there, repeat.
    let end = i;
    if (d.xkb) {
      const chunk = new Set<number>();
      for (; end < items.length; end++) {
        const it = items[end]!;
        if (it.via === 'x' && !chunk.has(it.keysym) && d.xkb.needsSlot(it.keysym)) {
          if (chunk.size >= d.xkb.capacity) break;
          chunk.add(it.keysym);
        }
      }
      if (end === i) throw new Error('the keymap has no spare keycode to type with');
      await d.xkb.ensure(chunk, ctx);
    } else {
      end = items.length;
    }
    for (; i < end; i++) {
      throwIfCancelled(ctx);
      const it = items[i]!;
      if (it.via === 'nut') {
        if (it.stroke.shift) await sender.nut('LeftShift', true);
        try {
          await sender.nut(it.stroke.key, true);
          await sender.nut(it.stroke.key, false);
        } finally {
          if (it.stroke.shift) await sender.nut('LeftShift', false);
        }
      } else {
        sender.x(it.keysym, true);
        sender.x(it.keysym, false);
      }
      if (i % YIELD_EVERY_KEYS === YIELD_EVERY_KEYS - 1) {
        await sender.flush();
        await yieldToLoop();
      }
    }
    await sender.flush();
  }
}

/** Presses the chord `repeat` times. */
export async function pressKeys(d: Devices, chord: DriverKey[], repeat: number, ctx: OpContext): Promise<void> {
  for (let i = 0; i < repeat; i++) {
    throwIfCancelled(ctx);
    const held = await pressChord(d, chord, ctx);
    await releaseChord(d, held);
    if (i % YIELD_EVERY_KEYS === YIELD_EVERY_KEYS - 1) await yieldToLoop();
  }
}

/** Holds the chord for `durationMs`, or until cancelled; releases it either way. */
export async function holdKeys(d: Devices, chord: DriverKey[], durationMs: number, ctx: OpContext): Promise<void> {
  const held = await pressChord(d, chord, ctx);
  try {
    await sleep(durationMs, ctx); // ends early on cancel
  } finally {
    await releaseChord(d, held);
  }
  throwIfCancelled(ctx);
}
