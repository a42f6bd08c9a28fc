/**
 * Reading a page for the model: an accessibility-tree text (`read_page`),
 * element search (`find`), the visible text (`get_page_text`), and the
 * element references (`[ref_N]`) that later calls target.
 *
 * The work runs in the page, in one script (PAGE_SCRIPT) evaluated per call,
 * in an isolated world of the page's main frame (CDP
 * `Page.createIsolatedWorld`): it sees the same DOM, but not the page's
 * JavaScript, and the page cannot see or change it. There it keeps a registry
 * (a non-enumerable property of that world's `window`, made once per
 * document): ref number → WeakRef(element) and element → number. So an
 * element keeps its ref across calls, and a navigation (a new document, with
 * a new world) starts an empty registry, which makes every older ref stale.
 * (Before, the registry lived in the page's own world: a hostile page could
 * set its counter past the ref pattern and break refs for every session.)
 *
 * Ref numbers come from one counter for the whole process (`highestRef`):
 * each call passes the next free number as a floor and the registry never
 * issues below it. A number therefore names at most one element ever, so a
 * ref from an earlier document or another tab can never resolve to some other
 * element: it is refused. The counter only moves by as many refs as a call can
 * have issued, whatever a page does.
 *
 * The script is a JavaScript file of its own (page-script/page-script.js,
 * linted with browser globals), evaluated from its text, not a TypeScript
 * function passed to `page.evaluate`: the project has no DOM types, and tsx
 * (esbuild keepNames) would inject `__name(...)` calls into a function's
 * source that do not exist in the page.
 *
 * Page text, names and titles are untrusted: every name is folded to one line,
 * stripped of control characters, quoted with `"` and `\` escaped, and bounded.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { CDPSession, ElementHandle, Page } from 'playwright';
import { ToolInputError } from '../errors.ts';
import { echo } from '../text.ts';

/** Longest text a reading member returns, note included (docs/TOOLSETS.md C2, E). */
export const READ_OUTPUT_MAX = 50_000;
/** `read_page` depth when none is given. */
export const DEFAULT_DEPTH = 15;
/** Most matches `find` returns. */
export const FIND_MAX = 20;

export type ReadFilter = 'all' | 'interactive';

export interface ReadPageOptions {
  filter?: ReadFilter | null;
  depth?: number | null;
  ref?: string | null;
}

/** Highest ref number issued by any page of this process (see the header). */
let highestRef = 0;

const TRUNCATED_NOTE = `[output truncated at ${READ_OUTPUT_MAX} characters; use ref or filter to read less]`;
const TEXT_TRUNCATED_NOTE = `[text truncated at ${READ_OUTPUT_MAX} characters]`;
const REF_PATTERN = /^\[?ref_([1-9][0-9]{0,9})\]?$/;

/**
 * The in-page script (page-script/page-script.js: its requests and answers are
 * listed there), read once when this module loads. `(source)(request)` calls it.
 */
const PAGE_SCRIPT = readFileSync(new URL('./page-script/page-script.js', import.meta.url), 'utf8').trim();

/** The expression that runs PAGE_SCRIPT with one request. */
function script(request: Record<string, unknown>): string {
  return `(${PAGE_SCRIPT})(${JSON.stringify({ ...request, floor: highestRef + 1 })})`;
}

/** The name of the isolated world the page script runs in. */
const WORLD_NAME = 'deskbatch';

/** A page's CDP session, and its isolated world's execution context for the current document. */
interface World {
  cdp: CDPSession;
  contextId: number | undefined;
}
const worlds = new WeakMap<Page, Promise<World>>();

function worldOf(page: Page): Promise<World> {
  let world = worlds.get(page);
  if (!world) {
    world = page
      .context()
      .newCDPSession(page)
      .then((cdp): World => ({ cdp, contextId: undefined }));
    worlds.set(page, world);
    world.catch(() => worlds.delete(page));
  }
  return world;
}

const GONE_CONTEXT =
  /Cannot find context|context with specified id|Execution context was destroyed|Inspected target navigated/i;

