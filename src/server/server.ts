/**
 * The WebSocket server: handshake checks, one Connection per socket, the
 * heartbeat, limits, and an idempotent close. Tool work is delegated to the
 * Executor through Sessions; this file knows the protocol, not the tools.
 */
import {
  createServer,
  STATUS_CODES,
  type IncomingMessage,
  type Server as HttpServer,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import type { DaemonConfig } from '../base/config.ts';
import type { Executor } from '../executor/executor.ts';
import type { Logger } from '../base/log.ts';
import {
  PROTOCOL_PATH,
  PROTOCOL_VERSION,
  type AgentToolEntry,
  type LegacyComputerTools,
  type TakeoverMessage,
  type ToolsetInfo,
  type Welcome,
} from '../base/protocol.ts';
import { authorize, isAuthorized, isHostAllowed, isOriginAllowed, isSameOrigin, type Grant } from './auth.ts';
import type { LinkRegistry } from './links.ts';
import { Connection, type OpenRequest, type SessionRefusal, type WelcomeOptions } from './connection.ts';
import type { DesktopResources } from '../desktop-pool/desktop.ts';
import { NoDesktopError, type DesktopLease, type Desktops } from '../desktop-pool/pool.ts';
import { newSessionId, ResultBudget, Session } from './session.ts';
import { HandshakeLimiter } from './rate-limit.ts';
import { RepeatTracker } from '../executor/repeats.ts';
import type { Geometry, Size } from '../base/geometry.ts';
import { ActivityHub } from '../base/activity.ts';
import { logBatch } from './batch-log.ts';
import type { TakeoverPort } from './takeover-port.ts';
import type { FileStore } from './session-files.ts';
import type { ProfilePort, SessionProfile } from './profile-port.ts';

/**
 * A plain HTTP route on the daemon's port (health, metrics, the viewer page).
 * `auth: 'token'` routes need `Authorization: Bearer <token>`; the server checks it before `handle` runs.
 */
export interface HttpRoute {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  path: string;
  /** Also answers every path under `path/` (the handler reads the rest from `req.url`). */
  prefix?: boolean;
  /**
   * For a prefix route that shares its prefix with others (the session's documents and downloads under
   * /v1/sessions): the paths it answers. Prefix routes are tried in the order given; one without `accepts`
   * answers every path under its prefix, so it goes last.
   */
  accepts?: (path: string) => boolean;
  auth: 'none' | 'token';
  handle(req: IncomingMessage, res: ServerResponse): void | Promise<void>;
}

/**
 * A WebSocket endpoint other than the protocol's own (the viewer's feed, the takeover's VNC bridge, the
 * harness's CDP door). The server runs the same handshake checks as for /v1 first: rate limit, Origin,
 * token. The token comes in the Authorization header, or as `deskbatch.token.<token>` offered next to the
 * route's `subprotocol` (a browser page cannot set headers); a route without a subprotocol takes the header
 * only, and selects no subprotocol. With `sameOrigin`, a page served by this daemon may connect too: its
 * Origin must name the Host it was served from.
 */
export interface SocketRoute {
  path: string;
  /** Also answers paths under `path/`, those `accepts` takes (all when it is absent), as HttpRoute's. */
  prefix?: boolean;
  accepts?: (path: string) => boolean;
  /** The subprotocol the client must offer, and is selected; absent: none (header token only). */
  subprotocol?: string;
  sameOrigin?: boolean;
  /**
   * A scoped link (docs/SECURITY.md "Links") opens it too, not only the token: `check` and `handle` get the
   * link's grant, and the server closes the socket when the link ends (expiry, revoke, its session's end).
   */
  links?: boolean;
  /** Largest frame a client may send, in bytes (default 64 KiB); a larger one closes the socket with 1009. */
  maxPayload?: number;
  /**
   * Asked after the handshake checks, before the upgrade: a refusal is answered as HTTP (its status, a JSON
   * body `{error, message}`) and the socket closed, so the client reads why instead of a dropped handshake.
   * `path` is the request's path without its query.
   */
  check?: (
    req: IncomingMessage,
    path: string,
    grant: Grant,
  ) => SocketRefusal | undefined | Promise<SocketRefusal | undefined>;
  handle(ws: WebSocket, req: IncomingMessage, grant: Grant): void;
}

/** Why a SocketRoute's check refused a handshake: an HTTP status, a stable code and a one-line message. */
export interface SocketRefusal {
  status: number;
  error: string;
  message: string;
}

/** What the daemon holds now, for readiness and metrics. */
export interface ServerStatus {
  accepting: boolean;
  sessions: number;
  connections: number;
  /** Batches queued or running, over every session. */
  activeBatches: number;
}

export interface ServerDeps {
  config: DaemonConfig;
  executor: Executor;
  /** Where each new session gets its desktop (src/desktop-pool/pool.ts). */
  desktops: Desktops;
  log: Logger;
  /** A desktop's display and screenshot sizes now, or undefined while its display is unreachable. */
  geometry: (desktop: DesktopResources) => Promise<Geometry | undefined>;
  /** The served tools as `welcome` describes them (toolsets/describe.ts; the daemon wires it). */
  describeToolsets: (options: { legacyTools?: boolean; screenshot?: Size }) => {
    toolsets: ToolsetInfo[];
    legacy_tools?: LegacyComputerTools;
  };
  /** Where the server publishes what happens (sessions, batches, calls). */
  activity?: ActivityHub;
  /** A recorded session's call typed into a password field (the recorder redacts it: docs/RECORDING.md). */
  secretInput?: (sessionId: string, toolUseId: string) => void;
  /** A session is ending: awaited before its desktop is given back (the recorder finishes its video there). */
  sessionEnding?: (sessionId: string) => Promise<void>;
  routes?: readonly HttpRoute[];
  sockets?: readonly SocketRoute[];
  /** Human takeover, when the operator allows it (`--allow-takeover`; src/takeover/). */
  takeover?: TakeoverPort;
  /** Where each session's staged files live (session-files.ts); they go when the session ends. */
  files: FileStore;
  /** Named browser profiles, when the operator keeps them (`--profile-key`; src/profiles/). */
  profiles?: ProfilePort;
  /** Scoped links to one session's viewer (links.ts); without it, only the token opens anything. */
  links?: LinkRegistry;
}

type State = 'idle' | 'running' | 'closing' | 'closed';

export class DeskbatchServer {
  private readonly http: HttpServer;
  private readonly wss: WebSocketServer;
  private readonly sessions = new Map<string, Session>();
  /** Sessions being opened: waiting for their desktop. */
  private opening = 0;
  private readonly connections = new Set<Connection>();
  private heartbeat: NodeJS.Timeout | undefined;
  private state: State = 'idle';
  private readonly handshakes: HandshakeLimiter;
  /** Stored results of every session: the byte budget they share (`resultCache.maxTotalBytes`). */
  readonly storedResults: ResultBudget;
  private closing: Promise<void> | undefined;
  readonly activity: ActivityHub;
  private readonly routes: ReadonlyMap<string, HttpRoute>;
  private readonly prefixRoutes: readonly HttpRoute[];
  private readonly sockets: readonly { route: SocketRoute; wss: WebSocketServer }[];

  constructor(private readonly deps: ServerDeps) {
    const { config } = deps;
    this.activity = deps.activity ?? new ActivityHub();
    this.handshakes = new HandshakeLimiter(config.limits);
    this.storedResults = new ResultBudget(config.resultCache.maxTotalBytes);
    const healthz: HttpRoute = {
      method: 'GET',
      path: '/healthz',
      auth: 'none',
      handle: (_req, res) => void res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}'),
    };
    const routes = [healthz, ...(deps.routes ?? [])];
    this.routes = new Map(routes.filter((r) => !r.prefix).map((r) => [`${r.method} ${r.path}`, r]));
    this.prefixRoutes = routes.filter((r) => r.prefix);
    this.http = createServer((req, res) => void this.onRequest(req, res));
    this.wss = new WebSocketServer({
      noServer: true,
      maxPayload: config.limits.maxPayloadBytes,
      // Browser clients carry the token as a second subprotocol; we select only the version.
      handleProtocols: (protocols) => (protocols.has(PROTOCOL_VERSION) ? PROTOCOL_VERSION : false),
    });
    this.sockets = (deps.sockets ?? []).map((route) => ({
      route,
      wss: new WebSocketServer({
        noServer: true,
        maxPayload: route.maxPayload ?? 64 * 1024,
        // No subprotocol: none is selected, whatever the client offers.
        handleProtocols: (protocols) =>
          route.subprotocol !== undefined && protocols.has(route.subprotocol) ? route.subprotocol : false,
      }),
    }));
    this.http.on('upgrade', (req, socket, head) => this.onUpgrade(req, socket, head));
  }

  private async onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // DNS rebinding: a page on a name its attacker controls, rebound to this machine, sends that name as Host.
    if (!isHostAllowed(req, this.deps.config.allowHostHeaders)) {
      res
        .writeHead(421, { 'content-type': 'text/plain' })
        .end('misdirected request: this daemon does not answer to that Host (see --allow-host-header)\n');
      return;
    }
    const path = (req.url ?? '').split('?')[0] ?? '';
    // HEAD is answered as GET; Node leaves the body out.
    const method = req.method === 'HEAD' ? 'GET' : req.method;
    const route =
      this.routes.get(`${method} ${path}`) ??
      this.prefixRoutes.find(
        (r) => r.method === method && path.startsWith(`${r.path}/`) && (r.accepts?.(path) ?? true),
      );
    if (!route) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    if (route.auth === 'token') {
      // The handshake budget, before the token check: a scraper's requests count like handshakes, so
      // /metrics is no faster a way to guess the token than /v1.
      if (!this.handshakes.take(req.socket.remoteAddress ?? '')) {
        res.writeHead(429, { 'content-type': 'text/plain', 'retry-after': '1' }).end('too many requests\n');
        return;
      }
      if (!isAuthorized(req, this.deps.config.token)) {
        res.writeHead(401, { 'content-type': 'text/plain', 'www-authenticate': 'Bearer' }).end('unauthorized\n');
        return;
      }
    }
    try {
      await route.handle(req, res);
    } catch (err) {
      this.deps.log.error('http route failed', { path, error: String(err) });
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end('internal error\n');
    }
  }

  /** Sessions, connections and batches held now. */
  status(): ServerStatus {
    let activeBatches = 0;
    for (const s of this.sessions.values()) activeBatches += s.active;
    return {
      accepting: this.accepting(),
      sessions: this.sessions.size,
      connections: this.connections.size,
      activeBatches,
    };
  }

  async listen(): Promise<AddressInfo> {
    if (this.state !== 'idle') throw new Error('listen() may be called once');
    this.state = 'running';
    await new Promise<void>((resolve, reject) => {
      this.http.once('error', reject);
      this.http.listen(this.deps.config.port, this.deps.config.host, () => {
        this.http.off('error', reject);
        resolve();
      });
    });
    this.heartbeat = setInterval(() => {
      for (const c of this.connections) c.heartbeat();
    }, this.deps.config.heartbeatMs);
    this.heartbeat.unref();
    return this.http.address() as AddressInfo;
  }

  get sessionCount(): number {
    return this.sessions.size;
  }

  /** Answers a refused handshake and destroys the socket: a refused peer may not hold it open. */
  private reject(
    socket: Duplex,
    status: number,
    reason: string,
    { body, ...headers }: Record<string, string> & { body?: string } = {},
  ): void {
    const text = body ?? `${reason}\n`;
    const head = Object.entries({
      connection: 'close',
      'content-type': 'text/plain',
      'content-length': String(Buffer.byteLength(text)),
      ...headers,
    })
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('');
    socket.end(`HTTP/1.1 ${status} ${reason}\r\n${head}\r\n${text}`, () => socket.destroy());
  }

  offerTools(session: Session, entries: readonly AgentToolEntry[]): void {
    session.offer = this.deps.executor.agentOffer(entries);
    if (this.activity.observed) {
      this.activity.publish({ type: 'tools_offered', session: session.id, tools: entries, at: Date.now() });
    }
  }

  accepting(): boolean {
    return this.state === 'running';
  }

  private onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const { config, log } = this.deps;
    socket.on('error', () => socket.destroy());
    const path = (req.url ?? '').split('?')[0] ?? '';
    if (this.state !== 'running') return this.reject(socket, 503, 'Service Unavailable');
    const extra =
      path === PROTOCOL_PATH
        ? undefined
        : (this.sockets.find((s) => !s.route.prefix && s.route.path === path) ??
          this.sockets.find(
            (s) => s.route.prefix && path.startsWith(`${s.route.path}/`) && (s.route.accepts?.(path) ?? true),
          ));
    if (path !== PROTOCOL_PATH && !extra) return this.reject(socket, 404, 'Not Found');
    // Before the token check, so guessing tokens is slowed down too.
    if (!this.handshakes.take(req.socket.remoteAddress ?? '')) {
      return this.reject(socket, 429, 'Too Many Requests', { 'retry-after': '1' });
    }
    // No Host check here: a handshake needs the token, which a rebound page does not have, and clients may
    // connect through any name (a cluster's per-pod DNS names, an ingress) without configuring it.
    const sameOrigin = extra?.route.sameOrigin === true && isSameOrigin(req, config.allowHostHeaders);
    if (!sameOrigin && !isOriginAllowed(req, config.allowOrigins)) {
      log.warn('refused handshake: origin not allowed', { origin: String(req.headers.origin).slice(0, 200) });
      return this.reject(socket, 403, 'Forbidden');
    }
    // A route without a subprotocol takes the token from the header only (`null`: no subprotocol form).
    const grant = authorize(
      req,
      config.token,
      this.deps.links,
      extra ? (extra.route.subprotocol ?? null) : PROTOCOL_VERSION,
    );
    // A link opens only the sockets that say so (the viewer's), never /v1 or the harness's doors.
    if (!grant || (grant.kind === 'link' && extra?.route.links !== true)) {
      log.warn('refused handshake: missing or wrong token', {
        remote: req.socket.remoteAddress,
        ...(grant?.kind === 'link' ? { link: grant.link.id } : {}),
      });
      return this.reject(socket, 401, 'Unauthorized', { 'www-authenticate': 'Bearer' });
    }
    if (extra) return void this.upgradeRoute(extra, req, socket, head, path, grant);
    if (this.connections.size >= config.limits.maxSessions) {
      return this.reject(socket, 503, 'Service Unavailable');
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => this.onConnection(ws, req));
  }

  /** A SocketRoute's handshake, once the server's checks passed: its own check, then the upgrade. */
  private async upgradeRoute(
    extra: { route: SocketRoute; wss: WebSocketServer },
    req: IncomingMessage,
    socket: Duplex,
    head: Buffer,
    path: string,
    grant: Grant,
  ): Promise<void> {
    const { route, wss } = extra;
    let refusal: SocketRefusal | undefined;
    try {
      refusal = await route.check?.(req, path, grant);
    } catch (err) {
      this.deps.log.error('socket route check failed', { path, error: String(err) });
      refusal = { status: 500, error: 'internal_error', message: 'internal error' };
    }
    if (refusal) {
      const body = JSON.stringify({ error: refusal.error, message: refusal.message });
      return this.reject(socket, refusal.status, STATUS_CODES[refusal.status] ?? 'Refused', {
        body,
        'content-type': 'application/json',
      });
    }
    // The client may have gone while the check ran: ws then destroys the socket and never calls back.
    if (this.state !== 'running') return this.reject(socket, 503, 'Service Unavailable');
    wss.handleUpgrade(req, socket, head, (ws) => {
      // A link's sockets end with it; one that ended while the check ran is closed at once.
      if (grant.kind === 'link') this.deps.links?.hold(grant.link, ws);
      route.handle(ws, req, grant);
    });
  }

  private onConnection(ws: WebSocket, req: IncomingMessage): void {
    const connection = new Connection(ws, {
      ...this.deps,
      remote: req.socket.remoteAddress ?? '',
      sessions: this,
      socket: req.socket,
    });
    this.connections.add(connection);
    ws.once('close', () => this.connections.delete(connection));
  }

  // ---- session registry, used by connections

  /**
   * A new session, once it has its desktop: at once from a warm pool or the shared display, else after a
   * desktop starts or frees up (in FIFO order), unless the client asked to be refused when none is free.
   */
  async openSession(request: OpenRequest): Promise<Session | SessionRefusal> {
    const { config, log } = this.deps;
    if (this.sessions.size + this.opening >= config.limits.maxSessions) {
      return { code: 'too_many_sessions', message: 'the daemon holds its maximum number of sessions' };
    }
    const size = request.desktop?.display;
    const pooled = this.deps.desktops.mode === 'pool';
    if (size && pooled && !config.desktops.sizes.some((s) => s.width === size.width && s.height === size.height)) {
      const allowed = config.desktops.sizes.map((s) => `${s.width}x${s.height}`).join(', ');
      return { code: 'invalid_message', message: `hello.desktop.display must be one of: ${allowed}` };
    }
    const id = newSessionId();
    // The profile first: a refused one starts no desktop, and a held one is known at once, not after a wait.
    let profile: SessionProfile | undefined;
    if (request.profile) {
      const leased = await this.leaseProfile(id, request.profile);
      if (!('welcome' in leased)) return leased;
      profile = leased;
    }
    const opened = await this.openDesktop(id, request, size, pooled);
    if (!('desktop' in opened)) {
      profile?.release();
      return opened;
    }
    const lease = opened;
    if (profile) {
      try {
        const t0 = performance.now();
        await profile.load(lease.desktop);
        log.info('profile loaded', {
          session: id,
          profile: profile.welcome.name,
          mode: profile.welcome.mode,
          bytes: profile.welcome.bytes,
          ms: Math.round(performance.now() - t0),
        });
      } catch (err) {
        profile.release();
        // The session's browser context may hold part of it: it goes with the session's context, never used.
        await this.deps.executor.closeSession(id, lease.desktop).catch(() => undefined);
        lease.release();
        log.warn('profile not loaded', { session: id, profile: profile.welcome.name, error: String(err) });
        return {
          code: 'profile_unavailable',
          message: `the profile ${profile.welcome.name} could not be loaded into the browser: ${err instanceof Error ? err.message : String(err)}`,
        };
      }
    }
    const mode = config.recording.mode;
    return this.createSession(id, lease, mode === 'all' || (mode === 'on_request' && request.record === true), profile);
  }

  /** A lease on the profile a hello names, or why not. */
  private async leaseProfile(
    id: string,
    request: NonNullable<OpenRequest['profile']>,
  ): Promise<SessionProfile | SessionRefusal> {
    if (!this.deps.profiles) {
      return {
        code: 'profile_unavailable',
        message: 'this daemon keeps no browser profiles (the operator did not start it with --profile-key)',
      };
    }
    return this.deps.profiles.lease(id, request);
  }

  /** The new session's desktop, checked against what its hello asked, or why there is none. */
  private async openDesktop(
    id: string,
    request: OpenRequest,
    size: Size | undefined,
    pooled: boolean,
  ): Promise<DesktopLease | SessionRefusal> {
    const { log } = this.deps;
    let lease: DesktopLease;
    this.opening++;
    try {
      lease = await this.deps.desktops.lease({
        sessionId: id,
        ...(size ? { size } : {}),
        whenBusy: request.desktop?.when_busy ?? 'wait',
        signal: request.signal,
        ...(request.onQueue ? { onQueue: request.onQueue } : {}),
      });
    } catch (err) {
      if (!(err instanceof NoDesktopError)) throw err;
      if (!this.accepting()) return { code: 'shutting_down', message: 'the daemon is shutting down' };
      log.info('no desktop for a new session', { reason: err.message, retry_after_ms: err.retryAfterMs });
      // A client that did not ask for desktops knows only the v1 codes.
      return request.desktop
        ? { code: 'no_desktop', message: `no desktop is free: ${err.message}`, retryAfterMs: err.retryAfterMs }
        : { code: 'too_many_sessions', message: `no desktop is free: ${err.message}; try again later` };
    } finally {
      this.opening--;
    }
    if (!this.accepting()) {
      lease.release();
      return { code: 'shutting_down', message: 'the daemon is shutting down' };
    }
    if (size && !pooled) {
      const g = await this.deps.geometry(lease.desktop).catch(() => undefined);
      if (!g || g.display.width !== size.width || g.display.height !== size.height) {
        lease.release();
        const now = g ? `${g.display.width}x${g.display.height}` : 'not known now';
        return {
          code: 'invalid_message',
          message: `this daemon's one display is shared by every session and cannot change size (it is ${now})`,
        };
      }
    }
    return lease;
  }

  private createSession(id: string, lease: DesktopLease, record: boolean, profile?: SessionProfile): Session {
    const { config, executor, log } = this.deps;
    const repeats = new RepeatTracker();
    const activity = this.activity;
    const files = this.deps.files.forSession();
    const session: Session = new Session(
      {
        maxQueuedBatches: config.limits.maxQueuedBatches,
        resultCache: config.resultCache,
        sharedCache: this.storedResults,
      },
      async (batchId, toolUses, signal) => {
        if (activity.observed) {
          activity.publish({
            type: 'batch_started',
            session: id,
            batch_id: batchId,
            tool_uses: toolUses,
            at: Date.now(),
          });
        }
        let notExecuted = 0;
        const result = await executor.run({
          sessionId: id,
          batchId,
          toolUses,
          signal,
          emit: (event) => {
            if (event.phase === 'not_executed') notExecuted++;
            if (activity.observed) activity.publish({ type: 'tool_event', session: id, event, at: Date.now() });
            session.emit?.(event);
          },
          repeats,
          maxBatchMs: config.limits.maxBatchMs,
          ...(session.offer ? { offer: session.offer } : {}),
          desktop: lease.desktop,
          documents: files,
          ...(record && config.recording.redact.passwords && this.deps.secretInput
            ? { secretInput: (toolUseId: string) => this.deps.secretInput!(id, toolUseId) }
            : {}),
        });
        // Written once the result is on its way (at the end of this turn of the event loop): the line is a
        // synchronous write to stderr, ~0.1 ms here (docs/PERFORMANCE.md), which the agent need not wait for.
        setImmediate(() => logBatch(log.child({ session: id }), result, toolUses, notExecuted));
        if (activity.observed) activity.publish({ type: 'batch_finished', session: id, result, at: Date.now() });
        return result;
      },
      id,
    );
    session.desktop = lease;
    session.files = files;
    session.recorded = record;
    session.profile = profile;
    this.sessions.set(session.id, session);
    const used = profile && { name: profile.welcome.name, mode: profile.welcome.mode, bytes: profile.welcome.bytes };
    log.info('session opened', {
      session: session.id,
      desktop: lease.desktop.id,
      ...(record ? { recorded: true } : {}),
      ...(used ? { profile: used.name, profile_mode: used.mode } : {}),
    });
    this.activity.publish({
      type: 'session_opened',
      session: session.id,
      desktop: lease.desktop.id,
      record,
      ...(used ? { profile: used } : {}),
      at: Date.now(),
    });
    return session;
  }

  /** A session is gone: what its toolsets held on its desktop is released, then the desktop goes back. */
  private async endSession(session: Session): Promise<void> {
    session.close();
    // Its staged files first: nobody may use them once the session is gone, and they go with it, not its desktop.
    // A folder that cannot be removed must not keep the desktop from going back (the daemon's close sweeps it).
    await session.files
      ?.remove()
      .catch((err: unknown) =>
        this.deps.log.warn('session files not removed', { session: session.id, error: String(err) }),
      );
    const lease = session.desktop;
    if (!lease) return;
    session.desktop = undefined;
    if (session.recorded) await this.deps.sessionEnding?.(session.id).catch(() => undefined);
    // Saved from the session's browser before its context closes with the session.
    await session.profile?.end();
    await this.deps.executor.closeSession(session.id, lease.desktop);
    lease.release();
  }

  /** A session whose connection went away before its welcome: ended at once. */
  abandonSession(session: Session): void {
    this.sessions.delete(session.id);
    void this.endSession(session).finally(() => this.closed(session, 'expired'));
  }

  /**
   * Ends a session now because the client that holds it says so (an MCP session deleted, closed or idle:
   * src/mcp/): its queued and running batches are cancelled and answered, then what its toolsets held is
   * released and its desktop goes back. A no-op for a session no longer here (expired, or shut down).
   */
  async endSessionNow(session: Session): Promise<void> {
    if (this.sessions.get(session.id) !== session) return;
    this.sessions.delete(session.id);
    session.cancelAll();
    await session.settled();
    await this.endSession(session);
    this.closed(session, 'ended');
  }

  /**
   * Published once the session's toolsets released what they held (endSession): by then its browser context
   * has closed and saved its trace, which the recorder lists.
   */
  private closed(session: Session, reason: 'expired' | 'ended' | 'shutdown'): void {
    this.activity.publish({ type: 'session_closed', session: session.id, at: Date.now(), reason });
  }

  findSession(id: string): Session | undefined {
    return this.sessions.get(id);
  }

  /** Sends a `takeover` frame to a session's connection, if one is attached and asked for them. */
  notifySession(id: string, message: TakeoverMessage): void {
    this.sessions.get(id)?.notify?.(message);
  }

  /** A person holds the session's desktop: how long a refusing client should wait before resending. */
  heldRetryMs(session: Session): number | undefined {
    const desktop = session.desktop?.desktop;
    return desktop ? this.deps.takeover?.heldRetryMs(desktop) : undefined;
  }

  /** The `started` frame when a person holds the session's desktop now. */
  takeoverNow(session: Session): TakeoverMessage | undefined {
    const desktop = session.desktop?.desktop;
    return desktop ? this.deps.takeover?.current(desktop) : undefined;
  }

  requestHelp(session: Session, reason: string): TakeoverMessage | SessionRefusal {
    const desktop = session.desktop?.desktop;
    if (!this.deps.takeover || !desktop) {
      return {
        code: 'help_unavailable',
        message: 'this daemon does not let a person take over (the operator did not start it with --allow-takeover)',
      };
    }
    return this.deps.takeover.requestHelp(session.id, desktop, reason);
  }

  replayed(session: Session, batchId: string): void {
    this.activity.publish({ type: 'batch_replayed', session: session.id, batch_id: batchId, at: Date.now() });
  }

  /** The connection dropped: cancel its work, keep the session for the grace period. */
  releaseSession(session: Session, owner: object): void {
    session.detach(owner, this.deps.config.sessionGraceMs, () => {
      this.sessions.delete(session.id);
      this.deps.log.info('session expired', { session: session.id });
      void this.endSession(session).finally(() => this.closed(session, 'expired'));
    });
  }

  async welcome(session: Session, resumed: boolean, options: WelcomeOptions = {}): Promise<Welcome> {
    const { config } = this.deps;
    const desktop = session.desktop?.desktop;
    const geometry = desktop ? await this.deps.geometry(desktop).catch(() => undefined) : undefined;
    const described = this.deps.describeToolsets({
      legacyTools: options.legacyTools,
      ...(geometry ? { screenshot: geometry.screenshot } : {}),
    });
    return {
      type: 'welcome',
      protocol: PROTOCOL_VERSION,
      session_id: session.id,
      resumed,
      toolsets: described.toolsets,
      ...(geometry ? { display: geometry.display, screenshot: geometry.screenshot } : {}),
      ...(described.legacy_tools ? { legacy_tools: described.legacy_tools } : {}),
      ...(options.recording ? { recording: session.recorded } : {}),
      ...(options.takeover ? { capabilities: this.deps.takeover ? ['help'] : [] } : {}),
      ...(options.profile && session.profile ? { profile: session.profile.welcome } : {}),
      ...(options.desktop && desktop
        ? {
            desktop: {
              mode: this.deps.desktops.mode,
              id: desktop.id,
              ...(geometry ? { display: geometry.display } : {}),
            },
          }
        : {}),
      limits: {
        max_tool_uses: config.limits.maxToolUsesPerBatch,
        max_payload_bytes: config.limits.maxPayloadBytes,
        max_queued_batches: config.limits.maxQueuedBatches,
        ...(options.allLimits
          ? {
              max_batch_ms: config.limits.maxBatchMs,
              max_buffered_bytes: config.limits.maxBufferedBytes,
              result_cache_bytes: config.resultCache.maxBytes,
              result_cache_total_bytes: config.resultCache.maxTotalBytes,
              resume_window_ms: config.sessionGraceMs,
            }
          : {}),
      },
    };
  }

  /**
   * Graceful shutdown: refuse new connections, cancel running batches (their
   * results are still sent), wait for them up to the deadline, close sockets.
   * Idempotent.
   */
  close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  private async doClose(): Promise<void> {
    this.state = 'closing';
    clearInterval(this.heartbeat);
    const deadline = new Promise<void>((r) => setTimeout(r, this.deps.config.shutdownDeadlineMs).unref());
    for (const s of this.sessions.values()) s.cancelAll();
    await Promise.race([Promise.all([...this.sessions.values()].map((s) => s.settled())), deadline]);
    // Results of the cancelled batches are sent; then each socket gets a close frame.
    await Promise.race([
      Promise.all([...this.connections].map((c) => c.close(1001, 'server shutting down'))),
      deadline,
    ]);
    for (const s of this.sessions.values()) {
      await this.endSession(s);
      this.closed(s, 'shutdown');
    }
    this.sessions.clear();
    for (const wss of [this.wss, ...this.sockets.map((x) => x.wss)]) {
      for (const ws of wss.clients) ws.terminate();
      wss.close();
    }
    // Only now: http.close() also closes "idle" connections, and Node counts upgraded WebSocket
    // sockets among them, which would cut them before their results were sent. New handshakes
    // were refused with 503 since the start of the shutdown.
    const httpClosed = new Promise<void>((resolve) => this.http.close(() => resolve()));
    this.http.closeAllConnections();
    await Promise.race([httpClosed, deadline]);
    this.state = 'closed';
  }
}
