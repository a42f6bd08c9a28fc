/**
 * Faults mid-batch, end to end (issue 4, promise 1): a real daemon, a real ws
 * client, a whole desktop (Xvfb, openbox, the event recorder page in kiosk
 * Chromium) and a real headless Chromium for the daemon, and then things break
 * under it — the nut-js desktop worker is SIGKILLed mid-call (during hold_key,
 * during a wait), Chromium is SIGKILLed mid-navigation, a worker or a Chromium
 * dies at every start, a client drops mid-batch and resends the batch from a
 * new connection. Each time: every tool_use is answered exactly once, in
 * order; the failure is retryable; halting is per toolset; the daemon keeps
 * serving (a fresh connection can hello, and a later batch succeeds).
 *
 * A circuit breaker may make calls fail fast for a while after repeated
 * failures, and members that change nothing may be retried automatically, so
 * recovery is polled (every 300 ms, up to 45 s), never assumed for the very
 * next batch. The crashing calls are members that change something
 * (`hold_key`, `navigate`), which are never retried, so their failure is seen.
 * How batches are run and checked is in testkit/fault-batches.ts; Chromium
 * killed while a session sets up is in test/faults-browser-setup.test.ts, the
 * X server killed in test/faults-x-server.test.ts.
 *
 * Prints `[measure]` lines: how long failing batches took while a resource
 * was down, and how long recovery took. No assertion on time beyond generous
 * bounds (the call timeout).
 *
 * Run: node --import tsx --test --test-timeout=180000 test/faults-mid-batch.test.ts
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import { BROWSER_CANCELLED_TEXT, BROWSER_NOT_EXECUTED_TEXT } from '../toolsets/browser/index.ts';
import { COMPUTER_NOT_EXECUTED_TEXT } from '../toolsets/computer/index.ts';
import { imageSize } from '../testkit/api-rules.ts';
import { computerUse, type TestClient, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDesktop, type TestDesktop } from '../testkit/desktop.ts';
import type { RecordedEvent, RecordedMouseEvent } from '../testkit/event-page.ts';
import {
  CALL_TIMEOUT_MS,
  HEIGHT,
  WIDTH,
  assertHaltedAfter,
  assertNoStrayResults,
  assertRetryableFailure,
  collect,
  computerOk,
  freshHello,
  measure,
  note,
  run,
  textOf,
  untilOk,
} from '../testkit/fault-batches.ts';
import { startPages, type Pages } from '../testkit/fault-pages.ts';
import {
  RESOURCE_DOWN_TYPES,
  childOrSandboxedPids,
  childPids,
  chromiumBrowserPids,
  desktopWorkerPids,
  killAll,
  waitFor,
} from '../testkit/faults.ts';
import { within } from '../testkit/wait.ts';
import { browserUse } from '../testkit/web.ts';

const unexpected: unknown[] = [];
process.on('unhandledRejection', (err) => unexpected.push(err));

// ---------------------------------------------------------------------------

/**
 * Kills whatever `find` returns as soon as it appears, until stopped: a
 * resource that dies at every start. Resolves once it has killed the one
 * running now and that one has been reaped (this process's children only
 * leave /proc once node has seen them exit).
 */
async function killLoop(find: () => Promise<number[]>): Promise<{ stop(): Promise<number> }> {
  let running = true;
  let kills = 0;
  const killed: number[] = [];
  const loop = (async () => {
    while (running) {
      const pids = await find();
      kills += killAll(pids);
      killed.push(...pids);
      await delay(20); // the loop's pace: a new process is looked for every 20 ms
    }
  })();
  await waitFor('the running process to be killed', async () => (kills > 0 ? true : undefined), 10_000, 10);
  const first = [...killed];
  await waitFor(
    `the killed process(es) ${first.join(', ')} to be reaped`,
    async () => (first.every((pid) => !existsSync(`/proc/${pid}`)) ? true : undefined),
    10_000,
    10,
  );
  return {
    async stop() {
      running = false;
      await loop;
      return kills;
    },
  };
}

// ---------------------------------------------------------------------------

