/**
 * src/sdk: the SDK's toolset classes backed by a real daemon (its own Xvfb,
 * headless Chromium). Calls go through the SDK's own entry points
 * (`toolResult`, which runs the same pipeline as the tool runner, and the
 * tool runner itself against the stand-in Messages API), and every result is
 * checked against the API's rules. Failures must reach the model as
 * `is_error` results holding the daemon's exact text.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import type {
  BetaMessage,
  BetaToolResultBlockParam,
  BetaToolUseBlock,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { DeskbatchClient, type AgentToolEntry, type ToolEvent } from '../src/client/index.ts';
import { DeskbatchBrowserToolset, DeskbatchComputerToolset, connectDeskbatchToolsets } from '../src/sdk/index.ts';
import { assertToolResultValid, assertToolsValid, imageSize } from '../testkit/api-rules.ts';
import { TEST_TOKEN, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { loadTurns, startMessagesApi } from '../testkit/messages-api.ts';
import { startWebServer, type WebServer } from '../testkit/web.ts';

const PAGE_TITLE = 'Deskbatch SDK page';
const PAGE = `<!doctype html><title>${PAGE_TITLE}</title><main><p>The secret word is heron.</p></main>`;
const API_KEY = 'sk-ant-test-not-a-real-key';

let n = 0;
function use(toolset: 'computer' | 'browser', name: string, input: Record<string, unknown> = {}): BetaToolUseBlock {
  return { type: 'tool_use', id: `toolu_sdk${(n++).toString().padStart(4, '0')}`, name, toolset_name: toolset, input };
}

const texts = (r: BetaToolResultBlockParam): string[] =>
  typeof r.content === 'string' ? [r.content] : (r.content ?? []).flatMap((b) => (b.type === 'text' ? [b.text] : []));

/** The SDK's result for `toolUse`, checked against the API's rules. */
async function call(
  toolset: DeskbatchComputerToolset | DeskbatchBrowserToolset,
  toolUse: BetaToolUseBlock,
): Promise<BetaToolResultBlockParam> {
  const result = await toolset.toolResult(toolUse);
  assertToolResultValid(toolUse, result);
  return result;
}

/** The same form for both paths: content as blocks (the daemon always sends blocks), no undefined members. */
const normal = (r: BetaToolResultBlockParam): unknown =>
  JSON.parse(
    JSON.stringify({
      ...r,
      toolset_name: r.toolset_name ?? undefined,
      content: typeof r.content === 'string' ? [{ type: 'text', text: r.content }] : r.content,
    }),
  );

/** The runner's and the daemon's results for `uses`, the same block for block. */
function assertSameResults(
  uses: BetaToolUseBlock[],
  byRunner: BetaToolResultBlockParam[],
  byDaemon: BetaToolResultBlockParam[],
): void {
  assert.equal(byDaemon.length, uses.length);
  for (const [i, use] of uses.entries()) {
    const runner = byRunner.find((r) => r.tool_use_id === use.id);
    assert.ok(runner, `the runner answered ${use.id}`);
    assert.deepEqual(normal(byDaemon[i]!), normal(runner), `result ${i} (${use.toolset_name ?? ''}/${use.name})`);
  }
}

/** A recorded turn's tool_use blocks. */
const toolUsesOf = (turn: BetaMessage): BetaToolUseBlock[] =>
  turn.content.filter((b): b is BetaToolUseBlock => b.type === 'tool_use');

/**
 * The runner's side of a differential test: the recorded `turns` through the SDK's own tool runner
 * with `tools`, every request checked against the API's rules; the tool_result blocks it sent back
 * for each turn that called tools.
 */
