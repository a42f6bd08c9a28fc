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
 *   the window under the pointer and waits until it has, so the click, and
 *   any typing after it, reaches that window, as with a person's click.
 */
import type { MouseButton } from './driver.ts';
import type { Point } from '../base/geometry.ts';
import { BUTTON_PRESS, BUTTON_RELEASE, type XConnection } from './x11.ts';

const MOTION_BUTTONS: Record<MouseButton, number> = { left: 1, middle: 2, right: 3 };
/** X wheel buttons: 4 up, 5 down, 6 left, 7 right. */
export const WHEEL_BUTTONS = { up: 4, down: 5, left: 6, right: 7 } as const;
/** How long a press waits for the window manager to activate the window under the pointer. */
const ACTIVATE_WAIT_MS = 1_000;
const ACTIVATE_POLL_MS = 2;
/** EWMH source indication: a pager (or other user-driven tool). Window managers honour it without focus-stealing checks. */
const SOURCE_PAGER = 2;

export class XPointer {
  private atoms: { active: number; wmState: number } | undefined;
  /** Top-level window (a frame, under a reparenting window manager) → its client window. */
  private readonly clients = new Map<number, number>();
  readonly down = new Set<MouseButton>();

  constructor(
    private readonly conn: XConnection,
    private readonly xtest: number,
    private readonly log: (msg: string, fields: object) => void,
  ) {}

  async move(to: Point): Promise<void> {
    this.conn.fakeMotion(this.xtest, to.x, to.y);
    await this.conn.sync();
  }

  async position(): Promise<Point> {
    const { x, y } = await this.conn.queryPointer();
    return { x, y };
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
    const detail = WHEEL_BUTTONS[direction];
    for (let i = 0; i < clicks; i++) {
      this.conn.fakeInput(this.xtest, BUTTON_PRESS, detail);
      this.conn.fakeInput(this.xtest, BUTTON_RELEASE, detail);
    }
    await this.conn.sync();
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
    const { child } = await this.conn.queryPointer();
    if (child === 0) return;
    this.atoms ??= {
      active: await this.conn.internAtom('_NET_ACTIVE_WINDOW'),
      wmState: await this.conn.internAtom('WM_STATE'),
    };
    const client = await this.clientOf(child);
    if (client === 0) return;
    if ((await this.conn.getRootWindow(this.atoms.active)) === client) return;
    this.conn.sendToWindowManager(client, this.atoms.active, [SOURCE_PAGER, 0, 0]);
    const deadline = performance.now() + ACTIVATE_WAIT_MS;
    while ((await this.conn.getRootWindow(this.atoms.active)) !== client) {
      if (performance.now() > deadline) {
        // No window manager, or one that refused: click anyway, as the press would without one.
        this.log('window manager did not activate the window under the pointer', { window: client });
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, ACTIVATE_POLL_MS));
    }
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
