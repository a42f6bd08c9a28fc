/**
 * The Python client (clients/python) against real daemons: its pytest suite
 * (clients/python/tests).
 *
 * Two daemons serve the suite: one with an X display (1024x768) and a headless
 * browser, and one with neither whose sessions end 300 ms after a drop (for
 * the lost-session case). Their URLs and the token reach pytest in the
 * environment; a failing suite fails this test with pytest's own report.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { TEST_TOKEN, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { PYTHON, runPython } from '../testkit/python.ts';

/** Bounds a hung run; the suite takes seconds. */
const RUN_DEADLINE_MS = 5 * 60_000;

describe('the Python client against real daemons', () => {
  let display: VirtualDisplay;
  let daemon: TestDaemon;
  let shortGrace: TestDaemon;
  before(async () => {
    display = await startTestDisplay({ width: 1024, height: 768 });
    // A closed client's session waits out its resume window (docs/PROTOCOL.md "Idempotency and reconnects"):
    // room for every connection the suite makes within it.
    daemon = await startTestDaemon({ display: display.display, browser: 'headless', limits: { maxSessions: 256 } });
    shortGrace = await startTestDaemon({ display: undefined, browser: 'off', sessionGraceMs: 300 });
  });
  after(async () => {
    await shortGrace?.close();
    await daemon?.close();
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
});
