/**
 * The client's typed errors. Each says what happened to the batch it rejects:
 * refused (nothing ran), or outcome unknown (some calls may have run, and the
 * client will not send it again, so nothing is ever done twice).
 *
 * Each has a stable `code` beside its `name`, as the daemon's errors have
 * (src/base/errors.ts): `ERR_…` for what the client itself found; ConnectError and
 * BatchRefusedError carry the daemon's own `error` code instead (lower case,
 * docs/PROTOCOL.md "error").
 */
import type { ErrorCode } from '../base/protocol.ts';

/** Base class of every error this client throws or rejects with. */
export class DeskbatchError extends Error {
  override name = 'DeskbatchError';
  /** Optional only for ConnectError, whose code is the daemon's when it answered hello with one. */
  readonly code?: string = 'ERR_CLIENT';
}

/** The daemon refused the WebSocket handshake with an HTTP status (401 token, 403 origin, 404 path, 429, 503). */
export class HandshakeRefusedError extends DeskbatchError {
  override name = 'HandshakeRefusedError';
  override readonly code: string = 'ERR_HANDSHAKE_REFUSED';
  constructor(readonly status: number) {
    super(`the daemon refused the connection with HTTP ${status}${HANDSHAKE_HINTS[status] ?? ''}`);
  }

  /** Statuses that a retry cannot fix (a wrong token, origin or path). */
  get permanent(): boolean {
    return this.status === 401 || this.status === 403 || this.status === 404;
  }
}

const HANDSHAKE_HINTS: Record<number, string> = {
  401: ' (missing or wrong token)',
  403: ' (Origin not allowed)',
  404: ' (wrong path: deskbatch listens on /v1)',
  429: ' (too many handshakes from this address)',
  503: ' (the daemon is full or shutting down)',
};

/** The connection could not be opened or completed its hello (network error, timeout, daemon error frame). */
export class ConnectError extends DeskbatchError {
  override name = 'ConnectError';
  constructor(
    message: string,
    /** The daemon's `error` code, when it answered hello with one. */
    override readonly code?: ErrorCode,
    options?: { cause?: unknown; retryAfterMs?: number },
  ) {
    super(message, options);
    if (options?.retryAfterMs !== undefined) this.retryAfterMs = options.retryAfterMs;
  }

  /** With `no_desktop`: when the daemon expects a desktop to be free again. */
  readonly retryAfterMs?: number;
}

/**
 * The daemon answered a batch with an `error` frame (`batch_too_large`,
 * `queue_full`, `duplicate_tool_use_id`, `invalid_message`, …), or the client
 * refused to send it for the same reason. The batch was not accepted: nothing ran.
 */
export class BatchRefusedError extends DeskbatchError {
  override name = 'BatchRefusedError';
  constructor(
    override readonly code: ErrorCode,
    message: string,
    readonly batchId: string,
    /** `desktop_held` (a person holds the desktop): how long until sending it again is worth it. */
    readonly retryAfterMs?: number,
  ) {
    super(`batch ${batchId} refused (${code}): ${message}`);
  }
}

export type OutcomeUnknownReason = 'session_lost' | 'connection_lost' | 'session_taken' | 'closed';

/**
 * A batch ended without a `batch_result`, so which of its calls ran is not
 * known. When `sent` is false the batch never left this client and nothing
 * ran. The client never resends such a batch elsewhere: ask the model to look
 * (a screenshot) before acting again.
 */
export class BatchOutcomeUnknownError extends DeskbatchError {
  override name = 'BatchOutcomeUnknownError';
  override readonly code: string = 'ERR_BATCH_OUTCOME_UNKNOWN';
  constructor(
    readonly reason: OutcomeUnknownReason,
    message: string,
    readonly batchId: string,
    /** The session the batch was sent in. */
    readonly sessionId: string | undefined,
    /** Whether the batch was ever sent (false: it certainly did not run). */
    readonly sent: boolean,
    /** The ids of the batch's tool_use blocks, to answer them yourself if you go on. */
    readonly toolUseIds: readonly string[],
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * The daemon no longer has the session the batch was sent in (it restarted,
 * or the grace period for resuming ended), so its stored result is gone and
 * its outcome is unknown. A client made by `connect` started a new session on
 * the same daemon for later batches. A client made by `connectFleet` is closed
 * instead, and so is told when its pod is gone or replaced too; every later
 * batch gets this error, unsent (`sent` false: nothing ran). Place a new
 * session with `connectFleet`, or end the task.
 */
export class SessionLostError extends BatchOutcomeUnknownError {
  override name = 'SessionLostError';
  override readonly code: string = 'ERR_SESSION_LOST';
  constructor(
    batchId: string,
    sessionId: string | undefined,
    sent: boolean,
    toolUseIds: readonly string[],
    /** What happened to the session, when more is known than that the daemon lacks it. */
    why?: string,
  ) {
    const lost = why
      ? `session ${sessionId ?? '(none)'} is lost (${why})`
      : `the daemon no longer has session ${sessionId ?? '(none)'} (it restarted, or the grace period ended)`;
    super(
      'session_lost',
      sent
        ? `${lost}: the outcome of batch ${batchId} is unknown, some of its calls may have run; it was not sent again`
        : `${lost}: batch ${batchId} was never sent, nothing ran`,
      batchId,
      sessionId,
      sent,
      toolUseIds,
    );
  }
}

/** Reconnecting failed (attempts exhausted, the token refused) or another connection took the session over. */
export class ConnectionLostError extends BatchOutcomeUnknownError {
  override name = 'ConnectionLostError';
  override readonly code: string = 'ERR_CONNECTION_LOST';
}

/** `close()` was called (or the client's signal aborted) while the batch had no result yet. */
export class ClientClosedError extends BatchOutcomeUnknownError {
  override name = 'ClientClosedError';
  override readonly code: string = 'ERR_CLIENT_CLOSED';
}

/** `mergeToolResults` found a tool_use without exactly one tool_result, or a result for no tool_use. */
export class ToolResultMismatchError extends DeskbatchError {
  override name = 'ToolResultMismatchError';
  override readonly code: string = 'ERR_TOOL_RESULT_MISMATCH';
  constructor(
    readonly problem: 'missing' | 'duplicate' | 'unknown' | 'duplicate_tool_use' | 'misplaced',
    readonly toolUseId: string,
    message: string,
  ) {
    super(message);
  }
}
