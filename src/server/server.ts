/**
 * The WebSocket server: handshake checks, one Connection per socket, the
 * heartbeat, limits, and an idempotent close. Tool work is delegated to the
 * Executor through Sessions; this file knows the protocol, not the tools.
 */
import { createServer, type IncomingMessage, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import type { DaemonConfig } from '../config.ts';
import type { Executor } from '../executor/executor.ts';
import type { Logger } from '../log.ts';
import { PROTOCOL_PATH, PROTOCOL_VERSION, type ToolsetInfo, type Welcome } from '../protocol.ts';
import { isAuthorized, isOriginAllowed } from './auth.ts';
import { Connection } from './connection.ts';
import { Session } from './session.ts';
import { KeyedBuckets } from './rate-limit.ts';
import { RepeatTracker } from '../executor/repeats.ts';
import type { Geometry } from '../geometry.ts';

export interface ServerDeps {
  config: DaemonConfig;
  executor: Executor;
  log: Logger;
  /** The display and screenshot sizes now, or undefined while the display is unreachable. */
  geometry: () => Promise<Geometry | undefined>;
}

type State = 'idle' | 'running' | 'closing' | 'closed';

export class DeskbatchServer {
  private readonly http: HttpServer;
  private readonly wss: WebSocketServer;
  private readonly sessions = new Map<string, Session>();
  private readonly connections = new Set<Connection>();
  private heartbeat: NodeJS.Timeout | undefined;
  private state: State = 'idle';
  private readonly handshakes: KeyedBuckets;
  private closing: Promise<void> | undefined;

  constructor(private readonly deps: ServerDeps) {
    const { config } = deps;
    this.handshakes = new KeyedBuckets(config.limits.handshakeBurst, config.limits.handshakesPerSecond);
    this.http = createServer((req, res) => {
      if (req.method === 'GET' && req.url === '/healthz') {
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
        return;
      }
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
    });
    this.wss = new WebSocketServer({
      noServer: true,
      maxPayload: config.limits.maxPayloadBytes,
      // Browser clients carry the token as a second subprotocol; we select only the version.
      handleProtocols: (protocols) => (protocols.has(PROTOCOL_VERSION) ? PROTOCOL_VERSION : false),
    });
    this.http.on('upgrade', (req, socket, head) => this.onUpgrade(req, socket, head));
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
  private reject(socket: Duplex, status: number, reason: string, headers: Record<string, string> = {}): void {
    const head = Object.entries({ connection: 'close', 'content-type': 'text/plain', ...headers })
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('');
    socket.end(`HTTP/1.1 ${status} ${reason}\r\n${head}\r\n${reason}\n`, () => socket.destroy());
  }

  accepting(): boolean {
    return this.state === 'running';
  }

  private onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const { config, log } = this.deps;
    socket.on('error', () => socket.destroy());
    const path = (req.url ?? '').split('?')[0];
    if (this.state !== 'running') return this.reject(socket, 503, 'Service Unavailable');
    if (path !== PROTOCOL_PATH) return this.reject(socket, 404, 'Not Found');
    // Before the token check, so guessing tokens is slowed down too.
    if (!this.handshakes.take(req.socket.remoteAddress ?? '')) {
      return this.reject(socket, 429, 'Too Many Requests', { 'retry-after': '1' });
    }
    if (!isOriginAllowed(req, config.allowOrigins)) {
      log.warn('refused handshake: origin not allowed', { origin: String(req.headers.origin).slice(0, 200) });
      return this.reject(socket, 403, 'Forbidden');
    }
    if (!isAuthorized(req, config.token)) {
      log.warn('refused handshake: missing or wrong token', { remote: req.socket.remoteAddress });
      return this.reject(socket, 401, 'Unauthorized', { 'www-authenticate': 'Bearer' });
    }
    if (this.connections.size >= config.limits.maxSessions) {
      return this.reject(socket, 503, 'Service Unavailable');
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => this.onConnection(ws, req));
  }

  private onConnection(ws: WebSocket, req: IncomingMessage): void {
    const connection = new Connection(ws, {
      ...this.deps,
      remote: req.socket.remoteAddress ?? '',
      sessions: this,
    });
    this.connections.add(connection);
    ws.once('close', () => this.connections.delete(connection));
  }

  // ---- session registry, used by connections

  createSession(): Session | undefined {
    const { config, executor, log } = this.deps;
    if (this.sessions.size >= config.limits.maxSessions) return undefined;
    const repeats = new RepeatTracker();
    const session: Session = new Session(
      { maxQueuedBatches: config.limits.maxQueuedBatches, resultCache: config.resultCache },
      (batchId, toolUses, signal) =>
        executor.run({
          sessionId: session.id,
          batchId,
          toolUses,
          signal,
          emit: (event) => session.emit?.(event),
          repeats,
        }),
    );
    this.sessions.set(session.id, session);
    log.info('session opened', { session: session.id });
    return session;
  }

  findSession(id: string): Session | undefined {
    return this.sessions.get(id);
  }

  /** The connection dropped: cancel its work, keep the session for the grace period. */
  releaseSession(session: Session, owner: object): void {
    session.detach(owner, this.deps.config.sessionGraceMs, () => {
      this.sessions.delete(session.id);
      session.close();
      void this.deps.executor.closeSession(session.id);
      this.deps.log.info('session expired', { session: session.id });
    });
  }

  async welcome(session: Session, resumed: boolean): Promise<Welcome> {
    const { config, executor } = this.deps;
    const geometry = await this.deps.geometry().catch(() => undefined);
    // A toolset with no member served is not offered: the API rejects an entry that disables every member.
    const offered = [...executor.served.values()].filter((t) => t.members.size > 0);
    const toolsets: ToolsetInfo[] = offered.map((t) => {
      // configs: switch off what the API enables by default but this daemon does not serve, and switch on
      // optional members the operator enabled (TOOLSET-CONTRACT B1, C1).
      const optional = t.optionalMemberNames ?? [];
      const configs: Record<string, { enabled: boolean }> = {};
      for (const name of t.allMemberNames) {
        const served = t.members.has(name);
        if (optional.includes(name) ? served : !served) configs[name] = { enabled: served };
      }
      return {
        type: t.type,
        toolset_name: t.name,
        members: [...t.members.keys()],
        not_executed_text: t.notExecutedText,
        cancelled_text: t.cancelledText,
        tool: {
          type: t.type,
          ...(Object.keys(configs).length ? { configs } : {}),
        },
      };
    });
    return {
      type: 'welcome',
      protocol: PROTOCOL_VERSION,
      session_id: session.id,
      resumed,
      toolsets,
      ...(geometry ? { display: geometry.display, screenshot: geometry.screenshot } : {}),
      limits: {
        max_tool_uses: config.limits.maxToolUsesPerBatch,
        max_payload_bytes: config.limits.maxPayloadBytes,
        max_queued_batches: config.limits.maxQueuedBatches,
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
    for (const s of this.sessions.values()) s.close();
    this.sessions.clear();
    for (const ws of this.wss.clients) ws.terminate();
    this.wss.close();
    // Only now: http.close() also closes "idle" connections, and Node counts upgraded WebSocket
    // sockets among them, which would cut them before their results were sent. New handshakes
    // were refused with 503 since the start of the shutdown.
    const httpClosed = new Promise<void>((resolve) => this.http.close(() => resolve()));
    this.http.closeAllConnections();
    await Promise.race([httpClosed, deadline]);
    this.state = 'closed';
  }
}
