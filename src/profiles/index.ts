/**
 * Named browser profiles, assembled for the daemon (docs/PROTOCOL.md
 * "Profiles"): the operator's key (sealed.ts), the folder (storage.ts), the
 * store (store.ts) and its HTTP routes (routes.ts). Without `--profile-key`
 * the store is off: every route and every lease answers `profiles_off`, and
 * no folder is made.
 */
import { ConfigError, type ProfileSettings } from '../base/config.ts';
import type { Logger } from '../base/log.ts';
import type { HttpRoute } from '../server/server.ts';
import { profileRoutes } from './routes.ts';
import { loadProfileKey } from './sealed.ts';
import { FolderStorage } from './storage.ts';
import { ProfileStore, type ProfileEvent } from './store.ts';

export { ProfileRefusal, ProfileStore } from './store.ts';
export type {
  ProfileEvent,
  ProfileLease,
  ProfileLimits,
  ProfileMode,
  ProfileRefusalCode,
  ProfileSummary,
  StorageState,
} from './store.ts';
export type { ProfileStorage, StoredProfile } from './storage.ts';

/**
 * The store and its routes. A key file that is missing, readable by others or not a key, and a folder that
 * cannot be made the daemon's own, are ConfigErrors: the daemon does not start (src/cli.ts prints them).
 */
export async function startProfiles(
  settings: ProfileSettings,
  log: Logger,
  onEvent?: (event: ProfileEvent) => void,
): Promise<{ store: ProfileStore; routes: HttpRoute[] }> {
  const limits = {
    maxProfiles: settings.maxProfiles,
    maxProfileBytes: settings.maxProfileBytes,
    maxAgeMs: settings.maxAgeMs,
  };
  if (settings.keyFile === undefined) {
    const store = ProfileStore.off(limits);
    return { store, routes: profileRoutes(store) };
  }
  const key = await loadProfileKey(settings.keyFile);
  const storage = await FolderStorage.open(settings.dir).catch((err: unknown) => {
    throw new ConfigError(`--profiles-dir ${settings.dir}: ${err instanceof Error ? err.message : String(err)}`);
  });
  const store = await ProfileStore.open({ storage, key, limits, log, ...(onEvent ? { onEvent } : {}) });
  // The key's id, never the key: operators compare it across pods sharing a folder (docs/DEPLOY.md).
  log.info(`profiles: kept sealed in ${storage.root}`, {
    key_id: key.id,
    profiles: (await store.list()).length,
  });
  return { store, routes: profileRoutes(store) };
}
