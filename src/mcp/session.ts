/**
 * One MCP session bound to one deskbatch session (docs/MCP.md "Sessions"):
 * an MCP `Server` whose `tools/call` runs each call as a batch of that
 * session, and `run_batch` its calls as one batch, so the executor's rules,
 * texts, limits, events, logs and recordings are the batch protocol's. Where
 * the batches run is a `BatchSession`: a session of this daemon, submitted to
 * as a WebSocket connection submits (local.ts), or one of another daemon over
 * the batch protocol (remote.ts). The MCP session's end ends it.
 *
 * The low-level `Server` is used, not `McpServer`: `McpServer` checks a tool's
 * input against its schema itself and answers a bad one with its own text,
 * where the model must read the executor's (`invalid input for computer
 * member …`), exactly as over the batch protocol.
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
  type CallToolResult,
  type ServerNotification,
} from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from '../base/log.ts';
import type { ToolEvent, ToolResult, ToolUse, Welcome } from '../base/protocol.ts';
import { DESKBATCH_VERSION } from '../base/version.ts';
import { describeZodError } from '../base/zod-text.ts';
import { mcpBatchResult, mcpResult } from './content.ts';
import { RUN_BATCH_TOOL, type MemberCall, type ToolTable } from './tools.ts';

/** Where an MCP session's batches run: a session with its desktop. */
export interface BatchSession {
  /** Its session id (logs). */
  readonly id: string;
  /** Its `welcome`: the display and screenshot sizes the MCP server's instructions give. */
  readonly welcome: Welcome;
  /**
   * Runs the tool_uses as one batch and gives their results in order; `onEvent` hears its `tool_event`s; the
   * signal cancels it (the calls left get the cancelled text). A batch refused before it runs throws `McpError`.
   */
  run(
    batchId: string,
    toolUses: readonly ToolUse[],
    signal: AbortSignal,
    onEvent: (event: ToolEvent) => void,
  ): Promise<ToolResult[]>;
  /** Ends the session (its desktop goes back). Idempotent. */
  end(): Promise<void>;
}

export interface McpSessionDeps {
  tools: ToolTable;
  log: Logger;
}

type Progress = (notification: ServerNotification) => Promise<void>;

/** What the MCP server says of itself in `initialize`: the desktop, and the unit of coordinates. */
function instructions(welcome: Welcome): string {
  const { display, screenshot } = welcome;
  const sizes =
    display && screenshot
      ? ` Its display is ${display.width}x${display.height}; coordinates are in screenshot pixels, ` +
        `${screenshot.width}x${screenshot.height}, the size screenshots come back at.`
      : '';
  return (
    `deskbatch: a desktop and a browser of this MCP session's own.${sizes} ` +
    `${RUN_BATCH_TOOL} runs several calls in order as one turn; after a failed call, the later calls of its ` +
    'toolset are not executed.'
  );
}

export class McpSession {
  readonly server: Server;
  private batchCount = 0;
  private toolUses = 0;
  /** Set once the session ended: calls are refused from then on. */
  private lost: string | undefined;
  private ending = false;
  private markEnded!: () => void;
  /** Resolves once the MCP server and the deskbatch session have ended (the server closing ends them). */
  readonly ended = new Promise<void>((resolve) => (this.markEnded = resolve));

  constructor(
    private readonly session: BatchSession,
    private readonly deps: McpSessionDeps,
  ) {
    // The SDK marks Server as for advanced use: McpServer would check the inputs itself (see the top of this file).
    this.server = new Server(
      { name: 'deskbatch', version: DESKBATCH_VERSION },
      { capabilities: { tools: {} }, instructions: instructions(session.welcome) },
    );
    this.server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: [...deps.tools.tools] }));
    this.server.setRequestHandler(CallToolRequestSchema, (request, extra) => {
      const token = request.params._meta?.progressToken;
      const progress = token === undefined ? undefined : { token, send: extra.sendNotification as Progress };
      return this.callTool(request.params.name, request.params.arguments, extra.signal, progress);
    });
    this.server.onclose = () => void this.end();
  }

  /** The deskbatch session's id (logs). */
  get id(): string {
    return this.session.id;
  }

  private async callTool(
    name: string,
    args: Record<string, unknown> | undefined,
    signal: AbortSignal,
    progress: { token: string | number; send: Progress } | undefined,
  ): Promise<CallToolResult> {
    if (name === RUN_BATCH_TOOL) {
      const parsed = this.deps.tools.batchInput.safeParse(args ?? {});
      if (!parsed.success) {
        const text = `invalid input for ${RUN_BATCH_TOOL}: ${describeZodError(parsed.error, args ?? {})}`;
        return { content: [{ type: 'text', text }], isError: true };
      }
      const { calls } = parsed.data;
      const results = await this.run(
        calls.map((c) => ({ ...this.deps.tools.call(c.name)!, input: c.input ?? {} })),
        signal,
        progress,
      );
      return mcpBatchResult(results.map((result, i) => ({ tool: calls[i]!.name, result })));
    }
    const call = this.deps.tools.call(name);
    if (!call) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${name}`);
    const [result] = await this.run([{ ...call, input: args ?? {} }], signal, progress);
    return mcpResult(result!);
  }

  /**
   * Runs the calls as one batch of the session and gives their results in order. The request's cancellation
   * cancels the batch (its calls get the cancelled text). With a progress token, each call's start and end are
   * sent as progress: `progress` counts the calls answered, of `total`.
   */
  private async run(
    calls: readonly (MemberCall & { input: unknown })[],
    signal: AbortSignal,
    progress: { token: string | number; send: Progress } | undefined,
  ): Promise<ToolResult[]> {
    if (this.lost) throw new McpError(ErrorCode.InvalidRequest, this.lost);
    const batchId = `mcp-${++this.batchCount}`;
    const toolUses: ToolUse[] = calls.map((c) => ({
      type: 'tool_use',
      id: `toolu_mcp_${++this.toolUses}`,
      name: c.name,
      toolset_name: c.toolset_name,
      input: c.input,
    }));
    // Sent one after another, and all before the answer: a notification after it would name a finished request.
    let sent = Promise.resolve();
    let answered = 0;
    const onEvent = (event: ToolEvent): void => {
      if (!progress) return;
      if (event.phase !== 'started') answered++;
      const params = {
        progressToken: progress.token,
        progress: answered,
        total: calls.length,
        message: `${event.toolset_name ?? ''}_${event.name}: ${event.phase}`,
      };
      sent = sent.then(() => progress.send({ method: 'notifications/progress', params })).catch(() => undefined);
    };
    const results = await this.session.run(batchId, toolUses, signal, onEvent);
    if (progress) {
      await sent;
      // The SDK's client handles an answer at once and a notification a turn later, so one read holding both
      // loses the notification; writing the answer a turn after makes that rarer (docs/MCP.md).
      await new Promise((resolve) => setImmediate(resolve));
    }
    return results;
  }

  /** Ends the MCP server and the deskbatch session (its desktop goes back). Idempotent; resolves as `ended`. */
  end(): Promise<void> {
    if (this.ending) return this.ended;
    this.ending = true;
    this.lost ??= 'this MCP session has ended';
    void (async () => {
      try {
        await this.server.close().catch(() => undefined);
        await this.session.end();
      } catch (err) {
        this.deps.log.warn('MCP session not ended cleanly', { session: this.session.id, error: String(err) });
      } finally {
        this.markEnded();
      }
    })();
    return this.ended;
  }
}
