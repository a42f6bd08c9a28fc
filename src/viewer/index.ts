/**
 * The live viewer (docs/VIEWER.md): a read-only page on the daemon's own port
 * where an operator watches the desktop and each session's batches.
 *
 * - `GET /viewer`, `/viewer/app.js`, `/viewer/common.js` (what both pages share), `/viewer/takeover.js`
 *   (the takeover part of the live page), `/viewer/app.css`: static files read at
 *   start, served without a token (they hold no data and no secrets) under a
 *   strict Content-Security-Policy: scripts and styles only from this origin,
 *   no inline code, images only from data: and blob: URLs, media (the
 *   recordings' video) only from blob: URLs, no framing.
 * - `GET /viewer/replay`, `/viewer/replay.js` (its list), `/viewer/replay-player.js` (the recording
 *   opened), `/viewer/replay-model.js` (what both read), `/viewer/replay.css`: the replay page
 *   (docs/VIEWER.md "Replay"), static too, under the same policy;
 *   it reads the recordings' routes (src/recording/routes.ts) with the token.
 * - `/viewer/feed`: the WebSocket the page reads (feed.ts), behind the usual
 *   handshake checks plus a same-origin exception for the page itself; the
 *   token travels as the `deskbatch.token.<token>` subprotocol.
 * - `GET /viewer/novnc/core/…`, `/viewer/novnc/vendor/…`: noVNC's modules
 *   for the pages' live desktop view (novnc.ts), static, no token, under the
 *   same policy; 404 when noVNC is not installed.
 * - `GET /viewer/live`, `/viewer/live.js`: one session's page (docs/VIEWER.md
 *   "Links"): its live desktop and its calls, opened with a link (or the
 *   token and `?session=`); the one page that may be framed, and only by the
 *   origins the operator lists (`--embed-origin`: CSP frame-ancestors).
 */
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ActivityHub } from '../base/activity.ts';
import type { Logger } from '../base/log.ts';
import type { HttpRoute, SocketRoute } from '../server/server.ts';
import { VIEWER_FEED_PATH, VIEWER_SUBPROTOCOL, ViewerFeed, type ViewerLimits } from './feed.ts';
import { DEFAULT_NOVNC_DIR, loadNovnc, type NovncFiles } from './novnc.ts';

export { VIEWER_FEED_PATH, VIEWER_SUBPROTOCOL, ViewerFeed } from './feed.ts';
export type { FeedMessage, ImageView, SessionView, TimelineEntry, ViewerLimits } from './feed.ts';

export const VIEWER_PATH = '/viewer';
export const REPLAY_PATH = '/viewer/replay';
export const LIVE_PATH = '/viewer/live';
/** noVNC's modules (`core/…`, `vendor/…`) are served under this path when takeover is on. */
export const NOVNC_PATH = '/viewer/novnc';
export { DEFAULT_NOVNC_DIR } from './novnc.ts';

