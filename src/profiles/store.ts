/**
 * Named browser profiles (docs/PROTOCOL.md "Profiles"): a session's cookies,
 * localStorage and IndexedDB as Playwright's storage state, kept sealed
 * (sealed.ts) in a `ProfileStorage` (storage.ts) between sessions, so a
 * harness can start a session already logged in.
 *
 * - Only the harness names a profile (the HTTP routes with the daemon's
 *   token, and `hello`); the model never does.
 * - A name is PROFILE_NAME (src/base/protocol.ts), never a path.
 * - A profile is read whole or refused: one that does not decrypt (another
 *   key, a changed byte, another profile's file) or is not a storage state
 *   is `unreadable`, and nothing of it is handed out.
 * - Bounds: the state's JSON bytes (--max-profile-bytes), profiles in the
 *   store (--max-profiles), and age (--profile-max-age: a profile neither
 *   saved nor leased for that long is removed by a sweep at start and then
 *   hourly). A write over a bound is refused before anything is written: the
 *   stored state stays as it was.
 * - Leases: one read-write lease per profile at a time on this daemon (a
 *   second is refused `held`, naming the holder's session); read-only leases
 *   share, also with the read-write one, and read the state as it was when
 *   they leased it. A read-only lease never writes; releasing a read-write
 *   lease does not save (its holder saves first). Leases are this daemon's:
 *   daemons sharing a folder do not see each other's (docs/DEPLOY.md).
 * - Events (metrics, recording) carry names, sizes and times, never content;
 *   nothing here logs a state.
 */
import type { Logger } from '../base/log.ts';
import { PROFILE_NAME } from '../base/protocol.ts';
import { StorageStateSchema, type StorageState } from '../base/storage-state.ts';
import { describeZodError } from '../base/zod-text.ts';
import { SEAL_OVERHEAD, SealError, seal, unseal, type ProfileKey } from './sealed.ts';
import type { ProfileStorage } from './storage.ts';

export type { StorageState };

export type ProfileMode = 'read_write' | 'read_only';

export type ProfileRefusalCode =
  'profiles_off' | 'bad_name' | 'not_found' | 'held' | 'unreadable' | 'too_large' | 'too_many' | 'bad_state';

/** The HTTP status each refusal is answered with (src/profiles/routes.ts). */
const STATUS: Record<ProfileRefusalCode, number> = {
  profiles_off: 404,
  bad_name: 400,
  not_found: 404,
  held: 409,
  unreadable: 422,
  too_large: 413,
  too_many: 409,
  bad_state: 422,
};

/** Why the store refused: `code` is stable, `message` says it in words (never a byte of a profile). */
export class ProfileRefusal extends Error {
  override readonly name = 'ProfileRefusal';
  /** The HTTP status the routes answer it with. */
  readonly status: number;
  constructor(
    readonly code: ProfileRefusalCode,
    message: string,
    /** `held`: the session holding the profile read-write (or, for a delete, one of its holders). */
    readonly holder?: string,
  ) {
    super(message);
    this.status = STATUS[code];
  }
}

/** The refusal of every call when the daemon has no key (--profile-key). */
export function profilesOff(): ProfileRefusal {
  return new ProfileRefusal(
    'profiles_off',
    'profiles are off on this daemon: its operator gave no key file (--profile-key)',
  );
}

export interface ProfileLimits {
  /** Profiles the store may hold. */
  maxProfiles: number;
  /** Bytes of one profile's state, as JSON. */
  maxProfileBytes: number;
  /** A profile neither saved nor leased for this long is removed (ms). */
  maxAgeMs: number;
}

/** A stored profile as the store lists it. */
export interface ProfileSummary {
  name: string;
  /** Bytes of its state's JSON. */
  bytes: number;
  /** When it was last imported, saved or leased (ms since the epoch). */
  modifiedMs: number;
  /** The session holding it read-write on this daemon. */
  writer: string | undefined;
  /** Read-only leases held on this daemon. */
  readers: number;
}

