/**
 * Reading members end to end: read_page, find and get_page_text through a
 * real daemon driving real headless Chromium against a local web server, and
 * the element references they hand out (stable across calls, refused when
 * stale). refCenter and refElement are also checked directly with Playwright
 * against the page's own hit testing. Every batch_result is checked against
 * the API's rules.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright';
import { refCenter, refElement } from '../src/browser/frame-worlds.ts';
import { readPage, READ_OUTPUT_MAX } from '../src/browser/snapshot.ts';
import { ToolInputError } from '../src/base/errors.ts';
import type { BatchResult, ToolUse } from '../src/base/protocol.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { CHROMIUM_PATH } from '../testkit/chromium.ts';
import { browserUse as use, startBrowserFixture, type BrowserFixture } from '../testkit/web.ts';
import { failsWith } from '../testkit/errors.ts';

type Result = BatchResult['tool_results'][number];

const FORM_PAGE = `<!doctype html><title>Sign up</title>
<style>body { margin: 0; font: 16px sans-serif } </style>
<header><nav aria-label="Primary"><a href="/home">Home</a> <a href="/about">About us</a></nav></header>
<main>
  <h1>Sign up</h1>
  <p>Fill in the form to <b>create</b> an account.</p>
  <form action="/submit" method="post">
    <label for="email">Email address</label>
    <input id="email" name="email" type="email" placeholder="you@example.com" value="a@b.c" required>
    <label>Password <input type="password" name="pw" value="secret"></label>
    <label for="country">Country</label>
    <select id="country" name="country"><option value="fr">France</option><option value="de" selected>Germany</option></select>
    <label><input type="checkbox" name="terms" checked> I accept the terms</label>
    <input id="victim" aria-label="Nickname">
    <button type="submit">Submit</button>
    <button type="button" disabled>Cancel</button>
  </form>
  <div style="display:none"><button>Hidden button</button></div>
  <div style="height:3000px"></div>
  <h2>Far below</h2>
  <a href="/far">Far link</a>
</main>
<footer><p>Footer text about the submit policy</p></footer>`;

let batchNo = 0;
async function run(f: BrowserFixture, toolUses: ToolUse[]): Promise<BatchResult> {
  const { result } = await f.client.batch(`read${batchNo++}`, toolUses);
  return assertApiValid(toolUses, result);
}

const textOf = (r: Result): string =>
  (Array.isArray(r.content) ? r.content : [])
    .filter((b): b is { type: 'text'; text: string } => b.type === 'text')
    .map((b) => b.text)
    .join('\n');

/** Runs one call; it must succeed; returns its text. */
async function call(f: BrowserFixture, name: string, input: Record<string, unknown> = {}): Promise<string> {
  const r = (await run(f, [use(name, input)])).tool_results[0]!;
  assert.ok(!r.is_error, `${name} failed: ${textOf(r)}`);
  return textOf(r);
}

/** Runs one call; it must fail; returns its text. */
async function failing(f: BrowserFixture, name: string, input: Record<string, unknown> = {}): Promise<string> {
  const r = (await run(f, [use(name, input)])).tool_results[0]!;
  assert.equal(r.is_error, true, `${name} should have failed: ${textOf(r)}`);
  return textOf(r);
}

/** The line for the element `role "name"`, and its ref. */
function lineFor(text: string, role: string, name: string): { line: string; ref: string } {
  const line = text.split('\n').find((l) => l.trimStart().startsWith(`${role} "${name}" [ref_`));
  assert.ok(line, `no ${role} "${name}" in:\n${text}`);
  return { line, ref: /\[(ref_\d+)\]/.exec(line)![1]! };
}

/** ref → the line's `role "name"`, for every line. */
function refMap(text: string): Map<string, string> {
  const map = new Map<string, string>();
  for (const l of text.split('\n')) {
    const m = /^\s*(.*?) \[(ref_\d+)\]/.exec(l);
    if (m) map.set(m[2]!, m[1]!);
  }
  return map;
}

