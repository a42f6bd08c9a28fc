/**
 * The live viewer's feed (docs/VIEWER.md): what the daemon does, as JSON for
 * the operator's page on `/viewer/feed`.
 *
 * The feed subscribes to the ActivityHub at start and keeps a bounded picture:
 * the sessions it has seen, a ring buffer of timeline entries (one per batch
 * and one per call, updated in place as calls run) and the newest image a
 * batch returned. A viewer gets that picture as a snapshot when it connects,
 * then every change as it happens.
 *
 * Viewers never slow batches down: the listener runs on the batch's path, so
 * it does bounded work, serialises once per change and only when someone
 * watches, and skips a viewer whose socket is backed up (that viewer is sent a
 * fresh snapshot, with the count of updates it missed, once it drains).
 * The feed is read-only: a viewer that sends anything is disconnected.
 */
import type { IncomingMessage } from 'node:http';
import sharp from 'sharp';
import type { WebSocket } from 'ws';
import type { Activity, ActivityHub } from '../base/activity.ts';
import type { Logger } from '../base/log.ts';
import type { BatchResult, ErrorInfo, ToolEvent, ToolEventPhase, ToolUse } from '../base/protocol.ts';

export const VIEWER_SUBPROTOCOL = 'deskbatch.viewer.v1';
export const VIEWER_FEED_PATH = '/viewer/feed';

/** WebSocket close codes the page understands. */
export const CLOSE_READ_ONLY = 1008;
export const CLOSE_TOO_MANY_VIEWERS = 1013;

export interface ViewerLimits {
  /** Timeline entries kept (batches and calls together). */
  maxEntries: number;
  /** Viewer sockets open at once; one more is closed with 1013. */
  maxViewers: number;
  /** A viewer whose socket holds more than this, unsent, misses updates until it drains. */
  maxBufferedBytes: number;
  /** Largest image sent, as base64 characters; a larger one is re-encoded smaller, or omitted. */
  maxImageBytes: number;
  /** Strings in tool inputs are cut to this many characters. */
  maxInputChars: number;
  /** Strings in errors are cut to this many characters. */
  maxErrorChars: number;
  /** Sessions remembered (open ones first; the oldest closed ones are forgotten). */
  maxSessions: number;
  /** How often viewers are pinged; one that missed the previous pong is dropped. */
  pingMs: number;
  /** How often a viewer that missed updates is checked for having drained. */
  drainCheckMs: number;
}

export const DEFAULT_VIEWER_LIMITS: ViewerLimits = {
  maxEntries: 200,
  maxViewers: 8,
  maxBufferedBytes: 4 * 1024 * 1024,
  maxImageBytes: 2 * 1024 * 1024,
  maxInputChars: 200,
  maxErrorChars: 20_000,
  maxSessions: 128,
  pingMs: 30_000,
  drainCheckMs: 250,
};

/** A file the session's harness staged (docs/PROTOCOL.md "Staged documents"): listed while the session holds it. */
export interface StagedFileView {
  document_id: string;
  name: string;
  media_type: string;
  size: number;
  sha256: string;
}

/** A download a session's page completed and the daemon kept for its harness (docs/PROTOCOL.md "Downloads"). */
export interface KeptDownloadView {
  download_id: string;
  name: string;
  media_type: string;
  size: number;
  sha256: string;
}

/** Staged files listed per session at most (the daemon's own bound is usually lower: --max-documents). */
const MAX_LISTED_FILES = 64;

export interface SessionView {
  id: string;
  /** Its staged files, oldest first; absent when it has none. They go when the session ends. */
  documents?: StagedFileView[];
  /** The downloads kept for its harness, oldest first (at most MAX_LISTED_FILES); absent when it has none. */
  downloads?: KeptDownloadView[];
  /** The desktop it acts on: `shared`, or a pooled desktop's `d<N>` (its screenshots show that desktop only). */
  desktop?: string;
  opened_at: number;
  closed_at?: number;
  close_reason?: 'expired' | 'ended' | 'shutdown';
}

export interface BatchEntry {
  kind: 'batch';
  /** Unique in the feed (`b<seq>`), also when a batch_id is used again. */
  id: string;
  seq: number;
  session: string;
  batch_id: string;
  calls: number;
  state: 'running' | 'finished' | 'replayed';
  started_at: number;
  at: number;
  duration_ms?: number;
  cancelled?: boolean;
  failures?: number;
  halted?: Record<string, number>;
}

