/**
 * The browser toolset's interaction members, through the real daemon and a
 * real headless Chromium: a page served by the test web server records the
 * input events it gets and POSTs each one to `/log`, so the test reads what
 * the page saw from `web.requests` (no javascript_exec needed).
 *
 * Page layout (viewport 1280x800, the default; screenshots are the same size,
 * so coordinates are CSS pixels):
 *
 *   +-------------------------+-------------------------+
 *   | #pad (0,0 640x400)      | #t textarea (640,0      |
 *   |   click target          |   640x200)              |
 *   |                         +-------------------------+
 *   |                         | #scroller (640,200      |
 *   |                         |   640x200, scrolls)     |
 *   +-------------------------+-------------------------+
 *   | form (0,400 1280x200): #name, #color, #agree,     |
 *   |   #submit → POST /submit                          |
 *   +---------------------------------------------------+
 *   | #far, 3000 px further down (for scroll_to)        |
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { BatchResult, ToolUse } from '../src/base/protocol.ts';
import { parseKeySequence, parsePlaywrightModifiers } from '../src/browser/keys.ts';
import { ToolInputError } from '../src/base/errors.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { startedEvent } from '../testkit/daemon.ts';
import { failsWith } from '../testkit/errors.ts';
import { until, within } from '../testkit/wait.ts';
import { browserUse, startBrowserFixture, type BrowserFixture } from '../testkit/web.ts';

const NOT_EXECUTED = 'Not executed: an earlier action in this turn failed.';

const EVENT_PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><title>events</title>
<style>
  html, body { margin: 0; padding: 0; }
  body { height: 4000px; font: 14px sans-serif; }
  #pad { position: absolute; left: 0; top: 0; width: 640px; height: 400px; background: #eef; }
  #t { position: absolute; left: 640px; top: 0; width: 640px; height: 200px; margin: 0; border: 0; padding: 0; box-sizing: border-box; }
  #scroller { position: absolute; left: 640px; top: 200px; width: 640px; height: 200px; overflow: scroll; }
  #content { width: 4000px; height: 4000px; background: linear-gradient(45deg, #fff, #ccc); }
  form { position: absolute; left: 0; top: 400px; width: 1280px; height: 200px; }
  #far { position: absolute; left: 0; top: 3500px; }
</style></head>
<body>
<div id="pad">pad</div>
<textarea id="t"></textarea>
<div id="scroller"><div id="content"></div></div>
<form id="form" method="POST" action="/submit">
  <label>Name <input id="name" name="name" type="text"></label>
  <label>Color <select id="color" name="color">
    <option value="r">Red</option><option value="g">Green</option><option value="b">Blue</option>
  </select></label>
  <label><input id="agree" name="agree" type="checkbox" value="yes"> I agree</label>
  <label>Age <input id="age" name="age" type="number"></label>
  <button id="submit" type="submit">Send form</button>
</form>
<p id="far">Far away paragraph</p>
<script>
  let seq = 0;
  const send = (e) => fetch('/log', { method: 'POST', body: JSON.stringify({ seq: seq++, ...e }) });
  const where = (e) => (e.target && e.target.id) || (e.target && e.target.tagName) || 'window';
  const mods = (e) => ({ shiftKey: e.shiftKey, ctrlKey: e.ctrlKey, altKey: e.altKey, metaKey: e.metaKey });
  for (const type of ['mousedown', 'mouseup', 'click', 'dblclick', 'auxclick', 'contextmenu']) {
    addEventListener(type, (e) => {
      if (type === 'contextmenu') e.preventDefault();
      send({ type, target: where(e), button: e.button, detail: e.detail, clientX: e.clientX, clientY: e.clientY, ...mods(e) });
    });
  }
  let move;
  addEventListener('mousemove', (e) => {
    // Coalesced: the last move of a burst is sent.
    const first = !move;
    move = { type: 'mousemove', target: where(e), clientX: e.clientX, clientY: e.clientY, buttons: e.buttons, ...mods(e) };
    if (first) setTimeout(() => { send(move); move = undefined; }, 50);
  });
  document.getElementById('pad').addEventListener('mouseenter', () => send({ type: 'mouseenter', target: 'pad' }));
  addEventListener('wheel', (e) => {
    send({ type: 'wheel', target: where(e), deltaX: e.deltaX, deltaY: e.deltaY, deltaMode: e.deltaMode, clientX: e.clientX, clientY: e.clientY });
  }, { passive: true });
  for (const type of ['keydown', 'keyup']) {
    addEventListener(type, (e) => send({ type, key: e.key, code: e.code, repeat: e.repeat, time: e.timeStamp, ...mods(e) }));
  }
  const t = document.getElementById('t');
  t.addEventListener('input', () => send({ type: 'input', target: 't', value: t.value }));
  const scroller = document.getElementById('scroller');
  scroller.scrollTop = 1000;
  scroller.scrollLeft = 1000;
  let pending;
  scroller.addEventListener('scroll', () => {
    clearTimeout(pending);
    pending = setTimeout(() => send({ type: 'scrolled', top: scroller.scrollTop, left: scroller.scrollLeft }), 100);
  });
  let pendingWindow;
  addEventListener('scroll', () => {
    clearTimeout(pendingWindow);
    pendingWindow = setTimeout(() => send({ type: 'windowScrolled', top: scrollY }), 100);
  });
  for (const id of ['name', 'color', 'agree', 'age']) {
    const el = document.getElementById(id);
    const value = () => (el.type === 'checkbox' ? el.checked : el.value);
    el.addEventListener('input', () => send({ type: 'input', target: id, value: value() }));
    el.addEventListener('change', () => send({ type: 'change', target: id, value: value() }));
  }
  send({ type: 'ready' });
</script>
</body></html>`;

interface PageEvent {
  seq: number;
  type: string;
  target?: string;
  button?: number;
  buttons?: number;
  detail?: number;
  clientX?: number;
  clientY?: number;
  shiftKey?: boolean;
  ctrlKey?: boolean;
  altKey?: boolean;
  metaKey?: boolean;
  deltaX?: number;
  deltaY?: number;
  deltaMode?: number;
  key?: string;
  code?: string;
  time?: number;
  value?: string | boolean;
  top?: number;
  left?: number;
}

let fx: BrowserFixture;
let batchNo = 0;

before(async () => {
  fx = await startBrowserFixture();
  fx.web.route('/events', EVENT_PAGE);
  fx.web.route('/log', 'ok');
  fx.web.route('/submit', '<!doctype html><title>sent</title><p>sent</p>');
  await fx.client.hello();
});

after(async () => {
  await fx?.close();
});

/** Runs one batch, checks it against the API rules, and returns the result. */
async function run(toolUses: ToolUse[]): Promise<BatchResult> {
  const { result } = await fx.client.batch(`b${batchNo++}`, toolUses);
  return assertApiValid(toolUses, result);
}

