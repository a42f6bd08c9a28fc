/**
 * The frames of a page as the browser driver reads them, and the element
 * references (`[ref_N]`) that later calls target: one isolated world per
 * frame, cross-site frames reached through their own CDP target, the frames
 * one reading call visits (FrameVisits), and the blocks of ref numbers each
 * evaluation reserves. What read_page, find and get_page_text make of the
 * answers is src/browser/snapshot.ts.
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
 * iframes: the script sees one document, so each frame whose content would be
 * shown is read by the same script in an isolated world of its own (CDP
 * `Page.createIsolatedWorld` on the session that owns the frame: the page's,
 * or for a cross-site frame running in its own renderer process, that frame's
 * target), and its lines go where its iframe is, indented under it. Each
 * frame keeps its own registry; a ref says which frame holds it (`issuedBy`),
 * and a point in a frame is lifted to the top-level viewport through each
 * iframe's content box and scale (`liftPoint`), scrolling it into view when
 * needed. A call reads at most FRAMES_MAX frames, each within FRAME_ANSWER_MS
 * and all within FRAMES_TIME_MS; a frame still busy with an earlier call is
 * passed over.
 *
 * Ref numbers come from one counter for the whole process (`highestRef`):
 * each evaluation reserves a block of REFS_PER_EVAL numbers before it starts
 * and the registry issues only inside it, and the unused end is given back
 * when nothing was reserved after it. A number therefore names at most one
 * element ever, even when a frame answers after its call gave up on it, so a
 * ref from an earlier document, another frame or another tab can never
 * resolve to some other element: it is refused.
 *
 * The script is a JavaScript file of its own (page-script/page-script.js,
 * linted with browser globals), evaluated from its text, not a TypeScript
 * function passed to `page.evaluate`: the project has no DOM types, and tsx
 * (esbuild keepNames) would inject `__name(...)` calls into a function's
 * source that do not exist in the page.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { CDPSession, ElementHandle, Frame, Page } from 'playwright';
import { ToolInputError } from '../base/errors.ts';
import { orAfter } from '../base/resilience.ts';
import { echo } from '../base/text.ts';

/** Most frames (iframes, at any depth) one reading call reads; the rest are counted in a note. */
export const FRAMES_MAX = 20;
/**
 * Time one frame has to answer, and time one reading call gives its frames,
 * all together (from the first frame on). A frame whose renderer is busy (a
 * script in an endless loop) never answers; the call goes on without it, so
 * a hostile ad frame cannot keep the model from reading the page.
 */
export const FRAME_ANSWER_MS = 3_000;
export const FRAMES_TIME_MS = 10_000;

/** Highest ref number issued by any page of this process (see the header). */
let highestRef = 0;

const REF_PATTERN = /^\[?ref_([1-9][0-9]{0,9})\]?$/;
const framesNote = (n: number): string =>
  `[${n} more frame${n === 1 ? ' was' : 's were'} not read (at most ${FRAMES_MAX} per call); read one with its iframe's ref]`;
const unreadableNote = (n: number): string =>
  `[${n} frame${n === 1 ? '' : 's'} could not be read (loading, removed, or not answering)]`;

/**
 * The in-page script (page-script/page-script.js: its requests and answers are
 * listed there), read once when this module loads. `(source)(request)` calls it.
 */
const PAGE_SCRIPT = readFileSync(new URL('./page-script/page-script.js', import.meta.url), 'utf8').trim();

/** The expression that runs PAGE_SCRIPT with one request, issuing refs within [floor, floor + REFS_PER_EVAL). */
function script(request: Record<string, unknown>, floor: number): string {
  return `(${PAGE_SCRIPT})(${JSON.stringify({ ...request, floor, limit: floor + REFS_PER_EVAL, framesMax: FRAMES_MAX })})`;
}

/** The name of the isolated world the page script runs in. */
const WORLD_NAME = 'deskbatch';

/**
 * One frame's isolated world: the CDP session that owns the frame, the frame's
 * id (undefined for the main frame: read from the session's frame tree each
 * time a world is made), and the world's execution context for the current
 * document.
 */
export interface World {
  cdp: CDPSession;
  frameId: string | undefined;
  contextId: number | undefined;
  /** Evaluations sent and not yet answered. */
  busy: number;
}

