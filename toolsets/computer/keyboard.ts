/** Keyboard members: `key`, `hold_key`, `type` (docs/TOOLSETS.md B2, B4). */
import { z } from 'zod';
import { parseChord } from '../../src/desktop-driver/keys.ts';
import { COMPUTER_KEY_REPEAT_MAX, HOLD_MAX_MS, type DriverKey } from '../../src/desktop-driver/driver.ts';
import { ToolInputError } from '../../src/base/errors.ts';
import { echo } from '../../src/base/text.ts';
import { computerMember } from './context.ts';

/** `hold_key.duration` upper bound in seconds (DCU: "up to 300"). */
export const HOLD_MAX_SECONDS = HOLD_MAX_MS / 1000;

const keyText = z
  .string()
  .min(1, 'must name a key, e.g. "Return" or "ctrl+s"')
  .max(500)
  .describe(
    'A key or chord, case-insensitive, such as "Return", "ctrl+s", "alt+Tab", "ctrl+shift+Escape"; ' +
      'several separated by spaces are pressed one after another.',
  );

/**
 * Parses a key string into chords. Space-separated sequences ("ctrl+a BackSpace")
 * are accepted as the browser toolset documents them and as xdotool does;
 * a lone " " is the space key.
 */
export function parseKeySequence(text: string): DriverKey[][] {
  if (text.trim() === '') return [parseChord('space')];
  return text.trim().split(/\s+/).map(parseChord);
}

export const key = computerMember({
  name: 'key',
  summary: 'Press a key or chord, optionally repeated.',
  kind: 'ack',
  effect: 'write',
  input: z.object({
    text: keyText,
    repeat: z
      .number()
      .int('must be a whole number')
      .min(1)
      .max(COMPUTER_KEY_REPEAT_MAX)
      .nullish()
      .describe(`How many times to press it, 1–${COMPUTER_KEY_REPEAT_MAX}; default 1.`),
  }),
  ack: (input) => `Pressed ${echo(input.text)}.`,
  async handle(input, ctx) {
    const sequence = parseKeySequence(input.text);
    for (let i = 0; i < (input.repeat ?? 1); i++) {
      for (const chord of sequence) await ctx.driver.pressKeys(chord, 1, ctx.signal);
    }
  },
});

export const holdKey = computerMember({
  name: 'hold_key',
  summary: 'Hold a key or chord down for a number of seconds.',
  kind: 'ack',
  effect: 'write',
  input: z.object({
    text: keyText,
    duration: z.number().min(0).max(HOLD_MAX_SECONDS).describe(`Seconds to hold, 0–${HOLD_MAX_SECONDS}.`),
  }),
  extraTimeMs: (input) => input.duration * 1000,
  ack: (input) => `Held ${echo(input.text)} for ${input.duration}s.`,
  async handle(input, ctx) {
    const sequence = parseKeySequence(input.text);
    if (sequence.length !== 1) throw new ToolInputError('hold_key takes one key or chord, not a sequence.');
    await ctx.driver.holdKeys(sequence[0]!, input.duration * 1000, ctx.signal);
  },
});

export const type = computerMember({
  name: 'type',
  summary: 'Type literal text at the current focus.',
  kind: 'ack',
  effect: 'write',
  input: z.object({
    text: z.string().describe('The text to type, exactly; newlines press Return.'),
  }),
  ack: () => 'Typed.',
  // Long texts type at keyboard speed; allow about 20 ms per character beyond the base timeout.
  extraTimeMs: (input) => input.text.length * 20,
  async handle(input, ctx) {
    if (input.text.length > ctx.maxTypeTextLength) {
      throw new ToolInputError(
        `text is ${input.text.length} characters long; at most ${ctx.maxTypeTextLength} can be typed in one call.`,
      );
    }
    await ctx.driver.typeText(input.text, ctx.signal);
  },
});
