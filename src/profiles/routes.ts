/**
 * The HTTP routes a harness manages named browser profiles through, on the
 * daemon's port behind its token (docs/PROTOCOL.md "Profiles"):
 *
 *   GET    /v1/profiles          every stored profile: name, bytes, updated_at, who holds it; and the bounds
 *   GET    /v1/profiles/<name>   the storage state, decrypted (export)
 *   PUT    /v1/profiles/<name>   a storage state as application/json (import): 201 new, 200 replaced
 *   DELETE /v1/profiles/<name>   204
 *
 * Only the harness reaches these (the token); the model never names a
 * profile. With profiles off (no --profile-key) every route answers 404
 * `profiles_off`, as a daemon older than profiles answers 404: a harness
 * tells "not here" from "not found" by the code. Errors are the store's
 * refusals, `{"error": <code>, "message", "holder"?}`, with its status.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ProfileList, ProfileStored } from '../base/protocol.ts';
import type { HttpRoute } from '../server/server.ts';
import { readBody, refuseUpload, sendJson } from '../server/session-routes.ts';
import { ProfileRefusal, type ProfileStore } from './store.ts';

export const PROFILES_PATH = '/v1/profiles';

/**
 * A body may be this many times --max-profile-bytes: Playwright's `storageState({ path })` writes its JSON
 * indented, and the bound counts the state's compact JSON, which the store checks once parsed.
 */
const BODY_SLACK = 2;

/** The profile name of `/v1/profiles/<name>`, percent-decoded; the store checks it (a `/` in it is refused). */
function nameOf(req: IncomingMessage): string {
  const path = (req.url ?? '').split('?')[0] ?? '';
  const raw = path.slice(PROFILES_PATH.length + 1);
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

function refused(res: ServerResponse, err: ProfileRefusal): void {
  sendJson(res, err.status, { error: err.code, message: err.message, ...(err.holder ? { holder: err.holder } : {}) });
}

/** Answers a refusal from the store; anything else goes on to the server (500, logged). */
async function answering(res: ServerResponse, work: () => Promise<void>): Promise<void> {
  try {
    await work();
  } catch (err) {
    if (!(err instanceof ProfileRefusal)) throw err;
    refused(res, err);
  }
}

/** Whether `header` is application/json (UTF-8, or no charset: JSON is UTF-8). */
function isJson(header: string | undefined): boolean {
  const [type, ...params] = (header ?? '').split(';').map((p) => p.trim().toLowerCase());
  if (type !== 'application/json') return false;
  const charset = params.find((p) => p.startsWith('charset='))?.slice('charset='.length);
  return charset === undefined || charset.replace(/"/g, '') === 'utf-8';
}

export function profileRoutes(store: ProfileStore): HttpRoute[] {
  const list = (_req: IncomingMessage, res: ServerResponse): Promise<void> =>
    answering(res, async () => {
      const profiles = await store.list();
      const { maxProfiles, maxProfileBytes, maxAgeMs } = store.limits;
      const body: ProfileList = {
        profiles: profiles.map((p) => ({
          name: p.name,
          bytes: p.bytes,
          updated_at: new Date(p.modifiedMs).toISOString(),
          held: p.writer ? { session_id: p.writer, mode: 'read_write' } : null,
          readers: p.readers,
        })),
        limits: { max_profiles: maxProfiles, max_profile_bytes: maxProfileBytes, max_age_ms: maxAgeMs },
      };
      sendJson(res, 200, body);
    });

  const exportState = (req: IncomingMessage, res: ServerResponse): Promise<void> =>
    answering(res, async () => {
      // The server answers HEAD as GET: here that would decrypt a profile (and count an export) for nothing.
      if (req.method === 'HEAD') {
        res.setHeader('allow', 'GET, PUT, DELETE');
        return sendJson(res, 405, { error: 'method_not_allowed', message: 'HEAD would read the profile; use GET' });
      }
      const { state } = await store.export(nameOf(req));
      sendJson(res, 200, state);
    });

  const importState = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const refuse = (status: number, error: string, message: string): void =>
      refuseUpload(req, res, () => sendJson(res, status, { error, message }));
    const name = nameOf(req);
    try {
      store.check(name);
    } catch (err) {
      if (!(err instanceof ProfileRefusal)) throw err;
      return refuseUpload(req, res, () => refused(res, err));
    }
    if (!isJson(req.headers['content-type'])) {
      return refuse(415, 'bad_media_type', 'send the storage state as Content-Type: application/json (UTF-8)');
    }
    const max = store.limits.maxProfileBytes * BODY_SLACK;
    const tooLarge = `the body is over ${max} bytes (twice --max-profile-bytes, ${store.limits.maxProfileBytes})`;
    const declared = Number(req.headers['content-length'] ?? NaN);
    if (declared > max) return refuse(413, 'too_large', tooLarge);
    const body = await readBody(req, max).catch(() => undefined);
    if (body === undefined) return; // the client went mid-body: nobody reads an answer
    if (body === 'too_large') return refuse(413, 'too_large', tooLarge);
    let input: unknown;
    try {
      input = JSON.parse(body.toString('utf8'));
    } catch {
      return refuse(422, 'bad_state', 'the body is not JSON');
    } finally {
      body.fill(0);
    }
    await answering(res, async () => {
      const { bytes, created } = await store.import(name, input);
      const answer: ProfileStored = { name, bytes, created, updated_at: new Date().toISOString() };
      sendJson(res, created ? 201 : 200, answer);
    });
  };

  const remove = (req: IncomingMessage, res: ServerResponse): Promise<void> =>
    answering(res, async () => {
      await store.delete(nameOf(req));
      res.writeHead(204, { 'cache-control': 'no-store' }).end();
    });

  return [
    { method: 'GET', path: PROFILES_PATH, auth: 'token', handle: list },
    { method: 'GET', path: PROFILES_PATH, prefix: true, auth: 'token', handle: exportState },
    { method: 'PUT', path: PROFILES_PATH, prefix: true, auth: 'token', handle: importState },
    { method: 'DELETE', path: PROFILES_PATH, prefix: true, auth: 'token', handle: remove },
  ];
}
