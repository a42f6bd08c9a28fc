/**
 * The route a harness saves its session's browser state to the session's
 * profile through, before the session ends (docs/PROTOCOL.md "Profiles"),
 * on the daemon's port behind its token:
 *
 *   POST /v1/sessions/<session_id>/profile    200 { name, bytes, ms }
 *
 * Only a session whose hello named a profile read-write; the stored state
 * is replaced whole, or left as it was when the save is refused.
 */
import { sendJson, sessionNotFound, sessionPath, SESSIONS_PATH } from '../server/session-routes.ts';
import type { HttpRoute } from '../server/server.ts';
import { ProfileNotSaved, type LeasedProfile } from './session-profile.ts';

export interface SaveRouteDeps {
  /** Whether a session by that id is live, and its profile if its hello named one. */
  sessionOf(sessionId: string): { profile: LeasedProfile | undefined } | undefined;
}

/** The session id of `/v1/sessions/<id>/profile`, or undefined for any other path. */
function parse(path: string): string | undefined {
  const [sessionId, what, ...more] = sessionPath(path) ?? [];
  return what === 'profile' && !more.length ? sessionId : undefined;
}

/** Whether a path is this route's (the server asks before it hands a request to it). */
export function isProfileSavePath(path: string): boolean {
  return parse(path) !== undefined;
}

export function profileSaveRoute(deps: SaveRouteDeps): HttpRoute {
  return {
    method: 'POST',
    path: SESSIONS_PATH,
    prefix: true,
    accepts: isProfileSavePath,
    auth: 'token',
    handle: async (req, res) => {
      req.resume(); // no body is read
      const session = deps.sessionOf(parse(req.url ?? '')!);
      if (!session) return sessionNotFound(res);
      if (!session.profile) {
        return sendJson(res, 409, {
          error: 'no_profile',
          message: "this session's hello named no profile; there is nothing to save it to",
        });
      }
      try {
        const saved = await session.profile.save();
        sendJson(res, 200, { name: session.profile.welcome.name, ...saved });
      } catch (err) {
        if (!(err instanceof ProfileNotSaved)) throw err;
        sendJson(res, err.status, { error: err.code, message: err.message });
      }
    },
  };
}
