/**
 * Watching a desktop live and sharing one session through a scoped link (docs/VIEWER.md "Links",
 * docs/SECURITY.md "Links"): one real daemon with two pooled desktops (headful Chromium on each), real
 * x11vnc behind its port, and a real Chromium on another display opening the link's page through noVNC.
 *
 * What a link must not open is asked without a browser first (HTTP and WebSocket handshakes): a tampered,
 * expired, revoked or other-session link gets nothing, and a link opens no /v1, no HTTP route and no
 * /metrics. Then, in the browser: a read-only link shows session A's desktop changing as
 * its agent types and nothing of session B, its input never reaches the desktop, and its x11vnc stops when
 * the last watcher leaves; a control link takes and hands back; the page framed by an allowed origin
 * works and by another is refused; the page stops when its session ends.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import type { Frame } from 'playwright';
import WebSocket from 'ws';
import type { TakeoverMessage } from '../src/base/protocol.ts';
import { DeskbatchClient } from '../src/client/index.ts';
import { launchKioskChromium, type KioskChromium } from '../testkit/chromium.ts';
import { computerUse, startTestDaemon, TEST_TOKEN, type TestClient, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { rawRequest } from '../testkit/raw-http.ts';
import { takeoverOn } from '../testkit/takeover.ts';
import { until, within } from '../testkit/wait.ts';
import { browserUse, startWebServer, type WebServer } from '../testkit/web.ts';

const DESKTOP = { width: 1024, height: 640 };
const OPERATOR_SCREEN = { width: 1280, height: 900 };

/** A text area over the whole page, in large black letters; each value is reported to the test's server. */
const NOTE_PAGE = `<!doctype html><html><head><title>Notes</title><style>
html, body { margin: 0; height: 100%; }
#t { position: fixed; inset: 0; width: 100%; height: 100%; font: 120px monospace; border: 0; }
</style></head><body>
<textarea id="t" aria-label="Notes" spellcheck="false"></textarea>
<script>
const t = document.getElementById('t');
t.addEventListener('input', () => fetch('/seen', { method: 'POST', body: 'value:' + t.value }));
t.addEventListener('mousedown', () => fetch('/seen', { method: 'POST', body: 'click' }));
</script></body></html>`;

interface MadeLink {
  link_id: string;
  link: string;
  path: string;
  mode: string;
  expires_at: number;
}

const isTakeover =
  (event: TakeoverMessage['event']) =>
  (m: { type: string }): m is TakeoverMessage =>
    m.type === 'takeover' && (m as TakeoverMessage).event === event;

