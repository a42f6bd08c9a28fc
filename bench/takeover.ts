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
 * viewer (test/helpers/chromium.ts); the desktop is taken through the page's
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
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Page } from 'playwright';
import type { BatchResult } from '../src/protocol.ts';
import { processCpuSeconds } from '../src/recording/video.ts';
import { newLogDir } from '../test/helpers/artifacts.ts';
import { launchKioskChromium } from '../test/helpers/chromium.ts';
import { startTestDisplay } from '../test/helpers/display.ts';
import { descendants } from '../test/helpers/faults.ts';
import { until } from '../test/helpers/wait.ts';
import { startWebServer } from '../test/helpers/web.ts';
import { nextId, toolUse, type BenchClient } from './client.ts';
import { BENCH_TOKEN, startDaemonProcess } from './daemon-process.ts';
import { FloorChild } from './floor.ts';
import {
  figure,
  interleave,
  ITERATIONS,
  mean,
  median,
  percentile,
  positiveInt,
  progress,
  round2,
  WARMUP,
  type Figure,
} from './stats.ts';

const DESKTOP = { width: 1280, height: 800 };
const OPERATOR_SCREEN = { width: 1280, height: 900 };
/** Takes measured (each but the last handed back); the last stays held for the rest. */
const TAKES = positiveInt(process.env.BENCH_TAKEOVER_TAKES, 5);
/** Length of each CPU window (still, flipping). */
const CPU_WINDOW_MS = positiveInt(process.env.BENCH_TAKEOVER_CPU_MS, 10_000);
/** The target for input to photon on loopback. */
export const TARGET_MS = 100;
/** How long one input may take to show before the run fails (naming what it saw). */
const TRIAL_TIMEOUT_MS = 5_000;
/**
 * A random pause before each input, up to this: x11vnc polls the screen every
 * 10 ms (src/takeover/vnc-server.ts LATENCY_ARGS) and the viewer draws every 16.7 ms;
 * inputs sent in lock-step with either would sample one phase of them only.
 */
const JITTER_MS = 40;
/**
 * The row of the desktop the pixel read lies on (in desktop pixels, which are
 * the noVNC canvas's): below the browser's toolbar. Its x is found at run time
 * (findProbe): 20 px into the agent's page, whose window the window manager
 * places where it likes; the text page leaves its first 160 px blank, so the
 * pixel is plain black or white on both pages.
 */
const PROBE_Y = 600;
/** The middle of the desktop, where clicks go: on the page. */
const MIDDLE = { x: DESKTOP.width / 2, y: DESKTOP.height / 2 };
/** Black is 0, white 765 (R + G + B): a change of more than this is a flip. */
const FLIP_THRESHOLD = 300;

/**
 * The agent's page. Every mousedown and keydown (but `p` and `t`) flips the
 * whole window between black and white. `t` shows or hides a page of text
 * (monospace, 160 px from the left, not selectable) that inverts with the
 * rest; `?text=1` starts with it. `p` starts or stops flipping on every frame.
 */
const FLIP_PAGE = `<!doctype html><html><head><title>flip</title><style>
html { background: #000; color: #fff; height: 100%; }
html.w { background: #fff; color: #000; }
body { margin: 0; height: 100%; }
#text { display: none; position: fixed; left: 160px; top: 0; right: 0; bottom: 0; overflow: hidden;
  font: 13px/16px monospace; white-space: pre-wrap; word-break: break-all; user-select: none; }
#text b { color: #c33; } html.w #text b { color: #3cc; }
html.text #text { display: block; }
</style></head><body><div id="text"></div><script>
const root = document.documentElement;
const words = ['takeover', 'desktop', 'latency', 'photon', 'frame', 'x11vnc', 'noVNC', 'canvas', 'pointer', 'key'];
const text = document.getElementById('text');
let seed = 1;
for (let i = 0; i < 3000; i++) {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff;
  const word = words[seed % words.length];
  if (seed % 11 === 0) text.append(Object.assign(document.createElement('b'), { textContent: word }));
  else text.append(word);
  text.append(seed % 13 === 0 ? '\\n' : ' ');
}
if (location.search.includes('text=1')) root.classList.add('text');
let animating = false;
const flip = () => root.classList.toggle('w');
const loop = () => {
  if (!animating) return;
  flip();
  requestAnimationFrame(loop);
};
addEventListener('mousedown', flip, true);
addEventListener('keydown', (e) => {
  if (e.repeat) return;
  if (e.key === 'p') {
    animating = !animating;
    if (animating) requestAnimationFrame(loop);
  } else if (e.key === 't') {
    root.classList.toggle('text');
  } else {
    flip();
  }
}, true);
</script></body></html>`;

