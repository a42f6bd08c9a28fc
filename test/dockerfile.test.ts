/**
 * The container image's promises, read from the Dockerfile (this machine has
 * no Docker engine to build it): the daemon runs as a non-root user, writes
 * only inside its volume, gets its packages from the one shared list, carries
 * no token, runs compiled code with no loader (no sources, no tsx), and has a
 * health check and a PID 1 that forwards signals; it binds
 * beyond loopback, so it cannot start without DESKBATCH_TOKEN; its build
 * context holds what it runs and nothing else (no tests, no deploy files, no
 * .env files); and it holds nothing only the package managers wanted (apt's
 * downloads, the novnc package beyond noVNC's files, sharp's other builds).
 */
import assert from 'node:assert/strict';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ConfigError, DEFAULT_CONFIG, isLoopback, resolveConfig } from '../src/base/config.ts';
import { DEFAULT_NOVNC_DIR, SERVED_FOLDERS } from '../src/viewer/novnc.ts';
import { failsWith } from '../testkit/errors.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

interface Instruction {
  op: string;
  args: string;
}

/** Every instruction, continuation lines joined, comments dropped. */
async function instructions(): Promise<Instruction[]> {
  const text = (await readFile(new URL('../Dockerfile', import.meta.url), 'utf8')).replace(/\\\n/g, ' ');
  return text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'))
    .map((l) => {
      const [op, ...rest] = l.split(/\s+/);
      return { op: op!.toUpperCase(), args: rest.join(' ') };
    });
}

/** The instructions of the last stage. */
async function lastStage(): Promise<Instruction[]> {
  const all = await instructions();
  const from = all.map((i) => i.op).lastIndexOf('FROM');
  assert.ok(from >= 0, 'the Dockerfile has a FROM');
  return all.slice(from);
}

