/**
 * A desktop of its own per session (src/desktop-pool/pool.ts): sessions at once
 * never cross, observed from each display and by the pages themselves, not
 * from the daemon's word; a recycled desktop keeps nothing of its last
 * session; a full pool queues in order or refuses, as each session asked; one
 * desktop's faults stay on it; resume returns a session to its own desktop;
 * with a display given, every session shares it and welcome says so.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import sharp from 'sharp';
import type { DesktopInfo } from '../src/desktop-pool/pool.ts';
import type { DesktopWait, ErrorMessage, ServerMessage, ToolUse, Welcome } from '../src/base/protocol.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { ConnectError, DeskbatchClient } from '../src/client/index.ts';
import { computerUse, startTestDaemon, TEST_TOKEN, type TestClient, type TestDaemon } from '../testkit/daemon.ts';
import { inNamespacesOf } from '../testkit/sandbox-probes.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { isRunning, processesMentioning } from '../testkit/recording.ts';
import { until, within } from '../testkit/wait.ts';
import { browserUse, startWebServer, type WebServer } from '../testkit/web.ts';

const run = promisify(execFile);
const SIZE = { width: 1024, height: 768 };
/** Desktops start Xvfb, openbox, a worker and Chromium: slow on a loaded 2-core machine. */
const START_MS = 60_000;

/**
 * A page that tells the test server what happens on it: each input's value, each click, its cookies. It fills
 * the window with a focused text area, sets a cookie and a localStorage entry named after `who`.
 */
function page(who: string): string {
  return `<!doctype html><title>page-${who}</title>
<body style="margin:0"><textarea id=t autofocus style="width:100vw;height:100vh;font-size:40px"></textarea>
<script>
const tell = (what, value) => fetch('/log?who=${who}&' + what + '=' + encodeURIComponent(value));
tell('cookie', document.cookie + '|' + (localStorage.getItem('secret') ?? ''));
document.cookie = 'secret=${who}; max-age=3600';
localStorage.setItem('secret', '${who}');
t.addEventListener('input', () => tell('value', t.value));
addEventListener('click', (e) => tell('click', e.clientX + ',' + e.clientY));
</script>`;
}

/** What the pages of `who` told the server, by kind. */
function told(web: WebServer, who: string, what: string): string[] {
  return web.requests
    .map((r) => new URL(r.path, 'http://x'))
    .filter((u) => u.pathname === '/log' && u.searchParams.get('who') === who && u.searchParams.has(what))
    .map((u) => u.searchParams.get(what)!);
}

/** An X client run on one desktop's display, with its cookie: what that display shows, not what the daemon says. */
async function onDisplay(info: DesktopInfo, cmd: string, args: string[]): Promise<string> {
  assert.ok(info.x, `desktop ${info.id} has no display`);
  try {
    // A sandboxed desktop's display is reached from inside its sandbox (docs/SECURITY.md "A sandbox per desktop").
    const [command, argv] = info.processes.xvfb ? inNamespacesOf(info.processes.xvfb, cmd, args) : [cmd, args];
    const { stdout } = await run(command, argv, { env: { ...process.env, ...info.x }, timeout: 10_000 });
    return stdout.trim();
  } catch (err) {
    // xclip with an empty clipboard, xdotool finding no window: nothing there.
    if ((err as { code?: unknown }).code === 1) return '';
    throw err;
  }
}

const clipboard = (info: DesktopInfo): Promise<string> => onDisplay(info, 'xclip', ['-o', '-selection', 'clipboard']);
async function windowTitles(info: DesktopInfo): Promise<string[]> {
  const ids = (await onDisplay(info, 'xdotool', ['search', '--name', 'page-'])).split('\n').filter(Boolean);
  const titles = await Promise.all(ids.map((id) => onDisplay(info, 'xdotool', ['getwindowname', id])));
  return titles.filter(Boolean);
}

