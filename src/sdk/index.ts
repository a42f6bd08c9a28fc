/**
 * deskbatch/sdk: the Anthropic SDK's computer and browser toolset classes,
 * backed by a deskbatch daemon, for the SDK's tool runner.
 *
 *   const computer = await DeskbatchComputerToolset.connect({ url, token, confirm: () => true });
 *   const final = await anthropic.beta.messages.toolRunner({ model, max_tokens, messages, tools: [computer] });
 *
 * Each call goes to the daemon as a batch of one (the runner calls members one
 * at a time); see src/sdk/toolsets.ts.
 */
export {
  DeskbatchBrowserToolset,
  DeskbatchComputerToolset,
  NOT_SENT_TEXT,
  OUTCOME_UNKNOWN_TEXT,
  connectDeskbatchToolsets,
  type DeskbatchBrowserToolsetOptions,
  type DeskbatchConnectOptions,
  type DeskbatchToolsets,
} from './toolsets.ts';
export { stagedDocumentsPolicy, type FilePolicy } from './file-policy.ts';
