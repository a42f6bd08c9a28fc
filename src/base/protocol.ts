/**
 * Wire protocol v1 (docs/PROTOCOL.md): every message that crosses the
 * WebSocket, as zod schemas. This module imports nothing from the project, so
 * a client can depend on it alone.
 *
 * Envelopes are strict: an unknown field is refused (`invalid_message`), so a
 * typo never passes silently. A `tool_use` inside a batch is loose, because it
 * is an API block forwarded unchanged and the API may add fields (`caller`).
 */
import { z } from 'zod';

export const PROTOCOL_VERSION = 'deskbatch.v1';
/** WebSocket path of protocol v1. */
export const PROTOCOL_PATH = '/v1';
/** Subprotocol prefix that carries the token for browser clients. */
export const TOKEN_SUBPROTOCOL_PREFIX = 'deskbatch.token.';
/** Close code: another connection resumed this connection's session. */
export const CLOSE_SESSION_RESUMED = 4001;
/**
 * Close code: the client let more than `max_buffered_bytes` of frames wait unread, so the daemon stopped
 * sending (the private-use twin of 1008, policy violation). The session is kept for resume.
 */
export const CLOSE_SEND_BUFFER_FULL = 4008;

/** API pattern for `tool_use.id` and `tool_result.tool_use_id`. */
const TOOL_USE_ID = /^[a-zA-Z0-9_-]+$/;
/** API pattern for `toolset_name`. */
const TOOLSET_NAME = /^[a-zA-Z0-9_-]+$/;

export const BatchIdSchema = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9._:-]+$/, 'batch_id: 1–128 characters of [A-Za-z0-9._:-]');

/** One `tool_use` block exactly as the Messages API returned it. */
export const ToolUseSchema = z
  .looseObject({
    type: z.literal('tool_use'),
    /** Block id; its `tool_result` carries the same id. */
    id: z.string().min(1).max(256).regex(TOOL_USE_ID, 'id must match ^[a-zA-Z0-9_-]+$'),
    /** Member name (or a plain tool's name). */
    name: z.string().min(1).max(200),
    /** The toolset family for a member call; absent for plain tools. */
    toolset_name: z.string().min(1).max(64).regex(TOOLSET_NAME).nullish(),
    /**
     * The member's input; validated by the member's own schema, not here, so even a missing
     * or malformed input is answered with an is_error result instead of losing the batch.
     */
    input: z.unknown().optional(),
  })
  .transform(({ type, id, name, toolset_name, input }) => ({ type, id, name, toolset_name, input }));
export type ToolUse = z.output<typeof ToolUseSchema>;

/**
 * One entry of the `tools[]` list the agent sends to the Messages API, as far
 * as the daemon reads it: its `type` and, for a toolset, `configs`. Other
 * fields (a function tool's schema) are allowed and ignored.
 */
export const AgentToolEntrySchema = z.looseObject({
  type: z.string().max(100).optional(),
  name: z.string().max(200).optional(),
  configs: z.record(z.string(), z.unknown()).nullish(),
});
export type AgentToolEntry = z.output<typeof AgentToolEntrySchema>;

const SizeSchema = z.strictObject({ width: z.number().int().positive(), height: z.number().int().positive() });

/** `hello.desktop` (added within v1): what a session wants of its desktop. */
export const DesktopRequestSchema = z.strictObject({
  /** When every desktop is in use: queue for one (`desktop_wait` frames tell the place), or be refused at once. */
  when_busy: z.enum(['wait', 'refuse']).optional(),
  /** A display size from the operator's list (`--display-sizes`); the first one when absent. */
  display: SizeSchema.optional(),
});
export type DesktopRequest = z.output<typeof DesktopRequestSchema>;

/** `hello.takeover` (added within v1): what this client's batches do while a person holds the desktop. */
export const TakeoverRequestSchema = z.strictObject({
  /** `wait` (default): batches wait for the person to hand back; `refuse`: a new batch gets `desktop_held` at once. */
  when_held: z.enum(['wait', 'refuse']).optional(),
});
export type TakeoverRequest = z.output<typeof TakeoverRequestSchema>;

