/**
 * The desktop driver: everything deskbatch does to the X display goes through
 * this interface. Coordinates here are DISPLAY pixels; mapping from screenshot
 * pixels happens in the computer toolset (toolsets/computer/context.ts, with src/base/geometry.ts).
 *
 * The implementation (src/desktop-driver/worker-driver.ts) runs nut-js in a supervised
 * child process, because nut-js segfaults when the display goes away
 * (docs/MEASURED.md). Every method may reject with
 * DisplayUnavailableError (display unreachable) or DriverCrashedError (the child
 * died during the call); the next call restarts the child once the display is
 * back. Every method honours `signal`: when it aborts, the promise rejects
 * with CancelledError as soon as possible (a hold or a wait ends early).
 */

import type { Point, Rect, Size } from '../base/geometry.ts';
import type { CapturedImage, ImageFormat, SettleOptions } from '../base/image.ts';

/** A key as the driver understands it: the name of a nut-js `Key` enum member. */
export type DriverKey = string;

export type MouseButton = 'left' | 'right' | 'middle';
export type ScrollDirection = 'up' | 'down' | 'left' | 'right';

/*
 * The ranges the driver accepts. The computer toolset's schemas use these same
 * constants, and the worker checks its arguments against them (it is a process
 * boundary), so the two sides cannot disagree.
 */

/** Clicks per `click` call: single, double or triple. */
export const CLICK_COUNT_MAX = 3;
/**
 * Wheel clicks per `scroll` call (the computer toolset's `scroll_amount`), 1 to this. The API documents no range
 * for computer; this bounds one call. The browser toolset's own is BROWSER_SCROLL_AMOUNT_MAX (toolsets/browser/input.ts).
 */
export const COMPUTER_SCROLL_AMOUNT_MAX = 100;
/** Presses per `pressKeys` call, 1 to this (the computer toolset's `key.repeat`, DCU). */
export const COMPUTER_KEY_REPEAT_MAX = 100;
/** Longest `holdKeys`, in ms (`hold_key.duration`, DCU: "up to 300" seconds). */
export const HOLD_MAX_MS = 300_000;
/** Largest capture output side, in pixels. */
export const CAPTURE_SIDE_MAX = 16_384;

/**
 * The checks of a driver call's arguments against these ranges, where they
 * cross a boundary: the worker's (another process sent them:
 * worker/operations.ts) and the daemon's own pointer input
 * (worker-driver.ts). `bad` makes the error each side throws; the model reads
 * either as ToolInputError.
 */
export function integerIn(name: string, v: unknown, min: number, max: number, bad: (m: string) => Error): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw bad(`${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(v)}`);
  }
  return v;
}

/** A point as the X server takes it: whole pixels (rounded), within its 16-bit coordinates. */
export function pixelPoint(v: unknown, name: string, bad: (m: string) => Error): Point {
  const { x, y } = typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : {};
  const fits = (c: unknown): c is number => typeof c === 'number' && Math.abs(Math.round(c)) <= X_COORDINATE_MAX;
  if (!fits(x) || !fits(y)) throw bad(`${name} must have numeric x and y within X's 16-bit coordinates`);
  return { x: Math.round(x), y: Math.round(y) };
}

/** X's coordinates are 16-bit signed (INT16): ±32767 either way. */
const X_COORDINATE_MAX = 32_767;

export interface CaptureOptions {
  /** Region of the display to capture; the whole display when absent. */
  region?: Rect;
  /** Wait for a stable frame after recent input; no settling when absent. */
  settle?: SettleOptions;
  /** Output size in pixels, 1–CAPTURE_SIDE_MAX a side. The captured pixels are resized to exactly this. */
  output: Size;
  format: ImageFormat;
  /** 1–100, for jpeg and webp. */
  quality: number;
}

export interface DesktopDriver {
  /** Size of the X display's root window, in display pixels. */
  displaySize(signal?: AbortSignal): Promise<Size>;
  cursorPosition(signal?: AbortSignal): Promise<Point>;
  /** Moves the pointer instantly (no animation). */
  moveMouse(to: Point, signal?: AbortSignal): Promise<void>;
  /**
   * Clicks `count` times (1–CLICK_COUNT_MAX) at the current position with `button`, holding
   * `modifiers` (DriverKeys) for the duration of the clicks only.
   */
  click(button: MouseButton, count: number, modifiers: DriverKey[], signal?: AbortSignal, at?: Point): Promise<void>;
  mouseDown(button: MouseButton, signal?: AbortSignal): Promise<void>;
  mouseUp(button: MouseButton, signal?: AbortSignal): Promise<void>;
  /** Press at `from`, move to `to` in steps so apps see motion, release; modifiers held throughout. */
  drag(from: Point, to: Point, modifiers: DriverKey[], signal?: AbortSignal): Promise<void>;
  /**
   * Scrolls `amount` (1–COMPUTER_SCROLL_AMOUNT_MAX) wheel clicks at the current position, holding `modifiers`.
   * `left` scrolls the content view left (X11 buttons 6), `right` right (button 7).
   */
  scroll(direction: ScrollDirection, amount: number, modifiers: DriverKey[], signal?: AbortSignal): Promise<void>;
  /** Presses the chord (all keys down in order, then up in reverse), `repeat` (1–COMPUTER_KEY_REPEAT_MAX) times. */
  pressKeys(chord: DriverKey[], repeat: number, signal?: AbortSignal): Promise<void>;
  /** Holds the chord down for `durationMs` (0–HOLD_MAX_MS, fractions allowed), then releases it (also on abort). */
  holdKeys(chord: DriverKey[], durationMs: number, signal?: AbortSignal): Promise<void>;
  /**
   * Types `text` exactly: printable ASCII with an explicit US shift map,
   * newline as Return, tab as Tab, and any other character through keysym
   * remapping. Rejects with ToolInputError for characters it cannot deliver
   * (control characters other than \n and \t), before typing anything.
   */
  typeText(text: string, signal?: AbortSignal): Promise<void>;
  /** Captures, converts BGRX→RGB, resizes and encodes, off the main event loop. */
  capture(options: CaptureOptions, signal?: AbortSignal): Promise<CapturedImage>;
  /** Releases held buttons and keys, ends the child. Idempotent. */
  close(): Promise<void>;
}
