/**
 * Navigation and tab members (docs/TOOLSETS.md C3, C4): `navigate` opens a
 * URL the policy allows, or goes back, forward or reloads; the four tab
 * members change the tab set and answer with exactly one `browser_state`
 * (added by the wrapper in index.ts).
 */
import type { Page, Response } from 'playwright';
import { z } from 'zod';
import type { BrowserSession } from '../../src/browser/session.ts';
import { oneLine } from '../../src/base/text.ts';
import { isAllowedUrl, resolveNavigationUrl } from '../../src/browser/url-policy.ts';
import { ModelFacingError, ToolInputError, ToolRefusedError } from '../../src/base/errors.ts';
import { browserMember, tabId } from './context.ts';

/** Time for the page to reach DOMContentLoaded, then extra time for 'load'; both below the 30 s call limit. */
const NAV_DOM_TIMEOUT_MS = 20_000;
const NAV_LOAD_TIMEOUT_MS = 5_000;
/** How long a navigation that became a download waits for Playwright to announce it. */
const DOWNLOAD_EVENT_WAIT_MS = 2_000;
/** Longest URL and title in navigate's text. */
const TEXT_URL_MAX = 2_000;
const TEXT_TITLE_MAX = 200;
/** browser_state's limits for a tab_id (docs/TOOLSETS.md C4), enforced on the model's tab_id too. */
const TAB_ID_MAX = 4096;
const CONTROL_CHARS = /[\p{Cc}\u2028\u2029]/u;

/** A navigation that did not complete, said without the URL or host (docs/TOOLSETS.md D3). */
class NavigationError extends ModelFacingError {
  override readonly name = 'NavigationError';
  override readonly code = 'ERR_NAVIGATION';
  override readonly retryable = true;
}

const HISTORY = { back: 'goBack', forward: 'goForward' } as const;

/** A navigation's outcome: the main document's response (null for about:blank, or history without one), or a download. */
type Outcome = { response: Response | null } | 'download';

/** Runs a navigation and waits for DOMContentLoaded, then (briefly) for 'load'. */
async function loaded(page: Page, session: BrowserSession, go: () => Promise<Response | null>): Promise<Outcome> {
  let response: Response | null;
  const downloads = session.downloadCount;
  try {
    response = await go();
  } catch (err) {
    const message = err instanceof Error ? err.message : '';
    if (/Download is starting/i.test(message)) {
      // Let the download reach the session, so this call's result reports it.
      await session.downloadSince(downloads, DOWNLOAD_EVENT_WAIT_MS);
      return 'download';
    }
    if (err instanceof Error && err.name === 'TimeoutError') {
      throw new NavigationError(`The page did not load within ${NAV_DOM_TIMEOUT_MS / 1000} s.`);
    }
    // Chromium's net error code (net::ERR_NAME_NOT_RESOLVED) is safe and useful; the rest of the message is not.
    const code = /net::ERR_[A-Z_]+/.exec(message)?.[0];
    throw new NavigationError(code ? `The navigation failed: ${code}.` : 'The navigation failed.');
  }
  // Slow images or scripts must not fail a navigation whose document is there.
  await page.waitForLoadState('load', { timeout: NAV_LOAD_TIMEOUT_MS }).catch(() => undefined);
  return { response };
}

