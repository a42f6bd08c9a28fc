/**
 * The build a daemon started as a process runs: bin/deskbatch.js runs dist/
 * (scripts/build.js), not the sources the tests import. `npm test` builds
 * before the tests; a test file run alone (`node --import tsx --test
 * test/cli.test.ts`) would otherwise start a daemon from a dist/ older than
 * the sources, or from none. So whatever starts `bin/deskbatch.js` awaits
 * `ensureBuilt()` first: the build once per test process, a no-op (about
 * 0.1 s) when dist/ is current.
 */
import { fileURLToPath } from 'node:url';
import { runTool } from '../src/base/child-process.ts';

const BUILD = fileURLToPath(new URL('../scripts/build.js', import.meta.url));
/** A cold build takes about 0.4 s here; a loaded machine, several times that. */
const BUILD_TIMEOUT_MS = 120_000;

let built: Promise<void> | undefined;

/** dist/ is current with the sources (built now if it was not); rejects with the build's messages. */
export function ensureBuilt(): Promise<void> {
  built ??= runTool(process.execPath, [BUILD], { timeoutMs: BUILD_TIMEOUT_MS }).then((run) => {
    if (run.error) throw new Error(`scripts/build.js failed (${run.error.message}):\n${run.stderr}`);
  });
  return built;
}
