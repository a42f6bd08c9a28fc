/**
 * The live viewer (docs/VIEWER.md): the feed's bounds and backpressure with
 * stand-in sockets; the handshake, the page's headers and the read-only feed
 * on a real daemon; and the page itself in real Chromium (kiosk, on the
 * watched Xvfb), watching a real batch run there.
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { mkdir } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright';
import sharp from 'sharp';
import WebSocket from 'ws';
import { ActivityHub } from '../src/base/activity.ts';
import { silentLogger } from '../src/base/log.ts';
import type { Activity } from '../src/base/activity.ts';
import type { BatchResult, ToolUse, Welcome } from '../src/base/protocol.ts';
import { documentsUrl, stageDocument } from '../src/client/documents.ts';
import {
  CLOSE_READ_ONLY,
  CLOSE_TOO_MANY_VIEWERS,
  ViewerFeed,
  summarizeInput,
  type CallEntry,
  type FeedMessage,
  type ImageView,
  type TimelineEntry,
} from '../src/viewer/feed.ts';
import { launchKioskChromium, type KioskChromium } from '../testkit/chromium.ts';
import { TEST_TOKEN, computerUse, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { until, within } from '../testkit/wait.ts';

const ARTIFACTS = fileURLToPath(new URL('../test-artifacts/', import.meta.url));
const SUBPROTOCOL = 'deskbatch.viewer.v1';
type Snapshot = Extract<FeedMessage, { type: 'snapshot' }>;

// ---------------------------------------------------------------- the feed alone

/** Stands in for a ws WebSocket: records what is sent; the test sets bufferedAmount. */
class FakeSocket extends EventEmitter {
  readyState = 1;
  bufferedAmount = 0;
  readonly sent: FeedMessage[] = [];
  closedWith: number | undefined;
  send(data: string): void {
    const message = JSON.parse(data) as FeedMessage;
    this.sent.push(message);
    this.emit('sent', message);
  }
  close(code: number): void {
    this.closedWith = code;
    this.readyState = 3;
    this.emit('close');
  }
  terminate(): void {
    this.close(1006);
  }
  ping(): void {}
  /** The next message sent that matches. */
  nextSent<T extends FeedMessage['type']>(type: T): Promise<Extract<FeedMessage, { type: T }>> {
    let on!: (m: FeedMessage) => void;
    const sent = new Promise<Extract<FeedMessage, { type: T }>>((resolve) => {
      on = (m: FeedMessage): void => {
        if (m.type !== type) return;
        this.off('sent', on);
        resolve(m as Extract<FeedMessage, { type: T }>);
      };
      this.on('sent', on);
    });
    return within(sent, `the feed to send a ${type} message`).finally(() => this.off('sent', on));
  }
}

const fakeRequest = { socket: { remoteAddress: '127.0.0.1' } } as IncomingMessage;
const use = (name: string, input: Record<string, unknown>, id: string): ToolUse => ({
  type: 'tool_use',
  id,
  name,
  toolset_name: 'computer',
  input,
});

function result(
  batchId: string,
  toolResults: BatchResult['tool_results'],
  extra: Partial<BatchResult> = {},
): BatchResult {
  return {
    type: 'batch_result',
    batch_id: batchId,
    tool_results: toolResults,
    failures: [],
    halted: {},
    cancelled: false,
    replayed: false,
    duration_ms: 5,
    screenshots: [],
    ...extra,
  };
}

const imageBlock = (data: string, mediaType: 'image/png' | 'image/jpeg' = 'image/png') => ({
  type: 'image' as const,
  source: { type: 'base64' as const, media_type: mediaType, data },
});

