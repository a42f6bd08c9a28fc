/**
 * Fails `npm run check` on an import circle: two files of the project that
 * import each other, directly or through others. The lint layers
 * (eslint.config.js) keep imports pointing down between folders; a circle
 * inside one folder, or among the folders the layers leave free (bench/,
 * test/, examples/), is found here.
 *
 * Every relative import counts, `import type` and `export … from` and
 * `import('…')` included: a type-only import is erased at run time, but the
 * two files still each need the other to be read, which is what a circle
 * costs a reader. Both circles this check was written for ran through one:
 * the browser session's `import type` of its manager (now SessionHost, in
 * src/browser/session.ts) and the bench report's of the density run's types
 * (now bench/density-report.ts).
 *
 * Usage: node --import tsx scripts/check-cycles.ts
 * Prints each circle as one line, `a.ts → b.ts → a.ts`; exits 1 if there is one.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** The folders whose files are read; an import out of them into another project file is followed too. */
const FOLDERS = ['src', 'toolsets', 'bench', 'test', 'testkit', 'examples', 'scripts', 'bin'];
const MODULE = /\.(ts|js|mjs)$/;

function filesUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'node_modules' ? [] : filesUnder(path);
    return entry.isFile() && MODULE.test(entry.name) ? [path] : [];
  });
}

/** The project file a relative specifier names, or undefined (a package, or a file tsc reports missing). */
function resolveImport(from: string, specifier: string): string | undefined {
  if (!specifier.startsWith('./') && !specifier.startsWith('../')) return undefined;
  const path = resolve(dirname(from), specifier.replace(/[?#].*$/, ''));
  // NodeNext also lets `./x.js` name `./x.ts`.
  for (const candidate of [path, path.replace(/\.js$/, '.ts')]) {
    if (candidate.startsWith(ROOT + '/') && existsSync(candidate) && statSync(candidate).isFile()) return candidate;
  }
  return undefined;
}

/** Each file's imports of other project files, read by TypeScript's own scanner (comments and strings are not imports). */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  const pending = FOLDERS.flatMap((folder) => filesUnder(join(ROOT, folder)));
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (graph.has(file)) continue;
    const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
    const targets = [
      ...new Set(importedFiles.map((f) => resolveImport(file, f.fileName)).filter((f) => f !== undefined)),
    ];
    graph.set(file, targets);
    pending.push(...targets.filter((t) => !graph.has(t)));
  }
  return graph;
}

/** The strongly connected components of more than one file, or of one file importing itself (Tarjan). */
function circles(graph: Map<string, string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || graph.get(v)?.includes(v)) found.push(component.sort());
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return found;
}

/** One shortest way round a component: from its first file back to it (breadth first, inside the component). */
function wayRound(graph: Map<string, string[]>, component: string[]): string[] {
  const inside = new Set(component);
  const start = component[0]!;
  const cameFrom = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const v = queue.shift()!;
    for (const w of graph.get(v) ?? []) {
      if (!inside.has(w) || cameFrom.has(w)) continue;
      cameFrom.set(w, v);
      if (w === start) {
        const way: string[] = [];
        for (let at = v; at !== start; at = cameFrom.get(at)!) way.unshift(at);
        return [start, ...way, start];
      }
      queue.push(w);
    }
  }
  return component;
}

const graph = importGraph();
const found = circles(graph);
for (const component of found) {
  const way = wayRound(graph, component).map((f) => relative(ROOT, f));
  const others = component.length > way.length - 1 ? ` (and ${component.length - (way.length - 1)} more files)` : '';
  console.error(`import circle: ${way.join(' → ')}${others}`);
}
if (found.length > 0) {
  console.error(
    `${found.length} import circle(s): an import points back to a file that imports it (docs/ARCHITECTURE.md)`,
  );
  process.exit(1);
}
