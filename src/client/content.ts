/**
 * Splitting an assistant message into the calls deskbatch runs and the
 * caller's own tool calls, and merging both sets of results back into the
 * next user message: every `tool_result` first, in the order of the
 * `tool_use` blocks, exactly one per `tool_use`, then any other content.
 *
 * Typed structurally, so the SDK's block unions (`BetaContentBlock`,
 * `BetaContentBlockParam`) fit without this module importing the SDK.
 */
import { ToolResultMismatchError } from './errors.ts';

/** The least every content block has. */
export interface ContentBlockLike {
  type: string;
}

/** A `tool_use` block as the Messages API returns it (the SDK's `BetaToolUseBlock` fits). */
export interface ToolUseBlockLike {
  type: 'tool_use';
  id: string;
  name: string;
  input: unknown;
  /** Set on toolset member calls (`computer`, `browser`); absent or null for plain tools. */
  toolset_name?: string | null;
}

/** A `tool_result` block (the SDK's `BetaToolResultBlockParam` and deskbatch's results fit). */
export interface ToolResultBlockLike {
  type: 'tool_result';
  tool_use_id: string;
}

/** The `tool_use` members of a block union `B`, or `ToolUseBlockLike` when `B` names none. */
export type ToolUseOf<B> = [Extract<B, { type: 'tool_use' }>] extends [never]
  ? ToolUseBlockLike
  : Extract<B, { type: 'tool_use' }>;

export interface SplitToolUses<T> {
  /** Calls of a toolset deskbatch serves: pass them to `runBatch`. */
  deskbatch: T[];
  /** Every other `tool_use`: the caller's own tools (and toolsets deskbatch does not serve). */
  own: T[];
}

/** The name of the older computer tools' one client tool (`computer_20250124`, `computer_20251124`). */
export const LEGACY_COMPUTER_TOOL = 'computer';

export interface SplitOptions {
  /** Also send calls of the older `computer` tool (no `toolset_name`) to deskbatch. Default false. */
  legacyComputer?: boolean;
}

function isToolUse<B extends ContentBlockLike>(block: B): block is B & ToolUseOf<B> {
  return block.type === 'tool_use';
}

/**
 * Splits an assistant message's content: `tool_use` blocks whose
 * `toolset_name` is one of `servedToolsets` (from `welcome`) go to deskbatch,
 * every other `tool_use` is the caller's own (with `legacyComputer`, calls of the
 * older `computer` tool go to deskbatch too). Order is kept within each list;
 * blocks that are not `tool_use` (text, thinking, server tool calls) are left out.
 */
export function splitToolUses<B extends ContentBlockLike>(
  assistantContent: readonly B[],
  servedToolsets: Iterable<string>,
  options: SplitOptions = {},
): SplitToolUses<ToolUseOf<B>> {
  const served = new Set(servedToolsets);
  const out: SplitToolUses<ToolUseOf<B>> = { deskbatch: [], own: [] };
  for (const block of assistantContent) {
    if (!isToolUse(block)) continue;
    const plain = block as ContentBlockLike as ToolUseBlockLike;
    const toolset = plain.toolset_name;
    const ours =
      typeof toolset === 'string'
        ? served.has(toolset)
        : options.legacyComputer === true && plain.name === LEGACY_COMPUTER_TOOL;
    (ours ? out.deskbatch : out.own).push(block);
  }
  return out;
}

/**
 * The next user message's content: one `tool_result` per `tool_use` of
 * `assistantContent`, in the `tool_use` order (from `deskbatchResults` and
 * `ownResults`, whichever holds it), then `extra` (text, images). Throws
 * `ToolResultMismatchError` when a `tool_use` has no result or two, when a
 * result answers no `tool_use`, or when `extra` holds a `tool_result`.
 */
export function mergeToolResults<
  D extends ToolResultBlockLike,
  O extends ToolResultBlockLike = never,
  E extends ContentBlockLike = never,
>(
  assistantContent: readonly ContentBlockLike[],
  deskbatchResults: readonly D[],
  ownResults: readonly O[] = [],
  extra: readonly E[] = [],
): (D | O | E)[] {
  for (const block of extra) {
    if (block.type === 'tool_result') {
      const id = (block as ContentBlockLike & Partial<ToolResultBlockLike>).tool_use_id ?? '';
      throw new ToolResultMismatchError(
        'misplaced',
        id,
        `tool_result ${id} was passed as extra content; pass it in the results so it comes first`,
      );
    }
  }
  const order: string[] = [];
  const asked = new Set<string>();
  for (const block of assistantContent) {
    if (!isToolUse(block)) continue;
    const { id } = block as ToolUseBlockLike;
    if (asked.has(id)) {
      throw new ToolResultMismatchError(
        'duplicate_tool_use',
        id,
        `the assistant message has two tool_use blocks ${id}`,
      );
    }
    asked.add(id);
    order.push(id);
  }
  const byId = new Map<string, D | O>();
  for (const result of [...deskbatchResults, ...ownResults]) {
    const id = result.tool_use_id;
    if (!asked.has(id)) {
      throw new ToolResultMismatchError(
        'unknown',
        id,
        `tool_result ${id} answers no tool_use of the assistant message`,
      );
    }
    if (byId.has(id)) {
      throw new ToolResultMismatchError('duplicate', id, `tool_use ${id} has more than one tool_result`);
    }
    byId.set(id, result);
  }
  const merged: (D | O | E)[] = order.map((id) => {
    const result = byId.get(id);
    if (!result) throw new ToolResultMismatchError('missing', id, `tool_use ${id} has no tool_result`);
    return result;
  });
  merged.push(...extra);
  return merged;
}
