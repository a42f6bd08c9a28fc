/** The result boundary: what a handler produces can never reach the API in a shape it rejects. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ContractViolationError, errorResult, successResult, type ImageRules } from '../src/executor/results.ts';
import type { ToolUse } from '../src/base/protocol.ts';
import type { BlockType, MemberOutput } from '../src/toolset-api/types.ts';
import { failsWith } from '../testkit/errors.ts';

const rules: ImageRules = { limits: { maxSidePx: 2000, maxVisualTokens: 4784 }, maxBase64Bytes: 10 * 1024 * 1024 };
const BROWSER: BlockType[] = ['text', 'image', 'browser_state'];
const tu: ToolUse = { type: 'tool_use', id: 'toolu_1', name: 'navigate', toolset_name: 'browser', input: {} };
const tab = (id: string, active = false) => ({
  tab_id: id,
  title: 't',
  url: 'https://a.example/',
  ...(active ? { active } : {}),
});
const state = (s: Extract<MemberOutput, { kind: 'browser_state' }>['state']): MemberOutput => ({
  kind: 'browser_state',
  state: s,
});

test('page-supplied titles and URLs lose control characters and are bounded', () => {
  const r = successResult(
    tu,
    [
      state({
        tabs: [
          { tab_id: 'tab-1', title: 'Evil\ntitle\u2028\u0085', url: `https://x/${'a'.repeat(5000)}`, active: true },
        ],
      }),
    ],
    BROWSER,
    rules,
  );
  const block = r.content[0]!;
  assert.equal(block.type, 'browser_state');
  if (block.type !== 'browser_state') return;
  // One line as the SDK's runner makes it: each run of line breaks and controls one space, trimmed.
  assert.equal(block.tabs[0]!.title, 'Evil title');
  // A URL too long is marked cut: `…` and its first 4095 code points.
  const url = `https://x/${'a'.repeat(5000)}`;
  assert.equal(block.tabs[0]!.url, `\u2026${url.slice(0, 4095)}`);
  assert.equal(r.toolset_name, 'browser');
});

test('browser_state rules are enforced, never sent broken', () => {
  const violates = (message: string | RegExp, outputs: MemberOutput[], allowed = BROWSER) =>
    assert.throws(() => successResult(tu, outputs, allowed, rules), failsWith(ContractViolationError, message));
  const oneActive = 'browser_state needs exactly one active tab';
  violates(oneActive, [state({ tabs: [tab('tab-1', true), tab('tab-2', true)] })]);
  violates(oneActive, [state({ tabs: [tab('tab-1'), tab('tab-2')] })]);
  violates('duplicate tab_id in browser_state', [state({ tabs: [tab('tab-1', true), tab('tab-1')] })]);
  violates('tab_opened for a tab not in tabs', [
    state({ tabs: [tab('tab-1', true)], state_changes: [{ type: 'tab_opened', tab_id: 'tab-9' }] }),
  ]);
  violates('two changes for one download', [
    state({
      tabs: [tab('tab-1', true)],
      state_changes: [
        { type: 'download_started', download_id: 'dl-1', url: 'u' },
        { type: 'download_completed', download_id: 'dl-1', url: 'u' },
      ],
    }),
  ]);
  violates('at most one browser_state block per result', [
    state({ tabs: [tab('tab-1', true)] }),
    state({ tabs: [tab('tab-1', true)] }),
  ]);
  violates(
    "a 'browser_state' block is not allowed in this toolset's results",
    [state({ tabs: [tab('tab-1', true)] })],
    ['text', 'image'],
  );
  // The schema's own report (zod's JSON): the limit on tabs, nothing else.
  violates(
    /^invalid browser_state: \[\s*\{\s*"origin": "array",\s*"code": "too_big",\s*"maximum": 100,\s*"inclusive": true,\s*"path": \[\s*"tabs"\s*\],\s*"message": "Too big: expected array to have <=100 items"\s*\}\s*\]$/,
    [state({ tabs: Array.from({ length: 101 }, (_, i) => tab(`tab-${i}`, i === 0)) })],
  );
});

test('an empty state_changes is omitted, and an empty inventory is allowed', () => {
  const r = successResult(tu, [state({ tabs: [], state_changes: [] })], BROWSER, rules);
  assert.deepEqual(r.content, [{ type: 'browser_state', tabs: [] }]);
});

test('error results are text only, never empty, cut to 4096 code points', () => {
  assert.deepEqual(errorResult(tu, '').content, [
    { type: 'text', text: 'The tool call failed with an empty error message.' },
  ]);
  const long = errorResult(tu, '😀'.repeat(5000)).content[0]!;
  assert.equal(long.type === 'text' && Array.from(long.text).length, 4096);
});

test('titles are cut at 4096 code points, never inside a character; bidi controls and lone surrogates are folded', () => {
  const r = successResult(
    tu,
    [
      state({
        tabs: [
          { tab_id: 'tab-1', title: '😀'.repeat(5000), url: '', active: true },
          { tab_id: 'tab-2', title: 'pay\u202ePAL \ud800 x', url: 'https://a.example/\u2066x', active: false },
        ],
      }),
    ],
    BROWSER,
    rules,
  );
  const block = r.content[0]!;
  assert.ok(block.type === 'browser_state');
  assert.equal(block.tabs[0]!.title, '😀'.repeat(4096));
  assert.equal(block.tabs[1]!.title, 'pay PAL \ufffd x');
  assert.equal(block.tabs[1]!.url, 'https://a.example/ x');
});

test('download URLs in state changes are cleaned like titles', () => {
  const r = successResult(
    tu,
    [
      state({
        tabs: [tab('tab-1', true)],
        state_changes: [
          { type: 'download_started', download_id: 'dl-1', url: `data:text/plain,${'x'.repeat(5000)}\n` },
        ],
      }),
    ],
    BROWSER,
    rules,
  );
  const block = r.content[0]!;
  assert.ok(block.type === 'browser_state');
  const change = block.state_changes![0]!;
  assert.ok(change.type === 'download_started');
  assert.equal(change.url, `\u2026data:text/plain,${'x'.repeat(4095 - 'data:text/plain,'.length)}`);
});
