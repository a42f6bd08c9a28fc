/**
 * Faults, end to end (issue 4, promise 1): a real daemon, a real ws client, a
 * real Xvfb and a real headless Chromium, and then things break under it —
 * the nut-js desktop worker is SIGKILLed mid-call, Chromium is SIGKILLed
 * mid-navigation, the X server is killed and later restarted on the same
 * display number, a client drops mid-batch and resends the batch from a new
 * connection. Each time: every tool_use is answered exactly once, in order;
 * the failure is retryable; halting is per toolset; the daemon keeps serving
 * (a fresh connection can hello, and a later batch succeeds).
 *
 * A circuit breaker may make calls fail fast for a while after repeated
 * failures, and members that change nothing may be retried automatically, so
 * recovery is polled (every 300 ms, up to 45 s), never assumed for the very
 * next batch. The crashing calls are members that change something
 * (`hold_key`, `navigate`), which are never retried, so their failure is seen.
 *
 * Prints `[measure]` lines: how long failing batches took while a resource
 * was down, and how long recovery took. No assertion on time beyond generous
 * bounds (the call timeout).
 *
 * Run: node --import tsx --test --test-timeout=180000 test/faults.test.ts
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import { isDisplayReachable } from '../src/desktop-driver/display.ts';
import type { BatchResult, ServerMessage, ToolEvent, ToolUse } from '../src/base/protocol.ts';
import { BROWSER_CANCELLED_TEXT, BROWSER_NOT_EXECUTED_TEXT } from '../toolsets/browser/index.ts';
import { COMPUTER_NOT_EXECUTED_TEXT } from '../toolsets/computer/index.ts';
import { assertApiValid, imageSize } from '../testkit/api-rules.ts';
import { computerUse, startTestDaemon, type TestClient, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDesktop, type TestDesktop } from '../testkit/desktop.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import type { RecordedEvent, RecordedMouseEvent } from '../testkit/event-page.ts';
import {
  RESOURCE_DOWN_TYPES,
  childPids,
  chromiumBrowserPids,
  descendants,
  desktopWorkerPids,
  killAll,
  waitFor,
} from '../testkit/faults.ts';
import { until, within } from '../testkit/wait.ts';
import { browserUse } from '../testkit/web.ts';

const WIDTH = 1024;
const HEIGHT = 768;
/** The daemon's per-call limit here; every "fails quickly" bound is this (generous) limit. */
const CALL_TIMEOUT_MS = 20_000;
/** Recovery is polled this often, for at most this long. */
const POLL_EVERY_MS = 300;
const RECOVERY_MS = 45_000;

const unexpected: unknown[] = [];
process.on('unhandledRejection', (err) => unexpected.push(err));

function measure(what: string, ms: number): void {
  console.log(`[measure] ${what}: ${Math.round(ms)} ms`);
}

function note(what: string): void {
  console.log(`[note] ${what}`);
}

// ---------------------------------------------------------------------------
// A local web server: plain pages, a counter, and a page that never answers.

interface Pages {
  origin: string;
  /** Paths requested so far, in order. */
  requested: string[];
  count(path: string): number;
  close(): Promise<void>;
}

const COUNTER_PAGE = `<!doctype html><title>Counter</title>
<style>body { margin: 0 } #b { position: fixed; left: 0; top: 0; width: 400px; height: 300px; font-size: 30px }</style>
<button id="b">add one</button><p id="n">count: 0</p>
<script>
let n = 0;
document.getElementById('b').addEventListener('click', () => {
  n++;
  document.getElementById('n').textContent = 'count: ' + n;
  fetch('/hit?n=' + n);
});
</script>`;

