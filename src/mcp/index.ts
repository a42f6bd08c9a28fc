/**
 * The MCP server (docs/MCP.md): MCP tools for the served toolsets' members
 * and `run_batch`, each MCP session bound to a deskbatch session of its own,
 * over Streamable HTTP at /mcp on the daemon's port and, for `deskbatch mcp`,
 * over stdio. The daemon builds it (`createMcp`) and hands the server its
 * routes; it knows the server as a `SessionHost` and the toolsets by the
 * toolset API's interface.
 */
import type { DaemonConfig } from '../base/config.ts';
import type { Logger } from '../base/log.ts';
import type { HttpRoute } from '../server/server.ts';
import type { Toolset } from '../toolset-api/types.ts';
import { McpHttp } from './http.ts';
import type { McpSession, SessionHost } from './session.ts';
import { serveStdio } from './stdio.ts';
import { ToolTable } from './tools.ts';

export { MCP_PATH } from './http.ts';
export { StdioSessionRefused } from './stdio.ts';
export type { SessionHost } from './session.ts';

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
  /** Serves one session over this process's stdin and stdout (`deskbatch mcp`). */
  serveStdio(): Promise<McpSession>;
  /** Ends every MCP session (the daemon closes). */
  close(): Promise<void>;
}

export function createMcp(deps: McpDeps): Mcp {
  const { config } = deps;
  const session = {
    host: deps.host,
    tools: new ToolTable(deps.served, config.limits.maxToolUsesPerBatch),
    log: deps.log,
  };
  const http = new McpHttp(session, {
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
      stdio = await serveStdio(session);
      return stdio;
    },
    async close() {
      await Promise.all([http.close(), stdio?.end()]);
    },
  };
}
