/**
 * The keymap, through the worker's own X11 client (x11.ts): reading it, and
 * binding keysyms it lacks to spare keycodes, for what nut-js cannot type
 * safely (worker.ts says which keys, and why not `xdotool type`).
 */
import { keyboardTarget, KeymapReads, REREAD_CAP_MS } from '../keymap-reads.ts';
import { BUTTON_RELEASE, KEY_PRESS, KEY_RELEASE, SLOTS_PROPERTY, XConnection } from '../x11.ts';
import { log, sleep, throwIfCancelled, type OpContext } from './context.ts';

/**
 * The fixed wait after changing the keyboard mapping, used only where the
 * focused client's own re-read cannot be seen (keymap-reads.ts): no RECORD
 * extension, no focused window, or a client that reads lazily. Chromium was
 * exact from 5 ms on a quiet machine; under load 12-20 even 50 ms sometimes
 * lost the first new character, which is why the re-read is awaited instead.
 */
const BIND_SETTLE_MS = 50;
/**
 * The pause before re-binding a slot pressed less than this ago: the focused
 * client translates a key when it handles the event, which a loaded client
 * does late. 50 ms let Chromium, under the load of the pool tests beside it,
 * type a later chunk's characters in place of the ones pressed before (a
 * fresh-clone run of test/desktop-keyboard.test.ts "typing more distinct
 * characters than spare keycodes"). Only texts with more distinct unusual
 * characters than spare keycodes pay it, once per extra chunk.
 */
const REBIND_DRAIN_MS = 250;
/**
 * The live keymap plus our bindings of extra keysyms on spare keycodes.
 * Keycodes found empty (all NoSymbol) are spare; we bind [keysym, keysym] on
 * them, like xdotool, and keep the binding until the slot is needed again
 * (least recently used first).
 */
export class XKeyboard {
  private perKeycode = 0;
  private keysyms: Uint32Array = new Uint32Array(0);
  private dirty = true;
  /** Spare keycodes → the keysym we bound there (0 = free), in LRU order (Map insertion order). */
  private slots = new Map<number, number>();
  private slotsFound = false;
  /** When each slot was last pressed (for the settle before rebinding it). */
  private lastUse = new Map<number, number>();
  readonly pressed = new Set<number>();
  /** Our keymap changes since `reads` began recording. */
  private changes = 0;
  /**
   * Clients (resource id bases) seen not to re-read the keymap within
   * REREAD_CAP_MS (keymap-reads.ts): they may read when the key arrives, as
   * Xlib's XLookupString does, so they are waited for only up to
   * BIND_SETTLE_MS, until they are seen to re-read again.
   */
  private readonly lazyReaders = new Set<number>();

  constructor(
    readonly conn: XConnection,
    readonly xtest: number,
    private readonly reads: KeymapReads | undefined,
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
    let reads: KeymapReads | undefined;
    try {
      reads = await KeymapReads.open(display, conn);
      if (!reads) log('info', 'the X server has no RECORD extension; binding new characters uses a fixed wait');
    } catch (err) {
      log('warn', 'cannot record keymap reads; binding new characters uses a fixed wait', {
        error: (err as Error).message,
      });
    }
    return new XKeyboard(conn, xtest, reads);
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
      if (old !== 0 && now - (this.lastUse.get(kc) ?? 0) < REBIND_DRAIN_MS) rebindingRecent = true;
      plan.push([kc, ks]);
    }
    // A slot pressed moments ago may not have been read by the client yet: let it drain before changing the key's meaning.
    if (rebindingRecent) await sleep(REBIND_DRAIN_MS, ctx);
    throwIfCancelled(ctx);
    for (const [kc, ks] of plan) {
      this.changeMapping(kc, ks);
      this.slots.delete(kc);
      this.slots.set(kc, ks); // most recently used last
    }
    await this.conn.sync();
    this.dirty = true;
    await this.refresh();
    log('debug', 'bound keysyms to spare keycodes', { keysyms: plan.map(([, ks]) => ks.toString(16)) });
    await this.awaitReread(ctx);
    throwIfCancelled(ctx);
  }

  private changeMapping(keycode: number, keysym: number): void {
    this.conn.changeKeyboardMapping(keycode, keysym);
    this.changes++;
  }

  /**
   * Waits until the focused window's client has re-read the keymap since our
   * last change: up to REREAD_CAP_MS, or BIND_SETTLE_MS for a client seen not
   * to re-read on its own (it is trusted again once it does).
   */
  private async awaitReread(ctx: OpContext): Promise<void> {
    const start = performance.now();
    const focus = this.reads && !ctx.cancelled ? await keyboardTarget(this.conn) : 0;
    const client = focus ? this.reads!.owner(focus) : 0;
    // 0: nothing to wait for (and X-Resource would read client 0 as every client).
    if (client === 0) return sleep(BIND_SETTLE_MS, ctx);
    const lazy = this.lazyReaders.has(client);
    const cap = lazy ? BIND_SETTLE_MS : REREAD_CAP_MS;
    const read = await this.reads!.waitForRead(focus, this.changes, cap, (abort) => (ctx.wake = abort));
    ctx.wake = undefined;
    const ms = Math.round(performance.now() - start);
    if (read) {
      this.lazyReaders.delete(client);
      log('debug', 'the focused client re-read the keymap', { ms });
    } else if (!ctx.cancelled && !lazy) {
      this.lazyReaders.add(client);
      log('info', 'the focused client did not re-read the keymap; waiting only briefly for it until it does', { ms });
    }
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
    for (const [kc, ks] of this.slots) if (ks !== 0) this.changeMapping(kc, 0);
    await this.conn.sync();
  }
}
