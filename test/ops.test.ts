/**
 * Operations (docs/OPERATIONS.md): /metrics and /readyz on real daemons, log
 * redaction and formats, and what `deskbatch serve` prints on stderr.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { REDACTED, createLogger, formatPretty, type LogFormat } from '../src/base/log.ts';
import { createReadiness, type Containment } from '../src/ops/health.ts';
import type { ToolUse } from '../src/base/protocol.ts';
import type { ServerStatus } from '../src/server/server.ts';
import { SharedDesktop } from '../src/desktop-pool/pool.ts';
import type { DesktopDriver } from '../src/desktop-driver/driver.ts';
import { Lane } from '../src/desktop-pool/lane.ts';
import { ensureBuilt } from '../testkit/build.ts';
import { TEST_TOKEN, TestClient, computerUse, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { pickFreeDisplay, startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { until, within } from '../testkit/wait.ts';

const VERSION = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string })
  .version;

// ---------------------------------------------------------------- helpers

function httpUrl(d: TestDaemon, path: string): string {
  return d.url.replace('ws:', 'http:').replace('/v1', path);
}

async function scrape(d: TestDaemon): Promise<string> {
  const res = await fetch(httpUrl(d, '/metrics'), { headers: { authorization: `Bearer ${TEST_TOKEN}` } });
  assert.equal(res.status, 200);
  return res.text();
}

/** Samples of one metric family line by line: name, labels, value. */
function samples(text: string): { name: string; labels: Record<string, string>; value: number }[] {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    }
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

