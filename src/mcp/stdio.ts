/**
 * MCP over stdio (`deskbatch mcp`, docs/MCP.md "Over stdio"): the MCP host
 * starts deskbatch as its child and speaks MCP on its stdin and stdout. One
 * deskbatch session (of the daemon in the process, or of another daemon with
 * `--connect`) is opened at start and bound to the one MCP session the host
 * holds; stdin's end (the host closing it) ends both. stdout carries MCP
 * frames only: the daemon's log lines go to stderr, and no program it starts
 * writes to the daemon's stdout.
 */
import type { Readable, Writable } from 'node:stream';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { McpSession, type BatchSession, type McpSessionDeps } from './session.ts';

/**
 * Serves `session` as the one MCP session on `input`/`output` (the process's stdin and stdout by default).
 * Resolves once the MCP server listens; its `ended` resolves when it and the deskbatch session have ended.
 */
export async function serveStdio(
  session: BatchSession,
  deps: McpSessionDeps,
  input: Readable = process.stdin,
  output: Writable = process.stdout,
): Promise<McpSession> {
  const mcp = new McpSession(session, deps);
  // The SDK's transport does not watch for the end of its input: the host closing our stdin ends the session.
  input.once('end', () => void mcp.end());
  input.once('close', () => void mcp.end());
  await mcp.server.connect(new StdioServerTransport(input, output));
  deps.log.info('MCP session opened', { session: mcp.id, transport: 'stdio' });
  return mcp;
}
