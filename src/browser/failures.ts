/** The browser driver's own failures, which the executor retries (src/base/resilience.ts). */

/** The browser process went away during the call; the next call relaunches it. */
export class BrowserCrashedError extends Error {
  override readonly name = 'BrowserCrashedError';
  readonly code = 'ERR_BROWSER_CRASHED';
  readonly retryable = true;
  /** Its pages went with it: an automatic retry would act on a fresh, blank browser (src/base/resilience.ts). */
  readonly resetsState = true;
}

/** The browser could not be started, or its circuit is open after repeated failed starts. */
export class BrowserUnavailableError extends Error {
  override readonly name = 'BrowserUnavailableError';
  readonly code = 'ERR_BROWSER_UNAVAILABLE';
  readonly retryable = true;
}
