/**
 * Chromium's managed policy: what closes the browser's own interface to the
 * model, which drives the headful browser with the mouse and keyboard too.
 * The address bar cannot open `file://`, `chrome://`, `view-source:` or
 * `devtools://` pages (so no DevTools either: its window is a devtools://
 * page), no native file picker or Save dialog opens, no printing, no screen
 * capture, no extensions, no incognito or guest windows outside the
 * session's context, and WebRTC may only go through the egress proxy
 * (`WebRtcIPHandling: disable_non_proxied_udp`: no UDP, TCP only through the
 * proxy, so STUN and TURN reach no address the proxy refuses). The file is
 * `scripts/chromium-policy.json`;
 * `scripts/setup.sh` and the Dockerfile install it where Debian's chromium
 * reads managed policies, `/etc/chromium/policies/managed/`. Only root can
 * write there, so a daemon that cannot find it says so at start and in
 * `/readyz` (docs/SECURITY.md).
 *
 * Chromium ignores a key it does not know without a word, so
 * test/browser-policy.test.ts has Chromium's own chrome://policy page read
 * the file and say OK of every key, and shows in a page what each key that
 * contains something refuses.
 *
 * `DeveloperToolsAvailability: 2` would be the direct way to switch DevTools
 * off, but it also stops Playwright from opening pages (measured with
 * Chromium 156: `newPage` fails), so the URL blocklist does that job.
 */
import { readdir, readFile } from 'node:fs/promises';
import { isDeepStrictEqual } from 'node:util';
import { join } from 'node:path';
import { PACKAGE_ROOT } from '../base/package-root.ts';

/** The policy this project ships. */
export const POLICY_SOURCE = join(PACKAGE_ROOT, 'scripts', 'chromium-policy.json');
/** Where Debian's chromium reads managed policies. */
export const MANAGED_POLICY_DIR = '/etc/chromium/policies/managed';

export interface PolicyState {
  /** Every setting of ours is in force (set to our value by some managed policy file). */
  enforced: boolean;
  /** Settings of ours that are missing or set differently. */
  missing: string[];
}

/** Whether the managed policies in `dir` hold every setting of `source` with its value. */
export async function browserPolicyState(source = POLICY_SOURCE, dir = MANAGED_POLICY_DIR): Promise<PolicyState> {
  const wanted = JSON.parse(await readFile(source, 'utf8')) as Record<string, unknown>;
  const installed: Record<string, unknown> = {};
  const files = await readdir(dir).catch(() => [] as string[]);
  for (const file of files.filter((f) => f.endsWith('.json')).sort()) {
    try {
      Object.assign(installed, JSON.parse(await readFile(join(dir, file), 'utf8')));
    } catch {
      // A file chromium cannot parse either: it sets nothing.
    }
  }
  const missing = Object.keys(wanted).filter((key) => !isDeepStrictEqual(installed[key], wanted[key]));
  return { enforced: missing.length === 0, missing };
}