/** The value of the sample with exactly these labels; 0 when there is none yet. */
function value(text: string, name: string, labels: Record<string, string> = {}): number {
  const want = JSON.stringify(Object.entries(labels).sort());
  const found = samples(text).filter(
    (s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === want,
  );
  assert.ok(found.length <= 1, `one sample of ${name} ${want}`);
  return found[0]?.value ?? 0;
}

/** A /readyz answer without its `desktops` counts (which other tests' sessions move). */
const reasonOf = (body: Record<string, unknown>): Record<string, unknown> => ({
  status: body.status,
  reason: body.reason,
});

async function readyz(d: TestDaemon): Promise<{ status: number; body: Record<string, unknown>; text: string }> {
  const res = await fetch(httpUrl(d, '/readyz'));
  const text = await res.text();
  return { status: res.status, body: JSON.parse(text) as Record<string, unknown>, text };
}

function browserUse(name: string, input: Record<string, unknown> = {}, id?: string): ToolUse {
  return {
    type: 'tool_use',
    id: id ?? `toolu_b_${Math.random().toString(36).slice(2)}`,
    name,
    toolset_name: 'browser',
    input,
  };
}

// ---------------------------------------------------------------- logs

describe('logs', () => {
  const capture = (format: LogFormat = 'json', secrets: string[] = []) => {
    const lines: string[] = [];
    const log = createLogger('debug', (l) => lines.push(l), {}, { format, secrets });
    return { log, lines };
  };

  test('credential fields are redacted at any depth and in any case; other fields stay', () => {
    const { log, lines } = capture();
    log.info('request', {
      Authorization: 'Bearer abc',
      headers: { cookie: 'a=b', 'X-Api-Key': 'k', host: 'example' },
      nested: [{ password: 'hunter2', user: 'me' }, { deeper: { API_KEY: 'x', Token: 'y', tokens: 3 } }],
    });
    assert.equal(lines.length, 1);
    const rec = JSON.parse(lines[0]!) as Record<string, unknown>;
    assert.deepEqual(
      { ...rec, time: 0 },
      {
        time: 0,
        level: 'info',
        msg: 'request',
        Authorization: REDACTED,
        headers: { cookie: REDACTED, 'X-Api-Key': REDACTED, host: 'example' },
        nested: [{ password: REDACTED, user: 'me' }, { deeper: { API_KEY: REDACTED, Token: REDACTED, tokens: 3 } }],
      },
    );
    for (const secret of ['abc', 'a=b', 'hunter2']) assert.ok(!lines[0]!.includes(secret), secret);
  });

  test('a secret never appears: not in the message, a nested string, an error, a bound field, either format', () => {
    const secret = 'the-daemon-token-0123456789';
    for (const format of ['json', 'pretty'] as const) {
      const { log, lines } = capture(format, [secret]);
      const child = log.child({ remote: `peer ${secret}` });
      child.warn(`refused ${secret} twice: ${secret}`, {
        detail: { list: [`x${secret}y`], error: new Error(`bad ${secret}`) },
        url: new URL(`http://h/?t=${secret}`),
      });
      const circular: Record<string, unknown> = { note: secret };
      circular.self = circular;
      child.error('circular', { circular });
      assert.equal(lines.length, 2);
      for (const line of lines) {
        assert.ok(!line.includes(secret), `${format}: ${line}`);
        assert.ok(line.includes(REDACTED), line);
        assert.equal(line.indexOf('\n'), line.length - 1, 'one line per record');
      }
    }
  });

  test('json keeps its shape; pretty is one human line with the fields after the message', () => {
    const { log, lines } = capture('json');
    log.child({ session: 's_abc' }).info('batch b1: 3 calls, 0 failed, 41 ms', { batch: 'b1' });
    assert.deepEqual(Object.keys(JSON.parse(lines[0]!) as object), ['time', 'level', 'msg', 'session', 'batch']);
    const at = new Date(2026, 0, 1, 12, 0, 1);
    assert.equal(
      formatPretty(at, 'info', 'batch b1: 3 calls, 0 failed, 41 ms', { session: 's_abc' }),
      '12:00:01 info  batch b1: 3 calls, 0 failed, 41 ms  session=s_abc',
    );
    assert.equal(
      formatPretty(at, 'warn', 'two\nlines', { members: ['a', 'b'], text: 'has space', n: 2, ok: false }),
      '12:00:01 warn  two\\nlines  members=a,b text="has space" n=2 ok=false',
    );
    const pretty = capture('pretty');
    pretty.log.debug('hello', { session: 's_1' });
    assert.match(pretty.lines[0]!, /^\d\d:\d\d:\d\d debug hello {2}session=s_1\n$/);
  });
});

// ---------------------------------------------------------------- readiness, without a daemon

describe('readiness logic', () => {
  const ok: ServerStatus = { accepting: true, sessions: 0, connections: 0, activeBatches: 0 };
  const containment: Containment = {
    browser_policy: 'off',
    browser_egress: 'off',
    browser_sandbox: 'off_no_browser',
    display_auth: 'external',
    desktop_sandbox: 'off',
  };

  // The shared display's desktop, with a driver that answers only displaySize(): all readiness asks of it.
  const sharedWith = (displaySize: () => Promise<{ width: number; height: number }>): SharedDesktop =>
    new SharedDesktop(
      { id: 'shared', driver: { displaySize } as unknown as DesktopDriver, browser: undefined, lane: new Lane() },
      () => undefined,
      () => ({}),
      async () => undefined,
    );
  const desktops = { mode: 'shared', max: 1, free: 1, leased: 0, waiting: 0 };

  test('one display probe serves every check within the cache time, concurrent ones included', async () => {
    let asked = 0;
    const r = createReadiness({
      status: () => ok,
      desktops: sharedWith(async () => (asked++, { width: 10, height: 20 })),
      cacheMs: 3_600_000,
      containment: () => containment,
    });
    const results = await Promise.all([r.check(), r.check(), r.check()]);
    results.push(await r.check());
    assert.equal(asked, 1);
    for (const x of results)
      assert.deepEqual(x, {
        status: 'ready',
        display: { width: 10, height: 20 },
        browser: 'off',
        containment,
        desktops,
      });
  });

  test('not accepting is shutting_down; a failing display is display_unreachable; a silent one unresponsive', async () => {
    const closing = createReadiness({
      status: () => ({ ...ok, accepting: false }),
      desktops: sharedWith(async () => ({ width: 1, height: 1 })),
      containment: () => containment,
    });
    assert.deepEqual(await closing.check(), { status: 'not_ready', reason: 'shutting_down', desktops });
    const failing = createReadiness({
      status: () => ok,
      desktops: sharedWith(() => Promise.reject(new Error('no X'))),
      containment: () => containment,
    });
    assert.deepEqual(await failing.check(), { status: 'not_ready', reason: 'display_unreachable', desktops });
    const silent = createReadiness({
      status: () => ok,
      desktops: sharedWith(() => new Promise(() => undefined)),
      timeoutMs: 20,
      containment: () => containment,
    });
    assert.deepEqual(await silent.check(), { status: 'not_ready', reason: 'display_unresponsive', desktops });
  });
});

// ---------------------------------------------------------------- a daemon on a display

describe('metrics and readiness on a daemon with a display', () => {
  let display: VirtualDisplay;
  let d: TestDaemon;
  let client: TestClient;
  before(async () => {
    await ensureBuilt(); // bin/deskbatch.js runs dist/
    display = await startTestDisplay({ width: 800, height: 600, windowManager: false });
    d = await startTestDaemon({ display: display.display, browser: 'off' });
    client = await d.connect();
    await client.hello();
  });
  after(async () => {
    await d?.close();
    await display?.stop();
  });

  test('/metrics needs the bearer token', async () => {
    assert.equal((await fetch(httpUrl(d, '/metrics'))).status, 401);
    const wrong = await fetch(httpUrl(d, '/metrics'), { headers: { authorization: 'Bearer wrong-token-0123456789' } });
    assert.equal(wrong.status, 401);
    const res = await fetch(httpUrl(d, '/metrics'), { headers: { authorization: `Bearer ${TEST_TOKEN}` } });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
    const text = await res.text();
    assert.ok(!text.includes(TEST_TOKEN));
    assert.equal(
      value(text, 'deskbatch_build_info', {
        version: VERSION,
        protocol: 'deskbatch.v1',
        node_version: process.version,
      }),
      1,
    );
    // Node's process metrics are there. Not their values: CPU time counts from when the collector
    // started, at the kernel's tick, so a scrape soon after on a busy machine can read 0 (seen in CI).
    const names = new Set(samples(text).map((s) => s.name));
    for (const name of [
      'process_cpu_user_seconds_total',
      'process_resident_memory_bytes',
      'nodejs_eventloop_lag_seconds',
    ]) {
      assert.ok(names.has(name), `process metric ${name}`);
    }
    assert.ok(value(text, 'process_resident_memory_bytes') > 0, 'resident memory');
    assert.equal(value(text, 'deskbatch_sessions'), 1);
    assert.equal(value(text, 'deskbatch_connections'), 1);
    assert.equal(value(text, 'deskbatch_active_batches'), 0);
    assert.equal(value(text, 'deskbatch_accepting'), 1);
  });

  test('/readyz is 200 when the display answers, without a token and without secrets', async () => {
    const r = await readyz(d);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.body, {
      status: 'ready',
      display: { width: 800, height: 600 },
      browser: 'off',
      // A daemon without a browser, on a display a test gave it.
      containment: {
        browser_policy: 'off',
        browser_egress: 'off',
        browser_sandbox: 'off_no_browser',
        display_auth: 'external',
        desktop_sandbox: 'off',
      },
      // One session (this test's client) on the one shared display.
      desktops: { mode: 'shared', max: 1, free: 1, leased: 1, waiting: 0 },
    });
  });

  test('the calls of a batch are counted with their outcomes, and the histograms count them', async () => {
    const before = await scrape(d);
    const uses = [
      computerUse('cursor_position'),
      computerUse('mouse_move', { coordinate: [99_999, 5] }),
      computerUse('cursor_position'),
    ];
    const { result } = await client.batch('counted', uses);
    assert.deepEqual(
      result.failures.map((f) => [f.name, f.error.type]),
      [['mouse_move', 'ToolInputError']],
    );
    const after = await scrape(d);
    const delta = (name: string, labels: Record<string, string> = {}): number =>
      value(after, name, labels) - value(before, name, labels);
    const c = (member: string, outcome: string) =>
      delta('deskbatch_calls_total', { toolset: 'computer', member, outcome });
    assert.equal(c('cursor_position', 'succeeded'), 1);
    assert.equal(c('mouse_move', 'failed'), 1);
    assert.equal(c('cursor_position', 'not_executed'), 1);
    assert.equal(c('cursor_position', 'failed'), 0);
    assert.equal(c('mouse_move', 'succeeded'), 0);
    const calls = samples(after).filter((s) => s.name === 'deskbatch_calls_total');
    assert.equal(
      calls.reduce((n, s) => n + s.value, 0) -
        samples(before)
          .filter((s) => s.name === 'deskbatch_calls_total')
          .reduce((n, s) => n + s.value, 0),
      3,
      'exactly those three calls',
    );
    const hist = { toolset: 'computer' };
    assert.equal(
      delta('deskbatch_call_duration_seconds_count', { ...hist, member: 'cursor_position' }),
      1,
      'not_executed has no duration',
    );
    assert.equal(delta('deskbatch_call_duration_seconds_count', { ...hist, member: 'mouse_move' }), 1);
    assert.equal(delta('deskbatch_call_duration_seconds_bucket', { ...hist, member: 'mouse_move', le: '+Inf' }), 1);
    assert.equal(delta('deskbatch_call_failures_total', { toolset: 'computer', error_type: 'ToolInputError' }), 1);
    assert.equal(delta('deskbatch_batches_total', { outcome: 'failed' }), 1);
    assert.equal(delta('deskbatch_batches_total', { outcome: 'ok' }), 0);
    assert.equal(delta('deskbatch_batch_duration_seconds_count', { outcome: 'failed' }), 1);
    assert.ok(
      Math.abs(delta('deskbatch_batch_duration_seconds_sum', { outcome: 'failed' }) - result.duration_ms / 1000) < 1e-6,
    );

    // The same batch again is a replay, not a second batch.
    await client.batch('counted', uses);
    const replayed = await scrape(d);
    assert.equal(value(replayed, 'deskbatch_batch_replays_total') - value(after, 'deskbatch_batch_replays_total'), 1);
    assert.equal(
      value(replayed, 'deskbatch_batches_total', { outcome: 'failed' }),
      value(after, 'deskbatch_batches_total', { outcome: 'failed' }),
    );
  });

  test('names no toolset defines are counted as "unknown" (and without toolset_name as "none")', async () => {
    const before = await scrape(d);
    const uses: ToolUse[] = [
      computerUse('frobnicate_zz9'),
      { type: 'tool_use', id: 'toolu_elsewhere', name: 'thing_zz9', toolset_name: 'elsewhere_zz9', input: {} },
      { type: 'tool_use', id: 'toolu_plain', name: 'plain_zz9', toolset_name: null, input: {} },
    ];
    const { result } = await client.batch('unknowns', uses);
    assert.equal(result.tool_results.length, 3);
    const after = await scrape(d);
    assert.ok(!after.includes('zz9'), 'a client-chosen name never becomes a label');
    const delta = (labels: Record<string, string>): number =>
      value(after, 'deskbatch_calls_total', labels) - value(before, 'deskbatch_calls_total', labels);
    const events = uses.length;
    assert.equal(
      delta({ toolset: 'computer', member: 'unknown', outcome: 'failed' }) +
        delta({ toolset: 'unknown', member: 'unknown', outcome: 'failed' }) +
        delta({ toolset: 'none', member: 'unknown', outcome: 'failed' }),
      events,
      JSON.stringify(result.failures.map((f) => f.error.type)),
    );
    assert.equal(delta({ toolset: 'computer', member: 'unknown', outcome: 'failed' }), 1);
    assert.equal(delta({ toolset: 'unknown', member: 'unknown', outcome: 'failed' }), 1);
  });

  test('the older computer tool is counted as toolset "computer_legacy", its images too', async () => {
    const before = await scrape(d);
    const legacy = (id: string, input: Record<string, unknown>): ToolUse => ({
      type: 'tool_use',
      id,
      name: 'computer',
      toolset_name: null,
      input,
    });
    const { result } = await client.batch('legacy', [
      legacy('toolu_l1', { action: 'screenshot' }),
      legacy('toolu_l2', { action: 'mouse_move', coordinate: [99_999, 1] }),
    ]);
    const image = result.tool_results[0]!.content[0]!;
    assert.ok(image.type === 'image');
    const after = await scrape(d);
    const delta = (name: string, labels: Record<string, string>): number =>
      value(after, name, labels) - value(before, name, labels);
    const calls = (outcome: string) => ({ toolset: 'computer_legacy', member: 'computer', outcome });
    assert.equal(delta('deskbatch_calls_total', calls('succeeded')), 1);
    assert.equal(delta('deskbatch_calls_total', calls('failed')), 1);
    assert.equal(
      delta('deskbatch_screenshot_bytes_total', { toolset: 'computer_legacy', media_type: image.source.media_type }),
      image.source.data.length,
    );
  });

  test('screenshot bytes grow by the base64 size of the image returned', async () => {
    const before = await scrape(d);
    const { result } = await client.batch('shot', [computerUse('screenshot')]);
    const image = result.tool_results[0]!.content.find((b) => b.type === 'image');
    assert.ok(image?.type === 'image');
    const bytes = image.source.data.length;
    const labels = { toolset: 'computer', media_type: image.source.media_type };
    const after = await scrape(d);
    assert.equal(
      value(after, 'deskbatch_screenshot_bytes_total', labels) -
        value(before, 'deskbatch_screenshot_bytes_total', labels),
      bytes,
    );
    assert.equal(
      value(after, 'deskbatch_screenshot_size_bytes_count', labels) -
        value(before, 'deskbatch_screenshot_size_bytes_count', labels),
      1,
    );
    assert.equal(
      value(after, 'deskbatch_screenshot_size_bytes_sum', labels) -
        value(before, 'deskbatch_screenshot_size_bytes_sum', labels),
      bytes,
    );
    assert.equal(
      value(after, 'deskbatch_batches_total', { outcome: 'ok' }) -
        value(before, 'deskbatch_batches_total', { outcome: 'ok' }),
      1,
    );
  });

  test('the metrics of one daemon are its own', async () => {
    const other = await startTestDaemon({ display: display.display, browser: 'off' });
    try {
      const text = await scrape(other);
      assert.equal(value(text, 'deskbatch_batches_total', { outcome: 'failed' }), 0);
      assert.equal(value(text, 'deskbatch_sessions'), 0);
    } finally {
      await other.close();
    }
  });

  test('/readyz: 503 browser_circuit_open while the browser cannot be launched', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'deskbatch-nobrowser-'));
    const b = await startTestDaemon({
      display: display.display,
      browser: 'headless',
      browserSettings: { executablePath: join(dir, 'no-chromium'), launchAtStart: true },
      resilience: { breaker: { failures: 1, coolDownMs: 3_600_000 } },
    });
    try {
      const c = await b.connect();
      await c.hello(); // the first welcome waits for the desktop worker to answer
      // The launch at start fails too (it is not counted by the breaker): ready once it ended.
      let before = await readyz(b);
      await until(
        'readiness once the launch at start failed',
        async () => (before = await readyz(b)).status === 200 || reasonOf(before.body).reason !== 'browser_starting',
        { timeoutMs: 60_000, intervalMs: 50, seen: () => [before.status, before.text] },
      );
      assert.equal(before.status, 200, before.text);
      assert.equal(before.body.browser, 'ok');
      const uses = () => [browserUse('navigate', { url: 'http://127.0.0.1:9/' })];
      const first = await c.batch('launch-1', uses());
      assert.equal(first.result.failures[0]?.error.type, 'BrowserUnavailableError');
      // The breaker opened on that failure (failures: 1): readiness reads its state, not later calls.
      const opened = await readyz(b);
      assert.equal(opened.status, 503, opened.text);
      assert.deepEqual(reasonOf(opened.body), { status: 'not_ready', reason: 'browser_circuit_open' });
      const second = await c.batch('launch-2', uses());
      assert.ok(second.result.failures[0]?.error.retry_after_ms !== undefined, JSON.stringify(second.result.failures));
      const r = await readyz(b);
      assert.equal(r.status, 503);
      assert.deepEqual(reasonOf(r.body), { status: 'not_ready', reason: 'browser_circuit_open' });
    } finally {
      await b.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('/readyz: a shared desktop is ready once the browser it launches at start runs, as a pooled desktop is free once its browser runs', async () => {
    const b = await startTestDaemon({
      display: display.display,
      browser: 'headless',
      browserSettings: { launchAtStart: true },
    });
    try {
      const desktops = b.daemon.desktops;
      assert.ok(desktops instanceof SharedDesktop && desktops.desktop.browser);
      const browser = desktops.desktop.browser;
      let last = await readyz(b);
      await until('readiness', async () => (last = await readyz(b)).status === 200, {
        timeoutMs: 60_000,
        intervalMs: 50,
        seen: () => [last.status, last.text],
      });
      assert.ok(browser.pid !== undefined, 'the browser runs, with no browser call made');
    } finally {
      await b.close();
    }
  });

  test('/readyz: ready again once the browser circuit cooled down, with no browser call in between', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'deskbatch-nobrowser-'));
    const b = await startTestDaemon({
      display: display.display,
      browser: 'headless',
      browserSettings: { executablePath: join(dir, 'no-chromium') },
      resilience: { breaker: { failures: 1, coolDownMs: 400 } },
    });
    try {
      const c = await b.connect();
      await c.hello();
      const first = await c.batch('launch-1', [browserUse('navigate', { url: 'http://127.0.0.1:9/' })]);
      assert.equal(first.result.failures[0]?.error.type, 'BrowserUnavailableError');
      // The circuit stays open in cockatiel until the next start is tried; readiness must not wait for one.
      let last = await readyz(b);
      const r = await until(
        'readiness to be 200 once the browser circuit cooled down (400 ms)',
        async () => {
          last = await readyz(b);
          return last.status === 200 && last;
        },
        { timeoutMs: 30_000, intervalMs: 100, seen: () => [last.status, last.text] },
      );
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.browser, 'ok');
    } finally {
      await b.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

// ---------------------------------------------------------------- a daemon without its display

describe('readiness on a daemon whose display is not there', () => {
  test('503 display_unreachable; 503 shutting_down once close() began; /healthz stays 200', async () => {
    const d = await startTestDaemon({ display: `:${pickFreeDisplay()}`, browser: 'off' });
    let sock: Socket | undefined;
    try {
      const r = await readyz(d);
      assert.equal(r.status, 503);
      assert.deepEqual(reasonOf(r.body), { status: 'not_ready', reason: 'display_unreachable' });
      assert.equal((await fetch(httpUrl(d, '/healthz'))).status, 200);

      // A client that does not read makes close() wait for its close frame (up to a second), and an
      // HTTP connection opened before close() is still served meanwhile.
      const c = await d.connect();
      await c.hello();
      c.ws.pause();
      const s = await new Promise<Socket>((resolve, reject) => {
        const x = connect(d.daemon.address.port, '127.0.0.1', () => resolve(x));
        x.once('error', reject);
      });
      sock = s;
      let response = '';
      s.on('data', (chunk: Buffer) => (response += chunk.toString()));
      const ended = new Promise<void>((resolve) => s.once('close', () => resolve()));
      const closing = d.daemon.close();
      s.write('GET /readyz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n');
      await within(ended, 'the daemon to answer /readyz and close that connection while closing', 30_000);
      await within(closing, 'daemon.close() to finish', 30_000);
      assert.match(response, /^HTTP\/1\.1 503 /);
      const body = response.slice(response.indexOf('\r\n\r\n') + 4);
      assert.ok(body.includes('{"status":"not_ready","reason":"shutting_down",'), response);
    } finally {
      sock?.destroy();
      await d.close();
    }
  });
});

// ---------------------------------------------------------------- what `deskbatch serve` prints

interface Served {
  child: ChildProcess;
  lines: string[];
  exited: Promise<number | null>;
  /** Resolves with the first line (already printed or later) that matches. */
  line(match: (l: string) => boolean, what: string): Promise<string>;
}

const children: ChildProcess[] = [];
after(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

function serve(args: string[], env: Record<string, string>): Served {
  const { DISPLAY: _display, DESKBATCH_TOKEN: _token, ...base } = process.env;
  const child = spawn(process.execPath, ['bin/deskbatch.js', 'serve', '--port', '0', '--browser', 'off', ...args], {
    env: { ...base, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  const lines: string[] = [];
  const waiters: { match: (l: string) => boolean; resolve: (l: string) => void }[] = [];
  let buffer = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  child.stderr!.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    for (let i = buffer.indexOf('\n'); i >= 0; i = buffer.indexOf('\n')) {
      const line = buffer.slice(0, i);
      buffer = buffer.slice(i + 1);
      lines.push(line);
      for (const w of [...waiters]) {
        if (w.match(line)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(line);
        }
      }
    }
  });
  return {
    child,
    lines,
    exited,
    line(match, what) {
      const seen = lines.find(match);
      if (seen !== undefined) return Promise.resolve(seen);
      const found = new Promise<string>((resolve, reject) => {
        waiters.push({ match, resolve });
        void exited.then((code) => reject(new Error(`exited ${code} before ${what}:\n${lines.join('\n')}`)));
      });
      return within(found, `${what} on stderr`, 30_000);
    },
  };
}

describe('deskbatch serve: stderr', () => {
  let display: VirtualDisplay;
  let home: string;
  before(async () => {
    display = await startTestDisplay({ width: 800, height: 600, windowManager: false });
    home = await mkdtemp(join(tmpdir(), 'deskbatch-home-'));
  });
  after(async () => {
    await display?.stop();
    await rm(home, { recursive: true, force: true });
  });

  for (const format of ['json', 'pretty'] as const) {
    test(`--log-format ${format}: the listen line, where the token is, and one line per batch; never the token`, async () => {
      const token = `ops-${format}-token-${Math.random().toString(36).slice(2)}-abcdefghijklmnopqr`;
      const s = serve(['--log-format', format, '--screenshots-dir', join(home, `shots-${format}`)], {
        HOME: home,
        DISPLAY: display.display,
        DESKBATCH_TOKEN: token,
      });
      try {
        const listening = await s.line((l) => /listening on ws:\/\//.test(l), 'the listen line');
        const url = /listening on (ws:\/\/\S+?)(?:"|\s|$)/.exec(listening)![1]!;
        await s.line((l) => l.includes('token: from DESKBATCH_TOKEN'), 'the token line');

        const client = await TestClient.open(url, { token });
        const welcome = await client.hello();
        const uses = [
          computerUse('cursor_position'),
          computerUse('mouse_move', { coordinate: [99_999, 5] }),
          computerUse('cursor_position'),
        ];
        await client.batch('turn-1', uses);
        const batchLine = await s.line((l) => l.includes('batch turn-1:'), 'the batch line');
        const summary =
          'batch turn-1: 3 calls (cursor_position x2, mouse_move), 1 failed (mouse_move: ToolInputError), 1 not executed';
        if (format === 'json') {
          const rec = JSON.parse(batchLine) as Record<string, unknown>;
          assert.equal(rec.level, 'info');
          assert.ok(String(rec.msg).startsWith(summary), String(rec.msg));
          assert.equal(rec.session, welcome.session_id);
          assert.equal(rec.batch, 'turn-1');
          assert.deepEqual(rec.members, ['cursor_position x2', 'mouse_move']);
          assert.deepEqual(rec.error_types, ['ToolInputError']);
          assert.equal(rec.failed, 1);
          assert.equal(rec.not_executed, 1);
          for (const l of s.lines) JSON.parse(l); // every line is JSON
          assert.equal(JSON.parse(listening).level, 'info');
        } else {
          assert.ok(batchLine.startsWith(`${batchLine.slice(0, 8)} info  ${summary}`), batchLine);
          assert.match(batchLine, /^\d\d:\d\d:\d\d info {2}batch turn-1: .*, \d+ ms {2}\S/);
          assert.ok(batchLine.includes(` session=${welcome.session_id}`), batchLine);
          assert.ok(batchLine.includes(' error_types=ToolInputError'), batchLine);
          assert.match(listening, /^\d\d:\d\d:\d\d info {2}deskbatch listening on ws:\/\//);
          for (const l of s.lines) assert.ok(!l.startsWith('{'), `pretty, not JSON: ${l}`);
        }

        // A client can put the token where the daemon logs: in a batch id and a member name.
        await client.batch(`x-${token}`, [computerUse(`m-${token}`)]);
        await s.line((l) => l.includes('batch x-[redacted]:'), 'the batch line with the token redacted');
        client.close();
        s.child.kill('SIGTERM');
        assert.equal(await within(s.exited, 'deskbatch serve to exit after SIGTERM', 30_000), 0);
        assert.ok(s.lines.length >= 4);
        for (const l of s.lines) assert.ok(!l.includes(token), `the token is never logged: ${l}`);
        assert.ok(
          s.lines.some((l) => l.includes(`m-${REDACTED}`)),
          'the member name was logged, redacted',
        );
      } finally {
        if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
      }
    });
  }
});
