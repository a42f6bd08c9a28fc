/**
 * The SDK's toolset classes, backed by a deskbatch daemon: a program that uses
 * the SDK's tool runner (`client.beta.messages.toolRunner`) points it at a
 * remote desktop with one line.
 *
 *   const computer = await DeskbatchComputerToolset.connect({ url, token, confirm: () => true });
 *   const browser = await DeskbatchBrowserToolset.connect({ url, token });
 *   const final = await anthropic.beta.messages.toolRunner({ model, max_tokens, messages, tools: [computer, browser] });
 *
 * Both extend the SDK's abstract toolsets (`BetaAbstractComputerToolset20260801`,
 * `BetaAbstractBrowserToolset20260801`) and override only `execute`, so the
 * SDK's pipeline stays in charge of everything around a call: its one-at-a-time
 * queue, `confirm`, the URL and file policies, the halt texts, abort handling
 * and rendering the `tool_result`. `execute` sends the call to the daemon and
 * hands the SDK the typed result it expects (see the mapping below).
 *
 * **One call per batch.** The tool runner calls a toolset's members one at a
 * time and stops a toolset's later calls itself once one fails, so every call
 * here is sent as a batch of one. A turn's calls therefore take one round trip
 * each, not one per turn; an agent that wants the whole turn in one round trip
 * uses `DeskbatchClient.runBatch` directly (see examples/agent.ts).
 *
 * What reaches the model:
 * - A failed call (bad input, a refused URL, a thrown error, a timeout) is an
 *   `is_error` result holding the daemon's exact text.
 * - A success is rendered by the SDK from the daemon's result. The SDK writes
 *   the acknowledgment of a pure action itself (`Clicked.`, the same text the
 *   daemon sends); any further line the daemon sent follows it, folded to one
 *   line. Reading members (`get_page_text`, `read_page`, `find`, …) carry the
 *   daemon's text unchanged; `navigate` is parsed into URL, title and status
 *   and reads the same; images are passed through. `cursor_position` reads
 *   `X=<x>,Y=<y>`, the SDK's format, which the daemon writes too (older
 *   daemons wrote `X=<x>, Y=<y>`, also read).
 * - Browser results carry a `browser_state` block every time (the SDK's rule),
 *   built from the latest inventory the daemon reported.
 * - The connection dropping mid-call is answered with an `is_error` result
 *   saying the outcome is unknown; the client never sends a call twice.
 */
import { randomUUID } from 'node:crypto';
import {
  BetaAbstractBrowserToolset20260801,
  BetaAbstractComputerToolset20260801,
  ToolError,
  ToolsetConfigError,
  type BetaBrowserMemberResult,
  type BetaBrowserState,
  type BetaBrowserToolsetOptions,
  type BetaComputerMemberResult,
  type BetaComputerToolsetOptions,
  type BetaScreenshotResult,
  type BetaToolsetCallContext,
} from '@anthropic-ai/sdk/helpers/beta/toolsets';
import type {
  BetaBrowserMemberInput,
  BetaBrowserMemberName,
  BetaBrowserStateChange,
  BetaBrowserStateTabEntry,
  BetaComputerMemberInput,
  BetaComputerMemberName,
} from '@anthropic-ai/sdk/resources/beta';
import {
  BatchOutcomeUnknownError,
  BatchRefusedError,
  DeskbatchClient,
  type ClipboardContent,
  type ConnectOptions,
  type DownloadInfo,
  type FetchedDownload,
  type ToolResult,
  type ToolsetInfo,
} from '../client/index.ts';

/** Where the daemon is, and how to connect (the `DeskbatchClient` options). */
export interface DeskbatchConnectOptions extends ConnectOptions {
  /** `ws://host:port/v1` (a bare `ws://host:port` gets `/v1`). */
  url: string;
}

/** The browser toolset's options, less `browserState`, which the daemon provides. */
export type DeskbatchBrowserToolsetOptions = Omit<BetaBrowserToolsetOptions, 'browserState'>;

