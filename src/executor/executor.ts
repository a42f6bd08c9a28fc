/**
 * The batch executor: the batch rules live here and nowhere else
 * (docs/PROTOCOL.md "Execution rules", docs/TOOLSETS.md A5).
 *
 * - One lane per desktop: a batch that touches the display waits for its
 *   desktop's lane; calls run one at a time, in the listed order.
 * - Halting is per toolset: after a failure of toolset T, every later call of
 *   T is answered with T's exact not-executed text; other toolsets go on.
 * - Every tool_use gets exactly one result, on every path: success, failure,
 *   bad input, timeout, cancel, disconnect, and an error in the daemon itself.
 * - Cancellation is not a failure: cancelled calls get the toolset's cancelled
 *   text and a `cancelled` event, never a `failed` one.
 * - A batch has a time budget (`maxBatchMs`, from when it gets the desktop):
 *   once spent, the batch is cancelled like any other (the running call and
 *   every later one get the cancelled text; `cancelled: true`).
 */
import type {
  AgentToolEntry,
  BatchResult,
  Failure,
  ScreenshotFile,
  ToolEvent,
  ToolResult,
  ToolUse,
} from '../base/protocol.ts';
import { CancelledError, ToolInputError, ToolRefusedError, ToolTimeoutError } from '../base/errors.ts';
import type { Logger } from '../base/log.ts';
import type { ScreenshotStore } from '../base/screenshot-store.ts';
import type {
  CallContext,
  MemberOutput,
  PlainTool,
  RunnableMember,
  StagedDocuments,
  Toolset,
} from '../toolset-api/types.ts';
import { errorInfo, modelErrorText } from './failure.ts';
import type { Lane } from '../desktop-pool/lane.ts';
import type { DesktopResources } from '../desktop-pool/desktop.ts';
import { ContractViolationError, errorResult, successResult, type ImageRules } from './results.ts';
import { describeZodError } from '../base/zod-text.ts';
import { REPEAT_ADVICE, REPEAT_THRESHOLD, type RepeatTracker } from './repeats.ts';
import { FALLBACK_CANCELLED_TEXT, FALLBACK_NOT_EXECUTED_TEXT } from '../toolset-api/text.ts';
import { foldName } from '../base/text.ts';
import { malformedToolsetCallText, toolNotFoundText, toolsetNotFoundText } from './call-texts.ts';
import { readRetry, type RetrySettings } from '../base/resilience.ts';
import type { RetryPolicy } from 'cockatiel';

/** The SDK's fallback texts for a family it does not know (docs/TOOLSETS.md A5). */
/** How long a cancelled or timed-out handler may take to wind down before the lane moves on. */
const WIND_DOWN_MS = 2_000;

export interface ExecutorOptions {
  toolsets: readonly Toolset[];
  /** A tool whose calls carry no toolset_name (the older `computer` tool), if the daemon serves one. */
  plainTool?: PlainTool;
  /** Base time limit of one call; members add input-dependent time (`wait`). */
  callTimeoutMs: number;
  /** Operator opt-in: the model also reads messages of errors not written for it. */
  exposeErrorMessages: boolean;
  images: ImageRules;
  /** The lane of batches that name no desktop (executor unit tests); a session's batches use its desktop's. */
  lane: Lane;
  /** Automatic retries of members that change nothing, on retryable errors (src/base/resilience.ts). */
  retry?: RetrySettings;
  store?: ScreenshotStore;
  log: Logger;
}

export interface BatchRequest {
  sessionId: string;
  batchId: string;
  toolUses: readonly ToolUse[];
  /** Aborts on cancel, disconnect or shutdown. */
  signal: AbortSignal;
  emit: (event: ToolEvent) => void;
  /** The session's memory of repeated failures (loop detection). */
  repeats?: RepeatTracker;
  /**
   * Time budget of the batch, in ms, counted from when it holds the desktop (or starts, when it needs none):
   * then the running call is cancelled and the rest are answered with the cancelled text. None when absent.
   */
  maxBatchMs?: number;
  /** What the agent's own `tools[]` (hello.tools) leaves off; everything served is offered when absent. */
  offer?: AgentOffer;
  /** The session's desktop (src/desktop-pool/): its calls act on it, and its lane orders them. */
  desktop?: DesktopResources;
  /** Told of each call that typed into a password field (`CallContext.markSecret`); absent: nobody asks. */
  secretInput?: (toolUseId: string) => void;
  /** The documents the session staged (`CallContext.documents`). */
  documents?: StagedDocuments;
}