async function readyz(d: TestDaemon): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(d.url.replace('ws:', 'http:').replace('/v1', '/readyz'));
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function metrics(d: TestDaemon): Promise<string> {
  const res = await fetch(d.url.replace('ws:', 'http:').replace('/v1', '/metrics'), {
    headers: { authorization: `Bearer ${TEST_TOKEN}` },
  });
  assert.equal(res.status, 200);
  return res.text();
}

/** One sample's value, by its name and labels as the exposition writes them. */
function metric(text: string, sample: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${sample} `));
  assert.ok(line, `no sample ${sample}`);
  return Number(line.slice(sample.length + 1));
}

function desktopOf(d: TestDaemon, id: string): DesktopInfo {
  const info = d.daemon.desktops.list().find((x) => x.id === id);
  assert.ok(info, `no desktop ${id}; the pool holds ${JSON.stringify(d.daemon.desktops.list().map((x) => x.id))}`);
  return info;
}

async function openSession(
  d: TestDaemon,
  desktop: Record<string, unknown> = {},
): Promise<{ client: TestClient; welcome: Welcome }> {
  const client = await d.connect();
  const welcome = await within(client.hello(undefined, { desktop }), 'a welcome with a desktop', START_MS);
  return { client, welcome };
}

/**
 * Opens page `who` and waits until it loaded and its window shows on the session's display: input sent
 * before the window is mapped and focused would land nowhere.
 */
async function openPage(d: TestDaemon, web: WebServer, c: TestClient, desktop: string, who: string): Promise<void> {
  const uses = [browserUse('navigate', { url: `${web.origin}/page-${who}` })];
  const { result } = await c.batch(`open-${who}`, uses);
  assertApiValid(uses, result);
  assert.equal(result.failures.length, 0, JSON.stringify(result.failures));
  await until(`page ${who} to load`, () => told(web, who, 'cookie').length > 0, { timeoutMs: START_MS });
  await until(
    `page ${who}'s window to show on its display`,
    async () => (await windowTitles(desktopOf(d, desktop))).some((t) => t.includes(`page-${who}`)),
    { timeoutMs: START_MS, intervalMs: 100 },
  );
}

/** Clicks into the page's text area, types, then selects it all and copies it: input that lands on one desktop only. */
function actOnPage(text: string): ToolUse[] {
  return [
    computerUse('left_click', { coordinate: [300, 300] }),
    computerUse('type', { text }),
    computerUse('key', { text: 'ctrl+a' }),
    computerUse('key', { text: 'ctrl+c' }),
  ];
}

async function rawPixels(data: string): Promise<Buffer> {
  return sharp(Buffer.from(data, 'base64')).raw().toBuffer();
}

async function firstScreenshot(client: TestClient, id: string): Promise<Buffer> {
  const uses = [computerUse('screenshot')];
  const { result } = await client.batch(id, uses);
  assertApiValid(uses, result);
  assert.equal(result.failures.length, 0, JSON.stringify(result.failures));
  const block = result.tool_results[0]!.content[0]!;
  assert.ok(block.type === 'image');
  return rawPixels(block.source.data);
}