/** Texts the model reads when the daemon gave no result (no path, host or id in them). */
export const OUTCOME_UNKNOWN_TEXT =
  'The connection to the remote desktop was lost during this action, so whether it ran is unknown. ' +
  'Take a screenshot to see the current state before acting again.';
export const NOT_SENT_TEXT = 'The remote desktop could not be reached, so this action did not run.';

const TOOL_USE_ID = /^[a-zA-Z0-9_-]{1,256}$/;

type Configs = Record<string, { enabled?: boolean | null; defer_loading?: boolean | null } | null | undefined>;

/**
 * The `configs` of the `tools[]` entry: the daemon's own entry (it switches
 * off what the daemon does not serve), with the caller's settings on top. A
 * member can be switched off, never on when the daemon does not serve it.
 */
function wireConfigs<C extends object>(info: ToolsetInfo, requested: C | null | undefined): C | undefined {
  const served = new Set(info.members);
  const out: Configs = structuredClone(info.tool.configs ?? {});
  for (const [name, config] of Object.entries((requested ?? {}) as Configs)) {
    if (config == null) continue;
    if (config.enabled === true && !served.has(name)) {
      throw new ToolsetConfigError(
        `configs enables '${name}', which this deskbatch daemon does not serve ` +
          `(its ${info.toolset_name} members: ${info.members.join(', ')})`,
      );
    }
    out[name] = { ...out[name], ...config };
  }
  return Object.keys(out).length ? (out as C) : undefined;
}

function toolsetInfo(client: DeskbatchClient, name: 'computer' | 'browser'): ToolsetInfo {
  const info = client.toolsets.find((t) => t.toolset_name === name);
  if (!info) {
    throw new ToolsetConfigError(
      `the deskbatch daemon does not serve the ${name} toolset` +
        (name === 'browser' ? ' (it runs with --browser off)' : ''),
    );
  }
  return info;
}

/**
 * Runs one member call as a one-call batch and returns its `tool_result`.
 * An error result is thrown as a `ToolError` holding the daemon's texts.
 */
async function runOne(
  client: DeskbatchClient,
  toolsetName: 'computer' | 'browser',
  name: string,
  input: unknown,
  ctx: BetaToolsetCallContext,
): Promise<ToolResult> {
  const given = ctx.toolUse?.id;
  const id =
    typeof given === 'string' && TOOL_USE_ID.test(given) ? given : `toolu_db_${randomUUID().replaceAll('-', '')}`;
  let result: ToolResult | undefined;
  try {
    const { toolResults } = await client.runBatch([{ type: 'tool_use', id, name, toolset_name: toolsetName, input }], {
      signal: ctx.signal ?? undefined,
    });
    result = toolResults[0];
  } catch (err) {
    if (err instanceof BatchOutcomeUnknownError) throw new ToolError(err.sent ? OUTCOME_UNKNOWN_TEXT : NOT_SENT_TEXT);
    if (err instanceof BatchRefusedError) throw new ToolError(`The remote desktop refused this action (${err.code}).`);
    throw err; // the run's abort (the SDK turns it into its own abort), or a bug
  }
  if (!result || result.tool_use_id !== id) throw new Error(`deskbatch answered no result for ${name}`);
  if (result.is_error) throw new ToolError(result.content.filter((b) => b.type === 'text'));
  return result;
}

const textsOf = (result: ToolResult): string[] => result.content.flatMap((b) => (b.type === 'text' ? [b.text] : []));

function screenshotOf(name: string, result: ToolResult): BetaScreenshotResult {
  const image = result.content.find((b) => b.type === 'image');
  if (!image || image.type !== 'image') throw new Error(`deskbatch answered ${name} without an image`);
  return { data: image.source.data, mediaType: image.source.media_type };
}

/** The line after a pure action's acknowledgment (which the SDK writes itself), if the daemon sent more. */
const extraLine = (texts: readonly string[]): string | undefined => texts.slice(1).join(' ') || undefined;

// ---------------------------------------------------------------- computer