async function startPages(): Promise<Pages> {
  const requested: string[] = [];
  const hanging = new Set<ServerResponse>();
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    requested.push(path);
    const html = (body: string): void => {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(body);
    };
    if (path === '/a') html('<title>Page A</title><p>alpha page</p>');
    else if (path === '/counter') html(COUNTER_PAGE);
    else if (path === '/hit' || path === '/favicon.ico') res.writeHead(204).end();
    else if (path === '/slow')
      hanging.add(res); // answered never: the navigation is still running when the browser dies
    else res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    requested,
    count: (path) => requested.filter((p) => p === path).length,
    close: () =>
      new Promise<void>((resolve) => {
        for (const res of hanging) res.destroy();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

// ---------------------------------------------------------------------------
// An X server restarted on a given display number (startTestDisplay picks its own number).

interface XServer {
  pid: number;
  stop(): Promise<void>;
}

async function startXvfbOn(display: string): Promise<XServer> {
  const args = [display, '-screen', '0', `${WIDTH}x${HEIGHT}x24`, '-dpi', '96', '-nolisten', 'tcp', '-noreset'];
  // Under setpriv --pdeathsig, so it never outlives this process even if the test run is killed.
  const proc = existsSync('/usr/bin/setpriv')
    ? spawn('/usr/bin/setpriv', ['--pdeathsig', 'KILL', '--', 'Xvfb', ...args], { stdio: 'ignore' })
    : spawn('Xvfb', args, { stdio: 'ignore' });
  let exited = false;
  const exit = new Promise<void>((resolve) => {
    const gone = (): void => {
      exited = true;
      resolve();
    };
    proc.once('exit', gone);
    proc.once('error', gone); // not started at all (no Xvfb): reported as exited at start below
  });
  const stop = async (): Promise<void> => {
    if (exited || proc.pid === undefined) return;
    process.kill(proc.pid, 'SIGTERM');
    const timer = setTimeout(() => killAll([proc.pid!]), 3_000);
    await exit;
    clearTimeout(timer);
  };
  try {
    await waitFor(
      `Xvfb on ${display}`,
      async () => {
        if (exited) throw new Error(`Xvfb ${display} exited at start (is the number taken by someone else?)`);
        return (await isDisplayReachable(display)) || undefined;
      },
      10_000,
      50,
    );
  } catch (err) {
    await stop();
    throw err;
  }
  return { pid: proc.pid!, stop };
}

/** Binds display number ARGV[0]'s abstract X socket, without listening, until its stdin closes (Perl is Essential in Debian). */
const HOLD_DISPLAY_NUMBER_PL = String.raw`
use Socket;
socket(my $s, AF_UNIX, SOCK_STREAM, 0) or die "socket: $!\n";
bind($s, pack_sockaddr_un("\0/tmp/.X11-unix/X$ARGV[0]")) or die "bind: $!\n";
$| = 1;
print "held\n";
1 while <STDIN>;
`;

/**
 * Keeps the number of `display`, whose X server the test killed, from every
 * other X server until `release`: Xvfb takes the lowest free number, and
 * another test file's once took this one while it was down (seen in CI), so
 * the daemon's clients met a stranger's X server and the restart found it
 * already answering. Xvfb skips a number whose abstract socket
 * (`@/tmp/.X11-unix/X<n>`) is taken; bound there and not listening, it
 * refuses every client, and the path socket stays absent: to every client
 * the display is down. (Node cannot bind that name: it pads it with NULs.)
 */
async function holdDisplayNumber(display: string): Promise<{ release(): Promise<void> }> {
  const n = /^:(\d+)$/.exec(display)?.[1];
  assert.ok(n, `a local display: ${display}`);
  const tryHold = (): Promise<ChildProcess | undefined> =>
    new Promise((resolve) => {
      const child = spawn('perl', ['-e', HOLD_DISPLAY_NUMBER_PL, n], { stdio: ['pipe', 'pipe', 'ignore'] });
      child.stdout.once('data', () => resolve(child));
      child.once('exit', () => resolve(undefined));
      child.once('error', () => resolve(undefined));
    });
  // Free as soon as the killed X server's process has ended.
  const holder = await waitFor(
    `display number ${display} to be free to hold (has another X server taken it?)`,
    tryHold,
    5_000,
    10,
  );
  return {
    release: async () => {
      if (holder.exitCode !== null || holder.signalCode !== null) return;
      const exited = new Promise((resolve) => holder.once('exit', resolve));
      holder.stdin!.end();
      await exited;
    },
  };
}

// ---------------------------------------------------------------------------
// Running batches and checking every answer.

interface Fault {
  /** The fault is injected once the call at this index has started… */
  index: number;
  /** …and this condition holds (default: at once), which the failure names when it does not. */
  when?: { what: string; holds: () => boolean | Promise<boolean>; seen?: () => unknown };
  inject: () => void | Promise<void>;
}

interface Run {
  result: BatchResult;
  events: ToolEvent[];
  /** From sending the batch to its batch_result. */
  ms: number;
}

let batchNo = 0;
const isResultFor =
  (batchId: string) =>
  (m: ServerMessage): m is BatchResult =>
    m.type === 'batch_result' && m.batch_id === batchId;

/**
 * Sends a batch (optionally injecting a fault while one of its calls runs),
 * waits for its batch_result and checks it: valid for the API, one result per
 * tool_use in order, and (unless replayed) one final event per call that
 * agrees with the result.
 */
async function run(client: TestClient, uses: ToolUse[], options: { id?: string; fault?: Fault } = {}): Promise<Run> {
  const batchId = options.id ?? `f${batchNo++}`;
  const t0 = performance.now();
  client.send({ type: 'batch', batch_id: batchId, tool_uses: uses });
  const { fault } = options;
  if (fault) {
    await waitFor(
      `call ${fault.index} of ${batchId} to start`,
      async () =>
        client.messages.some(
          (m) => m.type === 'tool_event' && m.batch_id === batchId && m.index === fault.index && m.phase === 'started',
        ) || undefined,
      60_000,
      10,
    );
    const { when } = fault;
    if (when) await until(`${when.what} in ${batchId}`, when.holds, { timeoutMs: 30_000, seen: when.seen });
    await fault.inject();
  }
  return collect(client, batchId, uses, t0);
}

/** Waits for the batch_result of a batch already sent, and checks it and its events. */
async function collect(client: TestClient, batchId: string, uses: ToolUse[], t0 = performance.now()): Promise<Run> {
  const raw = await client.next(isResultFor(batchId), 90_000);
  const ms = performance.now() - t0;
  const events = client.messages.filter((m): m is ToolEvent => m.type === 'tool_event' && m.batch_id === batchId);
  for (const e of events) client.messages.splice(client.messages.indexOf(e), 1);
  const result = checkResult(uses, raw, events);
  return { result, events, ms };
}

function checkResult(uses: ToolUse[], raw: unknown, events: ToolEvent[]): BatchResult {
  const result = assertApiValid(uses, raw);
  assert.deepEqual(
    result.tool_results.map((r) => r.tool_use_id),
    uses.map((u) => u.id),
    'exactly one tool_result per tool_use, in order',
  );
  for (const f of result.failures) {
    assert.equal(uses[f.index]?.id, f.tool_use_id, 'a failure names its call');
  }
  assert.equal(new Set(result.failures.map((f) => f.index)).size, result.failures.length, 'one failure per call');
  if (result.replayed) {
    assert.equal(events.length, 0, 'a replay emits no events');
    return result;
  }
  // Every call gets exactly one final event, and it agrees with the result.
  uses.forEach((tu, i) => {
    const phases = events.filter((e) => e.index === i).map((e) => e.phase);
    assert.ok(
      events.filter((e) => e.index === i).every((e) => e.tool_use_id === tu.id),
      `events of call ${i} name ${tu.id}`,
    );
    const final = phases.filter((p) => p !== 'started');
    assert.equal(final.length, 1, `call ${i} (${tu.name}) has one final event: ${phases.join(', ')}`);
    const ok = result.tool_results[i]!.is_error !== true;
    assert.equal(final[0] === 'succeeded', ok, `call ${i}: event ${final[0]} agrees with the result`);
    assert.equal(
      final[0] === 'failed',
      result.failures.some((f) => f.index === i),
      `call ${i}: a failed event iff a failure`,
    );
  });
  return result;
}

function textOf(result: BatchResult, i: number): string {
  return result.tool_results[i]!.content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join('\n');
}

/** The call at `index` failed with a retryable error of one of `types`, and the model was told so. */
function assertRetryableFailure(uses: ToolUse[], result: BatchResult, index: number, types: readonly string[]): void {
  const failure = result.failures.find((f) => f.index === index);
  assert.ok(failure, `call ${index} (${uses[index]!.name}) failed: ${JSON.stringify(result.tool_results[index])}`);
  assert.ok(
    types.includes(failure.error.type),
    `failure type ${failure.error.type} is one of ${types.join(', ')}: ${JSON.stringify(failure.error)}; the model read: ${JSON.stringify(textOf(result, index))}`,
  );
  assert.equal(failure.error.retryable, true, `${failure.error.type} is retryable: ${JSON.stringify(failure.error)}`);
  const first = textOf(result, index).split('\n')[0];
  const expected =
    failure.error.type === 'TimeoutError'
      ? new RegExp(`^Tool '${uses[index]!.name}' timed out after \\d+ ms\\.$`)
      : new RegExp(`^Tool '${uses[index]!.name}' failed with ${failure.error.type}\\.$`);
  assert.match(first ?? '', expected);
}

/**
 * What a batch must look like after the call at `failedAt` failed: later calls
 * of that toolset get its exact not-executed text, the other toolset's calls run.
 */
function assertHaltedAfter(uses: ToolUse[], result: BatchResult, failedAt: number, notExecutedText: string): void {
  const family = uses[failedAt]!.toolset_name!;
  assert.deepEqual(result.halted, { [family]: failedAt });
  assert.equal(result.cancelled, false);
  uses.forEach((tu, i) => {
    if (i <= failedAt) return;
    const r = result.tool_results[i]!;
    if (tu.toolset_name === family) {
      assert.equal(r.is_error, true, `call ${i} (${tu.name}) is not executed`);
      assert.deepEqual(r.content, [{ type: 'text', text: notExecutedText }]);
    } else {
      assert.ok(r.is_error !== true, `call ${i} (${tu.toolset_name}.${tu.name}) still ran: ${textOf(result, i)}`);
    }
  });
}

/**
 * Sends `uses` every POLL_EVERY_MS until a batch succeeds completely. Each
 * failed attempt must itself be well formed: its failures retryable, of a
 * resource-down type, and the rest of its toolset not executed.
 */
async function untilOk(client: TestClient, uses: () => ToolUse[], what: string): Promise<Run & { attempts: number }> {
  const t0 = performance.now();
  let attempts = 0;
  const seen = new Set<string>();
  const done = await waitFor(
    what,
    async () => {
      attempts++;
      const batch = uses();
      const r = await run(client, batch);
      if (!r.result.tool_results.some((x) => x.is_error)) return r;
      for (const f of r.result.failures) {
        seen.add(f.error.type);
        assertRetryableFailure(batch, r.result, f.index, RESOURCE_DOWN_TYPES);
      }
      return undefined;
    },
    RECOVERY_MS,
    POLL_EVERY_MS,
  );
  measure(
    `${what}: recovered after ${attempts} attempt(s)${seen.size ? ` (saw ${[...seen].join(', ')})` : ''}`,
    performance.now() - t0,
  );
  return { ...done, attempts };
}

/** A new connection can still say hello and gets a fresh session. */
async function freshHello(d: TestDaemon): Promise<void> {
  const c = await d.connect();
  try {
    const w = await c.hello();
    assert.equal(w.protocol, 'deskbatch.v1');
    assert.equal(w.resumed, false);
    c.send({ type: 'ping' });
    await c.next((m): m is { type: 'pong' } => m.type === 'pong', 10_000);
  } finally {
    c.close();
  }
}

/**
 * No batch_result arrives twice. A session runs its batches one after another, and a batch's result
 * is sent only once its calls have wound down: by the time the result of one more batch arrives,
 * every result of the batches before it has been sent, and the socket delivers in order.
 */
async function assertNoStrayResults(client: TestClient): Promise<void> {
  await run(client, [computerUse('wait', { duration: 0 })]);
  const stray = client.messages.filter((m) => m.type === 'batch_result');
  assert.deepEqual(stray, [], 'no batch_result beyond the one per batch already received');
}

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

const computerOk = (): ToolUse[] => [computerUse('screenshot'), computerUse('cursor_position')];

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
      (await childPids(/^\S*chromium\s(?!.*--type=)/)).filter((pid) => !kiosk.includes(pid)),
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
          inject: () => void killAll([pid]),
        },
      });
    } finally {
      killAll([pid, ...helpers]);
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

describe('faults: the X server goes away during a batch and comes back', () => {
  let display: VirtualDisplay;
  let restarted: XServer | undefined;
  let holding: ReturnType<typeof holdDisplayNumber> | undefined;
  let pages: Pages;
  let d: TestDaemon;
  let client: TestClient;

  before(async () => {
    display = await startTestDisplay({ width: WIDTH, height: HEIGHT });
    pages = await startPages();
    d = await startTestDaemon({ display: display.display, browser: 'headless', callTimeoutMs: CALL_TIMEOUT_MS });
    client = await d.connect();
    await client.hello();
    await untilOk(
      client,
      () => [...computerOk(), browserUse('navigate', { url: `${pages.origin}/a` })],
      'start: desktop worker and browser up',
    );
  });
  after(async () => {
    client?.close();
    await d?.close();
    await (await holding?.catch(() => undefined))?.release();
    await restarted?.stop();
    await pages?.close();
    await display?.stop();
  });

  test('X server killed mid-call: every call answered once, retryable; computer batches fail fast while it is down, the browser works; after a restart on the same number, computer calls work again', async () => {
    // 1. The X server dies while hold_key runs.
    const uses = [
      computerUse('hold_key', { text: 'shift', duration: 8 }),
      computerUse('cursor_position'),
      browserUse('get_page_text'),
      computerUse('screenshot'),
    ];
    const { result, ms } = await run(client, uses, {
      // hold_key has started and holds for 8 s: the X server dies under it.
      fault: {
        index: 0,
        inject: () => {
          killAll([display.pid]);
          holding = holdDisplayNumber(display.display);
        },
      },
    });
    measure('batch with the X server killed as an 8 s hold_key started', ms);
    assertRetryableFailure(uses, result, 0, ['DriverCrashedError', 'DisplayUnavailableError']);
    note(`hold_key with the X server killed under it failed with ${result.failures[0]!.error.type}`);
    assert.equal(result.failures.length, 1, JSON.stringify(result.failures));
    assertHaltedAfter(uses, result, 0, COMPUTER_NOT_EXECUTED_TEXT);
    assert.match(textOf(result, 2), /alpha page/);
    await display.stop(); // openbox went with its X server; this only cleans up
    assert.equal(await isDisplayReachable(display.display), false);

    // 2. While it is down: computer batches fail quickly and well formed; the headless browser works.
    for (let i = 0; i < 4; i++) {
      const down = computerOk();
      const r = await run(client, down);
      measure(`computer batch ${i + 1} while the X server is down (${r.result.failures[0]?.error.type})`, r.ms);
      assert.ok(r.ms < CALL_TIMEOUT_MS, `no hang: answered in ${Math.round(r.ms)} ms`);
      assertRetryableFailure(down, r.result, 0, ['DisplayUnavailableError', 'DriverCrashedError', 'TimeoutError']);
      assertHaltedAfter(down, r.result, 0, COMPUTER_NOT_EXECUTED_TEXT);
    }
    const mixed = [
      computerUse('left_click', { coordinate: [10, 10] }),
      browserUse('navigate', { url: `${pages.origin}/a` }),
      computerUse('type', { text: 'x' }),
      browserUse('get_page_text'),
    ];
    const m = await run(client, mixed);
    measure('mixed batch while the X server is down', m.ms);
    assertRetryableFailure(mixed, m.result, 0, ['DisplayUnavailableError', 'DriverCrashedError', 'TimeoutError']);
    assertHaltedAfter(mixed, m.result, 0, COMPUTER_NOT_EXECUTED_TEXT);
    assert.match(textOf(m.result, 3), /alpha page/);
    const welcomeDown = await (async () => {
      const c = await d.connect();
      try {
        return await c.hello();
      } finally {
        c.close();
      }
    })();
    assert.equal(welcomeDown.resumed, false, 'a fresh connection says hello while the display is down');

    // 3. A new X server on the same number: computer calls work again (after any cool-down).
    const t0 = performance.now();
    await (await holding)?.release();
    restarted = await startXvfbOn(display.display);
    measure('Xvfb restart on the same number', performance.now() - t0);
    const back = await untilOk(client, computerOk, 'computer batch after the X server came back');
    const block = back.result.tool_results[0]!.content[0]!;
    assert.ok(block.type === 'image' && block.source.type === 'base64');
    assert.deepEqual(imageSize(Buffer.from(block.source.data, 'base64')), { width: WIDTH, height: HEIGHT });
    const workers = await desktopWorkerPids();
    assert.equal(workers.length, 1, `one desktop worker on the new X server: ${workers.join(', ')}`);
    const c = await d.connect();
    try {
      const w = await c.hello();
      assert.deepEqual(w.display, { width: WIDTH, height: HEIGHT });
    } finally {
      c.close();
    }
    await freshHello(d);
    await assertNoStrayResults(client);
  });
});

describe("faults: cursor_position, asked on the daemon's own X connection, when its X server dies", () => {
  let display: VirtualDisplay;
  let restarted: XServer | undefined;
  let holding: ReturnType<typeof holdDisplayNumber> | undefined;
  let d: TestDaemon;
  let client: TestClient;

  before(async () => {
    display = await startTestDisplay({ width: WIDTH, height: HEIGHT, windowManager: false });
    d = await startTestDaemon({ display: display.display, browser: 'off', callTimeoutMs: CALL_TIMEOUT_MS });
    client = await d.connect();
    await client.hello();
  });
  after(async () => {
    client?.close();
    await d?.close();
    await (await holding?.catch(() => undefined))?.release();
    await restarted?.stop();
    await display?.stop();
  });

  test('Xvfb killed: cursor_position fails retryably and fast, the daemon lives on; on a new X server it answers again', async () => {
    const before = await run(client, [
      computerUse('mouse_move', { coordinate: [11, 22] }),
      computerUse('cursor_position'),
    ]);
    assert.equal(textOf(before.result, 1), 'X=11,Y=22');

    killAll([display.pid]);
    holding = holdDisplayNumber(display.display);
    await holding;
    await display.stop(); // only cleans up: the X server is gone
    // The hold works: an X server started now takes another number.
    const stranger = await startTestDisplay({ width: 64, height: 64, windowManager: false });
    await stranger.stop();
    assert.notEqual(stranger.display, display.display, 'a new X server skips the held number');
    assert.equal(await isDisplayReachable(display.display), false);
    for (let i = 0; i < 3; i++) {
      const uses = [computerUse('cursor_position')];
      const r = await run(client, uses);
      measure(`cursor_position ${i + 1} with the X server gone (${r.result.failures[0]?.error.type})`, r.ms);
      assert.ok(r.ms < CALL_TIMEOUT_MS, `no hang: answered in ${Math.round(r.ms)} ms`);
      assertRetryableFailure(uses, r.result, 0, ['DisplayUnavailableError', 'DriverCrashedError']);
    }
    // The daemon is alive and serves: a new session is welcomed.
    const other = await d.connect();
    try {
      assert.equal((await other.hello()).type, 'welcome');
    } finally {
      other.close();
    }

    await (await holding).release();
    restarted = await startXvfbOn(display.display);
    const back = await untilOk(
      client,
      () => [computerUse('mouse_move', { coordinate: [33, 44] }), computerUse('cursor_position')],
      'cursor_position after the X server came back',
    );
    assert.equal(textOf(back.result, 1), 'X=33,Y=44');
  });
});

test('no unhandled rejections during the faults', () => {
  assert.deepEqual(unexpected, []);
});
