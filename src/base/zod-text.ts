/** Turns a zod error into one short sentence the model can act on. */
import type { z } from 'zod';

/** At most this many problems are listed; the model fixes them one call at a time anyway. */
const MAX_ISSUES = 3;

/** `input` is what was parsed, to tell a missing field from a wrong one (zod 4 issues omit the input). */
export function describeZodError(error: z.ZodError, input: unknown): string {
  const parts = error.issues.slice(0, MAX_ISSUES).map((issue) => {
    const path = issue.path.length ? issue.path.map(String).join('.') : 'input';
    return `${path}: ${issueText(issue, valueAt(input, issue.path))}`;
  });
  const more = error.issues.length > MAX_ISSUES ? ` (and ${error.issues.length - MAX_ISSUES} more)` : '';
  return parts.join('; ') + more;
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let v = input;
  for (const key of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[key];
  }
  return v;
}

function issueText(issue: z.core.$ZodIssue, value: unknown): string {
  switch (issue.code) {
    case 'invalid_type':
      return value === undefined ? `required (${issue.expected})` : `expected ${issue.expected}`;
    case 'invalid_value':
      return `expected one of ${issue.values.map((v) => JSON.stringify(v)).join(', ')}`;
    case 'too_small':
    case 'too_big':
    case 'invalid_format':
    case 'not_multiple_of':
    case 'custom':
    default:
      return issue.message;
  }
}
