/**
 * A profile as one session uses it (src/server/profile-port.ts): leased from
 * the store when the hello names it, its state opened as the session's
 * browser context on its desktop, saved back from that context when the
 * session ends (read-write only), and the lease given back. The model never
 * names a profile: only the harness's hello does (docs/PROTOCOL.md
 * "Profiles").
 */
import type { ActivityHub } from '../base/activity.ts';
import type { Logger } from '../base/log.ts';
import type { ProfileRequest } from '../base/protocol.ts';
import type { StorageState } from '../browser/session.ts';
import type { DesktopResources } from '../desktop-pool/desktop.ts';
import type { ProfilePort, ProfileRefused, SessionProfile } from '../server/profile-port.ts';
import { ProfileRefusal, type ProfileLease, type ProfileRefusalCode, type ProfileStore } from './store.ts';

/** Why a save did not happen, for the harness that asked (the HTTP route) and the log. */
export class ProfileNotSaved extends Error {
  override readonly name = 'ProfileNotSaved';
  constructor(
    /** `read_only`, `no_browser`, or the store's refusal (`too_large`, …). */
    readonly code: 'read_only' | 'no_browser' | ProfileRefusalCode,
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

export interface SessionProfileDeps {
  store: ProfileStore;
  activity: ActivityHub;
  log: Logger;
}

/** The daemon's ProfilePort: every session's lease goes through it. */
export class SessionProfiles implements ProfilePort {
  private readonly live = new Map<string, LeasedProfile>();

  constructor(private readonly deps: SessionProfileDeps) {}

  async lease(sessionId: string, request: ProfileRequest): Promise<SessionProfile | ProfileRefused> {
    let lease: ProfileLease;
    try {
      lease = await this.deps.store.lease(request.name, request.mode, sessionId);
    } catch (err) {
      if (!(err instanceof ProfileRefusal)) {
        // A disk that fails the read: the hello is refused, saying so; the daemon's log has the cause.
        this.deps.log.error('profile not leased', { session: sessionId, profile: request.name, error: String(err) });
        return { code: 'profile_unavailable', message: `the profile ${request.name} could not be read` };
      }
      this.deps.log.info('profile refused', { session: sessionId, profile: request.name, reason: err.code });
      return { code: err.code === 'held' ? 'profile_held' : 'profile_unavailable', message: err.message };
    }
    const profile = new LeasedProfile(sessionId, lease, this.deps, () => this.live.delete(sessionId));
    this.live.set(sessionId, profile);
    return profile;
  }

  /** The live session's profile, if its hello named one. */
  of(sessionId: string): LeasedProfile | undefined {
    return this.live.get(sessionId);
  }
}

/** One session's lease, and the browser session it loads into and saves from. */
export class LeasedProfile implements SessionProfile {
  readonly welcome: SessionProfile['welcome'];
  private browser: { storageState(): Promise<StorageState | undefined> } | undefined;
  private ended = false;
  /** Saves run one at a time: a harness's save and the session's end never write over each other. */
  private saving: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly sessionId: string,
    private readonly lease: ProfileLease,
    private readonly deps: SessionProfileDeps,
    private readonly gone: () => void,
  ) {
    this.welcome = { name: lease.name, mode: lease.mode, bytes: lease.bytes, existed: lease.state !== undefined };
  }

  async load(desktop: DesktopResources): Promise<void> {
    const manager = desktop.browser;
    if (!manager) throw new Error('this daemon serves no browser (--browser off)');
    const session = manager.session(this.sessionId);
    if (this.lease.state) await session.startWith(this.lease.state);
    this.browser = session;
  }

  /**
   * Saves the session's browser state to the profile now (read-write only): its size, and how long it took.
   * Rejects with ProfileNotSaved saying why; the stored state is then as it was.
   */
  save(): Promise<{ bytes: number; ms: number }> {
    const run = this.saving.then(() => this.saveNow());
    this.saving = run.catch(() => undefined);
    return run;
  }

  private async saveNow(): Promise<{ bytes: number; ms: number }> {
    if (this.lease.mode !== 'read_write') {
      throw new ProfileNotSaved('read_only', `the session holds the profile ${this.lease.name} read-only`, 409);
    }
    const t0 = performance.now();
    const state = await this.browser?.storageState();
    if (!state) {
      throw new ProfileNotSaved('no_browser', "the session's browser is not running: there is nothing to save", 409);
    }
    let saved: { bytes: number };
    try {
      saved = await this.lease.save(state);
    } catch (err) {
      if (err instanceof ProfileRefusal) throw new ProfileNotSaved(err.code, err.message, err.status);
      throw err;
    }
    const ms = Math.round(performance.now() - t0);
    this.deps.log.info('profile saved', { session: this.sessionId, profile: this.lease.name, bytes: saved.bytes, ms });
    this.deps.activity.publish({
      type: 'profile_saved',
      session: this.sessionId,
      profile: { name: this.lease.name, mode: this.lease.mode, bytes: saved.bytes },
      at: Date.now(),
    });
    return { bytes: saved.bytes, ms };
  }

  async end(): Promise<void> {
    if (this.ended) return;
    if (this.lease.mode === 'read_write') {
      await this.save().catch((err: unknown) => {
        // The stored state stays as it was: a browser that died, or a state over the bound, is not written.
        const fields = {
          session: this.sessionId,
          profile: this.lease.name,
          error: err instanceof Error ? err.message : String(err),
        };
        if (err instanceof ProfileNotSaved && err.code === 'no_browser')
          this.deps.log.info('profile not saved at the session end', fields);
        else this.deps.log.warn('profile not saved at the session end', fields);
      });
    }
    this.release();
  }

  release(): void {
    if (this.ended) return;
    this.ended = true;
    this.lease.release();
    this.gone();
  }
}
