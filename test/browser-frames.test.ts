/**
 * iframes through the daemon: read_page, find and get_page_text include the
 * content of same-origin and cross-site frames (a cross-site frame runs in a
 * renderer process of its own), with refs unique across frames that work with
 * left_click, form_input and scroll_to; a frame that navigates or is removed
 * makes its refs stale; a page with many frames is read up to a cap, and says
 * so. Real headless Chromium against a local web server: the cross-site frame
 * is served as `localhost` to a page served as `127.0.0.1`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { FRAME_ANSWER_MS, FRAMES_MAX } from '../src/browser/frame-worlds.ts';
import type { BatchResult, ToolUse } from '../src/base/protocol.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { until } from '../testkit/wait.ts';
import { browserUse as use, startBrowserFixture, type BrowserFixture } from '../testkit/web.ts';

type Result = BatchResult['tool_results'][number];

const textOf = (r: Result): string =>
  (Array.isArray(r.content) ? r.content : [])
    .filter((b): b is { type: 'text'; text: string } => b.type === 'text')
    .map((b) => b.text)
    .join('\n');

/** The line for `role "name"` and its ref (and indentation). */
function lineFor(text: string, role: string, name: string): { line: string; ref: string; indent: number } {
  const line = text.split('\n').find((l) => l.trimStart().startsWith(`${role} "${name}" [ref_`));
  assert.ok(line, `no ${role} "${name}" in:\n${text}`);
  return { line, ref: /\[(ref_\d+)\]/.exec(line)![1]!, indent: line.length - line.trimStart().length };
}

