/**
 * Seeing members: `screenshot` (the viewport) and `zoom` (a region of it,
 * fitted to the screenshot size) (TOOLSET-CONTRACT C3, B5). Same geometry as
 * the computer toolset's: the viewport plays the display.
 */
import { z } from 'zod';
import { captureViewport } from '../../src/browser/image.ts';
import { ToolInputError } from '../../src/errors.ts';
import { fitSize, regionToDisplay } from '../../src/geometry.ts';
import { browserMember, tabId } from './context.ts';

/** A capture must finish well inside the call's time limit. */
const CAPTURE_TIMEOUT_MS = 15_000;

export const screenshot = browserMember({
  name: 'screenshot',
  summary: 'Capture the viewport, scaled to the screenshot size.',
  kind: 'image',
  effect: 'read',
  input: z.object({ tab_id: tabId }),
  async handle(input, ctx) {
    const { page } = await ctx.tab(input.tab_id);
    const g = ctx.geometry(page);
    const { format, quality } = ctx.screenshots;
    return captureViewport(page, { output: g.screenshot, format, quality, timeoutMs: CAPTURE_TIMEOUT_MS });
  },
});

export const zoom = browserMember({
  name: 'zoom',
  summary: 'Capture a region of the viewport, fitted (upscaled) to the screenshot size.',
  kind: 'image',
  effect: 'read',
  input: z.object({
    region: z
      .array(z.number())
      .length(4, 'must be [x0, y0, x1, y1]: four numbers, in screenshot pixels')
      .describe('[x0, y0, x1, y1]: top-left and bottom-right corners in full-screenshot pixels.'),
    tab_id: tabId,
  }),
  async handle(input, ctx) {
    const { page } = await ctx.tab(input.tab_id);
    const g = ctx.geometry(page);
    const [x0, y0, x1, y1] = input.region as [number, number, number, number];
    const { width, height } = g.screenshot;
    if (!(x0 >= 0 && y0 >= 0 && x0 < x1 && y0 < y1 && x1 <= width && y1 <= height)) {
      throw new ToolInputError(
        `region [${x0}, ${y0}, ${x1}, ${y1}] is not a region of the screenshot: ` +
          `need 0 <= x0 < x1 <= ${width} and 0 <= y0 < y1 <= ${height}.`,
      );
    }
    const clip = regionToDisplay([x0, y0, x1, y1], g);
    // Fit into the screenshot size, upscaling a small region so the model sees its detail.
    const limits = { ...ctx.screenshots.limits, maxWidthPx: width, maxHeightPx: height };
    const output = fitSize(clip, limits, true);
    const { format, quality } = ctx.screenshots;
    return captureViewport(page, { clip, output, format, quality, timeoutMs: CAPTURE_TIMEOUT_MS });
  },
});

export const SCREEN_MEMBERS = [screenshot, zoom] as const;
