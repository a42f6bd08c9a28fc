/**
 * DeskbatchClient: one WebSocket to a deskbatch daemon (docs/PROTOCOL.md),
 * with hello → welcome, batches, tool events, cancel, and reconnects that can
 * never cause a second click:
 *
 * - Batch ids are made here, once per batch, so a batch sent again after a
 *   reconnect carries the same id and the same bytes; the daemon then answers
 *   with its stored result (`replayed: true`) instead of running it again.
 * - After a drop the client reconnects with backoff and resumes the session
 *   (`hello.resume_session_id`), then sends every batch still waiting for its
 *   result again, in order.
 * - If the daemon no longer has the session (`session_not_found`), the batches
 *   that were sent in it are rejected with `SessionLostError`: their outcome
 *   is unknown, and they are never sent into the new session.
 * - `connectFleet` places the session on a pod of a fleet (fleet.ts) and pins
 *   it there: reconnects go to that pod's own name, and a pod that no longer
 *   holds the session ends the client with `SessionLostError` rather than
 *   starting a new session on it.
 *
 * The socket, the hello, heartbeats and reconnects are the link's (link.ts);
 * this file holds the batches, cancels, help requests and the events.
 */
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Readable } from 'node:stream';
import {
  BatchIdSchema,
  PROTOCOL_PATH,
  type BatchResult,
  type ErrorMessage,
  type TakeoverMessage,
  type ToolEvent,
  type ToolResult,
  type ToolsetInfo,
  type Welcome,
} from '../base/protocol.ts';
import {
  splitToolUses,
  type ContentBlockLike,
  type SplitToolUses,
  type ToolUseBlockLike,
  type ToolUseOf,
} from './content.ts';
import {
  documentsUrl,
  listDocuments,
  removeDocument,
  stageDocument,
  type DocumentSource,
  type StageOptions,
  type StagedDocumentInfo,
} from './documents.ts';
import { clipboardUrl, readClipboard, setClipboard, type ClipboardContent } from './clipboard.ts';
import { createLink, revokeLink, type ViewerLink } from './links.ts';
import { placeSession, type FleetOptions, type FleetPlacement } from './fleet.ts';
import {
  deleteProfile,
  exportProfile,
  importProfile,
  listProfiles,
  saveSessionProfile,
  type ProfileInfo,
  type ProfileStored,
  type StorageState,
} from './profiles.ts';
import {
  downloadsUrl,
  listDownloads,
  openDownload,
  openDownloadsZip,
  saveDownload,
  type DownloadInfo,
  type FetchedDownload,
} from './downloads.ts';
import {
  BatchRefusedError,
  ClientClosedError,
  ConnectionLostError,
  DeskbatchError,
  SessionLostError,
} from './errors.ts';
import {
  ClientLink,
  callHook,
  rethrowLater,
  type ClientState,
  type ConnectOptions,
  type GiveUpReason,
  type LinkEvents,
  type LinkTarget,
  type RoutedMessage,
} from './link.ts';

export interface RunBatchOptions {
  /** Default: a fresh `b-<uuid>`. Must be unique within the session (1–128 of `[A-Za-z0-9._:-]`). */
  batchId?: string;
  /** Aborting sends `cancel`; the promise still resolves with the daemon's (cancelled) `batch_result`. */
  signal?: AbortSignal;
  /** Called with this batch's `tool_event`s. */
  onToolEvent?: (event: ToolEvent) => void;
}

export interface RunBatchResult {
  /** One `tool_result` per tool_use, in order: put them first in the next user message, unchanged. */
  toolResults: ToolResult[];
  /** The whole `batch_result` (failures with full errors, `halted`, `cancelled`, `replayed`, screenshots). */
  result: BatchResult;
}

/** A `tools[]` entry for the Messages API as `welcome` carries it (fits the SDK's `BetaToolUnion`). */
export interface ToolsetTool {
  type: 'computer_toolset_20260801' | 'browser_toolset_20260801';
  configs?: Record<string, { enabled: boolean }>;
}