/** Per served toolset: `'none'` when the agent did not declare it, else the members its `configs` leaves off. */
export type AgentOffer = ReadonlyMap<string, 'none' | ReadonlySet<string>>;

/** A tool type's family: without its date and `_toolset` (`browser_toolset_20260801` is `browser`). */
function family(type: string): string {
  return type.replace(/_\d{8}$/, '').replace(/_toolset$/, '');
}

/** One member's `configs` entry read as the SDK's runner reads it: absent or null is the default, a non-object is off. */
function memberEnabled(config: unknown, byDefault: boolean): boolean {
  if (config === undefined || config === null) return byDefault;
  if (typeof config !== 'object') return false;
  const enabled = (config as { enabled?: unknown }).enabled;
  return typeof enabled === 'boolean' ? enabled : byDefault;
}

/** The SDK runner's text for a member the `tools[]` entry (the operator's or the agent's) switched off. */
const memberOffText = (name: string): string =>
  `The '${name}' action is not permitted by this application's permissions and cannot be used in this session.`;

type Outcome =
  | { kind: 'succeeded'; result: ToolResult; outputs: MemberOutput[]; attempts: number }
  | { kind: 'failed'; error: unknown; attempts: number; notes?: readonly string[] }
  | { kind: 'cancelled'; notes?: readonly string[] };

export class Executor {
  private readonly toolsets: ReadonlyMap<string, Toolset>;
  private readonly readRetry: RetryPolicy | undefined;
  /** The tool whose calls carry no toolset_name (the older `computer` tool), when one is served. */
  readonly plainTool: PlainTool | undefined;

  constructor(private readonly options: ExecutorOptions) {
    this.toolsets = new Map(options.toolsets.map((t) => [t.name, t]));
    this.plainTool = options.plainTool;
    this.readRetry = options.retry && options.retry.attempts > 0 ? readRetry(options.retry) : undefined;
  }

  /** A session ended: its toolsets release what they held for it on its desktop (browser contexts). */
  async closeSession(sessionId: string, desktop: DesktopResources): Promise<void> {
    for (const t of this.toolsets.values()) await t.closeSession?.(sessionId, desktop).catch(() => undefined);
  }

  /** The toolsets this daemon serves, by `toolset_name`. */
  get served(): ReadonlyMap<string, Toolset> {
    return this.toolsets;
  }

  /**
   * What an agent's `tools[]` offers its model of the toolsets served here: a
   * toolset whose type it does not list is not offered at all; of one it
   * lists, a member is off when its `configs` entry says `enabled: false`, or
   * when the API leaves it off by default (the optional members) and the
   * entry does not switch it on.
   */
  agentOffer(entries: readonly AgentToolEntry[]): AgentOffer {
    const offer = new Map<string, 'none' | ReadonlySet<string>>();
    for (const t of this.toolsets.values()) {
      // Matched by family, as the SDK's runner matches: the type without its date.
      const entry = entries.find((e) => e.type !== undefined && family(e.type) === family(t.type));
      if (!entry) {
        offer.set(t.name, 'none');
        continue;
      }
      const optional = t.optionalMemberNames ?? [];
      const configs = entry.configs ?? {};
      const off = t.allMemberNames.filter((name) => {
        const config = Object.hasOwn(configs, name) ? configs[name] : undefined;
        return !memberEnabled(config, !optional.includes(name));
      });
      offer.set(t.name, new Set(off));
    }
    // The older `computer` tool: an entry named `computer` that is not a toolset.
    const plain = this.plainTool;
    if (plain) {
      const declared = entries.some((e) => e.name === plain.toolName && !e.type?.includes('_toolset'));
      offer.set(plain.name, declared ? new Set() : 'none');
    }
    return offer;
  }

