/**
 * Desktop figures through a real daemon process on a real Xvfb with a real
 * page on screen (kiosk Chromium showing testkit/event-page.ts), over a
 * real ws client, each measured interleaved with what it is compared to
 * (bench/stats.ts `interleave`), so a load that drifts on this shared machine
 * falls on both sides of a ratio alike:
 *
 * - per-call overhead: `ping` (the ws round trip with a trivial answer), a
 *   replayed batch (the batch path answered from the result cache, nothing
 *   run), `cursor_position` as a one-call batch, and ten of them in one batch
 *   (the marginal cost of a call inside a batch);
 * - `mouse_move` and `left_click` as one-call batches, with the shell-out
 *   click (`xdotool`) beside them;
 * - `screenshot` end to end (capture, colour conversion, scale, encode,
 *   base64, JSON, sent) in the daemon's format, beside the floor for the same
 *   format (bench/floor.ts) and, for PNG, the shell-out screenshot;
 * - ten actions plus a screenshot as one batch versus as eleven one-call
 *   batches in a row, on loopback and through the 20 ms delaying proxy.
 *
 * Every figure group uses its own connection (a session), and a new one when
 * the daemon's message-rate limit would otherwise be reached
 * (bench/client.ts): reconnecting happens between timed runs, never inside.
 */
import type { Page } from 'playwright';
import { performance } from 'node:perf_hooks';
import type { ToolUse } from '../src/base/protocol.ts';
import type { VirtualDisplay } from '../src/desktop-driver/xvfb.ts';
import { DEFAULT_CONFIG } from '../src/base/config.ts';
import { fitSize } from '../src/base/geometry.ts';
import { launchKioskChromium } from '../testkit/chromium.ts';
import { startTestDisplay } from '../testkit/display.ts';
import { startEventPageServer } from '../testkit/event-page.ts';
import { BenchClient, imageBytes, nextId, toolUse } from './client.ts';
import { BENCH_TOKEN, type DaemonProcess } from './daemon-process.ts';
import type { FloorChild } from './floor.ts';
import { startDelayProxy } from './proxy.ts';
import type { ShellOut } from './shellout.ts';
import {
  figure,
  interleave,
  ITERATIONS,
  mean,
  progress,
  unavailableFigure,
  WARMUP,
  type Figure,
  type Variant,
} from './stats.ts';

export interface Size {
  width: number;
  height: number;
}

export const sizeTag = (s: Size): string => `${s.width}x${s.height}`;

/** What every desktop figure of one display size shares. */
export interface Bench {
  size: Size;
  tag: string;
  floor: FloorChild;
  shell: ShellOut;
  /** The kiosk page on the display (the settle figure adds an animation to it). */
  kiosk: Page;
}

/** Starts Xvfb (+ openbox), the event page and a kiosk Chromium showing it; stops them all afterwards. */
export async function withBenchDisplay<T>(
  size: Size,
  fn: (display: VirtualDisplay, kiosk: Page) => Promise<T>,
): Promise<T> {
  const display = await startTestDisplay(size);
  try {
    const page = await startEventPageServer();
    try {
      const browser = await launchKioskChromium({ display: display.display, ...size, url: page.url });
      try {
        return await fn(display, browser.page);
      } finally {
        await browser.close();
      }
    } finally {
      await page.close();
    }
  } finally {
    await display.stop();
  }
}

/** A connection that is replaced (between timed runs) when the rate limit would refuse the next messages. */
export class Link {
  private client: BenchClient | undefined;

  constructor(private readonly open: () => Promise<BenchClient>) {}

  async ready(messages: number): Promise<BenchClient> {
    if (this.client && !this.client.hasTokens(messages)) {
      this.client.close();
      this.client = undefined;
    }
    this.client ??= await this.open();
    return this.client;
  }

  close(): void {
    this.client?.close();
  }
}

/** A point in the page's bottom half (a plain target: clicks there change nothing). */
export function padPoint(size: Size, i = 0): { x: number; y: number } {
  return { x: Math.round(size.width * 0.2) + 37 * (i % 10), y: Math.round(size.height * 0.75) + 11 * (i % 7) };
}

export const computer = (name: string, input: Record<string, unknown> = {}): ToolUse =>
  toolUse('computer', name, input);

/** Bytes seen for one kind of batch: the mean of what crossed the socket, and the last image's size. */
class Bytes {
  private readonly sent: number[] = [];
  image = 0;

  /** Sends a one-batch round trip on `link` and records its bytes; returns its time. */
  async batch(link: Link, uses: ToolUse[]): Promise<number> {
    const client = await link.ready(1);
    const reply = await client.batch(nextId('b'), uses);
    this.sent.push(reply.bytes);
    this.image = imageBytes(reply.message);
    return reply.ms;
  }

