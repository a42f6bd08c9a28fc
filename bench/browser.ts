/**
 * Browser figures through the daemon (Debian's Chromium, headless, driven by
 * Playwright inside the daemon), on a local page served on 127.0.0.1:
 *
 * - launch: the first `navigate` a fresh daemon runs (Chromium start, the
 *   session's context, the page load); one sample per daemon started;
 * - a new session's first `navigate` on a warm browser (context + tab + load);
 * - `navigate`, `left_click` (coordinate target) and `screenshot` (the
 *   daemon's format, the 1280x800 viewport) as one-call batches.
 *
 * Section `browser` (below; alone with BENCH_ONLY=browser): `left_click`
 * beside Playwright's own click, and fresh daemons' start and first calls.
 */
import { performance } from 'node:perf_hooks';
import { chromium } from 'playwright';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ToolUse } from '../src/base/protocol.ts';
import { CHROMIUM_PATH } from '../testkit/chromium.ts';
import { startTestDisplay } from '../testkit/display.ts';
import { startWebServer, type WebServer } from '../testkit/web.ts';
import { ensureBuilt } from '../testkit/build.ts';
import { imageBytes, nextId, toolUse } from './client.ts';
import { startDaemonProcess, type DaemonProcess } from './daemon-process.ts';
import { figure, interleave, ITERATIONS, mean, positiveInt, progress, timeLoop, type Figure } from './stats.ts';

const PAGE = '<!doctype html><title>bench</title><button id="b" style="width:400px;height:200px">click me</button>';

export async function withWebPage<T>(fn: (url: string) => Promise<T>): Promise<T> {
  const web: WebServer = await startWebServer();
  try {
    web.route('/', PAGE);
    return await fn(`${web.origin}/`);
  } finally {
    await web.close();
  }
}

const browser = (name: string, input: Record<string, unknown> = {}): ToolUse => toolUse('browser', name, input);

/** Milliseconds of the first browser call of a fresh daemon: Chromium's launch, a context, a page load. */
export async function launchSample(daemon: DaemonProcess, url: string): Promise<number> {
  const client = await daemon.connect();
  try {
    return (await client.batch(nextId('launch'), [browser('navigate', { url })])).ms;
  } finally {
    client.close();
  }
}

export function launchFigure(samples: readonly number[]): Figure {
  return figure('browser.launch', 'browser: launch + first navigate (fresh daemon)', samples, {
    note: 'one sample per daemon started with a browser (PNG and JPEG, 1280x800)',
  });
}

/** Per-call browser figures on a daemon whose browser is already running. */
export async function browserFigures(daemon: DaemonProcess, url: string): Promise<Figure[]> {
  const sessions = 3;
  // Half the usual iterations (at least 10): browser calls are slow, and the run must stay under three minutes.
  const iterations = Math.max(10, Math.round(ITERATIONS / 2));
  const newSession = await timeLoop(
    async () => {
      const client = await daemon.connect();
      try {
        return (await client.batch(nextId('b'), [browser('navigate', { url })])).ms;
      } finally {
        client.close();
      }
    },
    sessions,
    1,
  );
  const client = await daemon.connect();
  try {
    await client.batch(nextId('b'), [browser('navigate', { url })]);
    const perCall = async (id: string, name: string, make: () => ToolUse[]): Promise<Figure> => {
      const sent: number[] = [];
      let image = 0;
      const times = await timeLoop(async () => {
        await client.paceFor(1);
        const reply = await client.batch(nextId('b'), make());
        sent.push(reply.bytes);
        image = imageBytes(reply.message);
        return reply.ms;
      }, iterations);
      return figure(id, name, times, { sent_bytes: mean(sent), ...(image ? { image_bytes: image } : {}) });
    };
    return [
      figure('browser.session', 'browser: new session, first navigate (warm browser)', newSession),
      await perCall('browser.navigate', 'browser: navigate (local page)', () => [browser('navigate', { url })]),
      await perCall('browser.click', 'browser: left_click (coordinate)', () => [
        browser('left_click', { target: { type: 'coordinate', x: 100, y: 100 } }),
      ]),
      await perCall('browser.screenshot', 'browser: screenshot png 1280x800 viewport', () => [browser('screenshot')]),
    ];
  } finally {
    client.close();
  }
}

// ---------------------------------------------------------------------------
// Section `browser` (issue 16, items 4 and 5): BENCH_ONLY=browser runs it alone.

/** Fresh daemons started for the start figures (each gives one sample of each first call). */
const START_SAMPLES = positiveInt(process.env.BENCH_START_SAMPLES, 6);
const READY_POLL_MS = 10;
const READY_TIMEOUT_MS = 60_000;

/** Polls `/readyz` of the daemon at `wsUrl` until it answers 200. */
async function untilReady(wsUrl: string): Promise<void> {
  const { port } = new URL(wsUrl);
  const deadline = performance.now() + READY_TIMEOUT_MS;
  let last = '';
  while (performance.now() < deadline) {
    const r = await fetch(`http://127.0.0.1:${port}/readyz`).catch((err: unknown) => String(err));
    if (typeof r !== 'string' && r.status === 200) return;
    last = typeof r === 'string' ? r : `${r.status} ${await r.text()}`;
    await sleep(READY_POLL_MS);
  }
  throw new Error(`the daemon was not ready within ${READY_TIMEOUT_MS / 1000} s: ${last}`);
}

