/**
 * The SDK's fallback texts, for a family of calls that defines none of its own
 * (docs/TOOLSETS.md A5): an unknown toolset_name, the older `computer` tool,
 * and the browser toolset, whose SDK class uses them too. One definition each.
 */

/** Calls skipped after an earlier failure of the same family. */
export const FALLBACK_NOT_EXECUTED_TEXT = 'Not executed: an earlier action in this turn failed.';
/** Calls a cancel (or a disconnect) stopped. */
export const FALLBACK_CANCELLED_TEXT = 'Not completed: this turn was cancelled before this action finished.';

/** What the SDK's runner sends for a member whose text is empty. */
export const EMPTY_TEXT = '(empty)';
