/**
 * Which URLs `navigate` may open (docs/TOOLSETS.md C3: the API does not
 * filter URLs). Only http and https by default; the operator may add a host
 * allowlist and a denylist. A refusal is a ToolRefusedError whose text is
 * written for the model and names no host or path of ours.
 */
import { domainToASCII } from 'node:url';
import { ToolRefusedError } from '../base/errors.ts';

export interface UrlPolicy {
  /** When non-empty, only these hosts (and their subdomains) may be opened. */
  allowHosts: readonly string[];
  /** These hosts (and their subdomains) are never opened. */
  denyHosts: readonly string[];
}

/** The longest host name DNS allows (RFC 1035); a page can hand us far longer ones. */
export const MAX_HOST_LENGTH = 253;

/**
 * Lower case, punycode, no trailing dot: `localhost.` is the same host as
 * `localhost`. Undefined for a host longer than any DNS name, which matches no
 * rule and is refused. Linear in the host's length: a regex such as `/\.+$/`
 * takes about a second on a page-supplied host of 50,000 dots, and this runs
 * on the daemon's one thread for every navigation a page starts.
 */
function canonicalHost(host: string): string | undefined {
  if (host.length > MAX_HOST_LENGTH + 3) return undefined; // brackets and a trailing dot
  let name = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  name = (domainToASCII(name) || name).toLowerCase();
  let end = name.length;
  while (end > 0 && name.charCodeAt(end - 1) === 0x2e) end--;
  name = name.slice(0, end);
  return name.length <= MAX_HOST_LENGTH ? name : undefined;
}

function hostMatches(host: string, rule: string): boolean {
  const r = canonicalHost(rule.replace(/^\*?\./, ''));
  return r !== undefined && (host === r || host.endsWith(`.${r}`));
}

/** Whether a URL the browser is about to load passes the policy (no scheme fix-ups here). */
export function isAllowedUrl(url: URL, policy: UrlPolicy): boolean {
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return false;
  const host = canonicalHost(url.hostname);
  if (host === undefined) return false;
  if (policy.denyHosts.some((r) => hostMatches(host, r))) return false;
  return policy.allowHosts.length === 0 || policy.allowHosts.some((r) => hostMatches(host, r));
}

/**
 * The URL `navigate` should open for the model's `url`: a scheme-less value
 * means https. Throws ToolRefusedError for anything the policy refuses.
 */
export function resolveNavigationUrl(raw: string, policy: UrlPolicy): string {
  const text = raw.trim();
  // "example.com/x" and "localhost:8080" have no scheme; "javascript:alert(1)" and "file:///etc" do.
  const hasScheme = /^[a-z][a-z0-9+.-]*:/i.test(text) && !/^[^/:]+:\d+(\/|$)/.test(text);
  let url: URL;
  try {
    url = new URL(hasScheme ? text : `https://${text}`);
  } catch {
    throw new ToolRefusedError(
      'Refused: that is not a valid URL. Give an http or https URL, or back, forward or reload.',
    );
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ToolRefusedError(
      `Refused: only http and https URLs can be opened, not ${url.protocol.slice(0, 20)} URLs.`,
    );
  }
  if (!isAllowedUrl(url, policy)) {
    throw new ToolRefusedError("Refused: that host is not allowed by this browser's URL policy.");
  }
  return url.href;
}