/**
 * Installed in the viewer page (a string: the page's CSP allows no eval, and
 * Playwright evaluates a string expression without one). `window.__takeTimer`
 * times a take; `window.__lat` arms one input-to-photon trial, counts the
 * updates noVNC draws over a window, and decodes a JPEG.
 *
 * A trial stamps three times in the page's clock: the input (a capture-phase
 * listener on the document: event.timeStamp), when noVNC drew the flip on its
 * canvas (its drawImage onto the visible canvas, one per update, wrapped for
 * the trial: the canvas is read right after each call), and the
 * first animation frame that shows it (requestAnimationFrame, the canvas
 * read each frame; the time is performance.now() in the callback, when the
 * renderer builds that frame: rAF's own timestamp is the frame's begin time,
 * which can be earlier than a draw that still made it into the frame). And
 * each message of noVNC's socket meanwhile (its setter of onmessage wrapped
 * before noVNC opens it): when its event ran, its size, and how long noVNC's
 * handler took with it (parsing and decoding, on the page's main thread).
 */
const VIEWER_SCRIPT = `(() => {
  if (window.__lat) return true;
  // Each message of noVNC's socket while a trial runs: when its event ran, its size, how long noVNC took with it.
  const messages = [];
  let recording = false;
  const onmessage = Object.getOwnPropertyDescriptor(WebSocket.prototype, 'onmessage');
  Object.defineProperty(WebSocket.prototype, 'onmessage', {
    configurable: true,
    enumerable: onmessage.enumerable,
    get() { return onmessage.get.call(this); },
    set(handler) {
      if (typeof handler !== 'function' || !this.url.includes('/viewer/vnc')) return onmessage.set.call(this, handler);
      onmessage.set.call(this, function (event) {
        if (!recording) return handler.call(this, event);
        const t = performance.now();
        try {
          return handler.call(this, event);
        } finally {
          messages.push({ t, bytes: event.data.byteLength || 0, ms: performance.now() - t });
        }
      });
    },
  });
  const status = document.getElementById('vnc-status');
  let clicked = null;
  let connected = null;
  document.addEventListener('click', (e) => {
    if (e.target instanceof Element && e.target.closest('.take-button')) {
      clicked = e.timeStamp;
      connected = null;
    }
  }, true);
  new MutationObserver(() => {
    if (clicked !== null && connected === null && /^Connected/.test(status.textContent || '')) connected = performance.now();
  }).observe(status, { childList: true, characterData: true, subtree: true });
  window.__takeTimer = {
    reset() { clicked = null; connected = null; },
    ms() { return clicked !== null && connected !== null ? connected - clicked : null; },
  };

  const canvas = () => {
    const c = document.querySelector('#vnc-screen canvas');
    if (!c) throw new Error('no noVNC canvas in #vnc-screen');
    return c;
  };
  const reader = (x, y) => {
    const ctx = canvas().getContext('2d');
    return () => {
      const d = ctx.getImageData(x, y, 1, 1).data;
      return d[0] + d[1] + d[2];
    };
  };
  let trial = null;
  window.__lat = {
    size() { const c = canvas(); return { width: c.width, height: c.height }; },
    pixel(x, y) { return reader(x, y)(); },
    /** Distinct colours in a w x h square at x, y: 1 on a plain page, many on the text page. */
    colours(x, y, w, h) {
      const d = canvas().getContext('2d').getImageData(x, y, w, h).data;
      const seen = new Set();
      for (let i = 0; i < d.length; i += 4) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      return seen.size;
    },
    arm(kind, x, y, timeoutMs) {
      const ctx = canvas().getContext('2d');
      const read = reader(x, y);
      const base = read();
      const flipped = () => Math.abs(read() - base) > ${FLIP_THRESHOLD};
      let input = null;
      let drawn = null;
      let stopped = false;
      let timer = 0;
      const onInput = (e) => { if (input === null) input = e.timeStamp; };
      const draw = ctx.drawImage;
      ctx.drawImage = function (...args) {
        draw.apply(this, args);
        if (input !== null && drawn === null && flipped()) drawn = performance.now();
      };
      messages.length = 0;
      recording = true;
      const stop = () => {
        recording = false;
        stopped = true;
        clearTimeout(timer);
        document.removeEventListener(kind, onInput, true);
        delete ctx.drawImage;
      };
      const done = new Promise((resolve, reject) => {
        timer = setTimeout(() => {
          stop();
          reject(new Error(input === null
            ? 'the viewer page saw no ' + kind + ' within ' + timeoutMs + ' ms'
            : 'the noVNC canvas at (' + x + ', ' + y + ') did not flip within ' + timeoutMs + ' ms of the ' + kind +
              ' (it reads ' + read() + ', it read ' + base + ')'));
        }, timeoutMs);
        const frame = () => {
          if (stopped) return;
          if (input === null || !flipped()) return void requestAnimationFrame(frame);
          const at = performance.now();
          stop();
          if (drawn === null) reject(new Error('the canvas flipped, but not in a drawImage of noVNC onto it'));
          else resolve({ input, drawn, frame: at, messages: messages.slice() });
        };
        requestAnimationFrame(frame);
      });
      done.catch(() => undefined);
      document.addEventListener(kind, onInput, true);
      trial = done;
      return base;
    },
    wait() { return trial; },
    /** How many updates noVNC drew on its canvas (its drawImage calls) over ms: no work added to the page. */
    draws(ms) {
      const ctx = canvas().getContext('2d');
      const draw = ctx.drawImage;
      let n = 0;
      ctx.drawImage = function (...args) {
        n++;
        return draw.apply(this, args);
      };
      return new Promise((resolve) => setTimeout(() => {
        delete ctx.drawImage;
        resolve(n);
      }, ms));
    },
    /** Times decoding window.__jpeg (base64) and drawing it, n times, as a frame stream's client would. */
    async decode(n) {
      const bytes = Uint8Array.from(atob(window.__jpeg), (c) => c.charCodeAt(0));
      const out = document.createElement('canvas');
      out.width = ${DESKTOP.width};
      out.height = ${DESKTOP.height};
      const ctx = out.getContext('2d');
      const times = [];
      for (let i = 0; i < n; i++) {
        const t0 = performance.now();
        const bitmap = await createImageBitmap(new Blob([bytes], { type: 'image/jpeg' }));
        ctx.drawImage(bitmap, 0, 0);
        ctx.getImageData(0, 0, 1, 1);
        times.push(performance.now() - t0);
        bitmap.close();
      }
      return times;
    },
  };
  return true;
})()`;

