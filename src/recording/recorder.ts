/**
 * Session recordings (docs/RECORDING.md): for each recorded session, its
 * trajectory (every batch, call event and result, images as files beside
 * it), a video of its desktop from its first computer call, and the
 * Playwright trace of its browser context.
 *
 * The recorder observes the daemon's activity stream (src/base/activity.ts), as
 * the viewer and the metrics do: what a batch returns never waits for it.
 * Work on the batch path is one JSON serialisation per line and a base64
 * decode per image; the writes themselves run in a queue of their own, in
 * order, so a line is on disk only after the images it names.
 */
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, open, stat, type FileHandle } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { join } from 'node:path';
import type {
  Activity,
  ActivityHub,
  KeptDownloadActivity,
  ProfileActivity,
  StagedFileActivity,
} from '../base/activity.ts';
import type { RecordingSettings } from '../base/config.ts';
import type { DesktopResources } from '../desktop-pool/desktop.ts';
import type { Logger } from '../base/log.ts';
import { PROTOCOL_VERSION, type BatchResult, type ResultBlock, type ToolUse } from '../base/protocol.ts';
import { redacted } from '../browser/trace-rewrite.ts';
import { orAfter } from '../base/resilience.ts';
import { DESKBATCH_VERSION } from '../base/version.ts';
import { sanitizeId } from '../base/screenshot-store.ts';
import {
  emptySummary,
  IMAGES_DIR,
  listFiles,
  TRAJECTORY_FILE,
  type RecordingStore,
  type RecordingSummary,
} from './store.ts';

export const TRAJECTORY_FORMAT = 'deskbatch.trajectory';
export const TRAJECTORY_VERSION = 1;
/** How long opening a recording waits for its desktop's display size before it writes the first line without. */
const DISPLAY_SIZE_WAIT_MS = 250;

/** What the recorder needs of a desktop video (src/recording/video.ts). */
export interface VideoHandle {
  readonly startedAt: number;
  chapter(title: string, startAt: number, endAt: number): void;
  /** Stops taking frames until resume() (a person's takeover the operator chose not to record). */
  pause(): void;
  resume(): void;
  stop(): Promise<void>;
  bytes(): number;
}

/** Starts a video of a desktop's display into `path` and its chapters into `chaptersPath`; undefined: no video. */
export type VideoStarter = (
  desktop: DesktopResources,
  paths: { path: string; chaptersPath: string },
) => Promise<VideoHandle | undefined>;

/** Where recorded bytes go, by artifact, for the metrics. */
export type Artifact = 'trajectory' | 'images' | 'video' | 'trace' | 'documents' | 'downloads';

export interface RecorderDeps {
  settings: RecordingSettings;
  store: RecordingStore;
  log: Logger;
  /** Absent: no video (off, or ffmpeg missing). */
  video?: VideoStarter;
  /** A session's desktop, while the session holds it (for its video). */
  desktopOf: (sessionId: string) => DesktopResources | undefined;
  /** `pool` (a desktop per session) or `shared`, for the trajectory's first line. */
  desktopMode: 'pool' | 'shared';
  onBytes?: (artifact: Artifact, bytes: number) => void;
  /** A staged document's content, while its session holds it (copied only with `settings.documents`). */
  documentContent?: (sessionId: string, documentId: string) => Readable | undefined;
  /** A kept download's content, while its session holds it (copied only with `settings.downloads`). */
  downloadContent?: (sessionId: string, downloadId: string) => Readable | undefined;
}

/** The folder of a recording that holds the staged documents' copies (`--record-documents`). */
export const DOCUMENTS_DIR = 'documents';
/** The folder of a recording that holds the kept downloads' copies (`--record-downloads`). */
export const DOWNLOADS_DIR = 'downloads';

const EXTENSION: Record<string, string> = {
  'image/png': 'png',
  'image/jpeg': 'jpg',
  'image/webp': 'webp',
  'image/gif': 'gif',
};

/** The image block as a trajectory stores it: a reference to the file written beside it. */
export interface ImageFileBlock {
  type: 'image_file';
  path: string;
  media_type: string;
  width?: number;
  height?: number;
  bytes: number;
  sha256: string;
}

/**
 * A batch's tool_uses with typed text replaced (docs/RECORDING.md "Privacy"): `type` (both toolsets), the
 * browser's `form_input` value, and the older `computer` tool's `type` action. `secret` names the calls whose
 * text went into a password field; with `all`, every one's.
 */
