/**
 * One session's browser: its own BrowserContext (so sessions never see each
 * other's tabs, cookies or storage), opened on first use and again after the
 * browser crashed, and the calls that run on it. It puts together parts with
 * one job each: the tabs (tabs.ts), what the call that runs now set off
 * (call-watch.ts), downloads (downloads.ts), dialogs (dialogs.ts), the host
 * lists for pages' own navigations (navigation-guard.ts) and the notices for
 * the model (notices.ts). A call's result reports what it changed (CallReport).
 * A recorded session's context also records a Playwright trace (recordTrace).
 */
import { randomUUID } from 'node:crypto';
import { chmod, mkdir, rename, rm } from 'node:fs/promises';
import { basename, dirname, extname, join } from 'node:path';
import type { Browser, BrowserContext, CDPSession, Page, Request } from 'playwright';
import { TabStateError, ToolInputError } from '../base/errors.ts';
import type { BrowserStateChange } from '../base/protocol.ts';
import { rewriteTrace } from './trace-rewrite.ts';
import { ZipReader } from './zip.ts';
import { oneLine } from '../base/text.ts';
import type { Logger } from '../base/log.ts';
import { CallWatch, type SettleCounts } from './call-watch.ts';
import { answerDialog } from './dialogs.ts';
import { Downloads, STATE_CHANGES_MAX, type DownloadSettings } from './downloads.ts';
import { BrowserCrashedError } from './failures.ts';
import type { InputFrames } from './input-frames.ts';
import { NavigationGuard } from './navigation-guard.ts';
import { Notices } from './notices.ts';
import { TABS_MAX, Tabs, type TabEntry } from './tabs.ts';
import type { TraceFolder } from './trace-folder.ts';
import type { UrlPolicy } from './url-policy.ts';

const FILE_CHOOSER_NOTICE = 'A file chooser was opened and closed: files reach pages only through file_upload.';
/** A new_tab whose tab closed before its result was built (the SDK runner's text for a new_tab it cannot report). */
const NEW_TAB_NOT_ACTIVE_TEXT =
  'new_tab opened a tab, but the browser does not report it as the only active tab. Call list_tabs to see the tabs.';
const TABS_LOST_NOTICE = 'The browser was restarted after a crash; the tabs open before were closed.';

/** How a recorded session's browser trace is kept (docs/RECORDING.md, "Privacy"). */
export interface TraceOptions {
  /**
   * Where the trace goes, e.g. `<recording>/trace.zip`. After a browser
   * crash, the next context's trace goes beside it: `trace-2.zip`,
   * `trace-3.zip` …
   */
  path: string;
  /** Keep every network body; false keeps only stylesheets', fonts' and images' (DOM snapshots need them). */
  networkBodies: boolean;
  /** Text the model typed is stored as "[N characters]": in the calls' params, input values, and wherever else it shows. */
  redactTyped: boolean;
  /** Values of password fields, and typed text found in them, are stored as "[N characters]". */
  redactPasswords?: boolean;
  /** Every form field's value in the DOM snapshots is stored as "[N characters]" (set once a person took over). */
  redactFields?: boolean;
  /**
   * The screencast (JPEG frames of the page, the viewer's film strip); default
   * true. DOM snapshots do not need it. It costs the most time per call
   * (docs/RECORDING.md, "Cost").
   */
  screenshots?: boolean;
}

/** A context whose trace this session records. */
interface TracedContext {
  context: BrowserContext;
  /** Playwright's name for the trace: its working files in the browser's trace folder start with it. */
  name: string;
  folder: TraceFolder | undefined;
  /** Where its trace is saved. */
  file: string;
  /** Settles once tracing started: whether it did. */
  started: Promise<boolean>;
}

/** The step of the call that runs now: a group in the trace of the context it opened on. */
interface TraceStep {
  title: string;
  on: TracedContext | undefined;
  ended: boolean;
}

