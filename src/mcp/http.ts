/**
 * Streamable HTTP MCP on the daemon's port, at /mcp (docs/MCP.md "Over HTTP"):
 * the POST, GET and DELETE requests the routes (index.ts) hand over, behind
 * the token (the server checks it: `auth: 'token'`, with the handshake rate
 * limit) and the Origin allowlist (checked here, as the server checks a
 * WebSocket handshake's: `isOriginAllowed`).
 *
 * An `initialize` without `Mcp-Session-Id` opens a deskbatch session first
 * (its own desktop in pool mode; the daemon's session limit applies, and a
 * refusal is an HTTP error naming why), then an MCP session with a transport of
 * its own, bound to it. Every later request names its MCP session. The
 * deskbatch session ends when its MCP session is deleted (DELETE), when the
 * daemon closes, or when no request of it has been open (its GET stream
 * included) for `mcp.idleMs`.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { ErrorCode, isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { isOriginAllowed } from '../server/auth.ts';
import { readBody, refuseUpload } from '../server/session-routes.ts';
import { openLocalSession, type SessionHost } from './local.ts';
import { McpSession, type McpSessionDeps } from './session.ts';

/** JSON-RPC's code for an error the server defines: a refused session, a forbidden Origin. */
const SERVER_ERROR = -32000;

export interface McpHttpSettings {
  /** Origins a browser page may call from (`--allow-origin`); a request without Origin passes. */
  allowOrigins: readonly string[];
  /** Largest POST body, in bytes (the WebSocket frame limit, `limits.maxPayloadBytes`). */
  maxBodyBytes: number;
  /** How long an MCP session may have no request open before it ends (`mcp.idleMs`). */
  idleMs: number;
}

interface Entry {
  mcp: McpSession;
  transport: StreamableHTTPServerTransport;
  /** Its MCP session id, once its `initialize` was answered. */
  id?: string;
  /** Requests of it open now (a POST's SSE answer, the GET stream). */
  open: number;
  idle?: NodeJS.Timeout;
  ended: boolean;
}

/** A JSON-RPC error as an HTTP answer. */
function rpcError(
  res: ServerResponse,
  status: number,
  code: number,
  message: string,
  id: unknown = null,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent) return void res.end();
  res
    .writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store', ...headers })
    .end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id }));
}

export class McpHttp {
  private readonly entries = new Map<string, Entry>();
  /** Entries whose session is being opened or initialised: ended too if the daemon closes meanwhile. */
  private readonly starting = new Set<Entry>();
  private closed = false;

  constructor(
    private readonly host: SessionHost,
    private readonly deps: McpSessionDeps,
    private readonly settings: McpHttpSettings,
  ) {}