/** A profile's name: a letter or digit, then up to 63 letters, digits, `.`, `_` or `-`. Never a path. */
export const PROFILE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** `hello.profile` (added within v1): the named browser profile this session's browser starts with. */
export const ProfileRequestSchema = z.strictObject({
  name: z.string().regex(PROFILE_NAME, 'a profile name is 1-64 of A-Z a-z 0-9 . _ -, starting with a letter or digit'),
  /**
   * `read_write`: the session's browser state is saved back to the profile when the session ends (and when the
   * harness asks); one such session per profile at a time. `read_only`: never saved; any number may share it.
   */
  mode: z.enum(['read_write', 'read_only']),
});
export type ProfileRequest = z.output<typeof ProfileRequestSchema>;

/** A help request's reason, and an operator's note: one line or a few, no control characters but newline and tab. */
export const personText = (max: number) =>
  z
    .string()
    .min(1)
    .max(max)
    .regex(/^(?:[^\p{Cc}\u2028\u2029]|[\n\t])*$/u, 'no control characters except newline and tab');

export const HelloSchema = z.strictObject({
  type: z.literal('hello'),
  /** Free-form client identification, for logs. */
  client: z.string().max(200).optional(),
  /** Reattach to a session whose connection dropped within the grace period. */
  resume_session_id: z.string().min(1).max(128).optional(),
  /** `false`: this connection gets no `tool_event` frames, only results (one frame per batch). Default true. */
  events: z.boolean().optional(),
  /** `true`: the welcome also carries `legacy_tools` (the older computer tools' `tools[]` entries). */
  legacy_tools: z.boolean().optional(),
  /** `true`: `welcome.limits` also carries the limits added within v1 (`max_batch_ms` and the others). */
  all_limits: z.boolean().optional(),
  /**
   * The `tools[]` the agent sends to the API. When given, the session runs
   * only what the model was offered: a toolset missing from it, or a member
   * its `configs` leaves off, is refused with the SDK runner's text.
   */
  tools: z.array(AgentToolEntrySchema).max(256).optional(),
  /**
   * What this session wants of its desktop (only a new session's first hello is read). Giving it, even
   * `{}`, also asks for `welcome.desktop`, `desktop_wait` frames and the `no_desktop` error.
   */
  desktop: DesktopRequestSchema.optional(),
  /**
   * `true`: record this session (docs/RECORDING.md), when the operator lets clients ask
   * (`--record-on-request`). Giving it, even `false`, also asks for `welcome.recording`.
   */
  record: z.boolean().optional(),
  /**
   * What this connection's batches do while a person holds the desktop (docs/PROTOCOL.md "Takeover"). Giving it,
   * even `{}`, also asks for `welcome.capabilities`, `takeover` frames and the `desktop_held` error.
   */
  takeover: TakeoverRequestSchema.optional(),
  /**
   * The named browser profile this session's browser starts with (docs/PROTOCOL.md "Profiles"), when the
   * operator keeps profiles (`--profile-key`); only a new session's first hello is read. Giving it also asks for
   * `welcome.profile` and the `profile_held` and `profile_unavailable` errors.
   */
  profile: ProfileRequestSchema.optional(),
});

/** The agent asks for a person (only when `welcome.capabilities` lists `help`). */
export const HelpSchema = z.strictObject({
  type: z.literal('help'),
  /** What the person should do, shown to the operator: "log in to the bank; I must not see the password". */
  reason: personText(500),
});

export const BatchSchema = z.strictObject({
  type: z.literal('batch'),
  batch_id: BatchIdSchema,
  /** The assistant turn's tool_use blocks, in order. The count limit is checked by the server. */
  tool_uses: z.array(ToolUseSchema).min(1),
});

export const CancelSchema = z.strictObject({
  type: z.literal('cancel'),
  batch_id: BatchIdSchema,
});

export const PingSchema = z.strictObject({ type: z.literal('ping') });

