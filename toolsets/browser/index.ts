/**
 * `browser_toolset_20260801`: a Chromium browser with tabs (TOOLSET-CONTRACT
 * section C). Every call runs between `beginCall` and `endCall` of the
 * session's browser, which is how `browser_state` learns what the call
 * changed: tab members answer with exactly one `browser_state`; other members
 * add one when the tabs changed or there are state changes to report.
 */
import type { z } from 'zod';
import type { Member, MemberOutput, RunnableMember, Toolset, CallContext } from '../types.ts';
import { bindMember } from '../types.ts';
import { createBrowserContext, type BrowserCallContext, type BrowserDeps } from './context.ts';
import { INPUT_MEMBERS } from './input.ts';
import { NAVIGATION_MEMBERS } from './navigation.ts';
import { OPTIONAL_MEMBERS } from './optional.ts';
import { READING_MEMBERS } from './reading.ts';
import { SCREEN_MEMBERS } from './screen.ts';

export const BROWSER_TOOLSET_TYPE = 'browser_toolset_20260801';
export const BROWSER_TOOLSET_NAME = 'browser';

/** Exact halt text (TOOLSET-CONTRACT A5). */
export const BROWSER_NOT_EXECUTED_TEXT = 'Not executed: an earlier action in this turn failed.';
export const BROWSER_CANCELLED_TEXT =
  'Not completed: the browser actions of this turn were cancelled before this one finished.';

/** All 31 members, in the SDK's order (`BetaBrowserMemberName`). */
export const BROWSER_MEMBER_NAMES = [
  'navigate',
  'list_tabs',
  'new_tab',
  'switch_tab',
  'close_tab',
  'read_page',
  'get_page_text',
  'read_console',
  'read_network',
  'find',
  'form_input',
  'file_upload',
  'scroll_to',
  'screenshot',
  'zoom',
  'left_click',
  'right_click',
  'middle_click',
  'double_click',
  'triple_click',
  'hover',
  'left_click_drag',
  'left_mouse_down',
  'left_mouse_up',
  'mouse_move',
  'scroll',
  'type',
  'key',
  'hold_key',
  'wait',
  'javascript_exec',
] as const;

/** Off unless the operator enables them (TOOLSET-CONTRACT C1). */
export const BROWSER_OPTIONAL_MEMBERS = ['javascript_exec', 'read_console', 'read_network', 'file_upload'] as const;

/** Every member implemented here. */
export const BROWSER_MEMBERS = [
  ...NAVIGATION_MEMBERS,
  ...READING_MEMBERS,
  ...SCREEN_MEMBERS,
  ...INPUT_MEMBERS,
  ...OPTIONAL_MEMBERS,
] as const;

export interface BrowserToolsetOptions extends BrowserDeps {
  /** Optional members the operator switched on. */
  enabled?: readonly string[];
  /** Members the operator switched off. */
  disabled?: readonly string[];
}

/** Wraps every call: collects what it changed, and adds the notices and `browser_state` its result carries. */
async function aroundCall(
  ctx: BrowserCallContext,
  member: Member<z.ZodType, BrowserCallContext>,
  run: () => Promise<MemberOutput[]>,
): Promise<MemberOutput[]> {
  const { session } = ctx;
  const call = session.beginCall();
  const death = session.watchDeath();
  // The call's own work (a `wait`'s sleep, a `hold_key`) ends with the browser too.
  death.died.catch((err: unknown) => ctx.stop(err));
  let outputs: MemberOutput[];
  try {
    // A browser dying under a Playwright call can leave it pending for ever: the race ends the call.
    outputs = await Promise.race([run(), death.died]);
  } catch (err) {
    // endCall throws BrowserCrashedError itself when the browser died during the call.
    await session.endCall(call, false);
    throw err;
  } finally {
    death.dispose();
    ctx.release();
  }
  // Actions (clicks, keys) may have set off a navigation that the next call must not race.
  const report = await session.endCall(call, true, member.effect === 'write' && member.kind === 'ack');
  if (!report) return outputs;
  const state = {
    kind: 'browser_state' as const,
    state: { tabs: report.tabs, ...(report.changes.length ? { state_changes: report.changes } : {}) },
  };
  if (member.kind === 'tab') {
    // Exactly one browser_state and nothing else; dialog notices wait for a result that can hold text.
    session.reported(report, false);
    return [state];
  }
  if (report.notices.length) outputs.push({ kind: 'text', text: report.notices.join('\n') });
  if (report.tabsChanged || report.changes.length) outputs.push(state);
  session.reported(report, true);
  return outputs;
}

export function createBrowserToolset(options: BrowserToolsetOptions): Toolset {
  const { enabled = [], disabled = [], ...deps } = options;
  const context = (call: CallContext) => createBrowserContext(deps, call);
  const optional: readonly string[] = BROWSER_OPTIONAL_MEMBERS;
  const members = new Map<string, RunnableMember>();
  const off = new Set<string>();
  for (const m of BROWSER_MEMBERS as readonly Member<z.ZodType, BrowserCallContext>[]) {
    if (disabled.includes(m.name) || (optional.includes(m.name) && !enabled.includes(m.name))) off.add(m.name);
    else members.set(m.name, bindMember(m, context, aroundCall));
  }
  return {
    type: BROWSER_TOOLSET_TYPE,
    name: BROWSER_TOOLSET_NAME,
    notExecutedText: BROWSER_NOT_EXECUTED_TEXT,
    cancelledText: BROWSER_CANCELLED_TEXT,
    // Playwright drives the page over CDP, not through the X display, so browser batches skip the desktop lane.
    usesDesktop: false,
    allowedBlocks: ['text', 'image', 'browser_state'],
    allMemberNames: BROWSER_MEMBER_NAMES,
    optionalMemberNames: BROWSER_OPTIONAL_MEMBERS,
    members,
    disabledMemberNames: off,
    closeSession: (sessionId) => deps.manager.closeSession(sessionId),
    close: () => deps.manager.close(),
  };
}