/** What the driver knows of one page's frames. */
export interface PageWorlds {
  main: World;
  /** Child frames' worlds by frame id, oldest first (bounded by WORLDS_MAX). */
  frames: Map<string, World>;
  /** Each child frame's parent world and its iframe's ref there. */
  owners: Map<World, { parent: World; ref: number }>;
  /** Ref numbers issued by child frames (the main frame holds every other): [from, to) → world. */
  issuedBy: { from: number; to: number; world: World }[];
  /** Cross-site frames' own CDP sessions (null: the frame is drawn by its parent's renderer); reset by `forget`. */
  targets: WeakMap<Frame, Promise<{ cdp: CDPSession; frameId: string } | null>>;
}

/** Child frame worlds remembered per page, and issued-ref ranges: older ones are dropped (their refs go stale). */
const WORLDS_MAX = 200;
const RANGES_MAX = 10_000;

const pages = new WeakMap<Page, Promise<PageWorlds>>();

export function worldsOf(page: Page): Promise<PageWorlds> {
  let worlds = pages.get(page);
  if (!worlds) {
    worlds = page
      .context()
      .newCDPSession(page)
      .then((cdp): PageWorlds => ({
        main: { cdp, frameId: undefined, contextId: undefined, busy: 0 },
        frames: new Map(),
        owners: new Map(),
        issuedBy: [],
        targets: new WeakMap(),
      }));
    pages.set(page, worlds);
    worlds.catch(() => pages.delete(page));
  }
  return worlds;
}

const GONE_CONTEXT =
  /Cannot find context|context with specified id|Execution context was destroyed|Inspected target navigated/i;

interface Evaluated {
  result: { value?: unknown; objectId?: string; subtype?: string };
  exceptionDetails?: { text: string; exception?: { description?: string } };
}

/** Evaluates `expression` in a frame's isolated world (made for the document on first use). */
async function evaluateIn(world: World, expression: string, byValue = true): Promise<Evaluated['result']> {
  world.busy++;
  try {
    return await evaluateOnce(world, expression, byValue);
  } finally {
    world.busy--;
  }
}

async function evaluateOnce(world: World, expression: string, byValue: boolean): Promise<Evaluated['result']> {
  for (let attempt = 1; ; attempt++) {
    try {
      if (world.contextId === undefined) {
        const frameId =
          world.frameId ??
          ((await world.cdp.send('Page.getFrameTree')) as { frameTree: { frame: { id: string } } }).frameTree.frame.id;
        const made = (await world.cdp.send('Page.createIsolatedWorld', {
          frameId,
          worldName: WORLD_NAME,
        })) as { executionContextId: number };
        world.contextId = made.executionContextId;
      }
      const res = (await world.cdp.send('Runtime.evaluate', {
        expression,
        contextId: world.contextId,
        returnByValue: byValue,
      })) as Evaluated;
      if (res.exceptionDetails) {
        throw new Error(res.exceptionDetails.exception?.description ?? res.exceptionDetails.text);
      }
      return res.result;
    } catch (err) {
      // The document changed (and its world with it): make a world for the new one.
      if (attempt >= 3 || !GONE_CONTEXT.test(String(err))) throw err;
      world.contextId = undefined;
    }
  }
}

/** Runs a request in one frame, in a block of ref numbers reserved for it (see the header). */
async function inFrame<T>(pw: PageWorlds, world: World, request: Record<string, unknown>): Promise<T> {
  const floor = reserve();
  // A block an evaluation failed in stays used: it may have numbered elements before it failed.
  const value = (await evaluateIn(world, script(request, floor))).value as T;
  const next = (value as { next?: unknown } | null)?.next;
  if (typeof next !== 'number') {
    // Only read, find and text number elements (and say so with `next`); the others gave none.
    giveBack(floor, floor);
  } else if (Number.isInteger(next) && next >= floor && next <= floor + REFS_PER_EVAL) {
    giveBack(floor, next);
    if (world !== pw.main && next > floor) {
      pw.issuedBy.push({ from: floor, to: next, world });
      if (pw.issuedBy.length > RANGES_MAX) pw.issuedBy.shift();
    }
  }
  return value;
}

/** Runs a request in the page's main frame; a call that races a navigation is retried once on the new document. */
async function inPage<T>(page: Page, request: Record<string, unknown>): Promise<T> {
  const pw = await worldsOf(page);
  try {
    return await inFrame<T>(pw, pw.main, request);
  } catch (err) {
    if (!/Execution context was destroyed|navigat/i.test(String(err))) throw err;
    await page.waitForLoadState('domcontentloaded').catch(() => undefined);
    return await inFrame<T>(pw, pw.main, request);
  }
}

