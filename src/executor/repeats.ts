/**
 * Loop detection (issue 4, promise 5): an agent that repeats a call that
 * keeps failing the same way is told to change its approach, and the caller
 * sees the repeat count. One tracker per session; the streak of a call is
 * its consecutive failures with the same error type, across batches; it ends when
 * that call succeeds or fails differently. Calls in between do not matter: a
 * model in a loop usually takes a screenshot between two tries.
 */
import { createHash } from 'node:crypto';
import type { ErrorInfo, ToolUse } from '../base/protocol.ts';
import { canonicalJson } from '../base/text.ts';

/** From this many identical failures in a row on, the model is told to stop repeating. */
export const REPEAT_THRESHOLD = 3;
/** Calls remembered per session. */
const MAX_TRACKED = 64;

export const REPEAT_ADVICE = (count: number): string =>
  `This exact call has now failed the same way ${count} times in a row. Do not repeat it unchanged: ` +
  'take a screenshot or read the page to see the current state, then try a different approach.';

function callKey(tu: ToolUse): string {
  return createHash('sha256')
    .update(`${tu.toolset_name ?? ''}\u0000${tu.name}\u0000${canonicalJson(tu.input)}`)
    .digest('base64url');
}

export class RepeatTracker {
  /** Call key → its failure streak. Map order is use order, for eviction. */
  private readonly streaks = new Map<string, { error: string; count: number }>();

  /** Records a failure; returns how many times in a row this call has now failed this way. */
  failed(tu: ToolUse, error: ErrorInfo): number {
    const key = callKey(tu);
    // The type, not the message: messages carry runtime data (a pid, the ms an open circuit has left).
    const signature = error.type;
    const previous = this.streaks.get(key);
    const count = previous?.error === signature ? previous.count + 1 : 1;
    this.streaks.delete(key);
    this.streaks.set(key, { error: signature, count });
    if (this.streaks.size > MAX_TRACKED) this.streaks.delete(this.streaks.keys().next().value!);
    return count;
  }

  succeeded(tu: ToolUse): void {
    this.streaks.delete(callKey(tu));
  }
}
