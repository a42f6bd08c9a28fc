/**
 * The command a user runs: `deskbatch serve` with no DISPLAY starts its own
 * Xvfb, prints where it listens and where the token is, and on SIGTERM
 * answers the running batch, then exits within its deadline, taking its
 * Xvfb with it. It is the compiled daemon (bin/deskbatch.js runs dist/, built
 * first: testkit/build.ts), and it and its desktop worker run with no loader.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { defaultDesktopCap } from '../src/base/config.ts';
import type { BatchResult } from '../src/base/protocol.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { ensureBuilt } from '../testkit/build.ts';
import { TestClient, computerUse, startedEvent } from '../testkit/daemon.ts';
import { isRunning } from '../testkit/recording.ts';
import { within } from '../testkit/wait.ts';

const children: ChildProcess[] = [];
/**
 * Ends a daemon a test left running as an operator would, with SIGTERM: its
 * desktops and their folders go with it (a SIGKILL left their HOMEs in /tmp).
 * SIGKILL only for one that does not exit within its shutdown deadline.
 */
async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const kill = setTimeout(() => child.kill('SIGKILL'), 30_000);
  await exited;
  clearTimeout(kill);
}
before(ensureBuilt); // every test here runs bin/deskbatch.js, which runs dist/
after(() => Promise.all(children.map(stop)));

interface Started {
  child: ChildProcess;
  lines: Record<string, unknown>[];
  url: string;
  exited: Promise<number | null>;
}

/** A process's command line, its arguments separated by NUL ('' once it is gone). */
function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'latin1');
  } catch {
    return '';
  }
}

/** A process's environment variables, one `NAME=value` each ([] once it is gone). */
function environ(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').filter(Boolean);
  } catch {
    return [];
  }
}

/** Every process below `root`, from /proc. */
function descendants(root: number): number[] {
  const parent = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = (() => {
      try {
        return readFileSync(`/proc/${entry}/stat`, 'utf8');
      } catch {
        return '';
      }
    })();
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid) parent.set(Number(entry), ppid);
  }
  const out: number[] = [];
  for (const pid of parent.keys()) {
    for (let p = parent.get(pid); p !== undefined; p = parent.get(p)) {
      if (p === root) {
        out.push(pid);
        break;
      }
    }
  }
  return out;
}

async function serve(args: string[], env: Record<string, string>): Promise<Started> {
  const { DISPLAY: _display, DESKBATCH_TOKEN: _token, ...base } = process.env;
  const child = spawn(process.execPath, ['bin/deskbatch.js', 'serve', '--port', '0', ...args], {
    env: { ...base, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  const lines: Record<string, unknown>[] = [];
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    let buffer = '';
    const timer = setTimeout(() => reject(new Error(`no listening line: ${buffer}`)), 30_000);
    child.stderr!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      for (let i = buffer.indexOf('\n'); i >= 0; i = buffer.indexOf('\n')) {
        const line = buffer.slice(0, i);
        buffer = buffer.slice(i + 1);
        const parsed = JSON.parse(line) as Record<string, unknown>;
        lines.push(parsed);
        // The token line comes right after the listening line; both are needed.
        const listening = lines.map((l) => /listening on (ws:\/\/\S+)/.exec(String(l.msg))?.[1]).find(Boolean);
        if (listening && lines.some((l) => String(l.msg).startsWith('token:'))) {
          clearTimeout(timer);
          resolve(listening);
        }
      }
    });
    void exited.then((code) => reject(new Error(`exited ${code} before listening: ${buffer}`)));
  });
  return { child, lines, url, exited };
}

/** Whether something accepts on the unix socket at `path`. */
function isSocketReachable(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(path);
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}