describe('browser reading members through the daemon', () => {
  let f: BrowserFixture;
  let origin: string;

  before(async () => {
    f = await startBrowserFixture({
      browserSettings: { enable: ['javascript_exec'] },
    });
    origin = f.web.origin;
    f.web.route('/form', FORM_PAGE);
    f.web.route('/other', '<title>Other</title><h1>Other page</h1><button>Submit</button>');
    f.web.route(
      '/huge',
      `<title>Huge</title><ul>${Array.from({ length: 3000 }, (_, i) => `<li>List item number ${i} with some words</li>`).join('')}</ul>`,
    );
    f.web.route(
      '/many',
      `<title>Many</title>${Array.from({ length: 30 }, (_, i) => `<button>Item ${i}</button>`).join('')}
       <p>Press the send button below to send.</p><button id="send">Send</button>`,
    );
    f.web.route(
      '/article',
      `<title>Article</title><nav>Menu Home Blog Contact</nav>
       <div class="sidebar">Sidebar   ads    here</div>
       <main><article><h1>The headline</h1><p>First   paragraph
       of the story.</p></article></main><footer>Copyright footer</footer>`,
    );
    f.web.route(
      '/medium',
      `<title>Medium</title><main>${Array.from(
        { length: 30 },
        (_, i) =>
          `<section aria-label="Section ${i}"><h2>Heading ${i}</h2><p>Paragraph ${i} text.</p>` +
          `<ul><li><a href="/a${i}">Link ${i}</a></li><li>Item ${i}</li></ul>` +
          `<label>Field ${i} <input name="f${i}"></label><button>Go ${i}</button></section>`,
      ).join('')}</main>`,
    );
    f.web.route('/empty', '<title>Empty</title>');
  });

  after(async () => {
    await f?.close();
  });

  test('read_page shows roles, names, state and refs of the visible elements', async () => {
    await call(f, 'navigate', { url: `${origin}/form` });
    const text = await call(f, 'read_page');
    lineFor(text, 'navigation', 'Primary');
    assert.match(lineFor(text, 'link', 'Home').line, /href="http:\/\/127\.0\.0\.1:\d+\/home"/);
    assert.match(lineFor(text, 'heading', 'Sign up').line, /level=1/);
    lineFor(text, 'paragraph', 'Fill in the form to create an account.');
    assert.match(lineFor(text, 'textbox', 'Email address').line, /type=email value="a@b\.c" required/);
    // A password's value is never shown.
    assert.match(lineFor(text, 'textbox', 'Password').line, /value=\(hidden, 6 characters\)/);
    assert.doesNotMatch(text, /secret/);
    assert.match(lineFor(text, 'combobox', 'Country').line, /value="Germany"/);
    assert.match(lineFor(text, 'option', 'Germany').line, /selected/);
    assert.match(lineFor(text, 'checkbox', 'I accept the terms').line, /checked/);
    lineFor(text, 'button', 'Submit');
    assert.match(lineFor(text, 'button', 'Cancel').line, /disabled/);
    // Indented by depth: the form's controls sit under it.
    assert.match(text, /^ {2}form \[ref_\d+\]$/m);
    assert.match(text, /^ {4}button "Submit" \[ref_\d+\]$/m);
    // Hidden and off-viewport elements are left out, and the model is told about the latter.
    assert.doesNotMatch(text, /Hidden button|Far below|Far link|Footer/);
    assert.match(text, /\[elements outside the viewport are not shown; use filter "all" or scroll\]/);
  });

  test('filter interactive lists only interactive elements; all adds off-viewport ones', async () => {
    const interactive = await call(f, 'read_page', { filter: 'interactive' });
    lineFor(interactive, 'button', 'Submit');
    lineFor(interactive, 'link', 'About us');
    lineFor(interactive, 'textbox', 'Email address');
    assert.doesNotMatch(interactive, /heading|paragraph|navigation|Far link/);

    const all = await call(f, 'read_page', { filter: 'all' });
    assert.match(lineFor(all, 'heading', 'Far below').line, /level=2 offscreen/);
    assert.match(lineFor(all, 'link', 'Far link').line, /offscreen/);
    lineFor(all, 'paragraph', 'Footer text about the submit policy');
    assert.doesNotMatch(all, /Hidden button|outside the viewport/);
  });

  test('depth limits the tree; ref reads one subtree', async () => {
    const shallow = await call(f, 'read_page', { depth: 1 });
    const lines = shallow.split('\n').filter((l) => l.includes('[ref_'));
    assert.ok(lines.length >= 2);
    for (const l of lines) assert.doesNotMatch(l, /^\s/, `depth 1 has no nested lines: ${l}`);
    assert.match(shallow, /\[elements deeper than depth 1 are not shown; read a subtree with ref\]/);

    const full = await call(f, 'read_page');
    const formRef = /form \[(ref_\d+)\]/.exec(full)![1]!;
    const sub = await call(f, 'read_page', { ref: formRef });
    assert.equal(sub.split('\n')[0], `form [${formRef}]`);
    lineFor(sub, 'button', 'Submit');
    assert.doesNotMatch(sub, /Sign up|navigation/);
    // The subtree keeps the refs the whole page gave.
    assert.equal(lineFor(sub, 'button', 'Submit').ref, lineFor(full, 'button', 'Submit').ref);

    assert.match(await failing(f, 'read_page', { depth: 0 }), /depth/);
    assert.match(await failing(f, 'read_page', { ref: 'button 3' }), /not an element reference.*ref_7/);
    assert.match(await failing(f, 'read_page', { ref: 'ref_999999' }), /ref_999999 is not a reference on this page/);
  });

  test('refs are stable across read_page and find', async () => {
    const a = await call(f, 'read_page', { filter: 'all' });
    const b = await call(f, 'read_page', { filter: 'all' });
    assert.deepEqual(refMap(a), refMap(b));
    const interactive = await call(f, 'read_page', { filter: 'interactive' });
    for (const [ref, what] of refMap(interactive)) assert.equal(refMap(a).get(ref), what);

    const found = await call(f, 'find', { query: 'submit button' });
    const first = found.split('\n')[1]!;
    assert.equal(first, `button "Submit" [${lineFor(a, 'button', 'Submit').ref}]`);
    assert.match(found.split('\n')[0]!, /matched "submit button", best first:/);
  });

  test('a ref whose element left the DOM is refused, never replaced', async () => {
    const text = await call(f, 'read_page');
    const { ref } = lineFor(text, 'textbox', 'Nickname');
    // Replace the element with a look-alike: same label, new element.
    await call(f, 'javascript_exec', {
      text: `const old = document.getElementById('victim'); const twin = old.cloneNode(); old.replaceWith(twin); 'ok'`,
    });
    const message = await failing(f, 'read_page', { ref });
    assert.match(message, new RegExp(`${ref} is stale: its element has been removed from the page`));
    assert.match(message, /Call read_page or find again/);
    // The look-alike gets a new ref.
    const again = await call(f, 'read_page');
    assert.notEqual(lineFor(again, 'textbox', 'Nickname').ref, ref);
  });

  test('after navigation old refs are refused', async () => {
    const before = await call(f, 'read_page');
    const { ref } = lineFor(before, 'button', 'Submit');
    await call(f, 'navigate', { url: `${origin}/other` });
    const after = await call(f, 'read_page');
    // The new page's Submit button has a new number: old numbers never name new elements.
    assert.notEqual(lineFor(after, 'button', 'Submit').ref, ref);
    assert.ok(!refMap(after).has(ref));
    const message = await failing(f, 'read_page', { ref });
    assert.match(message, new RegExp(`${ref} is stale: it was given for an earlier page`));

    // Even a reload (same URL, new document) makes refs stale.
    const { ref: other } = lineFor(after, 'button', 'Submit');
    await call(f, 'navigate', { url: 'reload' });
    assert.match(await failing(f, 'read_page', { ref: other }), /is stale/);
  });

  test('a huge page is cut at 50,000 characters, and says so', async () => {
    await call(f, 'navigate', { url: `${origin}/huge` });
    const text = await call(f, 'read_page', { filter: 'all' });
    assert.ok(text.length <= READ_OUTPUT_MAX, `length ${text.length}`);
    assert.ok(text.length > READ_OUTPUT_MAX - 1000, `length ${text.length}`);
    assert.ok(text.endsWith('[output truncated at 50000 characters; use ref or filter to read less]'));
    const pageTextResult = await call(f, 'get_page_text');
    assert.ok(pageTextResult.length <= READ_OUTPUT_MAX);
    assert.ok(pageTextResult.endsWith('[text truncated at 50000 characters]'));
  });

  test('find returns at most 20 matches, best first, and says when nothing matched', async () => {
    await call(f, 'navigate', { url: `${origin}/many` });
    const items = await call(f, 'find', { query: 'item buttons' });
    const lines = items.split('\n');
    assert.match(lines[0]!, /^30 elements matched "item buttons"; the best 20 are shown, best first:$/);
    assert.equal(lines.length, 21);
    assert.equal(lines[1], lines[1]!.match(/^button "Item 0" \[ref_\d+\]$/)?.[0]);

    const send = await call(f, 'find', { query: 'the send button' });
    assert.match(send.split('\n')[1]!, /^button "Send" \[ref_\d+\]$/);

    assert.match(
      await call(f, 'find', { query: 'zebra crossing' }),
      /^No element on the page matched "zebra crossing"/,
    );
    assert.match(await failing(f, 'find', { query: '   ' }), /query/);
    assert.match(await failing(f, 'find', { query: 'x'.repeat(501) }), /query/);
  });

  test('get_page_text puts the main content first, whitespace collapsed', async () => {
    await call(f, 'navigate', { url: `${origin}/article` });
    const text = await call(f, 'get_page_text');
    assert.ok(text.startsWith('The headline\nFirst paragraph of the story.'), text);
    assert.match(text, /Menu Home Blog Contact/);
    assert.match(text, /Sidebar ads here/);
    assert.ok(text.indexOf('Copyright footer') > text.indexOf('First paragraph'));
  });

  test('an empty page says so instead of returning nothing', async () => {
    await call(f, 'navigate', { url: `${origin}/empty` });
    assert.match(await call(f, 'read_page'), /^No elements are visible in the viewport/);
    assert.equal(await call(f, 'get_page_text'), 'The page has no visible text.');
    assert.match(await call(f, 'find', { query: 'button' }), /^No element on the page matched "button"/);
  });

  // Its speed is a figure for `npm run bench`, never a pass/fail here (shared machines are noisy).
  test('read_page on a medium page (~300 elements) reads every element', async (t) => {
    await call(f, 'navigate', { url: `${origin}/medium` });
    const times: number[] = [];
    let text = '';
    for (let i = 0; i < 7; i++) {
      const t0 = performance.now();
      text = await call(f, 'read_page', { filter: 'all' });
      times.push(performance.now() - t0);
    }
    times.sort((a, b) => a - b);
    const median = times[Math.floor(times.length / 2)]!;
    const count = text.split('\n').filter((l) => l.includes('[ref_')).length;
    t.diagnostic(`read_page on ${count} elements: median ${median.toFixed(1)} ms (round trip through the daemon)`);
    assert.ok(count >= 300, `only ${count} elements`);
  });
});

