/**
 * The browser driver: two marker pages of the session's own (testkit/load/marker-server.ts),
 * one after the other, each read back; now and then its tabs, its outline or a screenshot.
 */
import type { LoadOptions, Planned } from './run.ts';
import { everyNth, Plan } from './plan.ts';

export function planBrowser(opts: LoadOptions, tag: string, n: number): Planned {
  const p = new Plan(tag, n);
  // Two pages of the session's own, one after the other: the second shows the cookie and the
  // localStorage value the first left in this session's context, and nobody else's.
  for (const page of [2 * n, 2 * n + 1]) {
    const url = `${opts.webOrigin}/s/${tag}/${page}`;
    p.browser('navigate', { url }, { kind: 'navigate', url, title: `load ${tag} ${page}` });
    p.browser('get_page_text', {}, { kind: 'page', tag, n: page });
  }
  if (n % 4 === 1) p.browser('list_tabs', {}, { kind: 'tabs', tag, atLeast: 1 });
  if (n % 4 === 3) p.browser('read_page', { filter: 'all' }, { kind: 'outline', tag, n: 2 * n + 1 });
  if (everyNth(n, opts.browserScreenshotEvery)) p.browser('screenshot', {}, { kind: 'image' });
  return p.done('browser');
}
