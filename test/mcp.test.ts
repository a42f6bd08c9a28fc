/**
 * The MCP server (docs/MCP.md) through the MCP SDK's own client: over stdio
 * against `deskbatch mcp` as an MCP host starts it (the compiled daemon, a
 * test display), and over Streamable HTTP against a daemon with a pool of
 * desktops. What the model reads is compared with what the batch protocol
 * gives on the same daemon, and the tool list with its `welcome`.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { Activity } from '../src/base/activity.ts';
import { COMPUTER_MEMBER_NAMES } from '../toolsets/computer/index.ts';
import { BROWSER_MEMBERS } from '../toolsets/browser/index.ts';
import { ensureBuilt } from '../testkit/build.ts';
import { computerUse, startTestDaemon, TEST_TOKEN, TestClient, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { rawRequest } from '../testkit/raw-http.ts';
import { until, within } from '../testkit/wait.ts';
import { startWebServer, type WebServer } from '../testkit/web.ts';

const CLI = fileURLToPath(new URL('../bin/deskbatch.js', import.meta.url));
const SIZE = { width: 1024, height: 768 };

/** A PNG's width and height, from its IHDR chunk. */
function pngSize(base64: string): { width: number; height: number } {
  const png = Buffer.from(base64, 'base64');
  assert.deepEqual([...png.subarray(0, 8)], [137, 80, 78, 71, 13, 10, 26, 10], 'a PNG signature');
  assert.equal(png.subarray(12, 16).toString('latin1'), 'IHDR');
  return { width: png.readUInt32BE(16), height: png.readUInt32BE(20) };
}

function texts(result: CallToolResult): string[] {
  return result.content.map((b) => (b.type === 'text' ? b.text : `<${b.type}>`));
}

function newClient(): Client {
  return new Client({ name: 'deskbatch-tests', version: '1' });
}

describe('MCP over stdio: deskbatch mcp', () => {
  let display: VirtualDisplay;
  let home: string;
  before(async () => {
    [display, home] = await Promise.all([
      startTestDisplay({ ...SIZE, windowManager: false }),
      mkdtemp(join(tmpdir(), 'deskbatch-mcp-home-')),
      ensureBuilt(),
    ]);
  });
  after(async () => {
    await display?.stop();
    if (home) await rm(home, { recursive: true, force: true });
  });

  test('lists what welcome lists, screenshots the display, answers as the batch protocol does, ends with its stdin', async () => {
    // As an MCP host starts it: a command and its args, in a folder of the host's choosing.
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, 'mcp', '--browser', 'off'],
      env: { ...process.env, DISPLAY: display.display, DESKBATCH_TOKEN: TEST_TOKEN, HOME: home } as Record<
        string,
        string
      >,
      cwd: home,
      stderr: 'pipe',
    });
    let stderr = '';
    transport.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const client = newClient();
    // stdout carries MCP frames only: a line that is not one would be reported here.
    const transportErrors: Error[] = [];
    client.onerror = (err) => transportErrors.push(err);
    let ws: TestClient | undefined;
    try {
      await within(client.connect(transport), 'the MCP initialize over stdio', 60_000);
      const url = await until(
        'the daemon to log where it listens',
        () => /listening on (ws:\/\/\S+?)"/.exec(stderr)?.[1],
      );
      ws = await TestClient.open(url);
      const welcome = await ws.hello();
      const { tools } = await client.listTools();
      const expected = welcome.toolsets.flatMap((t) => t.members.map((m) => `${t.toolset_name}_${m}`));
      assert.deepEqual(
        tools.map((t) => t.name),
        [...expected, 'run_batch'],
      );
      for (const t of tools) {
        assert.equal(t.inputSchema.type, 'object', t.name);
        assert.ok(t.description && t.description.length > 10, t.name);
      }
      assert.match(client.getInstructions() ?? '', new RegExp(`${SIZE.width}x${SIZE.height}`));

      const shot = (await client.callTool({ name: 'computer_screenshot', arguments: {} })) as CallToolResult;
      assert.equal(shot.isError, undefined);
      assert.equal(shot.content.length, 1);
      const image = shot.content[0]!;
      assert.ok(image.type === 'image', `an image, not ${image.type}`);
      assert.equal(image.mimeType, 'image/png');
      assert.deepEqual(pngSize(image.data), SIZE);
      assert.deepEqual(welcome.screenshot, SIZE);

      // A failing call: isError, and the text the batch protocol gives for the same call.
      const failed = (await client.callTool({ name: 'computer_mouse_move', arguments: {} })) as CallToolResult;
      const { result } = await ws.batch('b1', [computerUse('mouse_move', {})]);
      assert.equal(result.tool_results[0]!.is_error, true);
      assert.equal(failed.isError, true);
      assert.deepEqual(
        failed.content,
        result.tool_results[0]!.content.map((b) => ({ type: 'text', text: (b as { text: string }).text })),
      );

      // run_batch halts the toolset after a failure: the later call gets the toolset's not-executed text.
      const computer = welcome.toolsets.find((t) => t.toolset_name === 'computer')!;
      const batch = (await client.callTool({
        name: 'run_batch',
        arguments: {
          calls: [
            { name: 'computer_cursor_position' },
            { name: 'computer_mouse_move', input: {} },
            { name: 'computer_screenshot', input: {} },
          ],
        },
      })) as CallToolResult;
      assert.equal(batch.isError, true);
      const lines = texts(batch);
      assert.equal(lines.length, 6, lines.join(' | '));
      assert.equal(lines[0], '[1/3] computer_cursor_position: ok');
      assert.match(lines[1]!, /^X=\d+,Y=\d+$/);
      assert.equal(lines[2], '[2/3] computer_mouse_move: error');
      assert.equal(lines[3], failed.content[0]!.type === 'text' ? failed.content[0]!.text : '');
      assert.equal(lines[4], '[3/3] computer_screenshot: error');
      assert.equal(lines[5], computer.not_executed_text);
    } finally {
      ws?.close();
      // The host closes our stdin: the session ends, and so does the daemon, by itself.
      await client.close();
    }
    await until('the daemon to stop because its MCP session ended', () =>
      stderr.includes('the MCP session ended: shutting down'),
    );
    assert.doesNotMatch(stderr, /SIGTERM/, 'it stopped before the client had to signal it');
    assert.deepEqual(transportErrors, []);
  });
});

