/**
 * A person's hold on a desktop (src/desktop-pool/hold.ts): a take waits for the
 * batches inside, batches that come meanwhile wait and then go in the order
 * they came, and nothing is lost on cancel or on a take given up early.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CancelledError } from '../src/base/errors.ts';
import { Hold } from '../src/desktop-pool/hold.ts';

/** Whether `p` has settled by the time the microtasks and one macrotask turn ran. */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(
    () => (done = true),
    () => (done = true),
  );
  await new Promise((resolve) => setImmediate(resolve));
  return done;
}

const never = new AbortController().signal;

describe('Hold', () => {
  test('a batch enters at once when nobody holds the desktop', async () => {
    const hold = new Hold();
    const leave = await hold.enter(never);
    assert.equal(hold.running, 1);
    leave();
    leave(); // idempotent
    assert.equal(hold.running, 0);
  });

  test('a take waits for the batch inside; batches that come meanwhile wait, then go in order', async () => {
    const hold = new Hold();
    const leaveFirst = await hold.enter(never);
    const ticket = hold.take();
    assert.ok(ticket);
    assert.equal(hold.held, true);
    assert.equal(await settled(ticket.ready), false, 'the take must wait for the running batch');
    const order: string[] = [];
    const second = hold.enter(never).then((leave) => (order.push('second'), leave));
    const third = hold.enter(never).then((leave) => (order.push('third'), leave));
    assert.equal(hold.waiting, 2);
    leaveFirst();
    await ticket.ready; // the person has the desktop now
    assert.equal(await settled(second), false, 'no batch may run while the person holds the desktop');
    assert.equal(hold.take(), undefined, 'a second take is refused while one holds');
    ticket.release();
    (await second)();
    (await third)();
    assert.deepEqual(order, ['second', 'third']);
    assert.equal(hold.held, false);
    assert.equal(hold.running, 0);
  });

  test('a take with nothing inside is ready at once', async () => {
    const hold = new Hold();
    const ticket = hold.take()!;
    assert.equal(await settled(ticket.ready), true);
    ticket.release();
    ticket.release(); // idempotent
    (await hold.enter(never))();
  });

  test('a batch cancelled while it waits leaves the queue with CancelledError; the others still go', async () => {
    const hold = new Hold();
    const ticket = hold.take()!;
    const stop = new AbortController();
    const cancelled = hold.enter(stop.signal);
    const kept = hold.enter(never);
    stop.abort();
    await assert.rejects(cancelled, CancelledError);
    assert.equal(hold.waiting, 1);
    ticket.release();
    (await kept)();
    await assert.rejects(hold.enter(stop.signal), CancelledError, 'an aborted signal never enters');
  });

  test('a take given up before it was ready lets the waiting batches in and resolves its ready', async () => {
    const hold = new Hold();
    const leave = await hold.enter(never);
    const ticket = hold.take()!;
    const waiting = hold.enter(never);
    ticket.release();
    await ticket.ready;
    (await waiting)();
    leave();
    assert.equal(hold.running, 0);
  });

  test('after a hand-back, a new take waits for the batches let in before it', async () => {
    const hold = new Hold();
    const first = hold.take()!;
    const batch = hold.enter(never);
    first.release();
    const leave = await batch;
    const second = hold.take()!;
    assert.equal(await settled(second.ready), false, 'the batch that waited runs before the next take');
    leave();
    await second.ready;
    second.release();
  });
});
