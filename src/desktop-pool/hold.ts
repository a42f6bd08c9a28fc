/**
 * A person's hold on a desktop (docs/VIEWER.md "Takeover"): while an operator
 * controls the desktop, none of the agent's batches on it runs.
 *
 * Every batch on the desktop enters the hold before anything of it runs
 * (before the lane, so computer and browser batches alike) and leaves when it
 * has its result. A takeover asks for the hold: from then on new batches wait
 * (or are refused by the server, as the client chose), and the takeover
 * begins once the batches already inside have left. Its release lets the
 * waiting batches in, in the order they came. So nothing of the agent's runs
 * between the person's actions, and no batch is lost or reordered.
 */
import { CancelledError } from '../base/errors.ts';

export interface HoldTicket {
  /** Resolves when every batch that was running has left: the person has the desktop. */
  readonly ready: Promise<void>;
  /** Ends the hold: waiting batches go in, in order. Idempotent. */
  release(): void;
}

export class Hold {
  /** Batches inside now. */
  private inside = 0;
  private ticket: { release: () => void; drained: () => void } | undefined;
  /** Batches that came while the desktop was held, in arrival order. */
  private readonly waiters: Array<() => void> = [];

  /** Whether a person holds the desktop, or is about to (batches inside are finishing). */
  get held(): boolean {
    return this.ticket !== undefined;
  }

  /** Batches waiting for the hold to end. */
  get waiting(): number {
    return this.waiters.length;
  }

  /** Batches running now. */
  get running(): number {
    return this.inside;
  }

  /**
   * A batch enters: at once when nobody holds the desktop, otherwise once the hold ends. The function it
   * resolves with leaves (idempotent). Rejects with CancelledError when `signal` aborts while waiting.
   */
  enter(signal: AbortSignal): Promise<() => void> {
    if (signal.aborted) return Promise.reject(new CancelledError('cancelled while a person held the desktop'));
    if (!this.ticket && this.waiters.length === 0) return Promise.resolve(this.admit());
    return new Promise((resolve, reject) => {
      const go = (): void => {
        signal.removeEventListener('abort', onAbort);
        resolve(this.admit());
      };
      const onAbort = (): void => {
        const at = this.waiters.indexOf(go);
        if (at >= 0) this.waiters.splice(at, 1);
        reject(new CancelledError('cancelled while a person held the desktop'));
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(go);
    });
  }

  /** A person asks for the desktop. Undefined when someone already holds it. */
  take(): HoldTicket | undefined {
    if (this.ticket) return undefined;
    let drained!: () => void;
    const ready = new Promise<void>((resolve) => (drained = resolve));
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      this.ticket = undefined;
      drained(); // a take released before it was ready must not leave its owner waiting
      // Everyone who waited goes in now, in order; a take that comes meanwhile waits for them (enter admits at once).
      for (const go of this.waiters.splice(0)) go();
    };
    this.ticket = { release, drained };
    if (this.inside === 0) drained();
    return { ready, release };
  }

  private admit(): () => void {
    this.inside++;
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.inside--;
      if (this.inside === 0) this.ticket?.drained();
    };
  }
}
