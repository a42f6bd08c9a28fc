/**
 * Desktop worker: the child process that touches the X display.
 *
 * Started by WorkerDesktopDriver (worker-driver.ts) with `child_process.fork`,
 * `--import tsx` and `serialization: 'advanced'` (Buffers cross IPC as bytes).
 * It is a separate process because nut-js segfaults, with nothing catchable
 * in JS, when the X server goes away under it (docs/MEASURED.md);
 * here a crash only costs the in-flight call, and the parent starts a new
 * worker for the next one.
 *
 * Protocol (parent → child): `{ id, op, args }`, one op at a time, and
 * `{ op: 'cancel', id }` to end op `id` early (a hold, a long typing run, a
 * drag). Child → parent: `{ type: 'ready' }` once listening, then
 * `{ id, ok: true, result }` or `{ id, ok: false, error: { name, message } }`
 * per op, and `{ type: 'log', level, msg, fields }`.
 *
 * Input paths:
 * - Mouse, screen and most keys go through nut-js. We call its provider
 *   (libnut) for key and button toggles: nut-js's KeyboardClass/MouseClass
 *   methods `await sleep(autoDelayMs)` first, and even with autoDelayMs = 0
 *   that is a setTimeout (≈1.2 ms per toggle measured, 40x the toggle itself).
 * - A small X11 protocol client (XConnection below) reads the keymap and
 *   sends XTEST key events itself, for what nut-js cannot do safely:
 *   non-ASCII characters (nut-js types nothing for them, docs/MEASURED.md), keys
 *   whose keysym has no keycode in the current keymap (libnut then sends
 *   keycode 0 and Xlib kills the process with BadValue: measured for F13–F24
 *   on Xvfb, and for dead keys under non-US layouts), and keys libnut does not
 *   know on Linux (Menu: error; Pause: silently nothing).
 *   Such keysyms are bound to spare keycodes and left bound (a cache), then
 *   pressed by keycode. We do NOT use `xdotool type` for this: measured here,
 *   it binds a scratch keycode and presses it at once, and chromium reads the
 *   key before it has reloaded the keymap, so 5 out of 5 runs of
 *   "héllo wörld — 你好 ✓ 😀 ñÑ€" arrived garbled even at --delay 12. Binding
 *   first, waiting BIND_SETTLE_MS, then pressing was exact in every run.
 */
import type { CaptureOptions, DriverKey, MouseButton, ScrollDirection } from './driver.ts';
import type { Point, Rect, Size } from '../geometry.ts';
import type { CapturedImage } from '../image.ts';
import { BUTTON_RELEASE, KEY_PRESS, KEY_RELEASE, LOCK_MASK, SLOTS_PROPERTY, XConnection } from './x11.ts';
import { WHEEL_BUTTONS, XPointer } from './pointer.ts';
import { KEYSYMS, MODIFIER_KEYS, charKeysym, checkTypeable, usStroke, type Stroke } from './keys.ts';

type Nut = typeof import('@nut-tree-fork/nut-js');
type Sharp = typeof import('sharp').default;

/**
 * Wait after changing the keyboard mapping before pressing a rebound key, so
 * clients have reloaded their keymap. Chromium was exact from 5 ms on here;
 * 50 ms leaves margin for a loaded machine. Paid once per new character: the
 * bindings are kept for later calls.
 */
const BIND_SETTLE_MS = 50;
/** Typing yields to the event loop this often, so a 'cancel' can arrive. */
const YIELD_EVERY_KEYS = 16;
const DRAG_STEP_MS = 8;
/**
 * Pause between the clicks of a double/triple click. Back to back, two presses
 * can get the same X timestamp (ms), and Chromium then treats the second as the
 * same native event, not a repeat: measured detail [1, 1, 2] for a triple click.
 */
const CLICK_GAP_MS = 10;

// ---------------------------------------------------------------------------
// Errors sent to the parent

class WorkerInputError extends Error {
  override readonly name = 'ToolInputError';
}
class WorkerCancelled extends Error {
  override readonly name = 'CancelledError';
}

interface OpContext {
  cancelled: boolean;
  /** Resolves a pending abortable sleep early. */
  wake?: () => void;
}

