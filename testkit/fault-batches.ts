/**
 * Running batches under faults, for the fault tests (test/faults-*.test.ts):
 * `run` sends a batch and optionally injects a fault once one of its calls
 * has started; every batch_result is checked (valid for the API, one result
 * per tool_use in order, one final event per call that agrees with it);
 * `assertRetryableFailure` and `assertHaltedAfter` check how a failure reads
 * and halts its toolset; `untilOk` polls for recovery (every 300 ms, up to
 * 45 s); `freshHello` and `assertNoStrayResults` check the daemon still
 * serves and answers each batch once. `[measure]` and `[note]` lines report
 * timings and what was seen.
 */
import assert from 'node:assert/strict';
import type { BatchResult, ServerMessage, ToolEvent, ToolUse } from '../src/base/protocol.ts';
import { assertApiValid } from './api-rules.ts';
import { computerUse, type TestClient, type TestDaemon } from './daemon.ts';
import { RESOURCE_DOWN_TYPES, waitFor } from './faults.ts';
import { until } from './wait.ts';

export const WIDTH = 1024;
export const HEIGHT = 768;
/** The daemon's per-call limit here; every "fails quickly" bound is this (generous) limit. */
export const CALL_TIMEOUT_MS = 20_000;
/** Recovery is polled this often, for at most this long. */
const POLL_EVERY_MS = 300;
const RECOVERY_MS = 45_000;

export function measure(what: string, ms: number): void {
  console.log(`[measure] ${what}: ${Math.round(ms)} ms`);
}

export function note(what: string): void {
  console.log(`[note] ${what}`);
}

// ---------------------------------------------------------------------------
// Running batches and checking every answer.

export interface Fault {
  /** The fault is injected once the call at this index has started… */
  index: number;
  /** …and this condition holds (default: at once), which the failure names when it does not. */
  when?: { what: string; holds: () => boolean | Promise<boolean>; seen?: () => unknown };
  inject: () => void | Promise<void>;
}

export interface Run {
  result: BatchResult;
  events: ToolEvent[];
  /** From sending the batch to its batch_result. */
  ms: number;
}

let batchNo = 0;
const isResultFor =
  (batchId: string) =>
  (m: ServerMessage): m is BatchResult =>
    m.type === 'batch_result' && m.batch_id === batchId;

/**
 * Sends a batch (optionally injecting a fault while one of its calls runs),
 * waits for its batch_result and checks it: valid for the API, one result per
 * tool_use in order, and (unless replayed) one final event per call that
 * agrees with the result.
 */
export async function run(
  client: TestClient,
  uses: ToolUse[],
  options: { id?: string; fault?: Fault } = {},
): Promise<Run> {
  const batchId = options.id ?? `f${batchNo++}`;
  const t0 = performance.now();
  client.send({ type: 'batch', batch_id: batchId, tool_uses: uses });
  const { fault } = options;
  if (fault) {
    await waitFor(
      `call ${fault.index} of ${batchId} to start`,
      async () =>
        client.messages.some(
          (m) => m.type === 'tool_event' && m.batch_id === batchId && m.index === fault.index && m.phase === 'started',
        ) || undefined,
      60_000,
      10,
    );
    const { when } = fault;
    if (when) await until(`${when.what} in ${batchId}`, when.holds, { timeoutMs: 30_000, seen: when.seen });
    await fault.inject();
  }
  return collect(client, batchId, uses, t0);
}

/** Waits for the batch_result of a batch already sent, and checks it and its events. */
export async function collect(
  client: TestClient,
  batchId: string,
  uses: ToolUse[],
  t0 = performance.now(),
): Promise<Run> {
  const raw = await client.next(isResultFor(batchId), 90_000);
  const ms = performance.now() - t0;
  const events = client.messages.filter((m): m is ToolEvent => m.type === 'tool_event' && m.batch_id === batchId);
  for (const e of events) client.messages.splice(client.messages.indexOf(e), 1);
  const result = checkResult(uses, raw, events);
  return { result, events, ms };
}

export function checkResult(uses: ToolUse[], raw: unknown, events: ToolEvent[]): BatchResult {
  const result = assertApiValid(uses, raw);
  assert.deepEqual(
    result.tool_results.map((r) => r.tool_use_id),
    uses.map((u) => u.id),
    'exactly one tool_result per tool_use, in order',
  );
  for (const f of result.failures) {
    assert.equal(uses[f.index]?.id, f.tool_use_id, 'a failure names its call');
  }
  assert.equal(new Set(result.failures.map((f) => f.index)).size, result.failures.length, 'one failure per call');
  if (result.replayed) {
    assert.equal(events.length, 0, 'a replay emits no events');
    return result;
  }
  // Every call gets exactly one final event, and it agrees with the result.
  uses.forEach((tu, i) => {
    const phases = events.filter((e) => e.index === i).map((e) => e.phase);
    assert.ok(
      events.filter((e) => e.index === i).every((e) => e.tool_use_id === tu.id),
      `events of call ${i} name ${tu.id}`,
    );
    const final = phases.filter((p) => p !== 'started');
    assert.equal(final.length, 1, `call ${i} (${tu.name}) has one final event: ${phases.join(', ')}`);
    const ok = result.tool_results[i]!.is_error !== true;
    assert.equal(final[0] === 'succeeded', ok, `call ${i}: event ${final[0]} agrees with the result`);
    assert.equal(
      final[0] === 'failed',
      result.failures.some((f) => f.index === i),
      `call ${i}: a failed event iff a failure`,
    );
  });
  return result;
}