  extra(): { sent_bytes: number; image_bytes?: number } {
    return { sent_bytes: mean(this.sent), ...(this.image ? { image_bytes: this.image } : {}) };
  }
}

/** The same batch sent again: the daemon answers it from its result cache without running anything. */
class Replayer {
  private sent: { client: BenchClient; batchId: string; uses: ToolUse[] } | undefined;

  async replay(link: Link): Promise<number> {
    const client = await link.ready(2);
    if (this.sent?.client !== client) {
      this.sent = { client, batchId: nextId('replay'), uses: [computer('cursor_position')] };
      await client.batch(this.sent.batchId, this.sent.uses);
    }
    const reply = await client.batch(this.sent.batchId, this.sent.uses);
    if (!reply.message.replayed) throw new Error('the resent batch was not replayed');
    return reply.ms;
  }
}

/**
 * The per-call figures: `ping`, a replayed batch, `cursor_position` as a one-call batch (with and without
 * `tool_event` frames) and ten of them in one batch, interleaved. They depend on nothing but the daemon, so
 * `BENCH_ONLY=calls` runs them alone (bench/bench.ts), with `iterations` timed runs each.
 */
export async function overheadFigures(
  daemon: DaemonProcess,
  b: Pick<Bench, 'tag'>,
  iterations = ITERATIONS,
): Promise<Figure[]> {
  progress(`${b.tag}: per-call overhead`);
  const link = new Link(() => daemon.connect());
  const replayer = new Replayer();
  const quietLink = new Link(async () => (await daemon.connect()).quiet());
  const cursor = new Bytes();
  const quiet = new Bytes();
  const cursor10 = new Bytes();
  try {
    const t = await interleave(
      {
        ping: async () => (await (await link.ready(1)).ping()).ms,
        replay: () => replayer.replay(link),
        cursor: () => cursor.batch(link, [computer('cursor_position')]),
        quiet: () => quiet.batch(quietLink, [computer('cursor_position')]),
        cursor10: () =>
          cursor10.batch(
            link,
            Array.from({ length: 10 }, () => computer('cursor_position')),
          ),
      },
      iterations,
    );
    return [
      figure(`ping.${b.tag}`, `ws ping → pong (loopback) ${b.tag}`, t.ping),
      figure(`replay.${b.tag}`, `replayed one-call batch (cache, nothing runs) ${b.tag}`, t.replay),
      figure(`cursor.${b.tag}`, `cursor_position, one-call batch ${b.tag}`, t.cursor, cursor.extra()),
      figure(
        `cursor-quiet.${b.tag}`,
        `cursor_position, one-call batch, hello.events false ${b.tag}`,
        t.quiet,
        quiet.extra(),
      ),
      figure(`cursor10.${b.tag}`, `cursor_position ×10 in one batch ${b.tag}`, t.cursor10, cursor10.extra()),
    ];
  } finally {
    link.close();
  }
}

async function pointerFigures(daemon: DaemonProcess, b: Bench): Promise<Figure[]> {
  progress(`${b.tag}: mouse_move and left_click, beside xdotool`);
  const link = new Link(() => daemon.connect());
  const move = new Bytes();
  const click = new Bytes();
  const at = (i: number): { x: number; y: number } => padPoint(b.size, i % 2);
  const variants: Record<string, Variant> = {
    move: (i) => move.batch(link, [computer('mouse_move', { coordinate: [at(i + 1).x, at(i + 1).y] })]),
    click: (i) => click.batch(link, [computer('left_click', { coordinate: [at(i).x, at(i).y] })]),
  };
  if (!b.shell.clickUnavailable) {
    variants.shell = (i) => b.shell.click(at(i).x, at(i).y);
    variants.shellNoDelay = (i) => b.shell.click(at(i).x, at(i).y, ['--delay', '0']);
  }
  try {
    const t = await interleave(variants);
    const shell = (id: string, name: string, times: number[] | undefined): Figure =>
      times ? figure(id, name, times) : unavailableFigure(id, name, b.shell.clickUnavailable ?? 'not measured');
    return [
      figure(`move.${b.tag}`, `mouse_move, one-call batch ${b.tag}`, t.move!, move.extra()),
      figure(`click.${b.tag}`, `left_click (with coordinate), one-call batch ${b.tag}`, t.click!, click.extra()),
      shell(`shell.click.${b.tag}`, `shell-out: xdotool mousemove X Y click 1 ${b.tag}`, t.shell),
      shell(
        `shell.click.nodelay.${b.tag}`,
        `shell-out: xdotool mousemove X Y click --delay 0 1 ${b.tag}`,
        t.shellNoDelay,
      ),
    ];
  } finally {
    link.close();
  }
}