describe('viewer feed', () => {
  const feedWith = (limits: ConstructorParameters<typeof ViewerFeed>[0]['limits'] = {}) => {
    const hub = new ActivityHub((err) => assert.fail(`observer threw: ${String(err)}`));
    const feed = new ViewerFeed({ activity: hub, log: silentLogger, limits: { pingMs: 60_000, ...limits } });
    const attach = (): FakeSocket => {
      const ws = new FakeSocket();
      feed.attach(ws as unknown as WebSocket, fakeRequest);
      return ws;
    };
    const publish = (a: Activity): void => hub.publish(a);
    return { hub, feed, attach, publish };
  };

  test('inputs are bounded: long strings cut, image-like values omitted, __proto__ stays a plain key', () => {
    const secret = `hunter2-${'x'.repeat(1000)}`;
    const out = summarizeInput({ text: secret, image: { type: 'image', source: { data: 'AAAA' } } }, 50) as Record<
      string,
      unknown
    >;
    assert.equal(out.text, `${secret.slice(0, 50)}… (${secret.length - 50} more characters)`);
    assert.equal(out.image, '[image omitted]');
    const many = summarizeInput({ list: Array.from({ length: 30 }, (_, i) => i) }, 50) as { list: unknown[] };
    assert.equal(many.list.length, 21);
    assert.equal(many.list[20], '… (10 more items)');
    const proto = summarizeInput(JSON.parse('{"__proto__": {"polluted": true}}'), 50) as Record<string, unknown>;
    assert.equal(Object.getPrototypeOf(proto), Object.prototype);
    assert.deepEqual(Object.keys(proto), ['__proto__']);
    assert.equal(summarizeInput('😀😀', 1), '… (4 more characters)', 'never half a surrogate pair');
  });

  test('the timeline is a ring buffer; calls follow their events; only the newest image is kept', () => {
    const { feed, attach, publish } = feedWith({ maxEntries: 6 });
    publish({ type: 'session_opened', session: 's1', at: 1 });
    for (let b = 0; b < 3; b++) {
      const uses = [use('screenshot', {}, `t${b}a`), use('mouse_move', { coordinate: [1, 2] }, `t${b}b`)];
      publish({ type: 'batch_started', session: 's1', batch_id: `b${b}`, tool_uses: uses, at: 2 });
      publish({
        type: 'tool_event',
        session: 's1',
        at: 3,
        event: {
          type: 'tool_event',
          batch_id: `b${b}`,
          index: 0,
          tool_use_id: `t${b}a`,
          toolset_name: 'computer',
          name: 'screenshot',
          phase: 'succeeded',
          duration_ms: 12.5,
        },
      });
      publish({
        type: 'batch_finished',
        session: 's1',
        at: 4,
        result: result(
          `b${b}`,
          [
            { type: 'tool_result', tool_use_id: `t${b}a`, content: [imageBlock(`AAA${b}`)] },
            { type: 'tool_result', tool_use_id: `t${b}b`, content: [{ type: 'text', text: 'ok' }] },
          ],
          {
            failures: [
              {
                tool_use_id: `t${b}b`,
                index: 1,
                name: 'mouse_move',
                error: { type: 'ToolInputError', message: `bad ${b}`, timed_out: false, retryable: false },
              },
            ],
          },
        ),
      });
    }
    const ws = attach();
    const snap = ws.sent[0] as Snapshot;
    assert.equal(snap.type, 'snapshot');
    assert.equal(snap.entries.length, 6);
    assert.deepEqual(
      snap.entries.map((e) => `${e.batch_id}:${e.kind}`),
      ['b1:batch', 'b1:call', 'b1:call', 'b2:batch', 'b2:call', 'b2:call'],
    );
    const calls = snap.entries.filter((e): e is CallEntry => e.kind === 'call' && e.batch_id === 'b2');
    assert.deepEqual(
      calls.map((c) => [c.name, c.phase, c.duration_ms, c.error?.message]),
      [
        ['screenshot', 'succeeded', 12.5, undefined],
        ['mouse_move', 'failed', undefined, 'bad 2'],
      ],
    );
    assert.equal(snap.image?.data, 'AAA2', 'only the newest image');
    assert.equal(snap.image?.name, 'screenshot');
    assert.equal(feed.viewerCount, 1);
  });

  test("a session's staged files are listed while it holds them: staged, removed, gone with the session", () => {
    const { attach, publish } = feedWith();
    publish({ type: 'session_opened', session: 's1', at: 1 });
    const doc = (id: string, name: string) => ({
      document_id: id,
      name,
      media_type: 'text/plain',
      size: 3,
      sha256: 'ab',
    });
    publish({ type: 'document_staged', session: 's1', document: doc('doc_a', 'a.txt'), at: 2 });
    publish({ type: 'document_staged', session: 's1', document: doc('doc_b', 'b <i>.txt'), at: 3 });
    publish({ type: 'document_removed', session: 's1', document_id: 'doc_a', at: 4 });
    // Of a session the feed never saw: nothing.
    publish({ type: 'document_staged', session: 's9', document: doc('doc_c', 'c.txt'), at: 5 });
    const ws = attach();
    const snap = ws.sent[0] as Snapshot;
    assert.deepEqual(
      snap.sessions.map((s) => [s.id, s.documents?.map((d) => d.name)]),
      [['s1', ['b <i>.txt']]],
    );
    publish({ type: 'session_closed', session: 's1', at: 6, reason: 'expired' });
    const last = ws.sent.at(-1) as Extract<FeedMessage, { type: 'session' }>;
    assert.equal(last.type, 'session');
    assert.equal(last.session.documents, undefined, 'its files went with it');
  });

  test("a session's kept downloads are listed while it holds them, and go with the session", () => {
    const { attach, publish } = feedWith();
    publish({ type: 'session_opened', session: 's1', at: 1 });
    const dl = (id: string, name: string) => ({
      download_id: id,
      name,
      media_type: 'application/pdf',
      size: 5,
      sha256: 'cd',
    });
    publish({ type: 'download_kept', session: 's1', download: dl('dl-1', 'report.pdf'), at: 2 });
    publish({ type: 'download_kept', session: 's1', download: dl('dl-2', 'b <i>.pdf'), at: 3 });
    // Of a session the feed never saw: nothing.
    publish({ type: 'download_kept', session: 's9', download: dl('dl-1', 'c.pdf'), at: 4 });
    const ws = attach();
    const snap = ws.sent[0] as Snapshot;
    assert.deepEqual(
      snap.sessions.map((s) => [s.id, s.downloads?.map((d) => [d.download_id, d.name])]),
      [
        [
          's1',
          [
            ['dl-1', 'report.pdf'],
            ['dl-2', 'b <i>.pdf'],
          ],
        ],
      ],
    );
    publish({ type: 'session_closed', session: 's1', at: 5, reason: 'expired' });
    const last = ws.sent.at(-1) as Extract<FeedMessage, { type: 'session' }>;
    assert.equal(last.session.downloads, undefined, 'its downloads went with it');
  });

  test('a backed-up viewer misses updates, then gets a snapshot that counts them; others are not held up', async () => {
    const { attach, publish } = feedWith({ maxBufferedBytes: 1000, drainCheckMs: 5 });
    const slow = attach();
    const fast = attach();
    slow.bufferedAmount = 5000;
    publish({ type: 'session_opened', session: 's1', at: 1 });
    publish({ type: 'batch_started', session: 's1', batch_id: 'b', tool_uses: [use('wait', {}, 't1')], at: 2 });
    assert.equal(slow.sent.length, 1, 'only the first snapshot');
    assert.deepEqual(
      fast.sent.map((m) => m.type),
      ['snapshot', 'session', 'entries'],
    );
    const resync = slow.nextSent('snapshot');
    slow.bufferedAmount = 0; // drained: the feed notices without another update
    const snap = await resync;
    assert.equal(snap.dropped, 2);
    assert.deepEqual(
      snap.entries.map((e) => e.kind),
      ['batch', 'call'],
    );
    publish({ type: 'session_closed', session: 's1', at: 3, reason: 'expired' });
    assert.equal(slow.sent.at(-1)?.type, 'session', 'live again after the snapshot');
  });

  test('images over the bound are re-encoded smaller, or omitted', async () => {
    const noise = await sharp(
      Buffer.from(Array.from({ length: 400 * 300 * 3 }, () => Math.floor(Math.random() * 256))),
      {
        raw: { width: 400, height: 300, channels: 3 },
      },
    )
      .png()
      .toBuffer();
    const data = noise.toString('base64');
    const finished = (batchId: string): Activity => ({
      type: 'batch_finished',
      session: 's1',
      at: 1,
      result: result(batchId, [{ type: 'tool_result', tool_use_id: 't1', content: [imageBlock(data)] }]),
    });
    {
      const { attach, publish } = feedWith({ maxImageBytes: Math.floor(data.length / 2) });
      const ws = attach();
      const next = ws.nextSent('image');
      publish(finished('big'));
      const { image } = await next;
      assert.equal(image.media_type, 'image/jpeg');
      assert.ok(image.data && image.data.length <= data.length / 2, `${image.data?.length}`);
      assert.equal(image.note, 'reduced for the viewer');
      const size = await sharp(Buffer.from(image.data, 'base64')).metadata();
      assert.deepEqual([size.width, size.height], [image.width, image.height]);
    }
    {
      const { attach, publish } = feedWith({ maxImageBytes: 100 });
      const ws = attach();
      const next = ws.nextSent('image');
      publish(finished('huge'));
      const { image } = (await next) as { image: ImageView };
      assert.equal(image.data, undefined);
      assert.equal(image.note, 'image too large for the viewer');
    }
  });

  test('a viewer that sends anything is disconnected; the ninth viewer is refused', () => {
    const { feed, attach } = feedWith({ maxViewers: 8 });
    const viewers = Array.from({ length: 8 }, attach);
    assert.ok(viewers.every((v) => v.closedWith === undefined));
    const ninth = attach();
    assert.equal(ninth.closedWith, CLOSE_TOO_MANY_VIEWERS);
    viewers[0]!.emit('message', Buffer.from('{"type":"batch"}'));
    assert.equal(viewers[0]!.closedWith, CLOSE_READ_ONLY);
    assert.equal(feed.viewerCount, 7);
    assert.equal(attach().closedWith, undefined, 'a place came free');
    feed.close();
  });
});

