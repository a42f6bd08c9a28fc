/**
 * One WebSocket connection: parses client messages, answers protocol errors
 * with `error` frames (the connection stays usable), hands batches to its
 * session, and forwards events and results. A frame over `maxPayload` is
 * closed by ws with 1009, as the protocol says. A client that lets more than
 * `limits.maxBufferedBytes` wait unread is closed with 4008: its session is
 * released (batches cancelled, results kept for resume) at once.
 */
import type { Duplex } from 'node:stream';
import type { RawData, WebSocket } from 'ws';
import type { DaemonConfig } from '../base/config.ts';
import type { Logger } from '../base/log.ts';
import {
  CLOSE_SEND_BUFFER_FULL,
  CLOSE_SESSION_RESUMED,
  ClientMessageSchema,
  type AgentToolEntry,
  type BatchMessage,
  type DesktopRequest,
  type ErrorCode,
  type HelloMessage,
  type HelpMessage,
  type ProfileRequest,
  type ServerMessage,
  type TakeoverMessage,
  type Welcome,
} from '../base/protocol.ts';
import { describeZodError } from '../base/zod-text.ts';
import { Session } from './session.ts';
import { TokenBucket } from './rate-limit.ts';

/** What a new session's hello asks of its desktop, and how the connection hears of its wait. */
export interface OpenRequest {
  desktop?: DesktopRequest;
  /** `hello.record`: the client asks for this session to be recorded. */
  record?: boolean;
  /** `hello.profile`: the browser profile the session starts with. */
  profile?: ProfileRequest;
  /** Aborts when the connection goes away: a queued session leaves the queue. */
  signal: AbortSignal;
  onQueue?: (position: number, waiting: number) => void;
}

/** Why no session was opened, as the error frame says it. */
export interface SessionRefusal {
  code: ErrorCode;
  message: string;
  retryAfterMs?: number;
}

export interface SessionRegistry {
  /** A new session with its desktop (this may wait for one), or why there is none. */
  openSession(request: OpenRequest): Promise<Session | SessionRefusal>;
  /** Ends a session whose connection went away before it was welcomed. */
  abandonSession(session: Session): void;
  findSession(id: string): Session | undefined;
  releaseSession(session: Session, owner: object): void;
  welcome(session: Session, resumed: boolean, options?: WelcomeOptions): Promise<Welcome>;
  /** A resent batch_id was answered from the stored result (for observers). */
  replayed(session: Session, batchId: string): void;
  /** False once shutdown began: no new sessions or batches. */
  accepting(): boolean;
  /** Records what the agent's own `tools[]` (hello.tools) offers its model, for the session's later batches. */
  offerTools(session: Session, entries: readonly AgentToolEntry[]): void;
  /** A person holds the session's desktop: how long a refusing client should wait before resending. */
  heldRetryMs(session: Session): number | undefined;
  /** The `takeover` `started` frame when a person holds the session's desktop now. */
  takeoverNow(session: Session): TakeoverMessage | undefined;
  /** The agent asks for a person: the acknowledging frame, or why not. */
  requestHelp(session: Session, reason: string): TakeoverMessage | SessionRefusal;
}

/** What a `hello` asked to find in its welcome. */
export interface WelcomeOptions {
  legacyTools?: boolean;
  /** `hello.all_limits`: the limits added within v1 too. */
  allLimits?: boolean;
  /** `hello.desktop` was given: the welcome says which desktop. */
  desktop?: boolean;
  /** `hello.record` was given: the welcome says whether the session is recorded. */
  recording?: boolean;
  /** `hello.takeover` was given: the welcome lists the capabilities. */
  takeover?: boolean;
  /** `hello.profile` was given: the welcome says which profile the browser started with. */
  profile?: boolean;
}

export interface ConnectionDeps {
  config: DaemonConfig;
  log: Logger;
  remote: string;
  sessions: SessionRegistry;
  /** The upgraded socket under `ws` (the HTTP request's): corked so that frames of one turn leave in one write. */
  socket?: Duplex;
}

/** How long close() waits for the peer's close frame before terminating. */
const CLOSE_WAIT_MS = 1_000;
/**
 * The same wait after a send-buffer overflow: the close frame queues behind the unread bytes, so a client that
 * was only slow gets time to drain them and read why. Memory stays bounded meanwhile: nothing more is queued.
 */
