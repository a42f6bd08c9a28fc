/**
 * The client's link to the daemon (DeskbatchClient, client.ts): the socket,
 * hello → welcome, heartbeats, and reconnects with backoff that resume the
 * session (`hello.resume_session_id`). It knows nothing of batches: each turn
 * of the connection's life (a socket adopted, dropped, a session lost, giving
 * up) and every message outside the hello exchange go to the client through
 * the LinkHooks it is built with, which send, fail or settle the batches.
 *
 * A session placed on a fleet's pod (connectFleet, fleet.ts) is pinned: a
 * LinkTarget names the address of every reconnect attempt (the pod's own DNS
 * name, resolved anew), and when that pod no longer holds the session (its
 * name is gone, its token no longer opens it, or it answers
 * `session_not_found`) the link gives up with `session_lost` instead of
 * starting a new session there: no other pod knows the session, and where a
 * new one goes is the placement's choice, not the reconnect's.
 */
import WebSocket, { type RawData } from 'ws';
import {
  CLOSE_SESSION_RESUMED,
  ServerMessageSchema,
  type AgentToolEntry,
  type DesktopWait,
  type ErrorMessage,
  type ServerMessage,
  type ToolEvent,
  type Welcome,
} from '../base/protocol.ts';
import { ConnectError, HandshakeRefusedError } from './errors.ts';

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
  /**
   * The named browser profile the session's browser starts with (`hello.profile`, docs/PROTOCOL.md "Profiles"):
   * `read_write` saves the browser's state back when the session ends (one such session per profile at a time:
   * `connect` fails with a ConnectError of code `profile_held` naming the holder); `read_only` never saves. A
   * profile that cannot be used fails `connect` with `profile_unavailable`. It also asks for `welcome.profile`.
   */
  profile?: { name: string; mode: 'read_write' | 'read_only' };
  /** Aborting it stops connecting, or closes the client once connected. */
  signal?: AbortSignal;
  /** Limit for the HTTP upgrade and, separately, for the answer to `hello`. Default 10,000 ms. */
  handshakeTimeoutMs?: number;
  /** WebSocket ping interval; a peer that misses one is dropped (and reconnected). Default 15,000 ms; 0 disables. */
  heartbeatMs?: number;
}

export type ClientState = 'connecting' | 'open' | 'reconnecting' | 'closed';

/** Where the reconnects of a pinned session go (fleet.ts): asked before every attempt. */
export interface LinkTarget {
  /** The URL of the next attempt, or why the daemon that holds the session is gone for good. */
  next(): Promise<{ url: string } | { gone: string }>;
}

/** Why reconnecting ended for good. */
export type GiveUpReason = 'connection_lost' | 'session_taken' | 'session_lost';

/** Events the link raises, among the client's own (DeskbatchClientEvents, client.ts). */
export interface LinkEvents {
  /** The socket dropped; the client is reconnecting unless it gave up (then `close` follows). */
  disconnect: [info: { code: number; reason: string }];
  /** Reconnected and resumed the same session; waiting batches were sent again. */
  reconnect: [welcome: Welcome];
  /** Reconnected, but the daemon had lost the session: a new one was started. */
  session_lost: [info: { previousSessionId: string; welcome: Welcome; rejectedBatchIds: string[] }];
}

/** A message for the client: all but the hello exchange's, which the link reads itself. */
export type RoutedMessage = Exclude<ServerMessage, { type: 'welcome' } | { type: 'desktop_wait' }>;

/** What the link asks of the client it serves (DeskbatchClient): the batches are the client's. */
export interface LinkHooks {
  /** A message outside the hello exchange, from whichever socket (a result is valid from any of them). */
  message(msg: RoutedMessage): void;
  /** A socket completed hello and is the connection now: every waiting batch is sent. */
  adopted(): void;
  /** The connection's socket closed: what only it could answer fails. */
  dropped(): void;
  /** A reconnect found the session gone: the batches sent in it are rejected; returns their ids. */
  sessionLost(): string[];
  /** Reconnecting is over: every waiting batch is rejected, and the client closes. */
  gaveUp(reason: GiveUpReason, why: string, cause?: unknown): void;
  notify<K extends keyof LinkEvents>(event: K, ...args: LinkEvents[K]): void;
}