export function textOf(result: BatchResult, i: number): string {
  return result.tool_results[i]!.content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join('\n');
}

/** The call at `index` failed with a retryable error of one of `types`, and the model was told so. */
export function assertRetryableFailure(
  uses: ToolUse[],
  result: BatchResult,
  index: number,
  types: readonly string[],
): void {
  const failure = result.failures.find((f) => f.index === index);
  assert.ok(failure, `call ${index} (${uses[index]!.name}) failed: ${JSON.stringify(result.tool_results[index])}`);
  assert.ok(
    types.includes(failure.error.type),
    `failure type ${failure.error.type} is one of ${types.join(', ')}: ${JSON.stringify(failure.error)}; the model read: ${JSON.stringify(textOf(result, index))}`,
  );
  assert.equal(failure.error.retryable, true, `${failure.error.type} is retryable: ${JSON.stringify(failure.error)}`);
  const first = textOf(result, index).split('\n')[0];
  const expected =
    failure.error.type === 'TimeoutError'
      ? new RegExp(`^Tool '${uses[index]!.name}' timed out after \\d+ ms\\.$`)
      : new RegExp(`^Tool '${uses[index]!.name}' failed with ${failure.error.type}\\.$`);
  assert.match(first ?? '', expected);
}

/**
 * What a batch must look like after the call at `failedAt` failed: later calls
 * of that toolset get its exact not-executed text, the other toolset's calls run.
 */
export function assertHaltedAfter(
  uses: ToolUse[],
  result: BatchResult,
  failedAt: number,
  notExecutedText: string,
): void {
  const family = uses[failedAt]!.toolset_name!;
  assert.deepEqual(result.halted, { [family]: failedAt });
  assert.equal(result.cancelled, false);
  uses.forEach((tu, i) => {
    if (i <= failedAt) return;
    const r = result.tool_results[i]!;
    if (tu.toolset_name === family) {
      assert.equal(r.is_error, true, `call ${i} (${tu.name}) is not executed`);
      assert.deepEqual(r.content, [{ type: 'text', text: notExecutedText }]);
    } else {
      assert.ok(r.is_error !== true, `call ${i} (${tu.toolset_name}.${tu.name}) still ran: ${textOf(result, i)}`);
    }
  });
}

/**
 * Sends `uses` every POLL_EVERY_MS until a batch succeeds completely. Each
 * failed attempt must itself be well formed: its failures retryable, of a
 * resource-down type, and the rest of its toolset not executed.
 */
export async function untilOk(
  client: TestClient,
  uses: () => ToolUse[],
  what: string,
): Promise<Run & { attempts: number }> {
  const t0 = performance.now();
  let attempts = 0;
  const seen = new Set<string>();
  const done = await waitFor(
    what,
    async () => {
      attempts++;
      const batch = uses();
      const r = await run(client, batch);
      if (!r.result.tool_results.some((x) => x.is_error)) return r;
      for (const f of r.result.failures) {
        seen.add(f.error.type);
        assertRetryableFailure(batch, r.result, f.index, RESOURCE_DOWN_TYPES);
      }
      return undefined;
    },
    RECOVERY_MS,
    POLL_EVERY_MS,
  );
  measure(
    `${what}: recovered after ${attempts} attempt(s)${seen.size ? ` (saw ${[...seen].join(', ')})` : ''}`,
    performance.now() - t0,
  );
  return { ...done, attempts };
}

/** A new connection can still say hello and gets a fresh session. */
export async function freshHello(d: TestDaemon): Promise<void> {
  const c = await d.connect();
  try {
    const w = await c.hello();
    assert.equal(w.protocol, 'deskbatch.v1');
    assert.equal(w.resumed, false);
    c.send({ type: 'ping' });
    await c.next((m): m is { type: 'pong' } => m.type === 'pong', 10_000);
  } finally {
    c.close();
  }
}

/**
 * No batch_result arrives twice. A session runs its batches one after another, and a batch's result
 * is sent only once its calls have wound down: by the time the result of one more batch arrives,
 * every result of the batches before it has been sent, and the socket delivers in order.
 */
export async function assertNoStrayResults(client: TestClient): Promise<void> {
  await run(client, [computerUse('wait', { duration: 0 })]);
  const stray = client.messages.filter((m) => m.type === 'batch_result');
  assert.deepEqual(stray, [], 'no batch_result beyond the one per batch already received');
}

export const computerOk = (): ToolUse[] => [computerUse('screenshot'), computerUse('cursor_position')];
