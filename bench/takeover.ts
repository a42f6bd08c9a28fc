/**
 * Human takeover (issue 18, docs/VIEWER.md "Takeover"): what a person in the
 * live viewer waits for, and what the daemon's VNC path costs, measured the
 * way an operator uses it.
 *
 * Set-up: a daemon process (bench/daemon-process.ts, `--allow-takeover`,
 * `--browser headful`, JPEG screenshots) on a 1280x800 Xvfb of its own, given
 * as DISPLAY, so one shared desktop; an agent session on it that navigates
 * to a page served here on 127.0.0.1 whose whole window flips between black
 * and white on every mousedown and every keydown (one big repaint per input).
 * The operator's screen is a second Xvfb with a kiosk Chromium showing the
 * viewer (testkit/chromium.ts); the desktop is taken through the page's
 * own UI ("Take control"), as in test/viewer-takeover.test.ts.
 *
 * Measured:
 * - take: from the click on "Take control" (the click's event.timeStamp) to
 *   the page showing noVNC connected, in the viewer page; beside it x11vnc's
 *   own start as the daemon logs it ("vnc server started", ms);
 * - input to photon, in the viewer page (VIEWER_SCRIPT): a capture-phase
 *   mousedown/keydown listener on its document stamps the input
 *   (event.timeStamp); the pixel of the noVNC canvas at a fixed point is read
 *   every animation frame (requestAnimationFrame + getImageData of 1 px)
 *   until it flips: input to photon. Without rAF's quantisation, the time
 *   noVNC drew it (its draw onto the canvas, wrapped: a tight loop of tasks
 *   polling the pixel was tried first, and on this 2-core machine it slowed
 *   noVNC down more than it took out: 56–193 ms against 63–127 ms with rAF).
 *   The desktop's own screen (Xvfb's framebuffer file) is polled here every
 *   millisecond, and noVNC's socket messages are stamped in the page, which
 *   splits each trial into: the desktop's page repainted, the update's first
 *   and last message at the viewer, drawn, shown. Mouse (page.mouse.click on
 *   the canvas) and key (page.keyboard.press) interleaved, on the plain flip
 *   and on a page of text that inverts (x11vnc then encodes a screen of
 *   text, not a solid fill);
 * - CPU (share of one core, /proc utime + stime) of x11vnc, the daemon (its
 *   VNC bridge), and the desktop's and the viewer's Chromium, while held and
 *   still, and while the page flips every frame; x11vnc's RSS;
 * - the alternative, the daemon's own input path and a frame stream, before
 *   the take: a one-call `left_click` batch to the desktop's screen flipping,
 *   a one-call JPEG `screenshot` batch of the same display, the capture + JPEG
 *   encode alone (bench/floor.ts, the desktop worker's own pipeline), and the
 *   JPEG's decode and draw in the viewer page, from which the lowest latency
 *   such a stream could have is computed.
 *
 * Every process it starts (two Xvfb, the kiosk Chromium, the daemon and so
 * its x11vnc, the floor child) is stopped by its pid in a `finally`, also
 * when the run fails. `BENCH_ONLY=takeover` runs this section alone.
 *
 * This file runs the section; its pages are bench/takeover-pages.ts, what it
 * sees of the desktop's screen and drives of the viewer
 * bench/takeover-screen.ts, its report and table bench/takeover-report.ts.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Page } from 'playwright';
import type { BatchResult } from '../src/base/protocol.ts';
import { processCpuSeconds } from '../src/recording/video.ts';
import { newLogDir } from '../testkit/artifacts.ts';
import { launchKioskChromium } from '../testkit/chromium.ts';
import { startTestDisplay } from '../testkit/display.ts';
import { descendants } from '../testkit/faults.ts';
import { until } from '../testkit/wait.ts';
import { startWebServer } from '../testkit/web.ts';
import { nextId, toolUse, type BenchClient } from './client.ts';
import { BENCH_TOKEN, startDaemonProcess } from './daemon-process.ts';
import { FloorChild } from './floor.ts';
import { figure, interleave, ITERATIONS, positiveInt, progress, round2, WARMUP, type Figure } from './stats.ts';
import { DESKTOP, FLIP_PAGE, FLIP_THRESHOLD, VIEWER_SCRIPT } from './takeover-pages.ts';
import {
  ON,
  series,
  seriesFigures,
  TARGET_MS,
  type CpuWindow,
  type FrameStream,
  type Input,
  type LatencySeries,
  type PageKind,
  type TakeoverReport,
  type TrialTimes,
} from './takeover-report.ts';
import {
  clockOffset,
  DesktopScreen,
  epochNow,
  findProbe,
  handBack,
  inPage,
  MIDDLE,
  take,
  toggle,
  TRIAL_TIMEOUT_MS,
  type Viewer,
} from './takeover-screen.ts';

const OPERATOR_SCREEN = { width: 1280, height: 900 };
/** Takes measured (each but the last handed back); the last stays held for the rest. */
const TAKES = positiveInt(process.env.BENCH_TAKEOVER_TAKES, 5);
/** Length of each CPU window (still, flipping). */
const CPU_WINDOW_MS = positiveInt(process.env.BENCH_TAKEOVER_CPU_MS, 10_000);
/**
 * A random pause before each input, up to this: x11vnc polls the screen every
 * 10 ms (src/takeover/vnc-server.ts LATENCY_ARGS) and the viewer draws every 16.7 ms;
 * inputs sent in lock-step with either would sample one phase of them only.
 */
