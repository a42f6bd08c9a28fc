/**
 * The Compose desktop and the pods' preStop hook, from deploy/: the Compose
 * desktop is published on the host's 127.0.0.1 only, requires its token from
 * outside, has /dev/shm, a read-only root, a health check, a restart policy and
 * a stop grace period longer than the daemon's shutdown; the preStop hook of
 * the Kubernetes desktops, run here against a stand-in /readyz, waits while a
 * desktop is leased or a session waits and stops when none is or the daemon
 * is gone.
 *
 * There is no cluster and no Docker engine on the machine these tests run on:
 * these checks are all the validation the files get here. The checks live in
 * testkit/deploy-checks.ts; test/deploy-mutations.test.ts shows that each fails
 * on a copy that breaks its promise.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { checkCompose, preStopScript } from '../testkit/deploy-checks.ts';
import { PORT, load } from '../testkit/deploy-model.ts';

test('the preStop hook waits while a desktop is leased or a session waits, and stops when none is or the daemon is gone', async () => {
  const d = await load();
  const { command, script } = preStopScript(d);
  const pollSleep = 'setTimeout(resolve, 5000)';
  const url = `http://127.0.0.1:${PORT}/readyz`;
  assert.ok(script.includes(pollSleep) && script.includes(url), 'the script polls /readyz every 5 s');
  // A stand-in /readyz with what the pool answers (docs/OPERATIONS.md): 503 no_free_desktop when all are leased.
  const pool = (leased: number, waiting: number) => ({
    status: leased < 4 ? 'ready' : 'not_ready',
    ...(leased < 4 ? {} : { reason: 'no_free_desktop' }),
    desktops: { mode: 'pool', max: 4, free: 4 - leased, leased, waiting },
  });
  let answer: unknown = pool(4, 1);
  let asked = 0;
  const server = createServer((_req, res) => {
    asked += 1;
    const ready = (answer as { status?: string }).status === 'ready';
    res.writeHead(ready ? 200 : 503, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const fast = script.replace(url, `http://127.0.0.1:${port}/readyz`).replace(pollSleep, 'setTimeout(resolve, 20)');
  const run = () => {
    const child = spawn(process.execPath, [...command.slice(1, -1), fast], { stdio: 'inherit' });
    const state = { exited: false };
    const code = once(child, 'exit').then(([c]) => ((state.exited = true), c as number | null));
    return { state, code };
  };
  // Waits until the script has asked /readyz `n` more times (so it has seen the current answer), or has ended.
  const pollsLater = async (script: { exited: boolean }, n: number) => {
    const target = asked + n;
    const deadline = Date.now() + 20_000;
    while (asked < target && !script.exited && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.ok(asked >= target || script.exited, `the script asked /readyz ${n} more times, or ended`);
  };
  try {
    const busy = run();
    await pollsLater(busy.state, 3);
    assert.ok(!busy.state.exited, 'it waits while every desktop is leased');
    answer = pool(1, 0);
    await pollsLater(busy.state, 3);
    assert.ok(!busy.state.exited, 'it waits while one desktop is leased');
    answer = pool(0, 1);
    await pollsLater(busy.state, 3);
    assert.ok(!busy.state.exited, 'it waits while a session waits');
    answer = pool(0, 0);
    assert.equal(await busy.code, 0, 'it ends when no desktop is leased and no session waits');

    answer = { status: 'ready', display: { width: 1280, height: 800 }, browser: 'ok' };
    assert.equal(await run().code, 0, 'a daemon without a pool has nothing to drain');

    answer = pool(4, 0);
    const gone = run();
    await pollsLater(gone.state, 3);
    assert.ok(!gone.state.exited, 'it waits');
    server.closeAllConnections();
    server.close();
    assert.equal(await gone.code, 0, 'it ends when the daemon no longer answers');
  } finally {
    server.closeAllConnections();
    server.close();
  }
});

test('compose: host 127.0.0.1 only, the token required, /dev/shm, read-only, a health check and a restart policy', async () => {
  checkCompose(await load());
});