describe('MCP over Streamable HTTP: /mcp on the daemon port', () => {
  let d: TestDaemon;
  let web: WebServer;
  let base: URL;
  const activity: Activity[] = [];
  before(async () => {
    [d, web] = await Promise.all([
      startTestDaemon({
        browser: 'headless',
        desktops: { mode: 'pool', max: 2, warm: 2, sizes: [SIZE] },
        limits: { maxSessions: 2 },
        allowOrigins: ['http://allowed.example'],
        mcp: { idleMs: 3_000 },
      }),
      startWebServer(),
    ]);
    d.daemon.activity.subscribe((a) => activity.push(a));
    base = new URL(`http://127.0.0.1:${d.daemon.address.port}/mcp`);
    web.route('/a', '<title>page of A</title><p>A');
  });
  after(async () => {
    await d?.close();
    await web?.close();
  });

  const connect = async (headers: Record<string, string> = {}) => {
    const transport = new StreamableHTTPClientTransport(base, {
      requestInit: { headers: { authorization: `Bearer ${TEST_TOKEN}`, ...headers } },
    });
    const client = newClient();
    await within(client.connect(transport), 'an MCP initialize over HTTP', 60_000);
    return { client, transport };
  };
  const opened = () => activity.filter((a) => a.type === 'session_opened');
  const closedEvent = (session: string) =>
    activity.find((a) => a.type === 'session_closed' && a.session === session) as
      Extract<Activity, { type: 'session_closed' }> | undefined;
  const post = (headers: Record<string, string>, body = '{}') =>
    rawRequest(d.daemon.address.port, '/mcp', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
      body,
    });

  test('a missing or wrong token, or an Origin not allowed, is refused before anything opens', async () => {
    assert.equal((await post({})).status, 401);
    assert.equal((await post({ authorization: `Bearer ${TEST_TOKEN}x` })).status, 401);
    const forbidden = await post({ authorization: `Bearer ${TEST_TOKEN}`, origin: 'http://evil.example' });
    assert.equal(forbidden.status, 403);
    assert.match(forbidden.body, /Origin is not allowed/);
    // An allowed Origin passes the check: this one is then refused only for naming no live session.
    const allowed = await post({
      authorization: `Bearer ${TEST_TOKEN}`,
      origin: 'http://allowed.example',
      'mcp-session-id': 'no-such-session',
    });
    assert.equal(allowed.status, 404);
    assert.equal(opened().length, 0, 'no session was opened');
  });

  test('two MCP clients get two desktops and two browsers; a third is refused; closing one ends its session', async () => {
    const a = await connect();
    const sessionA = opened()[0]!;
    const b = await connect();
    const sessionB = opened()[1]!;
    assert.equal(opened().length, 2, 'each MCP client opened a deskbatch session of its own');
    assert.ok(sessionA.type === 'session_opened' && sessionB.type === 'session_opened');
    assert.notEqual(sessionA.desktop, sessionB.desktop, 'each MCP session has a desktop of its own');

    const { tools } = await a.client.listTools();
    const browserServed = BROWSER_MEMBERS.filter((m) => !m.optional).map((m) => `browser_${m.name}`);
    assert.deepEqual(
      tools.map((t) => t.name),
      [...COMPUTER_MEMBER_NAMES.map((n) => `computer_${n}`), ...browserServed, 'run_batch'],
    );

    // Each moves its own pointer, and sees its own.
    const where = async (c: Client) =>
      texts((await c.callTool({ name: 'computer_cursor_position', arguments: {} })) as CallToolResult)[0];
    await a.client.callTool({ name: 'computer_mouse_move', arguments: { coordinate: [100, 100] } });
    await b.client.callTool({ name: 'computer_mouse_move', arguments: { coordinate: [300, 200] } });
    assert.equal(await where(a.client), 'X=100,Y=100');
    assert.equal(await where(b.client), 'X=300,Y=200');

    // A's page is in A's browser only; a browser_state block arrives as its JSON text.
    const navigated = (await a.client.callTool({
      name: 'browser_navigate',
      arguments: { url: `${web.origin}/a` },
    })) as CallToolResult;
    assert.equal(navigated.isError, undefined, texts(navigated).join(' | '));
    const tabsOf = async (c: Client) => {
      const listed = texts((await c.callTool({ name: 'browser_list_tabs', arguments: {} })) as CallToolResult);
      const state = JSON.parse(listed.at(-1)!) as { type: string; tabs: { url: string }[] };
      assert.equal(state.type, 'browser_state');
      return state.tabs.map((t) => t.url);
    };
    assert.deepEqual(await tabsOf(a.client), [`${web.origin}/a`]);
    assert.ok(!(await tabsOf(b.client)).includes(`${web.origin}/a`), "B's browser is not A's");

    // The daemon's session limit: a third initialize is refused with an HTTP error that says why.
    await assert.rejects(connect(), (err: Error & { code?: unknown }) => {
      assert.equal(err.code, 503, err.message);
      assert.match(err.message, /too_many_sessions: the daemon holds its maximum number of sessions/);
      return true;
    });

    // Deleting A's MCP session ends A's deskbatch session and gives its desktop back.
    const idA = a.transport.sessionId!;
    await a.transport.terminateSession();
    await a.client.close();
    const ended = await until("A's session to close", () => closedEvent(sessionA.session));
    assert.equal(ended.reason, 'ended');
    assert.equal(d.daemon.server.findSession(sessionA.session), undefined);
    assert.equal((await post({ authorization: `Bearer ${TEST_TOKEN}`, 'mcp-session-id': idA })).status, 404);
    assert.ok(d.daemon.server.findSession(sessionB.session), "B's session goes on");

    // Cancelling a request cancels its batch: the running call gets the cancelled text, not a failure.
    // A request with a progress token hears of its call's start while the call runs.
    const abort = new AbortController();
    const progress: string[] = [];
    const waiting = b.client.callTool({ name: 'computer_wait', arguments: { duration: 60 } }, undefined, {
      signal: abort.signal,
      onprogress: (p) => progress.push(`${p.progress}/${p.total} ${p.message}`),
    });
    await until('progress saying the wait started', () => progress.includes('0/1 computer_wait: started'));
    const started = activity.find(
      (x) =>
        x.type === 'tool_event' &&
        x.session === sessionB.session &&
        x.event.name === 'wait' &&
        x.event.phase === 'started',
    );
    assert.ok(started, 'the daemon started the wait');
    abort.abort();
    await assert.rejects(waiting, /AbortError|aborted/i);
    const finished = await until('the cancelled batch to finish', () =>
      activity.find(
        (x): x is Extract<Activity, { type: 'batch_finished' }> =>
          x.type === 'batch_finished' &&
          x.session === sessionB.session &&
          started.type === 'tool_event' &&
          x.result.batch_id === started.event.batch_id,
      ),
    );
    assert.equal(finished.result.cancelled, true);
    assert.equal(finished.result.failures.length, 0);

    // B's client goes away without a DELETE: once no request of it is open for the idle time, it ends too.
    await b.client.close();
    const idle = await until("B's session to end once idle", () => closedEvent(sessionB.session), {
      timeoutMs: 30_000,
    });
    assert.equal(idle.reason, 'ended');
  });

  test('deskbatch mcp --connect serves a session of this daemon over stdio, with the same tools', async () => {
    const viaHttp = await connect();
    const { tools: httpTools } = await viaHttp.client.listTools();
    await viaHttp.transport.terminateSession();
    await viaHttp.client.close();
    await ensureBuilt();
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, 'mcp', '--connect', d.url],
      env: { ...process.env, DESKBATCH_TOKEN: TEST_TOKEN } as Record<string, string>,
      stderr: 'pipe',
    });
    let stderr = '';
    transport.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const client = newClient();
    try {
      await within(client.connect(transport), 'the MCP initialize over stdio, bridged', 60_000);
      const { tools } = await client.listTools();
      assert.deepEqual(tools, httpTools, 'the member table cut to the welcome gives what the daemon lists itself');
      const shot = (await client.callTool({ name: 'computer_screenshot', arguments: {} })) as CallToolResult;
      const image = shot.content[0]!;
      assert.ok(image.type === 'image', `an image, not ${image.type}`);
      assert.deepEqual(pngSize(image.data), SIZE);
      const session = activity.findLast((a) => a.type === 'session_opened');
      assert.ok(session && !closedEvent(session.session), 'the bridged session is one of this daemon');
    } finally {
      await client.close();
    }
    await until('the bridge to end with its MCP session', () => stderr.includes('the MCP session ended'));
  });
});
