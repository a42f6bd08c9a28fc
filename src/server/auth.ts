/**
 * Handshake checks (docs/PROTOCOL.md "Transport"): the bearer token, from the
 * Authorization header or the `deskbatch.token.<token>` subprotocol, compared
 * in constant time; never from the query string. The Origin allowlist.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { PROTOCOL_VERSION, TOKEN_SUBPROTOCOL_PREFIX } from '../protocol.ts';

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
 * own subprotocol (`deskbatch.v1` unless another is named).
 */
export function presentedToken(req: IncomingMessage, subprotocol: string = PROTOCOL_VERSION): string | undefined {
  const auth = req.headers.authorization;
  const bearer = auth && /^Bearer\s+(\S+)\s*$/i.exec(auth);
  if (bearer) return bearer[1];
  const offered = offeredSubprotocols(req);
  if (!offered.includes(subprotocol)) return undefined;
  return offered.find((p) => p.startsWith(TOKEN_SUBPROTOCOL_PREFIX))?.slice(TOKEN_SUBPROTOCOL_PREFIX.length);
}

export function isAuthorized(req: IncomingMessage, token: string, subprotocol?: string): boolean {
  const presented = presentedToken(req, subprotocol);
  return presented !== undefined && tokensEqual(presented, token);
}

/** A handshake without Origin (a non-browser client) passes; one with an Origin must be allowlisted exactly. */
export function isOriginAllowed(req: IncomingMessage, allowOrigins: readonly string[]): boolean {
  const origin = req.headers.origin;
  if (origin === undefined) return true;
  return allowOrigins.includes(origin.toLowerCase());
}

/**
 * A page this daemon served, connecting back: its Origin is `http://<Host>`. Only for a Host that is
 * an IP literal or `localhost` (a DNS name could be rebound to this machine by a hostile page); the
 * token is still required.
 */
export function isSameOrigin(req: IncomingMessage): boolean {
  const { origin, host } = req.headers;
  if (origin === undefined || host === undefined) return false;
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return false;
  }
  if (url.protocol !== 'http:' || url.host !== host.toLowerCase()) return false;
  const name = url.hostname;
  return name === 'localhost' || /^\d{1,3}(\.\d{1,3}){3}$/.test(name) || name.startsWith('[');
}