describe('a desktop of its own per session', () => {
  let web: WebServer;
  let d: TestDaemon;
  before(async () => {
    web = await startWebServer();
    for (const who of ['A', 'B', 'C']) {
      web.route(`/page-${who}`, { body: page(who) });
    }
    web.route('/log', { body: '' });
    d = await startTestDaemon({
      browser: 'headful',
      desktops: { mode: 'pool', max: 2, warm: 2, sizes: [SIZE] },
      // A closed session's desktop is recycled soon after; resume is tested within this window.
      sessionGraceMs: 1_500,
    });
  });
  after(async () => {
    await d?.close();
    await web?.close();
  });

  let fresh: Buffer;
  let firstA: { id: string; home: string; downloads: string } | undefined;

  test('two sessions at once: their clicks, typing, clipboard, windows and pages never cross', async () => {
    const a = await openSession(d);
    const b = await openSession(d);
    assert.equal(a.welcome.desktop?.mode, 'pool');
    assert.deepEqual(a.welcome.desktop?.display, SIZE);
    assert.ok(a.welcome.desktop && b.welcome.desktop);
    assert.notEqual(a.welcome.desktop.id, b.welcome.desktop.id);
    fresh = await firstScreenshot(a.client, 'fresh-a');

    await Promise.all([
      openPage(d, web, a.client, a.welcome.desktop.id, 'A'),
      openPage(d, web, b.client, b.welcome.desktop.id, 'B'),
    ]);
    const usesA = actOnPage('alpha typed on A');
    const usesB = actOnPage('bravo typed on B');
    // At once: each session's batch runs on its own desktop's lane.
    const [ra, rb] = await Promise.all([a.client.batch('act-a', usesA), b.client.batch('act-b', usesB)]);
    for (const [uses, r] of [
      [usesA, ra.result],
      [usesB, rb.result],
    ] as const) {
      assertApiValid(uses, r);
      assert.equal(r.failures.length, 0, JSON.stringify(r.failures));
    }

    // The pages saw only their own session's input.
    // Each keystroke's report is its own request, and they may arrive out of order: look for the whole text.
    await until(
      'both pages to report the whole typed text',
      () =>
        told(web, 'A', 'value').includes('alpha typed on A') && told(web, 'B', 'value').includes('bravo typed on B'),
      { seen: () => ({ A: told(web, 'A', 'value'), B: told(web, 'B', 'value') }) },
    );
    assert.ok(
      told(web, 'A', 'value').every((v) => 'alpha typed on A'.startsWith(v)),
      'page A saw foreign keys',
    );
    assert.ok(
      told(web, 'B', 'value').every((v) => 'bravo typed on B'.startsWith(v)),
      'page B saw foreign keys',
    );
    assert.equal(told(web, 'A', 'click').length, 1, 'page A got exactly its own click');
    assert.equal(told(web, 'B', 'click').length, 1, 'page B got exactly its own click');

    // Each display holds its own window and clipboard.
    const infoA = desktopOf(d, a.welcome.desktop.id);
    const infoB = desktopOf(d, b.welcome.desktop.id);
    assert.notEqual(infoA.x?.DISPLAY, infoB.x?.DISPLAY);
    assert.notEqual(infoA.x?.XAUTHORITY, infoB.x?.XAUTHORITY);
    assert.equal(await clipboard(infoA), 'alpha typed on A');
    assert.equal(await clipboard(infoB), 'bravo typed on B');
    // Each session reads its own display's pointer, moved here by another X client holding that display's cookie:
    // the daemon asks it on a connection of its own (src/desktop-driver/worker-driver.ts), with the desktop's cookie.
    await onDisplay(infoA, 'xdotool', ['mousemove', '--sync', '101', '102']);
    await onDisplay(infoB, 'xdotool', ['mousemove', '--sync', '201', '202']);
    const where = [computerUse('cursor_position')];
    const [pa, pb] = await Promise.all([a.client.batch('where-a', where), b.client.batch('where-b', where)]);
    for (const [r, text] of [
      [pa.result, 'X=101,Y=102'],
      [pb.result, 'X=201,Y=202'],
    ] as const) {
      assert.equal(r.failures.length, 0, JSON.stringify(r.failures));
      assert.deepEqual(r.tool_results[0]!.content, [{ type: 'text', text }]);
    }
    const titlesA = await windowTitles(infoA);
    const titlesB = await windowTitles(infoB);
    assert.ok(titlesA.some((t) => t.includes('page-A')) && !titlesA.some((t) => t.includes('page-B')), `${titlesA}`);
    assert.ok(titlesB.some((t) => t.includes('page-B')) && !titlesB.some((t) => t.includes('page-A')), `${titlesB}`);

    // Resume: a dropped connection comes back to its own desktop, with its page still open.
    a.client.close();
    const again = await d.connect();
    const resumed = await again.hello(a.welcome.session_id, { desktop: {} });
    assert.equal(resumed.resumed, true);
    assert.equal(resumed.desktop?.id, a.welcome.desktop.id);
    assert.ok((await windowTitles(desktopOf(d, a.welcome.desktop.id))).some((t) => t.includes('page-A')));

    firstA = { id: infoA.id, ...infoA.folders! };
    again.close();
    b.client.close();
  });

  test('a recycled desktop keeps nothing of its last session', async () => {
    // A skip here would let a run pass without this test: without the desktop the test before used, it fails.
    assert.ok(firstA, 'the test before left no desktop to recycle');
    const gone = firstA;
    // Its session's resume window ends, the desktop is torn down and a fresh one takes its place.
    await until(`desktop ${gone.id} to be torn down`, () => !d.daemon.desktops.list().some((x) => x.id === gone.id), {
      timeoutMs: START_MS,
    });
    assert.equal(existsSync(gone.home), false, 'its HOME was removed');
    assert.equal(existsSync(gone.downloads), false, 'its downloads folder was removed');
    const c = await openSession(d);
    assert.ok(c.welcome.desktop);
    assert.ok(![gone.id].includes(c.welcome.desktop.id), 'a new desktop, not the old one');
    // Its first screenshot is a fresh desktop's, pixel for pixel.
    const first = await firstScreenshot(c.client, 'first-c');
    assert.ok(first.equals(fresh), 'the first screenshot differs from a fresh desktop');
    const info = desktopOf(d, c.welcome.desktop.id);
    assert.equal(await clipboard(info), '', 'the clipboard is empty');
    assert.deepEqual(await windowTitles(info), [], 'no window of an earlier session');
    // The page finds no cookie and no storage of an earlier session.
    const uses = [browserUse('navigate', { url: `${web.origin}/page-C` })];
    const { result } = await c.client.batch('probe-c', uses);
    assert.equal(result.failures.length, 0, JSON.stringify(result.failures));
    await until('page C to report its cookies', () => told(web, 'C', 'cookie').length > 0);
    assert.deepEqual(told(web, 'C', 'cookie'), ['|']);
    c.client.close();
  });
});

