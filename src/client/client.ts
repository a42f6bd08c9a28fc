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
 */
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import WebSocket, { type RawData } from 'ws';
import {
  BatchIdSchema,
  CLOSE_SESSION_RESUMED,
  PROTOCOL_PATH,
  ServerMessageSchema,
  type AgentToolEntry,
  type BatchResult,
  type DesktopWait,
  type ErrorMessage,
  type ServerMessage,
  type TakeoverMessage,
  type ToolEvent,
  type ToolResult,
  type ToolsetInfo,
  type Welcome,
} from '../protocol.ts';
import {
  splitToolUses,
  type ContentBlockLike,
  type SplitToolUses,
  type ToolUseBlockLike,
  type ToolUseOf,
} from './content.ts';
import {
  BatchRefusedError,
  ClientClosedError,
  ConnectError,
  ConnectionLostError,
  DeskbatchError,
  HandshakeRefusedError,
  SessionLostError,
} from './errors.ts';

export interface ReconnectOptions {
  /** Connection attempts after a drop before giving up (0: never reconnect). */
  maxAttempts: number;
  /** Delay before the first attempt; it doubles per attempt (with jitter) up to `maxDelayMs`. */
  initialDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RECONNECT: Readonly<ReconnectOptions> = {
  maxAttempts: 10,
  initialDelayMs: 250,
  maxDelayMs: 5_000,
};

export interface ConnectOptions {
  /** The daemon's bearer token (sent as `Authorization: Bearer`, never in the URL). */
  token: string;
  /** Sent in `hello.client`, for the daemon's logs. */
  clientName?: string;
  /** Reconnect settings (partial values are merged over `DEFAULT_RECONNECT`); `false` never reconnects. */
  reconnect?: Partial<ReconnectOptions> | false;
  /** Called with every `tool_event` (also available as `client.on('tool_event')`). */
  onToolEvent?: (event: ToolEvent) => void;
  /** `false` asks the daemon for no `tool_event` frames at all (`hello.events`): one frame per batch. Default true. */
  events?: boolean;
  /** `true` asks for `welcome.legacy_tools`: the `tools[]` entries of the older computer tools. */
  legacyTools?: boolean;
  /**
   * The `tools[]` the agent sends to the Messages API (`hello.tools`): the
   * session then runs only what the model was offered, and refuses a member
   * the agent's `configs` switched off with the SDK runner's text.
   */
  agentTools?: AgentToolEntry[];
  /**
   * What the session wants of its desktop (`hello.desktop`): `whenBusy: 'refuse'` fails `connect` at once
   * with a ConnectError of code `no_desktop` (and `retryAfterMs`) when every desktop is in use; `'wait'`
   * (the default) queues, each `desktop_wait` frame resetting the hello timeout. It also asks for
   * `welcome.desktop`.
   */
  desktop?: { whenBusy?: 'wait' | 'refuse'; display?: { width: number; height: number } };
  /** Called with the session's place in the queue for a desktop, while it waits (`desktop_wait`). */
  onDesktopWait?: (wait: DesktopWait) => void;
  /**
   * Human takeover (`hello.takeover`, docs/PROTOCOL.md "Takeover"): asks for `takeover` frames (the
   * `takeover` event) and `welcome.capabilities`. `whenHeld: 'refuse'` makes a batch sent while a person
   * holds the desktop fail with a BatchRefusedError of code `desktop_held` (and `retryAfterMs`); `'wait'`
   * (the default) lets it wait for the hand-back.
   */
  takeover?: { whenHeld?: 'wait' | 'refuse' };
  /** Aborting it stops connecting, or closes the client once connected. */
  signal?: AbortSignal;
  /** Limit for the HTTP upgrade and, separately, for the answer to `hello`. Default 10,000 ms. */
  handshakeTimeoutMs?: number;
  /** WebSocket ping interval; a peer that misses one is dropped (and reconnected). Default 15,000 ms; 0 disables. */
  heartbeatMs?: number;
}

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

/** Events, for `client.on(name, listener)`. */
export interface DeskbatchClientEvents {
  tool_event: [event: ToolEvent];
  /** The socket dropped; the client is reconnecting unless it gave up (then `close` follows). */
  disconnect: [info: { code: number; reason: string }];
  /** Reconnected and resumed the same session; waiting batches were sent again. */
  reconnect: [welcome: Welcome];
  /** Reconnected, but the daemon had lost the session: a new one was started. */
  session_lost: [info: { previousSessionId: string; welcome: Welcome; rejectedBatchIds: string[] }];
  /** An `error` frame not tied to a batch of this client (`rate_limited`, `internal`, …). */
  daemon_error: [error: ErrorMessage];
  /** A person and the desktop (only with `takeover` in the options): help acknowledged, control taken, handed back. */
  takeover: [message: TakeoverMessage];
  close: [];
}

export type ClientState = 'connecting' | 'open' | 'reconnecting' | 'closed';

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

/** One socket, before it is adopted: `hello` waits for the answer. */
interface Link {
  ws: WebSocket;
  hello(resumeSessionId?: string): Promise<Welcome | ErrorMessage>;
}

const DEFAULT_HANDSHAKE_TIMEOUT_MS = 10_000;
const DEFAULT_HEARTBEAT_MS = 15_000;
/** How long close() waits for the daemon's close frame. */
const CLOSE_WAIT_MS = 1_000;
/** After `rate_limited` (a frame dropped unread), waiting batches are sent again after this long. */
const RATE_LIMIT_RESEND_MS = 1_000;

export class DeskbatchClient extends EventEmitter<DeskbatchClientEvents> {
  private currentState: ClientState = 'connecting';
  private ws: WebSocket | undefined;
  private lastWelcome: Welcome | undefined;
  private readonly pending = new Map<string, PendingBatch>();
  /** Every socket this client made that has not closed yet. */
  private readonly sockets = new Set<WebSocket>();
  private readonly reconnectOptions: ReconnectOptions;
  private readonly handshakeTimeoutMs: number;
  private readonly heartbeatMs: number;
  private heartbeat: NodeJS.Timeout | undefined;
  private backoffTimer: NodeJS.Timeout | undefined;
  private wakeBackoff: (() => void) | undefined;
  private resendTimer: NodeJS.Timeout | undefined;
  private closing: Promise<void> | undefined;
  private readonly onSignalAbort = (): void => void this.close();