export function redactToolUses(toolUses: readonly ToolUse[], all: boolean, secret: ReadonlySet<string>): ToolUse[] {
  return toolUses.map((tu) => {
    if (!all && !secret.has(tu.id)) return tu;
    const input = (tu.input ?? {}) as Record<string, unknown>;
    const field =
      tu.name === 'type' || (tu.name === 'computer' && input.action === 'type')
        ? 'text'
        : tu.name === 'form_input'
          ? 'value'
          : undefined;
    const value = field ? input[field] : undefined;
    if (field === undefined || value === undefined || typeof value === 'boolean') return tu;
    return { ...tu, input: { ...input, [field]: redacted(String(value)) } };
  });
}

class SessionRecording {
  readonly summary: RecordingSummary;
  private queue: Promise<unknown>;
  private file: FileHandle | undefined;
  private imageCounter = 0;
  private bytes = 0;
  private stopped = false;
  private video: Promise<VideoHandle | undefined> | undefined;
  /** The video once it runs. */
  private videoNow: VideoHandle | undefined;
  private readonly callStarts = new Map<string, { name: string; at: number }>();
  /** batch_started lines held until the batch ends, when password redaction needs to know which calls were secret. */
  private readonly heldBatches = new Map<string, { at: number; toolUses: readonly ToolUse[]; events: object[] }>();
  /** Calls whose text went into a password field (reported by the browser toolset). */
  readonly secretInputs = new Set<string>();
  /** A person holds the desktop and the operator chose not to keep the screen: the video takes no frames. */
  private screenPaused = false;
  /** When the takeover in progress began (its chapter). */
  private takeoverAt: number | undefined;

  constructor(
    readonly id: string,
    readonly dir: string,
    private readonly desktop: DesktopResources | undefined,
    private readonly deps: RecorderDeps,
    first: object,
  ) {
    const at = Date.now();
    this.summary = emptySummary(id, (first as { session_id: string }).session_id, at);
    this.queue = open(join(dir, TRAJECTORY_FILE), 'a', 0o600).then((fh) => (this.file = fh));
    this.line({ type: 'recording', at, ...first });
  }

  private enqueue(work: () => Promise<unknown>): void {
    this.queue = this.queue.then(work).catch((err: unknown) => {
      this.deps.log.warn('recording write failed', { recording: this.id, error: String(err) });
    });
  }

  /** Appends one line (one write: whole or not at all). */
  line(record: object): void {
    if (this.stopped) return;
    const text = `${JSON.stringify(record)}\n`;
    this.enqueue(async () => {
      if (this.stopped) return; // the budget was reached by a write queued before this line
      await this.file?.write(text);
      this.count('trajectory', Buffer.byteLength(text));
    });
  }

  private count(artifact: Artifact, bytes: number): void {
    this.bytes += bytes;
    this.deps.store.grew(this.id, bytes);
    this.deps.onBytes?.(artifact, bytes);
    const max = this.deps.settings.retention.maxBytes;
    // The video grows on its own (another process writes it): it counts toward the budget as it is now.
    if (!this.stopped && this.bytes + (this.videoNow?.bytes() ?? 0) > max) {
      // A live recording is never removed by retention; past the whole budget it stops growing instead.
      this.deps.log.warn('a recording reached the recordings byte budget; it stops here', {
        recording: this.id,
        max_bytes: max,
      });
      const text = `${JSON.stringify({ type: 'stopped', at: Date.now(), reason: 'byte_budget' })}\n`;
      this.stopped = true;
      void this.file?.write(text).catch(() => undefined);
      void this.stopVideo();
    }
  }

  /**
   * A document the harness staged: a line with its name, size and sha256, and with `content`
   * (`--record-documents`) a copy beside the trajectory, written before the line that names it.
   */
  documentStaged(document: StagedFileActivity, at: number, content: Readable | undefined): void {
    const path = this.copyFile(DOCUMENTS_DIR, 'documents', document.document_id, document.size, content);
    this.line({ type: 'document_staged', at, ...document, ...(path ? { path } : {}) });
  }

