/**
 * A file policy (the SDK's `filePolicy` option of the browser toolset) for a
 * deskbatch session: `file_upload.document_ids` go on to the daemon, which
 * uploads only documents this session staged (`DeskbatchClient.stage`,
 * docs/PROTOCOL.md "Staged documents") and refuses any other id, naming its
 * index. Without a file policy the SDK refuses every document id before the
 * daemon sees it.
 *
 *   const browser = await DeskbatchBrowserToolset.connect({ url, token, confirm, filePolicy: stagedDocumentsPolicy() });
 *   const doc = await browser.client.stage('report.pdf', { path: './report.pdf' }, { mediaType: 'application/pdf' });
 *
 * Paths and download paths stay `paths`' own policy (`base`): without one,
 * paths are refused with the SDK's text and download paths never shown, as
 * with no policy at all.
 */
import { ToolError, type BetaBrowserToolsetOptions } from '@anthropic-ai/sdk/helpers/beta/toolsets';

export type FilePolicy = NonNullable<BetaBrowserToolsetOptions['filePolicy']>;

/** The SDK's refusal of a path when no policy allows paths. */
const NO_UPLOAD_ROOTS = 'file_upload has no configured upload roots';

export function stagedDocumentsPolicy(base?: FilePolicy): FilePolicy {
  return {
    resolveUploadPaths: (ctx, paths) => {
      if (base) return base.resolveUploadPaths(ctx, paths);
      throw new ToolError(NO_UPLOAD_ROOTS);
    },
    // The daemon is the allowlist: a session's own staged ids and nothing else.
    resolveUploadDocuments: (_ctx, documentIds) => [...documentIds],
    isPathVisible: (path) => base?.isPathVisible(path) ?? false,
  };
}