/** Connects a client for a toolset that owns it; the client is closed again if building the toolset throws. */
async function connectOwned<T>(
  url: string,
  connect: Omit<DeskbatchConnectOptions, 'url'>,
  make: (client: DeskbatchClient) => T,
): Promise<T> {
  const client = await DeskbatchClient.connect(url, { clientName: 'deskbatch-sdk/1', ...connect });
  try {
    return make(client);
  } catch (err) {
    await client.close();
    throw err;
  }
}

/**
 * The computer toolset (`computer_toolset_20260801`) of a deskbatch daemon.
 * Every member the daemon serves is offered; `configs` can switch more off.
 * The SDK asks for a `confirm` callable while `key`, `type` or `hold_key` are
 * on (pass `confirm: () => true` for an unattended agent, or switch them off).
 */
export class DeskbatchComputerToolset extends BetaAbstractComputerToolset20260801 {
  #ownsClient = false;

  /** Uses an open client (several toolsets may share one session); `close()` leaves it open. */
  constructor(
    readonly client: DeskbatchClient,
    options: BetaComputerToolsetOptions = {},
  ) {
    super({ ...options, configs: wireConfigs(toolsetInfo(client, 'computer'), options.configs) });
  }

  /** Connects to the daemon; `close()` closes the connection too. */
  static async connect(
    options: DeskbatchConnectOptions & BetaComputerToolsetOptions,
  ): Promise<DeskbatchComputerToolset> {
    const { url, configs, confirm, toolConfigs, ...connect } = options;
    return connectOwned(url, connect, (client) => {
      const toolset = new DeskbatchComputerToolset(client, { configs, confirm, toolConfigs });
      toolset.#ownsClient = true;
      return toolset;
    });
  }

  /** Puts a text or `{ png }` on this session's desktop clipboard (DeskbatchClient.setClipboard). */
  setClipboard(content: ClipboardContent): Promise<void> {
    return this.client.setClipboard(content);
  }

  /** This session's desktop clipboard as text, or with `'image/png'` a PNG (DeskbatchClient.clipboard). */
  clipboard(type?: 'text'): Promise<string | undefined>;
  clipboard(type: 'image/png'): Promise<Buffer | undefined>;
  clipboard(type: 'text' | 'image/png' = 'text'): Promise<string | Buffer | undefined> {
    return type === 'text' ? this.client.clipboard('text') : this.client.clipboard(type);
  }

  /** Sends the call to the daemon as a batch of one (see the module comment). */
  protected override async execute(
    ctx: BetaToolsetCallContext,
    name: BetaComputerMemberName,
    input: BetaComputerMemberInput,
  ): Promise<BetaComputerMemberResult> {
    const result = await runOne(this.client, 'computer', name, input, ctx);
    const texts = textsOf(result);
    switch (name) {
      case 'screenshot':
      case 'zoom':
        return screenshotOf(name, result);
      case 'cursor_position': {
        // `X=1,Y=2`; daemons before 2026-12 wrote `X=1, Y=2`.
        const match = /^X=(-?\d+), ?Y=(-?\d+)$/.exec(texts[0] ?? '');
        if (!match) throw new Error(`deskbatch answered cursor_position with ${JSON.stringify(texts[0])}`);
        return { x: Number(match[1]), y: Number(match[2]) };
      }
      default:
        return extraLine(texts);
    }
  }

  override async close(): Promise<void> {
    await super.close();
    if (this.#ownsClient) await this.client.close();
  }
}

// ---------------------------------------------------------------- browser

const TEXT_MEMBERS: ReadonlySet<string> = new Set([
  'read_page',
  'find',
  'get_page_text',
  'read_console',
  'read_network',
  'javascript_exec',
]);

/** What the daemon last reported about the tabs, for the SDK's `browserState` (called after every call). */
/** How many held-back daemon lines a browser toolset keeps for the next text result. */
const MAX_CARRIED_LINES = 20;

class TabMirror {
  tabs: BetaBrowserStateTabEntry[] = [];
  /** This call's state changes, handed to the SDK once. */
  changes: BetaBrowserStateChange[] = [];
  /** Daemon lines a result kind could not hold (after `navigate` or a screenshot), for the next one that can. */
  private carriedLines: string[] = [];

