/**
 * What a token holder or a slow client can exhaust, and the hygiene around the
 * token (docs/SECURITY.md, "Resource limits"): the send-buffer bound (4008), the
 * result cache's budget over every session, the batch time budget, the token's
 * length, handshake limits per IPv6 /64 and over all addresses, and the Host
 * allowlist of the HTTP routes. Real daemons on 127.0.0.1, real ws clients; no
 * X display (`wait` needs none).
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { describe, test } from 'node:test';
import WebSocket, { type WebSocketServer } from 'ws';
import { ConfigError, DEFAULT_CONFIG, configWarnings, resolveConfig } from '../src/base/config.ts';
import { CLOSE_SEND_BUFFER_FULL, type BatchResult, type ToolUse, type Welcome } from '../src/base/protocol.ts';
import { HandshakeLimiter, handshakeKey } from '../src/server/rate-limit.ts';
import { ResultBudget, Session, resultBytes } from '../src/server/session.ts';
import { VIEWER_SUBPROTOCOL } from '../src/viewer/index.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { textBatchResult } from '../testkit/batch-result.ts';
import { TEST_TOKEN, computerUse, startTestDaemon, startedEvent } from '../testkit/daemon.ts';
import { until, within } from '../testkit/wait.ts';
import { failsWith } from '../testkit/errors.ts';

const COMPUTER_CANCELLED_TEXT =
  'Not completed: the computer actions of this turn were cancelled before this one finished.';

describe('the send buffer', () => {
  test('a client that stops reading is closed with 4008 at the bound; the daemon holds no more, and the session is kept', async () => {
    const bound = 256 * 1024;
    const d = await startTestDaemon({
      display: undefined,
      // The heartbeat would drop the paused client too, later: keep it out of the way.
      heartbeatMs: 600_000,
      limits: { maxBufferedBytes: bound, maxQueuedBatches: 400, messageBurst: 1_000, messagesPerSecond: 1_000 },
    });
    let unsubscribe: () => void = () => undefined;
    try {
      const c = await d.connect();
      const w = await c.hello();
      // The daemon's own end of this connection: what it holds for the client.
      const serverSide = [...(d.daemon.server as unknown as { wss: WebSocketServer }).wss.clients][0]!;
      let maxBuffered = 0;
      const cancelled: string[] = [];
      let finished = 0;
      unsubscribe = d.daemon.activity.subscribe((a) => {
        if (a.type === 'tool_event' || a.type === 'batch_finished') {
          maxBuffered = Math.max(maxBuffered, serverSide.bufferedAmount);
        }
        if (a.type === 'batch_finished' && a.session === w.session_id) {
          finished++;
          if (a.result.cancelled) cancelled.push(a.result.batch_id);
        }
      });

      // Big frames without a display: 100 `wait` calls with long ids (echoed in two events and the result).
      const N = 200;
      const batch = (i: number): ToolUse[] =>
        Array.from({ length: 100 }, (_, j) =>
          computerUse('wait', { duration: 0 }, `toolu_${i}_${j}_${'x'.repeat(230)}`),
        );
      c.ws.pause();
      for (let i = 0; i < N; i++) c.send({ type: 'batch', batch_id: `flood-${i}`, tool_uses: batch(i) });
      // Nobody cancels and the daemon does not shut down: a cancelled batch means the daemon released the
      // session, which it does when it closes the connection.
      await until(
        'a batch of the session cancelled by the daemon, or every batch finished',
        () => cancelled.length > 0 || finished === N,
        { timeoutMs: 120_000, seen: () => ({ finished, maxBuffered, buffered: serverSide.bufferedAmount }) },
      );
      assert.ok(
        cancelled.length > 0,
        `every batch ran to its end: the daemon kept ${maxBuffered} bytes for the client`,
      );
      const closed = c.closed();
      c.ws.resume();
      const { code, reason } = await within(closed, 'the close frame, behind the unread frames', 30_000);
      assert.equal(code, CLOSE_SEND_BUFFER_FULL);
      assert.match(reason, /not reading/);
      // Bounded: at most the bound plus the one frame that crossed it (a result here is ~40 KB), where an
      // unbounded daemon holds every result the client did not read (tens of MB for these 200 batches).
      assert.ok(maxBuffered <= 2 * bound, `the daemon held ${maxBuffered} bytes for the client`);
      const delivered = c.messages.filter((m) => m.type === 'batch_result').length;
      assert.ok(delivered < N, `${delivered} of ${N} results were sent: the rest were not queued`);

      // The disconnect path ran: the session outlives the connection, with its cancelled results stored.
      const c2 = await d.connect();
      const again = await c2.hello(w.session_id);
      assert.equal(again.resumed, true);
      const last = cancelled.at(-1)!;
      const replay = await c2.batch(last, batch(Number(last.slice('flood-'.length))));
      assert.equal(replay.result.replayed, true);
      assert.equal(replay.result.cancelled, true);
    } finally {
      unsubscribe();
      await d.close();
    }
  });
});

describe('image bounds the API sets', () => {
  test("images stay under the API's 10 MB (decimal) by default, and cannot be allowed more", () => {
    const config = resolveConfig({ token: TEST_TOKEN, tokenConfigured: true });
    assert.equal(config.screenshot.maxBase64Bytes, 10_000_000);
    assert.throws(
      () =>
        resolveConfig({ token: TEST_TOKEN, tokenConfigured: true, screenshot: { maxBase64Bytes: 10 * 1024 * 1024 } }),
      failsWith(ConfigError, "screenshot.maxBase64Bytes must be 1–10000000 (the API's 10 MB per image), got 10485760"),
    );
  });

  test('screenshots over 2000 px per side are allowed, with a warning at start about requests of more than 20 images', () => {
    assert.deepEqual(configWarnings(resolveConfig({ token: TEST_TOKEN, tokenConfigured: true })), []);
    const big = resolveConfig({
      token: TEST_TOKEN,
      tokenConfigured: true,
      screenshot: { limits: { maxSidePx: 2400 } },
    });
    assert.deepEqual(configWarnings(big), [
      'screenshots may be up to 2400 px per side: the API refuses a request holding more than 20 images larger than ' +
        "2000 px per side, and deskbatch cannot count the images in an agent's conversation",
    ]);
  });
});

describe('the result cache over every session', () => {
  const result = textBatchResult;
  const uses = (text: string): ToolUse[] => [
    { type: 'tool_use', id: 'toolu_1', name: 'type', toolset_name: 'computer', input: { text } },
  ];
  const run = async (s: Session, id: string): Promise<void> => {
    const o = s.submit(id, uses(id));
    assert.equal(o.kind, 'accepted', id);
    if (o.kind === 'accepted') await o.result;
    await new Promise((r) => setImmediate(r)); // the session stores it in a callback after the result
  };

  test('past the shared budget the least recently stored results go first, whichever session holds them', async () => {
    const one = resultBytes(result('a1', 3_000)); // every result below has this size
    const budget = new ResultBudget(3 * one + 10);
    // Each session alone could keep all of its results: only the shared budget evicts here.
    const limits = {
      maxQueuedBatches: 8,
      resultCache: { maxEntries: 100, maxBytes: 100 * one, ttlMs: 60_000 },
      sharedCache: budget,
    };
    const a = new Session(limits, async (id) => result(id, 3_000));
    const b = new Session(limits, async (id) => result(id, 3_000));
    for (const [s, id] of [
      [a, 'a1'],
      [b, 'b1'],
      [a, 'a2'],
    ] as const)
      await run(s, id);
    assert.deepEqual(budget.usage, { entries: 3, bytes: 3 * one });
    await run(b, 'b2'); // a1 is the oldest
    assert.deepEqual([a.cacheUsage.entries, b.cacheUsage.entries], [1, 2]);
    await run(a, 'a3'); // then b1
    assert.deepEqual([a.cacheUsage.entries, b.cacheUsage.entries], [2, 1]);
    assert.ok(budget.usage.bytes <= budget.maxBytes, JSON.stringify(budget.usage));
    assert.equal(budget.usage.bytes, a.cacheUsage.bytes + b.cacheUsage.bytes, 'the budget counts what is stored');
    for (const [s, id] of [
      [a, 'a2'],
      [a, 'a3'],
      [b, 'b2'],
    ] as const)
      assert.equal(s.submit(id, uses(id)).kind, 'replayed', `${id} is kept`);
    // An evicted batch_id is treated as new (docs/PROTOCOL.md): it runs again, and storing it evicts a2.
    assert.equal(b.submit('b1', uses('b1')).kind, 'accepted', 'b1 was evicted');
    await b.settled();
    await new Promise((r) => setImmediate(r));
    assert.deepEqual([a.cacheUsage.entries, b.cacheUsage.entries], [1, 2]);
    // A session that ends gives its share back: a can store three again without losing any.
    b.close();
    assert.deepEqual(budget.usage, { entries: 1, bytes: one });
    await run(a, 'a4');
    await run(a, 'a5');
    assert.equal(a.cacheUsage.entries, 3);
    assert.equal(a.submit('a3', uses('a3')).kind, 'replayed', 'a3 is kept');
  });

  test('the shared budget defaults to 256 MiB and may not be smaller than one session’s', () => {
    assert.equal(DEFAULT_CONFIG.resultCache.maxTotalBytes, 256 * 1024 * 1024);
    assert.throws(
      () =>
        resolveConfig({
          token: TEST_TOKEN,
          tokenConfigured: true,
          resultCache: { maxBytes: 2_000_000, maxTotalBytes: 1_000_000 },
        }),
      failsWith(ConfigError, 'resultCache.maxTotalBytes (1000000) must be at least resultCache.maxBytes (2000000)'),
    );
  });
});

describe('the batch time budget', () => {
  test('once spent, the running call and every later one get the cancelled text; the result says cancelled', async () => {
    const d = await startTestDaemon({ display: undefined, limits: { maxBatchMs: 500 } });
    try {
      const c = await d.connect();
      c.send({ type: 'hello', all_limits: true });
      const w = await c.next((m): m is Welcome => m.type === 'welcome');
      assert.equal(w.limits.max_batch_ms, 500);
      assert.equal(w.toolsets[0]!.cancelled_text, COMPUTER_CANCELLED_TEXT);
      const uses = [
        computerUse('wait', { duration: 0 }),
        computerUse('wait', { duration: 60 }),
        computerUse('wait', { duration: 0 }),
      ];
      const t0 = Date.now();
      const { result, events } = await within(c.batch('long', uses), 'the batch to be cut at its budget', 30_000);
      assertApiValid(uses, result);
      assert.equal(result.cancelled, true);
      assert.deepEqual(result.failures, [], 'a spent budget is not a failure');
      assert.equal(result.tool_results[0]!.is_error, undefined);
      for (const r of result.tool_results.slice(1)) {
        assert.deepEqual(r.content, [{ type: 'text', text: COMPUTER_CANCELLED_TEXT }]);
      }
      assert.deepEqual(
        events.map((e) => e.phase),
        ['started', 'succeeded', 'started', 'cancelled', 'cancelled'],
      );
      assert.ok(Date.now() - t0 < 30_000, 'long before the 60 s wait would have ended');
      // The next batch has a budget of its own.
      const next = await c.batch('short', [computerUse('wait', { duration: 0 })]);
      assert.equal(next.result.cancelled, false);
    } finally {
      await d.close();
    }
  });

  test('the budget counts from when the batch gets the desktop, not while it waits for it', async () => {
    const d = await startTestDaemon({ display: undefined, limits: { maxBatchMs: 3_000 } });
    try {
      const [a, b] = [await d.connect(), await d.connect()];
      const first = [computerUse('wait', { duration: 2 })];
      a.send({ type: 'batch', batch_id: 'first', tool_uses: first });
      await a.next(startedEvent('first', first[0]!.id));
      // b waits for the desktop about 2 s, then runs 2 s: 4 s after it was sent, 2 s into its own budget.
      const second = await within(
        b.batch('second', [computerUse('wait', { duration: 2 })]),
        'the second batch',
        30_000,
      );
      assert.equal(second.result.cancelled, false);
      assert.equal(second.result.tool_results[0]!.is_error, undefined);
      assert.equal((await a.next((m): m is BatchResult => m.type === 'batch_result')).cancelled, false);
    } finally {
      await d.close();
    }
  });

  test('defaults to 10 minutes; --max-batch-ms must be a positive whole number', () => {
    assert.equal(DEFAULT_CONFIG.limits.maxBatchMs, 600_000);
    for (const bad of [0, -1, 1.5, NaN]) {
      assert.throws(
        () => resolveConfig({ token: TEST_TOKEN, tokenConfigured: true, limits: { maxBatchMs: bad } }),
        failsWith(ConfigError, `limits.maxBatchMs must be a positive integer, got ${bad}`),
        String(bad),
      );
    }
  });
});

describe('welcome.limits', () => {
  test('the limits added within v1 come only when hello asks for them (all_limits), so strict v1 clients never meet them', async () => {
    const d = await startTestDaemon({ display: undefined });
    try {
      const c = await d.connect();
      const plain = await c.hello();
      assert.deepEqual(Object.keys(plain.limits).sort(), ['max_payload_bytes', 'max_queued_batches', 'max_tool_uses']);
      c.send({ type: 'hello', all_limits: true });
      const all = await c.next((m): m is Welcome => m.type === 'welcome');
      assert.deepEqual(all.limits, {
        max_tool_uses: DEFAULT_CONFIG.limits.maxToolUsesPerBatch,
        max_payload_bytes: DEFAULT_CONFIG.limits.maxPayloadBytes,
        max_queued_batches: DEFAULT_CONFIG.limits.maxQueuedBatches,
        max_batch_ms: 600_000,
        max_buffered_bytes: 64 * 1024 * 1024,
        result_cache_bytes: 32 * 1024 * 1024,
        result_cache_total_bytes: 256 * 1024 * 1024,
        resume_window_ms: 120_000,
      });
      // It sticks to the connection, like `events`, and can be turned off again.
      c.send({ type: 'hello', all_limits: false });
      const off = await c.next((m): m is Welcome => m.type === 'welcome');
      assert.equal(off.limits.max_batch_ms, undefined);
    } finally {
      await d.close();
    }
  });
});

describe('the token', () => {
  test('a configured token needs at least 32 characters', () => {
    assert.throws(
      () => resolveConfig({ token: 'a'.repeat(31), tokenConfigured: true }),
      (err: unknown) => err instanceof ConfigError && err.message === 'the token must be at least 32 characters',
    );
    assert.equal(resolveConfig({ token: 'a'.repeat(32), tokenConfigured: true }).token.length, 32);
    assert.ok(TEST_TOKEN.length >= 32);
  });
});

/** The HTTP status a handshake gets: 101 when it opens. */
function handshake(
  url: string,
  options: { headers?: Record<string, string>; protocols?: string[]; localAddress?: string } = {},
): Promise<number> {
  const headers = { ...(options.protocols ? {} : { authorization: `Bearer ${TEST_TOKEN}` }), ...options.headers };
  const ws = new WebSocket(url, options.protocols ?? [], { headers, localAddress: options.localAddress });
  return within(
    new Promise<number>((resolve, reject) => {
      ws.once('open', () => {
        ws.terminate();
        resolve(101);
      });
      ws.once('unexpected-response', (req, res) => {
        req.destroy();
        resolve(res.statusCode ?? 0);
      });
      ws.once('error', reject);
    }),
    `the handshake to ${url}`,
  );
}