export interface CallEntry {
  kind: 'call';
  id: string;
  seq: number;
  session: string;
  /** The id of this call's BatchEntry. */
  batch: string;
  batch_id: string;
  index: number;
  tool_use_id: string;
  name: string;
  toolset: string | null;
  /** The call's input with long strings cut and nothing image-like (see summarizeInput). */
  input: unknown;
  phase: 'pending' | ToolEventPhase;
  at: number;
  duration_ms?: number;
  attempts?: number;
  /** The full error (strings cut at maxErrorChars), on `failed`. */
  error?: ErrorInfo;
}

export type TimelineEntry = BatchEntry | CallEntry;

export interface ImageView {
  session: string;
  batch_id: string;
  tool_use_id: string;
  /** The member that returned the image. */
  name: string | null;
  at: number;
  media_type?: string;
  /** Base64; absent when the image was too large to send even re-encoded. */
  data?: string;
  width?: number;
  height?: number;
  /** When not the image as the model got it: why. */
  note?: string;
}

export type FeedMessage =
  | {
      type: 'snapshot';
      protocol: typeof VIEWER_SUBPROTOCOL;
      now: number;
      sessions: SessionView[];
      entries: TimelineEntry[];
      image: ImageView | null;
      /** Updates this viewer missed because its connection was backed up. */
      dropped: number;
      limits: { entries: number; image_bytes: number; input_chars: number };
      /** Human takeover is on: the page opens the control socket (docs/VIEWER.md "Takeover"). */
      takeover: boolean;
      /** Opened with a link: the one session this feed shows (docs/VIEWER.md "Links"). */
      scope?: string;
    }
  | { type: 'session'; session: SessionView }
  | { type: 'entries'; entries: TimelineEntry[] }
  | { type: 'image'; image: ImageView };

/** What of a feed message concerns `session`: the message, its entries of that session, or undefined. */
function scopedMessage(message: FeedMessage, session: string): FeedMessage | undefined {
  switch (message.type) {
    case 'session':
      return message.session.id === session ? message : undefined;
    case 'image':
      return message.image.session === session ? message : undefined;
    case 'entries': {
      const entries = message.entries.filter((e) => e.session === session);
      return entries.length ? { type: 'entries', entries } : undefined;
    }
    case 'snapshot':
      return undefined;
  }
}

/** Cuts a string to `max` UTF-16 code units (never inside a surrogate pair) and says how much is missing. */
export function truncate(text: string, max: number): string {
  if (text.length <= max) return text;
  let cut = text.slice(0, max);
  if (/[\uD800-\uDBFF]$/.test(cut)) cut = cut.slice(0, -1);
  return `${cut}… (${text.length - cut.length} more characters)`;
}

const MAX_INPUT_DEPTH = 4;
const MAX_INPUT_ITEMS = 20;

/**
 * A bounded copy of a tool input for the operator's eyes: strings cut to `maxChars` (a `type` text
 * can hold a secret the model types: the operator sees its start), at most 20 items or fields per
 * level, 4 levels, and anything shaped like an image block replaced by a marker.
 */
export function summarizeInput(value: unknown, maxChars: number, depth = 0): unknown {
  if (typeof value === 'string') return truncate(value, maxChars);
  if (value === null || typeof value === 'boolean') return value;
  if (typeof value === 'number') return Number.isFinite(value) ? value : String(value);
  if (typeof value !== 'object') return value === undefined ? null : String(value);
  if (depth >= MAX_INPUT_DEPTH) return '…';
  if (Array.isArray(value)) {
    const items = value.slice(0, MAX_INPUT_ITEMS).map((v) => summarizeInput(v, maxChars, depth + 1));
    if (value.length > MAX_INPUT_ITEMS) items.push(`… (${value.length - MAX_INPUT_ITEMS} more items)`);
    return items;
  }
  const record = value as Record<string, unknown>;
  if (record.type === 'image' || (typeof record.source === 'object' && record.source !== null))
    return '[image omitted]';
  const keys = Object.keys(record);
  // Object.fromEntries defines properties: a key named __proto__ stays a plain key.
  const out = Object.fromEntries(
    keys.slice(0, MAX_INPUT_ITEMS).map((k) => [truncate(k, 64), summarizeInput(record[k], maxChars, depth + 1)]),
  );
  if (keys.length > MAX_INPUT_ITEMS) out['…'] = `${keys.length - MAX_INPUT_ITEMS} more fields`;
  return out;
}

