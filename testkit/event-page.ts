/**
 * A local HTTP server for desktop tests, serving an "event recorder" page.
 *
 * Drive the real desktop (xdotool, the daemon, nut-js), then read what the page
 * saw through Playwright: `await readEvents(page)`, or
 * `page.evaluate('window.__events')`.
 *
 * Page layout (the page has no margins and never scrolls itself; coordinates
 * are CSS pixels = screen pixels when the page is shown with
 * testkit/chromium.ts):
 *
 *   +----------------------------+----------------------------+
 *   | <textarea id="t">          | <div id="scroll">          |  top half
 *   |  left half, top half       |  right half, top half;     |
 *   |                            |  content 4000x4000 px, so  |
 *   |                            |  it scrolls both ways      |
 *   +----------------------------+----------------------------+
 *   | <div id="pad">: bottom half, full width, a plain target  |  bottom half
 *   +---------------------------------------------------------+
 *
 * `await elementRect(page, 'scroll')` gives an element's box if a test needs
 * exact numbers.
 *
 * What lands in `window.__events` (an array, oldest first). Every entry has
 * `type`, `target` (the id of the nearest element with one, else its tag
 * name), and `time` (performance.now(), ms):
 * - mousedown, mouseup, click, dblclick, auxclick, contextmenu: `button`,
 *   `buttons`, `detail` (click count), clientX/Y, screenX/Y, and the modifier
 *   flags shiftKey, ctrlKey, altKey, metaKey. contextmenu is prevented, so no
 *   native menu opens and grabs the pointer.
 * - mousemove: coalesced: consecutive moves update one entry (`count` of moves
 *   so far, last `buttons`, clientX/Y, screenX/Y, modifiers). Chromium itself
 *   coalesces moves under load, so `count` is not a number to assert on. `window.__lastMove` is
 *   always the latest move.
 * - wheel: deltaX, deltaY, deltaMode, clientX/Y, modifiers. Ctrl+wheel is
 *   prevented so the page never zooms (which would break the pixel mapping).
 * - scroll (of #scroll only): coalesced like mousemove, scrollLeft, scrollTop.
 * - keydown, keyup: key, code, repeat, modifiers, and `stamp` (the event's timeStamp).
 * - input (of #t): inputType, data, value (the whole textarea value).
 * - focus / blur of the window (`target: 'window'`), to debug focus problems.
 *
 * `window.__reset()` clears the events, the textarea and the scroll positions.
 * `window.__ready` is true once the listeners are installed.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Page } from 'playwright';
import { until } from './wait.ts';

export interface Modifiers {
  shiftKey: boolean;
  ctrlKey: boolean;
  altKey: boolean;
  metaKey: boolean;
}

export interface RecordedMouseEvent extends Modifiers {
  type: 'mousedown' | 'mouseup' | 'click' | 'dblclick' | 'auxclick' | 'contextmenu';
  target: string;
  time: number;
  button: number;
  buttons: number;
  detail: number;
  clientX: number;
  clientY: number;
  screenX: number;
  screenY: number;
}

export interface RecordedMouseMove extends Modifiers {
  type: 'mousemove';
  buttons: number;
  target: string;
  time: number;
  count: number;
  clientX: number;
  clientY: number;
  screenX: number;
  screenY: number;
}

export interface RecordedWheel extends Modifiers {
  type: 'wheel';
  target: string;
  time: number;
  deltaX: number;
  deltaY: number;
  deltaMode: number;
  clientX: number;
  clientY: number;
}

export interface RecordedScroll {
  type: 'scroll';
  target: string;
  time: number;
  count: number;
  scrollLeft: number;
  scrollTop: number;
}

export interface RecordedKey extends Modifiers {
  type: 'keydown' | 'keyup';
  target: string;
  time: number;
  /**
   * The event's own timeStamp: when the X server made it (Chromium converts
   * the X event time), not when the page got round to it, which can lag by
   * tens of ms on a busy machine.
   */
  stamp: number;
  key: string;
  code: string;
  repeat: boolean;
}