  /**
   * A download kept for the harness: a line with its name, size and sha256, and with `content`
   * (`--record-downloads`) a copy beside the trajectory, written before the line that names it.
   */
  downloadKept(download: KeptDownloadActivity, at: number, content: Readable | undefined): void {
    const path = this.copyFile(DOWNLOADS_DIR, 'downloads', download.download_id, download.size, content);
    this.line({ type: 'download_kept', at, ...download, ...(path ? { path } : {}) });
  }

  /** Copies a session's file into `folder` of the recording, in the queue; its path there, or undefined without content. */
  private copyFile(
    folder: string,
    artifact: 'documents' | 'downloads',
    id: string,
    size: number,
    content: Readable | undefined,
  ): string | undefined {
    if (!content) return undefined;
    const path = `${folder}/${sanitizeId(id, 64)}`;
    this.enqueue(async () => {
      if (this.stopped) return content.destroy();
      await mkdir(join(this.dir, folder), { recursive: true, mode: 0o700 });
      await pipeline(content, createWriteStream(join(this.dir, path), { flags: 'wx', mode: 0o600 }));
      this.count(artifact, size);
    });
    return path;
  }

  batchStarted(batchId: string, toolUses: readonly ToolUse[], at: number): void {
    if (this.deps.settings.redact.passwords && !this.deps.settings.redact.typed) {
      this.heldBatches.set(batchId, { at, toolUses, events: [] });
      return;
    }
    this.writeBatchStarted(batchId, toolUses, at);
  }

  /** A held batch's batch_started line, then its events, in order. */
  private writeHeld(batchId: string, held: { at: number; toolUses: readonly ToolUse[]; events: object[] }): void {
    this.heldBatches.delete(batchId);
    this.writeBatchStarted(batchId, held.toolUses, held.at);
    for (const line of held.events) this.line(line);
  }

  private writeBatchStarted(batchId: string, toolUses: readonly ToolUse[], at: number): void {
    const { typed, passwords } = this.deps.settings.redact;
    const shown = typed || passwords ? redactToolUses(toolUses, typed, this.secretInputs) : toolUses;
    this.line({ type: 'batch_started', at, batch_id: batchId, tool_uses: shown });
  }

  toolEvent(event: Activity & { type: 'tool_event' }): void {
    const { type: _type, ...rest } = event.event;
    const line = { type: 'tool_event', at: event.at, event: rest };
    // A held batch's events follow its batch_started line, so they wait with it.
    const held = this.heldBatches.get(event.event.batch_id);
    if (held) held.events.push(line);
    else this.line(line);
    const e = event.event;
    if (e.phase === 'started') {
      this.callStarts.set(e.tool_use_id, { name: e.name, at: event.at });
      // The video starts with the session's first computer call (the older `computer` tool's too).
      if (
        !this.video &&
        !this.videoStopped &&
        this.deps.video &&
        this.desktop &&
        (e.toolset_name === 'computer' || e.name === 'computer')
      ) {
        this.startVideo();
      }
    } else if (e.phase !== 'not_executed') {
      const start = this.callStarts.get(e.tool_use_id);
      this.callStarts.delete(e.tool_use_id);
      if (start && this.video) {
        const title = `${start.name} · ${e.tool_use_id}`;
        void this.video.then((v) => v?.chapter(title, start.at, event.at));
      }
    }
  }

  private startVideo(): void {
    const started = this.deps.video!(this.desktop!, {
      path: join(this.dir, 'video.mp4'),
      chaptersPath: join(this.dir, 'video.vtt'),
    }).catch((err: unknown) => {
      this.deps.log.warn('the desktop video did not start; the recording goes on without it', {
        recording: this.id,
        error: err instanceof Error ? err.message : String(err),
      });
      return undefined;
    });
    this.video = started;
    void started.then((v) => {
      this.videoNow = v;
      if (this.screenPaused) v?.pause();
      if (v)
        this.line({ type: 'video', at: Date.now(), path: 'video.mp4', chapters: 'video.vtt', started_at: v.startedAt });
    });
  }

  /**
   * A person took the desktop (docs/VIEWER.md "Takeover"): the line, and, unless the operator chose to keep
   * the screen, no video frames until it is handed back. Called as the activity happens (not later): the
   * person's first input must find the video paused.
   */
  takeoverStarted(recordScreen: boolean, at: number): void {
    this.takeoverAt = at;
    if (recordScreen) return;
    this.screenPaused = true;
    this.videoNow?.pause();
  }

