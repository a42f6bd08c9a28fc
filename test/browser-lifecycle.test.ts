/**
 * The browser's lifecycle, end to end with real headless Chromium: a browser
 * that dies mid-batch fails that call (the rest of the batch is not executed)
 * and the next batch relaunches it; two sessions share nothing; a session that
 * ends closes its browser context.
 */
import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import type { BrowserManager } from '../src/browser/manager.ts';
import { SharedDesktop } from '../src/desktop-pool/pool.ts';
import type { BatchResult, ToolEvent, ToolUse } from '../src/base/protocol.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import type { TestClient } from '../testkit/daemon.ts';
import { until, within } from '../testkit/wait.ts';
import { killAndReap } from '../testkit/faults.ts';
import { browserUse as use, startBrowserFixture, type BrowserFixture } from '../testkit/web.ts';

const NOT_EXECUTED = 'Not executed: an earlier action in this turn failed.';
const ENABLE = { enable: ['javascript_exec'] };

type Block = { type: string; text?: string; tabs?: { tab_id: string; url: string; active?: boolean }[] };
type Result = BatchResult['tool_results'][number];

let n = 0;
const managerOf = (fx: BrowserFixture): BrowserManager => {
  const desktops = fx.daemon.daemon.desktops;
  assert.ok(desktops instanceof SharedDesktop && desktops.desktop.browser, 'one shared desktop with a browser');
  return desktops.desktop.browser;
};

/**
 * Kills the fixture's browser and waits until the daemon has seen it go: "between calls". Its CDP pipe
 * closing reached Playwright before the next batch did most of the time, not always (a fresh-clone CI
 * run: the next call began on the dead browser, and so learnt of its death during the call).
 */
async function killBetweenCalls(fx: BrowserFixture, pid: number): Promise<void> {
  const manager = managerOf(fx);
  const deaths = manager.deaths;
  await killAndReap(pid, 'the killed browser');
  await until('the daemon to see its browser go', () => manager.deaths > deaths);
}

async function run(client: TestClient, toolUses: ToolUse[]): Promise<BatchResult> {
  const { result } = await client.batch(`l${n++}`, toolUses);
  return assertApiValid(toolUses, result);
}
const blocks = (r: Result): Block[] => (Array.isArray(r.content) ? (r.content as Block[]) : []);
const textOf = (r: Result) =>
  blocks(r)
    .filter((b) => b.type === 'text')
    .map((b) => b.text)
    .join('\n');
const tabsOf = (r: Result) => blocks(r).find((b) => b.type === 'browser_state')?.tabs ?? [];

/**
 * The pids of the Chromium browser processes this test process started (its
 * children, or its grandchildren when the browser runs in a sandbox, nsenter
 * in between; renderers and other helpers carry `--type=`). Only our own:
 * other people's browsers run on this machine.
 */
async function ourBrowserPids(): Promise<number[]> {
  const parentOf = async (pid: number | string): Promise<number> => {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  };
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const ppid = await parentOf(entry);
    if (ppid !== process.pid && (await parentOf(ppid)) !== process.pid) continue;
    const cmdline = (await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '')).split('\0');
    if (/chromium/.test(cmdline[0] ?? '') && !cmdline.some((a) => a.startsWith('--type='))) pids.push(Number(entry));
  }
  return pids;
}

