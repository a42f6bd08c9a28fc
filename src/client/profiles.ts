/**
 * Named browser profiles over the daemon's HTTP routes (docs/PROTOCOL.md
 * "Profiles"): list them, export one's storage state, import one, delete
 * one. They belong to the daemon, not to a session: these need its URL and
 * token only. `DeskbatchClient.profiles` and friends call them with the
 * client's; a harness with no session calls them directly.
 */
import type { IncomingMessage } from 'node:http';
import type { ProfileInfo, ProfileList, ProfileStored } from '../base/protocol.ts';
import type { StorageState } from '../base/storage-state.ts';
import { DeskbatchError } from './errors.ts';
import { readBounded, refusalFrom, send, sessionUrl } from './session-http.ts';

export type { ProfileInfo, ProfileList, ProfileStored, StorageState };

/**
 * The daemon refused a profile call: `code` is its stable code (`profiles_off`, `bad_name`, `not_found`,
 * `held`, `unreadable`, `too_large`, `too_many`, `bad_state`, `bad_media_type`, or `http_<status>`),
 * `status` the HTTP status, `holder` the session holding the profile when it is `held`.
 */
export class ProfileRefusedError extends DeskbatchError {
  override name = 'ProfileRefusedError';
  constructor(
    override readonly code: string,
    message: string,
    readonly status: number,
    readonly holder?: string,
  ) {
    super(message);
  }
}

/** Largest answer read: a state is at most 64 MiB of JSON (--max-profile-bytes' own bound, src/base/config.ts). */
const MAX_ANSWER_BYTES = 64 * 1024 ** 2 + 64 * 1024;

/** `/v1/profiles[/<name>]` on the daemon that `wsUrl` (`ws://host:port/v1`) names, over http(s). */
export function profilesUrl(wsUrl: string, name?: string): URL {
  const url = new URL(wsUrl);
  url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
  url.pathname = name === undefined ? '/v1/profiles' : `/v1/profiles/${encodeURIComponent(name)}`;
  url.search = '';
  return url;
}

/** The answer's JSON, or a ProfileRefusedError when its status is not one of `ok`. */
async function answer(res: IncomingMessage, ok: readonly number[]): Promise<unknown> {
  const status = res.statusCode ?? 0;
  const text = (await readBounded(res, MAX_ANSWER_BYTES)).toString('utf8');
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  if (ok.includes(status)) {
    if (body === undefined && status !== 204) throw new DeskbatchError('the daemon answered with no JSON');
    return body;
  }
  const { code, message } = refusalFrom(status, body);
  const holder = (body as { holder?: unknown } | undefined)?.holder;
  throw new ProfileRefusedError(code, message, status, typeof holder === 'string' ? holder : undefined);
}

/** Every profile the daemon keeps, by name, and the bounds it holds them to. */
export async function listProfiles(wsUrl: string, token: string): Promise<ProfileList> {
  return (await answer(await send(profilesUrl(wsUrl), token), [200])) as ProfileList;
}

/** The profile's storage state, as Playwright's `newContext({ storageState })` takes it. */
export async function exportProfile(wsUrl: string, token: string, name: string): Promise<StorageState> {
  return (await answer(await send(profilesUrl(wsUrl, name), token), [200])) as StorageState;
}

/** Stores `state` (what `context.storageState({ indexedDB: true })` returned) as the profile `name`. */
export async function importProfile(
  wsUrl: string,
  token: string,
  name: string,
  state: StorageState,
): Promise<ProfileStored> {
  const body = Buffer.from(JSON.stringify(state), 'utf8');
  const headers = { 'content-type': 'application/json', 'content-length': String(body.length) };
  const res = await send(profilesUrl(wsUrl, name), token, { method: 'PUT', headers, body });
  return (await answer(res, [200, 201])) as ProfileStored;
}

export async function deleteProfile(wsUrl: string, token: string, name: string): Promise<void> {
  await answer(await send(profilesUrl(wsUrl, name), token, { method: 'DELETE' }), [204]);
}

/**
 * Saves the session's browser state to the profile its hello named read-write, now (`POST
 * /v1/sessions/<id>/profile`): the state's bytes and how long the save took. Rejects with ProfileRefusedError:
 * `no_profile`, `read_only`, `no_browser` (the browser is not running), `too_large` (the stored state stays).
 */
export async function saveSessionProfile(
  wsUrl: string,
  token: string,
  sessionId: string,
): Promise<{ name: string; bytes: number; ms: number }> {
  const res = await send(sessionUrl(wsUrl, sessionId, 'profile'), token, { method: 'POST' });
  return (await answer(res, [200])) as { name: string; bytes: number; ms: number };
}