export const ClientMessageSchema = z.discriminatedUnion('type', [
  HelloSchema,
  BatchSchema,
  CancelSchema,
  PingSchema,
  HelpSchema,
]);
export type ClientMessage = z.output<typeof ClientMessageSchema>;
export type HelloMessage = z.output<typeof HelloSchema>;
export type BatchMessage = z.output<typeof BatchSchema>;
export type CancelMessage = z.output<typeof CancelSchema>;
export type HelpMessage = z.output<typeof HelpSchema>;

// ---------------------------------------------------------------- daemon → client

export const TextBlockSchema = z.strictObject({ type: z.literal('text'), text: z.string().min(1) });
export const ImageBlockSchema = z.strictObject({
  type: z.literal('image'),
  source: z.strictObject({
    type: z.literal('base64'),
    media_type: z.enum(['image/png', 'image/jpeg', 'image/webp', 'image/gif']),
    data: z.string().min(1),
  }),
});
export type TextBlock = z.output<typeof TextBlockSchema>;
export type ImageBlock = z.output<typeof ImageBlockSchema>;

/**
 * `browser_state` strings: at most 4096 characters, no C0/C1 controls, DEL,
 * U+2028 or U+2029 (docs/TOOLSETS.md C4).
 */
const StateString = z
  .string()
  .max(4096)
  .regex(/^[^\p{Cc}\u2028\u2029]*$/u, 'no control characters');
const StateId = StateString.min(1);

export const BrowserStateTabSchema = z.strictObject({
  tab_id: StateId,
  title: StateString,
  url: StateString,
  active: z.boolean().optional(),
});

export const BrowserStateChangeSchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('tab_opened'), tab_id: StateId }),
  z.strictObject({ type: z.literal('download_started'), download_id: StateId, url: StateString }),
  z.strictObject({
    type: z.literal('download_completed'),
    download_id: StateId,
    url: StateString,
    path: StateString.optional(),
    size_bytes: z.number().int().nonnegative().optional(),
  }),
  z.strictObject({
    type: z.literal('download_failed'),
    download_id: StateId,
    url: StateString,
    error: StateString.optional(),
  }),
]);
export type BrowserStateChange = z.output<typeof BrowserStateChangeSchema>;

/** The browser's tab inventory after a call, and what the call changed (docs/TOOLSETS.md C4). */
export const BrowserStateBlockSchema = z.strictObject({
  type: z.literal('browser_state'),
  tabs: z.array(BrowserStateTabSchema).max(100),
  state_changes: z.array(BrowserStateChangeSchema).min(1).max(200).optional(),
});
export type BrowserStateBlock = z.output<typeof BrowserStateBlockSchema>;

/** A content block of a member result. */
export const ResultBlockSchema = z.discriminatedUnion('type', [
  TextBlockSchema,
  ImageBlockSchema,
  BrowserStateBlockSchema,
]);
export type ResultBlock = z.output<typeof ResultBlockSchema>;

export const ToolResultSchema = z.strictObject({
  type: z.literal('tool_result'),
  tool_use_id: z.string().regex(TOOL_USE_ID),
  /** Echoed from the tool_use on member results, and only there. */
  toolset_name: z.string().min(1).max(64).regex(TOOLSET_NAME).optional(),
  is_error: z.literal(true).optional(),
  content: z.array(ResultBlockSchema).min(1),
});
export type ToolResult = z.output<typeof ToolResultSchema>;

export const ErrorInfoSchema = z.strictObject({
  /** The error's type name (what the model is told by default). */
  type: z.string(),
  /** The full message, for the operator. */
  message: z.string(),
  timed_out: z.boolean(),
  /** Whether an unchanged retry of the call may succeed. */
  retryable: z.boolean(),
  /** How many times in a row this exact call has now failed this way in the session (3 or more: a loop). */
  repeated: z.number().int().min(2).optional(),
  /** How many times the daemon ran the call before giving up (only members that change nothing are retried). */
  attempts: z.number().int().min(2).optional(),
  /** An open circuit: the resource is not tried again for this long, in ms. */
  retry_after_ms: z.number().int().nonnegative().optional(),
});
export type ErrorInfo = z.output<typeof ErrorInfoSchema>;