/** Evaluates `expression` in the page's isolated world (made for the document on first use), returning its value. */
async function evaluateIsolated(page: Page, expression: string): Promise<unknown> {
  const world = await worldOf(page);
  for (let attempt = 1; ; attempt++) {
    try {
      if (world.contextId === undefined) {
        const { frameTree } = (await world.cdp.send('Page.getFrameTree')) as { frameTree: { frame: { id: string } } };
        const made = (await world.cdp.send('Page.createIsolatedWorld', {
          frameId: frameTree.frame.id,
          worldName: WORLD_NAME,
        })) as { executionContextId: number };
        world.contextId = made.executionContextId;
      }
      const res = (await world.cdp.send('Runtime.evaluate', {
        expression,
        contextId: world.contextId,
        returnByValue: true,
      })) as { result: { value?: unknown }; exceptionDetails?: { text: string; exception?: { description?: string } } };
      if (res.exceptionDetails) {
        throw new Error(res.exceptionDetails.exception?.description ?? res.exceptionDetails.text);
      }
      return res.result.value;
    } catch (err) {
      // The document changed (and its world with it): make a world for the new one.
      if (attempt >= 3 || !GONE_CONTEXT.test(String(err))) throw err;
      world.contextId = undefined;
    }
  }
}

/** Runs a request in the page; a call that races a navigation is retried once on the new document. */
async function inPage<T>(page: Page, request: Record<string, unknown>): Promise<T> {
  try {
    return (await evaluateIsolated(page, script(request))) as T;
  } catch (err) {
    if (!/Execution context was destroyed|navigat/i.test(String(err))) throw err;
    await page.waitForLoadState('domcontentloaded').catch(() => undefined);
    return (await evaluateIsolated(page, script(request))) as T;
  }
}

/** Most refs one call can issue: one per element a page can have within the output budget, with room to spare. */
const REFS_PER_CALL_MAX = 1_000_000;

/** Records the refs a call issued (no more than one call can issue), so no later page issues the same numbers. */
function issued(next: number): void {
  const floor = highestRef + 1;
  if (!Number.isInteger(next) || next < floor) return;
  highestRef = Math.min(next, floor + REFS_PER_CALL_MAX) - 1;
}

/** `ref_7` (or `[ref_7]`) → 7; anything else is refused with the allowed form. */
function refNumber(ref: string): number {
  const m = REF_PATTERN.exec(ref.trim());
  if (!m) {
    throw new ToolInputError(
      `"${echo(ref)}" is not an element reference: use a ref such as ref_7 from read_page or find.`,
    );
  }
  return Number(m[1]);
}

type RefProblem = 'navigated' | 'unknown' | 'removed' | 'nobox';

/** The message for a ref that no longer (or never) names an element on this page. */
function refError(n: number, problem: RefProblem): ToolInputError {
  const again = 'Call read_page or find again to get current references.';
  switch (problem) {
    case 'navigated':
      return new ToolInputError(
        `ref_${n} is stale: it was given for an earlier page (the tab has navigated since) or for another tab. ${again}`,
      );
    case 'removed':
      return new ToolInputError(`ref_${n} is stale: its element has been removed from the page. ${again}`);
    case 'unknown':
      return new ToolInputError(`ref_${n} is not a reference on this page (it may belong to another tab). ${again}`);
    case 'nobox':
      return new ToolInputError(
        `ref_${n} names an element that is not displayed (it has no box on the page), so it cannot be pointed at.`,
      );
  }
}

/** Joins lines under the output cap, adding `note` when anything was cut. */
function capped(lines: string[], truncated: boolean, note: string, notes: string[] = []): string {
  const tail = [...notes, ...(truncated ? [note] : [])];
  let text = [...lines, ...tail].join('\n');
  if (text.length > READ_OUTPUT_MAX) {
    // The page side already keeps within the budget; this is the final guarantee.
    const room = READ_OUTPUT_MAX - note.length - 1;
    text = `${text.slice(0, room)}\n${note}`;
  }
  return text;
}

interface ReadResult {
  lines: string[];
  truncated: boolean;
  offscreen: boolean;
  deeper: boolean;
  next: number;
}