/** The text blocks of result `i`, joined. */
function textOf(result: BatchResult, i: number): string {
  const content = result.tool_results[i]!.content;
  if (typeof content === 'string') return content;
  return (content ?? [])
    .filter((c): c is { type: 'text'; text: string } => c.type === 'text')
    .map((c) => c.text)
    .join('\n');
}

function assertOk(result: BatchResult, ack?: string): void {
  result.tool_results.forEach((r, i) => {
    assert.notEqual(r.is_error, true, `result ${i} failed: ${textOf(result, i)}`);
  });
  if (ack !== undefined) assert.equal(textOf(result, result.tool_results.length - 1).split('\n')[0], ack);
}

const at = (x: number, y: number) => ({ type: 'coordinate', x, y });

/** The events the page logged after request index `mark`, in the page's order. */
function eventsSince(mark: number): PageEvent[] {
  return fx.web.requests
    .slice(mark)
    .filter((r) => r.method === 'POST' && r.path === '/log')
    .map((r) => JSON.parse(r.body) as PageEvent)
    .sort((a, b) => a.seq - b.seq);
}

/** Waits until the page has logged events that satisfy `done`, and returns them. */
async function waitForEvents(mark: number, done: (events: PageEvent[]) => boolean, what: string): Promise<PageEvent[]> {
  return until(
    what,
    () => {
      const events = eventsSince(mark);
      return done(events) && events;
    },
    { timeoutMs: 30_000, seen: () => ({ 'page logged': eventsSince(mark) }) },
  );
}

/**
 * Every event the page saw so far, once all have reached the server: presses a marker key (F9) in a
 * batch of its own and waits for its keydown and for every event the page numbered before it. Input
 * dispatched by an earlier batch reached the page before the marker did, so it is numbered before the
 * marker and is in what this returns. Events are POSTed one request each, so they may arrive out of
 * order; `seq` counts from 0 on each page load, which `mark` (from freshPage) starts.
 */
async function allEventsSoFar(mark: number): Promise<PageEvent[]> {
  assertOk(await run([browserUse('key', { text: 'F9' })]), 'Pressed F9.');
  return waitForEvents(
    mark,
    (events) => {
      const marker = events.find((e) => e.type === 'keydown' && e.key === 'F9');
      if (!marker) return false;
      const seqs = new Set(events.map((e) => e.seq));
      for (let i = 0; i < marker.seq; i++) if (!seqs.has(i)) return false;
      return true;
    },
    'the marker key and every page event before it',
  );
}

