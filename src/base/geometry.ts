/**
 * Screenshot geometry: how big the screenshot of a display is, and how a point
 * in screenshot pixels maps to display pixels and back. Pure functions, shared
 * by every toolset that returns screenshots (docs/TOOLSETS.md B3, B5).
 */
export interface Point {
  x: number;
  y: number;
}

export interface Size {
  width: number;
  height: number;
}

/** A rectangle in display pixels; `width` and `height` are at least 1. */
export interface Rect extends Point, Size {}

/** The API counts one visual token per started 28×28 tile (docs/TOOLSETS.md B5). */
export const VISUAL_TOKEN_TILE_PX = 28;

export interface ScreenshotLimits {
  /** Longest allowed side, in pixels. 2000 keeps requests with more than 20 images valid. */
  maxSidePx: number;
  /** Visual-token budget: ⌈w/28⌉·⌈h/28⌉ must not exceed it. */
  maxVisualTokens: number;
  /** Operator's smaller choice, if any. */
  maxWidthPx?: number;
  maxHeightPx?: number;
}

export function visualTokens(size: Size): number {
  return Math.ceil(size.width / VISUAL_TOKEN_TILE_PX) * Math.ceil(size.height / VISUAL_TOKEN_TILE_PX);
}

/** Whether an image of `size` is within `limits`. */
export function fitsLimits(size: Size, limits: ScreenshotLimits): boolean {
  return (
    size.width <= Math.min(limits.maxSidePx, limits.maxWidthPx ?? Infinity) &&
    size.height <= Math.min(limits.maxSidePx, limits.maxHeightPx ?? Infinity) &&
    visualTokens(size) <= limits.maxVisualTokens
  );
}

/**
 * The largest size with the source's aspect ratio (to the pixel) that fits
 * `limits` and `bound` (if given), never larger than the source. Used for the
 * screenshot of the whole display, and for a zoom region fitted into the
 * screenshot size (there `allowUpscale` is true).
 */
export function fitSize(source: Size, limits: ScreenshotLimits, allowUpscale = false): Size {
  const maxW = Math.min(limits.maxSidePx, limits.maxWidthPx ?? Infinity);
  const maxH = Math.min(limits.maxSidePx, limits.maxHeightPx ?? Infinity);
  let scale = Math.min(maxW / source.width, maxH / source.height);
  if (!allowUpscale) scale = Math.min(1, scale);
  let size = scaled(source, scale);
  // Shrink until the token budget holds; each step loses at most a pixel of width.
  while (visualTokens(size) > limits.maxVisualTokens && size.width > 1 && size.height > 1) {
    scale = Math.min(scale * 0.995, (size.width - 1) / source.width);
    size = scaled(source, scale);
  }
  return size;
}

function scaled(source: Size, scale: number): Size {
  return {
    width: Math.max(1, Math.floor(source.width * scale)),
    height: Math.max(1, Math.floor(source.height * scale)),
  };
}

/** A display and the screenshot that represents it. */
export interface Geometry {
  display: Size;
  screenshot: Size;
}

/**
 * Screenshot pixel → display pixel. The model names a pixel of the screenshot;
 * we aim at the display pixel under that pixel's centre, so a round trip with
 * `toScreenshot` returns the same pixel.
 */
export function toDisplay(p: Point, g: Geometry): Point {
  return {
    x: mapAxis(p.x, g.screenshot.width, g.display.width),
    y: mapAxis(p.y, g.screenshot.height, g.display.height),
  };
}

/** Display pixel → screenshot pixel (`cursor_position`). */
export function toScreenshot(p: Point, g: Geometry): Point {
  return {
    x: mapAxis(p.x, g.display.width, g.screenshot.width),
    y: mapAxis(p.y, g.display.height, g.screenshot.height),
  };
}

function mapAxis(v: number, from: number, to: number): number {
  const mapped = from === to ? Math.round(v) : Math.round(((v + 0.5) * to) / from - 0.5);
  // A fractional coordinate such as 1279.6 is inside a 1280-wide screenshot, and must stay inside the display.
  return Math.min(to - 1, Math.max(0, mapped));
}

/** Whether a screenshot point is inside: 0 <= x < width and 0 <= y < height. */
export function isInside(p: Point, size: Size): boolean {
  return p.x >= 0 && p.y >= 0 && p.x < size.width && p.y < size.height;
}

/**
 * A region `[x0, y0, x1, y1]` in screenshot pixels (top-left inclusive,
 * bottom-right exclusive) → the display rectangle it covers.
 */
export function regionToDisplay(region: readonly [number, number, number, number], g: Geometry): Rect {
  const sx = g.display.width / g.screenshot.width;
  const sy = g.display.height / g.screenshot.height;
  const x0 = Math.max(0, Math.floor(region[0] * sx));
  const y0 = Math.max(0, Math.floor(region[1] * sy));
  const x1 = Math.min(g.display.width, Math.ceil(region[2] * sx));
  const y1 = Math.min(g.display.height, Math.ceil(region[3] * sy));
  return { x: x0, y: y0, width: Math.max(1, x1 - x0), height: Math.max(1, y1 - y0) };
}
