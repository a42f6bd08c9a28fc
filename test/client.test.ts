/**
 * The client library (src/client) against real daemons on port 0. Dropped
 * connections are made with a small TCP proxy between client and daemon that
 * the test cuts (and can hold new connections at, or point at another
 * daemon), so the client sees what a real network failure looks like.
 *
 * "Ran once" is proved by effects a second run would repeat: a browser page
 * whose click counter lives in localStorage (it survives a reload) and is
 * also posted to the test web server, and the `started` events the daemon
 * sends for each call (a replayed batch sends none, a batch sent again under
 * a new id would send them again).
 */
import assert from 'node:assert/strict';
import { setTimeout as delay } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import type {
  BetaContentBlock,
  BetaContentBlockParam,
  BetaTextBlockParam,
  BetaToolResultBlockParam,
  BetaToolUseBlock,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import {
  BatchRefusedError,
  ClientClosedError,
  ConnectionLostError,
  DeskbatchClient,
  HandshakeRefusedError,
  SessionLostError,
  ToolResultMismatchError,
  mergeToolResults,
  splitToolUses,
  type ConnectOptions,
  type ToolEvent,
} from '../src/client/index.ts';
import type { ToolUse } from '../src/base/protocol.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { TEST_TOKEN, computerUse, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay } from '../testkit/display.ts';
import { nextEvent, within } from '../testkit/wait.ts';
import { browserUse, startWebServer, type WebServer } from '../testkit/web.ts';
import { failsWith } from '../testkit/errors.ts';
import { startProxy, type Proxy } from '../testkit/tcp-proxy.ts';

/** Fast reconnects for tests; attempts are plenty so a slow machine never runs out. */
const FAST = { maxAttempts: 200, initialDelayMs: 20, maxDelayMs: 100 } satisfies ConnectOptions['reconnect'];

const connect = (url: string, options: Partial<ConnectOptions> = {}): Promise<DeskbatchClient> =>
  DeskbatchClient.connect(url, { token: TEST_TOKEN, clientName: 'client-tests/1', reconnect: FAST, ...options });

/** Polls `cond` (a wait for something the test set in motion, never a timing assertion). */
async function until(cond: () => boolean, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await delay(20);
  }
}

/** `started` events per tool_use id, from the client's own hook. */
function startedCounter(): { counts: Map<string, number>; hook: (e: ToolEvent) => void } {
  const counts = new Map<string, number>();
  return {
    counts,
    hook: (e) => {
      if (e.phase === 'started') counts.set(e.tool_use_id, (counts.get(e.tool_use_id) ?? 0) + 1);
    },
  };
}

// ---------------------------------------------------------------- batches, events, refusals, cancel