describe('handshake rate limits', () => {
  test('IPv6 clients are counted by their /64; IPv4 by address, also when IPv4-mapped', () => {
    const cases: [string, string][] = [
      ['192.0.2.1', '192.0.2.1'],
      ['::ffff:192.0.2.1', '192.0.2.1'],
      ['2001:db8:a:b:c:d:e:f', '2001:db8:a:b::/64'],
      ['2001:DB8:A:B::1', '2001:db8:a:b::/64'],
      ['2001:0db8:000a:000b::', '2001:db8:a:b::/64'],
      ['2001:db8::1', '2001:db8:0:0::/64'],
      ['::1', '0:0:0:0::/64'],
      ['::', '0:0:0:0::/64'],
      ['fe80::1%eth0', 'fe80:0:0:0::/64'],
      ['64:ff9b::192.0.2.1', '64:ff9b:0:0::/64'],
      ['', ''],
    ];
    for (const [address, key] of cases) assert.equal(handshakeKey(address), key, address);

    const limiter = new HandshakeLimiter({
      handshakeBurst: 2,
      handshakesPerSecond: 0.001,
      globalHandshakeBurst: 100,
      globalHandshakesPerSecond: 0.001,
    });
    const takes = (addresses: string[]) => addresses.map((a) => limiter.take(a));
    // Three addresses of one /64 share its burst of 2; the next /64 has its own.
    assert.deepEqual(takes(['2001:db8:1:2::1', '2001:db8:1:2:ffff::9', '2001:db8:1:2::3']), [true, true, false]);
    assert.deepEqual(takes(['2001:db8:1:3::1', '2001:db8:1:3::2', '2001:db8:1:3::3']), [true, true, false]);
    assert.deepEqual(takes(['198.51.100.1', '198.51.100.2', '198.51.100.1', '198.51.100.1']), [
      true,
      true,
      true,
      false,
    ]);
  });

  test('all addresses together share a global budget; an address past its own spends none of it', () => {
    const limiter = new HandshakeLimiter({
      handshakeBurst: 1,
      handshakesPerSecond: 0.001,
      globalHandshakeBurst: 2,
      globalHandshakesPerSecond: 0.001,
    });
    assert.deepEqual(
      ['198.51.100.1', '198.51.100.1', '198.51.100.2', '198.51.100.3'].map((a) => limiter.take(a)),
      [true, false, true, false],
    );
    assert.deepEqual(
      [DEFAULT_CONFIG.limits.globalHandshakeBurst, DEFAULT_CONFIG.limits.globalHandshakesPerSecond],
      [500, 50],
    );
  });

  test('on a daemon: handshakes from many loopback addresses get 429 past the global burst', async () => {
    const d = await startTestDaemon({
      display: undefined,
      limits: { handshakeBurst: 100, globalHandshakeBurst: 3, globalHandshakesPerSecond: 1 },
    });
    try {
      const statuses: number[] = [];
      // A fresh address each time: no per-address bucket ever runs out.
      for (let i = 2; i <= 6; i++) statuses.push(await handshake(d.url, { localAddress: `127.0.0.${i}` }));
      assert.deepEqual(statuses, [101, 101, 101, 429, 429]);
    } finally {
      await d.close();
    }
  });
});

