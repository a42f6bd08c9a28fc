/**
 * Reading a page for the model: an accessibility-tree text (`read_page`),
 * element search (`find`) and the visible text (`get_page_text`).
 *
 * The page script answers in each frame's isolated world, and the element
 * references (`[ref_N]`) it issues are resolved, in
 * src/browser/frame-worlds.ts; this file asks the frames for its op and puts
 * their answers together into the text the model reads: a frame's lines in
 * their place, matches ranked across frames, the output cap, and the notes
 * on what was left out.
 *
 * Page text, names and titles are untrusted: every name is folded to one line,
 * stripped of control characters, quoted with `"` and `\` escaped, and bounded.
 */
import type { Page } from 'playwright';
import { ToolInputError } from '../base/errors.ts';
import { echo } from '../base/text.ts';
import {
  FrameVisits,
  holderOf,
  refError,
  refNumber,
  run,
  worldsOf,
  type FrameEntry,
  type PageWorlds,
  type RefProblem,
  type World,
} from './frame-worlds.ts';

/** Longest text a reading member returns, note included (docs/TOOLSETS.md C2, E). */
export const READ_OUTPUT_MAX = 50_000;
/** `read_page` depth when none is given. */
export const READ_PAGE_DEPTH_DEFAULT = 15;
/** Most matches `find` returns. */
export const FIND_MAX = 20;

export type ReadFilter = 'all' | 'interactive';

export interface ReadPageOptions {
  filter?: ReadFilter | null;
  depth?: number | null;
  ref?: string | null;
}

const TRUNCATED_NOTE = `[output truncated at ${READ_OUTPUT_MAX} characters; use ref or filter to read less]`;
const TEXT_TRUNCATED_NOTE = `[text truncated at ${READ_OUTPUT_MAX} characters]`;

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
  frames: FrameEntry[];
  framesMore: number;
}

/** One frame's lines with its frames' lines in their places (each frame read with the depth left). */
async function readFrame(
  visits: FrameVisits,
  page: Page,
  pw: PageWorlds,
  world: World,
  request: { filter: ReadFilter | null; depth: number; ref: number | null; budget: number; everywhere: boolean },
  clip: FrameEntry['clip'] | null = null,
): Promise<ReadResult | { error: RefProblem }> {
  const res = await run<ReadResult | { error: RefProblem }>(page, pw, world, { op: 'read', ...request, clip });
  if ('error' in res) return res;
  visits.more(res.framesMore);
  const lines = [...res.lines];
  let shift = 0;
  for (const entry of res.frames) {
    const sub = await visits.visit(world, entry, (child) =>
      readFrame(visits, page, pw, child, { ...request, depth: request.depth - entry.depth, ref: null }, entry.clip),
    );
    if (!sub || 'error' in sub) continue;
    const pad = '  '.repeat(entry.depth);
    lines.splice(entry.at + shift, 0, ...sub.lines.map((l) => pad + l));
    shift += sub.lines.length;
    res.truncated ||= sub.truncated;
    res.offscreen ||= sub.offscreen;
    res.deeper ||= sub.deeper;
  }
  return { ...res, lines };
}