const TOOLSET_TYPES: readonly string[] = ['computer_toolset_20260801', 'browser_toolset_20260801'];

/** Events, for `client.on(name, listener)`; the link's (disconnect, reconnect, session_lost) among them. */
export interface DeskbatchClientEvents extends LinkEvents {
  tool_event: [event: ToolEvent];
  /** An `error` frame not tied to a batch of this client (`rate_limited`, `internal`, …). */
  daemon_error: [error: ErrorMessage];
  /** A person and the desktop (only with `takeover` in the options): help acknowledged, control taken, handed back. */
  takeover: [message: TakeoverMessage];
  close: [];
}

interface PendingBatch {
  batchId: string;
  /** The batch frame, serialised once so every resend is byte-identical. */
  frame: string;
  toolUseIds: string[];
  /** Times the frame was handed to a socket. */
  sends: number;
  /** The session it was last sent in. */
  sessionId: string | undefined;
  cancelRequested: boolean;
  onToolEvent: ((event: ToolEvent) => void) | undefined;
  resolve: (value: RunBatchResult) => void;
  reject: (error: unknown) => void;
  detach: () => void;
}

/** After `rate_limited` (a frame dropped unread), waiting batches are sent again after this long. */
const RATE_LIMIT_RESEND_MS = 1_000;

export class DeskbatchClient extends EventEmitter<DeskbatchClientEvents> {
  private readonly link: ClientLink;
  private readonly pending = new Map<string, PendingBatch>();
  private resendTimer: NodeJS.Timeout | undefined;
  private closing: Promise<void> | undefined;
  private readonly onSignalAbort = (): void => void this.close();
  /** A pinned session the pod no longer holds (connectFleet): every later batch is told so. */
  private lostSessionId: string | undefined;
  private fleetPlacement: FleetPlacement | undefined;

  private constructor(
    url: string,
    private readonly options: ConnectOptions,
    target?: LinkTarget,
  ) {
    super();
    this.link = new ClientLink(
      url,
      options,
      {
        message: (msg) => this.route(msg),
        adopted: () => {
          for (const p of [...this.pending.values()]) this.sendBatch(p);
        },
        dropped: () => {
          // A help request not yet answered may not have reached the daemon: its caller may ask again.
          for (const help of this.helpWaiters.splice(0)) help.reject(new DeskbatchError('the connection closed'));
        },
        sessionLost: () =>
          this.failPending(
            (p) => p.sends > 0,
            (p) => new SessionLostError(p.batchId, p.sessionId, true, p.toolUseIds),
          ),
        gaveUp: (reason, why, cause) => this.giveUp(reason, why, cause),
        notify: (event, ...args) => this.notify(event, ...(args as DeskbatchClientEvents[typeof event])),
      },
      target,
    );
  }

  /**
   * Connects, sends `hello` and resolves once `welcome` arrived. `url` is the
   * daemon's `ws://host:port/v1` (a bare `ws://host:port` gets `/v1`). Rejects
   * with `HandshakeRefusedError` (HTTP status) or `ConnectError`; the first
   * connection is not retried.
   */
  static async connect(url: string, options: ConnectOptions): Promise<DeskbatchClient> {
    const target = new URL(url);
    if (target.pathname === '/' || target.pathname === '') target.pathname = PROTOCOL_PATH;
    const client = new DeskbatchClient(target.toString(), options);
    await client.start();
    return client;
  }

