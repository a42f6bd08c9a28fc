/**
 * Resilience policies, on cockatiel (issue 4, promises 1 and 2).
 *
 * - `ResourceBreaker`: a circuit breaker around starting a shared resource (the
 *   desktop worker on the X display, the browser). After `failures` starts in a
 *   row fail, calls fail at once for `coolDownMs` with the resource's own
 *   unavailable error instead of trying again and again (no retry storm); then
 *   one call is let through to try, and its outcome closes or reopens the circuit.
 * - `readRetry`: automatic retries for members that change nothing, on errors
 *   that say an unchanged retry may succeed, and never on errors that say the
 *   resource lost its state (a browser that crashed took its pages with it: a
 *   retried read would read a blank page and hide the crash), that the circuit
 *   is open (trying again before the cool-down is pointless), or a timeout
 *   (the call's time is spent). Retries run inside the call's one time limit.
 * - `orAfter`: a promise's value, or a stand-in once a deadline passed (the
 *   work is left to finish on its own).
 */
import {
  circuitBreaker,
  ConsecutiveBreaker,
  CircuitState,
  ExponentialBackoff,
  handleWhen,
  isBrokenCircuitError,
  retry,
  type CircuitBreakerPolicy,
  type RetryPolicy,
} from 'cockatiel';
import { isRetryable, ToolTimeoutError } from './errors.ts';
import type { Logger } from './log.ts';

/**
 * `work`'s value, or `fallback` once `ms` have passed; `work` is left to
 * finish on its own, and its late rejection is dropped. The timer is cleared
 * as soon as either side settles.
 */
export function orAfter<T, F>(work: Promise<T>, ms: number, fallback: F): Promise<T | F> {
  work.catch(() => undefined);
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<F>((resolve) => (timer = setTimeout(resolve, ms, fallback)));
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

export interface BreakerSettings {
  /** Failed starts in a row that open the circuit. */
  failures: number;
  /** How long an open circuit fails calls at once before one may try again, in ms. */
  coolDownMs: number;
}

export interface RetrySettings {
  /** Extra attempts after the first, for members that change nothing. 0 turns retries off. */
  attempts: number;
  /** Wait before the first retry, in ms; doubled for each next one. */
  initialDelayMs: number;
}

/** An error carrying how long until the resource may be tried again (an open circuit). */
export interface CoolingDown {
  retryAfterMs: number;
}

export function retryAfterMs(err: unknown): number | undefined {
  const v = typeof err === 'object' && err !== null ? (err as Partial<CoolingDown>).retryAfterMs : undefined;
  return typeof v === 'number' ? v : undefined;
}

/** Whether an error says the resource lost its state (pages, tabs), so a retry would act on a different world. */
export function resetsState(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { resetsState?: unknown }).resetsState === true;
}

/** What a driver needs of a breaker: run a start unless the circuit is open. */
export interface StartGuard {
  run<T>(start: () => Promise<T>): Promise<T>;
  /** Whether starts are refused now (an open circuit). */
  readonly coolingDown?: boolean;
}

export class ResourceBreaker implements StartGuard {
  private readonly policy: CircuitBreakerPolicy;
  private openedAt = 0;

  /**
   * @param resource what is guarded, for logs ('desktop worker', 'browser')
   * @param unavailable builds the error an open circuit throws; the executor reports its type
   */
  constructor(
    private readonly resource: string,
    private readonly settings: BreakerSettings,
    private readonly unavailable: (message: string) => Error,
    log: Logger,
  ) {
    // Every failure to start counts: which errors a start can throw is the resource's business.
    this.policy = circuitBreaker(
      handleWhen(() => true),
      { halfOpenAfter: settings.coolDownMs, breaker: new ConsecutiveBreaker(settings.failures) },
    );
    this.policy.onBreak(() => {
      this.openedAt = performance.now();
      log.warn(`${resource} circuit open`, { failures: settings.failures, cool_down_ms: settings.coolDownMs });
    });
    this.policy.onHalfOpen(() => log.info(`${resource} circuit half-open: trying once`));
    this.policy.onReset(() => log.info(`${resource} circuit closed`));
  }

  get state(): 'closed' | 'open' | 'half-open' {
    switch (this.policy.state) {
      case CircuitState.Closed:
        return 'closed';
      case CircuitState.HalfOpen:
        return 'half-open';
      default:
        return 'open';
    }
  }

  /**
   * True while an open circuit refuses starts: from the break until the cool-down ends. Unlike
   * `state`, which stays 'open' after the cool-down until the next start is tried (cockatiel moves
   * to half-open only inside `execute`), this turns false on time, so readiness does not stay
   * down for a resource nobody asks for.
   */
  get coolingDown(): boolean {
    return this.policy.state === CircuitState.Open && performance.now() - this.openedAt < this.settings.coolDownMs;
  }

  /** Runs `start` unless the circuit is open; an open circuit throws the resource's unavailable error at once. */
  async run<T>(start: () => Promise<T>): Promise<T> {
    try {
      return await this.policy.execute(start);
    } catch (err) {
      if (!isBrokenCircuitError(err)) throw err;
      const left = Math.max(0, Math.ceil(this.settings.coolDownMs - (performance.now() - this.openedAt)));
      const error = this.unavailable(
        `${this.resource} failed to start ${this.settings.failures} times in a row; ` +
          `not trying again for ${left} ms (circuit open)`,
      );
      Object.assign(error, { retryAfterMs: left } satisfies CoolingDown);
      throw error;
    }
  }
}

/** Whether the executor may retry a call that changes nothing after this error. */
export function mayRetryRead(err: unknown): boolean {
  return isRetryable(err) && !resetsState(err) && retryAfterMs(err) === undefined && !(err instanceof ToolTimeoutError);
}

/** The retry policy for members that change nothing. */
export function readRetry(settings: RetrySettings): RetryPolicy {
  return retry(handleWhen(mayRetryRead), {
    maxAttempts: settings.attempts,
    backoff: new ExponentialBackoff({ initialDelay: settings.initialDelayMs, maxDelay: settings.initialDelayMs * 8 }),
  });
}