  takeoverEnded(operator: string, at: number): void {
    const paused = this.screenPaused;
    this.screenPaused = false;
    this.videoNow?.resume();
    const start = this.takeoverAt ?? at;
    this.takeoverAt = undefined;
    const title = `takeover by ${operator}${paused ? ' (screen not recorded)' : ''}`;
    void this.video?.then((v) => v?.chapter(title, start, at));
  }

  /** Finalises the video, once: its bytes are counted then. */
  stopVideo(): Promise<void> {
    this.videoStopped ??= (async () => {
      const video = await this.video;
      if (!video) return;
      await video.stop().catch(() => undefined);
      this.deps.onBytes?.('video', video.bytes());
    })();
    return this.videoStopped;
  }

  private videoStopped: Promise<void> | undefined;

  batchFinished(result: BatchResult, at: number): void {
    const held = this.heldBatches.get(result.batch_id);
    if (held) this.writeHeld(result.batch_id, held);
    const s = this.summary;
    s.batches++;
    s.calls += result.tool_results.length;
    s.failures += result.failures.length;
    if (result.cancelled) s.cancelled++;
    if (this.stopped) return;
    // Images become files; the line names them. Decoding is the only per-image work done now.
    const sizes = new Map(result.screenshots.map((f) => [f.tool_use_id, f]));
    const writes: { path: string; data: Buffer }[] = [];
    const toolResults = result.tool_results.map((tr) => ({
      ...tr,
      content: tr.content.map((block: ResultBlock): ResultBlock | ImageFileBlock => {
        if (block.type !== 'image') return block;
        const data = Buffer.from(block.source.data, 'base64');
        const name = `${IMAGES_DIR}/${sanitizeId(result.batch_id, 64)}_${sanitizeId(tr.tool_use_id, 64)}_${(this.imageCounter++).toString(36)}.${EXTENSION[block.source.media_type] ?? 'bin'}`;
        writes.push({ path: join(this.dir, name), data });
        const size = sizes.get(tr.tool_use_id);
        return {
          type: 'image_file',
          path: name,
          media_type: block.source.media_type,
          ...(size ? { width: size.width, height: size.height } : {}),
          bytes: data.length,
          sha256: createHash('sha256').update(data).digest('hex'),
        };
      }),
    }));
    const { type: _type, ...rest } = result;
    const record = { type: 'batch_finished', at, result: { ...rest, tool_results: toolResults } };
    this.enqueue(async () => {
      for (const w of writes) {
        if (this.stopped) return;
        const fh = await open(w.path, 'wx', 0o600);
        try {
          await fh.write(w.data);
        } finally {
          await fh.close();
        }
        this.count('images', w.data.length);
      }
    });
    this.line(record);
  }

  /** Whether a batch failed or was cancelled (`--record-keep failures` keeps only such recordings). */
  get eventful(): boolean {
    return this.summary.failures > 0 || this.summary.cancelled > 0;
  }

  /** The session ended: the last line, the video finalised, the file closed. */
  async close(at: number, reason: string): Promise<RecordingSummary> {
    for (const [batchId, held] of this.heldBatches) this.writeHeld(batchId, held);
    this.line({ type: 'session_closed', at, reason });
    this.enqueue(() => this.stopVideo());
    this.enqueue(async () => {
      await this.file?.close();
      this.file = undefined;
    });
    await this.queue;
    this.summary.ended_at = at;
    Object.assign(this.summary, await listFiles(this.dir));
    // The browser saved its trace when the session's context closed, before this.
    for (const name of this.summary.files.filter((f) => /^trace(?:-\d+)?\.zip$/.test(f))) {
      const s = await stat(join(this.dir, name)).catch(() => undefined);
      if (s) this.deps.onBytes?.('trace', s.size);
    }
    return this.summary;
  }
}

/**
 * Records the sessions that should be: every one with `--record`, those whose hello asked with
 * `--record-on-request` (the server decides, and marks `session_opened` with `record`).
 */
export class Recorder {
  private readonly live = new Map<string, Promise<SessionRecording | undefined>>();
  private unsubscribe: (() => void) | undefined;

  constructor(private readonly deps: RecorderDeps) {}

  attach(activity: ActivityHub): void {
    this.unsubscribe = activity.subscribe((a) => this.later(a));
  }

