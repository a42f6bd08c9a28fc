/**
 * What the model reads for a call the executor cannot give to any member: the
 * texts of the SDK's tool runner (`BetaToolRunner`), so that an agent moving
 * from that runner to deskbatch reads the same thing (docs/PROTOCOL.md,
 * "Differences from the SDK runner"). Names are folded with `foldName`.
 */
import { foldName } from '../base/text.ts';

/** A call with no `toolset_name` whose name no tool here has. */
export function toolNotFoundText(name: string): string {
  return `Error: Tool '${foldName(name)}' not found`;
}

/** A call whose `toolset_name` is not a toolset this daemon serves. It does not halt that family: nothing of it ran. */
export function toolsetNotFoundText(toolsetName: string, name: string): string {
  return `Error: Toolset '${foldName(toolsetName)}' member '${foldName(name)}' not found`;
}

/**
 * A call named after a toolset (`computer`, `browser`) with no `toolset_name`
 * and not a call of a tool by that name: the toolset's call with malformed
 * actions. It halts that toolset for the rest of the turn, as a failed member does.
 */
export function malformedToolsetCallText(name: string, input: unknown): string {
  return `Error: the '${foldName(name)}' toolset could not run this call${whatIsWrong(input)}; nothing in the batch was executed`;
}

/** What is wrong with the call's `actions`: it names actions, but quotes no other part of the input. */
function whatIsWrong(input: unknown): string {
  const fields: object = typeof input === 'object' && input !== null ? input : {};
  if (!('actions' in fields)) {
    const action = 'action' in fields ? fields.action : undefined;
    return typeof action === 'string'
      ? `: the call has no 'actions' list (action: '${foldName(action)}')`
      : ": the call has no 'actions' list";
  }
  const { actions } = fields;
  if (typeof actions === 'string') return ": 'actions' is text, not a list of actions";
  if (!Array.isArray(actions)) return ": 'actions' is not a list of actions";
  if (actions.length === 0) return ": the 'actions' list is empty";
  const names: string[] = [];
  for (const [i, entry] of actions.entries()) {
    const action: unknown = typeof entry === 'object' && entry !== null && 'action' in entry ? entry.action : undefined;
    if (typeof action !== 'string') return `: action ${i} must be an object with a string 'action' field`;
    names.push(`'${foldName(action)}'`);
  }
  const more = names.length > 10 ? `, and ${names.length - 10} more` : '';
  return `: its actions could not be run as sent (actions: ${names.slice(0, 10).join(', ')}${more})`;
}