describe('faults: the desktop worker and Chromium die mid-batch', () => {
  // A whole desktop: the event recorder page in kiosk Chromium shows what reached the X server.
  let desk: TestDesktop;
  let pages: Pages;
  let d: TestDaemon;
  let client: TestClient;
  /** The kiosk Chromium's pids, which are not the daemon's browser. */
  let kiosk: number[];
  const daemonBrowserPids = async (): Promise<number[]> =>
    (await chromiumBrowserPids()).filter((pid) => !kiosk.includes(pid));

  before(async () => {
    desk = await startTestDesktop(
      { width: WIDTH, height: HEIGHT },
      { browser: 'headless', callTimeoutMs: CALL_TIMEOUT_MS },
    );
    kiosk = await chromiumBrowserPids(); // the daemon launches its browser on the first browser call
    pages = await startPages();
    d = desk.daemon;
    client = desk.client;
    await client.hello();
    await untilOk(
      client,
      () => [...computerOk(), browserUse('navigate', { url: `${pages.origin}/a` })],
      'start: desktop worker and browser up',
    );
  });
  after(async () => {
    await desk?.close();
    await pages?.close();
  });

  test('worker SIGKILLed during hold_key: that call fails retryably, later computer calls are not executed, browser calls run; then it works again, with no key left down', async () => {
    const workers = await desktopWorkerPids();
    assert.equal(workers.length, 1, `one desktop worker: ${workers.join(', ')}`);
    await desk.reset();
    const uses = [
      computerUse('left_click', { coordinate: [200, 200] }), // focuses the page, so it sees keys
      computerUse('hold_key', { text: 'shift', duration: 8 }),
      computerUse('cursor_position'),
      browserUse('navigate', { url: `${pages.origin}/a` }),
      computerUse('screenshot'),
      browserUse('get_page_text'),
    ];
    // Another session's batch waits for the desktop behind the one that crashes.
    const other = await d.connect();
    await other.hello();
    const queued = [computerUse('cursor_position'), computerUse('mouse_move', { coordinate: [300, 300] })];
    let killed = 0;
    let events: RecordedEvent[] = [];
    const { result, ms } = await run(client, uses, {
      fault: {
        index: 1,
        // The hold is under way: the page has seen Shift go down. Only then does the click below,
        // unshifted, show that the killed worker left no key down.
        when: {
          what: 'the page to see Shift go down',
          holds: async () => (events = await desk.events()).some((e) => e.type === 'keydown' && e.key === 'Shift'),
          seen: () =>
            events.filter((e) => e.type !== 'mousemove').map((e) => [e.type, 'key' in e ? e.key : '', e.target]),
        },
        inject: async () => {
          // The other session's batch reaches the daemon and waits for the desktop before the kill:
          // the daemon announces it as started just before it asks for the desktop lane.
          let stopWatching = (): void => undefined;
          const arrived = new Promise<void>((resolve) => {
            stopWatching = d.daemon.activity.subscribe((a) => {
              if (a.type === 'batch_started' && a.batch_id === 'queued') resolve();
            });
          });
          other.send({ type: 'batch', batch_id: 'queued', tool_uses: queued });
          try {
            await within(arrived, "the other session's batch to reach the daemon", 30_000);
          } finally {
            stopWatching();
          }
          killed = killAll(workers);
        },
      },
    });
    measure('batch with the worker killed during an 8 s hold_key', ms);
    const behind = await collect(other, 'queued', queued);
    // It may meet a worker still starting; then it fails retryably and whole, never lost or doubled.
    for (const f of behind.result.failures) {
      assertRetryableFailure(queued, behind.result, f.index, RESOURCE_DOWN_TYPES);
    }
    note(
      `the other session's queued batch: ${behind.result.failures.length ? `failed with ${behind.result.failures.map((f) => f.error.type).join(', ')}` : 'succeeded'}`,
    );
    await assertNoStrayResults(other);
    other.close();
    assert.equal(killed, 1, 'the worker was there to kill');
    assert.equal(textOf(result, 0), 'Clicked.');
    assertRetryableFailure(uses, result, 1, ['DriverCrashedError']);
    assert.equal(result.failures.length, 1, JSON.stringify(result.failures));
    assertHaltedAfter(uses, result, 1, COMPUTER_NOT_EXECUTED_TEXT);
    assert.match(textOf(result, 3), /^Navigated to .*\/a — Page A \(HTTP 200\)/);
    assert.match(textOf(result, 5), /alpha page/);

    const back = await untilOk(client, computerOk, 'computer batch after the worker was killed');
    const block = back.result.tool_results[0]!.content[0]!;
    assert.ok(block.type === 'image' && block.source.type === 'base64');
    assert.deepEqual(imageSize(Buffer.from(block.source.data, 'base64')), { width: WIDTH, height: HEIGHT });
    const now = await desktopWorkerPids();
    assert.equal(now.length, 1, `one desktop worker again: ${now.join(', ')}`);
    assert.notEqual(now[0], workers[0], 'a new worker');

    // The dead worker could not release Shift; a click now must not arrive shifted.
    await desk.reset();
    const click = [computerUse('left_click', { coordinate: [700, 500] })];
    const clicked = await run(client, click);
    assert.equal(textOf(clicked.result, 0), 'Clicked.');
    const down = await waitFor('the click to reach the page', async () =>
      (await desk.events()).find((e): e is RecordedMouseEvent => e.type === 'mousedown'),
    );
    assert.deepEqual(
      [down.clientX, down.clientY, down.shiftKey, down.ctrlKey, down.altKey],
      [700, 500, false, false, false],
      'the click lands unshifted: no key is left down by the killed worker',
    );
    await freshHello(d);
    await assertNoStrayResults(client);
  });

  test('worker SIGKILLed during a computer wait: wait needs no worker and succeeds; the next call gets a new worker', async () => {
    const workers = await desktopWorkerPids();
    assert.equal(workers.length, 1, `one desktop worker: ${workers.join(', ')}`);
    const uses = [computerUse('wait', { duration: 3 }), computerUse('cursor_position'), computerUse('screenshot')];
    const { result, ms } = await run(client, uses, {
      fault: { index: 0, inject: () => void killAll(workers) }, // the wait has started: it runs for 3 s
    });
    measure('batch with the worker killed during a 3 s wait', ms);
    assert.deepEqual(result.failures, [], JSON.stringify(result.tool_results.map((_, i) => textOf(result, i))));
    assert.equal(textOf(result, 0), 'Waited 3s.');
    assert.match(textOf(result, 1), /^X=\d+,Y=\d+$/);
    const now = await desktopWorkerPids();
    assert.equal(now.length, 1);
    assert.notEqual(now[0], workers[0], 'a new worker');
    await freshHello(d);
    await assertNoStrayResults(client);
  });

  test('Chromium SIGKILLed during a slow navigate: that call fails retryably, later browser calls are not executed, computer calls run; the next batch relaunches it', async () => {
    await untilOk(client, () => [browserUse('navigate', { url: `${pages.origin}/a` })], 'browser up before the kill');
    const browsers = await daemonBrowserPids();
    assert.equal(browsers.length, 1, `one browser: ${browsers.join(', ')}`);
    const slowBefore = pages.count('/slow');
    const uses = [
      browserUse('navigate', { url: `${pages.origin}/slow` }),
      browserUse('get_page_text'),
      computerUse('cursor_position'),
      browserUse('navigate', { url: `${pages.origin}/a` }),
      computerUse('screenshot'),
    ];
    let killed = 0;
    const { result, ms } = await run(client, uses, {
      fault: {
        index: 0,
        // The navigation is under way (and never answered).
        when: { what: 'the slow page to be asked for', holds: () => pages.count('/slow') > slowBefore },
        inject: () => void (killed = killAll(browsers)),
      },
    });
    measure('batch with Chromium killed during a navigate', ms);
    assert.equal(killed, 1, 'the browser was there to kill');
    assertRetryableFailure(uses, result, 0, ['BrowserCrashedError']);
    assert.equal(result.failures.length, 1, JSON.stringify(result.failures));
    assertHaltedAfter(uses, result, 0, BROWSER_NOT_EXECUTED_TEXT);
    assert.match(textOf(result, 2), /^X=\d+,Y=\d+$/);
    assert.equal(result.tool_results[4]!.content[0]!.type, 'image');

    const back = await untilOk(
      client,
      () => [browserUse('navigate', { url: `${pages.origin}/a` }), browserUse('get_page_text')],
      'browser batch after Chromium was killed',
    );
    assert.match(textOf(back.result, 1), /alpha page/);
    const now = await daemonBrowserPids();
    assert.equal(now.length, 1, `one browser again: ${now.join(', ')}`);
    assert.notEqual(now[0], browsers[0], 'a relaunched browser');
    await freshHello(d);
    await assertNoStrayResults(client);
  });

  test('a client that drops after a click ran, then resumes and resends the batch: the stored result comes back and the click is not done twice', async () => {
    const a = await d.connect();
    const w = await a.hello();
    const uses = [
      browserUse('navigate', { url: `${pages.origin}/counter` }),
      browserUse('left_click', { target: { type: 'coordinate', x: 100, y: 100 } }),
      browserUse('wait', { duration: 10 }),
    ];
    const hitsBefore = pages.count('/hit');
    a.send({ type: 'batch', batch_id: 'dropped', tool_uses: uses });
    await waitFor(
      'the click to have run and the wait to have started',
      async () =>
        (a.messages.some((m) => m.type === 'tool_event' && m.index === 2 && m.phase === 'started') &&
          pages.count('/hit') > hitsBefore) ||
        undefined,
      60_000,
      10,
    );
    const closed = a.closed();
    a.close();
    await within(closed, 'the dropped connection to close');

    const b = await d.connect();
    try {
      const again = await b.hello(w.session_id);
      assert.equal(again.resumed, true);
      const first = await run(b, uses, { id: 'dropped' });
      assert.equal(first.result.replayed, true);
      assert.equal(first.result.cancelled, true);
      assert.deepEqual(first.result.failures, []);
      assert.match(textOf(first.result, 0), /^Navigated to .*\/counter — Counter \(HTTP 200\)/);
      assert.equal(textOf(first.result, 1), 'Clicked.');
      assert.deepEqual(first.result.tool_results[2]!.content, [{ type: 'text', text: BROWSER_CANCELLED_TEXT }]);
      const second = await run(b, uses, { id: 'dropped' });
      assert.equal(second.result.replayed, true);
      assert.deepEqual(second.result.tool_results, first.result.tool_results);

      assert.equal(pages.count('/hit') - hitsBefore, 1, 'the page saw exactly one click');
      const read = await run(b, [browserUse('get_page_text')]);
      assert.match(textOf(read.result, 0), /count: 1\b/);
      await freshHello(d);
      await assertNoStrayResults(b);
    } finally {
      b.close();
    }
  });

  test('a desktop worker that dies at every start: each computer batch is answered whole, fast, and fails retryably; the browser is unaffected; once workers live, computer calls work again', async () => {
    const loop = await killLoop(() => childPids(/src\/desktop-driver\/worker\.ts(\s|$)/));
    const seen: string[] = [];
    try {
      for (let i = 0; i < 5; i++) {
        const uses = [computerUse('cursor_position'), browserUse('get_page_text'), computerUse('screenshot')];
        const r = await run(client, uses);
        const f = r.result.failures[0];
        measure(`computer batch ${i + 1} while every new worker is killed (${f?.error.type})`, r.ms);
        assert.ok(r.ms < CALL_TIMEOUT_MS, `no hang: answered in ${Math.round(r.ms)} ms`);
        assertRetryableFailure(uses, r.result, 0, RESOURCE_DOWN_TYPES);
        assertHaltedAfter(uses, r.result, 0, COMPUTER_NOT_EXECUTED_TEXT);
        seen.push(`${f!.error.type}${f!.error.retry_after_ms !== undefined ? ' (circuit open)' : ''}`);
      }
    } finally {
      note(`kill loop: ${await loop.stop()} worker(s) killed; failures: ${seen.join(', ')}`);
    }
    await untilOk(client, computerOk, 'computer batch once workers are no longer killed');
    await freshHello(d);
    await assertNoStrayResults(client);
  });

  test('a Chromium that dies at every launch: each browser batch is answered whole and fails retryably; computer calls are unaffected; once it lives, the browser works again', async () => {
    const loop = await killLoop(async () =>
      (await childOrSandboxedPids(/^\S*chromium\s(?!.*--type=)/)).filter((pid) => !kiosk.includes(pid)),
    );
    const seen: string[] = [];
    try {
      for (let i = 0; i < 4; i++) {
        const uses = [
          browserUse('navigate', { url: `${pages.origin}/a` }),
          computerUse('cursor_position'),
          browserUse('get_page_text'),
        ];
        const r = await run(client, uses);
        const f = r.result.failures[0];
        measure(`browser batch ${i + 1} while every new Chromium is killed (${f?.error.type})`, r.ms);
        assert.ok(r.ms < 2 * CALL_TIMEOUT_MS, `no hang: answered in ${Math.round(r.ms)} ms`);
        assertRetryableFailure(uses, r.result, 0, RESOURCE_DOWN_TYPES);
        assertHaltedAfter(uses, r.result, 0, BROWSER_NOT_EXECUTED_TEXT);
        seen.push(`${f!.error.type}${f!.error.retry_after_ms !== undefined ? ' (circuit open)' : ''}`);
      }
    } finally {
      note(`kill loop: ${await loop.stop()} browser(s) killed; failures: ${seen.join(', ')}`);
    }
    const back = await untilOk(
      client,
      () => [browserUse('navigate', { url: `${pages.origin}/a` }), browserUse('get_page_text')],
      'browser batch once Chromium is no longer killed',
    );
    assert.match(textOf(back.result, 1), /alpha page/);
    await freshHello(d);
    await assertNoStrayResults(client);
  });
});

test('no unhandled rejections during the faults', () => {
  assert.deepEqual(unexpected, []);
});
