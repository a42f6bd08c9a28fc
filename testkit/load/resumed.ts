/**
 * The replay and resume drivers: an earlier batch sent again on the same connection must be
 * answered from the stored result; a computer batch whose connection dropped at once must get
 * its one result on the resumed session.
 */
import { performance } from 'node:perf_hooks';
import type { BatchResult, ToolUse, Welcome } from '../../src/base/protocol.ts';
import { judge } from './check.ts';
import { LoadClient } from './client.ts';
import { planComputer } from './computer.ts';
import type { LoadRun } from './run.ts';

/** Resends an earlier batch: it must be answered from the stored result, identical, with no new events. */
export async function replay(
  run: LoadRun,
  tag: string,
  client: LoadClient,
  batchId: string,
  toolUses: ToolUse[],
): Promise<void> {
  const { stats, problem, batchTimeoutMs } = run;
  stats.replays++;
  const original = client.results.get(batchId)?.[0]?.result;
  const eventsBefore = client.events.get(batchId)?.length ?? 0;
  client.send({ type: 'batch', batch_id: batchId, tool_uses: toolUses });
  let again: BatchResult;
  try {
    again = (await client.until(() => client.results.get(batchId)?.[1], batchTimeoutMs, `replay of ${batchId}`)).result;
  } catch (err) {
    stats.lost += toolUses.length;
    problem(`${tag} replay ${batchId}: ${String(err)}`);
    return;
  }
  const same =
    again.replayed &&
    original !== undefined &&
    JSON.stringify(again.tool_results) === JSON.stringify(original.tool_results) &&
    (client.events.get(batchId)?.length ?? 0) === eventsBefore;
  if (same) stats.replaysOk++;
  else problem(`${tag} replay ${batchId}: replayed=${again.replayed}, or results differ, or it ran again`);
}

/**
 * Sends a computer batch and drops the connection at once; resumes the session on a
 * new connection and sends the same batch again: its one result must come there
 * (replayed when the daemon had the first send; cancelled calls carry the cancelled text).
 */
export async function dropAndResume(
  run: LoadRun,
  tag: string,
  client: LoadClient,
  welcome: Welcome,
  n: number,
): Promise<LoadClient> {
  const { stats, problem, opts, batchTimeoutMs, recordDuration } = run;
  stats.dropResumes++;
  const p = planComputer(run.opts, tag, n, welcome.screenshot ?? { width: 1280, height: 800 });
  p.kind = 'resumed';
  const batchId = `${tag}-${n}`;
  client.send({ type: 'batch', batch_id: batchId, tool_uses: p.toolUses });
  client.terminate();
  const sentAt = performance.now();
  stats.batches++;
  stats.batchesByKind.resumed = (stats.batchesByKind.resumed ?? 0) + 1;
  stats.calls += p.toolUses.length;
  const lose = (what: string): void => {
    stats.lost += p.toolUses.length;
    problem(`${tag} ${batchId}: ${what}`);
  };
  let next: LoadClient;
  try {
    next = await LoadClient.open(opts.url, opts.token);
  } catch (err) {
    lose(`could not reconnect to resume: ${String(err)}`);
    return client;
  }
  try {
    const answer = await next.hello(welcome.session_id);
    if (answer.type !== 'welcome' || !answer.resumed) {
      lose(`resume refused: ${JSON.stringify(answer).slice(0, 300)}`);
      return next;
    }
    next.send({ type: 'batch', batch_id: batchId, tool_uses: p.toolUses });
    const { result: r, at } = await next.until(() => next.results.get(batchId)?.[0], batchTimeoutMs, 'resumed');
    recordDuration('resumed', at - sentAt);
    const before = stats.lost + stats.duplicated + stats.crossed + stats.unexpectedFailures;
    // Events went partly to the dropped connection: only the result is judged.
    judge(run, tag, next, answer, batchId, p, r);
    if (stats.lost + stats.duplicated + stats.crossed + stats.unexpectedFailures === before) stats.dropResumesOk++;
  } catch (err) {
    lose(String(err));
  }
  return next;
}
