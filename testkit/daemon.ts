/**
 * Starts a real daemon on 127.0.0.1 port 0 and speaks to it through a real
 * ws client. Everything started here is stopped by `close()`.
 */
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { resolveConfig, type DaemonConfig } from '../src/base/config.ts';
import { startDaemon, type Daemon } from '../src/daemon.ts';
import { createLogger } from '../src/base/log.ts';
import type {
  BatchResult,
  ErrorMessage,
  HelloMessage,
  ServerMessage,
  ToolEvent,
  ToolUse,
  Welcome,
} from '../src/base/protocol.ts';
import { newLogDir } from './artifacts.ts';
import { HandshakeError, RecordingClient, type OpenOptions } from './ws-client.ts';

export const TEST_TOKEN = 'test-token-0123456789abcdef-0123456789';

/** Config overrides; nested settings may be partial (resolveConfig merges them over the defaults). */
type Overrides = Partial<
  Omit<
    DaemonConfig,
    'screenshot' | 'limits' | 'browserSettings' | 'resilience' | 'desktops' | 'recording' | 'profiles' | 'cdp'
  >
> & {
  profiles?: Partial<DaemonConfig['profiles']>;
  recording?: Partial<Omit<DaemonConfig['recording'], 'retention' | 'redact'>> & {
    retention?: Partial<DaemonConfig['recording']['retention']>;
    redact?: DaemonConfig['recording']['redact'];
  };
  desktops?: Partial<DaemonConfig['desktops']>;
  screenshot?: Partial<DaemonConfig['screenshot']>;
  resilience?: {
    breaker?: Partial<DaemonConfig['resilience']['breaker']>;
    retry?: Partial<DaemonConfig['resilience']['retry']>;
  };
  limits?: Partial<DaemonConfig['limits']>;
  browserSettings?: Partial<DaemonConfig['browserSettings']>;
  cdp?: Partial<DaemonConfig['cdp']>;
};

export interface TestDaemon {
  daemon: Daemon;
  url: string;
  screenshotsDir: string;
  /** The daemon's log (every line, debug level included). */
  logFile: string;
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
    // Most test daemons never call the browser: they do not launch one at start (each launch costs
    // seconds of CPU on these small machines); the tests of that launch turn it on.
    browserSettings: { allowPrivateNetworks: true, launchAtStart: false, ...overrides.browserSettings },
  } as Parameters<typeof resolveConfig>[0]);
  // Every line at debug level goes to the test file's log folder (testkit/artifacts.ts);
  // DESKBATCH_TEST_LOG=1 also prints them.
  const logPath = join(newLogDir('daemon'), 'daemon.log');
  const logFile = createWriteStream(logPath, { flags: 'a' });
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
    logFile: logPath,
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

export type ConnectOptions = OpenOptions;

/**
 * The tests' client (testkit/ws-client.ts): every message is recorded and checked against the
 * protocol's schemas, and one that fails them fails the test.
 */
export class TestClient extends RecordingClient {
  static async open(url: string, options: ConnectOptions = {}): Promise<TestClient> {
    const ws = await RecordingClient.connect(url, TEST_TOKEN, options);
    return new TestClient(ws, { onInvalid: 'throw', keep: true });
  }

  async hello(resume?: string, extra: Partial<HelloMessage> = {}): Promise<Welcome> {
    this.send({
      type: 'hello',
      client: 'deskbatch-tests/1',
      ...(resume ? { resume_session_id: resume } : {}),
      ...extra,
    });
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

  /** The tests drop the connection (no close handshake), as a vanished client would. */
  override close(): void {
    this.terminate();
  }
}

export { HandshakeError };

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
