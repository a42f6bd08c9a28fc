/**
 * A `BatchSession` of another daemon (`deskbatch mcp --connect`, docs/MCP.md
 * "Over stdio"): a session opened over the batch protocol by the client
 * library, which reconnects and resumes it and resends a batch under its id
 * after a drop, so nothing runs twice. Its end closes the connection; the
 * daemon then keeps the session for its resume window before it ends.
 */
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from '../base/log.ts';
import type { ToolEvent, ToolResult, ToolUse, Welcome } from '../base/protocol.ts';
import { DESKBATCH_VERSION } from '../base/version.ts';
import { BatchRefusedError, DeskbatchClient } from '../client/index.ts';
import type { BatchSession } from './session.ts';

export class RemoteSession implements BatchSession {
  private constructor(private readonly client: DeskbatchClient) {}

  /** Connects to the daemon at `url` (`ws://HOST:PORT/v1`) with its token, and opens a session. */
  static async connect(url: string, token: string, log: Logger): Promise<RemoteSession> {
    const client = await DeskbatchClient.connect(url, { token, clientName: `deskbatch-mcp/${DESKBATCH_VERSION}` });
    client.on('session_lost', ({ previousSessionId }) =>
      log.warn('the remote session was lost (its resume window passed): a new one goes on, on a new desktop', {
        previous: previousSessionId,
        session: client.sessionId,
      }),
    );
    return new RemoteSession(client);
  }

  get id(): string {
    return this.client.sessionId;
  }

  get welcome(): Welcome {
    return this.client.welcome;
  }

  async run(
    batchId: string,
    toolUses: readonly ToolUse[],
    signal: AbortSignal,
    onEvent: (event: ToolEvent) => void,
  ): Promise<ToolResult[]> {
    try {
      return (await this.client.runBatch(toolUses, { batchId, signal, onToolEvent: onEvent })).toolResults;
    } catch (err) {
      // Refused before anything ran (a full queue, a batch too large): the daemon's code and reason.
      if (err instanceof BatchRefusedError) throw new McpError(ErrorCode.InvalidRequest, err.message);
      throw err;
    }
  }

  end(): Promise<void> {
    return this.client.close();
  }
}
