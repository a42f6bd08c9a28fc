/**
 * Images as the daemon passes them around: the formats it encodes, the settle
 * step before a desktop capture, and an encoded image with its size. A leaf:
 * the desktop driver produces these, the browser driver too, and the
 * screenshot store, the toolsets and the result boundary consume them.
 */

export type ImageFormat = 'png' | 'jpeg' | 'webp';

/**
 * The settle step before a capture (docs/PERFORMANCE.md, "The settle step"):
 * right after input the screen may still be redrawing, so a capture within
 * `afterInputMs` of input waits, for at most `maxMs`, until the screen is
 * quiet, then grabs once. Where the X server reports drawing (DAMAGE),
 * quiet means: no change for `quietMs` since the last one, or, if nothing
 * changed since the input, for `reactionMs` since the input (an app takes a
 * while to draw its answer to a click). Elsewhere frames are grabbed
 * `intervalMs` apart until two in a row are identical. On a screen that saw
 * no input for `afterInputMs`, one grab is all.
 */
export interface SettleOptions {
  afterInputMs: number;
  quietMs: number;
  reactionMs: number;
  intervalMs: number;
  maxMs: number;
}

export interface CapturedImage {
  /** Encoded image bytes (not base64). */
  data: Buffer;
  mediaType: 'image/png' | 'image/jpeg' | 'image/webp';
  width: number;
  height: number;
  /**
   * How the settle step went, when it ran: time spent, how it knew (`damage`:
   * the X server's reports, `changes` of them during the wait; `frames`:
   * `frames` grabs compared), and whether the screen was quiet (false: the cap ended it).
   */
  settled?: { ms: number; method: 'damage' | 'frames'; frames: number; changes: number; stable: boolean };
}