/** The instructions of the stage `FROM … AS name`. */
async function namedStage(name: string): Promise<Instruction[]> {
  const all = await instructions();
  const from = all.findIndex((i) => i.op === 'FROM' && new RegExp(`\\sAS\\s+${name}$`, 'i').test(i.args));
  assert.ok(from >= 0, `the Dockerfile has a stage ${name}`);
  const next = all.findIndex((i, n) => n > from && i.op === 'FROM');
  return all.slice(from, next < 0 ? undefined : next);
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
  for (const flag of ['--screenshots-dir', '--downloads-dir', '--recordings-dir']) {
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

/** An exec-form (JSON array) argument list, or a failed assertion. */
function execForm(args: string | undefined, what: string): string[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(args ?? '');
  } catch {
    assert.fail(`${what} is in exec form (a JSON array), not shell form: ${args}`);
  }
  assert.ok(Array.isArray(parsed) && parsed.every((a) => typeof a === 'string'), `${what} is a JSON array of strings`);
  return parsed as string[];
}

test('signals reach node: tini is PID 1 and runs node directly, no shell in between', async () => {
  const stage = await lastStage();
  assert.deepEqual(execForm(last(stage, 'ENTRYPOINT'), 'ENTRYPOINT'), ['/usr/bin/tini', '--']);
  const cmd = execForm(last(stage, 'CMD'), 'CMD');
  assert.deepEqual(cmd.slice(0, 3), ['node', 'bin/deskbatch.js', 'serve']);
});

test('the image runs the compiled daemon: a build stage compiles dist/, the image gets it, the runtime dependencies and no sources', async () => {
  const build = await namedStage('build');
  assert.ok(
    build.some((i) => i.op === 'RUN' && /(^|&&\s*)node scripts\/build\.js$/.test(i.args)),
    'the build stage runs scripts/build.js',
  );
  const deps = await namedStage('deps');
  assert.ok(
    deps.some((i) => i.op === 'RUN' && /\bnpm ci --omit=dev\b/.test(i.args)),
    'the runtime dependencies only',
  );
  const stage = await lastStage();
  const copies = stage.filter((i) => i.op === 'COPY').map((i) => i.args);
  assert.ok(
    copies.includes('--from=build /opt/deskbatch/dist ./dist'),
    `dist/ from the build stage: ${copies.join('; ')}`,
  );
  assert.ok(
    copies.some((c) => /^--from=deps \S+\/node_modules \S+/.test(c)),
    'node_modules from the stage that installed the runtime only',
  );
  for (const copy of copies.filter((c) => !c.startsWith('--from='))) {
    for (const source of copy.split(/\s+/).slice(0, -1)) {
      assert.ok(!/^(\.|src|toolsets)(\/|$)|\.ts$/.test(source), `no sources in the image: COPY ${copy}`);
    }
  }
  assert.ok(!stage.some((i) => i.op === 'ENV' && /TSX/.test(i.args)), 'no tsx setting: no tsx');
  // --omit=dev leaves out tsx and esbuild; bin/deskbatch.js (the CMD) runs dist/ and names no loader.
  const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as {
    dependencies: Record<string, string>;
    devDependencies: Record<string, string>;
  };
  for (const name of ['tsx', 'esbuild']) {
    assert.ok(!(name in pkg.dependencies) && name in pkg.devDependencies, `${name} is a dev dependency`);
  }
  const bin = await readFile(join(ROOT, 'bin', 'deskbatch.js'), 'utf8');
  assert.match(bin, /'\.\.\/dist\/src\/cli\.js'/);
  assert.doesNotMatch(bin, /tsx|\.ts'/);
});

test("the health check is liveness: /healthz on the daemon's port, exec form, within its interval", async () => {
  const stage = await lastStage();
  assert.equal(last(stage, 'EXPOSE'), String(DEFAULT_CONFIG.port), "EXPOSE is the daemon's default port");
  const cmd = execForm(last(stage, 'CMD'), 'CMD');
  assert.ok(!cmd.includes('--port'), 'the CMD keeps the default port');
  const health = last(stage, 'HEALTHCHECK') ?? '';
  const m = /^((?:--[a-z-]+=\S+\s+)*)CMD\s+(\[.*\])$/.exec(health);
  assert.ok(m, `HEALTHCHECK [OPTIONS] CMD [exec form]: ${health}`);
  const options = Object.fromEntries([...m[1]!.matchAll(/--([a-z-]+)=(\d+)s/g)].map((o) => [o[1], Number(o[2])]));
  assert.ok(options.timeout! < options.interval!, 'the timeout is shorter than the interval');
  const probe = execForm(m[2], 'HEALTHCHECK CMD');
  assert.equal(probe[0], 'node', 'node probes it: the image has no curl');
  assert.ok(probe.join(' ').includes(`'http://127.0.0.1:${DEFAULT_CONFIG.port}/healthz'`), 'it asks /healthz');
});

test('the image binds beyond loopback, so the daemon refuses to start without DESKBATCH_TOKEN', async () => {
  const cmd = execForm(last(await lastStage(), 'CMD'), 'CMD');
  const host = cmd[cmd.indexOf('--host') + 1];
  assert.ok(
    cmd.includes('--host') && host !== undefined && !isLoopback(host),
    `--host ${host} reaches a published port`,
  );
  const token = 'a'.repeat(32);
  assert.throws(
    () => resolveConfig({ host, token, tokenConfigured: false }),
    failsWith(
      ConfigError,
      `refusing to bind ${host} without a configured token: set DESKBATCH_TOKEN, or bind 127.0.0.1`,
    ),
  );
  assert.equal(resolveConfig({ host, token, tokenConfigured: true }).host, host);
});

test('the user is numeric (so runAsNonRoot can verify it): uid 10001, the user useradd creates', async () => {
  const stage = await lastStage();
  const run = stage.filter((i) => i.op === 'RUN').map((i) => i.args);
  // `useradd … --uid 10001 … deskbatch`: the user the volume is chowned to (the test above) has this uid.
  assert.ok(
    run.some((r) => /useradd\b[^&]*--uid 10001\b[^&]*\sdeskbatch(\s|$)/.test(r)),
    'useradd creates deskbatch with uid 10001',
  );
  assert.match(last(stage, 'USER') ?? '', /^10001(:10001)?$/);
});

test("the image's OCI labels: title, and the version is package.json's", async () => {
  const stage = await lastStage();
  const labels = Object.fromEntries(
    stage
      .filter((i) => i.op === 'LABEL')
      .flatMap((i) => [...i.args.matchAll(/([\w.-]+)="([^"]*)"/g)].map((m) => [m[1], m[2]])),
  );
  const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { version: string };
  assert.equal(labels['org.opencontainers.image.title'], 'deskbatch');
  assert.equal(labels['org.opencontainers.image.version'], pkg.version);
});

/**
 * Whether .dockerignore keeps `path` out of the build context, as Docker reads
 * it: patterns relative to the context root, `*` within one path segment, `**`
 * across segments, a match on a folder covers everything in it, the last
 * matching pattern wins, `!` re-includes.
 */
function ignored(path: string, patterns: string[]): boolean {
  let out = false;
  for (const raw of patterns) {
    const negate = raw.startsWith('!');
    const pattern = (negate ? raw.slice(1) : raw).replace(/^\/+|\/+$/g, '');
    const source = pattern
      .split('**/')
      .map((part) =>
        part
          .split('**')
          .map((p) =>
            p
              .replace(/[.+^${}()|[\]\\]/g, '\\$&')
              .replace(/\*/g, '[^/]*')
              .replace(/\?/g, '[^/]'),
          )
          .join('.*'),
      )
      .join('(?:.*/)?');
    const re = new RegExp(`^${source}(?:/.*)?$`);
    if (re.test(path)) out = !negate;
  }
  return out;
}

async function files(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(join(ROOT, dir), { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) out.push(...(await files(path)));
    else out.push(path);
  }
  return out;
}

test('.dockerignore: the context holds what the image runs, and no tests, docs, deploy files or .env files', async () => {
  const patterns = (await readFile(join(ROOT, '.dockerignore'), 'utf8'))
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  const needed = [
    'package.json',
    'package-lock.json',
    'tsconfig.json',
    'scripts/system-packages.txt',
    'scripts/build.js',
    'scripts/chromium-policy.json',
    'scripts/image-smoke.ts',
    ...(await files('bin')),
    ...(await files('src')),
    ...(await files('toolsets')),
  ];
  assert.ok(needed.includes('src/cli.ts') && needed.some((p) => p.startsWith('src/viewer/')));
  for (const path of needed) assert.ok(!ignored(path, patterns), `${path} is in the build context`);
  const unwanted = [
    '.git/HEAD',
    '.env',
    'deploy/.env',
    'src/.env',
    'deploy/compose.yaml',
    'deploy/k8s/statefulset.yaml',
    'node_modules/ws/package.json',
    'dist/src/cli.js',
    'test/dockerfile.test.ts',
    'test-artifacts/viewer.png',
    'docs/DEPLOY.md',
    'README.md',
    'bench/bench.ts',
    'examples/agent.ts',
    'screenshots/s_1/a.png',
    'downloads/s_1/file.pdf',
    '.deskbatch/token',
  ];
  for (const path of unwanted) assert.ok(ignored(path, patterns), `${path} is kept out of the build context`);
  // The matcher itself: a folder pattern covers its contents, `*` stays in one segment, `!` re-includes.
  assert.ok(ignored('a/b/c', ['a']) && !ignored('ab', ['a']) && !ignored('d/x.md', ['*.md']));
  assert.ok(ignored('d/x.md', ['**/*.md']) && !ignored('a/keep', ['a', '!a/keep']));
  // The files named above exist, so the lists are not checking paths that were renamed away.
  const present = new Set([...(await files('src')), ...(await files('deploy')), ...(await files('test'))]);
  for (const path of ['deploy/compose.yaml', 'deploy/k8s/statefulset.yaml', 'test/dockerfile.test.ts']) {
    assert.ok(present.has(path), `${path} exists`);
  }
});

test('nothing only the package managers wanted: apt cleans in the step that installs, noVNC without its package, sharp for this platform', async () => {
  const stage = await lastStage();
  const install = stage.filter((i) => i.op === 'RUN' && /apt-get install/.test(i.args)).map((i) => i.args);
  assert.equal(install.length, 1, 'one apt step in the image');
  const run = install[0]!;
  // The downloaded .deb files and the lists go in the same step, so no layer holds them.
  assert.match(run, /apt-get install[^&]*&&.*\bapt-get clean\b/, 'apt-get clean after the install');
  assert.match(run, /rm -rf \/var\/lib\/apt\/lists\/\*/, 'the lists removed');
  // The shared list keeps novnc for a host (scripts/setup.sh); the image leaves the package out...
  const list = (await readFile(join(ROOT, 'scripts', 'system-packages.txt'), 'utf8')).replace(/#.*/g, '').split(/\s+/);
  assert.ok(list.includes('novnc'), 'scripts/system-packages.txt lists novnc');
  assert.match(
    run,
    /sed -e 's\/#\.\*\/\/' \/tmp\/system-packages\.txt \| tr [^|]+\| grep -vx -e '' -e novnc \| xargs apt-get install/,
  );
  // ...and takes the files the viewer serves from the package's .deb, unpacked in a stage of its own.
  const novnc = await namedStage('novnc');
  const fetch = novnc.filter((i) => i.op === 'RUN').map((i) => i.args);
  assert.ok(
    fetch.some((r) => /apt-get download novnc\b/.test(r) && /dpkg-deb --extract novnc_\*\.deb \/novnc\b/.test(r)),
    'the novnc stage downloads and unpacks the .deb, installing nothing',
  );
  const copies = stage.filter((i) => i.op === 'COPY' && i.args.startsWith('--from=novnc ')).map((i) => i.args);
  for (const folder of SERVED_FOLDERS) {
    assert.ok(
      copies.includes(`--from=novnc /novnc${DEFAULT_NOVNC_DIR}/${folder} ${DEFAULT_NOVNC_DIR}/${folder}`),
      `noVNC's ${folder}/ lands where the viewer reads it (${DEFAULT_NOVNC_DIR}): ${copies.join('; ')}`,
    );
  }
  assert.ok(
    copies.some((c) => c.endsWith('/usr/share/doc/novnc/copyright')),
    "noVNC's copyright comes along",
  );
  assert.equal(copies.length, SERVED_FOLDERS.length + 1, 'nothing else of the package');
  // Debian's npm installs sharp's musl and WebAssembly builds too; only the glibc one runs here.
  const deps = await namedStage('deps');
  assert.ok(
    deps.some(
      (i) =>
        i.op === 'RUN' &&
        /npm ci --omit=dev\b[^&]*&& rm -rf node_modules\/@img\/sharp-\*musl\* node_modules\/@img\/sharp-wasm32$/.test(
          i.args,
        ),
    ),
    "sharp's builds for other platforms removed after npm ci",
  );
  // Vulkan's validation layer, a debugging aid in the chromium package, is never unpacked.
  assert.match(
    run,
    /path-exclude \/usr\/lib\/chromium\/libVkLayer_khronos_validation\.so' *>\/etc\/dpkg\/dpkg\.cfg\.d\//,
  );
});
