/**
 * A sandbox per desktop (docs/SECURITY.md "A sandbox per desktop"): attacks
 * run as a compromised renderer of desktop A would run them, with the
 * credentials and namespaces of A's Chromium, entered from outside
 * (testkit/sandbox-probes.ts). Each must fail with the sandbox on; the same
 * probes with `--sandbox off` (what every desktop had before) get through,
 * which shows the probes can tell.
 */
import assert from 'node:assert/strict';
import { chmod, chown, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { spawn } from 'node:child_process';
import { existsSync, readlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { computerUse, startTestDaemon, TEST_TOKEN, TestClient } from '../testkit/daemon.ts';
import { ensureBuilt } from '../testkit/build.ts';
import { startDaemonProcess } from '../testkit/daemon-process.ts';
import { browserUse, startWebServer, type WebServer } from '../testkit/web.ts';
import { chromiumBrowsers, identityOf, runProbes, type Probe } from '../testkit/sandbox-probes.ts';
import { until } from '../testkit/wait.ts';
import { newLogDir } from '../testkit/artifacts.ts';
import { startTestDisplay } from '../testkit/display.ts';

/** The repository (the unprivileged daemon runs its code) and the user it runs as. */
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const NOBODY = 65534;

const POOL = {
  mode: 'pool',
  max: 2,
  warm: 2,
  sizes: [{ width: 1024, height: 640 }],
  maxWaiting: 4,
  maxWaitMs: 120_000,
};

interface Desktop {
  pid: number;
  env: Record<string, string>;
  /** The display's socket as the daemon's side names it. */
  socket: string;
}

/** Two sessions, each on its own desktop with its browser running; their desktops' Chromium processes. */
async function twoDesktops(
  url: string,
  daemonPid: number,
  web: WebServer,
  clients: TestClient[],
): Promise<[Desktop, Desktop]> {
  const ours = (env: Record<string, string>): boolean => (env.HOME ?? '').includes(`-p${daemonPid}-`);
  for (const [i, session] of ['a', 'b'].entries()) {
    const c = await TestClient.open(url);
    clients.push(c);
    await c.hello();
    const { result } = await c.batch(`${session}1`, [
      browserUse('navigate', { url: `${web.origin}/` }),
      computerUse('left_click', { coordinate: [10 + i, 10] }),
    ]);
    assert.equal(result.tool_results.filter((r) => r.is_error).length, 0, JSON.stringify(result));
  }
  const found = await until(
    'two desktops each running its Chromium',
    () => {
      const b = chromiumBrowsers(ours);
      return b.length === 2 ? b : undefined;
    },
    { timeoutMs: 30_000 },
  );
  return found.map(({ pid, env }) => ({
    pid,
    env,
    socket: existsSync(join(dirname(env.HOME!), 'x11'))
      ? join(dirname(env.HOME!), 'x11', `X${env.DISPLAY!.slice(1)}`)
      : `/tmp/.X11-unix/X${env.DISPLAY!.slice(1)}`,
  })) as [Desktop, Desktop];
}

/** The attacks of desktop A, each on something outside it; named for the table in docs/SECURITY.md. */
function attacks(
  a: Desktop,
  b: Desktop,
  secrets: { token: string; readable: string },
  ports: { daemon: number; web: number },
  daemonHome: string,
): [string, Probe][] {
  return [
    ['read the daemon token file', { kind: 'read', path: secrets.token }],
    ['read a file of the daemon readable by every user', { kind: 'read', path: secrets.readable }],
    ["read B's framebuffer", { kind: 'read', path: b.env.DESKBATCH_FRAMEBUFFER! }],
    ["read B's X authority", { kind: 'read', path: b.env.XAUTHORITY! }],
    ["list B's HOME", { kind: 'list', path: b.env.HOME! }],
    ["list B's folders (downloads)", { kind: 'list', path: dirname(b.env.HOME!) }],
    ["read /proc/<B's browser>/environ", { kind: 'read', path: `/proc/${b.pid}/environ` }],
    ["signal B's browser", { kind: 'signal', pid: b.pid }],
    ["connect to B's X display", { kind: 'connect-unix', path: b.socket }],
    ['connect to the daemon port', { kind: 'connect', host: '127.0.0.1', port: ports.daemon }],
    ['connect to a loopback server', { kind: 'connect', host: '127.0.0.1', port: ports.web }],
    ['connect to an internet address without the proxy', { kind: 'connect', host: '1.1.1.1', port: 80 }],
    ['write into /etc', { kind: 'write', path: '/etc/deskbatch-probe' }],
    ["write into the daemon's HOME", { kind: 'write', path: join(daemonHome, 'deskbatch-probe') }],
  ];
}

describe('a sandbox per desktop', { timeout: 300_000 }, () => {
  let web: WebServer;
  let secretsDir: string;
  let secrets: { token: string; readable: string };

  before(async () => {
    web = await startWebServer();
    web.route('/', '<title>page</title><h1>a page</h1>');
    // What a daemon keeps for itself: a token file (0600) and a file any user may read, in a folder any user may enter.
    secretsDir = await mkdtemp(join(tmpdir(), 'deskbatch-secrets-'));
    await chmod(secretsDir, 0o755);
    secrets = { token: join(secretsDir, 'token'), readable: join(secretsDir, 'readable') };
    await writeFile(secrets.token, 'the-token', { mode: 0o600 });
    await writeFile(secrets.readable, 'readable', { mode: 0o644 });
  });
  after(async () => {
    await web.close();
    await rm(secretsDir, { recursive: true, force: true });
  });

  /**
   * Starts nothing itself: `daemon` is a running daemon with two warm pool desktops. Runs every
   * attack from A, then checks that A's own desktop and the proxy still work from inside and what
   * /readyz and /metrics say. Returns each attack's outcome.
   */
  async function attackFrom(daemon: {
    url: string;
    port: number;
    pid: number;
    home: string;
    mode: 'uid' | 'userns' | 'off';
  }): Promise<Record<string, { ok: boolean; error?: string }>> {
    const base = `http://127.0.0.1:${daemon.port}`;
    // Before any session: /readyz states the sandbox's mode.
    const ready = await until('/readyz to answer ready', async () => {
      const body = (await (await fetch(`${base}/readyz`)).json()) as { containment?: { desktop_sandbox: string } };
      return body.containment ? body : undefined;
    });
    assert.equal(ready.containment?.desktop_sandbox, daemon.mode);
    const metrics = await (
      await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${TEST_TOKEN}` } })
    ).text();
    assert.match(metrics, new RegExp(`^deskbatch_desktop_sandbox\\{mode="${daemon.mode}"\\} 1$`, 'm'));
    const clients: TestClient[] = [];
    try {
      const [a, b] = await twoDesktops(daemon.url, daemon.pid, web, clients);
      const probes = attacks(
        a,
        b,
        secrets,
        { daemon: daemon.port, web: Number(new URL(web.origin).port) },
        daemon.home,
      );
      const results = await runProbes(
        a.pid,
        probes.map(([, p]) => p),
      );
      // A write counts only if it reached the host's file (inside, a parent folder may be the sandbox's own tmpfs).
      const outcome = Object.fromEntries(
        probes.map(([name, p], i) => {
          const r = results[i]!;
          return [
            name,
            p.kind === 'write' && r.ok && !existsSync(p.path) ? { ok: false, error: 'not on the host' } : r,
          ];
        }),
      );
      if (daemon.mode === 'off') return outcome;
      // Its own desktop still works from inside: its screen, its cookie, and the proxy (the one way out).
      const cmdline = (await readFile(`/proc/${a.pid}/cmdline`, 'utf8')).replaceAll('\0', ' ');
      const proxy = /--proxy-server=http:\/\/(\S+)/.exec(cmdline)![1]!;
      const own = await runProbes(a.pid, [
        { kind: 'read', path: a.env.DESKBATCH_FRAMEBUFFER! },
        { kind: 'read', path: a.env.XAUTHORITY! },
        { kind: 'proxy-get', proxy, url: `${web.origin}/` },
      ]);
      assert.deepEqual(
        own.map((r) => r.ok),
        [true, true, true],
        `its own desktop and the proxy: ${JSON.stringify(own)}`,
      );
      // A write to /tmp lands in its own /tmp, never the host's.
      const marker = `deskbatch-probe-${process.pid}`;
      const wrote = await runProbes(a.pid, [{ kind: 'write', path: `/tmp/${marker}` }]);
      assert.equal(wrote[0]!.ok, true);
      assert.equal(existsSync(join('/tmp', marker)), false, "a desktop's /tmp is its own");
      // Identities: never root, never the daemon's, never the other desktop's; no capabilities, no_new_privs.
      const ia = identityOf(a.pid);
      const ib = identityOf(b.pid);
      if (daemon.mode === 'userns') {
        assert.equal(ia.ownUserNamespace, true);
        assert.notEqual(readlinkSync(`/proc/${a.pid}/ns/user`), readlinkSync(`/proc/${b.pid}/ns/user`));
      } else {
        assert.notEqual(ia.uid, 0);
        assert.notEqual(ia.uid, identityOf(daemon.pid).uid);
        assert.notEqual(ia.uid, ib.uid);
      }
      for (const pid of [a.pid, b.pid]) {
        const status = await readFile(`/proc/${pid}/status`, 'utf8');
        assert.match(status, /^CapEff:\s+0+$/m);
        assert.match(status, /^CapPrm:\s+0+$/m);
        assert.match(status, /^NoNewPrivs:\s+1$/m);
        assert.doesNotMatch(
          await readFile(`/proc/${pid}/cmdline`, 'utf8'),
          /--no-sandbox/,
          "Chromium's own sandbox is on",
        );
      }
      return outcome;
    } finally {
      for (const c of clients) c.close();
    }
  }

  function report(title: string, table: Record<string, { off?: boolean; on?: boolean; error?: string }>): void {
    console.log(`${title}\nprobe | --sandbox off | sandbox on (error)`);
    for (const [name, r] of Object.entries(table)) {
      console.log(`${name} | ${r.off ? 'got through' : 'failed'} | ${r.on ? 'GOT THROUGH' : `failed (${r.error})`}`);
    }
  }

  test('desktop A reaches nothing of B, the daemon or the network; --sandbox off let every probe through', async () => {
    const table: Record<string, { off?: boolean; on?: boolean; error?: string }> = {};
    for (const mode of ['off', 'auto'] as const) {
      const d = await startTestDaemon({ desktops: POOL, browser: 'headful', sandbox: { mode } } as never);
      try {
        const outcome = await attackFrom({
          url: d.url,
          port: d.daemon.address.port,
          pid: process.pid,
          home: process.env.HOME ?? '/root',
          mode: mode === 'off' ? 'off' : process.getuid?.() === 0 ? 'uid' : 'userns',
        });
        for (const [name, r] of Object.entries(outcome)) {
          table[name] = { ...table[name], ...(mode === 'off' ? { off: r.ok } : { on: r.ok, error: r.error }) };
        }
      } finally {
        await d.close();
        // What the unsandboxed run wrote where it could (root may write /etc).
        for (const path of ['/etc/deskbatch-probe', join(process.env.HOME ?? '/root', 'deskbatch-probe')]) {
          await rm(path, { force: true });
        }
      }
    }
    report(process.getuid?.() === 0 ? 'uid mode (the daemon runs as root)' : 'userns mode', table);
    const through = Object.entries(table).filter(([, r]) => r.on);
    assert.deepEqual(
      through.map(([n]) => n),
      [],
      'no attack gets out of the sandbox',
    );
    // Every attack got through unsandboxed (the internet only where this machine has a route): the probes can tell.
    const blockedAnyway = Object.entries(table)
      .filter(([, r]) => !r.off)
      .map(([n]) => n);
    assert.deepEqual(
      // Without root, /etc was never writable.
      blockedAnyway.filter((n) => !/internet/.test(n) && !(process.getuid?.() !== 0 && /\/etc/.test(n))),
      [],
      `without the sandbox these failed anyway: ${blockedAnyway}`,
    );
  });

  test('as an unprivileged user: the same attacks fail in userns mode', async () => {
    const asRoot = process.getuid?.() === 0;
    const uid = asRoot ? NOBODY : process.getuid!();
    const home = await mkdtemp(join(tmpdir(), 'deskbatch-nobody-'));
    const temp = join(home, 'tmp');
    // The daemon's user must reach the repository: folders above it that others may not enter get o+x meanwhile.
    const opened: [string, number][] = [];
    let proc: Awaited<ReturnType<typeof startDaemonProcess>> | undefined;
    try {
      await mkdir(temp);
      if (asRoot) {
        await chown(home, uid, uid);
        await chown(temp, uid, uid);
        for (let dir = ROOT; dir !== '/'; dir = dirname(dir)) {
          const mode = (await stat(dir)).mode & 0o7777;
          if (!(mode & 0o001)) {
            opened.push([dir, mode]);
            await chmod(dir, mode | 0o001);
          }
        }
      }
      proc = await startDaemonProcess({
        display: '',
        token: TEST_TOKEN,
        args: [
          '--port',
          '0',
          '--desktops',
          '2',
          '--warm',
          '2',
          '--display-size',
          '1024x640',
          '--browser',
          'headful',
          '--allow-private-networks',
        ],
        env: { HOME: home, TMPDIR: temp, XAUTHORITY: '' },
        logFile: join(newLogDir('daemon-unprivileged'), 'daemon.log'),
        ...(asRoot ? { runAs: uid } : {}),
      });
      const table: Record<string, { on?: boolean; error?: string }> = {};
      const outcome = await attackFrom({
        url: proc.url,
        port: Number(new URL(proc.url).port),
        pid: proc.pid,
        home,
        mode: 'userns',
      });
      for (const [name, r] of Object.entries(outcome)) table[name] = { on: r.ok, error: r.error ?? '' };
      report('userns mode (the daemon runs as an unprivileged user)', table);
      assert.deepEqual(
        Object.entries(table)
          .filter(([, r]) => r.on)
          .map(([n]) => n),
        [],
        'no attack gets out of the sandbox',
      );
    } finally {
      await proc?.stop(10_000);
      for (const [dir, mode] of opened.reverse()) await chmod(dir, mode);
      await rm(home, { recursive: true, force: true });
    }
  });

  test("shared mode: the daemon's Chromium on the operator's display is sandboxed too", async () => {
    const display = await startTestDisplay({ width: 800, height: 600 });
    const d = await startTestDaemon({ display: display.display, browser: 'headful' });
    const clients: TestClient[] = [];
    try {
      const c = await TestClient.open(d.url);
      clients.push(c);
      await c.hello();
      const { result } = await c.batch('s1', [
        browserUse('navigate', { url: `${web.origin}/` }),
        computerUse('screenshot'),
      ]);
      assert.equal(result.tool_results.filter((r) => r.is_error).length, 0, JSON.stringify(result));
      const [browser] = await until('the shared Chromium', () => {
        const b = chromiumBrowsers((env) => (env.HOME ?? '').includes(`deskbatch-shared-sandbox-p${process.pid}-`));
        return b.length === 1 ? b : undefined;
      });
      const pid = browser!.pid;
      const n = display.display.slice(1);
      const cmdline = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).replaceAll('\0', ' ');
      const proxy = /--proxy-server=http:\/\/(\S+)/.exec(cmdline)![1]!;
      const probes: [string, Probe][] = [
        ['read the daemon token file', { kind: 'read', path: secrets.token }],
        ['read a file of the daemon readable by every user', { kind: 'read', path: secrets.readable }],
        ['connect to the daemon port', { kind: 'connect', host: '127.0.0.1', port: d.daemon.address.port }],
        [
          'connect to a loopback server',
          { kind: 'connect', host: '127.0.0.1', port: Number(new URL(web.origin).port) },
        ],
        ['connect to an internet address without the proxy', { kind: 'connect', host: '1.1.1.1', port: 80 }],
        ['write into /etc', { kind: 'write', path: '/etc/deskbatch-probe' }],
      ];
      const results = await runProbes(
        pid,
        probes.map(([, p]) => p),
      );
      const through = probes.filter(([, p], i) => results[i]!.ok && (p.kind !== 'write' || existsSync(p.path)));
      assert.deepEqual(
        through.map(([name]) => name),
        [],
        'no attack gets out of the browser sandbox',
      );
      // What it needs it has: the operator's display, and the proxy.
      const own = await runProbes(pid, [
        { kind: 'connect-unix', path: `/tmp/.X11-unix/X${n}` },
        { kind: 'proxy-get', proxy, url: `${web.origin}/` },
      ]);
      assert.deepEqual(
        own.map((r) => r.ok),
        [true, true],
        JSON.stringify(own),
      );
      const status = await readFile(`/proc/${pid}/status`, 'utf8');
      assert.match(status, /^CapEff:\s+0+$/m);
      assert.match(status, /^NoNewPrivs:\s+1$/m);
      assert.doesNotMatch(cmdline, /--no-sandbox/);
      const id = identityOf(pid);
      if (process.getuid?.() === 0) assert.notEqual(id.uid, 0);
      else assert.equal(id.ownUserNamespace, true);
    } finally {
      for (const c of clients) c.close();
      await d.close();
      await display.stop();
      await rm('/etc/deskbatch-probe', { force: true });
    }
  });

  test('a host that cannot sandbox: the daemon says why and does not start, unless --sandbox off', async () => {
    await ensureBuilt(); // bin/deskbatch.js runs dist/
    // A user namespace of the test's own where no further one may be made (max_user_namespaces 0):
    // the daemon inside cannot give a desktop its identity.
    const run = (flags: string[]): Promise<{ code: number | null; out: string }> =>
      new Promise((resolve) => {
        const child = spawn(
          'unshare',
          [
            '--user',
            '--map-root-user',
            'sh',
            '-c',
            'echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" "$@"',
            process.execPath,
            join(ROOT, 'bin', 'deskbatch.js'),
            'serve',
            '--port',
            '0',
            '--desktops',
            '1',
            '--warm',
            '0',
            '--browser',
            'off',
            ...flags,
          ],
          { env: { ...process.env, DISPLAY: '', DESKBATCH_TOKEN: TEST_TOKEN }, stdio: ['ignore', 'pipe', 'pipe'] },
        );
        let out = '';
        for (const s of [child.stdout, child.stderr]) s.on('data', (c: Buffer) => (out += c.toString()));
        child.once('exit', (code) => resolve({ code, out }));
        // Started: it listens; then it is stopped, by its pid.
        const timer = setInterval(() => {
          if (/deskbatch listening on/.test(out)) child.kill('SIGTERM');
        }, 100);
        child.once('exit', () => clearInterval(timer));
      });
    const refused = await run([]);
    assert.notEqual(refused.code, 0, refused.out);
    assert.match(refused.out, /desktops cannot be sandboxed on this host: .+--sandbox off/s);
    assert.doesNotMatch(refused.out, /deskbatch listening on/);
    const off = await run(['--sandbox', 'off']);
    assert.match(off.out, /desktops run without a sandbox \(--sandbox off\)/);
    assert.match(off.out, /deskbatch listening on/);
  });
});