describe('browser lifecycle', () => {
  let f: BrowserFixture;
  before(async () => {
    f = await startBrowserFixture({ browserSettings: ENABLE, sessionGraceMs: 300 });
    f.web.route('/favicon.ico', { status: 204, body: '' });
    f.web.route('/a', '<title>Page A</title>');
    f.web.route('/b', '<title>Page B</title>');
    f.web.route('/set', {
      headers: { 'set-cookie': 'who=alice; Path=/' },
      body: `<title>Set</title><script>localStorage.setItem('who', 'alice')</script>`,
    });
    f.web.route('/ping-page', `<title>Pinger</title><script>setInterval(() => fetch('/ping'), 50)</script>`);
    f.web.route('/ping', 'pong');
    f.web.route('/tick-page', `<title>Clock</title><script>setInterval(() => fetch('/tick'), 50)</script>`);
    f.web.route('/tick', 'tock');
  });
  after(() => f?.close());

  test('a browser that dies during a call fails it; the rest is not executed; the next batch relaunches', async () => {
    let r = await run(f.client, [use('navigate', { url: `${f.web.origin}/a` })]);
    const before = tabsOf(r.tool_results[0]!);
    const pids = await ourBrowserPids();
    assert.equal(pids.length, 1, `one browser of ours: ${pids.join(', ')}`);
    // The kill follows the wait's start at once; the call ends when the browser dies under it, well
    // within the 5 s. (Its sleep runs on after the crash, holding this process that long at most.)
    const wait = use('wait', { duration: 5 });
    const batch = run(f.client, [wait, use('navigate', { url: `${f.web.origin}/b` }), use('list_tabs')]);
    await within(
      f.client.next(
        (m): m is ToolEvent => m.type === 'tool_event' && m.tool_use_id === wait.id && m.phase === 'started',
      ),
      'the wait call to start',
      30_000,
    );
    process.kill(pids[0]!, 'SIGKILL');
    r = await batch;
    assert.equal(r.tool_results[0]!.is_error, true);
    assert.equal(textOf(r.tool_results[0]!), "Tool 'wait' failed with BrowserCrashedError.");
    assert.equal(r.failures[0]?.error.type, 'BrowserCrashedError');
    assert.equal(r.failures[0]?.error.retryable, true);
    assert.equal(textOf(r.tool_results[1]!), NOT_EXECUTED);
    assert.equal(textOf(r.tool_results[2]!), NOT_EXECUTED);

    r = await run(f.client, [use('navigate', { url: `${f.web.origin}/b` }), use('list_tabs')]);
    assert.ok(!r.tool_results.some((x) => x.is_error), JSON.stringify(r.tool_results));
    assert.match(textOf(r.tool_results[0]!), /^Navigated to .*\/b — Page B \(HTTP 200\)/);
    const now = tabsOf(r.tool_results[1]!);
    assert.equal(now.length, 1);
    assert.ok(!before.some((t) => t.tab_id === now[0]!.tab_id), 'tab ids of the dead browser are not reused');
    const relaunched = await ourBrowserPids();
    assert.equal(relaunched.length, 1);
    assert.notEqual(relaunched[0], pids[0]);
  });

  test('a browser that died between batches is relaunched by the next call', async () => {
    const [pid] = await ourBrowserPids();
    // "Between batches": the daemon has seen the browser go before the next call (its CDP pipe closes
    // when the browser and, in a sandbox, its nsenter are reaped).
    await killBetweenCalls(f, pid!);
    const r = await run(f.client, [use('navigate', { url: `${f.web.origin}/a` })]);
    assert.ok(!r.tool_results[0]!.is_error, textOf(r.tool_results[0]!));
  });

  test('after a crash between calls, reading the lost page fails instead of reading a blank one; navigate works and says so', async () => {
    let r = await run(f.client, [use('navigate', { url: `${f.web.origin}/a` }), use('get_page_text')]);
    assert.deepEqual(r.failures, []);
    const [pid] = await ourBrowserPids();
    await killBetweenCalls(f, pid!);
    // The model's page went with the browser: the call fails (it used to read a new blank tab,
    // "The page has no visible text.", as if it were the page the model had opened).
    r = await run(f.client, [use('get_page_text'), use('list_tabs')]);
    assert.equal(r.failures[0]?.error.type, 'BrowserCrashedError');
    // The failed call's own result says why, after its error text (as the SDK's runner puts notices).
    assert.equal(
      textOf(r.tool_results[0]!),
      "Tool 'get_page_text' failed with BrowserCrashedError.\n" +
        'The browser was restarted after a crash; the tabs open before were closed.',
    );
    assert.equal(textOf(r.tool_results[1]!), NOT_EXECUTED);
    r = await run(f.client, [use('navigate', { url: `${f.web.origin}/b` }), use('get_page_text')]);
    assert.deepEqual(r.failures, []);
    // Said once: not again on the next result.
    assert.match(textOf(r.tool_results[0]!), /^Navigated to .*\/b — Page B \(HTTP 200\)$/);
    assert.equal(textOf(r.tool_results[1]!), 'The page has no visible text.', 'page B has a title only');
  });

  test('two sessions share no cookies, storage or tabs', async () => {
    const other = await f.daemon.connect();
    try {
      let r = await run(f.client, [
        use('navigate', { url: `${f.web.origin}/set` }),
        use('javascript_exec', { text: `document.cookie + '|' + localStorage.getItem('who')` }),
      ]);
      assert.equal(textOf(r.tool_results[1]!).split('\n')[0], 'who=alice|alice');
      const mine = tabsOf(r.tool_results[0]!).map((t) => t.url);
      r = await run(other, [
        use('navigate', { url: `${f.web.origin}/a` }),
        use('javascript_exec', { text: `document.cookie + '|' + localStorage.getItem('who')` }),
        use('list_tabs'),
      ]);
      assert.equal(textOf(r.tool_results[1]!).split('\n')[0], '|null');
      const theirs = tabsOf(r.tool_results[2]!);
      assert.deepEqual(
        theirs.map((t) => t.url),
        [`${f.web.origin}/a`],
      );
      assert.ok(mine.includes(`${f.web.origin}/set`));
    } finally {
      other.close();
    }
  });

  test('a session that ends closes its browser context', async () => {
    const client = await f.daemon.connect();
    const r = await run(client, [use('navigate', { url: `${f.web.origin}/ping-page` })]);
    assert.ok(!r.tool_results.some((x) => x.is_error));
    const pings = () => f.web.requests.filter((q) => q.path === '/ping').length;
    await until('the page to ping while its session lives', () => pings() > 0);
    const ended = (await client.hello()).session_id;
    // A clock for the pinging page: a page of a session that lives on, ticking at the same interval in
    // the same browser. While the ended session's page runs, no ten ticks pass without a ping of it.
    const ticks = () => f.web.requests.filter((q) => q.path === '/tick').length;
    const clock = await run(f.client, [use('navigate', { url: `${f.web.origin}/tick-page` })]);
    assert.ok(!clock.tool_results.some((x) => x.is_error), JSON.stringify(clock.tool_results));
    client.close();
    // The session outlives its connection by sessionGraceMs (300 ms), then its context closes.
    await until('the ended session to expire', () => !f.daemon.daemon.server.findSession(ended), { timeoutMs: 30_000 });
    const ticksSincePing = () => {
      const last = f.web.requests.findLastIndex((q) => q.path === '/ping');
      return f.web.requests.slice(last + 1).filter((q) => q.path === '/tick').length;
    };
    await until("the ended session's page to stop pinging", () => ticksSincePing() >= 10, {
      timeoutMs: 30_000,
      seen: () => ({ pings: pings(), ticks: ticks() }),
    });
    const settled = pings();
    const at = ticks();
    await until('ten more ticks of the clock page', () => ticks() >= at + 10, { timeoutMs: 30_000 });
    assert.equal(pings(), settled, 'no page of the ended session is still running');
  });
});

