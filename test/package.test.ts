/**
 * The package as a user gets it: `npm pack` makes the tarball, which is
 * installed into an empty project (npm's cache serves what it has, the
 * registry the rest). From there, as a user would:
 *
 * - `npx deskbatch serve` runs the installed package's daemon, with a desktop
 *   of its own (its default: a pool, each desktop in its sandbox), and a
 *   plain-JavaScript program run by plain Node.js, no loader, imports
 *   `deskbatch/client` and runs a batch on it: a screenshot and the pointer's
 *   position come back;
 * - a user's TypeScript type-checks against the installed declarations
 *   (test/fixtures/package/consumer.ts, with the repository's tsc);
 * - `npx deskbatch setup` runs the packaged setup script, which leaves
 *   node_modules to npm.
 *
 * Also: what the tarball holds (the build, its declarations, the bin, the
 * setup files; no sources, tests or lockfile), that every package the compiled
 * code imports is a dependency, and that tsconfig.json's "paths" (the sources
 * the repository type-checks and runs for the package's entry points) match
 * package.json's "exports".
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { newLogDir } from '../testkit/artifacts.ts';
import { ensureBuilt } from '../testkit/build.ts';
import { TEST_TOKEN } from '../testkit/daemon.ts';
import { startDaemonProcess, type DaemonProcess } from '../testkit/daemon-process.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const FIXTURES = join(ROOT, 'test', 'fixtures', 'package');
/** npm install may fetch package metadata from the registry; a busy machine unpacks slowly. */
const INSTALL_TIMEOUT_MS = 300_000;
const STEP_TIMEOUT_MS = 120_000;

interface PackageJson {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  peerDependencies: Record<string, string>;
  exports: Record<string, string | { types: string; default: string }>;
}
const PKG = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as PackageJson;

/** The exports with declarations: subpath (`./client`), `.d.ts` and `.js`, as package.json names them. */
const ENTRIES = Object.entries(PKG.exports).flatMap(([subpath, target]) =>
  typeof target === 'object' ? [{ subpath, types: target.types.slice(2), js: target.default.slice(2) }] : [],
);

/**
 * Our environment without npm's own variables (`npm test` sets npm_config_local_prefix to this
 * checkout, among others): the project's npm and npx see the project only. NODE_OPTIONS is left out
 * too, so nothing can bring a loader in. Each is there as undefined, so that it also unsets the
 * variable where this is spread over our environment (startDaemonProcess's `env`).
 */
function userEnv(extra: Record<string, string> = {}): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(process.env)) {
    env[k] = /^npm_/i.test(k) || k === 'INIT_CWD' || k === 'NODE_OPTIONS' ? undefined : v;
  }
  return { ...env, ...extra };
}

/** Runs a program to its end; rejects with its exit and output when it fails. */
function run(
  file: string,
  args: readonly string[],
  options: { cwd: string; env?: Record<string, string | undefined>; timeoutMs?: number },
): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(
      file,
      args,
      {
        cwd: options.cwd,
        env: options.env ?? userEnv(),
        timeout: options.timeoutMs ?? STEP_TIMEOUT_MS,
        maxBuffer: 64 * 1024 * 1024,
      },
      (err, stdout, stderr) =>
        err
          ? reject(
              new Error(`${file} ${args.join(' ')} failed: ${err.message}\nstdout:\n${stdout}\nstderr:\n${stderr}`),
            )
          : resolve({ stdout, stderr }),
    );
  });
}

interface Packed {
  filename: string;
  size: number;
  unpackedSize: number;
  files: { path: string }[];
}

let dir: string;
let project: string;
let packed: Packed;
let daemon: DaemonProcess | undefined;
/** How long `npm pack` and `npm install` took, for the report (ms). */
const took = { pack: 0, install: 0 };

