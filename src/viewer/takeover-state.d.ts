import type RFB from './rfb.js';

/**
 * What the live page holds or asked for (takeover.js, `t.hold`): the desktop, and its lease once the daemon
 * granted it (null while the take waits for an answer or for the agent's batch).
 */
export interface Hold {
  desktop: string;
  lease: string | null;
  /** When the lease runs out, on the daemon's clock (0: not known yet). */
  expiresAt: number;
  /** A hand-back was sent and not answered yet. */
  returning: boolean;
}

/** The desktop the live page shows through noVNC (takeover.js, `t.view`): to control it or to watch it. */
export interface View {
  desktop: string;
  mode: 'control' | 'watch';
  rfb: RFB | null;
  /** Closed by the page: its RFB's events are ignored from then on. */
  closed: boolean;
  connected: boolean;
  /** The wait before the view reconnects, doubled after each try. */
  retryMs: number;
  timer: number;
  /** The desktop got the keyboard focus once (on the first connect). */
  focused?: boolean;
}