/** One socket, before it is adopted: `hello` waits for the answer. */
interface OpenSocket {
  ws: WebSocket;
  url: string;
  hello(resumeSessionId?: string): Promise<Welcome | ErrorMessage>;
}

const DEFAULT_HANDSHAKE_TIMEOUT_MS = 10_000;
const DEFAULT_HEARTBEAT_MS = 15_000;
/** How long close() waits for the daemon's close frame. */
const CLOSE_WAIT_MS = 1_000;

/** The connection of one DeskbatchClient: at most one adopted socket at a time, and the sockets still closing. */
export class ClientLink {
  private currentState: ClientState = 'connecting';
  private ws: WebSocket | undefined;
  private lastWelcome: Welcome | undefined;
  /** Every socket this client made that has not closed yet. */
  private readonly sockets = new Set<WebSocket>();
  private readonly reconnectOptions: ReconnectOptions;
  private readonly handshakeTimeoutMs: number;
  private readonly heartbeatMs: number;
  private heartbeat: NodeJS.Timeout | undefined;
  private backoffTimer: NodeJS.Timeout | undefined;
  private wakeBackoff: (() => void) | undefined;

  /** The URL of the connection: the first one's, then each adopted reconnect's (a pinned target's may differ). */
  private currentUrl: string;

  constructor(
    url: string,
    private readonly options: ConnectOptions,
    private readonly hooks: LinkHooks,
    /** A pinned session's reconnects: where each attempt goes (see the file's comment). */
    private readonly target?: LinkTarget,
  ) {
    this.currentUrl = url;
    this.reconnectOptions =
      options.reconnect === false
        ? { ...DEFAULT_RECONNECT, maxAttempts: 0 }
        : { ...DEFAULT_RECONNECT, ...options.reconnect };
    this.handshakeTimeoutMs = options.handshakeTimeoutMs ?? DEFAULT_HANDSHAKE_TIMEOUT_MS;
    this.heartbeatMs = options.heartbeatMs ?? DEFAULT_HEARTBEAT_MS;
  }

  get state(): ClientState {
    return this.currentState;
  }

  /** The daemon's `ws://host:port/v1` this client is (or was last) connected to. */
  get url(): string {
    return this.currentUrl;
  }

  /** A getter, so checks after an `await` are not narrowed away by the compiler. */
  private get isClosed(): boolean {
    return this.currentState === 'closed';
  }

  /** The latest `welcome` (a new one after every reconnect); undefined before the first. */
  get welcome(): Welcome | undefined {
    return this.lastWelcome;
  }