before(async () => {
  await ensureBuilt();
  dir = await mkdtemp(join(tmpdir(), 'deskbatch-package-'));
  // Its prepack script builds dist/ (a no-op here: built above).
  let t0 = performance.now();
  const pack = await run('npm', ['pack', '--json', '--pack-destination', dir], { cwd: ROOT });
  took.pack = Math.round(performance.now() - t0);
  packed = (JSON.parse(pack.stdout) as Packed[])[0]!;
  project = join(dir, 'project');
  await mkdir(project);
  await writeFile(
    join(project, 'package.json'),
    JSON.stringify({ name: 'user-project', private: true, type: 'module' }),
  );
  // The SDK too, for deskbatch/sdk's types (an optional peer dependency): the version this repository is tested with.
  t0 = performance.now();
  await run(
    'npm',
    [
      'install',
      join(dir, packed.filename),
      `@anthropic-ai/sdk@${PKG.devDependencies['@anthropic-ai/sdk']}`,
      '--prefer-offline',
      '--no-audit',
      '--no-fund',
    ],
    { cwd: project, env: userEnv({ PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: '1' }), timeoutMs: INSTALL_TIMEOUT_MS },
  );
  took.install = Math.round(performance.now() - t0);
  for (const name of ['run-batch.js', 'consumer.ts']) await copyFile(join(FIXTURES, name), join(project, name));
});

after(async () => {
  await daemon?.stop(30_000);
  if (dir) await rm(dir, { recursive: true, force: true });
});

test('the tarball holds the build, its declarations, the bin and the setup files; no sources, tests or lockfile', (t) => {
  const files = packed.files.map((f) => f.path);
  t.diagnostic(`tarball ${packed.size} bytes, ${packed.unpackedSize} unpacked, ${files.length} files`);
  t.diagnostic(`npm pack ${took.pack} ms, npm install ${took.install} ms`);
  const needed = [
    'package.json',
    'README.md',
    'LICENSE',
    'bin/deskbatch.js',
    'scripts/setup.sh',
    'scripts/system-packages.txt',
    'scripts/chromium-policy.json',
    'dist/src/cli.js',
    'dist/src/desktop-driver/worker.js',
    'dist/src/viewer/page.html',
    'dist/src/browser/page-script/page-script.js',
    ...ENTRIES.flatMap((e) => [e.types, e.js]),
  ];
  for (const path of needed) assert.ok(files.includes(path), `${path} is in the tarball`);
  assert.deepEqual(
    ENTRIES.map((e) => e.subpath),
    ['./client', './sdk', './daemon'],
  );
  for (const path of files) {
    assert.ok(!/\.ts$/.test(path) || path.endsWith('.d.ts'), `no TypeScript source: ${path}`);
    assert.ok(
      !/^(src|test|testkit|bench|examples|deploy|node_modules|dist\/scripts)\//.test(path),
      `nothing but the package: ${path}`,
    );
    assert.ok(
      !/^(package-lock\.json|Dockerfile|\.dockerignore|tsconfig\.json)$/.test(path),
      `not a file of the checkout's: ${path}`,
    );
  }
});

test('every package the compiled code imports is a dependency (dev dependencies stay out)', async () => {
  const imported = new Set<string>();
  for (const { path } of packed.files.filter((f) => f.path.endsWith('.js'))) {
    const code = await readFile(join(project, 'node_modules', 'deskbatch', path), 'utf8');
    // Static imports and `import('…')` with a literal, as TypeScript's scanner finds them.
    for (const { fileName: specifier } of ts.preProcessFile(code, true, true).importedFiles) {
      if (/^(\.|\/|node:)/.test(specifier)) continue;
      imported.add(specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]!);
    }
  }
  // The runtime's own, from the daemon and its worker: the check reads the imports it should.
  for (const name of ['ws', 'zod', 'playwright', 'sharp', '@nut-tree-fork/nut-js']) assert.ok(imported.has(name), name);
  for (const name of imported) {
    assert.ok(
      name in PKG.dependencies || name in PKG.peerDependencies,
      `${name} is imported by the package's code, so it is in dependencies (or an optional peer)`,
    );
  }
  for (const name of ['tsx', 'esbuild', 'typescript']) {
    assert.ok(!(name in PKG.dependencies), `${name} is not a dependency`);
    assert.ok(!existsSync(join(project, 'node_modules', name)), `${name} was not installed into the project`);
  }
});