/** The accessibility-tree text of the page (or of one element's subtree), one element per line. */
export async function readPage(page: Page, options: ReadPageOptions): Promise<string> {
  const depth = options.depth ?? DEFAULT_DEPTH;
  if (!Number.isInteger(depth) || depth < 1) {
    throw new ToolInputError(`depth must be a whole number of at least 1 (default ${DEFAULT_DEPTH}).`);
  }
  const filter = options.filter ?? null;
  const ref = options.ref != null ? refNumber(options.ref) : null;
  // Room for the notes that may follow the lines.
  const budget = READ_OUTPUT_MAX - 400;
  const res = await inPage<ReadResult | { error: RefProblem }>(page, { op: 'read', filter, depth, ref, budget });
  if ('error' in res) throw refError(ref ?? 0, res.error);
  issued(res.next);
  if (!res.lines.length) {
    if (filter === 'interactive') return 'No interactive elements are visible in the viewport.';
    if (filter === 'all') return 'The page has no visible elements.';
    return 'No elements are visible in the viewport. Use filter "all" to include elements outside the viewport.';
  }
  const notes: string[] = [];
  if (res.deeper) notes.push(`[elements deeper than depth ${depth} are not shown; read a subtree with ref]`);
  if (res.offscreen) notes.push('[elements outside the viewport are not shown; use filter "all" or scroll]');
  return capped(res.lines, res.truncated, TRUNCATED_NOTE, notes);
}

/** Words that say what kind of element is wanted, and the roles they mean. Longer phrases first. */
const ROLE_WORDS: [string, string[]][] = [
  ['search box', ['searchbox', 'textbox', 'combobox']],
  ['search bar', ['searchbox', 'textbox', 'combobox']],
  ['search field', ['searchbox', 'textbox', 'combobox']],
  ['text box', ['textbox', 'searchbox', 'combobox']],
  ['text field', ['textbox', 'searchbox', 'combobox']],
  ['text area', ['textbox']],
  ['input field', ['textbox', 'searchbox', 'combobox', 'spinbutton']],
  ['check box', ['checkbox', 'switch']],
  ['tick box', ['checkbox', 'switch']],
  ['radio button', ['radio']],
  ['drop down', ['combobox', 'listbox']],
  ['combo box', ['combobox']],
  ['menu item', ['menuitem', 'menuitemcheckbox', 'menuitemradio']],
  ['button', ['button']],
  ['btn', ['button']],
  ['link', ['link']],
  ['hyperlink', ['link']],
  ['searchbox', ['searchbox', 'textbox', 'combobox']],
  ['textbox', ['textbox', 'searchbox', 'combobox']],
  ['textarea', ['textbox']],
  ['input', ['textbox', 'searchbox', 'combobox', 'spinbutton']],
  ['field', ['textbox', 'searchbox', 'combobox', 'spinbutton']],
  ['checkbox', ['checkbox', 'switch']],
  ['radio', ['radio']],
  ['dropdown', ['combobox', 'listbox']],
  ['select', ['combobox', 'listbox']],
  ['combobox', ['combobox']],
  ['heading', ['heading']],
  ['headline', ['heading']],
  ['image', ['img']],
  ['picture', ['img']],
  ['photo', ['img']],
  ['icon', ['img']],
  ['logo', ['img']],
  ['tab', ['tab']],
  ['slider', ['slider']],
  ['switch', ['switch', 'checkbox']],
  ['toggle', ['switch', 'checkbox']],
  ['option', ['option']],
  ['table', ['table']],
  ['list', ['list']],
  ['form', ['form']],
  ['dialog', ['dialog']],
  ['modal', ['dialog']],
  ['navigation', ['navigation']],
  ['nav', ['navigation']],
  ['navbar', ['navigation']],
  ['paragraph', ['paragraph']],
];
/** Words too common to say which element is meant. */
const STOP_WORDS = new Set(
  'a an the to of for on in at with and or that this which where is are it its my me i element elements thing field called named labeled labelled saying says text'.split(
    ' ',
  ),
);

export interface ParsedQuery {
  /** Words that must match an element's text (at least one of them). */
  tokens: string[];
  /** Role words: they add a little when an element's text holds them too. */
  soft: string[];
  /** Roles the query asks for. */
  roles: string[];
  /** The content words as one phrase (for a bonus when a name holds them in order). */
  phrase: string;
}

