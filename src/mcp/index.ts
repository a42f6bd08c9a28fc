/**
 * The MCP server (docs/MCP.md): MCP tools for the served toolsets' members
 * and `run_batch`, each MCP session bound to a deskbatch session of its own,
 * over Streamable HTTP at /mcp on the daemon's port and, for `deskbatch mcp`,
 * over stdio, to this daemon's session or (`--connect`) to another daemon's.
 * The daemon builds it (`createMcp`) and hands the server its routes; it knows
 * the server as a `SessionHost` and the toolsets by the toolset API's
 * interface.
 */
import type { DaemonConfig } from '../base/config.ts';
import type { Logger } from '../base/log.ts';
import type { HttpRoute } from '../server/server.ts';
import type { Toolset } from '../toolset-api/types.ts';
import { McpHttp } from './http.ts';
import { openLocalSession, type SessionHost } from './local.ts';
import { RemoteSession } from './remote.ts';
import type { McpSession } from './session.ts';
import { serveStdio } from './stdio.ts';
import { offeredTables, servedTables, ToolTable, type ToolsetTable } from './tools.ts';

export { MCP_PATH } from './http.ts';
export type { SessionHost } from './local.ts';
export type { ToolsetTable } from './tools.ts';

export interface McpDeps {
  host: SessionHost;
  /** The toolsets the executor serves (`Executor.served`), by toolset_name. */
  served: ReadonlyMap<string, Toolset>;
  config: Pick<DaemonConfig, 'allowOrigins' | 'limits' | 'mcp'>;
  log: Logger;
}

export interface Mcp {
  /** /mcp's routes, for the server. */
  routes: readonly HttpRoute[];
  /** MCP sessions open over HTTP now. */
  readonly httpSessions: number;
  /** Opens a session and serves it over this process's stdin and stdout (`deskbatch mcp`). */
  serveStdio(): Promise<McpSession>;
  /** Ends every MCP session (the daemon closes). */
  close(): Promise<void>;
}

export function createMcp(deps: McpDeps): Mcp {
  const { config, log } = deps;
  const session = { tools: new ToolTable(servedTables(deps.served), config.limits.maxToolUsesPerBatch), log };
  const http = new McpHttp(deps.host, session, {
    allowOrigins: config.allowOrigins,
    maxBodyBytes: config.limits.maxPayloadBytes,
    idleMs: config.mcp.idleMs,
  });
  let stdio: McpSession | undefined;
  return {
    routes: http.routes,
    get httpSessions() {
      return http.size;
    },
    async serveStdio() {
      const local = await openLocalSession(deps.host, new AbortController().signal);
      if ('code' in local) throw new Error(`no session for MCP over stdio: ${local.code}: ${local.message}`);
      stdio = await serveStdio(local, session);
      return stdio;
    },
    async close() {
      await Promise.all([http.close(), stdio?.end()]);
    },
  };
}

/**
 * `deskbatch mcp --connect`: a session of the daemon at `url` (`ws://HOST:PORT/v1`), served over this process's
 * stdin and stdout. Its tools are `tables` (the member table) cut to what that daemon's `welcome` lists.
 */
export async function serveRemoteStdio(options: {
  url: string;
  token: string;
  tables: readonly ToolsetTable[];
  log: Logger;
}): Promise<McpSession> {
  const { log } = options;
  const remote = await RemoteSession.connect(options.url, options.token, log);
  const { tables, unknown } = offeredTables(options.tables, remote.welcome.toolsets);
  if (unknown.length) log.warn('the daemon serves members this deskbatch does not know; not offered', { unknown });
  const tools = new ToolTable(tables, remote.welcome.limits.max_tool_uses);
  log.info('connected', { url: options.url, session: remote.id });
  return serveStdio(remote, { tools, log });
}