  /**
   * Places a new session on a pod of a fleet (deploy/k8s, docs/DEPLOY.md "Leasing desktops to agents") and
   * connects to it: the pods come from the DNS SRV records of the fleet's headless Services (`desks-free`: the
   * pods with a free desktop; `desks`: every pod by its own name) under `domain`, e.g.
   * `deskbatch.svc.cluster.local`; the lowest ordinal with room is tried first with `when_busy: 'refuse'`, then
   * the next; when none has room the session waits on the pod with the fewest waiting sessions. Each pod's
   * token is derived from `fleetKey` (or given by `token`). The session stays on its pod: reconnects go to the
   * pod's own name, and a pod that no longer holds it ends the client with `SessionLostError`. `placement`
   * says where it went.
   */
  static async connectFleet(domain: string, options: FleetOptions): Promise<DeskbatchClient> {
    const { value: client, placement } = await placeSession(domain, options, async (url, connectOptions, target) => {
      const client = new DeskbatchClient(url, connectOptions, target);
      await client.start();
      return client;
    });
    client.fleetPlacement = placement;
    return client;
  }

  // ------------------------------------------------------------ state

  /** A getter, so checks after an `await` are not narrowed away by the compiler. */
  private get isClosed(): boolean {
    return this.link.state === 'closed';
  }

  get state(): ClientState {
    return this.link.state;
  }

  /** The latest `welcome` (a new one after every reconnect). */
  get welcome(): Welcome {
    const welcome = this.link.welcome;
    if (!welcome) throw new DeskbatchError('not connected yet');
    return welcome;
  }

  get sessionId(): string {
    return this.welcome.session_id;
  }

  /** Where connectFleet placed the session (its pod, and the pods it tried first); undefined for connect(). */
  get placement(): FleetPlacement | undefined {
    return this.fleetPlacement;
  }

  /** The daemon's `ws://host:port/v1` (for a fleet's session, its pod's address, resolved anew on each reconnect). */
  private get url(): string {
    return this.link.url;
  }

  /**
   * Stages a document for this session over the daemon's HTTP routes (docs/PROTOCOL.md "Staged
   * documents"): bytes, a stream, or `{ path }` of a file here, streamed as read. Its `document_id` goes in
   * `file_upload.document_ids`. Rejects with DocumentRefusedError naming the bound or the problem.
   */
  stage(name: string, source: DocumentSource, options?: StageOptions): Promise<StagedDocumentInfo> {
    return stageDocument(documentsUrl(this.url, this.sessionId), this.options.token, name, source, options);
  }

  /** The documents this session staged, oldest first, and the bounds they are held to. */
  async documents(): Promise<StagedDocumentInfo[]> {
    return (await listDocuments(documentsUrl(this.url, this.sessionId), this.options.token)).documents;
  }

  /** Removes a document this session staged (DocumentRefusedError `document_not_found` if it has none by that id). */
  removeDocument(documentId: string): Promise<void> {
    return removeDocument(documentsUrl(this.url, this.sessionId), this.options.token, documentId);
  }

  /**
   * The downloads this session's pages completed, oldest first (docs/PROTOCOL.md "Downloads"): each by the
   * `download_id` its `download_completed` carried, with its name, size, sha256 and state.
   */
  downloads(): Promise<DownloadInfo[]> {
    return listDownloads(downloadsUrl(this.url, this.sessionId), this.options.token);
  }

  /**
   * One of this session's downloads: its bytes as a stream (`body`), or, with `{ path }`, written to that
   * file here and checked against the size and sha256 the daemon kept. Rejects with DownloadError
   * (`download_not_found` for an id this session has not kept).
   */
  fetchDownload(downloadId: string, options?: { signal?: AbortSignal }): Promise<FetchedDownload>;
  fetchDownload(
    downloadId: string,
    options: { path: string; signal?: AbortSignal },
  ): Promise<Omit<FetchedDownload, 'body'>>;
  fetchDownload(
    downloadId: string,
    options: { path?: string; signal?: AbortSignal } = {},
  ): Promise<FetchedDownload | Omit<FetchedDownload, 'body'>> {
    const url = downloadsUrl(this.url, this.sessionId);
    const { token } = this.options;
    return options.path === undefined
      ? openDownload(url, token, downloadId, options.signal)
      : saveDownload(url, token, downloadId, options.path, options.signal);
  }

  /** Every download this session kept, as one zip (entries stored, named as listed), streamed. */
  fetchDownloadsZip(options: { signal?: AbortSignal } = {}): Promise<{ size: number; body: Readable }> {
    return openDownloadsZip(downloadsUrl(this.url, this.sessionId), this.options.token, options.signal);
  }