  /** Sends a frame on the connection; false when there is none open. */
  send(frame: string): boolean {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN) return false;
    ws.send(frame);
    return true;
  }

  /** The first connection: resolves once `welcome` arrived; not retried. */
  async connect(): Promise<void> {
    const link = await this.openLink(this.currentUrl);
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
  }

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

  /** Opens a socket; resolves once it is open, with a `hello` that waits for the daemon's answer. */
  private openLink(url: string): Promise<OpenSocket> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, {
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
          if (this.options.onDesktopWait) callHook(this.options.onDesktopWait, msg);
          return;
        }
        if (msg.type === 'welcome') {
          if (msg.session_id === this.lastWelcome?.session_id) this.lastWelcome = msg;
          return;
        }
        this.hooks.message(msg);
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
            : new ConnectError(`could not connect to ${url}${lastError ? `: ${lastError}` : ''}`),
        );
      ws.once('close', failed);
      ws.once('open', () => {
        ws.off('close', failed);
        resolve({
          ws,
          url,
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
                // Only a new session's hello is read for it; a resume keeps the session's lease.
                ...(this.options.profile ? { profile: this.options.profile } : {}),
              };
              ws.send(JSON.stringify(hello));
            }),
        });
      });
    });
  }

  /** Makes a socket that completed hello the client's connection, and sends every waiting batch. */
  private adopt(link: OpenSocket, welcome: Welcome): void {
    this.ws = link.ws;
    this.currentUrl = link.url;
    this.lastWelcome = welcome;
    this.currentState = 'open';
    this.startHeartbeat(link.ws);
    this.hooks.adopted();
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
    this.hooks.dropped();
    if (this.isClosed) return;
    // Another connection resumed our session: taking it back would make two clients fight over it.
    const stay = code !== CLOSE_SESSION_RESUMED && this.reconnectOptions.maxAttempts > 0;
    if (stay) this.currentState = 'reconnecting';
    this.hooks.notify('disconnect', { code, reason });
    if (code === CLOSE_SESSION_RESUMED) {
      return this.hooks.gaveUp('session_taken', 'another connection took over the session');
    }
    if (!stay) return this.hooks.gaveUp('connection_lost', `the connection closed (${code}) and reconnecting is off`);
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
      let link: OpenSocket;
      try {
        const where = this.target ? await this.target.next() : { url: this.currentUrl };
        if (this.isClosed) return;
        if ('gone' in where) return this.hooks.gaveUp('session_lost', where.gone);
        link = await this.openLink(where.url);
      } catch (err) {
        lastError = err;
        if (this.isClosed) return;
        if (err instanceof HandshakeRefusedError && err.status === 401 && this.target) {
          // The token that opened the pod no longer does: the pod was replaced (a new uid, a new token).
          return this.hooks.gaveUp('session_lost', 'the pod that held the session no longer takes its token', err);
        }
        if (err instanceof HandshakeRefusedError && err.permanent) break;
        continue;
      }
      try {
        const resumeId = lostSessionId === undefined ? this.lastWelcome?.session_id : undefined;
        let reply = await link.hello(resumeId);
        if (resumeId !== undefined && isSessionGone(reply, resumeId) && this.target) {
          // A pinned session is not started anew here (see the file's comment).
          link.ws.terminate();
          return this.hooks.gaveUp('session_lost', `the daemon at ${link.url} no longer has the session`);
        }
        if (resumeId !== undefined && isSessionGone(reply, resumeId)) {
          lostSessionId = resumeId;
          // Sent in the lost session: their outcome is unknown, and they are never sent again.
          rejected = this.hooks.sessionLost();
          if (reply.type === 'error') reply = await link.hello();
        }
        if (reply.type === 'error') throw new ConnectError(`hello: ${reply.code}: ${reply.message}`, reply.code);
        if (this.isClosed) {
          link.ws.terminate();
          return;
        }
        this.adopt(link, reply);
        if (lostSessionId === undefined) this.hooks.notify('reconnect', reply);
        else
          this.hooks.notify('session_lost', {
            previousSessionId: lostSessionId,
            welcome: reply,
            rejectedBatchIds: rejected,
          });
        return;
      } catch (err) {
        lastError = err;
        link.ws.terminate();
        if (this.isClosed) return;
      }
    }
    if (this.isClosed) return;
    const why = lastError instanceof Error ? lastError.message : String(lastError);
    this.hooks.gaveUp('connection_lost', `could not reconnect to the daemon (${why})`, lastError);
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

  /** Stops for good (DeskbatchClient.close): no reconnect, no timer left; a backoff under way ends now. */
  stop(): void {
    this.currentState = 'closed';
    clearInterval(this.heartbeat);
    clearTimeout(this.backoffTimer);
    this.heartbeat = this.backoffTimer = undefined;
    this.wakeBackoff?.();
  }

  /** Closes every socket this client made, waiting for each to close (a short while at most). */
  async closeSockets(): Promise<void> {
    this.ws = undefined;
    await Promise.all([...this.sockets].map((ws) => closeSocket(ws)));
  }
}

/** Calls a hook of the options: its exception must not break the client's bookkeeping. */
export function callHook<E>(hook: (event: E) => void, event: E): void {
  try {
    hook(event);
  } catch (err) {
    rethrowLater(err);
  }
}

/** A listener's exception must not break the client's bookkeeping; it surfaces as an uncaught error instead. */
export function rethrowLater(err: unknown): void {
  queueMicrotask(() => {
    throw err;
  });
}

function isSessionGone(reply: Welcome | ErrorMessage, resumeId: string): boolean {
  if (reply.type === 'error') return reply.code === 'session_not_found';
  return reply.session_id !== resumeId;
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
