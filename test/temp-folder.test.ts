/**
 * The daemon's temporary folders (src/base/temp-folder.ts): named after the
 * process that made them, and swept when that process no longer runs (a
 * daemon killed with SIGKILL), never a running process's folder, never
 * through a link, never a folder of another name. Real folders, real
 * processes; then a real daemon that sweeps as it starts.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ownedTempFolder, processRuns, sweepOwnedTempFolders } from '../src/base/temp-folder.ts';
import { startTestDaemon } from '../testkit/daemon.ts';

/** The pid of a process that ran and has exited (and been reaped). */
async function deadPid(): Promise<number> {
  const child = spawn('true', [], { stdio: 'ignore' });
  await new Promise((resolve) => child.once('exit', resolve));
  assert.equal(processRuns(child.pid!), false, 'the premise: it no longer runs');
  return child.pid!;
}

describe('temporary folders named after their process', () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'deskbatch-temp-folder-test-'));
  });
  after(async () => {
    if (root) await rm(root, { recursive: true, force: true });
  });

  test('a folder is private and named after its kind and this process; a kind outside [a-z0-9-] is refused', async () => {
    const dir = await ownedTempFolder('d7-home', root);
    assert.match(dir, new RegExp(`/deskbatch-d7-home-p${process.pid}-[A-Za-z0-9]{6}$`));
    assert.equal(statSync(dir).mode & 0o777, 0o700);
    assert.throws(() => ownedTempFolder('../x', root), /kind/);
    assert.throws(() => ownedTempFolder('', root), /kind/);
  });

  test('the sweep takes the folders of processes that no longer run, and nothing else', async () => {
    const dead = await deadPid();
    const sleeper = spawn('sleep', ['60'], { stdio: 'ignore' });
    try {
      const named = (kind: string, pid: number, tail = 'AbC123'): string => `deskbatch-${kind}-p${pid}-${tail}`;
      const gone = [named('d1-home', dead), named('xvfb', dead, 'x9Y8z7')];
      for (const name of gone) {
        await mkdir(join(root, name, '.config'), { recursive: true });
        await writeFile(join(root, name, '.config', 'file'), 'left by a killed daemon');
      }
      const kept = [
        named('vnc', process.pid), // this process's
        named('d2-home', sleeper.pid!), // a running process's
        'deskbatch-xvfb-Qw3rTy', // a name without an owner (an earlier version's)
        'deskbatch-traces-Zx5cVb', // the trace folders' own scheme
        `other-d1-home-p${dead}-AbC123`,
      ];
      for (const name of kept) await mkdir(join(root, name));
      // A link and a file named like a dead process's folder: left, and the link's target untouched.
      const target = join(root, 'target');
      await mkdir(target);
      await writeFile(join(target, 'keep'), 'not ours to remove');
      await symlink(target, join(root, named('link', dead)));
      await writeFile(join(root, named('file', dead)), 'a file');

      const removed = await sweepOwnedTempFolders(root);
      assert.deepEqual(removed.sort(), [...gone].sort());
      const left = await readdir(root);
      for (const name of gone) assert.ok(!left.includes(name), name);
      for (const name of [...kept, named('link', dead), named('file', dead), 'target']) {
        assert.ok(left.includes(name), `${name} is left`);
      }
      assert.ok(existsSync(join(target, 'keep')));
      assert.deepEqual(await sweepOwnedTempFolders(root), [], 'a second sweep finds nothing');
    } finally {
      sleeper.kill('SIGKILL');
    }
  });

  test('a daemon starting sweeps what a killed one left in its temporary folder', async () => {
    const dead = await deadPid();
    const tmp = await mkdtemp(join(tmpdir(), 'deskbatch-temp-folder-daemon-'));
    const stale = join(tmp, `deskbatch-d1-home-p${dead}-AbC123`);
    await mkdir(join(stale, '.cache'), { recursive: true });
    // os.tmpdir() reads TMPDIR on every call: this daemon's temporary folder is the test's own.
    const before = process.env.TMPDIR;
    process.env.TMPDIR = tmp;
    try {
      const d = await startTestDaemon({ display: undefined, browser: 'off' });
      try {
        assert.equal(existsSync(stale), false, "the killed daemon's HOME is gone");
      } finally {
        await d.close();
      }
    } finally {
      if (before === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = before;
      await rm(tmp, { recursive: true, force: true });
    }
  });
});
