/**
 * An operator rescues a stuck agent from the live viewer, as a person would:
 * a real daemon with a pooled desktop (its own Xvfb and headful Chromium),
 * real x11vnc behind the daemon's port, and the viewer page in a real
 * Chromium on another display (the operator's screen), driving noVNC with
 * the pointer and the keyboard. The login page on the desktop says what it
 * saw (to the test's web server), not the daemon.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { BatchResult, TakeoverMessage, Welcome } from '../src/base/protocol.ts';
import { launchKioskChromium, type KioskChromium } from '../testkit/chromium.ts';
import { computerUse, startTestDaemon, TEST_TOKEN, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { ffmpegOf, openTrace } from '../testkit/recording.ts';
import { ControlClient, takeoverOn } from '../testkit/takeover.ts';
import { until } from '../testkit/wait.ts';
import { browserUse, startWebServer, type WebServer } from '../testkit/web.ts';

const DESKTOP = { width: 1280, height: 800 };
const OPERATOR_SCREEN = { width: 1280, height: 900 };
/** What the person types into the password field: it must reach the page and nothing else. */
const SECRET = 'Pw-9xQ-hunter2';
const REASON = 'log in to the bank; I must not see the password';
const NOTE = 'Logged in; the session is open.';

/** A password field over the whole page; it reports a click and each value to the test's server. */
const LOGIN_PAGE = `<!doctype html><html><head><title>Bank login</title><style>
html, body { margin: 0; height: 100%; }
#pw { position: fixed; inset: 0; width: 100%; height: 100%; font-size: 48px; box-sizing: border-box; }
</style></head><body>
<input id="pw" type="password" aria-label="Password" autocomplete="off">
<script>
const pw = document.getElementById('pw');
pw.addEventListener('mousedown', () => fetch('/seen', { method: 'POST', body: 'click' }));
pw.addEventListener('input', () => fetch('/seen', { method: 'POST', body: 'value:' + pw.value }));
</script></body></html>`;

const isTakeover =
  (event: TakeoverMessage['event']) =>
  (m: { type: string }): m is TakeoverMessage =>
    m.type === 'takeover' && (m as TakeoverMessage).event === event;

/** Every file under `dir`, recursively. */
async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await filesUnder(path)));
    else out.push(path);
  }
  return out;
}