describe('a daemon without a display (calls fail with DisplayUnavailableError)', () => {
  let d: TestDaemon;
  before(async () => (d = await startTestDaemon({ display: undefined, browser: 'off' })));
  after(() => d.close());

  test('runBatch returns one API-valid tool_result per tool_use, in order; every hook sees the events', async () => {
    const fromOption: ToolEvent[] = [];
    const fromOn: ToolEvent[] = [];
    const fromBatch: ToolEvent[] = [];
    const client = await connect(d.url, { onToolEvent: (e) => fromOption.push(e) });
    client.on('tool_event', (e) => fromOn.push(e));
    try {
      assert.match(client.sessionId, /^s_/);
      assert.deepEqual(client.toolsetNames, ['computer']);
      assert.deepEqual(
        client.tools,
        client.welcome.toolsets.map((t) => t.tool),
      );
      assert.equal(client.tools[0]?.type, 'computer_toolset_20260801');

      const uses = [
        computerUse('wait', { duration: 0 }),
        computerUse('cursor_position'),
        computerUse('key', { text: 'a' }),
      ];
      const { toolResults, result } = await client.runBatch(uses, { onToolEvent: (e) => fromBatch.push(e) });
      assertApiValid(uses, result);
      assert.equal(toolResults, result.tool_results);
      assert.deepEqual(
        toolResults.map((r) => r.tool_use_id),
        uses.map((u) => u.id),
      );
      assert.equal(toolResults[0]!.is_error, undefined);
      assert.equal(result.failures[0]?.error.type, 'DisplayUnavailableError');
      const notExecuted = client.toolsets[0]!.not_executed_text;
      assert.deepEqual(toolResults[2]!.content, [{ type: 'text', text: notExecuted }]);

      const phases = fromBatch.map((e) => `${e.name}:${e.phase}`);
      assert.deepEqual(phases, [
        'wait:started',
        'wait:succeeded',
        'cursor_position:started',
        'cursor_position:failed',
        'key:not_executed',
      ]);
      assert.ok(fromBatch.every((e) => e.batch_id === result.batch_id));
      assert.deepEqual(fromOption, fromBatch);
      assert.deepEqual(fromOn, fromBatch);
      assert.deepEqual(client.pendingBatchIds, []);
    } finally {
      await client.close();
    }
  });

  test('a batch id sent again with the same calls is answered from the stored result; refusals are typed', async () => {
    const started = startedCounter();
    const client = await connect(d.url, { onToolEvent: started.hook });
    try {
      const uses = [computerUse('wait', { duration: 0 })];
      const first = await client.runBatch(uses, { batchId: 'turn-1' });
      const again = await client.runBatch(uses, { batchId: 'turn-1' });
      assert.equal(first.result.replayed, false);
      assert.equal(again.result.replayed, true);
      assert.deepEqual(again.toolResults, first.toolResults);
      assert.equal(started.counts.get(uses[0]!.id), 1, 'the replay ran nothing');

      const refused = (code: string) => (err: unknown) =>
        err instanceof BatchRefusedError && err.code === code && err.batchId.length > 0;
      await assert.rejects(
        client.runBatch(
          [computerUse('wait', { duration: 0 }, 'toolu_dup'), computerUse('key', { text: 'a' }, 'toolu_dup')],
          {
            batchId: 'turn-2',
          },
        ),
        refused('duplicate_tool_use_id'),
      );
      await assert.rejects(
        client.runBatch([computerUse('wait', { duration: 1 })], { batchId: 'turn-1' }),
        refused('batch_id_conflict'),
      );
      const tooMany = Array.from({ length: client.welcome.limits.max_tool_uses + 1 }, () => computerUse('wait'));
      await assert.rejects(client.runBatch(tooMany), refused('batch_too_large'));
      await assert.rejects(
        client.runBatch(uses, { batchId: 'no spaces' }),
        failsWith(TypeError, 'invalid batchId "no spaces": 1–128 of [A-Za-z0-9._:-]'),
      );
      await assert.rejects(client.runBatch([]), failsWith(TypeError, 'runBatch needs at least one tool_use'));
      assert.deepEqual(client.pendingBatchIds, []);
    } finally {
      await client.close();
    }
  });

  test('a wrong token is refused with HandshakeRefusedError 401', async () => {
    await assert.rejects(
      DeskbatchClient.connect(d.url, { token: 'wrong-token-0123456789' }),
      (err: unknown) => err instanceof HandshakeRefusedError && err.status === 401 && err.permanent,
    );
  });

  test('abort sends cancel: the batch resolves with the daemon’s cancelled result', async () => {
    const client = await connect(d.url);
    try {
      const controller = new AbortController();
      const uses = [computerUse('wait', { duration: 30 }), computerUse('cursor_position')];
      const phases: string[] = [];
      const run = client.runBatch(uses, {
        signal: controller.signal,
        onToolEvent: (e) => {
          phases.push(`${e.name}:${e.phase}`);
          if (e.name === 'wait' && e.phase === 'started') controller.abort();
        },
      });
      const { toolResults, result } = await run;
      assertApiValid(uses, result);
      assert.equal(result.cancelled, true);
      assert.deepEqual(result.failures, []);
      const cancelledText = client.toolsets[0]!.cancelled_text;
      for (const r of toolResults) {
        assert.equal(r.is_error, true);
        assert.deepEqual(r.content, [{ type: 'text', text: cancelledText }]);
      }
      assert.deepEqual(phases, ['wait:started', 'wait:cancelled', 'cursor_position:cancelled']);

      // Aborted before it was sent: rejected with the signal's reason, nothing sent.
      const reason = new Error('changed my mind');
      await assert.rejects(client.runBatch(uses, { signal: AbortSignal.abort(reason) }), (e) => e === reason);
      assert.deepEqual(client.pendingBatchIds, []);
    } finally {
      await client.close();
    }
  });

  test('an idle drop reconnects to the same session; a batch made meanwhile is sent after the resume', async () => {
    const proxy = await startProxy(d.url);
    const client = await connect(proxy.url);
    try {
      const session = client.sessionId;
      const disconnected = nextEvent(client, 'disconnect');
      proxy.hold();
      proxy.cut();
      await within(disconnected, "the client's disconnect event");
      assert.equal(client.state, 'reconnecting');
      const uses = [computerUse('wait', { duration: 0 })];
      const run = client.runBatch(uses);
      const reconnected = nextEvent(client, 'reconnect');
      proxy.release();
      const [welcome] = await within(reconnected, "the client's reconnect event");
      assert.equal(welcome.resumed, true);
      const { result } = await run;
      assertApiValid(uses, result);
      assert.equal(result.replayed, false, 'it was never sent before: it ran now');
      assert.equal(client.sessionId, session);
    } finally {
      await client.close();
      await proxy.close();
    }
  });

  test('close() while reconnecting rejects waiting batches with ClientClosedError and stops for good', async () => {
    const proxy = await startProxy(d.url);
    const client = await connect(proxy.url);
    try {
      let cut = false;
      const run = client.runBatch([computerUse('wait', { duration: 30 })], {
        onToolEvent: (e) => {
          if (e.phase === 'started' && !cut) {
            cut = true;
            proxy.hold();
            proxy.cut();
          }
        },
      });
      await until(() => proxy.accepted() >= 2, 'a reconnect attempt');
      assert.equal(client.state, 'reconnecting');
      const closed = nextEvent(client, 'close');
      await within(client.close(), 'client.close() to finish');
      await within(closed, "the client's close event");
      await assert.rejects(run, (err: unknown) => err instanceof ClientClosedError && err.sent);
      assert.equal(client.state, 'closed');
      const attempts = proxy.accepted();
      proxy.release();
      // A reconnect attempt follows a backoff timer of at most FAST.maxDelayMs. Timers fire in the order
      // they are due, so once this one has fired, any attempt such a timer started has opened its
      // connection; the proxy accepts connections in the order they arrive, so one opened before the
      // probe would be counted before it, and the probe's welcome comes only after the proxy accepted it.
      await delay(FAST.maxDelayMs + 1);
      const probe = await connect(proxy.url, { reconnect: false });
      await probe.close();
      assert.equal(proxy.accepted(), attempts + 1, 'no reconnect attempt after close() (the one more is the probe)');
      await assert.rejects(
        client.runBatch([computerUse('wait')]),
        failsWith(ClientClosedError, 'the client is closed'),
      );
    } finally {
      await proxy.close();
    }
  });

  test('when reconnecting fails for good, waiting batches reject with ConnectionLostError', async () => {
    const proxy = await startProxy(d.url);
    const client = await connect(proxy.url, { reconnect: { maxAttempts: 3, initialDelayMs: 10, maxDelayMs: 20 } });
    let cut = false;
    const run = client.runBatch([computerUse('wait', { duration: 30 })], {
      onToolEvent: (e) => {
        if (e.phase === 'started' && !cut) {
          cut = true;
          void proxy.close(); // cuts the connection and refuses every new one
        }
      },
    });
    const closed = nextEvent(client, 'close');
    await assert.rejects(within(run, 'the batch to be given up on'), (err: unknown) => {
      assert.ok(err instanceof ConnectionLostError, String(err));
      assert.equal(err.reason, 'connection_lost');
      assert.equal(err.sent, true);
      assert.match(err.message, /could not reconnect.*outcome .* is unknown/);
      return true;
    });
    await within(closed, "the client's close event");
    assert.equal(client.state, 'closed');
  });

  test('aborting the connect signal closes the client', async () => {
    const controller = new AbortController();
    const client = await connect(d.url, { signal: controller.signal });
    const closed = nextEvent(client, 'close');
    controller.abort();
    await within(closed, "the client's close event after the abort");
    assert.equal(client.state, 'closed');
    await assert.rejects(
      DeskbatchClient.connect(d.url, { token: TEST_TOKEN, signal: AbortSignal.abort(new Error('no')) }),
      /no/,
    );
  });
});

