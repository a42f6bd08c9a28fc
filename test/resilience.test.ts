/**
 * Issue 4, promises 1 and 2: circuit breakers around starting the desktop
 * worker and the browser (fail fast for a cool-down, not a retry storm), and
 * automatic retries only for members that change nothing, only on errors
 * marked retryable, and never on errors that say the world was reset.
 *
 * The executor and the breaker run for real; the members here are test
 * members that throw a scripted sequence of errors. The daemon tests at the
 * end drive a real daemon at a display that is not there yet, and at a
 * browser executable that is not there yet.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { z } from 'zod';
import { BrowserCrashedError } from '../src/browser/manager.ts';
import { DisplayUnavailableError, DriverCrashedError } from '../src/base/errors.ts';
import { Executor } from '../src/executor/executor.ts';
import { Lane } from '../src/desktop-pool/lane.ts';
import { silentLogger } from '../src/base/log.ts';
import type { BatchResult, ToolEvent, ToolUse } from '../src/base/protocol.ts';
import { ResourceBreaker } from '../src/base/resilience.ts';
import { bindMember, type CallContext, type Member, type Toolset } from '../src/toolset-api/types.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { computerUse, startTestDaemon } from '../testkit/daemon.ts';
import { pickFreeDisplay, startBareXvfb, type BareXvfb } from '../testkit/display.ts';
import { browserUse, startWebServer } from '../testkit/web.ts';
import { waitFor } from '../testkit/faults.ts';
import { until } from '../testkit/wait.ts';
import { failsWith } from '../testkit/errors.ts';

/** Members that fail with the next scripted error, and succeed once the script is used up. */
function flakyToolset(script: Error[], runs: string[]): Toolset {
  const flaky = (name: string, effect: 'read' | 'write'): Member<z.ZodType, CallContext> =>
    ({
      name,
      summary: name,
      kind: 'text',
      effect,
      input: z.object({}),
      handle: async () => {
        runs.push(name);
        const next = script.shift();
        if (next) throw next;
        return `${name} ok`;
      },
    }) as Member<z.ZodType, CallContext>;
  const members = [flaky('look', 'read'), flaky('act', 'write')];
  return {
    type: 'flaky_toolset_test',
    name: 'flaky',
    notExecutedText: 'Not executed (flaky).',
    cancelledText: 'Cancelled (flaky).',
    usesDesktop: false,
    allowedBlocks: ['text'],
    allMemberNames: members.map((m) => m.name),
    members: new Map(members.map((m) => [m.name, bindMember(m, (c: CallContext) => c)])),
    disabledMemberNames: new Set(),
  };
}

async function runFlaky(name: 'look' | 'act', script: Error[], callTimeoutMs = 5_000) {
  const runs: string[] = [];
  const executor = new Executor({
    toolsets: [flakyToolset(script, runs)],
    callTimeoutMs,
    exposeErrorMessages: false,
    images: { limits: { maxSidePx: 2000, maxVisualTokens: 4784 }, maxBase64Bytes: 10 * 1024 * 1024 },
    lane: new Lane(),
    retry: { attempts: 2, initialDelayMs: 10 },
    log: silentLogger,
  });
  const toolUses: ToolUse[] = [{ type: 'tool_use', id: 'toolu_1', name, toolset_name: 'flaky', input: {} }];
  const events: ToolEvent[] = [];
  const raw = await executor.run({
    sessionId: 's',
    batchId: 'b',
    toolUses,
    signal: new AbortController().signal,
    emit: (e) => events.push(e),
  });
  return { result: assertApiValid(toolUses, raw), runs, events };
}

const crash = () => new DriverCrashedError('worker exited during capture (segfault)');

describe('automatic retries', () => {
  test('a member that changes nothing is run again after a retryable error, and the caller sees how many runs', async () => {
    const { result, runs, events } = await runFlaky('look', [crash()]);
    assert.deepEqual(runs, ['look', 'look']);
    assert.equal(result.failures.length, 0);
    assert.equal(events.find((e) => e.phase === 'succeeded')?.attempts, 2);
  });

  test('at most the configured number of retries; the failure says how many runs there were', async () => {
    const { result, runs } = await runFlaky('look', [crash(), crash(), crash(), crash()]);
    assert.equal(runs.length, 3);
    assert.equal(result.failures[0]?.error.attempts, 3);
    assert.equal(result.failures[0]?.error.retryable, true);
  });

  test('a member that changes the world is never run twice', async () => {
    const { result, runs } = await runFlaky('act', [crash()]);
    assert.deepEqual(runs, ['act']);
    assert.equal(result.failures[0]?.error.type, 'DriverCrashedError');
    assert.equal(result.failures[0]?.error.attempts, undefined);
  });

  test('no retry after an error that is not retryable, one that reset the world, or an open circuit', async () => {
    const open = Object.assign(new DisplayUnavailableError('circuit open'), { retryAfterMs: 900 });
    for (const error of [new Error('plain bug'), new BrowserCrashedError('gone'), open]) {
      const { result, runs } = await runFlaky('look', [error]);
      assert.deepEqual(runs, ['look'], error.name);
      assert.equal(result.failures.length, 1);
    }
    const { result } = await runFlaky('look', [open]);
    assert.equal(result.failures[0]?.error.retry_after_ms, 900);
  });
});

