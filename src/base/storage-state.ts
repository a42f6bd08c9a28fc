/**
 * A browser profile's content: Playwright's storage state, the JSON that
 * `BrowserContext.storageState({ indexedDB: true })` returns and
 * `browser.newContext({ storageState })` / `context.setStorageState()` take
 * (docs/PROTOCOL.md "Profiles"). A leaf, so the daemon's store
 * (src/profiles/) and the client library (src/client/profiles.ts) share one
 * type.
 *
 * What Playwright 1.65 really sends is wider than its public type
 * (node_modules/playwright-core/types/types.d.ts declares cookies and
 * localStorage only): its protocol's `NetworkCookie` adds `partitionKey`
 * (CHIPS) and `_crHasCrossSiteAncestor`, `OriginStorage` adds `indexedDB`
 * and `opfs`, and the result adds `credentials` (passkeys) when asked
 * (the validator's scheme in node_modules/playwright-core/lib/coreBundle.js).
 * So the schema is strict on what a restore needs, a cookie's and a
 * localStorage item's fields and IndexedDB's outline, and loose elsewhere: a
 * field Playwright adds is kept, not refused, and handed back as it came.
 */
import { z } from 'zod';

/** A cookie as `storageState()` returns it: `expires` is Unix seconds, -1 for a session cookie. */
const CookieSchema = z.looseObject({
  name: z.string(),
  value: z.string(),
  domain: z.string(),
  path: z.string(),
  expires: z.number(),
  httpOnly: z.boolean(),
  secure: z.boolean(),
  sameSite: z.enum(['Strict', 'Lax', 'None']),
  /** A partitioned (CHIPS) cookie's top-level site. */
  partitionKey: z.string().optional(),
});

/** One IndexedDB database as Playwright serialises it (`IndexedDBDatabase`): its stores' records are its own format. */
const IndexedDbSchema = z.looseObject({
  name: z.string(),
  version: z.number().int(),
  stores: z.array(
    z.looseObject({
      name: z.string(),
      autoIncrement: z.boolean(),
      records: z.array(z.looseObject({})),
      indexes: z.array(z.looseObject({ name: z.string(), multiEntry: z.boolean(), unique: z.boolean() })),
    }),
  ),
});

const OriginSchema = z.looseObject({
  origin: z.string(),
  localStorage: z.array(z.looseObject({ name: z.string(), value: z.string() })),
  indexedDB: z.array(IndexedDbSchema).optional(),
});

export const StorageStateSchema = z.looseObject({
  cookies: z.array(CookieSchema),
  origins: z.array(OriginSchema),
});

/** A browser profile's content: cookies, and each origin's localStorage and (optionally) IndexedDB. */
export type StorageState = z.output<typeof StorageStateSchema>;
