/**
 * The Python client (clients/python) against real daemons: its pytest suite
 * (clients/python/tests), and its example agent run through the stand-in
 * Messages API as `npm run example:python` runs it.
 *
 * Two daemons serve the suite: one with an X display (1024x768) and a headless
 * browser, and one with neither whose sessions end 300 ms after a drop (for
 * the lost-session case). Their URLs and the token reach pytest in the
 * environment; a failing suite fails this test with pytest's own report.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import type { BetaMessage } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { TEST_TOKEN, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { checkExampleConversation, checkExampleOutput } from '../testkit/example-conversation.ts';
import { EXAMPLE_PAGE, EXAMPLE_TASK, loadTurns, startMessagesApi } from '../testkit/messages-api.ts';
import { PYTHON, runPython } from '../testkit/python.ts';
import { startWebServer, type WebServer } from '../testkit/web.ts';

/** Bounds a hung run; the suite takes seconds. */
const RUN_DEADLINE_MS = 5 * 60_000;

describe('the Python client against real daemons', () => {
  let display: VirtualDisplay;
  let web: WebServer;
  let daemon: TestDaemon;
  let shortGrace: TestDaemon;
  let turns: BetaMessage[];
  before(async () => {
    display = await startTestDisplay({ width: 1024, height: 768 });
    web = await startWebServer();
    web.route('/report', EXAMPLE_PAGE);
    // A closed client's session waits out its resume window (docs/PROTOCOL.md "Idempotency and reconnects"):
    // room for every connection the suite makes within it.
    daemon = await startTestDaemon({ display: display.display, browser: 'headless', limits: { maxSessions: 256 } });
    shortGrace = await startTestDaemon({ display: undefined, browser: 'off', sessionGraceMs: 300 });
    turns = await loadTurns('example', { PAGE_URL: `${web.origin}/report` });
  });
  after(async () => {
    await shortGrace?.close();
    await daemon?.close();
    await web?.close();
    await display?.stop();
  });

  test('pytest: clients/python/tests pass against the daemons', async (t) => {
    const run = await runPython(['-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'clients/python/tests'], {
      env: { DESKBATCH_URL: daemon.url, DESKBATCH_SHORT_GRACE_URL: shortGrace.url, DESKBATCH_TOKEN: TEST_TOKEN },
      timeoutMs: RUN_DEADLINE_MS,
    });
    const report = `${PYTHON} -m pytest exited ${run.code ?? run.signal}\n${run.stdout}\n${run.stderr}`;
    assert.equal(run.code, 0, report);
    // The summary line: every test collected passed, none skipped or failed.
    const summary = run.stdout.trimEnd().split('\n').at(-1) ?? '';
    assert.match(summary, /^(\d+) passed in [\d.]+s/, report);
    assert.ok(Number(/^(\d+)/.exec(summary)![1]) >= 30, `every test file was collected: ${summary}`);
    t.diagnostic(`pytest: ${summary} (${Math.round(run.ms)} ms with the interpreter's start)`);
  });

  test('the Python example agent runs the recorded conversation on the daemon; every request follows the rules', async () => {
    const api = await startMessagesApi({ turns });
    try {
      const run = await runPython(['clients/python/examples/agent.py', EXAMPLE_TASK], {
        env: {
          ANTHROPIC_API_KEY: 'replay-no-key',
          ANTHROPIC_BASE_URL: api.baseURL,
          DESKBATCH_URL: daemon.url,
          DESKBATCH_TOKEN: TEST_TOKEN,
        },
        timeoutMs: RUN_DEADLINE_MS,
      });
      const report = `exit ${run.code ?? run.signal}\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`;
      assert.equal(run.code, 0, report);
      checkExampleConversation(api, turns);
      checkExampleOutput(run.stdout, turns, report);
      assert.match(run.stderr, /^Messages API through (plain HTTP|anthropic \S+)/m);
      assert.ok(!run.stdout.includes(TEST_TOKEN) && !run.stderr.includes(TEST_TOKEN), 'the token is never printed');
    } finally {
      await api.close();
    }
  });

  test('npm run example:python (examples/replay-python.ts) replays the conversation with the Python agent', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'examples/replay-python.ts'], {
      cwd: new URL('..', import.meta.url),
      env: {
        ...process.env,
        DESKBATCH_URL: daemon.url,
        DESKBATCH_TOKEN: TEST_TOKEN,
        DESKBATCH_EXAMPLE_PAGE_PORT: '0',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const deadline = setTimeout(() => child.kill('SIGKILL'), RUN_DEADLINE_MS);
    const code = await new Promise<number | null>((resolve, reject) => {
      child.once('error', reject);
      child.once('close', resolve);
    }).finally(() => clearTimeout(deadline));
    assert.equal(code, 0, `exit ${code}\nstdout:\n${stdout}\nstderr:\n${stderr}`);
    assert.match(stdout, /^replaying 3 recorded turns from a stand-in Messages API at http:\/\/127\.0\.0\.1:\d+$/m);
    assert.match(stdout, /^turn 1: 2 calls \(browser 2\), 0 failed, \d+ ms$/m);
    assert.match(
      stdout,
      /^turn 2: 3 calls \(computer 3\), 1 failed \(mouse_move: ToolInputError\), 1 not run, \d+ ms$/m,
    );
    assert.match(stdout, /^final \(end_turn after 3 turns\): .*secret word is pelican/m);
    assert.match(stdout, /^every request \(3\) followed the Messages API's rules$/m);
  });
});