const JITTER_MS = 40;

/** `screenshot`'s image, as the daemon sent it (base64). */
function imageOf(result: BatchResult): string {
  for (const r of result.tool_results) {
    for (const block of r.content) if (block.type === 'image') return block.source.data;
  }
  throw new Error('the screenshot batch returned no image');
}

function mib(bytes: number): number {
  return round2(bytes / 1024 ** 2);
}

async function statusBytes(pid: number, field: 'VmRSS' | 'VmHWM'): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(new RegExp(`^${field}:\\s+(\\d+)\\s+kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
}

const isChromium = (argv: string[]): boolean => /(^|\/)chromium(\s|$)/.test(argv[0] ?? '');

/** The Chromium processes of the desktop (under the daemon) and of the viewer (under this process, not the daemon). */
async function chromiumPids(daemonPid: number): Promise<{ desktop: number[]; viewer: number[] }> {
  const desktop = (await descendants(daemonPid)).filter((p) => isChromium(p.argv)).map((p) => p.pid);
  const viewer = (await descendants(process.pid))
    .filter((p) => isChromium(p.argv) && !desktop.includes(p.pid))
    .map((p) => p.pid);
  return { desktop, viewer };
}

/** CPU seconds of each pid (0 for one that is gone). */
const cpuOf = (pids: number[]): number[] => pids.map((pid) => processCpuSeconds(pid) ?? 0);
const percent = (a: number[], b: number[], seconds: number): number =>
  round2(((b.reduce((n, v) => n + v, 0) - a.reduce((n, v) => n + v, 0)) / seconds) * 100);

async function x11vncOf(daemonPid: number): Promise<number | undefined> {
  return (await descendants(daemonPid)).find((p) => /(^|\/)x11vnc$/.test(p.argv[0] ?? ''))?.pid;
}

/** x11vnc's start times (ms) from the daemon's "vnc server started" log lines. */
async function loggedVncStarts(logFile: string | undefined): Promise<number[]> {
  if (!logFile) return [];
  const text = await readFile(logFile, 'utf8').catch(() => '');
  const out: number[] = [];
  for (const line of text.split('\n')) {
    if (!line.includes('vnc server started')) continue;
    try {
      const entry = JSON.parse(line) as { msg?: string; ms?: number };
      if (entry.msg === 'vnc server started' && typeof entry.ms === 'number') out.push(entry.ms);
    } catch {
      // not a JSON line
    }
  }
  return out;
}

export async function takeoverSection(): Promise<TakeoverReport> {
  const stops: Array<() => Promise<void>> = [];
  const web = await startWebServer();
  stops.push(() => web.close());
  try {
    web.route('/flip', FLIP_PAGE);
    const display = await startTestDisplay(DESKTOP);
    stops.push(() => display.stop());
    if (!display.framebuffer) throw new Error('the bench display has no framebuffer file (Xvfb -fbdir)');
    const screen = DesktopScreen.open(display.framebuffer);
    stops.push(async () => screen.close());
    progress('takeover: starting a daemon (--allow-takeover, headful browser, jpeg)');
    const daemon = await startDaemonProcess({
      display: display.display,
      framebuffer: display.framebuffer,
      format: 'jpeg',
      browser: 'headful',
      extraArgs: ['--allow-takeover'],
      keepLog: true,
    });
    stops.push(() => daemon.stop());
    const agent = await daemon.connect();
    stops.push(async () => agent.close());
    const navigate = async (path: string): Promise<void> => {
      await agent.paceFor(1);
      await agent.batch(nextId('tk'), [toolUse('browser', 'navigate', { url: `${web.origin}${path}` })]);
    };

    const operatorScreen = await startTestDisplay(OPERATOR_SCREEN);
    stops.push(() => operatorScreen.stop());
    const kiosk = await launchKioskChromium({
      display: operatorScreen.display,
      ...OPERATOR_SCREEN,
      url: 'about:blank',
    });
    stops.push(() => kiosk.close());
    const page = kiosk.page;
    const viewerUrl = `${daemon.url.replace(/^ws/, 'http').replace(/\/v1$/, '')}/viewer#token=${BENCH_TOKEN}`;
    await page.goto(viewerUrl);
    await page.locator('#takeover:not([hidden])').waitFor({ timeout: 30_000 });
    const node = page.locator('#desktops .desktop[data-desktop]').first();
    await node.waitFor({ timeout: 30_000 });
    const desktop = (await node.getAttribute('data-desktop')) ?? '';
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(desktop)) throw new Error(`unexpected desktop id ${JSON.stringify(desktop)}`);
    await page.fill('#takeover-name', 'bench');
    await inPage(page, VIEWER_SCRIPT);
    await navigate('/flip');
    await findProbe(screen, agent);
    const probe = screen.probe;
    const v: Viewer = { page, desktop, probe };
    const clock = await clockOffset(page);
    const pageOrigin = await inPage<number>(page, 'performance.timeOrigin');

    // The alternative first, while the agent has the desktop (a held desktop runs no batch of the agent's).
    const floor = await FloorChild.start(display, DESKTOP);
    stops.push(() => floor.stop());
    const frameStream: FrameStream[] = [];
    const altFigures: Figure[] = [];
    for (const kind of ['text', 'solid'] as const) {
      await navigate(kind === 'text' ? '/flip?text=1' : '/flip');
      const alt = await alternative(kind, agent, floor, page, screen);
      altFigures.push(...alt.figures);
      frameStream.push(alt.stream);
    }
    await floor.stop();

    // The agent's page is the plain one now; the person takes the desktop.
    const takeMs: number[] = [];
    for (let i = 0; i < TAKES; i++) {
      progress(`takeover: take ${i + 1}/${TAKES}`);
      takeMs.push(await take(v));
      if (i < TAKES - 1) await handBack(v);
    }
    const x11vnc = await until('x11vnc running under the daemon', () => x11vncOf(daemon.pid), { timeoutMs: 10_000 });

    const canvas = page.locator('#vnc-screen canvas').first();
    await canvas.scrollIntoViewIfNeeded();
    const size = await inPage<{ width: number; height: number }>(page, 'window.__lat.size()');
    if (size.width !== DESKTOP.width || size.height !== DESKTOP.height) {
      throw new Error(
        `the noVNC canvas is ${size.width}x${size.height}, not the desktop's ${DESKTOP.width}x${DESKTOP.height}`,
      );
    }
    const box = await canvas.boundingBox();
    if (!box) throw new Error('the noVNC canvas has no box on the page');
    // The middle of the desktop: on the page (both pages), clear of the browser's toolbar.
    const at = { x: box.x + box.width / 2, y: box.y + box.height / 2 };
    /**
     * Waits until the viewer shows what the desktop's screen shows at the probe. Every input is a
     * trial that ends once the viewer showed its flip, so no flip is on its way when the next begins:
     * one that were would be lost to x11vnc if the next input flipped the screen back before its poll.
     */
    const settled = (): Promise<boolean> =>
      until(
        "the viewer's canvas to show the desktop's screen",
        async () => {
          const shown = await inPage<number>(page, `window.__lat.pixel(${probe.x}, ${probe.y})`);
          return Math.abs(shown - screen.read()) <= FLIP_THRESHOLD;
        },
        { timeoutMs: 10_000, intervalMs: 5, seen: () => screen.read() },
      );
    const trial =
      (input: Input, out: TrialTimes[]) =>
      async (i: number): Promise<number> => {
        await settled();
        await sleep(Math.random() * JITTER_MS);
        await inPage(page, `window.__lat.arm(${JSON.stringify(input)}, ${probe.x}, ${probe.y}, ${TRIAL_TIMEOUT_MS})`);
        const before = screen.read();
        const flipped = screen.change(before, `the viewer's ${input}`);
        flipped.catch(() => undefined);
        if (input === 'mousedown') await page.mouse.click(at.x, at.y);
        else await page.keyboard.press('a');
        type Seen = {
          input: number;
          drawn: number;
          frame: number;
          messages: Array<{ t: number; bytes: number; ms: number }>;
        };
        const r = await inPage<Seen>(page, 'window.__lat.wait()').catch(async (err: Error) => {
          const now = screen.read();
          const says = await page.textContent('#vnc-status').catch(() => null);
          const shot = join(newLogDir('takeover'), 'viewer.png');
          await page.screenshot({ path: shot }).catch(() => undefined);
          throw new Error(
            `${err.message}; the desktop's own screen ${Math.abs(now - before) > FLIP_THRESHOLD ? 'did' : 'did not'} ` +
              `flip (${before} → ${now}); the viewer says ${JSON.stringify(says)}; its page: ${shot}`,
          );
        });
        // The screen's flip, on the page's time line.
        const screenAt = (await flipped) + clock.offset - pageOrigin;
        // The update: what came on noVNC's socket from the screen's flip to the draw (x11vnc sends nothing
        // before it has seen the flip); the last of it is the message whose handling drew the flip.
        const update = r.messages.filter((m) => m.t >= screenAt && m.t <= r.drawn);
        const arrivedAt = update.at(-1)?.t ?? r.drawn;
        const firstAt = update[0]?.t ?? arrivedAt;
        const times: TrialTimes = {
          screen: screenAt - r.input,
          first: firstAt - r.input,
          arrived: arrivedAt - r.input,
          drawn: r.drawn - r.input,
          handled: update.reduce((n, m) => n + m.ms, 0),
          photon: r.frame - r.input,
          bytes: update.reduce((n, m) => n + m.bytes, 0),
        };
        if (i >= WARMUP) out.push(times);
        return times.photon;
      };
    const block = async (kind: PageKind): Promise<LatencySeries[]> => {
      progress(`takeover: input to photon, ${ON[kind]} (${ITERATIONS} each after ${WARMUP} warm-up, interleaved)`);
      const clicks: TrialTimes[] = [];
      const keys: TrialTimes[] = [];
      await interleave({ click: trial('mousedown', clicks), key: trial('keydown', keys) });
      return [series('mousedown', kind, clicks), series('keydown', kind, keys)];
    };
    // A first click, untimed and waited for like any trial, gives the desktop's page the keyboard focus.
    await trial('mousedown', [])(-1);
    const latency = [...(await block('solid'))];
    await toggle(v, 't', 'the text page on the desktop', (c) => c > 2);
    latency.push(...(await block('text')));
    await toggle(v, 't', 'the plain page back on the desktop', (c) => c === 1);

    // CPU: held and still, then flipping on every frame (plain, then text).
    const cpuWindow = async (what: string): Promise<CpuWindow> => {
      progress(`takeover: CPU over ${CPU_WINDOW_MS / 1000} s, ${what}`);
      const browsers = await chromiumPids(daemon.pid);
      const x0 = processCpuSeconds(x11vnc);
      const d0 = processCpuSeconds(daemon.pid);
      const desktop0 = cpuOf(browsers.desktop);
      const viewer0 = cpuOf(browsers.viewer);
      const t0 = performance.now();
      const draws = await inPage<number>(page, `window.__lat.draws(${CPU_WINDOW_MS})`);
      const seconds = (performance.now() - t0) / 1000;
      const x1 = processCpuSeconds(x11vnc);
      const d1 = processCpuSeconds(daemon.pid);
      const desktop1 = cpuOf(browsers.desktop);
      const viewer1 = cpuOf(browsers.viewer);
      if (x0 === undefined || x1 === undefined) throw new Error('x11vnc exited while its CPU was measured');
      return {
        what,
        seconds: round2(seconds),
        x11vnc_percent: round2(((x1 - x0) / seconds) * 100),
        daemon_percent: d0 !== undefined && d1 !== undefined ? round2(((d1 - d0) / seconds) * 100) : NaN,
        desktop_chromium_percent: percent(desktop0, desktop1, seconds),
        viewer_chromium_percent: percent(viewer0, viewer1, seconds),
        viewer_draws_per_s: round2(draws / seconds),
      };
    };
    const flipping = async (what: string): Promise<CpuWindow> => {
      await page.keyboard.press('p');
      try {
        await until('the desktop flipping on every frame, seen in the viewer', async () => {
          return (await inPage<number>(page, 'window.__lat.draws(300)')) > 2;
        });
        return await cpuWindow(what);
      } finally {
        await page.keyboard.press('p');
      }
    };
    const cpu = [await cpuWindow('held, the page still')];
    const rssStill = await statusBytes(x11vnc, 'VmRSS');
    cpu.push(await flipping('the plain page flipping every frame'));
    await toggle(v, 't', 'the text page on the desktop', (c) => c > 2);
    cpu.push(await flipping('the text page inverting every frame'));
    const rssAfter = await statusBytes(x11vnc, 'VmRSS');
    const rssPeak = await statusBytes(x11vnc, 'VmHWM');

    await handBack(v);
    const x11vncStart = await loggedVncStarts(daemon.logFile);

    const figures: Figure[] = [
      ...latency.flatMap(seriesFigures),
      figure('takeover.take', 'takeover: "Take control" click → noVNC connected', takeMs, {
        note: `${TAKES} takes, each but the last handed back`,
      }),
      figure('takeover.x11vnc-start', '  x11vnc start (the daemon\'s "vnc server started" ms)', x11vncStart),
      ...altFigures,
    ];
    for (const f of frameStream) {
      f.vnc_drawn_ms = latency.find((s) => s.id === `takeover.click.${f.page}`)?.drawn.median_ms ?? NaN;
    }
    return {
      figures,
      latency,
      take_ms: takeMs.map(round2),
      x11vnc_start_ms: x11vncStart,
      cpu,
      x11vnc_rss_mib: { still: mib(rssStill), after_flipping: mib(rssAfter), peak: mib(rssPeak) },
      frame_stream: frameStream,
      clock,
      target_ms: TARGET_MS,
    };
  } finally {
    for (const stop of stops.reverse()) {
      await stop().catch((err: unknown) => progress(`takeover: a stop failed: ${String(err)}`));
    }
  }
}

