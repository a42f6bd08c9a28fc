/**
 * The members the API leaves off unless the operator enables them
 * (docs/TOOLSETS.md C1, C3): `javascript_exec`, `read_console`,
 * `read_network`, `file_upload`. index.ts serves them only when enabled.
 */
import { readFile, realpath, stat } from 'node:fs/promises';
import { basename, isAbsolute, relative, sep } from 'node:path';
import type { Request } from 'playwright';
import { z } from 'zod';
import { oneLine } from '../../src/base/text.ts';
import { refElement } from '../../src/browser/frame-worlds.ts';
import { ToolInputError, ToolRefusedError } from '../../src/base/errors.ts';
import { orAfter } from '../../src/base/resilience.ts';
import { mediaTypeOf } from '../../src/base/media-types.ts';
import type { StagedDocument } from '../../src/toolset-api/types.ts';
import { browserMember, refTarget, tabId } from './context.ts';

/** Longest text a reading member returns, in UTF-16 code units (the read_page convention). */
const TEXT_MAX = 50_000;
/** Longest URL in a read_network line. */
const NETWORK_URL_MAX = 500;
/** Longest javascript_exec source accepted. */
const SCRIPT_MAX = 100_000;
/** javascript_exec must return well inside the call's time limit. */
const SCRIPT_TIMEOUT_MS = 20_000;
const MAX_UPLOAD_FILES = 100;

/** Lines joined and cut to TEXT_MAX, saying so when cut; `empty` when there are none. */
function bounded(lines: string[], empty: string): string {
  if (!lines.length) return empty;
  const text = lines.join('\n');
  if (text.length <= TEXT_MAX) return text;
  const cut = text.slice(0, TEXT_MAX).lastIndexOf('\n');
  return `${text.slice(0, cut > 0 ? cut : TEXT_MAX)}\n[cut at ${TEXT_MAX} characters]`;
}

export const javascriptExec = browserMember({
  optional: true,
  name: 'javascript_exec',
  summary: 'Evaluate a JavaScript expression in the page and return its value as text.',
  kind: 'text',
  effect: 'write',
  input: z.object({
    text: z
      .string()
      .min(1)
      .max(SCRIPT_MAX)
      .describe('JavaScript to run in the page; the value of the last expression is returned (no `return`).'),
    tab_id: tabId,
  }),
  async handle(input, ctx) {
    const { page } = await ctx.tab(input.tab_id);
    // evaluateHandle runs the source as a script (CSP cannot block it); a promise is awaited.
    const run = page.evaluateHandle(input.text).then((handle) =>
      handle
        .evaluate((v) => {
          if (typeof v === 'object' && v !== null) {
            try {
              return JSON.stringify(v) ?? String(v);
            } catch {
              return String(v);
            }
          }
          return String(v);
        })
        .finally(() => handle.dispose().catch(() => undefined)),
    );
    let value: string;
    try {
      value = await withTimeout(run, SCRIPT_TIMEOUT_MS);
    } catch (err) {
      const message = err instanceof Error ? err.message : '';
      // The tab or browser went away: not the script's fault (the wrapper reports a crash).
      if (err instanceof ToolInputError || /has been closed|Target crashed/i.test(message)) throw err;
      if (/Execution context was destroyed/i.test(message)) {
        throw new ToolInputError('The page navigated away while the JavaScript ran.');
      }
      // Playwright's message starts with the page's error type ("TypeError: x is not a function").
      const type = /\b([A-Z][A-Za-z]*Error)\b/.exec(message)?.[1] ?? 'an error';
      throw new ToolInputError(`The JavaScript threw ${type}.`);
    }
    return value.length > TEXT_MAX ? `${value.slice(0, TEXT_MAX)}\n[cut at ${TEXT_MAX} characters]` : value;
  },
});

const LATE = Symbol('late');

async function withTimeout<T>(work: Promise<T>, ms: number): Promise<T> {
  const value = await orAfter(work, ms, LATE);
  if (value === LATE) throw new ToolInputError(`The JavaScript did not finish within ${ms / 1000} s.`);
  return value;
}

export const readConsole = browserMember({
  optional: true,
  name: 'read_console',
  summary: "The tab's console messages since the last read.",
  kind: 'text',
  effect: 'read',
  input: z.object({ tab_id: tabId }),
  async handle(input, ctx) {
    const { tabId: id } = await ctx.tab(input.tab_id);
    return bounded(ctx.session.drainConsole(id), 'No console messages since the last read.');
  },
});

/** One request: method, URL, status (or the failure), MIME type, duration. */
async function networkLine(request: Request): Promise<string> {
  const url = oneLine(request.url()).slice(0, NETWORK_URL_MAX);
  const failure = request.failure();
  const response = failure ? null : await request.response().catch(() => null);
  const timing = request.timing();
  const ms = timing.responseEnd >= 0 ? `${Math.round(timing.responseEnd)} ms` : '? ms';
  if (failure) return `${request.method()} ${url} failed (${oneLine(failure.errorText).slice(0, 100)}) ${ms}`;
  const mime = response?.headers()['content-type']?.split(';')[0]?.trim() || '-';
  return `${request.method()} ${url} ${response?.status() ?? '-'} ${oneLine(mime).slice(0, 100)} ${ms}`;
}

