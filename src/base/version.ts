/** deskbatch's version: package.json's, read once (`unknown` if it cannot be read). */
import { readFileSync } from 'node:fs';

function packageVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      version?: unknown;
    };
    return typeof pkg.version === 'string' ? pkg.version : 'unknown';
  } catch {
    return 'unknown';
  }
}

export const DESKBATCH_VERSION = packageVersion();
