/**
 * The harness's CDP door (docs/PROTOCOL.md "CDP for the harness"), with the
 * operator's `--allow-cdp`:
 *
 *   WebSocket /v1/sessions/<session_id>/cdp   the session's own Chromium, as Playwright's connectOverCDP takes it
 *
 * The server's handshake checks come first (rate limit, Origin allowlist, the
 * token in the Authorization header: Playwright's `headers` option; it cannot
 * offer a subprotocol, so the route has none). Then this route's own, each
 * answered as HTTP with a JSON `{error, message}` before any upgrade:
 *
 * - 403 `cdp_disabled`: the operator did not start the daemon with `--allow-cdp`;
 * - 404 `session_not_found`: no live session by that id (the same answer as the other session routes);
 * - 409 `cdp_unavailable`: the session's browser is not its own (the shared desktop: one Chromium holds
 *   every session's contexts), or runs without a sandbox (its DevTools would listen on the host), or there
 *   is no browser;
 * - 429 `too_many_cdp_connections`: the session holds `cdp.maxPerSession` already;
 * - 503 `browser_unavailable`: the session's browser does not start.
 *
 * Then the socket is joined to the browser's own DevTools endpoint
 * (src/browser/cdp-door.ts) by a relay that passes frames unchanged
 * (cdp-relay.ts). Attaching and detaching are logged and published
 * (`cdp_attached`, `cdp_detached`: counts, never content) for the metrics and
 * the session's recording. The session's end closes its connections.
 */
import type { IncomingMessage } from 'node:http';
import type { WebSocket } from 'ws';
import type { ActivityHub } from '../base/activity.ts';
import type { CdpSettings } from '../base/config.ts';
import type { Logger } from '../base/log.ts';
import { oneLine } from '../base/text.ts';
import type { DesktopResources } from '../desktop-pool/desktop.ts';
import { CdpRelay } from './cdp-relay.ts';
import type { SocketRefusal, SocketRoute } from './server.ts';
import { sessionPath, SESSIONS_PATH } from './session-routes.ts';

/** How long the WebSocket handshake with the browser's endpoint may take, once its socket is handed over. */
const BROWSER_HANDSHAKE_MS = 10_000;

export interface CdpRouteDeps {
  settings: CdpSettings;
  /** How often a harness's CDP socket is pinged (the daemon's heartbeat). */
  heartbeatMs: number;
  /**
   * Why no session's browser may be reached on this daemon, whatever the session (the shared desktop, desktops
   * without a sandbox, no browser), or undefined.
   */
  unavailable: string | undefined;
  /** The live session's desktop (undefined while it has none), or undefined when no session is live by that id. */
  sessionOf(sessionId: string): { desktop: DesktopResources | undefined } | undefined;
  activity: ActivityHub;
  log: Logger;
}

export interface CdpDoor {
  route: SocketRoute;
  /** Closes every CDP connection (the daemon stops), before the server terminates what is left. */
  close(): void;
}

/** The session id of `/v1/sessions/<id>/cdp`, or undefined for any other path. */
function parse(path: string): string | undefined {
  const [sessionId, what, ...more] = sessionPath(path) ?? [];
  return what === 'cdp' && !more.length ? sessionId : undefined;
}

const refuse = (status: number, error: string, message: string): SocketRefusal => ({ status, error, message });