// ---------------------------------------------------------------- on a real daemon

interface Opened {
  ws: WebSocket;
  messages: FeedMessage[];
  /** The next message (received already or later) of this type. */
  next<T extends FeedMessage['type']>(
    type: T,
    match?: (m: Extract<FeedMessage, { type: T }>) => boolean,
  ): Promise<Extract<FeedMessage, { type: T }>>;
  closed: Promise<number>;
}

/** Opens the feed as a browser would (subprotocols), or reports the HTTP status that refused it. */
function openFeed(
  port: number,
  options: { token?: string | null; origin?: string; protocols?: string[] } = {},
): Promise<Opened | number> {
  const protocols = options.protocols ?? [
    SUBPROTOCOL,
    ...(options.token === null ? [] : [`deskbatch.token.${options.token ?? TEST_TOKEN}`]),
  ];
  const ws = new WebSocket(`ws://127.0.0.1:${port}/viewer/feed`, protocols, {
    headers: options.origin ? { origin: options.origin } : {},
  });
  const messages: FeedMessage[] = [];
  const waiters: { match: (m: FeedMessage) => boolean; resolve: (m: FeedMessage) => void }[] = [];
  ws.on('message', (data) => {
    const m = JSON.parse(data.toString()) as FeedMessage;
    const w = waiters.findIndex((x) => x.match(m));
    if (w >= 0) waiters.splice(w, 1)[0]!.resolve(m);
    else messages.push(m);
  });
  const closed = within(
    new Promise<number>((resolve) => ws.once('close', (code) => resolve(code))),
    'the viewer feed socket to close',
    60_000,
  );
  closed.catch(() => undefined); // awaited only by some tests
  const opened: Opened = {
    ws,
    messages,
    closed,
    next(type, match = () => true) {
      const is = (m: FeedMessage): boolean => m.type === type && match(m as never);
      const seen = messages.findIndex(is);
      if (seen >= 0) return Promise.resolve(messages.splice(seen, 1)[0] as never);
      const waiter = { match: is, resolve: (_m: FeedMessage): void => {} };
      const arrived = new Promise<FeedMessage>((resolve) => {
        waiter.resolve = resolve;
        waiters.push(waiter);
      });
      return within(arrived, `a ${type} message from the viewer feed`).finally(() => {
        const i = waiters.indexOf(waiter);
        if (i >= 0) waiters.splice(i, 1);
      }) as never;
    },
  };
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve(opened));
    ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
    ws.once('error', reject);
  });
}