export interface RecordedInput {
  type: 'input';
  target: string;
  time: number;
  inputType: string;
  data: string | null;
  value: string;
}

export interface RecordedFocus {
  type: 'focus' | 'blur';
  target: string;
  time: number;
}

export type RecordedEvent =
  RecordedMouseEvent | RecordedMouseMove | RecordedWheel | RecordedScroll | RecordedKey | RecordedInput | RecordedFocus;

export interface EventPageServer {
  /** URL of the event recorder page. */
  url: string;
  /** `http://127.0.0.1:<port>`, for the extra routes. */
  origin: string;
  close(): Promise<void>;
}

export interface EventPageServerOptions {
  /** Extra pages: path (e.g. `/other`) → HTML. */
  routes?: Record<string, string>;
}

export const EVENT_PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>deskbatch event recorder</title>
<style>
  html, body { margin: 0; padding: 0; width: 100%; height: 100%; overflow: hidden; }
  body { font: 16px/1.3 "DejaVu Sans", sans-serif; background: #fff; }
  #t, #scroll, #pad { position: fixed; box-sizing: border-box; margin: 0; }
  #t { left: 0; top: 0; width: 50vw; height: 50vh; border: 2px solid #36c; padding: 4px; resize: none; font-size: 18px; }
  #scroll { left: 50vw; top: 0; width: 50vw; height: 50vh; overflow: scroll; border: 2px solid #3a3; }
  #content { width: 4000px; height: 4000px;
    background: repeating-linear-gradient(45deg, #eef 0 40px, #fff 40px 80px); }
  #pad { left: 0; top: 50vh; width: 100vw; height: 50vh; background: #fdf6e3; border: 2px solid #c93; }
</style>
</head>
<body>
<textarea id="t" spellcheck="false" autocomplete="off"></textarea>
<div id="scroll"><div id="content">scroll area</div></div>
<div id="pad">pad</div>
<script>
(() => {
  const events = [];
  window.__events = events;
  window.__lastMove = null;
  const targetName = (node) => {
    for (let el = node; el && el.nodeType === 1; el = el.parentElement) if (el.id) return el.id;
    return node && node.nodeName ? node.nodeName.toLowerCase() : String(node);
  };
  const mods = (e) => ({ shiftKey: e.shiftKey, ctrlKey: e.ctrlKey, altKey: e.altKey, metaKey: e.metaKey });
  const base = (e) => ({ type: e.type, target: targetName(e.target), time: performance.now() });
  const last = () => events[events.length - 1];

  for (const type of ['mousedown', 'mouseup', 'click', 'dblclick', 'auxclick', 'contextmenu']) {
    addEventListener(type, (e) => {
      if (type === 'contextmenu') e.preventDefault();
      events.push({ ...base(e), button: e.button, buttons: e.buttons, detail: e.detail,
        clientX: e.clientX, clientY: e.clientY, screenX: e.screenX, screenY: e.screenY, ...mods(e) });
    }, true);
  }
  addEventListener('mousemove', (e) => {
    const prev = last();
    const entry = { ...base(e), count: prev && prev.type === 'mousemove' ? prev.count + 1 : 1, buttons: e.buttons,
      clientX: e.clientX, clientY: e.clientY, screenX: e.screenX, screenY: e.screenY, ...mods(e) };
    if (prev && prev.type === 'mousemove') events[events.length - 1] = entry; else events.push(entry);
    window.__lastMove = entry;
  }, true);
  addEventListener('wheel', (e) => {
    if (e.ctrlKey) e.preventDefault();
    events.push({ ...base(e), deltaX: e.deltaX, deltaY: e.deltaY, deltaMode: e.deltaMode,
      clientX: e.clientX, clientY: e.clientY, ...mods(e) });
  }, { capture: true, passive: false });
  const scroller = document.getElementById('scroll');
  scroller.addEventListener('scroll', () => {
    const prev = last();
    const entry = { type: 'scroll', target: 'scroll', time: performance.now(),
      count: prev && prev.type === 'scroll' ? prev.count + 1 : 1,
      scrollLeft: scroller.scrollLeft, scrollTop: scroller.scrollTop };
    if (prev && prev.type === 'scroll') events[events.length - 1] = entry; else events.push(entry);
  });
  for (const type of ['keydown', 'keyup']) {
    addEventListener(type, (e) => {
      events.push({ ...base(e), key: e.key, code: e.code, repeat: e.repeat, stamp: e.timeStamp, ...mods(e) });
    }, true);
  }
  const textarea = document.getElementById('t');
  textarea.addEventListener('input', (e) => {
    events.push({ ...base(e), inputType: e.inputType, data: e.data, value: textarea.value });
  });
  for (const type of ['focus', 'blur']) {
    addEventListener(type, (e) => {
      if (e.target === window) events.push({ type, target: 'window', time: performance.now() });
    });
  }
  window.__reset = () => {
    events.length = 0;
    window.__lastMove = null;
    textarea.value = '';
    scroller.scrollTo(0, 0);
    // The scroll event from scrollTo arrives later; drop it.
    requestAnimationFrame(() => requestAnimationFrame(() => {
      if (events.length === 1 && events[0].type === 'scroll') events.length = 0;
    }));
  };
  window.__ready = true;
})();
</script>
</body>
</html>
`;

/** Starts the server on 127.0.0.1, port 0. `/` serves the event recorder page. */
export async function startEventPageServer(options: EventPageServerOptions = {}): Promise<EventPageServer> {
  const routes: Record<string, string> = { '/': EVENT_PAGE_HTML, ...options.routes };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    const html = routes[path];
    if (html === undefined) {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('not found');
      return;
    }
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }).end(html);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const origin = `http://127.0.0.1:${port}`;
  let closing: Promise<void> | undefined;
  return {
    url: `${origin}/`,
    origin,
    close: () =>
      (closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      })),
  };
}

