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
 * while to draw its answer to a click). When the app under the pointer is
 * the daemon's own Chromium, the tab says when it drew its answer and changed
 * nothing of its document (`DrawnAfter`), and the reaction window ends
 * `drawnMs` after that word instead (or twice as long as the word took, or
 * twice the lag from a word to its pixels seen lately, when longer: a busy
 * machine is slow to show too), time for its pixels to reach the X server,
 * even when that is later than `reactionMs` after the input; and when it
 * says animations run (`Moving`), their first and last pixels are waited for.
 * Elsewhere frames are grabbed `intervalMs` apart until two in a row are
 * identical. On a screen that saw no input for `afterInputMs`, one grab is
 * all.
 */
export interface SettleOptions {
  afterInputMs: number;
  quietMs: number;
  reactionMs: number;
  drawnMs: number;
  intervalMs: number;
  maxMs: number;
}

/** Pointer input the daemon sent itself, as a page under the pointer sees it (src/browser/input-frames.ts). */
export interface InputMark {
  /** The DOM event that ends it in a page: a move's pointermove, a click's last mouseup. */
  event: 'pointermove' | 'mouseup';
  /** Least `detail` of that event: a click's count (a double click's last mouseup has detail 2). */
  detail: number;
  /** Date.now() before the input (a click's last press) was sent: its event is dispatched no earlier. */
  sentAt: number;
}

/**
 * Animations that run where they show, as the app's word told of them: the soonest starts to change
 * its pixels `startsInMs` after the word, and the last of those with an end ends `endsInMs` after it
 * (undefined: none ends soon).
 */
export interface Moving {
  startsInMs: number;
  endsInMs?: number;
}

/** The word of the app under the pointer that it drew its answer to some input. */
export interface Drawn {
  /** performance.now() when the word came. */
  at: number;
  moving?: Moving;
}

/** The app under the pointer's word that it drew its answer to `mark`, or undefined if none came within `timeoutMs`. */
export type DrawnAfter = (mark: InputMark, timeoutMs: number) => Promise<Drawn | undefined>;

export interface CapturedImage {
  /** Encoded image bytes (not base64). */
  data: Buffer;
  mediaType: 'image/png' | 'image/jpeg' | 'image/webp';
  width: number;
  height: number;
  /**
   * How the settle step went, when it ran: time spent, how it knew (`damage`:
   * the X server's reports, `changes` of them during the wait; `frames`:
   * `frames` grabs compared), whether the screen was quiet (false: the cap ended it), and
   * whether the app's word that it drew ended the reaction window (`drawn`), and how long after the
   * input that word came (`wordMs`, when one came), and how long after the word the first change
   * reached the X server (`lagMs`, when one did); `moving` when the word said animations were
   * running (Drawn), whose first and last pixels the settle step waited for.
   */
  settled?: {
    ms: number;
    method: 'damage' | 'frames';
    frames: number;
    changes: number;
    stable: boolean;
    drawn?: boolean;
    wordMs?: number;
    lagMs?: number;
    moving?: Moving;
  };
}
