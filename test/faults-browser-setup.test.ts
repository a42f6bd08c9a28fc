/**
 * Chromium dies while the daemon sets up a session's browser context or a
 * tab (issue 4, promise 1): a real daemon with the browser toolset only (no
 * display), a real ws client and a real headless Chromium, stopped (SIGSTOP)
 * so that a call waits in the step the daemon logs as begun, then SIGKILLed
 * there. The call fails promptly and retryably with BrowserCrashedError, the
 * rest of the batch's browser calls are not executed, every tool_use is
 * answered exactly once, and the next batch works again.
 *
 * Recovery is polled (every 300 ms, up to 45 s), never assumed for the very
 * next batch. How batches are run and checked is in testkit/fault-batches.ts.
 * Prints `[measure]` lines: how long the failing batch took, and recovery.
 *
 * Run: node --import tsx --test --test-timeout=180000 test/faults-browser-setup.test.ts
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import type { ToolUse } from '../src/base/protocol.ts';
import { BROWSER_NOT_EXECUTED_TEXT } from '../toolsets/browser/index.ts';
import { startTestDaemon, type TestClient, type TestDaemon } from '../testkit/daemon.ts';
import {
  assertHaltedAfter,
  assertNoStrayResults,
  assertRetryableFailure,
  freshHello,
  measure,
  run,
  textOf,
  untilOk,
  type Run,
} from '../testkit/fault-batches.ts';
import { startPages, type Pages } from '../testkit/fault-pages.ts';
import { chromiumBrowserPids, descendants, killAll, launcherOf } from '../testkit/faults.ts';
import { browserUse } from '../testkit/web.ts';

const unexpected: unknown[] = [];
process.on('unhandledRejection', (err) => unexpected.push(err));

// ---------------------------------------------------------------------------

describe('faults: Chromium dies while the daemon sets up a session context or a tab', () => {
  // Browser only: no display, so nothing but the browser is in play.
  const CALL_MS = 8_000;
  let pages: Pages;
  let d: TestDaemon;
  let warm: TestClient;
  const uses = (): ToolUse[] => [
    browserUse('navigate', { url: `${pages.origin}/a` }),
    browserUse('get_page_text'),
    browserUse('list_tabs'),
  ];

  before(async () => {
    pages = await startPages();
    d = await startTestDaemon({ display: undefined, browser: 'headless', callTimeoutMs: CALL_MS });
    warm = await d.connect();
  });
  after(async () => {
    await d?.close();
    await pages?.close();
  });

  const browserUp = (): Promise<unknown> =>
    untilOk(warm, () => [browserUse('navigate', { url: `${pages.origin}/a` })], 'browser up');

  /** The one Chromium of this daemon, and its zygotes and renderers. */
  async function theBrowser(): Promise<{ pid: number; helpers: number[] }> {
    const [pid, ...more] = await chromiumBrowserPids();
    assert.ok(pid !== undefined && more.length === 0, `one browser: ${[pid, ...more].join(', ')}`);
    const helpers = (await descendants(pid)).filter((p) => /--type=(zygote|renderer)\b/.test(p.argv.join(' ')));
    return { pid, helpers: helpers.map((p) => p.pid) };
  }

  /**
   * The daemon logs each step a browser call waits on Chromium in as it begins (src/browser/session.ts):
   * how often session `session` has begun `step` ('browser context opening', 'browser tab opening').
   */
  async function begun(session: string, step: string): Promise<number> {
    const log = await readFile(d.logFile, 'utf8');
    // Whole lines only: the last one may still be being written.
    const lines = log
      .slice(0, log.lastIndexOf('\n') + 1)
      .split('\n')
      .filter(Boolean);
    return lines.filter((line) => {
      const record = JSON.parse(line) as { msg?: unknown; session?: unknown };
      return record.msg === step && record.session === session;
    }).length;
  }

  /**
   * Runs a browser batch and SIGKILLs Chromium once its first call has begun `step` (the test stopped
   * Chromium or its helpers, so the call cannot get past it): that call fails retryably with
   * BrowserCrashedError, the rest is not executed, and the next batch works again.
   */
  async function killChromiumMidCall(
    c: TestClient,
    session: string,
    pid: number,
    helpers: number[],
    step: string,
    during: string,
  ): Promise<void> {
    const batch = uses();
    const launcher = launcherOf(pid);
    const before = await begun(session, step);
    let r: Run;
    try {
      r = await run(c, batch, {
        fault: {
          index: 0,
          when: {
            what: `the daemon to log '${step}' for ${session}`,
            holds: async () => (await begun(session, step)) > before,
          },
          inject: () => void killAll([pid, ...launcher]),
        },
      });
    } finally {
      killAll([pid, ...launcher, ...helpers]);
    }
    measure(`batch with Chromium killed during ${during} (${r.result.failures[0]?.error.type})`, r.ms);
    assertRetryableFailure(batch, r.result, 0, ['BrowserCrashedError']);
    assertHaltedAfter(batch, r.result, 0, BROWSER_NOT_EXECUTED_TEXT);
    const back = await untilOk(c, uses, `browser batch after Chromium died during ${during}`);
    assert.match(textOf(back.result, 1), /alpha page/);
    await freshHello(d);
    await assertNoStrayResults(c);
  }

  test("killed while a new session's browser context is being created: the call fails with BrowserCrashedError, retryable", async () => {
    await browserUp();
    const { pid, helpers } = await theBrowser();
    const c = await d.connect();
    try {
      const { session_id: session } = await c.hello();
      // Stopped, Chromium still holds its pipe: the daemon takes it for alive and asks it for the new context.
      process.kill(pid, 'SIGSTOP');
      await killChromiumMidCall(c, session, pid, helpers, 'browser context opening', 'newContext');
    } finally {
      c.close();
    }
  });

  test('killed while a tab is being opened: the call fails promptly with BrowserCrashedError, not at the call timeout', async () => {
    await browserUp();
    const c = await d.connect();
    try {
      const { session_id: session } = await c.hello();
      // The session has its context but no tab: the next navigate opens one.
      const open = [browserUse('navigate', { url: `${pages.origin}/a` })];
      await run(c, open);
      const closed = [browserUse('close_tab', { tab_id: 'tab-1' })];
      const none = await run(c, closed);
      assert.deepEqual(none.result.tool_results[0]!.content, [{ type: 'browser_state', tabs: [] }]);
      const { pid, helpers } = await theBrowser();
      // With its zygotes and renderers stopped, Chromium cannot finish the new tab: the kill lands mid-newPage.
      killAll(helpers, 'SIGSTOP');
      await killChromiumMidCall(c, session, pid, helpers, 'browser tab opening', 'newPage');
    } finally {
      c.close();
    }
  });
});

test('no unhandled rejections during the faults', () => {
  assert.deepEqual(unexpected, []);
});