/** Splits a plain-language description into content words and the roles it names. */
export function parseQuery(query: string): ParsedQuery {
  let rest = ` ${query
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter(Boolean)
    .join(' ')} `;
  const roles = new Set<string>();
  const soft: string[] = [];
  for (const [words, meant] of ROLE_WORDS) {
    for (const form of [words, `${words}s`, `${words}es`]) {
      if (!rest.includes(` ${form} `)) continue;
      meant.forEach((r) => roles.add(r));
      soft.push(...words.split(' '));
      // "search box" keeps "search" as a content word: it says which box.
      const kept = words.startsWith('search ') ? ' search ' : ' ';
      rest = rest.replaceAll(` ${form} `, kept);
    }
  }
  const tokens = [...new Set(rest.split(' ').filter((w) => w && !STOP_WORDS.has(w)))];
  return { tokens, soft: [...new Set(soft)], roles: [...roles], phrase: tokens.length > 1 ? tokens.join(' ') : '' };
}

/** Up to FIND_MAX elements matching a plain-language description, best first, in read_page's line format. */
export async function findElements(page: Page, query: string): Promise<string> {
  const parsed = parseQuery(query);
  const shown = echo(query);
  if (!parsed.tokens.length && !parsed.roles.length) {
    throw new ToolInputError(
      `The query "${shown}" has no words to match: describe the element, e.g. "search box" or "add to cart button".`,
    );
  }
  const res = await inPage<{ lines: string[]; total: number; next: number }>(page, {
    op: 'find',
    ...parsed,
    max: FIND_MAX,
  });
  issued(res.next);
  if (!res.lines.length) {
    return `No element on the page matched "${shown}". Try other words, or call read_page to see the page.`;
  }
  const head =
    res.total > res.lines.length
      ? `${res.total} elements matched "${shown}"; the best ${res.lines.length} are shown, best first:`
      : `${res.total} element${res.total === 1 ? '' : 's'} matched "${shown}", best first:`;
  return capped([head, ...res.lines], false, TRUNCATED_NOTE);
}

/** The page's visible text, main content (main, article, [role=main]) first. */
export async function pageText(page: Page): Promise<string> {
  const res = await inPage<{ main: string; rest: string }>(page, { op: 'text' });
  const parts = [res.main, res.rest].filter(Boolean);
  if (!parts.length) return 'The page has no visible text.';
  const text = parts.join('\n\n');
  if (text.length <= READ_OUTPUT_MAX) return text;
  return `${text.slice(0, READ_OUTPUT_MAX - TEXT_TRUNCATED_NOTE.length - 1)}\n${TEXT_TRUNCATED_NOTE}`;
}

/**
 * The element a ref names on this page; a malformed, unknown or stale ref is
 * refused, never replaced. The isolated world marks the element with a random
 * token for the moment it takes Playwright to find it (Playwright's handles
 * live in the page's own world): the page cannot guess the token, though it
 * could move the mark on its own elements meanwhile, which misdirects nothing
 * outside that page.
 */
// `ElementHandle` is Playwright's `ElementHandle<Node>`: this project has no DOM lib, so `Element` cannot be named.
export async function refElement(page: Page, ref: string): Promise<ElementHandle> {
  const n = refNumber(ref);
  const token = randomUUID();
  const marked = await inPage<'ok' | RefProblem>(page, { op: 'mark', ref: n, token });
  if (marked !== 'ok') throw refError(n, marked);
  try {
    const handle = await page.$(`[data-deskbatch-ref="${token}"]`);
    if (!handle) throw refError(n, 'removed');
    return handle;
  } finally {
    await inPage(page, { op: 'unmark', token }).catch(() => undefined);
  }
}

/**
 * Runs a request on the element a ref names (the page script's `ref` ops); a
 * malformed, unknown or stale ref is refused, never replaced.
 */
export async function onRef<T extends object>(page: Page, ref: string, request: Record<string, unknown>): Promise<T> {
  const n = refNumber(ref);
  const res = await inPage<T | { error: RefProblem }>(page, { ...request, ref: n });
  if ('error' in res) throw refError(n, res.error);
  return res;
}

/** Scrolls the ref's element into view if needed; the centre of its visible box, in viewport CSS pixels. */
export async function refCenter(page: Page, ref: string): Promise<{ x: number; y: number }> {
  const n = refNumber(ref);
  const res = await inPage<{ x: number; y: number } | { error: RefProblem }>(page, { op: 'center', ref: n });
  if ('error' in res) throw refError(n, res.error);
  return res;
}