function throwIfCancelled(ctx: OpContext): void {
  if (ctx.cancelled) throw new WorkerCancelled('cancelled');
}

/** Sleeps `ms`, or less if `ctx` is (or gets) cancelled. */
function sleep(ms: number, ctx?: OpContext): Promise<void> {
  if (ms <= 0 || ctx?.cancelled) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      if (ctx) ctx.wake = undefined;
      resolve();
    }
    if (ctx) ctx.wake = done;
  });
}

const yieldToLoop = (): Promise<void> => new Promise((r) => setImmediate(r));

function log(level: 'debug' | 'info' | 'warn' | 'error', msg: string, fields?: object): void {
  if (process.connected) process.send!({ type: 'log', level, msg, fields });
}

// ---------------------------------------------------------------------------
// The keymap, through the X11 client (x11.ts).

/**
 * The live keymap plus our bindings of extra keysyms on spare keycodes.
 * Keycodes found empty (all NoSymbol) are spare; we bind [keysym, keysym] on
 * them, like xdotool, and keep the binding until the slot is needed again
 * (least recently used first).
 */
class XKeyboard {
  private perKeycode = 0;
  private keysyms: Uint32Array = new Uint32Array(0);
  private dirty = true;
  /** Spare keycodes → the keysym we bound there (0 = free), in LRU order (Map insertion order). */
  private slots = new Map<number, number>();
  private slotsFound = false;
  /** When each slot was last pressed (for the settle before rebinding it). */
  private lastUse = new Map<number, number>();
  readonly pressed = new Set<number>();

  constructor(
    readonly conn: XConnection,
    readonly xtest: number,
  ) {
    conn.onMappingNotify = () => {
      this.dirty = true;
    };
  }

  static async open(display: string): Promise<XKeyboard> {
    const conn = await XConnection.open(display);
    const xtest = await conn.queryExtension('XTEST');
    if (xtest === undefined) {
      conn.close();
      throw new Error('the X server has no XTEST extension');
    }
    return new XKeyboard(conn, xtest);
  }

  async refresh(): Promise<void> {
    if (!this.dirty) return;
    this.dirty = false;
    const map = await this.conn.getKeyboardMapping();
    this.perKeycode = map.perKeycode;
    this.keysyms = map.keysyms;
    if (!this.slotsFound) await this.claimSlots();
    const count = this.conn.maxKeycode - this.conn.minKeycode + 1;
    for (let i = 0; i < count; i++) {
      const kc = this.conn.minKeycode + i;
      const empty = this.row(kc).every((s) => s === 0);
      // Another client (xdotool, setxkbmap) took or cleared one of our slots: forget our binding.
      const ours = this.slots.get(kc);
      if (ours !== undefined && ours !== 0 && this.sym(kc, 0) !== ours) {
        if (empty) this.slots.set(kc, 0);
        else this.slots.delete(kc);
      }
    }
  }

  /** Slots: keycodes empty now, plus those an earlier worker recorded as its slots (keeping their bindings). */
  private async claimSlots(): Promise<void> {
    const atom = await this.conn.internAtom(SLOTS_PROPERTY);
    const inherited = new Set(await this.conn.getRootIntegers(atom));
    for (let kc = this.conn.minKeycode; kc <= this.conn.maxKeycode; kc++) {
      const row = this.row(kc);
      if (row.every((s) => s === 0)) this.slots.set(kc, 0);
      else if (inherited.has(kc)) this.slots.set(kc, row[0]!);
    }
    this.conn.setRootIntegers(atom, [...this.slots.keys()]);
    await this.conn.sync();
    this.slotsFound = true;
  }

  private row(kc: number): Uint32Array {
    const start = (kc - this.conn.minKeycode) * this.perKeycode;
    return this.keysyms.subarray(start, start + this.perKeycode);
  }

  /** Keysym at `column` (0 = plain, 1 = Shift) of `keycode`. */
  sym(keycode: number, column: number): number {
    return column < this.perKeycode ? this.keysyms[(keycode - this.conn.minKeycode) * this.perKeycode + column]! : 0;
  }

