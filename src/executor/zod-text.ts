/** Turns a zod error into one short sentence the model can act on. */
import type { z } from 'zod';

/** At most this many problems are listed; the model fixes them one call at a time anyway. */
const MAX_ISSUES = 3;

export function describeZodError(error: z.ZodError): string {
  const parts = error.issues.slice(0, MAX_ISSUES).map((issue) => {
    const path = issue.path.length ? issue.path.map(String).join('.') : 'input';
    return `${path}: ${issueText(issue)}`;
  });
  const more = error.issues.length > MAX_ISSUES ? ` (and ${error.issues.length - MAX_ISSUES} more)` : '';
  return parts.join('; ') + more;
}

function issueText(issue: z.core.$ZodIssue): string {
  switch (issue.code) {
    case 'invalid_type':
      return issue.input === undefined ? `required (${issue.expected})` : `expected ${issue.expected}`;
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
