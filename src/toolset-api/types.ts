/**
 * What a toolset and its members are. A member is plain data plus a handler
 * (after Playwright MCP's `defineTool`): its name, its zod input schema (the
 * schema is also the type, and is checked against the SDK's input type in
 * test/types), what it does to the world, what kind of result it gives, and
 * the handler. Handlers never build wire blocks: they return a value of their
 * result kind, and the executor's result boundary (src/executor/results.ts)
 * turns it into API content, enforcing the contract in one place.
 */
import type { z } from 'zod';
import type { CapturedImage, ImageFormat, SettleOptions } from '../base/image.ts';
import type { ScreenshotLimits, Size } from '../base/geometry.ts';
import type { BrowserStateBlock, LegacyComputerTools } from '../base/protocol.ts';
import type { DesktopResources } from '../desktop-pool/desktop.ts';

/** Whether a call can change anything (issue 4 retries only `read` members). */
export type Effect = 'read' | 'write';

/** Content block types a toolset's results may hold (docs/TOOLSETS.md A3). */
export type BlockType = 'text' | 'image' | 'browser_state';

/** How screenshots are sized and encoded, for every toolset that returns them. */
export interface ScreenshotSettings {
  limits: ScreenshotLimits;
  format: ImageFormat;
  /** 1–100, for jpeg and webp. */
  quality: number;
  /** The desktop's settle step before a capture that follows input (src/desktop-driver/driver.ts). */
  settle?: SettleOptions;
}

/** A document the session's harness staged (docs/PROTOCOL.md "Staged documents"), as a member uses it. */
export interface StagedDocument {
  /** The name the harness gave it (NFC, no path): what the page reads as `File.name`. */
  name: string;
  mediaType: string;
  size: number;
  /** Its bytes, read whole (a page is handed files whole). */
  read(): Promise<Buffer>;
}

/** The documents one session staged; another session's ids are unknown here. */
export interface StagedDocuments {
  /** The document staged under `id` by this session, or undefined. */
  document(id: string): StagedDocument | undefined;
}

/** Everything a handler gets besides its input. */
export interface CallContext {
  /** Aborts on cancel, disconnect, timeout or shutdown. Check it in long work. */
  signal: AbortSignal;
  sessionId: string;
  batchId: string;
  toolUseId: string;
  /** The session's desktop (src/desktop-pool/): its display, worker and browser. Absent only in executor unit tests. */
  desktop?: DesktopResources;
  /**
   * Lines the model should read on this call's result if it fails (a
   * dismissed dialog, a refused navigation: often why it failed), after the
   * error text, one text block each.
   */
  noteOnFailure(lines: readonly string[]): void;
  /**
   * Present when the session's recording redacts what is typed into password fields
   * (docs/RECORDING.md "Privacy"): a call that types into a field the page marks as a password calls it.
   */
  markSecret?: () => void;
  /** The documents the session's harness staged (`file_upload.document_ids`); absent in executor unit tests. */
  documents?: StagedDocuments;
}

// eslint-disable-next-line @typescript-eslint/no-unused-vars -- Ctx is used by the variants below
interface MemberBase<S extends z.ZodType, Ctx> {
  /** The member name the API uses. */
  name: string;
  /** One line for docs and logs; the model reads Anthropic's own description. */
  summary: string;
  input: S;
  effect: Effect;
  /** Time allowed on top of the daemon's call timeout, from the input (`wait`, `hold_key`). */
  extraTimeMs?: (input: z.output<S>) => number;
  /** Off unless the operator switches it on: the API's own optional members (docs/TOOLSETS.md C1). */
  optional?: boolean;
}

/** A pure action: the model reads the acknowledgment text. */
export interface AckMember<S extends z.ZodType, Ctx> extends MemberBase<S, Ctx> {
  kind: 'ack';
  ack: (input: z.output<S>) => string;
  handle: (input: z.output<S>, ctx: Ctx) => Promise<void>;
}

