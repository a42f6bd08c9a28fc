/**
 * What the server asks of human takeover (docs/PROTOCOL.md "Takeover"), which
 * lives above it (src/takeover/) and is handed in by the daemon: whether a
 * person holds a desktop, and the agent's request for one.
 */
import type { DesktopResources } from '../desktop-pool/desktop.ts';
import type { TakeoverMessage } from '../base/protocol.ts';

export interface TakeoverPort {
  /** Whether a person holds this desktop (or is about to): then how long until trying again is worth it, in ms. */
  heldRetryMs(desktop: DesktopResources): number | undefined;
  /** The `started` frame for a desktop a person holds now (a welcome is followed by it), or undefined. */
  current(desktop: DesktopResources): TakeoverMessage | undefined;
  /** The agent asks for a person; answered with the `help_requested` frame. */
  requestHelp(sessionId: string, desktop: DesktopResources, reason: string): TakeoverMessage;
}