test('serve without DISPLAY gives each session a desktop of its own; SIGTERM answers the running batch and exits', async () => {
  const home = await mkdtemp(join(tmpdir(), 'deskbatch-home-'));
  try {
    const s = await serve(['--screenshots-dir', join(home, 'shots')], { HOME: home });
    const tokenPath = join(home, '.deskbatch', 'token');
    assert.ok(
      s.lines.some((l) => String(l.msg).includes(tokenPath)),
      'prints where the token is',
    );
    assert.equal((await stat(tokenPath)).mode & 0o777, 0o600);
    const token = (await readFile(tokenPath, 'utf8')).trim();
    assert.ok(!s.lines.some((l) => JSON.stringify(l).includes(token)), 'the token is never logged');
    // The pool and its size for this machine are said at start.
    const pool = s.lines.find((l) => String(l.msg).startsWith('desktops: a pool of up to'));
    assert.ok(pool, 'the pool is announced');
    assert.equal(pool.max, defaultDesktopCap());

    const client = await TestClient.open(s.url, { token });
    const welcome = await client.hello(undefined, { desktop: {} });
    assert.deepEqual(welcome.display, { width: 1280, height: 800 });
    assert.equal(welcome.desktop?.mode, 'pool');
    const started = s.lines.find((l) => l.msg === 'virtual display started' && l.desktop === welcome.desktop?.id);
    const display = String(started?.display);
    // Its socket is in its desktop's sandbox (docs/SECURITY.md "A sandbox per desktop"): reached through its Xvfb's root.
    const xvfb = descendants(s.child.pid!).find((pid) => cmdline(pid).startsWith(`Xvfb\0${display}\0`));
    assert.ok(xvfb, `the Xvfb of ${display}`);
    assert.ok(
      await isSocketReachable(`/proc/${xvfb}/root/tmp/.X11-unix/X${display.slice(1)}`),
      `the session's display ${display} answers`,
    );
    const uses = [computerUse('screenshot'), computerUse('wait', { duration: 60 }), computerUse('cursor_position')];
    client.send({ type: 'batch', batch_id: 'long', tool_uses: uses });
    // SIGTERM while the 60 s wait runs (the screenshot before it is done).
    await within(client.next(startedEvent('long', uses[1]!.id), 70_000), 'the wait call to start', 60_000);
    // Its displays, by process: once it exits, another test's Xvfb may take a display number it freed.
    const displays = descendants(s.child.pid!).filter((pid) => /^Xvfb\0/.test(cmdline(pid)));
    assert.ok(displays.length >= 1, "its desktops' Xvfb processes, the session's among them");
    const t0 = Date.now();
    s.child.kill('SIGTERM');
    const result = await client.next((m): m is BatchResult => m.type === 'batch_result');
    assertApiValid(uses, result);
    assert.equal(result.cancelled, true);
    assert.equal(result.tool_results[0]!.content[0]!.type, 'image');
    assert.equal(await within(s.exited, 'the daemon to exit after SIGTERM', 60_000), 0);
    assert.ok(Date.now() - t0 < 12_000, 'within the shutdown deadline');
    assert.deepEqual(
      displays.filter((pid) => isRunning(pid)),
      [],
      'every Xvfb of its desktops went with it',
    );
  } finally {
    await rm(home, { recursive: true, force: true });
  }
});