describe('iframes: reading, refs and actions across frames', () => {
  let f: BrowserFixture;
  let top: string;
  let cross: string;
  let batchNo = 0;

  const run = async (toolUses: ToolUse[]): Promise<BatchResult> => {
    const { result } = await f.client.batch(`frames${batchNo++}`, toolUses);
    return assertApiValid(toolUses, result);
  };
  const call = async (name: string, input: Record<string, unknown> = {}): Promise<string> => {
    const r = (await run([use(name, input)])).tool_results[0]!;
    assert.ok(!r.is_error, `${name} ${JSON.stringify(input)} failed: ${textOf(r)}`);
    return textOf(r);
  };
  const failing = async (name: string, input: Record<string, unknown>): Promise<string> => {
    const r = (await run([use(name, input)])).tool_results[0]!;
    assert.equal(r.is_error, true, `${name} should have failed: ${textOf(r)}`);
    return textOf(r);
  };
  /** The requests the server saw for `/hit?…`, as their query strings. */
  const hits = (): string[] => f.web.requests.filter((r) => r.path.startsWith('/hit?')).map((r) => r.path.slice(5));
  const hit = (what: string) => until(`the page to report ${what}`, () => hits().includes(what), { seen: hits });
  const ref = (r: string) => ({ type: 'ref', ref: r });

  before(async () => {
    f = await startBrowserFixture({ browserSettings: { enable: ['javascript_exec'] } });
    top = f.web.origin;
    cross = top.replace('127.0.0.1', 'localhost');
    // Each button reports a click only when the click's point is on it, so a misplaced click is not counted.
    const report = (id: string) =>
      `<script>document.getElementById('${id}').addEventListener('click', (e) => {
        const r = e.currentTarget.getBoundingClientRect();
        if (e.clientX >= r.left && e.clientX <= r.right && e.clientY >= r.top && e.clientY <= r.bottom)
          fetch('/hit?${id}');
      });</script>`;
    f.web.route(
      '/top',
      `<title>Shop</title><style>body { margin: 0; font: 16px sans-serif }
        iframe { display: block; border: 7px solid #888; padding: 13px; margin: 10px 30px }</style>
      <h1>Checkout</h1>
      <iframe id="login" src="/login" width="400" height="220"></iframe>
      <main><p>Your order is below.</p>
        <iframe id="pay" src="${cross}/pay" width="400" height="160"></iframe></main>
      <div style="height: 2000px"></div>
      <iframe id="far" src="/far" width="300" height="600"></iframe>`,
    );
    f.web.route(
      '/login',
      `<style>body { margin: 0 }</style><h2>Sign in</h2>
      <label>Email <input id="email" name="email"></label>
      <label><input type="checkbox" id="remember"> Remember me</label>
      <button id="signin" style="width: 24px; height: 16px; padding: 0">in</button>
      <iframe src="/inner" width="200" height="60" style="border: 0"></iframe>${report('signin')}`,
    );
    f.web.route(
      '/inner',
      `<style>body { margin: 0 }</style><a href="#help" id="help">Help inside</a>${report('help')}`,
    );
    f.web.route('/inner?again', `<style>body { margin: 0 }</style><a href="#help">Help again</a>`);
    // A small target in a frame drawn at 1.5 times its size, and the same frame turned.
    const small = `<style>body { margin: 0 }</style><button id="small"
      style="position: absolute; left: 200px; top: 60px; width: 20px; height: 14px; padding: 0">S</button>`;
    f.web.route('/small', `${small}${report('small')}`);
    f.web.route(
      '/scaled',
      `<style>body { margin: 0 }</style><iframe src="/small" width="300" height="120"
        style="transform: scale(1.5); transform-origin: 0 0; border: 5px solid; padding: 4px; margin: 40px"></iframe>`,
    );
    f.web.route(
      '/turned',
      `<style>body { margin: 0 }</style><iframe src="/small" width="300" height="120"
        style="transform: rotate(10deg); margin: 40px"></iframe>`,
    );
    f.web.route(
      '/covered',
      `<style>body { margin: 0 }</style><iframe src="/small" width="300" height="120"></iframe>
      <div style="position: fixed; inset: 0; background: rgba(0, 0, 0, 0.4)"></div>`,
    );
    // A cross-site frame that stops answering for 8 s, then answers again.
    f.web.route(
      '/slow',
      `<title>Slow</title><h1>Slow frame below</h1><div id="box"></div>
      <iframe src="${cross}/slowframe" width="300" height="100"></iframe>`,
    );
    // Its buttons appear in the task that then blocks (when the test lets /go answer), so the first
    // evaluation to see them is one the frame answers late.
    f.web.route(
      '/slowframe',
      `<p>Slow frame</p><script>fetch('/go').then(() => {
        for (let i = 0; i < 5; i++) document.body.append(Object.assign(document.createElement('button'), { textContent: 'Evil ' + i }));
        const end = Date.now() + 8000;
        while (Date.now() < end) {}
      });</script>`,
    );
    f.web.route(
      '/pay',
      `<style>body { margin: 0 }</style><p>Card details, from another site.</p>
      <input aria-label="Card number" id="card">
      <select aria-label="Expiry year" id="year"><option>2027</option><option>2028</option></select>
      <button id="paynow" style="margin-left: 150px; width: 30px; height: 18px; padding: 0">Pay now</button>
      ${report('paynow')}`,
    );
    f.web.route(
      '/far',
      `<style>body { margin: 0 }</style><div style="height: 450px"></div>
      <button id="deep" style="width: 40px; height: 20px; padding: 0">Deep</button>${report('deep')}`,
    );
    f.web.route(
      '/many',
      `<title>Many</title>${Array.from({ length: FRAMES_MAX + 3 }, (_, i) => `<iframe src="/one?${i}" width="60" height="30"></iframe>`).join('')}`,
    );
    f.web.route('/one', `<button>One</button>`);
    // A cross-site frame that answers once (so the test knows it loaded), then never again: its script spins.
    f.web.route(
      '/spinning',
      `<title>Spin</title><h1>Above the spinning frame</h1><iframe src="${cross}/spin" width="200" height="80"></iframe>
      <iframe src="/one" width="200" height="80"></iframe>`,
    );
    f.web.route(
      '/spin',
      `<button>Spinner</button><script>fetch('/hit?spin-loaded').then(() => { for (;;) {} });</script>`,
    );
  });

  after(async () => {
    await f?.close();
  });

  test('read_page lists same-origin, nested and cross-site frames under their iframes, with unique refs', async () => {
    await call('navigate', { url: `${top}/top` });
    // Frames load on their own after the page; wait until read_page shows the deepest one.
    const text = await until('read_page to show every frame', async () => {
      const t = await call('read_page', { filter: 'all' });
      return t.includes('Help inside') && t.includes('Pay now') && t.includes('"Deep"') ? t : undefined;
    });
    const email = lineFor(text, 'textbox', 'Email');
    const help = lineFor(text, 'link', 'Help inside');
    const pay = lineFor(text, 'button', 'Pay now');
    const card = lineFor(text, 'textbox', 'Card number');
    const signIn = lineFor(text, 'heading', 'Sign in');
    assert.ok(signIn.indent > 0 && email.indent > 0, `a frame's lines are indented under its iframe:\n${text}`);
    assert.ok(help.indent > signIn.indent, `a frame in a frame is indented deeper:\n${text}`);
    assert.ok(pay.indent > 0 && card.indent > 0, `cross-site frame lines are indented under their iframe:\n${text}`);
    const order = ['Checkout', 'Email', 'Help inside', 'Your order is below.', 'Card number', 'Deep'].map((w) =>
      text.indexOf(w),
    );
    assert.deepEqual(
      [...order].sort((a, b) => a - b),
      order,
      `frames' lines are in their iframes' places:\n${text}`,
    );
    const refs = [...text.matchAll(/\[(ref_\d+)\]/g)].map((m) => m[1]);
    assert.equal(new Set(refs).size, refs.length, `every ref appears once:\n${text}`);
  });

  test('the default read lists only what is in view, in frames too', async () => {
    const text = await call('read_page');
    assert.match(text, /textbox "Email"/);
    assert.match(text, /button "Pay now"/);
    assert.doesNotMatch(text, /"Deep"/, 'a frame below the fold is not read');
    assert.match(text, /elements outside the viewport are not shown/);
  });

  test('find ranks matches from every frame together; get_page_text includes frames', async () => {
    const found = await call('find', { query: 'pay now button' });
    assert.match(found.split('\n')[1]!, /^button "Pay now" \[ref_\d+\]/, found);
    const text = await call('get_page_text');
    assert.ok(text.startsWith('Your order is below.'), `main content first:\n${text}`);
    assert.match(text, /Card details, from another site\./, 'a frame inside main content is main content');
    for (const words of ['Checkout', 'Sign in', 'Help inside', 'Deep']) assert.ok(text.includes(words), words);
  });

  test('left_click on refs in a same-origin frame and in a cross-site frame lands on the element', async () => {
    const text = await call('read_page', { filter: 'all' });
    await call('left_click', { target: ref(lineFor(text, 'button', 'in').ref) });
    await hit('signin');
    await call('left_click', { target: ref(lineFor(text, 'button', 'Pay now').ref) });
    await hit('paynow');
    // A frame in a frame: two iframes' content boxes on the way.
    await call('left_click', { target: ref(lineFor(text, 'link', 'Help inside').ref) });
    await hit('help');
  });

  test('form_input sets fields in both kinds of frame', async () => {
    const text = await call('read_page', { filter: 'all' });
    await call('form_input', { target: ref(lineFor(text, 'textbox', 'Email').ref), value: 'ann@example.com' });
    await call('form_input', { target: ref(lineFor(text, 'textbox', 'Card number').ref), value: '4242 4242' });
    await call('form_input', { target: ref(lineFor(text, 'combobox', 'Expiry year').ref), value: '2028' });
    await call('form_input', { target: ref(lineFor(text, 'checkbox', 'Remember me').ref), value: true });
    const after = await call('read_page', { filter: 'all' });
    assert.match(lineFor(after, 'textbox', 'Email').line, /value="ann@example\.com"/);
    assert.match(lineFor(after, 'textbox', 'Card number').line, /value="4242 4242"/);
    assert.match(lineFor(after, 'combobox', 'Expiry year').line, /value="2028"/);
    assert.match(lineFor(after, 'checkbox', 'Remember me').line, / checked/);
  });

  test('scroll_to brings an element deep in a frame below the fold into view; a click then lands', async () => {
    await call('javascript_exec', { text: 'window.scrollTo(0, 0)' });
    const all = await call('read_page', { filter: 'all' });
    const deep = lineFor(all, 'button', 'Deep');
    assert.match(deep.line, / offscreen/);
    await call('scroll_to', { target: ref(deep.ref) });
    const seen = await call('read_page');
    assert.doesNotMatch(lineFor(seen, 'button', 'Deep').line, / offscreen/, seen);
    await call('left_click', { target: ref(deep.ref) });
    await hit('deep');
  });

  test('a ref in a frame that navigated or was removed is refused as stale', async () => {
    const text = await call('read_page', { filter: 'all' });
    const help = lineFor(text, 'link', 'Help inside').ref;
    const pay = lineFor(text, 'button', 'Pay now').ref;
    await call('javascript_exec', {
      text: `document.getElementById('login').contentDocument.querySelector('iframe').src = '/inner?again'`,
    });
    await until('the inner frame to show its new document', async () => /Help again/.test(await call('get_page_text')));
    assert.match(await failing('left_click', { target: ref(help) }), /is stale/);
    await call('javascript_exec', { text: `document.getElementById('pay').remove()` });
    assert.match(await failing('left_click', { target: ref(pay) }), /is stale/);
    assert.match(await failing('read_page', { ref: pay }), /is stale/);
  });

  test('a click lands in a scaled frame; a rotated or covered frame is refused, not guessed at', async () => {
    const smallRef = async (page: string): Promise<string> => {
      await call('navigate', { url: `${top}${page}` });
      const text = await until(`the frame of ${page} to be read`, async () => {
        const t = await call('read_page', { filter: 'all' });
        return t.includes('button "S"') ? t : undefined;
      });
      return lineFor(text, 'button', 'S').ref;
    };
    await call('left_click', { target: ref(await smallRef('/scaled')) });
    await hit('small');
    const turned = await smallRef('/turned');
    assert.equal(
      await failing('left_click', { target: ref(turned) }),
      `${turned} is inside a rotated or skewed frame, so it cannot be pointed at: use a coordinate from a screenshot.`,
    );
    const covered = await smallRef('/covered');
    assert.equal(
      await failing('left_click', { target: ref(covered) }),
      `${covered} is inside a frame that something else on the page covers at that point, so it cannot be pointed at.`,
    );
    assert.equal(hits().filter((h) => h === 'small').length, 1, 'only the scaled frame was clicked');
  });

  test(`at most ${FRAMES_MAX} frames are read per call, and the rest are counted`, async () => {
    await call('navigate', { url: `${top}/many` });
    const text = await until(`${FRAMES_MAX} frames to be read`, async () => {
      const t = await call('read_page', { filter: 'all' });
      return (t.match(/button "One"/g) ?? []).length === FRAMES_MAX ? t : undefined;
    });
    assert.match(text, /\[3 more frames were not read \(at most 20 per call\); read one with its iframe's ref\]/);
    const firstUnread = [...text.matchAll(/^iframe \[(ref_\d+)\]/gm)][FRAMES_MAX]![1]!;
    assert.match(await call('read_page', { ref: firstUnread }), /button "One"/);
  });

  test('a frame that answers after its call gave up issues refs that collide with nothing', async () => {
    let go = (): void => {};
    f.web.route('/go', { body: 'go', until: new Promise<void>((resolve) => (go = resolve)) });
    await call('navigate', { url: `${top}/slow` });
    // The frame is read once (its world made), then set going: it adds its buttons and blocks for 8 s.
    await until('the slow frame to be read', async () => /Slow frame"/.test(await call('read_page')));
    go();
    // A read while the frame is busy: it is left behind, its evaluation still queued in the frame.
    await until(
      'a read that leaves the busy frame out',
      async () => /could not be read/.test(await call('read_page')),
      {
        timeoutMs: 60_000,
      },
    );
    // New elements in the main frame get refs while the late evaluation is still waiting.
    await call('javascript_exec', {
      text: `for (let i = 0; i < 5; i++) {
        const t = document.createElement('input');
        t.setAttribute('aria-label', 'New main ' + i);
        document.getElementById('box').append(t);
      }`,
    });
    const during = await call('read_page');
    const newMain = lineFor(during, 'textbox', 'New main 0').ref;
    const after = await until(
      'the frame to answer again',
      async () => {
        const t = await call('read_page');
        return t.includes('Evil 4') ? t : undefined;
      },
      { timeoutMs: 60_000 },
    );
    const refs = [...after.matchAll(/\[(ref_\d+)\]/g)].map((m) => m[1]);
    assert.equal(new Set(refs).size, refs.length, `every ref appears once:\n${after}`);
    assert.equal(lineFor(after, 'textbox', 'New main 0').ref, newMain);
    await call('form_input', { target: ref(newMain), value: 'mine' });
    assert.match(lineFor(await call('read_page'), 'textbox', 'New main 0').line, /value="mine"/);
  });

  // Last: the spinning frame's renderer stays busy until its page goes.
  test('a frame whose renderer never answers is left out after a bounded time; the rest of the page is read', async () => {
    await call('navigate', { url: `${top}/spinning` });
    await hit('spin-loaded');
    // The frame starts spinning just after it reported; a read that came before that saw it whole.
    let took = 0;
    const text = await until(
      'read_page to leave the spinning frame out and read the next one',
      async () => {
        const started = performance.now();
        const t = await call('read_page');
        took = performance.now() - started;
        // Also the frame after it, once loaded: it is read though the one before it never answers.
        return /could not be read/.test(t) && /button "One"/.test(t) ? t : undefined;
      },
      { timeoutMs: 60_000 },
    );
    assert.match(text, /heading "Above the spinning frame"/);
    assert.match(text, /\[1 frame could not be read \(loading, removed, or not answering\)\]/);
    assert.doesNotMatch(text, /Spinner/);
    // Said, not asserted against the clock: the bound is FRAME_ANSWER_MS, the machine may be slow.
    console.log(`# read_page with a spinning frame: ${Math.round(took)} ms (a frame's bound: ${FRAME_ANSWER_MS} ms)`);
    await call('navigate', { url: `${top}/top` });
  });
});
