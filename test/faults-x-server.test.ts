/**
 * The X server goes away during a batch and comes back (issue 4, promise 1):
 * a real daemon, a real ws client, a real Xvfb and a real headless Chromium;
 * the X server is SIGKILLed under a running hold_key, or under the daemon's own
 * X connection (cursor_position), its display number is held so no other X
 * server takes it, and later a new Xvfb is started on the same number. Each
 * time: every tool_use is answered exactly once, in order; computer calls fail
 * fast and retryably while the X server is down, the browser works; the daemon
 * keeps serving (a fresh connection can hello); once the X server is back,
 * computer calls work again.
 *
 * Recovery is polled (every 300 ms, up to 45 s), never assumed for the very
 * next batch. How batches are run and checked is in testkit/fault-batches.ts.
 * Prints `[measure]` lines: how long failing batches took while the X server
 * was down, its restart, and recovery.
 *
 * Run: node --import tsx --test --test-timeout=180000 test/faults-x-server.test.ts
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { isDisplayReachable } from '../src/desktop-driver/display.ts';
import { COMPUTER_NOT_EXECUTED_TEXT } from '../toolsets/computer/index.ts';
import { imageSize } from '../testkit/api-rules.ts';
import { computerUse, startTestDaemon, type TestClient, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import {
  CALL_TIMEOUT_MS,
  HEIGHT,
  WIDTH,
  assertHaltedAfter,
  assertNoStrayResults,
  assertRetryableFailure,
  computerOk,
  freshHello,
  measure,
  note,
  run,
  textOf,
  untilOk,
} from '../testkit/fault-batches.ts';
import { startPages, type Pages } from '../testkit/fault-pages.ts';
import { desktopWorkerPids, killAll, waitFor } from '../testkit/faults.ts';
import { browserUse } from '../testkit/web.ts';

const unexpected: unknown[] = [];
process.on('unhandledRejection', (err) => unexpected.push(err));

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