describe('refCenter and refElement, directly with Playwright', () => {
  let browser: Browser;
  let page: Page;

  before(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true });
    page = await browser.newPage({ viewport: { width: 800, height: 600 } });
    await page.setContent(`<style>body { margin: 0 }</style>
      <button id="top" style="position:absolute; left:100px; top:50px; width:120px; height:40px">Top</button>
      <p style="width:150px; position:absolute; left:300px; top:40px">Some words then
        <a id="wrapped" href="#w">a link that wraps over two lines</a></p>
      <div id="covered" style="position:absolute; left:100px; top:200px; width:200px; height:40px">Half covered</div>
      <div style="position:absolute; left:100px; top:200px; width:150px; height:40px; background:red">overlay</div>
      <button id="gone" style="display:none">Gone</button>
      <button id="far" style="position:absolute; left:400px; top:3000px">Far</button>`);
  });

  after(async () => {
    await browser?.close();
  });

  /** The ref read_page gave the element with this id. */
  async function refOf(id: string): Promise<string> {
    // read_page hands out refs; the element is then found by its ref in the page.
    const text = await readPage(page, { filter: 'all' });
    for (const ref of text.matchAll(/\[(ref_\d+)\]/g)) {
      const handle = await refElement(page, ref[1]!);
      if ((await handle.getAttribute('id')) === id) return ref[1]!;
    }
    // Elements without a line (display:none) get no ref.
    throw new Error(`no ref for #${id}`);
  }

  const hit = (p: { x: number; y: number }) =>
    page.evaluate(`document.elementFromPoint(${p.x}, ${p.y})?.id ?? null`) as Promise<string | null>;

  test('the centre hits the element itself', async () => {
    for (const id of ['top', 'wrapped', 'covered', 'far']) {
      const p = await refCenter(page, await refOf(id));
      assert.equal(await hit(p), id, `${id} at ${JSON.stringify(p)}`);
      assert.ok(p.x >= 0 && p.x < 800 && p.y >= 0 && p.y < 600, `${id} point in the viewport`);
    }
  });

  test('pointing at refs uses up no ref numbers: a new element gets the next one', async () => {
    const number = (text: string): number[] => [...text.matchAll(/\[ref_(\d+)\]/g)].map((m) => Number(m[1]));
    const before = Math.max(...number(await readPage(page, { filter: 'all' })));
    const ref = await refOf('top');
    for (let i = 0; i < 5; i++) await refCenter(page, ref);
    await page.evaluate(`document.body.insertAdjacentHTML('beforeend', '<button id="later">Later</button>')`);
    const text = await readPage(page, { filter: 'all' });
    const later = Number(/button "Later" \[ref_(\d+)\]/.exec(text)?.[1]);
    // Each evaluation reserves a block of numbers; one that numbered nothing gives it all back.
    assert.ok(later > before && later < before + 100, `ref_${later} after ref_${before}`);
    await page.evaluate(`document.getElementById('later').remove()`);
  });

  test('a hidden element has no ref; one hidden later has no box', async () => {
    await assert.rejects(refOf('gone'), failsWith(Error, 'no ref for #gone'));
    const ref = await refOf('top');
    await page.evaluate(`document.getElementById('top').style.display = 'none'`);
    await assert.rejects(
      refCenter(page, ref),
      failsWith(
        ToolInputError,
        `${ref} names an element that is not displayed (it has no box on the page), so it cannot be pointed at.`,
      ),
    );
    await page.evaluate(`document.getElementById('top').style.display = ''`);
  });

  test('refElement refuses malformed, unknown, removed and pre-navigation refs', async () => {
    await assert.rejects(
      refElement(page, 'ref_x'),
      failsWith(ToolInputError, '"ref_x" is not an element reference: use a ref such as ref_7 from read_page or find.'),
    );
    await assert.rejects(
      refElement(page, 'ref_987654'),
      failsWith(
        ToolInputError,
        'ref_987654 is not a reference on this page (it may belong to another tab). Call read_page or find again to get current references.',
      ),
    );
    const ref = await refOf('covered');
    assert.equal(await (await refElement(page, `[${ref}]`)).getAttribute('id'), 'covered');
    await page.evaluate(`document.getElementById('covered').remove()`);
    await assert.rejects(
      refElement(page, ref),
      failsWith(
        ToolInputError,
        `${ref} is stale: its element has been removed from the page. Call read_page or find again to get current references.`,
      ),
    );
    const topRef = await refOf('top');
    // A navigation: a new document (setContent would keep the window, and so the registry).
    await page.goto('data:text/html,<button id="top">Top again</button>');
    const earlierPage = `${topRef} is stale: it was given for an earlier page (the tab has navigated since) or for another tab. Call read_page or find again to get current references.`;
    await assert.rejects(refElement(page, topRef), failsWith(ToolInputError, earlierPage));
    await assert.rejects(refCenter(page, topRef), failsWith(ToolInputError, earlierPage));
  });
});

