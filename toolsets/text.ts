/** Helpers for texts the model reads. */
import { oneLine } from '../src/text.ts';

/** Longest input value echoed into an acknowledgment (the SDK folds to one line and bounds it). */
export const ECHO_MAX_CHARS = 200;

/** Folds a value from the input into one bounded line for an acknowledgment text. */
export function echo(value: string | number): string {
  const line = oneLine(String(value));
  return line.length > ECHO_MAX_CHARS ? `${line.slice(0, ECHO_MAX_CHARS - 1)}…` : line;
}

/** Folds a name from the model into one bounded line; runs of quotes and spaces become one space (the SDK's unknown-member rule). */
export function foldName(value: string): string {
  return echo(value).replace(/['\s]+/g, ' ');
}

/** The SDK's fallback halt text for a family it does not know (TOOLSET-CONTRACT A5). */
export const FALLBACK_NOT_EXECUTED_TEXT = 'Not executed: an earlier action in this turn failed.';
/** The SDK's fallback text for a call a cancel stopped, for a family it does not know. */
export const FALLBACK_CANCELLED_TEXT = 'Not completed: this turn was cancelled before this action finished.';
