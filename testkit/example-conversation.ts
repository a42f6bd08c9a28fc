/**
 * What a run of the example agent must have sent the stand-in Messages API
 * (testkit/messages-api.ts) for the recorded `example-*` turns, whichever
 * agent sent it (examples/agent.ts, clients/python/examples/agent.py): three
 * requests that follow the API's rules, whose tool_results show the real page
 * and the real screen (a 1024x768 display).
 */
import assert from 'node:assert/strict';
import type { BetaMessage } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { imageSize } from './api-rules.ts';
import { EXAMPLE_PAGE_TITLE, type ApiRequest, type MessagesApi } from './messages-api.ts';

const COMPUTER_NOT_EXECUTED = 'Not executed: an earlier computer action in this turn failed.';

type Block = Record<string, unknown> & { type: string };
type Result = Block & { tool_use_id: string; content: Block[]; is_error?: boolean; toolset_name?: string };

/** The tool_results of a request's last (user) message, by tool_use id. */
export function resultsOf(request: ApiRequest | undefined): Map<string, Result> {
  assert.ok(request, 'the stand-in received the request');
  const messages = (request.body as { messages: { role: string; content: Block[] }[] }).messages;
  const last = messages[messages.length - 1]!;
  assert.equal(last.role, 'user');
  return new Map(
    last.content.filter((b): b is Result => b.type === 'tool_result').map((r) => [r.tool_use_id, r] as const),
  );
}

const textOf = (r: Result | undefined): string =>
  (r?.content ?? []).flatMap((b) => (b.type === 'text' ? [b.text as string] : [])).join('\n');

function toolUseIds(turn: BetaMessage): string[] {
  return turn.content.flatMap((b) => (b.type === 'tool_use' ? [b.id] : []));
}

/** Checks the three requests the stand-in received for the recorded `turns` (loadTurns('example', …)). */
export function checkExampleConversation(api: MessagesApi, turns: readonly BetaMessage[]): void {
  assert.deepEqual(api.violations, [], 'every request followed the API rules');
  assert.equal(api.requests.length, 3, 'one request per recorded turn, no more');
  assert.ok(api.requests.every((r) => r.status === 200));
  for (const r of api.requests) {
    const body = r.body as { tools: unknown; model: string };
    assert.deepEqual(body.tools, [{ type: 'computer_toolset_20260801' }, { type: 'browser_toolset_20260801' }]);
  }

  const [navigateId, readId] = toolUseIds(turns[0]!);
  const browser = resultsOf(api.requests[1]);
  assert.equal(browser.size, 2);
  const navigate = browser.get(navigateId!);
  assert.match(
    textOf(navigate),
    new RegExp(`^Navigated to http://127\\.0\\.0\\.1:\\d+/report — ${EXAMPLE_PAGE_TITLE} \\(HTTP 200\\)$`),
  );
  const state = navigate?.content.find((b) => b.type === 'browser_state') as { tabs: { title: string }[] } | undefined;
  assert.equal(state?.tabs[0]?.title, EXAMPLE_PAGE_TITLE, 'the browser_state names the real page');
  assert.match(textOf(browser.get(readId!)), /The secret word is pelican\./);

  const [shotId, moveId, cursorId] = toolUseIds(turns[1]!);
  const computer = resultsOf(api.requests[2]);
  const image = computer.get(shotId!)?.content[0] as { type: string; source: { data: string } } | undefined;
  assert.equal(image?.type, 'image');
  assert.deepEqual(imageSize(Buffer.from(image.source.data, 'base64')), { width: 1024, height: 768 });
  assert.equal(computer.get(moveId!)?.is_error, true);
  assert.match(textOf(computer.get(moveId!)), /^coordinate \[99999, 10\] is outside the screenshot/);
  assert.equal(computer.get(cursorId!)?.is_error, true);
  assert.equal(textOf(computer.get(cursorId!)), COMPUTER_NOT_EXECUTED);
}

/**
 * Checks what an example agent printed on stdout for the recorded `turns`, whichever language it is written in:
 * the session line, one line per tool turn, and the final text, four lines in all (`report` is the failure's message).
 */
export function checkExampleOutput(stdout: string, turns: readonly BetaMessage[], report: string): void {
  const lines = stdout.trimEnd().split('\n');
  assert.equal(lines.length, 4, report);
  assert.match(
    lines[0]!,
    /^deskbatch ws:\/\/127\.0\.0\.1:\d+\/v1: session s_\S+, offering computer \(17 members\), browser \(27 members\); model claude-opus-5-5$/,
  );
  assert.match(lines[1]!, /^turn 1: 2 calls \(browser 2\), 0 failed, \d+ ms$/);
  assert.match(
    lines[2]!,
    /^turn 2: 3 calls \(computer 3\), 1 failed \(mouse_move: ToolInputError\), 1 not run, \d+ ms$/,
  );
  const finalText = turns[2]!.content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join('\n');
  assert.equal(lines[3], `final (end_turn after 3 turns): ${finalText}`);
}
