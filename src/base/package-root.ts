/**
 * Where the running code sits in the package, for the files it reads by path
 * (package.json, scripts/chromium-policy.json) and the module it forks (the
 * desktop worker): the sources (`src/base/package-root.ts`, run under tsx by
 * the tests, which import them) or the build (`dist/src/base/package-root.js`,
 * which bin/deskbatch.js runs; scripts/build.js makes it). Decided by this
 * module's own URL, so a compiled daemon never asks for a loader, and one run
 * from the sources never for a build.
 */
import { existsSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** This code was compiled into dist/ (plain JavaScript, no loader), not read from src/ through tsx. */
export const COMPILED = !import.meta.url.endsWith('.ts');

/** The package's root folder (package.json, node_modules/, scripts/): one level further up from dist/src/. */
export const PACKAGE_ROOT = resolve(fileURLToPath(new URL(COMPILED ? '../../../' : '../../', import.meta.url)));

/**
 * The extension of this build's modules: `.js` in dist/, `.ts` in src/. A module path the code names
 * in a string (not an import, which the build rewrites) takes it: `./worker${MODULE_EXTENSION}`.
 */
export const MODULE_EXTENSION = COMPILED ? '.js' : '.ts';

/**
 * The node_modules folders Node.js searches for the package's dependencies, nearest first: from
 * PACKAGE_ROOT up to `/`, each folder's `node_modules` that exists (none inside another node_modules
 * name, as Node.js skips those). In a checkout, its own node_modules; in the installed package
 * (`…/node_modules/deskbatch`), the node_modules it sits in, where npm put its dependencies.
 */
export function moduleFolders(root: string = PACKAGE_ROOT): string[] {
  const out: string[] = [];
  for (let dir = root; ; dir = dirname(dir)) {
    const folder = join(dir, 'node_modules');
    if (basename(dir) !== 'node_modules' && existsSync(folder)) out.push(folder);
    if (dirname(dir) === dir) return out;
  }
}