  /**
   * The keycode XKeysymToKeycode (what libnut uses) would pick for `keysym`,
   * but only if it is on column 0, i.e. pressing it without modifiers gives
   * that keysym. Mirrors Xlib's column-major search.
   */
  keycodeOf(keysym: number): number | undefined {
    const { minKeycode, maxKeycode } = this.conn;
    for (let col = 0; col < this.perKeycode; col++) {
      for (let kc = minKeycode; kc <= maxKeycode; kc++) {
        if (this.sym(kc, col) === keysym) return col === 0 ? kc : undefined;
      }
    }
    return undefined;
  }

  /** Whether typing `keysym` takes one of our spare keycodes (it is bound there, or must be). */
  needsSlot(keysym: number): boolean {
    const kc = this.keycodeOf(keysym);
    return kc === undefined || this.slots.has(kc);
  }

  /** How many distinct extra keysyms can be bound at once. */
  get capacity(): number {
    return this.slots.size;
  }

  /** Makes every keysym pressable by keycode (binding spare keycodes), waiting for clients to catch up if anything changed. */
  async ensure(wanted: Iterable<number>, ctx: OpContext): Promise<void> {
    const keysyms = [...wanted];
    await this.refresh();
    const needed = new Set<number>();
    for (const ks of keysyms) if (this.keycodeOf(ks) === undefined) needed.add(ks);
    if (needed.size === 0) return;
    if (needed.size > this.slots.size) {
      throw new Error(`needs ${needed.size} spare keycodes, the keymap has ${this.slots.size}`);
    }
    // Free slots first, then least recently used, never one holding a keysym we still need.
    const keep = new Set(keysyms);
    const free = [...this.slots]
      .filter(([, ks]) => ks === 0 || !keep.has(ks))
      .sort(([, a], [, b]) => Number(a !== 0) - Number(b !== 0));
    const now = Date.now();
    let rebindingRecent = false;
    const plan: Array<[number, number]> = [];
    for (const ks of needed) {
      const [kc, old] = free.shift()!;
      if (old !== 0 && now - (this.lastUse.get(kc) ?? 0) < BIND_SETTLE_MS) rebindingRecent = true;
      plan.push([kc, ks]);
    }
    // A slot pressed moments ago may not have been read by the client yet: let it drain before changing the key's meaning.
    if (rebindingRecent) await sleep(BIND_SETTLE_MS, ctx);
    throwIfCancelled(ctx);
    for (const [kc, ks] of plan) {
      this.conn.changeKeyboardMapping(kc, ks);
      this.slots.delete(kc);
      this.slots.set(kc, ks); // most recently used last
    }
    await this.conn.sync();
    this.dirty = true;
    await this.refresh();
    log('debug', 'bound keysyms to spare keycodes', { keysyms: plan.map(([, ks]) => ks.toString(16)) });
    await sleep(BIND_SETTLE_MS, ctx);
    throwIfCancelled(ctx);
  }

  /** Presses or releases a keysym that `ensure` made pressable. Call sync() before handing over to libnut. */
  key(keysym: number, down: boolean): number {
    const kc = this.keycodeOf(keysym);
    if (kc === undefined) throw new Error(`keysym 0x${keysym.toString(16)} has no keycode`);
    this.toggleKeycode(kc, down);
    return kc;
  }

  toggleKeycode(kc: number, down: boolean): void {
    this.conn.fakeInput(this.xtest, down ? KEY_PRESS : KEY_RELEASE, kc);
    if (down) this.pressed.add(kc);
    else this.pressed.delete(kc);
    if (this.slots.has(kc)) {
      this.lastUse.set(kc, Date.now());
      const ks = this.slots.get(kc)!;
      this.slots.delete(kc);
      this.slots.set(kc, ks);
    }
  }

  /**
   * Releases every key and mouse button 1–3 the XTEST device holds. The
   * server drops releases for keys that are not down (checked with xev), so
   * this is safe, and it frees keys a killed worker left down: XTEST presses
   * outlive the client that made them (checked: a Shift held by an exited
   * xdotool made the next "a" arrive as "A").
   */
  async releaseEverything(): Promise<void> {
    for (let kc = this.conn.minKeycode; kc <= this.conn.maxKeycode; kc++) {
      this.conn.fakeInput(this.xtest, KEY_RELEASE, kc);
    }
    for (const b of [1, 2, 3]) this.conn.fakeInput(this.xtest, BUTTON_RELEASE, b);
    this.pressed.clear();
    await this.conn.sync();
  }