export const readNetwork = browserMember({
  optional: true,
  name: 'read_network',
  summary: "The tab's requests since the last read: method, URL, status, MIME type, duration.",
  kind: 'text',
  effect: 'read',
  input: z.object({ tab_id: tabId }),
  async handle(input, ctx) {
    const { tabId: id } = await ctx.tab(input.tab_id);
    const lines = await Promise.all(ctx.session.drainNetwork(id).map(networkLine));
    return bounded(lines, 'No requests since the last read.');
  },
});

/** The real path of `path` when it is a regular file inside one of `roots` (already real paths); else undefined. */
async function insideRoots(path: string, roots: readonly string[]): Promise<string | undefined> {
  if (!isAbsolute(path)) return undefined;
  const real = await realpath(path).catch(() => undefined);
  if (
    !real ||
    !(await stat(real).then(
      (s) => s.isFile(),
      () => false,
    ))
  )
    return undefined;
  const ok = roots.some((root) => {
    const rel = relative(root, real);
    return rel !== '' && !rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel);
  });
  return ok ? real : undefined;
}

/** Bytes one uploaded file may have: the page is handed them whole (Playwright's limit for that is 50 MiB). */
const MAX_UPLOAD_BYTES = 50 * 2 ** 20;

/** The refusal of an upload whose files, up to `field`, hold more than the page may be handed. */
function tooMuch(field: string): ToolRefusedError {
  return new ToolRefusedError(
    `${field} takes the files past ${MAX_UPLOAD_BYTES / 2 ** 20} MiB in all; nothing was uploaded.`,
  );
}

export const fileUpload = browserMember({
  optional: true,
  name: 'file_upload',
  summary:
    "Set the files of a file input: documents the session's harness staged, or files from the upload folders the operator allowed.",
  kind: 'ack',
  effect: 'write',
  ack: () => 'Uploaded.',
  input: z.object({
    target: refTarget.describe('The file input, by its reference from read_page or find.'),
    document_ids: z
      .array(z.string().max(4096))
      .max(MAX_UPLOAD_FILES)
      .nullish()
      .describe('Files the application staged for this session, by id.'),
    paths: z
      .array(z.string().min(1).max(4096))
      .max(MAX_UPLOAD_FILES)
      .nullish()
      .describe("Absolute paths of files on the executor's filesystem, inside the allowed upload folders."),
    tab_id: tabId,
  }),
  async handle(input, ctx) {
    const paths = input.paths ?? [];
    const documents = input.document_ids ?? [];
    if (!paths.length && !documents.length) throw new ToolInputError('Give paths or document_ids: at least one file.');
    // Paths first, then documents: the SDK runner's order, so the same input is refused for the same reason.
    if (paths.length && !ctx.uploadRoots.length)
      throw new ToolRefusedError('file_upload has no configured upload roots');
    const roots = await Promise.all(ctx.uploadRoots.map((r) => realpath(r).catch(() => r)));
    const found: string[] = [];
    for (const [i, path] of paths.entries()) {
      const real = await insideRoots(path, roots);
      // The refusal names the index, never the path: the model's path may point at something we keep private.
      if (!real) {
        throw new ToolRefusedError(
          `paths[${i}] is not a file inside the folders uploads are allowed from; nothing was uploaded.`,
        );
      }
      if ((await stat(real)).size > MAX_UPLOAD_BYTES) {
        throw new ToolRefusedError(
          `paths[${i}] is larger than ${MAX_UPLOAD_BYTES / 2 ** 20} MiB; nothing was uploaded.`,
        );
      }
      found.push(real);
    }
    // Then the documents the session's harness staged: looked up in this session's own files only, so another
    // session's id is as unknown as one never staged. The refusal names the index, never the id's storage.
    if (documents.length && !ctx.documents)
      throw new ToolRefusedError('file_upload has no configured document allowlist');
    const staged: StagedDocument[] = [];
    for (const [i, id] of documents.entries()) {
      const doc = ctx.documents?.document(id);
      if (!doc) {
        throw new ToolRefusedError(`document_ids[${i}] is not a document this session staged; nothing was uploaded.`);
      }
      staged.push(doc);
    }
    // What the page is handed in all: Playwright hands it the bytes whole.
    let total = 0;
    for (const [i, path] of found.entries()) {
      total += (await stat(path)).size;
      if (total > MAX_UPLOAD_BYTES) throw tooMuch(`paths[${i}]`);
    }
    for (const [i, doc] of staged.entries()) {
      total += doc.size;
      if (total > MAX_UPLOAD_BYTES) throw tooMuch(`document_ids[${i}]`);
    }
    // The bytes, not the paths: the browser runs in its desktop's sandbox, which cannot see the upload folders
    // nor the daemon's staged files.
    const files = [
      ...(await Promise.all(
        found.map(async (path) => ({
          name: basename(path),
          mimeType: mediaTypeOf(basename(path)),
          buffer: await readFile(path),
        })),
      )),
      ...(await Promise.all(
        staged.map(async (doc) => ({ name: doc.name, mimeType: doc.mediaType, buffer: await doc.read() })),
      )),
    ];
    const { page } = await ctx.tab(input.tab_id);
    const element = await refElement(page, input.target.ref);
    try {
      await element.setInputFiles(files, { timeout: 10_000 });
    } catch (err) {
      if (err instanceof Error && /not an? (HTML)?input|input\[type=file\]|Non-multiple/i.test(err.message)) {
        throw new ToolInputError(
          `${input.target.ref} is not a file input that takes ${files.length === 1 ? 'a file' : 'several files'}.`,
        );
      }
      throw err;
    }
  },
});
