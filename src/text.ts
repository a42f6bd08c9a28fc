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

/** Runs of control characters (C0, DEL, C1, U+2028/9) folded to one space, trimmed: one line. */
export function oneLine(value: string): string {
  return value.replace(/[\p{Cc}\u2028\u2029]+/gu, ' ').trim();
}

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