  async run(request: BatchRequest): Promise<BatchResult> {
    const started = performance.now();
    const log = this.options.log.child({ session: request.sessionId, batch: request.batchId });
    // The batch stops on the caller's cancel, or when its time budget is spent: one signal for both.
    const stop = new AbortController();
    const onCancel = (): void => stop.abort(request.signal.reason);
    if (request.signal.aborted) onCancel();
    else request.signal.addEventListener('abort', onCancel, { once: true });
    let budget: NodeJS.Timeout | undefined;
    const startBudget = (): void => {
      const ms = request.maxBatchMs;
      if (ms === undefined || stop.signal.aborted) return;
      budget = setTimeout(() => {
        log.warn('batch time budget spent; cancelling the rest of the batch', { max_batch_ms: ms });
        stop.abort(new CancelledError(`the batch's time budget of ${ms} ms was spent`));
      }, ms);
    };
    const req: BatchRequest = { ...request, signal: stop.signal };
    const results: ToolResult[] = [];
    const failures: Failure[] = [];
    // A Map, not an object: a toolset_name such as 'constructor' must not look halted.
    const halted = new Map<string, number>();
    const screenshots: ScreenshotFile[] = [];
    let cancelled = false;

    const event = (index: number, tu: ToolUse, phase: ToolEvent['phase'], extra: Partial<ToolEvent> = {}): void =>
      req.emit({
        type: 'tool_event',
        batch_id: req.batchId,
        index,
        tool_use_id: tu.id,
        toolset_name: tu.toolset_name ?? null,
        name: tu.name,
        phase,
        ...extra,
      });

    const cancelledText = (tu: ToolUse): string =>
      this.toolsetOf(this.familyOf(tu))?.cancelledText || FALLBACK_CANCELLED_TEXT;

    let release: (() => void) | undefined;
    let leave: (() => void) | undefined;
    try {
      // While a person holds the desktop (src/desktop-pool/hold.ts), no batch of it runs, browser batches included.
      const hold = req.desktop?.hold;
      if (hold) leave = await hold.enter(req.signal).catch(() => undefined);
      if (req.toolUses.some((tu) => this.usesDesktop(tu))) {
        const lane = req.desktop?.lane ?? this.options.lane;
        release = await lane.acquire(req.signal).catch(() => undefined);
      }
      startBudget();
      for (const [index, tu] of req.toolUses.entries()) {
        if (req.signal.aborted) {
          cancelled = true;
          results.push(errorResult(tu, cancelledText(tu)));
          event(index, tu, 'cancelled');
          continue;
        }
        const family = this.familyOf(tu, req.offer);
        // A malformed toolset call is answered as one even after its toolset halted (the SDK's order).
        if (family !== undefined && halted.has(family) && !this.isMalformedToolsetCall(tu, req.offer)) {
          const text = this.toolsetOf(family)?.notExecutedText ?? FALLBACK_NOT_EXECUTED_TEXT;
          results.push(errorResult(tu, text));
          event(index, tu, 'not_executed');
          continue;
        }
        event(index, tu, 'started');
        const t0 = performance.now();
        const outcome = await this.call(tu, req);
        const duration_ms = Math.round((performance.now() - t0) * 100) / 100;
        switch (outcome.kind) {
          case 'succeeded': {
            req.repeats?.succeeded(tu);
            results.push(outcome.result);
            await this.store(req, tu, outcome.outputs, screenshots, log);
            const retried = outcome.attempts > 1 ? { attempts: outcome.attempts } : {};
            if (outcome.attempts > 1) log.warn('tool call succeeded after retries', { tool_use: tu.id, ...retried });
            event(index, tu, 'succeeded', { duration_ms, ...retried });
            break;
          }
          case 'cancelled': {
            cancelled = true;
            results.push(errorResult(tu, cancelledText(tu), outcome.notes));
            event(index, tu, 'cancelled');
            break;
          }
          case 'failed': {
            const error = errorInfo(outcome.error);
            if (outcome.attempts > 1) error.attempts = outcome.attempts;
            let text = modelErrorText(tu.name, outcome.error, this.options.exposeErrorMessages);
            const repeated = req.repeats?.failed(tu, error) ?? 1;
            if (repeated >= 2) error.repeated = repeated;
            if (repeated >= REPEAT_THRESHOLD) text = `${text}\n\n${REPEAT_ADVICE(repeated)}`;
            results.push(errorResult(tu, text, outcome.notes));
            failures.push({ tool_use_id: tu.id, index, name: tu.name, error });
            // Only a toolset served here halts: nothing of an unknown toolset_name ran, so nothing of it is stopped.
            if (
              family !== undefined &&
              this.toolsetOf(family) &&
              req.offer?.get(family) !== 'none' &&
              !halted.has(family)
            ) {
              halted.set(family, index);
            }
            event(index, tu, 'failed', { duration_ms, error });
            const code = (outcome.error as { code?: unknown } | null)?.code;
            log.warn('tool call failed', {
              tool_use: tu.id,
              name: tu.name,
              toolset: family,
              error,
              ...(typeof code === 'string' ? { code } : {}),
            });
            break;
          }
        }
      }
    } catch (err) {
      // A bug in the daemon itself: still answer every tool_use exactly once.
      log.error('executor error', { error: errorInfo(err) });
      const error = errorInfo(err);
      for (const tu of req.toolUses.slice(results.length)) {
        const index = results.length;
        results.push(errorResult(tu, modelErrorText(tu.name, err, false)));
        failures.push({ tool_use_id: tu.id, index, name: tu.name, error });
        event(index, tu, 'failed', { error });
      }
    } finally {
      clearTimeout(budget);
      request.signal.removeEventListener('abort', onCancel);
      release?.();
      leave?.();
    }
    return {
      type: 'batch_result',
      batch_id: req.batchId,
      tool_results: results,
      failures,
      halted: Object.fromEntries(halted),
      cancelled,
      replayed: false,
      duration_ms: Math.round(performance.now() - started),
      screenshots,
    };
  }

