/** Click members: one definition each, sharing the input shape the API gives them all. */
import { z } from 'zod';
import type { MouseButton } from '../../src/desktop-driver/driver.ts';
import { computerMember, coordinate, modifierText } from './context.ts';

const clickInput = z.object({
  coordinate: coordinate('Where to click; the pointer position when omitted').nullish(),
  text: modifierText,
});

function clickMember<const N extends string>(name: N, button: MouseButton, count: number, ack: string) {
  return computerMember({
    name,
    summary: `${ack.replace(/\.$/, '')} (${button} button, ${count}×).`,
    kind: 'ack',
    effect: 'write',
    input: clickInput,
    ack: () => ack,
    async handle(input, ctx) {
      // Parse modifiers before moving, so bad input changes nothing.
      const modifiers = ctx.modifiers(input.text);
      const at = input.coordinate ? await ctx.toDisplayPoint(input.coordinate, 'coordinate') : undefined;
      await ctx.driver.click(button, count, modifiers, ctx.signal, at);
    },
  });
}

export const leftClick = clickMember('left_click', 'left', 1, 'Clicked.');
export const rightClick = clickMember('right_click', 'right', 1, 'Right-clicked.');
export const middleClick = clickMember('middle_click', 'middle', 1, 'Middle-clicked.');
export const doubleClick = clickMember('double_click', 'left', 2, 'Double-clicked.');
export const tripleClick = clickMember('triple_click', 'left', 3, 'Triple-clicked.');
