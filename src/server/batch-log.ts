/**
 * The one log line per batch (the CLI's progress at the default level): its
 * id, the members it asked for, how many failed and with which error types,
 * how many were not run, and how long it took.
 */
import type { Logger } from '../base/log.ts';
import type { BatchResult, ToolUse } from '../base/protocol.ts';

/** At most this many distinct member names, and failures, are named in the line. */
const MAX_NAMED_MEMBERS = 12;
const MAX_NAMED_FAILURES = 5;

/** `notExecuted`: the calls the executor answered with a not-executed text (its `not_executed` events). */
export function logBatch(log: Logger, r: BatchResult, toolUses: readonly ToolUse[], notExecuted: number): void {
  const failed = r.failures.length;
  // Names are not cut (a cut could leave part of a secret the logger would no longer recognise).
  const counts = new Map<string, number>();
  for (const tu of toolUses) counts.set(tu.name, (counts.get(tu.name) ?? 0) + 1);
  const members = [...counts].map(([n, c]) => (c > 1 ? `${n} x${c}` : n));
  const shown =
    members.length > MAX_NAMED_MEMBERS
      ? [...members.slice(0, MAX_NAMED_MEMBERS), `+${members.length - MAX_NAMED_MEMBERS} more`]
      : members;
  const errors = r.failures.map((f) => `${f.name}: ${f.error.type}`);
  const text =
    `batch ${r.batch_id}: ${r.tool_results.length} calls (${shown.join(', ')}), ${failed} failed` +
    (failed
      ? ` (${errors.slice(0, MAX_NAMED_FAILURES).join(', ')}${failed > MAX_NAMED_FAILURES ? ', ...' : ''})`
      : '') +
    (notExecuted ? `, ${notExecuted} not executed` : '') +
    `${r.cancelled ? ', cancelled' : ''}, ${r.duration_ms} ms`;
  log.info(text, {
    batch: r.batch_id,
    calls: r.tool_results.length,
    members: shown,
    failed,
    not_executed: notExecuted,
    cancelled: r.cancelled,
    duration_ms: r.duration_ms,
    error_types: [...new Set(r.failures.map((f) => f.error.type))],
  });
}