export const ToolEventPhaseSchema = z.enum(['started', 'succeeded', 'failed', 'not_executed', 'cancelled']);
export type ToolEventPhase = z.output<typeof ToolEventPhaseSchema>;

export const ToolEventSchema = z.strictObject({
  type: z.literal('tool_event'),
  batch_id: z.string(),
  index: z.number().int().nonnegative(),
  tool_use_id: z.string(),
  toolset_name: z.string().nullable(),
  name: z.string(),
  phase: ToolEventPhaseSchema,
  duration_ms: z.number().nonnegative().optional(),
  /** On `succeeded`: the call needed this many runs (automatic retries of members that change nothing). */
  attempts: z.number().int().min(2).optional(),
  error: ErrorInfoSchema.optional(),
});
export type ToolEvent = z.output<typeof ToolEventSchema>;

export const FailureSchema = z.strictObject({
  tool_use_id: z.string(),
  index: z.number().int().nonnegative(),
  name: z.string(),
  error: ErrorInfoSchema,
});
export type Failure = z.output<typeof FailureSchema>;

export const ScreenshotFileSchema = z.strictObject({
  tool_use_id: z.string(),
  /** Relative to the screenshots directory, `/`-separated. */
  path: z.string(),
  width: z.number().int().positive(),
  height: z.number().int().positive(),
  bytes: z.number().int().nonnegative(),
});
export type ScreenshotFile = z.output<typeof ScreenshotFileSchema>;

export const BatchResultSchema = z.strictObject({
  type: z.literal('batch_result'),
  batch_id: z.string(),
  tool_results: z.array(ToolResultSchema),
  failures: z.array(FailureSchema),
  /** Toolset name → index of the call whose failure halted it. */
  halted: z.record(z.string(), z.number().int().nonnegative()),
  cancelled: z.boolean(),
  replayed: z.boolean(),
  duration_ms: z.number().nonnegative(),
  screenshots: z.array(ScreenshotFileSchema),
});
export type BatchResult = z.output<typeof BatchResultSchema>;

export const ToolsetInfoSchema = z.strictObject({
  type: z.string(),
  toolset_name: z.string(),
  members: z.array(z.string()),
  not_executed_text: z.string(),
  cancelled_text: z.string(),
  /** The `tools[]` entry to pass to the Messages API for this daemon. */
  tool: z.strictObject({
    type: z.string(),
    configs: z.record(z.string(), z.strictObject({ enabled: z.boolean() })).optional(),
  }),
});
export type ToolsetInfo = z.output<typeof ToolsetInfoSchema>;

/** Fields of a `tools[]` entry for an older computer tool; the display size is the screenshot size. */
const legacyComputerTool = {
  name: z.literal('computer'),
  display_width_px: z.number().int().positive(),
  display_height_px: z.number().int().positive(),
};
/** `tools[]` entries for agents on the older computer tools (docs/PROTOCOL.md "Older computer tools"). */
export const LegacyComputerToolsSchema = z.strictObject({
  computer_20250124: z.strictObject({ type: z.literal('computer_20250124'), ...legacyComputerTool }),
  computer_20251124: z.strictObject({
    type: z.literal('computer_20251124'),
    ...legacyComputerTool,
    enable_zoom: z.boolean().optional(),
  }),
});
export type LegacyComputerTools = z.output<typeof LegacyComputerToolsSchema>;

