/**
 * The Messages API's rules for the tool_result blocks of one turn
 * (shared/contract/TOOLSET-CONTRACT.md A3, A4, B5, D1, F), checked on every
 * batch_result a test receives. The blocks are also typed as the SDK's
 * `BetaToolResultBlockParam`, so a shape the SDK does not accept fails to compile.
 */
import assert from 'node:assert/strict';
import type { BetaToolResultBlockParam } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { BatchResultSchema, type BatchResult, type ToolUse } from '../../src/protocol.ts';

const ID = /^[a-zA-Z0-9_-]+$/;
const MAX_SIDE_PX = 2000;
const MAX_VISUAL_TOKENS = 4784;
const MAX_IMAGE_BASE64 = 10 * 1024 * 1024;
const ALLOWED = new Map<string, readonly string[]>([
  ['computer', ['text', 'image']],
  ['browser', ['text', 'image', 'browser_state']],
]);

/** PNG/JPEG/WebP dimensions read from the bytes themselves, not from what the daemon claims. */
export function imageSize(data: Buffer): { width: number; height: number } {
  if (data.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))) {
    return { width: data.readUInt32BE(16), height: data.readUInt32BE(20) };
  }
  if (data[0] === 0xff && data[1] === 0xd8) {
    let i = 2;
    while (i < data.length) {
      const marker = data[i + 1]!;
      const len = data.readUInt16BE(i + 2);
      if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
        return { height: data.readUInt16BE(i + 5), width: data.readUInt16BE(i + 7) };
      }
      i += 2 + len;
    }
  }
  if (data.subarray(0, 4).toString() === 'RIFF' && data.subarray(8, 12).toString() === 'WEBP') {
    const chunk = data.subarray(12, 16).toString();
    if (chunk === 'VP8X') return { width: 1 + data.readUIntLE(24, 3), height: 1 + data.readUIntLE(27, 3) };
    if (chunk === 'VP8L') {
      const b = data.readUInt32LE(21);
      return { width: (b & 0x3fff) + 1, height: ((b >> 14) & 0x3fff) + 1 };
    }
    if (chunk === 'VP8 ') return { width: data.readUInt16LE(26) & 0x3fff, height: data.readUInt16LE(28) & 0x3fff };
  }
  throw new Error('unknown image format');
}

const TAB_MEMBERS = ['new_tab', 'list_tabs', 'switch_tab', 'close_tab'];

/** TOOLSET-CONTRACT C4 and F6-F7: browser_state only where allowed, and well-formed when there. */
function checkBrowserState(
  tu: ToolUse,
  isError: boolean,
  content: BatchResult['tool_results'][number]['content'],
  i: number,
): void {
  const states = content.filter((c) => c.type === 'browser_state');
  if (tu.toolset_name !== 'browser' || isError) {
    assert.equal(states.length, 0, `result ${i}: browser_state only on successful browser results`);
    return;
  }
  if (TAB_MEMBERS.includes(tu.name)) {
    assert.equal(content.length, 1, `result ${i}: a tab member answers with exactly one block`);
    assert.equal(states.length, 1, `result ${i}: that block is a browser_state`);
  }
  assert.ok(states.length <= 1, `result ${i}: at most one browser_state`);
  const state = states[0];
  if (!state || state.type !== 'browser_state') return;
  const ids = state.tabs.map((t) => t.tab_id);
  assert.equal(new Set(ids).size, ids.length, `result ${i}: no duplicate tab_id`);
  if (ids.length) assert.equal(state.tabs.filter((t) => t.active).length, 1, `result ${i}: exactly one active tab`);
  const downloads = new Set<string>();
  for (const change of state.state_changes ?? []) {
    if (change.type === 'tab_opened') assert.ok(ids.includes(change.tab_id), `result ${i}: tab_opened is in tabs`);
    else {
      assert.ok(!downloads.has(change.download_id), `result ${i}: one change per download`);
      downloads.add(change.download_id);
    }
  }
  if (tu.name === 'new_tab') {
    const opened = (state.state_changes ?? []).filter((c) => c.type === 'tab_opened');
    assert.equal(opened.length, 1, `result ${i}: new_tab reports exactly one tab_opened`);
    assert.equal(opened[0]!.type === 'tab_opened' && opened[0]!.tab_id, state.tabs.find((t) => t.active)?.tab_id);
  }
}

export function assertApiValid(toolUses: readonly ToolUse[], raw: unknown): BatchResult {
  const result = BatchResultSchema.parse(raw);
  const blocks: BetaToolResultBlockParam[] = result.tool_results;
  assert.equal(blocks.length, toolUses.length, 'one tool_result per tool_use');
  blocks.forEach((block, i) => {
    const tu = toolUses[i]!;
    assert.equal(block.type, 'tool_result');
    assert.equal(block.tool_use_id, tu.id, `result ${i} answers tool_use ${tu.id}, in order`);
    assert.match(block.tool_use_id, ID);
    if (tu.toolset_name) assert.equal(block.toolset_name, tu.toolset_name, `result ${i} echoes toolset_name`);
    else assert.equal(block.toolset_name, undefined, `result ${i} carries no toolset_name for a plain call`);
    const content = block.content;
    assert.ok(Array.isArray(content) && content.length > 0, `result ${i} has content`);
    const allowed = ALLOWED.get(tu.toolset_name ?? '') ?? ['text'];
    for (const c of content) {
      assert.ok(allowed.includes(c.type), `result ${i}: a ${c.type} block is not allowed`);
      if (block.is_error) assert.equal(c.type, 'text', `error result ${i} holds text only`);
      if (c.type === 'text') {
        assert.ok(c.text.length > 0, `result ${i}: no empty text`);
        assert.ok(c.text.isWellFormed(), `result ${i}: well-formed text`);
      }
      if (c.type === 'image') {
        assert.equal(c.source.type, 'base64');
        if (c.source.type !== 'base64') continue;
        assert.ok(c.source.data.length <= MAX_IMAGE_BASE64, 'image within 10 MB base64');
        const size = imageSize(Buffer.from(c.source.data, 'base64'));
        assert.ok(
          size.width <= MAX_SIDE_PX && size.height <= MAX_SIDE_PX,
          `image ${size.width}x${size.height} ≤ 2000 px`,
        );
        const tokens = Math.ceil(size.width / 28) * Math.ceil(size.height / 28);
        assert.ok(tokens <= MAX_VISUAL_TOKENS, `image ${tokens} visual tokens ≤ 4784`);
      }
    }
    if (block.is_error) assert.equal(block.is_error, true);
    checkBrowserState(tu, block.is_error === true, result.tool_results[i]!.content, i);
  });
  for (const f of result.failures) {
    assert.equal(blocks[f.index]?.tool_use_id, f.tool_use_id, 'failure index points at its result');
    assert.equal(blocks[f.index]?.is_error, true, 'a failed call has an error result');
  }
  return result;
}