async function runnerAnswers(
  turns: BetaMessage[],
  tools: Parameters<Anthropic['beta']['messages']['toolRunner']>[0]['tools'],
  prompt: string,
): Promise<BetaToolResultBlockParam[][]> {
  const api = await startMessagesApi({ turns, apiKey: API_KEY });
  try {
    const anthropic = new Anthropic({ apiKey: API_KEY, baseURL: api.baseURL, maxRetries: 0 });
    await anthropic.beta.messages.toolRunner({
      model: 'claude-opus-5-5',
      max_tokens: 1024,
      messages: [{ role: 'user', content: prompt }],
      tools,
    });
    assert.deepEqual(api.violations, [], 'every request followed the API rules');
    // Request t + 1 answers turn t: its last message holds the tool results.
    return turns.slice(0, -1).map((_, t) => {
      const sent = api.requests[t + 1]!.body as { messages: { content: BetaToolResultBlockParam[] }[] };
      return sent.messages.at(-1)!.content;
    });
  } finally {
    await api.close();
  }
}

describe('SDK toolsets forward every call to a deskbatch daemon', () => {
  let display: VirtualDisplay;
  let web: WebServer;
  let daemon: TestDaemon;
  let computer: DeskbatchComputerToolset;
  let browser: DeskbatchBrowserToolset;
  /** A plain client, to see what the daemon itself answers. */
  let direct: DeskbatchClient;
  const events: ToolEvent[] = [];

  before(async () => {
    display = await startTestDisplay({ width: 1024, height: 768 });
    web = await startWebServer();
    web.route('/p', PAGE);
    daemon = await startTestDaemon({ display: display.display, browser: 'headless' });
    const connection = { url: daemon.url, token: TEST_TOKEN };
    computer = await DeskbatchComputerToolset.connect({
      ...connection,
      onToolEvent: (e) => events.push(e),
      // Everything may run except `key`, so a refusal by the SDK's own gate can be seen.
      confirm: ({ member }) => member !== 'key',
    });
    browser = await DeskbatchBrowserToolset.connect(connection);
    direct = await DeskbatchClient.connect(daemon.url, { token: TEST_TOKEN });
  });
  after(async () => {
    await computer?.close();
    await browser?.close();
    await direct?.close();
    await daemon?.close();
    await web?.close();
    await display?.stop();
  });

  /** What the daemon answers for the same call in a batch of its own. */
  async function daemonSays(toolUse: BetaToolUseBlock): Promise<BetaToolResultBlockParam> {
    const { toolResults } = await direct.runBatch([{ ...toolUse, id: `${toolUse.id}_direct` }]);
    const { tool_use_id: _, ...rest } = toolResults[0]!;
    return { ...rest, tool_use_id: toolUse.id };
  }

  test('the tools[] entries are the daemon’s own, and valid', () => {
    assert.deepEqual(JSON.parse(JSON.stringify([computer, browser])), direct.tools);
    assertToolsValid([computer.toJSON(), browser.toJSON()]);
    assert.equal(computer.toolsetName, 'computer');
    assert.equal(browser.toolsetName, 'browser');
  });

  test('mouse_move then cursor_position: the pointer is where the call put it', async () => {
    const move = use('computer', 'mouse_move', { coordinate: [100, 200] });
    const moved = await call(computer, move);
    assert.deepEqual(moved, {
      type: 'tool_result',
      tool_use_id: move.id,
      toolset_name: 'computer',
      content: [{ type: 'text', text: 'Moved the mouse.' }],
    });
    assert.deepEqual(texts(await daemonSays(move)), texts(moved), 'the same acknowledgment the daemon sends');
    const position = await call(computer, use('computer', 'cursor_position'));
    assert.equal(position.is_error, undefined);
    assert.deepEqual(texts(position), ['X=100,Y=200']);
    // Each call was its own batch, run once: one `started` event per call.
    const started = events.filter((e) => e.phase === 'started').map((e) => e.tool_use_id);
    assert.deepEqual(started.slice(-2), [move.id, position.tool_use_id]);
  });

  test('a failed call is an is_error result with the daemon’s exact text', async () => {
    const bad = use('computer', 'mouse_move', { coordinate: [5000, 1] });
    const result = await call(computer, bad);
    assert.equal(result.is_error, true);
    assert.equal(result.toolset_name, 'computer');
    const expected = await daemonSays(bad);
    assert.equal(expected.is_error, true);
    assert.deepEqual(result.content, expected.content);
    assert.deepEqual(texts(result), ['coordinate [5000, 1] is outside the screenshot: x must be 0–1023 and y 0–767.']);
  });

  test('screenshot: one image, the size of the screen', async () => {
    const result = await call(computer, use('computer', 'screenshot'));
    const [image] = Array.isArray(result.content) ? result.content : [];
    assert.ok(image?.type === 'image' && image.source.type === 'base64');
    assert.equal(image.source.media_type, 'image/png');
    assert.deepEqual(imageSize(Buffer.from(image.source.data, 'base64')), { width: 1024, height: 768 });
  });

  test('a call the SDK’s confirm refuses never reaches the daemon', async () => {
    const key = use('computer', 'key', { text: 'ctrl+l' });
    const result = await call(computer, key);
    assert.equal(result.is_error, true);
    assert.match(texts(result).join('\n'), /did not grant permission to run 'key'/);
    assert.ok(!events.some((e) => e.tool_use_id === key.id), 'the daemon saw no event for it');
  });

  test('browser: navigate, read, open a tab, and a refused URL with the daemon’s text', async () => {
    const navigate = use('browser', 'navigate', { url: `${web.origin}/p` });
    const opened = await call(browser, navigate);
    assert.equal(opened.toolset_name, 'browser');
    assert.match(
      texts(opened)[0]!,
      new RegExp(`^Navigated to http://127\\.0\\.0\\.1:\\d+/p — ${PAGE_TITLE} \\(HTTP 200\\)$`),
    );
    const content = Array.isArray(opened.content) ? opened.content : [];
    const state = content.find((b) => b.type === 'browser_state');
    assert.ok(state?.type === 'browser_state');
    assert.deepEqual(
      state.tabs.map((t) => [t.title, t.active]),
      [[PAGE_TITLE, true]],
    );
    assert.deepEqual(state.state_changes, [{ type: 'tab_opened', tab_id: state.tabs[0]!.tab_id }]);

    const read = await call(browser, use('browser', 'get_page_text'));
    assert.deepEqual(texts(read), ['The secret word is heron.']);

    const tab = await call(browser, use('browser', 'new_tab'));
    assert.ok(Array.isArray(tab.content) && tab.content.length === 1, 'a tab member answers with one block');
    const tabState = tab.content[0]!;
    assert.ok(tabState.type === 'browser_state');
    assert.equal(tabState.tabs.length, 2);
    const active = tabState.tabs.find((t) => t.active);
    assert.deepEqual(tabState.state_changes, [{ type: 'tab_opened', tab_id: active!.tab_id }]);

    const refusedUse = use('browser', 'navigate', { url: 'file:///etc/passwd' });
    const refused = await call(browser, refusedUse);
    assert.equal(refused.is_error, true);
    assert.deepEqual(texts(refused), ['Refused: only http and https URLs can be opened, not file: URLs.']);
    assert.deepEqual(refused.content, (await daemonSays(refusedUse)).content);
  });

  test('the tool runner: one turn of mixed calls, each a batch of one, every request valid', async () => {
    const turns = await loadTurns('runner', { PAGE_URL: `${web.origin}/p` });
    const api = await startMessagesApi({ turns, apiKey: API_KEY });
    const anthropic = new Anthropic({ apiKey: API_KEY, baseURL: api.baseURL, maxRetries: 0 });
    const started: ToolEvent[] = [];
    const toolsets = await connectDeskbatchToolsets({
      url: daemon.url,
      token: TEST_TOKEN,
      onToolEvent: (e) => void (e.phase === 'started' && started.push(e)),
      computer: { confirm: ({ member }) => member !== 'key' },
    });
    try {
      const final = await anthropic.beta.messages.toolRunner({
        model: 'claude-opus-5-5',
        max_tokens: 1024,
        messages: [{ role: 'user', content: 'Read the page, then press ctrl+l.' }],
        tools: toolsets.tools,
      });
      assert.deepEqual(api.violations, [], 'every request followed the API rules');
      assert.equal(api.requests.length, 2);
      assert.deepEqual(final.content, turns[1]!.content);
      const first = api.requests[0]!.body as { tools: unknown };
      assert.deepEqual(first.tools, [{ type: 'computer_toolset_20260801' }, { type: 'browser_toolset_20260801' }]);
      // The runner continues a message thread: the second request carries only the new user turn.
      const second = api.requests[1]!.body as { messages: { role: string; content: BetaToolResultBlockParam[] }[] };
      const results = second.messages.at(-1)!.content;
      const byName = new Map(
        turns[0]!.content.flatMap((b) =>
          b.type === 'tool_use' ? [[b.name, results.find((r) => r.tool_use_id === b.id)!] as const] : [],
        ),
      );
      assert.match(texts(byName.get('navigate')!)[0]!, /^Navigated to http:\/\/127\.0\.0\.1:\d+\/p — /);
      assert.deepEqual(texts(byName.get('get_page_text')!), ['The secret word is heron.']);
      assert.deepEqual(texts(byName.get('mouse_move')!), ['Moved the mouse.']);
      assert.deepEqual(texts(byName.get('cursor_position')!), ['X=300,Y=400']);
      assert.equal(byName.get('key')!.is_error, true);
      assert.match(texts(byName.get('key')!).join(''), /did not grant permission/);
      assert.equal(byName.get('wait')!.is_error, true);
      assert.deepEqual(texts(byName.get('wait')!), ['Not executed: an earlier computer action in this turn failed.']);
      // The daemon ran the four calls that were allowed, each once, each in a batch of its own.
      assert.deepEqual(started.map((e) => e.name).sort(), [
        'cursor_position',
        'get_page_text',
        'mouse_move',
        'navigate',
      ]);
      assert.equal(new Set(started.map((e) => e.batch_id)).size, 4);
      assert.ok(started.every((e) => e.index === 0));
    } finally {
      await toolsets.close();
      await api.close();
    }
  });

  /**
   * The differential test of docs/PROTOCOL.md "Differences from the SDK runner": one recorded turn
   * through the SDK's own tool runner (with the deskbatch/sdk toolsets) and, as one batch, through
   * the daemon's wire path. Every result must be the same block for block: the turn holds only calls
   * where the two must agree (a malformed toolset call, a toolset and a tool this side does not
   * have, halts across them), so an allowed difference would need its own turn and its own reason.
   */
  test('the SDK runner and the daemon answer the same turn alike, block for block', async () => {
    const turns = await loadTurns('parity', { PAGE_URL: `${web.origin}/p` });
    const toolsets = await connectDeskbatchToolsets({
      url: daemon.url,
      token: TEST_TOKEN,
      computer: { confirm: () => true },
    });
    try {
      const [byRunner] = await runnerAnswers(turns, toolsets.tools, 'Try everything at once.');
      const uses = toolUsesOf(turns[0]!);
      const { toolResults: byDaemon } = await direct.runBatch(uses);
      assertSameResults(uses, byRunner!, byDaemon);
      // And they are what the SDK writes (spelled out, so the test names the rule it checks).
      assert.deepEqual(texts(byDaemon[1]!), ['X=300,Y=400']);
      assert.deepEqual(texts(byDaemon[2]!), [
        "Error: the 'computer' toolset could not run this call: its actions could not be run as sent (actions: 'left_click', 'type'); nothing in the batch was executed",
      ]);
      assert.deepEqual(texts(byDaemon[3]!), ['Not executed: an earlier computer action in this turn failed.']);
      assert.deepEqual(texts(byDaemon[4]!), ["Error: Toolset 'shell' member 'run' not found"]);
      assert.deepEqual(texts(byDaemon[5]!), ["Error: Toolset 'shell' member 'run' not found"]);
      assert.deepEqual(texts(byDaemon[6]!), ["Error: Tool 'bash' not found"]);
      assert.deepEqual(texts(byDaemon[7]!), [
        "Error: the 'browser' toolset could not run this call: the call has no 'actions' list (action: 'navigate'); nothing in the batch was executed",
      ]);
      assert.deepEqual(texts(byDaemon[8]!), ['Not executed: an earlier action in this turn failed.']);
    } finally {
      await toolsets.close();
    }
  });

  test('a member the daemon does not serve cannot be switched on', async () => {
    await assert.rejects(
      DeskbatchBrowserToolset.connect({
        url: daemon.url,
        token: TEST_TOKEN,
        configs: { javascript_exec: { enabled: true } },
        confirm: () => true,
      }),
      /configs enables 'javascript_exec', which this deskbatch daemon does not serve/,
    );
  });
});

