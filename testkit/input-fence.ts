/**
 * A fence for input events: waits until a page has handled every X input
 * event that any client sent to the display before the fence.
 *
 * The X server takes XTEST input in the order its requests arrive, delivers
 * the events to a window in that order, and Chromium dispatches them to the
 * page in that order (moves are only ever delayed to the next frame, never
 * sent early). So a pointer move sent now, on this fence's own X connection,
 * reaches the page after everything sent before it: once the page reports
 * that move, every earlier click, key and wheel event is in its record. A test
 * can then assert exactly what arrived, and that something did NOT arrive,
 * without sleeping and hoping.
 *
 * The marker moves the pointer to (1, height - 2), then (2, height - 2): at
 * least one of the two is a real move wherever the pointer was. The page must
 * record moves in `window.__lastMove` with a `performance.now()` time, as the
 * event recorder page (event-page.ts) does. A page that does not start at the
 * screen's top-left corner (a browser window with a toolbar above the page)
 * passes its `origin` to `open`; the marker must still land on the page.
 *
 * Wheel events are the exception: Chromium queues them apart and sends the
 * next only when the page has handled the one before, so a later move can
 * overtake them. `passWheel` is their fence: a Ctrl+wheel marker (the event
 * page records it and prevents it, so nothing scrolls or zooms) that arrives
 * after every earlier wheel event. The marker's wheel and its Control
 * key events stay in the record; `isWheelMarker` picks them out.
 */
import type { Page } from 'playwright';
import { BUTTON_PRESS, BUTTON_RELEASE, KEY_PRESS, KEY_RELEASE, XConnection } from '../src/desktop-driver/x11.ts';
import type { RecordedEvent } from './event-page.ts';

const FENCE_TIMEOUT_MS = 10_000;
const POLL_MS = 10;
const CONTROL_L = 0xffe3;
const WHEEL_DOWN = 5;

/** Whether `e` is part of a `passWheel` marker (a Ctrl+wheel, or its Control key). */
export function isWheelMarker(e: RecordedEvent): boolean {
  return (e.type === 'wheel' && e.ctrlKey) || ((e.type === 'keydown' || e.type === 'keyup') && e.key === 'Control');
}

export class InputFence {
  private constructor(
    private readonly conn: XConnection,
    private readonly xtest: number,
    private readonly height: number,
    private readonly origin: { x: number; y: number } = { x: 0, y: 0 },
  ) {}

  /** `origin`: the screen point of the page's client (0, 0); default the screen's top-left corner. */
  static async open(
    display: string,
    height: number,
    origin: { x: number; y: number } = { x: 0, y: 0 },
  ): Promise<InputFence> {
    const conn = await XConnection.open(display);
    const xtest = await conn.queryExtension('XTEST');
    if (xtest === undefined) {
      conn.close();
      throw new Error(`the X server on ${display} has no XTEST extension`);
    }
    return new InputFence(conn, xtest, height, origin);
  }

  /** Sends the marker and waits until `page` has seen it. Leaves the pointer at (2, height - 2). */
  async pass(page: Page): Promise<void> {
    const since = (await page.evaluate('performance.now()')) as number;
    const x = 2;
    const y = this.height - 2;
    this.conn.fakeMotion(this.xtest, 1, y);
    this.conn.fakeMotion(this.xtest, x, y);
    await this.conn.sync();
    // Where the page sees the marker: the same point unless the page starts elsewhere on the screen.
    const cx = x - this.origin.x;
    const cy = y - this.origin.y;
    const where = cx === x && cy === y ? '' : ` (page (${cx}, ${cy}))`;
    await this.waitOnPage(
      page,
      `the marker move to (${x}, ${y})${where}`,
      `(() => { const m = window.__lastMove; return !!m && m.time > ${since} && m.clientX === ${cx} && m.clientY === ${cy}; })()`,
      'window.__lastMove',
    );
  }

  /** Sends a Ctrl+wheel marker where the pointer is and waits until `page` has recorded it (see above). */
  async passWheel(page: Page): Promise<void> {
    const since = (await page.evaluate('performance.now()')) as number;
    const control = await this.keycodeOf(CONTROL_L);
    this.conn.fakeInput(this.xtest, KEY_PRESS, control);
    this.conn.fakeInput(this.xtest, BUTTON_PRESS, WHEEL_DOWN);
    this.conn.fakeInput(this.xtest, BUTTON_RELEASE, WHEEL_DOWN);
    this.conn.fakeInput(this.xtest, KEY_RELEASE, control);
    await this.conn.sync();
    await this.waitOnPage(
      page,
      'the Ctrl+wheel marker',
      `window.__events.some((e) => e.type === 'wheel' && e.ctrlKey && e.time > ${since})`,
      `window.__events.filter((e) => e.type === 'wheel')`,
    );
  }

  private async keycodeOf(keysym: number): Promise<number> {
    const { perKeycode, keysyms } = await this.conn.getKeyboardMapping();
    const i = keysyms.indexOf(keysym);
    if (i < 0 || perKeycode === 0) throw new Error(`input fence: no keycode for keysym 0x${keysym.toString(16)}`);
    return this.conn.minKeycode + Math.floor(i / perKeycode);
  }

  private async waitOnPage(page: Page, what: string, condition: string, seen: string): Promise<void> {
    const deadline = Date.now() + FENCE_TIMEOUT_MS;
    while (!(await page.evaluate(condition))) {
      if (Date.now() > deadline) {
        throw new Error(
          `input fence: the page did not report ${what} within ${FENCE_TIMEOUT_MS} ms; it saw: ` +
            JSON.stringify(await page.evaluate(seen)),
        );
      }
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  }

  close(): void {
    this.conn.close();
  }
}
