/**
 * Viewport captures for the browser's `screenshot` and `zoom`: Playwright
 * captures the viewport (or a clip of it) at CSS-pixel resolution; when the
 * image must be resized, or the format is one Playwright cannot write (webp),
 * sharp resizes and encodes it. When no resize is needed Playwright's own
 * PNG or JPEG is returned as is, which saves a decode and an encode. A clip
 * shown larger than it is (`zoom`) is rendered at that scale by Chromium
 * itself (CDP Page.captureScreenshot with a clip scale), so small text is
 * really there to read, not enlarged pixels.
 */
import type { CDPSession, Page } from 'playwright';
import sharp from 'sharp';
import type { Rect, Size } from '../base/geometry.ts';
import type { CapturedImage, ImageFormat } from '../base/image.ts';
import { orAfter } from '../base/resilience.ts';

export interface ViewportCaptureOptions {
  /** Part of the viewport, in viewport (CSS) pixels; the whole viewport when absent. */
  clip?: Rect;
  /** Output size; the captured pixels are resized to exactly this. */
  output: Size;
  format: ImageFormat;
  /** 1–100, for jpeg and webp. */
  quality: number;
  timeoutMs: number;
}

const MEDIA_TYPES = { png: 'image/png', jpeg: 'image/jpeg', webp: 'image/webp' } as const;

export async function captureViewport(page: Page, options: ViewportCaptureOptions): Promise<CapturedImage> {
  const { clip, output, format, quality, timeoutMs } = options;
  const scale = clip ? Math.min(output.width / clip.width, output.height / clip.height) : 1;
  if (clip && scale > 1) return encode(await renderScaled(page, clip, scale, timeoutMs), output, format, quality);
  const source = clip ?? page.viewportSize();
  const direct = format !== 'webp' && source?.width === output.width && source.height === output.height;
  const shot = await page.screenshot({
    type: direct ? format : 'png',
    ...(direct && format === 'jpeg' ? { quality } : {}),
    ...(clip ? { clip } : {}),
    // No style injection to hide the caret, and no waiting for animations: a plain capture of what is shown.
    caret: 'initial',
    animations: 'allow',
    timeout: timeoutMs,
  });
  if (direct) return { data: shot, mediaType: MEDIA_TYPES[format], width: output.width, height: output.height };
  return encode(shot, output, format, quality);
}

/** `shot` resized to exactly `output` (a pixel of rounding at most, after a scaled render) and encoded. */
async function encode(shot: Buffer, output: Size, format: ImageFormat, quality: number): Promise<CapturedImage> {
  const resized = sharp(shot).resize(output.width, output.height, { fit: 'fill' });
  const data = await (
    format === 'png' ? resized.png() : format === 'jpeg' ? resized.jpeg({ quality }) : resized.webp({ quality })
  ).toBuffer();
  return { data, mediaType: MEDIA_TYPES[format], width: output.width, height: output.height };
}

/**
 * The viewport's `clip` rendered at `scale` device pixels per CSS pixel, as a
 * PNG. CDP's clip is in document coordinates, so the viewport's scroll offset
 * (Page.getLayoutMetrics) is added, as Playwright does for its own clips.
 */
async function renderScaled(page: Page, clip: Rect, scale: number, timeoutMs: number): Promise<Buffer> {
  let session: CDPSession | undefined;
  const capture = async (): Promise<Buffer> => {
    session = await page.context().newCDPSession(page);
    // The scroll offset from the browser, not from the page's own script (which a page could fake).
    const metrics = (await session.send('Page.getLayoutMetrics')) as {
      cssVisualViewport: { pageX: number; pageY: number };
    };
    const { pageX, pageY } = metrics.cssVisualViewport;
    const { data } = (await session.send('Page.captureScreenshot', {
      format: 'png',
      clip: { x: clip.x + pageX, y: clip.y + pageY, width: clip.width, height: clip.height, scale },
    })) as { data: string };
    return Buffer.from(data, 'base64');
  };
  try {
    const shot = await orAfter(capture(), timeoutMs, undefined);
    if (!shot) throw new Error(`zoom capture took longer than ${timeoutMs} ms`);
    return shot;
  } finally {
    await (session as CDPSession | undefined)?.detach().catch(() => undefined);
  }
}
