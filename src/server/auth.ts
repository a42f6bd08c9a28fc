/**
 * Handshake checks (docs/PROTOCOL.md "Transport"): the bearer token, from the
 * Authorization header or the `deskbatch.token.<token>` subprotocol, compared
 * in constant time; never from the query string. The Origin allowlist. The
 * Host allowlist of the HTTP routes.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import { PROTOCOL_VERSION, TOKEN_SUBPROTOCOL_PREFIX } from '../base/protocol.ts';

/** Constant-time comparison: both sides are hashed first, so lengths never leak through timing. */
export function tokensEqual(presented: string, expected: string): boolean {
  const a = createHash('sha256').update(presented).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}

function offeredSubprotocols(req: IncomingMessage): string[] {
  const header = req.headers['sec-websocket-protocol'];
  return header ? header.split(',').map((p) => p.trim()) : [];
}

/**
 * The token a client presented, if any. The subprotocol form counts only next to the endpoint's
 * own subprotocol (`deskbatch.v1` unless another is named); `null`: the endpoint has none, and only
 * the Authorization header counts (the harness's CDP door, whose clients cannot offer one).
 */
export function presentedToken(
  req: IncomingMessage,
  subprotocol: string | null = PROTOCOL_VERSION,
): string | undefined {
  const auth = req.headers.authorization;
  const bearer = auth && /^Bearer\s+(\S+)\s*$/i.exec(auth);
  if (bearer) return bearer[1];
  if (subprotocol === null) return undefined;
  const offered = offeredSubprotocols(req);
  if (!offered.includes(subprotocol)) return undefined;
  return offered.find((p) => p.startsWith(TOKEN_SUBPROTOCOL_PREFIX))?.slice(TOKEN_SUBPROTOCOL_PREFIX.length);
}

export function isAuthorized(req: IncomingMessage, token: string, subprotocol?: string | null): boolean {
  return authorize(req, token, undefined, subprotocol)?.kind === 'token';
}

/**
 * What a scoped link grants (docs/SECURITY.md "Links"): one session's viewer, read-only or with the right
 * to take control; `id` is the link's short id, the only part of it ever logged.
 */
export interface LinkGrant {
  id: string;
  session: string;
  control: boolean;
  expiresAt: number;
}

/** Checks a presented credential that is not the token: a link this daemon signed and still honours. */
export interface LinkVerifier {
  verify(presented: string): LinkGrant | undefined;
}

/** Who a request is: the token's holder (everything), or a link's (one session's viewer). */
export type Grant = { kind: 'token' } | { kind: 'link'; link: LinkGrant };

const TOKEN_GRANT: Grant = { kind: 'token' };

/**
 * The one credential check of every HTTP route and socket: the credential is presented in the same places
 * (the Authorization header, or the `deskbatch.token.` subprotocol), and is the token, or else a link
 * (`links`) this daemon signed. Which grants a route takes is the server's to decide (HttpRoute.auth,
 * SocketRoute.links).
 */
export function authorize(
  req: IncomingMessage,
  token: string,
  links: LinkVerifier | undefined,
  subprotocol?: string | null,
): Grant | undefined {
  const presented = presentedToken(req, subprotocol);
  if (presented === undefined) return undefined;
  if (tokensEqual(presented, token)) return TOKEN_GRANT;
  const link = links?.verify(presented);
  return link ? { kind: 'link', link } : undefined;
}

/** A handshake without Origin (a non-browser client) passes; one with an Origin must be allowlisted exactly. */
export function isOriginAllowed(req: IncomingMessage, allowOrigins: readonly string[]): boolean {
  const origin = req.headers.origin;
  if (origin === undefined) return true;
  return allowOrigins.includes(origin.toLowerCase());
}

/**
 * A host name (no port) that no hostile page can have a browser send: an IP literal, `localhost`, or a
 * name the operator vouched for (`--allow-host-header`, lower-case). Any other name could be one an attacker
 * controls and has rebound to this machine (DNS rebinding); the name, not the address, is what they control.
 */
export function isTrustedHostName(hostname: string, allowHostHeaders: readonly string[] = []): boolean {
  const name = hostname.toLowerCase();
  if (name === 'localhost' || isIP(name) === 4) return true;
  if (name.startsWith('[') && name.endsWith(']')) return isIP(name.slice(1, -1)) === 6;
  return allowHostHeaders.includes(name);
}

/**
 * The Host check of the HTTP routes: a request whose Host names a trusted host (any port: behind a port
 * forward or a Service the port differs) passes; so does one without Host (HTTP/1.0; every browser sends it).
 */
export function isHostAllowed(req: IncomingMessage, allowHostHeaders: readonly string[] = []): boolean {
  const host = req.headers.host;
  if (host === undefined) return true;
  let url: URL;
  try {
    url = new URL(`http://${host}`);
  } catch {
    return false;
  }
  // Only a bare authority: `host[:port]`, nothing the URL parser would have dropped or moved.
  if (url.username || url.password || url.pathname !== '/' || url.search || url.hash) return false;
  return isTrustedHostName(url.hostname, allowHostHeaders);
}

/**
 * A page this daemon served, connecting back: its Origin is `http://<Host>`. Only for a Host the HTTP
 * routes answer to (an IP literal, `localhost` or an `--allow-host-header` name; any other DNS name could
 * be rebound to this machine by a hostile page); the token is still required.
 */
export function isSameOrigin(req: IncomingMessage, allowHostHeaders: readonly string[] = []): boolean {
  const { origin, host } = req.headers;
  if (origin === undefined || host === undefined) return false;
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return false;
  }
  if (url.protocol !== 'http:' || url.host !== host.toLowerCase()) return false;
  return isTrustedHostName(url.hostname, allowHostHeaders);
}