describe('a full pool', () => {
  let d: TestDaemon;
  before(async () => {
    d = await startTestDaemon({
      browser: 'off',
      desktops: { mode: 'pool', max: 1, warm: 1, sizes: [SIZE] },
      sessionGraceMs: 100,
    });
  });
  after(() => d?.close());

  test('refuses at once with retry_after_ms, or queues first come first served, as each session asked', async () => {
    await until('the warm desktop', () => d.daemon.desktops.capacity().states.warm === 1, { timeoutMs: START_MS });
    const ready = await readyz(d);
    assert.equal(ready.status, 200);
    assert.deepEqual(ready.body.desktops, { mode: 'pool', max: 1, free: 1, leased: 0, waiting: 0 });
    const holder = await openSession(d);
    assert.ok(holder.welcome.desktop);
    // Full: a load balancer sends new sessions elsewhere; the metrics say why.
    const full = await readyz(d);
    assert.equal(full.status, 503);
    assert.deepEqual(full.body, {
      status: 'not_ready',
      reason: 'no_free_desktop',
      desktops: { mode: 'pool', max: 1, free: 0, leased: 1, waiting: 0 },
    });
    const text = await metrics(d);
    assert.equal(metric(text, 'deskbatch_desktops{state="leased"}'), 1);
    assert.equal(metric(text, 'deskbatch_desktops_max'), 1);
    assert.equal(metric(text, 'deskbatch_desktop_lease_wait_seconds_count'), 1);
    const memory = metric(text, `deskbatch_desktop_memory_bytes{desktop="${holder.welcome.desktop.id}"}`);
    assert.ok(memory > 10 * 1024 ** 2, `the desktop's PSS: ${memory} bytes`);

    const refused = await d.connect();
    refused.send({ type: 'hello', desktop: { when_busy: 'refuse' } });
    const error = await within(
      refused.next((m): m is ErrorMessage => m.type === 'error'),
      'the refusal',
    );
    assert.equal(error.code, 'no_desktop');
    assert.ok(error.retry_after_ms !== undefined && error.retry_after_ms > 0, JSON.stringify(error));

    // One that asked to wait hears its place; a v1 client (no hello.desktop) waits behind it, silently.
    const waiting = await d.connect();
    waiting.send({ type: 'hello', desktop: { when_busy: 'wait' } });
    const place = await within(
      waiting.next((m): m is DesktopWait => m.type === 'desktop_wait'),
      'the first place in the queue',
    );
    assert.deepEqual(place, { type: 'desktop_wait', position: 1, waiting: 1 });
    const v1 = await d.connect();
    v1.send({ type: 'hello' });
    await until('the v1 client to be queued', () => d.daemon.desktops.capacity().waiting === 2);
    const welcomed: string[] = [];
    const welcome = (c: TestClient, name: string): Promise<Welcome> =>
      c.next((m): m is Welcome => m.type === 'welcome').then((w) => (welcomed.push(name), w));
    const waitingWelcome = welcome(waiting, 'waiting');
    const v1Welcome = welcome(v1, 'v1');

    holder.client.close(); // its desktop is recycled after the (short) resume window
    const w = await within(waitingWelcome, 'the first queued session to get the desktop', START_MS);
    assert.equal(w.desktop?.mode, 'pool');
    assert.notEqual(w.desktop?.id, holder.welcome.desktop.id);
    assert.deepEqual(welcomed, ['waiting'], 'the v1 client queued later did not overtake');
    waiting.close();
    const v = await within(v1Welcome, 'the second queued session to get the desktop', START_MS);
    assert.equal(v.desktop, undefined, 'a v1 client meets no new welcome field');
    assert.deepEqual(welcomed, ['waiting', 'v1']);
    const frames = v1.messages.map((m: ServerMessage) => m.type);
    assert.ok(!frames.includes('desktop_wait'), `a v1 client got ${frames}`);
    v1.close();
    refused.close();
  });

  test('the client library: refused with no_desktop and retryAfterMs, or waits and hears its place', async () => {
    const holder = await openSession(d);
    await assert.rejects(
      DeskbatchClient.connect(d.url, { token: TEST_TOKEN, desktop: { whenBusy: 'refuse' }, reconnect: false }),
      (err: unknown) => err instanceof ConnectError && err.code === 'no_desktop' && (err.retryAfterMs ?? 0) > 0,
    );
    const places: number[] = [];
    const queued = DeskbatchClient.connect(d.url, {
      token: TEST_TOKEN,
      desktop: {},
      reconnect: false,
      handshakeTimeoutMs: 30_000, // a desktop's start on a loaded machine
      onDesktopWait: (w) => places.push(w.position),
    });
    await until('the client to be told its place', () => places.length > 0);
    holder.client.close();
    const client = await within(queued, 'the queued client to connect', START_MS);
    assert.deepEqual(places, [1]);
    assert.equal(client.welcome.desktop?.mode, 'pool');
    await client.close();
  });

  test('a display size outside the operator list is refused, naming the list', async () => {
    const c = await d.connect();
    c.send({ type: 'hello', desktop: { display: { width: 640, height: 480 } } });
    const error = await within(
      c.next((m): m is ErrorMessage => m.type === 'error'),
      'the refusal',
    );
    assert.equal(error.code, 'invalid_message');
    assert.match(error.message, /1024x768/);
    c.close();
  });
});