export const WelcomeSchema = z.strictObject({
  type: z.literal('welcome'),
  protocol: z.literal(PROTOCOL_VERSION),
  session_id: z.string(),
  /** True when `hello.resume_session_id` reattached an existing session. */
  resumed: z.boolean(),
  toolsets: z.array(ToolsetInfoSchema),
  /** Absent while the display is unreachable. */
  display: SizeSchema.optional(),
  screenshot: SizeSchema.optional(),
  /**
   * The entries for an agent on `computer_20250124` or `computer_20251124`: only when `hello.legacy_tools`
   * asked for them (so a v1 client sees no field it does not know), and only while `screenshot` is known.
   */
  legacy_tools: LegacyComputerToolsSchema.optional(),
  /** Only when `hello.desktop` was given: which desktop this session acts on. */
  desktop: z
    .strictObject({
      /** `pool`: a desktop of the session's own; `shared`: one desktop every session shares (`DISPLAY` given). */
      mode: z.enum(['pool', 'shared']),
      id: z.string(),
      display: SizeSchema.optional(),
    })
    .optional(),
  /** Only when `hello.record` was given: whether this session is recorded. */
  recording: z.boolean().optional(),
  /** Only when `hello.takeover` was given: `help` when the operator allows takeover (`--allow-takeover`). */
  capabilities: z.array(z.string()).optional(),
  /** Only when `hello.profile` was given: the profile the session's browser started with. */
  profile: z
    .strictObject({
      name: z.string(),
      mode: z.enum(['read_write', 'read_only']),
      /** Bytes of the stored state it started with; 0 for a read-write profile not saved yet. */
      bytes: z.number().int().nonnegative(),
      /** False when the profile did not exist yet (read-write): it is made at the first save. */
      existed: z.boolean(),
    })
    .optional(),
  limits: z.strictObject({
    max_tool_uses: z.number().int().positive(),
    max_payload_bytes: z.number().int().positive(),
    max_queued_batches: z.number().int().positive(),
    // Only when `hello.all_limits` asked for them (a v1 client that parses strictly never meets them):
    /** A batch's time budget, in ms, from when it gets the desktop; then the rest is cancelled. */
    max_batch_ms: z.number().int().positive().optional(),
    /** Unread bytes the daemon lets wait for this connection before it closes it with 4008. */
    max_buffered_bytes: z.number().int().positive().optional(),
    /** Bytes of stored results (for replay) per session, and over every session together. */
    result_cache_bytes: z.number().int().positive().optional(),
    result_cache_total_bytes: z.number().int().positive().optional(),
    /** How long a session (and its desktop) outlives its connection, waiting to be resumed. */
    resume_window_ms: z.number().int().positive().optional(),
  }),
});
export type Welcome = z.output<typeof WelcomeSchema>;