  /** A request to /mcp, once the server checked its Host and token. */
  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { log } = this.deps;
    if (!isOriginAllowed(req, this.settings.allowOrigins)) {
      log.warn('refused MCP request: origin not allowed', { origin: String(req.headers.origin).slice(0, 200) });
      return rpcError(res, 403, SERVER_ERROR, "Forbidden: this Origin is not allowed (the daemon's --allow-origin)");
    }
    const sessionId = req.headers['mcp-session-id'];
    let body: unknown;
    if (req.method === 'POST') {
      const read = await this.readJson(req, res);
      if (!read) return;
      body = read.body;
    }
    if (typeof sessionId === 'string') {
      const entry = this.entries.get(sessionId);
      // 404 tells an MCP client its session is gone (ended, idle, or another daemon's): it may initialize anew.
      if (!entry) return rpcError(res, 404, SERVER_ERROR, 'Session not found: it ended; send initialize again');
      return this.serve(entry, req, res, body);
    }
    if (req.method !== 'POST' || !isInitializeRequest(body)) {
      return rpcError(
        res,
        400,
        SERVER_ERROR,
        'Bad Request: no Mcp-Session-Id header; an MCP session starts with an initialize request',
      );
    }
    return this.open(req, res, body, (body as { id?: unknown }).id);
  }

  /** The POST's body as JSON, or undefined once an error was answered. */
  private async readJson(req: IncomingMessage, res: ServerResponse): Promise<{ body: unknown } | undefined> {
    const max = this.settings.maxBodyBytes;
    const raw = await readBody(req, max).catch(() => undefined);
    if (raw === undefined) return undefined; // the client went away
    if (raw === 'too_large') {
      refuseUpload(req, res, () =>
        rpcError(res, 413, ErrorCode.InvalidRequest, `Payload Too Large: a request body holds at most ${max} bytes`),
      );
      return undefined;
    }
    try {
      return { body: JSON.parse(raw.toString('utf8')) as unknown };
    } catch {
      rpcError(res, 400, ErrorCode.ParseError, 'Parse error: the body is not JSON');
      return undefined;
    }
  }

  /** An `initialize`: a deskbatch session first (or the HTTP error saying why not), then the MCP session on it. */
  private async open(req: IncomingMessage, res: ServerResponse, body: unknown, requestId: unknown): Promise<void> {
    const { log } = this.deps;
    if (this.closed) return rpcError(res, 503, SERVER_ERROR, 'shutting_down: the daemon is shutting down', requestId);
    // The client going away while a desktop is found: the session is not opened, or ended at once.
    const gone = new AbortController();
    res.once('close', () => gone.abort());
    const local = await openLocalSession(this.host, gone.signal);
    if ('code' in local) {
      log.info('MCP session refused', { code: local.code, reason: local.message });
      const status = local.code === 'invalid_message' ? 400 : 503;
      const retry: Record<string, string> =
        local.retryAfterMs === undefined ? {} : { 'retry-after': String(Math.ceil(local.retryAfterMs / 1000)) };
      return rpcError(res, status, SERVER_ERROR, `${local.code}: ${local.message}`, requestId, retry);
    }
    const opened = new McpSession(local, this.deps);
    const entry: Entry = {
      mcp: opened,
      transport: new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => {
          entry.id = id;
          this.entries.set(id, entry);
          log.info('MCP session opened', { mcp_session: id, session: opened.id, transport: 'http' });
        },
        onsessionclosed: () => void this.end(entry, 'deleted'),
        maxRequestBodySize: this.settings.maxBodyBytes,
      }),
      open: 0,
      ended: false,
    };
    this.starting.add(entry);
    try {
      if (gone.signal.aborted || this.closed) return void (await this.end(entry, 'client gone'));
      // Whatever closes the transport or the server ends the session (McpSession.end): the entry goes with it.
      void opened.ended.then(() => this.end(entry, 'closed'));
      await opened.server.connect(entry.transport);
      await this.serve(entry, req, res, body);
      // An initialize the transport refused (a malformed one): no MCP session, so no deskbatch session either.
      if (entry.id === undefined) await this.end(entry, 'not initialized');
    } finally {
      this.starting.delete(entry);
    }
  }

  /** One request of an MCP session, counted open until its answer (an SSE stream too) is closed. */
  private async serve(entry: Entry, req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
    entry.open++;
    clearTimeout(entry.idle);
    res.once('close', () => {
      entry.open--;
      if (entry.open > 0 || entry.ended) return;
      entry.idle = setTimeout(() => void this.end(entry, 'idle'), this.settings.idleMs);
      entry.idle.unref();
    });
    await entry.transport.handleRequest(req, res, body);
  }

  /** Ends an MCP session and its deskbatch session. Idempotent. */
  private async end(entry: Entry, reason: string): Promise<void> {
    if (entry.ended) return;
    entry.ended = true;
    clearTimeout(entry.idle);
    if (entry.id !== undefined) this.entries.delete(entry.id);
    this.deps.log.info('MCP session ended', {
      ...(entry.id === undefined ? {} : { mcp_session: entry.id }),
      session: entry.mcp.id,
      reason,
    });
    await entry.mcp.end();
  }

  /** The daemon is closing: every MCP session ends (their open streams close). */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.entries.values(), ...this.starting].map((e) => this.end(e, 'shutdown')));
  }
}
