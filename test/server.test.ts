/**
 * Protocol and security on a real daemon (port 0) through a real ws client.
 * No X display here: computer calls fail with DisplayUnavailableError, which
 * is itself a promise to keep (losing the display never ends the daemon).
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import WebSocket from 'ws';
import { ConfigError, resolveConfig } from '../src/base/config.ts';
import type { BatchResult, ErrorMessage, Welcome } from '../src/base/protocol.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import {
  HandshakeError,
  TEST_TOKEN,
  TestClient,
  computerUse,
  startTestDaemon,
  startedEvent,
  type TestDaemon,
} from '../testkit/daemon.ts';
import { until, within } from '../testkit/wait.ts';
import { failsWith } from '../testkit/errors.ts';

const isError = (m: { type: string }): m is ErrorMessage => m.type === 'error';
const COMPUTER_MEMBERS = [
  'key',
  'hold_key',
  'type',
  'cursor_position',
  'mouse_move',
  'left_mouse_down',
  'left_mouse_up',
  'left_click',
  'left_click_drag',
  'right_click',
  'middle_click',
  'double_click',
  'triple_click',
  'scroll',
  'wait',
  'screenshot',
  'zoom',
];

describe('handshake', () => {
  let d: TestDaemon;
  before(async () => (d = await startTestDaemon({ display: undefined, allowOrigins: ['https://viewer.example'] })));
  after(() => d.close());

  const refused = async (options: Parameters<TestDaemon['connect']>[0], url = d.url): Promise<number> => {
    try {
      (await TestClient.open(url, options)).close();
      return 101;
    } catch (err) {
      assert.ok(err instanceof HandshakeError, String(err));
      return err.status;
    }
  };

  test('401 without a token, with a wrong one, or with one only in the query string', async () => {
    assert.equal(await refused({ token: null }), 401);
    assert.equal(await refused({ token: 'wrong-token-0123456789' }), 401);
    assert.equal(await refused({ token: null }, `${d.url}?token=${TEST_TOKEN}`), 401);
    assert.equal(await refused({ token: null }, `${d.url}?access_token=${TEST_TOKEN}`), 401);
  });

  test('a bearer header or the token subprotocol is accepted; the server selects deskbatch.v1', async () => {
    assert.equal(await refused({}), 101);
    const c = await d.connect({ protocols: ['deskbatch.v1', `deskbatch.token.${TEST_TOKEN}`] });
    assert.equal(c.ws.protocol, 'deskbatch.v1');
    assert.equal(await refused({ protocols: [`deskbatch.token.${TEST_TOKEN}`] }), 401, 'the version must be offered');
  });

  test('403 for a foreign Origin, including localhost and null; an allowlisted one passes', async () => {
    for (const origin of ['http://localhost', 'null', 'http://127.0.0.1:8765', 'https://evil.example']) {
      assert.equal(await refused({ headers: { origin } }), 403, origin);
    }
    assert.equal(await refused({ headers: { origin: 'https://viewer.example' } }), 101);
  });

  test('404 off the /v1 path; /healthz answers without a token', async () => {
    assert.equal(await refused({}, d.url.replace('/v1', '/v2')), 404);
    const res = await fetch(d.url.replace('ws:', 'http:').replace('/v1', '/healthz'));
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { status: 'ok' });
    const head = await fetch(d.url.replace('ws:', 'http:').replace('/v1', '/healthz'), { method: 'HEAD' });
    assert.equal(head.status, 200, 'HEAD is answered like GET');
    assert.equal(await head.text(), '');
    const post = await fetch(d.url.replace('ws:', 'http:').replace('/v1', '/healthz'), { method: 'POST' });
    assert.equal(post.status, 404);
  });

  test('binding a non-loopback address without a configured token is refused at start', () => {
    assert.throws(
      () => resolveConfig({ host: '0.0.0.0', token: 'generated-token-0123456789', tokenConfigured: false }),
      failsWith(
        ConfigError,
        'refusing to bind 0.0.0.0 without a configured token: set DESKBATCH_TOKEN, or bind 127.0.0.1',
      ),
    );
    assert.equal(resolveConfig({ host: '0.0.0.0', token: TEST_TOKEN, tokenConfigured: true }).host, '0.0.0.0');
  });
});

describe('messages', () => {
  let d: TestDaemon;
  before(
    async () =>
      (d = await startTestDaemon({
        display: undefined,
        limits: { maxToolUsesPerBatch: 5, maxPayloadBytes: 64 * 1024 },
      })),
  );
  after(() => d.close());

  test('welcome describes the toolset, its texts and the limits', async () => {
    const c = await d.connect();
    const w = await c.hello();
    assert.equal(w.protocol, 'deskbatch.v1');
    assert.match(w.session_id, /^s_[A-Za-z0-9_-]{20,}$/);
    assert.equal(w.resumed, false);
    assert.deepEqual(
      w.toolsets.map((t) => t.toolset_name),
      ['computer', 'browser'],
    );
    const browser = w.toolsets[1]!;
    assert.equal(browser.not_executed_text, 'Not executed: an earlier action in this turn failed.');
    for (const optional of ['javascript_exec', 'read_console', 'read_network', 'file_upload']) {
      assert.ok(!browser.members.includes(optional), `${optional} is off by default`);
    }
    const computer = w.toolsets[0]!;
    assert.equal(computer.type, 'computer_toolset_20260801');
    assert.deepEqual([...computer.members].sort(), [...COMPUTER_MEMBERS].sort());
    assert.equal(computer.not_executed_text, 'Not executed: an earlier computer action in this turn failed.');
    assert.deepEqual(computer.tool, { type: 'computer_toolset_20260801' });
    assert.equal(w.display, undefined, 'no display, no sizes');
    assert.deepEqual(w.limits, { max_tool_uses: 5, max_payload_bytes: 64 * 1024, max_queued_batches: 8 });
  });

  test('protocol errors have stable codes and leave the connection usable', async () => {
    const c = await d.connect();
    const expectError = async (payload: unknown, code: string): Promise<ErrorMessage> => {
      c.send(payload);
      const e = await c.next(isError);
      assert.equal(e.code, code, JSON.stringify(e));
      return e;
    };
    await expectError('{not json', 'invalid_json');
    await expectError({ type: 'ping', extra: 1 }, 'invalid_message');
    await expectError({ type: 'teleport' }, 'invalid_message');
    await expectError(
      { type: 'batch', batch_id: 'bad id!', tool_uses: [computerUse('screenshot')] },
      'invalid_message',
    );
    await expectError(
      { type: 'batch', batch_id: 'b1', tool_uses: [{ ...computerUse('screenshot'), id: 'has space' }] },
      'invalid_message',
    );
    const tooMany = Array.from({ length: 6 }, () => computerUse('cursor_position'));
    assert.equal(
      (await expectError({ type: 'batch', batch_id: 'big', tool_uses: tooMany }, 'batch_too_large')).batch_id,
      'big',
    );
    const dup = computerUse('cursor_position', {}, 'toolu_dup');
    await expectError({ type: 'batch', batch_id: 'dup', tool_uses: [dup, dup] }, 'duplicate_tool_use_id');
    await expectError({ type: 'cancel', batch_id: 'never-sent' }, 'unknown_batch');
    c.ws.send(Buffer.from([1, 2, 3]), { binary: true });
    assert.equal((await c.next(isError)).code, 'binary_frame');
    c.send({ type: 'ping' });
    await c.next((m): m is { type: 'pong' } => m.type === 'pong');
  });

  test('a frame over maxPayload closes the socket with 1009', async () => {
    const c = await d.connect();
    const closed = c.closed();
    c.send({ type: 'hello', client: 'x'.repeat(70 * 1024) });
    assert.equal((await within(closed, 'the daemon to close the socket')).code, 1009);
  });

  test('without a display, calls fail with a retryable error type and the daemon keeps serving', async () => {
    const c = await d.connect();
    const uses = [computerUse('left_click', { coordinate: [10, 10] }), computerUse('type', { text: 'hi' })];
    const { result, events } = await c.batch('nodisplay', uses);
    assertApiValid(uses, result);
    assert.deepEqual(result.tool_results[0]!.content, [
      { type: 'text', text: "Tool 'left_click' failed with DisplayUnavailableError." },
    ]);
    assert.deepEqual(result.tool_results[1]!.content, [
      { type: 'text', text: 'Not executed: an earlier computer action in this turn failed.' },
    ]);
    assert.equal(result.failures[0]!.error.type, 'DisplayUnavailableError');
    assert.equal(result.failures[0]!.error.retryable, true);
    assert.deepEqual(result.halted, { computer: 0 });
    assert.deepEqual(
      events.map((e) => e.phase),
      ['started', 'failed', 'not_executed'],
    );
  });

  test('bad input is an error result that says what is allowed', async () => {
    const c = await d.connect();
    const uses = [
      computerUse('key', { text: 'Return', repeat: 0 }),
      computerUse('scroll', { scroll_direction: 'sideways', scroll_amount: 1 }),
    ];
    const { result } = await c.batch('badinput', uses);
    assertApiValid(uses, result);
    assert.deepEqual(result.tool_results[0]!.content, [
      { type: 'text', text: "invalid input for computer member 'key': repeat: Too small: expected number to be >=1" },
    ]);
    assert.equal(result.failures[0]!.error.type, 'ToolInputError');
  });

  test('a resent batch_id is replayed without running again; different content is a conflict', async () => {
    const c = await d.connect();
    const uses = [computerUse('wait', { duration: 0 }), computerUse('wait', { duration: 0 })];
    const first = await c.batch('again', uses);
    assert.equal(first.result.replayed, false);
    assert.equal(first.events.length, 4);
    const second = await c.batch('again', uses);
    assert.equal(second.result.replayed, true);
    assert.equal(second.events.length, 0, 'a replay emits no events');
    assert.deepEqual(second.result.tool_results, first.result.tool_results);
    c.send({ type: 'batch', batch_id: 'again', tool_uses: [computerUse('wait', { duration: 1 })] });
    assert.equal((await c.next(isError)).code, 'batch_id_conflict');
  });

  test('a session can be resumed from a new connection, with its stored results', async () => {
    const a = await d.connect();
    const w = await a.hello();
    const uses = [computerUse('wait', { duration: 0 })];
    const { result } = await a.batch('keep', uses);
    a.close();
    const b = await d.connect();
    const again = await b.hello(w.session_id);
    assert.equal(again.session_id, w.session_id);
    assert.equal(again.resumed, true);
    const replay = await b.batch('keep', uses);
    assert.equal(replay.result.replayed, true);
    assert.deepEqual(replay.result.tool_results, result.tool_results);
    b.send({ type: 'hello', resume_session_id: 's_doesnotexist0000000000' });
    assert.equal((await b.next(isError)).code, 'invalid_message');
    const c = await d.connect();
    c.send({ type: 'hello', resume_session_id: 's_doesnotexist0000000000' });
    assert.equal((await c.next(isError)).code, 'session_not_found');
  });

  test('a batch before hello gets a session and its welcome first', async () => {
    const c = await d.connect();
    const { result } = await c.batch('first', [computerUse('wait', { duration: 0 })]);
    assert.equal(result.tool_results.length, 1);
    const welcome = c.messages.find((m): m is Welcome => m.type === 'welcome');
    assert.ok(welcome, 'welcome was sent');
  });

  test('hello.events false: a batch is answered by its result frame alone; true turns events back on', async () => {
    const c = await d.connect();
    c.send({ type: 'hello', events: false });
    await c.next((m): m is Welcome => m.type === 'welcome');
    const uses = [computerUse('wait', { duration: 0 }), computerUse('key', { text: 'Return', repeat: 0 })];
    const quiet = await c.batch('quiet', uses);
    assert.equal(quiet.events.length, 0);
    assert.deepEqual(
      quiet.result.failures.map((f) => f.error.type),
      ['ToolInputError'],
      'the result still says what failed',
    );
    c.send({ type: 'hello', events: true });
    await c.next((m): m is Welcome => m.type === 'welcome');
    const loud = await c.batch('loud', uses);
    assert.deepEqual(
      loud.events.map((e) => e.phase),
      ['started', 'succeeded', 'started', 'failed'],
    );
    assert.deepEqual(loud.result.tool_results, quiet.result.tool_results);
  });
});

describe('shutdown', () => {
  test('answers the running batch, refuses new work, and is not held up by a refused half-open socket', async () => {
    // A long deadline: held up by the socket, close() would take all of it.
    const d = await startTestDaemon({ display: undefined, shutdownDeadlineMs: 60_000 });
    const c = await d.connect();
    await c.hello();
    const { port } = d.daemon.address;
    const lingering = connect(port, '127.0.0.1');
    lingering.write('GET /v1 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n');
    lingering.on('error', () => undefined);
    lingering.end = () => lingering; // this peer never closes its side
    const uses = [computerUse('wait', { duration: 30 })];
    c.send({ type: 'batch', batch_id: 'running', tool_uses: uses });
    await within(c.next(startedEvent('running', uses[0]!.id), 40_000), 'the running batch to start', 30_000);
    const t0 = Date.now();
    const closing = d.daemon.close();
    const socketClosed = c.closed();
    c.send({ type: 'batch', batch_id: 'late', tool_uses: [computerUse('wait', { duration: 0 })] });
    const result = await c.next((m): m is BatchResult => m.type === 'batch_result' && m.batch_id === 'running');
    assert.equal(result.cancelled, true);
    assert.equal((await within(socketClosed, 'the daemon to close the socket on shutdown')).code, 1001);
    // The late batch never runs: it is refused with shutting_down, or arrives after the close frame.
    const late = c.messages.filter((m) => 'batch_id' in m && m.batch_id === 'late');
    assert.ok(
      late.every((m) => m.type === 'error' && m.code === 'shutting_down'),
      JSON.stringify(late),
    );
    await assert.rejects(d.connect(), (err: unknown) => err instanceof Error);
    await within(closing, 'daemon.close() to finish', 70_000);
    assert.ok(Date.now() - t0 < 30_000, `closed in ${Date.now() - t0} ms, not at the 60 s deadline`);
    lingering.destroy();
    await d.close();
  });
});

describe('loop detection', () => {
  test('the same call failing the same way 3 times in a row is flagged, and the model is told to change course', async () => {
    const d = await startTestDaemon({ display: undefined, browser: 'off' });
    try {
      const c = await d.connect();
      const click = computerUse('left_click', { coordinate: [5, 5] });
      const texts: string[] = [];
      const repeated: (number | undefined)[] = [];
      for (let i = 0; i < 4; i++) {
        // A different call in between does not break the streak: models take screenshots between tries.
        const uses = [{ ...click, id: `toolu_click${i}` }, computerUse('wait', { duration: 0 })];
        const { result } = await c.batch(`loop-${i}`, uses);
        assertApiValid(uses, result);
        texts.push((result.tool_results[0]!.content[0] as { text: string }).text);
        repeated.push(result.failures[0]!.error.repeated);
      }
      assert.deepEqual(repeated, [undefined, 2, 3, 4]);
      assert.equal(texts[1], "Tool 'left_click' failed with DisplayUnavailableError.");
      assert.match(
        texts[2]!,
        /^Tool 'left_click' failed with DisplayUnavailableError\.\n\nThis exact call has now failed the same way 3 times in a row\. Do not repeat it unchanged/,
      );
      const other = [computerUse('left_click', { coordinate: [6, 5] })];
      const { result } = await c.batch('loop-other', other);
      assert.equal(result.failures[0]!.error.repeated, undefined, 'another input is another call');
    } finally {
      await d.close();
    }
  });
});

describe('rate limits', () => {
  test('handshakes beyond the burst get 429, before the token is even checked', async () => {
    const d = await startTestDaemon({ display: undefined, limits: { handshakeBurst: 3, handshakesPerSecond: 1 } });
    try {
      const statuses: number[] = [];
      for (let i = 0; i < 5; i++) {
        try {
          (await TestClient.open(d.url, { token: i === 1 ? 'wrong-token-0123456789' : undefined })).close();
          statuses.push(101);
        } catch (err) {
          statuses.push(err instanceof HandshakeError ? err.status : -1);
        }
      }
      assert.deepEqual(statuses, [101, 401, 101, 429, 429]);
    } finally {
      await d.close();
    }
  });

  test('token-guarded HTTP routes spend the same budget: /metrics guesses get 429 too', async () => {
    const d = await startTestDaemon({ display: undefined, limits: { handshakeBurst: 3, handshakesPerSecond: 1 } });
    try {
      const metrics = d.url.replace('ws:', 'http:').replace('/v1', '/metrics');
      const statuses: number[] = [];
      for (let i = 0; i < 4; i++) {
        const res = await fetch(metrics, { headers: { authorization: 'Bearer wrong-token-0123456789' } });
        await res.arrayBuffer();
        statuses.push(res.status);
      }
      assert.deepEqual(statuses, [401, 401, 401, 429]);
      const health = await fetch(d.url.replace('ws:', 'http:').replace('/v1', '/healthz'));
      assert.equal(health.status, 200, 'routes without a token are not limited');
    } finally {
      await d.close();
    }
  });

  test('messages beyond the burst get rate_limited errors; the connection stays usable', async () => {
    const d = await startTestDaemon({ display: undefined, limits: { messageBurst: 5, messagesPerSecond: 1 } });
    try {
      const c = await d.connect();
      const pongs = () => c.messages.filter((m) => m.type === 'pong').length;
      const limited = () => c.messages.filter((m) => m.type === 'error' && m.code === 'rate_limited').length;
      // Every ping is answered exactly once: a pong, or a rate_limited error.
      const answers = () => pongs() + limited();
      for (let i = 0; i < 8; i++) c.send({ type: 'ping' });
      await until('an answer to each of the 8 pings', () => answers() >= 8, { seen: () => c.messages });
      assert.deepEqual([pongs(), limited()], [5, 3]);
      // The bucket refills at 1 message a second, which only real time does: ping, one at a time, until a
      // ping is answered with a pong again (the refused ones take no token).
      await until(
        'a pong once the bucket has refilled',
        async () => {
          const before = answers();
          c.send({ type: 'ping' });
          await until('an answer to the ping', () => answers() > before, { seen: () => c.messages });
          return pongs() > 5;
        },
        { timeoutMs: 15_000, intervalMs: 100, seen: () => [pongs(), limited()] },
      );
      assert.equal(c.messages.filter((m) => m.type === 'pong').length, 6);
    } finally {
      await d.close();
    }
  });
});

describe('disabled members', () => {
  test('are left out of welcome and the tools[] entry, and answered with the permission text', async () => {
    const d = await startTestDaemon({ display: undefined, disabledMembers: ['zoom', 'hold_key'] });
    try {
      const c = await d.connect();
      const computer = (await c.hello()).toolsets[0]!;
      assert.ok(!computer.members.includes('zoom') && !computer.members.includes('hold_key'));
      assert.equal(computer.members.length, 15);
      assert.deepEqual(computer.tool, {
        type: 'computer_toolset_20260801',
        configs: { hold_key: { enabled: false }, zoom: { enabled: false } },
      });
      const uses = [computerUse('zoom', { region: [0, 0, 10, 10] }), computerUse('wait', { duration: 0 })];
      const { result } = await c.batch('off', uses);
      assertApiValid(uses, result);
      assert.deepEqual(
        result.tool_results.map((r) => r.content[0]),
        [
          {
            type: 'text',
            text: "The 'zoom' action is not permitted by this application's permissions and cannot be used in this session.",
          },
          { type: 'text', text: 'Not executed: an earlier computer action in this turn failed.' },
        ],
      );
      assert.equal(result.failures[0]!.error.type, 'ToolRefusedError');
    } finally {
      await d.close();
    }
  });
});

describe('heartbeat', () => {
  test('a peer that never answers pings is dropped', async () => {
    const d = await startTestDaemon({ display: undefined, heartbeatMs: 100 });
    try {
      const { port } = d.daemon.address;
      const socket = connect(port, '127.0.0.1');
      socket.write(
        'GET /v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
          `Sec-WebSocket-Key: ${Buffer.alloc(16, 1).toString('base64')}\r\nSec-WebSocket-Version: 13\r\n` +
          `Authorization: Bearer ${TEST_TOKEN}\r\n\r\n`,
      );
      let received = '';
      socket.on('data', (chunk) => (received += chunk.toString('latin1')));
      const started = Date.now();
      await within(
        new Promise((resolve) => socket.once('close', resolve)),
        'the daemon to drop the peer that never answers its pings',
        30_000,
      );
      assert.match(received, /^HTTP\/1.1 101/);
      // A few 100 ms heartbeats, not the default 30 s ones.
      assert.ok(Date.now() - started < 15_000, `dropped after ${Date.now() - started} ms`);
    } finally {
      await d.close();
    }
  });

  test('a live ws client stays connected across heartbeats', async () => {
    const d = await startTestDaemon({ display: undefined, heartbeatMs: 50 });
    try {
      const c = await d.connect();
      // At each heartbeat the daemon drops a peer whose pong to the previous ping it has not seen, and
      // pings the others: a fourth ping proves three pongs (answered by ws itself) were accepted.
      let pings = 0;
      c.ws.on('ping', () => pings++);
      await until('four heartbeat pings', () => pings >= 4 || c.ws.readyState !== WebSocket.OPEN, {
        seen: () => ({ pings, readyState: c.ws.readyState }),
      });
      assert.equal(c.ws.readyState, WebSocket.OPEN);
    } finally {
      await d.close();
    }
  });
});
