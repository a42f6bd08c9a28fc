/**
 * Starts a real daemon on 127.0.0.1 port 0 and speaks to it through a real
 * ws client. Everything started here is stopped by `close()`.
 */
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { resolveConfig, type DaemonConfig } from '../../src/config.ts';
import { startDaemon, type Daemon } from '../../src/daemon.ts';
import { createLogger } from '../../src/log.ts';
import {
  ServerMessageSchema,
  type BatchResult,
  type ErrorMessage,
  type ServerMessage,
  type ToolEvent,
  type ToolUse,
  type Welcome,
} from '../../src/protocol.ts';
import { newLogDir } from './artifacts.ts';

export const TEST_TOKEN = 'test-token-0123456789abcdef-0123456789';

/** Config overrides; nested settings may be partial (resolveConfig merges them over the defaults). */
type Overrides = Partial<Omit<DaemonConfig, 'screenshot' | 'limits' | 'browserSettings' | 'resilience'>> & {
  screenshot?: Partial<DaemonConfig['screenshot']>;
  resilience?: {
    breaker?: Partial<DaemonConfig['resilience']['breaker']>;
    retry?: Partial<DaemonConfig['resilience']['retry']>;
  };
  limits?: Partial<DaemonConfig['limits']>;
  browserSettings?: Partial<DaemonConfig['browserSettings']>;
};

export interface TestDaemon {
  daemon: Daemon;
  url: string;
  screenshotsDir: string;
  connect(options?: ConnectOptions): Promise<TestClient>;
  close(): Promise<void>;
}

export async function startTestDaemon(overrides: Overrides = {}): Promise<TestDaemon> {
  const screenshotsDir = await mkdtemp(join(tmpdir(), 'deskbatch-shots-'));
  const config = resolveConfig({
    port: 0,
    token: TEST_TOKEN,
    tokenConfigured: true,
    screenshotsDir,
    ...overrides,
    // The tests' web servers listen on 127.0.0.1: the browser reaches them through the operator's
    // opt-in, as a deployment reaching an intranet would. test/containment.test.ts turns it off.
    browserSettings: { allowPrivateNetworks: true, ...overrides.browserSettings },
  } as Parameters<typeof resolveConfig>[0]);
  // Every line at debug level goes to the test file's log folder (test/helpers/artifacts.ts);
  // DESKBATCH_TEST_LOG=1 also prints them.
  const logFile = createWriteStream(join(newLogDir('daemon'), 'daemon.log'), { flags: 'a' });
  const echo = Boolean(process.env.DESKBATCH_TEST_LOG);
  logFile.on('error', () => undefined); // a full disk must not fail the test it logs for
  const log = createLogger('debug', (line) => {
    if (!logFile.writableEnded) logFile.write(line);
    if (echo) process.stderr.write(line);
  });
  const closeLog = (): Promise<void> => new Promise((resolve) => logFile.end(resolve));
  let daemon: Daemon;
  try {
    daemon = await startDaemon(config, log);
  } catch (err) {
    await closeLog();
    throw err;
  }
  const clients: TestClient[] = [];
  return {
    daemon,
    url: daemon.url,
    screenshotsDir,
    async connect(options = {}) {
      const client = await TestClient.open(daemon.url, options);
      clients.push(client);
      return client;
    },
    async close() {
      for (const c of clients) c.close();
      await daemon.close();
      await closeLog();
      await rm(screenshotsDir, { recursive: true, force: true });
    },
  };
}

export interface ConnectOptions {
  token?: string | null;
  headers?: Record<string, string>;
  protocols?: string[];
}