  /** Clears our bindings, leaving the keymap as we found it. */
  async unbindAll(): Promise<void> {
    for (const [kc, ks] of this.slots) if (ks !== 0) this.conn.changeKeyboardMapping(kc, 0);
    await this.conn.sync();
  }
}

// ---------------------------------------------------------------------------
// nut-js state

interface Devices {
  nut: Nut;
  keyboard: ReturnType<Nut['providerRegistry']['getKeyboard']>;
  /**
   * Undefined when the X client could not connect: ASCII then trusts a US
   * keymap, non-ASCII fails, and so does every pointer op.
   */
  xkb: XKeyboard | undefined;
  pointer: XPointer | undefined;
  xkbError: string | undefined;
}

let devicesPromise: Promise<Devices> | undefined;
let sharpModule: Sharp | undefined;

/** DriverKeys libnut cannot press on Linux: "menu" is an invalid key there, Pause maps to nothing. */
const LIBNUT_UNSUPPORTED: ReadonlySet<DriverKey> = new Set(['Menu', 'Pause']);

const nutPressed = new Set<DriverKey>();

function devices(): Promise<Devices> {
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
    return { nut, keyboard, xkb, pointer, xkbError };
  })();
  // A failed start (nut-js would not load) is retried by the next op rather than cached.
  devicesPromise.catch(() => {
    devicesPromise = undefined;
  });
  return devicesPromise;
}

