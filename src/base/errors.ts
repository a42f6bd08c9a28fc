/**
 * Error classes shared by drivers, toolsets and the executor.
 *
 * Two audiences read a failure (docs/PROTOCOL.md "Results"):
 * the model, which is told only an error's type unless the error was written
 * for it on purpose, and the caller, which always gets the whole error.
 * `ModelFacingError` marks the errors whose message was written for the model;
 * every other error's message is withheld from the model by default.
 */

/**
 * Every error class here has a stable `code` beside its `name` (as ws and Node
 * do): logs and callers can match on it, and it never changes with a message.
 * The wire carries the `name` (`ErrorInfo.type`); the code is for operators.
 */

/** Base for errors whose message is safe and useful for the model to read. */
export class ModelFacingError extends Error {
  readonly code: string = 'ERR_MODEL_FACING';
  /** Whether repeating the same call unchanged may succeed. */
  readonly retryable: boolean = false;
}

/**
 * Bad input from the model: fails the member's schema, a coordinate outside
 * the screenshot, an unknown key name. The message says what is wrong and what
 * is allowed.
 */
export class ToolInputError extends ModelFacingError {
  override readonly name = 'ToolInputError';
  override readonly code: string = 'ERR_TOOL_INPUT';
}

/** A call the daemon refuses by policy (a disabled member, a refused URL). */
export class ToolRefusedError extends ModelFacingError {
  override readonly name = 'ToolRefusedError';
  override readonly code: string = 'ERR_TOOL_REFUSED';
}

/** The browser's tabs are not as the call's result must show them (a `new_tab` whose tab is gone); the model reads the message. */
export class TabStateError extends ModelFacingError {
  override readonly name = 'TabStateError';
  override readonly code: string = 'ERR_TAB_STATE';
}

/**
 * The X display is not reachable, or the desktop worker died while running the
 * call. Its message is for operators; the model reads the type.
 */
export class DisplayUnavailableError extends Error {
  override readonly name = 'DisplayUnavailableError';
  readonly code = 'ERR_DISPLAY_UNAVAILABLE';
  readonly retryable = true;
}

/** The desktop worker process exited (crash, segfault) during the call. */
export class DriverCrashedError extends Error {
  override readonly name = 'DriverCrashedError';
  readonly code = 'ERR_DRIVER_CRASHED';
  readonly retryable = true;
}

/** A call ran past its time limit. The executor builds this, with the limit. */
export class ToolTimeoutError extends Error {
  override readonly name = 'TimeoutError';
  readonly code = 'ERR_TOOL_TIMEOUT';
  readonly retryable = true;
  constructor(readonly timeoutMs: number) {
    super(`timed out after ${timeoutMs} ms`);
  }
}

/** Thrown into a handler's work when the batch was cancelled or its client left. */
export class CancelledError extends Error {
  override readonly name = 'CancelledError';
  readonly code = 'ERR_CANCELLED';
}

/** Whether an error says of itself that an unchanged retry may succeed. */
export function isRetryable(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { retryable?: unknown }).retryable === true;
}
