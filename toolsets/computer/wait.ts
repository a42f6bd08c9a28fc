/** `wait`: lets the screen settle; ends early on cancel. */
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { computerMember } from './context.ts';

/** `wait.duration` upper bound in seconds (DCU: "up to 300"). */
export const WAIT_MAX_SECONDS = 300;

export const wait = computerMember({
  name: 'wait',
  summary: 'Wait a number of seconds.',
  kind: 'ack',
  effect: 'read',
  input: z.object({
    duration: z.number().min(0).max(WAIT_MAX_SECONDS).describe(`Seconds to wait, 0–${WAIT_MAX_SECONDS}.`),
  }),
  extraTimeMs: (input) => input.duration * 1000,
  ack: (input) => `Waited ${input.duration}s.`,
  async handle(input, ctx) {
    await sleep(input.duration * 1000, undefined, { signal: ctx.signal });
  },
});