describe('faults stay on their desktop', () => {
  let d: TestDaemon;
  let web: WebServer;
  before(async () => {
    web = await startWebServer();
    web.route('/blank', '<title>blank</title>');
    d = await startTestDaemon({
      browser: 'headless',
      desktops: { mode: 'pool', max: 2, warm: 2, sizes: [SIZE] },
      resilience: { retry: { attempts: 0 } },
    });
  });
  after(async () => {
    await d?.close();
    await web?.close();
  });

  test("one desktop's Xvfb or Chromium killed leaves the other working, and it is rebuilt", async () => {
    const a = await openSession(d);
    const b = await openSession(d);
    const idA = a.welcome.desktop!.id;
    const idB = b.welcome.desktop!.id;
    // Both browsers started, so there is a Chromium to kill.
    for (const [c, name] of [
      [a.client, 'a'],
      [b.client, 'b'],
    ] as const) {
      const { result } = await c.batch(`open-${name}`, [browserUse('navigate', { url: `${web.origin}/blank` })]);
      assert.equal(result.failures.length, 0, JSON.stringify(result.failures));
    }

    const homeA = desktopOf(d, idA).folders!.home;
    assert.ok(existsSync(homeA), homeA);
    process.kill(desktopOf(d, idA).processes.xvfb!, 'SIGKILL');
    const shotB = [computerUse('screenshot')];
    const { result: rb } = await b.client.batch('b-during', shotB);
    assert.equal(rb.failures.length, 0, `B failed while A's display was down: ${JSON.stringify(rb.failures)}`);
    // A's calls fail as retryable until its desktop is rebuilt, then work again: the same desktop id.
    let n = 0;
    await until(
      "A's desktop to work again after its Xvfb died",
      async () => {
        const { result } = await a.client.batch(`a-after-${n++}`, [computerUse('screenshot')]);
        if (result.failures.length) {
          const type = result.failures[0]!.error.type;
          assert.ok(['DisplayUnavailableError', 'DriverCrashedError'].includes(type), type);
          return false;
        }
        return true;
      },
      { timeoutMs: START_MS, intervalMs: 250 },
    );
    assert.ok(d.daemon.desktops.list().some((x) => x.id === idA && x.session === a.welcome.session_id));
    // The rebuilt desktop has a HOME of its own; the dead one's is gone with it.
    assert.notEqual(desktopOf(d, idA).folders!.home, homeA);
    await until("the dead display's HOME to be removed", () => !existsSync(homeA));

    const browserPidB = desktopOf(d, idB).processes.browser;
    assert.ok(browserPidB, "B's browser pid");
    process.kill(browserPidB, 'SIGKILL');
    const { result: crashed } = await b.client.batch('b-crash', [
      browserUse('navigate', { url: `${web.origin}/blank` }),
    ]);
    assert.equal(crashed.failures[0]?.error.type, 'BrowserCrashedError', JSON.stringify(crashed.failures));
    const { result: ra } = await a.client.batch('a-browser', [browserUse('navigate', { url: `${web.origin}/blank` })]);
    assert.equal(ra.failures.length, 0, `A failed after B's browser died: ${JSON.stringify(ra.failures)}`);
    // And B's browser works again: its next call launches a new Chromium on B's desktop.
    const { result: rebuilt } = await b.client.batch('b-after', [
      browserUse('navigate', { url: `${web.origin}/blank` }),
    ]);
    assert.equal(rebuilt.failures.length, 0, `B's browser did not come back: ${JSON.stringify(rebuilt.failures)}`);
    const relaunched = desktopOf(d, idB).processes.browser;
    assert.ok(
      relaunched !== undefined && relaunched !== browserPidB,
      `B's browser pid: ${relaunched} after ${browserPidB}`,
    );
    a.client.close();
    b.client.close();
  });
});