/** Now on the wall clock, in ms with a fraction: comparable with `performance.timeOrigin + t` in Chromium. */
const epochNow = (): number => performance.timeOrigin + performance.now();

/**
 * The desktop's own screen, read where Xvfb keeps it (its framebuffer file,
 * src/desktop/worker/screen.ts): one pixel (the probe), polled every
 * millisecond while a trial waits, to see when the desktop's page repainted.
 */
class DesktopScreen {
  private readonly pixel = Buffer.alloc(4);
  private probeAt = -1;
  probe = { x: -1, y: -1 };

  private constructor(
    private readonly fd: number,
    private readonly base: number,
    private readonly bytesPerLine: number,
    private readonly width: number,
  ) {}

  static open(path: string): DesktopScreen {
    const fd = openSync(path, 'r');
    try {
      const head = Buffer.alloc(100);
      if (readSync(fd, head, 0, 100, 0) < 100) throw new Error('the framebuffer file is short');
      const field = (i: number): number => head.readUInt32BE(4 * i);
      // XWD: header size (0), width (4), bits per pixel (11), bytes per line (12), colours (19, 12 bytes each).
      if (field(11) !== 32) throw new Error(`the framebuffer has ${field(11)} bits per pixel, not 32`);
      return new DesktopScreen(fd, field(0) + field(19) * 12, field(12), field(4));
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  setProbe(x: number, y: number): void {
    this.probe = { x, y };
    this.probeAt = this.base + y * this.bytesPerLine + x * 4;
  }

  /** B + G + R of the probe's pixel. */
  read(): number {
    readSync(this.fd, this.pixel, 0, 4, this.probeAt);
    return this.pixel[0]! + this.pixel[1]! + this.pixel[2]!;
  }

  /** B + G + R of every pixel of row `y`. */
  row(y: number): number[] {
    const buf = Buffer.alloc(this.width * 4);
    readSync(this.fd, buf, 0, buf.length, this.base + y * this.bytesPerLine);
    return Array.from({ length: this.width }, (_, x) => buf[4 * x]! + buf[4 * x + 1]! + buf[4 * x + 2]!);
  }

  /** The wall-clock time (epochNow) at which the probe was first seen flipped from `from`. */
  async change(from: number, what: string): Promise<number> {
    const deadline = performance.now() + TRIAL_TIMEOUT_MS;
    for (;;) {
      if (Math.abs(this.read() - from) > FLIP_THRESHOLD) return epochNow();
      if (performance.now() > deadline) {
        throw new Error(`the desktop's screen did not flip within ${TRIAL_TIMEOUT_MS} ms of ${what}`);
      }
      await sleep(1);
    }
  }

  close(): void {
    closeSync(this.fd);
  }
}

/**
 * Where the agent's page is on row PROBE_Y: the row is read, the agent clicks
 * the middle of the desktop (the page flips), and the row is read again; the
 * probe is 20 px into the first run of 40 pixels that flipped.
 */
async function findProbe(screen: DesktopScreen, agent: BenchClient): Promise<void> {
  const before = screen.row(PROBE_Y);
  await agent.batch(nextId('tk'), [toolUse('computer', 'left_click', { coordinate: [MIDDLE.x, MIDDLE.y] })]);
  const after = await until(
    `row ${PROBE_Y} of the desktop to flip after a click on the agent's page`,
    () => {
      const row = screen.row(PROBE_Y);
      return row.filter((v, x) => Math.abs(v - before[x]!) > FLIP_THRESHOLD).length > 40 ? row : undefined;
    },
    { timeoutMs: 10_000 },
  );
  let run = 0;
  for (let x = 0; x < after.length; x++) {
    run = Math.abs(after[x]! - before[x]!) > FLIP_THRESHOLD ? run + 1 : 0;
    if (run === 40) return screen.setProbe(x - 39 + 20, PROBE_Y);
  }
  throw new Error(`no 40 pixels in a row of row ${PROBE_Y} flipped after a click on the agent's page`);
}

/**
 * The viewer page's clock against ours: (its timeOrigin + now) − our epochNow(),
 * from the evaluate with the shortest round trip of ten; `uncertainty` is half
 * that round trip. Both read the same system clock, so it is near 0.
 */
async function clockOffset(page: Page): Promise<{ offset: number; uncertainty: number }> {
  let best = { offset: NaN, rtt: Infinity };
  for (let i = 0; i < 10; i++) {
    const t0 = epochNow();
    const theirs = await inPage<number>(page, 'performance.timeOrigin + performance.now()');
    const t1 = epochNow();
    if (t1 - t0 < best.rtt) best = { offset: theirs - (t0 + t1) / 2, rtt: t1 - t0 };
  }
  return { offset: round2(best.offset), uncertainty: round2(best.rtt / 2) };
}

type Input = 'mousedown' | 'keydown';
type PageKind = 'solid' | 'text';

/** One series' spread, in ms: median, 90th percentile (nearest rank), the largest, and how many over the target. */
export interface Spread {
  n: number;
  median_ms: number;
  p90_ms: number;
  max_ms: number;
  over_target: number;
}

/** One trial, in ms after the input (the viewer's event.timeStamp). */
export interface TrialTimes {
  /** The desktop's screen (Xvfb's framebuffer) flipped: VNC's input path and the page's own repaint. */
  screen: number;
  /** The first message of noVNC's socket after the screen's flip reached the page (its event ran). */
  first: number;
  /** The last message before noVNC drew the flip reached the page: the one whose handling drew it. */
  arrived: number;
  /** noVNC drew the flip on its canvas. */
  drawn: number;
  /** Of the time from the screen's flip to the draw, how long noVNC's handler ran on the update's messages. */
  handled: number;
  /** The first animation frame of the viewer that shows it. */
  photon: number;
  /** Bytes of noVNC's socket from the screen's flip to the draw: the update. */
  bytes: number;
}

export interface LatencySeries {
  id: string;
  name: string;
  input: Input;
  page: PageKind;
  /** Input → the viewer's frame showing it: what the target is about. */
  photon: Spread;
  /** Input → noVNC drew it: the same without the viewer's frame, the lower bound. */
  drawn: Spread;
  samples: TrialTimes[];
}

export interface CpuWindow {
  what: string;
  seconds: number;
  /** Share of one core, in percent. */
  x11vnc_percent: number;
  /** The daemon process alone (its VNC bridge), not its children. */
  daemon_percent: number;
  /** Every process of the desktop's Chromium (the agent's page), and of the viewer's (noVNC). */
  desktop_chromium_percent: number;
  viewer_chromium_percent: number;
  /** Updates noVNC drew on its canvas, per second. */
  viewer_draws_per_s: number;
}

/** The lowest latency a frame stream of the daemon's own could have on one page, from medians of this run. */
export interface FrameStream {
  page: PageKind;
  /** A `left_click` batch sent → the desktop's screen flipped: the daemon's input path and the page's repaint. */
  click_to_screen_ms: number;
  /** Capture + JPEG encode alone (the floor child); back to back, the interval between frames. */
  capture_encode_ms: number;
  half_interval_ms: number;
  /** A one-call JPEG screenshot batch: capture, encode, base64, the socket, JSON. */
  capture_encode_transfer_ms: number;
  /** The JPEG decoded and drawn in the viewer page. */
  decode_ms: number;
  jpeg_bytes: number;
  floor_ms: number;
  /** VNC's click → noVNC drew it, on the same page: the same end point. */
  vnc_drawn_ms: number;
}

export interface TakeoverReport {
  figures: Figure[];
  latency: LatencySeries[];
  take_ms: number[];
  x11vnc_start_ms: number[];
  cpu: CpuWindow[];
  x11vnc_rss_mib: { still: number; after_flipping: number; peak: number };
  frame_stream: FrameStream[];
  /** The viewer's clock against the bench's (ms), to place the desktop's screen change on the page's time line. */
  clock: { offset: number; uncertainty: number };
  target_ms: number;
}

const inPage = <T>(page: Page, expression: string): Promise<T> => page.evaluate(expression) as Promise<T>;

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

function spread(samples: readonly number[]): Spread {
  return {
    n: samples.length,
    median_ms: round2(median(samples)),
    p90_ms: round2(percentile(samples, 0.9)),
    max_ms: round2(Math.max(...samples)),
    over_target: samples.filter((v) => v > TARGET_MS).length,
  };
}

const ON: Record<PageKind, string> = { solid: 'black/white flip', text: 'text page inverts' };

function series(input: Input, kind: PageKind, samples: TrialTimes[]): LatencySeries {
  const what = input === 'mousedown' ? 'click' : 'key';
  return {
    id: `takeover.${what}.${kind}`,
    name: `takeover: ${what} → photon, ${ON[kind]}`,
    input,
    page: kind,
    photon: spread(samples.map((s) => s.photon)),
    drawn: spread(samples.map((s) => s.drawn)),
    samples: samples.map((s) => ({
      screen: round2(s.screen),
      first: round2(s.first),
      arrived: round2(s.arrived),
      drawn: round2(s.drawn),
      handled: round2(s.handled),
      photon: round2(s.photon),
      bytes: s.bytes,
    })),
  };
}

/** The series' figures: the whole (input → photon), then its parts, each per trial. */
function seriesFigures(s: LatencySeries): Figure[] {
  const t = s.samples;
  const part = (id: string, name: string, of: (x: TrialTimes) => number): Figure =>
    figure(`${s.id}.${id}`, name, t.map(of));
  return [
    figure(
      `${s.id}.photon`,
      s.name,
      t.map((x) => x.photon),
      { sent_bytes: mean(t.map((x) => x.bytes)) },
    ),
    part('drawn', '  input → drawn on the noVNC canvas', (x) => x.drawn),
    part('screen', "    input → the desktop's screen flipped", (x) => x.screen),
    part('to-first', "    screen flipped → the update's first message at the viewer", (x) => x.first - x.screen),
    part('to-arrived', '    first message → last message', (x) => x.arrived - x.first),
    part('to-drawn', '    last message → drawn (its handling by noVNC)', (x) => x.drawn - x.arrived),
    part('handled', "    (within first message → drawn: noVNC's handler on the messages, summed)", (x) => x.handled),
    part('to-frame', "    drawn → the viewer's frame", (x) => x.photon - x.drawn),
  ];
}

/** What a section step needs of the viewer. */
interface Viewer {
  page: Page;
  desktop: string;
  /** The pixel read, in desktop (canvas) pixels. */
  probe: { x: number; y: number };
}

/** Clicks "Take control" and waits for noVNC connected; returns the take's time as the page measured it. */
async function take(v: Viewer): Promise<number> {
  await inPage(v.page, 'window.__takeTimer.reset()');
  await v.page.click(`#take-${v.desktop}`);
  return until('noVNC connected after "Take control"', () => inPage<number | null>(v.page, 'window.__takeTimer.ms()'), {
    timeoutMs: 30_000,
    seen: () => v.page.textContent('#vnc-status'),
  });
}

async function handBack(v: Viewer): Promise<void> {
  await v.page.check('#handback-resolved');
  await v.page.click('#handback-button');
  await v.page.locator('#takeover-ended').waitFor({ state: 'visible', timeout: 30_000 });
  await v.page.locator(`#take-${v.desktop}:not([disabled])`).waitFor({ timeout: 30_000 });
}

/** Distinct colours in a square of the canvas right of the probe: 1 on the plain page, many on the text page. */
const colours = (v: Viewer): string => `window.__lat.colours(${v.probe.x + 200}, 300, 200, 200)`;

/** Presses `key` on the desktop through noVNC and waits until the canvas shows what `ok` wants. */
async function toggle(v: Viewer, key: string, what: string, ok: (colours: number) => boolean): Promise<void> {
  await v.page.keyboard.press(key);
  await until(what, async () => ok(await inPage<number>(v.page, colours(v))), {
    timeoutMs: 10_000,
    seen: () => inPage<number>(v.page, colours(v)),
  });
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

export function takeoverTable(r: TakeoverReport): string {
  const cell = (v: number, w = 8): string => (Number.isFinite(v) ? v.toFixed(2) : 'n/a').padStart(w);
  const sp = (s: Spread): string =>
    `${cell(s.median_ms)} ${cell(s.p90_ms)} ${cell(s.max_ms)} ${String(s.over_target).padStart(5)}`;
  const w = Math.max(...r.latency.map((s) => s.name.length));
  const head = `${'series'.padEnd(w)}  photon: median      p90      max  >100   drawn: median      p90      max  >100    n`;
  const lat = r.latency.map(
    (s) => `${s.name.padEnd(w)}        ${sp(s.photon)}        ${sp(s.drawn)} ${String(s.photon.n).padStart(4)}`,
  );
  const cpu = r.cpu.map(
    (c) =>
      `${c.what.padEnd(40)} ${cell(c.x11vnc_percent)} ${cell(c.daemon_percent)} ${cell(c.desktop_chromium_percent, 9)} ` +
      `${cell(c.viewer_chromium_percent, 9)} ${cell(c.viewer_draws_per_s, 9)}   (${c.seconds} s)`,
  );
  const streams = r.frame_stream.map(
    (f) =>
      `${ON[f.page].padEnd(18)} ${cell(f.click_to_screen_ms)} + ${cell(f.half_interval_ms)} + ${cell(f.capture_encode_transfer_ms)} + ${cell(f.decode_ms)} = ${cell(f.floor_ms)}   VNC ${cell(f.vnc_drawn_ms)}   (JPEG ${f.jpeg_bytes} B)`,
  );
  return [
    `Takeover: input to photon through x11vnc and noVNC, measured in the viewer page (ms; >${r.target_ms}: samples over the target)`,
    head,
    ...lat,
    `(viewer clock − bench clock: ${r.clock.offset} ± ${r.clock.uncertainty} ms)`,
    '',
    `take ("Take control" → noVNC connected): ${r.take_ms.join(', ')} ms; x11vnc's own start: ${r.x11vnc_start_ms.join(', ')} ms`,
    '',
    `${'CPU, % of one core'.padEnd(40)}   x11vnc   daemon  Chromium: desktop  viewer   updates drawn/s`,
    ...cpu,
    `x11vnc RSS: ${r.x11vnc_rss_mib.still} MiB still, ${r.x11vnc_rss_mib.after_flipping} MiB after flipping, peak ${r.x11vnc_rss_mib.peak} MiB`,
    '',
    "A frame stream of the daemon's own, at least (medians, ms): click → screen + half an interval of back-to-back",
    'captures + capture/encode/transfer + decode/draw, beside VNC click → drawn on the same page',
    ...streams,
  ].join('\n');
}