test('tsconfig.json "paths" map each export to the source its declarations are made from', () => {
  const config = ts.readConfigFile(join(ROOT, 'tsconfig.json'), ts.sys.readFile);
  assert.equal(config.error, undefined);
  const paths = (config.config as { compilerOptions: { paths: Record<string, string[]> } }).compilerOptions.paths;
  const expected = Object.fromEntries(
    ENTRIES.map((e) => [
      `deskbatch${e.subpath.slice(1)}`,
      [`./${e.types.replace(/^dist\//, '').replace(/\.d\.ts$/, '.ts')}`],
    ]),
  );
  assert.deepEqual(paths, expected);
});

test('npx deskbatch serve runs the installed daemon; plain Node.js runs a batch on it with deskbatch/client', async () => {
  // No DISPLAY: the daemon starts a desktop of its own (Xvfb, openbox, its worker) in a sandbox, which
  // must reach the dependencies npm put in the project's node_modules.
  daemon = await startDaemonProcess({
    display: '',
    token: TEST_TOKEN,
    args: ['--host', '127.0.0.1', '--port', '0', '--browser', 'off', '--desktops', '1', '--warm', '1'],
    command: { file: 'npx', args: ['--no', 'deskbatch', 'serve'], cwd: project },
    env: userEnv({ DISPLAY: '' }),
    logFile: join(newLogDir('daemon'), 'daemon.log'),
    echo: true,
  });
  const { stdout } = await run(process.execPath, ['run-batch.js', daemon.url], {
    cwd: project,
    env: userEnv({ DESKBATCH_TOKEN: TEST_TOKEN }),
  });
  const out = JSON.parse(stdout) as {
    resolved: string;
    loader: { execArgv: string[]; nodeOptions: string };
    results: { tool_use_id: string; is_error?: boolean; content: Record<string, unknown>[] }[];
  };
  assert.deepEqual(out.loader, { execArgv: [], nodeOptions: '' }, 'plain Node.js, no loader');
  assert.equal(
    out.resolved,
    `file://${join(project, 'node_modules', 'deskbatch', 'dist', 'src', 'client', 'index.js')}`,
    "deskbatch/client is the installed package's compiled client",
  );
  assert.deepEqual(
    out.results.map((r) => [r.tool_use_id, r.is_error ?? false]),
    [
      ['toolu_shot', false],
      ['toolu_where', false],
    ],
    stdout,
  );
  const [image] = out.results[0]!.content as { type: string; media_type: string; bytes: number; head: string }[];
  assert.equal(out.results[0]!.content.length, 1);
  assert.equal(image!.type, 'image');
  assert.equal(image!.media_type, 'image/png');
  assert.equal(image!.head, '89504e470d0a1a0a', 'a PNG signature');
  assert.ok(image!.bytes > 1000, `a screenshot of the desktop: ${image!.bytes} bytes`);
  assert.deepEqual(
    out.results[1]!.content,
    [{ type: 'text', text: 'X=640,Y=400' }],
    "the pointer at the screen's middle",
  );
  const stopped = await daemon.stop(30_000);
  assert.deepEqual(stopped, { code: 0, signal: null, killed: false }, 'SIGTERM ends the daemon, and npx with it');
});

test("a user's TypeScript type-checks against the installed declarations", async () => {
  await writeFile(
    join(project, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        strict: true,
        noEmit: true,
        skipLibCheck: true,
        types: ['node'],
        // @types/node, which a Node.js project in TypeScript has; the project did not install it.
        typeRoots: [join(ROOT, 'node_modules', '@types')],
      },
      files: ['consumer.ts'],
    }),
  );
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const { stdout } = await run(process.execPath, [tsc, '-p', project, '--listFiles'], { cwd: project });
  for (const entry of ENTRIES) {
    const file = join(project, 'node_modules', 'deskbatch', entry.types);
    assert.ok(stdout.split('\n').includes(file), `deskbatch${entry.subpath.slice(1)} resolved to ${file}`);
  }
});

test('npx deskbatch setup runs the packaged setup script, which leaves node_modules to npm', async () => {
  const { stderr } = await run('npx', ['--no', 'deskbatch', 'setup'], { cwd: project, timeoutMs: INSTALL_TIMEOUT_MS });
  assert.doesNotMatch(stderr, /npm|setup: .*fail/, stderr);
  assert.ok(
    !existsSync(join(project, 'node_modules', 'deskbatch', 'node_modules')),
    'nothing installed inside the package',
  );
});