test("the compiled daemon and its pool desktop's worker run with no loader: no tsx, no esbuild", async () => {
  const home = await mkdtemp(join(tmpdir(), 'deskbatch-home-'));
  const token = `compiled-token-${Date.now()}-abcdefghij`;
  const root = fileURLToPath(new URL('..', import.meta.url));
  try {
    // No compile cache: a tsx loaded anywhere would compile with esbuild now, and its esbuild process would show.
    const s = await serve(['--desktops', '1', '--warm', '1', '--screenshots-dir', join(home, 'shots')], {
      HOME: home,
      DESKBATCH_TOKEN: token,
      TSX_DISABLE_CACHE: '1',
    });
    const client = await TestClient.open(s.url, { token });
    const welcome = await client.hello(undefined, { desktop: {} });
    assert.equal(welcome.desktop?.mode, 'pool');
    const shot = [computerUse('screenshot')];
    const { result } = await client.batch('shot', shot);
    assertApiValid(shot, result);
    assert.equal(result.tool_results[0]!.content[0]!.type, 'image', 'the pool desktop took a screenshot');
    // What it runs: package.json's version, read from the package's root by the compiled code in dist/.
    const metrics = await (
      await fetch(`${s.url.replace(/^ws/, 'http').replace(/\/v1$/, '')}/metrics`, {
        headers: { authorization: `Bearer ${token}` },
      })
    ).text();
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string };
    assert.match(metrics, new RegExp(`^deskbatch_build_info\\{version="${pkg.version.replaceAll('.', '\\.')}"`, 'm'));

    const daemon = s.child.pid!;
    const tree = [daemon, ...descendants(daemon)];
    const commands = new Map(tree.map((pid) => [pid, cmdline(pid).replace(/\0$/, '').split('\0')]));
    assert.deepEqual(
      commands.get(daemon)!.slice(0, 3),
      [process.execPath, 'bin/deskbatch.js', 'serve'],
      'no node flags',
    );
    const worker = tree.filter((pid) => {
      const argv = commands.get(pid)!;
      return argv[0] === process.execPath && argv.some((a) => a.endsWith('/desktop-driver/worker.js'));
    });
    assert.equal(worker.length, 1, "the desktop's worker");
    assert.deepEqual(commands.get(worker[0]!), [process.execPath, join(root, 'dist/src/desktop-driver/worker.js')]);
    for (const pid of tree) {
      const argv = commands.get(pid)!;
      assert.ok(!argv.some((a) => a.includes('esbuild')), `process ${pid} is no esbuild: ${argv.join(' ')}`);
      assert.ok(
        !argv.some((a) => a === 'tsx' || a.includes('/tsx/')),
        `process ${pid} names no tsx: ${argv.join(' ')}`,
      );
    }
    for (const pid of [daemon, worker[0]!]) {
      const options = environ(pid).find((v) => v.startsWith('NODE_OPTIONS='));
      assert.ok(!options || !/tsx|--(import|loader|require)/.test(options), `process ${pid}: ${options}`);
    }
    // The worker is in its desktop's sandbox, which binds the compiled tree (and not the sources) read-only.
    const ns = (pid: number) => readlinkSync(`/proc/${pid}/ns/mnt`);
    assert.notEqual(ns(worker[0]!), ns(daemon), 'the worker has a mount namespace of its own');
    const inside = (path: string) => existsSync(`/proc/${worker[0]}/root${join(root, path)}`);
    assert.ok(inside('dist/src/desktop-driver/worker.js') && inside('node_modules') && inside('package.json'));
    assert.ok(!inside('src'), 'the sources are not bound');
    client.close();
    s.child.kill('SIGTERM');
    assert.equal(await within(s.exited, 'the daemon to exit after SIGTERM', 60_000), 0);
  } finally {
    await rm(home, { recursive: true, force: true });
  }
});

test('DESKBATCH_TOKEN never reaches the processes the daemon starts', async () => {
  const home = await mkdtemp(join(tmpdir(), 'deskbatch-home-'));
  const token = `env-token-${Date.now()}-abcdefghij`;
  try {
    const s = await serve([], { HOME: home, DESKBATCH_TOKEN: token });
    assert.ok(s.lines.some((l) => l.msg === 'token: from DESKBATCH_TOKEN'));
    const client = await TestClient.open(s.url, { token });
    await client.batch('warm', [computerUse('cursor_position')]); // the desktop worker is up
    // The browser too, with a tab: its renderer and helper processes are children as well.
    const tab = await client.batch('tab', [
      { type: 'tool_use', id: 'toolu_tab', name: 'new_tab', toolset_name: 'browser', input: {} },
    ]);
    assert.deepEqual(tab.result.failures, []);
    const children = descendants(s.child.pid!);
    const commands = children.map(cmdline);
    assert.ok(children.length >= 3, `Xvfb, openbox and the worker run: ${children.length}`);
    assert.ok(
      commands.some((c) => /chromium.*--type=renderer/.test(c)),
      'a Chromium renderer is among them',
    );
    for (const pid of children) {
      const environ = await readFile(`/proc/${pid}/environ`, 'utf8').catch(() => '');
      assert.ok(!environ.includes(token), `process ${pid} must not inherit the token`);
      // What the X clients among them get instead: the display's cookie file (Chromium's helper
      // processes, which do not talk to X, run with an environment of their own).
      const command = commands[children.indexOf(pid)] ?? '';
      if (/worker\.js|openbox/.test(command) || (/chromium/.test(command) && !command.includes('--type='))) {
        assert.match(
          environ,
          /XAUTHORITY=/,
          `process ${pid} (${command.split('\0')[0]}) has the display's cookie file`,
        );
      }
    }
    client.close();
    s.child.kill('SIGTERM');
    assert.equal(await within(s.exited, 'the daemon to exit after SIGTERM', 60_000), 0);
  } finally {
    await rm(home, { recursive: true, force: true });
  }
});