async function mustOpen(port: number, options?: Parameters<typeof openFeed>[1]): Promise<Opened> {
  const opened = await openFeed(port, options);
  assert.ok(typeof opened !== 'number', `the feed refused the handshake with HTTP ${String(opened)}`);
  return opened;
}

describe('viewer on a real daemon (no display)', () => {
  let d: TestDaemon;
  let port: number;
  let base: string;
  before(async () => {
    d = await startTestDaemon({ display: undefined, browser: 'off' });
    port = d.daemon.address.port;
    base = `http://127.0.0.1:${port}`;
  });
  after(() => d?.close());

  test('the feed needs the token: 401 without one, with a wrong one, or with the token next to another subprotocol', async () => {
    assert.equal(await openFeed(port, { token: null }), 401);
    assert.equal(await openFeed(port, { token: 'wrong-token-0123456789' }), 401);
    assert.equal(await openFeed(port, { protocols: ['deskbatch.v1', `deskbatch.token.${TEST_TOKEN}`] }), 401);
    const ok = await mustOpen(port, { origin: base });
    assert.equal(ok.ws.protocol, SUBPROTOCOL);
    ok.ws.close();
  });

  test('403 for an Origin other than the page’s own; the page’s origin still cannot use /v1', async () => {
    for (const origin of ['http://evil.example', `http://localhost:${port}`, `http://127.0.0.1:${port + 1}`, 'null']) {
      assert.equal(await openFeed(port, { origin }), 403, origin);
    }
    const v1 = await new Promise<number>((resolve) => {
      const ws = new WebSocket(d.url, ['deskbatch.v1', `deskbatch.token.${TEST_TOKEN}`], { headers: { origin: base } });
      ws.once('open', () => (ws.close(), resolve(101)));
      ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
    });
    assert.equal(v1, 403);
  });

  test('the page and its files are served without a token, under a strict CSP', async () => {
    for (const [path, type] of [
      ['/viewer', 'text/html'],
      ['/viewer/app.js', 'text/javascript'],
      ['/viewer/common.js', 'text/javascript'],
      ['/viewer/takeover.js', 'text/javascript'],
      ['/viewer/app.css', 'text/css'],
      ['/viewer/replay', 'text/html'],
      ['/viewer/replay.js', 'text/javascript'],
      ['/viewer/replay-model.js', 'text/javascript'],
      ['/viewer/replay-player.js', 'text/javascript'],
      ['/viewer/replay.css', 'text/css'],
    ] as const) {
      const res = await fetch(`${base}${path}`);
      assert.equal(res.status, 200, path);
      assert.ok(res.headers.get('content-type')?.startsWith(type), path);
      const csp = res.headers.get('content-security-policy') ?? '';
      for (const directive of [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        'img-src data: blob:',
        'media-src blob:',
        "frame-ancestors 'none'",
      ]) {
        assert.ok(csp.split('; ').includes(directive), `${path}: ${directive} in ${csp}`);
      }
      assert.match(csp, /connect-src 'self' ws:\/\/127\.0\.0\.1:\d+ wss:\/\/127\.0\.0\.1:\d+(;|$)/);
      assert.doesNotMatch(csp, /unsafe-|\*/);
      assert.deepEqual(
        csp.split('; ').map((directive) => directive.split(' ')[0]),
        [
          'default-src',
          'script-src',
          'style-src',
          'img-src',
          'media-src',
          'connect-src',
          'base-uri',
          'form-action',
          'frame-ancestors',
        ],
        'no directive more than these',
      );
      assert.equal(res.headers.get('x-frame-options'), 'DENY');
      assert.equal(res.headers.get('referrer-policy'), 'no-referrer');
      assert.equal(res.headers.get('cache-control'), 'no-store');
      assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
      const body = await res.text();
      if (path === '/viewer' || path === '/viewer/replay') {
        assert.doesNotMatch(body, /<script(?![^>]*\bsrc=)/, 'no inline script');
        assert.doesNotMatch(body, /\sstyle=|<style/, 'no inline style');
        assert.doesNotMatch(body, /https?:\/\//, 'no external resource');
      }
      if (path.endsWith('.js')) assert.doesNotMatch(body, /innerHTML|outerHTML|insertAdjacentHTML|document\.write/);
    }
  });

  test('the feed shows a call’s input cut short and its full error; a new viewer starts from the snapshot', async () => {
    const watching = await mustOpen(port);
    const first = await watching.next('snapshot');
    assert.equal(first.protocol, SUBPROTOCOL);
    assert.equal(first.takeover, false, 'takeover is off unless the daemon turns it on');
    const c = await d.connect();
    const welcome = await c.hello();
    const secret = `s3cret-${'y'.repeat(5000)}`;
    const uses = [computerUse('type', { text: secret }), computerUse('left_click', { coordinate: [1, 1] })];
    const { result: r } = await c.batch('feed-1', uses);
    assert.equal(r.failures[0]?.error.type, 'DisplayUnavailableError');
    const isFinished = (m: { entries: TimelineEntry[] }): boolean =>
      m.entries.some((e) => e.kind === 'batch' && e.batch_id === 'feed-1' && e.state === 'finished');
    await watching.next('entries', isFinished);
    watching.ws.close();

    const late = await mustOpen(port);
    const snap = await late.next('snapshot');
    late.ws.close();
    const calls = snap.entries.filter((e): e is CallEntry => e.kind === 'call' && e.batch_id === 'feed-1');
    assert.deepEqual(
      calls.map((e) => [e.name, e.phase]),
      [
        ['type', 'failed'],
        ['left_click', 'not_executed'],
      ],
    );
    const text = (calls[0]!.input as { text: string }).text;
    assert.ok(text.startsWith('s3cret-yyy'));
    assert.ok(text.endsWith(`… (${secret.length - 200} more characters)`), text.slice(-60));
    assert.ok(text.length < 260);
    assert.deepEqual(calls[0]!.error, r.failures[0]!.error, 'the operator gets the whole error');
    assert.ok(
      snap.sessions.some((s) => s.id === welcome.session_id && s.closed_at === undefined),
      'the session is listed, open',
    );
    assert.ok(calls.every((e) => e.session === welcome.session_id));
  });

  test('a message from a viewer changes nothing: the viewer is disconnected, no session or batch appears', async () => {
    const seen: Activity[] = [];
    const unsubscribe = d.daemon.activity.subscribe((a) => seen.push(a));
    const sessions = d.daemon.server.sessionCount;
    const other = await mustOpen(port);
    await other.next('snapshot');
    const v = await mustOpen(port);
    await v.next('snapshot');
    v.ws.send(
      JSON.stringify({
        type: 'batch',
        batch_id: 'from-viewer',
        tool_uses: [computerUse('left_click', { coordinate: [1, 1] })],
      }),
    );
    v.ws.send(JSON.stringify({ type: 'hello' }));
    assert.equal(await v.closed, CLOSE_READ_ONLY);
    assert.equal(d.daemon.server.sessionCount, sessions);
    assert.deepEqual(seen, []);
    assert.equal(other.ws.readyState, WebSocket.OPEN, 'other viewers are not affected');
    assert.deepEqual(other.messages, [], 'and were told of nothing');
    other.ws.close();
    unsubscribe();
  });

  test('at most 8 viewers at once; the ninth is closed with 1013', async () => {
    // A viewer an earlier test closed may not have left the server's count yet: such a place is tried again.
    const admitted = async (): Promise<Opened> => {
      for (let attempt = 1; ; attempt++) {
        const v = await mustOpen(port);
        const outcome = await Promise.race([v.next('snapshot').then(() => 'in'), v.closed.then((code) => code)]);
        if (outcome === 'in') return v;
        assert.equal(outcome, CLOSE_TOO_MANY_VIEWERS);
        assert.ok(attempt < 20, 'a place never came free');
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    const viewers: Opened[] = [];
    for (let i = 0; i < 8; i++) viewers.push(await admitted());
    const ninth = await mustOpen(port);
    assert.equal(await ninth.closed, CLOSE_TOO_MANY_VIEWERS);
    assert.deepEqual(ninth.messages, [], 'no data for a refused viewer');
    for (const v of viewers) v.ws.close();
    await Promise.all(viewers.map((v) => v.closed));
  });
});

// ---------------------------------------------------------------- the page in Chromium

/** Runs an expression in the page (the project's types have no DOM, so expressions are strings). */
const inPage = <T>(page: Page, expression: string): Promise<T> => page.evaluate(expression) as Promise<T>;

describe('viewer page in Chromium, watching a real batch on a real display', () => {
  let display: VirtualDisplay;
  let d: TestDaemon;
  let kiosk: KioskChromium;
  let base: string;
  before(async () => {
    display = await startTestDisplay({ width: 1024, height: 768 });
    d = await startTestDaemon({ display: display.display, browser: 'off' });
    base = `http://127.0.0.1:${d.daemon.address.port}`;
    // The viewer itself runs on the watched display, so the screenshot it shows is of itself.
    kiosk = await launchKioskChromium({ display: display.display, width: 1024, height: 768, url: 'about:blank' });
  });
  after(async () => {
    await kiosk?.close();
    await d?.close();
    await display?.stop();
  });

  test('shows the calls in order with outcomes, the full error and the screenshot; keeps no token in the page', async () => {
    const page = kiosk.page;
    const problems: string[] = [];
    const urls: string[] = [];
    page.on('console', (m) => m.type() === 'error' && problems.push(`console: ${m.text()}`));
    page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
    page.on('request', (r) => urls.push(r.url()));
    page.on('websocket', (ws) => urls.push(ws.url()));
    try {
      await page.goto(`${base}/viewer#token=${TEST_TOKEN}`);
      await page.waitForSelector('#state[data-state="connected"]');
      assert.equal(await page.isVisible('#login'), false, 'no token form while connected');

      // The token left the address bar and the document; it is only in this tab's sessionStorage.
      assert.equal(await inPage(page, 'location.hash'), '');
      assert.equal(page.url(), `${base}/viewer`);
      assert.equal(
        await inPage(page, `document.documentElement.outerHTML.includes(${JSON.stringify(TEST_TOKEN)})`),
        false,
      );
      assert.equal(await inPage(page, `document.getElementById('token').value`), '');
      assert.equal(await inPage(page, `sessionStorage.getItem('deskbatch.viewer.token')`), TEST_TOKEN);

      const c = await d.connect();
      const uses = [
        computerUse('screenshot'),
        computerUse('cursor_position'),
        computerUse('mouse_move', { coordinate: [5000, 5000] }),
        computerUse('screenshot'),
      ];
      const { result: r } = await c.batch('viewer-1', uses);
      assert.deepEqual(
        r.failures.map((f) => [f.index, f.error.type]),
        [[2, 'ToolInputError']],
      );
      const failure = r.failures[0]!.error;

      await page.waitForSelector('section.batch[data-batch-id="viewer-1"][data-state="finished"]');
      // Polled from here: waitForFunction polls with eval inside the page, which the page's CSP refuses (EvalError).
      await until('the screenshot to show in the page', () =>
        inPage<boolean>(
          page,
          `(() => { const i = document.getElementById('shot'); return !i.hidden && i.complete && i.naturalWidth > 0; })()`,
        ),
      );
      const calls = await inPage<
        {
          name: string;
          toolset: string;
          outcome: string;
          duration: string | null;
          type: string | null;
          message: string | null;
        }[]
      >(
        page,
        `[...document.querySelectorAll('section.batch[data-batch-id="viewer-1"] li.call')].map((li) => ({
          name: li.querySelector('.call-name').textContent,
          toolset: li.querySelector('.toolset').textContent,
          outcome: li.querySelector('.badge').textContent,
          duration: li.querySelector('.duration')?.textContent ?? null,
          type: li.querySelector('.error-type')?.textContent ?? null,
          message: li.querySelector('.error-message')?.textContent ?? null,
        }))`,
      );
      assert.deepEqual(
        calls.map((x) => [x.name, x.toolset, x.outcome]),
        [
          ['screenshot', 'computer', 'succeeded'],
          ['cursor_position', 'computer', 'succeeded'],
          ['mouse_move', 'computer', 'failed'],
          ['screenshot', 'computer', 'not_executed'],
        ],
      );
      assert.match(calls[0]!.duration ?? '', /^\d+(\.\d+)? ms$/);
      assert.equal(calls[2]!.type, 'ToolInputError');
      assert.equal(calls[2]!.message, failure.message);
      assert.match(calls[2]!.message ?? '', /outside the screenshot/);

      const shot = await inPage<{ width: number; height: number; caption: string }>(
        page,
        `({ width: document.getElementById('shot').naturalWidth, height: document.getElementById('shot').naturalHeight,
            caption: document.getElementById('shot-caption').textContent })`,
      );
      assert.deepEqual([shot.width, shot.height], [1024, 768]);
      assert.ok(shot.caption.includes('batch viewer-1'), shot.caption);
      assert.ok(shot.caption.includes(`screenshot (${uses[0]!.id})`), shot.caption);

      // A file the session's harness staged is listed under it; its name, the harness's, is text, not markup.
      const welcome = c.messages.find((m): m is Welcome => m.type === 'welcome');
      assert.ok(welcome);
      const staged = await stageDocument(
        documentsUrl(d.url, welcome.session_id),
        TEST_TOKEN,
        '<img src=x onerror=alert(1)>.txt',
        Buffer.from('abc'),
        {
          mediaType: 'text/plain',
        },
      );
      const listed = await until('the staged file to be listed under its session', () =>
        inPage<string | null>(
          page,
          `document.querySelector('article.session[data-session="${welcome.session_id}"] .session-files li')?.textContent ?? null`,
        ),
      );
      assert.equal(listed, '<img src=x onerror=alert(1)>.txt (3 bytes, text/plain)');
      assert.equal(await inPage(page, `document.querySelectorAll('.session-files img').length`), 0);
      assert.equal(staged.size, 3);

      await mkdir(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: `${ARTIFACTS}viewer.png`, fullPage: true });

      assert.deepEqual(problems, [], 'no CSP violation, no script error');
      assert.ok(
        urls.every((u) => !u.includes(TEST_TOKEN)),
        `the token is in no URL the page requested: ${urls.join(' ')}`,
      );
      assert.ok(urls.includes(`ws://127.0.0.1:${d.daemon.address.port}/viewer/feed`), urls.join(' '));
    } finally {
      page.removeAllListeners();
    }
  });

  test('without a token the page asks for one; a wrong one is refused, the right one connects', async () => {
    const page = await kiosk.context.newPage();
    try {
      await page.goto(`${base}/viewer`);
      await page.waitForSelector('#state[data-state="no-token"]');
      assert.equal(await inPage(page, `document.getElementById('token').type`), 'password');
      await page.fill('#token', 'wrong-token-0123456789');
      await page.click('#login button[type="submit"]');
      await page.waitForSelector('#login-message:has-text("Could not connect")');
      assert.equal(
        await inPage(page, `sessionStorage.getItem('deskbatch.viewer.token')`),
        null,
        'a refused token is forgotten',
      );
      await page.fill('#token', TEST_TOKEN);
      await page.click('#login button[type="submit"]');
      await page.waitForSelector('#state[data-state="connected"]');
      assert.equal(await inPage(page, `document.getElementById('token').value`), '');
      assert.equal(await page.isVisible('#login'), false, 'the form is gone once connected');
      assert.ok(
        (await inPage<number>(page, `document.querySelectorAll('section.batch').length`)) >= 1,
        'the snapshot shows earlier batches',
      );
    } finally {
      await page.close();
    }
  });
});
