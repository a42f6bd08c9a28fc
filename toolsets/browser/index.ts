/**
 * `browser_toolset_20260801`: a Chromium browser with tabs (docs/TOOLSETS.md
 * section C). Every call runs between `beginCall` and `endCall` of the
 * session's browser, which is how `browser_state` learns what the call
 * changed: tab members answer with exactly one `browser_state`; other members
 * add one when the tabs changed or there are state changes to report.
 */
import type { z } from 'zod';
import { EMPTY_TEXT, FALLBACK_NOT_EXECUTED_TEXT } from '../../src/toolset-api/text.ts';
import {
  defineToolset,
  memberNames,
  optionalNames,
  type CallContext,
  type Member,
  type MemberOutput,
  type Toolset,
} from '../../src/toolset-api/types.ts';
import { createBrowserContext, type BrowserCallContext, type BrowserDeps } from './context.ts';
import {
  doubleClick,
  formInput,
  holdKey,
  hover,
  key,
  leftClick,
  leftClickDrag,
  leftMouseDown,
  leftMouseUp,
  middleClick,
  mouseMove,
  rightClick,
  scroll,
  scrollTo,
  tripleClick,
  type,
  wait,
} from './input.ts';
import { closeTab, listTabs, navigate, newTab, switchTab } from './navigation.ts';
import { fileUpload, javascriptExec, readConsole, readNetwork } from './optional.ts';
import { find, getPageText, readPageMember } from './reading.ts';
import { screenshot, zoom } from './screen.ts';

export const BROWSER_TOOLSET_TYPE = 'browser_toolset_20260801';
export const BROWSER_TOOLSET_NAME = 'browser';

/** Exact halt text (docs/TOOLSETS.md A5): the SDK's browser toolset uses the generic one. */
export const BROWSER_NOT_EXECUTED_TEXT = FALLBACK_NOT_EXECUTED_TEXT;
export const BROWSER_CANCELLED_TEXT =
  'Not completed: the browser actions of this turn were cancelled before this one finished.';

/** All 31 members, in the SDK's order (`BetaBrowserMemberName`): the one table of the toolset. */
export const BROWSER_MEMBERS = [
  navigate,
  listTabs,
  newTab,
  switchTab,
  closeTab,
  readPageMember,
  getPageText,
  readConsole,
  readNetwork,
  find,
  formInput,
  fileUpload,
  scrollTo,
  screenshot,
  zoom,
  leftClick,
  rightClick,
  middleClick,
  doubleClick,
  tripleClick,
  hover,
  leftClickDrag,
  leftMouseDown,
  leftMouseUp,
  mouseMove,
  scroll,
  type,
  key,
  holdKey,
  wait,
  javascriptExec,
] as const;

export const BROWSER_MEMBER_NAMES = memberNames(BROWSER_MEMBERS);

/** Off unless the operator enables them (docs/TOOLSETS.md C1): marked `optional` on their definitions. */
export const BROWSER_OPTIONAL_MEMBERS = optionalNames(BROWSER_MEMBERS);

export interface BrowserToolsetOptions extends BrowserDeps {
  /** Optional members the operator switched on. */
  enabled?: readonly string[];
  /** Members the operator switched off. */
  disabled?: readonly string[];
}

/**
 * Wraps every call: in a recorded session, a named step of the browser's
 * trace (`member · tool_use_id`, BrowserSession.traceStep), around what
 * follows.
 */
function aroundCall(
  ctx: BrowserCallContext,
  member: Member<z.ZodType, BrowserCallContext>,
  run: () => Promise<MemberOutput[]>,
): Promise<MemberOutput[]> {
  return ctx.session.traceStep(`${member.name} · ${ctx.toolUseId}`, () => reportCall(ctx, member, run));
}

/** Runs a call: collects what it changed, and adds the notices and `browser_state` its result carries. */
async function reportCall(
  ctx: BrowserCallContext,
  member: Member<z.ZodType, BrowserCallContext>,
  run: () => Promise<MemberOutput[]>,
): Promise<MemberOutput[]> {
  const { session } = ctx;
  const call = session.beginCall();
  const death = session.watchDeath();
  // The call's own work (a `wait`'s sleep, a `hold_key`) ends with the browser too.
  death.died.catch((err: unknown) => ctx.stop(err));
  // A refused navigation or a dismissed dialog is often why a call failed: the model reads them on its result.
  const failing = (err: unknown): unknown => {
    if (session.ownsCall(call)) ctx.noteOnFailure(session.takeNotices());
    return err;
  };
  let outputs: MemberOutput[];
  try {
    // A browser dying under a Playwright call can leave it pending for ever: the race ends the call.
    outputs = await Promise.race([run(), death.died]);
  } catch (err) {
    // endCall throws BrowserCrashedError itself when the browser died during the call.
    await session.endCall(call, false).catch((ended: unknown) => {
      throw failing(ended);
    });
    throw failing(err);
  } finally {
    death.dispose();
    ctx.release();
  }
  // Actions (clicks, keys) may have set off a navigation that the next call must not race.
  const report = await session
    .endCall(call, true, member.effect === 'write' && member.kind === 'ack')
    .catch((err: unknown) => {
      throw failing(err);
    });
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
  // A member whose text is empty says so, also beside notices and a browser_state (the SDK's runner writes it so).
  if (!outputs.some((o) => (o.kind === 'text' && o.text !== '') || o.kind === 'image')) {
    outputs = [{ kind: 'text', text: EMPTY_TEXT }];
  }
  // One text block per notice, as the SDK's runner sends them.
  for (const notice of report.notices) outputs.push({ kind: 'text', text: notice });
  if (report.tabsChanged || report.changes.length) outputs.push(state);
  session.reported(report, true);
  return outputs;
}

export function createBrowserToolset(options: BrowserToolsetOptions): Toolset {
  const { enabled = [], disabled = [], ...deps } = options;
  return defineToolset(
    {
      type: BROWSER_TOOLSET_TYPE,
      name: BROWSER_TOOLSET_NAME,
      notExecutedText: BROWSER_NOT_EXECUTED_TEXT,
      cancelledText: BROWSER_CANCELLED_TEXT,
      // Playwright drives the page over CDP, not through the X display, so browser batches skip the desktop lane.
      usesDesktop: false,
      allowedBlocks: ['text', 'image', 'browser_state'],
      members: BROWSER_MEMBERS as readonly Member<z.ZodType, BrowserCallContext>[],
      context: (call: CallContext) => createBrowserContext(deps, call),
      around: aroundCall,
      closeSession: async (sessionId, desktop) => desktop.browser?.closeSession(sessionId),
    },
    { enabled, disabled },
  );
}
