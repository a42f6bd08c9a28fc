/**
 * Type-level proof that every browser member's zod schema infers exactly the
 * SDK's `BetaBrowser*Input` type, and that every member name is one the SDK
 * knows. Checked by `tsc --noEmit` in `npm run check`.
 */
import type {
  BetaBrowserCloseTabInput,
  BetaBrowserDoubleClickInput,
  BetaBrowserFileUploadInput,
  BetaBrowserFindInput,
  BetaBrowserFormInputInput,
  BetaBrowserGetPageTextInput,
  BetaBrowserHoldKeyInput,
  BetaBrowserHoverInput,
  BetaBrowserJavascriptExecInput,
  BetaBrowserKeyInput,
  BetaBrowserLeftClickDragInput,
  BetaBrowserLeftClickInput,
  BetaBrowserLeftMouseDownInput,
  BetaBrowserLeftMouseUpInput,
  BetaBrowserListTabsInput,
  BetaBrowserMemberName,
  BetaBrowserMiddleClickInput,
  BetaBrowserMouseMoveInput,
  BetaBrowserNavigateInput,
  BetaBrowserNewTabInput,
  BetaBrowserReadConsoleInput,
  BetaBrowserReadNetworkInput,
  BetaBrowserReadPageInput,
  BetaBrowserRightClickInput,
  BetaBrowserScreenshotInput,
  BetaBrowserScrollInput,
  BetaBrowserScrollToInput,
  BetaBrowserSwitchTabInput,
  BetaBrowserTripleClickInput,
  BetaBrowserTypeInput,
  BetaBrowserWaitInput,
  BetaBrowserZoomInput,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import type { z } from 'zod';
import type { BROWSER_MEMBERS, BROWSER_MEMBER_NAMES } from '../../toolsets/browser/index.ts';
import type { Assert, Same, SameSet } from './same.ts';

/** The SDK's input type for each member name. */
interface SdkInputs {
  navigate: BetaBrowserNavigateInput;
  list_tabs: BetaBrowserListTabsInput;
  new_tab: BetaBrowserNewTabInput;
  switch_tab: BetaBrowserSwitchTabInput;
  close_tab: BetaBrowserCloseTabInput;
  read_page: BetaBrowserReadPageInput;
  get_page_text: BetaBrowserGetPageTextInput;
  read_console: BetaBrowserReadConsoleInput;
  read_network: BetaBrowserReadNetworkInput;
  find: BetaBrowserFindInput;
  form_input: BetaBrowserFormInputInput;
  file_upload: BetaBrowserFileUploadInput;
  scroll_to: BetaBrowserScrollToInput;
  screenshot: BetaBrowserScreenshotInput;
  zoom: BetaBrowserZoomInput;
  left_click: BetaBrowserLeftClickInput;
  right_click: BetaBrowserRightClickInput;
  middle_click: BetaBrowserMiddleClickInput;
  double_click: BetaBrowserDoubleClickInput;
  triple_click: BetaBrowserTripleClickInput;
  hover: BetaBrowserHoverInput;
  left_click_drag: BetaBrowserLeftClickDragInput;
  left_mouse_down: BetaBrowserLeftMouseDownInput;
  left_mouse_up: BetaBrowserLeftMouseUpInput;
  mouse_move: BetaBrowserMouseMoveInput;
  scroll: BetaBrowserScrollInput;
  type: BetaBrowserTypeInput;
  key: BetaBrowserKeyInput;
  hold_key: BetaBrowserHoldKeyInput;
  wait: BetaBrowserWaitInput;
  javascript_exec: BetaBrowserJavascriptExecInput;
}

export type AllMembersCovered = Assert<SameSet<keyof SdkInputs, BetaBrowserMemberName>>;
export type NamesListed = Assert<SameSet<(typeof BROWSER_MEMBER_NAMES)[number], BetaBrowserMemberName>>;

type Members = (typeof BROWSER_MEMBERS)[number];
type Implemented = Members['name'];
type InputOf<N extends string> = z.input<Extract<Members, { name: N }>['input']>;

/** Every implemented member is one the SDK knows. */
export type NamesKnown = Assert<[Implemented] extends [BetaBrowserMemberName] ? true : false>;

/** Per implemented member: true when its schema's input type is the SDK's. */
export type MemberChecks = { [N in Implemented]: Same<InputOf<N>, SdkInputs[N & keyof SdkInputs]> };
export const memberChecks: { [N in Implemented]: true } = null as unknown as MemberChecks;