describe('warm start: the shared desktop launches its browser when the daemon starts', () => {
  test('with no call, the browser starts; the first call uses that browser, no second launch', async () => {
    const fx = await startBrowserFixture({ browserSettings: { launchAtStart: true } });
    try {
      fx.web.route('/a', '<title>Page A</title>');
      const manager = managerOf(fx);
      await until('the browser to run with no call made', () => manager.pid !== undefined, { timeoutMs: 60_000 });
      const launched = manager.generation;
      const pid = manager.pid;
      const r = await run(fx.client, [use('navigate', { url: `${fx.web.origin}/a` })]);
      assert.match(textOf(r.tool_results[0]!), /^Navigated to .*\/a — Page A \(HTTP 200\)/);
      assert.equal(manager.generation, launched, 'the call launched no browser of its own');
      assert.equal(manager.pid, pid);
    } finally {
      await fx.close();
    }
  });

  test('a background launch that fails leaves the daemon up; each browser call gets the launch error it would get without one', async () => {
    const fx = await startBrowserFixture({
      browserSettings: { executablePath: '/nonexistent/chromium', launchAtStart: true },
    });
    try {
      // The first call may come while the background launch still runs (it joins it) or after it
      // failed (it launches again): the same error either way, and the daemon keeps serving.
      for (const attempt of [1, 2]) {
        const r = await run(fx.client, [use('navigate', { url: 'http://127.0.0.1:9/' })]);
        assert.equal(textOf(r.tool_results[0]!), "Tool 'navigate' failed with BrowserUnavailableError.");
        assert.equal(r.failures[0]?.error.type, 'BrowserUnavailableError', `attempt ${attempt}`);
        assert.match(r.failures[0]!.error.message, /the browser did not start/, `attempt ${attempt}`);
        assert.equal(r.failures[0]!.error.retry_after_ms, undefined, 'not refused by an open circuit (3 failures)');
      }
    } finally {
      await fx.close();
    }
  });
});
