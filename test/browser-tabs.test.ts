/**
 * Browser navigation, tabs, screenshots, the optional members and what the
 * browser does on its own (popups, downloads, dialogs), end to end: a real
 * daemon drives real headless Chromium against a local web server. Every
 * batch_result is checked against the API's rules, browser_state included.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import sharp from 'sharp';
import type { BatchResult, ToolEvent, ToolUse } from '../src/base/protocol.ts';
import { assertApiValid, imageSize } from '../testkit/api-rules.ts';
import { until } from '../testkit/wait.ts';
import { browserUse as use, startBrowserFixture, type BrowserFixture } from '../testkit/web.ts';

const NOT_EXECUTED = 'Not executed: an earlier action in this turn failed.';

interface State {
  tabs: { tab_id: string; title: string; url: string; active?: boolean }[];
  state_changes?: {
    type: string;
    tab_id?: string;
    download_id?: string;
    url?: string;
    path?: string;
    size_bytes?: number;
    error?: string;
  }[];
}
type Block = { type: string; text?: string; source?: { data: string; media_type: string } } & Partial<State>;
type Result = BatchResult['tool_results'][number];

let n = 0;
async function run(f: BrowserFixture, toolUses: ToolUse[]): Promise<BatchResult> {
  const { result } = await f.client.batch(`b${n++}`, toolUses);
  const checked = assertApiValid(toolUses, result);
  checked.tool_results.forEach(checkBrowserState);
  return checked;
}

const blocks = (r: Result): Block[] => (Array.isArray(r.content) ? (r.content as Block[]) : []);
const textOf = (r: Result): string =>
  blocks(r)
    .filter((b) => b.type === 'text')
    .map((b) => b.text)
    .join('\n');
const stateOf = (r: Result): State | undefined =>
  blocks(r).find((b) => b.type === 'browser_state') as State | undefined;
const activeTab = (s: State) => s.tabs.find((t) => t.active)?.tab_id;

/** The browser_state rules of docs/TOOLSETS.md C4 and F7. */
function checkBrowserState(r: Result): void {
  const states = blocks(r).filter((b) => b.type === 'browser_state') as State[];
  assert.ok(states.length <= 1, 'at most one browser_state');
  if (r.is_error) assert.equal(states.length, 0, 'no browser_state on an error');
  const s = states[0];
  if (!s) return;
  assert.ok(s.tabs.length <= 100);
  if (s.tabs.length) assert.equal(s.tabs.filter((t) => t.active).length, 1, 'exactly one active tab');
  assert.equal(new Set(s.tabs.map((t) => t.tab_id)).size, s.tabs.length, 'unique tab ids');
  const control = /[\p{Cc}\u2028\u2029]/u; // C0, DEL, C1 and the two line separators
  for (const t of s.tabs)
    for (const v of [t.tab_id, t.title, t.url]) assert.ok(!control.test(v) && [...v].length <= 4096);
  if (s.state_changes) {
    assert.ok(s.state_changes.length >= 1 && s.state_changes.length <= 200);
    const ids = s.state_changes.filter((c) => c.download_id).map((c) => c.download_id);
    assert.equal(new Set(ids).size, ids.length, 'one change per download_id');
    for (const c of s.state_changes) {
      if (c.type === 'tab_opened')
        assert.ok(
          s.tabs.some((t) => t.tab_id === c.tab_id),
          'tab_opened is listed',
        );
    }
  }
}

/** A tab member's result: exactly one browser_state, nothing else. */
function tabResult(r: Result): State {
  assert.ok(!r.is_error, textOf(r));
  assert.deepEqual(
    blocks(r).map((b) => b.type),
    ['browser_state'],
  );
  return stateOf(r)!;
}