const OVERFLOW_CLOSE_WAIT_MS = 10_000;

export class Connection {
  private session: Session | undefined;
  private alive = true;
  /** Set when the socket closed or another connection took the session: queued messages then do nothing. */
  private done = false;
  /** Set once the send buffer went over its bound: nothing more is sent. */
  private overflowed = false;
  private log: Logger;
  private readonly messages: TokenBucket;
  /** Whether this connection wants `tool_event` frames (`hello.events`). */
  private events = true;
  /** What this connection's welcomes carry beyond the v1 fields (`hello.legacy_tools`). */
  private welcomeOptions: WelcomeOptions = {};
  /** `hello.takeover`: what this connection's batches do while a person holds the desktop; unset: no frames. */
  private whenHeld: 'wait' | 'refuse' | undefined;
  /** Messages are handled one at a time, so a hello is answered before a batch sent right after it. */
  private inbox: Promise<void> = Promise.resolve();
  /** Aborts when the socket closes: a hello queued for a desktop stops waiting. */
  private readonly gone = new AbortController();
  /** Whether `tool_event` frames wait in the corked socket for the end of this turn of the event loop. */
  private corked = false;

  constructor(
    private readonly ws: WebSocket,
    private readonly deps: ConnectionDeps,
  ) {
    this.log = deps.log.child({ remote: deps.remote });
    this.messages = new TokenBucket(deps.config.limits.messageBurst, deps.config.limits.messagesPerSecond);
    ws.on('pong', () => (this.alive = true));
    ws.on('message', (data, isBinary) => {
      if (!this.messages.take()) {
        // Dropped unread; the connection stays usable once the client slows down.
        this.error(
          'rate_limited',
          `at most ${deps.config.limits.messagesPerSecond} messages per second, after a burst`,
        );
        return;
      }
      this.inbox = this.inbox
        .then(() => this.onMessage(data, isBinary))
        .catch((err: unknown) => {
          this.log.error('message handler failed', { error: String(err) });
          this.send({ type: 'error', code: 'internal', message: 'internal error while handling the message' });
        });
    });
    ws.on('close', () => {
      this.done = true;
      this.gone.abort();
      if (this.session) this.deps.sessions.releaseSession(this.session, this);
      this.session = undefined;
    });
    ws.on('error', (err) => this.log.warn('socket error', { error: err.message }));
  }

  /** Called by the server's heartbeat: a peer that missed the previous ping is dropped. */
  heartbeat(): void {
    if (!this.alive) {
      this.log.info('peer missed its pong; terminating');
      this.ws.terminate();
      return;
    }
    this.alive = false;
    this.ws.ping();
  }