  /**
   * Puts a text (or `{ png }`, a PNG image's bytes) on this session's desktop clipboard (docs/PROTOCOL.md
   * "Clipboard"), so the model pastes it with ctrl+v instead of typing it. Rejects with ClipboardError
   * (`clipboard_too_large`, `empty_clipboard`, `clipboard_not_offered` on the shared desktop, …).
   */
  setClipboard(content: ClipboardContent): Promise<void> {
    return setClipboard(clipboardUrl(this.url, this.sessionId), this.options.token, content);
  }

  /** What this session's desktop clipboard holds as text (or, with `'image/png'`, a PNG); undefined when empty. */
  clipboard(type?: 'text'): Promise<string | undefined>;
  clipboard(type: 'image/png'): Promise<Buffer | undefined>;
  clipboard(type: 'text' | 'image/png' = 'text'): Promise<string | Buffer | undefined> {
    const url = clipboardUrl(this.url, this.sessionId);
    return type === 'text'
      ? readClipboard(url, this.options.token, 'text')
      : readClipboard(url, this.options.token, type);
  }

  /**
   * A link to this session's live page (docs/VIEWER.md "Links"): read-only by default, `mode: 'control'` to let
   * its holder take the desktop (only with --allow-takeover); it expires after `ttlMs` (default 15 minutes, at
   * most a day), when revoked, or when the session ends. Rejects with LinkError.
   */
  createLink(options: { mode?: 'view' | 'control'; ttlMs?: number } = {}): Promise<ViewerLink> {
    return createLink(this.url, this.options.token, this.sessionId, options);
  }

  /** Ends one of this session's links (its id, `ViewerLink.link_id`). Rejects with LinkError (`link_not_found`). */
  revokeLink(linkId: string): Promise<void> {
    return revokeLink(this.url, this.options.token, this.sessionId, linkId);
  }

  /**
   * The named browser profiles the daemon keeps (docs/PROTOCOL.md "Profiles"), by name: their size, when they
   * were last saved or used, and which session holds them. Profiles are the daemon's, not this session's.
   * Rejects with ProfileRefusedError (`profiles_off` when the daemon has no profile key).
   */
  async profiles(): Promise<ProfileInfo[]> {
    return (await listProfiles(this.url, this.options.token)).profiles;
  }

  /**
   * Saves this session's browser state to the profile its `connect({ profile })` named read-write, now (it is
   * also saved when the session ends). Rejects with ProfileRefusedError (`read_only`, `no_profile`, `too_large`).
   */
  saveProfile(): Promise<{ name: string; bytes: number; ms: number }> {
    return saveSessionProfile(this.url, this.options.token, this.sessionId);
  }

  /** A profile's storage state, decrypted (ProfileRefusedError `not_found`, `unreadable`, …). */
  exportProfile(name: string): Promise<StorageState> {
    return exportProfile(this.url, this.options.token, name);
  }

  /**
   * Stores a storage state (what Playwright's `context.storageState({ indexedDB: true })` returns) as the
   * profile `name`, new or replaced. Rejects with ProfileRefusedError: `held` while a session holds it
   * read-write, `bad_state`, `too_large`, `too_many`, `bad_name`.
   */
  importProfile(name: string, state: StorageState): Promise<ProfileStored> {
    return importProfile(this.url, this.options.token, name, state);
  }

  /** Removes a profile (ProfileRefusedError `held` while any session holds it, `not_found`). */
  deleteProfile(name: string): Promise<void> {
    return deleteProfile(this.url, this.options.token, name);
  }

  /** The toolsets the daemon serves, with their members and texts. */
  get toolsets(): readonly ToolsetInfo[] {
    return this.welcome.toolsets;
  }

  /** The `toolset_name`s the daemon serves (`computer`, `browser`). */
  get toolsetNames(): string[] {
    return this.toolsets.map((t) => t.toolset_name);
  }