/** Loads a fresh event page (then `actions`) in one batch; returns the request mark the page's events start at. */
async function freshPage(): Promise<number> {
  const mark = fx.web.requests.length;
  const result = await run([browserUse('navigate', { url: `${fx.web.origin}/events` })]);
  assertOk(result);
  await waitForEvents(mark, (e) => e.some((x) => x.type === 'ready'), 'the page to load');
  return mark;
}

const of = (events: PageEvent[], type: string) => events.filter((e) => e.type === type);

describe('keys.ts', () => {
  it('maps names, chords and sequences to Playwright keys', () => {
    assert.deepEqual(parseKeySequence('Enter'), ['Enter']);
    assert.deepEqual(parseKeySequence('Return'), ['Enter']);
    assert.deepEqual(parseKeySequence('BackSpace backspace'), ['Backspace', 'Backspace']);
    assert.deepEqual(parseKeySequence('esc'), ['Escape']);
    assert.deepEqual(parseKeySequence('Up ArrowDown Page_Down pageup'), ['ArrowUp', 'ArrowDown', 'PageDown', 'PageUp']);
    assert.deepEqual(parseKeySequence('space'), ['Space']);
    assert.deepEqual(parseKeySequence(' '), ['Space']);
    assert.deepEqual(parseKeySequence('f5 F12 Home End Delete Tab'), ['F5', 'F12', 'Home', 'End', 'Delete', 'Tab']);
    assert.deepEqual(parseKeySequence('ctrl+a'), ['Control+a']);
    assert.deepEqual(parseKeySequence('CTRL+SHIFT+T'), ['Control+Shift+t']);
    assert.deepEqual(parseKeySequence('ctrl+shift+Tab'), ['Control+Shift+Tab']);
    assert.deepEqual(parseKeySequence('cmd+alt'), ['Meta+Alt']);
    assert.deepEqual(parseKeySequence('super+option+control'), ['Meta+Alt+Control']);
    assert.deepEqual(parseKeySequence('A 7 ! ?'), ['A', '7', '!', '?']);
    assert.deepEqual(parseKeySequence('ctrl++ +'), ['Control++', '+']);
    assert.deepEqual(parseKeySequence('ctrl+minus'), ['Control+-']);
  });

  it('parses modifiers and refuses non-modifiers and unknown keys', () => {
    assert.deepEqual(parsePlaywrightModifiers('shift'), ['Shift']);
    assert.deepEqual(parsePlaywrightModifiers('ctrl+shift'), ['Control', 'Shift']);
    assert.deepEqual(parsePlaywrightModifiers('cmd+alt'), ['Meta', 'Alt']);
    assert.deepEqual(parsePlaywrightModifiers('Win+Option+control'), ['Meta', 'Alt', 'Control']);
    assert.deepEqual(parsePlaywrightModifiers(''), []);
    assert.deepEqual(parsePlaywrightModifiers(null), []);
    assert.throws(
      () => parsePlaywrightModifiers('ctrl+a'),
      failsWith(
        ToolInputError,
        '"a" in "ctrl+a" is not a modifier. Modifiers are ctrl, shift, alt and cmd (also control, option, meta, super, win), joined by "+", e.g. "shift" or "ctrl+shift".',
      ),
    );
    assert.throws(
      () => parseKeySequence('ctrl+foo'),
      failsWith(
        ToolInputError,
        'Unknown key "foo" in "ctrl+foo". Valid keys: e.g. "Enter", "Tab", "Escape", "Backspace", "ArrowUp", "PageDown", "F5", "a", "ctrl+a", "ctrl+shift+Tab"; separate keys pressed one after another with spaces.',
      ),
    );
    assert.throws(
      () => parseKeySequence('é'),
      failsWith(
        ToolInputError,
        'Unknown key "é". Valid keys: e.g. "Enter", "Tab", "Escape", "Backspace", "ArrowUp", "PageDown", "F5", "a", "ctrl+a", "ctrl+shift+Tab"; separate keys pressed one after another with spaces. To enter text, use the type action.',
      ),
    );
    assert.throws(
      () => parseKeySequence('ctrl+'),
      failsWith(
        ToolInputError,
        'Empty key name in "ctrl+". Join key names with "+", e.g. "Enter", "Tab", "Escape", "Backspace", "ArrowUp", "PageDown", "F5", "a", "ctrl+a", "ctrl+shift+Tab"; write a literal + as "plus".',
      ),
    );
    assert.throws(
      () => parseKeySequence(''),
      failsWith(
        ToolInputError,
        'No key given. Name a key, chord or sequence, e.g. "Enter", "Tab", "Escape", "Backspace", "ArrowUp", "PageDown", "F5", "a", "ctrl+a", "ctrl+shift+Tab".',
      ),
    );
  });
});