/** The world holding ref `n`: the child frame that issued it, else the main frame. */
export function holderOf(pw: PageWorlds, n: number): World {
  for (let i = pw.issuedBy.length - 1; i >= 0; i--) {
    const range = pw.issuedBy[i]!;
    if (n >= range.from && n < range.to) return range.world;
  }
  return pw.main;
}

/** A cross-site frame's own session (Playwright attaches one per out-of-process frame), or null. */
function targetOf(page: Page, pw: PageWorlds, frame: Frame): Promise<{ cdp: CDPSession; frameId: string } | null> {
  let target = pw.targets.get(frame);
  if (!target) {
    target = page
      .context()
      .newCDPSession(frame)
      .then(async (cdp) => {
        const tree = (await cdp.send('Page.getFrameTree')) as { frameTree: { frame: { id: string } } };
        return { cdp, frameId: tree.frameTree.frame.id };
      })
      // "This frame does not have a separate CDP session": its parent's renderer draws it.
      .catch(() => null);
    pw.targets.set(frame, target);
  }
  return target;
}

/**
 * The world of the frame shown by the iframe `ref` of `parent`, made on first
 * use: on the parent's session when the parent's renderer draws the frame,
 * else on the frame's own target. Null when the frame cannot be reached.
 */
async function childWorld(page: Page, pw: PageWorlds, parent: World, ref: number): Promise<World | null> {
  const element = await evaluateIn(parent, script({ op: 'element', ref }, highestRef + 1), false);
  if (!element.objectId) return null;
  let frameId: string | undefined;
  try {
    const { node } = (await parent.cdp.send('DOM.describeNode', { objectId: element.objectId })) as {
      node: { frameId?: string };
    };
    frameId = node.frameId;
  } finally {
    await parent.cdp.send('Runtime.releaseObject', { objectId: element.objectId }).catch(() => undefined);
  }
  if (!frameId) return null;
  let world = pw.frames.get(frameId);
  if (!world) {
    let cdp: CDPSession | undefined;
    let contextId: number | undefined;
    try {
      const made = (await parent.cdp.send('Page.createIsolatedWorld', { frameId, worldName: WORLD_NAME })) as {
        executionContextId: number;
      };
      cdp = parent.cdp;
      contextId = made.executionContextId;
    } catch {
      for (const frame of page.frames()) {
        if (frame === page.mainFrame()) continue;
        const target = await targetOf(page, pw, frame);
        if (target?.frameId === frameId) {
          cdp = target.cdp;
          break;
        }
      }
    }
    if (!cdp) return null;
    world = { cdp, frameId, contextId, busy: 0 };
    pw.frames.set(frameId, world);
    if (pw.frames.size > WORLDS_MAX) {
      const oldest = pw.frames.keys().next().value!;
      pw.owners.delete(pw.frames.get(oldest)!);
      pw.frames.delete(oldest);
    }
  }
  pw.owners.set(world, { parent, ref });
  return world;
}

/**
 * Drops what is known of a child frame's world after it failed: a frame that
 * moved to another renderer process (a cross-site navigation) or back needs a
 * new session and world, and the cached sessions of its page may be wrong.
 */
function forget(pw: PageWorlds, world: World): void {
  if (world === pw.main || world.frameId === undefined) return;
  if (pw.frames.get(world.frameId) === world) pw.frames.delete(world.frameId);
  pw.targets = new WeakMap();
}

/** A point in a frame's viewport, in the top-level viewport: each iframe on the way is scrolled into view if needed. */
async function liftPoint(pw: PageWorlds, world: World, point: { x: number; y: number }, n: number) {
  let p = point;
  for (let w = world; w !== pw.main;) {
    const owner = pw.owners.get(w);
    if (!owner) throw refError(n, 'frame');
    let res: { x: number; y: number } | { error: RefProblem };
    try {
      res = await inFrame(pw, owner.parent, { op: 'lift', ref: owner.ref, x: p.x, y: p.y });
    } catch {
      throw refError(n, 'frame');
    }
    if ('error' in res) throw refError(n, ['nobox', 'turned', 'covered'].includes(res.error) ? res.error : 'frame');
    p = res;
    w = owner.parent;
  }
  return p;
}

