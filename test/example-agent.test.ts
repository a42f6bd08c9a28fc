/**
 * examples/agent.ts end to end: a real daemon (its own Xvfb, headless
 * Chromium) runs the calls of recorded assistant turns, and a stand-in
 * Messages API (helpers/messages-api.ts) replays those turns and checks every
 * request the agent sends against the API's rules. The results the stand-in
 * receives must show the real page and the real screen.
 *
 * The first block proves the stand-in can fail: it answers broken requests
 * (a tool_use without a result, text before a result, a result without
 * `toolset_name`, …) with a 400 naming the rule.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import type { BetaMessage } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { runAgent } from '../examples/agent.ts';
import { DeskbatchClient } from '../src/client/index.ts';
import { BROWSER_MEMBER_NAMES, BROWSER_OPTIONAL_MEMBERS } from '../toolsets/browser/index.ts';
import { checkExampleConversation, checkExampleOutput } from '../testkit/example-conversation.ts';
import { TEST_TOKEN, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { EXAMPLE_PAGE, EXAMPLE_TASK, loadTurns, startMessagesApi, type MessagesApi } from '../testkit/messages-api.ts';
import { startWebServer, type WebServer } from '../testkit/web.ts';

const REPO = fileURLToPath(new URL('..', import.meta.url));
const API_KEY = 'sk-ant-test-not-a-real-key';
const optional: readonly string[] = BROWSER_OPTIONAL_MEMBERS;
const PAGE = EXAMPLE_PAGE;
const TASK = EXAMPLE_TASK;
type Block = Record<string, unknown> & { type: string };
type Result = Block & { tool_use_id: string; content: Block[]; is_error?: boolean; toolset_name?: string };

// ---------------------------------------------------------------- the stand-in can fail

describe('the stand-in Messages API rejects what the API rejects', () => {
  const turnA: BetaMessage = {
    id: 'msg_rules_1',
    type: 'message',
    role: 'assistant',
    model: 'claude-opus-5-5',
    content: [
      { type: 'text', text: 'Looking.', citations: null },
      { type: 'tool_use', id: 'toolu_A', name: 'cursor_position', toolset_name: 'computer', input: {} },
      { type: 'tool_use', id: 'toolu_B', name: 'get_page_text', toolset_name: 'browser', input: {} },
    ],
    container: null,
    context_management: null,
    diagnostics: null,
    stop_details: null,
    stop_reason: 'tool_use',
    stop_sequence: null,
    usage: {
      cache_creation: null,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      fallback_credit: null,
      inference_geo: null,
      input_tokens: 10,
      iterations: null,
      output_tokens: 10,
      output_tokens_details: null,
      server_tool_use: null,
      service_tier: 'standard',
      speed: null,
    },
  };
  const turnB: BetaMessage = {
    ...turnA,
    id: 'msg_rules_2',
    content: [{ type: 'text', text: 'Done.', citations: null }],
    stop_reason: 'end_turn',
  };
  const tools = () => [{ type: 'computer_toolset_20260801' }, { type: 'browser_toolset_20260801' }] as Block[];
  const results = (): Result[] => [
    {
      type: 'tool_result',
      tool_use_id: 'toolu_A',
      toolset_name: 'computer',
      content: [{ type: 'text', text: 'X=1,Y=2' }],
    },
    {
      type: 'tool_result',
      tool_use_id: 'toolu_B',
      toolset_name: 'browser',
      content: [{ type: 'text', text: 'Hello' }],
    },
  ];
  const body = (userContent: Block[], toolList: Block[] = tools()) => ({
    model: 'claude-opus-5-5',
    max_tokens: 1024,
    tools: toolList,
    messages: [
      { role: 'user', content: 'Task.' },
      { role: 'assistant', content: turnA.content },
      { role: 'user', content: userContent },
    ],
  });
  /** A PNG header claiming `w`x`h` (the rules read the size from the bytes). */
  const pngOf = (w: number, h: number): string => {
    const b = Buffer.alloc(33);
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]).copy(b, 0);
    b.writeUInt32BE(13, 8);
    b.write('IHDR', 12);
    b.writeUInt32BE(w, 16);
    b.writeUInt32BE(h, 20);
    return b.toString('base64');
  };

  let api: MessagesApi;
  const post = async (payload: unknown, headers: Record<string, string> = {}) => {
    const res = await fetch(`${api.baseURL}/v1/messages`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-api-key': API_KEY,
        'anthropic-version': '2023-06-01',
        ...headers,
      },
      body: JSON.stringify(payload),
    });
    return { status: res.status, body: (await res.json()) as { error?: { type: string; message: string } } };
  };
  before(async () => {
    api = await startMessagesApi({ turns: [turnA, turnB], apiKey: API_KEY });
    const first = await post({
      model: 'claude-opus-5-5',
      max_tokens: 1024,
      tools: tools(),
      messages: [{ role: 'user', content: 'Task.' }],
    });
    assert.equal(first.status, 200, JSON.stringify(first.body));
  });
  after(() => api?.close());

  const broken: [string, () => unknown, RegExp, Record<string, string>?][] = [
    [
      'a tool_use without its tool_result',
      () => body([results()[0]!]),
      /without tool_result blocks immediately after: toolu_B/,
    ],
    ['text before a tool_result', () => body([{ type: 'text', text: 'here you go' }, ...results()]), /must come first/],
    ['two results for one tool_use', () => body([...results(), results()[1]!]), /more than one tool_result/],
    [
      'a result for no tool_use',
      () => body([...results(), { ...results()[0]!, tool_use_id: 'toolu_Z' }]),
      /answers no tool_use/,
    ],
    [
      'a member result without toolset_name',
      () => body([{ ...results()[0]!, toolset_name: undefined }, results()[1]!]),
      /toolset_name must echo 'computer'/,
    ],
    [
      'a result with the wrong toolset_name',
      () => body([results()[0]!, { ...results()[1]!, toolset_name: 'computer' }]),
      /toolset_name must echo 'browser'/,
    ],
    [
      'an image on an is_error result',
      () =>
        body([
          {
            ...results()[0]!,
            is_error: true,
            content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: pngOf(10, 10) } }],
          },
          results()[1]!,
        ]),
      /holds text only/,
    ],
    [
      'a browser_state block on a computer result',
      () => body([{ ...results()[0]!, content: [{ type: 'browser_state', tabs: [] }] }, results()[1]!]),
      /browser_state block is not allowed in a computer result/,
    ],
    [
      'a document block in a browser result',
      () => body([results()[0]!, { ...results()[1]!, content: [{ type: 'document', source: {} }] }]),
      /document block is not allowed/,
    ],
    [
      'an empty text block',
      () => body([{ ...results()[0]!, content: [{ type: 'text', text: '' }] }, results()[1]!]),
      /no empty text/,
    ],
    [
      'an image over 2000 px',
      () =>
        body([
          {
            ...results()[0]!,
            content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: pngOf(2560, 1440) } }],
          },
          results()[1]!,
        ]),
      /≤ 2000 px/,
    ],
    [
      'browser_state with two active tabs',
      () =>
        body([
          results()[0]!,
          {
            ...results()[1]!,
            content: [
              { type: 'text', text: 'ok' },
              {
                type: 'browser_state',
                tabs: [
                  { tab_id: 'tab-1', title: 'a', url: 'http://a/', active: true },
                  { tab_id: 'tab-2', title: 'b', url: 'http://b/', active: true },
                ],
              },
            ],
          },
        ]),
      /exactly one active tab/,
    ],
    [
      'a toolset entry with a name',
      () => body(results(), [{ type: 'computer_toolset_20260801', name: 'computer' }]),
      /carry no 'name'/,
    ],
    [
      'a toolset entry with display fields',
      () => body(results(), [{ type: 'computer_toolset_20260801', display_width_px: 1024 }]),
      /carry no 'display_width_px'/,
    ],
    [
      'configs with an unknown member',
      () => body(results(), [{ type: 'computer_toolset_20260801', configs: { teleport: { enabled: true } } }]),
      /unknown member 'teleport'/,
    ],
    [
      'configs disabling every member',
      () =>
        body(results(), [
          {
            type: 'browser_toolset_20260801',
            // Every member on by default switched off (the optional ones are off already).
            configs: Object.fromEntries(
              BROWSER_MEMBER_NAMES.filter((m) => !optional.includes(m)).map((m) => [m, { enabled: false }]),
            ),
          },
        ]),
      /disables every member/,
    ],
    [
      'two computer toolset entries',
      () => body(results(), [{ type: 'computer_toolset_20260801' }, { type: 'computer_toolset_20260801' }]),
      /a second computer_toolset_20260801 entry/,
    ],
    [
      'the legacy fine-grained streaming header',
      () => body(results()),
      /fine-grained-tool-streaming-2025-05-14/,
      { 'anthropic-beta': 'fine-grained-tool-streaming-2025-05-14' },
    ],
    [
      'the assistant turn not sent back as it was',
      () => ({
        ...body(results()),
        messages: [
          { role: 'user', content: 'Task.' },
          { role: 'assistant', content: [...turnA.content].reverse() },
          { role: 'user', content: results() },
        ],
      }),
      /not assistant turn 1 sent back unchanged/,
    ],
  ];

  for (const [what, make, message, headers] of broken) {
    test(`refuses ${what}`, async () => {
      const before = api.violations.length;
      const res = await post(make(), headers);
      assert.equal(res.status, 400, `${what}: ${JSON.stringify(res.body)}`);
      assert.equal(res.body.error?.type, 'invalid_request_error');
      assert.match(res.body.error?.message ?? '', message);
      assert.equal(api.violations.length, before + 1);
      assert.equal(api.served, 1, 'a refused request is answered with no turn');
    });
  }

  test('accepts the same turn answered correctly, and serves the next recorded turn', async () => {
    const res = await post(body([...results(), { type: 'text', text: 'Text after the results is fine.' }]));
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(api.served, 2);
  });
});

