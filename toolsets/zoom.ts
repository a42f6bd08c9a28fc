/**
 * `zoom`, shared by both toolsets: the region input, its bounds check in
 * screenshot pixels, and the capture plan (the display/viewport rectangle it
 * covers, and the output size fitted into the screenshot size, upscaled so
 * the model sees the region's detail; docs/TOOLSETS.md B2, C3).
 */
import { z } from 'zod';
import type { Rect, Size } from '../src/base/geometry.ts';
import { ToolInputError } from '../src/base/errors.ts';
import { fitSize, regionToDisplay, type Geometry, type ScreenshotLimits } from '../src/base/geometry.ts';

export const zoomRegion = z
  .array(z.number())
  .length(4, 'must be [x0, y0, x1, y1]: four numbers, in screenshot pixels')
  .describe('[x0, y0, x1, y1]: top-left and bottom-right corners in full-screenshot pixels.');

/** Checks `region` (0 <= x0 < x1 <= width, same for y) and plans its capture. */
export function planZoom(
  region: readonly number[],
  g: Geometry,
  limits: ScreenshotLimits,
): { region: Rect; output: Size } {
  const [x0, y0, x1, y1] = region as [number, number, number, number];
  const { width, height } = g.screenshot;
  if (!(x0 >= 0 && y0 >= 0 && x0 < x1 && y0 < y1 && x1 <= width && y1 <= height)) {
    throw new ToolInputError(
      `region [${x0}, ${y0}, ${x1}, ${y1}] is not a region of the screenshot: ` +
        `need 0 <= x0 < x1 <= ${width} and 0 <= y0 < y1 <= ${height}.`,
    );
  }
  const rect = regionToDisplay([x0, y0, x1, y1], g);
  return { region: rect, output: fitSize(rect, { ...limits, maxWidthPx: width, maxHeightPx: height }, true) };
}
