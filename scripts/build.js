#!/usr/bin/env node
/**
 * Builds dist/: the plain JavaScript that bin/deskbatch.js runs, the daemon and its desktop worker
 * with no loader (docs/ARCHITECTURE.md "How the code runs"). `npm start` and `npm test` run it first;
 * the Dockerfile's build stage runs it once.
 *
 * - Each .ts file of src/ and toolsets/, and scripts/image-smoke.ts (the client the image test runs
 *   inside the image, which has no loader), becomes one .js file at the same path under dist/
 *   (dist/src/cli.js, dist/toolsets/…): compiled by esbuild, the compiler tsx runs the tests with,
 *   file by file, not bundled, so each module's `import.meta.url`, and what it reads beside itself, keeps
 *   its place in the tree. A relative import `./x.ts` becomes `./x.js`; a package's stays as it is.
 * - Every other file of src/ and toolsets/ is copied as it is (the in-page script, the viewer's pages and
 *   scripts); `.d.ts` and tsconfig.json files, read only by the type-checker, are not.
 * - Types are not checked here: `npm run check` does that (tsc).
 *
 * A no-op when nothing changed: the SHA-256 of every input (its path and content), of this script, of
 * tsconfig.json and esbuild's version is kept in dist/.inputs; when it matches, nothing is compiled or
 * written. Otherwise everything is compiled again; only files whose content changed are written, each
 * through a temporary file renamed over it (two builds at once, or a daemon starting, never read half a
 * file), and files of dist/ that no input makes any more are removed.
 *
 * Usage: node scripts/build.js [--force]
 * Prints one line on stderr when it built and nothing when there was nothing to do; on an error, esbuild's
 * messages, and exits 1.
 */
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = dirname(dirname(fileURLToPath(import.meta.url)));
const OUT = join(ROOT, 'dist');
/** The trees mirrored under dist/. */
const TREES = ['src', 'toolsets'];
/** Files outside them compiled too. */
const EXTRA_ENTRIES = ['scripts/image-smoke.ts'];
/** The fingerprint of the inputs of the build in dist/. */
const STAMP = '.inputs';
/** Read by the type-checker only. */
const TYPES_ONLY = /(\.d\.ts|(^|\/)tsconfig\.json)$/;
/** A file being written (`${path}.tmp-${pid}`), by this build or another at the same time. */
const TEMPORARY = /\.tmp-\d+$/;

/** Every file under `dir` (relative to ROOT, with `/`), sorted. */
async function filesUnder(dir) {
  const out = [];
  for (const entry of await readdir(join(ROOT, dir), { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) out.push(...(await filesUnder(path)));
    else if (entry.isFile()) out.push(path);
  }
  return out.sort();
}

/** The inputs, each with its content: `compile` (.ts) or `copy`. */
async function inputs() {
  const paths = [...(await Promise.all(TREES.map(filesUnder))).flat(), ...EXTRA_ENTRIES];
  const list = paths
    .filter((path) => !TYPES_ONLY.test(path))
    .map((path) => ({ path, kind: path.endsWith('.ts') ? 'compile' : 'copy' }));
  return Promise.all(list.map(async (input) => ({ ...input, content: await readFile(join(ROOT, input.path)) })));
}

async function fingerprint(files) {
  const hash = createHash('sha256');
  const part = (name, content) => hash.update(`${name}\0${content.length}\0`).update(content);
  part('scripts/build.js', await readFile(fileURLToPath(import.meta.url)));
  part('tsconfig.json', await readFile(join(ROOT, 'tsconfig.json')));
  const esbuildPackage = await readFile(join(ROOT, 'node_modules', 'esbuild', 'package.json'), 'utf8').catch(
    () => '{}',
  );
  part('esbuild', Buffer.from(String(JSON.parse(esbuildPackage).version)));
  for (const f of files) part(f.path, f.content);
  return hash.digest('hex');
}

/**
 * Leaves every import as it is written, but a relative one to a .ts file, which becomes .js: with
 * `bundle` on (so that esbuild asks this plugin about each import) and every import external, each
 * entry point is compiled alone into its own file, as esbuild's transform would.
 */
const importsAsWritten = {
  name: 'imports-as-written',
  setup(build) {
    build.onResolve({ filter: /.*/ }, (args) => {
      if (args.kind === 'entry-point') return undefined;
      const relativeTs = /^\.\.?\//.test(args.path) && args.path.endsWith('.ts');
      return { path: relativeTs ? `${args.path.slice(0, -'.ts'.length)}.js` : args.path, external: true };
    });
  },
};

/** dist/'s files: path under ROOT → content. */
async function compile(files) {
  const { build } = await import('esbuild');
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: files.filter((f) => f.kind === 'compile').map((f) => f.path),
    outdir: OUT,
    outbase: '.',
    bundle: true,
    plugins: [importsAsWritten],
    format: 'esm',
    platform: 'node',
    // package.json "engines": node >= 20.10.
    target: 'node20.10',
    tsconfig: join(ROOT, 'tsconfig.json'),
    charset: 'utf8',
    write: false,
    logLevel: 'silent',
  });
  const out = new Map();
  for (const file of result.outputFiles) out.set(file.path, Buffer.from(file.contents));
  for (const f of files) if (f.kind === 'copy') out.set(join(OUT, f.path), f.content);
  return out;
}

/** Writes `content` at `path` unless it is there already, through a temporary file. Whether it wrote. */
async function put(path, content) {
  const old = await readFile(path).catch(() => undefined);
  if (old?.equals(content)) return false;
  await mkdir(dirname(path), { recursive: true });
  const temporary = `${path}.tmp-${process.pid}`;
  await writeFile(temporary, content);
  await rename(temporary, path);
  return true;
}

/** Files of dist/ that no input makes (a source removed or renamed), removed; another build's temporary files stay. */
async function prune(wanted) {
  const present = await filesUnder(relative(ROOT, OUT)).catch(() => []);
  const stale = present
    .map((p) => join(ROOT, p))
    .filter((p) => !wanted.has(p) && !TEMPORARY.test(p) && p !== join(OUT, STAMP));
  await Promise.all(stale.map((p) => rm(p, { force: true })));
  return stale.length;
}

async function main() {
  const started = performance.now();
  const force = process.argv.includes('--force');
  const files = await inputs();
  const inputsHash = await fingerprint(files);
  const stamp = join(OUT, STAMP);
  if (!force && (await readFile(stamp, 'utf8').catch(() => '')).trim() === inputsHash) return;
  let out;
  try {
    out = await compile(files);
  } catch (err) {
    const { formatMessages } = await import('esbuild');
    const errors = Array.isArray(err?.errors) ? err.errors : [];
    if (!errors.length) throw err;
    for (const line of await formatMessages(errors, { kind: 'error', color: false })) process.stderr.write(line);
    process.stderr.write(`build: failed with ${errors.length} error(s); dist/ was not changed\n`);
    process.exit(1);
  }
  const written = (await Promise.all([...out].map(([path, content]) => put(path, content)))).filter(Boolean).length;
  const removed = await prune(new Set(out.keys()));
  await put(stamp, Buffer.from(`${inputsHash}\n`));
  const ms = Math.round(performance.now() - started);
  const compiled = files.filter((f) => f.kind === 'compile').length;
  process.stderr.write(
    `build: dist/ from ${compiled} modules and ${files.length - compiled} files in ${ms} ms ` +
      `(${written} written, ${removed} removed)\n`,
  );
}

await main();
