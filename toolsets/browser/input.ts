/**
 * Interaction members of the browser toolset (docs/TOOLSETS.md C3): clicks,
 * hover, drags, raw mouse buttons, scrolling, form filling, typing, keys and
 * waiting. Pointer and keyboard actions go through Playwright's `page.mouse`
 * and `page.keyboard`, so the page gets real input events (trusted, with
 * coordinates, buttons, click counts and modifier flags) rather than
 * synthetic DOM calls. A ref target is resolved to its centre after it is
 * scrolled into view, then clicked like a coordinate. form_input's DOM work
 * lives in the driver (src/browser/forms.ts).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Page } from 'playwright';
import { z } from 'zod';
import { parseKeyChords, parsePlaywrightModifiers, type Modifier } from '../../src/browser/keys.ts';
import { focusedIsPassword, setFormValue } from '../../src/browser/forms.ts';
import { refCenter } from '../../src/browser/frame-worlds.ts';
import type { Point } from '../../src/base/geometry.ts';
import { ToolInputError } from '../../src/base/errors.ts';
import { echo } from '../../src/base/text.ts';
import {
  browserMember,
  clickTarget,
  coordinateTarget,
  modifiers,
  refTarget,
  tabId,
  type BrowserCallContext,
  type ClickTarget,
} from './context.ts';

/**
 * The browser toolset's `scroll.scroll_amount` range (DBU, T:1559); the computer toolset's is
 * COMPUTER_SCROLL_AMOUNT_MAX (src/desktop-driver/driver.ts).
 */
export const BROWSER_SCROLL_AMOUNT_MAX = 10;
export const BROWSER_SCROLL_AMOUNT_DEFAULT = 3;
/** Pixels one wheel notch scrolls. */
export const WHEEL_NOTCH_PX = 100;
/** The browser toolset's `key.repeat` range (DBU, T:847); the computer toolset's is COMPUTER_KEY_REPEAT_MAX. */
export const BROWSER_KEY_REPEAT_MAX = 100;
/** `hold_key` and `wait` durations, seconds (DBU, T:703, T:2073). */
export const DURATION_MAX_SECONDS = 30;
/**
 * Texts up to this many characters are typed key by key (keydown, keypress,
 * input, keyup for each), as a person types, so key-driven widgets such as
 * autocompletes react. Longer ones are inserted a line at a time, as a paste
 * would be: key-by-key typing costs 4–8 ms a character here (measured), which
 * would make a 20,000-character text take minutes.
 */
const TYPE_KEYS_MAX = 200;
/** Steps of the pointer's path in a drag, so pages see intermediate moves (HTML drag and drop needs them). */
const DRAG_STEPS = 10;

// ---------------------------------------------------------------------------
// Shared pieces

const target = clickTarget.describe(
  'Where to act: a viewport coordinate, or an element by its ref from read_page/find.',
);
const point = (what: string) => coordinateTarget.describe(`${what}, in viewport pixels (the frame of a screenshot).`);

/** A click target → viewport CSS pixels: a coordinate is bounds-checked, a ref is scrolled into view and its centre taken. */
async function targetPoint(ctx: BrowserCallContext, page: Page, t: ClickTarget): Promise<Point> {
  return t.type === 'coordinate' ? ctx.viewportPoint(page, t) : refCenter(page, t.ref);
}

/** Holds modifier keys around an action; released even when it fails (a closed page cannot release, so that is ignored). */
async function withModifiers<T>(page: Page, held: readonly Modifier[], action: () => Promise<T>): Promise<T> {
  const down: Modifier[] = [];
  try {
    for (const m of held) {
      await page.keyboard.down(m);
      down.push(m);
    }
    return await action();
  } finally {
    for (const m of down.reverse()) await page.keyboard.up(m).catch(() => undefined);
  }
}

const duration = (what: string) =>
  z
    .number()
    .min(0, `must be 0–${DURATION_MAX_SECONDS} seconds`)
    .max(DURATION_MAX_SECONDS, `must be 0–${DURATION_MAX_SECONDS} seconds`)
    .describe(`Seconds to ${what}, 0–${DURATION_MAX_SECONDS}.`);

