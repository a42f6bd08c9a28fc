/**
 * Images as the daemon passes them around: the formats it encodes, the settle
 * step before a desktop capture, and an encoded image with its size. A leaf:
 * the desktop driver produces these, the browser driver too, and the
 * screenshot store, the toolsets and the result boundary consume them.
 */

export type ImageFormat = 'png' | 'jpeg' | 'webp';

/**
 * The settle step before a capture (docs/PERFORMANCE.md): right after input,
 * the screen may still be redrawing, so frames are grabbed `intervalMs` apart
 * until two in a row are identical, for at most `maxMs`; the last frame is
 * encoded. On a screen that saw no input for `afterInputMs`, one grab is all.
 */
export interface SettleOptions {
  afterInputMs: number;
  intervalMs: number;
  maxMs: number;
}

export interface CapturedImage {
  /** Encoded image bytes (not base64). */
  data: Buffer;
  mediaType: 'image/png' | 'image/jpeg' | 'image/webp';
  width: number;
  height: number;
  /** How the settle step went, when it ran: time spent, frames grabbed, and whether the last two matched. */
  settled?: { ms: number; frames: number; stable: boolean };
}
