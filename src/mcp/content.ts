/**
 * A `tool_result` as MCP content (docs/MCP.md "Results"): text stays text, an
 * image becomes MCP image content with the same bytes and media type, and a
 * `browser_state` block, which MCP has no type for, becomes one text block
 * holding the block as JSON (`{"type":"browser_state","tabs":[…]}`), whole
 * and in its place. The texts are the batch protocol's, unchanged: a failed
 * call's result is the same text with `isError: true`.
 */
import type { CallToolResult, ContentBlock } from '@modelcontextprotocol/sdk/types.js';
import type { ResultBlock, ToolResult } from '../base/protocol.ts';

export function mcpBlock(block: ResultBlock): ContentBlock {
  switch (block.type) {
    case 'text':
      return { type: 'text', text: block.text };
    case 'image':
      return { type: 'image', data: block.source.data, mimeType: block.source.media_type };
    case 'browser_state':
      return { type: 'text', text: JSON.stringify(block) };
  }
}

/** One call's result, as the answer to its own `tools/call`. */
export function mcpResult(result: ToolResult): CallToolResult {
  return { content: result.content.map(mcpBlock), ...(result.is_error ? { isError: true } : {}) };
}

/**
 * `run_batch`'s answer: for each call in order, a text line naming it (`[2/3] computer_screenshot: ok`, or
 * `error`), then its result's blocks. `isError` when any call's result is an error (failed, not executed or
 * cancelled): the model reads which from the lines.
 */
export function mcpBatchResult(calls: readonly { tool: string; result: ToolResult }[]): CallToolResult {
  const content: ContentBlock[] = [];
  calls.forEach(({ tool, result }, i) => {
    content.push({ type: 'text', text: `[${i + 1}/${calls.length}] ${tool}: ${result.is_error ? 'error' : 'ok'}` });
    content.push(...result.content.map(mcpBlock));
  });
  return { content, ...(calls.some((c) => c.result.is_error) ? { isError: true } : {}) };
}