  /** The `tools[]` entries to pass to the Messages API: only the members this daemon serves are offered. */
  get tools(): ToolsetTool[] {
    return this.toolsets.flatMap((t) => (isToolsetTool(t.tool) ? [structuredClone(t.tool)] : []));
  }

  /** Display and screenshot sizes (absent while the daemon's X display is unreachable). */
  get display(): Welcome['display'] {
    return this.welcome.display;
  }

  get screenshot(): Welcome['screenshot'] {
    return this.welcome.screenshot;
  }

  /** Ids of the batches still waiting for their result. */
  get pendingBatchIds(): string[] {
    return [...this.pending.keys()];
  }

  /** `splitToolUses` with the toolsets this daemon serves (and the older `computer` tool, with `legacyTools`). */
  splitToolUses<B extends ContentBlockLike>(assistantContent: readonly B[]): SplitToolUses<ToolUseOf<B>> {
    return splitToolUses(assistantContent, this.toolsetNames, { legacyComputer: this.options.legacyTools === true });
  }

  // ------------------------------------------------------------ batches

  /**
   * Runs the turn's toolset calls as one batch and resolves with the daemon's
   * `batch_result`. Survives reconnects (the batch is sent again with the same
   * id and answered from the daemon's stored result). Rejects with
   * `BatchRefusedError` (nothing ran), `BatchOutcomeUnknownError` and its
   * subclasses (see there), or the signal's reason when it was aborted before
   * the batch was sent.
   */
  runBatch(toolUses: readonly ToolUseBlockLike[], options: RunBatchOptions = {}): Promise<RunBatchResult> {
    const batchId = options.batchId ?? `b-${randomUUID()}`;
    const ids = toolUses.map((tu) => tu.id);
    if (this.isClosed && this.lostSessionId !== undefined) {
      return Promise.reject(new SessionLostError(batchId, this.lostSessionId, false, ids));
    }
    if (this.isClosed) {
      return Promise.reject(new ClientClosedError('closed', 'the client is closed', batchId, undefined, false, ids));
    }
    if (options.signal?.aborted) return Promise.reject(options.signal.reason);
    if (toolUses.length === 0) return Promise.reject(new TypeError('runBatch needs at least one tool_use'));
    if (!BatchIdSchema.safeParse(batchId).success) {
      return Promise.reject(new TypeError(`invalid batchId ${JSON.stringify(batchId)}: 1–128 of [A-Za-z0-9._:-]`));
    }
    if (this.pending.has(batchId)) return Promise.reject(new TypeError(`batch ${batchId} is already running`));
    const frame = JSON.stringify({ type: 'batch', batch_id: batchId, tool_uses: toolUses.map(toWire) });
    const limits = this.welcome.limits;
    if (Buffer.byteLength(frame) > limits.max_payload_bytes) {
      const why = `the batch frame is ${Buffer.byteLength(frame)} bytes; the daemon accepts at most ${limits.max_payload_bytes}`;
      return Promise.reject(new BatchRefusedError('batch_too_large', why, batchId));
    }
    if (toolUses.length > limits.max_tool_uses) {
      const why = `${toolUses.length} tool_uses; the daemon accepts at most ${limits.max_tool_uses} per batch`;
      return Promise.reject(new BatchRefusedError('batch_too_large', why, batchId));
    }

    return new Promise<RunBatchResult>((resolve, reject) => {
      const signal = options.signal;
      const onAbort = (): void => this.cancelBatch(batchId, signal?.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      const p: PendingBatch = {
        batchId,
        frame,
        toolUseIds: ids,
        sends: 0,
        sessionId: undefined,
        cancelRequested: false,
        onToolEvent: options.onToolEvent,
        resolve,
        reject,
        detach: () => signal?.removeEventListener('abort', onAbort),
      };
      this.pending.set(batchId, p);
      if (this.state === 'open') this.sendBatch(p);
    });
  }

  private sendBatch(p: PendingBatch): void {
    if (!this.link.send(p.frame)) return;
    p.sends++;
    p.sessionId = this.link.welcome?.session_id;
    if (p.cancelRequested) this.link.send(JSON.stringify({ type: 'cancel', batch_id: p.batchId }));
  }

  /** Abort of a batch: one never sent is dropped here; a sent one gets `cancel` (now, or after the reconnect). */
  private cancelBatch(batchId: string, reason: unknown): void {
    const p = this.pending.get(batchId);
    if (!p) return;
    if (p.sends === 0) {
      this.settle(p);
      p.reject(reason);
      return;
    }
    p.cancelRequested = true;
    if (this.state === 'open') this.link.send(JSON.stringify({ type: 'cancel', batch_id: batchId }));
  }

  private settle(p: PendingBatch): void {
    this.pending.delete(p.batchId);
    p.detach();
  }

  /** Rejects the batches `which` selects with the error `make` builds; returns their ids. */
  private failPending(which: (p: PendingBatch) => boolean, make: (p: PendingBatch) => Error): string[] {
    const failed: string[] = [];
    for (const p of [...this.pending.values()]) {
      if (!which(p)) continue;
      this.settle(p);
      failed.push(p.batchId);
      p.reject(make(p));
    }
    return failed;
  }

  /** Messages outside the hello exchange, from whichever socket (a result is valid from any of them). */
  private route(msg: RoutedMessage): void {
    switch (msg.type) {
      case 'tool_event': {
        const p = this.pending.get(msg.batch_id);
        if (p?.onToolEvent) callHook(p.onToolEvent, msg);
        if (this.options.onToolEvent) callHook(this.options.onToolEvent, msg);
        this.notify('tool_event', msg);
        return;
      }
      case 'batch_result': {
        const p = this.pending.get(msg.batch_id);
        if (!p) return; // a duplicate (a resend answered twice) or not ours
        this.settle(p);
        p.resolve({ toolResults: msg.tool_results, result: msg });
        return;
      }
      case 'error':
        return this.onError(msg);
      case 'takeover':
        if (msg.event === 'help_requested') this.helpWaiters.shift()?.resolve(msg.request_id ?? '');
        this.notify('takeover', msg);
        return;
      case 'pong': // `welcome` and `desktop_wait` are the link's (ClientLink.openLink)
        return;
    }
  }

  /** `help` frames sent and not yet answered, oldest first (the daemon answers them in order). */
  private readonly helpWaiters: Array<{ resolve: (id: string) => void; reject: (err: Error) => void }> = [];

  /**
   * Asks for a person (`help`, only when `welcome.capabilities` lists `help`): resolves with the request's
   * id once the daemon has it. Then watch the `takeover` event: `started`, and `ended` with the outcome and
   * the person's note.
   */
  requestHelp(reason: string): Promise<string> {
    if (!this.welcome.capabilities?.includes('help')) {
      return Promise.reject(
        new DeskbatchError('this daemon does not take help requests (connect with `takeover`, and --allow-takeover)'),
      );
    }
    return new Promise((resolve, reject) => {
      if (!this.link.send(JSON.stringify({ type: 'help', reason }))) {
        reject(new DeskbatchError('not connected'));
        return;
      }
      this.helpWaiters.push({ resolve, reject });
    });
  }

  private onError(msg: ErrorMessage): void {
    const p = msg.batch_id === undefined ? undefined : this.pending.get(msg.batch_id);
    if (msg.batch_id === undefined && msg.code === 'help_unavailable') {
      // The answer to the oldest help request.
      const help = this.helpWaiters.shift();
      if (help) return help.reject(new DeskbatchError(`help refused (${msg.code}): ${msg.message}`));
    }
    if (msg.code === 'rate_limited') {
      // The daemon dropped one of our frames unread; sending the waiting batches again is safe (replay).
      this.scheduleResend();
      this.notify('daemon_error', msg);
      return;
    }
    // `unknown_batch` answers a cancel: nothing to do. A resend refused by a daemon that is shutting down
    // may have run the first time: keep it; the reconnect after the shutdown settles it.
    if (!p || msg.code === 'unknown_batch' || (msg.code === 'shutting_down' && p.sends > 1)) {
      this.notify('daemon_error', msg);
      return;
    }
    this.settle(p);
    p.reject(new BatchRefusedError(msg.code, msg.message, p.batchId, msg.retry_after_ms));
  }

  private scheduleResend(): void {
    if (this.resendTimer) return;
    this.resendTimer = setTimeout(() => {
      this.resendTimer = undefined;
      if (this.state === 'open') for (const p of this.pending.values()) this.sendBatch(p);
    }, RATE_LIMIT_RESEND_MS);
  }

  // ------------------------------------------------------------ connection

  private async start(): Promise<void> {
    const signal = this.options.signal;
    if (signal?.aborted) throw signal.reason;
    signal?.addEventListener('abort', this.onSignalAbort, { once: true });
    try {
      await this.link.connect();
    } catch (err) {
      await this.close();
      throw signal?.aborted ? signal.reason : err;
    }
  }

  /** Reconnecting is over: every waiting batch is rejected (outcome unknown when it was sent), and the client closes. */
  private giveUp(reason: GiveUpReason, why: string, cause?: unknown): void {
    if (reason === 'session_lost') {
      // A pinned session its pod no longer holds: this batch and every later one get SessionLostError.
      const sessionId = this.link.welcome?.session_id;
      this.lostSessionId = sessionId ?? '';
      this.failPending(
        () => true,
        (p) => new SessionLostError(p.batchId, p.sends > 0 ? p.sessionId : sessionId, p.sends > 0, p.toolUseIds, why),
      );
      void this.close();
      return;
    }
    this.failPending(
      () => true,
      (p) =>
        new ConnectionLostError(
          reason,
          p.sends > 0
            ? `${why}: the outcome of batch ${p.batchId} is unknown, some of its calls may have run`
            : `${why}: batch ${p.batchId} was never sent, nothing ran`,
          p.batchId,
          p.sessionId,
          p.sends > 0,
          p.toolUseIds,
          { cause },
        ),
    );
    void this.close();
  }

  /**
   * Closes the connection and stops reconnecting; no timer or socket is left.
   * Batches still waiting are rejected with `ClientClosedError` (the daemon
   * cancels what it was running for them). Idempotent.
   */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private async shutdown(): Promise<void> {
    this.link.stop();
    this.options.signal?.removeEventListener('abort', this.onSignalAbort);
    clearTimeout(this.resendTimer);
    this.resendTimer = undefined;
    this.failPending(
      () => true,
      (p) =>
        new ClientClosedError(
          'closed',
          p.sends > 0
            ? `the client was closed before batch ${p.batchId} had its result; its outcome is unknown`
            : `the client was closed before batch ${p.batchId} was sent; nothing ran`,
          p.batchId,
          p.sessionId,
          p.sends > 0,
          p.toolUseIds,
        ),
    );
    await this.link.closeSockets();
    this.notify('close');
  }

  // ------------------------------------------------------------ hooks

  private notify<K extends keyof DeskbatchClientEvents>(event: K, ...args: DeskbatchClientEvents[K]): void {
    try {
      (this.emit as (event: K, ...args: DeskbatchClientEvents[K]) => boolean)(event, ...args);
    } catch (err) {
      rethrowLater(err);
    }
  }
}

function isToolsetTool(tool: ToolsetInfo['tool']): tool is ToolsetTool {
  return TOOLSET_TYPES.includes(tool.type);
}

/** The wire form of a tool_use: the API block's own fields, copied once so later mutation cannot change a resend. */
function toWire(tu: ToolUseBlockLike): ToolUseBlockLike {
  return {
    type: 'tool_use',
    id: tu.id,
    name: tu.name,
    ...(tu.toolset_name != null ? { toolset_name: tu.toolset_name } : {}),
    input: tu.input,
  };
}