/** What happened, for metrics and recordings: names, sizes and times, never content. */
export type ProfileEvent =
  | { kind: 'imported'; name: string; bytes: number; ms: number; created: boolean }
  | { kind: 'exported'; name: string; bytes: number }
  | { kind: 'leased'; name: string; mode: ProfileMode; sessionId: string; bytes: number }
  | { kind: 'saved'; name: string; sessionId: string; bytes: number; ms: number }
  | { kind: 'released'; name: string; mode: ProfileMode; sessionId: string }
  | { kind: 'deleted'; name: string; reason: 'harness' | 'age' }
  | { kind: 'refused'; name: string; code: ProfileRefusalCode; sessionId?: string };

/** A session's hold on a profile, from `ProfileStore.lease`. */
export interface ProfileLease {
  readonly name: string;
  readonly mode: ProfileMode;
  readonly sessionId: string;
  /**
   * The state: as it was when leased, and for a read-write lease as it last saved it; undefined for a
   * read-write lease of a profile that does not exist yet (its first save creates it).
   */
  readonly state: StorageState | undefined;
  /** Bytes of `state` as JSON (0 when undefined). */
  readonly bytes: number;
  /**
   * Stores `state` as the profile's (read-write leases only: a read-only lease rejects with an Error). Refused
   * (ProfileRefusal `bad_state`, `too_large`, `too_many`) with the stored state left as it was.
   */
  save(state: StorageState): Promise<{ bytes: number; ms: number }>;
  /** Gives the profile back; does not save. Idempotent. */
  release(): void;
}

export interface ProfileStoreOptions {
  storage: ProfileStorage;
  key: ProfileKey;
  limits: ProfileLimits;
  onEvent?: (event: ProfileEvent) => void;
  /** Failures of the hourly sweep (never a profile's content). */
  log?: Logger;
}

/** How often retention runs, at most (and more often when --profile-max-age is shorter). */
const SWEEP_EVERY_MS = 3_600_000;

interface Holders {
  writer: Lease | undefined;
  readers: Set<Lease>;
}

class Lease implements ProfileLease {
  released = false;
  /** Whether the profile is known to be stored (it was when leased, or this lease saved it). */
  stored: boolean;

  constructor(
    private readonly store: ProfileStore,
    readonly name: string,
    readonly mode: ProfileMode,
    readonly sessionId: string,
    public state: StorageState | undefined,
    public bytes: number,
  ) {
    this.stored = state !== undefined;
  }

  save(state: StorageState): Promise<{ bytes: number; ms: number }> {
    return this.store.saveFrom(this, state);
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    this.store.releaseLease(this);
  }
}

export class ProfileStore {
  private readonly holders = new Map<string, Holders>();
  /** Writes, deletes and sweeps, one at a time: a count checked is still true when the write lands. */
  private queue: Promise<unknown> = Promise.resolve();
  private sweeper: NodeJS.Timeout | undefined;
  private readonly storage: ProfileStorage | undefined;
  private readonly key: ProfileKey | undefined;
  private readonly onEvent: (event: ProfileEvent) => void;
  private readonly log: Logger | undefined;
  readonly limits: ProfileLimits;

  private constructor(options: Partial<ProfileStoreOptions> & { limits: ProfileLimits }) {
    this.storage = options.storage;
    this.key = options.key;
    this.limits = options.limits;
    this.onEvent = options.onEvent ?? (() => undefined);
    this.log = options.log;
  }

  /** A store that refuses everything with `profiles_off`: the daemon has no key (--profile-key). */
  static off(limits: ProfileLimits): ProfileStore {
    return new ProfileStore({ limits });
  }