// ---------------------------------------------------------------- the example against a real daemon

describe('examples/agent.ts drives a real daemon through the Messages API loop', () => {
  let display: VirtualDisplay;
  let web: WebServer;
  let daemon: TestDaemon;
  let turns: BetaMessage[];
  before(async () => {
    display = await startTestDisplay({ width: 1024, height: 768 });
    web = await startWebServer();
    web.route('/report', PAGE);
    daemon = await startTestDaemon({ display: display.display, browser: 'headless' });
    turns = await loadTurns('example', { PAGE_URL: `${web.origin}/report` });
  });
  after(async () => {
    await daemon?.close();
    await web?.close();
    await display?.stop();
  });

  const finalText = (): string => turns[2]!.content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join('\n');

  test('runAgent: three turns, the results show the real page and screen, every request is valid', async () => {
    const api = await startMessagesApi({ turns, apiKey: API_KEY });
    const anthropic = new Anthropic({ apiKey: API_KEY, baseURL: api.baseURL, maxRetries: 0 });
    const deskbatch = await DeskbatchClient.connect(daemon.url, {
      token: TEST_TOKEN,
      clientName: 'example-agent-test/1',
    });
    const lines: string[] = [];
    try {
      const result = await runAgent({ anthropic, deskbatch, task: TASK, log: (l) => lines.push(l) });
      checkExampleConversation(api, turns);
      assert.equal(result.finalText, finalText());
      assert.equal(result.turns, 3);
      assert.equal(result.stopReason, 'end_turn');
      assert.equal(result.hitMaxTurns, false);
      assert.equal(result.messages.length, 6, 'task, three assistant turns, two user turns with results');
      assert.equal(lines.length, 2, lines.join('\n'));
      assert.match(lines[0]!, /^turn 1: 2 calls \(browser 2\), 0 failed, \d+ ms$/);
      assert.match(
        lines[1]!,
        /^turn 2: 3 calls \(computer 3\), 1 failed \(mouse_move: ToolInputError\), 1 not run, \d+ ms$/,
      );
    } finally {
      await deskbatch.close();
      await api.close();
    }
  });

  test('runAgent stops at maxTurns while Claude still asks for tools', async () => {
    const api = await startMessagesApi({ turns, apiKey: API_KEY });
    const anthropic = new Anthropic({ apiKey: API_KEY, baseURL: api.baseURL, maxRetries: 0 });
    const deskbatch = await DeskbatchClient.connect(daemon.url, { token: TEST_TOKEN });
    try {
      const result = await runAgent({ anthropic, deskbatch, task: TASK, maxTurns: 1 });
      assert.deepEqual(api.violations, []);
      assert.equal(result.turns, 1);
      assert.equal(result.hitMaxTurns, true);
      assert.equal(result.stopReason, 'tool_use');
      assert.equal(api.requests.length, 1);
    } finally {
      await deskbatch.close();
      await api.close();
    }
  });

  /** Runs the CLI; the environment carries nothing of the caller's Anthropic or deskbatch settings. */
  async function cli(args: string[], env: Record<string, string>, script = 'examples/agent.ts') {
    const clean = Object.fromEntries(
      Object.entries(process.env).filter(([k]) => !k.startsWith('ANTHROPIC_') && !k.startsWith('DESKBATCH_')),
    );
    const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], {
      cwd: REPO,
      env: { ...clean, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    try {
      const code = await new Promise<number | null>((resolve, reject) => {
        child.once('error', reject);
        child.once('close', (c) => resolve(c));
      });
      return { code, stdout, stderr };
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  }

  test('npm run example:replay (examples/replay.ts) runs the recorded conversation on the daemon, no key', async () => {
    const { code, stdout, stderr } = await cli(
      [],
      { DESKBATCH_URL: daemon.url, DESKBATCH_TOKEN: TEST_TOKEN, DESKBATCH_EXAMPLE_PAGE_PORT: '0' },
      'examples/replay.ts',
    );
    assert.equal(code, 0, `exit ${code}\nstdout:\n${stdout}\nstderr:\n${stderr}`);
    assert.match(stdout, /^replaying 3 recorded turns from a stand-in Messages API at http:\/\/127\.0\.0\.1:\d+$/m);
    assert.match(
      stdout,
      /^the example page is at http:\/\/127\.0\.0\.1:(\d+)\/report: the daemon's browser needs --allow-private 127\.0\.0\.1:\1$/m,
    );
    assert.match(
      stdout,
      /^turn 2: 3 calls \(computer 3\), 1 failed \(mouse_move: ToolInputError\), 1 not run, \d+ ms$/m,
    );
    assert.match(stdout, /^every request \(3\) followed the Messages API's rules$/m);
    assert.match(stdout, /secret word is pelican/);
  });

  test('the CLI (node --import tsx examples/agent.ts) runs the same conversation', async () => {
    const api = await startMessagesApi({ turns, apiKey: API_KEY });
    try {
      const { code, stdout, stderr } = await cli([TASK], {
        ANTHROPIC_BASE_URL: api.baseURL,
        ANTHROPIC_API_KEY: API_KEY,
        DESKBATCH_URL: daemon.url,
        DESKBATCH_TOKEN: TEST_TOKEN,
      });
      assert.equal(code, 0, `exit ${code}\nstdout:\n${stdout}\nstderr:\n${stderr}`);
      checkExampleConversation(api, turns);
      checkExampleOutput(stdout, turns, stdout);
      assert.doesNotMatch(stdout, /[A-Za-z0-9+/]{100,}/, 'no image data on stdout');
      const token = TEST_TOKEN;
      assert.ok(!stdout.includes(token) && !stderr.includes(token), 'the token is never printed');
    } finally {
      await api.close();
    }
  });

  test('the CLI without an API key or a stand-in says so and exits 2', async () => {
    const { code, stdout, stderr } = await cli([TASK], { DESKBATCH_URL: daemon.url, DESKBATCH_TOKEN: TEST_TOKEN });
    assert.equal(code, 2, `stdout:\n${stdout}\nstderr:\n${stderr}`);
    assert.match(stderr, /ANTHROPIC_API_KEY is not set/);
    assert.equal(stdout, '');
  });
});