/** How long one tracing call (group, groupEnd) may take before the call it wraps goes on without it. */
const TRACE_OP_TIMEOUT_MS = 5_000;
/** Longest step title kept (member name and tool_use id). */
const TRACE_TITLE_MAX = 200;

/**
 * What a session needs from the browser it runs in: the BrowserManager (manager.ts), which
 * builds the sessions. It is named here, so this file does not import the manager that
 * imports it.
 */
export interface SessionHost {
  readonly options: {
    readonly viewport: { width: number; height: number };
    readonly urlPolicy?: UrlPolicy;
    readonly log: Logger;
  };
  /** How its sessions' actions settled, counted across them. */
  readonly actionSettles: SettleCounts;
  /** Where each tab reports drawing after pointer input (input-frames.ts); undefined for a headless browser. */
  readonly inputFrames: InputFrames | undefined;
  readonly downloadSettings: DownloadSettings;
  /** Bumped on every launch, so a session can tell its context died with an older browser. */
  readonly generation: number;
  /** Bumped whenever a browser disconnects, so a call can tell the browser died while it ran. */
  readonly deaths: number;
  /** Where the running browser's traces are written while they run; undefined if it could not be made. */
  readonly traceFolder: TraceFolder | undefined;
  /** The running browser, launching it if needed. */
  browserNow(): Promise<Browser>;
  /** A promise that rejects with BrowserCrashedError when a browser disconnects, until disposed. */
  watchDeath(): { died: Promise<never>; dispose: () => void };
  /** Whether the browser of `generation` still answers: one round trip, raced with its death. */
  answers(generation: number): Promise<boolean>;
  /** Whether the browser of `generation` is still the one running. */
  alive(generation: number): boolean;
}

/** What one call changed, for its result. */
export interface CallReport {
  tabs: TabEntry[];
  changes: BrowserStateChange[];
  /** Dialog notices for the model, one line each. */
  notices: string[];
  /** Whether the tab inventory differs from the one last reported. */
  tabsChanged: boolean;
}

/**
 * A browser's storage as Playwright saves and restores it (cookies, and each origin's localStorage and
 * IndexedDB): what a named profile holds (docs/PROTOCOL.md "Profiles").
 */
export type StorageState = Awaited<ReturnType<BrowserContext['storageState']>>;

/** How long saving a context's storage may take: it visits, in a hidden page, each origin it has not open. */
const STORAGE_STATE_TIMEOUT_MS = 30_000;

export class BrowserSession {
  private context: BrowserContext | undefined;
  /** What every context of this session starts with (a profile's state): again after a crash. */
  private startState: StorageState | undefined;
  private contextGeneration = -1;
  private opening: Promise<BrowserContext> | undefined;
  /**
   * The browser died between this session's calls and took its tabs: the next
   * call that acts on a tab fails with BrowserCrashedError rather than act on a
   * new blank tab as if it were the page the model left (a `get_page_text` used
   * to answer "The page has no visible text." for a page that was gone).
   */
  private tabsLost = false;
  /** The tab inventory the model last saw. */
  private lastReported = '';
  /**
   * Tabs whose `tab_opened` could not go out yet: opened by a page during a
   * `new_tab` call (whose result may report only its own tab), or during a
   * call that failed. It goes out with the next result that carries a
   * browser_state.
   */
  private heldOpened: string[] = [];
  private readonly notices = new Notices();
  private readonly tabs = new Tabs();
  private readonly call: CallWatch;
  /**
   * Each tab's own CDP session, once it listens (watchPopups): the one that
   * hears the tab's `Page.frameRequestedNavigation`, so a round trip on it
   * after an action is ordered with those events (CallWatch.actionSettled).
   */
  private readonly watched = new WeakMap<Page, Promise<CDPSession | undefined>>();
  private readonly downloads: Downloads;
  private readonly guard: NavigationGuard;
  /** Set by recordTrace: every context of this session records a trace, until close() saves it. */
  private traceOptions: TraceOptions | undefined;
  /** The context whose trace runs now. */
  private traced: TracedContext | undefined;
  /** Contexts traced so far: the first trace is `path`, later ones (after a crash) `-2`, `-3` … */
  private tracesStarted = 0;
  private step: TraceStep | undefined;
  /** Trace files saved, in order. */
  readonly traceFiles: string[] = [];

