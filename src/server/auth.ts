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

/** The token a client presented, if any. */
export function presentedToken(req: IncomingMessage): string | undefined {
  const auth = req.headers.authorization;
  const bearer = auth && /^Bearer\s+(\S+)\s*$/i.exec(auth);
  if (bearer) return bearer[1];
  const offered = offeredSubprotocols(req);
  if (!offered.includes(PROTOCOL_VERSION)) return undefined;
  return offered.find((p) => p.startsWith(TOKEN_SUBPROTOCOL_PREFIX))?.slice(TOKEN_SUBPROTOCOL_PREFIX.length);
}

export function isAuthorized(req: IncomingMessage, token: string): boolean {
  const presented = presentedToken(req);
  return presented !== undefined && tokensEqual(presented, token);
}

/** A handshake without Origin (a non-browser client) passes; one with an Origin must be allowlisted exactly. */
export function isOriginAllowed(req: IncomingMessage, allowOrigins: readonly string[]): boolean {
  const origin = req.headers.origin;
  if (origin === undefined) return true;
  return allowOrigins.includes(origin.toLowerCase());
}
