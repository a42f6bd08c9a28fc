/**
 * The operator's HTTP routes for a session's links (docs/PROTOCOL.md "Links"), behind the token:
 *
 *   POST   /v1/sessions/<session_id>/links            {"mode"?: "view"|"control", "ttl_ms"?: n} → 201, the link
 *   GET    /v1/sessions/<session_id>/links            the live links' ids, modes and expiries (never their text)
 *   DELETE /v1/sessions/<session_id>/links/<link_id>  204; the link's sockets are closed
 *
 * A control link only when takeover is allowed (`--allow-takeover`); the lifetime is bounded (links.ts).
 */
import type { ServerResponse } from 'node:http';
import { z } from 'zod';
import { DEFAULT_LINK_TTL_MS, LinkRegistry, MAX_LINK_TTL_MS, MAX_LINKS, MIN_LINK_TTL_MS } from './links.ts';
import { readBody, sendJson, sessionNotFound, sessionPath, SESSIONS_PATH } from './session-routes.ts';
import type { HttpRoute } from './server.ts';

/** Where a link opens the viewer: the page reads the link from the fragment, which browsers never send. */
export const LINK_PAGE_PATH = '/viewer/live';
const MAX_BODY_BYTES = 1024;
const LINK_ID = /^[A-Za-z0-9_-]{12}$/;

const CreateSchema = z.strictObject({
  mode: z.enum(['view', 'control']).optional(),
  ttl_ms: z.number().int().min(MIN_LINK_TTL_MS).max(MAX_LINK_TTL_MS).optional(),
});

export interface LinkRouteDeps {
  links: LinkRegistry;
  /** Whether a session by this id is live now. */
  isLive(sessionId: string): boolean;
  /** `--allow-takeover`: control links may be made. */
  takeover: boolean;
}

const json = (res: ServerResponse, status: number, error: string, message: string): void =>
  sendJson(res, status, { error, message });

/** `[sessionId, linkId?]` of `/v1/sessions/<id>/links[/<link_id>]`, else undefined. */
function parse(path: string): [string, string | undefined] | undefined {
  const [sessionId, what, linkId, ...more] = sessionPath(path) ?? [];
  if (!sessionId || what !== 'links' || more.length) return undefined;
  return [sessionId, linkId];
}

export function isLinksPath(path: string): boolean {
  return parse(path) !== undefined;
}

export function linkRoutes(deps: LinkRouteDeps): HttpRoute[] {
  const accepts = isLinksPath;
  return [
    {
      method: 'POST',
      path: SESSIONS_PATH,
      prefix: true,
      auth: 'token',
      accepts,
      async handle(req, res) {
        const [sessionId, linkId] = parse(req.url ?? '')!;
        if (linkId !== undefined) return json(res, 404, 'not_found', 'POST to /v1/sessions/<id>/links');
        const body = await readBody(req, MAX_BODY_BYTES);
        if (body === 'too_large') return json(res, 413, 'too_large', `the body may hold ${MAX_BODY_BYTES} bytes`);
        let parsed: z.output<typeof CreateSchema>;
        try {
          const result = CreateSchema.safeParse(body.length ? JSON.parse(body.toString('utf8')) : {});
          if (!result.success)
            throw new Error(result.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '));
          parsed = result.data;
        } catch (err) {
          return json(res, 400, 'invalid_request', `not a link request: ${(err as Error).message}`.slice(0, 300));
        }
        if (!deps.isLive(sessionId)) return sessionNotFound(res);
        const control = parsed.mode === 'control';
        if (control && !deps.takeover) {
          return json(res, 403, 'takeover_off', 'a control link needs takeover on (--allow-takeover)');
        }
        const made = deps.links.create(sessionId, control, parsed.ttl_ms ?? DEFAULT_LINK_TTL_MS);
        if (!made) return json(res, 503, 'too_many_links', `this daemon holds ${MAX_LINKS} live links`);
        sendJson(res, 201, {
          link_id: made.grant.id,
          session_id: sessionId,
          mode: control ? 'control' : 'view',
          expires_at: made.grant.expiresAt,
          link: made.link,
          path: `${LINK_PAGE_PATH}#link=${made.link}`,
        });
      },
    },
    {
      method: 'GET',
      path: SESSIONS_PATH,
      prefix: true,
      auth: 'token',
      accepts,
      handle(req, res) {
        const [sessionId, linkId] = parse(req.url ?? '')!;
        if (linkId !== undefined) return json(res, 404, 'not_found', 'GET /v1/sessions/<id>/links lists them');
        if (!deps.isLive(sessionId)) return sessionNotFound(res);
        sendJson(res, 200, {
          links: deps.links.of(sessionId).map((g) => ({
            link_id: g.id,
            mode: g.control ? 'control' : 'view',
            expires_at: g.expiresAt,
          })),
        });
      },
    },
    {
      method: 'DELETE',
      path: SESSIONS_PATH,
      prefix: true,
      auth: 'token',
      accepts,
      handle(req, res) {
        const [sessionId, linkId] = parse(req.url ?? '')!;
        if (linkId === undefined || !LINK_ID.test(linkId) || !deps.links.revoke(sessionId, linkId)) {
          return json(res, 404, 'link_not_found', 'no live link of this session with this id');
        }
        res.writeHead(204, { 'cache-control': 'no-store' }).end();
      },
    },
  ];
}
