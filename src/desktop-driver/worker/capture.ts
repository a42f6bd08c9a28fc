/**
 * Capture and encoding: the optional settle step, one read of Xvfb's
 * framebuffer (or a grab through nut-js), then B,G,R,X → RGB and sharp's
 * resize and encoders.
 */
import type { CaptureOptions } from '../driver.ts';
import type { Rect } from '../../base/geometry.ts';
import type { CapturedImage, Drawn, SettleOptions } from '../../base/image.ts';
import { WorkerInputError, sleep, throwIfCancelled, type OpContext } from './context.ts';
import { displaySize, type Devices } from './devices.ts';
import { bgrxToRgb, type BgrxImage, type ScreenChanges } from './screen.ts';

type Sharp = typeof import('sharp').default;

let sharpModule: Sharp | undefined;

/**
 * Grabs the display (or `options.region`), waits for it to settle if input came
 * less than `settle.afterInputMs` ago (`lastInputAt`, a performance.now() time;
 * `drawn`: the word of the app under the pointer that it drew its answer to it),
 * and encodes it at the output size.
 */
export async function capture(
  d: Devices,
  options: CaptureOptions,
  lastInputAt: number,
  ctx: OpContext,
  drawn?: Drawn,
): Promise<CapturedImage> {
  const out = options.output;
  const screenSize = await displaySize(d);
  let region: Rect | undefined = options.region;
  if (region) {
    const { x, y, width, height } = region;
    const ok =
      [x, y, width, height].every(Number.isInteger) &&
      x >= 0 &&
      y >= 0 &&
      width >= 1 &&
      height >= 1 &&
      x + width <= screenSize.width &&
      y + height <= screenSize.height;
    // libnut would ask X for pixels off the screen: BadMatch, and Xlib exits the process.
    if (!ok) {
      throw new WorkerInputError(
        `capture region ${JSON.stringify(region)} is not inside the ${screenSize.width}x${screenSize.height} display`,
      );
    }
    if (x === 0 && y === 0 && width === screenSize.width && height === screenSize.height) region = undefined;
  }
  const area = region;
  const settle = options.settle;
  let settled: CapturedImage['settled'];
  const fb = d.framebuffer;
  // A framebuffer read is reused by the next read: copied when it must outlive one.
  const grab = async (keep: boolean): Promise<BgrxImage> => {
    if (!fb) {
      return area
        ? d.nut.screen.grabRegion(new d.nut.Region(area.x, area.y, area.width, area.height))
        : d.nut.screen.grab();
    }
    const frame = await fb.read();
    return keep ? { ...frame, data: Buffer.from(frame.data) } : frame;
  };
  const recentInput = settle !== undefined && performance.now() - lastInputAt < settle.afterInputMs;
  let img: BgrxImage;
  if (recentInput && d.changes) {
    settled = await waitUntilQuiet(d.changes, settle, lastInputAt, drawn, ctx);
    img = await grab(false);
  } else if (recentInput) {
    // No DAMAGE: grab until two frames in a row match (the app finished drawing), or the cap.
    img = await grab(true);
    const t0 = performance.now();
    let frames = 1;
    let stable = false;
    while (!stable && performance.now() - t0 + settle.intervalMs <= settle.maxMs) {
      await sleep(settle.intervalMs, ctx);
      throwIfCancelled(ctx);
      const next = await grab(true);
      frames++;
      stable = next.data.equals(img.data);
      img = next;
    }
    settled = { ms: Math.round(performance.now() - t0), method: 'frames', frames, changes: 0, stable };
  } else {
    img = await grab(false);
  }
  // libnut grabbed the region alone; the framebuffer is the whole screen.
  const rgb = bgrxToRgb(img, fb ? area : undefined);
  const size = fb && area ? area : img;
  sharpModule ??= (await import('sharp')).default;
  let pipeline = sharpModule(rgb, { raw: { width: size.width, height: size.height, channels: 3 } });
  if (size.width !== out.width || size.height !== out.height) {
    // lanczos3 (sharp's default) keeps small UI text legible when shrinking, and is fine for zoom upscaling.
    pipeline = pipeline.resize(out.width, out.height, { fit: 'fill', kernel: 'lanczos3' });
  }
  const quality = Math.min(100, Math.max(1, Math.round(options.quality || 80)));
  let data: Buffer;
  let mediaType: CapturedImage['mediaType'];
  switch (options.format) {
    case 'png':
      // Level 1 without adaptive filtering: measured ~10x faster to encode than
      // with adaptive filtering; the bytes only cross a local socket.
      data = await pipeline.png({ compressionLevel: 1, adaptiveFiltering: false }).toBuffer();
      mediaType = 'image/png';
      break;
    case 'jpeg':
      data = await pipeline.jpeg({ quality }).toBuffer();
      mediaType = 'image/jpeg';
      break;
    case 'webp':
      // effort 2 instead of 4 halves the encode time for a few % more bytes.
      data = await pipeline.webp({ quality, effort: 2 }).toBuffer();
      mediaType = 'image/webp';
      break;
    default:
      throw new WorkerInputError(`unknown image format ${JSON.stringify(options.format)}`);
  }
  return { data, mediaType, width: out.width, height: out.height, ...(settled ? { settled } : {}) };
}

