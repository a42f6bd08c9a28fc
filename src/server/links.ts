/**
 * Scoped, expiring links to one session's viewer (docs/SECURITY.md "Links", docs/VIEWER.md "Links").
 *
 * A link is `dl1.<claims>.<signature>`: the claims (base64url JSON: a random id, the session, whether it may
 * take control, its expiry) signed with HMAC-SHA256 under a key of the daemon's own, 32 random bytes drawn
 * at start and never written anywhere (never the token: a link that leaks tells nothing of it). A signature
 * alone is not enough: the registry keeps every link it made until it ends, and a link is honoured only
 * while it is there, so it stops at its expiry, when the operator revokes it, or when its session ends, and
 * the sockets it opened are closed then. A daemon's restart ends every link (its key and its sessions go).
 *
 * A link is presented where the token is (the Authorization header, or the `deskbatch.token.` subprotocol)
 * and checked on the same path (auth.ts `authorize`); it opens only the viewer's sockets of its own session
 * (SocketRoute.links), never /v1, an HTTP route, a recording or /metrics. It is never logged whole: the log
 * names its short id.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { WebSocket } from 'ws';
import type { ActivityHub } from '../base/activity.ts';
import type { Logger } from '../base/log.ts';
import type { LinkGrant, LinkVerifier } from './auth.ts';

const PREFIX = 'dl1';
/** What the page and a link's holder see when its socket is closed because the link ended. */
export const CLOSE_LINK_ENDED = 4401;
/** A link's lifetime when none is asked for, and the most one may be given. */
export const DEFAULT_LINK_TTL_MS = 15 * 60_000;
export const MAX_LINK_TTL_MS = 24 * 60 * 60_000;
export const MIN_LINK_TTL_MS = 1_000;
/** Links live at once, over every session (each holds a timer and its sockets). */
export const MAX_LINKS = 256;
/** A presented credential longer than this is not a link (checked before any decoding). */
const MAX_LINK_CHARS = 512;
const LINK_SHAPE = /^dl1\.[A-Za-z0-9_-]{1,400}\.[A-Za-z0-9_-]{43}$/;

export type LinkEnd = 'expired' | 'revoked' | 'session_ended' | 'shutdown';

interface Entry {
  grant: LinkGrant;
  timer: NodeJS.Timeout;
  sockets: Set<WebSocket>;
}

export interface LinkCounts {
  /** Links honoured now. */
  live: number;
  created: { view: number; control: number };
  ended: Record<LinkEnd, number>;
  /** Presented credentials that were neither the token nor a live link of this daemon's. */
  refused: number;
}

export interface LinkRegistryDeps {
  activity: ActivityHub;
  log: Logger;
}

export class LinkRegistry implements LinkVerifier {
  private readonly key = randomBytes(32);
  private readonly links = new Map<string, Entry>();
  readonly counts: LinkCounts = {
    live: 0,
    created: { view: 0, control: 0 },
    ended: { expired: 0, revoked: 0, session_ended: 0, shutdown: 0 },
    refused: 0,
  };
  private readonly unsubscribe: () => void;

  constructor(private readonly deps: LinkRegistryDeps) {
    this.unsubscribe = deps.activity.subscribe((a) => {
      if (a.type !== 'session_closed') return;
      for (const e of [...this.links.values()]) if (e.grant.session === a.session) this.end(e, 'session_ended');
    });
  }

  /** A new link for `session`, or undefined when MAX_LINKS are live. `ttlMs` is already bounded by the caller. */
  create(session: string, control: boolean, ttlMs: number): { link: string; grant: LinkGrant } | undefined {
    if (this.links.size >= MAX_LINKS) return undefined;
    const grant: LinkGrant = {
      id: randomBytes(9).toString('base64url'),
      session,
      control,
      expiresAt: Date.now() + ttlMs,
    };
    const claims = Buffer.from(
      JSON.stringify({ i: grant.id, s: session, c: control ? 1 : 0, e: grant.expiresAt }),
    ).toString('base64url');
    const link = `${PREFIX}.${claims}.${this.sign(claims)}`;
    const timer = setTimeout(() => this.end(entry, 'expired'), ttlMs);
    timer.unref();
    const entry: Entry = { grant, timer, sockets: new Set() };
    this.links.set(grant.id, entry);
    this.counts.live = this.links.size;
    this.counts.created[control ? 'control' : 'view']++;
    this.deps.log.info('link made', { session, link: grant.id, control, expires_at: grant.expiresAt });
    return { link, grant };
  }

  /** The link's grant while it is honoured: signed by this daemon, not tampered with, live, not expired. */
  verify(presented: string): LinkGrant | undefined {
    const grant = this.check(presented);
    if (!grant) this.counts.refused++;
    return grant;
  }

  private check(presented: string): LinkGrant | undefined {
    if (presented.length > MAX_LINK_CHARS || !LINK_SHAPE.test(presented)) return undefined;
    const [, claims, signature] = presented.split('.') as [string, string, string];
    const expected = Buffer.from(this.sign(claims), 'base64url');
    const given = Buffer.from(signature, 'base64url');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
    let id: unknown;
    try {
      id = (JSON.parse(Buffer.from(claims, 'base64url').toString('utf8')) as { i?: unknown }).i;
    } catch {
      return undefined;
    }
    const entry = typeof id === 'string' ? this.links.get(id) : undefined;
    if (!entry || entry.grant.expiresAt <= Date.now()) return undefined;
    return entry.grant;
  }

  /** Ends a link of `session` by its id; false when there is no such live link. */
  revoke(session: string, id: string): boolean {
    const entry = this.links.get(id);
    if (!entry || entry.grant.session !== session) return false;
    this.end(entry, 'revoked');
    return true;
  }

  /** The live links of a session (their grants: no link text, which the daemon does not keep). */
  of(session: string): LinkGrant[] {
    return [...this.links.values()].filter((e) => e.grant.session === session).map((e) => e.grant);
  }

  /** A socket a link opened: closed when the link ends (at once if it already has). */
  hold(grant: LinkGrant, ws: WebSocket): void {
    const entry = this.links.get(grant.id);
    if (!entry) {
      ws.close(CLOSE_LINK_ENDED, 'this link has ended');
      return;
    }
    entry.sockets.add(ws);
    ws.once('close', () => entry.sockets.delete(ws));
  }

  /** Sockets open through links now. */
  get sockets(): number {
    let n = 0;
    for (const e of this.links.values()) n += e.sockets.size;
    return n;
  }

  private end(entry: Entry, why: LinkEnd): void {
    if (this.links.get(entry.grant.id) !== entry) return;
    this.links.delete(entry.grant.id);
    clearTimeout(entry.timer);
    this.counts.live = this.links.size;
    this.counts.ended[why]++;
    for (const ws of entry.sockets) ws.close(CLOSE_LINK_ENDED, `this link has ended (${why})`);
    entry.sockets.clear();
    this.deps.log.info('link ended', { session: entry.grant.session, link: entry.grant.id, reason: why });
  }

  private sign(claims: string): string {
    return createHmac('sha256', this.key).update(`${PREFIX}.${claims}`).digest('base64url');
  }

  close(): void {
    this.unsubscribe();
    for (const e of [...this.links.values()]) this.end(e, 'shutdown');
  }
}