/** GET `path` with the given Host header; resolves with the status. */
function get(port: number, path: string, host: string, headers: Record<string, string> = {}): Promise<number> {
  return within(
    new Promise<number>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path, headers: { ...headers, host } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.on('error', reject);
      req.end();
    }),
    `GET ${path} with Host ${host}`,
  );
}

describe('the Host allowlist', () => {
  test('HTTP routes answer only to IP literals, localhost and --allow-host-header names (DNS rebinding gets 421)', async () => {
    const d = await startTestDaemon({ display: undefined, allowHostHeaders: ['Desk-3.Desks.Example'] });
    try {
      const { port } = d.daemon.address;
      const auth = { authorization: `Bearer ${TEST_TOKEN}` };
      const allowed = [
        `127.0.0.1:${port}`,
        `localhost:${port}`,
        `LOCALHOST:${port}`,
        `[::1]:${port}`,
        '10.1.2.3:8765', // a pod IP, as kubelet probes send it; the port is not compared
        `desk-3.desks.example:${port}`,
        'DESK-3.desks.example',
      ];
      const refused = [
        `evil.example:${port}`,
        `localhost.evil.example:${port}`,
        `desk-3.desks.example.evil:${port}`,
        `127.0.0.1.nip.io:${port}`,
        `localhost.:${port}`,
        `user@127.0.0.1:${port}`,
      ];
      for (const path of ['/healthz', '/readyz', '/metrics', '/viewer']) {
        for (const host of allowed) assert.notEqual(await get(port, path, host, auth), 421, `${path} ${host}`);
        for (const host of refused) assert.equal(await get(port, path, host, auth), 421, `${path} ${host}`);
      }
      assert.equal(await get(port, '/healthz', `localhost:${port}`), 200);
      assert.equal(await get(port, '/metrics', `127.0.0.1:${port}`, auth), 200);
      // /v1 needs the token, which a rebound page does not have: clients may connect through any name.
      assert.equal(await handshake(d.url, { headers: { host: `desk-7.other.example:${port}` } }), 101);
    } finally {
      await d.close();
    }
  });

  test('the viewer page may connect back through an --allow-host-header name; through another name it may not', async () => {
    const d = await startTestDaemon({ display: undefined, allowHostHeaders: ['desk-3.desks.example'] });
    try {
      const { port } = d.daemon.address;
      const feed = `ws://127.0.0.1:${port}/viewer/feed`;
      const protocols = [VIEWER_SUBPROTOCOL, `deskbatch.token.${TEST_TOKEN}`];
      const from = (name: string) => ({
        protocols,
        headers: { host: `${name}:${port}`, origin: `http://${name}:${port}` },
      });
      assert.equal(await handshake(feed, from('desk-3.desks.example')), 101);
      assert.equal(await handshake(feed, from('127.0.0.1')), 101);
      assert.equal(await handshake(feed, from('evil.example')), 403);
      assert.throws(
        () => resolveConfig({ token: TEST_TOKEN, tokenConfigured: true, allowHostHeaders: ['https://desk.example'] }),
        failsWith(
          ConfigError,
          '--allow-host-header "https://desk.example" is not a host name such as desk-3.desks.example (no scheme, no port)',
        ),
      );
      assert.throws(
        () => resolveConfig({ token: TEST_TOKEN, tokenConfigured: true, allowHostHeaders: ['desk.example:8765'] }),
        failsWith(
          ConfigError,
          '--allow-host-header "desk.example:8765" is not a host name such as desk-3.desks.example (no scheme, no port)',
        ),
      );
    } finally {
      await d.close();
    }
  });
});