  close(code: number, reason: string, waitMs = CLOSE_WAIT_MS): Promise<void> {
    if (this.ws.readyState === this.ws.CLOSED) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.ws.terminate();
        resolve();
      }, waitMs);
      this.ws.once('close', () => {
        clearTimeout(timer);
        resolve();
      });
      this.ws.close(code, reason);
    });
  }

  /**
   * A `tool_event` frame waits in the corked socket until the end of this turn of the event loop, or until the
   * next frame of another type (the batch_result), and leaves in the same write: every write wakes the client,
   * which costs more than the frame (measured: ~0.1 ms a write here; docs/PERFORMANCE.md). Nothing waits for
   * another turn, so a `started` event still leaves before its call's answer is awaited.
   */
  private send(message: ServerMessage): void {
    if (this.ws.readyState !== this.ws.OPEN || this.overflowed) return;
    if (this.ws.bufferedAmount > this.deps.config.limits.maxBufferedBytes) return this.overflow();
    const socket = this.deps.socket;
    if (message.type === 'tool_event' && socket && !this.corked) {
      this.corked = true;
      socket.cork();
      setImmediate(this.uncork);
    }
    this.ws.send(JSON.stringify(message));
    if (message.type !== 'tool_event') this.uncork();
  }

  private readonly uncork = (): void => {
    if (!this.corked) return;
    this.corked = false;
    this.deps.socket?.uncork();
  };

  /**
   * The client does not read what it is sent: stop sending (the frame at hand is dropped; a batch_result stays
   * stored for replay), release the session as a disconnect would (its batches are cancelled, the session is kept
   * for the grace period), and close with CLOSE_SEND_BUFFER_FULL.
   */
  private overflow(): void {
    this.overflowed = true;
    this.done = true;
    this.log.warn('the client is not reading: its send buffer passed the bound; closing', {
      buffered_bytes: this.ws.bufferedAmount,
      max_buffered_bytes: this.deps.config.limits.maxBufferedBytes,
    });
    const session = this.session;
    this.session = undefined;
    if (session) this.deps.sessions.releaseSession(session, this);
    void this.close(CLOSE_SEND_BUFFER_FULL, 'send buffer full: the client is not reading', OVERFLOW_CLOSE_WAIT_MS);
  }

  private error(code: ErrorCode, message: string, batchId?: string, retryAfterMs?: number): void {
    this.send({
      type: 'error',
      code,
      message,
      ...(batchId ? { batch_id: batchId } : {}),
      ...(retryAfterMs !== undefined ? { retry_after_ms: retryAfterMs } : {}),
    });
  }

  private async onMessage(data: RawData, isBinary: boolean): Promise<void> {
    // A message queued behind a slow one may find the socket gone: it must not create or run anything.
    if (this.done) return;
    if (isBinary) return this.error('binary_frame', 'binary frames are not accepted; send JSON text frames');
    let json: unknown;
    try {
      json = JSON.parse(data.toString());
    } catch {
      return this.error('invalid_json', 'the frame is not valid JSON');
    }
    const parsed = ClientMessageSchema.safeParse(json);
    if (!parsed.success) {
      const batchId = (json as { batch_id?: unknown } | null)?.batch_id;
      return this.error(
        'invalid_message',
        describeZodError(parsed.error, json),
        typeof batchId === 'string' && batchId.length <= 128 ? batchId : undefined,
      );
    }
    const msg = parsed.data;
    switch (msg.type) {
      case 'ping':
        return this.send({ type: 'pong' });
      case 'hello':
        return this.onHello(msg);
      case 'batch':
        return this.onBatch(msg);
      case 'help':
        return this.onHelp(msg);
      case 'cancel':
        if (!this.session?.cancel(msg.batch_id)) {
          this.error('unknown_batch', `no batch ${msg.batch_id} in this session`, msg.batch_id);
        }
        return;
    }
  }

  private async onHello(msg: HelloMessage): Promise<void> {
    const greeted = await this.greet(msg);
    if (greeted && msg.tools && this.session && !this.done) this.deps.sessions.offerTools(this.session, msg.tools);
  }

  /** Answers a hello: with a welcome (true), or with an error (false). */
  private async greet(msg: HelloMessage): Promise<boolean> {
    if (msg.events !== undefined) this.events = msg.events;
    if (msg.legacy_tools !== undefined) this.welcomeOptions = { ...this.welcomeOptions, legacyTools: msg.legacy_tools };
    if (msg.all_limits !== undefined) this.welcomeOptions = { ...this.welcomeOptions, allLimits: msg.all_limits };
    if (msg.desktop !== undefined) this.welcomeOptions = { ...this.welcomeOptions, desktop: true };
    if (msg.record !== undefined) this.welcomeOptions = { ...this.welcomeOptions, recording: true };
    if (msg.profile !== undefined) this.welcomeOptions = { ...this.welcomeOptions, profile: true };
    if (msg.takeover !== undefined) {
      this.welcomeOptions = { ...this.welcomeOptions, takeover: true };
      this.whenHeld = msg.takeover.when_held ?? 'wait';
    }
    const refuse = (code: ErrorCode, message: string, retryAfterMs?: number): false => {
      this.error(code, message, undefined, retryAfterMs);
      return false;
    };
    let session = this.session;
    let resumed = false;
    if (session) {
      if (msg.resume_session_id && msg.resume_session_id !== session.id) {
        return refuse('invalid_message', 'hello with resume_session_id must be the first message');
      }
    } else if (msg.resume_session_id) {
      session = this.deps.sessions.findSession(msg.resume_session_id);
      if (!session) return refuse('session_not_found', 'no such session, or its grace period ended; start a new one');
      this.attach(session);
      this.log.info('session resumed', { client: msg.client });
      resumed = true;
    } else {
      if (!this.deps.sessions.accepting()) return refuse('shutting_down', 'the daemon is shutting down');
      const wantsDesktop = msg.desktop !== undefined;
      const opened = await this.deps.sessions.openSession({
        ...(msg.desktop ? { desktop: msg.desktop } : {}),
        ...(msg.record !== undefined ? { record: msg.record } : {}),
        ...(msg.profile ? { profile: msg.profile } : {}),
        signal: this.gone.signal,
        // Only a client that asked about desktops meets this frame (a v1 client that parses strictly never does).
        ...(wantsDesktop
          ? { onQueue: (position: number, waiting: number) => this.send({ type: 'desktop_wait', position, waiting }) }
          : {}),
      });
      if (!(opened instanceof Session)) return refuse(opened.code, opened.message, opened.retryAfterMs);
      if (this.done) {
        // The socket closed while the desktop was being found: nobody will use this session.
        this.deps.sessions.abandonSession(opened);
        return false;
      }
      session = opened;
      this.attach(session);
    }
    this.send(await this.deps.sessions.welcome(session, resumed, this.welcomeOptions));
    // A client that asked about takeovers learns at once that a person holds the desktop now.
    const held = this.whenHeld ? this.deps.sessions.takeoverNow(session) : undefined;
    if (held) this.send(held);
    return true;
  }

  private attach(session: Session): void {
    if (this.done) return;
    this.session = session;
    this.log = this.deps.log.child({ remote: this.deps.remote, session: session.id });
    session.attach(
      this,
      (event) => {
        if (this.events) this.send(event);
      },
      () => {
        // Another connection resumed this session; this one no longer owns it and takes no more work.
        this.done = true;
        this.session = undefined;
        void this.close(CLOSE_SESSION_RESUMED, 'session resumed by another connection');
      },
      // Only a client that asked about takeovers meets these frames (a v1 client that parses strictly never does).
      (message) => {
        if (this.whenHeld) this.send(message);
      },
    );
  }

  /** This connection's session; a client that sent no hello gets one implicitly. Undefined: an error was sent, or the socket is gone. */
  private async sessionOrNew(): Promise<Session | undefined> {
    if (!this.session) await this.onHello({ type: 'hello' });
    return this.done ? undefined : this.session;
  }

  /** The agent asks for a person (docs/PROTOCOL.md "Takeover"). */
  private async onHelp(msg: HelpMessage): Promise<void> {
    const session = await this.sessionOrNew();
    if (!session) return;
    const answer = this.deps.sessions.requestHelp(session, msg.reason);
    if ('code' in answer) return this.error(answer.code, answer.message);
    this.log.info('the agent asked for a person', { reason_chars: msg.reason.length });
    this.send(answer);
  }

  private async onBatch(msg: BatchMessage): Promise<void> {
    const { limits } = this.deps.config;
    const id = msg.batch_id;
    if (msg.tool_uses.length > limits.maxToolUsesPerBatch) {
      return this.error('batch_too_large', `a batch holds at most ${limits.maxToolUsesPerBatch} tool_uses`, id);
    }
    const ids = new Set(msg.tool_uses.map((tu) => tu.id));
    if (ids.size !== msg.tool_uses.length) {
      return this.error('duplicate_tool_use_id', 'every tool_use in a batch needs its own id', id);
    }
    if (!this.deps.sessions.accepting()) return this.error('shutting_down', 'the daemon is shutting down', id);
    const session = await this.sessionOrNew();
    if (!session) return; // an error was sent, or the socket is gone

    if (this.whenHeld === 'refuse' && !session.knows(id)) {
      const retryAfterMs = this.deps.sessions.heldRetryMs(session);
      if (retryAfterMs !== undefined) {
        // Not accepted: nothing of it runs, and resending the same batch later runs it.
        return this.error(
          'desktop_held',
          "a person controls this session's desktop; the batch was not accepted, send it again later",
          id,
          retryAfterMs,
        );
      }
    }
    const outcome = session.submit(id, msg.tool_uses);
    switch (outcome.kind) {
      case 'conflict':
        return this.error('batch_id_conflict', `batch_id ${id} was already used with different tool_uses`, id);
      case 'queue_full':
        return this.error('queue_full', `at most ${limits.maxQueuedBatches} batches may wait in a session`, id);
      case 'replayed':
        this.deps.sessions.replayed(session, id);
        void outcome.result.then((r) => this.send({ ...r, replayed: true }));
        return;
      case 'accepted':
        void outcome.result.then((r) => this.send(r));
        return;
    }
  }
}
