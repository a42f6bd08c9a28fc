/**
 * The desktop lane: one X display, so batches that touch it run one at a
 * time, first come first served across sessions (docs/PROTOCOL.md rule 1).
 * A waiter whose signal aborts leaves the queue at once.
 */
import { CancelledError } from '../base/errors.ts';

export class Lane {
  private tail: Promise<void> = Promise.resolve();
  private waiting = 0;

  /** Number of batches queued or running. */
  get depth(): number {
    return this.waiting;
  }

  /** Resolves with a release function once the lane is ours; rejects with CancelledError on abort. */
  acquire(signal: AbortSignal): Promise<() => void> {
    if (signal.aborted) return Promise.reject(new CancelledError('cancelled while waiting for the desktop'));
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    const previous = this.tail;
    // The next waiter waits for us whether we run or give up, so order holds.
    this.tail = previous.then(() => mine);
    this.waiting++;
    let released = false;
    const releaseOnce = (): void => {
      if (released) return;
      released = true;
      this.waiting--;
      release();
    };
    return new Promise((resolve, reject) => {
      const onAbort = (): void => {
        // Give our turn away immediately when it comes.
        previous.then(releaseOnce, releaseOnce);
        reject(new CancelledError('cancelled while waiting for the desktop'));
      };
      signal.addEventListener('abort', onAbort, { once: true });
      previous.then(() => {
        signal.removeEventListener('abort', onAbort);
        if (signal.aborted) return;
        resolve(releaseOnce);
      }, reject);
    });
  }
}