/** A Host header we are willing to write into the CSP: a host name or IP literal and a port, nothing else. */
const PLAIN_HOST = /^(?:[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(?::\d{1,5})?$/;

/**
 * The page's policy. `connect-src 'self'` already covers ws://<same host> in CSP Level 3 browsers; the
 * explicit ws:/wss: source for the request's own host is for browsers that predate that rule (and is
 * narrower than a bare `ws:`, which would allow any host).
 */
export function contentSecurityPolicy(host: string | undefined, frameAncestors: readonly string[] = []): string {
  const socket = host && PLAIN_HOST.test(host) ? ` ws://${host.toLowerCase()} wss://${host.toLowerCase()}` : '';
  return [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    'img-src data: blob:',
    // The replay page plays a recording's video from a blob: URL (fetched with the token).
    'media-src blob:',
    `connect-src 'self'${socket}`,
    "base-uri 'none'",
    "form-action 'none'",
    `frame-ancestors ${frameAncestors.length ? frameAncestors.join(' ') : "'none'"}`,
  ].join('; ');
}

/** An origin the operator lets frame the live page: `scheme://host[:port]`, nothing else (no wildcard). */
export const EMBED_ORIGIN = /^https?:\/\/(?:[a-z0-9.-]{1,253}|\[[0-9a-f:.]{2,45}\])(?::\d{1,5})?$/;

function securityHeaders(
  req: IncomingMessage,
  contentType: string,
  frameAncestors: readonly string[] = [],
): Record<string, string> {
  return {
    'content-type': contentType,
    'content-security-policy': contentSecurityPolicy(req.headers.host, frameAncestors),
    // X-Frame-Options has no list of origins: left out where frame-ancestors names some.
    ...(frameAncestors.length ? {} : { 'x-frame-options': 'DENY' }),
    'referrer-policy': 'no-referrer',
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
    'cross-origin-opener-policy': 'same-origin',
    'cross-origin-resource-policy': 'same-origin',
  };
}

export interface ViewerDeps {
  activity: ActivityHub;
  log: Logger;
  limits?: Partial<ViewerLimits>;
  /** Human takeover is on (docs/VIEWER.md "Takeover"): the feed's snapshot says so. Absent: off. */
  takeover?: object;
  /** Where noVNC's modules are read from, for the live view (default DEFAULT_NOVNC_DIR, Debian's `novnc`). */
  novncDir?: string;
  /** Origins that may frame the live page `/viewer/live` (`--embed-origin`); none by default. */
  embedOrigins?: readonly string[];
}

export interface Viewer {
  feed: ViewerFeed;
  /** Push onto the daemon's `routes`. */
  routes: HttpRoute[];
  /** Push onto the daemon's `sockets`. */
  socket: SocketRoute;
  /** What was read of noVNC (or why it could not be). */
  novnc: NovncFiles;
  close(): void;
}

const ASSETS = [
  { path: VIEWER_PATH, file: 'page.html', type: 'text/html; charset=utf-8' },
  { path: `${VIEWER_PATH}/app.js`, file: 'app.js', type: 'text/javascript; charset=utf-8' },
  { path: `${VIEWER_PATH}/app.css`, file: 'app.css', type: 'text/css; charset=utf-8' },
  { path: `${VIEWER_PATH}/common.js`, file: 'common.js', type: 'text/javascript; charset=utf-8' },
  { path: `${VIEWER_PATH}/takeover.js`, file: 'takeover.js', type: 'text/javascript; charset=utf-8' },
  { path: REPLAY_PATH, file: 'replay.html', type: 'text/html; charset=utf-8' },
  { path: `${VIEWER_PATH}/replay.js`, file: 'replay.js', type: 'text/javascript; charset=utf-8' },
  { path: `${VIEWER_PATH}/replay-player.js`, file: 'replay-player.js', type: 'text/javascript; charset=utf-8' },
  { path: `${VIEWER_PATH}/replay-model.js`, file: 'replay-model.js', type: 'text/javascript; charset=utf-8' },
  { path: `${VIEWER_PATH}/replay.css`, file: 'replay.css', type: 'text/css; charset=utf-8' },
  { path: LIVE_PATH, file: 'live.html', type: 'text/html; charset=utf-8' },
  { path: `${VIEWER_PATH}/live.js`, file: 'live.js', type: 'text/javascript; charset=utf-8' },
] as const;

/** Reads the page's files (once, here) and starts observing the activity hub. */
export function createViewer(deps: ViewerDeps): Viewer {
  const feed = new ViewerFeed({
    activity: deps.activity,
    log: deps.log,
    ...(deps.limits ? { limits: deps.limits } : {}),
    takeover: deps.takeover !== undefined,
  });
  const embed = deps.embedOrigins ?? [];
  const routes = ASSETS.map(({ path, file, type }): HttpRoute => {
    const body = readFileSync(new URL(file, import.meta.url));
    // Only the live page may be framed (and only by the listed origins); every other page and script never.
    const ancestors = path === LIVE_PATH ? embed : [];
    return {
      method: 'GET',
      path,
      auth: 'none',
      handle: (req: IncomingMessage, res: ServerResponse) =>
        void res.writeHead(200, securityHeaders(req, type, ancestors)).end(body),
    };
  });
  const novnc = loadNovnc(deps.novncDir ?? DEFAULT_NOVNC_DIR);
  if (novnc.ok) deps.log.info('viewer: noVNC served for the live view', { dir: novnc.dir, files: novnc.files.size });
  else deps.log.warn('viewer: noVNC not usable; no live view of desktops', { dir: novnc.dir, reason: novnc.reason });
  routes.push(novncRoute(novnc));
  const socket: SocketRoute = {
    path: VIEWER_FEED_PATH,
    subprotocol: VIEWER_SUBPROTOCOL,
    sameOrigin: true,
    links: true,
    handle: (ws, req, grant) =>
      feed.attach(
        ws,
        req,
        grant.kind === 'link' ? { session: grant.link.session, control: grant.link.control } : undefined,
      ),
  };
  return { feed, routes, socket, novnc, close: () => feed.close() };
}

/** `/viewer/novnc/<key>`: a file of the map by its exact key (no decoding, no normalising), else 404. */
function novncRoute(novnc: NovncFiles): HttpRoute {
  const files = novnc.ok ? novnc.files : new Map<string, Buffer>();
  return {
    method: 'GET',
    path: NOVNC_PATH,
    prefix: true,
    auth: 'none',
    handle(req, res) {
      const path = (req.url ?? '').split('?')[0] ?? '';
      const body = files.get(path.slice(NOVNC_PATH.length + 1));
      if (!body) {
        res.writeHead(404, securityHeaders(req, 'text/plain; charset=utf-8')).end('not found\n');
        return;
      }
      res.writeHead(200, securityHeaders(req, 'text/javascript; charset=utf-8')).end(body);
    },
  };
}