describe('an operator rescues a stuck agent from the viewer', () => {
  let web: WebServer;
  let operatorScreen: VirtualDisplay;
  let kiosk: KioskChromium;
  let recordings: string;
  let d: TestDaemon;
  before(async () => {
    web = await startWebServer();
    web.route('/login', LOGIN_PAGE);
    web.route('/seen', '');
    recordings = await mkdtemp(join(tmpdir(), 'deskbatch-takeover-rec-'));
    d = await startTestDaemon({
      display: undefined,
      browser: 'headful',
      desktops: { mode: 'pool', max: 1, warm: 1, sizes: [DESKTOP] },
      // The agent's session ends soon after it disconnects: its recording is then finished and read.
      sessionGraceMs: 1_000,
      takeover: takeoverOn(),
      recording: { mode: 'all', dir: recordings, video: true, trace: true },
    });
    operatorScreen = await startTestDisplay(OPERATOR_SCREEN);
    kiosk = await launchKioskChromium({ display: operatorScreen.display, ...OPERATOR_SCREEN, url: 'about:blank' });
  });
  after(async () => {
    await kiosk?.close();
    await d?.close();
    await operatorScreen?.stop();
    await web?.close();
    if (recordings) await rm(recordings, { recursive: true, force: true });
  });

  test('take control, act on the page through noVNC, hand back; the agent waits, then hears the outcome', async () => {
    const agent = await d.connect();
    const welcome: Welcome = await agent.hello(undefined, { takeover: {}, desktop: {} });
    assert.deepEqual(welcome.capabilities, ['help']);
    const desktop = welcome.desktop!.id;
    // A computer call first: the recording's video runs from it on.
    const opened = await agent.batch('open', [
      computerUse('screenshot', {}, 'toolu_first'),
      browserUse('navigate', { url: `${web.origin}/login` }),
    ]);
    assert.equal(opened.result.failures.length, 0, JSON.stringify(opened.result.failures));
    agent.send({ type: 'help', reason: REASON });
    const ack = await agent.next(isTakeover('help_requested'));

    // The operator sees the request on the live page and takes the desktop.
    const page = kiosk.page;
    const viewerUrl = `${d.url.replace(/^ws/, 'http').replace(/\/v1$/, '')}/viewer#token=${TEST_TOKEN}`;
    await page.goto(viewerUrl);
    const banner = page.locator('#help-banner');
    await banner.waitFor({ state: 'visible', timeout: 30_000 });
    assert.match((await banner.textContent()) ?? '', /I must not see the password/);
    await page.fill('#takeover-name', 'alice');
    await page.click(`#help-take-${ack.request_id}`);
    const started = await agent.next(isTakeover('started'));
    assert.equal(started.operator, 'alice');
    await until('noVNC connected in the page', async () =>
      /^Connected/.test((await page.textContent('#vnc-status')) ?? ''),
    );
    // The operator did not ask to keep the screen: the video takes no frames while the person holds it.
    const ffmpeg = await until("the recording's ffmpeg", () => ffmpegOf(process.pid));
    await until('ffmpeg stopped (state T) while the person holds the desktop', async () =>
      /\) T /.test(await readFile(`/proc/${ffmpeg}/stat`, 'latin1')),
    );

    // The agent's next batch waits while the person holds the desktop.
    const order: string[] = [];
    agent.ws.on('message', (data) => {
      const m = JSON.parse(String(data)) as { type: string; event?: string; batch_id?: string };
      order.push(m.type === 'takeover' ? `takeover:${m.event}` : `${m.type}:${m.batch_id ?? ''}`);
    });
    agent.send({ type: 'batch', batch_id: 'after', tool_uses: [computerUse('screenshot', {}, 'toolu_after')] });

    // A second viewer watches: it cannot take the desktop while alice holds it.
    const second = await kiosk.context.newPage();
    await second.goto(viewerUrl); // its own tab: its own sessionStorage, so the token again
    await until('the second viewer showing alice as the holder', async () =>
      /alice/.test((await second.textContent(`#holder-${desktop}`).catch(() => '')) ?? ''),
    );
    assert.equal(await second.isDisabled(`#take-${desktop}`), true, 'Take control is disabled for a second viewer');
    const rival = await ControlClient.open(d.url);
    rival.send({ type: 'take', desktop, operator: 'mallory' });
    assert.match(String((await rival.next('refused', (m) => m.type === 'refused')).reason), /alice/);
    await rival.close();
    await second.close();

    // The person clicks into the field and types, through noVNC: the page on the desktop sees it.
    const canvas = page.locator('#vnc-screen canvas').first();
    const box = await canvas.boundingBox();
    assert.ok(box, 'the noVNC canvas is on the page');
    await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
    await until('the page seeing the click', () => web.requests.some((r) => r.path === '/seen' && r.body === 'click'));
    await page.keyboard.type(SECRET, { delay: 20 });
    // The key a French keyboard has for é (its code is Digit2 there): noVNC sends the keysym of the key the
    // person's layout says, and x11vnc binds it to a spare keycode of the desktop, whose layout is US. Pressed
    // before the desktop's Chromium re-read the keymap, it was lost (1 run in 12): the press now waits for that.
    // (What the page saw is in the failure's message: a fixture's password, never a person's.)
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Input.dispatchKeyEvent', { type: 'keyDown', key: 'é', code: 'Digit2', text: 'é' });
    await cdp.send('Input.dispatchKeyEvent', { type: 'keyUp', key: 'é', code: 'Digit2' });
    await cdp.detach();
    // A key held down: the browser repeats it (keydown with repeat), and each repeat types it once more on the
    // desktop, never the X server's own autorepeat (which a late key-up would let run on).
    await page.keyboard.down('x');
    await page.keyboard.down('x');
    await page.keyboard.up('x');
    const typed = `${SECRET}éxx`;
    await until(
      'the page seeing the whole password',
      () => web.requests.some((r) => r.path === '/seen' && r.body === `value:${typed}`),
      {
        timeoutMs: 30_000,
        seen: () =>
          web.requests
            .filter((r) => r.path === '/seen')
            .slice(-3)
            .map((r) => r.body),
      },
    );
    assert.ok(!order.some((o) => o === 'batch_result:after' || o.startsWith('tool_event:after')), order.join(' '));

    // Hand back, with a note.
    await page.check('#handback-resolved');
    await page.fill('#handback-note', NOTE);
    await page.click('#handback-button');
    const ended = await agent.next(isTakeover('ended'));
    assert.equal(ended.outcome, 'resolved');
    assert.equal(ended.note, NOTE);
    assert.equal(ended.request_id, ack.request_id);
    assert.equal(ended.activity?.typed_characters, typed.length);
    assert.ok((ended.activity?.clicks ?? 0) >= 1);
    await page.locator('#takeover-ended').waitFor({ state: 'visible' });
    await until('ffmpeg taking frames again', async () =>
      /\) [RS] /.test(await readFile(`/proc/${ffmpeg}/stat`, 'latin1')),
    );

    // Now the waiting batch runs.
    const result = await agent.next((m): m is BatchResult => m.type === 'batch_result' && m.batch_id === 'after');
    assert.equal(result.failures.length, 0);
    assert.ok(order.indexOf('takeover:ended') < order.findIndex((o) => o.startsWith('tool_event:after')));
    // A browser call after the takeover: its trace step snapshots the page, field and all.
    const read = await agent.batch('read', [browserUse('read_page', {})]);
    assert.equal(read.result.failures.length, 0);

    // What the person typed is in no frame the agent got, no log line and no file of the recording.
    assert.ok(!JSON.stringify([agent.messages, ended, result, read.result]).includes(SECRET));
    agent.close();
    const folder = await until(
      'the recording finished (summary.json written)',
      async () => {
        const files = await filesUnder(recordings).catch(() => []);
        return files.some((f) => f.endsWith('summary.json')) ? files : undefined;
      },
      { timeoutMs: 60_000 },
    );
    const trajectory = await readFile(
      folder.find((f) => f.endsWith('trajectory.jsonl'))!,
      'utf8',
    );
    const lines = trajectory
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { type: string; event?: string; operator?: string; note?: string });
    assert.deepEqual(
      lines.filter((l) => l.type === 'takeover').map((l) => [l.event, l.operator]),
      [
        ['started', 'alice'],
        ['ended', 'alice'],
      ],
    );
    assert.ok(lines.some((l) => l.type === 'help_requested'));
    const vtt = await readFile(
      folder.find((f) => f.endsWith('video.vtt'))!,
      'utf8',
    );
    assert.match(vtt, /takeover by alice \(screen not recorded\)/);
    for (const file of folder) {
      if (file.endsWith('.mp4') || file.endsWith('.png') || file.endsWith('.jpg')) continue;
      const bytes = await readFile(file);
      assert.ok(!bytes.includes(SECRET), `${file} holds the typed text`);
      if (file.endsWith('.zip')) {
        const trace = await openTrace(file);
        for (const [name, data] of trace.entries)
          assert.ok(!data.includes(SECRET), `${file}:${name} holds the typed text`);
      }
    }
    const log = await readFile(d.logFile, 'utf8');
    assert.ok(!log.includes(SECRET), 'the typed text is in no log line');
  });
});
