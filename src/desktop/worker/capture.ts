/**
 * Capture and encoding: a grab through nut-js, the optional settle step, then
 * B,G,R,X → RGB and sharp's resize and encoders.
 */
import type { CaptureOptions } from '../driver.ts';
import type { Rect } from '../../geometry.ts';
import type { CapturedImage } from '../../image.ts';
import { WorkerInputError, sleep, throwIfCancelled, type OpContext } from './context.ts';
import { displaySize, type Devices } from './devices.ts';

type Sharp = typeof import('sharp').default;

let sharpModule: Sharp | undefined;

/**
 * Grabs the display (or `options.region`), waits for it to settle if input came
 * less than `settle.afterInputMs` ago (`lastInputAt`, a performance.now() time),
 * and encodes it at the output size.
 */
export async function capture(
  d: Devices,
  options: CaptureOptions,
  lastInputAt: number,
  ctx: OpContext,
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
  const grab = () =>
    area ? d.nut.screen.grabRegion(new d.nut.Region(area.x, area.y, area.width, area.height)) : d.nut.screen.grab();
  let img = await grab();
  let settled: CapturedImage['settled'];
  const settle = options.settle;
  if (settle && performance.now() - lastInputAt < settle.afterInputMs) {
    // Grab until two frames in a row match (the app finished drawing), or the cap.
    const t0 = performance.now();
    let frames = 1;
    let stable = false;
    while (!stable && performance.now() - t0 + settle.intervalMs <= settle.maxMs) {
      await sleep(settle.intervalMs, ctx);
      throwIfCancelled(ctx);
      const next = await grab();
      frames++;
      stable = next.data.equals(img.data);
      img = next;
    }
    settled = { ms: Math.round(performance.now() - t0), frames, stable };
  }
  const rgb = bgrxToRgb(img.data, img.width, img.height, img.byteWidth);
  sharpModule ??= (await import('sharp')).default;
  let pipeline = sharpModule(rgb, { raw: { width: img.width, height: img.height, channels: 3 } });
  if (img.width !== out.width || img.height !== out.height) {
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
 * nut-js returns 4 bytes per pixel in B,G,R,X order, rows `byteWidth` apart.
 * The 4th byte is NOT alpha (docs/MEASURED.md): giving it to sharp as RGBA yields
 * mostly black images, so we copy out 3-channel RGB.
 */
function bgrxToRgb(src: Buffer, width: number, height: number, byteWidth: number): Buffer {
  const out = Buffer.allocUnsafe(width * height * 3);
  let o = 0;
  for (let y = 0; y < height; y++) {
    let i = y * byteWidth;
    for (let x = 0; x < width; x++, i += 4) {
      out[o++] = src[i + 2]!;
      out[o++] = src[i + 1]!;
      out[o++] = src[i]!;
    }
  }
  return out;
}
