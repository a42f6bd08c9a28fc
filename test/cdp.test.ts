/**
 * The harness's CDP door (docs/PROTOCOL.md "CDP for the harness"), end to
 * end: a real daemon with two sandboxed pool desktops and headful Chromium,
 * a local test server, and the harness's own Playwright
 * (`chromium.connectOverCDP` with the token in a header). The harness reads
 * the page the model opened, sets a cookie the model's next call sees, finds
 * nothing of the other session, and cannot get around the egress proxy (a
 * context it makes with `direct://` has no route out of the sandbox). The
 * refusals are HTTP answers (token, Origin, no session, no flag, the shared
 * desktop, no sandbox, too many connections); the bounds close with their
 * codes; detaching leaves the model's browser as it was; the session's end
 * closes the door. Numbers measured here are printed as test diagnostics.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright';
import type { AddressInfo } from 'node:net';
import { WebSocket, WebSocketServer } from 'ws';
import { DeskbatchClient } from '../src/client/client.ts';
import type { Activity, CdpDetachActivity } from '../src/base/activity.ts';
import type { BatchResult, ToolUse } from '../src/base/protocol.ts';
import type { BrowserManager } from '../src/browser/manager.ts';
import { CdpRelay, type RelayBounds } from '../src/server/cdp-relay.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { TEST_TOKEN, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { until, within } from '../testkit/wait.ts';
import { browserUse, startWebServer, type WebServer } from '../testkit/web.ts';

const START_MS = 60_000;
const MiB = 1024 ** 2;
/** Small bounds, so the tests can pass them: a frame, and what may wait unread. */
const MAX_FRAME = 4 * MiB;
const MAX_BUFFERED = 1 * MiB;
const MAX_PER_SESSION = 4;
const AUTH = { Authorization: `Bearer ${TEST_TOKEN}` };

/** A new session on `d`, through the client library, that does not reconnect. */
const session = (d: TestDaemon): Promise<DeskbatchClient> =>
  DeskbatchClient.connect(d.url, { token: TEST_TOKEN, reconnect: false, handshakeTimeoutMs: START_MS });
/** Each test's deadline: a CDP command never answered (Playwright's have none) fails the test, not the run. */
const TEST = { timeout: 4 * START_MS };

const cdpUrl = (d: TestDaemon, sessionId: string): string =>
  `ws://127.0.0.1:${new URL(d.url).port}/v1/sessions/${sessionId}/cdp`;

const escapeHtml = (s: string): string => s.replace(/[&<>]/g, (c) => `&#${c.charCodeAt(0)};`);

let batches = 0;
async function run(client: DeskbatchClient, toolUses: ToolUse[]): Promise<BatchResult> {
  const { result } = await client.runBatch(toolUses, { batchId: `cdp${batches++}` });
  assertApiValid(toolUses, result);
  assert.equal(result.failures.length, 0, JSON.stringify(result.failures));
  return result;
}

/** The text blocks of a result, joined. */
const textOf = (result: BatchResult): string =>
  result.tool_results
    .flatMap((r) => (Array.isArray(r.content) ? r.content : []))
    .map((b) => (b.type === 'text' ? b.text : ''))
    .join('\n');

/** How a handshake ended: the socket open, or the HTTP answer that refused it. */
type Handshake = { open: WebSocket } | { status: number; body: string };

function handshake(
  url: string,
  options: { headers?: Record<string, string>; protocols?: string[] } = {},
): Promise<Handshake> {
  return within(
    new Promise<Handshake>((resolve, reject) => {
      const ws = new WebSocket(url, options.protocols ?? [], {
        headers: options.headers ?? {},
        perMessageDeflate: false,
      });
      ws.once('open', () => resolve({ open: ws }));
      ws.once('unexpected-response', (_req, res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      });
      ws.once('error', reject);
    }),
    `the handshake of ${url}`,
    START_MS,
  );
}