const keyText = z
  .string()
  .min(1, 'must name a key, e.g. "Enter" or "ctrl+a"')
  .max(500)
  .describe(
    'A key ("Enter"), a chord joined by "+" ("ctrl+a", "ctrl+shift+Tab"), case-insensitive. ' +
      'Names: Enter (Return), Tab, Escape, Backspace, Delete, ArrowUp/Up, PageDown/Page_Down, Home, End, space, F1–F12, letters, digits, punctuation; ' +
      'modifiers ctrl, shift, alt, cmd.',
  );

// ---------------------------------------------------------------------------
// Clicks and pointer

function clickMember<const N extends string>(
  name: N,
  button: 'left' | 'right' | 'middle',
  clickCount: number,
  ack: string,
) {
  return browserMember({
    name,
    summary: `${ack.replace(/\.$/, '')} at a coordinate or on an element (${button} button, ${clickCount}×).`,
    kind: 'ack',
    effect: 'write',
    input: z.object({ target, modifiers, tab_id: tabId }),
    ack: () => ack,
    async handle(input, ctx) {
      // Parse and resolve everything before acting, so bad input changes nothing.
      const held = parsePlaywrightModifiers(input.modifiers);
      const { page } = await ctx.tab(input.tab_id);
      const at = await targetPoint(ctx, page, input.target);
      await withModifiers(page, held, () => page.mouse.click(at.x, at.y, { button, clickCount }));
    },
  });
}

export const leftClick = clickMember('left_click', 'left', 1, 'Clicked.');
export const rightClick = clickMember('right_click', 'right', 1, 'Right-clicked.');
export const middleClick = clickMember('middle_click', 'middle', 1, 'Middle-clicked.');
export const doubleClick = clickMember('double_click', 'left', 2, 'Double-clicked.');
export const tripleClick = clickMember('triple_click', 'left', 3, 'Triple-clicked.');

export const hover = browserMember({
  name: 'hover',
  summary: 'Move the pointer onto a coordinate or element without clicking.',
  kind: 'ack',
  effect: 'write',
  input: z.object({ target, tab_id: tabId }),
  ack: () => 'Hovered.',
  async handle(input, ctx) {
    const { page } = await ctx.tab(input.tab_id);
    const at = await targetPoint(ctx, page, input.target);
    await page.mouse.move(at.x, at.y);
  },
});

export const leftClickDrag = browserMember({
  name: 'left_click_drag',
  summary: 'Press the left button at one point, drag to another, release.',
  kind: 'ack',
  effect: 'write',
  input: z.object({
    from: point('Where to press the left button'),
    target: point('Where to release it'),
    tab_id: tabId,
  }),
  ack: () => 'Dragged.',
  async handle(input, ctx) {
    const { page } = await ctx.tab(input.tab_id);
    const from = ctx.viewportPoint(page, input.from, 'from');
    const to = ctx.viewportPoint(page, input.target);
    await page.mouse.move(from.x, from.y);
    await page.mouse.down();
    try {
      await page.mouse.move(to.x, to.y, { steps: DRAG_STEPS });
    } finally {
      await page.mouse.up();
    }
  },
});

function buttonMember<const N extends string>(name: N, action: 'down' | 'up', ack: string) {
  return browserMember({
    name,
    summary: `Move to a point and ${action === 'down' ? 'press' : 'release'} the left button.`,
    kind: 'ack',
    effect: 'write',
    input: z.object({
      target: point(`Where to ${action === 'down' ? 'press' : 'release'} the left button`),
      tab_id: tabId,
    }),
    ack: () => ack,
    async handle(input, ctx) {
      const { page } = await ctx.tab(input.tab_id);
      const at = ctx.viewportPoint(page, input.target);
      await page.mouse.move(at.x, at.y);
      await page.mouse[action]();
    },
  });
}

export const leftMouseDown = buttonMember('left_mouse_down', 'down', 'Mouse button pressed.');
export const leftMouseUp = buttonMember('left_mouse_up', 'up', 'Mouse button released.');

export const mouseMove = browserMember({
  name: 'mouse_move',
  summary: 'Move the pointer to a point.',
  kind: 'ack',
  effect: 'write',
  input: z.object({ target: point('Where to move the pointer'), tab_id: tabId }),
  ack: () => 'Moved the mouse.',
  async handle(input, ctx) {
    const { page } = await ctx.tab(input.tab_id);
    const at = ctx.viewportPoint(page, input.target);
    await page.mouse.move(at.x, at.y);
  },
});