test('a non-loopback bind without DESKBATCH_TOKEN is refused with a clear message', async () => {
  const home = await mkdtemp(join(tmpdir(), 'deskbatch-home-'));
  try {
    const child = spawn(process.execPath, ['bin/deskbatch.js', 'serve', '--host', '0.0.0.0', '--port', '0'], {
      env: { ...process.env, HOME: home, DESKBATCH_TOKEN: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    let err = '';
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const code = await within(
      new Promise((resolve) => child.once('exit', resolve)),
      'deskbatch serve to exit, refusing the bind',
      60_000,
    );
    assert.equal(code, 2);
    assert.match(err, /refusing to bind 0\.0\.0\.0 without a configured token/);
  } finally {
    await rm(home, { recursive: true, force: true });
  }
});

test('DESKBATCH_TOKEN_FILE: the token is read from that file (one per pod, docs/DEPLOY.md), and never logged', async () => {
  const home = await mkdtemp(join(tmpdir(), 'deskbatch-home-'));
  const token = `file-token-${Date.now()}-abcdefghijklmnop`;
  const tokenFile = join(home, 'token');
  await writeFile(tokenFile, `${token}\n`, { mode: 0o400 });
  try {
    const s = await serve([], { HOME: home, DESKBATCH_TOKEN_FILE: tokenFile });
    assert.ok(s.lines.some((l) => l.msg === `token: from DESKBATCH_TOKEN_FILE ${tokenFile}`));
    assert.ok(!s.lines.some((l) => JSON.stringify(l).includes(token)), 'the token is never logged');
    const client = await TestClient.open(s.url, { token });
    const { result } = await client.batch('ok', [computerUse('wait', { duration: 0 })]);
    assert.equal(result.tool_results.length, 1);
    client.close();
    s.child.kill('SIGTERM');
    assert.equal(await within(s.exited, 'the daemon to exit after SIGTERM', 60_000), 0);
  } finally {
    await rm(home, { recursive: true, force: true });
  }
});

test('a short token, two token sources or a bad --max-batch-ms are refused at start with a clear message', async () => {
  const home = await mkdtemp(join(tmpdir(), 'deskbatch-home-'));
  const tokenFile = join(home, 'token');
  try {
    const refusal = async (args: string[], env: Record<string, string>): Promise<string> => {
      const child = spawn(process.execPath, ['bin/deskbatch.js', 'serve', '--port', '0', ...args], {
        env: { ...process.env, HOME: home, DESKBATCH_TOKEN: '', ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.push(child);
      let err = '';
      child.stderr.on('data', (c: Buffer) => (err += c.toString()));
      const code = await within(new Promise((resolve) => child.once('exit', resolve)), 'serve to refuse', 60_000);
      assert.equal(code, 2, err);
      return err;
    };
    await writeFile(tokenFile, 'short-token-0123456789\n');
    assert.match(await refusal([], { DESKBATCH_TOKEN_FILE: tokenFile }), /the token must be at least 32 characters/);
    assert.match(
      await refusal([], { DESKBATCH_TOKEN: 'a'.repeat(40), DESKBATCH_TOKEN_FILE: tokenFile }),
      /DESKBATCH_TOKEN or DESKBATCH_TOKEN_FILE, not both/,
    );
    assert.match(
      await refusal([], { DESKBATCH_TOKEN_FILE: join(home, 'missing') }),
      /DESKBATCH_TOKEN_FILE .*missing: cannot read it \(ENOENT\)/,
    );
    assert.match(
      await refusal(['--max-batch-ms', '0'], { DESKBATCH_TOKEN: 'a'.repeat(40) }),
      /limits\.maxBatchMs must be a positive integer/,
    );
    // Bedrock and Vertex take 5 MB per image: an operator may lower the bound, never raise it past the API's.
    assert.match(
      await refusal(['--max-image-bytes', '10000001'], { DESKBATCH_TOKEN: 'a'.repeat(40) }),
      /screenshot\.maxBase64Bytes must be 1–10000000 \(the API's 10 MB per image\), got 10000001/,
    );
  } finally {
    await rm(home, { recursive: true, force: true });
  }
});