  private constructor(
    private readonly url: string,
    private readonly options: ConnectOptions,
  ) {
    super();
    this.reconnectOptions =
      options.reconnect === false
        ? { ...DEFAULT_RECONNECT, maxAttempts: 0 }
        : { ...DEFAULT_RECONNECT, ...options.reconnect };
    this.handshakeTimeoutMs = options.handshakeTimeoutMs ?? DEFAULT_HANDSHAKE_TIMEOUT_MS;
    this.heartbeatMs = options.heartbeatMs ?? DEFAULT_HEARTBEAT_MS;
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

  // ------------------------------------------------------------ state

  /** A getter, so checks after an `await` are not narrowed away by the compiler. */
  private get isClosed(): boolean {
    return this.currentState === 'closed';
  }

  get state(): ClientState {
    return this.currentState;
  }

  /** The latest `welcome` (a new one after every reconnect). */
  get welcome(): Welcome {
    if (!this.lastWelcome) throw new DeskbatchError('not connected yet');
    return this.lastWelcome;
  }

  get sessionId(): string {
    return this.welcome.session_id;
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
      if (this.currentState === 'open') this.sendBatch(p);
    });
  }

  private sendBatch(p: PendingBatch): void {
    if (!this.sendFrame(p.frame)) return;
    p.sends++;
    p.sessionId = this.lastWelcome?.session_id;
    if (p.cancelRequested) this.sendFrame(JSON.stringify({ type: 'cancel', batch_id: p.batchId }));
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
    if (this.currentState === 'open') this.sendFrame(JSON.stringify({ type: 'cancel', batch_id: batchId }));
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

  private sendFrame(frame: string): boolean {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN) return false;
    ws.send(frame);
    return true;
  }

  // ------------------------------------------------------------ incoming