/**
 * How long, from when animations the app said were running start to change,
 * and from when the last of them ends, the settle step waits for a change (a
 * `:hover` that starts a transition: no word ends that wait, its pixels are
 * known to be coming; on a busy machine they came later than any margin after
 * the word, and its compositor stalled mid-animation for longer than
 * `quietMs`). An animation the app thought shown but that changes no pixel
 * costs up to this much twice per capture.
 */
const MOVING_CHANGE_MS = 500;

/**
 * How long, lately, the app's pixels took to reach the X server after its word that it drew: per
 * display (a worker serves one), the last LAG_SAMPLES times from a word to the first change seen after
 * it. A busy machine is slow to show what the app committed; this is how slow, measured, not guessed.
 */
const LAG_SAMPLES = 16;
const wordLags = new WeakMap<ScreenChanges, number[]>();

function recentLag(changes: ScreenChanges): number {
  return Math.max(0, ...(wordLags.get(changes) ?? []));
}

function noteLag(changes: ScreenChanges, lagMs: number): void {
  const lags = wordLags.get(changes) ?? [];
  lags.push(lagMs);
  if (lags.length > LAG_SAMPLES) lags.shift();
  wordLags.set(changes, lags);
}

/**
 * Waits until the screen is quiet (SettleOptions): no change for `quietMs`
 * since the last one, or none at all for `reactionMs` since the input (or,
 * when the app said it drew its answer, until its pixels can have reached the
 * X server: `drawnMs` after that word, or twice as long as the word took, or
 * twice the longest lag from a word to its pixels seen lately, whichever is
 * longest, sooner or later than `reactionMs`; or, when the word said
 * animations were running, until there were changes after they start and
 * after the last of them ends, each waited for up to MOVING_CHANGE_MS); at most
 * `maxMs`.
 * Each check first makes a round trip to the X server, so every change it
 * made before is counted.
 */
async function waitUntilQuiet(
  changes: ScreenChanges,
  settle: SettleOptions,
  lastInputAt: number,
  drawn: Drawn | undefined,
  ctx: OpContext,
): Promise<NonNullable<CapturedImage['settled']>> {
  const t0 = performance.now();
  const before = changes.count;
  const drawnAt = drawn?.at;
  const reacted = lastInputAt + settle.reactionMs;
  // Time for the app's pixels to reach the X server after its word: at least drawnMs, or twice the time
  // the word took, or twice the lag seen lately, on a machine so busy that the app was slow to answer or
  // its compositor slow to draw (docs/PERFORMANCE.md, "The settle step"). A late word can end the wait
  // after the reaction window: the app has said it drew, and its pixels are still on their way.
  const reactionEnd =
    drawnAt === undefined
      ? reacted
      : drawnAt + Math.max(settle.drawnMs, 2 * (drawnAt - lastInputAt), 2 * recentLag(changes));
  // Animations the word said were running: nothing ends the wait before a change from when they start to
  // change (a delayed one's too: another repaint after the word is not its pixels), nor before one from
  // when the last of them ends (its last frame: a compositor that stalls mid-animation for longer than
  // quietMs does not end it), each for up to MOVING_CHANGE_MS after that time.
  const moving = drawn?.moving;
  const movingTimes =
    drawn && moving
      ? [drawn.at + moving.startsInMs, ...(moving.endsInMs !== undefined ? [drawn.at + moving.endsInMs] : [])]
      : [];
  let stable = false;
  let changed = false;
  for (;;) {
    await changes.current();
    throwIfCancelled(ctx);
    const now = performance.now();
    changed = changes.lastChangeAt > lastInputAt;
    const awaited = movingTimes.find((t) => now < t + MOVING_CHANGE_MS && !(changes.lastChangeAt > t));
    const left =
      awaited !== undefined
        ? Math.min(awaited + MOVING_CHANGE_MS - now, settle.quietMs)
        : changed
          ? changes.lastChangeAt + settle.quietMs - now
          : reactionEnd - now;
    if (left <= 0) {
      stable = true;
      break;
    }
    const wait = Math.min(left, t0 + settle.maxMs - now);
    if (wait <= 0) break;
    await sleep(wait, ctx);
  }
  const firstAfterWord = drawnAt === undefined ? undefined : changes.firstChangeAfter(drawnAt);
  const lag = drawnAt === undefined || firstAfterWord === undefined ? undefined : firstAfterWord - drawnAt;
  if (lag !== undefined) noteLag(changes, lag);
  return {
    ms: Math.round(performance.now() - t0),
    method: 'damage',
    frames: 1,
    changes: changes.count - before,
    stable,
    ...(reactionEnd < reacted && !changed && !moving ? { drawn: true } : {}),
    ...(drawnAt !== undefined ? { wordMs: Math.round((drawnAt - lastInputAt) * 10) / 10 } : {}),
    ...(moving ? { moving } : {}),
    ...(lag !== undefined ? { lagMs: Math.round(lag * 10) / 10 } : {}),
  };
}