  /** The store over `storage`, with retention applied once now and then hourly (an unref'd timer). */
  static async open(options: ProfileStoreOptions): Promise<ProfileStore> {
    const store = new ProfileStore(options);
    await store.sweep();
    store.sweeper = setInterval(
      () =>
        void store
          .sweep()
          .catch((err: unknown) => store.log?.warn('the profiles retention sweep failed', { error: String(err) })),
      Math.min(SWEEP_EVERY_MS, options.limits.maxAgeMs),
    );
    store.sweeper.unref();
    return store;
  }

  /** Whether profiles are on (the daemon has a key). */
  get enabled(): boolean {
    return this.storage !== undefined;
  }

  /** The key's id (docs/SECURITY.md "Profiles at rest"), when profiles are on. */
  get keyId(): string | undefined {
    return this.key?.id;
  }

  /** Stops the hourly sweep (the daemon closes). Leases still held stay as they are. */
  close(): void {
    clearInterval(this.sweeper);
  }

  /** Every stored profile, by name; never their content. */
  async list(): Promise<ProfileSummary[]> {
    const { storage } = this.on();
    return (await storage.list()).sort(byName).map((p) => {
      const h = this.holders.get(p.name);
      return {
        name: p.name,
        bytes: Math.max(0, p.bytes - SEAL_OVERHEAD),
        modifiedMs: p.modifiedMs,
        writer: h?.writer?.sessionId,
        readers: h?.readers.size ?? 0,
      };
    });
  }

  /** The stored state of `name`, decrypted and checked (the harness's export). */
  async export(name: string): Promise<{ state: StorageState; bytes: number }> {
    this.on();
    this.checkName(name);
    const read = await this.readState(name);
    if (!read) throw this.refuse('not_found', name, `there is no profile "${name}"`);
    this.onEvent({ kind: 'exported', name, bytes: read.bytes });
    return read;
  }

  /**
   * Stores `input` (parsed JSON, checked here) as the profile `name`, new or replaced (the harness's import).
   * Refused while a session holds it read-write; read-only leases keep reading the state they leased.
   */
  async import(name: string, input: unknown): Promise<{ bytes: number; ms: number; created: boolean }> {
    this.on();
    this.checkName(name);
    this.refuseIfWriter(name);
    const t0 = performance.now();
    const { json } = this.encode(name, input);
    return this.exclusive(async () => {
      this.refuseIfWriter(name);
      const created = await this.checkRoom(name);
      await this.write(name, json);
      const done = { bytes: json.length, ms: elapsed(t0), created };
      this.onEvent({ kind: 'imported', name, ...done });
      return done;
    });
  }

  /** Removes the profile `name`; refused while any session holds it. */
  async delete(name: string): Promise<void> {
    const { storage } = this.on();
    this.checkName(name);
    await this.exclusive(async () => {
      const h = this.holders.get(name);
      const holder = h?.writer?.sessionId ?? [...(h?.readers ?? [])][0]?.sessionId;
      if (holder) {
        throw this.refuse('held', name, `profile "${name}" is in use by session ${holder}`, { holder });
      }
      if (!(await storage.remove(name))) throw this.refuse('not_found', name, `there is no profile "${name}"`);
      this.onEvent({ kind: 'deleted', name, reason: 'harness' });
    });
  }

  /**
   * A session's lease of the profile `name` (see the file's comment for the rules). A read-write lease of a
   * profile not stored yet has no state, and is refused `too_many` when the store is full; a read-only one is
   * refused `not_found`. A profile that does not open is refused `unreadable`, and no lease is held.
   */
  async lease(name: string, mode: ProfileMode, sessionId: string): Promise<ProfileLease> {
    const { storage } = this.on();
    this.checkName(name, sessionId);
    const h = this.holdersOf(name);
    if (mode === 'read_write' && h.writer) {
      const holder = h.writer.sessionId;
      throw this.refuse(
        'held',
        name,
        `profile "${name}" is held read-write by session ${holder}; ask for it read-only, or once that session ends`,
        { holder, sessionId },
      );
    }
    // Taken before the first await: a second read-write lease asked meanwhile is refused, as are a delete and
    // (read-write) an import.
    const lease = new Lease(this, name, mode, sessionId, undefined, 0);
    if (mode === 'read_write') h.writer = lease;
    else h.readers.add(lease);
    try {
      const read = await this.readState(name, sessionId);
      if (read) {
        lease.state = read.state;
        lease.bytes = read.bytes;
        lease.stored = true;
        await storage.touch(name);
      } else if (mode === 'read_only') {
        throw this.refuse('not_found', name, `there is no profile "${name}" to read`, { sessionId });
      } else {
        await this.exclusive(() => this.checkRoom(name, sessionId));
      }
    } catch (err) {
      this.releaseLease(lease, false);
      throw err;
    }
    this.onEvent({ kind: 'leased', name, mode, sessionId, bytes: lease.bytes });
    return lease;
  }

