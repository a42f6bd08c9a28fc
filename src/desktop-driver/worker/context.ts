/**
 * What every part of the desktop worker shares: the errors it answers with,
 * an op's cancellation state with the sleeps that honour it, and logging to
 * the parent.
 */
import type { ChildMessage, LogLevel } from '../worker-protocol.ts';

/** Bad arguments: the parent rebuilds it as ToolInputError (the model reads it). */
export class WorkerInputError extends Error {
  override readonly name = 'ToolInputError';
  /** ToolInputError's own (src/base/errors.ts): only the name crosses, but the twins agree. */
  readonly code = 'ERR_TOOL_INPUT';
}
/** The op was cancelled: the parent rebuilds it as CancelledError. */
export class WorkerCancelled extends Error {
  override readonly name = 'CancelledError';
  readonly code = 'ERR_CANCELLED';
}

export interface OpContext {
  cancelled: boolean;
  /** Resolves a pending abortable sleep early. */
  wake?: () => void;
}

export function throwIfCancelled(ctx: OpContext): void {
  if (ctx.cancelled) throw new WorkerCancelled('cancelled');
}

/** Sleeps `ms`, or less if `ctx` is (or gets) cancelled. */
export function sleep(ms: number, ctx?: OpContext): Promise<void> {
  if (ms <= 0 || ctx?.cancelled) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      if (ctx) ctx.wake = undefined;
      resolve();
    }
    if (ctx) ctx.wake = done;
  });
}

export const yieldToLoop = (): Promise<void> => new Promise((r) => setImmediate(r));

/** Sends a message to the parent, if it is still there. */
export function send(msg: ChildMessage, callback?: (err: Error | null) => void): boolean {
  if (!process.connected) return false;
  if (callback) process.send!(msg, callback);
  else process.send!(msg);
  return true;
}

export function log(level: LogLevel, msg: string, fields?: object): void {
  send({ type: 'log', level, msg, fields });
}