  constructor(
    private readonly manager: SessionHost,
    readonly id: string,
  ) {
    this.call = new CallWatch(manager.actionSettles);
    this.downloads = new Downloads(id, manager.downloadSettings, this.notices);
    this.guard = new NavigationGuard(manager.options.urlPolicy, this.notices);
  }

  /** This session's context, created (again, after a crash) as needed. */
  async contextNow(): Promise<BrowserContext> {
    if (this.context && this.contextGeneration === this.manager.generation && this.connected()) {
      return this.context;
    }
    this.opening ??= this.openContext().finally(() => (this.opening = undefined));
    return this.opening;
  }

  private connected(): boolean {
    return this.context?.browser()?.isConnected() ?? false;
  }

  private async openContext(): Promise<BrowserContext> {
    // Tabs of a dead context died with it; their ids are not reused.
    // A context opened again (the browser died) while the model still thought it had tabs there.
    if (this.context && (this.tabs.size > 0 || this.tabs.goneUnasked > 0) && !this.tabsLost) {
      this.tabsLost = true;
      this.notices.add(TABS_LOST_NOTICE);
    }
    this.tabs.goneUnasked = 0;
    this.tabs.clear();
    this.heldOpened = [];
    this.call.contextLost();
    const browser = await this.manager.browserNow();
    // The steps a call can wait on Chromium in are logged as they begin: a call stuck there shows
    // where (test/faults-browser-setup.test.ts kills Chromium in them).
    this.log.debug('browser context opening', { session: this.id });
    const context = await browser.newContext({
      viewport: this.manager.options.viewport,
      acceptDownloads: true,
      // Playwright restores it before the context is handed back: a state that fails leaves no context.
      ...(this.startState ? { storageState: this.startState } : {}),
    });
    this.context = context;
    this.contextGeneration = this.manager.generation;
    // Before the first page, so the trace holds all of them.
    if (this.traceOptions) await this.startTrace(context);
    context.on('page', (page) => this.register(page));
    // The operator's host lists guard page-started navigations from a context's first page on.
    const policy = this.guard.inForce;
    if (policy) await this.guardNavigations(policy);
    return context;
  }

  /**
   * Opens this session's context with `state` (a profile's cookies and
   * storage), now: it rejects, and the session keeps no context, when the
   * browser refuses the state. Later contexts (after a crash) start with it
   * too.
   */
  async startWith(state: StorageState): Promise<void> {
    if (this.context || this.opening) throw new Error('the session already has a browser context');
    this.startState = state;
    try {
      await this.contextNow();
    } catch (err) {
      this.startState = undefined;
      throw err;
    }
  }