  /** Activity not yet looked at, in order, with the session it is for: handled after this turn of the event loop (flush). */
  private backlog: Array<{ session: string; a: Activity }> = [];
  /** Sessions being recorded, from their `session_opened` to their `session_closed`. */
  private readonly recorded = new Set<string>();

  /**
   * The hub tells observers synchronously, before the batch's answer is sent: the recorder only notes the
   * activity and does its work (the base64 decode and hash of images, the JSON) once the answer is out.
   */
  private later(a: Activity): void {
    if (a.type === 'session_opened' && a.record) this.recorded.add(a.session);
    // A takeover concerns every session on its desktop.
    const sessions = 'sessions' in a ? a.sessions : [a.session];
    for (const session of sessions) {
      if (!this.recorded.has(session)) continue;
      if (a.type === 'session_closed') this.recorded.delete(session);
      if (a.type === 'takeover_started') this.liveDone.get(session)?.takeoverStarted(a.record_screen, a.at);
      this.backlog.push({ session, a });
      if (this.backlog.length === 1) setImmediate(this.flush);
    }
  }

  private readonly flush = (): void => {
    const batch = this.backlog;
    this.backlog = [];
    for (const { session, a } of batch) this.on(session, a);
  };

  /** Opened recordings, by session id: what on() can reach synchronously. */
  private readonly liveDone = new Map<string, SessionRecording>();

  /** A live recording's summary (by recording id), for the listing. */
  summary(id: string): RecordingSummary | undefined {
    for (const r of this.liveDone.values()) if (r.id === id) return { ...r.summary };
    return undefined;
  }

  /** Marks a call whose text went into a password field (src/browser: the toolset tells). */
  secretInput(sessionId: string, toolUseId: string): void {
    this.liveDone.get(sessionId)?.secretInputs.add(toolUseId);
  }

  private on(session: string, a: Activity): void {
    if (a.type === 'session_opened') {
      if (a.record) this.open(session, this.deps.desktopOf(session), a.profile);
      return;
    }
    if (!this.live.has(session)) return;
    const r = this.liveDone.get(session);
    if (!r) {
      // Opening (a mkdir) is still under way: this line follows it.
      void this.live.get(session)!.then((rec) => rec && this.apply(session, rec, a));
      return;
    }
    this.apply(session, r, a);
  }

  private apply(session: string, r: SessionRecording, a: Activity): void {
    switch (a.type) {
      case 'tools_offered':
        return r.line({ type: 'tools', at: a.at, tools: a.tools });
      case 'batch_started':
        return r.batchStarted(a.batch_id, a.tool_uses, a.at);
      case 'tool_event':
        return r.toolEvent(a);
      case 'batch_finished':
        return r.batchFinished(a.result, a.at);
      case 'batch_replayed':
        return r.line({ type: 'batch_replayed', at: a.at, batch_id: a.batch_id });
      case 'document_staged': {
        const content = this.deps.settings.documents
          ? this.deps.documentContent?.(session, a.document.document_id)
          : undefined;
        return r.documentStaged(a.document, a.at, content);
      }
      case 'download_kept': {
        const content = this.deps.settings.downloads
          ? this.deps.downloadContent?.(session, a.download.download_id)
          : undefined;
        return r.downloadKept(a.download, a.at, content);
      }
      case 'document_removed':
        return r.line({ type: 'document_removed', at: a.at, document_id: a.document_id });
      case 'clipboard':
        // Its size and hash, never its content: a clipboard can hold what the harness keeps from the model's log.
        return r.line({ type: a.op === 'set' ? 'clipboard_set' : 'clipboard_read', at: a.at, ...a.clipboard });
      case 'cdp_attached':
        // Who attached and when; the harness's CDP messages are not recorded (docs/RECORDING.md).
        return r.line({ type: 'cdp_attached', at: a.at, cdp_id: a.cdp_id, remote: a.remote });
      case 'cdp_detached':
        return r.line({ type: 'cdp_detached', at: a.at, cdp_id: a.cdp_id, remote: a.remote, ...a.detach });
      case 'profile_saved':
        // Its name and size, never its content: a profile holds the logins the harness keeps from the model.
        return r.line({ type: 'profile_saved', at: a.at, ...a.profile });
      case 'session_closed':
        void this.finish(a.session, r, a.at, a.reason);
        return;
      case 'help_requested':
        return r.line({ type: 'help_requested', at: a.at, request_id: a.request_id, reason: a.reason });
      case 'takeover_started':
        return r.line({
          type: 'takeover',
          event: 'started',
          at: a.at,
          desktop: a.desktop,
          operator: a.operator,
          record_screen: a.record_screen,
        });
      case 'takeover_ended':
        r.takeoverEnded(a.operator, a.at);
        if (this.deps.settings.trace) this.deps.desktopOf(session)?.browser?.session(session).redactTraceFields();
        return r.line({
          type: 'takeover',
          event: 'ended',
          at: a.at,
          desktop: a.desktop,
          operator: a.operator,
          outcome: a.outcome,
          ...(a.note ? { note: a.note } : {}),
          activity: a.activity,
        });
    }
  }