  private usesDesktop(tu: ToolUse): boolean {
    return this.toolsetOf(this.familyOf(tu))?.usesDesktop === true;
  }

  /**
   * What halts together: the toolset_name, or the older `computer` tool's own
   * family (no toolset_name), or the toolset a malformed toolset call is named after.
   */
  private familyOf(tu: ToolUse, offer?: AgentOffer): string | undefined {
    if (tu.toolset_name) return tu.toolset_name;
    if (this.plainTakes(tu, offer)) return this.plainTool!.name;
    return this.isMalformedToolsetCall(tu, offer) ? tu.name : undefined;
  }

  /** Whether `family` is a toolset served here and offered to this agent's model: only such a toolset halts. */
  private offered(family: string, offer?: AgentOffer): boolean {
    return this.toolsets.has(family) && offer?.get(family) !== 'none';
  }

  /** A call named after an offered toolset with no toolset_name, which no plain tool takes (the SDK's rule). */
  private isMalformedToolsetCall(tu: ToolUse, offer?: AgentOffer): boolean {
    return !tu.toolset_name && this.offered(tu.name, offer) && !this.plainTakes(tu, offer);
  }

  /** Whether the older `computer` tool takes this call: it is one, and the agent's tools[] (if given) declares the tool. */
  private plainTakes(tu: ToolUse, offer?: AgentOffer): boolean {
    return this.plainTool?.handles(tu) === true && offer?.get(this.plainTool.name) !== 'none';
  }

  private toolsetOf(family: string | undefined): Toolset | undefined {
    if (family === undefined) return undefined;
    return family === this.plainTool?.name ? this.plainTool : this.toolsets.get(family);
  }

