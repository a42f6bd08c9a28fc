/**
 * A `BatchSession` of this daemon: a session opened on the server as a
 * WebSocket `hello` opens one, its batches submitted through `Session.submit`
 * as a connection's `batch` is (src/server/connection.ts), ended through
 * `endSessionNow`.
 */
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import type { ToolEvent, ToolResult, ToolUse, Welcome } from '../base/protocol.ts';
import type { OpenRequest, SessionRefusal } from '../server/connection.ts';
import { Session } from '../server/session.ts';
import type { BatchSession } from './session.ts';

/** What an MCP session needs of the daemon's server (DeskbatchServer in src/server/server.ts has it). */
export interface SessionHost {
  /** A new session with its desktop, as a WebSocket `hello` opens one, or why not. */
  openSession(request: OpenRequest): Promise<Session | SessionRefusal>;
  /** Ends it now: its batches cancelled and answered, its desktop given back. */
  endSessionNow(session: Session): Promise<void>;
  /** Its `welcome`. */
  welcome(session: Session): Promise<Welcome>;
  /** False once the daemon shuts down: no new batches. */
  accepting(): boolean;
}

/** Opens a session on `host`, or gives the refusal as the server gave it. */
export async function openLocalSession(host: SessionHost, signal: AbortSignal): Promise<LocalSession | SessionRefusal> {
  // As a hello with `desktop: {}` asks: wait for a desktop, and a refusal says when to try again (`no_desktop`).
  const opened = await host.openSession({ desktop: {}, signal });
  if (!(opened instanceof Session)) return opened;
  return new LocalSession(host, opened, await host.welcome(opened));
}

export class LocalSession implements BatchSession {
  /** Set when another client took the session over: it runs nothing more for the MCP session. */
  private lost: string | undefined;
  /** The `tool_event` listener of each batch running, by batch id. */
  private readonly listeners = new Map<string, (event: ToolEvent) => void>();

  constructor(
    private readonly host: SessionHost,
    private readonly session: Session,
    readonly welcome: Welcome,
  ) {
    session.attach(
      this,
      (event) => this.listeners.get(event.batch_id)?.(event),
      // A WebSocket client resumed this session by its id: it is theirs now.
      () => (this.lost = "another client took over this MCP session's deskbatch session; start a new MCP session"),
    );
  }

  get id(): string {
    return this.session.id;
  }

  async run(
    batchId: string,
    toolUses: readonly ToolUse[],
    signal: AbortSignal,
    onEvent: (event: ToolEvent) => void,
  ): Promise<ToolResult[]> {
    if (this.lost) throw new McpError(ErrorCode.InvalidRequest, this.lost);
    if (!this.host.accepting()) throw new McpError(ErrorCode.InternalError, 'the daemon is shutting down');
    const outcome = this.session.submit(batchId, toolUses);
    if (outcome.kind !== 'accepted') {
      // A batch id is never reused by an MCP session, so only a full queue refuses one.
      throw new McpError(ErrorCode.InvalidRequest, 'too many calls wait in this session: wait for their results');
    }
    this.listeners.set(batchId, onEvent);
    const cancel = (): void => void this.session.cancel(batchId);
    signal.addEventListener('abort', cancel, { once: true });
    try {
      return (await outcome.result).tool_results;
    } finally {
      signal.removeEventListener('abort', cancel);
      this.listeners.delete(batchId);
    }
  }

  end(): Promise<void> {
    return this.host.endSessionNow(this.session);
  }
}