/** In-page: resolves after two animation frames, or 100 ms. A string, so no bundler helper leaks into the page. */
const SETTLE_FRAMES =
  'new Promise((done) => { requestAnimationFrame(() => requestAnimationFrame(done)); setTimeout(done, 100); })';

const WHEEL: Record<'up' | 'down' | 'left' | 'right', readonly [number, number]> = {
  up: [0, -1],
  down: [0, 1],
  left: [-1, 0],
  right: [1, 0],
};

export const scroll = browserMember({
  name: 'scroll',
  summary: 'Turn the mouse wheel at a point.',
  kind: 'ack',
  effect: 'write',
  input: z.object({
    scroll_direction: z
      .enum(['up', 'down', 'left', 'right'])
      .describe('Which way to scroll the content under the point.'),
    target: point('Where to scroll (the element under it scrolls)'),
    scroll_amount: z
      .number()
      .int('must be a whole number of wheel notches')
      .min(1, `must be 1–${BROWSER_SCROLL_AMOUNT_MAX}`)
      .max(BROWSER_SCROLL_AMOUNT_MAX, `must be 1–${BROWSER_SCROLL_AMOUNT_MAX}`)
      .nullish()
      .describe(`Wheel notches, 1–${BROWSER_SCROLL_AMOUNT_MAX}; default ${BROWSER_SCROLL_AMOUNT_DEFAULT}.`),
    tab_id: tabId,
  }),
  ack: (input) => `Scrolled ${input.scroll_direction}.`,
  async handle(input, ctx) {
    const { page } = await ctx.tab(input.tab_id);
    const at = ctx.viewportPoint(page, input.target);
    const px = (input.scroll_amount ?? BROWSER_SCROLL_AMOUNT_DEFAULT) * WHEEL_NOTCH_PX;
    const [dx, dy] = WHEEL[input.scroll_direction];
    await page.mouse.move(at.x, at.y);
    await page.mouse.wheel(dx * px, dy * px);
    // The wheel returns before the page has scrolled (measured: a read right after it can see the old offset),
    // so wait for the next frames; a call after this one (a screenshot) sees the scrolled page. The timer bounds
    // the wait in a tab that draws no frames (a background tab).
    await page.evaluate(SETTLE_FRAMES);
  },
});

export const scrollTo = browserMember({
  name: 'scroll_to',
  summary: 'Scroll an element into view.',
  kind: 'ack',
  effect: 'write',
  input: z.object({ target: refTarget.describe('The element to bring into view, by its ref.'), tab_id: tabId }),
  ack: (input) => `Scrolled to ${echo(input.target.ref)}.`,
  async handle(input, ctx) {
    const { page } = await ctx.tab(input.tab_id);
    // refCenter scrolls the element into view (and refuses an unknown or stale ref); the point itself is not needed.
    await refCenter(page, input.target.ref);
  },
});

// ---------------------------------------------------------------------------
// Forms

export const formInput = browserMember({
  name: 'form_input',
  summary: 'Set the value of an input, textarea, select, checkbox or radio button.',
  kind: 'ack',
  effect: 'write',
  input: z.object({
    target: refTarget.describe('The form field, by its ref from read_page or find.'),
    value: z
      .union([z.string(), z.number(), z.boolean()])
      .describe(
        'Text for inputs and textareas; an option value or visible text for selects; true or false for checkboxes and radio buttons.',
      ),
    tab_id: tabId,
  }),
  ack: (input) => `Set the value of ${echo(input.target.ref)}.`,
  async handle(input, ctx) {
    const { page } = await ctx.tab(input.tab_id);
    await setFormValue(page, input.target.ref, input.value, ctx.markSecret);
  },
});

// ---------------------------------------------------------------------------
// Keyboard and time