describe('ref numbers across pages read at once', () => {
  let browser: Browser;

  before(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true });
  });
  after(async () => {
    await browser?.close();
  });

  /**
   * Page P's read waits (its page is busy) while page Q is read, and P's answer, which numbered
   * nothing new, comes after Q's. Q's next read must still number Q's new elements: before, Q kept
   * the `next` of its last block, above every later block, and listed no new element at all.
   */
  test('a read that answers after another page was read leaves that page room for new refs', async () => {
    const context = await browser.newContext();
    try {
      const p = await context.newPage();
      const q = await context.newPage();
      await p.setContent('<button>P one</button>');
      await q.setContent('<button>Q one</button>');
      const ATTEMPTS = 4;
      for (let attempt = 1; ; attempt++) {
        await readPage(p, { filter: 'all' });
        await readPage(q, { filter: 'all' });
        // P's renderer is busy for a while; the read sent meanwhile waits for it.
        const spin = p.evaluate('(() => { const end = Date.now() + 1500; while (Date.now() < end) {} })()');
        let pAnswered = false;
        const pRead = readPage(p, { filter: 'all' }).finally(() => (pAnswered = true));
        await readPage(q, { filter: 'all' });
        const overlapped = !pAnswered;
        await Promise.all([spin, pRead]);
        await q.evaluate(`document.body.insertAdjacentHTML('beforeend', '<button>Q new ${attempt}</button>')`);
        const text = await readPage(q, { filter: 'all' });
        assert.match(text, new RegExp(`button "Q new ${attempt}" \\[ref_\\d+\\]`), text);
        if (overlapped) break;
        // P answered before Q was read: the case was not made; try again.
        assert.ok(attempt < ATTEMPTS, `P's read never overlapped Q's in ${ATTEMPTS} attempts`);
      }
    } finally {
      await context.close();
    }
  });
});
