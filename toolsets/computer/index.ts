/**
 * `computer_toolset_20260801`: mouse, keyboard and screenshots on the X display
 * (docs/TOOLSETS.md section B). The texts here are the ones the model reads for
 * calls that did not run; the executor copies them, never rewrites them.
 */
import type { z } from 'zod';
import {
  defineToolset,
  memberNames,
  type CallContext,
  type Member,
  type Toolset,
} from '../../src/toolset-api/types.ts';
import { leftClick, rightClick, middleClick, doubleClick, tripleClick } from './clicks.ts';
import { createComputerContext, type ComputerContext, type ComputerDeps } from './context.ts';
import { holdKey, key, type } from './keyboard.ts';
import { cursorPosition, leftClickDrag, leftMouseDown, leftMouseUp, mouseMove, scroll } from './mouse.ts';
import { screenshot, zoom } from './screen.ts';
import { wait } from './wait.ts';

export const COMPUTER_TOOLSET_TYPE = 'computer_toolset_20260801';
export const COMPUTER_TOOLSET_NAME = 'computer';

/** Exact halt text (docs/TOOLSETS.md A5; the SDK's `NOT_EXECUTED`). */
export const COMPUTER_NOT_EXECUTED_TEXT = 'Not executed: an earlier computer action in this turn failed.';
/** Calls stopped by cancel or disconnect: not a failure, so a different text (docs/PROTOCOL.md rule 7). */
export const COMPUTER_CANCELLED_TEXT =
  'Not completed: the computer actions of this turn were cancelled before this one finished.';

/** Every member, in the SDK's order (`BETA_COMPUTER_MEMBER_NAME_VALUES`). */
export const COMPUTER_MEMBERS = [
  key,
  holdKey,
  type,
  cursorPosition,
  mouseMove,
  leftMouseDown,
  leftMouseUp,
  leftClick,
  leftClickDrag,
  rightClick,
  middleClick,
  doubleClick,
  tripleClick,
  scroll,
  wait,
  screenshot,
  zoom,
] as const;

/** Every member's name, in the SDK's order. */
export const COMPUTER_MEMBER_NAMES = memberNames(COMPUTER_MEMBERS);

export interface ComputerToolsetOptions extends ComputerDeps {
  /** Members the operator switched off; they are not offered and are answered with an error. */
  disabled?: readonly string[];
}

export function createComputerToolset(options: ComputerToolsetOptions): Toolset {
  const { disabled = [], ...deps } = options;
  return defineToolset(
    {
      type: COMPUTER_TOOLSET_TYPE,
      name: COMPUTER_TOOLSET_NAME,
      notExecutedText: COMPUTER_NOT_EXECUTED_TEXT,
      cancelledText: COMPUTER_CANCELLED_TEXT,
      usesDesktop: true,
      allowedBlocks: ['text', 'image'],
      members: COMPUTER_MEMBERS as readonly Member<z.ZodType, ComputerContext>[],
      context: (call: CallContext) => createComputerContext(deps, call),
    },
    { disabled },
  );
}
