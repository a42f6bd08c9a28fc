/**
 * bench/results.json, the machine-readable record of the last run (gitignored): the whole run writes
 * it afresh; a section run alone (BENCH_ONLY) replaces its own key and keeps what else the file held.
 */
import { readFile, writeFile } from 'node:fs/promises';

const RESULTS = new URL('./results.json', import.meta.url);

/** Writes the whole run's results. */
export async function writeResults(run: object): Promise<void> {
  await writeFile(RESULTS, `${JSON.stringify(run, null, 2)}\n`);
}

/** Sets `key` to `value` in bench/results.json, keeping every other key (a missing or unreadable file: none). */
export async function writeResultsSection(key: string, value: unknown): Promise<void> {
  const existing = await readFile(RESULTS, 'utf8').then(
    (text) => JSON.parse(text) as Record<string, unknown>,
    () => ({}),
  );
  await writeResults({ ...existing, [key]: value });
}