describe('closing while a desktop starts', () => {
  test('close() resolves once the desktop still starting is torn down: none of its processes or folders are left', async () => {
    // Everything this daemon makes in the temporary folder goes to one of the test's own (os.tmpdir() reads
    // TMPDIR on every call), so what is left there after close() is this daemon's alone.
    const tmp = await mkdtemp(join(tmpdir(), 'deskbatch-pool-close-'));
    const before = process.env.TMPDIR;
    process.env.TMPDIR = tmp;
    try {
      const d = await startTestDaemon({
        browser: 'headless',
        desktops: { mode: 'pool', max: 1, warm: 1, sizes: [SIZE] },
      });
      // The warm desktop starts in the background: Xvfb, openbox, the worker and Chromium take seconds.
      assert.deepEqual(
        d.daemon.desktops.list().map((x) => x.state),
        ['starting'],
        'the premise: a desktop is still starting when close() is called',
      );
      await d.close();
      assert.deepEqual(await readdir(tmp), [], 'nothing of the daemon is left in its temporary folder');
      assert.deepEqual(processesMentioning(tmp), [], 'no process of the desktop runs on');
    } finally {
      if (before === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = before;
      await rm(tmp, { recursive: true, force: true });
    }
  });
});

describe('closing while a session ends', () => {
  test('from beginClose() on no desktop is started in place of one given back; close() leaves no Xvfb running', async () => {
    const d = await startTestDaemon({
      browser: 'off',
      desktops: { mode: 'pool', max: 2, warm: 2, sizes: [SIZE] },
      sessionGraceMs: 100, // the closed session ends soon after
    });
    try {
      const warm = await until(
        'both warm desktops to start',
        () => {
          const list = d.daemon.desktops.list();
          return list.length === 2 && list.every((x) => x.state === 'warm') && list;
        },
        { timeoutMs: START_MS },
      );
      const xvfbs = warm.map((x) => x.processes.xvfb!);
      const client = await d.connect();
      const welcome = await client.hello(undefined, { desktop: {} });
      const leased = welcome.desktop!.id;
      // What the daemon's close() does first, before its sessions end: the session's desktop, given back
      // now, would otherwise be replaced by a new warm one (there is room for it, and one warm is missing).
      d.daemon.desktops.beginClose();
      client.close();
      await until('the session to give its desktop back and it to be torn down', () =>
        d.daemon.desktops.list().every((x) => x.id !== leased),
      );
      // The recycle refills the warm set in the same turn as it removes the desktop: a start would show now.
      assert.deepEqual(
        d.daemon.desktops.list().map((x) => x.id),
        warm.map((x) => x.id).filter((id) => id !== leased),
        'no desktop was started in its place',
      );
      await d.daemon.close();
      // A sandboxed Xvfb is SIGKILLed with its pid namespace, and may take a while to end: close() waits for it.
      assert.deepEqual(
        xvfbs.filter((pid) => isRunning(pid)),
        [],
        'every Xvfb of the pool ended before close() resolved',
      );
    } finally {
      await d.close();
    }
  });
});

describe('a shared display (DISPLAY given)', () => {
  let display: VirtualDisplay;
  let d: TestDaemon;
  before(async () => {
    display = await startTestDisplay({ width: 800, height: 600, windowManager: false });
    d = await startTestDaemon({ display: display.display, browser: 'off' });
  });
  after(async () => {
    await d?.close();
    await display?.stop();
  });

  test('welcome says the mode; every session gets the one desktop; another size is refused', async () => {
    const a = await openSession(d);
    const b = await openSession(d);
    assert.deepEqual(a.welcome.desktop, { mode: 'shared', id: 'shared', display: { width: 800, height: 600 } });
    assert.deepEqual(b.welcome.desktop, a.welcome.desktop);
    const c = await d.connect();
    c.send({ type: 'hello', desktop: { display: { width: 1024, height: 768 } } });
    const error = await within(
      c.next((m): m is ErrorMessage => m.type === 'error'),
      'the refusal',
    );
    assert.equal(error.code, 'invalid_message');
    assert.match(error.message, /shared by every session/);
    for (const x of [a.client, b.client, c]) x.close();
  });
});
