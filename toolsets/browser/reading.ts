/**
 * Reading members: `read_page`, `find`, `get_page_text` (docs/TOOLSETS.md C2).
 * The page work lives in src/browser/snapshot.ts, the frames and element references in
 * src/browser/frame-worlds.ts.
 */
import { z } from 'zod';
import { READ_PAGE_DEPTH_DEFAULT, findElements, pageText, readPage } from '../../src/browser/snapshot.ts';
import { browserMember, tabId } from './context.ts';

/** Longest `find` query accepted: a description, not a document. */
export const FIND_QUERY_MAX = 500;

export const readPageMember = browserMember({
  name: 'read_page',
  summary: 'Accessibility tree of the page (or of one element), with [ref_N] references.',
  kind: 'text',
  effect: 'read',
  input: z.object({
    filter: z
      .enum(['all', 'interactive'])
      .nullish()
      .describe(
        'Omitted: visible elements in the viewport. "interactive": visible interactive elements only. "all": also elements outside the viewport.',
      ),
    depth: z
      .number()
      .int('must be a whole number')
      .min(1, 'must be at least 1')
      .nullish()
      .describe(`Maximum tree depth, at least 1. Default ${READ_PAGE_DEPTH_DEFAULT}.`),
    ref: z
      .string()
      .min(1)
      .max(64)
      .nullish()
      .describe('A reference such as "ref_7" from read_page or find: read only that element\'s subtree.'),
    tab_id: tabId,
  }),
  async handle(input, ctx) {
    const { page } = await ctx.tab(input.tab_id);
    return readPage(page, { filter: input.filter, depth: input.depth, ref: input.ref });
  },
});

export const find = browserMember({
  name: 'find',
  summary: 'Up to 20 elements matching a plain-language description, best first, with references.',
  kind: 'text',
  effect: 'read',
  input: z.object({
    query: z
      .string()
      .trim()
      .min(1, 'must describe the element, e.g. "search box"')
      .max(FIND_QUERY_MAX, `must be at most ${FIND_QUERY_MAX} characters`)
      .describe('What to look for, in plain words, e.g. "search box" or "add to cart button".'),
    tab_id: tabId,
  }),
  async handle(input, ctx) {
    const { page } = await ctx.tab(input.tab_id);
    return findElements(page, input.query);
  },
});

export const getPageText = browserMember({
  name: 'get_page_text',
  summary: "The page's visible text, main content first.",
  kind: 'text',
  effect: 'read',
  input: z.object({ tab_id: tabId }),
  async handle(input, ctx) {
    const { page } = await ctx.tab(input.tab_id);
    return pageText(page);
  },
});
