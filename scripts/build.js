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
 * - The declarations (`.d.ts`) of the package's entry points, the "types" of package.json's "exports"
 *   (dist/src/client/index.d.ts, …), and of every module they reach, at the same paths, emitted by the
 *   TypeScript compiler (its API, tsconfig.json's options), relative imports rewritten to `.js` as
 *   above: what a user of the installed package type-checks against.
 * - Types are not checked here: `npm run check` does that (tsc).
 *
 * A no-op when nothing changed: the SHA-256 of every input (its path and content), of this script, of
 * tsconfig.json, of package.json's "exports" and of esbuild's and TypeScript's versions is kept in
 * dist/.inputs; when it matches, nothing is compiled or written. Otherwise everything is compiled again; only files whose content changed are written, each
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

/** A package's version in node_modules ('undefined' when it is not installed). */
async function versionOf(name) {
  const text = await readFile(join(ROOT, 'node_modules', name, 'package.json'), 'utf8').catch(() => '{}');
  return String(JSON.parse(text).version);
}

/**
 * The sources whose declarations package.json's "exports" name as "types": `./dist/src/x.d.ts` is
 * `src/x.ts`. An export whose types are not such a path is refused, so none is left without its file.
 */
async function typeEntries() {
  const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8'));
  const entries = [];
  for (const [name, target] of Object.entries(pkg.exports ?? {})) {
    if (typeof target !== 'object' || target === null || target.types === undefined) continue;
    const m = /^\.\/dist\/(.+)\.d\.ts$/.exec(target.types);
    if (!m) throw new Error(`package.json exports["${name}"].types is not ./dist/….d.ts: ${target.types}`);
    entries.push(`${m[1]}.ts`);
  }
  return entries.sort();
}

async function fingerprint(files, entries) {
  const hash = createHash('sha256');
  const part = (name, content) => hash.update(`${name}\0${content.length}\0`).update(content);
  part('scripts/build.js', await readFile(fileURLToPath(import.meta.url)));
  part('tsconfig.json', await readFile(join(ROOT, 'tsconfig.json')));
  part('exports', Buffer.from(entries.join('\n')));
  part('esbuild', Buffer.from(await versionOf('esbuild')));
  part('typescript', Buffer.from(await versionOf('typescript')));
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

/** A relative module path to a `.ts` file, as the sources write it: `./x.ts` (a package's stays as it is). */
const asJs = (specifier) =>
  /^\.\.?\//.test(specifier) && specifier.endsWith('.ts') ? `${specifier.slice(0, -'.ts'.length)}.js` : specifier;

/**
 * The declarations of `entries` and of the modules their declarations name, and so on: path under
 * dist/ → content. Only what the public types reach, not every module an entry imports (a `.d.ts`
 * names a module only for a type it uses): each file is emitted alone, in memory, with tsconfig.json's
 * options, and the relative imports its `.d.ts` holds (`import … from`, `export … from`, `import('…')`
 * in a type) are emitted next, rewritten to name `.js` files as the compiled modules beside them do.
 * Errors only the emit finds (a type it cannot write) fail the build; type errors are `npm run check`'s.
 */
async function declarations(entries) {
  const { default: ts } = await import('typescript');
  const parsed = ts.getParsedCommandLineOfConfigFile(
    join(ROOT, 'tsconfig.json'),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => {
        throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
      },
    },
  );
  const options = {
    ...parsed.options,
    noEmit: false,
    declaration: true,
    emitDeclarationOnly: true,
    rootDir: ROOT,
    outDir: OUT,
  };
  const queue = entries.map((e) => join(ROOT, e));
  const seen = new Set(queue);
  const program = ts.createProgram({ rootNames: queue, options });
  /** The file being emitted; the modules its declarations import join the queue. */
  let current = '';
  const rewrite = (context) => {
    const f = context.factory;
    const js = (literal) => {
      const specifier = asJs(literal.text);
      if (specifier === literal.text) return literal;
      const source = join(dirname(current), literal.text);
      if (!seen.has(source)) {
        seen.add(source);
        queue.push(source);
      }
      return f.createStringLiteral(specifier, true);
    };
    const visit = (node) => {
      if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
        const { modifiers, importClause, moduleSpecifier, attributes } = node;
        return f.updateImportDeclaration(node, modifiers, importClause, js(moduleSpecifier), attributes);
      }
      if (ts.isExportDeclaration(node) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
        const { modifiers, isTypeOnly, exportClause, moduleSpecifier, attributes } = node;
        return f.updateExportDeclaration(node, modifiers, isTypeOnly, exportClause, js(moduleSpecifier), attributes);
      }
      if (
        ts.isImportTypeNode(node) &&
        ts.isLiteralTypeNode(node.argument) &&
        ts.isStringLiteral(node.argument.literal)
      ) {
        const argument = f.updateLiteralTypeNode(node.argument, js(node.argument.literal));
        const typeArguments = ts.visitNodes(node.typeArguments, visit);
        return f.updateImportTypeNode(node, argument, node.attributes, node.qualifier, typeArguments, node.isTypeOf);
      }
      return ts.visitEachChild(node, visit, context);
    };
    return (file) => (ts.isSourceFile(file) ? ts.visitEachChild(file, visit, context) : file);
  };
  const out = new Map();
  const errors = [];
  while (queue.length) {
    current = queue.shift();
    const file = program.getSourceFile(current);
    if (!file) throw new Error(`declarations: ${relative(ROOT, current)} is not a module of the program`);
    const emitted = program.emit(file, (path, text) => out.set(path, Buffer.from(text)), undefined, true, {
      afterDeclarations: [rewrite],
    });
    errors.push(...emitted.diagnostics.filter((d) => d.category === ts.DiagnosticCategory.Error));
  }
  if (errors.length) {
    const text = ts.formatDiagnostics(errors, {
      getCanonicalFileName: (p) => p,
      getCurrentDirectory: () => ROOT,
      getNewLine: () => '\n',
    });
    throw Object.assign(new Error(`declarations: ${errors.length} error(s)`), { text });
  }
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
  const [files, entries] = await Promise.all([inputs(), typeEntries()]);
  const inputsHash = await fingerprint(files, entries);
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
  const compiledMs = performance.now() - started;
  try {
    for (const [path, content] of await declarations(entries)) out.set(path, content);
  } catch (err) {
    if (err.text === undefined) throw err;
    process.stderr.write(`${err.text}build: ${err.message}; dist/ was not changed\n`);
    process.exit(1);
  }
  const written = (await Promise.all([...out].map(([path, content]) => put(path, content)))).filter(Boolean).length;
  const removed = await prune(new Set(out.keys()));
  await put(stamp, Buffer.from(`${inputsHash}\n`));
  const ms = Math.round(performance.now() - started);
  const compiled = files.filter((f) => f.kind === 'compile').length;
  const typed = [...out.keys()].filter((p) => p.endsWith('.d.ts')).length;
  process.stderr.write(
    `build: dist/ from ${compiled} modules and ${files.length - compiled} files in ${ms} ms ` +
      `(${written} written, ${removed} removed; ${typed} declaration files took ${ms - Math.round(compiledMs)} ms)\n`,
  );
}

await main();
