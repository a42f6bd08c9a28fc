/**
 * The browser toolset's per-call context and the input pieces its members
 * share: `tab_id`, targets (a viewport coordinate or a `[ref_N]` from
 * read_page/find), modifier chords (docs/TOOLSETS.md C2, C3).
 */
import type { Page } from 'playwright';
import { z } from 'zod';
import type { BrowserManager } from '../../src/browser/manager.ts';
import type { BrowserSession } from '../../src/browser/session.ts';
import type { UrlPolicy } from '../../src/browser/url-policy.ts';
import type { EgressFilter } from '../../src/browser/egress.ts';
import type { Point } from '../../src/base/geometry.ts';
import { ToolInputError } from '../../src/base/errors.ts';
import { BrowserUnavailableError } from '../../src/browser/failures.ts';
import { fitSize, isInside, toDisplay, type Geometry } from '../../src/base/geometry.ts';
import type { CallContext, Member, ScreenshotSettings } from '../../src/toolset-api/types.ts';

export interface BrowserDeps {
  screenshots: ScreenshotSettings;
  urlPolicy: UrlPolicy;
  /** Longest `type` text accepted, in UTF-16 code units. */
  maxTypeTextLength: number;
  /** Folders `file_upload` may read from; empty means uploads are refused. */
  uploadRoots: readonly string[];
  /** Where the browser may connect (src/browser/egress.ts); `navigate` refuses a target it would refuse. */
  egress?: EgressFilter;
}

export interface BrowserCallContext extends CallContext, BrowserDeps {
  /** The browser of the session's desktop. */
  manager: BrowserManager;
  session: BrowserSession;
  /**
   * Ends this call's own work now (its `signal` aborts), e.g. when the browser
   * died under it: a `wait` must not sleep on for its whole duration after its
   * result went out.
   */
  stop(reason: unknown): void;
  /** Stops following the executor's signal; call once the call is over. */
  release(): void;
  /**
   * The tab this call acts on: `tabId`, else the active tab; a session with no
   * tab opens one. After the browser died and took the session's tabs, it
   * fails with BrowserCrashedError once, unless the call `opensPage` itself.
   */
  tab(tabId?: string | null, opensPage?: boolean): Promise<{ page: Page; tabId: string }>;
  /** The viewport and the screenshot that represents it. */
  geometry(page: Page): Geometry;
  /** A coordinate target in screenshot pixels → viewport pixels, refusing one outside the screenshot. */
  viewportPoint(page: Page, target: CoordinateTarget, field?: string): Point;
}

export function createBrowserContext(deps: BrowserDeps, call: CallContext): BrowserCallContext {
  const manager = call.desktop?.browser;
  if (!manager) throw new BrowserUnavailableError('this session has no browser');
  const session = manager.session(call.sessionId);
  // The call's own signal: it follows the executor's (cancel, timeout, shutdown) and can also be stopped here.
  const local = new AbortController();
  const follow = (): void => local.abort(call.signal.reason);
  if (call.signal.aborted) follow();
  else call.signal.addEventListener('abort', follow, { once: true });
  const geometry = (page: Page): Geometry => {
    const display = page.viewportSize() ?? manager.options.viewport;
    return { display, screenshot: fitSize(display, deps.screenshots.limits) };
  };
  return {
    ...call,
    ...deps,
    manager,
    signal: local.signal,
    stop: (reason) => local.abort(reason),
    release: () => call.signal.removeEventListener('abort', follow),
    session,
    tab: (tabId, opensPage) => session.page(tabId, opensPage),
    geometry,
    viewportPoint(page, target, field = 'target') {
      const g = geometry(page);
      const { x, y } = target;
      if (!isInside({ x, y }, g.screenshot)) {
        throw new ToolInputError(
          `${field} (${x}, ${y}) is outside the viewport: x must be 0–${g.screenshot.width - 1} and y 0–${g.screenshot.height - 1}.`,
        );
      }
      return toDisplay({ x, y }, g);
    },
  };
}

/** Type helper: a member literal checked against the browser context, keeping its literal name. */
export function browserMember<const N extends string, S extends z.ZodType>(
  member: Member<S, BrowserCallContext> & { name: N },
): Member<S, BrowserCallContext> & { name: N } {
  return member;
}

export const tabId = z.string().nullish().describe('Tab to act on. Defaults to the active tab when omitted.');

export const coordinateTarget = z
  .object({
    type: z.literal('coordinate'),
    x: z.number().describe('Viewport x in screenshot pixels.'),
    y: z.number().describe('Viewport y in screenshot pixels.'),
  })
  .describe('A point in the viewport, in the pixels of a full-viewport screenshot.');
export type CoordinateTarget = z.output<typeof coordinateTarget>;

export const refTarget = z
  .object({
    type: z.literal('ref'),
    ref: z.string().min(1).max(64).describe('A reference such as "ref_7" from read_page or find.'),
  })
  .describe('An element, by the reference read_page or find gave it.');
export type RefTarget = z.output<typeof refTarget>;

export const clickTarget = z.discriminatedUnion('type', [coordinateTarget, refTarget]);
export type ClickTarget = z.output<typeof clickTarget>;

export const modifiers = z
  .string()
  .max(100)
  .nullish()
  .describe('Keys held during the action, e.g. "shift", "ctrl+shift", "cmd+alt".');