async function refusal(
  url: string,
  options: Parameters<typeof handshake>[1] = { headers: AUTH },
): Promise<{ status: number; body: string }> {
  const h = await handshake(url, options);
  if ('open' in h) {
    h.open.terminate();
    assert.fail(`${url} was opened; a refusal was expected`);
  }
  return h;
}

/** A raw CDP client over the door: commands by id, the close it got. */
class RawCdp {
  private next = 1;
  private readonly pending = new Map<
    number,
    { resolve: (m: Record<string, unknown>) => void; reject: (e: Error) => void }
  >();
  readonly closed: Promise<{ code: number; reason: string }>;
  /** Frames that came as binary: Chromium sends text, and the relay keeps each frame's kind. */
  binaryFrames = 0;

  constructor(readonly ws: WebSocket) {
    ws.on('message', (data, isBinary) => {
      if (isBinary) this.binaryFrames++;
      const m = JSON.parse(String(data)) as {
        id?: number;
        error?: { message: string };
        result?: Record<string, unknown>;
      };
      const p = m.id === undefined ? undefined : this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id!);
      if (m.error) p.reject(new Error(m.error.message));
      else p.resolve(m.result ?? {});
    });
    this.closed = new Promise((resolve) =>
      ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })),
    );
    void this.closed.then(() => {
      for (const p of this.pending.values()) p.reject(new Error('closed'));
    });
  }

  static async open(url: string): Promise<RawCdp> {
    const h = await handshake(url, { headers: AUTH });
    if (!('open' in h)) assert.fail(`${url} refused: ${h.status} ${h.body}`);
    return new RawCdp(h.open);
  }

  /** Sends a command now; its answer. */
  send(method: string, params: Record<string, unknown> = {}, sessionId?: string): Promise<Record<string, unknown>> {
    const id = this.next++;
    this.ws.send(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }));
    return within(
      new Promise((resolve, reject) => this.pending.set(id, { resolve, reject })),
      `the answer to ${method}`,
      START_MS,
    );
  }

  /** The id of the first page target whose URL ends with `suffix`, attached (flat): its CDP session id. */
  async attachTo(suffix: string): Promise<string> {
    const { targetInfos } = (await this.send('Target.getTargets')) as {
      targetInfos: { targetId: string; url: string }[];
    };
    const target = targetInfos.find((t) => t.url.endsWith(suffix));
    assert.ok(target, `a target at …${suffix}: ${JSON.stringify(targetInfos.map((t) => t.url))}`);
    const { sessionId } = await this.send('Target.attachToTarget', { targetId: target.targetId, flatten: true });
    return sessionId as string;
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

describe('CDP for the harness', () => {
  let web: WebServer;
  let d: TestDaemon;
  let recordings: string;
  let a: DeskbatchClient;
  let b: DeskbatchClient;
  const clients: DeskbatchClient[] = [];
  const browsers: Browser[] = [];
  const seen: Activity[] = [];

  const connect = async (): Promise<DeskbatchClient> => {
    const c = await session(d);
    clients.push(c);
    return c;
  };
  const attach = async (client: DeskbatchClient): Promise<Browser> => {
    const browser = await chromium.connectOverCDP(cdpUrl(d, client.sessionId), { headers: AUTH, timeout: START_MS });
    browsers.push(browser);
    return browser;
  };
  /** The daemon's own BrowserManager of a session's desktop. */
  const managerOf = (client: DeskbatchClient): BrowserManager => {
    const browser = d.daemon.server.findSession(client.sessionId)?.desktop?.desktop.browser;
    assert.ok(browser, 'the session has a browser');
    return browser;
  };
  /** The harness's pages, over every context Playwright made of the connection. */
  const pages = (browser: Browser): Page[] => browser.contexts().flatMap((c) => c.pages());
  const pageAt = (browser: Browser, path: string): Page => {
    const page = pages(browser).find((p) => p.url() === `${web.origin}${path}`);
    assert.ok(page, `the harness sees ${path} among ${JSON.stringify(pages(browser).map((p) => p.url()))}`);
    return page;
  };
  /** CDP connections of `sessionId` open now, from the published activity. */
  const openOf = (sessionId: string): number =>
    seen.filter((x) => x.type === 'cdp_attached' && x.session === sessionId).length -
    seen.filter((x) => x.type === 'cdp_detached' && x.session === sessionId).length;
  const detachOf = (cdpId: string): Promise<CdpDetachActivity> =>
    until(
      `cdp_detached of ${cdpId}`,
      () =>
        seen.find(
          (x): x is Extract<Activity, { type: 'cdp_detached' }> => x.type === 'cdp_detached' && x.cdp_id === cdpId,
        )?.detach,
      { timeoutMs: START_MS },
    );
  const lastAttach = (sessionId: string): string => {
    const found = seen
      .filter(
        (x): x is Extract<Activity, { type: 'cdp_attached' }> => x.type === 'cdp_attached' && x.session === sessionId,
      )
      .at(-1);
    assert.ok(found, 'an attach was published');
    return found.cdp_id;
  };

  before(async () => {
    web = await startWebServer();
    web.route('/favicon.ico', { status: 204, body: '' });
    web.route('/page-a', '<title>page A</title><p>alpha-content-31</p>');
    web.route('/page-b', '<title>page B</title><p>bravo-content-77</p>');
    web.route(
      '/echo-cookie',
      (r) => `<title>echo</title><p>cookies: [${escapeHtml(String(r.headers.cookie ?? ''))}]</p>`,
    );
    web.route('/proxied-probe', '<title>proxied</title>');
    web.route('/direct-probe', '<title>direct</title>');
    recordings = await mkdtemp(join(tmpdir(), 'deskbatch-cdp-rec-'));
    d = await startTestDaemon({
      browser: 'headful',
      desktops: { mode: 'pool', max: 2, warm: 2, sizes: [{ width: 1024, height: 768 }] },
      cdp: { enabled: true, maxFrameBytes: MAX_FRAME, maxBufferedBytes: MAX_BUFFERED, maxPerSession: MAX_PER_SESSION },
      recording: { mode: 'all', dir: recordings, video: false, trace: false },
      sessionGraceMs: 300,
    });
    d.daemon.activity.subscribe((x) => {
      if (x.type === 'cdp_attached' || x.type === 'cdp_detached' || x.type === 'session_closed') seen.push(x);
    });
    a = await connect();
    b = await connect();
    await run(a, [browserUse('navigate', { url: `${web.origin}/page-a` })]);
    await run(b, [browserUse('navigate', { url: `${web.origin}/page-b` })]);
  });
  after(async () => {
    for (const browser of browsers) await within(browser.close(), 'a browser closed', START_MS).catch(() => undefined);
    for (const c of clients) await c.close().catch(() => undefined);
    await d?.close();
    await web?.close();
    if (recordings) await rm(recordings, { recursive: true, force: true });
  });

  test(
    "connectOverCDP reaches the session's own browser: the harness reads the page the model opened",
    TEST,
    async (t) => {
      const browser = await attach(a);
      const page = pageAt(browser, '/page-a');
      assert.match(await page.content(), /alpha-content-31/);
      assert.equal(await page.title(), 'page A');
      await browser.close();

      // Measured: the handshake to the first Browser.getVersion answer, and a relayed round trip against
      // the same command over the daemon's own Playwright pipe.
      const attachMs: number[] = [];
      for (let i = 0; i < 5; i++) {
        const t0 = performance.now();
        const raw = await RawCdp.open(cdpUrl(d, a.sessionId));
        await raw.send('Browser.getVersion');
        attachMs.push(performance.now() - t0);
        raw.ws.close();
        await raw.closed;
      }
      const raw = await RawCdp.open(cdpUrl(d, a.sessionId));
      const relayed: number[] = [];
      for (let i = 0; i < 100; i++) {
        const t0 = performance.now();
        await raw.send('Browser.getVersion');
        relayed.push(performance.now() - t0);
      }
      assert.equal(raw.binaryFrames, 0, "Chromium's text frames stay text frames");
      raw.ws.close();
      await raw.closed;
      const own = await (await managerOf(a).browserNow()).newBrowserCDPSession();
      const piped: number[] = [];
      for (let i = 0; i < 100; i++) {
        const t0 = performance.now();
        await within(own.send('Browser.getVersion'), "Browser.getVersion over the daemon's pipe", START_MS);
        piped.push(performance.now() - t0);
      }
      await own.detach();
      t.diagnostic(
        `attach (handshake to the first Browser.getVersion answer): median ${median(attachMs).toFixed(1)} ms, ` +
          `max ${Math.max(...attachMs).toFixed(1)} ms over 5; Browser.getVersion round trip: relayed median ` +
          `${median(relayed).toFixed(2)} ms, the daemon's Playwright pipe median ${median(piped).toFixed(2)} ms (100 each)`,
      );
    },
  );

  test("a cookie the harness sets in the session's context is sent by the model's next navigation", TEST, async () => {
    const browser = await attach(a);
    const page = pageAt(browser, '/page-a');
    // The session's pages are in contexts()[0] for Playwright, but that object's context-wide calls
    // address Chromium's default context: this cookie must not reach the model.
    await browser.contexts()[0]!.addCookies([{ name: 'via_default', value: 'd1', url: web.origin }]);
    // What does: a CDP session on the page (its own context's cookie jar) …
    const pageCdp = await browser.contexts()[0]!.newCDPSession(page);
    await within(
      pageCdp.send('Network.setCookie', { name: 'via_page', value: 'p1', url: web.origin }),
      'Network.setCookie',
      START_MS,
    );
    // … or the browser's Storage domain, named the page's browserContextId.
    const { targetInfo } = await within(pageCdp.send('Target.getTargetInfo'), 'Target.getTargetInfo', START_MS);
    assert.ok(targetInfo.browserContextId, 'the page names its context');
    const root = await browser.newBrowserCDPSession();
    await within(
      root.send('Storage.setCookies', {
        cookies: [{ name: 'via_storage', value: 's1', domain: '127.0.0.1', path: '/' }],
        browserContextId: targetInfo.browserContextId,
      }),
      'Storage.setCookies',
      START_MS,
    );

    const text = textOf(
      await run(a, [browserUse('navigate', { url: `${web.origin}/echo-cookie` }), browserUse('get_page_text')]),
    );
    assert.match(text, /via_page=p1/, text);
    assert.match(text, /via_storage=s1/, text);
    assert.doesNotMatch(text, /via_default/, text);
    const sent = web.requests.filter((r) => r.path === '/echo-cookie').at(-1)?.headers.cookie ?? '';
    assert.match(sent, /via_page=p1/);
    assert.doesNotMatch(sent, /via_default/);
    await browser.close();
    await run(a, [browserUse('navigate', { url: `${web.origin}/page-a` })]);
  });

  test("one session's connection sees nothing of another session's browser", TEST, async () => {
    const browserA = await attach(a);
    const browserB = await attach(b);
    const targetsOf = async (browser: Browser): Promise<string[]> => {
      const root = await browser.newBrowserCDPSession();
      const { targetInfos } = await within(root.send('Target.getTargets'), 'Target.getTargets', START_MS);
      await root.detach();
      return targetInfos.map((t) => t.url);
    };
    const urlsA = await targetsOf(browserA);
    assert.ok(urlsA.includes(`${web.origin}/page-a`), JSON.stringify(urlsA));
    assert.ok(!urlsA.some((u) => u.includes('/page-b')), JSON.stringify(urlsA));
    assert.ok(!pages(browserA).some((p) => p.url().includes('/page-b')));
    // The other way round, so the listing is known to show a session's own page.
    const urlsB = await targetsOf(browserB);
    assert.ok(urlsB.includes(`${web.origin}/page-b`), JSON.stringify(urlsB));
    assert.ok(!urlsB.some((u) => u.includes('/page-a')), JSON.stringify(urlsB));
    await browserA.close();
    await browserB.close();
  });

  test(
    'egress holds: a context without the proxy has no route out of the sandbox; one through it does',
    TEST,
    async () => {
      const browser = await attach(a);
      const root = await browser.newBrowserCDPSession();
      // A context of the harness's own that ignores the browser's proxy: its requests go straight out of
      // Chromium, into the sandbox's network namespace, where only loopback is.
      const { browserContextId } = await within(
        root.send('Target.createBrowserContext', { proxyServer: 'direct://', disposeOnDetach: true }),
        'Target.createBrowserContext',
        START_MS,
      );
      const opened = browser.contexts()[0]!.waitForEvent('page', { timeout: START_MS });
      await within(
        root.send('Target.createTarget', { url: 'about:blank', browserContextId }),
        'Target.createTarget',
        START_MS,
      );
      const directPage = await opened;
      const { targetInfo } = await within(
        (await browser.contexts()[0]!.newCDPSession(directPage)).send('Target.getTargetInfo'),
        'Target.getTargetInfo',
        START_MS,
      );
      assert.equal(targetInfo.browserContextId, browserContextId);
      // Nothing listens on the test server's port in the sandbox: refused there, never reaching the server.
      await assert.rejects(
        directPage.goto(`${web.origin}/direct-probe`, { timeout: START_MS }),
        /net::ERR_CONNECTION_REFUSED/,
      );
      // A context that keeps the browser's proxy (Playwright's default) loads through the egress proxy.
      const proxied = await browser.newContext();
      const proxiedPage = await proxied.newPage();
      const answer = await proxiedPage.goto(`${web.origin}/proxied-probe`, { timeout: START_MS });
      assert.equal(answer?.status(), 200);
      assert.ok(web.requests.some((r) => r.path === '/proxied-probe'));
      assert.ok(!web.requests.some((r) => r.path === '/direct-probe'), 'the direct request never reached the server');
      await proxied.close();
      await browser.close();
    },
  );

  test(
    'refusals are HTTP answers: a wrong token, the token as a subprotocol, an Origin, an unknown session, one connection too many',
    TEST,
    async () => {
      const url = cdpUrl(d, a.sessionId);
      const wrong = await refusal(url, {
        headers: { Authorization: 'Bearer wrong-token-0123456789abcdef-0123456789' },
      });
      assert.equal(wrong.status, 401);
      assert.equal((await refusal(url, { headers: {} })).status, 401);
      // The protocol's subprotocol form does not count here: Playwright sends the header.
      const asProtocol = await refusal(url, { protocols: ['deskbatch.v1', `deskbatch.token.${TEST_TOKEN}`] });
      assert.equal(asProtocol.status, 401);
      const origin = await refusal(url, { headers: { ...AUTH, Origin: 'http://evil.example' } });
      assert.equal(origin.status, 403);
      const unknown = await refusal(cdpUrl(d, 's_nosuchsession'));
      assert.equal(unknown.status, 404);
      assert.equal(JSON.parse(unknown.body).error, 'session_not_found');

      await until('no CDP connection of session A open', () => openOf(a.sessionId) === 0, { timeoutMs: START_MS });
      const held: RawCdp[] = [];
      for (let i = 0; i < MAX_PER_SESSION; i++) held.push(await RawCdp.open(url));
      const tooMany = await refusal(url);
      assert.equal(tooMany.status, 429);
      assert.equal(JSON.parse(tooMany.body).error, 'too_many_cdp_connections');
      for (const raw of held) raw.ws.close();
      await Promise.all(held.map((raw) => raw.closed));
    },
  );

  test(
    'a message larger than the frame bound closes with 1009; a harness that does not read, with 4008',
    TEST,
    async () => {
      const url = cdpUrl(d, a.sessionId);
      const big = await RawCdp.open(url);
      const page = await big.attachTo('/page-a');
      void big
        .send('Runtime.evaluate', { expression: `'x'.repeat(${MAX_FRAME + MiB})`, returnByValue: true }, page)
        .catch(() => undefined);
      const tooBig = await within(big.closed, 'the close after a message past the frame bound', START_MS);
      assert.equal(tooBig.code, 1009);
      assert.match(tooBig.reason, /a message from the browser passed 4194304 bytes/);

      const slow = await RawCdp.open(url);
      const slowPage = await slow.attachTo('/page-a');
      // Published once the browser's side opened, which the answer above proves.
      const cdpId = lastAttach(a.sessionId);
      slow.ws.pause();
      // 40 answers of 3 MiB each: far more than the kernel's socket buffers hold, so they wait in the daemon.
      for (let i = 0; i < 40; i++) {
        void slow
          .send('Runtime.evaluate', { expression: `'y'.repeat(${3 * MiB})`, returnByValue: true }, slowPage)
          .catch(() => undefined);
      }
      const end = await detachOf(cdpId);
      assert.equal(end.by, 'daemon');
      assert.equal(end.code, 4008);
      assert.match(end.reason, /the harness read too slowly/);
      slow.ws.resume();
      const closed = await within(slow.closed, 'the slow harness closed', START_MS);
      assert.equal(closed.code, 4008);
    },
  );

  test(
    "detaching leaves the model's browser as it was; it is logged, published, counted and recorded",
    TEST,
    async () => {
      const manager = managerOf(a);
      const generation = manager.generation;
      const deaths = manager.deaths;
      const browser = await attach(a);
      const cdpId = lastAttach(a.sessionId);
      assert.match(await pageAt(browser, '/page-a').content(), /alpha-content-31/);
      await browser.close();
      const end = await detachOf(cdpId);
      assert.equal(end.by, 'harness');
      assert.ok(
        end.messages_in > 0 && end.messages_out > 0 && end.bytes_in > 0 && end.bytes_out > 0,
        JSON.stringify(end),
      );

      // The model's session goes on, in the same browser (no relaunch, no death).
      const text = textOf(await run(a, [browserUse('get_page_text')]));
      assert.match(text, /alpha-content-31/);
      assert.equal(manager.generation, generation);
      assert.equal(manager.deaths, deaths);

      const log = await readFile(d.logFile, 'utf8');
      const line = log.split('\n').find((l) => l.includes('"cdp detached"') && l.includes(cdpId));
      assert.ok(line, 'the detach is logged');
      const fields = JSON.parse(line) as Record<string, unknown>;
      assert.equal(fields.session, a.sessionId);
      assert.equal(typeof fields.remote, 'string');
      assert.equal(typeof fields.duration_ms, 'number');
      assert.equal(fields.messages_in, end.messages_in);
      assert.ok(
        !/Browser\.getVersion|alpha-content/.test(
          log
            .split('\n')
            .filter((l) => l.includes('"component":"cdp"'))
            .join('\n'),
        ),
        'no content is logged',
      );

      const metrics = await (await fetch(`http://127.0.0.1:${new URL(d.url).port}/metrics`, { headers: AUTH })).text();
      assert.match(metrics, /^deskbatch_cdp_attaches_total [1-9]/m);
      assert.match(
        metrics,
        new RegExp(`^deskbatch_cdp_connections ${openOf(a.sessionId) + openOf(b.sessionId)}$`, 'm'),
      );

      const trajectory = async (): Promise<{ type: string; cdp_id?: string; by?: string }[]> =>
        (await readFile(join(recordings, a.sessionId, 'trajectory.jsonl'), 'utf8'))
          .trimEnd()
          .split('\n')
          .map((l) => JSON.parse(l) as { type: string; cdp_id?: string });
      const lines = await until('the recording to hold the detach', async () => {
        const all = await trajectory();
        return all.some((l) => l.type === 'cdp_detached' && l.cdp_id === cdpId) && all;
      });
      assert.ok(lines.some((l) => l.type === 'cdp_attached' && l.cdp_id === cdpId));
      assert.equal(lines.find((l) => l.type === 'cdp_detached' && l.cdp_id === cdpId)?.by, 'harness');
    },
  );

  test("the session's end closes its connections; then its id is not found", TEST, async () => {
    const raw = await RawCdp.open(cdpUrl(d, b.sessionId));
    await raw.send('Browser.getVersion');
    await b.close();
    const closed = await within(raw.closed, "the CDP connection closed at the session's end", START_MS);
    assert.equal(closed.code, 1001);
    assert.equal(closed.reason, 'the session ended');
    const gone = await refusal(cdpUrl(d, b.sessionId));
    assert.equal(gone.status, 404);
  });
});

describe('CDP is refused where the browser is not the session’s alone, or without the flag', () => {
  test(
    'without --allow-cdp: 403, and connectOverCDP fails; the pool desktop’s browser has no DevTools port',
    TEST,
    async () => {
      const d = await startTestDaemon({ browser: 'headless', desktops: { mode: 'pool', max: 1, warm: 0 } });
      try {
        const c = await session(d);
        const refused = await refusal(cdpUrl(d, c.sessionId));
        assert.equal(refused.status, 403);
        assert.equal(JSON.parse(refused.body).error, 'cdp_disabled');
        await assert.rejects(
          chromium.connectOverCDP(cdpUrl(d, c.sessionId), { headers: AUTH, timeout: START_MS }),
          /403 Forbidden[\s\S]*--allow-cdp/,
        );
        assert.equal(d.daemon.server.findSession(c.sessionId)?.desktop?.desktop.browser?.devtools, false);
        await c.close();
      } finally {
        await d.close();
      }
    },
  );

  test('the shared desktop: 409', TEST, async () => {
    const d = await startTestDaemon({
      display: undefined,
      browser: 'headless',
      desktops: { mode: 'shared' },
      cdp: { enabled: true },
    });
    try {
      const c = await session(d);
      const refused = await refusal(cdpUrl(d, c.sessionId));
      assert.equal(refused.status, 409);
      assert.equal(JSON.parse(refused.body).error, 'cdp_unavailable');
      assert.match(JSON.parse(refused.body).message, /shared/);
      await assert.rejects(
        chromium.connectOverCDP(cdpUrl(d, c.sessionId), { headers: AUTH, timeout: START_MS }),
        /409 Conflict/,
      );
      await c.close();
    } finally {
      await d.close();
    }
  });

  test('a pool desktop without a sandbox: 409, and its browser has no DevTools port', TEST, async () => {
    const d = await startTestDaemon({
      browser: 'headless',
      desktops: { mode: 'pool', max: 1, warm: 0 },
      sandbox: { mode: 'off', uids: { first: 2_000_000_000, count: 1000 } },
      cdp: { enabled: true },
    });
    try {
      const c = await session(d);
      const refused = await refusal(cdpUrl(d, c.sessionId));
      assert.equal(refused.status, 409);
      assert.match(JSON.parse(refused.body).message, /without a sandbox/);
      assert.equal(d.daemon.server.findSession(c.sessionId)?.desktop?.desktop.browser?.devtools, false);
      await c.close();
    } finally {
      await d.close();
    }
  });
});

describe('the relay on its own (src/server/cdp-relay.ts), between two local sockets', () => {
  const BOUNDS: RelayBounds = { maxBufferedBytes: 64 * 1024, maxFrameBytes: MiB, heartbeatMs: 60_000 };
  const servers: WebSocketServer[] = [];
  after(() => {
    for (const server of servers) {
      for (const ws of server.clients) ws.terminate();
      server.close();
    }
  });
  /** A WebSocket server on loopback; resolves with its URL and the next socket it accepts. */
  const serve = async (): Promise<{ url: string; accepted: Promise<WebSocket> }> => {
    const server = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
    servers.push(server);
    await new Promise((resolve) => server.once('listening', resolve));
    const accepted = new Promise<WebSocket>((resolve) => server.once('connection', resolve));
    return { url: `ws://127.0.0.1:${(server.address() as AddressInfo).port}`, accepted };
  };
  /** A harness connected to a relay whose browser's side is `browser`; what the relay ended with. */
  const relayed = async (browser: () => Promise<WebSocket>) => {
    const front = await serve();
    const harness = new WebSocket(front.url, { perMessageDeflate: false });
    const closed = new Promise<{ code: number; reason: string }>((resolve) =>
      harness.once('close', (code, reason) => resolve({ code, reason: reason.toString() })),
    );
    const ends: CdpDetachActivity[] = [];
    new CdpRelay(await front.accepted, browser(), BOUNDS, { opened: () => undefined, ended: (e) => ends.push(e) });
    await new Promise((resolve) => harness.once('open', resolve));
    return { harness, closed, ends };
  };

  test(
    'frames pass byte for byte, text and binary, both ways, those sent before the browser opened first',
    TEST,
    async () => {
      const back = await serve();
      let open!: (ws: WebSocket) => void;
      const { harness, ends } = await relayed(() => new Promise<WebSocket>((resolve) => (open = resolve)));
      // Sent before the browser's side exists: queued, then delivered in order.
      const text = Buffer.from('{"id":1,  "method":"Grüße.✓" , "params":{"x":"\\u00e9"}}');
      const binary = Buffer.from([0, 255, 1, 254, 0x80, 0x7f]);
      harness.send(text, { binary: false });
      harness.send(binary, { binary: true });
      const browser = new WebSocket(back.url, { perMessageDeflate: false });
      await new Promise((resolve) => browser.once('open', resolve));
      const chromium = await back.accepted;
      const got: { data: Buffer; isBinary: boolean }[] = [];
      chromium.on('message', (data, isBinary) => got.push({ data: data as Buffer, isBinary }));
      open(browser);
      await until('both frames at the browser', () => got.length === 2);
      assert.ok(got[0]!.data.equals(text) && !got[0]!.isBinary, 'the text frame, unchanged');
      assert.ok(got[1]!.data.equals(binary) && got[1]!.isBinary, 'the binary frame, unchanged');
      const answers: { data: Buffer; isBinary: boolean }[] = [];
      harness.on('message', (data, isBinary) => answers.push({ data: data as Buffer, isBinary }));
      chromium.send(text, { binary: false });
      chromium.send(binary, { binary: true });
      await until('both frames at the harness', () => answers.length === 2);
      assert.ok(answers[0]!.data.equals(text) && !answers[0]!.isBinary);
      assert.ok(answers[1]!.data.equals(binary) && answers[1]!.isBinary);
      harness.close(1000);
      await until('the relay to end', () => ends.length === 1);
      assert.deepEqual(
        { by: ends[0]!.by, messages_in: ends[0]!.messages_in, messages_out: ends[0]!.messages_out },
        { by: 'harness', messages_in: 2, messages_out: 2 },
      );
      assert.equal(ends[0]!.bytes_in, text.length + binary.length);
    },
  );

  test('more than the bound sent before the browser opened closes with 4008', TEST, async () => {
    const { harness, closed, ends } = await relayed(() => new Promise<WebSocket>(() => undefined));
    for (let i = 0; i < 5; i++) harness.send(Buffer.alloc(16 * 1024, 'a'));
    const end = await within(closed, 'the close', START_MS);
    assert.equal(end.code, 4008);
    assert.match(end.reason, /bytes came before the browser's side opened/);
    assert.equal(ends.length, 1);
  });

  test("a browser's side that cannot be opened closes with 1011 and says why", TEST, async () => {
    const { closed, ends } = await relayed(() => Promise.reject(new Error('nothing listens on 9222')));
    const end = await within(closed, 'the close', START_MS);
    assert.equal(end.code, 1011);
    assert.equal(end.reason, "cannot reach the session's browser: nothing listens on 9222");
    assert.equal(ends[0]?.by, 'daemon');
  });
});
