/**
 * Human takeover, from the agent's side and the control channel's
 * (docs/PROTOCOL.md "Takeover", docs/VIEWER.md "Takeover"): a real daemon on
 * a real Xvfb display, real x11vnc behind the daemon's own port, the agent a
 * real ws client, the viewer's control socket and VNC socket real clients.
 * The viewer page itself, in Chromium, is test/viewer-takeover.test.ts.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { BatchRefusedError, DeskbatchClient } from '../src/client/index.ts';
import type { BatchResult, ErrorMessage, TakeoverMessage } from '../src/base/protocol.ts';
import {
  computerUse,
  startedEvent,
  startTestDaemon,
  TEST_TOKEN,
  type TestClient,
  type TestDaemon,
} from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import type { TakeoverSettings } from '../src/base/config.ts';
import { ControlClient, takeoverOn } from '../testkit/takeover.ts';
import { ENCODING_CURSOR, ENCODING_RAW, RfbTestClient } from '../testkit/rfb-client.ts';
import { until } from '../testkit/wait.ts';

const run = promisify(execFile);
const SIZE = { width: 1024, height: 768 };
/** What the person types: it must appear in no log line, frame or result. */
const SECRET = 'Zq7-hunter2';

const XK_RETURN = 0xff0d;

/** The daemon's VNC socket for `desktop`, as the viewer opens it (with `lease`: as the holder). */
function vnc(d: TestDaemon, desktop: string, lease?: string, headers?: Record<string, string>) {
  const url = `${d.url.replace(/\/v1$/, '/viewer/vnc')}?desktop=${encodeURIComponent(desktop)}`;
  const protocols = [
    'deskbatch.vnc.v1',
    `deskbatch.token.${TEST_TOKEN}`,
    ...(lease ? [`deskbatch.lease.${lease}`] : []),
  ];
  return {
    connect: () => RfbTestClient.connect(url, { protocols, ...(headers ? { headers } : {}) }),
    open: () => RfbTestClient.open(url, [ENCODING_RAW, ENCODING_CURSOR], { protocols }),
  };
}

/** Each character's key pressed and let go (printable ASCII: its keysym is its code). */
function typeText(c: RfbTestClient, text: string): void {
  for (const ch of text) {
    c.key(ch.charCodeAt(0), true);
    c.key(ch.charCodeAt(0), false);
  }
}

const isTakeover =
  (event: TakeoverMessage['event']) =>
  (m: { type: string }): m is TakeoverMessage =>
    m.type === 'takeover' && (m as TakeoverMessage).event === event;

async function pointerAt(display: VirtualDisplay): Promise<{ x: number; y: number }> {
  const { stdout } = await run('xdotool', ['getmouselocation', '--shell'], {
    env: { ...process.env, DISPLAY: display.display },
  });
  const x = Number(/X=(\d+)/.exec(stdout)?.[1]);
  const y = Number(/Y=(\d+)/.exec(stdout)?.[1]);
  return { x, y };
}

/** Arrival order of what a client got, as `type` or `type:detail`. */
function arrivals(c: TestClient): string[] {
  const order: string[] = [];
  c.ws.on('message', (data) => {
    const m = JSON.parse(String(data)) as { type: string; event?: string; batch_id?: string; phase?: string };
    order.push(
      m.type === 'takeover'
        ? `takeover:${m.event}`
        : m.type === 'tool_event'
          ? `event:${m.batch_id}:${m.phase}`
          : `${m.type}:${m.batch_id ?? ''}`,
    );
  });
  return order;
}

/** A display and a daemon on it with takeover on (`settings` over the defaults), for the tests of one describe. */
function takeoverDaemon(settings: Partial<TakeoverSettings>): { display: VirtualDisplay; d: TestDaemon } {
  const env = {} as { display: VirtualDisplay; d: TestDaemon };
  before(async () => {
    env.display = await startTestDisplay(SIZE);
    env.d = await startTestDaemon({
      display: env.display.display,
      browser: 'off',
      takeover: takeoverOn(undefined, settings),
    });
  });
  after(async () => {
    await env.d?.close();
    await env.display?.stop();
  });
  return env;
}