describe('live view and scoped links', () => {
  let web: WebServer;
  let other: WebServer;
  let operatorScreen: VirtualDisplay;
  let kiosk: KioskChromium;
  let d: TestDaemon;
  let http: string;
  let port: number;
  let agentA: TestClient;
  let agentB: TestClient;
  let sessionA: string;
  let sessionB: string;
  let viewA: MadeLink;
  const started = performance.now();

  before(async () => {
    web = await startWebServer();
    other = await startWebServer();
    web.route('/notes', NOTE_PAGE);
    web.route('/seen', '');
    d = await startTestDaemon({
      display: undefined,
      browser: 'headful',
      desktops: { mode: 'pool', max: 2, warm: 2, sizes: [DESKTOP] },
      sessionGraceMs: 1_000,
      takeover: takeoverOn(),
      embedOrigins: [web.origin],
    });
    port = d.daemon.address.port;
    http = `http://127.0.0.1:${port}`;
    operatorScreen = await startTestDisplay(OPERATOR_SCREEN);
    kiosk = await launchKioskChromium({ display: operatorScreen.display, ...OPERATOR_SCREEN, url: 'about:blank' });
    agentA = await d.connect();
    sessionA = (await agentA.hello(undefined, { takeover: {}, desktop: {} })).session_id;
    agentB = await d.connect();
    sessionB = (await agentB.hello(undefined, { desktop: {} })).session_id;
    const opened = await agentA.batch('open', [browserUse('navigate', { url: `${web.origin}/notes` })]);
    assert.equal(opened.result.failures.length, 0, JSON.stringify(opened.result.failures));
    await agentB.batch('b-first', [computerUse('cursor_position', {})]);
  });
  after(async () => {
    await kiosk?.close();
    await d?.close();
    await operatorScreen?.stop();
    await web?.close();
    await other?.close();
    console.log(`viewer-links: ${Math.round(performance.now() - started)} ms`);
  });

  /** An HTTP request to the daemon with `credential` as the bearer. */
  const call = (method: string, path: string, credential = TEST_TOKEN, body?: unknown) =>
    rawRequest(port, path, {
      method,
      headers: { authorization: `Bearer ${credential}`, 'content-type': 'application/json' },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });

  const makeLink = async (session: string, body: Record<string, unknown> = {}): Promise<MadeLink> => {
    const res = await call('POST', `/v1/sessions/${session}/links`, TEST_TOKEN, body);
    assert.equal(res.status, 201, res.body);
    return JSON.parse(res.body) as MadeLink;
  };

  /** Opens a socket of the viewer with `credential` offered as the page offers it; the status it was refused with, or the open socket. */
  const open = (path: string, protocol: string, credential: string): Promise<WebSocket | number> =>
    new Promise((resolve, reject) => {
      const ws = new WebSocket(`ws://127.0.0.1:${port}${path}`, [protocol, `deskbatch.token.${credential}`]);
      // What it says from its first message on (the daemon writes at once on open).
      const seen: Array<Record<string, unknown>> = [];
      received.set(ws, seen);
      ws.on('message', (data) => seen.push(JSON.parse(String(data)) as Record<string, unknown>));
      ws.once('open', () => resolve(ws));
      ws.once('unexpected-response', (_req, res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      ws.once('error', reject);
    });

  const received = new WeakMap<WebSocket, Array<Record<string, unknown>>>();
  /** The messages a socket `open` opened received, as they come. */
  const feedOf = (ws: WebSocket): Array<Record<string, unknown>> => received.get(ws)!;

  const feedRefused = async (credential: string): Promise<number> => {
    const got = await open('/viewer/feed', 'deskbatch.viewer.v1', credential);
    if (typeof got !== 'number') got.close();
    return typeof got === 'number' ? got : 101;
  };

  test('a link opens its session’s feed alone, and nothing else of the daemon', async () => {
    viewA = await makeLink(sessionA);
    assert.equal(viewA.mode, 'view');
    assert.match(viewA.path, /^\/viewer\/live#link=dl1\./);
    assert.ok(!viewA.link.includes(TEST_TOKEN), 'the link carries nothing of the token');

    // The feed: session A alone, also as B works.
    const ws = await open('/viewer/feed', 'deskbatch.viewer.v1', viewA.link);
    assert.ok(ws instanceof WebSocket, `the feed opened with the link (got ${String(ws)})`);
    const seen = feedOf(ws);
    await until('the snapshot', () => seen[0]);
    const snapshot = seen[0] as { scope: string; sessions: Array<{ id: string }>; entries: Array<{ session: string }> };
    assert.equal(snapshot.scope, sessionA);
    assert.deepEqual(
      snapshot.sessions.map((s) => s.id),
      [sessionA],
    );
    assert.ok(snapshot.entries.length > 0 && snapshot.entries.every((e) => e.session === sessionA));
    await agentB.batch('b-second', [computerUse('cursor_position', {})]);
    await agentA.batch('a-after', [computerUse('cursor_position', {})]);
    await until('A’s batch in the link’s feed', () => JSON.stringify(seen).includes('a-after'));
    assert.ok(!JSON.stringify(seen).includes(sessionB), 'nothing of session B reached the link’s feed');
    ws.close();

    // The control socket: A's desktop alone; a read-only link may not take it.
    const control = await open('/viewer/control', 'deskbatch.control.v1', viewA.link);
    assert.ok(control instanceof WebSocket);
    const states = feedOf(control);
    await until('the control state', () => states.find((m) => m.type === 'state'));
    const state = states.find((m) => m.type === 'state') as { desktops: Array<{ id: string; sessions: string[] }> };
    assert.equal(state.desktops.length, 1);
    assert.deepEqual(state.desktops[0]!.sessions, [sessionA]);
    control.send(JSON.stringify({ type: 'take', desktop: state.desktops[0]!.id, operator: 'eve' }));
    const refused = await until('the take refused', () => states.find((m) => m.type === 'refused'));
    assert.match(String(refused.reason), /may watch, not take/);
    control.close();

    // The VNC socket: A's desktop, never B's.
    assert.equal(await open(`/viewer/vnc?session=${sessionB}`, 'deskbatch.vnc.v1', viewA.link), 404);

    // Nothing else answers it: the protocol, the session's own routes, /metrics (every HTTP route takes the
    // token alone: recordings, off in this daemon, the same way).
    assert.equal(await open('/v1', 'deskbatch.v1', viewA.link), 401);
    for (const path of [
      `/v1/sessions/${sessionA}/links`,
      `/v1/sessions/${sessionA}/clipboard`,
      `/v1/sessions/${sessionA}/downloads`,
      '/metrics',
    ]) {
      assert.equal((await call('GET', path, viewA.link)).status, 401, path);
    }
  });

  test('tampered, expired, revoked and other-session links get nothing', async () => {
    // Tampered: the claims changed (another session), or the signature.
    const [prefix, claims, signature] = viewA.link.split('.') as [string, string, string];
    const forged = Buffer.from(
      JSON.stringify({ ...JSON.parse(Buffer.from(claims, 'base64url').toString()), s: sessionB }),
    ).toString('base64url');
    assert.equal(await feedRefused(`${prefix}.${forged}.${signature}`), 401);
    const flipped = signature.slice(0, -2) + (signature.endsWith('A') ? 'BB' : 'AA');
    assert.equal(await feedRefused(`${prefix}.${claims}.${flipped}`), 401);
    assert.equal(await feedRefused(`${TEST_TOKEN}x`), 401);
    // Another session's link reaches that session only.
    const viewB = await makeLink(sessionB);
    assert.equal(await open(`/viewer/vnc?session=${sessionA}`, 'deskbatch.vnc.v1', viewB.link), 404);
    assert.equal((await call('DELETE', `/v1/sessions/${sessionA}/links/${viewB.link_id}`)).status, 404);
    // Revoked: refused from then on, and the socket it opened is closed.
    const held = await open('/viewer/feed', 'deskbatch.viewer.v1', viewB.link);
    assert.ok(held instanceof WebSocket);
    const closed = new Promise<number>((resolve) => held.once('close', (code) => resolve(code)));
    assert.equal((await call('DELETE', `/v1/sessions/${sessionB}/links/${viewB.link_id}`)).status, 204);
    assert.equal(await within(closed, 'the revoked link’s socket closed'), 4401);
    assert.equal(await feedRefused(viewB.link), 401);
    // Expired: the shortest lifetime, then refused.
    const brief = await makeLink(sessionA, { ttl_ms: 1_000 });
    await until('the brief link refused after its expiry', async () => (await feedRefused(brief.link)) === 401, {
      timeoutMs: 10_000,
    });
    assert.ok(Date.now() >= brief.expires_at, 'refused only once it expired');
    // Bounds: no lifetime past the maximum, no unknown mode.
    assert.equal((await call('POST', `/v1/sessions/${sessionA}/links`, TEST_TOKEN, { ttl_ms: 1e12 })).status, 400);
    assert.equal((await call('POST', `/v1/sessions/${sessionA}/links`, TEST_TOKEN, { mode: 'admin' })).status, 400);
    assert.equal((await call('POST', '/v1/sessions/s_nosuch/links')).status, 404);
  });

  test('a read-only link in Chromium: A’s desktop live as its agent types, nothing of B, its input dropped', async () => {
    const page = kiosk.page;
    await page.goto(`${http}${viewA.path}`);
    await page.locator('#vnc-screen[data-connected="true"]').waitFor({ timeout: 30_000 });
    assert.doesNotMatch(page.url(), /link=/, 'the link left the address bar');
    const picture = (): Promise<string> =>
      page.evaluate("document.querySelector('#vnc-screen canvas').toDataURL()") as Promise<string>;
    const hash = async (): Promise<string> =>
      createHash('sha256')
        .update(await picture())
        .digest('hex');
    const before = await hash();
    const typing = agentA.batch('type', [
      computerUse('left_click', { coordinate: [500, 300] }),
      computerUse('type', { text: 'HELLO' }),
    ]);
    await until('the watcher’s picture changing as the agent types', async () => (await hash()) !== before, {
      timeoutMs: 20_000,
    });
    assert.equal((await typing).result.failures.length, 0);
    await until('the page listing A’s calls', async () => /type — /.test((await page.textContent('#calls')) ?? ''));
    assert.ok(!(await page.content()).includes(sessionB), 'nothing of session B on the page');
    const metrics = (await call('GET', '/metrics')).body;
    assert.match(metrics, /^deskbatch_live_watchers 1$/m);
    assert.match(metrics, /^deskbatch_live_vnc_servers 1$/m);

    // The watcher clicks and types on the view: nothing reaches the desktop. The agent types after, and
    // the page on the desktop reports the agent's text alone.
    const box = (await page.locator('#vnc-screen canvas').first().boundingBox())!;
    await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
    await page.keyboard.type('zz');
    const clicksBefore = web.requests.filter((r) => r.body === 'click').length;
    await agentA.batch('type-more', [computerUse('type', { text: 'OK' })]);
    await until('the page seeing the agent’s text', () => web.requests.some((r) => r.body === 'value:HELLOOK'));
    assert.ok(!web.requests.some((r) => r.body.includes('z')), 'the watcher’s keys never reached the desktop');
    assert.equal(web.requests.filter((r) => r.body === 'click').length, clicksBefore, 'nor its click');

    // The last watcher leaves: x11vnc stops.
    await page.goto('about:blank');
    await until('x11vnc stopped once nobody watches', async () =>
      /^deskbatch_live_vnc_servers 0$/m.test((await call('GET', '/metrics')).body),
    );
  });

  test('a control link takes the desktop and hands it back', async () => {
    const controlA = await makeLink(sessionA, { mode: 'control' });
    const page = kiosk.page;
    await page.goto(`${http}${controlA.path}`);
    await page.locator('#take:not([disabled])').waitFor({ state: 'visible', timeout: 30_000 });
    await page.click('#take');
    const startedMessage = await agentA.next(isTakeover('started'));
    assert.match(String(startedMessage.operator), new RegExp(`link ${controlA.link_id}`));
    await page.locator('#handback').waitFor({ state: 'visible' });
    await page.click('#handback');
    const ended = await agentA.next(isTakeover('ended'));
    assert.equal(ended.outcome, 'resolved');
    await page.goto('about:blank');
  });

  test('framed by an allowed origin it works; by another it is refused', async () => {
    const res = await rawRequest(port, '/viewer/live', { method: 'GET' });
    assert.match(String(res.headers['content-security-policy']), new RegExp(`frame-ancestors ${web.origin}(;|$)`));
    assert.equal(res.headers['x-frame-options'], undefined);
    const main = await rawRequest(port, '/viewer', { method: 'GET' });
    assert.match(String(main.headers['content-security-policy']), /frame-ancestors 'none'/);
    const frame = `<!doctype html><iframe id="f" src="${http}${viewA.path}" width="900" height="700"></iframe>`;
    web.route('/embed', frame);
    other.route('/embed', frame);
    const page = kiosk.page;
    const liveFrame = async (): Promise<Frame | undefined> =>
      page.frames().find((f) => f !== page.mainFrame() && f.url().startsWith(http));

    await page.goto(`${other.origin.replace('127.0.0.1', 'localhost')}/embed`);
    await until('the refused frame’s error page', () =>
      page.frames().find((f) => f !== page.mainFrame() && f.url().startsWith('chrome-error:')),
    );
    assert.equal(await liveFrame(), undefined, 'another origin cannot frame the page');

    await page.goto(`${web.origin}/embed`);
    const framed = await until('the framed page', liveFrame);
    await framed.locator('#vnc-screen[data-connected="true"]').waitFor({ timeout: 30_000 });
    assert.equal(await framed.textContent('#state'), 'live');
  });

  test('the link stops when its session ends', async () => {
    const page = kiosk.page;
    const framed = page.frames().find((f) => f !== page.mainFrame() && f.url().startsWith(http))!;
    agentA.close();
    await until('the framed page saying it ended', async () => (await framed.textContent('#state')) === 'ended', {
      timeoutMs: 20_000,
    });
    assert.equal(await feedRefused(viewA.link), 401);
    const metrics = (await call('GET', '/metrics')).body;
    assert.match(metrics, /^deskbatch_links_ended_total\{reason="session_ended"\} [1-9]/m);
    assert.match(metrics, /^deskbatch_live_watchers 0$/m);
    await page.goto('about:blank');

    // The client library makes and revokes one as the HTTP call does.
    const client = await DeskbatchClient.connect(d.url, { token: TEST_TOKEN, reconnect: false });
    try {
      const made = await client.createLink({ ttlMs: 60_000 });
      assert.equal(made.url, `${http}/viewer/live#link=${made.link}`);
      assert.equal(await feedRefused(made.link), 101, 'the library’s link opens the feed');
      await client.revokeLink(made.link_id);
      assert.equal(await feedRefused(made.link), 401);
      await assert.rejects(client.revokeLink(made.link_id), /no live link/);
    } finally {
      await client.close();
    }
  });
});