/** The events the page recorded so far. */
export function readEvents(page: Page): Promise<RecordedEvent[]> {
  return page.evaluate('window.__events') as Promise<RecordedEvent[]>;
}

/** Clears the recorded events, the textarea and the scroll area. */
export async function resetEvents(page: Page): Promise<void> {
  await page.evaluate('window.__reset()');
}

/** Waits until the page has recorded an event matching `predicate`; returns all events. */
export function waitForEvent(
  page: Page,
  predicate: (event: RecordedEvent) => boolean,
  timeoutMs = 5_000,
): Promise<RecordedEvent[]> {
  return waitForEvents(page, 'a matching event', (events) => events.some(predicate), timeoutMs);
}

/** Waits until `done(events)` holds for the page's record; fails after `timeoutMs`, naming `what`. */
export async function waitForEvents(
  page: Page,
  what: string,
  done: (events: RecordedEvent[]) => boolean,
  timeoutMs = 10_000,
): Promise<RecordedEvent[]> {
  let last: RecordedEvent[] = [];
  return until(
    `the page to record ${what}`,
    async () => {
      last = await readEvents(page);
      return done(last) && last;
    },
    { timeoutMs, seen: () => last },
  );
}

/** An element's box in CSS pixels (= screen pixels on the kiosk page). */
export async function elementRect(
  page: Page,
  id: string,
): Promise<{ x: number; y: number; width: number; height: number }> {
  return page.evaluate(`(() => {
    const r = document.getElementById(${JSON.stringify(id)}).getBoundingClientRect();
    return { x: r.x, y: r.y, width: r.width, height: r.height };
  })()`) as Promise<{ x: number; y: number; width: number; height: number }>;
}