export const navigate = browserMember({
  name: 'navigate',
  summary: 'Open a URL in the tab, or go back, forward, or reload.',
  kind: 'text',
  effect: 'write',
  input: z.object({
    url: z
      .string()
      .min(1)
      .max(8192)
      .describe('An http(s) URL (no scheme means https), or "back", "forward" or "reload".'),
    tab_id: tabId,
  }),
  async handle(input, ctx) {
    const command = input.url.trim().toLowerCase();
    // Refuse before touching the browser: a refused URL must not even open a tab.
    const target =
      command === 'back' || command === 'forward' || command === 'reload'
        ? undefined
        : resolveNavigationUrl(input.url, ctx.urlPolicy);
    if (target !== undefined && ctx.egress) {
      const url = new URL(target);
      const port = url.port ? Number(url.port) : url.protocol === 'https:' ? 443 : 80;
      const decision = await ctx.egress.decide(url.hostname, port);
      // The proxy would refuse it anyway; saying so here is clearer than an error page.
      if (!decision.allowed && decision.reason !== 'unresolved') {
        throw new ToolRefusedError(
          'Refused: that address is not on the public internet, and this browser may not connect to it.',
        );
      }
    }
    const { page } = await ctx.tab(input.tab_id, target !== undefined && !input.tab_id);
    await ctx.session.guardNavigations(ctx.urlPolicy);
    const options = { waitUntil: 'domcontentloaded', timeout: NAV_DOM_TIMEOUT_MS } as const;
    const before = page.url();
    const outcome =
      target !== undefined
        ? await loaded(page, ctx.session, () => page.goto(target, options))
        : command === 'reload'
          ? await loaded(page, ctx.session, () => page.reload(options))
          : await loaded(page, ctx.session, () => page[HISTORY[command as keyof typeof HISTORY]](options));
    if (outcome === 'download') return 'The URL started a download; the page did not change.';
    const { response } = outcome;
    if (target === undefined && command !== 'reload' && !response && page.url() === before) {
      throw new ToolInputError(`There is no page to go ${command} to in this tab's history.`);
    }
    // A redirect may have landed on a host the lists refuse (routing does not see redirect hops).
    // The final response's URL, not page.url(): the session may already have left the refused page.
    const landed = response?.url() ?? page.url();
    const policy = ctx.session.policyWithLists();
    if (policy && /^https?:/i.test(landed) && !isAllowedUrl(new URL(landed), policy)) {
      throw new ToolRefusedError("Refused: that host is not allowed by this browser's URL policy.");
    }
    const url = oneLine(page.url()).slice(0, TEXT_URL_MAX);
    const title = oneLine(await page.title().catch(() => '')).slice(0, TEXT_TITLE_MAX);
    return `Navigated to ${url}${title ? ` — ${title}` : ''}${response ? ` (HTTP ${response.status()})` : ''}`;
  },
});

/** A tab_id the model names: within browser_state's limits, else an error result, never a block. */
const requiredTabId = z
  .string()
  .min(1, 'must not be empty')
  .max(TAB_ID_MAX, `must be at most ${TAB_ID_MAX} characters`)
  .refine((id) => !CONTROL_CHARS.test(id), 'must not contain control characters or line breaks')
  .describe('The tab, by the tab_id from browser_state or list_tabs.');

export const listTabs = browserMember({
  name: 'list_tabs',
  summary: 'List the open tabs.',
  kind: 'tab',
  effect: 'read',
  input: z.object({}),
  async handle() {
    // The wrapper reports the inventory.
  },
});

export const newTab = browserMember({
  name: 'new_tab',
  summary: 'Open a blank tab and make it the active tab.',
  kind: 'tab',
  effect: 'write',
  input: z.object({}),
  async handle(_input, ctx) {
    await ctx.session.openNewTab();
  },
});

export const switchTab = browserMember({
  name: 'switch_tab',
  summary: 'Make a tab the active tab.',
  kind: 'tab',
  effect: 'write',
  input: z.object({ tab_id: requiredTabId }),
  async handle(input, ctx) {
    // No contextNow(): a session whose browser is not up has no tabs, and must not launch one to say so.
    ctx.session.switchTab(input.tab_id);
  },
});

export const closeTab = browserMember({
  name: 'close_tab',
  summary: 'Close a tab.',
  kind: 'tab',
  effect: 'write',
  input: z.object({ tab_id: requiredTabId }),
  async handle(input, ctx) {
    await ctx.session.closeTab(input.tab_id);
  },
});
