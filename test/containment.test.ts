/**
 * Containment (docs/SECURITY.md): the model's calls are an attacker's, and the
 * desktop's own browser and network must not be a way out. Each test here is
 * an attack, run the way a model (or a page steering it) would run it, that
 * must fail to get out: through a real daemon, a real Chromium, a real Xvfb.
 *
 * - The browser's network: every request goes through the egress proxy
 *   (src/browser/egress.ts), which refuses addresses that are not on the
 *   public internet, decided on the address a name resolves to.
 * - The X display admits only holders of its cookie (src/desktop-driver/xvfb.ts).
 * - Chromium's own interface (address bar, DevTools, native dialogs) is shut
 *   by its managed policy (src/browser/policy.ts) and the file chooser guard.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { EgressFilter, isNonPublicAddress, startEgressProxy, type EgressProxy } from '../src/browser/egress.ts';
import { browserPolicyState } from '../src/browser/policy.ts';
import { isAllowedUrl } from '../src/browser/url-policy.ts';
import { XConnection } from '../src/desktop-driver/x11.ts';
import { silentLogger } from '../src/base/log.ts';
import type { BatchResult } from '../src/base/protocol.ts';
import { computerUse, startTestDaemon, type TestClient, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { newLogDir } from '../testkit/artifacts.ts';
import { until } from '../testkit/wait.ts';
import {
  browserUse,
  startContainedDaemon,
  startVictim,
  startWebServer,
  type Victim,
  type WebServer,
} from '../testkit/web.ts';

const texts = (r: BatchResult): string[] =>
  r.tool_results.flatMap((t) => t.content.flatMap((b) => (b.type === 'text' ? [b.text] : [])));
const everything = (r: BatchResult): string => JSON.stringify(r);

// ---------------------------------------------------------------- the egress filter, alone

describe('egress: which addresses are not the public internet', () => {
  test('private, loopback, link-local, CGNAT, multicast, unspecified, and IPv4 inside IPv6', () => {
    for (const a of [
      '127.0.0.1',
      '127.9.9.9',
      '0.0.0.0',
      '10.1.2.3',
      '172.16.0.1',
      '172.31.255.255',
      '192.168.1.1',
      '169.254.169.254',
      '100.64.0.1',
      '100.127.255.255',
      '224.0.0.1',
      '255.255.255.255',
      '198.18.0.1',
      '::',
      '::1',
      'fe80::1',
      'fc00::1',
      'fd12:3456::1',
      'ff02::1',
      '::ffff:169.254.169.254',
      '::ffff:a9fe:a9fe',
      '::ffff:127.0.0.1',
      '::127.0.0.1',
      '64:ff9b::a9fe:a9fe',
      '64:ff9b::10.0.0.1',
      '2002:a9fe:a9fe::1',
      '2002:7f00:1::',
      'not an address',
    ]) {
      assert.equal(isNonPublicAddress(a), true, a);
    }
    for (const a of [
      '8.8.8.8',
      '93.184.216.34',
      '172.32.0.1',
      '100.128.0.1',
      '2606:4700:4700::1111',
      '2002:808:808::1',
    ]) {
      assert.equal(isNonPublicAddress(a), false, a);
    }
  });

  test('decided on the resolved address: a name pointing inside is refused; opt-ins let exactly what they name', async () => {
    const dns: Record<string, string[] | undefined> = {
      'inside.example': ['10.0.0.7'],
      'mixed.example': ['93.184.216.34', '127.0.0.1'],
      'public.example': ['93.184.216.34'],
      'intranet.example': ['10.0.0.8'],
    };
    const resolve = async (host: string): Promise<string[]> => {
      const a = dns[host];
      if (!a) throw new Error('ENOTFOUND');
      return a;
    };
    dns.localhost = ['127.0.0.1', '::1'];
    const policy = { allowPrivateNetworks: false, privateAllow: [], allowHosts: [], ownPorts: () => [8765] };
    const f = new EgressFilter(policy, resolve);
    assert.deepEqual(await f.decide('public.example', 443), { allowed: true, address: '93.184.216.34' });
    assert.deepEqual(await f.decide('inside.example', 80), { allowed: false, reason: 'private_address' });
    assert.deepEqual(await f.decide('mixed.example', 80), { allowed: false, reason: 'private_address' });
    assert.deepEqual(await f.decide('[::ffff:169.254.169.254]', 80), { allowed: false, reason: 'private_address' });
    assert.deepEqual(await f.decide('nowhere.example', 80), { allowed: false, reason: 'unresolved' });
    assert.deepEqual(await f.decide('x'.repeat(300), 80), { allowed: false, reason: 'bad_target' });
    // The address the decision names is the one the proxy connects to: a name that resolves elsewhere
    // a moment later (DNS rebinding) cannot switch the connection to an address that was not checked.
    dns['public.example'] = ['127.0.0.1'];
    assert.deepEqual(await f.decide('public.example', 443), { allowed: false, reason: 'private_address' });

    const optIn = new EgressFilter(
      { ...policy, privateAllow: ['127.0.0.1:4000', '10.0.0.0/31'], allowHosts: ['intranet.example'] },
      resolve,
    );
    assert.equal((await optIn.decide('127.0.0.1', 4000)).allowed, true);
    assert.equal((await optIn.decide('127.0.0.1', 4001)).allowed, false, 'only the port named');
    assert.equal((await optIn.decide('inside.example', 80)).allowed, false, '10.0.0.7 is outside 10.0.0.0/31');
    assert.equal((await optIn.decide('intranet.example', 80)).allowed, true, 'a host the operator allowlisted');
    const all = new EgressFilter({ ...policy, allowPrivateNetworks: true }, resolve);
    assert.equal((await all.decide('inside.example', 80)).allowed, true);
    // The daemon's own port stays out of reach even then.
    assert.deepEqual(await all.decide('127.0.0.1', 8765), { allowed: false, reason: 'daemon_port' });
    assert.deepEqual(await all.decide('localhost', 8765), { allowed: false, reason: 'daemon_port' });
  });

  test('the proxy refuses CONNECT and plain requests to non-public addresses, and forwards public ones', async () => {
    const victim = await startVictim();
    // A stand-in "public" name: the resolver maps it to the victim's loopback address only for this check.
    const filter = new EgressFilter(
      { allowPrivateNetworks: false, privateAllow: [`public.test:${victim.port}`], allowHosts: [], ownPorts: () => [] },
      async (host) => (host === 'public.test' ? ['127.0.0.1'] : ['127.0.0.1']),
    );
    let proxy: EgressProxy | undefined;
    try {
      proxy = await startEgressProxy(filter, silentLogger);
      const viaProxy = (target: string, method = 'GET'): Promise<{ status: number; body: string }> =>
        new Promise((resolve, reject) => {
          const req = request({
            host: '127.0.0.1',
            port: proxy!.port,
            method,
            path: target,
            headers: { host: target },
          });
          req.on('response', (res) => {
            let body = '';
            res.on('data', (c: Buffer) => (body += c.toString()));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
          });
          req.on('connect', (res, socket) => {
            socket.destroy();
            resolve({ status: res.statusCode ?? 0, body: '' });
          });
          req.on('error', reject);
          req.end();
        });
      const ok = await viaProxy(`http://public.test:${victim.port}/fine`);
      assert.equal(ok.status, 200);
      assert.match(ok.body, /victim-secret/);
      const refused = await viaProxy(`http://localhost:${victim.port}/steal`);
      assert.equal(refused.status, 403);
      assert.doesNotMatch(refused.body, /victim-secret/);
      assert.equal((await viaProxy(`127.0.0.1:${victim.port}`, 'CONNECT')).status, 403);
      assert.equal((await viaProxy(`[::ffff:169.254.169.254]:80`, 'CONNECT')).status, 403);
      assert.deepEqual(victim.hits, ['GET /fine'], 'only the allowed request reached the server');
      assert.deepEqual(proxy.refused, { private_address: 3 });
    } finally {
      await proxy?.close();
      await victim.close();
    }
  });

  test('a host name of 50,000 dots is refused, and quickly (no backtracking regex on page-supplied hosts)', () => {
    // A timing is not asserted (shared machines); before the fix one call took from about a
    // second to 30 s, worst for dots followed by a letter (every start position backtracks).
    for (const url of [new URL(`http://a${'.'.repeat(50_000)}/`), new URL(`http://${'.'.repeat(50_000)}a/`)]) {
      assert.equal(isAllowedUrl(url, { allowHosts: ['example.com'], denyHosts: [] }), false);
      assert.equal(isAllowedUrl(url, { allowHosts: [], denyHosts: ['example.com'] }), false);
    }
    assert.equal(isAllowedUrl(new URL('http://example.com./'), { allowHosts: ['example.com'], denyHosts: [] }), true);
  });
});

// ---------------------------------------------------------------- SSRF through a real daemon and Chromium

describe('egress: the browser cannot reach private networks or the daemon itself', () => {
  let web: WebServer;
  let victim: Victim;
  let d: TestDaemon;
  let c: TestClient;
  before(async () => {
    web = await startWebServer();
    victim = await startVictim();
    // The test site is reached through the operator's opt-in for exactly its address and port.
    d = await startContainedDaemon(web);
    c = await d.connect();
  });
  after(async () => {
    await d?.close();
    await victim?.close();
    await web?.close();
  });

  test('navigate refuses the daemon’s own port, cloud metadata in IPv6 form, a name for loopback, and the LAN', async () => {
    const refused = 'Refused: that address is not on the public internet, and this browser may not connect to it.';
    const port = d.daemon.address.port;
    for (const url of [
      `http://127.0.0.1:${port}/readyz`,
      `http://localhost:${port}/readyz`,
      'http://[::ffff:169.254.169.254]/latest/meta-data/',
      'http://169.254.169.254/latest/meta-data/',
      `http://localhost:${victim.port}/`,
      `http://0.0.0.0:${victim.port}/`,
      'http://10.0.0.1/',
      'http://[::1]:80/',
    ]) {
      const { result } = await c.batch(`nav-${Math.random()}`, [browserUse('navigate', { url })]);
      assert.equal(result.failures[0]?.error.type, 'ToolRefusedError', url);
      assert.equal(texts(result)[0], refused, url);
    }
    assert.deepEqual(victim.hits, []);
  });

  test('a page’s fetch, image, iframe, WebSocket and redirect to a private address never reach it', async () => {
    const v = victim.origin;
    web.route('/redirect', { status: 302, headers: { location: `${v}/redirected` }, body: '' });
    web.route(
      '/attack',
      `<title>attack</title><p>page</p>
      <img src="${v}/img"><iframe src="${v}/frame"></iframe>
      <script>
        const tries = [
          fetch('${v}/fetch', { mode: 'no-cors' }).then(() => 'fetch ok', (e) => 'fetch failed'),
          new Promise((r) => { const ws = new WebSocket('ws://127.0.0.1:${victim.port}/ws'); ws.onopen = () => r('ws open'); ws.onerror = () => r('ws failed'); }),
          fetch('/redirect', { mode: 'no-cors' }).then(() => 'redirect ok', () => 'redirect failed'),
        ];
        Promise.all(tries).then((outcomes) => fetch('/done', { method: 'POST', body: outcomes.join(',') }));
      </script>`,
    );
    const { result } = await c.batch('attack', [
      browserUse('navigate', { url: `${web.origin}/attack` }),
      browserUse('get_page_text'),
    ]);
    assert.deepEqual(result.failures, []);
    const done = await until('the attack page to report its attempts', () =>
      web.requests.find((r) => r.path === '/done'),
    );
    // no-cors fetches end "ok" either way (an opaque response: here the proxy's refusal); the
    // WebSocket's CONNECT is refused outright. What counts is what reached the server, below.
    assert.match(done.body, /ws failed/);
    // The iframe and image had their chance before the page's load event, and the page ran after them.
    const nav = await c.batch('redirected', [browserUse('navigate', { url: `${web.origin}/redirect` })]);
    assert.doesNotMatch(everything(nav.result), /victim-secret/);
    const read = await c.batch('read', [browserUse('get_page_text')]);
    assert.doesNotMatch(everything(read.result), /victim-secret/);
    assert.deepEqual(victim.hits, [], 'not one request reached the private address');
  });
});

describe('a hostile page cannot break element references, for itself or for other sessions', () => {
  let web: WebServer;
  let d: TestDaemon;
  before(async () => {
    web = await startWebServer();
    d = await startContainedDaemon(web);
  });
  after(async () => {
    await d?.close();
    await web?.close();
  });

  test('the page cannot see or set the ref registry; refs stay small and work in another session', async () => {
    // The registry used to live in the page's own world, where this page pushed its counter past the
    // ref pattern (ten digits): every later ref, in every session, was then refused.
    web.route(
      '/hostile',
      `<title>hostile</title><button>Hostile</button><script>
        Object.defineProperty(window, '__deskbatchRefs', {
          value: { first: 1, next: 99999999999, refs: new Map(), ids: new WeakMap() },
        });
        setInterval(() => {
          const seen = [...document.querySelectorAll('[data-deskbatch-ref]')].length;
          fetch('/seen', { method: 'POST', body: String(window.__deskbatchRefs.refs.size) + ',' + seen });
        }, 20);
      </script>`,
    );
    web.route('/fine', `<title>fine</title><button onclick="fetch('/clicked', { method: 'POST' })">Press me</button>`);
    const evil = await d.connect();
    const r1 = await evil.batch('hostile', [
      browserUse('navigate', { url: `${web.origin}/hostile` }),
      browserUse('read_page', { filter: 'interactive' }),
    ]);
    assert.deepEqual(r1.result.failures, []);
    assert.match(texts(r1.result)[1]!, /button "Hostile" \[ref_\d{1,9}\]/);
    await until('the hostile page to report what it sees after read_page', () =>
      web.requests.some((r) => r.path === '/seen'),
    );
    assert.ok(
      web.requests.filter((r) => r.path === '/seen').every((r) => r.body === '0,0'),
      'the page saw no ref in its own registry object and no marked element',
    );
    const other = await d.connect();
    const r2 = await other.batch('fine', [
      browserUse('navigate', { url: `${web.origin}/fine` }),
      browserUse('find', { query: 'Press me button' }),
    ]);
    const ref = /\[(ref_\d+)\]/.exec(texts(r2.result)[1]!)?.[1];
    assert.match(ref ?? '', /^ref_\d{1,9}$/, texts(r2.result)[1]);
    const click = await other.batch('click', [browserUse('left_click', { target: { type: 'ref', ref } })]);
    assert.deepEqual(click.result.failures, []);
    await until('the click to reach the page', () => web.requests.some((r) => r.path === '/clicked'));
  });
});

// ---------------------------------------------------------------- the X display

describe('the X display admits only holders of its cookie', () => {
  let display: VirtualDisplay;
  let empty: string;
  before(async () => {
    display = await startTestDisplay({ width: 320, height: 200, windowManager: false });
    empty = join(await mkdtemp(join(tmpdir(), 'deskbatch-noauth-')), 'Xauthority');
    await writeFile(empty, '');
  });
  after(async () => {
    await display?.stop();
    await rm(join(empty, '..'), { recursive: true, force: true });
  });

  test('a local client without the cookie is refused; with it, it connects', async () => {
    const saved = process.env.XAUTHORITY;
    process.env.XAUTHORITY = empty;
    try {
      await assert.rejects(XConnection.open(display.display), /X connection refused/);
    } finally {
      process.env.XAUTHORITY = saved;
    }
    process.env.XAUTHORITY = display.xauthority;
    try {
      const conn = await XConnection.open(display.display);
      conn.close();
    } finally {
      process.env.XAUTHORITY = saved;
    }
  });

  test('displays started at once with one authority file each keep their cookie in it', async () => {
    // startTestDisplay shares this process's authority file; three updates of
    // it at once must not lose an entry (each would be refused if one did).
    const displays = await Promise.all(
      [1, 2, 3].map(() => startTestDisplay({ width: 160, height: 100, windowManager: false })),
    );
    try {
      for (const started of displays) {
        const conn = await XConnection.open(started.display);
        conn.close();
      }
    } finally {
      await Promise.all(displays.map((started) => started.stop()));
    }
  });
});

// ---------------------------------------------------------------- Chromium's own interface, driven as a person would

describe("Chromium's own interface: address bar, DevTools, native dialogs", () => {
  let display: VirtualDisplay;
  let web: WebServer;
  let d: TestDaemon;
  let c: TestClient;
  let secretDir: string;
  const secret = `top-secret-${Math.random().toString(36).slice(2)}`;

  before(async () => {
    const state = await browserPolicyState();
    assert.ok(state.enforced, `Chromium's managed policy is installed (npm test runs setup as root): ${state.missing}`);
    secretDir = await mkdtemp(join(tmpdir(), 'deskbatch-secret-'));
    await writeFile(join(secretDir, 'token'), secret);
    display = await startTestDisplay({ width: 1280, height: 800 });
    web = await startWebServer();
    // The page reports what reaches its text box, so a test sees where typed keys went. The box fills
    // the viewport's top half and the file input its bottom half, so a click on the screen finds them
    // wherever the window's toolbar ends.
    web.route(
      '/page',
      `<title>page</title><style>
        body { margin: 0 } #box, #pick { position: fixed; left: 0; width: 100vw; height: 50vh; box-sizing: border-box; }
        #box { top: 0 } #pick { top: 50vh; display: block; background: #eef }
      </style><textarea id="box"></textarea><label id="pick" for="file">choose a file</label><input id="file" type="file">
      <script>
        const box = document.getElementById('box');
        box.addEventListener('input', () => fetch('/typed', { method: 'POST', body: box.value }));
        addEventListener('blur', (e) => e.target === window && fetch('/blur', { method: 'POST' }));
        addEventListener('resize', () => fetch('/resize', { method: 'POST', body: innerWidth + 'x' + innerHeight }));
        addEventListener('focus', (e) => e.target === window && fetch('/focus', { method: 'POST' }));
        document.getElementById('pick').addEventListener('click', () => fetch('/pick-clicked', { method: 'POST' }));
        document.getElementById('file').addEventListener('change', (e) =>
          fetch('/picked', { method: 'POST', body: String(e.target.files.length) }));
      </script>`,
    );
    d = await startTestDaemon({
      display: display.display,
      browser: 'headful',
      browserSettings: { allowPrivateNetworks: false, privateAllow: [`127.0.0.1:${new URL(web.origin).port}`] },
    });
    c = await d.connect();
  });
  after(async () => {
    await d?.close();
    await web?.close();
    await display?.stop();
    await rm(secretDir, { recursive: true, force: true });
  });

  /** How often an attack whose keys a late Chromium bubble took is tried again (as a model would). */
  const ATTEMPTS = 4;

  /** Whether `attempt` succeeded; its failure is an inconclusive attempt, not the test's. */
  function succeeded(attempt: Promise<unknown>): Promise<boolean> {
    return attempt.then(
      () => true,
      () => false,
    );
  }

  /** Screen points on the text box and on the file input's label (see the page's layout). */
  const BOX: [number, number] = [640, 250];
  const FILE_INPUT: [number, number] = [640, 640];

  let n = 0;
  /** Opens the page and clicks into its text box, as a person would. */
  async function openPage(tag: string): Promise<void> {
    web.requests.length = 0;
    const { result } = await c.batch(`open-${tag.replace(/\W/g, '_')}-${n++}`, [
      browserUse('navigate', { url: `${web.origin}/page` }),
      computerUse('left_click', { coordinate: BOX }),
    ]);
    assert.deepEqual(result.failures, [], JSON.stringify(result.failures));
  }

  /** Types `text` with the computer toolset and waits until the page's text box reports it: the keys went there. */
  async function typedIntoPage(text: string, what: string): Promise<void> {
    const { result } = await c.batch(`type-${Math.random()}`, [computerUse('type', { text })]);
    assert.deepEqual(result.failures, []);
    await onFailureShowScreen(what, () =>
      until(
        `${what}: "${text}" typed into the page's text box`,
        () => web.requests.some((r) => r.path === '/typed' && r.body.endsWith(text)),
        { seen: requestsSeen },
      ),
    );
  }

  /** What the page reported since it was opened, for failure messages. */
  function requestsSeen(): string[] {
    return web.requests.map((r) => `${r.method} ${r.path} ${r.body}`);
  }

  /** Runs `fn`; when it fails, the screen as it is then goes to the test's log folder (its path is in the error). */
  async function onFailureShowScreen<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      const { result } = await c.batch(`failure-shot-${Math.random()}`, [computerUse('screenshot')]);
      const image = result.tool_results[0]?.content[0];
      if (image?.type === 'image') {
        const file = join(newLogDir('screen'), `${what.replace(/[^\w-]+/g, '_')}.png`);
        await writeFile(file, Buffer.from(image.source.data, 'base64'));
        (err as Error).message += ` (the screen then: ${file})`;
      }
      throw err;
    }
  }

  /** The active tab's title and URL. */
  async function activeTab(): Promise<{ title: string; url: string }> {
    const r = (await c.batch(`tabs-${Math.random()}`, [browserUse('list_tabs')])).result;
    const state = r.tool_results[0]?.content.find((b) => b.type === 'browser_state');
    const active = state?.type === 'browser_state' ? state.tabs.find((t) => t.active) : undefined;
    return { title: active?.title ?? '', url: active?.url ?? '' };
  }

  test('the address bar cannot open file:// (the token, ~/.ssh), view-source:, chrome:// or devtools:// pages', async () => {
    for (const url of [
      `file://${join(secretDir, 'token')}`,
      `file://${join(homedir(), '.ssh')}/`,
      `view-source:${web.origin}/page`,
      'chrome://version',
      'devtools://devtools/bundled/devtools_app.html',
    ]) {
      // As a model would: focus the address bar, give it a moment, type the URL and Enter. Keys
      // typed while the address bar is still taking the focus are lost (for a model too), which
      // makes a search of what is left: then the attack is simply tried again.
      let outcome: { title: string; url: string } | undefined;
      for (let attempt = 1; !outcome; attempt++) {
        await openPage('bar');
        const { result } = await c.batch(`bar-${Math.random()}`, [
          computerUse('key', { text: 'ctrl+l' }),
          computerUse('wait', { duration: 0.3 }),
          computerUse('type', { text: `${url}\n` }),
        ]);
        assert.deepEqual(result.failures, []);
        const tab = await onFailureShowScreen(`address bar ${url}`, () =>
          until(`the tab to leave the page after typing ${url}`, async () => {
            const t = await activeTab();
            return t.title !== 'page' && t;
          }),
        );
        if (!/search|duckduckgo|google/i.test(`${tab.title} ${tab.url}`)) outcome = tab;
        else assert.ok(attempt < 5, `the address bar never got ${url} whole: ${JSON.stringify(tab)}`);
      }
      const read = await c.batch(`read-${Math.random()}`, [
        browserUse('get_page_text'),
        browserUse('read_page', { filter: 'all' }),
        browserUse('list_tabs'),
      ]);
      assert.doesNotMatch(everything(read.result), new RegExp(secret), url);
      assert.doesNotMatch(texts(read.result).join('\n'), /<textarea|Chromium\s+\d+\.\d+|Elements|Console/, url);
    }
  });

  test('DevTools does not open (F12, Ctrl+Shift+I, Ctrl+Shift+J), so it cannot run the JavaScript the model types', async () => {
    for (const keys of ['F12', 'ctrl+shift+i', 'ctrl+shift+j']) {
      // Chromium shows "DevTools not allowed on this page" instead, in a bubble the space key
      // closes, so the rest of the line lands in the page's text box: proof that no console took
      // it. On a busy machine the bubble can come late and take the whole line; then nothing
      // reached the page, and the attack is simply tried again, as a model would. A console that
      // ran the line would have changed the title, whichever attempt it was, and DevTools docked
      // in the window would have narrowed the page (it reports every resize).
      for (let attempt = 1; ; attempt++) {
        await openPage(keys);
        const { result } = await c.batch(`dev-${keys.replace(/\W/g, '_')}-${attempt}`, [
          computerUse('key', { text: keys }),
          computerUse('wait', { duration: 1.5 }),
          computerUse('type', { text: 'document.title = "pwned"\n' }),
        ]);
        assert.deepEqual(result.failures, []);
        const reached = (): boolean => web.requests.some((r) => r.path === '/typed' && r.body.includes('"pwned"'));
        const what = `the typed line (or its end) to reach the page after ${keys}`;
        const arrived =
          attempt === ATTEMPTS
            ? await onFailureShowScreen(`${keys} console`, () =>
                until(`${what}, in any of ${ATTEMPTS} attempts`, reached, { seen: requestsSeen }),
              )
            : await succeeded(until(what, reached));
        assert.equal((await activeTab()).title, 'page', `the title was not changed from a console (${keys})`);
        assert.deepEqual(
          requestsSeen().filter((r) => r.startsWith('POST /resize')),
          [],
          'the page was not narrowed',
        );
        if (arrived) break;
      }
    }
  });

  test('no native Save dialog (Ctrl+S) and no file picker: the keys typed next land in the page, and no file is picked', async () => {
    const downloads = join(homedir(), 'Downloads');
    const before = await readdir(downloads).catch(() => [] as string[]);
    // A Save dialog would keep the keyboard focus, so no later attempt's keys would reach the page.
    // Escape closes whatever Chromium shows instead; on a busy machine that can come after the
    // Escape and take the keys typed next, which is inconclusive: the attack is tried again.
    for (let attempt = 1; ; attempt++) {
      await openPage(`save-${attempt}`);
      await c.batch(`save-${attempt}`, [
        computerUse('key', { text: 'ctrl+s' }),
        computerUse('key', { text: 'Escape' }),
      ]);
      const typed = typedIntoPage('after-save', `ctrl+s, attempt ${attempt} of ${ATTEMPTS}`);
      if (attempt < ATTEMPTS && !(await succeeded(typed))) continue;
      await typed;
      break;
    }
    assert.deepEqual(await readdir(downloads).catch(() => [] as string[]), before, 'nothing was saved');

    // A click on a file input: the chooser is intercepted and closed, and the model is told so.
    // The page reports the click on the input's label: a click that did not reach it (a busy
    // machine's late layout) proves nothing about the chooser, and is tried again.
    let click: Awaited<ReturnType<typeof c.batch>>;
    for (let attempt = 1; ; attempt++) {
      await openPage(`picker-${attempt}`);
      click = await c.batch(`picker-${attempt}`, [
        computerUse('left_click', { coordinate: FILE_INPUT }),
        browserUse('list_tabs'),
      ]);
      assert.deepEqual(click.result.failures, []);
      const reached = () => web.requests.some((r) => r.path === '/pick-clicked');
      const wait = until(`the click on the file input, attempt ${attempt} of ${ATTEMPTS}`, reached, {
        timeoutMs: 5_000,
        seen: requestsSeen,
      });
      if (
        attempt < ATTEMPTS &&
        !(await wait.then(
          () => true,
          () => false,
        ))
      )
        continue;
      await wait;
      break;
    }
    await c.batch('refocus', [computerUse('left_click', { coordinate: BOX })]);
    // A modal file dialog would keep the focus: these keys would go to its file name field.
    await typedIntoPage('after-picker', 'the file input');
    const notice = await until("the file chooser's notice", async () => {
      const r = (await c.batch(`notice-${Math.random()}`, [browserUse('get_page_text')])).result;
      return [...texts(click.result), ...texts(r)].find((t) => /file chooser was opened and closed/.test(t));
    });
    assert.match(notice, /files reach pages only through file_upload/);
    assert.ok(!web.requests.some((r) => r.path === '/picked' && r.body !== '0'), 'no file reached the page');
  });
});