/** Runs a request on ref `n` in the frame that holds it; a frame that is gone makes the ref stale. */
async function inHolder<T>(
  page: Page,
  n: number,
  request: Record<string, unknown>,
): Promise<{ value: T; pw: PageWorlds; world: World }> {
  const pw = await worldsOf(page);
  const world = holderOf(pw, n);
  if (world === pw.main) return { value: await inPage<T>(page, { ...request, ref: n }), pw, world };
  try {
    return { value: await inFrame<T>(pw, world, { ...request, ref: n }), pw, world };
  } catch {
    forget(pw, world);
    throw refError(n, 'frame');
  }
}

/**
 * Ref numbers reserved per evaluation: more than one can issue (a read's lines
 * fit its 50,000-character budget, at least 15 characters each; a call lists
 * at most FRAMES_MAX frames; find shows FIND_MAX matches, src/browser/snapshot.ts).
 */
const REFS_PER_EVAL = 10_000;

/** Reserves the block of ref numbers one evaluation may issue; returns its first number. */
function reserve(): number {
  const floor = highestRef + 1;
  highestRef = floor + REFS_PER_EVAL - 1;
  return floor;
}

/** Gives back the unused end of a block (numbers from `next` on), when no block was reserved after it. */
function giveBack(floor: number, next: number): void {
  if (highestRef === floor + REFS_PER_EVAL - 1) highestRef = Math.max(next, floor) - 1;
}

/** `ref_7` (or `[ref_7]`) → 7; anything else is refused with the allowed form. */
export function refNumber(ref: string): number {
  const m = REF_PATTERN.exec(ref.trim());
  if (!m) {
    throw new ToolInputError(
      `"${echo(ref)}" is not an element reference: use a ref such as ref_7 from read_page or find.`,
    );
  }
  return Number(m[1]);
}

export type RefProblem = 'navigated' | 'unknown' | 'removed' | 'nobox' | 'frame' | 'turned' | 'covered';

/** The message for a ref that no longer (or never) names an element on this page. */
export function refError(n: number, problem: RefProblem): ToolInputError {
  const again = 'Call read_page or find again to get current references.';
  switch (problem) {
    case 'navigated':
      return new ToolInputError(
        `ref_${n} is stale: it was given for an earlier page (the tab has navigated since) or for another tab. ${again}`,
      );
    case 'removed':
      return new ToolInputError(`ref_${n} is stale: its element has been removed from the page. ${again}`);
    case 'frame':
      return new ToolInputError(`ref_${n} is stale: the frame it was in has navigated or been removed. ${again}`);
    case 'unknown':
      return new ToolInputError(`ref_${n} is not a reference on this page (it may belong to another tab). ${again}`);
    case 'nobox':
      return new ToolInputError(
        `ref_${n} names an element that is not displayed (it has no box on the page), so it cannot be pointed at.`,
      );
    case 'turned':
      return new ToolInputError(
        `ref_${n} is inside a rotated or skewed frame, so it cannot be pointed at: use a coordinate from a screenshot.`,
      );
    case 'covered':
      return new ToolInputError(
        `ref_${n} is inside a frame that something else on the page covers at that point, so it cannot be pointed at.`,
      );
  }
}

/** A frame a reading op met: its iframe's ref, and (read) where its lines go and what part of it is in view. */
export interface FrameEntry {
  ref: number;
  at: number;
  depth: number;
  clip: { left: number; top: number; right: number; bottom: number };
  main: boolean;
}

/** Runs a request in the main frame (with its navigation retry) or in a child frame. */
export function run<T>(page: Page, pw: PageWorlds, world: World, request: Record<string, unknown>): Promise<T> {
  return world === pw.main ? inPage<T>(page, request) : inFrame<T>(pw, world, request);
}

/**
 * The frames one reading call visits: at most FRAMES_MAX, each answering
 * within FRAME_ANSWER_MS and all within FRAMES_TIME_MS of the first; the rest,
 * and those that failed or were still busy with an earlier call, are counted
 * for a note.
 */
export class FrameVisits {
  private read = 0;
  private skipped = 0;
  private failed = 0;
  private deadline: number | undefined;
  constructor(
    private readonly page: Page,
    private readonly pw: PageWorlds,
  ) {}

  /** Frames a page listed beyond the most one answer lists. */
  more(n: unknown): void {
    if (typeof n === 'number' && Number.isInteger(n) && n > 0) this.skipped += n;
  }

