/**
 * Type-level proof that the client library (src/client) fits the SDK's types
 * without importing the SDK: its results are `BetaToolResultBlockParam`s, its
 * `tools` entries are `BetaToolUnion`s, it takes the SDK's tool_use blocks, and
 * the merged content is a user message's content. Checked by `tsc --noEmit`.
 */
import type {
  BetaContentBlock,
  BetaContentBlockParam,
  BetaMessage,
  BetaToolResultBlockParam,
  BetaToolUnion,
  BetaToolUseBlock,
  BetaToolUseBlockParam,
  BetaToolsetToolUseBlock,
  BetaUserMessageParam,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import type { DeskbatchClient, RunBatchResult, ToolUseBlockLike, ToolUseOf } from '../../src/client/index.ts';
import { mergeToolResults } from '../../src/client/index.ts';
import type { Assert, SameSet } from './same.ts';

/** runBatch's tool_results go into a user message as they are. */
export type ResultsFit = Assert<RunBatchResult['toolResults'] extends BetaToolResultBlockParam[] ? true : false>;

/** `client.tools` goes into `tools[]` as it is. */
export type ToolsFit = Assert<DeskbatchClient['tools'] extends BetaToolUnion[] ? true : false>;

/** Splitting a response's content yields the SDK's own tool_use blocks, and runBatch takes them. */
export type SplitResponse = Assert<SameSet<ToolUseOf<BetaContentBlock>, BetaToolUseBlock>>;
export type SplitParams = Assert<SameSet<ToolUseOf<BetaContentBlockParam>, BetaToolUseBlockParam>>;
export type TakesResponseBlocks = Assert<BetaToolUseBlock extends ToolUseBlockLike ? true : false>;
export type TakesParamBlocks = Assert<BetaToolUseBlockParam extends ToolUseBlockLike ? true : false>;
export type TakesMemberBlocks = Assert<BetaToolsetToolUseBlock extends ToolUseBlockLike ? true : false>;

/** A whole turn compiles with SDK types end to end. */
export async function turn(client: DeskbatchClient, message: BetaMessage): Promise<BetaUserMessageParam> {
  const { deskbatch, own } = client.splitToolUses(message.content);
  const { toolResults } = await client.runBatch(deskbatch);
  const mine: BetaToolResultBlockParam[] = own.map((tu: BetaToolUseBlock) => ({
    type: 'tool_result',
    tool_use_id: tu.id,
    content: 'done',
  }));
  const content: BetaContentBlockParam[] = mergeToolResults(message.content, toolResults, mine, [
    { type: 'text', text: 'next' },
  ]);
  return { role: 'user', content };
}
