/**
 * One MCP session bound to one deskbatch session (docs/MCP.md "Sessions"):
 * an MCP `Server` whose `tools/call` runs each call as a batch of its
 * deskbatch session, through the same `Session.submit` a WebSocket
 * connection's `batch` goes through, so the executor's rules, texts, limits,
 * events, logs and recordings are the batch protocol's. `run_batch` submits
 * its calls as one batch, so its halting rule is the executor's. The MCP
 * session's end ends the deskbatch session, which gives its desktop back.
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
import type { OpenRequest, SessionRefusal } from '../server/connection.ts';
import { Session } from '../server/session.ts';
import { mcpBatchResult, mcpResult } from './content.ts';
import { RUN_BATCH_TOOL, type MemberCall, type ToolTable } from './tools.ts';

/** What an MCP session needs of the daemon's server (DeskbatchServer in src/server/server.ts has it). */
export interface SessionHost {
  /** A new deskbatch session with its desktop, as a WebSocket `hello` opens one, or why not. */
  openSession(request: OpenRequest): Promise<Session | SessionRefusal>;
  /** Ends it now: its batches cancelled and answered, its desktop given back. */
  endSessionNow(session: Session): Promise<void>;
  /** Its `welcome`: the display and screenshot sizes the MCP server's instructions give. */
  welcome(session: Session): Promise<Welcome>;
  /** False once the daemon shuts down: no new batches. */
  accepting(): boolean;
}

export interface McpSessionDeps {
  host: SessionHost;
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
  private batches = 0;
  private toolUses = 0;
  /** Why calls are refused from now on: the session ended, or another client resumed it. */
  private lost: string | undefined;
  private ending = false;
  private markEnded!: () => void;
  /** Resolves once the MCP server and the deskbatch session have ended (the server closing ends them). */
  readonly ended = new Promise<void>((resolve) => (this.markEnded = resolve));
  /** Progress senders of the batches whose `tools/call` asked for progress, by batch id. */
  private readonly progress = new Map<string, (event: ToolEvent) => void>();

  /** Opens a deskbatch session and binds a new MCP server to it; a refusal is returned as the server gave it. */
  static async open(deps: McpSessionDeps, signal: AbortSignal): Promise<McpSession | SessionRefusal> {
    // As a hello with `desktop: {}` asks: wait for a desktop, and a refusal says when to try again (`no_desktop`).
    const opened = await deps.host.openSession({ desktop: {}, signal });
    if (!(opened instanceof Session)) return opened;
    const welcome = await deps.host.welcome(opened);
    return new McpSession(deps, opened, welcome);
  }

  private constructor(
    private readonly deps: McpSessionDeps,
    readonly session: Session,
    welcome: Welcome,
  ) {
    session.attach(
      this,
      (event) => this.progress.get(event.batch_id)?.(event),
      // A WebSocket client resumed this session by its id: it is theirs now, and this MCP session runs nothing more.
      () => (this.lost = "another client took over this MCP session's deskbatch session; start a new MCP session"),
    );
    // The SDK marks Server as for advanced use: McpServer would check the inputs itself (see the top of this file).
    this.server = new Server(
      { name: 'deskbatch', version: DESKBATCH_VERSION },
      { capabilities: { tools: {} }, instructions: instructions(welcome) },
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
    if (!this.deps.host.accepting()) throw new McpError(ErrorCode.InternalError, 'the daemon is shutting down');
    const batchId = `mcp-${++this.batches}`;
    const toolUses: ToolUse[] = calls.map((c) => ({
      type: 'tool_use',
      id: `toolu_mcp_${++this.toolUses}`,
      name: c.name,
      toolset_name: c.toolset_name,
      input: c.input,
    }));
    const outcome = this.session.submit(batchId, toolUses);
    if (outcome.kind !== 'accepted') {
      // A batch id is never reused here, so only a full queue refuses one.
      throw new McpError(ErrorCode.InvalidRequest, 'too many calls wait in this session: wait for their results');
    }
    // Sent one after another, and all before the answer: a notification after it would name a finished request.
    let sent = Promise.resolve();
    if (progress) {
      let answered = 0;
      this.progress.set(batchId, (event) => {
        if (event.phase !== 'started') answered++;
        const params = {
          progressToken: progress.token,
          progress: answered,
          total: calls.length,
          message: `${event.toolset_name ?? ''}_${event.name}: ${event.phase}`,
        };
        sent = sent.then(() => progress.send({ method: 'notifications/progress', params })).catch(() => undefined);
      });
    }
    const cancel = (): void => void this.session.cancel(batchId);
    signal.addEventListener('abort', cancel, { once: true });
    try {
      const result = await outcome.result;
      if (progress) {
        await sent;
        // The SDK's client handles an answer at once and a notification a turn later, so one read holding both
        // loses the notification; writing the answer a turn after makes that rarer (docs/MCP.md).
        await new Promise((resolve) => setImmediate(resolve));
      }
      return result.tool_results;
    } finally {
      signal.removeEventListener('abort', cancel);
      this.progress.delete(batchId);
    }
  }

  /** Ends the MCP server and the deskbatch session (its desktop goes back). Idempotent; resolves as `ended`. */
  end(): Promise<void> {
    if (this.ending) return this.ended;
    this.ending = true;
    this.lost ??= 'this MCP session has ended';
    void (async () => {
      try {
        await this.server.close().catch(() => undefined);
        await this.deps.host.endSessionNow(this.session);
      } catch (err) {
        this.deps.log.warn('MCP session not ended cleanly', { session: this.session.id, error: String(err) });
      } finally {
        this.markEnded();
      }
    })();
    return this.ended;
  }
}