function boundedError(error: ErrorInfo, maxChars: number): ErrorInfo {
  return { ...error, type: truncate(error.type, 256), message: truncate(error.message, maxChars) };
}

interface Viewer {
  ws: WebSocket;
  remote: string;
  alive: boolean;
  /** Missed at least one update; gets a snapshot once its buffer is below the bound. */
  stale: boolean;
  dropped: number;
  /** Opened with a link (docs/VIEWER.md "Links"): this session's sessions, entries and image alone. */
  scope: string | undefined;
  /** The link may take control (its snapshot's `takeover`). */
  control: boolean;
}

interface RunningBatch {
  batch: BatchEntry;
  calls: CallEntry[];
}

const OPEN = 1; // WebSocket.OPEN

export interface ViewerFeedDeps {
  activity: ActivityHub;
  log: Logger;
  limits?: Partial<ViewerLimits>;
  /** Told to every viewer in the snapshot (`takeover`); default false. */
  takeover?: boolean;
}

export class ViewerFeed {
  readonly limits: ViewerLimits;
  private readonly sessions = new Map<string, SessionView>();
  private readonly entries: TimelineEntry[] = [];
  private readonly live = new Set<TimelineEntry>();
  private readonly running = new Map<string, RunningBatch>();
  private readonly viewers = new Set<Viewer>();
  private image: ImageView | null = null;
  private imageSeq = 0;
  private seq = 0;
  private pingTimer: NodeJS.Timeout | undefined;
  private drainTimer: NodeJS.Timeout | undefined;
  private readonly unsubscribe: () => void;

  constructor(private readonly deps: ViewerFeedDeps) {
    this.limits = { ...DEFAULT_VIEWER_LIMITS, ...deps.limits };
    this.unsubscribe = deps.activity.subscribe((activity) => {
      // A bug here must not cost the operator the feed for good (the hub drops observers that throw).
      try {
        this.onActivity(activity);
      } catch (err) {
        deps.log.error('viewer feed: activity not shown', { activity: activity.type, error: String(err) });
      }
    });
  }

  /** Viewers connected now. */
  get viewerCount(): number {
    return this.viewers.size;
  }

  /** Stops observing and disconnects every viewer. */
  close(): void {
    this.unsubscribe();
    for (const v of this.viewers) v.ws.terminate();
    this.viewers.clear();
    this.stopTimers();
  }

  /**
   * A viewer socket that passed the handshake checks (rate limit, Origin, token or link). `scope`: a link's
   * session, the only one this viewer is shown anything of; `control`: that link may take control.
   */
  attach(ws: WebSocket, req: IncomingMessage, scope?: { session: string; control: boolean }): void {
    const remote = req.socket.remoteAddress ?? '';
    if (this.viewers.size >= this.limits.maxViewers) {
      this.deps.log.warn('viewer refused: too many viewers', { remote, max: this.limits.maxViewers });
      ws.close(CLOSE_TOO_MANY_VIEWERS, 'too many viewers');
      return;
    }
    const viewer: Viewer = {
      ws,
      remote,
      alive: true,
      stale: false,
      dropped: 0,
      scope: scope?.session,
      control: scope?.control ?? false,
    };
    this.viewers.add(viewer);
    this.deps.log.info('viewer connected', { remote, viewers: this.viewers.size });
    ws.on('message', () => {
      // Read-only: nothing a viewer sends is ever acted on.
      if (!this.viewers.has(viewer)) return;
      this.deps.log.warn('viewer sent a message; disconnected (the feed is read-only)', { remote });
      this.detach(viewer);
      ws.close(CLOSE_READ_ONLY, 'the viewer feed is read-only');
    });
    ws.on('pong', () => (viewer.alive = true));
    ws.on('error', () => undefined);
    ws.once('close', () => {
      if (this.detach(viewer)) this.deps.log.info('viewer disconnected', { remote, viewers: this.viewers.size });
    });
    this.sendSnapshot(viewer);
    this.pingTimer ??= setInterval(() => this.ping(), this.limits.pingMs).unref();
  }

