/**
 * Type-level proof that the deskbatch toolsets (src/sdk) are what the SDK
 * takes: runnable toolsets for the tool runner's `tools`, serialising to the
 * SDK's `tools[]` entry types, answering with `BetaToolResultBlockParam`s that
 * go into a user message as they are. Checked by `tsc --noEmit`.
 */
import type Anthropic from '@anthropic-ai/sdk';
import type { BetaRunnableToolset } from '@anthropic-ai/sdk/helpers/beta/toolsets';
import type { BetaToolRunnerParams } from '@anthropic-ai/sdk/lib/tools/BetaToolRunner';
import type {
  BetaBrowserToolset20260801,
  BetaComputerToolset20260801,
  BetaContentBlockParam,
  BetaToolResultBlockParam,
  BetaToolUnion,
  BetaToolUseBlock,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import type { DeskbatchBrowserToolset, DeskbatchComputerToolset, DeskbatchToolsets } from '../../src/sdk/index.ts';
import type { Assert } from './same.ts';

export type ComputerIsRunnable = Assert<
  DeskbatchComputerToolset extends BetaRunnableToolset<BetaComputerToolset20260801> ? true : false
>;
export type BrowserIsRunnable = Assert<
  DeskbatchBrowserToolset extends BetaRunnableToolset<BetaBrowserToolset20260801> ? true : false
>;

/** What the runner sends for them: the SDK's own entry types, which are `tools[]` entries. */
export type ComputerEntry = Assert<ReturnType<DeskbatchComputerToolset['toJSON']> extends BetaToolUnion ? true : false>;
export type BrowserEntry = Assert<ReturnType<DeskbatchBrowserToolset['toJSON']> extends BetaToolUnion ? true : false>;

/** `connectDeskbatchToolsets(...).tools` is a valid `tools` for the runner. */
export type ToolsFitRunner = Assert<DeskbatchToolsets['tools'] extends BetaToolRunnerParams['tools'] ? true : false>;

/** A hand-written loop: each member call answered with a block the next user message takes as it is. */
export async function answer(
  computer: DeskbatchComputerToolset,
  browser: DeskbatchBrowserToolset,
  toolUse: BetaToolUseBlock,
): Promise<BetaContentBlockParam[]> {
  const toolset = toolUse.toolset_name === 'computer' ? computer : browser;
  const result: BetaToolResultBlockParam = await toolset.toolResult(toolUse);
  return [result];
}

/** The one-line use with the tool runner compiles. */
export function run(anthropic: Anthropic, toolsets: DeskbatchToolsets) {
  return anthropic.beta.messages.toolRunner({
    model: 'claude-opus-5-5',
    max_tokens: 1024,
    messages: [{ role: 'user', content: 'Open example.com' }],
    tools: toolsets.tools,
  });
}
