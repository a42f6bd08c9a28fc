/**
 * What a failure tells whom (docs/PROTOCOL.md rule 6).
 * The caller gets the whole error. The model reads the message only of errors
 * written for it (ModelFacingError); of any other error only its type, unless
 * the operator opted in to messages. A timeout states the configured limit.
 */
import type { ErrorInfo } from '../base/protocol.ts';
import { ModelFacingError, ToolTimeoutError, isRetryable } from '../base/errors.ts';
import { retryAfterMs } from '../base/resilience.ts';

/** Longest error text the model reads, in code points (the SDK's FIELD_MAX). */
export const ERROR_TEXT_MAX_CODE_POINTS = 4096;
/** Longest error message kept for the caller. */
const CALLER_MESSAGE_MAX_CHARS = 16_384;

/**
 * The error's type name for the model: a code identifier chosen by a developer,
 * never runtime data. Anything else reads as `Error`.
 */
export function errorTypeName(err: unknown): string {
  const name = err instanceof Error ? err.name : undefined;
  return name && /^[A-Za-z_$][A-Za-z0-9_$]{0,63}$/.test(name) ? name : 'Error';
}

export function errorInfo(err: unknown): ErrorInfo {
  const message = err instanceof Error ? err.message : String(err);
  const coolDown = retryAfterMs(err);
  return {
    type: errorTypeName(err),
    message: message.slice(0, CALLER_MESSAGE_MAX_CHARS),
    timed_out: err instanceof ToolTimeoutError,
    retryable: isRetryable(err),
    ...(coolDown !== undefined ? { retry_after_ms: coolDown } : {}),
  };
}

export function modelErrorText(member: string, err: unknown, exposeMessages: boolean): string {
  const tool = `Tool '${member}'`;
  if (err instanceof ToolTimeoutError) return `${tool} timed out after ${err.timeoutMs} ms.`;
  if (err instanceof ModelFacingError) return err.message;
  const type = errorTypeName(err);
  const message = err instanceof Error ? err.message : '';
  return exposeMessages && message ? `${tool} failed with ${type}: ${message}` : `${tool} failed with ${type}.`;
}