/**
 * The daemon's own path on one page, interleaved: a one-call `left_click`
 * batch at the middle of the desktop, timed from its send to the desktop's
 * screen flipping (the daemon's input path and the page's repaint); a
 * one-call JPEG `screenshot` batch (capture, encode, base64, the socket); the
 * capture and encode alone in the floor child (the worker's own pipeline:
 * framebuffer read, BGRX→RGB, sharp's JPEG at the daemon's quality). Then the
 * JPEG decoded and drawn in the viewer page.
 */
async function alternative(
  kind: PageKind,
  agent: BenchClient,
  floor: FloorChild,
  page: Page,
  screen: DesktopScreen,
): Promise<{ figures: Figure[]; stream: FrameStream }> {
  progress(`takeover: the daemon's own path, ${ON[kind]} (left_click, JPEG screenshot, capture + encode)`);
  floor.samples.delete('jpeg');
  let jpeg = '';
  const t = await interleave({
    click: async () => {
      await agent.paceFor(1);
      const flipped = screen.change(screen.read(), 'a left_click batch');
      flipped.catch(() => undefined);
      const t0 = epochNow();
      await agent.batch(nextId('tk'), [toolUse('computer', 'left_click', { coordinate: [MIDDLE.x, MIDDLE.y] })]);
      return (await flipped) - t0;
    },
    shot: async () => {
      await agent.paceFor(1);
      const reply = await agent.batch(nextId('tk'), [toolUse('computer', 'screenshot')]);
      jpeg = imageOf(reply.message);
      return reply.ms;
    },
    capture: (i) => floor.run('jpeg', i >= WARMUP),
  });
  const jpegBytes = Buffer.byteLength(jpeg, 'base64');
  const encode = (floor.samples.get('jpeg') ?? []).map((s) => s.encode);
  await inPage(page, `window.__jpeg = ${JSON.stringify(jpeg)}`);
  const decode = (await inPage<number[]>(page, `window.__lat.decode(${WARMUP + ITERATIONS})`)).slice(WARMUP);
  await inPage(page, 'window.__jpeg = undefined');
  const id = `takeover.alt.${kind}`;
  const figures = [
    figure(`${id}.click`, `alternative, ${ON[kind]}: left_click batch → the desktop's screen flipped`, t.click),
    figure(`${id}.shot`, '  screenshot jpeg 1280x800 one-call batch', t.shot, { image_bytes: jpegBytes }),
    figure(`${id}.capture`, '  capture + JPEG encode + base64 alone (floor child)', t.capture),
    figure(`${id}.encode`, '    of which the JPEG q80 encode (sharp)', encode),
    figure(`${id}.decode`, '  JPEG decode + draw in the viewer page (createImageBitmap)', decode),
  ];
  const m = (suffix: string): number => figures.find((f) => f.id === `${id}.${suffix}`)!.median_ms;
  const stream: FrameStream = {
    page: kind,
    click_to_screen_ms: m('click'),
    capture_encode_ms: m('capture'),
    half_interval_ms: round2(m('capture') / 2),
    capture_encode_transfer_ms: m('shot'),
    decode_ms: m('decode'),
    jpeg_bytes: jpegBytes,
    floor_ms: round2(m('click') + m('capture') / 2 + m('shot') + m('decode')),
    vnc_drawn_ms: NaN,
  };
  return { figures, stream };
}
