/**
 * An MCP client, the MCP SDK's own, that lists deskbatch's tools, opens a
 * browser tab and takes a screenshot (docs/MCP.md), over stdio or over
 * Streamable HTTP:
 *
 *   node --import tsx examples/mcp-client.ts stdio [deskbatch mcp options]   # starts `deskbatch mcp` itself
 *   node --import tsx examples/mcp-client.ts http http://127.0.0.1:8765/mcp  # a running daemon's /mcp
 *
 * The token comes from DESKBATCH_TOKEN, else ~/.deskbatch/token (where `npm start` writes one). The screenshot
 * is written to the system's temporary folder (deskbatch-mcp-screenshot.png). Over stdio it runs the compiled daemon
 * (`npm run build` first).
 */
import { readFile, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';

const CLI = fileURLToPath(new URL('../bin/deskbatch.js', import.meta.url));

async function token(): Promise<string> {
  return process.env.DESKBATCH_TOKEN ?? (await readFile(join(homedir(), '.deskbatch', 'token'), 'utf8')).trim();
}

async function transportFor(mode: string | undefined, rest: string[]): Promise<Transport> {
  if (mode === 'stdio') {
    return new StdioClientTransport({
      command: process.execPath,
      args: [CLI, 'mcp', ...rest],
      env: { ...process.env, DESKBATCH_TOKEN: await token() } as Record<string, string>,
      stderr: 'ignore',
    });
  }
  if (mode === 'http' && rest[0]) {
    return new StreamableHTTPClientTransport(new URL(rest[0]), {
      requestInit: { headers: { authorization: `Bearer ${await token()}` } },
    });
  }
  throw new Error('usage: mcp-client.ts stdio [deskbatch mcp options] | http URL');
}

async function main(): Promise<void> {
  const [mode, ...rest] = process.argv.slice(2);
  const transport = await transportFor(mode, rest);
  const client = new Client({ name: 'deskbatch-example', version: '1' });
  const t0 = performance.now();
  await client.connect(transport);
  const ms = (): string => `${Math.round(performance.now() - t0)} ms`;
  console.log(
    `connected over ${mode} (${ms()}): ${client.getServerVersion()?.name} ${client.getServerVersion()?.version}`,
  );
  console.log(`instructions: ${client.getInstructions()}`);
  const { tools } = await client.listTools();
  console.log(`${tools.length} tools: ${tools.map((t) => t.name).join(', ')}`);
  // A browser tab first, when the daemon serves the browser: the screenshot then shows its window.
  if (tools.some((t) => t.name === 'browser_new_tab')) {
    const tab = (await client.callTool({ name: 'browser_new_tab', arguments: {} })) as CallToolResult;
    for (const block of tab.content) console.log(`browser_new_tab (${ms()}): ${JSON.stringify(block)}`);
  }
  const shot = (await client.callTool({ name: 'computer_screenshot', arguments: {} })) as CallToolResult;
  for (const block of shot.content) {
    if (block.type !== 'image') {
      console.log(`${block.type}: ${JSON.stringify(block).slice(0, 200)}`);
      continue;
    }
    const png = Buffer.from(block.data, 'base64');
    const path = join(tmpdir(), 'deskbatch-mcp-screenshot.png');
    await writeFile(path, png);
    const size = `${png.readUInt32BE(16)}x${png.readUInt32BE(20)}`;
    console.log(`computer_screenshot (${ms()}): image ${block.mimeType}, ${size}, ${png.length} bytes -> ${path}`);
  }
  if (transport instanceof StreamableHTTPClientTransport) await transport.terminateSession();
  await client.close();
  console.log(`closed (${ms()})`);
}

await main();