/** A reading member: the model reads the returned text. */
export interface TextMember<S extends z.ZodType, Ctx> extends MemberBase<S, Ctx> {
  kind: 'text';
  handle: (input: z.output<S>, ctx: Ctx) => Promise<string>;
}

/** A seeing member: the model gets one image. */
export interface ImageMember<S extends z.ZodType, Ctx> extends MemberBase<S, Ctx> {
  kind: 'image';
  handle: (input: z.output<S>, ctx: Ctx) => Promise<CapturedImage>;
}

/** A tab member (browser): the result is exactly one `browser_state` block, added by its toolset. */
export interface TabMember<S extends z.ZodType, Ctx> extends MemberBase<S, Ctx> {
  kind: 'tab';
  handle: (input: z.output<S>, ctx: Ctx) => Promise<void>;
}

export type Member<S extends z.ZodType = z.ZodType, Ctx = unknown> =
  AckMember<S, Ctx> | TextMember<S, Ctx> | ImageMember<S, Ctx> | TabMember<S, Ctx>;

/** What a handler produced, before the result boundary serialises it. */
export type MemberOutput =
  | { kind: 'text'; text: string }
  | { kind: 'image'; image: CapturedImage }
  | { kind: 'browser_state'; state: Omit<BrowserStateBlock, 'type'> };

/**
 * A member bound to its toolset's context: what the executor runs. It sees
 * neither the context type nor the result kinds' handlers.
 */
export interface RunnableMember {
  name: string;
  /** The member's one line (`MemberBase.summary`): what an MCP host's model reads as the tool's description (src/mcp/). */
  summary: string;
  input: z.ZodType;
  effect: Effect;
  kind: Member['kind'];
  extraTimeMs(input: unknown): number;
  run(input: unknown, call: CallContext): Promise<MemberOutput[]>;
}

/** Runs a member's handler and turns its return value into outputs of its result kind. */
export async function runMember<S extends z.ZodType, Ctx>(
  member: Member<S, Ctx>,
  input: z.output<S>,
  ctx: Ctx,
): Promise<MemberOutput[]> {
  switch (member.kind) {
    case 'ack':
      await member.handle(input, ctx);
      return [{ kind: 'text', text: member.ack(input) }];
    case 'text':
      return [{ kind: 'text', text: await member.handle(input, ctx) }];
    case 'image':
      return [{ kind: 'image', image: await member.handle(input, ctx) }];
    case 'tab':
      await member.handle(input, ctx);
      return [];
  }
}

/**
 * Binds a member to the function that builds its context for a call. `around`
 * lets a toolset wrap every call (the browser adds its `browser_state`).
 */
export function bindMember<S extends z.ZodType, Ctx>(
  member: Member<S, Ctx>,
  context: (call: CallContext) => Ctx,
  around?: (ctx: Ctx, member: Member<S, Ctx>, run: () => Promise<MemberOutput[]>) => Promise<MemberOutput[]>,
): RunnableMember {
  return {
    name: member.name,
    summary: member.summary,
    input: member.input,
    effect: member.effect,
    kind: member.kind,
    extraTimeMs: (input) => Math.ceil(member.extraTimeMs?.(input as z.output<S>) ?? 0),
    async run(raw, call) {
      const input = raw as z.output<S>;
      const ctx = context(call);
      const run = () => runMember(member, input, ctx);
      return around ? around(ctx, member, run) : run();
    },
  };
}

export interface Toolset {
  /** The API's dated tool type, e.g. `computer_toolset_20260801`. */
  type: string;
  /** The `toolset_name` its tool_use blocks carry. */
  name: string;
  /** Exact text for calls skipped after an earlier failure of this toolset (docs/TOOLSETS.md A5). */
  notExecutedText: string;
  /** Text for calls stopped by cancel or disconnect (docs/PROTOCOL.md, execution rule 7). */
  cancelledText: string;
  /** Whether its calls act on the display, so batches using it take their desktop's lane. */
  usesDesktop: boolean;
  /** Content block types the API accepts in this toolset's results. */
  allowedBlocks: readonly BlockType[];
  /** Every member the API defines for this toolset, by name. */
  allMemberNames: readonly string[];
  /** Members the API leaves off unless the `tools[]` entry enables them. */
  optionalMemberNames?: readonly string[];
  /** Members this daemon implements but the operator switched off (or did not switch on). */
  disabledMemberNames: ReadonlySet<string>;
  /** The members this daemon serves and has enabled. */
  members: ReadonlyMap<string, RunnableMember>;
  /** Releases what a session held on its desktop (browser contexts); called when the session ends. */
  closeSession?(sessionId: string, desktop: DesktopResources): Promise<void>;
}

