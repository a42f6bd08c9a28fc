/** Sends one batch of any kind, waits for its result and has the checker judge it. */
import { performance } from 'node:perf_hooks';
import type { BatchResult, Welcome } from '../../src/base/protocol.ts';
import { checkEvents, judge } from './check.ts';
import type { LoadClient } from './client.ts';
import type { LoadRun, Planned } from './run.ts';

/**
 * Sends one batch and waits for its result; checks it. Returns the result, or
 * undefined when none came (its calls are lost and the session must end).
 */
export async function runBatch(
  run: LoadRun,
  tag: string,
  client: LoadClient,
  welcome: Welcome,
  batchId: string,
  plan: Planned,
): Promise<BatchResult | undefined> {
  const { stats, problem, opts, batchTimeoutMs, lane, laneDone, wrongResults, recordDuration } = run;
  const sentAt = performance.now();
  stats.batches++;
  stats.batchesByKind[plan.kind] = (stats.batchesByKind[plan.kind] ?? 0) + 1;
  stats.calls += plan.toolUses.length;
  client.send({ type: 'batch', batch_id: batchId, tool_uses: plan.toolUses });
  let entry: { result: BatchResult; at: number };
  try {
    entry = await client.until(() => client.results.get(batchId)?.[0], batchTimeoutMs, `batch_result ${batchId}`);
  } catch (err) {
    stats.lost += plan.toolUses.length;
    problem(`${tag} ${batchId} (${plan.kind}): ${String(err)}`);
    // A batch that never got its result waited all that time: the fairness check sees it too.
    if (plan.kind === 'computer' || plan.kind === 'mixed')
      lane.push({ session: tag, sentAt, doneAt: performance.now() });
    return undefined;
  }
  const r = entry.result;
  const doneAt = entry.at;
  recordDuration(plan.kind, doneAt - sentAt);
  if (r.replayed) problem(`${tag} ${batchId}: a first send was answered as a replay`);
  // judge is synchronous, so no other session's batch can move the global counts in between.
  const before = stats.crossed + stats.lost + stats.duplicated;
  judge(run, tag, client, welcome, batchId, plan, r);
  wrongResults.set(r, stats.crossed + stats.lost + stats.duplicated - before);
  checkEvents(run, tag, client, batchId, plan.toolUses, r);
  const usesLane = plan.toolUses.some((tu) => tu.toolset_name === 'computer');
  if (usesLane && (plan.kind === 'computer' || plan.kind === 'mixed')) {
    stats.laneBatches++;
    lane.push({ session: tag, sentAt, doneAt });
    laneDone.get(tag)?.times.push(doneAt);
    const startedAt = client.firstStarted.get(batchId);
    if (startedAt !== undefined) stats.maxLaneWaitMs = Math.max(stats.maxLaneWaitMs, startedAt - sentAt);
  }
  const byToolset = (name: string): boolean =>
    plan.toolUses.some((tu, i) => tu.toolset_name === name && r.tool_results[i] && !r.tool_results[i]!.is_error);
  opts.onBatch?.({
    session: tag,
    batchId,
    kind: plan.kind,
    sentAt,
    doneAt,
    ok: r.failures.length === 0,
    failureTypes: r.failures.map((f) => f.error.type),
    browserOk: byToolset('browser'),
    computerOk: byToolset('computer'),
  });
  return r;
}