// ---------------------------------------------------------------- the session is gone

describe('a lost session: the pending batch rejects and is never run again', () => {
  const scenario = async (
    makeGone: (ctx: { proxy: Proxy; daemon: TestDaemon }) => Promise<TestDaemon>,
    first: TestDaemon,
  ): Promise<void> => {
    const proxy = await startProxy(first.url);
    const started = startedCounter();
    let daemon = first;
    const client = await connect(proxy.url, { onToolEvent: started.hook });
    try {
      const oldSession = client.sessionId;
      const wait = computerUse('wait', { duration: 30 });
      let cut = false;
      const run = client.runBatch([wait], {
        onToolEvent: (e) => {
          if (e.phase === 'started' && !cut) {
            cut = true;
            proxy.hold();
            proxy.cut();
          }
        },
      });
      const rejected = assert.rejects(run, (err: unknown) => {
        assert.ok(err instanceof SessionLostError, String(err));
        assert.equal(err.reason, 'session_lost');
        assert.equal(err.sent, true);
        assert.equal(err.sessionId, oldSession);
        assert.deepEqual(err.toolUseIds, [wait.id]);
        assert.match(err.message, /outcome .* is unknown/);
        return true;
      });
      await until(() => proxy.accepted() >= 2, 'a reconnect attempt');
      daemon = await makeGone({ proxy, daemon });
      const lost = nextEvent(client, 'session_lost');
      proxy.release();
      const [info] = await within(lost, "the client's session_lost event", 60_000);
      await within(rejected, 'the lost batch to reject', 60_000);
      assert.equal(info.previousSessionId, oldSession);
      assert.equal(info.welcome.resumed, false);
      assert.notEqual(client.sessionId, oldSession);
      assert.equal(client.state, 'open');

      // Batches of one session run in arrival order: had the client sent the lost batch into the new
      // session, it would have run before this one, and its `started` event would be counted by now.
      const next = [computerUse('wait', { duration: 0 })];
      const { result } = await client.runBatch(next);
      assertApiValid(next, result);
      assert.equal(started.counts.get(wait.id), 1, 'the lost batch ran once, in the old session only');
    } finally {
      await client.close();
      await proxy.close();
      if (daemon !== first) await daemon.close();
    }
  };

  test('the grace period ended before the client came back', async () => {
    const d = await startTestDaemon({ display: undefined, browser: 'off', sessionGraceMs: 200 });
    try {
      await scenario(async ({ daemon }) => {
        await until(() => daemon.daemon.server.sessionCount === 0, 'the session to expire');
        return daemon;
      }, d);
    } finally {
      await d.close();
    }
  });

  test('the daemon restarted', async () => {
    const d = await startTestDaemon({ display: undefined, browser: 'off' });
    try {
      await scenario(async ({ proxy }) => {
        await d.close();
        const restarted = await startTestDaemon({ display: undefined, browser: 'off' });
        proxy.retarget(Number(new URL(restarted.url).port));
        return restarted;
      }, d);
    } finally {
      await d.close();
    }
  });
});

