/** Seeing members: `screenshot` and `zoom` (docs/TOOLSETS.md B2, B5). */
import { z } from 'zod';
import { planZoom, zoomRegion } from '../zoom.ts';
import { computerMember } from './context.ts';

export const screenshot = computerMember({
  name: 'screenshot',
  summary: 'Capture the whole display, scaled to the screenshot size.',
  kind: 'image',
  effect: 'read',
  input: z.object({}),
  async handle(_input, ctx) {
    const g = await ctx.geometry();
    const { format, quality, settle } = ctx.screenshots;
    return ctx.driver.capture({ output: g.screenshot, format, quality, settle }, ctx.signal);
  },
});

export const zoom = computerMember({
  name: 'zoom',
  summary: 'Capture a region at display resolution, fitted to the screenshot size.',
  kind: 'image',
  effect: 'read',
  input: z.object({ region: zoomRegion }),
  async handle(input, ctx) {
    const { region, output } = planZoom(input.region, await ctx.geometry(), ctx.screenshots.limits);
    const { format, quality, settle } = ctx.screenshots;
    return ctx.driver.capture({ region, output, format, quality, settle }, ctx.signal);
  },
});
