/**
 * The settle step with the daemon's own headful Chromium under the pointer
 * (src/browser/input-frames.ts: its tabs say when they drew after pointer
 * input). The same figures as the kiosk's in bench/desktop.ts, whose page is
 * in a Chromium the daemon did not start and so waits out the reaction
 * window: a screenshot right after a move, after a click that starts an
 * animation, and ten actions plus a screenshot over the 20 ms link. A daemon
 * process of its own on the bench's display, its browser window over the
 * kiosk's; gone with the daemon.
 */
import type { ToolUse } from '../src/base/protocol.ts';
import type { VirtualDisplay } from '../src/desktop-driver/xvfb.ts';
import { startWebServer } from '../testkit/web.ts';
import { BenchClient, nextId, toolUse } from './client.ts';
import { BENCH_TOKEN, startDaemonProcess } from './daemon-process.ts';
import {
  ANIMATED_BOX,
  batchedVsSequential,
  computer,
  Link,
  padPoint,
  SLIDE_MS,
  sizeTag,
  type Size,
} from './desktop.ts';
import { startDelayProxy } from './proxy.ts';
import { ONE_WAY_MS } from './ratios.ts';
import { figure, interleave, ITERATIONS, progress, type Figure } from './stats.ts';
import sharp from 'sharp';

/** The box's colour (#335): found in a screenshot to click it. */
const BOX_RGB = [0x33, 0x33, 0x55] as const;

/** A still white page with the kiosk's animated box (bench/desktop.ts ANIMATED_BOX), added as it loads. */
const PAGE = `<!doctype html><html><head><title>settle</title><style>html,body{margin:0;height:100%;background:#fff}</style></head>
<body><script>${ANIMATED_BOX}</script></body></html>`;

/** The centre of the box's pixels in a screenshot, or undefined when it is not on it yet. */
async function findBox(png: string): Promise<{ x: number; y: number } | undefined> {
  const { data, info } = await sharp(Buffer.from(png, 'base64')).raw().toBuffer({ resolveWithObject: true });
  let n = 0;
  let sx = 0;
  let sy = 0;
  for (let i = 0; i + 2 < data.length; i += info.channels) {
    if (data[i] === BOX_RGB[0] && data[i + 1] === BOX_RGB[1] && data[i + 2] === BOX_RGB[2]) {
      const p = i / info.channels;
      sx += p % info.width;
      sy += Math.floor(p / info.width);
      n++;
    }
  }
  return n > 1000 ? { x: Math.round(sx / n), y: Math.round(sy / n) } : undefined;
}

export async function ownBrowserFigures(display: VirtualDisplay, size: Size): Promise<Figure[]> {
  const tag = sizeTag(size);
  const web = await startWebServer();
  web.route('/settle', PAGE);
  progress(`${tag}: the daemon's own headful Chromium under the pointer (settle step)`);
  const daemon = await startDaemonProcess({
    display: display.display,
    framebuffer: display.framebuffer,
    format: 'png',
    browser: 'headful',
  });
  const link = new Link(() => daemon.connect());
  try {
    const first = await link.ready(2);
    await first.batch(nextId('open'), [toolUse('browser', 'navigate', { url: `${web.origin}/settle` })]);
    let box: { x: number; y: number } | undefined;
    for (let tries = 0; !box; tries++) {
      if (tries > 100) throw new Error("the settle page's box never showed in a screenshot");
      const reply = await (await link.ready(1)).batch(nextId('look'), [computer('screenshot')]);
      const image = reply.message.tool_results[0]?.content.find((b) => b.type === 'image');
      box = image?.type === 'image' ? await findBox(image.source.data) : undefined;
      if (!box) await new Promise((r) => setTimeout(r, 100));
    }
    const at = box;
    const once = async (uses: ToolUse[]): Promise<number> => (await (await link.ready(1)).batch(nextId('s'), uses)).ms;
    // No input for longer than the settle step looks back (afterInputMs): the lone screenshots never settle.
    await new Promise((r) => setTimeout(r, 1_100));
    const shots = await interleave({ shot: () => once([computer('screenshot')]) });
    const moves = await interleave({
      move: (i) => once([computer('mouse_move', { coordinate: xy(padPoint(size, i)) })]),
      click: (i) => once([computer('left_click', { coordinate: xy(padPoint(size, i + 3)) })]),
      moveThenShot: (i) =>
        once([computer('mouse_move', { coordinate: xy(padPoint(size, i + 5)) }), computer('screenshot')]),
    });
    const anim = await interleave(
      { clickThenShot: () => once([computer('left_click', { coordinate: xy(at) }), computer('screenshot')]) },
      Math.max(10, Math.round(ITERATIONS / 3)),
    );
    const out = [
      figure(`own.shot.png.${tag}`, `own browser: screenshot png ${tag}`, shots.shot),
      figure(`own.move.${tag}`, `own browser: mouse_move ${tag}`, moves.move),
      figure(`own.click.${tag}`, `own browser: left_click ${tag}`, moves.click),
      figure(`own.move-shot.png.${tag}`, `own browser: mouse_move + screenshot png ${tag}`, moves.moveThenShot),
      figure(
        `own.click-anim-shot.png.${tag}`,
        `own browser: left_click starting a ${SLIDE_MS} ms animation + screenshot png ${tag}`,
        anim.clickThenShot,
      ),
    ];
    link.close();
    const proxy = await startDelayProxy(Number(new URL(daemon.url).port), ONE_WAY_MS);
    try {
      const slow = (): Promise<BenchClient> => BenchClient.open(proxy.via(daemon.url), BENCH_TOKEN);
      out.push(...(await batchedVsSequential(slow, size, `own-${2 * ONE_WAY_MS}ms-link`)));
    } finally {
      await proxy.close();
    }
    return out;
  } finally {
    link.close();
    await daemon.stop();
    await web.close();
  }
}

const xy = (p: { x: number; y: number }): [number, number] => [p.x, p.y];