  private detach(viewer: Viewer): boolean {
    const had = this.viewers.delete(viewer);
    if (this.viewers.size === 0) this.stopTimers();
    return had;
  }

  private stopTimers(): void {
    clearInterval(this.pingTimer);
    clearInterval(this.drainTimer);
    this.pingTimer = this.drainTimer = undefined;
  }

  private ping(): void {
    for (const v of this.viewers) {
      if (!v.alive) {
        this.detach(v);
        v.ws.terminate();
        continue;
      }
      v.alive = false;
      v.ws.ping();
    }
  }

  /** The picture a viewer starts from (also sent again to a viewer that missed updates). */
  snapshot(dropped = 0, scope?: string, control = false): Extract<FeedMessage, { type: 'snapshot' }> {
    const mine = (session: string): boolean => scope === undefined || session === scope;
    return {
      type: 'snapshot',
      protocol: VIEWER_SUBPROTOCOL,
      now: Date.now(),
      sessions: [...this.sessions.values()].filter((s) => mine(s.id)),
      entries: this.entries.filter((e) => mine(e.session)),
      image: this.image && mine(this.image.session) ? this.image : null,
      dropped,
      limits: {
        entries: this.limits.maxEntries,
        image_bytes: this.limits.maxImageBytes,
        input_chars: this.limits.maxInputChars,
      },
      // A link's page may take control only with a control link (and the daemon's takeover on).
      takeover: this.deps.takeover === true && (scope === undefined || control),
      ...(scope !== undefined ? { scope } : {}),
    };
  }

  private sendSnapshot(viewer: Viewer): void {
    viewer.stale = false;
    viewer.ws.send(JSON.stringify(this.snapshot(viewer.dropped, viewer.scope, viewer.control)));
  }

  private broadcast(message: FeedMessage): void {
    if (this.viewers.size === 0) return;
    const json = JSON.stringify(message);
    let scoped: Map<string, string> | undefined;
    for (const v of this.viewers) {
      if (v.ws.readyState !== OPEN) continue;
      let text = json;
      if (v.scope !== undefined) {
        // A link's viewer: the part of the message about its session, or nothing.
        scoped ??= new Map();
        let own = scoped.get(v.scope);
        if (own === undefined) {
          const part = scopedMessage(message, v.scope);
          own = part ? JSON.stringify(part) : '';
          scoped.set(v.scope, own);
        }
        if (!own) continue;
        text = own;
      }
      if (v.ws.bufferedAmount > this.limits.maxBufferedBytes) {
        v.dropped++;
        v.stale = true;
        this.drainTimer ??= setInterval(() => this.resync(), this.limits.drainCheckMs).unref();
      } else if (v.stale) {
        // The picture already holds this update; the snapshot replaces what was missed.
        this.sendSnapshot(v);
      } else {
        v.ws.send(text);
      }
    }
  }

  /** Viewers that missed updates and have drained get a fresh snapshot. */
  private resync(): void {
    let waiting = false;
    for (const v of this.viewers) {
      if (!v.stale || v.ws.readyState !== OPEN) continue;
      if (v.ws.bufferedAmount > this.limits.maxBufferedBytes) waiting = true;
      else this.sendSnapshot(v);
    }
    if (!waiting) {
      clearInterval(this.drainTimer);
      this.drainTimer = undefined;
    }
  }

  // ---- the picture

