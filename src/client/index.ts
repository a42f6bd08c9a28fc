/**
 * deskbatch/client: a typed client for the deskbatch daemon (docs/PROTOCOL.md).
 *
 *   const client = await DeskbatchClient.connect('ws://127.0.0.1:8765/v1', { token });
 *   const msg = await anthropic.beta.messages.create({ ..., tools: [...client.tools, ...myTools] });
 *   const { deskbatch, own } = client.splitToolUses(msg.content);
 *   const { toolResults } = await client.runBatch(deskbatch);
 *   const content = mergeToolResults(msg.content, toolResults, await runMyTools(own));
 *
 * Reconnects resume the session and send waiting batches again under the same
 * batch id, so the daemon answers from its stored result: a dropped connection
 * never causes a second click. The SDK is not imported; its types fit.
 *
 * On a fleet (deploy/k8s), `DeskbatchClient.connectFleet('deskbatch.svc.cluster.local', { fleetKey })`
 * places the session on a pod with room, found through DNS, and keeps it there (fleet.ts).
 */
export {
  DeskbatchClient,
  type DeskbatchClientEvents,
  type RunBatchOptions,
  type RunBatchResult,
  type ToolsetTool,
} from './client.ts';
export {
  DocumentRefusedError,
  type DocumentSource,
  type StageOptions,
  type StagedDocumentInfo,
  type StagedDocumentList,
} from './documents.ts';
export { ClipboardError, type ClipboardContent } from './clipboard.ts';
export { LinkError, type ViewerLink } from './links.ts';
export { DownloadError, type DownloadInfo, type FetchedDownload } from './downloads.ts';
export {
  ProfileRefusedError,
  deleteProfile,
  exportProfile,
  importProfile,
  listProfiles,
  saveSessionProfile,
  type ProfileInfo,
  type ProfileList,
  type ProfileStored,
  type StorageState,
} from './profiles.ts';
export { podToken, type FleetOptions, type FleetPlacement, type FleetPod } from './fleet.ts';
export { DEFAULT_RECONNECT, type ClientState, type ConnectOptions, type ReconnectOptions } from './link.ts';
export {
  mergeToolResults,
  splitToolUses,
  type ContentBlockLike,
  type SplitToolUses,
  type ToolResultBlockLike,
  type ToolUseBlockLike,
  type ToolUseOf,
} from './content.ts';
export {
  BatchOutcomeUnknownError,
  BatchRefusedError,
  ClientClosedError,
  ConnectError,
  ConnectionLostError,
  DeskbatchError,
  HandshakeRefusedError,
  SessionLostError,
  ToolResultMismatchError,
  type OutcomeUnknownReason,
} from './errors.ts';
export type {
  AgentToolEntry,
  BatchResult,
  ErrorCode,
  ErrorInfo,
  Failure,
  ToolEvent,
  ToolEventPhase,
  ToolResult,
  ToolsetInfo,
  Welcome,
} from '../base/protocol.ts';
