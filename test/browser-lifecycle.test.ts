/**
 * The browser's lifecycle, end to end with real headless Chromium: a browser
 * that dies mid-batch fails that call (the rest of the batch is not executed)
 * and the next batch relaunches it; two sessions share nothing; a session that
 * ends closes its browser context.
 */
import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { DEFAULT_CONFIG } from '../src/config.ts';
import type { BatchResult, ToolUse } from '../src/protocol.ts';
import { assertApiValid } from './helpers/api-rules.ts';
import type { TestClient } from './helpers/daemon.ts';
import { browserUse as use, startBrowserFixture, type BrowserFixture } from './helpers/web.ts';

const NOT_EXECUTED = 'Not executed: an earlier action in this turn failed.';
const ENABLE = { ...DEFAULT_CONFIG.browserSettings, enable: ['javascript_exec'] };

type Block = { type: string; text?: string; tabs?: { tab_id: string; url: string; active?: boolean }[] };
type Result = BatchResult['tool_results'][number];

let n = 0;
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
 * direct children; renderers and other helpers carry `--type=`). Only our own
 * children: other people's browsers run on this machine.
 */
async function ourBrowserPids(): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid !== process.pid) continue;
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
  });
  after(() => f?.close());

  test('a browser that dies during a call fails it; the rest is not executed; the next batch relaunches', async () => {
    let r = await run(f.client, [use('navigate', { url: `${f.web.origin}/a` })]);
    const before = tabsOf(r.tool_results[0]!);
    const pids = await ourBrowserPids();
    assert.equal(pids.length, 1, `one browser of ours: ${pids.join(', ')}`);
    const batch = run(f.client, [
      use('wait', { duration: 3 }),
      use('navigate', { url: `${f.web.origin}/b` }),
      use('list_tabs'),
    ]);
    await new Promise((resolve) => setTimeout(resolve, 700));
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
    process.kill(pid!, 'SIGKILL');
    await new Promise((resolve) => setTimeout(resolve, 300));
    const r = await run(f.client, [use('navigate', { url: `${f.web.origin}/a` })]);
    assert.ok(!r.tool_results[0]!.is_error, textOf(r.tool_results[0]!));
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
    const r = await run(client, [
      use('navigate', { url: `${f.web.origin}/ping-page` }),
      use('wait', { duration: 0.3 }),
    ]);
    assert.ok(!r.tool_results.some((x) => x.is_error));
    const pings = () => f.web.requests.filter((q) => q.path === '/ping').length;
    assert.ok(pings() > 0, 'the page pings while its session lives');
    client.close();
    // The session outlives its connection by sessionGraceMs (300 ms), then its context closes.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const settled = pings();
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(pings(), settled, 'no page of the ended session is still running');
  });
});