  /**
   * Retention: removes every profile not leased now whose last import, save or lease is older than
   * --profile-max-age. Runs at start and hourly; returns the names removed.
   */
  async sweep(now = Date.now()): Promise<string[]> {
    const storage = this.storage;
    if (!storage) return [];
    return this.exclusive(async () => {
      const removed: string[] = [];
      for (const p of (await storage.list()).sort(byName)) {
        const h = this.holders.get(p.name);
        if (h?.writer || h?.readers.size) continue;
        if (now - p.modifiedMs <= this.limits.maxAgeMs) continue;
        if (await storage.remove(p.name)) {
          removed.push(p.name);
          this.onEvent({ kind: 'deleted', name: p.name, reason: 'age' });
        }
      }
      return removed;
    });
  }

  /** @internal A lease's save (Lease.save). */
  async saveFrom(lease: Lease, input: StorageState): Promise<{ bytes: number; ms: number }> {
    if (lease.mode !== 'read_write') throw new Error(`a read-only lease of profile "${lease.name}" cannot save`);
    if (lease.released) throw new Error(`the lease of profile "${lease.name}" was released; it cannot save`);
    const { name, sessionId } = lease;
    const t0 = performance.now();
    const { state, json } = this.encode(name, input, sessionId);
    return this.exclusive(async () => {
      if (!lease.stored) await this.checkRoom(name, sessionId);
      await this.write(name, json);
      lease.state = state;
      lease.bytes = json.length;
      lease.stored = true;
      const done = { bytes: json.length, ms: elapsed(t0) };
      this.onEvent({ kind: 'saved', name, sessionId, ...done });
      return done;
    });
  }

  /**
   * @internal A lease given back (Lease.release; or, `told` false, a lease that failed to start). The profile
   * was in use until now: its retention clock is set (in the queue, so a sweep asked next sees it).
   */
  releaseLease(lease: Lease, told = true): void {
    lease.released = true;
    const h = this.holders.get(lease.name);
    if (!h) return;
    if (h.writer === lease) h.writer = undefined;
    h.readers.delete(lease);
    if (!h.writer && !h.readers.size) this.holders.delete(lease.name);
    if (!told) return;
    this.onEvent({ kind: 'released', name: lease.name, mode: lease.mode, sessionId: lease.sessionId });
    const { storage, log } = this;
    if (storage && lease.stored) {
      void this.exclusive(() => storage.touch(lease.name)).catch((err: unknown) =>
        log?.warn('a released profile could not be marked used', { error: String(err) }),
      );
    }
  }

  /** The store's storage and key; refused `profiles_off` when the daemon has no key. */
  private on(): { storage: ProfileStorage; key: ProfileKey } {
    if (!this.storage || !this.key) throw profilesOff();
    return { storage: this.storage, key: this.key };
  }

  /** Refuses (`profiles_off`, `bad_name`) what no method would take, before the caller reads a body for it. */
  check(name: string, sessionId?: string): void {
    this.on();
    this.checkName(name, sessionId);
  }

  private checkName(name: string, sessionId?: string): void {
    if (typeof name === 'string' && PROFILE_NAME.test(name)) return;
    throw this.refuse(
      'bad_name',
      String(name).slice(0, 80),
      'a profile name is 1-64 letters, digits, ".", "_" or "-", starting with a letter or digit',
      { sessionId },
    );
  }