  /** Keeps at most the newest MAX_CARRIED_LINES: a run of calls with no text result must not grow it. */
  carry(lines: readonly string[]): void {
    this.carriedLines.push(...lines);
    if (this.carriedLines.length > MAX_CARRIED_LINES)
      this.carriedLines.splice(0, this.carriedLines.length - MAX_CARRIED_LINES);
  }

  update(result: ToolResult): void {
    const block = result.content.find((b) => b.type === 'browser_state');
    if (!block || block.type !== 'browser_state') return;
    this.tabs = block.tabs.map((t) => ({ ...t }));
    this.changes = (block.state_changes ?? []).map((c) => ({ ...c }));
  }

  report(): BetaBrowserState {
    const changes = this.changes;
    this.changes = [];
    return { tabs: this.tabs.map((t) => ({ ...t })), ...(changes.length ? { state_changes: changes } : {}) };
  }

  takeCarried(): string[] {
    const lines = this.carriedLines;
    this.carriedLines = [];
    return lines;
  }

  get active(): BetaBrowserStateTabEntry | undefined {
    return this.tabs.find((t) => t.active);
  }
}

/** `Navigated to <url>[ — <title>][ (HTTP <status>)]`, the daemon's (and the SDK's) navigate text. */
const NAVIGATED = /^Navigated to (\S+)(?: — (.*?))?(?: \(HTTP (\d{3})\))?$/s;

/**
 * The browser toolset (`browser_toolset_20260801`) of a deskbatch daemon:
 * each session has its own browser context on the daemon. Every member the
 * daemon serves is offered (its optional members only if the operator
 * switched them on); the SDK asks for `confirm` when `javascript_exec` or
 * `file_upload` is on. `urlPolicy` runs here before a call is sent; the
 * daemon applies its own URL policy as well. The `browser_state` the SDK
 * attaches follows what the daemon reports to this session, so send the
 * session's browser calls through this toolset only.
 */
export class DeskbatchBrowserToolset extends BetaAbstractBrowserToolset20260801 {
  #ownsClient = false;
  readonly #mirror: TabMirror;

  constructor(
    readonly client: DeskbatchClient,
    options: DeskbatchBrowserToolsetOptions = {},
  ) {
    const mirror = new TabMirror();
    super({
      ...options,
      configs: wireConfigs(toolsetInfo(client, 'browser'), options.configs),
      browserState: () => mirror.report(),
    });
    this.#mirror = mirror;
  }

  /** Connects to the daemon; `close()` closes the connection too. */
  static async connect(
    options: DeskbatchConnectOptions & DeskbatchBrowserToolsetOptions,
  ): Promise<DeskbatchBrowserToolset> {
    const { url, configs, confirm, toolConfigs, urlPolicy, filePolicy, ...connect } = options;
    return connectOwned(url, connect, (client) => {
      const toolset = new DeskbatchBrowserToolset(client, { configs, confirm, toolConfigs, urlPolicy, filePolicy });
      toolset.#ownsClient = true;
      return toolset;
    });
  }

  /**
   * The downloads this session's pages completed, which the daemon kept for the harness (docs/PROTOCOL.md
   * "Downloads"): each by the `download_id` its `download_completed` state change carried.
   */
  downloads(): Promise<DownloadInfo[]> {
    return this.client.downloads();
  }

  /** One of this session's downloads: a stream, or with `{ path }` a file here (DeskbatchClient.fetchDownload). */
  fetchDownload(downloadId: string, options?: { signal?: AbortSignal }): Promise<FetchedDownload>;
  fetchDownload(
    downloadId: string,
    options: { path: string; signal?: AbortSignal },
  ): Promise<Omit<FetchedDownload, 'body'>>;
  fetchDownload(
    downloadId: string,
    options: { path?: string; signal?: AbortSignal } = {},
  ): Promise<FetchedDownload | Omit<FetchedDownload, 'body'>> {
    const { path, signal } = options;
    const withSignal = signal ? { signal } : {};
    return path === undefined
      ? this.client.fetchDownload(downloadId, withSignal)
      : this.client.fetchDownload(downloadId, { path, ...withSignal });
  }