/** Our screenshot in the daemon's format beside the floor of the same format (and, for PNG, the shell-out path). */
async function screenshotFigures(daemon: DaemonProcess, b: Bench, format: string): Promise<Figure[]> {
  progress(`${b.tag}: screenshot ${format}, beside the floor${format === 'png' ? ' and the shell-out path' : ''}`);
  const link = new Link(() => daemon.connect());
  const ours = new Bytes();
  const output = fitSize(b.size, DEFAULT_CONFIG.screenshot.limits);
  let shellBytes = 0;
  const variants: Record<string, Variant> = {
    ours: () => ours.batch(link, [computer('screenshot')]),
    // interleave() runs WARMUP untimed iterations first; the floor child keeps only the timed samples.
    floor: (i) => b.floor.run(format, i >= WARMUP),
  };
  if (format === 'png' && !b.shell.screenshotUnavailable) {
    // Every other iteration only: scrot + convert is the slowest variant (up to a second a run at
    // 1920x1080 under load), and the run must stay near three minutes.
    variants.shell = async (i) => {
      if (i % 2 === 1) return null;
      shellBytes = await b.shell.screenshot(output);
    };
  }
  try {
    const t = await interleave(variants);
    const out = [
      figure(`shot.${format}.${b.tag}`, `screenshot ${format}, one-call batch ${b.tag}`, t.ours!, ours.extra()),
    ];
    if (format === 'png') {
      const id = `shell.screenshot.${b.tag}`;
      const name = `shell-out: scrot + convert -resize + read + base64 ${b.tag}`;
      out.push(
        t.shell
          ? figure(id, name, t.shell, { image_bytes: shellBytes })
          : unavailableFigure(id, name, b.shell.screenshotUnavailable ?? 'not measured'),
      );
    }
    return out;
  } finally {
    link.close();
  }
}

/**
 * Every figure of a daemon whose screenshot format is `format`. The per-call
 * ones (overhead, pointer calls) only with `perCall`: they do not depend on
 * the display size, so they are measured once, on the PNG (default) daemon.
 */
export async function daemonFigures(
  daemon: DaemonProcess,
  b: Bench,
  format: string,
  perCall: boolean,
): Promise<Figure[]> {
  const out: Figure[] = [];
  if (perCall) out.push(...(await overheadFigures(daemon, b)), ...(await pointerFigures(daemon, b)));
  out.push(...(await screenshotFigures(daemon, b, format)));
  if (perCall) out.push(await afterInputFigure(daemon, b, format), await afterChangeFigure(daemon, b, format));
  return out;
}

/**
 * A screenshot right after input, in the same batch: the daemon may wait for
 * the screen to settle first (src/desktop-driver/driver.ts SettleOptions). Measured
 * after the plain screenshots, never interleaved with them, so their captures
 * never follow input.
 */
async function afterInputFigure(daemon: DaemonProcess, b: Bench, format: string): Promise<Figure> {
  progress(`${b.tag}: mouse_move + screenshot ${format} in one batch`);
  const link = new Link(() => daemon.connect());
  const bytes = new Bytes();
  try {
    const t = await interleave({
      moveThenShot: (i) => {
        const p = padPoint(b.size, i);
        return bytes.batch(link, [computer('mouse_move', { coordinate: [p.x, p.y] }), computer('screenshot')]);
      },
    });
    return figure(
      `move-shot.${format}.${b.tag}`,
      `mouse_move + screenshot ${format} in one batch ${b.tag}`,
      t.moveThenShot,
      bytes.extra(),
    );
  } finally {
    link.close();
  }
}

/** How long the box added by ANIMATED_BOX slides after a click, in ms. */
export const SLIDE_MS = 300;
/**
 * A box fixed near the top right corner of the kiosk page; a click on it slides a bar across the
 * page for SLIDE_MS, drawn frame by frame (a string: tsx would wrap a function passed to evaluate).
 */
export const ANIMATED_BOX = `(() => {
  document.getElementById('bench-slide-box')?.remove();
  const box = document.createElement('div');
  box.id = 'bench-slide-box';
  box.style.cssText = 'position:fixed;top:20px;right:20px;width:120px;height:60px;background:#335;z-index:99';
  const bar = document.createElement('div');
  bar.style.cssText = 'position:fixed;top:100px;left:0;width:40px;height:40px;background:#0c0;z-index:99';
  box.addEventListener('mousedown', () => {
    const t0 = performance.now();
    const step = () => {
      const f = Math.min(1, (performance.now() - t0) / ${SLIDE_MS});
      bar.style.left = Math.round((innerWidth - 40) * f) + 'px';
      if (f < 1) requestAnimationFrame(step);
    };
    requestAnimationFrame(step);
  });
  document.body.append(box, bar);
  return { x: innerWidth - 80, y: 50 };
})()`;