  private refuse(
    code: ProfileRefusalCode,
    name: string,
    message: string,
    about: { holder?: string | undefined; sessionId?: string | undefined } = {},
  ): ProfileRefusal {
    this.onEvent({ kind: 'refused', name, code, ...(about.sessionId ? { sessionId: about.sessionId } : {}) });
    return new ProfileRefusal(code, message, about.holder);
  }

  private holdersOf(name: string): Holders {
    let h = this.holders.get(name);
    if (!h) this.holders.set(name, (h = { writer: undefined, readers: new Set() }));
    return h;
  }

  private refuseIfWriter(name: string): void {
    const holder = this.holders.get(name)?.writer?.sessionId;
    if (holder) {
      throw this.refuse('held', name, `profile "${name}" is held read-write by session ${holder}`, { holder });
    }
  }

  /** Runs `fn` after every write, delete and sweep asked before it. */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** `input` checked as a storage state and serialised, within the bytes bound; or refused. */
  private encode(name: string, input: unknown, sessionId?: string): { state: StorageState; json: Buffer } {
    const parsed = StorageStateSchema.safeParse(input);
    if (!parsed.success) {
      throw this.refuse(
        'bad_state',
        name,
        `not a browser storage state (Playwright's storageState()): ${describeZodError(parsed.error, input)}`,
        { sessionId },
      );
    }
    const json = Buffer.from(JSON.stringify(parsed.data), 'utf8');
    if (json.length > this.limits.maxProfileBytes) {
      throw this.refuse(
        'too_large',
        name,
        `the state is ${json.length} bytes of JSON, over the ${this.limits.maxProfileBytes} a profile may hold (--max-profile-bytes)`,
        { sessionId },
      );
    }
    return { state: parsed.data, json };
  }

  /** Whether `name` is new; refused `too_many` when it is and the store is full. Called within `exclusive`. */
  private async checkRoom(name: string, sessionId?: string): Promise<boolean> {
    const { storage } = this.on();
    const stored = await storage.list();
    if (stored.some((p) => p.name === name)) return false;
    if (stored.length >= this.limits.maxProfiles) {
      throw this.refuse(
        'too_many',
        name,
        `the store holds its ${this.limits.maxProfiles} profiles (--max-profiles): delete one first`,
        { sessionId },
      );
    }
    return true;
  }

  private async write(name: string, json: Buffer): Promise<void> {
    const { storage, key } = this.on();
    await storage.write(name, seal(key, name, json));
  }

  /** The profile's state, whole, or undefined when none is stored; refused `unreadable` when it does not open. */
  private async readState(
    name: string,
    sessionId?: string,
  ): Promise<{ state: StorageState; bytes: number } | undefined> {
    const { storage, key } = this.on();
    const sealed = await storage.read(name);
    if (!sealed) return undefined;
    const unreadable = (why: string): ProfileRefusal =>
      this.refuse('unreadable', name, `profile "${name}" cannot be read: ${why}`, { sessionId });
    let plain: Buffer;
    try {
      plain = unseal(key, name, sealed);
    } catch (err) {
      if (err instanceof SealError) throw unreadable(err.message);
      throw err;
    }
    try {
      let json: unknown;
      try {
        json = JSON.parse(plain.toString('utf8'));
      } catch {
        throw unreadable('its content is not JSON');
      }
      const parsed = StorageStateSchema.safeParse(json);
      if (!parsed.success) {
        throw unreadable(`its content is not a storage state (${describeZodError(parsed.error, json)})`);
      }
      return { state: parsed.data, bytes: plain.length };
    } finally {
      plain.fill(0);
    }
  }
}

const byName = (a: { name: string }, b: { name: string }): number => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

const elapsed = (t0: number): number => Math.round((performance.now() - t0) * 10) / 10;
