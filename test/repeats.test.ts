import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RepeatTracker } from '../src/executor/repeats.ts';
import type { ErrorInfo, ToolUse } from '../src/base/protocol.ts';

const use = (input: unknown, id = 'toolu_1'): ToolUse => ({
  type: 'tool_use',
  id,
  name: 'left_click',
  toolset_name: 'computer',
  input,
});
const error = (type: string, message = 'm'): ErrorInfo => ({ type, message, timed_out: false, retryable: false });

test('a streak counts identical failures of one call, whatever its id or key order', () => {
  const t = new RepeatTracker();
  assert.equal(t.failed(use({ coordinate: [1, 2], text: 'shift' }, 'a'), error('x')), 1);
  assert.equal(t.failed(use({ text: 'shift', coordinate: [1, 2] }, 'b'), error('x')), 2);
  assert.equal(t.failed(use({ coordinate: [1, 2], text: 'shift' }, 'c'), error('x')), 3);
});

test('the same error type continues a streak, whatever its message (they carry runtime data)', () => {
  const t = new RepeatTracker();
  t.failed(use({ a: 1 }), error('DisplayUnavailableError', 'circuit open; 900 ms left'));
  assert.equal(t.failed(use({ a: 1 }), error('DisplayUnavailableError', 'circuit open; 400 ms left')), 2);
});

test('a success or a different error type ends the streak', () => {
  const t = new RepeatTracker();
  t.failed(use({ a: 1 }), error('x'));
  t.failed(use({ a: 1 }), error('x'));
  t.succeeded(use({ a: 1 }));
  assert.equal(t.failed(use({ a: 1 }), error('x')), 1);
  assert.equal(t.failed(use({ a: 1 }), error('y')), 1);
});

test('memory is bounded: the oldest call is forgotten first, and only it', () => {
  const t = new RepeatTracker();
  // 64 calls fill the memory (MAX_TRACKED in src/executor/repeats.ts); the 65th pushes out the oldest.
  t.failed(use({ first: true }), error('x'));
  for (let i = 0; i < 64; i++) t.failed(use({ i }), error('x'));
  // The others are all still remembered: the newest, and the next oldest.
  assert.equal(t.failed(use({ i: 63 }), error('x')), 2);
  assert.equal(t.failed(use({ i: 0 }), error('x')), 2);
  assert.equal(t.failed(use({ first: true }), error('x')), 1);
  // Oldest means least recently used: {i: 0} was just used again, so the
  // first call's return pushed out {i: 1} instead.
  assert.equal(t.failed(use({ i: 0 }), error('x')), 3);
  assert.equal(t.failed(use({ i: 1 }), error('x')), 1);
});