function nutKey(d: Devices, key: DriverKey): number {
  const value = (d.nut.Key as unknown as Record<string, number>)[key];
  if (typeof value !== 'number' || !(key in KEYSYMS)) throw new Error(`unknown DriverKey ${JSON.stringify(key)}`);
  return value;
}

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
      nutPressed.add(key);
    } else {
      await this.d.keyboard.releaseKey(k);
      nutPressed.delete(key);
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
async function pressChord(d: Devices, keys: DriverKey[], ctx: OpContext): Promise<Pressed[]> {
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

async function releaseChord(d: Devices, pressed: Pressed[]): Promise<void> {
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
async function withModifiers<T>(
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

// ---------------------------------------------------------------------------
// Ops

function pointerOf(d: Devices): XPointer {
  if (!d.pointer) throw new Error(`cannot use the pointer: ${d.xkbError ?? 'no X client'}`);
  return d.pointer;
}

function button(b: unknown): MouseButton {
  if (b === 'left' || b === 'right' || b === 'middle') return b;
  throw new WorkerInputError(`unknown mouse button ${JSON.stringify(b)}; use left, right or middle`);
}

function intIn(name: string, v: unknown, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new WorkerInputError(`${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(v)}`);
  }
  return v;
}

function point(v: unknown, name = 'point'): Point {
  const p = v as Point;
  if (!p || !Number.isFinite(p.x) || !Number.isFinite(p.y))
    throw new WorkerInputError(`${name} must have numeric x and y`);
  return { x: Math.round(p.x), y: Math.round(p.y) };
}

function mouseButton(d: Devices, b: MouseButton, down: boolean): Promise<void> {
  return pointerOf(d).button(b, down);
}

async function displaySize(d: Devices): Promise<Size> {
  return { width: await d.nut.screen.width(), height: await d.nut.screen.height() };
}

function moveMouse(d: Devices, to: Point): Promise<void> {
  return pointerOf(d).move(to);
}

async function click(
  d: Devices,
  args: { button: unknown; count: unknown; modifiers: DriverKey[]; at?: unknown },
  ctx: OpContext,
): Promise<void> {
  const b = button(args.button);
  const count = intIn('count', args.count, 1, 3);
  // Moving first in the same op saves a round trip to this process per click.
  if (args.at !== undefined) await moveMouse(d, point(args.at, 'at'));
  await withModifiers(d, args.modifiers ?? [], ctx, async () => {
    // Press/release pairs CLICK_GAP_MS apart: apps count them as a double/triple
    // click (Chromium reports event.detail 2 and 3 and fires dblclick).
    for (let i = 0; i < count; i++) {
      if (i > 0) await sleep(CLICK_GAP_MS);
      await mouseButton(d, b, true);
      await mouseButton(d, b, false);
    }
  });
}

async function drag(
  d: Devices,
  args: { from: unknown; to: unknown; modifiers: DriverKey[] },
  ctx: OpContext,
): Promise<void> {
  const from = point(args.from, 'from');
  const to = point(args.to, 'to');
  await withModifiers(d, args.modifiers ?? [], ctx, async () => {
    await moveMouse(d, from);
    await mouseButton(d, 'left', true);
    try {
      // Intermediate motion with small pauses: toolkits start a drag only after
      // seeing the pointer move past a threshold while the button is down.
      const dist = Math.hypot(to.x - from.x, to.y - from.y);
      const steps = Math.min(40, Math.max(5, Math.ceil(dist / 25)));
      await sleep(DRAG_STEP_MS, ctx);
      for (let i = 1; i <= steps; i++) {
        throwIfCancelled(ctx);
        const t = i / steps;
        await moveMouse(d, {
          x: Math.round(from.x + (to.x - from.x) * t),
          y: Math.round(from.y + (to.y - from.y) * t),
        });
        await sleep(DRAG_STEP_MS, ctx);
      }
    } finally {
      await mouseButton(d, 'left', false);
    }
  });
}

async function scroll(
  d: Devices,
  args: { direction: ScrollDirection; amount: unknown; modifiers: DriverKey[] },
  ctx: OpContext,
): Promise<void> {
  const amount = intIn('amount', args.amount, 0, 1000);
  const direction = args.direction;
  if (!Object.hasOwn(WHEEL_BUTTONS, direction)) {
    throw new WorkerInputError(`unknown scroll direction ${JSON.stringify(direction)}`);
  }
  const pointer = pointerOf(d);
  // X wheel buttons 4-7; 'right' (button 7) gives deltaX > 0 in Chromium.
  await withModifiers(d, args.modifiers ?? [], ctx, () => pointer.wheel(direction, amount));
}

async function pressKeys(d: Devices, args: { chord: DriverKey[]; repeat: unknown }, ctx: OpContext): Promise<void> {
  const repeat = intIn('repeat', args.repeat, 1, 1000);
  if (!Array.isArray(args.chord) || args.chord.length === 0) throw new WorkerInputError('no key to press');
  for (let i = 0; i < repeat; i++) {
    throwIfCancelled(ctx);
    const held = await pressChord(d, args.chord, ctx);
    await releaseChord(d, held);
    if (i % YIELD_EVERY_KEYS === YIELD_EVERY_KEYS - 1) await yieldToLoop();
  }
}

async function holdKeys(d: Devices, args: { chord: DriverKey[]; durationMs: unknown }, ctx: OpContext): Promise<void> {
  const duration = intIn('durationMs', args.durationMs, 0, 600_000);
  if (!Array.isArray(args.chord) || args.chord.length === 0) throw new WorkerInputError('no key to hold');
  const held = await pressChord(d, args.chord, ctx);
  try {
    await sleep(duration, ctx); // ends early on cancel
  } finally {
    await releaseChord(d, held);
  }
  throwIfCancelled(ctx);
}

type TypeItem = { via: 'nut'; stroke: Stroke } | { via: 'x'; keysym: number };

async function typeText(d: Devices, args: { text: unknown }, ctx: OpContext): Promise<void> {
  if (typeof args.text !== 'string') throw new WorkerInputError('text must be a string');
  const text = args.text;
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

/** When the last input op (pointer or keyboard) ended, for the settle step. */
let lastInputAt = -Infinity;
const INPUT_OPS = new Set([
  'moveMouse',
  'click',
  'mouseDown',
  'mouseUp',
  'drag',
  'scroll',
  'pressKeys',
  'holdKeys',
  'typeText',
]);

async function capture(d: Devices, options: CaptureOptions, ctx: OpContext): Promise<CapturedImage> {
  const out = options.output;
  intIn('output.width', out?.width, 1, 16384);
  intIn('output.height', out?.height, 1, 16384);
  const screenSize = await displaySize(d);
  let region: Rect | undefined = options.region;
  if (region) {
    const { x, y, width, height } = region;
    const ok =
      [x, y, width, height].every(Number.isInteger) &&
      x >= 0 &&
      y >= 0 &&
      width >= 1 &&
      height >= 1 &&
      x + width <= screenSize.width &&
      y + height <= screenSize.height;
    // libnut would ask X for pixels off the screen: BadMatch, and Xlib exits the process.
    if (!ok) {
      throw new WorkerInputError(
        `capture region ${JSON.stringify(region)} is not inside the ${screenSize.width}x${screenSize.height} display`,
      );
    }
    if (x === 0 && y === 0 && width === screenSize.width && height === screenSize.height) region = undefined;
  }
  const area = region;
  const grab = () =>
    area ? d.nut.screen.grabRegion(new d.nut.Region(area.x, area.y, area.width, area.height)) : d.nut.screen.grab();
  let img = await grab();
  let settled: CapturedImage['settled'];
  const settle = options.settle;
  if (settle && performance.now() - lastInputAt < settle.afterInputMs) {
    // Grab until two frames in a row match (the app finished drawing), or the cap.
    const t0 = performance.now();
    let frames = 1;
    let stable = false;
    while (!stable && performance.now() - t0 + settle.intervalMs <= settle.maxMs) {
      await sleep(settle.intervalMs, ctx);
      throwIfCancelled(ctx);
      const next = await grab();
      frames++;
      stable = next.data.equals(img.data);
      img = next;
    }
    settled = { ms: Math.round(performance.now() - t0), frames, stable };
  }
  const rgb = bgrxToRgb(img.data, img.width, img.height, img.byteWidth);
  sharpModule ??= (await import('sharp')).default;
  let pipeline = sharpModule(rgb, { raw: { width: img.width, height: img.height, channels: 3 } });
  if (img.width !== out.width || img.height !== out.height) {
    // lanczos3 (sharp's default) keeps small UI text legible when shrinking, and is fine for zoom upscaling.
    pipeline = pipeline.resize(out.width, out.height, { fit: 'fill', kernel: 'lanczos3' });
  }
  const quality = Math.min(100, Math.max(1, Math.round(options.quality || 80)));
  let data: Buffer;
  let mediaType: CapturedImage['mediaType'];
  switch (options.format) {
    case 'png':
      // Level 1 without adaptive filtering: measured ~10x faster to encode than
      // with adaptive filtering; the bytes only cross a local socket.
      data = await pipeline.png({ compressionLevel: 1, adaptiveFiltering: false }).toBuffer();
      mediaType = 'image/png';
      break;
    case 'jpeg':
      data = await pipeline.jpeg({ quality }).toBuffer();
      mediaType = 'image/jpeg';
      break;
    case 'webp':
      // effort 2 instead of 4 halves the encode time for a few % more bytes.
      data = await pipeline.webp({ quality, effort: 2 }).toBuffer();
      mediaType = 'image/webp';
      break;
    default:
      throw new WorkerInputError(`unknown image format ${JSON.stringify(options.format)}`);
  }
  return { data, mediaType, width: out.width, height: out.height, ...(settled ? { settled } : {}) };
}

/**
 * nut-js returns 4 bytes per pixel in B,G,R,X order, rows `byteWidth` apart.
 * The 4th byte is NOT alpha (docs/MEASURED.md): giving it to sharp as RGBA yields
 * mostly black images, so we copy out 3-channel RGB.
 */
function bgrxToRgb(src: Buffer, width: number, height: number, byteWidth: number): Buffer {
  const out = Buffer.allocUnsafe(width * height * 3);
  let o = 0;
  for (let y = 0; y < height; y++) {
    let i = y * byteWidth;
    for (let x = 0; x < width; x++, i += 4) {
      out[o++] = src[i + 2]!;
      out[o++] = src[i + 1]!;
      out[o++] = src[i]!;
    }
  }
  return out;
}

/** Releases every key and button we (or a dead predecessor) may hold. */
async function releaseAll(d: Devices): Promise<void> {
  const errors: unknown[] = [];
  for (const key of [...nutPressed].reverse()) {
    try {
      await d.keyboard.releaseKey(nutKey(d, key));
    } catch (err) {
      errors.push(err);
    }
  }
  nutPressed.clear();
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

// ---------------------------------------------------------------------------
// Message loop

interface Request {
  id: number;
  op: string;
  args?: Record<string, unknown>;
}

let current: { id: number; ctx: OpContext } | undefined;
let chain: Promise<void> = Promise.resolve();
let shuttingDown = false;

async function run(op: string, args: Record<string, unknown>, ctx: OpContext): Promise<unknown> {
  if (!INPUT_OPS.has(op)) return runOp(op, args, ctx);
  try {
    return await runOp(op, args, ctx);
  } finally {
    lastInputAt = performance.now();
  }
}

async function runOp(op: string, args: Record<string, unknown>, ctx: OpContext): Promise<unknown> {
  const d = await devices();
  switch (op) {
    case 'displaySize':
      return displaySize(d);
    case 'cursorPosition': {
      return pointerOf(d).position();
    }
    case 'moveMouse':
      return moveMouse(d, point(args.to, 'to'));
    case 'click':
      return click(d, args as never, ctx);
    case 'mouseDown':
      return mouseButton(d, button(args.button), true);
    case 'mouseUp':
      return mouseButton(d, button(args.button), false);
    case 'drag':
      return drag(d, args as never, ctx);
    case 'scroll':
      return scroll(d, args as never, ctx);
    case 'pressKeys':
      return pressKeys(d, args as never, ctx);
    case 'holdKeys':
      return holdKeys(d, args as never, ctx);
    case 'typeText':
      return typeText(d, args as never, ctx);
    case 'capture':
      return capture(d, args.options as CaptureOptions, ctx);
    case 'releaseAll':
      return releaseAll(d);
    default:
      throw new Error(`unknown op ${JSON.stringify(op)}`);
  }
}

function reply(msg: object): void {
  if (process.connected) process.send!(msg);
}

/** Best-effort cleanup, then exit. Never loads nut-js just to clean up. */
async function shutdown(code: number, id?: number): Promise<void> {
  if (shuttingDown) return;
  shuttingDown = true;
  if (current) {
    current.ctx.cancelled = true;
    current.ctx.wake?.();
  }
  if (devicesPromise) {
    try {
      const d = await devicesPromise;
      await chain.catch(() => {}); // let the cancelled op release what it holds
      await releaseAll(d);
      if (d.xkb && !d.xkb.conn.closed) {
        d.xkb.conn.onClose = () => {};
        await d.xkb.unbindAll();
        d.xkb.conn.close();
      }
    } catch (err) {
      log('warn', 'cleanup on exit failed', { error: (err as Error).message });
    }
  }
  if (id !== undefined && process.connected) {
    process.send!({ id, ok: true, result: null }, () => process.exit(code));
    setTimeout(() => process.exit(code), 500).unref();
  } else {
    process.exit(code);
  }
}

process.on('message', (raw: unknown) => {
  const msg = raw as Request;
  if (msg.op === 'cancel') {
    if (current && current.id === msg.id) {
      current.ctx.cancelled = true;
      current.ctx.wake?.();
    }
    return;
  }
  if (msg.op === 'shutdown') {
    void shutdown(0, msg.id);
    return;
  }
  chain = chain.then(async () => {
    const ctx: OpContext = { cancelled: false };
    current = { id: msg.id, ctx };
    try {
      const result = await run(msg.op, msg.args ?? {}, ctx);
      reply({ id: msg.id, ok: true, result: result ?? null });
    } catch (err) {
      const e = err as Error;
      reply({ id: msg.id, ok: false, error: { name: e?.name ?? 'Error', message: e?.message ?? String(err) } });
    } finally {
      current = undefined;
    }
  });
});

// Parent gone (crash or kill): release what we hold and leave.
process.on('disconnect', () => void shutdown(0));
process.on('SIGTERM', () => void shutdown(0));
process.on('SIGINT', () => void shutdown(0));

// Load nut-js and connect to X before saying ready, so the parent's start timeout covers that
// (0.9-2.8 s measured) rather than the first op's deadline: with a short --call-timeout-ms the
// first op was killed every time, and the worker never became usable. A failure here is
// reported by the first op that needs the devices.
await devices().catch(() => undefined);
reply({ type: 'ready' });