/**
 * A tool that is not a toolset, run by the executor like a toolset's members:
 * its `tool_use` blocks carry no `toolset_name` (the older `computer` tool,
 * toolsets/computer-legacy/). The daemon builds it and hands it to the
 * executor, which knows no particular tool.
 */
export interface PlainTool extends Toolset {
  /** The name its `tool_use` blocks (and `tools[]` entries) carry, e.g. `computer`. */
  toolName: string;
  /** Whether a tool_use is a call of this tool (by its name and, for the older `computer` tool, its input). */
  handles(toolUse: { name: string; toolset_name?: string | null | undefined; input?: unknown }): boolean;
  /**
   * The member that runs this input. Throws ToolInputError or ToolRefusedError
   * with the text the model reads; the rest of the input is checked when the
   * executor parses it with the member's schema, before anything runs.
   */
  member(input: unknown): RunnableMember;
  /** Its `tools[]` entries for a welcome, sized in screenshot pixels. */
  describe(screenshot: Size): LegacyComputerTools;
}

/**
 * A toolset as data: its texts and rules, and its members in the SDK's order.
 * The member list is the one table: the names, the optional ones and the
 * `tools[]` configs all derive from it (defineToolset, memberNames).
 */
export interface ToolsetDefinition<Ctx> extends Pick<
  Toolset,
  'type' | 'name' | 'notExecutedText' | 'cancelledText' | 'usesDesktop' | 'allowedBlocks' | 'closeSession'
> {
  members: readonly Member<z.ZodType, Ctx>[];
  /** Builds a call's context. */
  context: (call: CallContext) => Ctx;
  /** Wraps every call (the browser adds its `browser_state`). */
  around?: (ctx: Ctx, member: Member<z.ZodType, Ctx>, run: () => Promise<MemberOutput[]>) => Promise<MemberOutput[]>;
}

/** The names of a member table, in its order. */
export function memberNames<const M extends readonly { name: string }[]>(members: M): M[number]['name'][] {
  return members.map((m) => m.name);
}

/** The members of a table that are off unless switched on. */
export function optionalNames(members: readonly { name: string; optional?: boolean }[]): string[] {
  return members.filter((m) => m.optional).map((m) => m.name);
}

/**
 * The Toolset the executor runs, from its definition and the operator's
 * choices: every member served unless `disabled`, an optional one only when
 * `enabled`.
 */
export function defineToolset<Ctx>(
  def: ToolsetDefinition<Ctx>,
  choice: { enabled?: readonly string[]; disabled?: readonly string[] } = {},
): Toolset {
  const { enabled = [], disabled = [] } = choice;
  const members = new Map<string, RunnableMember>();
  const off = new Set<string>();
  for (const m of def.members) {
    if (disabled.includes(m.name) || (m.optional && !enabled.includes(m.name))) off.add(m.name);
    else members.set(m.name, bindMember(m, def.context, def.around));
  }
  const optional = optionalNames(def.members);
  return {
    type: def.type,
    name: def.name,
    notExecutedText: def.notExecutedText,
    cancelledText: def.cancelledText,
    usesDesktop: def.usesDesktop,
    allowedBlocks: def.allowedBlocks,
    allMemberNames: memberNames(def.members),
    ...(optional.length ? { optionalMemberNames: optional } : {}),
    members,
    disabledMemberNames: off,
    ...(def.closeSession ? { closeSession: def.closeSession } : {}),
  };
}