/** A new session (connection) and its first batch, timed together. */
async function firstOfSession(daemon: DaemonProcess, use: ToolUse): Promise<number> {
  const t0 = performance.now();
  const client = await daemon.connect();
  try {
    await client.batch(nextId('first'), [use]);
    return performance.now() - t0;
  } finally {
    client.close();
  }
}

/**
 * Fresh daemons, started as an operator starts one (its own process, DISPLAY
 * given, so one shared desktop; `--browser headless`): the time to its
 * "listening" line and to `/readyz` 200, then, from ready, the first browser
 * call (a new session's `navigate`) and the first computer call (a new
 * session's `screenshot`), each first in turn on every other daemon; then the
 * same calls warm: a second session's first `navigate` (the browser running),
 * a `navigate` and a `screenshot` in a session that already made them.
 */
async function startFigures(display: string, url: string): Promise<Figure[]> {
  const t = {
    listening: [] as number[],
    ready: [] as number[],
    firstBrowser: [] as number[],
    firstComputer: [] as number[],
    sessionWarm: [] as number[],
    navigateWarm: [] as number[],
    screenshotWarm: [] as number[],
  };
  const navigate = (): ToolUse => browser('navigate', { url });
  const screenshot = (): ToolUse => toolUse('computer', 'screenshot');
  await ensureBuilt(); // before the first sample's clock: the daemons run dist/
  for (let i = 0; i < START_SAMPLES; i++) {
    progress(`browser: fresh daemon ${i + 1}/${START_SAMPLES}`);
    const t0 = performance.now();
    const daemon = await startDaemonProcess({ display, format: 'png', browser: 'headless', waitForWorker: false });
    try {
      t.listening.push(performance.now() - t0);
      await untilReady(daemon.url);
      t.ready.push(performance.now() - t0);
      if (i % 2 === 0) {
        t.firstBrowser.push(await firstOfSession(daemon, navigate()));
        await firstOfSession(daemon, screenshot());
      } else {
        t.firstComputer.push(await firstOfSession(daemon, screenshot()));
        t.firstBrowser.push(await firstOfSession(daemon, navigate()));
      }
      t.sessionWarm.push(await firstOfSession(daemon, navigate()));
      const client = await daemon.connect();
      try {
        await client.batch(nextId('b'), [navigate()]);
        for (let k = 0; k < 3; k++) t.navigateWarm.push((await client.batch(nextId('b'), [navigate()])).ms);
        await client.batch(nextId('c'), [screenshot()]);
        for (let k = 0; k < 3; k++) t.screenshotWarm.push((await client.batch(nextId('c'), [screenshot()])).ms);
      } finally {
        client.close();
      }
    } finally {
      await daemon.stop();
    }
  }
  const note = `${START_SAMPLES} fresh daemons (1280x800 png, --browser headless, DISPLAY given)`;
  return [
    figure('bstart.listening', 'start: process spawned → "listening" line', t.listening, { note }),
    figure('bstart.ready', 'start: process spawned → /readyz 200', t.ready, { note }),
    figure('bstart.first-browser', 'start: from ready, first browser call (new session, navigate)', t.firstBrowser, {
      note,
    }),
    figure(
      'bstart.first-computer',
      'start: from ready, first computer call (new session, screenshot)',
      t.firstComputer,
      {
        note: `${note}; only the daemons where it came first`,
      },
    ),
    figure('bstart.session-warm', 'warm: a new session, first navigate (browser running)', t.sessionWarm, { note }),
    figure('bstart.navigate-warm', 'warm: navigate in a session that navigated before', t.navigateWarm, { note }),
    figure('bstart.screenshot-warm', 'warm: screenshot in a session that took one before', t.screenshotWarm, { note }),
  ];
}

/**
 * Our one-call `left_click` batch at a coordinate beside Playwright's own
 * `page.mouse.click(x, y)` in this process on the same page in the same
 * Chromium (Debian's, headless, 1280x800 viewport), interleaved run by run.
 */
async function clickFigures(display: string, url: string): Promise<Figure[]> {
  const daemon = await startDaemonProcess({ display, format: 'png', browser: 'headless' });
  const own = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true });
  try {
    const page = await own.newPage({ viewport: { width: 1280, height: 800 } });
    await page.goto(url);
    const client = await daemon.connect();
    try {
      await client.batch(nextId('b'), [browser('navigate', { url })]);
      const click = (): ToolUse => browser('left_click', { target: { type: 'coordinate', x: 100, y: 100 } });
      const times = await interleave({
        ours: async () => {
          await client.paceFor(1);
          return (await client.batch(nextId('b'), [click()])).ms;
        },
        playwright: async () => {
          const t0 = performance.now();
          await page.mouse.click(100, 100);
          return performance.now() - t0;
        },
      });
      return [
        figure('bclick.ours', 'browser: left_click (coordinate), one-call batch', times.ours),
        figure('bclick.playwright', "browser: Playwright's page.mouse.click, in the bench process", times.playwright),
      ];
    } finally {
      client.close();
    }
  } finally {
    await own.close();
    await daemon.stop();
  }
}

/** Section `browser`: the start figures and the click beside Playwright's own, on a display of its own. */
export async function browserSection(): Promise<Figure[]> {
  const display = await startTestDisplay({ width: 1280, height: 800, windowManager: false });
  try {
    return await withWebPage(async (url) => {
      progress('browser: left_click beside Playwright');
      const click = await clickFigures(display.display, url);
      return [...click, ...(await startFigures(display.display, url))];
    });
  } finally {
    await display.stop();
  }
}