describe('takeover off (the default)', () => {
  let display: VirtualDisplay;
  let d: TestDaemon;
  before(async () => {
    display = await startTestDisplay(SIZE);
    d = await startTestDaemon({ display: display.display, browser: 'off' });
  });
  after(async () => {
    await d?.close();
    await display?.stop();
  });

  test('no capability, help is refused, and the control socket does not exist', async () => {
    const plain = await d.connect();
    const v1 = await plain.hello();
    assert.equal(v1.capabilities, undefined, 'a client that did not ask meets no new field');
    const c = await d.connect();
    const welcome = await c.hello(undefined, { takeover: {} });
    assert.deepEqual(welcome.capabilities, []);
    c.send({ type: 'help', reason: 'log in for me' });
    const refused = await c.next((m): m is ErrorMessage => m.type === 'error');
    assert.equal(refused.code, 'help_unavailable');
    await assert.rejects(ControlClient.open(d.url), /refused: 404/);
  });
});

describe('takeover on', () => {
  const env = takeoverDaemon({ leaseMs: 60_000, graceMs: 1_500 });

  test('help, take, the agent waits, the person acts, hands back with a note; only counts reach the agent', async () => {
    const { d, display } = env;
    const agent = await d.connect();
    const order = arrivals(agent);
    const welcome = await agent.hello(undefined, { takeover: {} });
    assert.deepEqual(welcome.capabilities, ['help']);
    agent.send({ type: 'help', reason: 'log in to the bank; I must not see the password' });
    const ack = await agent.next(isTakeover('help_requested'));
    assert.match(ack.request_id ?? '', /^h\d+$/);

    const viewer = await ControlClient.open(d.url);
    const seen = await viewer.desktop('the help request in the state', 'shared', (s) => s.help.length === 1);
    assert.equal(seen.help[0]!.reason, 'log in to the bank; I must not see the password');
    assert.deepEqual(seen.sessions, [welcome.session_id]);
    viewer.send({ type: 'take', desktop: 'shared', operator: 'alice' });
    const granted = await viewer.next('granted', (m) => m.type === 'granted');
    const lease = String(granted.lease);
    const started = await agent.next(isTakeover('started'));
    assert.equal(started.operator, 'alice');
    assert.equal(started.request_id, ack.request_id);

    // The agent's batch waits while the person holds the desktop.
    agent.send({ type: 'batch', batch_id: 'after', tool_uses: [computerUse('cursor_position', {}, 'toolu_pos')] });
    // A client that chose `refuse` is answered at once, and nothing of its batch runs.
    const refuser = await d.connect();
    await refuser.hello(undefined, { takeover: { when_held: 'refuse' } });
    const heldFrame = await refuser.next(isTakeover('started'));
    assert.equal(heldFrame.operator, 'alice', 'a session that comes while the desktop is held hears so at once');
    refuser.send({ type: 'batch', batch_id: 'r1', tool_uses: [computerUse('mouse_move', { coordinate: [5, 5] })] });
    const held = await refuser.next((m): m is ErrorMessage => m.type === 'error');
    assert.equal(held.code, 'desktop_held');
    assert.equal(held.batch_id, 'r1');
    assert.ok(held.retry_after_ms !== undefined && held.retry_after_ms > 0 && held.retry_after_ms <= 10_000);

    // A second viewer cannot take it while the first holds it.
    const other = await ControlClient.open(d.url);
    other.send({ type: 'take', desktop: 'shared', operator: 'bob' });
    const refused = await other.next('refused', (m) => m.type === 'refused');
    assert.match(String(refused.reason), /alice/);
    const stolen = await vnc(d, 'shared', 'not-the-lease').connect();
    await stolen.closed;
    assert.equal(stolen.closeCode, 1008, 'a wrong lease is closed with 1008');

    // The person acts through VNC: the X server sees it.
    const rfb = await vnc(d, 'shared', lease).open();
    assert.deepEqual({ width: rfb.serverInit.width, height: rfb.serverInit.height }, SIZE);
    rfb.pointer(321, 123, 0);
    rfb.pointer(321, 123, 1);
    rfb.pointer(321, 123, 0);
    typeText(rfb, SECRET);
    rfb.key(XK_RETURN, true);
    rfb.key(XK_RETURN, false);
    rfb.cutText('abc');
    await until(
      'the pointer where the person clicked',
      async () => {
        const p = await pointerAt(display);
        return p.x === 321 && p.y === 123 ? p : undefined;
      },
      { seen: () => pointerAt(display) },
    );
    // A watcher (no lease) sees the screen too.
    const watcher = await vnc(d, 'shared').open();
    await watcher.update({ incremental: false });
    assert.ok(
      !order.some((o) => o.startsWith('event:after')),
      `no call of the agent ran while the person held the desktop: ${order.join(' ')}`,
    );

    viewer.send({ type: 'return', desktop: 'shared', outcome: 'resolved', note: 'Logged in. The code came by SMS.' });
    const ended = await agent.next(isTakeover('ended'));
    assert.equal(ended.outcome, 'resolved');
    assert.equal(ended.note, 'Logged in. The code came by SMS.');
    assert.equal(ended.request_id, ack.request_id);
    assert.equal(ended.operator, 'alice');
    assert.equal(ended.activity?.typed_characters, SECRET.length);
    assert.equal(ended.activity?.keys, SECRET.length + 1);
    assert.equal(ended.activity?.clicks, 1);
    assert.equal(ended.activity?.pasted_characters, 3);
    assert.match(ended.summary ?? '', new RegExp(`typed ${SECRET.length} characters`));
    const viewerEnded = await viewer.next('ended for the holder', (m) => m.type === 'ended');
    assert.equal(viewerEnded.outcome, 'returned');
    await rfb.closed; // the holder's VNC socket closes with the takeover
    // A watcher watches on: the live view does not need a holder.
    await watcher.update({ incremental: false });
    await watcher.close();

    // Now the waiting batch runs, and sees the pointer the person left.
    const result = await agent.next((m): m is BatchResult => m.type === 'batch_result' && m.batch_id === 'after');
    const text = result.tool_results[0]!.content[0];
    assert.deepEqual(text, { type: 'text', text: 'X=321,Y=123' });
    const firstCall = order.findIndex((o) => o.startsWith('event:after'));
    assert.ok(
      firstCall > order.indexOf('takeover:ended'),
      `the batch ran only after the hand-back: ${order.join(' ')}`,
    );
    // The refused batch, sent again, runs.
    refuser.send({ type: 'batch', batch_id: 'r1', tool_uses: [computerUse('mouse_move', { coordinate: [5, 5] })] });
    const again = await refuser.next((m): m is BatchResult => m.type === 'batch_result' && m.batch_id === 'r1');
    assert.equal(again.failures.length, 0);
    const state = await viewer.desktop('the desktop free, the help answered', 'shared', (s) => s.holder === null);
    assert.deepEqual(state.help, []);

    // What the person typed is in no frame any client got and in no log line.
    const everything = JSON.stringify([agent.messages, refuser.messages, viewer.messages, other.messages]);
    assert.ok(!everything.includes(SECRET));
    const log = await readFile(d.logFile, 'utf8');
    const inSessionLog = (what: string): boolean =>
      log.split('\n').some((line) => line.includes(what) && line.includes(welcome.session_id));
    assert.ok(inSessionLog('takeover started') && inSessionLog('takeover ended'), 'both are lines of the session');
    assert.ok(!log.includes(SECRET), 'the typed text is in no log line');
    await Promise.all([viewer.close(), other.close()]);
  });

  test('a holder whose viewer drops keeps the desktop through the grace period, then loses it', async () => {
    const { d } = env;
    const agent = await d.connect();
    await agent.hello(undefined, { takeover: {} });
    let viewer = await ControlClient.open(d.url);
    viewer.send({ type: 'take', desktop: 'shared', operator: 'carol' });
    const granted = await viewer.next('granted', (m) => m.type === 'granted');
    await agent.next(isTakeover('started'));
    await viewer.close();
    // Back within the grace period: the same lease, the same takeover.
    viewer = await ControlClient.open(d.url);
    viewer.send({ type: 'resume', lease: granted.lease });
    const back = await viewer.next('granted again', (m) => m.type === 'granted');
    assert.equal(back.lease, granted.lease);
    await viewer.close();
    const watcher = await ControlClient.open(d.url);
    await watcher.desktop('the holder in grace', 'shared', (s) => s.holder?.state === 'grace');
    const ended = await agent.next(isTakeover('ended'));
    assert.equal(ended.outcome, 'disconnected');
    assert.equal(ended.operator, 'carol');
    await watcher.desktop('the desktop free again', 'shared', (s) => s.holder === null);
    await watcher.close();
  });

  test('a take waits for the running batch, and can be given up meanwhile; the agent never hears of it', async () => {
    const { d } = env;
    const agent = await d.connect();
    const order = arrivals(agent);
    await agent.hello(undefined, { takeover: {} });
    agent.send({ type: 'batch', batch_id: 'long', tool_uses: [computerUse('wait', { duration: 60 }, 'toolu_wait')] });
    await agent.next(startedEvent('long', 'toolu_wait'));
    const viewer = await ControlClient.open(d.url);
    viewer.send({ type: 'take', desktop: 'shared', operator: 'frank' });
    const waiting = await viewer.desktop(
      'the take waiting for the batch',
      'shared',
      (s) => s.holder?.state === 'waiting',
    );
    assert.equal(waiting.holder?.waiting_for, 'a batch');
    const other = await ControlClient.open(d.url);
    other.send({ type: 'take', desktop: 'shared', operator: 'grace' });
    assert.match(String((await other.next('refused', (m) => m.type === 'refused')).reason), /frank/);
    viewer.send({ type: 'return', desktop: 'shared', outcome: 'unresolved' });
    const ended = await viewer.next('ended', (m) => m.type === 'ended');
    assert.equal(ended.outcome, 'cancelled');
    await viewer.desktop('the desktop free again', 'shared', (s) => s.holder === null);
    agent.send({ type: 'cancel', batch_id: 'long' });
    await agent.next((m): m is BatchResult => m.type === 'batch_result' && m.batch_id === 'long');
    assert.ok(!order.some((o) => o.startsWith('takeover:')), `the agent heard nothing: ${order.join(' ')}`);
    await Promise.all([viewer.close(), other.close()]);
  });

  test('the control and VNC sockets refuse a foreign Origin and a missing token', async () => {
    const { d } = env;
    await assert.rejects(ControlClient.open(d.url, { origin: 'http://evil.example' }), /refused: 403/);
    const port = new URL(d.url).port;
    // The page's own origin is welcome (the Host it was served from).
    const own = await ControlClient.open(d.url, { origin: `http://127.0.0.1:${port}` });
    await own.close();
    await assert.rejects(vnc(d, 'shared', undefined, { origin: 'http://evil.example' }).connect(), /refused: 403/);
    const noToken = new URL(d.url.replace(/\/v1$/, '/viewer/control'));
    const { default: WebSocket } = await import('ws');
    const status = await new Promise<number>((resolve) => {
      const ws = new WebSocket(noToken, ['deskbatch.control.v1']);
      ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
      ws.once('open', () => resolve(101));
      ws.once('error', () => undefined);
    });
    assert.equal(status, 401);
  });

  test('the client library: requestHelp, the takeover event, and desktop_held for a refusing client', async () => {
    const { d } = env;
    const waiting = await DeskbatchClient.connect(d.url, { token: TEST_TOKEN, reconnect: false, takeover: {} });
    const refusing = await DeskbatchClient.connect(d.url, {
      token: TEST_TOKEN,
      reconnect: false,
      takeover: { whenHeld: 'refuse' },
    });
    try {
      const heard: TakeoverMessage[] = [];
      waiting.on('takeover', (m) => heard.push(m));
      const id = await waiting.requestHelp('solve the captcha');
      assert.match(id, /^h\d+$/);
      const viewer = await ControlClient.open(d.url);
      viewer.send({ type: 'take', desktop: 'shared', operator: 'erin' });
      await viewer.next('granted', (m) => m.type === 'granted');
      await until('the started event', () => heard.find((m) => m.event === 'started'));
      const refused = await refusing.runBatch([computerUse('cursor_position', {})]).then(
        () => undefined,
        (err: unknown) => err,
      );
      assert.ok(refused instanceof BatchRefusedError, String(refused));
      assert.equal(refused.code, 'desktop_held');
      assert.ok((refused.retryAfterMs ?? 0) > 0);
      const waited = waiting.runBatch([computerUse('cursor_position', {})]);
      viewer.send({ type: 'return', desktop: 'shared', outcome: 'unresolved' });
      const { toolResults } = await waited;
      assert.equal(toolResults.length, 1);
      const ended = heard.find((m) => m.event === 'ended');
      assert.equal(ended?.outcome, 'unresolved');
      assert.equal(ended?.request_id, id);
      assert.equal(ended?.note, undefined, 'no note was written');
      await viewer.close();
    } finally {
      await Promise.all([waiting.close(), refusing.close()]);
    }
    const plain = await DeskbatchClient.connect(d.url, { token: TEST_TOKEN, reconnect: false });
    await assert.rejects(plain.requestHelp('anything'), /does not take help requests/);
    await plain.close();
  });

  test('nobody holds the desktop: a watcher sees it live all the same; no such desktop is refused', async () => {
    const { d } = env;
    const agent = await d.connect();
    await agent.hello();
    const watcher = await vnc(d, 'shared').open();
    assert.ok(watcher.serverInit.width > 0, 'x11vnc started for the watcher');
    await watcher.close();
    await assert.rejects(vnc(d, 'd99').connect(), /404/);
  });
});