// ---------------------------------------------------------------- a drop mid-batch, with a real browser

const COUNTER_PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><title>counter</title>
<style>html, body { margin: 0; } #b { position: fixed; left: 0; top: 0; width: 100vw; height: 100vh; font-size: 40px; }</style>
</head><body>
<button id="b">clicks: <span id="n"></span></button>
<script>
  const n = () => Number(localStorage.getItem('n') || 0);
  const show = () => (document.getElementById('n').textContent = String(n()));
  show();
  document.getElementById('b').addEventListener('click', () => {
    localStorage.setItem('n', String(n() + 1));
    show();
    fetch('/clicked', { method: 'POST', body: String(n()) });
  });
</script></body></html>`;

describe('a drop in the middle of a browser batch', () => {
  let web: WebServer;
  let d: TestDaemon;
  before(async () => {
    web = await startWebServer();
    web.route('/counter', COUNTER_PAGE);
    web.route('/clicked', 'ok');
    d = await startTestDaemon({ display: undefined, browser: 'headless' });
  });
  after(async () => {
    await d.close();
    await web.close();
  });

  test('the client resumes and resends the same batch_id; the stored result comes back and the click ran once', async () => {
    const proxy = await startProxy(d.url);
    const started = startedCounter();
    const client = await connect(proxy.url, { onToolEvent: started.hook });
    try {
      const session = client.sessionId;
      const uses: ToolUse[] = [
        browserUse('navigate', { url: `${web.origin}/counter` }),
        browserUse('left_click', { target: { type: 'coordinate', x: 640, y: 400 } }),
        browserUse('wait', { duration: 1.5 }),
      ];
      const reconnected = nextEvent(client, 'reconnect');
      let cut = false;
      const { toolResults, result } = await client.runBatch(uses, {
        onToolEvent: (e) => {
          if (e.name === 'wait' && e.phase === 'started' && !cut) {
            cut = true; // once: a client that ran the batch again must not be cut again
            proxy.cut();
          }
        },
      });
      const [welcome] = await within(reconnected, "the client's reconnect event");
      assert.equal(welcome.session_id, session);
      assert.ok(proxy.accepted() >= 2, 'the client connected again');
      assertApiValid(uses, result);
      assert.equal(result.replayed, true, 'answered from the stored result');
      assert.equal(toolResults[0]!.is_error, undefined, JSON.stringify(toolResults[0]));
      assert.equal(toolResults[1]!.is_error, undefined, JSON.stringify(toolResults[1]));

      // The click counter survives reloads (localStorage), so a second navigate + click would show 2.
      const read = [browserUse('get_page_text')];
      const page = await client.runBatch(read);
      assertApiValid(read, page.result);
      const text = page.toolResults[0]!.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
      assert.match(text, /clicks: 1\b/, text);
      await until(() => web.requests.some((r) => r.path === '/clicked'), 'the click to reach the web server');
      assert.equal(web.requests.filter((r) => r.path === '/clicked').length, 1, 'one click reached the server');
      assert.equal(web.requests.filter((r) => r.path === '/counter').length, 1, 'one navigation');
      for (const u of uses.slice(0, 2)) assert.equal(started.counts.get(u.id), 1, `${u.name} started once`);
    } finally {
      await client.close();
      await proxy.close();
    }
  });
});

// ---------------------------------------------------------------- a real display

describe('a real display', () => {
  test('mouse_move then cursor_position reads back the same point', async () => {
    const display = await startTestDisplay({ width: 1024, height: 768 });
    const d = await startTestDaemon({ display: display.display, browser: 'off' });
    const client = await connect(d.url);
    try {
      assert.deepEqual(client.display, { width: 1024, height: 768 });
      assert.deepEqual(client.screenshot, { width: 1024, height: 768 });
      const uses = [computerUse('mouse_move', { coordinate: [321, 234] }), computerUse('cursor_position')];
      const { toolResults, result } = await client.runBatch(uses);
      assertApiValid(uses, result);
      assert.deepEqual(toolResults[1]!.content, [{ type: 'text', text: 'X=321,Y=234' }]);
    } finally {
      await client.close();
      await d.close();
      await display.stop();
    }
  });
});

// ---------------------------------------------------------------- split and merge

const text = (t: string): BetaContentBlock => ({ type: 'text', text: t, citations: null });
const sdkToolUse = (id: string, name: string, toolset_name: string | null, input: unknown = {}): BetaToolUseBlock => ({
  type: 'tool_use',
  id,
  name,
  input,
  ...(toolset_name ? { toolset_name } : {}),
  caller: { type: 'direct' },
});

/** An assistant turn as the SDK types it: text, a server tool call, computer and browser members, plain tools. */
const ASSISTANT: BetaContentBlock[] = [
  text('Let me look.'),
  sdkToolUse('toolu_a', 'screenshot', 'computer'),
  sdkToolUse('toolu_b', 'lookup_order', null, { order: 7 }),
  { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: { query: 'x' } },
  sdkToolUse('toolu_c', 'navigate', 'browser', { url: 'https://example.com' }),
  sdkToolUse('toolu_d', 'left_click', 'computer', { coordinate: [1, 2] }),
];

const own = (id: string): BetaToolResultBlockParam => ({
  type: 'tool_result',
  tool_use_id: id,
  content: [{ type: 'text', text: `own ${id}` }],
});

describe('splitToolUses and mergeToolResults', () => {
  test('split sends the older computer tool to deskbatch only when asked', () => {
    const turn = [
      sdkToolUse('toolu_l', 'computer', null, { action: 'screenshot' }),
      sdkToolUse('toolu_n', 'navigate', 'browser', { url: 'https://example.com' }),
      sdkToolUse('toolu_o', 'lookup_order', null, { order: 7 }),
    ];
    assert.deepEqual(
      splitToolUses(turn, ['browser']).own.map((b) => b.id),
      ['toolu_l', 'toolu_o'],
    );
    const split = splitToolUses(turn, ['browser'], { legacyComputer: true });
    assert.deepEqual(
      split.deskbatch.map((b) => b.id),
      ['toolu_l', 'toolu_n'],
    );
    assert.deepEqual(
      split.own.map((b) => b.id),
      ['toolu_o'],
    );
  });

  test('split keeps order, sends served toolsets to deskbatch and everything else to the caller', () => {
    const both = splitToolUses(ASSISTANT, ['computer', 'browser']);
    assert.deepEqual(
      both.deskbatch.map((b) => b.id),
      ['toolu_a', 'toolu_c', 'toolu_d'],
    );
    assert.deepEqual(
      both.own.map((b) => b.id),
      ['toolu_b'],
    );
    const computerOnly = splitToolUses(ASSISTANT, ['computer']);
    assert.deepEqual(
      computerOnly.deskbatch.map((b) => b.id),
      ['toolu_a', 'toolu_d'],
    );
    assert.deepEqual(
      computerOnly.own.map((b) => b.id),
      ['toolu_b', 'toolu_c'],
      'a toolset the daemon does not serve stays with the caller',
    );
    assert.equal(both.deskbatch[0], ASSISTANT[1], 'the blocks themselves, unchanged');
  });

  test('merge puts one tool_result per tool_use first, in tool_use order, then the extra content', () => {
    const deskbatch = ['toolu_d', 'toolu_a', 'toolu_c'].map(own);
    const note: BetaTextBlockParam = { type: 'text', text: 'Also: hurry.' };
    const merged: BetaContentBlockParam[] = mergeToolResults(ASSISTANT, deskbatch, [own('toolu_b')], [note]);
    assert.deepEqual(
      merged.map((b) => (b.type === 'tool_result' ? b.tool_use_id : b.type)),
      ['toolu_a', 'toolu_b', 'toolu_c', 'toolu_d', 'text'],
    );

    const mismatch = (problem: string, id: string) => (err: unknown) =>
      err instanceof ToolResultMismatchError && err.problem === problem && err.toolUseId === id;
    const all = ['toolu_a', 'toolu_b', 'toolu_c', 'toolu_d'].map(own);
    assert.throws(() => mergeToolResults(ASSISTANT, all.slice(1)), mismatch('missing', 'toolu_a'));
    assert.throws(() => mergeToolResults(ASSISTANT, all, [own('toolu_c')]), mismatch('duplicate', 'toolu_c'));
    assert.throws(() => mergeToolResults(ASSISTANT, [...all, own('toolu_zz')]), mismatch('unknown', 'toolu_zz'));
    assert.throws(
      () => mergeToolResults(ASSISTANT, all.slice(1), [], [own('toolu_a')]),
      mismatch('misplaced', 'toolu_a'),
    );
    assert.throws(
      () => mergeToolResults([...ASSISTANT, sdkToolUse('toolu_a', 'zoom', 'computer')], all),
      mismatch('duplicate_tool_use', 'toolu_a'),
    );
  });

  test('a whole turn: split with the client, run the batch, merge with the caller’s own results', async () => {
    const d = await startTestDaemon({ display: undefined, browser: 'off' });
    const client = await connect(d.url);
    try {
      const { deskbatch, own: mine } = client.splitToolUses(ASSISTANT);
      assert.deepEqual(
        mine.map((b) => b.id),
        ['toolu_b', 'toolu_c'],
      );
      const { toolResults, result } = await client.runBatch(deskbatch);
      assert.deepEqual(
        toolResults.map((r) => r.tool_use_id),
        ['toolu_a', 'toolu_d'],
      );
      const content: BetaContentBlockParam[] = mergeToolResults(
        ASSISTANT,
        toolResults,
        mine.map((b) => own(b.id)),
      );
      assert.deepEqual(
        content.map((b) => (b.type === 'tool_result' ? b.tool_use_id : b.type)),
        ['toolu_a', 'toolu_b', 'toolu_c', 'toolu_d'],
      );
      assert.equal(content[0], result.tool_results[0], 'deskbatch results go in unchanged');
    } finally {
      await client.close();
      await d.close();
    }
  });
});
