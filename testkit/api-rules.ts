/**
 * The Messages API's rules for the tool_result blocks of one turn
 * (docs/TOOLSETS.md A3, A4, B5, D1, F), checked on every
 * batch_result a test receives. The blocks are also typed as the SDK's
 * `BetaToolResultBlockParam`, so a shape the SDK does not accept fails to compile.
 */
import assert from 'node:assert/strict';
import {
  BETA_BROWSER_MEMBER_NAME_VALUES,
  BETA_COMPUTER_MEMBER_NAME_VALUES,
  type BetaToolResultBlockParam,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { z } from 'zod';
import { BatchResultSchema, ResultBlockSchema, type BatchResult, type ToolUse } from '../src/base/protocol.ts';

const ID = /^[a-zA-Z0-9_-]+$/;
const MAX_SIDE_PX = 2000;
const MAX_VISUAL_TOKENS = 4784;
const MAX_IMAGE_BASE64 = 10_000_000; // the API's 10 MB per image, decimal
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

/** docs/TOOLSETS.md C4 and F6-F7: browser_state only where allowed, and well-formed when there. */
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

export interface ApiRulesOptions {
  /**
   * Client tools (no `toolset_name`) the daemon runs, by name: the older `computer` tool
   * (`computer_20250124`, `computer_20251124`). Their results may hold text and images.
   */
  clientTools?: readonly string[];
}

export function assertApiValid(toolUses: readonly ToolUse[], raw: unknown, options: ApiRulesOptions = {}): BatchResult {
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
    const clientTool = !tu.toolset_name && options.clientTools?.includes(tu.name) === true;
    const allowed = ALLOWED.get(tu.toolset_name ?? '') ?? (clientTool ? ['text', 'image'] : ['text']);
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

// ---------------------------------------------------------------- whole Messages API requests

/**
 * A rule of the Messages API that a request broke. The stand-in Messages API
 * (testkit/messages-api.ts) answers such a request with a 400
 * `invalid_request_error` carrying this message, as the real API would.
 */
export class ApiRuleError extends Error {
  override name = 'ApiRuleError';
}

function rule(ok: unknown, message: string): asserts ok {
  if (!ok) throw new ApiRuleError(message);
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A tool_use block as a request carries it (assistant turns sent back). */
export interface ToolUseLike {
  type: 'tool_use';
  id: string;
  name: string;
  toolset_name?: string | null;
  input?: unknown;
}

const TOOLSET_FAMILIES = new Map<string, string>([
  ['computer_toolset_20260801', 'computer'],
  ['browser_toolset_20260801', 'browser'],
]);
/** Members of each toolset entry type (the SDK's generated lists, so a new member needs no edit here). */
const TOOLSET_MEMBERS = new Map<string, readonly string[]>([
  ['computer_toolset_20260801', BETA_COMPUTER_MEMBER_NAME_VALUES],
  ['browser_toolset_20260801', BETA_BROWSER_MEMBER_NAME_VALUES],
]);
/** Members off unless `configs` enables them (docs/TOOLSETS.md C1). */
const DEFAULT_DISABLED = new Set(['javascript_exec', 'file_upload', 'read_console', 'read_network']);
const ENTRY_KEYS = new Set(['type', 'configs', 'cache_control', 'allowed_callers']);
/** Headers the API refuses alongside the toolsets (docs/TOOLSETS.md F11). */
const REFUSED_BETAS = ['fine-grained-tool-streaming-2025-05-14'];

/** docs/TOOLSETS.md B1, C1 and F11: the `tools[]` entries and `tool_choice`. */
export function assertToolsValid(tools: unknown, toolChoice?: unknown): void {
  if (tools === undefined) return;
  rule(Array.isArray(tools), 'tools must be an array');
  const seenTypes = new Set<string>();
  const names = new Set<string>();
  const families = new Set<string>();
  tools.forEach((tool, i) => {
    rule(isRecord(tool) && typeof tool.type === 'string', `tools.${i}: an entry needs a type`);
    const type = tool.type as string;
    const family = TOOLSET_FAMILIES.get(type);
    if (!family) {
      if (typeof tool.name === 'string') names.add(tool.name);
      seenTypes.add(type);
      return;
    }
    rule(!seenTypes.has(type), `tools.${i}: a second ${type} entry`);
    seenTypes.add(type);
    families.add(family);
    for (const key of Object.keys(tool)) {
      rule(ENTRY_KEYS.has(key), `tools.${i}: ${type} entries carry no '${key}' (only type, configs, cache_control)`);
    }
    if (tool.allowed_callers !== undefined) {
      rule(
        Array.isArray(tool.allowed_callers) &&
          tool.allowed_callers.length === 1 &&
          tool.allowed_callers[0] === 'direct',
        `tools.${i}: allowed_callers accepts only ["direct"]`,
      );
    }
    const members = TOOLSET_MEMBERS.get(type)!;
    const configs = tool.configs ?? {};
    rule(isRecord(configs), `tools.${i}: configs must be an object`);
    const deferred = new Set<boolean>();
    let enabledCount = 0;
    for (const member of members) {
      const config = configs[member];
      if (config !== undefined && config !== null) {
        rule(isRecord(config), `tools.${i}: configs.${member} must be an object`);
        for (const [key, value] of Object.entries(config)) {
          rule(
            key === 'enabled' || key === 'defer_loading',
            `tools.${i}: configs.${member} has an unknown field '${key}'`,
          );
          rule(
            value === null || typeof value === 'boolean',
            `tools.${i}: configs.${member}.${key} must be a boolean or null`,
          );
        }
      }
      const entry = isRecord(config) ? config : {};
      const enabled =
        typeof entry.enabled === 'boolean' ? entry.enabled : !DEFAULT_DISABLED.has(member) || family !== 'browser';
      if (!enabled) continue;
      enabledCount++;
      deferred.add(entry.defer_loading === true);
    }
    for (const key of Object.keys(configs)) {
      rule(members.includes(key), `tools.${i}: configs has an unknown member '${key}'`);
    }
    rule(enabledCount > 0, `tools.${i}: configs disables every member`);
    rule(deferred.size <= 1, `tools.${i}: defer_loading must be the same on every enabled member`);
  });
  for (const family of families) rule(!names.has(family), `no other tool may be named '${family}'`);
  if (families.has('computer')) {
    const legacy = [...seenTypes].find((t) => /^computer_\d/.test(t));
    rule(legacy === undefined, `${legacy} cannot share a request with computer_toolset_20260801`);
  }
  if (isRecord(toolChoice) && toolChoice.type === 'tool') {
    const name = toolChoice.name;
    const members = [...seenTypes].flatMap((t) => TOOLSET_MEMBERS.get(t) ?? []);
    rule(
      typeof name === 'string' && !families.has(name) && !members.includes(name),
      'tool_choice of type tool may not name a toolset or a toolset member',
    );
  }
}

function assertImageValid(block: Record<string, unknown>, where: string): void {
  const source = block.source;
  rule(isRecord(source) && source.type === 'base64', `${where}: images are sent as base64`);
  rule(
    ['image/png', 'image/jpeg', 'image/webp', 'image/gif'].includes(source.media_type as string),
    `${where}: media_type`,
  );
  rule(typeof source.data === 'string' && source.data.length > 0, `${where}: image data`);
  rule(source.data.length <= MAX_IMAGE_BASE64, `${where}: image within 10 MB base64`);
  const size = imageSize(Buffer.from(source.data, 'base64'));
  rule(
    size.width <= MAX_SIDE_PX && size.height <= MAX_SIDE_PX,
    `${where}: image ${size.width}x${size.height} ≤ 2000 px`,
  );
  const tokens = Math.ceil(size.width / 28) * Math.ceil(size.height / 28);
  rule(tokens <= MAX_VISUAL_TOKENS, `${where}: image of ${tokens} visual tokens ≤ 4784`);
}

/**
 * One tool_result block against the tool_use it answers (docs/TOOLSETS.md A3,
 * B5, C4, D1, F): id, `toolset_name` echoed exactly and only on member
 * results, only the toolset's block types, error results text only and never
 * empty, no empty text, images within the limits, browser_state valid. The
 * block is taken as JSON (content may be a string, as the SDK sends some).
 */
export function assertToolResultValid(toolUse: ToolUseLike, block: unknown, where = 'tool_result'): void {
  rule(isRecord(block) && block.type === 'tool_result', `${where}: not a tool_result`);
  rule(block.tool_use_id === toolUse.id, `${where}: answers ${String(block.tool_use_id)}, not ${toolUse.id}`);
  rule(typeof block.tool_use_id === 'string' && ID.test(block.tool_use_id), `${where}: tool_use_id pattern`);
  const family = toolUse.toolset_name ?? undefined;
  const echoed = block.toolset_name ?? undefined;
  if (family) rule(echoed === family, `${where}: toolset_name must echo '${family}', got ${JSON.stringify(echoed)}`);
  else rule(echoed === undefined, `${where}: toolset_name on the result of a plain tool call`);
  const isError = block.is_error === true;
  rule(block.is_error === undefined || typeof block.is_error === 'boolean', `${where}: is_error is a boolean`);
  const raw = block.content ?? [];
  if (typeof raw === 'string') {
    rule(!isError || raw.length > 0, `${where}: an error result needs text`);
    return;
  }
  rule(Array.isArray(raw), `${where}: content is a string or an array`);
  const allowed = family
    ? (ALLOWED.get(family) ?? ['text'])
    : ['text', 'image', 'search_result', 'document', 'tool_reference'];
  raw.forEach((c: unknown, j) => {
    const at = `${where}.content.${j}`;
    rule(isRecord(c) && typeof c.type === 'string', `${at}: a block needs a type`);
    rule(allowed.includes(c.type), `${at}: a ${c.type} block is not allowed in a ${family ?? 'plain'} result`);
    if (isError) rule(c.type === 'text', `${at}: an is_error result holds text only`);
    if (c.type === 'text') {
      rule(typeof c.text === 'string' && c.text.length > 0, `${at}: no empty text`);
      rule(c.text.isWellFormed(), `${at}: well-formed text`);
    }
    if (c.type === 'image') assertImageValid(c, at);
  });
  if (isError) {
    rule(raw.length > 0, `${where}: an error result needs text`);
    return;
  }
  if (family === 'browser') {
    const content = z.array(ResultBlockSchema).safeParse(raw);
    rule(content.success, `${where}: browser content: ${content.success ? '' : content.error.message}`);
    try {
      checkBrowserState(toolUse as ToolUse, false, content.data, 0);
    } catch (err) {
      throw new ApiRuleError(`${where}: ${(err as Error).message}`);
    }
  }
}

/**
 * Every tool_use of an assistant turn is answered in the very next user
 * message: exactly one tool_result per tool_use with the same id, no result
 * for anything else, every tool_result before any other block (docs/TOOLSETS.md A4, F1-F2).
 */
export function assertTurnAnswered(assistant: unknown, next: unknown, where = 'messages'): void {
  rule(isRecord(assistant) && Array.isArray(assistant.content), `${where}: assistant content`);
  const toolUses = (assistant.content as unknown[]).filter(
    (b): b is ToolUseLike => isRecord(b) && b.type === 'tool_use',
  );
  if (toolUses.length === 0) return;
  rule(
    isRecord(next) && next.role === 'user' && Array.isArray(next.content),
    `${where}: tool_use ids were found without tool_result blocks immediately after: ${toolUses.map((t) => t.id).join(', ')}`,
  );
  const content = next.content as unknown[];
  const firstOther = content.findIndex((b) => !isRecord(b) || b.type !== 'tool_result');
  const results = firstOther === -1 ? content : content.slice(0, firstOther);
  rule(
    content.slice(results.length).every((b) => !isRecord(b) || b.type !== 'tool_result'),
    `${where}: tool_result blocks must come first in the user message, before any other content`,
  );
  const byId = new Map<string, unknown>();
  for (const r of results as Record<string, unknown>[]) {
    const id = String(r.tool_use_id);
    rule(!byId.has(id), `${where}: tool_use ${id} has more than one tool_result`);
    rule(
      toolUses.some((t) => t.id === id),
      `${where}: tool_result ${id} answers no tool_use of the previous assistant message`,
    );
    byId.set(id, r);
  }
  const missing = toolUses.filter((t) => !byId.has(t.id)).map((t) => t.id);
  rule(
    missing.length === 0,
    `${where}: tool_use ids were found without tool_result blocks immediately after: ${missing.join(', ')}`,
  );
  for (const t of toolUses) {
    rule(ID.test(t.id), `${where}: tool_use id pattern`);
    assertToolResultValid(t, byId.get(t.id), `${where}: result for ${t.id}`);
  }
}

/**
 * A whole `POST /v1/messages` body and its headers against the API's rules
 * that matter to a toolset agent: model and max_tokens present, `tools[]`
 * entries valid, every assistant turn's tool_uses answered right after it,
 * no refused beta header. Throws `ApiRuleError` naming the broken rule.
 */
export function assertMessagesRequestValid(
  body: unknown,
  headers: Record<string, string | string[] | undefined> = {},
): void {
  rule(isRecord(body), 'the body must be a JSON object');
  rule(typeof body.model === 'string' && body.model.length > 0, 'model: required');
  rule(Number.isInteger(body.max_tokens) && (body.max_tokens as number) > 0, 'max_tokens: a positive integer');
  const beta = [headers['anthropic-beta'] ?? []].flat().join(',');
  for (const refused of REFUSED_BETAS) rule(!beta.includes(refused), `the ${refused} header is refused`);
  rule(headers['anthropic-version'] !== undefined, 'anthropic-version header: required');
  assertToolsValid(body.tools, body.tool_choice);
  const messages = body.messages;
  rule(Array.isArray(messages) && messages.length > 0, 'messages: at least one');
  rule(messages.length <= 100_000, 'messages: at most 100,000');
  messages.forEach((m: unknown, i) => {
    rule(isRecord(m) && (m.role === 'user' || m.role === 'assistant'), `messages.${i}: role`);
    rule(typeof m.content === 'string' || Array.isArray(m.content), `messages.${i}: content`);
  });
  rule((messages[0] as Record<string, unknown>).role === 'user', 'messages.0: the first message is a user message');
  messages.forEach((m: Record<string, unknown>, i) => {
    if (m.role === 'assistant') assertTurnAnswered(m, messages[i + 1], `messages.${i + 1}`);
    if (m.role === 'user' && Array.isArray(m.content)) {
      const prev = messages[i - 1] as Record<string, unknown> | undefined;
      const hasResults = m.content.some((b: unknown) => isRecord(b) && b.type === 'tool_result');
      rule(
        !hasResults || prev?.role === 'assistant',
        `messages.${i}: tool_result blocks must answer the assistant message just before`,
      );
    }
  });
}