describe('browser navigation, tabs, screen and optional members', () => {
  let f: BrowserFixture;
  let uploads: string;
  let downloads: string;
  let origin: string;

  before(async () => {
    uploads = await mkdtemp(join(tmpdir(), 'deskbatch-uploads-'));
    downloads = await mkdtemp(join(tmpdir(), 'deskbatch-downloads-'));
    await writeFile(join(uploads, 'hello.txt'), 'hello upload');
    f = await startBrowserFixture({
      browserSettings: {
        enable: ['javascript_exec', 'read_console', 'read_network', 'file_upload'],
        uploadRoots: [uploads],
        downloadsDir: downloads,
        // The download test reads the saved file through download_completed.path (hidden by default).
        exposeDownloadPaths: true,
        denyHosts: ['localhost'],
      },
    });
    origin = f.web.origin;
    const port = new URL(origin).port;
    f.web.route('/favicon.ico', { status: 204, body: '' });
    f.web.route('/a', '<title>Page A</title><h1>A</h1>');
    f.web.route('/b', '<title>Page B</title><h1>B</h1>');
    f.web.route('/status404', { status: 404, body: '<title>Missing</title>' });
    f.web.route('/evil-title', '<title>line1\nline2\u2028x</title>');
    f.web.route(
      '/popup-on-load',
      `<title>Opener</title><script>window.onload = () => window.open('/b', '_blank');</script>`,
    );
    f.web.route(
      '/blank-link',
      `<title>Links</title><a href="/a" target="_blank" style="display:block;width:400px;height:300px;background:#ccc">open A</a>`,
    );
    f.web.route('/file.csv', {
      headers: { 'content-type': 'text/csv', 'content-disposition': 'attachment; filename="price list.csv"' },
      body: 'a,b\n1,2\n',
    });
    f.web.route(
      '/dialogs',
      `<title>Dialogs</title><script>window.onload = () => { alert('say "hi"\\nthere'); confirm(''); prompt('${'n'.repeat(300)}'); };</script>`,
    );
    f.web.route(
      '/to-localhost',
      `<title>Redirector</title><script>location.href = 'http://localhost:${port}/a';</script>`,
    );
    f.web.route(
      '/colors',
      `<style>body{margin:0}</style><div style="position:fixed;left:0;top:0;width:640px;height:800px;background:#f00"></div>` +
        `<div style="position:fixed;left:640px;top:0;width:640px;height:800px;background:#00f"></div>`,
    );
    f.web.route(
      '/console',
      `<title>Console</title><script>console.log('hello', 42); console.warn('careful\\nnow'); fetch('/data.json');</script>`,
    );
    f.web.route('/data.json', { headers: { 'content-type': 'application/json' }, body: '{"x":1}' });
    f.web.route('/upload', `<title>Upload</title><input type="file" id="f" aria-label="Attachment">`);
  });
  after(async () => {
    await f?.close();
    await rm(uploads, { recursive: true, force: true });
    await rm(downloads, { recursive: true, force: true });
  });

  test('navigate reports url, title and status, with a browser_state', async () => {
    const r = await run(f, [use('navigate', { url: `${origin}/a` }), use('navigate', { url: `${origin}/status404` })]);
    const [a, missing] = r.tool_results;
    assert.equal(textOf(a!).split('\n')[0], `Navigated to ${origin}/a — Page A (HTTP 200)`);
    const s = stateOf(a!)!;
    assert.equal(s.tabs.find((t) => t.active)?.url, `${origin}/a`);
    assert.equal(textOf(missing!).split('\n')[0], `Navigated to ${origin}/status404 — Missing (HTTP 404)`);
  });

  test('back, forward and reload', async () => {
    const r = await run(f, [
      use('navigate', { url: `${origin}/a` }),
      use('navigate', { url: `${origin}/b` }),
      use('navigate', { url: 'back' }),
      use('navigate', { url: 'forward' }),
      use('navigate', { url: 'reload' }),
    ]);
    const lines = r.tool_results.map((x) => textOf(x).split('\n')[0]);
    assert.match(lines[2]!, new RegExp(`^Navigated to ${origin}/a — Page A`));
    assert.match(lines[3]!, new RegExp(`^Navigated to ${origin}/b — Page B`));
    assert.equal(lines[4], `Navigated to ${origin}/b — Page B (HTTP 200)`);
  });

  test('titles with line breaks are folded to one line', async () => {
    const r = await run(f, [use('navigate', { url: `${origin}/evil-title` })]);
    assert.equal(
      textOf(r.tool_results[0]!).split('\n')[0],
      `Navigated to ${origin}/evil-title — line1 line2 x (HTTP 200)`,
    );
  });

  for (const url of [
    'file:///etc/passwd',
    'javascript:alert(1)',
    'data:text/html,hi',
    'chrome://settings',
    'about:blank',
  ]) {
    test(`navigate refuses ${url.split(':')[0]}: URLs, and the rest of the batch is not executed`, async () => {
      const r = await run(f, [use('navigate', { url }), use('list_tabs')]);
      const [refused, skipped] = r.tool_results;
      assert.equal(refused!.is_error, true);
      assert.match(textOf(refused!), /^Refused: only http and https URLs can be opened/);
      assert.equal(textOf(skipped!), NOT_EXECUTED);
    });
  }

  test('navigate refuses a denied host; the page cannot go there either', async () => {
    const port = new URL(origin).port;
    const r = await run(f, [use('navigate', { url: `http://localhost:${port}/a` })]);
    assert.equal(r.tool_results[0]!.is_error, true);
    assert.equal(textOf(r.tool_results[0]!), "Refused: that host is not allowed by this browser's URL policy.");
    const before = f.web.requests.length;
    // The page's script asks for the denied host as it loads, which may be after navigate returned: the
    // refusal is noted on the first result after it that can hold text.
    const texts = (await run(f, [use('navigate', { url: `${origin}/to-localhost` })])).tool_results.map(textOf);
    await until(
      'a result to note the refused navigation',
      async () => {
        if (texts.some((t) => t.includes('A navigation was refused.'))) return true;
        texts.push(...(await run(f, [use('get_page_text')])).tool_results.map(textOf));
        return false;
      },
      { seen: () => texts, intervalMs: 50 },
    );
    assert.ok(!f.web.requests.slice(before).some((q) => q.path === '/a'), 'the denied page was never requested');
  });

  test('a scheme-less URL means https', async () => {
    const hostPort = new URL(origin).host;
    const r = await run(f, [use('navigate', { url: `${hostPort}/a` })]);
    // The test server speaks only http, so the https attempt fails at TLS: proof it was https.
    assert.equal(r.tool_results[0]!.is_error, true);
    assert.match(textOf(r.tool_results[0]!), /^The navigation failed: net::ERR_[A-Z_]+\.$/);
  });

  test('tab members answer with exactly one browser_state; ids are never reused', async () => {
    let r = await run(f, [use('list_tabs'), use('new_tab'), use('list_tabs')]);
    const first = tabResult(r.tool_results[0]!);
    const opened = tabResult(r.tool_results[1]!);
    const listed = tabResult(r.tool_results[2]!);
    assert.equal(opened.tabs.length, first.tabs.length + 1);
    assert.deepEqual(opened.state_changes, [{ type: 'tab_opened', tab_id: activeTab(opened) }]);
    assert.equal(opened.tabs.find((t) => t.active)?.url, 'about:blank');
    assert.equal(listed.state_changes, undefined);
    const newId = activeTab(opened)!;
    const oldId = first.tabs[0]!.tab_id;

    r = await run(f, [use('switch_tab', { tab_id: oldId }), use('close_tab', { tab_id: newId }), use('new_tab')]);
    assert.equal(activeTab(tabResult(r.tool_results[0]!)), oldId);
    const closed = tabResult(r.tool_results[1]!);
    assert.ok(!closed.tabs.some((t) => t.tab_id === newId));
    const again = tabResult(r.tool_results[2]!);
    const againId = activeTab(again)!;
    assert.notEqual(againId, newId, 'a closed tab id is not reused');
    assert.equal(Number(againId.split('-')[1]), Number(newId.split('-')[1]) + 1);
    await run(f, [use('close_tab', { tab_id: againId })]);
  });

  test('switch_tab and close_tab refuse unknown and malformed tab ids with an error', async () => {
    for (const tab_id of ['tab-999', 'tab-1\n', 'x'.repeat(4097), '']) {
      for (const name of ['switch_tab', 'close_tab']) {
        const r = await run(f, [use(name, { tab_id }), use('list_tabs')]);
        assert.equal(r.tool_results[0]!.is_error, true, `${name} ${JSON.stringify(tab_id.slice(0, 10))}`);
        assert.equal(textOf(r.tool_results[1]!), NOT_EXECUTED);
      }
    }
  });

  test('a popup a page opens while new_tab runs: new_tab reports only its own tab, kept active; the popup once, later', async () => {
    // The page opens its popup when the held response arrives; the test lets it go as new_tab starts.
    let release = (): void => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    f.web.route('/hold', { body: 'go', until: held });
    f.web.route(
      '/popup-on-signal',
      `<title>Waiter</title><script>fetch('/hold').then(() => window.open('/b', '_blank'));</script>`,
    );
    await run(f, [use('navigate', { url: `${origin}/popup-on-signal` })]);
    const started = f.client.next(
      (m): m is ToolEvent => m.type === 'tool_event' && m.name === 'new_tab' && m.phase === 'started',
    );
    void started.then(release, release);
    const first = await run(f, [use('new_tab'), use('list_tabs')]);
    const made = tabResult(first.tool_results[0]!);
    const own = made.state_changes?.filter((c) => c.type === 'tab_opened').map((c) => c.tab_id);
    assert.equal(own?.length, 1, 'new_tab reports exactly one tab_opened');
    assert.equal(activeTab(made), own![0], 'the tab new_tab opened is the active tab');
    assert.equal(made.tabs.find((t) => t.tab_id === own![0])?.url, 'about:blank');
    // The popup's tab_opened comes once, on a later result: in this batch, or a following list_tabs.
    const reports = [stateOf(first.tool_results[1]!)!];
    const popupOpened = (): string[] =>
      reports.flatMap((s) =>
        (s.state_changes ?? [])
          .filter((c) => c.type === 'tab_opened' && s.tabs.find((t) => t.tab_id === c.tab_id)?.url.endsWith('/b'))
          .map((c) => c.tab_id!),
      );
    const deadline = Date.now() + 20_000;
    while (popupOpened().length === 0) {
      assert.ok(Date.now() < deadline, `no result reported the popup's tab_opened: ${JSON.stringify(reports)}`);
      reports.push(tabResult((await run(f, [use('list_tabs')])).tool_results[0]!));
    }
    assert.equal(popupOpened().length, 1, 'the popup is reported once');
    // Whether it landed during new_tab (then held back) or after: said, not asserted (timing).
    console.log(`# popup listed on new_tab's own result: ${made.tabs.some((t) => t.url.endsWith('/b'))}`);
    await run(f, [use('close_tab', { tab_id: own![0] }), use('close_tab', { tab_id: popupOpened()[0] })]);
  });

  test('a popup opened by the page during navigate is reported as tab_opened on that call', async () => {
    const r = await run(f, [use('navigate', { url: `${origin}/popup-on-load` })]);
    const s = stateOf(r.tool_results[0]!)!;
    const opened = s.state_changes?.filter((c) => c.type === 'tab_opened') ?? [];
    assert.equal(opened.length, 1, JSON.stringify(s));
    const popup = s.tabs.find((t) => t.tab_id === opened[0]!.tab_id)!;
    assert.equal(popup.active, true, 'the popup comes to the front');
    await run(f, [use('close_tab', { tab_id: popup.tab_id })]);
  });

  test('a target=_blank link clicked is reported as tab_opened on the click', async () => {
    await run(f, [use('navigate', { url: `${origin}/blank-link` })]);
    for (let i = 0; i < 3; i++) {
      const r = await run(f, [use('left_click', { target: { type: 'coordinate', x: 100, y: 100 } })]);
      const s = stateOf(r.tool_results[0]!);
      const opened = s?.state_changes?.filter((c) => c.type === 'tab_opened') ?? [];
      assert.equal(opened.length, 1, JSON.stringify(r.tool_results[0]));
      const tab = s!.tabs.find((t) => t.tab_id === opened[0]!.tab_id)!;
      assert.equal(tab.active, true);
      await run(f, [use('close_tab', { tab_id: tab.tab_id })]);
      const back = await run(f, [use('list_tabs')]);
      const opener = tabResult(back.tool_results[0]!).tabs.find((t) => t.url.endsWith('/blank-link'))!;
      await run(f, [use('switch_tab', { tab_id: opener.tab_id })]);
    }
  });

  test('a download is saved and reported once, as download_completed', async () => {
    const r = await run(f, [use('navigate', { url: `${origin}/file.csv` })]);
    const result = r.tool_results[0]!;
    assert.ok(!result.is_error, textOf(result));
    assert.match(textOf(result), /started a download/);
    const changes = stateOf(result)!.state_changes!.filter((c) => c.download_id);
    assert.equal(changes.length, 1);
    const done = changes[0]!;
    assert.equal(done.type, 'download_completed');
    assert.equal(done.url, `${origin}/file.csv`);
    assert.ok(done.path!.startsWith(downloads), done.path);
    assert.equal(await readFile(done.path!, 'utf8'), 'a,b\n1,2\n');
    assert.equal(done.size_bytes, 8);
    // Reported once: the next result carries no download change.
    const next = await run(f, [use('list_tabs')]);
    assert.equal(stateOf(next.tool_results[0]!)!.state_changes, undefined);
  });

  test('dialogs never hang a call, and the model is told', async () => {
    const t0 = performance.now();
    const r = await run(f, [use('navigate', { url: `${origin}/dialogs` })]);
    // Not held until the 30 s call limit by a dialog nobody answers.
    assert.ok(performance.now() - t0 < 25_000, `${Math.round(performance.now() - t0)} ms`);
    const texts = blocks(r.tool_results[0]!)
      .filter((b) => b.type === 'text')
      .map((b) => b.text);
    assert.match(texts[0]!, /^Navigated to .*\/dialogs — Dialogs \(HTTP 200\)/);
    // One block per notice; the message on one line, JSON-quoted, cut to 200 code points with `…`, or left out.
    assert.deepEqual(texts.slice(1), [
      'An alert dialog "say \\"hi\\" there" was dismissed.',
      'A confirm dialog was dismissed.',
      `A prompt dialog "${'n'.repeat(200)}…" was dismissed.`,
    ]);
  });

  test('screenshot is the viewport; zoom fits the region to the screenshot size', async () => {
    const r = await run(f, [
      use('navigate', { url: `${origin}/colors` }),
      use('screenshot'),
      use('zoom', { region: [0, 0, 640, 400] }),
      use('zoom', { region: [600, 0, 700, 50] }),
    ]);
    const image = (i: number) => Buffer.from(blocks(r.tool_results[i]!)[0]!.source!.data, 'base64');
    for (const i of [1, 2, 3])
      assert.deepEqual(
        blocks(r.tool_results[i]!).map((b) => b.type),
        ['image'],
      );
    assert.deepEqual(imageSize(image(1)), { width: 1280, height: 800 });
    assert.deepEqual(imageSize(image(2)), { width: 1280, height: 800 });
    assert.deepEqual(imageSize(image(3)), { width: 1280, height: 640 });
    // The zoom of the left half is all red; the small zoom is half red, half blue.
    const { data } = await sharp(image(2)).raw().toBuffer({ resolveWithObject: true });
    assert.deepEqual([data[0], data[1], data[2]], [255, 0, 0]);
    const small = await sharp(image(3)).raw().toBuffer({ resolveWithObject: true });
    const px = (x: number) => [...small.data.subarray(x * small.info.channels, x * small.info.channels + 3)];
    assert.deepEqual(px(100), [255, 0, 0]);
    assert.deepEqual(px(1200), [0, 0, 255]);
  });

  test('zoom renders the region at its scale: a line a quarter of a pixel wide is there to see, also on a scrolled page', async () => {
    // Captured at 1 device pixel per CSS pixel and enlarged, the line would be one light grey column (about 191).
    f.web.route(
      '/hairline',
      `<style>body{margin:0;background:#fff;height:4000px}</style>` +
        `<div style="position:absolute;left:10px;top:1010px;width:1px;height:40px;background:#000;transform:scaleX(0.25);transform-origin:0 0"></div>`,
    );
    const r = await run(f, [
      use('navigate', { url: `${origin}/hairline` }),
      use('javascript_exec', { text: 'scrollTo(0, 1000), scrollY' }),
      use('zoom', { region: [0, 0, 32, 20] }),
    ]);
    assert.equal(textOf(r.tool_results[1]!), '1000');
    const zoomed = Buffer.from(blocks(r.tool_results[2]!)[0]!.source!.data, 'base64');
    assert.deepEqual(imageSize(zoomed), { width: 1280, height: 800 });
    const { data, info } = await sharp(zoomed).greyscale().raw().toBuffer({ resolveWithObject: true });
    let darkest = 255;
    for (let x = 0; x < info.width; x++) darkest = Math.min(darkest, data[600 * info.width + x]!);
    assert.ok(
      darkest < 64,
      `the darkest pixel across the line's row is ${darkest}: the line was enlarged, not rendered`,
    );
  });

  test('zoom refuses a region outside the screenshot', async () => {
    for (const region of [
      [0, 0, 1281, 10],
      [10, 10, 5, 20],
      [-1, 0, 10, 10],
    ]) {
      const r = await run(f, [use('zoom', { region })]);
      assert.equal(r.tool_results[0]!.is_error, true);
      assert.match(textOf(r.tool_results[0]!), /is not a region of the screenshot/);
    }
  });

  test('javascript_exec returns values as text and reports a thrown error by type', async () => {
    const r = await run(f, [
      use('navigate', { url: `${origin}/a` }),
      use('javascript_exec', { text: 'document.title' }),
      use('javascript_exec', { text: '({a: [1, "x"], b: null})' }),
      use('javascript_exec', { text: 'new Promise((r) => setTimeout(() => r(6 * 7), 50))' }),
      use('javascript_exec', { text: 'undefined' }),
      use('javascript_exec', { text: 'null.x' }),
    ]);
    assert.deepEqual(
      r.tool_results.slice(1, 5).map((x) => textOf(x).split('\n')[0]),
      ['Page A', '{"a":[1,"x"],"b":null}', '42', 'undefined'],
    );
    assert.equal(r.tool_results[5]!.is_error, true);
    assert.equal(textOf(r.tool_results[5]!), 'The JavaScript threw TypeError.');
    // An empty value reads (empty), also when the tabs changed and a browser_state goes beside it.
    const [empty] = (await run(f, [use('javascript_exec', { text: "document.title = 'Retitled', ''" })])).tool_results;
    assert.deepEqual(
      blocks(empty!).map((b) => b.type),
      ['text', 'browser_state'],
    );
    assert.equal(textOf(empty!), '(empty)');
    assert.equal(stateOf(empty!)!.tabs.find((t) => t.active)?.title, 'Retitled');
  });

  test("a failed call's notices are on its own result, as the SDK runner puts them, and not again later", async () => {
    await run(f, [use('navigate', { url: `${origin}/a` })]);
    // The alert is dismissed (and noted) before the script goes on to throw.
    const [failed] = (await run(f, [use('javascript_exec', { text: "alert('why'), null.x" })])).tool_results;
    assert.equal(failed!.is_error, true);
    assert.deepEqual(
      blocks(failed!).map((b) => b.text),
      ['The JavaScript threw TypeError.', 'An alert dialog "why" was dismissed.'],
    );
    const [next] = (await run(f, [use('javascript_exec', { text: '6 * 7' })])).tool_results;
    assert.deepEqual(
      blocks(next!).map((b) => b.text),
      ['42'],
    );
  });

  test('read_console and read_network report what happened since the last read', async () => {
    // A fresh tab: the buffers hold what happened in a tab since its last read.
    await run(f, [use('new_tab'), use('navigate', { url: `${origin}/console` })]);
    // The page's fetch may finish after navigate returned: the network log is read until it holds it.
    const lines: string[] = [];
    const readNetwork = (x: Result): number =>
      lines.push(
        ...textOf(x)
          .split('\n\n')[0]!
          .split('\n')
          .filter((l) => l !== 'No requests since the last read.'),
      );
    await until(
      `read_network to report GET ${origin}/data.json`,
      async () => {
        readNetwork((await run(f, [use('read_network')])).tool_results[0]!);
        return lines.some((l) => l.startsWith(`GET ${origin}/data.json `));
      },
      { seen: () => lines, intervalMs: 50 },
    );
    const r = await run(f, [use('read_console'), use('read_console'), use('read_network'), use('read_network')]);
    const [consoleText, consoleAgain, , networkAgain] = r.tool_results.map((x) => textOf(x).split('\n\n')[0]!);
    readNetwork(r.tool_results[2]!);
    assert.deepEqual(consoleText!.split('\n'), ['[log] hello 42', '[warning] careful now']);
    assert.equal(consoleAgain, 'No console messages since the last read.');
    assert.ok(
      lines.some((l) => new RegExp(`^GET ${origin}/console 200 text/html \\d+ ms$`).test(l)),
      lines.join('\n'),
    );
    assert.ok(
      lines.some((l) => new RegExp(`^GET ${origin}/data.json 200 application/json \\d+ ms$`).test(l)),
      lines.join('\n'),
    );
    assert.equal(networkAgain, 'No requests since the last read.');
  });

  test('file_upload refuses document ids the session did not stage and paths outside the upload roots, naming no path', async () => {
    await run(f, [use('navigate', { url: `${origin}/upload` })]);
    const target = { type: 'ref', ref: 'ref_1' };
    const cases: [Record<string, unknown>, RegExp][] = [
      [
        { document_ids: ['doc-1'] },
        /^document_ids\[0\] is not a document this session staged; nothing was uploaded\.$/,
      ],
      [{ paths: ['/etc/passwd'] }, /^paths\[0\] is not a file inside the folders uploads are allowed from/],
      [{ paths: [join(uploads, '..', 'x')] }, /^paths\[0\] is not a file inside/],
      [{ paths: [join(uploads, 'missing.txt')] }, /^paths\[0\] is not a file inside/],
      // Paths are checked before document ids, as the SDK's runner checks them.
      [{ paths: ['/etc/passwd'], document_ids: ['doc-1'] }, /^paths\[0\] is not a file inside/],
      [
        { paths: [join(uploads, 'hello.txt')], document_ids: ['doc-1'] },
        /^document_ids\[0\] is not a document this session staged/,
      ],
      [{}, /^Give paths or document_ids/],
    ];
    for (const [input, expected] of cases) {
      const r = await run(f, [use('file_upload', { target, ...input })]);
      assert.equal(r.tool_results[0]!.is_error, true);
      assert.match(textOf(r.tool_results[0]!), expected);
      assert.ok(!textOf(r.tool_results[0]!).includes('/'), 'no path in the text');
    }
  });

  test('file_upload sets the files of a file input found by read_page', async () => {
    let r = await run(f, [
      use('navigate', { url: `${origin}/upload` }),
      use('find', { query: 'file input Attachment' }),
    ]);
    const ref = /\[(ref_\d+)\]/.exec(textOf(r.tool_results[1]!))?.[1];
    assert.ok(ref, textOf(r.tool_results[1]!));
    r = await run(f, [
      use('file_upload', { target: { type: 'ref', ref }, paths: [join(uploads, 'hello.txt')] }),
      use('javascript_exec', {
        text: `document.getElementById('f').files[0].name + ':' + document.getElementById('f').files[0].size`,
      }),
    ]);
    assert.equal(textOf(r.tool_results[0]!).split('\n')[0], 'Uploaded.');
    assert.equal(textOf(r.tool_results[1]!).split('\n')[0], 'hello.txt:12');
  });
});