  private onActivity(activity: Activity): void {
    switch (activity.type) {
      case 'session_opened':
        return this.sessionChanged({
          id: activity.session,
          opened_at: activity.at,
          ...(activity.desktop ? { desktop: activity.desktop } : {}),
        });
      case 'session_closed': {
        const known = this.sessions.get(activity.session) ?? { id: activity.session, opened_at: activity.at };
        for (const key of this.running.keys()) if (key.startsWith(`${activity.session}\n`)) this.running.delete(key);
        // Its staged files went with it.
        const { documents: _gone, downloads: _kept, ...rest } = known;
        return this.sessionChanged({ ...rest, closed_at: activity.at, close_reason: activity.reason });
      }
      case 'document_staged': {
        const known = this.sessions.get(activity.session);
        if (!known) return;
        const { document_id, name, media_type, size, sha256 } = activity.document;
        const documents = [...(known.documents ?? []), { document_id, name, media_type, size, sha256 }];
        return this.sessionChanged({ ...known, documents: documents.slice(-MAX_LISTED_FILES) });
      }
      case 'download_kept': {
        const known = this.sessions.get(activity.session);
        if (!known) return;
        const { download_id, name, media_type, size, sha256 } = activity.download;
        const downloads = [...(known.downloads ?? []), { download_id, name, media_type, size, sha256 }];
        return this.sessionChanged({ ...known, downloads: downloads.slice(-MAX_LISTED_FILES) });
      }
      case 'document_removed': {
        const known = this.sessions.get(activity.session);
        if (!known?.documents) return;
        const documents = known.documents.filter((d) => d.document_id !== activity.document_id);
        const { documents: _old, ...rest } = known;
        return this.sessionChanged(documents.length ? { ...rest, documents } : rest);
      }
      case 'batch_started':
        return this.batchStarted(activity.session, activity.batch_id, activity.tool_uses, activity.at);
      case 'tool_event':
        return this.toolEvent(activity.session, activity.event, activity.at);
      case 'batch_finished':
        return this.batchFinished(activity.session, activity.result, activity.at);
      case 'batch_replayed': {
        const batch = this.batchEntry(activity.session, activity.batch_id, 0, activity.at);
        batch.state = 'replayed';
        this.add([batch]);
        return;
      }
    }
  }

  private sessionChanged(session: SessionView): void {
    this.sessions.delete(session.id);
    this.sessions.set(session.id, session);
    if (this.sessions.size > this.limits.maxSessions) {
      const closed = [...this.sessions.values()].find((s) => s.closed_at !== undefined);
      const oldest = closed ?? this.sessions.values().next().value;
      if (oldest) this.sessions.delete(oldest.id);
    }
    this.broadcast({ type: 'session', session });
  }

  private batchEntry(session: string, batchId: string, calls: number, at: number): BatchEntry {
    const seq = ++this.seq;
    return {
      kind: 'batch',
      id: `b${seq}`,
      seq,
      session,
      batch_id: batchId,
      calls,
      state: 'running',
      started_at: at,
      at,
    };
  }

  /**
   * Appends to the ring buffer (evicting the oldest) and tells the viewers.
   *
   * Kept as a plain array (issue 13 looked): at `maxEntries` (200 by
   * default) the `splice` moves a few hundred references at most, entries are
   * updated in place while their calls run (`live` says which are still
   * held), and a snapshot is a copy in order. A circular-buffer package would
   * add a dependency to save that one `splice`.
   */
  private add(entries: TimelineEntry[]): void {
    for (const e of entries) {
      this.entries.push(e);
      this.live.add(e);
    }
    const excess = this.entries.length - this.limits.maxEntries;
    if (excess > 0) for (const e of this.entries.splice(0, excess)) this.live.delete(e);
    const kept = entries.filter((e) => this.live.has(e));
    if (kept.length) this.broadcast({ type: 'entries', entries: kept });
  }

  /** Tells the viewers about entries changed in place (those still in the buffer). */
  private changed(entries: TimelineEntry[]): void {
    const kept = entries.filter((e) => this.live.has(e));
    if (kept.length) this.broadcast({ type: 'entries', entries: kept });
  }

  private batchStarted(session: string, batchId: string, toolUses: readonly ToolUse[], at: number): void {
    // A long batch keeps only its last calls in the buffer; its batch entry goes first, so it is evicted first.
    const shown = toolUses.slice(-Math.max(1, this.limits.maxEntries - 1));
    const offset = toolUses.length - shown.length;
    const batch = this.batchEntry(session, batchId, toolUses.length, at);
    const calls = shown.map((tu, i): CallEntry => {
      const seq = ++this.seq;
      return {
        kind: 'call',
        id: `c${seq}`,
        seq,
        session,
        batch: batch.id,
        batch_id: batchId,
        index: offset + i,
        tool_use_id: tu.id,
        name: truncate(tu.name, 200),
        toolset: tu.toolset_name ?? null,
        input: summarizeInput(tu.input ?? {}, this.limits.maxInputChars),
        phase: 'pending',
        at,
      };
    });
    this.running.set(`${session}\n${batchId}`, { batch, calls });
    this.add([batch, ...calls]);
  }