/**
 * The differential test for the browser's rows of docs/PROTOCOL.md "Differences from the SDK runner":
 * a member the agent switched off in its own `configs` (the daemon learns them from `hello.tools`),
 * `new_tab` reporting only its own tab, and a dismissed dialog reported on the failing call's own
 * result. Two recorded turns go through the SDK's runner (with the deskbatch/sdk browser toolset)
 * and, each as one batch on a session of its own, through the daemon's wire path.
 */
describe('SDK runner and daemon alike: the browser rows', () => {
  let web: WebServer;
  let daemon: TestDaemon;

  before(async () => {
    web = await startWebServer();
    web.route('/p', PAGE);
    daemon = await startTestDaemon({
      display: undefined,
      browser: 'headless',
      browserSettings: { enable: ['javascript_exec'] },
    });
  });
  after(async () => {
    await daemon?.close();
    await web?.close();
  });

  test('find switched off by the agent, new_tab, and a notice on a failed call: the same block for block', async () => {
    const turns = await loadTurns('browserparity', { PAGE_URL: `${web.origin}/p` });
    const toolsets = await connectDeskbatchToolsets({
      url: daemon.url,
      token: TEST_TOKEN,
      computer: false,
      browser: { configs: { find: { enabled: false }, javascript_exec: { enabled: true } }, confirm: () => true },
    });
    let direct: DeskbatchClient | undefined;
    try {
      const byRunner = await runnerAnswers(turns, toolsets.tools, 'What is the secret word?');
      // The agent's tools[] as it sent them to the API, now in hello.tools: find is off for this session too.
      direct = await DeskbatchClient.connect(daemon.url, {
        token: TEST_TOKEN,
        agentTools: JSON.parse(JSON.stringify(toolsets.tools)) as AgentToolEntry[],
      });
      const byDaemon: BetaToolResultBlockParam[][] = [];
      for (const [t, answered] of byRunner.entries()) {
        const uses = toolUsesOf(turns[t]!);
        const { toolResults } = await direct.runBatch(uses);
        assertSameResults(uses, answered, toolResults);
        byDaemon.push(toolResults);
      }
      // Spelled out, so the test names the rules it checks.
      const [[, newTab, find, listTabs], [, failed, notRun]] = byDaemon as [
        BetaToolResultBlockParam[],
        BetaToolResultBlockParam[],
      ];
      const opened = (newTab!.content as { type: string; state_changes?: { type: string }[] }[])
        .filter((b) => b.type === 'browser_state')
        .flatMap((b) => b.state_changes ?? [])
        .filter((c) => c.type === 'tab_opened');
      assert.equal(opened.length, 1, 'new_tab reports its own tab_opened only');
      assert.deepEqual(texts(find!), [
        "The 'find' action is not permitted by this application's permissions and cannot be used in this session.",
      ]);
      assert.equal(find!.is_error, true);
      assert.equal(listTabs!.is_error, true, 'the refusal halts the browser toolset');
      assert.deepEqual(texts(failed!), ['The JavaScript threw TypeError.', 'An alert dialog "why" was dismissed.']);
      assert.equal(notRun!.is_error, true);
    } finally {
      await direct?.close();
      await toolsets.close();
    }
  });
});