export function cdpRoute(deps: CdpRouteDeps): CdpDoor {
  const { settings, log } = deps;
  /** Each session's open relays. */
  const live = new Map<string, Set<CdpRelay>>();
  let attaches = 0;

  /** The session's browser that may be reached, or the refusal that says why not. */
  const browserOf = (sessionId: string | undefined): SocketRefusal | NonNullable<DesktopResources['browser']> => {
    if (!settings.enabled) {
      return refuse(
        403,
        'cdp_disabled',
        'CDP is off on this daemon: the operator enables it with --allow-cdp (docs/PROTOCOL.md "CDP for the harness")',
      );
    }
    const desktop = sessionId ? deps.sessionOf(sessionId)?.desktop : undefined;
    if (!desktop) return refuse(404, 'session_not_found', 'no live session with this id');
    if (deps.unavailable) return refuse(409, 'cdp_unavailable', deps.unavailable);
    if (!desktop.browser) return refuse(409, 'cdp_unavailable', 'this daemon runs no browser (--browser off)');
    if (!desktop.browser.devtools) {
      return refuse(
        409,
        'cdp_unavailable',
        "the session's browser has no DevTools port: only a sandboxed pool desktop's browser has one",
      );
    }
    return desktop.browser;
  };

  const check = async (_req: IncomingMessage, path: string): Promise<SocketRefusal | undefined> => {
    const sessionId = parse(path);
    const browser = browserOf(sessionId);
    if ('status' in browser) return browser;
    if ((live.get(sessionId!)?.size ?? 0) >= settings.maxPerSession) {
      return refuse(
        429,
        'too_many_cdp_connections',
        `the session holds ${settings.maxPerSession} CDP connections already (cdp.maxPerSession)`,
      );
    }
    try {
      // Running before the harness is let in: a launch that fails is an answer, not a closed socket.
      await browser.browserNow();
    } catch (err) {
      const why = oneLine(err instanceof Error ? err.message : String(err)).slice(0, 300);
      return refuse(503, 'browser_unavailable', `the session's browser did not start: ${why}`);
    }
    return undefined;
  };

  const handle = (ws: WebSocket, req: IncomingMessage): void => {
    const sessionId = parse((req.url ?? '').split('?')[0] ?? '');
    const browser = browserOf(sessionId);
    // The session ended while the handshake completed.
    if ('status' in browser || !sessionId) return void ws.close(1001, 'the session ended');
    const remote = req.socket.remoteAddress ?? '';
    const cdpId = `cdp_${++attaches}`;
    const fields = { session: sessionId, cdp_id: cdpId, remote };
    let opened = false;
    const opening = browser.openDevtools({ maxPayload: settings.maxFrameBytes, handshakeMs: BROWSER_HANDSHAKE_MS });
    // The whole error for the operator: the harness's close reason holds at most 123 bytes of it.
    opening.catch((err: unknown) => log.warn('cdp attach failed', { ...fields, error: String(err) }));
    const relay = new CdpRelay(
      ws,
      opening,
      {
        maxBufferedBytes: settings.maxBufferedBytes,
        maxFrameBytes: settings.maxFrameBytes,
        heartbeatMs: deps.heartbeatMs,
      },
      {
        opened: () => {
          opened = true;
          log.info('cdp attached', fields);
          deps.activity.publish({ type: 'cdp_attached', ...fields, at: Date.now() });
        },
        ended: (end) => {
          const mine = live.get(sessionId);
          mine?.delete(relay);
          if (mine?.size === 0) live.delete(sessionId);
          if (!opened) return void log.info('cdp connection ended before it attached', { ...fields, ...end });
          log.info('cdp detached', { ...fields, ...end });
          deps.activity.publish({ type: 'cdp_detached', ...fields, detach: end, at: Date.now() });
        },
      },
    );
    const mine = live.get(sessionId) ?? new Set<CdpRelay>();
    mine.add(relay);
    live.set(sessionId, mine);
  };

  // The session's end closes its connections: its browser is about to go with its desktop.
  const unsubscribe = deps.activity.subscribe((a) => {
    if (a.type !== 'session_closed') return;
    for (const relay of live.get(a.session) ?? []) relay.close(1001, 'the session ended');
  });

  return {
    route: {
      path: SESSIONS_PATH,
      prefix: true,
      accepts: (path) => parse(path) !== undefined,
      maxPayload: settings.maxFrameBytes,
      check,
      handle,
    },
    close() {
      unsubscribe();
      for (const relays of live.values()) for (const relay of relays) relay.close(1001, 'the daemon is shutting down');
    },
  };
}
