/**
 * The browser driver: one Chromium (Debian's, never a downloaded one), started
 * on first use and kept warm, relaunched after a crash; one BrowserContext per
 * session, so sessions never see each other's tabs, cookies or storage.
 *
 * A BrowserSession owns its tabs. Tab ids are assigned here (`tab-1`, `tab-2`,
 * …) and never reused within the session. Tabs the page opens (window.open,
 * target=_blank) are tracked, and a tab opened during a call is reported as
 * `tab_opened` on that call's result. Downloads and dialogs are handled here
 * so a call never hangs on them; what happened is collected for the result.
 */
import { mkdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Dialog, type Download, type Page } from 'playwright';
import { ToolInputError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { BrowserStateChange } from '../protocol.ts';
import { sanitizeId } from '../screenshot-store.ts';

export type BrowserMode = 'headless' | 'headful';

export interface BrowserOptions {
  mode: BrowserMode;
  /** X display for headful mode; headless is used when there is none. */
  display: string | undefined;
  executablePath: string;
  /** Where downloads are saved, one folder per session. */
  downloadsDir: string;
  viewport: { width: number; height: number };
  launchTimeoutMs: number;
  log: Logger;
}

/** The browser process went away during the call; the next call relaunches it. */
export class BrowserCrashedError extends Error {
  override readonly name = 'BrowserCrashedError';
  readonly retryable = true;
}

/** Chromium switches that matter on a VM with no outside network (shared/notes/MEASURED.md). */
const CHROMIUM_ARGS = [
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--disable-quic',
];
/** Dialog notices: the SDK's caps (TOOLSET-CONTRACT D2). */
const DIALOG_MESSAGE_MAX = 200;
const DIALOG_NOTICES_MAX = 3;

export class BrowserManager {
  private browser: Browser | undefined;
  private launching: Promise<Browser> | undefined;
  private readonly sessions = new Map<string, BrowserSession>();
  /** Bumped on every launch, so a session can tell its context died with an older browser. */
  generation = 0;

  constructor(readonly options: BrowserOptions) {}

  /** The running browser, launching it if needed. */
  async browserNow(): Promise<Browser> {
    if (this.browser?.isConnected()) return this.browser;
    this.launching ??= this.launch().finally(() => (this.launching = undefined));
    return this.launching;
  }

  private async launch(): Promise<Browser> {
    const { mode, display, executablePath, launchTimeoutMs, log } = this.options;
    const headless = mode === 'headless' || !display;
    const t0 = performance.now();
    const browser = await chromium.launch({
      executablePath,
      headless,
      args: CHROMIUM_ARGS,
      timeout: launchTimeoutMs,
      env: { ...process.env, ...(display ? { DISPLAY: display } : {}) },
    });
    this.generation++;
    this.browser = browser;
    browser.on('disconnected', () => {
      if (this.browser === browser) this.browser = undefined;
      log.warn('browser disconnected', { generation: this.generation });
    });
    log.info('browser launched', { headless, ms: Math.round(performance.now() - t0) });
    return browser;
  }

  session(id: string): BrowserSession {
    let s = this.sessions.get(id);
    if (!s) {
      s = new BrowserSession(this, id);
      this.sessions.set(id, s);
    }
    return s;
  }

  async closeSession(id: string): Promise<void> {
    const s = this.sessions.get(id);
    this.sessions.delete(id);
    await s?.close();
  }

  /** The browser process's pid, for tests that crash it on purpose. */
  get pid(): number | undefined {
    const proc = (this.browser as unknown as { _process?: { pid?: number } } | undefined)?._process;
    return proc?.pid;
  }

  async close(): Promise<void> {
    for (const id of [...this.sessions.keys()]) await this.closeSession(id);
    await this.browser?.close().catch(() => undefined);
    this.browser = undefined;
  }
}

export interface TabEntry {
  tab_id: string;
  title: string;
  url: string;
  active?: boolean;
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

export class BrowserSession {
  private context: BrowserContext | undefined;
  private contextGeneration = -1;
  private opening: Promise<BrowserContext> | undefined;
  private readonly tabs = new Map<string, Page>();
  private readonly ids = new WeakMap<Page, string>();
  private activeId: string | undefined;
  private nextTab = 1;
  private nextDownload = 1;
  /** Tabs opened since the current call began. */
  private openedDuringCall: string[] = [];
  private inCall = false;
  /** Download events not yet reported (they survive failed calls). */
  private pendingChanges: BrowserStateChange[] = [];
  private pendingNotices: string[] = [];
  private lastReported = '';

  constructor(
    private readonly manager: BrowserManager,
    readonly id: string,
  ) {}

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
    this.tabs.clear();
    this.activeId = undefined;
    const browser = await this.manager.browserNow();
    const context = await browser.newContext({
      viewport: this.manager.options.viewport,
      acceptDownloads: true,
    });
    this.context = context;
    this.contextGeneration = this.manager.generation;
    context.on('page', (page) => this.register(page));
    return context;
  }

  private register(page: Page): string {
    const known = this.ids.get(page);
    if (known) return known;
    const id = `tab-${this.nextTab++}`;
    this.ids.set(page, id);
    this.tabs.set(id, page);
    // A tab the page opened comes to the front, as it does for a person.
    this.activeId = id;
    if (this.inCall) this.openedDuringCall.push(id);
    page.on('close', () => {
      this.tabs.delete(id);
      if (this.activeId === id) this.activeId = [...this.tabs.keys()].at(-1);
    });
    page.on('dialog', (dialog) => void this.onDialog(dialog));
    page.on('download', (download) => void this.onDownload(download));
    return id;
  }

  private async onDialog(dialog: Dialog): Promise<void> {
    const kind = dialog.type().slice(0, 20);
    const message = oneLine(dialog.message()).slice(0, DIALOG_MESSAGE_MAX);
    const article = /^[aeiou]/i.test(kind) ? 'An' : 'A';
    // Leaving a page must not hang a navigation: beforeunload is accepted, every other dialog dismissed.
    if (kind === 'beforeunload') {
      this.pendingNotices.push(`${article} ${kind} dialog "${message}" was accepted, so the page could be left.`);
      await dialog.accept().catch(() => undefined);
    } else {
      this.pendingNotices.push(`${article} ${kind} dialog "${message}" was dismissed.`);
      await dialog.dismiss().catch(() => undefined);
    }
  }

  private async onDownload(download: Download): Promise<void> {
    const downloadId = `dl-${this.nextDownload++}`;
    const url = download.url();
    this.pendingChanges.push({ type: 'download_started', download_id: downloadId, url });
    try {
      const dir = join(this.manager.options.downloadsDir, sanitizeId(this.id));
      await mkdir(dir, { recursive: true });
      const path = join(dir, `${downloadId}-${safeFileName(download.suggestedFilename())}`);
      await download.saveAs(path);
      const size = (await stat(path)).size;
      this.pendingChanges.push({
        type: 'download_completed',
        download_id: downloadId,
        url,
        path,
        size_bytes: size,
      });
    } catch {
      // A fixed phrase: the error's own text may carry paths (TOOLSET-CONTRACT D3).
      this.pendingChanges.push({ type: 'download_failed', download_id: downloadId, url, error: 'the download failed' });
    }
  }

  /** The tab a call acts on: `tabId`, or the active tab; a session with no tab opens one. */
  async page(tabId?: string | null): Promise<{ page: Page; tabId: string }> {
    await this.contextNow();
    if (tabId) {
      const page = this.tabs.get(tabId);
      if (!page)
        throw new ToolInputError(
          `There is no open tab with tab_id ${oneLine(tabId).slice(0, 100)}; list_tabs shows the open tabs.`,
        );
      return { page, tabId };
    }
    if (this.activeId) {
      const page = this.tabs.get(this.activeId);
      if (page) return { page, tabId: this.activeId };
    }
    const id = await this.newTab();
    return { page: this.tabs.get(id)!, tabId: id };
  }

  async newTab(): Promise<string> {
    const context = await this.contextNow();
    const page = await context.newPage();
    const id = this.register(page);
    this.activeId = id;
    return id;
  }

  switchTab(tabId: string): void {
    const page = this.tabs.get(tabId);
    if (!page)
      throw new ToolInputError(
        `There is no open tab with tab_id ${oneLine(tabId).slice(0, 100)}; list_tabs shows the open tabs.`,
      );
    this.activeId = tabId;
    void page.bringToFront().catch(() => undefined);
  }

  async closeTab(tabId: string): Promise<void> {
    const page = this.tabs.get(tabId);
    if (!page)
      throw new ToolInputError(
        `There is no open tab with tab_id ${oneLine(tabId).slice(0, 100)}; list_tabs shows the open tabs.`,
      );
    await page.close({ runBeforeUnload: false });
  }

  get activeTabId(): string | undefined {
    return this.activeId;
  }

  beginCall(): void {
    this.inCall = true;
    this.openedDuringCall = [];
  }

  /**
   * Ends a call. On success, reports the inventory, the tabs this call opened
   * that are still open, and every pending download event (one per download:
   * the latest). On failure, `tab_opened` is dropped and the rest waits for
   * the next successful result (TOOLSET-CONTRACT C4).
   */
  async endCall(ok: boolean): Promise<CallReport | undefined> {
    this.inCall = false;
    const opened = this.openedDuringCall.filter((id) => this.tabs.has(id));
    this.openedDuringCall = [];
    if (!ok) return undefined;
    const tabs = await this.inventory();
    const latest = new Map<string, BrowserStateChange>();
    for (const change of this.pendingChanges) if ('download_id' in change) latest.set(change.download_id, change);
    this.pendingChanges = [];
    const changes: BrowserStateChange[] = [
      ...opened.map((tab_id): BrowserStateChange => ({ type: 'tab_opened', tab_id })),
      ...latest.values(),
    ];
    const notices = this.pendingNotices.slice(0, DIALOG_NOTICES_MAX);
    if (this.pendingNotices.length > DIALOG_NOTICES_MAX) {
      notices.push(`${this.pendingNotices.length - DIALOG_NOTICES_MAX} more dialogs were dismissed.`);
    }
    const signature = JSON.stringify(tabs);
    const tabsChanged = signature !== this.lastReported;
    return { tabs, changes, notices, tabsChanged };
  }

  /** Records that a report was sent (its notices shown, its inventory known to the model). */
  reported(report: CallReport, noticesShown: boolean): void {
    this.lastReported = JSON.stringify(report.tabs);
    if (noticesShown) this.pendingNotices = [];
  }

  async inventory(): Promise<TabEntry[]> {
    const entries: TabEntry[] = [];
    for (const [tab_id, page] of this.tabs) {
      const title = await page.title().catch(() => '');
      entries.push({ tab_id, title, url: page.url(), ...(tab_id === this.activeId ? { active: true } : {}) });
    }
    return entries;
  }

  async close(): Promise<void> {
    await this.context?.close().catch(() => undefined);
    this.context = undefined;
  }
}

/** A page-suggested file name reduced to `[A-Za-z0-9._-]`, never hidden or empty, so it cannot leave its folder. */
export function safeFileName(name: string): string {
  const clean = name
    .replace(/[^A-Za-z0-9._-]+/g, '_')
    .replace(/^[.]+/, '')
    .slice(0, 120);
  return clean || 'download';
}

function oneLine(value: string): string {
  return value.replace(/[\p{Cc}\u2028\u2029]+/gu, ' ').trim();
}
