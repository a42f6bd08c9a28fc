/**
 * Viewport captures for the browser's `screenshot` and `zoom`: Playwright
 * captures the viewport (or a clip of it) at CSS-pixel resolution; when the
 * image must be resized, or the format is one Playwright cannot write (webp),
 * sharp resizes and encodes it. When no resize is needed Playwright's own
 * PNG or JPEG is returned as is, which saves a decode and an encode.
 */
import type { Page } from 'playwright';
import sharp from 'sharp';
import type { Rect, Size } from '../geometry.ts';
import type { CapturedImage, ImageFormat } from '../image.ts';

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
  const resized = sharp(shot).resize(output.width, output.height, { fit: 'fill' });
  const data = await (
    format === 'png' ? resized.png() : format === 'jpeg' ? resized.jpeg({ quality }) : resized.webp({ quality })
  ).toBuffer();
  return { data, mediaType: MEDIA_TYPES[format], width: output.width, height: output.height };
}