  /** Puts a text or `{ png }` on this session's desktop clipboard (DeskbatchClient.setClipboard). */
  setClipboard(content: ClipboardContent): Promise<void> {
    return this.client.setClipboard(content);
  }

  /** This session's desktop clipboard as text, or with `'image/png'` a PNG (DeskbatchClient.clipboard). */
  clipboard(type?: 'text'): Promise<string | undefined>;
  clipboard(type: 'image/png'): Promise<Buffer | undefined>;
  clipboard(type: 'text' | 'image/png' = 'text'): Promise<string | Buffer | undefined> {
    return type === 'text' ? this.client.clipboard('text') : this.client.clipboard(type);
  }

  /** Sends the call to the daemon as a batch of one (see the module comment). */
  protected override async execute(
    ctx: BetaToolsetCallContext,
    name: BetaBrowserMemberName,
    input: BetaBrowserMemberInput,
  ): Promise<BetaBrowserMemberResult> {
    const mirror = this.#mirror;
    const result = await runOne(this.client, 'browser', name, input, ctx);
    mirror.update(result);
    const texts = textsOf(result);
    if (TEXT_MEMBERS.has(name)) return [...texts, ...mirror.takeCarried()].join('\n');
    switch (name) {
      case 'navigate': {
        const match = NAVIGATED.exec(texts[0] ?? '');
        // A navigation that only started a download reads as a navigation to where the tab still is.
        mirror.carry(match ? texts.slice(1) : texts);
        if (!match) return { url: mirror.active?.url ?? '' };
        return { url: match[1]!, title: match[2], status: match[3] === undefined ? undefined : Number(match[3]) };
      }
      case 'screenshot':
      case 'zoom':
        mirror.carry(texts);
        return screenshotOf(name, result);
      case 'new_tab':
      case 'switch_tab': {
        const active = mirror.active;
        if (!active) throw new Error(`deskbatch answered ${name} without an active tab`);
        return { ...active };
      }
      case 'list_tabs':
        return mirror.tabs.map((t) => ({ ...t }));
      case 'close_tab':
        return undefined;
      default:
        return [...texts.slice(1), ...mirror.takeCarried()].join(' ') || undefined;
    }
  }

  override async close(): Promise<void> {
    await super.close();
    if (this.#ownsClient) await this.client.close();
  }
}

// ---------------------------------------------------------------- both

export interface DeskbatchToolsets {
  /** The one connection (one session) both toolsets use. */
  client: DeskbatchClient;
  /** Absent when `computer: false` was passed. */
  computer?: DeskbatchComputerToolset;
  /** Absent when `browser: false` was passed or the daemon serves no browser. */
  browser?: DeskbatchBrowserToolset;
  /** The toolsets, for the tool runner's `tools`. */
  tools: (DeskbatchComputerToolset | DeskbatchBrowserToolset)[];
  /** Closes both toolsets, then the connection. */
  close(): Promise<void>;
}

/**
 * Both toolsets over one connection, so computer and browser calls share one
 * daemon session (one desktop lane, one browser context).
 */
export async function connectDeskbatchToolsets(
  options: DeskbatchConnectOptions & {
    computer?: BetaComputerToolsetOptions | false;
    browser?: DeskbatchBrowserToolsetOptions | false;
  },
): Promise<DeskbatchToolsets> {
  const { url, computer: computerOptions = {}, browser: browserOptions = {}, ...connect } = options;
  const client = await DeskbatchClient.connect(url, { clientName: 'deskbatch-sdk/1', ...connect });
  try {
    const computer = computerOptions === false ? undefined : new DeskbatchComputerToolset(client, computerOptions);
    const servesBrowser = client.toolsetNames.includes('browser');
    const browser =
      browserOptions === false || !servesBrowser ? undefined : new DeskbatchBrowserToolset(client, browserOptions);
    const tools = [computer, browser].filter((t) => t !== undefined);
    return {
      client,
      computer,
      browser,
      tools,
      async close() {
        await Promise.all(tools.map((t) => t.close()));
        await client.close();
      },
    };
  } catch (err) {
    await client.close();
    throw err;
  }
}
