/**
 * The page side of human takeover (docs/VIEWER.md "Takeover") that stands
 * without the daemon's control socket: noVNC's modules served from a real
 * daemon (only `.js` under `core/` and `vendor/`, nothing else, 404 when
 * noVNC is missing), the feed snapshot's `takeover` flag,
 * and, in real Chromium, the page under its CSP importing Debian's noVNC and
 * starting an RFB with no policy violation.
 */
import assert from 'node:assert/strict';
import { access, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright';
import WebSocket from 'ws';
import type { FeedMessage } from '../src/viewer/feed.ts';
import { DEFAULT_NOVNC_DIR } from '../src/viewer/index.ts';
import { loadNovnc } from '../src/viewer/novnc.ts';
import { launchKioskChromium, type KioskChromium } from '../testkit/chromium.ts';
import { TEST_TOKEN, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { rawGet } from '../testkit/raw-http.ts';
import { takeoverOn } from '../testkit/takeover.ts';
import { until, within } from '../testkit/wait.ts';

type Snapshot = Extract<FeedMessage, { type: 'snapshot' }>;

/** The first message of the feed: its snapshot. */
async function snapshotOf(port: number): Promise<Snapshot> {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/viewer/feed`, [
    'deskbatch.viewer.v1',
    `deskbatch.token.${TEST_TOKEN}`,
  ]);
  try {
    const first = new Promise<FeedMessage>((resolve, reject) => {
      ws.once('message', (data) => resolve(JSON.parse(data.toString()) as FeedMessage));
      ws.once('error', reject);
    });
    const message = await within(first, 'the feed snapshot');
    assert.equal(message.type, 'snapshot');
    return message as Snapshot;
  } finally {
    ws.close();
  }
}

/** A noVNC-shaped folder with files that must be served, and others (and links out of it) that must not. */
async function makeFixture(root: string): Promise<{ dir: string; served: Record<string, string> }> {
  const dir = join(root, 'novnc');
  const served = {
    'core/rfb.js': 'export default class RFB {}\n',
    'core/util/events.js': 'export const x = 1;\n',
    'core/decoders/raw.js': 'export const raw = 1;\n',
    'vendor/pako/lib/zlib/inflate.js': 'export const inflate = 1;\n',
  };
  const notServed = {
    'core/readme.txt': 'not a module\n',
    'core/.hidden.js': 'export const hidden = 1;\n',
    'core/rfb.js.map': '{}\n',
    'app/ui.js': 'export const ui = 1;\n',
    'vnc.html': '<!doctype html>\n',
    'utils/novnc_proxy': '#!/bin/sh\n',
  };
  for (const [path, text] of Object.entries({ ...served, ...notServed })) {
    await mkdir(dirname(join(dir, path)), { recursive: true });
    await writeFile(join(dir, path), text);
  }
  // Links out of the served folders: neither the linked file nor anything in the linked folder is served.
  await mkdir(join(root, 'outside'), { recursive: true });
  await writeFile(join(root, 'outside', 'secret.js'), 'export const secret = "outside";\n');
  await symlink(join(root, 'outside', 'secret.js'), join(dir, 'core', 'link.js'));
  await symlink(join(root, 'outside'), join(dir, 'core', 'linked'));
  await symlink(join(root, 'outside'), join(dir, 'vendor', 'linked'));
  return { dir, served };
}

const VIEWER_HEADERS = {
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'cross-origin-resource-policy': 'same-origin',
};

describe('noVNC files and the takeover flag on a real daemon (no display)', () => {
  let root: string;
  let fixture: Awaited<ReturnType<typeof makeFixture>>;
  let on: TestDaemon;
  let off: TestDaemon;
  let missing: TestDaemon;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'deskbatch-novnc-'));
    fixture = await makeFixture(root);
    await mkdir(join(root, 'empty'));
    const plain = { display: undefined, browser: 'off' } as const;
    on = await startTestDaemon({ ...plain, takeover: takeoverOn(fixture.dir) });
    off = await startTestDaemon(plain);
    missing = await startTestDaemon({ ...plain, takeover: takeoverOn(join(root, 'empty')) });
  });
  after(async () => {
    await Promise.all([on?.close(), off?.close(), missing?.close()]);
    if (root) await rm(root, { recursive: true, force: true });
  });

  test('exactly the .js files under core/ and vendor/ are read: no link followed, nothing else', () => {
    const loaded = loadNovnc(fixture.dir);
    assert.ok(loaded.ok, JSON.stringify(loaded));
    assert.deepEqual([...loaded.files.keys()].sort(), Object.keys(fixture.served).sort());
    assert.equal(loaded.bytes, Object.values(fixture.served).join('').length);
  });

  test('they are served without a token, as text/javascript under the viewer’s headers', async () => {
    const port = on.daemon.address.port;
    for (const [path, text] of Object.entries(fixture.served)) {
      const res = await rawGet(port, `/viewer/novnc/${path}`);
      assert.equal(res.status, 200, path);
      assert.equal(res.body, text, path);
      assert.equal(res.headers['content-type'], 'text/javascript; charset=utf-8', path);
      for (const [name, value] of Object.entries(VIEWER_HEADERS)) assert.equal(res.headers[name], value, name);
      const csp = String(res.headers['content-security-policy']);
      assert.ok(csp.startsWith("default-src 'none'; script-src 'self'; style-src 'self'; img-src data: blob:"), csp);
    }
    const head = await rawGet(port, '/viewer/novnc/core/rfb.js', { method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.equal(head.body, '');
    assert.equal((await rawGet(port, '/viewer/novnc/core/rfb.js?v=1')).status, 200, 'a query string is ignored');
  });

  test('404 for any other path: other files, links, traversal, encodings, the folders themselves', async () => {
    const port = on.daemon.address.port;
    for (const path of [
      '/viewer/novnc/core/readme.txt',
      '/viewer/novnc/core/.hidden.js',
      '/viewer/novnc/core/rfb.js.map',
      '/viewer/novnc/app/ui.js',
      '/viewer/novnc/vnc.html',
      '/viewer/novnc/utils/novnc_proxy',
      '/viewer/novnc/core/link.js',
      '/viewer/novnc/core/linked/secret.js',
      '/viewer/novnc/vendor/linked/secret.js',
      '/viewer/novnc/core/../app/ui.js',
      '/viewer/novnc/core/../../viewer/app.js',
      '/viewer/novnc/core/%2e%2e/app/ui.js',
      '/viewer/novnc/core%2frfb.js',
      '/viewer/novnc/core/./rfb.js',
      '/viewer/novnc//core/rfb.js',
      '/viewer/novnc/core/rfb.js/',
      '/viewer/novnc/CORE/rfb.js',
      '/viewer/novnc/core',
      '/viewer/novnc/core/',
      '/viewer/novnc/',
      `/viewer/novnc/${join(root, 'outside', 'secret.js')}`,
    ]) {
      const res = await rawGet(port, path);
      assert.equal(res.status, 404, path);
      assert.doesNotMatch(res.body, /export|outside|doctype/, path);
    }
  });

  test('takeover off: noVNC still served (the live view) and the snapshot says false; on: it says true', async () => {
    const offPort = off.daemon.address.port;
    const res = await rawGet(offPort, '/viewer/novnc/core/rfb.js');
    assert.equal(res.status, 200, 'the live view of a desktop needs noVNC with takeover off too');
    assert.equal((await snapshotOf(offPort)).takeover, false);
    assert.equal((await snapshotOf(on.daemon.address.port)).takeover, true);
  });

  test('noVNC not installed: its routes are 404 and takeover stays on in the snapshot', async () => {
    const port = missing.daemon.address.port;
    assert.equal((await rawGet(port, '/viewer/novnc/core/rfb.js')).status, 404);
    assert.equal((await snapshotOf(port)).takeover, true);
    const loaded = loadNovnc(join(root, 'empty'));
    assert.deepEqual(loaded, { ok: false, dir: join(root, 'empty'), reason: 'no core/rfb.js' });
  });

  test('a folder that is not noVNC is refused by the bounds, not read whole', async () => {
    const big = join(root, 'big');
    await mkdir(join(big, 'core'), { recursive: true });
    await writeFile(join(big, 'core', 'rfb.js'), 'x'.repeat(1024 * 1024 + 1));
    const loaded = loadNovnc(big);
    assert.equal(loaded.ok, false);
    assert.match(loaded.ok ? '' : loaded.reason, /^core\/rfb\.js: larger than 1048576 bytes$/);
  });
});

/** Runs an expression in the page (the project's types have no DOM, so expressions are strings). */
const inPage = <T>(page: Page, expression: string): Promise<T> => page.evaluate(expression) as Promise<T>;

describe('the takeover page in Chromium, served by a real daemon with Debian’s noVNC', () => {
  let display: VirtualDisplay;
  let d: TestDaemon;
  let withoutNovnc: TestDaemon;
  let emptyDir: string;
  let kiosk: KioskChromium;
  before(async () => {
    display = await startTestDisplay({ width: 1024, height: 768 });
    d = await startTestDaemon({ display: display.display, browser: 'off', takeover: takeoverOn() });
    emptyDir = await mkdtemp(join(tmpdir(), 'deskbatch-no-novnc-'));
    withoutNovnc = await startTestDaemon({ display: undefined, browser: 'off', takeover: takeoverOn(emptyDir) });
    kiosk = await launchKioskChromium({ display: display.display, width: 1024, height: 768, url: 'about:blank' });
  });
  after(async () => {
    await kiosk?.close();
    await Promise.all([d?.close(), withoutNovnc?.close()]);
    await display?.stop();
    if (emptyDir) await rm(emptyDir, { recursive: true, force: true });
  });

  test('the page imports noVNC’s rfb.js and starts an RFB with no CSP violation', async () => {
    // Setup installs noVNC (scripts/system-packages.txt): without it this fails, naming it, instead of passing as skipped.
    const rfb = join(DEFAULT_NOVNC_DIR, 'core', 'rfb.js');
    const missing = await access(rfb).then(
      () => '',
      (err: unknown) => String(err),
    );
    assert.equal(missing, '', `noVNC (Debian package novnc, which npm run setup installs) is missing: ${missing}`);
    const page = kiosk.page;
    const base = `http://127.0.0.1:${d.daemon.address.port}`;
    const problems: string[] = [];
    page.on('console', (m) => {
      if (/Content.Security.Policy|Refused to/i.test(m.text())) problems.push(`console: ${m.text()}`);
    });
    page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
    try {
      await page.goto(`${base}/viewer#token=${TEST_TOKEN}`);
      await page.waitForSelector('#state[data-state="connected"]');
      await page.waitForSelector('#takeover:not([hidden])');
      await inPage(
        page,
        `window.violations = [];
         document.addEventListener('securitypolicyviolation', (e) =>
           window.violations.push(e.violatedDirective + ' ' + e.blockedURI));`,
      );
      // What takeover.js does when it opens a view: import noVNC, then an RFB on the daemon's VNC path. No desktop
      // is held here, so the socket is refused and the RFB reports a disconnect; its canvas, cursor and socket ran.
      const started = await inPage<{ kind: string; canvas: boolean }>(
        page,
        `import('/viewer/novnc/core/rfb.js').then(({ default: RFB }) => {
           const target = document.getElementById('vnc-screen');
           const rfb = new RFB(target, 'ws://' + location.host + '/viewer/vnc?desktop=none',
             { wsProtocols: ['deskbatch.vnc.v1', 'deskbatch.token.' + sessionStorage.getItem('deskbatch.viewer.token')] });
           rfb.viewOnly = true;
           rfb.scaleViewport = true;
           window.rfbEnded = false;
           rfb.addEventListener('disconnect', () => (window.rfbEnded = true));
           return { kind: typeof RFB, canvas: target.querySelector('canvas') !== null };
         })`,
      );
      assert.deepEqual(started, { kind: 'function', canvas: true });
      await until('the RFB to report its refused socket', () => inPage<boolean>(page, 'window.rfbEnded'));
      assert.deepEqual(await inPage(page, 'window.violations'), []);
      assert.deepEqual(problems, [], 'no CSP violation, no script error');
      assert.equal(await page.isVisible('#novnc-missing'), false);

      // The operator's name is kept for the next visit (it is no secret); the recording box starts off.
      await page.fill('#takeover-name', '  alice  ');
      assert.equal(await inPage(page, `localStorage.getItem('deskbatch.viewer.operator')`), 'alice');
      assert.equal(await page.isChecked('#takeover-record'), false);
    } finally {
      page.removeAllListeners();
    }
  });

  test('without noVNC the page says it is not installed', async () => {
    const page = await kiosk.context.newPage();
    try {
      await page.goto(`http://127.0.0.1:${withoutNovnc.daemon.address.port}/viewer#token=${TEST_TOKEN}`);
      await page.waitForSelector('#novnc-missing:not([hidden])');
      const text = await page.textContent('#novnc-missing');
      assert.match(text ?? '', /noVNC is not installed \(Debian package novnc\)/);
    } finally {
      await page.close();
    }
  });

  test('with takeover off the page shows none of it', async () => {
    const off = await startTestDaemon({ display: undefined, browser: 'off' });
    const page = await kiosk.context.newPage();
    try {
      await page.goto(`http://127.0.0.1:${off.daemon.address.port}/viewer#token=${TEST_TOKEN}`);
      await page.waitForSelector('#state[data-state="connected"]');
      for (const id of ['#takeover', '#help-banner', '#takeover-live']) {
        assert.equal(await page.isVisible(id), false, id);
      }
    } finally {
      await page.close();
      await off.close();
    }
  });
});