/** The accessibility-tree text of the page (or of one element's subtree), one element per line, frames included. */
export async function readPage(page: Page, options: ReadPageOptions): Promise<string> {
  const depth = options.depth ?? READ_PAGE_DEPTH_DEFAULT;
  if (!Number.isInteger(depth) || depth < 1) {
    throw new ToolInputError(`depth must be a whole number of at least 1 (default ${READ_PAGE_DEPTH_DEFAULT}).`);
  }
  const filter = options.filter ?? null;
  const ref = options.ref != null ? refNumber(options.ref) : null;
  // Room for the notes that may follow the lines.
  const budget = READ_OUTPUT_MAX - 600;
  const pw = await worldsOf(page);
  const holder = ref === null ? pw.main : holderOf(pw, ref);
  const visits = new FrameVisits(page, pw);
  const request = { filter, depth, ref, budget, everywhere: filter === 'all' || ref !== null };
  let res: ReadResult | { error: RefProblem };
  try {
    res = await readFrame(visits, page, pw, holder, request);
  } catch (err) {
    if (holder === pw.main) throw err;
    res = { error: 'frame' };
  }
  if ('error' in res) throw refError(ref ?? 0, res.error);
  // Each frame kept within the budget; together they may not have.
  let used = 0;
  const lines = res.lines.filter((l) => (used += l.length + 1) <= budget);
  if (lines.length < res.lines.length) res.truncated = true;
  if (!lines.length) {
    if (filter === 'interactive') return 'No interactive elements are visible in the viewport.';
    if (filter === 'all') return 'The page has no visible elements.';
    return 'No elements are visible in the viewport. Use filter "all" to include elements outside the viewport.';
  }
  const notes: string[] = [];
  if (res.deeper) notes.push(`[elements deeper than depth ${depth} are not shown; read a subtree with ref]`);
  if (res.offscreen) notes.push('[elements outside the viewport are not shown; use filter "all" or scroll]');
  notes.push(...visits.notes());
  return capped(lines, res.truncated, TRUNCATED_NOTE, notes);
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
  const pw = await worldsOf(page);
  const visits = new FrameVisits(page, pw);
  // Matches from every frame, ranked together (a tie keeps document order, frames after their page).
  const matches: { line: string; score: number; order: number }[] = [];
  let total = 0;
  const search = async (world: World): Promise<void> => {
    const found = await run<{
      lines: string[];
      scores: number[];
      total: number;
      frames: FrameEntry[];
      framesMore: number;
    }>(page, pw, world, { op: 'find', ...parsed, max: FIND_MAX });
    visits.more(found.framesMore);
    total += found.total;
    found.lines.forEach((line, i) => matches.push({ line, score: found.scores[i]!, order: matches.length }));
    for (const entry of found.frames) await visits.visit(world, entry, search);
  };
  await search(pw.main);
  matches.sort((a, b) => b.score - a.score || a.order - b.order);
  const res = { lines: matches.slice(0, FIND_MAX).map((m) => m.line), total };
  if (!res.lines.length) {
    return `No element on the page matched "${shown}". Try other words, or call read_page to see the page.`;
  }
  const head =
    res.total > res.lines.length
      ? `${res.total} elements matched "${shown}"; the best ${res.lines.length} are shown, best first:`
      : `${res.total} element${res.total === 1 ? '' : 's'} matched "${shown}", best first:`;
  return capped([head, ...res.lines], false, TRUNCATED_NOTE, visits.notes());
}

/**
 * The page's visible text, main content (main, article, [role=main]) first.
 * A frame's text follows its page's part: the main part for a frame inside
 * the main content, else the rest.
 */
export async function pageText(page: Page): Promise<string> {
  const pw = await worldsOf(page);
  const visits = new FrameVisits(page, pw);
  const textOf = async (world: World): Promise<{ main: string; rest: string }> => {
    const res = await run<{ main: string; rest: string; frames: FrameEntry[]; framesMore: number }>(page, pw, world, {
      op: 'text',
    });
    visits.more(res.framesMore);
    const main = [res.main];
    const rest = [res.rest];
    for (const entry of res.frames) {
      const sub = await visits.visit(world, entry, textOf);
      if (sub) (entry.main ? main : rest).push([sub.main, sub.rest].filter(Boolean).join('\n\n'));
    }
    return { main: main.filter(Boolean).join('\n\n'), rest: rest.filter(Boolean).join('\n\n') };
  };
  const res = await textOf(pw.main);
  const parts = [res.main, res.rest, ...visits.notes()].filter(Boolean);
  if (!parts.length) return 'The page has no visible text.';
  const text = parts.join('\n\n');
  if (text.length <= READ_OUTPUT_MAX) return text;
  return `${text.slice(0, READ_OUTPUT_MAX - TEXT_TRUNCATED_NOTE.length - 1)}\n${TEXT_TRUNCATED_NOTE}`;
}