/**
 * A click that changes the page, then a screenshot, in one batch: the settle step waits until
 * the SLIDE_MS animation has ended. Minus the same batch with a `mouse_move` that changes nothing,
 * it is the time to a stable frame after such a click.
 */
async function afterChangeFigure(daemon: DaemonProcess, b: Bench, format: string): Promise<Figure> {
  progress(`${b.tag}: left_click that starts a ${SLIDE_MS} ms animation + screenshot ${format} in one batch`);
  const at = (await b.kiosk.evaluate(ANIMATED_BOX)) as { x: number; y: number };
  const link = new Link(() => daemon.connect());
  const bytes = new Bytes();
  try {
    const t = await interleave(
      {
        clickThenShot: () =>
          bytes.batch(link, [computer('left_click', { coordinate: [at.x, at.y] }), computer('screenshot')]),
      },
      Math.max(10, Math.round(ITERATIONS / 3)),
    );
    return figure(
      `click-anim-shot.${format}.${b.tag}`,
      `left_click starting a ${SLIDE_MS} ms animation + screenshot ${format} in one batch ${b.tag}`,
      t.clickThenShot,
      bytes.extra(),
    );
  } finally {
    link.close();
    await b.kiosk.evaluate(`document.getElementById('bench-slide-box')?.remove()`).catch(() => undefined);
  }
}

/** Ten cheap, harmless actions (mouse_move to ten points in the page's plain bottom half) and a screenshot. */
function tenActionsAndScreenshot(size: Size): ToolUse[] {
  const moves = Array.from({ length: 10 }, (_, i) => {
    const p = padPoint(size, i);
    return computer('mouse_move', { coordinate: [p.x, p.y] });
  });
  return [...moves, computer('screenshot')];
}

export async function batchedVsSequential(
  open: () => Promise<BenchClient>,
  size: Size,
  name: string,
): Promise<Figure[]> {
  const tag = sizeTag(size);
  const link = new Link(open);
  // Half the usual iterations (at least 10): the sequential runs over the slow link are the bench's longest.
  const iterations = Math.max(10, Math.round(ITERATIONS / 2));
  try {
    const t = await interleave(
      {
        batched: async () => (await (await link.ready(1)).batch(nextId('b'), tenActionsAndScreenshot(size))).ms,
        sequential: async () => {
          const uses = tenActionsAndScreenshot(size);
          const client = await link.ready(uses.length);
          const t0 = performance.now();
          for (const u of uses) await client.batch(nextId('b'), [u]);
          return performance.now() - t0;
        },
      },
      iterations,
    );
    return [
      figure(`batch11.${name}.${tag}`, `10 mouse_move + screenshot as 1 batch, ${name} ${tag}`, t.batched),
      figure(`seq11.${name}.${tag}`, `10 mouse_move + screenshot as 11 round trips, ${name} ${tag}`, t.sequential),
    ];
  } finally {
    link.close();
  }
}

/** The batch-versus-round-trips figures on loopback and through a proxy adding `oneWayMs` each way. */
export async function linkFigures(daemon: DaemonProcess, size: Size, oneWayMs: number): Promise<Figure[]> {
  const tag = sizeTag(size);
  progress(`${tag}: 10 actions + screenshot, batched vs sequential, loopback`);
  const out = await batchedVsSequential(() => daemon.connect(), size, 'loopback');
  const proxy = await startDelayProxy(Number(new URL(daemon.url).port), oneWayMs);
  try {
    progress(`${tag}: 10 actions + screenshot, batched vs sequential, ${2 * oneWayMs} ms link`);
    const slow = (): Promise<BenchClient> => BenchClient.open(proxy.via(daemon.url), BENCH_TOKEN);
    const name = `${2 * oneWayMs}ms-link`;
    const link = new Link(slow);
    try {
      const t = await interleave({ ping: async () => (await (await link.ready(1)).ping()).ms });
      out.push(figure(`ping.${name}.${tag}`, `ws ping → pong through the delaying proxy ${tag}`, t.ping));
    } finally {
      link.close();
    }
    out.push(...(await batchedVsSequential(slow, size, name)));
  } finally {
    await proxy.close();
  }
  return out;
}