/** A ws client that records every message and validates it against the protocol schemas. */
export class TestClient {
  readonly messages: ServerMessage[] = [];
  private waiters: { match: (m: ServerMessage) => boolean; resolve: (m: ServerMessage) => void }[] = [];

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => {
      const msg = ServerMessageSchema.parse(JSON.parse(data.toString()));
      this.messages.push(msg);
      this.waiters = this.waiters.filter((w) => {
        if (!w.match(msg)) return true;
        w.resolve(msg);
        return false;
      });
    });
  }

  static open(url: string, options: ConnectOptions = {}): Promise<TestClient> {
    const headers: Record<string, string> = { ...options.headers };
    if (options.token !== null && !options.protocols) headers.authorization = `Bearer ${options.token ?? TEST_TOKEN}`;
    const ws = new WebSocket(url, options.protocols ?? [], { headers });
    return new Promise((resolve, reject) => {
      ws.once('open', () => resolve(new TestClient(ws)));
      ws.once('unexpected-response', (_req, res) => reject(new HandshakeError(res.statusCode ?? 0)));
      ws.once('error', reject);
    });
  }

  send(message: unknown): void {
    this.ws.send(typeof message === 'string' ? message : JSON.stringify(message));
  }

  /** The next message (already received or future) that matches. */
  next<T extends ServerMessage>(match: (m: ServerMessage) => m is T, timeoutMs = 60_000): Promise<T> {
    const seen = this.messages.find(match);
    if (seen) {
      this.messages.splice(this.messages.indexOf(seen), 1);
      return Promise.resolve(seen);
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        // The newest messages, in short: what did arrive says where it stopped.
        const recent = this.messages
          .slice(-12)
          .map((m) =>
            [m.type, 'batch_id' in m ? m.batch_id : '', 'name' in m ? m.name : '', 'phase' in m ? m.phase : '']
              .filter(Boolean)
              .join(' '),
          );
        reject(new Error(`timed out after ${timeoutMs} ms waiting for a message; the latest: ${recent.join(' | ')}`));
      }, timeoutMs);
      this.waiters.push({
        match,
        resolve: (m) => {
          clearTimeout(timer);
          this.messages.splice(this.messages.indexOf(m), 1);
          resolve(m as T);
        },
      });
    });
  }

  async hello(resume?: string): Promise<Welcome> {
    this.send({ type: 'hello', client: 'deskbatch-tests/1', ...(resume ? { resume_session_id: resume } : {}) });
    return this.next((m): m is Welcome => m.type === 'welcome');
  }

  /** Sends a batch and waits for its result; returns the events seen for it too. */
  async batch(batchId: string, toolUses: ToolUse[]): Promise<{ result: BatchResult; events: ToolEvent[] }> {
    this.send({ type: 'batch', batch_id: batchId, tool_uses: toolUses });
    // Its result, or the protocol error that refused it (then at once, with the daemon's reason).
    const answer = await this.next(
      (m): m is BatchResult | ErrorMessage =>
        (m.type === 'batch_result' || m.type === 'error') && 'batch_id' in m && m.batch_id === batchId,
    );
    if (answer.type === 'error') throw new Error(`batch ${batchId} was refused: ${answer.code}: ${answer.message}`);
    const result = answer;
    const events = this.messages.filter((m): m is ToolEvent => m.type === 'tool_event' && m.batch_id === batchId);
    for (const e of events) this.messages.splice(this.messages.indexOf(e), 1);
    return { result, events };
  }

  closed(): Promise<{ code: number; reason: string }> {
    if (this.ws.readyState === WebSocket.CLOSED) return Promise.resolve({ code: -1, reason: '' });
    return new Promise((resolve) =>
      this.ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })),
    );
  }

  close(): void {
    this.ws.terminate();
  }
}

export class HandshakeError extends Error {
  constructor(readonly status: number) {
    super(`handshake refused with HTTP ${status}`);
  }
}

/** Matches the `started` tool_event of call `toolUseId` in batch `batchId`, for `TestClient.next`. */
export function startedEvent(batchId: string, toolUseId: string): (m: ServerMessage) => m is ToolEvent {
  return (m): m is ToolEvent =>
    m.type === 'tool_event' && m.batch_id === batchId && m.tool_use_id === toolUseId && m.phase === 'started';
}

let counter = 0;
/** A computer tool_use block as the API would send it. */
export function computerUse(name: string, input: Record<string, unknown> = {}, id?: string): ToolUse {
  return {
    type: 'tool_use',
    id: id ?? `toolu_${(counter++).toString().padStart(4, '0')}`,
    name,
    toolset_name: 'computer',
    input,
  };
}
