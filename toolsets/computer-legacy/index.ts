/**
 * The older computer tools (`computer_20250124`, `computer_20251124`) as a
 * Toolset-like object, so the executor runs their calls like any member call:
 * same lane, time limits, retries of reading actions, events, halting, loop
 * detection and result boundary.
 *
 * - A call is a `tool_use` named `computer` with no `toolset_name`; its input
 *   names an `action` (actions.ts maps each to computer toolset members).
 * - Results answer the `tool_use_id` with no `toolset_name` (the call had
 *   none): `screenshot` and `zoom` give one image; `cursor_position` gives
 *   `X=<x>,Y=<y>`; every other action gives the toolset's short
 *   acknowledgment (`Clicked.`). The reference implementation adds a
 *   screenshot after each action; this daemon never sends an image the model
 *   did not ask for, so a model that wants to see the result asks for
 *   `screenshot` (as it does with the toolset).
 * - Calls of the tool run in order; after one fails, the later ones in the
 *   batch get FALLBACK_NOT_EXECUTED_TEXT (the SDK's own for a family with none). The tool is its own family: a failure
 *   of it halts no toolset, and a toolset failure does not halt it.
 */
import { FALLBACK_CANCELLED_TEXT, FALLBACK_NOT_EXECUTED_TEXT } from '../../src/toolset-api/text.ts';
import { z } from 'zod';
import type { Size } from '../../src/base/geometry.ts';
import { ToolInputError, ToolRefusedError } from '../../src/base/errors.ts';
import { describeZodError } from '../../src/base/zod-text.ts';
import type { LegacyComputerTools } from '../../src/base/protocol.ts';
import { COMPUTER_TOOLSET_TYPE } from '../computer/index.ts';
import { foldName } from '../../src/base/text.ts';
import type { MemberOutput, PlainTool, RunnableMember, Toolset } from '../../src/toolset-api/types.ts';
import {
  LEGACY_ACTION_SCHEMAS,
  LEGACY_ACTIONS,
  LEGACY_READ_ACTIONS,
  toMemberCalls,
  type LegacyAction,
  type LegacyInput,
} from './actions.ts';

export { LEGACY_ACTIONS, LegacyInputSchema, toMemberCalls, type LegacyAction, type LegacyInput } from './actions.ts';

/** The tool's name in `tools[]` and in its `tool_use` blocks. */
export const LEGACY_COMPUTER_TOOL_NAME = 'computer';
/** The dated types this adapter serves. */
export const LEGACY_COMPUTER_TYPES = ['computer_20250124', 'computer_20251124'] as const;
/**
 * The tool's key in `batch_result.halted`. No `toolset_name` can equal it
 * (`:` is outside the API's pattern), so it never shares halting with a toolset.
 */
export const LEGACY_COMPUTER_FAMILY = 'legacy:computer';

interface PlannedCall {
  member: RunnableMember;
  input: unknown;
}

/**
 * Whether a `computer` call without `toolset_name` is meant for this tool: its
 * input names one `action` and has no `actions` list. Anything else is the
 * computer toolset's call with malformed actions, which the executor answers
 * with the SDK's text and which halts that toolset.
 */
function isOlderToolInput(input: unknown): boolean {
  return (
    typeof input === 'object' &&
    input !== null &&
    !Array.isArray(input) &&
    typeof (input as { action?: unknown }).action === 'string' &&
    !('actions' in input)
  );
}

/** Whether the older tool can be served on top of this toolset: the real computer toolset, with members. */
function canServe(computer: Toolset | undefined): computer is Toolset {
  return computer?.type === COMPUTER_TOOLSET_TYPE && computer.members.size > 0;
}