  /**
   * The context's cookies and each origin's localStorage and IndexedDB now
   * (Playwright's storage state), or undefined when the session has no live
   * context (it never used the browser, or the browser died).
   */
  async storageState(): Promise<StorageState | undefined> {
    const context = this.context;
    if (!context || this.contextGeneration !== this.manager.generation || !this.connected()) return undefined;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`the browser did not give its storage within ${STORAGE_STATE_TIMEOUT_MS} ms`)),
        STORAGE_STATE_TIMEOUT_MS,
      );
    });
    try {
      return await Promise.race([context.storageState({ indexedDB: true }), late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Refuses navigations the page starts itself (links, scripts, redirects by
   * script) to URLs the operator's host lists refuse (navigation-guard.ts).
   */
  async guardNavigations(policy: UrlPolicy): Promise<void> {
    await this.guard.guard(policy, () => this.contextNow());
  }

  /** The host lists in force, if the operator set any. */
  policyWithLists(): UrlPolicy | undefined {
    return this.guard.policyWithLists();
  }

  private register(page: Page): string {
    const known = this.tabs.idOf(page);
    if (known) return known;
    if (this.tabs.size >= TABS_MAX) {
      // browser_state lists at most 100 tabs; a page that opens more loses the extra ones.
      this.notices.add(`A tab the page opened was closed: at most ${TABS_MAX} tabs can be open.`);
      void page.close().catch(() => undefined);
      return '';
    }
    const id = this.tabs.add(page);
    this.call.tabOpened(id);
    this.watched.set(page, this.watchPopups(page));
    page.on('close', () => this.tabs.closed(id));
    page.on('framenavigated', (frame) => {
      if (frame === page.mainFrame()) this.guard.checkLanding(page, frame.url());
    });
    page.on('request', (request) => this.call.onRequest(page, request));
    page.on('dialog', (dialog) => void answerDialog(dialog, this.notices));
    page.on('download', (download) => this.downloads.track(download));
    // With a listener, Playwright intercepts the native file chooser, which then never opens: files
    // reach pages only through file_upload (off by default, upload roots only).
    page.on('filechooser', () => this.notices.add(FILE_CHOOSER_NOTICE));
    return id;
  }

  /**
   * Counts the popups a tab opens, from the moment Chromium decides to open
   * them, and the navigations it is asked for; resolves to the tab's CDP
   * session once it listens (undefined if the tab closed first).
   */
  private async watchPopups(page: Page): Promise<CDPSession | undefined> {
    try {
      const cdp = await page.context().newCDPSession(page);
      cdp.on('Page.windowOpen', () => this.call.popupAnnounced());
      // Downloads in this tab, while Chromium receives them: the session's byte cap applies before one is saved.
      cdp.on('Page.downloadWillBegin', (event) => this.downloads.willBegin(event.guid, event.url));
      cdp.on('Page.downloadProgress', (event) => this.downloads.progress(event));
      // Sent by the renderer when a navigation is asked for: while a link click or a click handler
      // setting `location` is dispatched (before the click returns), or in the task a form's
      // submission runs in (just after). The navigation's request comes later (measured: the
      // result of a link click still showed the old URL when only requests were watched).
      const mainFrameId = (await cdp.send('Page.getFrameTree')).frameTree.frame.id;
      cdp.on('Page.frameRequestedNavigation', (event) => {
        if (event.disposition === 'currentTab' && event.frameId === mainFrameId) this.call.awaitDocument(page);
      });
      await cdp.send('Page.enable');
      // Not awaited: a tab that cannot report only leaves the desktop's settle step its reaction window.
      this.manager.inputFrames
        ?.attach(cdp)
        .catch((err: unknown) => this.log.debug('tab does not report its frames after input', { error: String(err) }));
      return cdp;
    } catch {
      return undefined; // the tab closed first
    }
  }

  /**
   * One command on the tab's own CDP session, answered by its renderer's
   * main thread after the action's input: the renderer's
   * `Page.frameRequestedNavigation` for a navigation that input asked for was
   * sent before the answer, on the same session, so it has arrived by then.
   * A form's submission, or a script's `setTimeout(…, 0)` that sets
   * `location`, runs in a task the input queued: the command answers only
   * after a zero-delay timer of its own, queued behind those, has run (a
   * page that replaces `setTimeout` can only make it wait for the 200 ms cap
   * of CallWatch.actionSettled).
   */
  private roundTrip(page: Page): (() => Promise<unknown>) | undefined {
    const watched = this.watched.get(page);
    if (!watched) return undefined;
    return async () => {
      const cdp = await watched;
      if (!cdp) throw new Error('the tab has no CDP session');
      return cdp.send('Runtime.evaluate', {
        expression: 'new Promise((done) => setTimeout(done, 0))',
        awaitPromise: true,
        silent: true,
        returnByValue: true,
      });
    };
  }

  private noTab(tabId: string): ToolInputError {
    return new ToolInputError(
      `There is no open tab with tab_id ${oneLine(tabId).slice(0, 100)}; list_tabs shows the open tabs.`,
    );
  }

  /**
   * The tab a call acts on: `tabId`, or the active tab; a session with no tab
   * opens one. `opensPage`: the call loads a page of its own (navigate to a
   * URL), so it may run in a fresh tab after the browser lost the old ones.
   */
  async page(tabId?: string | null, opensPage = false): Promise<{ page: Page; tabId: string }> {
    await this.contextNow();
    if (this.tabsLost && !opensPage) {
      // Once: the notice tells the rest on the next successful result.
      this.tabsLost = false;
      throw new BrowserCrashedError("the browser went away since this session's last call, and its tabs with it");
    }
    if (tabId) {
      const page = this.tabs.page(tabId);
      if (!page) throw this.noTab(tabId);
      return { page, tabId };
    }
    const active = this.tabs.active;
    if (active) {
      const page = this.tabs.page(active);
      if (page) return { page, tabId: active };
    }
    const id = await this.newTab();
    return { page: this.tabs.page(id)!, tabId: id };
  }

  /** new_tab: a new tab, the active one, and the only tab_opened its result will carry. */
  async openNewTab(): Promise<string> {
    const token = this.call.currentToken;
    const id = await this.newTab();
    // A new_tab that timed out and finished late must not shape the result of the call that runs now.
    if (this.call.current(token)) this.call.newTab = id;
    return id;
  }

  async newTab(): Promise<string> {
    const context = await this.contextNow();
    if (this.tabs.size >= TABS_MAX) {
      throw new ToolInputError(`At most ${TABS_MAX} tabs can be open; close one with close_tab first.`);
    }
    this.call.openingTab = true;
    this.log.debug('browser tab opening', { session: this.id });
    const page = await context.newPage().finally(() => (this.call.openingTab = false));
    if (context !== this.context) throw new BrowserCrashedError('the browser went away while a tab opened');
    // The context's 'page' event has usually registered it already; register() returns the same id then.
    const id = this.register(page);
    this.tabs.activate(id);
    return id;
  }

  switchTab(tabId: string): void {
    const page = this.tabs.page(tabId);
    if (!page) throw this.noTab(tabId);
    this.tabs.activate(tabId);
    void page.bringToFront().catch(() => undefined);
  }

  async closeTab(tabId: string): Promise<void> {
    const page = this.tabs.page(tabId);
    if (!page) throw this.noTab(tabId);
    this.tabs.closingAsked(tabId);
    await page.close({ runBeforeUnload: false });
    this.tabs.forget(tabId);
  }

  /** How many downloads this session has seen begin. */
  get downloadCount(): number {
    return this.downloads.count;
  }

  /**
   * Waits (up to `ms`) for a download after the first `count`: a navigation
   * that turned into a download can fail before Playwright announces the download.
   */
  downloadSince(count: number, ms: number): Promise<boolean> {
    return this.downloads.since(count, ms);
  }

  /** Console lines of a tab since the last read, oldest first; reading empties the buffer. */
  drainConsole(tabId: string): string[] {
    return this.tabs.log(tabId)?.drainConsole() ?? [];
  }

  /** Requests of a tab that finished or failed since the last read, oldest first; reading empties the buffer. */
  drainNetwork(tabId: string): Request[] {
    return this.tabs.log(tabId)?.drainNetwork() ?? [];
  }

  /** See SessionHost.watchDeath (BrowserManager.watchDeath). */
  watchDeath(): { died: Promise<never>; dispose: () => void } {
    return this.manager.watchDeath();
  }

  /** Starts a call; the token lets a timed-out call that finishes late be ignored. */
  beginCall(): object {
    return this.call.begin(this.manager.deaths);
  }

  /**
   * Ends a call. On success, reports the inventory, the tabs this call opened
   * that are still open, and every pending download event (one per download:
   * the latest). On failure, everything (`tab_opened` too) waits for the next
   * successful result (docs/TOOLSETS.md C4). Either way, a browser
   * that died during the call makes the call fail with BrowserCrashedError.
   */
  async endCall(token: object, ok: boolean, acted = false): Promise<CallReport | undefined> {
    // A call that timed out and finished later must not end the call that runs now.
    if (!this.call.current(token)) return undefined;
    if (ok) await this.settle(acted);
    if (!this.call.current(token)) return undefined;
    const { opened: openedDuringCall, newTab, deathsAtBegin } = this.call.end();
    // Whatever error the call failed with (Playwright's own, a timeout), a browser that died
    // during it is the cause; a call that relaunched and finished on a live browser is fine.
    const died = this.manager.deaths !== deathsAtBegin;
    if (died && (!ok || !this.manager.alive(this.contextGeneration))) {
      throw new BrowserCrashedError('the browser went away during the call');
    }
    if (!ok) {
      // A failed result carries no browser_state: the tabs it opened are news for the next one (as the SDK's runner holds them).
      this.heldOpened.push(...openedDuringCall);
      return undefined;
    }
    // Tabs that went away unasked: a page that closed itself, or a browser dying right now (its
    // pages close before its disconnect is reported); an empty inventory must not pass for the
    // session's tabs then.
    if (this.tabs.goneUnasked > 0 && !(await this.manager.answers(this.contextGeneration))) {
      throw new BrowserCrashedError('the browser went away during the call');
    }
    // This result shows the tabs there are now, and the notice.
    this.tabsLost = false;
    this.tabs.goneUnasked = 0;
    let tabs = await this.tabs.inventory();
    // A popup a page opened while new_tab ran (or while its titles were read) came to the front;
    // the model asked for the new tab.
    const newPage = newTab === undefined ? undefined : this.tabs.page(newTab);
    if (newPage && tabs.some((t) => t.tab_id === newTab && !t.active)) {
      this.tabs.activate(newTab!);
      tabs = tabs.map(({ active: _, ...t }) => (t.tab_id === newTab ? { ...t, active: true } : t));
      void newPage.bringToFront().catch(() => undefined);
    }
    // Only tabs still open once the inventory is taken: a popup may close while titles are read.
    const open = new Set(tabs.map((t) => t.tab_id));
    let opened = [...new Set([...this.heldOpened, ...openedDuringCall])].filter((id) => open.has(id));
    this.heldOpened = [];
    if (newTab !== undefined) {
      if (!open.has(newTab) || !tabs.some((t) => t.tab_id === newTab && t.active)) {
        this.heldOpened = opened;
        throw new TabStateError(NEW_TAB_NOT_ACTIVE_TEXT);
      }
      // The API accepts on a new_tab result exactly one tab_opened, its own: others wait for the next result.
      this.heldOpened = opened.filter((id) => id !== newTab);
      opened = [newTab];
    }
    const changes: BrowserStateChange[] = [
      ...opened.map((tab_id): BrowserStateChange => ({ type: 'tab_opened', tab_id })),
      ...this.downloads.latest(),
    ].slice(0, STATE_CHANGES_MAX);
    // What does not fit in this block (at most 200 changes) waits for the next one.
    this.downloads.sent(changes);
    const notices = this.notices.lines();
    const signature = JSON.stringify(tabs);
    const tabsChanged = signature !== this.lastReported;
    return { tabs, changes, notices, tabsChanged };
  }

  /**
   * Lets what the call set off land in this call's result: a navigation an
   * action asked for, a popup that Chromium created but Playwright has not
   * announced yet, and downloads being saved; then the navigations it set off.
   */
  private async settle(acted: boolean): Promise<void> {
    const active = this.tabs.active;
    const page = active ? this.tabs.page(active) : undefined;
    await this.call.actionSettled(page && this.roundTrip(page), acted);
    await this.call.popupsSettled(() => this.connected());
    await this.downloads.settle();
    await this.call.navigationsSettled();
  }

  /** Whether `token` is the call that runs now (not one that timed out and finished late). */
  ownsCall(token: object): boolean {
    return this.call.current(token);
  }

  /** The notices waiting for the model, now shown on a failed call's result (as the SDK's runner shows them). */
  takeNotices(): string[] {
    const lines = this.notices.lines();
    this.notices.clear();
    this.downloads.noticeShown();
    return lines;
  }

  /** Records that a report was sent (its notices shown, its inventory known to the model). */
  reported(report: CallReport, noticesShown: boolean): void {
    this.lastReported = JSON.stringify(report.tabs);
    if (noticesShown) {
      this.notices.clear();
      this.downloads.noticeShown();
    }
  }

  /**
   * Records a Playwright trace of this session's browser (snapshots,
   * screenshots, network, console; each call a named step, traceStep),
   * saved at `options.path` when the session closes. Starts now on a context
   * that is open, else when one opens. A second call changes the options the
   * save uses.
   */
  /**
   * A person typed on the desktop (a takeover): the trace saved from now on keeps no form field's value, so
   * nothing they typed into this session's pages is in it.
   */
  redactTraceFields(): void {
    if (this.traceOptions) this.traceOptions.redactFields = true;
  }

  async recordTrace(options: TraceOptions): Promise<void> {
    this.traceOptions = { ...options };
    const context = this.context;
    if (context && this.contextGeneration === this.manager.generation && this.connected()) {
      await this.startTrace(context);
    }
  }

  private get log() {
    return this.manager.options.log;
  }

  private startTrace(context: BrowserContext): Promise<void> {
    const options = this.traceOptions;
    if (!options) return Promise.resolve();
    if (this.traced?.context === context) return this.traced.started.then(() => undefined);
    // A context traced before this one died with the browser: its trace could not be stopped.
    if (this.traced) this.traceLost(this.traced);
    const n = ++this.tracesStarted;
    const ext = extname(options.path);
    const file = n === 1 ? options.path : `${options.path.slice(0, options.path.length - ext.length)}-${n}${ext}`;
    const name = randomUUID();
    const folder = this.manager.traceFolder;
    const started = context.tracing
      .start({ name, screenshots: options.screenshots ?? true, snapshots: true, title: `deskbatch session ${this.id}` })
      .then(
        () => {
          folder?.opened();
          return true;
        },
        (err: unknown) => {
          this.log.warn('browser trace did not start', { session: this.id, error: errorText(err) });
          return false;
        },
      );
    const traced: TracedContext = { context, name, folder, file, started };
    this.traced = traced;
    return started.then(async (ok) => {
      // The call that runs now opened this context: its step goes into this trace.
      const step = this.step;
      if (ok && step && !step.on && !step.ended && this.traced === traced) await this.openStep(step, traced);
    });
  }

  private traceLost(traced: TracedContext): void {
    this.log.warn("the browser went away: this session's trace of it could not be saved", {
      session: this.id,
      trace: basename(traced.file),
    });
  }

  /** Whether `traced` is the trace that runs now, on a live context. */
  private tracing(traced: TracedContext | undefined): traced is TracedContext {
    return !!traced && traced === this.traced && traced.context === this.context && this.connected();
  }

  /** One tracing call, bounded, its failure logged: a call never fails or waits long for its trace. */
  private async traceOp(what: string, op: () => Promise<unknown>): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), TRACE_OP_TIMEOUT_MS);
      timer.unref();
    });
    try {
      const done = op().catch((err: unknown) => {
        this.log.warn(`browser trace: ${what} failed`, { session: this.id, error: errorText(err) });
      });
      if ((await Promise.race([done, late])) === 'late') {
        this.log.warn(`browser trace: ${what} took too long`, { session: this.id, ms: TRACE_OP_TIMEOUT_MS });
      }
    } finally {
      clearTimeout(timer);
    }
  }

  private async openStep(step: TraceStep, traced: TracedContext): Promise<void> {
    step.on = traced;
    await this.traceOp('group', () => traced.context.tracing.group(step.title));
  }

  private async endStep(step: TraceStep): Promise<void> {
    if (step.ended) return;
    step.ended = true;
    const traced = step.on;
    // A trace stopped (saved, or lost with its browser) closed its groups itself.
    if (this.tracing(traced)) await this.traceOp('groupEnd', () => traced.context.tracing.groupEnd());
  }

  /**
   * Runs one call as a named step of the trace (`title`: `member · tool_use_id`),
   * when this session records one. The step ends however the call ends (an
   * error, a timeout, a cancel); a tracing failure is logged, never the
   * call's. A call that opens the context gets its step once tracing starts.
   */
  async traceStep<T>(title: string, fn: () => Promise<T>): Promise<T> {
    if (!this.traceOptions) return fn();
    // Groups nest: a call that outlived its turn (timed out, still running) ends its step now,
    // so this call's step is not inside it.
    if (this.step) await this.endStep(this.step);
    const step: TraceStep = { title: oneLine(title).slice(0, TRACE_TITLE_MAX), on: undefined, ended: false };
    this.step = step;
    const traced = this.traced;
    if (this.tracing(traced) && (await traced.started) && this.step === step) await this.openStep(step, traced);
    try {
      return await fn();
    } finally {
      if (this.step === step) this.step = undefined;
      await this.endStep(step);
    }
  }

  /**
   * Saves the trace (close() does, and BrowserManager.close before the
   * browser goes): Playwright writes it to a temporary file beside
   * `path`, rewritten there as the options say (src/browser/trace-rewrite.ts),
   * then renamed to `path`. After this the session records no trace.
   * Never throws: a trace that cannot be saved is logged.
   */
  async saveTrace(): Promise<void> {
    const traced = this.traced;
    const options = this.traceOptions;
    this.traced = undefined;
    this.traceOptions = undefined;
    if (!traced || !options || !(await traced.started)) return;
    if (traced.context !== this.context || !this.connected()) {
      this.traceLost(traced);
      return;
    }
    const dir = dirname(traced.file);
    const temp = join(dir, `.${basename(traced.file)}.${randomUUID()}`);
    const raw = `${temp}.raw`;
    const rewritten = `${temp}.tmp`;
    const t0 = performance.now();
    let entries: string[] = [];
    try {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      // Closes the groups still open: a call still running when the session ends is saved as far as it got.
      await traced.context.tracing.stop({ path: raw });
      await chmod(raw, 0o600);
      entries = await entryNames(raw);
      const report = await rewriteTrace(raw, rewritten, options);
      await rename(rewritten, traced.file);
      this.traceFiles.push(traced.file);
      this.log.info('browser trace saved', {
        session: this.id,
        trace: basename(traced.file),
        bytes: report.bytesOut,
        bodies_dropped: report.bodiesDropped,
        redactions: report.redactions,
        ms: Math.round(performance.now() - t0),
      });
    } catch (err) {
      this.log.warn('browser trace not saved', { session: this.id, error: errorText(err) });
      await rm(rewritten, { force: true }).catch(() => undefined);
    } finally {
      // Playwright's own file holds what the rewrite left out: never kept; nor its working files.
      await rm(raw, { force: true }).catch(() => undefined);
      await traced.folder?.ended(traced.name, entries);
    }
  }

  async close(): Promise<void> {
    this.downloads.stop();
    // Before the context closes: its trace is stopped and saved from it.
    await this.saveTrace();
    await this.context?.close().catch(() => undefined);
    this.context = undefined;
    this.tabs.clear();
    // Downloads end with the session: those still being saved first, then its folder (docs/SECURITY.md).
    await this.downloads.discard();
  }
}

/** The names in a zip, or none if it cannot be read. */
async function entryNames(path: string): Promise<string[]> {
  const zip = await ZipReader.open(path).catch(() => undefined);
  if (!zip) return [];
  const names = zip.entries.map((e) => e.name);
  await zip.close();
  return names;
}

function errorText(err: unknown): string {
  return oneLine(err instanceof Error ? err.message : String(err)).slice(0, 300);
}
