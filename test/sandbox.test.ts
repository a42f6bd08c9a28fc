/**
 * A sandbox per desktop (docs/SECURITY.md "A sandbox per desktop"): attacks
 * run as a compromised renderer of desktop A would run them, with the
 * credentials and namespaces of A's Chromium, entered from outside
 * (testkit/sandbox-probes.ts). Each must fail with the sandbox on; the same
 * probes with `--sandbox off` (what every desktop had before) get through,
 * which shows the probes can tell.
 */
import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { existsSync, readlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { computerUse, startTestDaemon, TEST_TOKEN, type TestDaemon } from '../testkit/daemon.ts';
import { browserUse, startWebServer, type WebServer } from '../testkit/web.ts';
import { chromiumBrowsers, identityOf, runProbes, type Probe } from '../testkit/sandbox-probes.ts';
import { until } from '../testkit/wait.ts';

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
async function twoDesktops(d: TestDaemon, web: WebServer): Promise<[Desktop, Desktop]> {
  const ours = (env: Record<string, string>): boolean => (env.HOME ?? '').includes(`-p${process.pid}-`);
  for (const [i, session] of ['a', 'b'].entries()) {
    const c = await d.connect();
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
  return found.map(({ pid, env }) => ({ pid, env, socket: `/tmp/.X11-unix/X${env.DISPLAY!.slice(1)}` })) as [
    Desktop,
    Desktop,
  ];
}

/** The attacks of desktop A, each on something outside it; named for the table in docs/SECURITY.md. */
function attacks(
  a: Desktop,
  b: Desktop,
  secrets: { token: string; readable: string },
  ports: { daemon: number; web: number },
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
    ["write into the daemon's HOME", { kind: 'write', path: join(process.env.HOME ?? '/root', 'deskbatch-probe') }],
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

  test('desktop A reaches nothing of B, the daemon or the network; --sandbox off let every probe through', async () => {
    const table: Record<string, { off?: boolean; on?: boolean; error?: string }> = {};
    for (const mode of ['off', 'auto'] as const) {
      const d = await startTestDaemon({ desktops: POOL, browser: 'headful', sandbox: { mode } } as never);
      try {
        // Before any session: /readyz states the sandbox's mode.
        const ready = (await (await fetch(`http://127.0.0.1:${d.daemon.address.port}/readyz`)).json()) as {
          containment?: { desktop_sandbox: string };
        };
        const me = process.getuid!();
        assert.equal(
          ready.containment?.desktop_sandbox,
          mode === 'off' ? 'off' : me === 0 ? 'uid' : 'userns',
          JSON.stringify(ready),
        );
        const [a, b] = await twoDesktops(d, web);
        const probes = attacks(a, b, secrets, { daemon: d.daemon.address.port, web: Number(new URL(web.origin).port) });
        const results = await runProbes(
          a.pid,
          probes.map(([, p]) => p),
        );
        probes.forEach(([name], i) => {
          table[name] = {
            ...table[name],
            [mode === 'off' ? 'off' : 'on']: results[i]!.ok,
            ...(mode === 'auto' ? { error: results[i]!.error } : {}),
          };
        });
        if (mode === 'auto') {
          // Its own desktop still works from inside: its screen, its cookie, and the proxy (the one way out).
          const own = await runProbes(a.pid, [
            { kind: 'read', path: a.env.DESKBATCH_FRAMEBUFFER! },
            { kind: 'read', path: a.env.XAUTHORITY! },
            {
              kind: 'proxy-get',
              proxy: /--proxy-server=http:\/\/([^ ]+)/.exec(
                await readFile(`/proc/${a.pid}/cmdline`, 'utf8').then((s) => s.replaceAll('\0', ' ')),
              )![1]!,
              url: `${web.origin}/`,
            },
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
          if (ia.ownUserNamespace)
            assert.notEqual(readlinkSync(`/proc/${a.pid}/ns/user`), readlinkSync(`/proc/${b.pid}/ns/user`));
          else {
            assert.notEqual(ia.uid, 0);
            assert.notEqual(ia.uid, me);
            assert.notEqual(ia.uid, ib.uid);
          }
          for (const pid of [a.pid, b.pid]) {
            const status = await readFile(`/proc/${pid}/status`, 'utf8');
            assert.match(status, /^CapEff:\s+0+$/m);
            assert.match(status, /^CapPrm:\s+0+$/m);
            assert.match(status, /^NoNewPrivs:\s+1$/m);
            const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8');
            assert.doesNotMatch(cmdline, /--no-sandbox/, "Chromium's own sandbox is on");
          }
          const metrics = await (
            await fetch(`http://127.0.0.1:${d.daemon.address.port}/metrics`, {
              headers: { authorization: `Bearer ${TEST_TOKEN}` },
            })
          ).text();
          const expected = me === 0 ? 'uid' : 'userns';
          assert.match(metrics, new RegExp(`^deskbatch_desktop_sandbox\\{mode="${expected}"\\} 1$`, 'm'));
        }
      } finally {
        await d.close();
        // What the unsandboxed run wrote where it could (root may write /etc).
        for (const path of ['/etc/deskbatch-probe', join(process.env.HOME ?? '/root', 'deskbatch-probe')])
          await rm(path, { force: true });
      }
    }
    console.log('probe | --sandbox off | sandbox on (error)');
    for (const [name, r] of Object.entries(table))
      console.log(`${name} | ${r.off ? 'got through' : 'failed'} | ${r.on ? 'GOT THROUGH' : `failed (${r.error})`}`);
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
      blockedAnyway.filter((n) => !/internet/.test(n)),
      [],
      `without the sandbox these failed anyway: ${blockedAnyway}`,
    );
    await stat(secrets.token);
  });
});