  private open(sessionId: string, desktop: DesktopResources | undefined, profile?: ProfileActivity): void {
    // The display's size, if the desktop tells it at once (a worker still starting is not waited for).
    const size = desktop
      ? orAfter(
          desktop.driver.displaySize().catch(() => undefined),
          DISPLAY_SIZE_WAIT_MS,
          undefined,
        )
      : Promise.resolve(undefined);
    const opening = Promise.all([this.deps.store.open(sessionId), size]).then(
      ([{ id, dir }, display]) => {
        const { typed, passwords } = this.deps.settings.redact;
        const r = new SessionRecording(id, dir, desktop, this.deps, {
          format: TRAJECTORY_FORMAT,
          version: TRAJECTORY_VERSION,
          session_id: sessionId,
          desktop: {
            id: desktop?.id ?? null,
            mode: this.deps.desktopMode,
            ...(display ? { display: { width: display.width, height: display.height } } : {}),
          },
          redaction: { typed, passwords },
          // Its name and size only (docs/RECORDING.md "Privacy").
          ...(profile ? { profile } : {}),
          daemon: { version: DESKBATCH_VERSION, protocol: PROTOCOL_VERSION },
        });
        this.liveDone.set(sessionId, r);
        this.traceBrowser(sessionId, dir, desktop);
        return r;
      },
      (err: unknown) => {
        this.deps.log.warn('could not start a recording; the session runs unrecorded', {
          session: sessionId,
          error: String(err),
        });
        this.live.delete(sessionId);
        return undefined;
      },
    );
    this.live.set(sessionId, opening);
  }

  /**
   * The session's browser context records a Playwright trace, saved as `trace.zip` when it closes
   * (src/browser/session.ts `recordTrace`), with the operator's privacy settings.
   */
  private traceBrowser(sessionId: string, dir: string, desktop: DesktopResources | undefined): void {
    const s = this.deps.settings;
    const browser = desktop?.browser;
    if (!s.trace || !browser) return;
    void browser
      .session(sessionId)
      .recordTrace({
        path: join(dir, 'trace.zip'),
        networkBodies: s.networkBodies,
        redactTyped: s.redact.typed,
        redactPasswords: s.redact.passwords,
        screenshots: s.traceScreenshots,
      })
      .catch((err: unknown) =>
        this.deps.log.warn('the browser trace did not start; the recording goes on without it', {
          session: sessionId,
          error: String(err),
        }),
      );
  }

  private readonly finishing = new Set<Promise<void>>();

  private finish(sessionId: string, r: SessionRecording, at: number, reason: string): void {
    this.live.delete(sessionId);
    this.liveDone.delete(sessionId);
    const done = r
      .close(at, reason)
      .then((summary) => this.deps.store.finish(r.id, summary, this.deps.settings.keep === 'all' || r.eventful))
      .catch((err: unknown) =>
        this.deps.log.warn('could not finish a recording', { recording: r.id, error: String(err) }),
      )
      .finally(() => this.finishing.delete(done));
    this.finishing.add(done);
  }

  /**
   * A session is ending, its desktop not yet given back: its video is finalised now, while its display still
   * runs (a pooled desktop's display is ended with it). The rest of the recording ends with `session_closed`.
   */
  async sessionEnding(sessionId: string): Promise<void> {
    this.flush();
    const r = await this.live.get(sessionId);
    await r?.stopVideo();
  }

  /** Waits for every recording being finished (daemon shutdown, after the sessions closed). */
  async close(): Promise<void> {
    this.unsubscribe?.();
    this.flush();
    await Promise.all([...this.live.values()]); // recordings still opening finish once open
    await Promise.all([...this.finishing]);
    this.deps.store.close();
  }
}
