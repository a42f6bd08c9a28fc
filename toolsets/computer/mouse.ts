/**
 * Pointer members other than clicks: `mouse_move`, `left_mouse_down`,
 * `left_mouse_up`, `cursor_position`, `left_click_drag`, `scroll`.
 */
import { z } from 'zod';
import { COMPUTER_SCROLL_AMOUNT_MAX } from '../../src/desktop-driver/driver.ts';
import { toScreenshot } from '../../src/base/geometry.ts';
import { computerMember, coordinate, modifierText } from './context.ts';

const empty = z.object({});

export const mouseMove = computerMember({
  name: 'mouse_move',
  summary: 'Move the pointer without clicking.',
  kind: 'ack',
  effect: 'write',
  input: z.object({ coordinate: coordinate('Where to move the pointer') }),
  ack: () => 'Moved the mouse.',
  async handle(input, ctx) {
    await ctx.driver.moveMouse(await ctx.toDisplayPoint(input.coordinate, 'coordinate'), ctx.signal);
  },
});

export const leftMouseDown = computerMember({
  name: 'left_mouse_down',
  summary: 'Press the left button at the pointer.',
  kind: 'ack',
  effect: 'write',
  input: empty,
  ack: () => 'Left mouse button pressed.',
  handle: (_input, ctx) => ctx.driver.mouseDown('left', ctx.signal),
});

export const leftMouseUp = computerMember({
  name: 'left_mouse_up',
  summary: 'Release the left button at the pointer.',
  kind: 'ack',
  effect: 'write',
  input: empty,
  ack: () => 'Left mouse button released.',
  handle: (_input, ctx) => ctx.driver.mouseUp('left', ctx.signal),
});

export const cursorPosition = computerMember({
  name: 'cursor_position',
  summary: 'Report the pointer position in screenshot pixels.',
  kind: 'text',
  effect: 'read',
  input: empty,
  async handle(_input, ctx) {
    const [at, g] = await Promise.all([ctx.driver.cursorPosition(ctx.signal), ctx.geometry()]);
    const p = toScreenshot(at, g);
    return `X=${p.x},Y=${p.y}`; // the SDK's rendering of BetaComputerMemberResult for cursor_position
  },
});

export const leftClickDrag = computerMember({
  name: 'left_click_drag',
  summary: 'Press at one point, drag to another, release.',
  kind: 'ack',
  effect: 'write',
  input: z.object({
    start_coordinate: coordinate('Where to press the left button'),
    coordinate: coordinate('Where to release it'),
    text: modifierText,
  }),
  ack: () => 'Dragged.',
  async handle(input, ctx) {
    const modifiers = ctx.modifiers(input.text);
    const from = await ctx.toDisplayPoint(input.start_coordinate, 'start_coordinate');
    const to = await ctx.toDisplayPoint(input.coordinate, 'coordinate');
    await ctx.driver.drag(from, to, modifiers, ctx.signal);
  },
});

export const scroll = computerMember({
  name: 'scroll',
  summary: 'Turn the mouse wheel, optionally at a point and with modifiers.',
  kind: 'ack',
  effect: 'write',
  input: z.object({
    scroll_direction: z.enum(['up', 'down', 'left', 'right']).describe('Which way the content moves into view.'),
    scroll_amount: z
      .number()
      .int('must be a whole number of wheel clicks')
      .min(1)
      .max(COMPUTER_SCROLL_AMOUNT_MAX)
      .describe(`Wheel clicks, 1–${COMPUTER_SCROLL_AMOUNT_MAX}.`),
    coordinate: coordinate('Where to scroll; the pointer position when omitted').nullish(),
    text: modifierText,
  }),
  ack: (input) => `Scrolled ${input.scroll_direction}.`,
  async handle(input, ctx) {
    const modifiers = ctx.modifiers(input.text);
    if (input.coordinate)
      await ctx.driver.moveMouse(await ctx.toDisplayPoint(input.coordinate, 'coordinate'), ctx.signal);
    await ctx.driver.scroll(input.scroll_direction, input.scroll_amount, modifiers, ctx.signal);
  },
});
