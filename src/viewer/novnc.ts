/**
 * noVNC's ES modules for the live page's takeover view (docs/VIEWER.md "Takeover"): read once, at start,
 * from a noVNC install (Debian's package `novnc` puts it in /usr/share/novnc) into memory, and served
 * from there under `/viewer/novnc/`.
 *
 * Only `.js` files under the install's `core/` and `vendor/` folders are read, found by walking those
 * two folders; a symbolic link is never followed (so nothing outside them is reachable), names are
 * plain (letters, digits, `.`, `_`, `-`), and the walk is bounded in depth, files and bytes. A request
 * is answered only for a path that is a key of that map, byte for byte: `..`, `%2e`, a query string or
 * any other file is a 404 without touching the file system.
 */
import { lstatSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** Where Debian's `novnc` package installs noVNC. */
export const DEFAULT_NOVNC_DIR = '/usr/share/novnc';

/** The folders of a noVNC install the page needs (rfb.js and what it imports); the app/ UI is not served. */
export const SERVED_FOLDERS = ['core', 'vendor'] as const;
/** Debian's noVNC 1.3.0 has 43 such files, 496 KB; these bounds leave room for later versions and stop a wrong folder. */
const MAX_FILES = 256;
const MAX_FILE_BYTES = 1024 * 1024;
const MAX_TOTAL_BYTES = 8 * 1024 * 1024;
const MAX_FOLDER_DEPTH = 6;
const PLAIN_NAME = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;

/** The module the page imports; without it the install is not usable. */
export const NOVNC_ENTRY = 'core/rfb.js';

export type NovncFiles =
  | { ok: true; dir: string; files: ReadonlyMap<string, Buffer>; bytes: number }
  | { ok: false; dir: string; reason: string };

/** Reads noVNC's `core/**.js` and `vendor/**.js` from `dir` into memory (keys like `core/rfb.js`). */
export function loadNovnc(dir: string): NovncFiles {
  const files = new Map<string, Buffer>();
  let bytes = 0;
  const walk = (folder: string, relative: string, depth: number): void => {
    if (depth > MAX_FOLDER_DEPTH) throw new Error(`${relative}: deeper than ${MAX_FOLDER_DEPTH} folders`);
    const entries = readdirSync(folder, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name));
    for (const entry of entries) {
      // isFile/isDirectory describe the entry itself: a symbolic link is neither, so it is never followed.
      if (!PLAIN_NAME.test(entry.name)) continue;
      const path = join(folder, entry.name);
      const key = `${relative}/${entry.name}`;
      if (entry.isDirectory()) {
        walk(path, key, depth + 1);
      } else if (entry.isFile() && entry.name.endsWith('.js')) {
        const size = lstatSync(path).size;
        if (size > MAX_FILE_BYTES) throw new Error(`${key}: larger than ${MAX_FILE_BYTES} bytes`);
        if (files.size >= MAX_FILES) throw new Error(`more than ${MAX_FILES} .js files`);
        const body = readFileSync(path);
        bytes += body.length;
        if (bytes > MAX_TOTAL_BYTES) throw new Error(`more than ${MAX_TOTAL_BYTES} bytes of .js files`);
        files.set(key, body);
      }
    }
  };
  try {
    for (const name of SERVED_FOLDERS) {
      const folder = join(dir, name);
      let isFolder = false;
      try {
        isFolder = lstatSync(folder).isDirectory(); // lstat: a linked core/ or vendor/ is not followed either
      } catch {
        isFolder = false;
      }
      if (isFolder) walk(folder, name, 1);
    }
  } catch (err) {
    return { ok: false, dir, reason: err instanceof Error ? err.message : String(err) };
  }
  if (!files.has(NOVNC_ENTRY)) return { ok: false, dir, reason: `no ${NOVNC_ENTRY}` };
  return { ok: true, dir, files, bytes };
}
