/** Session bookkeeping: arrival order, replay, conflicts, the queue bound, and the result cache bounds. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ToolUse } from '../src/base/protocol.ts';
import { Session } from '../src/server/session.ts';
import { textBatchResult } from '../testkit/batch-result.ts';
import { until, within } from '../testkit/wait.ts';

const limits = { maxQueuedBatches: 2, resultCache: { maxEntries: 3, maxBytes: 20_000, ttlMs: 60_000 } };
const uses = (text: string): ToolUse[] => [
  { type: 'tool_use', id: 'toolu_1', name: 'type', toolset_name: 'computer', input: { text } },
];

const result = textBatchResult;

test('batches run one at a time in arrival order; a resend replays; other content conflicts', async () => {
  const ran: string[] = [];
  // Batch a runs until the test lets it end, so b is submitted (and could start) while a is still running.
  let releaseA!: () => void;
  const aHeld = new Promise<void>((r) => (releaseA = r));
  const session = new Session(limits, async (id) => {
    ran.push(`start ${id}`);
    if (id === 'a') await aHeld;
    else await Promise.resolve();
    ran.push(`end ${id}`);
    return result(id);
  });
  const a = session.submit('a', uses('1'));
  const b = session.submit('b', uses('2'));
  assert.equal(session.submit('a', uses('1')).kind, 'replayed');
  assert.equal(session.submit('a', uses('other')).kind, 'conflict');
  assert.ok(a.kind === 'accepted' && b.kind === 'accepted');
  await until('batch a to start', () => ran.includes('start a'), { seen: () => ran });
  // The session starts a batch from promise callbacks, never from a timer: once the event loop has
  // turned (setImmediate runs after every pending microtask), b would have started had it not waited for a.
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(ran, ['start a'], 'b waits while a runs');
  releaseA();
  await within(Promise.all([a.result, b.result]), 'the results of a and b');
  assert.deepEqual(ran, ['start a', 'end a', 'start b', 'end b']);
});

test('the queue is bounded: one running plus maxQueuedBatches waiting', async () => {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const session = new Session(limits, async (id) => {
    await gate;
    return result(id);
  });
  const kinds = ['a', 'b', 'c', 'd'].map((id) => session.submit(id, uses(id)).kind);
  assert.deepEqual(kinds, ['accepted', 'accepted', 'accepted', 'queue_full']);
  release();
  await session.settled();
});

test('stored results stay within the count and byte bounds, oldest dropped first', async () => {
  const session = new Session(limits, async (id) => result(id, id.startsWith('big') ? 15_000 : 10));
  for (const id of ['a', 'b', 'c', 'd']) {
    const s = session.submit(id, uses(id));
    assert.equal(s.kind, 'accepted');
    if (s.kind === 'accepted') await s.result;
    await new Promise((r) => setImmediate(r));
  }
  assert.equal(session.cacheUsage.entries, 3);
  assert.equal(session.submit('b', uses('b')).kind, 'replayed');
  for (const id of ['big1', 'big2']) {
    const s = session.submit(id, uses(id));
    if (s.kind === 'accepted') await s.result;
    await new Promise((r) => setImmediate(r));
  }
  assert.ok(session.cacheUsage.bytes <= 20_000, JSON.stringify(session.cacheUsage));
  assert.equal(session.cacheUsage.entries, 1, 'only the newest big result fits');
});
