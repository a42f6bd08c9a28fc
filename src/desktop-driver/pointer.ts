/**
 * The pointer, driven through the desktop worker's own X connection (x11.ts).
 *
 * Every motion, button and wheel event is an XTEST fake input on one
 * connection, so the X server takes them in the order they were sent. Two
 * things used to break that order, and each misplaced clicks (measured: 7 in
 * 100 batches of five clicks on a 2560x1440 display; a click's release and the
 * next click's press landed at the following target):
 * - Warping the pointer (XWarpPointer, what libnut's setPosition does) moves
 *   it at once, while button events may still be queued behind a grab; the
 *   queued release then happens at the new position.
 * - A window manager's click-to-focus grab (openbox's `Press` binding in the
 *   `Client` context) freezes the pointer on every press until the window
 *   manager replays it; under fast input, presses and releases were lost
 *   around that replay. So our openbox config (xvfb.ts) binds nothing on
 *   client windows, and `press` below gives click-to-focus itself: before a
 *   press it asks the window manager (EWMH `_NET_ACTIVE_WINDOW`) to activate
 *   the window under the pointer and waits until it has (and the focus is in
 *   it), so the click, and any typing after it, reaches that window, as with
 *   a person's click.
 */
import type { MouseButton } from './driver.ts';
import type { Point } from '../base/geometry.ts';
import { BUTTON_PRESS, BUTTON_RELEASE, POINTER_ROOT, type XConnection } from './x11.ts';

const MOTION_BUTTONS: Record<MouseButton, number> = { left: 1, middle: 2, right: 3 };
/** X wheel buttons: 4 up, 5 down, 6 left, 7 right. */
export const WHEEL_BUTTONS = { up: 4, down: 5, left: 6, right: 7 } as const;
/**
 * Pause between the clicks of a double/triple click. Back to back, two presses
 * can get the same X timestamp (ms), and Chromium then treats the second as the
 * same native event, not a repeat: measured detail [1, 1, 2] for a triple click.
 */
export const CLICK_GAP_MS = 10;
/** How long a press waits for the window manager to activate the window under the pointer. */
const ACTIVATE_WAIT_MS = 1_000;
const ACTIVATE_POLL_MS = 2;
/** EWMH source indication: a pager (or other user-driven tool). Window managers honour it without focus-stealing checks. */
const SOURCE_PAGER = 2;

export class XPointer {
  private atoms: { active: number; wmState: number } | undefined;
  /** The top-level window of the last activation, and its client window. */
  private last: { frame: number; client: number } | undefined;
  /** Top-level window (a frame, under a reparenting window manager) → its client window. */
  private readonly clients = new Map<number, number>();
  readonly down = new Set<MouseButton>();

  constructor(
    private readonly conn: XConnection,
    private readonly xtest: number,
    private readonly log: (msg: string, fields: object) => void,
  ) {}

  async move(to: Point): Promise<void> {
    this.sendMove(to);
    await this.conn.sync();
  }

  /** The motion, sent (in this turn's write) and not waited for: a sync after it, or a later request's reply. */
  sendMove(to: Point): void {
    this.conn.fakeMotion(this.xtest, to.x, to.y);
  }

  async position(): Promise<Point> {
    const { x, y } = await this.conn.queryPointer();
    return { x, y };
  }

  /**
   * `count` presses and releases of `b`, CLICK_GAP_MS apart (apps count them
   * as a double or triple click), at `at` if given. A click on the window
   * clicked last, already active (the usual case), is two round trips to the X
   * server: the activation's questions, sent together after the motion (which
   * needs no sync of its own: one connection, one order), and the press and
   * release sent together with the closing sync. A press and its release are
   * never split: a cancelled click leaves no button down.
   */
  async click(b: MouseButton, count: number, at?: Point): Promise<void> {
    await this.sendClick(b, count, at);
    await this.conn.sync();
  }

  /**
   * The click, sent: it resolves once the last press and release are written, before the X server answers.
   * `beforeLastPress` is called just before the last press is written.
   */
  async sendClick(b: MouseButton, count: number, at?: Point, beforeLastPress?: () => void): Promise<void> {
    if (at) this.sendMove(at);
    for (let i = 0; i < count; i++) {
      if (i > 0) await new Promise((resolve) => setTimeout(resolve, CLICK_GAP_MS));
      await this.activateUnderPointer();
      if (i === count - 1) beforeLastPress?.();
      this.conn.fakeInput(this.xtest, BUTTON_PRESS, MOTION_BUTTONS[b]);
      this.conn.fakeInput(this.xtest, BUTTON_RELEASE, MOTION_BUTTONS[b]);
    }
  }

  async button(b: MouseButton, down: boolean): Promise<void> {
    if (down) await this.activateUnderPointer();
    this.conn.fakeInput(this.xtest, down ? BUTTON_PRESS : BUTTON_RELEASE, MOTION_BUTTONS[b]);
    await this.conn.sync();
    if (down) this.down.add(b);
    else this.down.delete(b);
  }