/** The older tool on top of the computer toolset `computer`, or undefined when there is none. */
export function createLegacyComputerTool(computer: Toolset | undefined): PlainTool | undefined {
  if (!canServe(computer)) return undefined;
  const servedActions = LEGACY_ACTIONS.filter((a) => computer.members.has(a));
  const actionList = servedActions.join(', ');
  const badInput = (problem: string) => new ToolInputError(`invalid input for the computer tool: ${problem}`);
  const badAction = (action: LegacyAction, problem: string) =>
    new ToolInputError(`invalid input for the computer tool's '${action}' action: ${problem}`);
  // The SDK's texts for a disabled member and for one the driver lacks, naming the action.
  const refused = (action: LegacyAction, member: string) =>
    new ToolRefusedError(
      computer.disabledMemberNames.has(member)
        ? `The '${action}' action is not permitted by this application's permissions and cannot be used in this session.`
        : `The computer tool's '${action}' action is not available in this environment.`,
    );

  // Only inputs that isOlderToolInput accepted get here: an object whose `action` is a string.
  const actionOf = (raw: unknown): LegacyAction => {
    const action = String((raw as { action: string }).action);
    if (!(LEGACY_ACTIONS as readonly string[]).includes(action)) {
      throw badInput(`action: '${foldName(action)}' is not an action of this tool; the actions are: ${actionList}.`);
    }
    return action as LegacyAction;
  };

  /** The input checked against the action's schema, then each member call against that member's schema. */
  const plan = (raw: unknown): PlannedCall[] => {
    const action = actionOf(raw);
    const parsed = LEGACY_ACTION_SCHEMAS[action].safeParse(raw);
    if (!parsed.success) throw badAction(action, describeZodError(parsed.error, raw));
    return toMemberCalls(parsed.data as LegacyInput).map((call) => {
      const member = computer.members.get(call.member);
      if (!member) throw refused(action, call.member);
      const checked = member.input.safeParse(call.input);
      if (!checked.success) throw badAction(action, describeZodError(checked.error, call.input));
      return { member, input: checked.data };
    });
  };

  const actionMember = (action: LegacyAction, main: RunnableMember): RunnableMember => ({
    name: action,
    summary: `The older computer tool's ${action} action.`,
    // Parsing the input plans the member calls, once. plan() throws ToolInputError or ToolRefusedError
    // with texts that name the action; the executor answers a throw from its parse like a bad input.
    input: z.unknown().transform(plan),
    effect: LEGACY_READ_ACTIONS.has(action) ? 'read' : 'write',
    kind: main.kind,
    extraTimeMs(planned) {
      return (planned as PlannedCall[]).reduce((ms, c) => ms + c.member.extraTimeMs(c.input), 0);
    },
    async run(planned, call) {
      let outputs: MemberOutput[] = [];
      for (const c of planned as PlannedCall[]) {
        call.signal.throwIfAborted();
        outputs = await c.member.run(c.input, call);
      }
      return outputs;
    },
  });

  const members = new Map<string, RunnableMember>(
    servedActions.map((a) => [a, actionMember(a, computer.members.get(a)!)]),
  );
  return {
    type: LEGACY_COMPUTER_TYPES[LEGACY_COMPUTER_TYPES.length - 1]!,
    name: LEGACY_COMPUTER_FAMILY,
    notExecutedText: FALLBACK_NOT_EXECUTED_TEXT,
    cancelledText: FALLBACK_CANCELLED_TEXT,
    usesDesktop: true,
    allowedBlocks: ['text', 'image'],
    allMemberNames: LEGACY_ACTIONS,
    disabledMemberNames: new Set(LEGACY_ACTIONS.filter((a) => !members.has(a))),
    members,
    toolName: LEGACY_COMPUTER_TOOL_NAME,
    handles: (tu) => !tu.toolset_name && tu.name === LEGACY_COMPUTER_TOOL_NAME && isOlderToolInput(tu.input),
    describe: (screenshot) => legacyComputerTools(computer, screenshot),
    member(input) {
      const action = actionOf(input);
      const member = members.get(action);
      if (!member) throw refused(action, action);
      return member;
    },
  };
}

/**
 * The `tools[]` entries an agent on an older computer tool sends, for
 * `welcome.legacy_tools`: the display size the model sees is the screenshot
 * size, since coordinates are screenshot pixels.
 */
function legacyComputerTools(computer: Toolset, screenshot: Size): LegacyComputerTools {
  const common = {
    name: LEGACY_COMPUTER_TOOL_NAME,
    display_width_px: screenshot.width,
    display_height_px: screenshot.height,
  } as const;
  return {
    computer_20250124: { type: 'computer_20250124', ...common },
    computer_20251124: {
      type: 'computer_20251124',
      ...common,
      ...(computer.members.has('zoom') ? { enable_zoom: true } : {}),
    },
  };
}