export const ERROR_CODES = [
  'invalid_json',
  'invalid_message',
  'binary_frame',
  'batch_too_large',
  'batch_id_conflict',
  'duplicate_tool_use_id',
  'queue_full',
  'unknown_batch',
  'session_not_found',
  'too_many_sessions',
  'shutting_down',
  'rate_limited',
  'internal',
  // Added within v1, sent only to a client whose hello carried `desktop`:
  'no_desktop',
  // Added within v1, sent only to a client whose hello carried `takeover` (or that sent `help`):
  'desktop_held',
  'help_unavailable',
  // Added within v1, sent only to a client whose hello carried `profile`:
  /** Another live session holds the profile read-write; the message names it. */
  'profile_held',
  /** The profile cannot be used: profiles are off, it does not exist (read-only), or it cannot be read. */
  'profile_unavailable',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

export const ErrorMessageSchema = z.strictObject({
  type: z.literal('error'),
  code: z.enum(ERROR_CODES),
  message: z.string(),
  batch_id: z.string().optional(),
  /** With `no_desktop` and `desktop_held`: when trying again is worth it. */
  retry_after_ms: z.number().int().nonnegative().optional(),
});
export type ErrorMessage = z.output<typeof ErrorMessageSchema>;

export const PongSchema = z.strictObject({ type: z.literal('pong') });

/** A new session queued for a desktop (only to a client whose hello carried `desktop`): its place, 1 = next. */
export const DesktopWaitSchema = z.strictObject({
  type: z.literal('desktop_wait'),
  position: z.number().int().positive(),
  waiting: z.number().int().positive(),
});
export type DesktopWait = z.output<typeof DesktopWaitSchema>;

/** How a takeover ended, as the agent hears it. */
export const TakeoverOutcomeSchema = z.enum([
  /** The person handed back and says the problem is solved. */
  'resolved',
  /** The person handed back without solving it. */
  'unresolved',
  /** The lease ran out (`--takeover-lease-ms`). */
  'expired',
  /** The person's viewer went away and did not come back within the grace period. */
  'disconnected',
  /** The daemon is shutting down, or the desktop went away. */
  'ended',
]);
export type TakeoverOutcome = z.output<typeof TakeoverOutcomeSchema>;

/**
 * A person and the desktop (only to a client whose hello carried `takeover`): the agent's help request was
 * taken, a person took the desktop, or handed it back. Nothing the person typed is in it, only counts.
 */
export const TakeoverSchema = z.strictObject({
  type: z.literal('takeover'),
  event: z.enum(['help_requested', 'started', 'ended']),
  /** The help request this answers or acknowledges, when there was one. */
  request_id: z.string().optional(),
  /** The name the person gave in the viewer (`started`, `ended`). */
  operator: z.string().optional(),
  /** `ended`: how. */
  outcome: TakeoverOutcomeSchema.optional(),
  /** `ended`: what the person wrote for the agent, if anything. */
  note: z.string().optional(),
  /** `ended`: a sentence for the model, e.g. "A person controlled the desktop for 42 s: 2 clicks, typed 12 characters." */
  summary: z.string().optional(),
  /** `ended`: what the person did, as counts only. */
  activity: z
    .strictObject({
      duration_ms: z.number().int().nonnegative(),
      clicks: z.number().int().nonnegative(),
      typed_characters: z.number().int().nonnegative(),
      keys: z.number().int().nonnegative(),
      pasted_characters: z.number().int().nonnegative(),
    })
    .optional(),
});
export type TakeoverMessage = z.output<typeof TakeoverSchema>;

export const ServerMessageSchema = z.discriminatedUnion('type', [
  WelcomeSchema,
  ToolEventSchema,
  BatchResultSchema,
  ErrorMessageSchema,
  PongSchema,
  DesktopWaitSchema,
  TakeoverSchema,
]);
export type ServerMessage = z.output<typeof ServerMessageSchema>;

// ---------------------------------------------------------------------------
// The answers of the HTTP routes under /v1/sessions/<session_id>/ (docs/PROTOCOL.md "Staged documents",
// "Downloads"): JSON the daemon writes and the client library reads, typed once for both.

/** A staged document, as the daemon describes it. */
export interface StagedDocumentInfo {
  document_id: string;
  name: string;
  media_type: string;
  size: number;
  /** Hex SHA-256 of the bytes the daemon stored. */
  sha256: string;
  created_at: string;
}

/**
 * A session's download as the daemon lists it: `complete` ones can be fetched; `not_kept` ones completed in the
 * browser, but the daemon's store refused them (`reason`: the refusal's code, e.g. `file_too_large`).
 */
export interface DownloadInfo {
  /** The id its `download_completed` carried (`dl-N`). */
  download_id: string;
  name: string;
  media_type: string;
  size: number;
  /** Hex SHA-256 of the bytes the daemon kept; null when it did not keep them. */
  sha256: string | null;
  state: 'complete' | 'not_kept';
  reason?: string;
  created_at: string;
}

// ---------------------------------------------------------------------------
// Named browser profiles (docs/PROTOCOL.md "Profiles"): the name rule, and the answers of the HTTP routes under
// /v1/profiles, which the daemon writes and the client library reads, typed once for both.

/** A stored profile, as `GET /v1/profiles` lists it (never its content). */
export interface ProfileInfo {
  name: string;
  /** Bytes of its state's JSON, which --max-profile-bytes bounds (the sealed file holds 41 more). */
  bytes: number;
  /** When it was last imported, saved, or leased by a session (ISO 8601): the retention's clock. */
  updated_at: string;
  /** The session holding it read-write on this daemon, or null. */
  held: null | { session_id: string; mode: 'read_write' };
  /** Read-only leases held on this daemon. */
  readers: number;
}

/** `GET /v1/profiles`: every stored profile, by name, and the bounds the store holds them to. */
export interface ProfileList {
  profiles: ProfileInfo[];
  limits: { max_profiles: number; max_profile_bytes: number; max_age_ms: number };
}

/** `PUT /v1/profiles/<name>`: what was stored (`bytes`: the state's JSON) and whether the name is new. */
export interface ProfileStored {
  name: string;
  bytes: number;
  created: boolean;
  updated_at: string;
}
