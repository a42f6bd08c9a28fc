/** Seeing members: `screenshot` and `zoom` (TOOLSET-CONTRACT B2, B5). */
import { z } from 'zod';
import { ToolInputError } from '../../src/errors.ts';
import { fitSize, regionToDisplay } from '../../src/geometry.ts';
import { computerMember } from './context.ts';

export const screenshot = computerMember({
  name: 'screenshot',
  summary: 'Capture the whole display, scaled to the screenshot size.',
  kind: 'image',
  effect: 'read',
  input: z.object({}),
  async handle(_input, ctx) {
    const g = await ctx.geometry();
    const { format, quality } = ctx.screenshots;
    return ctx.driver.capture({ output: g.screenshot, format, quality }, ctx.signal);
  },
});

export const zoom = computerMember({
  name: 'zoom',
  summary: 'Capture a region at display resolution, fitted to the screenshot size.',
  kind: 'image',
  effect: 'read',
  input: z.object({
    region: z
      .array(z.number())
      .length(4, 'must be [x0, y0, x1, y1]: four numbers, in screenshot pixels')
      .describe('[x0, y0, x1, y1]: top-left and bottom-right corners in full-screenshot pixels.'),
  }),
  async handle(input, ctx) {
    const g = await ctx.geometry();
    const [x0, y0, x1, y1] = input.region as [number, number, number, number];
    const { width, height } = g.screenshot;
    if (!(x0 >= 0 && y0 >= 0 && x0 < x1 && y0 < y1 && x1 <= width && y1 <= height)) {
      throw new ToolInputError(
        `region [${x0}, ${y0}, ${x1}, ${y1}] is not a region of the screenshot: ` +
          `need 0 <= x0 < x1 <= ${width} and 0 <= y0 < y1 <= ${height}.`,
      );
    }
    const region = regionToDisplay([x0, y0, x1, y1], g);
    // Fit into the screenshot size, upscaling a small region so the model sees its detail.
    const limits = { ...ctx.screenshots.limits, maxWidthPx: width, maxHeightPx: height };
    const output = fitSize(region, limits, true);
    const { format, quality } = ctx.screenshots;
    return ctx.driver.capture({ region, output, format, quality }, ctx.signal);
  },
});
