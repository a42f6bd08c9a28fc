/**
 * What happens in the daemon, as one stream of events for its observers: the
 * metrics, the live viewer, logs. The server publishes; observers subscribe.
 * An observer that throws is cut off, never the batch: observing must not
 * change what the model reads.
 */
import type { AgentToolEntry, BatchResult, TakeoverMessage, TakeoverOutcome, ToolEvent, ToolUse } from './protocol.ts';

/** A file a harness staged for its session (docs/PROTOCOL.md "Staged documents"): what observers may know of it. */
export interface StagedFileActivity {
  document_id: string;
  name: string;
  media_type: string;
  size: number;
  sha256: string;
}

/** A download kept for the harness, as the recording and the viewer show it. */
export interface KeptDownloadActivity {
  download_id: string;
  name: string;
  media_type: string;
  size: number;
  sha256: string;
}

/** What the harness put on or read from its desktop's clipboard (docs/PROTOCOL.md "Clipboard"): never the content. */
/** What the harness put on its desktop's clipboard or read from it: never the content, nor a hash of it (a short secret's hash can be reversed by trying). */
export interface ClipboardActivity {
  media_type: string;
  size: number;
}

/** How a harness's CDP connection ended, and what went through it (counts, never content). */
export interface CdpDetachActivity {
  /** Who closed first: the harness, the browser, or the daemon (a bound passed, the session ended, shutdown). */
  by: 'harness' | 'browser' | 'daemon';
  /** The close code the harness was sent or sent, and its reason (the daemon's or the browser's words). */
  code: number;
  reason: string;
  duration_ms: number;
  /** Messages and their bytes from the harness to the browser. */
  messages_in: number;
  bytes_in: number;
  /** Messages and their bytes from the browser to the harness. */
  messages_out: number;
  bytes_out: number;
}

/** A named browser profile a session uses (docs/PROTOCOL.md "Profiles"): its name and size, never its content. */
export interface ProfileActivity {
  name: string;
  mode: 'read_write' | 'read_only';
  /** Bytes of the stored state (loaded, or saved). */
  bytes: number;
}

export type Activity =
  | {
      type: 'session_opened';
      session: string;
      at: number;
      /** Its desktop's id (`shared`, or `d<N>` from a pool). */ desktop?: string;
      /** Whether the session is recorded (docs/RECORDING.md). */
      record?: boolean;
      /** The browser profile its hello named, as loaded (docs/PROTOCOL.md "Profiles"). */
      profile?: ProfileActivity;
    }
  /** The agent's `hello.tools`: what its model is offered from now on. */
  | { type: 'tools_offered'; session: string; tools: readonly AgentToolEntry[]; at: number }
  | { type: 'session_closed'; session: string; at: number; reason: 'expired' | 'ended' | 'shutdown' }
  | { type: 'batch_started'; session: string; batch_id: string; tool_uses: readonly ToolUse[]; at: number }
  | { type: 'tool_event'; session: string; event: ToolEvent; at: number }
  /** The full result, images included; observers must not keep more of it than they need. */
  | { type: 'batch_finished'; session: string; result: BatchResult; at: number }
  | { type: 'batch_replayed'; session: string; batch_id: string; at: number }
  /** The session's harness staged a document; its content stays with the session's files. */
  | { type: 'document_staged'; session: string; document: StagedFileActivity; at: number }
  | { type: 'document_removed'; session: string; document_id: string; at: number }
  /** A page's download completed and was kept for the harness; its content stays with the session's files. */
  | { type: 'download_kept'; session: string; download: KeptDownloadActivity; at: number }
  /** The harness set (`set`) or read (`read`) its desktop's clipboard; only the size and hash travel. */
  | { type: 'clipboard'; session: string; op: 'set' | 'read'; clipboard: ClipboardActivity; at: number }
  /**
   * The harness attached to its session's browser over CDP (docs/PROTOCOL.md "CDP for the harness");
   * `cdp_id` pairs it with its `cdp_detached`.
   */
  | { type: 'cdp_attached'; session: string; cdp_id: string; remote: string; at: number }
  /** That CDP connection ended: counts only, never a message's content. */
  | { type: 'cdp_detached'; session: string; cdp_id: string; remote: string; detach: CdpDetachActivity; at: number }
  /** The session's browser state was saved to its profile (docs/PROTOCOL.md "Profiles"). */
  | { type: 'profile_saved'; session: string; profile: ProfileActivity; at: number }
  /** The agent asked for a person (docs/PROTOCOL.md "Takeover"); `reason` is model-written text. */
  | { type: 'help_requested'; session: string; request_id: string; reason: string; at: number }
  /** A person took a desktop: the batches of `sessions` wait until it is handed back. */
  | {
      type: 'takeover_started';
      desktop: string;
      sessions: readonly string[];
      operator: string;
      /** Whether recordings keep the screen while the person holds it (the operator's choice). */
      record_screen: boolean;
      at: number;
    }
  /** The desktop went back to the agent; counts only, never what the person typed. */
  | {
      type: 'takeover_ended';
      desktop: string;
      sessions: readonly string[];
      operator: string;
      outcome: TakeoverOutcome;
      note?: string;
      activity: NonNullable<TakeoverMessage['activity']>;
      at: number;
    };

export type ActivityListener = (activity: Activity) => void;

/** Publishes `Activity` to its subscribers, synchronously and in order. */
export class ActivityHub {
  private readonly listeners = new Set<ActivityListener>();

  constructor(private readonly onListenerError: (err: unknown) => void = () => undefined) {}

  /** Subscribes; the returned function unsubscribes. */
  subscribe(listener: ActivityListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** True when someone listens: publishers may skip building an event nobody reads. */
  get observed(): boolean {
    return this.listeners.size > 0;
  }

  publish(activity: Activity): void {
    for (const listener of this.listeners) {
      try {
        listener(activity);
      } catch (err) {
        this.listeners.delete(listener);
        this.onListenerError(err);
      }
    }
  }
}
