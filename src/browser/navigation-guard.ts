/**
 * The operator's host lists (src/browser/url-policy.ts) applied to what pages
 * do themselves: navigations they start (links, scripts, redirects by script)
 * are refused by routing, and a page that landed on a refused host anyway (an
 * HTTP redirect, which routing does not see) is left for about:blank.
 */
import type { BrowserContext, Page } from 'playwright';
import type { Notices } from './notices.ts';
import { isAllowedUrl, type UrlPolicy } from './url-policy.ts';

const REFUSED_NAVIGATION_NOTICE = 'A navigation was refused.';

function hasLists(policy: UrlPolicy): boolean {
  return policy.allowHosts.length > 0 || policy.denyHosts.length > 0;
}

export class NavigationGuard {
  /** The policy last asked for (navigate's), and the context it was installed on. */
  private policy: UrlPolicy | undefined;
  private guarded: BrowserContext | undefined;

  constructor(
    /** The operator's policy, in force until a call asks for one. */
    private readonly initial: UrlPolicy | undefined,
    private readonly notices: Notices,
  ) {}

  /** The policy a new context is guarded with. */
  get inForce(): UrlPolicy | undefined {
    return this.policy ?? this.initial;
  }

  /**
   * Refuses navigations the pages of the session's context start to URLs the
   * host lists refuse. Only installed when there are lists: routing every
   * request costs time and disables the cache.
   */
  async guard(policy: UrlPolicy, contextNow: () => Promise<BrowserContext>): Promise<void> {
    if (!hasLists(policy)) return;
    this.policy = policy;
    const context = await contextNow();
    if (this.guarded === context) return;
    this.guarded = context;
    await context.route('**/*', async (route) => {
      const request = route.request();
      if (request.isNavigationRequest() && !isAllowedUrl(new URL(request.url()), policy)) {
        this.notices.add(REFUSED_NAVIGATION_NOTICE);
        await route.abort('blockedbyclient').catch(() => undefined);
      } else {
        await route.fallback().catch(() => undefined);
      }
    });
  }

  /** The host lists in force, if the operator set any. */
  policyWithLists(): UrlPolicy | undefined {
    const policy = this.inForce;
    return policy && hasLists(policy) ? policy : undefined;
  }

  /**
   * Where a page ended up must pass the host lists too: routing does not see
   * HTTP redirect hops, so an allowed host could redirect to a refused one.
   * Such a page is left for about:blank at once.
   */
  checkLanding(page: Page, url: string): void {
    const policy = this.policyWithLists();
    if (!policy || !/^https?:/i.test(url) || isAllowedUrl(new URL(url), policy)) return;
    this.notices.add(REFUSED_NAVIGATION_NOTICE);
    void page.goto('about:blank').catch(() => undefined);
  }
}
