/**
 * The older computer tools, `computer_20250124` and `computer_20251124`: one
 * client tool named `computer` whose input names an `action`. Each action is
 * mapped here to one or more calls of the `computer_toolset_20260801` members,
 * so both kinds of agent drive the desktop through the same code.
 *
 * Sources: the computer use tool page (platform.claude.com, "computer use
 * tool"), and Anthropic's reference implementation (claude-quickstarts,
 * computer-use-demo/computer_use_demo/tools/computer.py), read, not copied.
 * Units match the toolset: `duration` is seconds for `wait` and `hold_key` in
 * both; coordinates are screenshot pixels in both.
 *
 * | action            | legacy input                                      | toolset call(s)                      |
 * |-------------------|---------------------------------------------------|--------------------------------------|
 * | key               | text                                              | key {text}                           |
 * | hold_key          | text, duration (s)                                | hold_key {text, duration}            |
 * | type              | text                                              | type {text}                          |
 * | cursor_position   | —                                                 | cursor_position (text `X=x,Y=y`)     |
 * | mouse_move        | coordinate                                        | mouse_move {coordinate}              |
 * | left_mouse_down   | coordinate?                                       | [mouse_move] + left_mouse_down       |
 * | left_mouse_up     | coordinate?                                       | [mouse_move] + left_mouse_up         |
 * | left_click …      | coordinate?, text? (modifiers; `key` also read)   | same member {coordinate, text}       |
 * | left_click_drag   | start_coordinate, coordinate, text?               | left_click_drag {…}                  |
 * | scroll            | scroll_direction, scroll_amount, coordinate?, text? | scroll {…}                         |
 * | wait              | duration (s)                                      | wait {duration}                      |
 * | screenshot        | —                                                 | screenshot (one image)               |
 * | zoom (20251124)   | region [x1, y1, x2, y2]                           | zoom {region} (one image)            |
 *
 * Every action has the name of the toolset member that does it. Ranges are
 * the toolset members' own (their schemas check the converted input), so
 * both kinds of call are held to the same limits.
 */
import { z } from 'zod';
import { coordinate, modifierText } from '../computer/context.ts';
import { zoomRegion } from '../zoom.ts';

/** Every action of `computer_20251124`, which has those of `computer_20250124` plus `zoom`. */
export const LEGACY_ACTIONS = [
  'key',
  'hold_key',
  'type',
  'cursor_position',
  'mouse_move',
  'left_mouse_down',
  'left_mouse_up',
  'left_click',
  'left_click_drag',
  'right_click',
  'middle_click',
  'double_click',
  'triple_click',
  'scroll',
  'wait',
  'screenshot',
  'zoom',
] as const;
export type LegacyAction = (typeof LEGACY_ACTIONS)[number];

/** Actions that change nothing: retried like the toolset's reading members. */
export const LEGACY_READ_ACTIONS: ReadonlySet<LegacyAction> = new Set([
  'cursor_position',
  'wait',
  'screenshot',
  'zoom',
]);

const action = <A extends LegacyAction, S extends z.ZodRawShape>(name: A, shape: S) =>
  z.object({ action: z.literal(name), ...shape });

/**
 * The input of each action. Values are checked only for shape here; ranges
 * are checked by the toolset member the action maps to. Unknown fields are
 * ignored, as for the toolset's members.
 */
const where = coordinate('Where to act; the pointer position when omitted').nullish();
const clickShape = {
  coordinate: where,
  text: modifierText,
  /** The reference implementation reads click modifiers from `key`; `text` wins when both are given. */
  key: modifierText,
};
export const LEGACY_ACTION_SCHEMAS = {
  key: action('key', { text: z.string() }),
  hold_key: action('hold_key', { text: z.string(), duration: z.number() }),
  type: action('type', { text: z.string() }),
  cursor_position: action('cursor_position', {}),
  mouse_move: action('mouse_move', { coordinate: coordinate('Where to move the pointer') }),
  left_mouse_down: action('left_mouse_down', { coordinate: where }),
  left_mouse_up: action('left_mouse_up', { coordinate: where }),
  left_click: action('left_click', clickShape),
  right_click: action('right_click', clickShape),
  middle_click: action('middle_click', clickShape),
  double_click: action('double_click', clickShape),
  triple_click: action('triple_click', clickShape),
  left_click_drag: action('left_click_drag', {
    start_coordinate: coordinate('Where to press the left button'),
    coordinate: coordinate('Where to release it'),
    text: modifierText,
  }),
  scroll: action('scroll', {
    scroll_direction: z.enum(['up', 'down', 'left', 'right']),
    scroll_amount: z.number(),
    coordinate: where,
    text: modifierText,
  }),
  wait: action('wait', { duration: z.number() }),
  screenshot: action('screenshot', {}),
  zoom: action('zoom', { region: zoomRegion }),
} satisfies { [A in LegacyAction]: z.ZodType<{ action: A }> };

/** A legacy `computer` input, parsed. */
const S = LEGACY_ACTION_SCHEMAS;
export const LegacyInputSchema = z.discriminatedUnion('action', [
  S.key,
  S.hold_key,
  S.type,
  S.cursor_position,
  S.mouse_move,
  S.left_mouse_down,
  S.left_mouse_up,
  S.left_click,
  S.left_click_drag,
  S.right_click,
  S.middle_click,
  S.double_click,
  S.triple_click,
  S.scroll,
  S.wait,
  S.screenshot,
  S.zoom,
]);
export type LegacyInput = z.output<typeof LegacyInputSchema>;

/** One toolset member call an action maps to. */
export interface MemberCall {
  member: string;
  input: Record<string, unknown>;
}

/** Only the fields that are set: a `null` the model sent means "not given", as for the toolset. */
function defined(fields: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined && v !== null));
}

/** The toolset member calls that perform `input`, in order. */
export function toMemberCalls(input: LegacyInput): MemberCall[] {
  switch (input.action) {
    case 'key':
    case 'type':
      return [{ member: input.action, input: { text: input.text } }];
    case 'hold_key':
      return [{ member: 'hold_key', input: { text: input.text, duration: input.duration } }];
    case 'cursor_position':
    case 'screenshot':
      return [{ member: input.action, input: {} }];
    case 'mouse_move':
      return [{ member: 'mouse_move', input: { coordinate: input.coordinate } }];
    case 'left_mouse_down':
    case 'left_mouse_up': {
      // The toolset presses and releases at the pointer; a coordinate moves there first.
      const move = input.coordinate ? [{ member: 'mouse_move', input: { coordinate: input.coordinate } }] : [];
      return [...move, { member: input.action, input: {} }];
    }
    case 'left_click':
    case 'right_click':
    case 'middle_click':
    case 'double_click':
    case 'triple_click':
      return [
        { member: input.action, input: defined({ coordinate: input.coordinate, text: input.text ?? input.key }) },
      ];
    case 'left_click_drag':
      return [
        {
          member: 'left_click_drag',
          input: defined({ start_coordinate: input.start_coordinate, coordinate: input.coordinate, text: input.text }),
        },
      ];
    case 'scroll':
      return [
        {
          member: 'scroll',
          input: defined({
            scroll_direction: input.scroll_direction,
            scroll_amount: input.scroll_amount,
            coordinate: input.coordinate,
            text: input.text,
          }),
        },
      ];
    case 'wait':
      return [{ member: 'wait', input: { duration: input.duration } }];
    case 'zoom':
      return [{ member: 'zoom', input: { region: input.region } }];
  }
}