describe('ResourceBreaker', () => {
  const unavailable = (m: string) => new DisplayUnavailableError(m);

  test('opens after N failed starts in a row, fails at once while open, then lets one start try', async () => {
    // The cool-down must outlast the few steps from the third failure to the refused start even on a
    // busy machine; the test then waits for it to end (coolingDown), not for a fixed time.
    const breaker = new ResourceBreaker('thing', { failures: 3, coolDownMs: 1_000 }, unavailable, silentLogger);
    let starts = 0;
    const failing = async (): Promise<string> => {
      starts++;
      throw new DriverCrashedError('did not start');
    };
    for (let i = 0; i < 3; i++)
      await assert.rejects(breaker.run(failing), failsWith(DriverCrashedError, 'did not start'));
    assert.equal(breaker.state, 'open');
    const refused = await breaker.run(failing).then(
      () => assert.fail('an open circuit ran the start'),
      (err: unknown) => err,
    );
    assert.ok(refused instanceof DisplayUnavailableError);
    const left = (refused as unknown as { retryAfterMs: number }).retryAfterMs;
    assert.ok(left > 0 && left <= 1_000, String(left));
    assert.equal(starts, 3, 'no start while the circuit is open');

    await until('the cool-down to end', () => !breaker.coolingDown, { seen: () => breaker.state });
    assert.equal(await breaker.run(async () => 'up'), 'up');
    assert.equal(breaker.state, 'closed');
  });

  test('a success between failures resets the count', async () => {
    const breaker = new ResourceBreaker('thing', { failures: 2, coolDownMs: 10_000 }, unavailable, silentLogger);
    const fail = async (): Promise<void> => {
      throw new DriverCrashedError('x');
    };
    await assert.rejects(breaker.run(fail), failsWith(DriverCrashedError, 'x'));
    await breaker.run(async () => undefined);
    await assert.rejects(breaker.run(fail), failsWith(DriverCrashedError, 'x'));
    assert.equal(breaker.state, 'closed');
  });
});

/** Every tool_use answered once, in order; returns the batch result. */
function answered(toolUses: ToolUse[], result: BatchResult): BatchResult {
  const valid = assertApiValid(toolUses, result);
  assert.deepEqual(
    valid.tool_results.map((r) => r.tool_use_id),
    toolUses.map((t) => t.id),
  );
  return valid;
}

describe('breakers in the daemon', () => {
  test('a display that is not there: fast failures once the circuit opens, and work resumes when it comes', async () => {
    // A display number nobody uses: the test starts an X server on it later.
    const number = pickFreeDisplay();
    const daemon = await startTestDaemon({
      display: `:${number}`,
      browser: 'off',
      resilience: { breaker: { failures: 2, coolDownMs: 1_000 } },
    });
    let display: BareXvfb | undefined;
    try {
      const client = await daemon.connect();
      await client.hello();
      const failures = [];
      for (let i = 0; i < 4; i++) {
        const uses = [computerUse('cursor_position'), computerUse('screenshot')];
        const { result } = await client.batch(`down-${i}`, uses);
        answered(uses, result);
        assert.equal(result.failures.length, 1, 'the second call is not executed');
        failures.push(result.failures[0]!.error);
      }
      for (const e of failures) {
        assert.equal(e.type, 'DisplayUnavailableError');
        assert.equal(e.retryable, true);
      }
      assert.ok(
        failures.some((e) => e.retry_after_ms !== undefined),
        `the circuit opened: ${JSON.stringify(failures)}`,
      );

      display = await startBareXvfb(number, { width: 800, height: 600 });
      const t0 = Date.now();
      const back = await waitFor(
        'a computer batch to work again',
        async () => {
          const uses = [computerUse('screenshot')];
          const { result } = await client.batch(`up-${Date.now()}`, uses);
          answered(uses, result);
          return result.failures.length === 0 ? result : undefined;
        },
        45_000,
        250,
      );
      assert.equal(back.tool_results[0]!.content[0]!.type, 'image');
      console.log(`# display back: first good batch ${Date.now() - t0} ms after the X server started`);
    } finally {
      await daemon.close();
      await display?.stop();
    }
  });

  test('a browser that cannot start: the circuit opens, and the browser works once it can start', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'deskbatch-exe-'));
    const executablePath = join(dir, 'chromium');
    const web = await startWebServer();
    web.route('/hello', '<title>hi</title><p>hello from the page</p>');
    const daemon = await startTestDaemon({
      browser: 'headless',
      browserSettings: { executablePath },
      resilience: { breaker: { failures: 2, coolDownMs: 1_000 } },
    });
    try {
      const client = await daemon.connect();
      await client.hello();
      const errors = [];
      for (let i = 0; i < 3; i++) {
        const uses = [browserUse('navigate', { url: `${web.origin}/hello` }), browserUse('get_page_text')];
        const { result } = await client.batch(`nobrowser-${i}`, uses);
        answered(uses, result);
        errors.push(result.failures[0]!.error);
      }
      assert.deepEqual(
        errors.map((e) => [e.type, e.retryable]),
        errors.map(() => ['BrowserUnavailableError', true]),
      );
      assert.equal(errors[2]!.retry_after_ms !== undefined, true, JSON.stringify(errors[2]));

      // The browser becomes startable.
      await symlink('/usr/bin/chromium', executablePath);
      const ok = await waitFor(
        'the browser to start',
        async () => {
          const uses = [browserUse('navigate', { url: `${web.origin}/hello` }), browserUse('get_page_text')];
          const { result } = await client.batch(`browser-${Date.now()}`, uses);
          answered(uses, result);
          return result.failures.length === 0 ? result : undefined;
        },
        45_000,
        250,
      );
      const text = ok.tool_results[1]!.content.find((b) => b.type === 'text');
      assert.match(text?.type === 'text' ? text.text : '', /hello from the page/);
    } finally {
      await daemon.close();
      await web.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