  /** `clicks` presses and releases of a wheel button. */
  async wheel(direction: keyof typeof WHEEL_BUTTONS, clicks: number): Promise<void> {
    this.sendWheel(direction, clicks);
    await this.conn.sync();
  }

  /** The wheel clicks, sent and not waited for. */
  sendWheel(direction: keyof typeof WHEEL_BUTTONS, clicks: number): void {
    const detail = WHEEL_BUTTONS[direction];
    for (let i = 0; i < clicks; i++) {
      this.conn.fakeInput(this.xtest, BUTTON_PRESS, detail);
      this.conn.fakeInput(this.xtest, BUTTON_RELEASE, detail);
    }
  }

  /** Releases the buttons we hold. */
  async releaseAll(): Promise<void> {
    for (const b of this.down) this.conn.fakeInput(this.xtest, BUTTON_RELEASE, MOTION_BUTTONS[b]);
    this.down.clear();
    await this.conn.sync();
  }

  /**
   * Click-to-focus: activates the managed window under the pointer, unless it
   * is active already, and waits (up to ACTIVATE_WAIT_MS) until the window
   * manager says it is. Windows nobody manages (menus, tooltips, the root)
   * are left alone, as a window manager would.
   */
  private async activateUnderPointer(): Promise<void> {
    try {
      await this.activate();
    } catch (err) {
      // The window went away while we looked (an X error): the press goes to whatever is there now.
      if (this.conn.closed) throw err;
      this.log('could not activate the window under the pointer', { error: (err as Error).message });
    }
  }

  private async activate(): Promise<void> {
    this.atoms ??= await this.internAtoms();
    const { active, wmState } = this.atoms;
    // One round trip asks all a click on the window clicked last needs (the usual case): which
    // top-level window is under the pointer, which window is active, and whether the client
    // window found under that top-level last time is still a client.
    const last = this.last;
    const [{ child }, activeNow, focusNow, lastStill] = await Promise.all([
      this.conn.queryPointer(),
      this.conn.getRootWindow(active),
      this.conn.inputFocus(),
      last ? this.conn.hasProperty(last.client, wmState).catch(() => false) : false,
    ]);
    if (child === 0) return;
    const client = last && lastStill && last.frame === child ? last.client : await this.clientOf(child);
    if (client === 0) return;
    this.last = { frame: child, client };
    if (await this.isActive(client, activeNow, focusNow)) return;
    this.conn.sendToWindowManager(client, active, [SOURCE_PAGER, 0, 0]);
    const deadline = performance.now() + ACTIVATE_WAIT_MS;
    while (!(await this.isActive(client))) {
      if (performance.now() > deadline) {
        // No window manager, or one that refused: click anyway, as the press would without one.
        this.log('window manager did not activate the window under the pointer', { window: client });
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, ACTIVATE_POLL_MS));
    }
  }

  /**
   * Whether `client` is active: the window manager says so and the keyboard
   * focus is in it. The window manager's word alone can be stale: openbox
   * moves the focus to a new window first and updates `_NET_ACTIVE_WINDOW`
   * only when its FocusIn event comes back, and a click in that gap, on the
   * window active before, went unactivated and its typing went to the new one.
   */
  private async isActive(client: number, activeNow?: number, focusNow?: number): Promise<boolean> {
    [activeNow, focusNow] = await Promise.all([
      activeNow ?? this.conn.getRootWindow(this.atoms!.active),
      focusNow ?? this.conn.inputFocus(),
    ]);
    if (activeNow !== client) return false;
    // The focus is on the client window itself (the usual case), or on one of its descendants.
    for (let w = focusNow, depth = 0; w > POINTER_ROOT && depth < 8; depth++) {
      if (w === client) return true;
      if (w === this.conn.root) return false;
      w = await this.conn.parentOf(w);
    }
    return false;
  }

  private async internAtoms(): Promise<{ active: number; wmState: number }> {
    const [active, wmState] = await Promise.all([
      this.conn.internAtom('_NET_ACTIVE_WINDOW'),
      this.conn.internAtom('WM_STATE'),
    ]);
    return { active, wmState };
  }

  /**
   * The client window (the one with WM_STATE) at or below top-level `window`,
   * 0 if none. Cached per top-level window, and checked again on use (one
   * round trip instead of a walk), since windows come and go.
   */
  private async clientOf(window: number): Promise<number> {
    const known = this.clients.get(window);
    if (known !== undefined) {
      const still = await this.conn.hasProperty(known, this.atoms!.wmState).catch(() => false);
      if (still) return known;
      this.clients.delete(window);
    }
    let found = 0;
    let level = [window];
    for (let depth = 0; depth < 4 && level.length && !found; depth++) {
      const next: number[] = [];
      for (const w of level) {
        if (await this.conn.hasProperty(w, this.atoms!.wmState)) {
          found = w;
          break;
        }
        next.push(...(await this.conn.queryTree(w)));
      }
      level = next;
    }
    if (found !== 0) {
      if (this.clients.size >= 1_000) this.clients.clear();
      this.clients.set(window, found);
    }
    return found;
  }
}
