/**
 * MCP over stdio (`deskbatch mcp`, docs/MCP.md "Over stdio"): the MCP host
 * starts the daemon as its child and speaks MCP on its stdin and stdout. One
 * deskbatch session is opened at start and bound to the one MCP session the
 * host holds; stdin's end (the host closing it) ends both. stdout carries MCP
 * frames only: the daemon's log lines go to stderr, and no program it starts
 * writes to the daemon's stdout.
 */
import type { Readable, Writable } from 'node:stream';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { McpSession, type McpSessionDeps } from './session.ts';

/** Refused a session at start: the code and message the server gave. */
export class StdioSessionRefused extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`no session for MCP over stdio: ${code}: ${message}`);
  }
}

/**
 * Opens the session and serves it on `input`/`output` (the process's stdin and stdout by default). Resolves
 * once the MCP server listens; the session's `ended` resolves when it and its deskbatch session have ended.
 */
export async function serveStdio(
  deps: McpSessionDeps,
  input: Readable = process.stdin,
  output: Writable = process.stdout,
): Promise<McpSession> {
  const opened = await McpSession.open(deps, new AbortController().signal);
  if (!(opened instanceof McpSession)) throw new StdioSessionRefused(opened.code, opened.message);
  // The SDK's transport does not watch for the end of its input: the host closing our stdin ends the session.
  input.once('end', () => void opened.end());
  input.once('close', () => void opened.end());
  await opened.server.connect(new StdioServerTransport(input, output));
  deps.log.info('MCP session opened', { session: opened.id, transport: 'stdio' });
  return opened;
}