describe('a lease that runs out', () => {
  const LEASE_MS = 2_000;
  const env = takeoverDaemon({ leaseMs: LEASE_MS, graceMs: 1_000 });

  test('extend pushes the expiry on; then control goes back to the agent with outcome expired', async () => {
    const { d } = env;
    const agent = await d.connect();
    await agent.hello(undefined, { takeover: {} });
    const viewer = await ControlClient.open(d.url);
    viewer.send({ type: 'take', desktop: 'shared', operator: 'dave' });
    const granted = await viewer.next('granted', (m) => m.type === 'granted');
    // The lease is a clock, so the clock is what the test waits on: extended
    // half-way through, a re-armed lease ends at least half a lease after the
    // first one would have (the daemon and the test read the same clock).
    const firstExpiry = Number(granted.expires_at);
    await until('half the first lease to pass', () => Date.now() >= firstExpiry - LEASE_MS / 2);
    const mark = viewer.messages.length;
    viewer.send({ type: 'extend', desktop: 'shared' });
    const extended = await viewer.next('granted after extend', (m) => m.type === 'granted', 30_000, mark);
    assert.ok(
      Number(extended.expires_at) >= firstExpiry + LEASE_MS / 2,
      `the expiry moved from ${firstExpiry} to ${String(extended.expires_at)}, not half a lease on`,
    );
    agent.send({ type: 'batch', batch_id: 'waits', tool_uses: [computerUse('cursor_position', {})] });
    const ended = await agent.next(isTakeover('ended'));
    assert.equal(ended.outcome, 'expired');
    // Not only the reported time: the lease itself ran past its first expiry.
    // A late timer only lengthens it, so a busy machine cannot fail this.
    assert.ok(
      (ended.activity?.duration_ms ?? 0) >= LEASE_MS + LEASE_MS / 4,
      `the takeover lasted ${String(ended.activity?.duration_ms)} ms: the lease ran out at its first expiry`,
    );
    assert.match(ended.summary ?? '', /lease expired/);
    const holder = await viewer.next('ended for the holder', (m) => m.type === 'ended');
    assert.equal(holder.outcome, 'expired');
    const result = await agent.next((m): m is BatchResult => m.type === 'batch_result' && m.batch_id === 'waits');
    assert.equal(result.failures.length, 0);
    assert.equal(result.tool_results.length, 1);
    await viewer.close();
  });
});
