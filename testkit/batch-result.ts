import type { BatchResult } from '../src/base/protocol.ts';

/** A batch_result of one text tool_result of `size` characters: for tests of the result store and its budgets. */
export function textBatchResult(batchId: string, size = 10): BatchResult {
  return {
    type: 'batch_result',
    batch_id: batchId,
    tool_results: [
      { type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'x'.repeat(size) }] },
    ],
    failures: [],
    halted: {},
    cancelled: false,
    replayed: false,
    duration_ms: 0,
    screenshots: [],
  };
}
