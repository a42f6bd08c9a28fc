/**
 * Type-level proof that every computer member's zod schema infers exactly the
 * SDK's input type (`BetaComputer*Input` in @anthropic-ai/sdk), so the
 * contract cannot drift silently. Checked by `tsc --noEmit` in `npm run check`;
 * a mismatch is a compile error naming the member.
 */
import type {
  BetaComputerCursorPositionInput,
  BetaComputerDoubleClickInput,
  BetaComputerHoldKeyInput,
  BetaComputerKeyInput,
  BetaComputerLeftClickDragInput,
  BetaComputerLeftClickInput,
  BetaComputerLeftMouseDownInput,
  BetaComputerLeftMouseUpInput,
  BetaComputerMemberName,
  BetaComputerMiddleClickInput,
  BetaComputerMouseMoveInput,
  BetaComputerRightClickInput,
  BetaComputerScreenshotInput,
  BetaComputerScrollInput,
  BetaComputerTripleClickInput,
  BetaComputerTypeInput,
  BetaComputerWaitInput,
  BetaComputerZoomInput,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import type { z } from 'zod';
import type { COMPUTER_MEMBERS } from '../../toolsets/computer/index.ts';

import type { Assert, Same, SameSet } from './same.ts';

type Members = (typeof COMPUTER_MEMBERS)[number];
type InputOf<N extends string> = z.input<Extract<Members, { name: N }>['input']>;

/** The SDK's input type for each member name. */
interface SdkInputs {
  key: BetaComputerKeyInput;
  hold_key: BetaComputerHoldKeyInput;
  type: BetaComputerTypeInput;
  cursor_position: BetaComputerCursorPositionInput;
  mouse_move: BetaComputerMouseMoveInput;
  left_mouse_down: BetaComputerLeftMouseDownInput;
  left_mouse_up: BetaComputerLeftMouseUpInput;
  left_click: BetaComputerLeftClickInput;
  left_click_drag: BetaComputerLeftClickDragInput;
  right_click: BetaComputerRightClickInput;
  middle_click: BetaComputerMiddleClickInput;
  double_click: BetaComputerDoubleClickInput;
  triple_click: BetaComputerTripleClickInput;
  scroll: BetaComputerScrollInput;
  wait: BetaComputerWaitInput;
  screenshot: BetaComputerScreenshotInput;
  zoom: BetaComputerZoomInput;
}

export type AllMembersCovered = Assert<SameSet<keyof SdkInputs, BetaComputerMemberName>>;
export type MemberNamesMatch = Assert<SameSet<Members['name'], BetaComputerMemberName>>;

/** Per member: true when its schema's input type is the SDK's. A false here names the member that drifted. */
export type MemberChecks = { [N in BetaComputerMemberName]: Same<InputOf<N>, SdkInputs[N]> };
export const memberChecks: { [N in BetaComputerMemberName]: true } = null as unknown as MemberChecks;