  /** Resolves the member, validates the input, runs the handler under its time limit. Never throws. */
  private async call(tu: ToolUse, req: BatchRequest): Promise<Outcome> {
    let member: RunnableMember;
    let toolset: Toolset;
    let input: unknown;
    try {
      ({ toolset, member } = this.resolve(tu, req.offer));
      const raw = tu.input ?? {};
      const parsed = member.input.safeParse(raw);
      if (!parsed.success) {
        throw new ToolInputError(
          `invalid input for ${toolset.name} member '${tu.name}': ${describeZodError(parsed.error, raw)}`,
        );
      }
      input = parsed.data;
    } catch (error) {
      return { kind: 'failed', error, attempts: 1 };
    }

    const timeoutMs = this.options.callTimeoutMs + member.extraTimeMs(input);
    const controller = new AbortController();
    const onBatchAbort = (): void => controller.abort(new CancelledError('batch cancelled'));
    req.signal.addEventListener('abort', onBatchAbort, { once: true });
    const timer = setTimeout(() => controller.abort(new ToolTimeoutError(timeoutMs)), timeoutMs);
    const notes: string[] = [];
    const ctx: CallContext = {
      signal: controller.signal,
      sessionId: req.sessionId,
      batchId: req.batchId,
      toolUseId: tu.id,
      ...(req.desktop ? { desktop: req.desktop } : {}),
      noteOnFailure: (lines) => void notes.push(...lines),
      ...(req.secretInput ? { markSecret: () => req.secretInput!(tu.id) } : {}),
      ...(req.documents ? { documents: req.documents } : {}),
    };
    let attempts = 0;
    const once = (): Promise<MemberOutput[]> => {
      attempts++;
      return member.run(input, ctx);
    };
    // Only members that change nothing are run again, and all runs share the one time limit.
    const work = member.effect === 'read' && this.readRetry ? this.readRetry.execute(once, controller.signal) : once();
    const aborted = new Promise<never>((_, reject) => {
      const fail = (): void => reject(controller.signal.reason);
      if (controller.signal.aborted) fail();
      else controller.signal.addEventListener('abort', fail, { once: true });
    });
    try {
      const outputs = await Promise.race([work, aborted]);
      const result = successResult(tu, outputs, toolset.allowedBlocks, this.options.images);
      return { kind: 'succeeded', result, outputs, attempts };
    } catch (error) {
      if (controller.signal.aborted) {
        // Let the handler wind down (release keys, end the drag) before the next call runs.
        await Promise.race([work.catch(() => undefined), new Promise((r) => setTimeout(r, WIND_DOWN_MS).unref())]);
        const reason: unknown = controller.signal.reason;
        return reason instanceof ToolTimeoutError
          ? { kind: 'failed', error: reason, attempts, notes }
          : { kind: 'cancelled', notes };
      }
      return { kind: 'failed', error, attempts, notes };
    } finally {
      clearTimeout(timer);
      req.signal.removeEventListener('abort', onBatchAbort);
    }
  }

  private resolve(tu: ToolUse, offer?: AgentOffer): { toolset: Toolset; member: RunnableMember } {
    if (!tu.toolset_name) {
      if (this.plainTakes(tu, offer)) return { toolset: this.plainTool!, member: this.plainTool!.member(tu.input) };
      if (this.isMalformedToolsetCall(tu, offer)) {
        throw new ToolRefusedError(malformedToolsetCallText(tu.name, tu.input));
      }
      throw new ToolRefusedError(toolNotFoundText(tu.name));
    }
    const toolset = this.toolsets.get(tu.toolset_name);
    const off = offer?.get(tu.toolset_name);
    if (!toolset || off === 'none') throw new ToolRefusedError(toolsetNotFoundText(tu.toolset_name, tu.name));
    // The agent's own configs left this member off: its model was not offered it (the SDK runner refuses it so).
    if (off?.has(tu.name)) throw new ToolRefusedError(memberOffText(tu.name));
    const member = toolset.members.get(tu.name);
    if (member) return { toolset, member };
    if (toolset.disabledMemberNames.has(tu.name)) throw new ToolRefusedError(memberOffText(tu.name));
    if (toolset.allMemberNames.includes(tu.name)) {
      throw new ToolRefusedError(
        `The ${toolset.name} toolset member '${tu.name}' is not available in this environment.`,
      );
    }
    throw new ToolRefusedError(`Error: unknown ${toolset.name} toolset member '${foldName(tu.name)}'`);
  }

  private async store(
    req: BatchRequest,
    tu: ToolUse,
    outputs: readonly MemberOutput[],
    into: ScreenshotFile[],
    log: Logger,
  ): Promise<void> {
    const store = this.options.store;
    if (!store) return;
    for (const out of outputs) {
      if (out.kind !== 'image') continue;
      try {
        into.push(await store.write(req.sessionId, req.batchId, tu.id, out.image));
      } catch (err) {
        // The model already has its image; a full disk must not fail the call.
        log.warn('could not write screenshot file', { tool_use: tu.id, error: errorInfo(err) });
      }
    }
  }
}

export { ContractViolationError };
