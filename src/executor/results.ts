/**
 * The result boundary: the one place where handler output becomes API content.
 * Everything the Messages API would reject is stopped here (docs/TOOLSETS.md
 * A3, D1, F): `toolset_name` echoed exactly and only on member results, only
 * the toolset's allowed block types, no empty text, error results text-only,
 * well-formed Unicode, bounded error text, images within the image limits.
 */
import {
  BrowserStateBlockSchema,
  type BrowserStateBlock,
  type BrowserStateChange,
  type ImageBlock,
  type ResultBlock,
  type ToolResult,
  type ToolUse,
} from '../base/protocol.ts';
import type { CapturedImage } from '../base/image.ts';
import { fitsLimits, type ScreenshotLimits } from '../base/geometry.ts';
import type { BlockType, MemberOutput } from '../toolset-api/types.ts';
import { EMPTY_TEXT } from '../toolset-api/text.ts';
import { ERROR_TEXT_MAX_CODE_POINTS } from './failure.ts';
import { cutPoints, oneLine } from '../base/text.ts';

/** What the SDK sends for an error with no text (an empty error is a 400). */
export const EMPTY_ERROR_TEXT = 'The tool call failed with an empty error message.';

/** A handler produced something the API would reject. Never sent to the API. */
export class ContractViolationError extends Error {
  readonly code = 'ERR_CONTRACT_VIOLATION';
  override readonly name = 'ContractViolationError';
}

export interface ImageRules {
  limits: ScreenshotLimits;
  /** Largest base64 payload per image (10 MB on the Claude API, 5 MB on Bedrock and Vertex). */
  maxBase64Bytes: number;
}

/** Replaces lone surrogates with U+FFFD (the SDK's `wellFormed`); JSON of them is not valid UTF-8. */
export function wellFormed(text: string): string {
  return text.toWellFormed();
}

function base(toolUse: ToolUse): Pick<ToolResult, 'type' | 'tool_use_id' | 'toolset_name'> {
  return {
    type: 'tool_result',
    tool_use_id: toolUse.id,
    ...(toolUse.toolset_name ? { toolset_name: toolUse.toolset_name } : {}),
  };
}

/**
 * An `is_error` result: a non-empty, well-formed text block of bounded length,
 * then one text block per note the daemon wrote for the model (CallContext.noteOnFailure).
 */
export function errorResult(toolUse: ToolUse, text: string, notes: readonly string[] = []): ToolResult {
  const clean = cutPoints(wellFormed(text), ERROR_TEXT_MAX_CODE_POINTS);
  const lines = notes.map((n) => cutPoints(wellFormed(n), ERROR_TEXT_MAX_CODE_POINTS)).filter((n) => n !== '');
  return {
    ...base(toolUse),
    is_error: true,
    content: [clean || EMPTY_ERROR_TEXT, ...lines].map((t) => ({ type: 'text' as const, text: t })),
  };
}

function imageBlock(image: CapturedImage, rules: ImageRules): ImageBlock {
  if (!fitsLimits(image, rules.limits)) {
    throw new ContractViolationError(`image ${image.width}x${image.height} exceeds the image limits`);
  }
  const data = image.data.toString('base64');
  if (data.length > rules.maxBase64Bytes) {
    throw new ContractViolationError(`image of ${data.length} base64 bytes exceeds ${rules.maxBase64Bytes}`);
  }
  return { type: 'image', source: { type: 'base64', media_type: image.mediaType, data } };
}

/** Longest string in a browser_state block, in code points (docs/TOOLSETS.md C4). */
const STATE_STRING_MAX = 4096;

/** A page title (or another page-supplied string) on one line, at most 4096 code points, as the SDK's runner holds it. */
export function stateString(value: string): string {
  return cutPoints(oneLine(value), STATE_STRING_MAX);
}

/**
 * A URL on one line; a longer one than 4096 code points becomes `…` and its
 * first 4095, as the SDK's runner writes it, so that the cut text is not
 * taken for a whole address.
 */
export function stateUrl(value: string): string {
  const line = oneLine(value);
  const cut = cutPoints(line, STATE_STRING_MAX);
  return cut === line ? line : `\u2026${cutPoints(line, STATE_STRING_MAX - 1)}`;
}

/** Every string of a state change is page-supplied: URLs through stateUrl, the rest through stateString. */
function cleanChange(change: BrowserStateChange): BrowserStateChange {
  return Object.fromEntries(
    Object.entries(change).map(([k, v]) => [k, typeof v !== 'string' ? v : k === 'url' ? stateUrl(v) : stateString(v)]),
  ) as BrowserStateChange;
}

/** Validates a browser_state against the API's rules; a violation is the daemon's bug, never sent. */
function browserStateBlock(state: Omit<BrowserStateBlock, 'type'>): BrowserStateBlock {
  const tabs = state.tabs.map((t) => ({
    tab_id: t.tab_id,
    title: stateString(t.title),
    url: stateUrl(t.url),
    ...(t.active ? { active: true } : {}),
  }));
  const block: BrowserStateBlock = {
    type: 'browser_state',
    tabs,
    ...(state.state_changes?.length ? { state_changes: state.state_changes.map(cleanChange) } : {}),
  };
  const parsed = BrowserStateBlockSchema.safeParse(block);
  if (!parsed.success) throw new ContractViolationError(`invalid browser_state: ${parsed.error.message}`);
  const ids = new Set(tabs.map((t) => t.tab_id));
  if (ids.size !== tabs.length) throw new ContractViolationError('duplicate tab_id in browser_state');
  if (tabs.length > 0 && tabs.filter((t) => t.active).length !== 1) {
    throw new ContractViolationError('browser_state needs exactly one active tab');
  }
  const downloads = new Set<string>();
  for (const change of block.state_changes ?? []) {
    if (change.type === 'tab_opened') {
      if (!ids.has(change.tab_id)) throw new ContractViolationError('tab_opened for a tab not in tabs');
    } else {
      if (downloads.has(change.download_id)) throw new ContractViolationError('two changes for one download');
      downloads.add(change.download_id);
    }
  }
  return block;
}

/**
 * A success result from handler output. Throws ContractViolationError when
 * the output holds a block type the toolset may not send or an image over the
 * limits; the executor turns that into a failure of the call.
 */
export function successResult(
  toolUse: ToolUse,
  outputs: readonly MemberOutput[],
  allowed: readonly BlockType[],
  rules: ImageRules,
): ToolResult {
  const content: ResultBlock[] = [];
  for (const out of outputs) {
    const blockType: BlockType = out.kind;
    if (!allowed.includes(blockType)) {
      throw new ContractViolationError(`a '${blockType}' block is not allowed in this toolset's results`);
    }
    if (out.kind === 'text') {
      const text = wellFormed(out.text);
      if (text) content.push({ type: 'text', text });
    } else if (out.kind === 'image') {
      content.push(imageBlock(out.image, rules));
    } else {
      content.push(browserStateBlock(out.state));
    }
  }
  if (content.filter((b) => b.type === 'browser_state').length > 1) {
    throw new ContractViolationError('at most one browser_state block per result');
  }
  // A browser_state-only result (a tab member) is complete as it is.
  if (content.length === 0) content.push({ type: 'text', text: EMPTY_TEXT });
  return { ...base(toolUse), content };
}
