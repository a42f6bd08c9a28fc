/**
 * A session's scoped viewer links over the daemon's HTTP routes (docs/VIEWER.md "Links"): made with the token,
 * each opens that session's live page alone, read-only or with the right to take control, until it expires, is
 * revoked or the session ends. `DeskbatchClient.createLink` and `revokeLink` call these.
 */
import { DeskbatchError } from './errors.ts';
import { readBounded, refusalOf, send, sessionUrl } from './session-http.ts';

/** A link the daemon made: `url` opens the session's live page (`/viewer/live#link=…`). */
export interface ViewerLink {
  link_id: string;
  session_id: string;
  mode: 'view' | 'control';
  expires_at: number;
  /** The credential itself; hand it to whoever should watch, never log it. */
  link: string;
  url: string;
}

/** The daemon refused a link call (`code`: `session_not_found`, `takeover_off`, `link_not_found`, …). */
export class LinkError extends DeskbatchError {
  override name = 'LinkError';
  constructor(
    override readonly code: string,
    message: string,
    readonly status?: number,
  ) {
    super(message);
  }
}

async function refused(res: Parameters<typeof refusalOf>[0]): Promise<LinkError> {
  const { code, message, status } = await refusalOf(res);
  return new LinkError(code, message, status);
}

/** Makes a link to `sessionId`'s live page on the daemon at `wsUrl`. */
export async function createLink(
  wsUrl: string,
  token: string,
  sessionId: string,
  options: { mode?: 'view' | 'control'; ttlMs?: number } = {},
): Promise<ViewerLink> {
  const body = Buffer.from(
    JSON.stringify({
      ...(options.mode ? { mode: options.mode } : {}),
      ...(options.ttlMs !== undefined ? { ttl_ms: options.ttlMs } : {}),
    }),
  );
  const url = sessionUrl(wsUrl, sessionId, 'links');
  const headers = { 'content-type': 'application/json', 'content-length': String(body.length) };
  const res = await send(url, token, { method: 'POST', headers, body });
  if (res.statusCode !== 201) throw await refused(res);
  const made = JSON.parse((await readBounded(res, 64 * 1024)).toString('utf8')) as Omit<ViewerLink, 'url'> & {
    path: string;
  };
  const { path, ...rest } = made;
  return { ...rest, url: new URL(path, url).href };
}

/** Ends a link of `sessionId` by its id: its sockets are closed, and it opens nothing from then on. */
export async function revokeLink(wsUrl: string, token: string, sessionId: string, linkId: string): Promise<void> {
  const url = sessionUrl(wsUrl, sessionId, `links/${encodeURIComponent(linkId)}`);
  const res = await send(url, token, { method: 'DELETE' });
  if (res.statusCode !== 204) throw await refused(res);
  res.resume();
}
