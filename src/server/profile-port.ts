/**
 * What the server asks of named browser profiles (docs/PROTOCOL.md
 * "Profiles"), which live above it (src/profiles/) and are handed in by the
 * daemon: a lease on a profile for a new session (before its desktop, so a
 * refused hello starts nothing), its state loaded into the session's browser
 * once the desktop is there, and saved back when the session ends.
 */
import type { DesktopResources } from '../desktop-pool/desktop.ts';
import type { ErrorCode, ProfileRequest, Welcome } from '../base/protocol.ts';

/** Why a profile was refused, as the hello's error frame says it. */
export interface ProfileRefused {
  code: Extract<ErrorCode, 'profile_held' | 'profile_unavailable'>;
  message: string;
}

export interface ProfilePort {
  /** Leases the profile for a new session: its lease, or why not. */
  lease(sessionId: string, request: ProfileRequest): Promise<SessionProfile | ProfileRefused>;
}

/** One session's lease on a profile, from its hello to its end. */
export interface SessionProfile {
  /** What `welcome.profile` says. */
  readonly welcome: NonNullable<Welcome['profile']>;
  /** Loads the profile's state into the session's browser on `desktop`: rejects, saying why, when it cannot. */
  load(desktop: DesktopResources): Promise<void>;
  /** The session ends: a read-write profile is saved from its browser, then the lease goes. Never throws. */
  end(): Promise<void>;
  /** The session never started (a refusal after the lease): the lease goes, nothing is saved. */
  release(): void;
}
