/**
 * Seeing members: `screenshot` (the viewport) and `zoom` (a region of it,
 * fitted to the screenshot size) (docs/TOOLSETS.md C3, B5). Same geometry as
 * the computer toolset's: the viewport plays the display.
 */
import { z } from 'zod';
import { captureViewport } from '../../src/browser/image.ts';
import { planZoom, zoomRegion } from '../zoom.ts';
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
  summary: 'Capture a region of the viewport at the screenshot size, rendered at that scale (not enlarged pixels).',
  kind: 'image',
  effect: 'read',
  input: z.object({ region: zoomRegion, tab_id: tabId }),
  async handle(input, ctx) {
    const { page } = await ctx.tab(input.tab_id);
    const { region: clip, output } = planZoom(input.region, ctx.geometry(page), ctx.screenshots.limits);
    const { format, quality } = ctx.screenshots;
    return captureViewport(page, { clip, output, format, quality, timeoutMs: CAPTURE_TIMEOUT_MS });
  },
});