  private parse(data: RawData, isBinary: boolean): ServerMessage | undefined {
    if (isBinary) return undefined;
    let json: unknown;
    try {
      json = JSON.parse(rawText(data));
    } catch {
      return undefined;
    }
    // Unknown or malformed messages are ignored: a v1 client skips what it does not know.
    const parsed = ServerMessageSchema.safeParse(json);
    return parsed.success ? parsed.data : undefined;
  }

  /** Messages outside the hello exchange, from whichever socket (a result is valid from any of them). */
  private route(msg: ServerMessage): void {
    switch (msg.type) {
      case 'tool_event': {
        const p = this.pending.get(msg.batch_id);
        if (p?.onToolEvent) this.callHook(p.onToolEvent, msg);
        if (this.options.onToolEvent) this.callHook(this.options.onToolEvent, msg);
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
      case 'welcome':
        if (msg.session_id === this.lastWelcome?.session_id) this.lastWelcome = msg;
        return;
      case 'takeover':
        if (msg.event === 'help_requested') this.helpWaiters.shift()?.resolve(msg.request_id ?? '');
        this.notify('takeover', msg);
        return;
      case 'pong':
      case 'desktop_wait': // only while hello waits (openLink)
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
      if (!this.sendFrame(JSON.stringify({ type: 'help', reason }))) {
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
      if (this.currentState === 'open') for (const p of this.pending.values()) this.sendBatch(p);
    }, RATE_LIMIT_RESEND_MS);
  }

  // ------------------------------------------------------------ connection

  private async start(): Promise<void> {
    const signal = this.options.signal;
    if (signal?.aborted) throw signal.reason;
    signal?.addEventListener('abort', this.onSignalAbort, { once: true });
    try {
      const link = await this.openLink();
      const reply = await link.hello();
      if (reply.type === 'error') {
        throw new ConnectError(
          `the daemon answered hello with ${reply.code}: ${reply.message}`,
          reply.code,
          reply.retry_after_ms !== undefined ? { retryAfterMs: reply.retry_after_ms } : {},
        );
      }
      if (this.isClosed) throw new ConnectError('closed while connecting');
      this.adopt(link, reply);
    } catch (err) {
      await this.close();
      throw signal?.aborted ? signal.reason : err;
    }
  }

  /** Opens a socket; resolves once it is open, with a `hello` that waits for the daemon's answer. */
  private openLink(): Promise<Link> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(this.url, {
        headers: { authorization: `Bearer ${this.options.token}` },
        handshakeTimeout: this.handshakeTimeoutMs,
      });
      this.sockets.add(ws);
      let status: number | undefined;
      let lastError = '';
      let waiter: ((m: Welcome | ErrorMessage) => void) | undefined;
      let rearm: (() => void) | undefined;
      ws.on('message', (data, isBinary) => {
        const msg = this.parse(data, isBinary);
        if (!msg) return;
        if (waiter && (msg.type === 'welcome' || (msg.type === 'error' && msg.batch_id === undefined))) {
          waiter(msg);
          return;
        }
        if (msg.type === 'desktop_wait') {
          // The daemon is alive and the session is queued for a desktop: the hello's clock starts again.
          rearm?.();
          if (this.options.onDesktopWait) this.callHook(this.options.onDesktopWait, msg);
          return;
        }
        this.route(msg);
      });
      ws.on('error', (err) => (lastError = err.message)); // 'close' follows and reports it
      ws.on('unexpected-response', (_req, res) => {
        status = res.statusCode ?? 0;
        res.resume();
        ws.terminate();
      });
      ws.on('close', (code, reason) => {
        this.sockets.delete(ws);
        this.onSocketClose(ws, code, rawText(reason));
      });
      const failed = (): void =>
        reject(
          status !== undefined
            ? new HandshakeRefusedError(status)
            : new ConnectError(`could not connect to ${this.url}${lastError ? `: ${lastError}` : ''}`),
        );
      ws.once('close', failed);
      ws.once('open', () => {
        ws.off('close', failed);
        resolve({
          ws,
          hello: (resume) =>
            new Promise((res, rej) => {
              if (ws.readyState !== WebSocket.OPEN) return rej(new ConnectError('the connection closed before hello'));
              const done = (): void => {
                clearTimeout(timer);
                ws.off('close', onClose);
                waiter = undefined;
                rearm = undefined;
              };
              const onClose = (): void => {
                done();
                rej(new ConnectError('the connection closed before the daemon answered hello'));
              };
              const expire = (): void => {
                done();
                rej(new ConnectError(`no answer to hello within ${this.handshakeTimeoutMs} ms`));
                ws.terminate();
              };
              let timer = setTimeout(expire, this.handshakeTimeoutMs);
              rearm = () => {
                clearTimeout(timer);
                timer = setTimeout(expire, this.handshakeTimeoutMs);
              };
              ws.once('close', onClose);
              waiter = (m) => {
                done();
                res(m);
              };
              const hello = {
                type: 'hello',
                client: this.options.clientName ?? 'deskbatch-client/1',
                ...(resume ? { resume_session_id: resume } : {}),
                ...(this.options.events === false ? { events: false } : {}),
                ...(this.options.legacyTools ? { legacy_tools: true } : {}),
                ...(this.options.agentTools ? { tools: this.options.agentTools } : {}),
                ...(this.options.desktop
                  ? {
                      desktop: {
                        ...(this.options.desktop.whenBusy ? { when_busy: this.options.desktop.whenBusy } : {}),
                        ...(this.options.desktop.display ? { display: this.options.desktop.display } : {}),
                      },
                    }
                  : {}),
                ...(this.options.takeover
                  ? {
                      takeover: this.options.takeover.whenHeld ? { when_held: this.options.takeover.whenHeld } : {},
                    }
                  : {}),
              };
              ws.send(JSON.stringify(hello));
            }),
        });
      });
    });
  }

  /** Makes a socket that completed hello the client's connection, and sends every waiting batch. */
  private adopt(link: Link, welcome: Welcome): void {
    this.ws = link.ws;
    this.lastWelcome = welcome;
    this.currentState = 'open';
    this.startHeartbeat(link.ws);
    for (const p of [...this.pending.values()]) this.sendBatch(p);
  }

  private startHeartbeat(ws: WebSocket): void {
    clearInterval(this.heartbeat);
    if (this.heartbeatMs <= 0) return;
    let alive = true;
    const seen = (): void => {
      alive = true;
    };
    ws.on('pong', seen);
    ws.on('message', seen);
    this.heartbeat = setInterval(() => {
      if (!alive) {
        ws.terminate(); // a half-open connection: reconnect
        return;
      }
      alive = false;
      ws.ping();
    }, this.heartbeatMs);
    this.heartbeat.unref();
  }

  private onSocketClose(ws: WebSocket, code: number, reason: string): void {
    if (ws !== this.ws) return; // a socket that never became (or no longer is) the connection
    this.ws = undefined;
    clearInterval(this.heartbeat);
    this.heartbeat = undefined;
    // A help request not yet answered may not have reached the daemon: its caller may ask again.
    for (const help of this.helpWaiters.splice(0)) help.reject(new DeskbatchError('the connection closed'));
    if (this.isClosed) return;
    // Another connection resumed our session: taking it back would make two clients fight over it.
    const stay = code !== CLOSE_SESSION_RESUMED && this.reconnectOptions.maxAttempts > 0;
    if (stay) this.currentState = 'reconnecting';
    this.notify('disconnect', { code, reason });
    if (code === CLOSE_SESSION_RESUMED) return this.giveUp('session_taken', 'another connection took over the session');
    if (!stay) return this.giveUp('connection_lost', `the connection closed (${code}) and reconnecting is off`);
    void this.reconnect();
  }

  private async reconnect(): Promise<void> {
    const { maxAttempts, initialDelayMs, maxDelayMs } = this.reconnectOptions;
    let lostSessionId: string | undefined;
    let rejected: string[] = [];
    let lastError: unknown;
    for (let attempt = 1; attempt <= maxAttempts; attempt++) {
      const base = Math.min(maxDelayMs, initialDelayMs * 2 ** (attempt - 1));
      await this.backoff(base / 2 + (Math.random() * base) / 2);
      if (this.isClosed) return;
      let link: Link;
      try {
        link = await this.openLink();
      } catch (err) {
        lastError = err;
        if (this.isClosed) return;
        if (err instanceof HandshakeRefusedError && err.permanent) break;
        continue;
      }
      try {
        const resumeId = lostSessionId === undefined ? this.lastWelcome?.session_id : undefined;
        let reply = await link.hello(resumeId);
        if (resumeId !== undefined && isSessionGone(reply, resumeId)) {
          lostSessionId = resumeId;
          // Sent in the lost session: their outcome is unknown, and they are never sent again.
          rejected = this.failPending(
            (p) => p.sends > 0,
            (p) => new SessionLostError(p.batchId, p.sessionId, true, p.toolUseIds),
          );
          if (reply.type === 'error') reply = await link.hello();
        }
        if (reply.type === 'error') throw new ConnectError(`hello: ${reply.code}: ${reply.message}`, reply.code);
        if (this.isClosed) {
          link.ws.terminate();
          return;
        }
        this.adopt(link, reply);
        if (lostSessionId === undefined) this.notify('reconnect', reply);
        else
          this.notify('session_lost', { previousSessionId: lostSessionId, welcome: reply, rejectedBatchIds: rejected });
        return;
      } catch (err) {
        lastError = err;
        link.ws.terminate();
        if (this.isClosed) return;
      }
    }
    if (this.isClosed) return;
    const why = lastError instanceof Error ? lastError.message : String(lastError);
    this.giveUp('connection_lost', `could not reconnect to the daemon (${why})`, lastError);
  }

  /** Waits `ms`, or less if the client closes meanwhile. */
  private backoff(ms: number): Promise<void> {
    return new Promise((resolve) => {
      if (this.isClosed) return resolve();
      this.wakeBackoff = resolve;
      this.backoffTimer = setTimeout(() => {
        this.backoffTimer = undefined;
        this.wakeBackoff = undefined;
        resolve();
      }, ms);
    });
  }

  /** Reconnecting is over: every waiting batch is rejected (outcome unknown when it was sent), and the client closes. */
  private giveUp(reason: 'connection_lost' | 'session_taken', why: string, cause?: unknown): void {
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
    this.currentState = 'closed';
    this.options.signal?.removeEventListener('abort', this.onSignalAbort);
    clearInterval(this.heartbeat);
    clearTimeout(this.backoffTimer);
    clearTimeout(this.resendTimer);
    this.heartbeat = this.backoffTimer = this.resendTimer = undefined;
    this.wakeBackoff?.();
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
    this.ws = undefined;
    await Promise.all([...this.sockets].map((ws) => closeSocket(ws)));
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

  private callHook<E>(hook: (event: E) => void, event: E): void {
    try {
      hook(event);
    } catch (err) {
      rethrowLater(err);
    }
  }
}

/** A listener's exception must not break the client's bookkeeping; it surfaces as an uncaught error instead. */
function rethrowLater(err: unknown): void {
  queueMicrotask(() => {
    throw err;
  });
}

function isToolsetTool(tool: ToolsetInfo['tool']): tool is ToolsetTool {
  return TOOLSET_TYPES.includes(tool.type);
}

function isSessionGone(reply: Welcome | ErrorMessage, resumeId: string): boolean {
  if (reply.type === 'error') return reply.code === 'session_not_found';
  return reply.session_id !== resumeId;
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

function rawText(data: RawData): string {
  if (Array.isArray(data)) return Buffer.concat(data).toString();
  if (data instanceof ArrayBuffer) return Buffer.from(data).toString();
  return data.toString();
}

function closeSocket(ws: WebSocket): Promise<void> {
  if (ws.readyState === WebSocket.CLOSED) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => ws.terminate(), CLOSE_WAIT_MS);
    ws.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
    if (ws.readyState === WebSocket.OPEN) ws.close(1000, 'client closed');
    else ws.terminate();
  });
}