/** Milliseconds `type` is allowed per key press on top of the call timeout. */
const TYPE_MS_PER_KEY = 20;
export const type = browserMember({
  name: 'type',
  summary: 'Type literal text at the focused element.',
  kind: 'ack',
  effect: 'write',
  input: z.object({
    text: z.string().describe('The text to type, exactly, at the current focus; "\\n" presses Enter.'),
    tab_id: tabId,
  }),
  ack: () => 'Typed.',
  // Key presses: every character of a short text, or one Enter per line break of a long one.
  extraTimeMs: (input) =>
    (input.text.length <= TYPE_KEYS_MAX ? input.text.length : input.text.split('\n').length) * TYPE_MS_PER_KEY,
  async handle(input, ctx) {
    if (input.text.length > ctx.maxTypeTextLength) {
      throw new ToolInputError(
        `text is ${input.text.length} characters long; at most ${ctx.maxTypeTextLength} can be typed in one call.`,
      );
    }
    const { page } = await ctx.tab(input.tab_id);
    if (ctx.markSecret && (await focusedIsPassword(page))) ctx.markSecret();
    const text = input.text.replace(/\r\n?/g, '\n');
    if (text.length <= TYPE_KEYS_MAX) {
      // US-layout characters are pressed as keys; others (é, 日, emoji) arrive as text input, as from an IME.
      await page.keyboard.type(text);
      return;
    }
    const lines = text.split('\n');
    for (const [i, line] of lines.entries()) {
      ctx.signal.throwIfAborted();
      if (i > 0) await page.keyboard.press('Enter');
      if (line) await page.keyboard.insertText(line);
    }
  },
});

export const key = browserMember({
  name: 'key',
  summary: 'Press a key, chord or space-separated sequence, optionally repeated.',
  kind: 'ack',
  effect: 'write',
  input: z.object({
    text: keyText.describe(
      `${keyText.description ?? ''} Several separated by spaces are pressed one after another ("Backspace Backspace").`,
    ),
    repeat: z
      .number()
      .int('must be a whole number')
      .min(1, `must be 1–${BROWSER_KEY_REPEAT_MAX}`)
      .max(BROWSER_KEY_REPEAT_MAX, `must be 1–${BROWSER_KEY_REPEAT_MAX}`)
      .nullish()
      .describe(`How many times to press the whole sequence, 1–${BROWSER_KEY_REPEAT_MAX}; default 1.`),
    tab_id: tabId,
  }),
  ack: (input) => `Pressed ${echo(input.text)}.`,
  async handle(input, ctx) {
    const chords = parseKeyChords(input.text).map((c) => c.join('+'));
    const { page } = await ctx.tab(input.tab_id);
    for (let i = 0; i < (input.repeat ?? 1); i++) {
      for (const chord of chords) {
        ctx.signal.throwIfAborted();
        await page.keyboard.press(chord);
      }
    }
  },
});

export const holdKey = browserMember({
  name: 'hold_key',
  summary: 'Hold a key or chord down for a number of seconds.',
  kind: 'ack',
  effect: 'write',
  input: z.object({ text: keyText, duration: duration('hold it'), tab_id: tabId }),
  extraTimeMs: (input) => input.duration * 1000,
  ack: (input) => `Held ${echo(input.text)} for ${input.duration}s.`,
  async handle(input, ctx) {
    const chords = parseKeyChords(input.text);
    if (chords.length !== 1) throw new ToolInputError('hold_key takes one key or chord, not a sequence.');
    const { page } = await ctx.tab(input.tab_id);
    const down: string[] = [];
    try {
      for (const k of chords[0]!) {
        await page.keyboard.down(k);
        down.push(k);
      }
      await sleep(input.duration * 1000, undefined, { signal: ctx.signal });
    } finally {
      for (const k of down.reverse()) await page.keyboard.up(k).catch(() => undefined);
    }
  },
});

export const wait = browserMember({
  name: 'wait',
  summary: 'Wait a number of seconds.',
  kind: 'ack',
  effect: 'read',
  input: z.object({ duration: duration('wait'), tab_id: tabId }),
  extraTimeMs: (input) => input.duration * 1000,
  ack: (input) => `Waited ${input.duration}s.`,
  async handle(input, ctx) {
    // A named tab must exist; without one, waiting needs no tab (and must not open one).
    if (input.tab_id) await ctx.tab(input.tab_id);
    await sleep(input.duration * 1000, undefined, { signal: ctx.signal });
  },
});
