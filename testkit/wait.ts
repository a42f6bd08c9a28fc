/**
 * Waiting on what a test observes, never on the clock: `until` polls a
 * condition and returns its first truthy value, or fails after a deadline
 * with a message that names what did not happen (and, if given, what was
 * seen instead). Use it where no event can be awaited directly.
 */
import type { DeskbatchClient, DeskbatchClientEvents } from '../src/client/index.ts';

export interface UntilOptions {
  /** Default 10 000 ms: generous, because these machines are shared and slow at times. */
  timeoutMs?: number;
  /** Default 20 ms. */
  intervalMs?: number;
  /** What was seen instead, for the failure message. */
  seen?: () => unknown;
}

export async function until<T>(
  what: string,
  check: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  options: UntilOptions = {},
): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) {
      const seen = options.seen ? `; seen: ${JSON.stringify(await options.seen())}` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${seen}`);
    }
    await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 20));
  }
}

/**
 * `promise`, or a failure naming `what` after `timeoutMs`. The deadline's
 * timer also keeps the event loop alive while the test waits, so a wait on
 * something that only an unref'd timer would bring (the viewer feed's drain
 * check, a heartbeat) cannot end the test file early: without it, node's test
 * runner cancels the waiting test and every later one ("Promise resolution is
 * still pending but the event loop has already resolved").
 */
export function within<T>(promise: Promise<T>, what: string, timeoutMs = 10_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)), timeoutMs);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/** The arguments of the client library's next `event` (wrap it in `within` for a deadline). */
export function nextEvent<K extends keyof DeskbatchClientEvents>(
  client: DeskbatchClient,
  event: K,
): Promise<DeskbatchClientEvents[K]> {
  return new Promise((resolve) => {
    const on = client.once as (e: K, l: (...args: DeskbatchClientEvents[K]) => void) => DeskbatchClient;
    on.call(client, event, (...args) => resolve(args));
  });
}