describe('browser input members', () => {
  it('clicks land at the coordinate with the right button and click count', async () => {
    const mark = await freshPage();
    const result = await run([
      browserUse('left_click', { target: at(100, 120) }),
      browserUse('right_click', { target: at(101, 121) }),
      browserUse('middle_click', { target: at(102, 122) }),
      browserUse('double_click', { target: at(103, 123) }),
      browserUse('triple_click', { target: at(104, 124) }),
    ]);
    assertOk(result);
    assert.deepEqual(
      result.tool_results.map((_, i) => textOf(result, i)),
      ['Clicked.', 'Right-clicked.', 'Middle-clicked.', 'Double-clicked.', 'Triple-clicked.'],
    );
    const events = await waitForEvents(mark, (e) => of(e, 'click').length >= 6, 'the clicks');
    const downs = of(events, 'mousedown');
    assert.deepEqual(
      downs.map((e) => [e.button, e.detail, e.clientX, e.clientY, e.target]),
      [
        [0, 1, 100, 120, 'pad'],
        [2, 1, 101, 121, 'pad'],
        [1, 1, 102, 122, 'pad'],
        [0, 1, 103, 123, 'pad'],
        [0, 2, 103, 123, 'pad'],
        [0, 1, 104, 124, 'pad'],
        [0, 2, 104, 124, 'pad'],
        [0, 3, 104, 124, 'pad'],
      ],
    );
    assert.equal(of(events, 'contextmenu').length, 1);
    // Chromium fires auxclick for every non-primary button: the right click, then the middle one.
    assert.deepEqual(
      of(events, 'auxclick').map((e) => e.button),
      [2, 1],
    );
    assert.deepEqual(
      of(events, 'dblclick').map((e) => [e.clientX, e.clientY]),
      [
        [103, 123],
        [104, 124],
      ],
    );
    assert.equal(Math.max(...of(events, 'click').map((e) => e.detail!)), 3, 'a triple click has detail 3');
  });

  it('holds modifiers during a click, and refuses a non-modifier', async () => {
    const mark = await freshPage();
    const result = await run([
      browserUse('left_click', { target: at(50, 50), modifiers: 'shift' }),
      browserUse('left_click', { target: at(60, 60), modifiers: 'ctrl+shift' }),
      browserUse('right_click', { target: at(70, 70), modifiers: 'alt' }),
      browserUse('left_click', { target: at(80, 80) }),
    ]);
    assertOk(result);
    const events = await waitForEvents(mark, (e) => of(e, 'click').length >= 3, 'the clicks');
    const downs = of(events, 'mousedown').map((e) => [e.clientX, e.shiftKey, e.ctrlKey, e.altKey, e.metaKey]);
    assert.deepEqual(downs, [
      [50, true, false, false, false],
      [60, true, true, false, false],
      [70, false, false, true, false],
      [80, false, false, false, false],
    ]);

    const bad = await run([
      browserUse('left_click', { target: at(10, 10), modifiers: 'ctrl+q' }),
      browserUse('left_click', { target: at(10, 10) }),
    ]);
    assert.equal(bad.tool_results[0]!.is_error, true);
    assert.match(textOf(bad, 0), /"q".*not a modifier/);
    assert.equal(textOf(bad, 1), NOT_EXECUTED);
  });

  it('refuses a coordinate outside the viewport and skips the rest of the batch', async () => {
    const mark = await freshPage();
    const result = await run([
      browserUse('left_click', { target: at(1280, 10) }),
      browserUse('left_click', { target: at(10, 10) }),
    ]);
    assert.equal(result.tool_results[0]!.is_error, true);
    assert.match(textOf(result, 0), /\(1280, 10\) is outside the viewport: x must be 0–1279 and y 0–799/);
    assert.equal(result.tool_results[1]!.is_error, true);
    assert.equal(textOf(result, 1), NOT_EXECUTED);
    for (const [input, field] of [
      [{ from: at(10, 10), target: at(10, 900) }, 'target'],
      [{ from: at(-1, 10), target: at(10, 10) }, 'from'],
    ] as const) {
      const r = await run([browserUse('left_click_drag', input)]);
      assert.equal(r.tool_results[0]!.is_error, true);
      assert.match(textOf(r, 0), new RegExp(`^${field} \\(`));
    }
    const r = await run([browserUse('scroll', { target: at(10, 800), scroll_direction: 'down' })]);
    assert.match(textOf(r, 0), /outside the viewport/);
    // Any click the refused calls had made would be logged before the marker key: there must be none.
    assert.deepEqual(of(await allEventsSoFar(mark), 'mousedown'), []);
  });

  it('drags, presses and releases, moves and hovers at the given points', async () => {
    const mark = await freshPage();
    const result = await run([
      browserUse('left_click_drag', { from: at(100, 100), target: at(300, 200) }),
      browserUse('left_mouse_down', { target: at(400, 50) }),
      browserUse('mouse_move', { target: at(450, 60) }),
      browserUse('left_mouse_up', { target: at(500, 70) }),
    ]);
    assertOk(result);
    assert.deepEqual(
      result.tool_results.map((_, i) => textOf(result, i)),
      ['Dragged.', 'Mouse button pressed.', 'Moved the mouse.', 'Mouse button released.'],
    );
    const events = await waitForEvents(mark, (e) => of(e, 'mouseup').length >= 2, 'the drags');
    assert.deepEqual(
      events.filter((e) => e.type === 'mousedown' || e.type === 'mouseup').map((e) => [e.type, e.clientX, e.clientY]),
      [
        ['mousedown', 100, 100],
        ['mouseup', 300, 200],
        ['mousedown', 400, 50],
        ['mouseup', 500, 70],
      ],
    );

    const moves = await run([
      browserUse('mouse_move', { target: at(700, 700) }),
      browserUse('hover', { target: at(321, 123) }),
    ]);
    assertOk(moves, 'Hovered.');
    const after = await waitForEvents(
      mark,
      (e) => of(e, 'mousemove').some((m) => m.clientX === 321 && m.clientY === 123),
      'the hover',
    );
    assert.ok(of(after, 'mouseenter').length >= 1, 'hovering entered #pad');
  });

  it('scrolls the element under the point in all four directions, by the amount', async () => {
    const mark = await freshPage();
    const scrollerAt = at(900, 300);
    const result = await run([
      browserUse('scroll', { target: scrollerAt, scroll_direction: 'down' }),
      browserUse('scroll', { target: scrollerAt, scroll_direction: 'up', scroll_amount: 1 }),
      browserUse('scroll', { target: scrollerAt, scroll_direction: 'right', scroll_amount: 2 }),
      browserUse('scroll', { target: scrollerAt, scroll_direction: 'left', scroll_amount: 10 }),
    ]);
    assertOk(result);
    assert.deepEqual(
      result.tool_results.map((_, i) => textOf(result, i)),
      ['Scrolled down.', 'Scrolled up.', 'Scrolled right.', 'Scrolled left.'],
    );
    const events = await waitForEvents(mark, (e) => of(e, 'wheel').length >= 4, 'the wheel events');
    assert.deepEqual(
      of(events, 'wheel').map((e) => [e.target, e.deltaX, e.deltaY, e.deltaMode, e.clientX, e.clientY]),
      [
        ['content', 0, 300, 0, 900, 300],
        ['content', 0, -100, 0, 900, 300],
        ['content', 200, 0, 0, 900, 300],
        ['content', -1000, 0, 0, 900, 300],
      ],
    );
    // The scroller started at (1000, 1000): net +200 down and -800 across.
    const settled = await waitForEvents(
      mark,
      (e) => of(e, 'scrolled').some((s) => s.top === 1200 && s.left === 200),
      'the scroller to settle at top 1200, left 200',
    );
    assert.ok(settled.length > 0);

    for (const amount of [0, 11, 1.5]) {
      const bad = await run([
        browserUse('scroll', { target: scrollerAt, scroll_direction: 'down', scroll_amount: amount }),
      ]);
      assert.equal(bad.tool_results[0]!.is_error, true);
      assert.match(textOf(bad, 0), /scroll_amount/);
    }
  });

  it('types exact text, including non-ASCII, at the focus', async () => {
    const mark = await freshPage();
    const text = 'Hello, wörld! 日本語 😀 "quotes" & <tags>\nsecond line\ttab';
    const result = await run([browserUse('left_click', { target: at(900, 100) }), browserUse('type', { text })]);
    assertOk(result, 'Typed.');
    const events = await waitForEvents(mark, (e) => of(e, 'input').at(-1)?.value === text, 'the typed text');
    assert.ok(
      of(events, 'keydown').some((k) => k.key === 'H'),
      'ASCII is typed as key presses',
    );
  });

  it('inserts a long text line by line, exactly, within the call limit', async () => {
    const mark = await freshPage();
    const line = (i: number) => `${i}: ${'Lorem ipsum dolor sit amet, é ü 日本 😀 '.repeat(3)}`;
    const text = Array.from({ length: 30 }, (_, i) => line(i)).join('\n') + '\n\nend';
    assert.ok(text.length > 3000);
    await run([browserUse('left_click', { target: at(900, 100) })]);
    const t0 = Date.now();
    const result = await run([browserUse('type', { text })]);
    const elapsed = Date.now() - t0;
    assertOk(result, 'Typed.');
    await waitForEvents(mark, (e) => of(e, 'input').at(-1)?.value === text, 'the long text');
    // One call's limit is 30 s plus 20 ms per line break: key by key, 3,000 characters would pass it on a busy machine.
    assert.ok(elapsed < 30_000, `typing ${text.length} characters took ${elapsed} ms`);
  });

  it('refuses text longer than the limit', async () => {
    await freshPage();
    const result = await run([browserUse('type', { text: 'x'.repeat(20_001) })]);
    assert.equal(result.tool_results[0]!.is_error, true);
    assert.match(textOf(result, 0), /at most 20000 can be typed/);
  });

  it('presses keys, chords and sequences, with repeat', async () => {
    const mark = await freshPage();
    const result = await run([
      browserUse('left_click', { target: at(900, 100) }),
      browserUse('type', { text: 'abcdef' }),
      browserUse('key', { text: 'BackSpace', repeat: 2 }),
      browserUse('key', { text: 'Left Left shift+Home' }),
      browserUse('key', { text: 'Delete' }),
    ]);
    assertOk(result, 'Pressed Delete.');
    assert.equal(textOf(result, 2), 'Pressed BackSpace.');
    // "abcdef" → "abcd" → cursor after "ab", select "ab", delete it → "cd".
    await waitForEvents(mark, (e) => of(e, 'input').at(-1)?.value === 'cd', 'the value "cd"');

    const mark2 = fx.web.requests.length;
    const clear = await run([browserUse('key', { text: 'ctrl+a Backspace' })]);
    assertOk(clear, 'Pressed ctrl+a Backspace.');
    const events = await waitForEvents(mark2, (e) => of(e, 'input').at(-1)?.value === '', 'the textarea to be empty');
    const ctrlA = of(events, 'keydown').find((k) => k.key === 'a');
    assert.equal(ctrlA?.ctrlKey, true, 'a was pressed with Control');

    const bad = await run([browserUse('key', { text: 'ctrl+nope' }), browserUse('wait', { duration: 0 })]);
    assert.equal(bad.tool_results[0]!.is_error, true);
    assert.match(textOf(bad, 0), /Unknown key "nope"/);
    assert.equal(textOf(bad, 1), NOT_EXECUTED);
    for (const repeat of [0, 101]) {
      const r = await run([browserUse('key', { text: 'a', repeat })]);
      assert.match(textOf(r, 0), /repeat/);
    }
  });

  it('holds a key for the duration', async () => {
    const mark = await freshPage();
    const t0 = Date.now();
    const result = await run([browserUse('hold_key', { text: 'shift', duration: 0.4 })]);
    const elapsed = Date.now() - t0;
    assertOk(result, 'Held shift for 0.4s.');
    assert.ok(elapsed >= 400, `the call took ${elapsed} ms`);
    const events = await waitForEvents(mark, (e) => of(e, 'keyup').length >= 1, 'the key release');
    const down = of(events, 'keydown').find((k) => k.key === 'Shift');
    const up = of(events, 'keyup').find((k) => k.key === 'Shift');
    assert.ok(down && up, 'Shift went down and up');
    const held = up.time! - down.time!;
    // At least the duration (the page may see the keys late, not early); released, not held on.
    assert.ok(held >= 380 && held < 10_000, `Shift was held ${held} ms`);

    const seq = await run([browserUse('hold_key', { text: 'a b', duration: 0.1 })]);
    assert.match(textOf(seq, 0), /one key or chord, not a sequence/);
    const long = await run([browserUse('hold_key', { text: 'a', duration: 31 })]);
    assert.match(textOf(long, 0), /duration/);
  });

  it('cancel ends hold_key and wait early, and the held key is released', async () => {
    const cancelled = 'Not completed: the browser actions of this turn were cancelled before this one finished.';
    for (const first of [
      browserUse('hold_key', { text: 'ctrl+shift', duration: 20 }),
      browserUse('wait', { duration: 20 }),
    ]) {
      const mark = await freshPage();
      const uses = [first, browserUse('left_click', { target: at(10, 10) })];
      const id = `cancel-${batchNo++}`;
      fx.client.send({ type: 'batch', batch_id: id, tool_uses: uses });
      // Cancel while the first call runs: it has started, and a held key is down.
      await within(fx.client.next(startedEvent(id, first.id), 40_000), `${first.name} to start`, 30_000);
      if (first.name === 'hold_key') {
        await waitForEvents(
          mark,
          (e) => ['Control', 'Shift'].every((key) => of(e, 'keydown').some((k) => k.key === key)),
          'ctrl and shift to go down',
        );
      }
      fx.client.send({ type: 'cancel', batch_id: id });
      const { result } = await fx.client.batch(id, uses);
      assertApiValid(uses, result);
      assert.equal(result.cancelled, true);
      assert.ok(result.duration_ms < 15_000, `cancelled after ${result.duration_ms} ms, not at the end of its 20 s`);
      assert.deepEqual([textOf(result, 0), textOf(result, 1)], [cancelled, cancelled]);
      if (first.name === 'hold_key') {
        const events = await waitForEvents(mark, (e) => of(e, 'keyup').length >= 2, 'the keys to be released');
        assert.deepEqual(
          of(events, 'keyup').map((e) => e.key),
          ['Shift', 'Control'],
        );
      }
      // Had the click after it run, its mousedown would be logged before the marker key.
      assert.deepEqual(of(await allEventsSoFar(mark), 'mousedown'), [], 'the click after it never ran');
    }
  });

  it('waits for the duration and refuses one out of range', async () => {
    const t0 = Date.now();
    const result = await run([browserUse('wait', { duration: 0.3 })]);
    const elapsed = Date.now() - t0;
    assertOk(result, 'Waited 0.3s.');
    assert.ok(elapsed >= 300 && elapsed < 15_000, `waited ${elapsed} ms`);
    for (const duration of [-1, 30.5]) {
      const bad = await run([browserUse('wait', { duration })]);
      assert.equal(bad.tool_results[0]!.is_error, true);
      assert.match(textOf(bad, 0), /duration/);
    }
  });

  /** The ref on the line of `text` that matches `line`, e.g. refIn(tree, /button "Send form"/). */
  function refIn(text: string, line: RegExp): string {
    const found = text.split('\n').find((l) => line.test(l));
    const ref = found && /\[(ref_\d+)\]/.exec(found)?.[1];
    assert.ok(ref, `no ref for ${String(line)} in:\n${text}`);
    return ref;
  }

  /** Reads the whole page (filter all) and returns the refs of the lines matching each pattern. */
  async function refs<K extends string>(lines: Record<K, RegExp>): Promise<Record<K, string>> {
    const result = await run([browserUse('read_page', { filter: 'all' })]);
    assertOk(result);
    const tree = textOf(result, 0);
    return Object.fromEntries(Object.entries<RegExp>(lines).map(([k, re]) => [k, refIn(tree, re)])) as Record<
      K,
      string
    >;
  }

  it('clicks and hovers an element by ref at its centre, with modifiers', async () => {
    const mark = await freshPage();
    const found = await run([browserUse('find', { query: 'pad' })]);
    assertOk(found);
    const pad = refIn(textOf(found, 0), /generic "pad"/);
    const result = await run([
      browserUse('left_click', { target: { type: 'ref', ref: pad }, modifiers: 'shift' }),
      browserUse('double_click', { target: { type: 'ref', ref: pad } }),
      browserUse('right_click', { target: { type: 'ref', ref: pad } }),
      browserUse('hover', { target: { type: 'ref', ref: pad } }),
    ]);
    assertOk(result, 'Hovered.');
    const events = await waitForEvents(mark, (e) => of(e, 'contextmenu').length >= 1, 'the clicks');
    // #pad is 640x400 at the origin: its centre is (320, 200).
    assert.deepEqual(
      of(events, 'mousedown').map((e) => [e.button, e.detail, e.clientX, e.clientY, e.target, e.shiftKey]),
      [
        [0, 1, 320, 200, 'pad', true],
        [0, 1, 320, 200, 'pad', false],
        [0, 2, 320, 200, 'pad', false],
        [2, 1, 320, 200, 'pad', false],
      ],
    );
    assert.equal(of(events, 'dblclick').length, 1);
  });

  it('refuses unknown and stale refs, and skips the rest of the batch', async () => {
    await freshPage();
    const { pad } = await refs({ pad: /generic "pad"/ });
    const unknown = await run([
      browserUse('left_click', { target: { type: 'ref', ref: 'ref_999999' } }),
      browserUse('left_click', { target: at(10, 10) }),
    ]);
    assert.equal(unknown.tool_results[0]!.is_error, true);
    assert.match(textOf(unknown, 0), /ref_999999 is not a reference on this page/);
    assert.equal(textOf(unknown, 1), NOT_EXECUTED);

    await freshPage(); // a new document: every earlier ref is stale
    for (const name of ['left_click', 'hover', 'scroll_to']) {
      const r = await run([browserUse(name, { target: { type: 'ref', ref: pad } })]);
      assert.equal(r.tool_results[0]!.is_error, true, name);
      assert.match(textOf(r, 0), new RegExp(`${pad} is stale`), name);
    }
    const r = await run([browserUse('form_input', { target: { type: 'ref', ref: pad }, value: 'x' })]);
    assert.match(textOf(r, 0), new RegExp(`${pad} is stale`));
    const notRef = await run([browserUse('scroll_to', { target: at(1, 1) })]);
    assert.equal(notRef.tool_results[0]!.is_error, true);
  });

  it('scrolls an element into view by ref', async () => {
    const mark = await freshPage();
    const { far } = await refs({ far: /"Far away paragraph"/ });
    const result = await run([browserUse('scroll_to', { target: { type: 'ref', ref: far } })]);
    assertOk(result, `Scrolled to ${far}.`);
    // The paragraph is at y 3500 in a 4000 px page with an 800 px viewport.
    const events = await waitForEvents(
      mark,
      (e) => of(e, 'windowScrolled').some((s) => s.top! > 3500 - 800 && s.top! <= 3500),
      'the window to scroll to the paragraph',
    );
    assert.ok(events.length > 0);
  });

  it('sets text, number, select and checkbox values, and the form submits them', async () => {
    const mark = await freshPage();
    const f = await refs({
      name: /textbox "Name"/,
      color: /combobox "Color"/,
      agree: /checkbox "I agree"/,
      age: /spinbutton "Age"/,
      pad: /generic "pad"/,
      submit: /button "Send form"/,
    });
    const set = (ref: string, value: unknown) => browserUse('form_input', { target: { type: 'ref', ref }, value });
    const result = await run([
      set(f.name, 'Zoë Smith'),
      set(f.name, 'Zoë O’Brien'), // replaces, does not append
      set(f.color, 'b'), // by value
      set(f.color, 'green'), // by visible text, any case
      set(f.age, 42),
      set(f.agree, true),
    ]);
    assertOk(result);
    assert.equal(textOf(result, 0), `Set the value of ${f.name}.`);
    // The page saw input events with the values (text fields keep the focus, so their change comes on blur);
    // selects and checkboxes also fire change, as after a person's choice.
    // Each event reaches the server in its own request, so wait for the last one expected (agree's change).
    const events = await waitForEvents(mark, (e) => of(e, 'change').some((x) => x.target === 'agree'), 'the events');
    const last = (type: string, id: string) =>
      of(events, type)
        .filter((e) => e.target === id)
        .at(-1)?.value;
    assert.equal(last('input', 'name'), 'Zoë O’Brien');
    assert.equal(last('input', 'age'), '42');
    assert.deepEqual(
      of(events, 'change')
        .filter((e) => e.target === 'color' || e.target === 'agree')
        .map((e) => [e.target, e.value]),
      [
        ['color', 'b'],
        ['color', 'g'],
        ['agree', true],
      ],
    );

    // A value that does not fit the element is refused, naming what would.
    const refusals: Array<[string, unknown, RegExp]> = [
      [f.name, true, /is a text field \(type text\); give a string or number, not a boolean/],
      [f.agree, 'yes', /is a checkbox; give true or false, not a string/],
      [f.color, false, /is a select; give an option's value or visible text, not a boolean/],
      [f.color, 'Purple', /has no option with the value or text "Purple"\. Options: "Red", "Green", "Blue"\./],
      [f.age, 'many', /is a number field; "many" is not a number/],
      [f.pad, 'x', /is a <div>, not a form field/],
      [f.submit, 'x', /is a button; click it instead/],
    ];
    for (const [ref, value, message] of refusals) {
      const r = await run([set(ref, value), set(f.name, 'never')]);
      assert.equal(r.tool_results[0]!.is_error, true, `${ref} ← ${JSON.stringify(value)}`);
      assert.match(textOf(r, 0), message);
      assert.equal(textOf(r, 1), NOT_EXECUTED);
    }

    const unchecked = await run([set(f.agree, false), set(f.agree, true)]);
    assertOk(unchecked);
    const submitted = fx.web.requests.length;
    const click = await run([browserUse('left_click', { target: { type: 'ref', ref: f.submit } })]);
    assertOk(click, 'Clicked.');
    await until('the form to be submitted', () => fx.web.requests.slice(submitted).some((r) => r.path === '/submit'), {
      timeoutMs: 30_000,
    });
    const post = fx.web.requests.slice(submitted).find((r) => r.path === '/submit');
    assert.ok(post, 'the form was submitted');
    assert.equal(post.method, 'POST');
    assert.deepEqual(Object.fromEntries(new URLSearchParams(post.body)), {
      name: 'Zoë O’Brien',
      color: 'g',
      agree: 'yes',
      age: '42',
    });
  });
});