  /** Reads the frame behind `entry` (an iframe of `parent`) with `fn`; undefined if over the cap or unreadable. */
  async visit<T>(parent: World, entry: FrameEntry, fn: (world: World) => Promise<T>): Promise<T | undefined> {
    if (this.read >= FRAMES_MAX) {
      this.skipped++;
      return undefined;
    }
    this.read++;
    this.deadline ??= performance.now() + FRAMES_TIME_MS;
    const left = Math.min(FRAME_ANSWER_MS, this.deadline - performance.now());
    try {
      // A frame that does not answer in time is left behind; its answer, if it ever comes, is dropped
      // (the refs it issued stay in their own reserved block, so they collide with nothing).
      const got = left > 0 ? await orAfter(this.attempt(parent, entry, fn), left, undefined) : undefined;
      if (got) return got.value;
    } catch {
      // Loading, navigating or removed while it was read: the rest of the page still counts.
    }
    this.failed++;
    return undefined;
  }

  /** One frame read; a known world that fails is forgotten and made again once (its frame may have changed process). */
  private async attempt<T>(parent: World, entry: FrameEntry, fn: (world: World) => Promise<T>) {
    for (let tries = 1; ; tries++) {
      const world = await childWorld(this.page, this.pw, parent, entry.ref);
      if (!world) return undefined;
      // Still busy with an earlier call (a script that never yields): another request would only queue.
      if (world.busy > 0) return undefined;
      try {
        return { value: await fn(world) };
      } catch (err) {
        forget(this.pw, world);
        if (tries >= 2) throw err;
      }
    }
  }

  notes(): string[] {
    return [...(this.skipped ? [framesNote(this.skipped)] : []), ...(this.failed ? [unreadableNote(this.failed)] : [])];
  }
}

/**
 * The element a ref names on this page (in whichever frame holds it); a
 * malformed, unknown or stale ref is refused, never replaced. The isolated
 * world marks the element with a random token for the moment it takes
 * Playwright to find it (Playwright's handles live in the page's own world):
 * the page cannot guess the token, though it could move the mark on its own
 * elements meanwhile, which misdirects nothing outside that page.
 */
// `ElementHandle` is Playwright's `ElementHandle<Node>`: this project has no DOM lib, so `Element` cannot be named.
export async function refElement(page: Page, ref: string): Promise<ElementHandle> {
  const n = refNumber(ref);
  const token = randomUUID();
  const { value: marked, pw, world } = await inHolder<'ok' | RefProblem>(page, n, { op: 'mark', token });
  if (marked !== 'ok') throw refError(n, marked);
  const selector = `[data-deskbatch-ref="${token}"]`;
  try {
    // Only the holder's document has the token; which Playwright frame that is does not matter. In a
    // child frame, every frame is asked at once, each for a bounded time, so a busy one cannot hold the call.
    const found =
      world === pw.main
        ? [await page.mainFrame().$(selector)]
        : await Promise.all(
            page.frames().map((frame) =>
              orAfter(
                frame.$(selector).catch(() => null),
                FRAME_ANSWER_MS,
                null,
              ),
            ),
          );
    const handle = found.find((h) => h !== null);
    if (!handle) throw refError(n, 'removed');
    return handle;
  } finally {
    await run(page, pw, world, { op: 'unmark', token }).catch(() => undefined);
  }
}

/**
 * Runs a request on the element a ref names (the page script's `ref` ops), in
 * the frame that holds it; a malformed, unknown or stale ref is refused, never
 * replaced.
 */
export async function onRef<T extends object>(page: Page, ref: string, request: Record<string, unknown>): Promise<T> {
  const n = refNumber(ref);
  const { value } = await inHolder<T | { error: RefProblem }>(page, n, request);
  if ('error' in value) throw refError(n, value.error);
  return value;
}

/**
 * Scrolls the ref's element into view if needed (and, in a frame, each iframe
 * on the way); the centre of its visible box, in top-level viewport CSS pixels.
 */
export async function refCenter(page: Page, ref: string): Promise<{ x: number; y: number }> {
  const n = refNumber(ref);
  const { value, pw, world } = await inHolder<{ x: number; y: number } | { error: RefProblem }>(page, n, {
    op: 'center',
  });
  if ('error' in value) throw refError(n, value.error);
  return liftPoint(pw, world, value, n);
}