  private call(run: RunningBatch, index: number): CallEntry | undefined {
    return run.calls.find((c) => c.index === index);
  }

  private toolEvent(session: string, event: ToolEvent, at: number): void {
    const run = this.running.get(`${session}\n${event.batch_id}`);
    const call = run && this.call(run, event.index);
    if (!call) return;
    call.phase = event.phase;
    call.at = at;
    if (event.duration_ms !== undefined) call.duration_ms = event.duration_ms;
    if (event.attempts !== undefined) call.attempts = event.attempts;
    if (event.error) call.error = boundedError(event.error, this.limits.maxErrorChars);
    this.changed([call]);
  }

  private batchFinished(session: string, result: BatchResult, at: number): void {
    const key = `${session}\n${result.batch_id}`;
    const run = this.running.get(key) ?? { batch: this.batchEntry(session, result.batch_id, 0, at), calls: [] };
    const isNew = !this.running.has(key);
    this.running.delete(key);
    const { batch } = run;
    Object.assign(batch, {
      state: 'finished',
      at,
      duration_ms: result.duration_ms,
      cancelled: result.cancelled,
      failures: result.failures.length,
      halted: result.halted,
    });
    const touched: TimelineEntry[] = [batch];
    for (const failure of result.failures) {
      const call = this.call(run, failure.index);
      if (!call) continue;
      call.phase = 'failed';
      call.error = boundedError(failure.error, this.limits.maxErrorChars);
      touched.push(call);
    }
    if (isNew) this.add([batch]);
    else this.changed(touched);
    this.latestImage(session, result, run, at);
  }

  /** Keeps the newest image of a result (the last image block of the last result that has one). */
  private latestImage(session: string, result: BatchResult, run: RunningBatch, at: number): void {
    for (let i = result.tool_results.length - 1; i >= 0; i--) {
      const tr = result.tool_results[i]!;
      for (let j = tr.content.length - 1; j >= 0; j--) {
        const block = tr.content[j]!;
        if (block.type !== 'image') continue;
        const file = result.screenshots.findLast((s) => s.tool_use_id === tr.tool_use_id);
        const view: ImageView = {
          session,
          batch_id: result.batch_id,
          tool_use_id: tr.tool_use_id,
          name: run.calls.find((c) => c.tool_use_id === tr.tool_use_id)?.name ?? null,
          at,
          media_type: block.source.media_type,
          ...(file ? { width: file.width, height: file.height } : {}),
        };
        void this.keepImage(view, block.source.data);
        return;
      }
    }
  }

  private async keepImage(view: ImageView, data: string): Promise<void> {
    const seq = ++this.imageSeq;
    let kept: ImageView;
    if (data.length <= this.limits.maxImageBytes) {
      kept = { ...view, data };
    } else {
      kept = await this.shrink(view, data);
      if (seq !== this.imageSeq) return; // a newer image arrived meanwhile
    }
    this.image = kept;
    this.broadcast({ type: 'image', image: kept });
  }

  /** Re-encodes an image too large to send as a smaller JPEG; omits it when even that is too large. */
  private async shrink(view: ImageView, data: string): Promise<ImageView> {
    try {
      const source = Buffer.from(data, 'base64');
      for (const side of [1280, 800, 480]) {
        const out = await sharp(source)
          .resize({ width: side, height: side, fit: 'inside', withoutEnlargement: true })
          .jpeg({ quality: 70 })
          .toBuffer({ resolveWithObject: true });
        const encoded = out.data.toString('base64');
        if (encoded.length <= this.limits.maxImageBytes) {
          return {
            ...view,
            media_type: 'image/jpeg',
            data: encoded,
            width: out.info.width,
            height: out.info.height,
            note: 'reduced for the viewer',
          };
        }
      }
    } catch (err) {
      this.deps.log.warn('viewer: image could not be reduced', { error: String(err) });
    }
    return { ...view, media_type: undefined, note: 'image too large for the viewer' };
  }
}
