/**
 * The container image's promises, read from the Dockerfile (this machine has
 * no Docker engine to build it): the daemon runs as a non-root user, writes
 * only inside its volume, gets its packages from the one shared list, carries
 * no token, and has a health check and a PID 1 that forwards signals.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';

interface Instruction {
  op: string;
  args: string;
}

/** The instructions of the last stage, continuation lines joined, comments dropped. */
async function lastStage(): Promise<Instruction[]> {
  const text = (await readFile(new URL('../Dockerfile', import.meta.url), 'utf8')).replace(/\\\n/g, ' ');
  const all = text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'))
    .map((l) => {
      const [op, ...rest] = l.split(/\s+/);
      return { op: op!.toUpperCase(), args: rest.join(' ') };
    });
  const from = all.map((i) => i.op).lastIndexOf('FROM');
  assert.ok(from >= 0, 'the Dockerfile has a FROM');
  return all.slice(from);
}

const last = (stage: Instruction[], op: string) => stage.filter((i) => i.op === op).at(-1)?.args;

test('the daemon runs as a non-root user', async () => {
  const stage = await lastStage();
  const user = last(stage, 'USER');
  assert.ok(user, 'a USER is set');
  assert.ok(!/^(root|0)(:|$)/.test(user), `USER is ${user}`);
  // Nothing after USER switches back.
  const after = stage.slice(stage.findIndex((i) => i.op === 'USER' && i.args === user));
  assert.ok(!after.some((i) => i.op === 'USER' && /^(root|0)/.test(i.args)));
});

test('everything the daemon writes lands in the volume, which the user owns', async () => {
  const stage = await lastStage();
  const volume = JSON.parse(last(stage, 'VOLUME') ?? '[]') as string[];
  assert.equal(volume.length, 1);
  const cmd = JSON.parse(last(stage, 'CMD') ?? '[]') as string[];
  for (const flag of ['--screenshots-dir', '--downloads-dir']) {
    const dir = cmd[cmd.indexOf(flag) + 1];
    assert.ok(cmd.includes(flag) && dir?.startsWith(`${volume[0]}/`), `${flag} ${dir} is inside ${volume[0]}`);
  }
  const run = stage.filter((i) => i.op === 'RUN').map((i) => i.args);
  assert.ok(
    run.some((r) => r.includes(`chown -R deskbatch:deskbatch ${volume[0]}`)),
    'the volume is owned by the user',
  );
});

test('packages from the shared list, a health check, tini as PID 1, no token baked in', async () => {
  const stage = await lastStage();
  assert.ok(stage.some((i) => i.op === 'COPY' && i.args.includes('scripts/system-packages.txt')));
  assert.match(last(stage, 'HEALTHCHECK') ?? '', /\/healthz/);
  assert.match(last(stage, 'ENTRYPOINT') ?? '', /tini/);
  assert.equal(last(stage, 'STOPSIGNAL'), 'SIGTERM');
  assert.ok(!stage.some((i) => (i.op === 'ENV' || i.op === 'ARG') && /TOKEN/i.test(i.args)), 'no token in ENV or ARG');
});
