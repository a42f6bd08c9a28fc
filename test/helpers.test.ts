/**
 * The test helpers themselves: a private Xvfb + openbox, kiosk chromium on it
 * showing the event recorder page with page pixels = screen pixels, real input
 * through xdotool reaching the page, and nothing left running afterwards.
 * Runs twice, to prove start/stop leaves a clean slate.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, test } from 'node:test';
import { launchKioskChromium, pageGeometry } from '../testkit/chromium.ts';
import { displaySize, withDisplay } from '../testkit/display.ts';
import {
  elementRect,
  readEvents,
  resetEvents,
  startEventPageServer,
  waitForEvent,
  type EventPageServer,
  type RecordedEvent,
} from '../testkit/event-page.ts';

const WIDTH = 1024;
const HEIGHT = 768;

function run(command: string, args: string[], env?: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string }> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { env: env ?? process.env, timeout: 10_000 }, (err, stdout) => {
      if (err && typeof err.code !== 'number') reject(err);
      else resolve({ code: err ? (err.code as number) : 0, stdout });
    });
  });
}

/** Runs xdotool on `display`; `command` is split on spaces into its argument array (no shell). */
async function xdotool(display: string, command: string): Promise<void> {
  const { code } = await run('xdotool', command.split(' '), { ...process.env, DISPLAY: display });
  assert.equal(code, 0, `xdotool ${command} failed`);
}

async function xvfbPids(): Promise<number[]> {
  const { stdout } = await run('pgrep', ['-x', 'Xvfb']);
  return stdout.split('\n').filter(Boolean).map(Number);
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function clicks(events: RecordedEvent[]) {
  return events.filter((e) => e.type === 'click');
}

let server: EventPageServer;
before(async () => {
  server = await startEventPageServer();
});
after(() => server.close());

for (const round of [1, 2]) {
  test(`display + kiosk chromium + event page, round ${round}`, async (t) => {
    let pids: number[] = [];
    const startedAt = performance.now();
    await withDisplay({ width: WIDTH, height: HEIGHT }, async (d) => {
      t.diagnostic(`Xvfb + openbox ready in ${Math.round(performance.now() - startedAt)} ms`);
      pids = [d.pid, d.windowManagerPid ?? d.pid];
      assert.match(d.display, /^:\d+$/);
      assert.ok(d.windowManagerPid, 'openbox runs by default');
      assert.deepEqual(await displaySize(d.display), { width: WIDTH, height: HEIGHT });

      const launchedAt = performance.now();
      const kiosk = await launchKioskChromium({ display: d.display, width: WIDTH, height: HEIGHT, url: server.url });
      t.diagnostic(`kiosk chromium ready in ${Math.round(performance.now() - launchedAt)} ms`);
      try {
        const { page } = kiosk;
        const geometry = await pageGeometry(page);
        assert.equal(geometry.screenX, 0);
        assert.equal(geometry.screenY, 0);
        assert.equal(geometry.innerWidth, WIDTH);
        assert.equal(geometry.innerHeight, HEIGHT);
        assert.equal(geometry.devicePixelRatio, 1);
        assert.deepEqual(await elementRect(page, 'pad'), { x: 0, y: HEIGHT / 2, width: WIDTH, height: HEIGHT / 2 });

        // Real X pointer events land on the same CSS pixel, in both halves of the screen.
        for (const [x, y, target] of [
          [300, 200, 't'],
          [1000, 700, 'pad'],
        ] as const) {
          await resetEvents(page);
          await xdotool(d.display, `mousemove ${x} ${y} click 1`);
          const [click] = clicks(await waitForEvent(page, (e) => e.type === 'click'));
          assert.ok(click && click.type === 'click');
          assert.deepEqual(
            {
              target: click.target,
              clientX: click.clientX,
              clientY: click.clientY,
              screenX: click.screenX,
              screenY: click.screenY,
            },
            { target, clientX: x, clientY: y, screenX: x, screenY: y },
          );
        }

        // openbox with deskbatch's config does not swallow Alt+click, Alt+Tab or Ctrl+Alt+Left (the stock
        // config grabs all three).
        await resetEvents(page);
        await xdotool(d.display, 'mousemove 500 600 keydown alt click 1 key Tab keyup alt');
        await xdotool(d.display, 'key ctrl+alt+Left');
        const events = await waitForEvent(page, (e) => e.type === 'keydown' && e.key === 'ArrowLeft');
        assert.ok(
          events.some((e) => e.type === 'keydown' && e.key === 'ArrowLeft' && e.ctrlKey && e.altKey),
          JSON.stringify(events),
        );
        const altClick = clicks(events)[0];
        assert.ok(altClick && altClick.type === 'click' && altClick.altKey, JSON.stringify(events));
        assert.ok(
          events.some((e) => e.type === 'keydown' && e.key === 'Tab' && e.altKey),
          JSON.stringify(events),
        );

        // Keyboard input reaches the focused textarea.
        await resetEvents(page);
        await xdotool(d.display, 'mousemove 100 100 click 1 type hello');
        await waitForEvent(page, (e) => e.type === 'input' && e.value === 'hello');
        assert.equal((await readEvents(page)).filter((e) => e.type === 'keydown').length, 5);
      } finally {
        await kiosk.close();
      }
    });

    for (const pid of pids) assert.equal(isAlive(pid), false, `process ${pid} still runs after stop()`);
    const leaked = (await xvfbPids()).filter((pid) => pids.includes(pid));
    assert.deepEqual(leaked, [], 'pgrep -x Xvfb still lists our Xvfb');
  });
}
