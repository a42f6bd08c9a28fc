/** Small text helpers shared by the server, the executor, the drivers and the toolsets. Imports nothing. */

/**
 * Stable JSON: object keys sorted, `undefined` members left out (as JSON
 * does), so equal values serialise the same however their keys were ordered.
 * Used to recognise a resent batch and a repeated call.
 */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** Control characters, line separators and bidi controls: what could break or reorder a line of text. */
const LINE_UNSAFE = /[\p{Cc}\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]+/gu;

/**
 * One line, as the SDK's runner makes page- and model-supplied text one line:
 * runs of control characters (C0, DEL, C1), line separators and bidi controls
 * folded to one space, a lone surrogate made U+FFFD, trimmed.
 */
export function oneLine(value: string): string {
  // toWellFormed: an unpaired surrogate is not valid UTF-8, and the request carrying it fails.
  return value.toWellFormed().replace(LINE_UNSAFE, ' ').trim();
}

/** The first `max` code points of `value` (a cut by UTF-16 units could split a surrogate pair). */
export function cutPoints(value: string, max: number): string {
  if (value.length <= max) return value;
  return Array.from(value).slice(0, max).join('');
}

/** Longest input value echoed into an acknowledgment (the SDK folds to one line and bounds it). */
export const ECHO_MAX_CHARS = 200;

/** Folds a value from the input into one bounded line for an acknowledgment text. */
export function echo(value: string | number): string {
  const line = oneLine(String(value));
  return line.length > ECHO_MAX_CHARS ? `${line.slice(0, ECHO_MAX_CHARS - 1)}…` : line;
}

/** Longest model-chosen name echoed inside quotes, in code points (the SDK's). */
const QUOTED_NAME_MAX = 200;

/**
 * A model-chosen name as it is echoed inside single quotes in a text the
 * model reads, as the SDK's runner writes it: one line (`oneLine`), cut to 200
 * code points, and runs of quotes and spaces made one space, so that it cannot
 * read as part of the text around it.
 */
export function foldName(value: string): string {
  return cutPoints(oneLine(value), QUOTED_NAME_MAX).replace(/[' ]+/g, ' ').trim();
}
