/**
 * The MCP server (docs/MCP.md): MCP tools for the served toolsets' members
 * and `run_batch`, each MCP session bound to a deskbatch session of its own,
 * over Streamable HTTP at /mcp on the daemon's port and, for `deskbatch mcp`,
 * over stdio, to this daemon's session or (`--connect`) to another daemon's.
 * The daemon builds it (`createMcp`) and hands the server its routes; it knows
 * the server as a `SessionHost` and the toolsets by the toolset API's
 * interface.
 *
 * The MCP SDK (in a daemon here, about 17 MiB more RSS and 0.2 s to load) is loaded on
 * first use, by dynamic imports: a daemon no MCP client talks to never loads it.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { DaemonConfig } from '../base/config.ts';
import type { Logger } from '../base/log.ts';
import type { HttpRoute } from '../server/server.ts';
import type { Toolset } from '../toolset-api/types.ts';
import type { McpHttp } from './http.ts';
import type { SessionHost } from './local.ts';
import type { McpSession, McpSessionDeps } from './session.ts';
import { offeredTables, servedTables, ToolTable, type ToolsetTable } from './tools.ts';

export type { SessionHost } from './local.ts';
export type { ToolsetTable } from './tools.ts';

/** Where the daemon serves MCP over Streamable HTTP. */
export const MCP_PATH = '/mcp';

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
  /** Opens a session and serves it over this process's stdin and stdout (`deskbatch mcp`). */
  serveStdio(): Promise<McpSession>;
  /** Ends every MCP session (the daemon closes). */
  close(): Promise<void>;
}

export function createMcp(deps: McpDeps): Mcp {
  const { config, log } = deps;
  let session: McpSessionDeps | undefined;
  const sessionDeps = (): McpSessionDeps =>
    (session ??= { tools: new ToolTable(servedTables(deps.served), config.limits.maxToolUsesPerBatch), log });
  let http: Promise<McpHttp> | undefined;
  const loadHttp = (): Promise<McpHttp> =>
    (http ??= import('./http.ts').then(
      ({ McpHttp }) =>
        new McpHttp(deps.host, sessionDeps(), {
          allowOrigins: config.allowOrigins,
          maxBodyBytes: config.limits.maxPayloadBytes,
          idleMs: config.mcp.idleMs,
        }),
    ));
  let stdio: McpSession | undefined;
  return {
    routes: (['POST', 'GET', 'DELETE'] as const).map((method) => ({
      method,
      path: MCP_PATH,
      auth: 'token' as const,
      handle: async (req: IncomingMessage, res: ServerResponse) => (await loadHttp()).handle(req, res),
    })),
    async serveStdio() {
      const [{ openLocalSession }, { serveStdio }] = await Promise.all([import('./local.ts'), import('./stdio.ts')]);
      const local = await openLocalSession(deps.host, new AbortController().signal);
      if ('code' in local) throw new Error(`no session for MCP over stdio: ${local.code}: ${local.message}`);
      stdio = await serveStdio(local, sessionDeps());
      return stdio;
    },
    async close() {
      await Promise.all([http?.then((h) => h.close()), stdio?.end()]);
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
  const [{ RemoteSession }, { serveStdio }] = await Promise.all([import('./remote.ts'), import('./stdio.ts')]);
  const remote = await RemoteSession.connect(options.url, options.token, log);
  const { tables, unknown } = offeredTables(options.tables, remote.welcome.toolsets);
  if (unknown.length) log.warn('the daemon serves members this deskbatch does not know; not offered', { unknown });
  const tools = new ToolTable(tables, remote.welcome.limits.max_tool_uses);
  log.info('connected', { url: options.url, session: remote.id });
  return serveStdio(remote, { tools, log });
}
