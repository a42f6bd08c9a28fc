/**
 * An idle browser calls no one (src/browser/manager.ts, `CHROMIUM_ARGS`):
 * Chromium's own background services (the component updater, the sign-in
 * code listing Google accounts) sent requests through the egress proxy from
 * every idle desktop, each refused and logged, and on a machine with a route
 * out they would have reached Google.
 *
 * A real daemon with one pool desktop (its own Xvfb and a headful Chromium,
 * launched with the desktop), one navigate to the local test server, then the
 * browser left idle. Everything it asked of the egress proxy is read from the
 * daemon's log, requests let through (debug) and refused (info) alike.
 *
 * The window: what was measured before the switches (a minute idle) all
 * starts with the browser: the component updater's check at launch and the
 * account listing at launch, retried at 1, 4 and 12 s; what follows later
 * (the updater's check a minute on, the listing's retry at 38 s) is the same
 * service at the same address again. So the window runs from the browser's
 * launch to IDLE_MS after the navigate, and without the switches this test
 * fails on the requests made at launch.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import { startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { until, within } from '../testkit/wait.ts';
import { browserUse, startWebServer, type WebServer } from '../testkit/web.ts';

const SIZE = { width: 1024, height: 768 };
/** Xvfb, openbox, the worker and Chromium start with the desktop: slow on a loaded 2-core machine. */
const START_MS = 60_000;
/** How long the browser is left idle after the navigate (the launch's own requests come before it). */
const IDLE_MS = 15_000;

/** One line of the egress proxy's log: a request the browser made, let through or refused. */
interface EgressLine {
  time: string;
  target: string;
  allowed: boolean;
  reason?: string;
}

/** The daemon's log, as JSON records (the test daemon writes one per line as it goes). */
async function records(d: TestDaemon): Promise<Record<string, unknown>[]> {
  const text = await readFile(d.logFile, 'utf8');
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

async function egressLines(d: TestDaemon): Promise<EgressLine[]> {
  return (await records(d)).flatMap((r) => {
    if (r.msg !== 'browser request allowed' && r.msg !== 'browser request refused') return [];
    return [
      {
        time: String(r.time),
        target: String(r.target),
        allowed: r.msg === 'browser request allowed',
        ...(r.reason ? { reason: String(r.reason) } : {}),
      },
    ];
  });
}

describe("an idle pool desktop's Chromium reaches nothing but the page it was sent to", () => {
  let web: WebServer;
  let d: TestDaemon;
  before(async () => {
    web = await startWebServer();
    web.route('/quiet', '<!doctype html><title>quiet</title><p>Nothing here calls anyone.</p>');
    // Contained as by default, except for the test server's own host and port: any other
    // loopback or private target is refused (and logged), a public one let through (and logged).
    d = await startTestDaemon({
      browser: 'headful',
      desktops: { mode: 'pool', max: 1, warm: 1, sizes: [SIZE] },
      browserSettings: { allowPrivateNetworks: false, privateAllow: [`127.0.0.1:${new URL(web.origin).port}`] },
    });
  });
  after(async () => {
    await d?.close();
    await web?.close();
  });

  test('from launch to an idle window after one navigate, the egress proxy sees only the test server', async () => {
    const page = `${web.origin}/quiet`;
    const own = `127.0.0.1:${new URL(web.origin).port}`;
    const client = await d.connect();
    const welcome = await within(client.hello(undefined, { desktop: {} }), 'a welcome with a pool desktop', START_MS);
    assert.equal(welcome.desktop?.mode, 'pool');
    const nav = await client.batch('nav', [browserUse('navigate', { url: page })]);
    assert.deepEqual(nav.result.failures, []);
    assert.ok(
      web.requests.some((r) => r.path === '/quiet'),
      'the page was served to the browser',
    );
    // The proxy's log is where a request would show: it shows the navigate's own request.
    await until(
      "the egress proxy's log to show the navigate's request to the test server",
      async () => (await egressLines(d)).some((l) => l.allowed && l.target === own),
      { seen: () => egressLines(d) },
    );
    const launched = (await records(d)).find((r) => r.msg === 'browser launched');
    assert.ok(launched, 'the desktop launched its browser (a "browser launched" line)');

    await delay(IDLE_MS);

    const lines = await egressLines(d);
    const others = lines.filter((l) => l.target !== own);
    const span = Date.now() - Date.parse(String(launched.time));
    console.log(
      `# quiet: ${lines.length - others.length} request(s) to the test server, ${others.length} other(s), over ${Math.round(span / 1000)} s from the browser's launch`,
    );
    assert.deepEqual(others, [], 'requests the browser made on its own, to hosts other than the test server');
  });
});
