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
import { lstat, mkdir, readdir, rm, stat } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BrowserMode } from '../config.ts';
import type { Browser, BrowserContext, ConsoleMessage, Dialog, Download, Page, Request } from 'playwright';
import { ToolInputError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { StartGuard } from '../resilience.ts';
import type { BrowserStateChange } from '../protocol.ts';
import { sanitizeId } from '../screenshot-store.ts';
import { oneLine } from '../text.ts';
import { isAllowedUrl, type UrlPolicy } from './url-policy.ts';

/** How the browser runs once it runs (the operator's `--browser`, minus `off`). */
export type LaunchMode = Exclude<BrowserMode, 'off'>;

export interface BrowserOptions {
  mode: LaunchMode;
  /** X display for headful mode; headless is used when there is none. */
  display: string | undefined;
  executablePath: string;
  /** Where downloads are saved, one folder per session, removed when the session ends. */
  downloadsDir: string;
  /** Downloads one session may start; later ones are cancelled before they are saved. */
  maxDownloads: number;
  /** Bytes one session's saved downloads may hold; a download that would pass it is cancelled, or deleted once saved. */
  maxDownloadBytes: number;
  /** Whether `download_completed` carries the saved file's path (only for an agent with a tool that can read it). */
  exposeDownloadPaths: boolean;
  viewport: { width: number; height: number };
  launchTimeoutMs: number;
  /** The URL policy, also applied to navigations pages start themselves. */
  urlPolicy?: UrlPolicy;
  /** The egress proxy every browser request goes through (src/browser/egress.ts), loopback included. */
  proxyServer?: string;
  /** Guards launches: after repeated failures, calls fail at once for a cool-down (src/resilience.ts). */
  launchGuard?: StartGuard;
  log: Logger;
}

/** The browser process went away during the call; the next call relaunches it. */
export class BrowserCrashedError extends Error {
  override readonly name = 'BrowserCrashedError';
  readonly code = 'ERR_BROWSER_CRASHED';
  readonly retryable = true;
  /** Its pages went with it: an automatic retry would act on a fresh, blank browser (src/resilience.ts). */
  readonly resetsState = true;
}

/** The browser could not be started, or its circuit is open after repeated failed starts. */
export class BrowserUnavailableError extends Error {
  override readonly name = 'BrowserUnavailableError';
  readonly code = 'ERR_BROWSER_UNAVAILABLE';
  readonly retryable = true;
}

/** Chromium switches that matter on a VM with no outside network (docs/MEASURED.md). */
const CHROMIUM_ARGS = [
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--disable-quic',
  // WebRTC may only use UDP through the proxy, which has none: no way around the egress proxy.
  '--force-webrtc-ip-handling-policy=disable_non_proxied_udp',
];
/** Dialog notices: the SDK's caps (docs/TOOLSETS.md D2). */
const DIALOG_MESSAGE_MAX = 200;
const DIALOG_NOTICES_MAX = 3;
/**
 * How long a call's end waits for a popup the call opened to reach Playwright
 * (measured 60–800 ms after the click returned on a loaded VM), and for a download to be saved.
 */
const POPUP_WAIT_MS = 1_500;
const DOWNLOAD_WAIT_MS = 2_000;
/** After an action: how long the round trip to the page may take, and the grace after it, for a navigation to start. */
const NAVIGATION_START_WAIT_MS = 200;
const NAVIGATION_START_GRACE_MS = 30;
/** browser_state limits (docs/TOOLSETS.md E). */
const TABS_MAX = 100;
const STATE_CHANGES_MAX = 200;
/** How long the inventory waits for one tab's title. */
const TITLE_WAIT_MS = 500;
/** How long a call waits for a navigation it set off to reach DOMContentLoaded. */
const NAVIGATION_WAIT_MS = 5_000;
/** Console messages and requests kept per tab between reads (oldest dropped first). */
const LOG_RING_MAX = 500;
/** Longest console line kept, in UTF-16 code units. */
const CONSOLE_LINE_MAX = 1_000;
const REFUSED_NAVIGATION_NOTICE = 'A navigation was refused.';
const FILE_CHOOSER_NOTICE = 'A file chooser was opened and closed: files reach pages only through file_upload.';
const TABS_LOST_NOTICE = 'The browser was restarted after a crash; the tabs open before were closed.';
/** Fixed, path-free texts for a download over the session's caps (docs/TOOLSETS.md D3). */
const DOWNLOAD_LIMIT_ERROR = "the session's download limit was reached";
const DOWNLOAD_FAILED = 'the download failed';
/** How saveDownload names a saved file (`dl-N-` and a safeFileName). */
const DOWNLOAD_FILE = /^dl-[0-9]+-[A-Za-z0-9._-]+$/;
/** The longest download path shown (with --expose-download-paths): a longer one would be cut, so it is left out. */
const DOWNLOAD_PATH_MAX = 4096;

export class BrowserManager {
  private browser: Browser | undefined;
  private launching: Promise<Browser> | undefined;
  private readonly sessions = new Map<string, BrowserSession>();
  private browserPid: number | undefined;
  /** Bumped on every launch, so a session can tell its context died with an older browser. */
  generation = 0;
  /** Bumped whenever a browser disconnects, so a call can tell the browser died while it ran. */
  deaths = 0;
  private readonly deathListeners = new Set<() => void>();
  /**
   * Whether Chromium's renderer sandbox is on: undefined until a launch tells.
   * Root cannot use it (Chromium refuses to start sandboxed as root), and a
   * kernel without unprivileged user namespaces cannot either; then the
   * browser runs without it and `sandboxOffReason` says why.
   */
  sandbox: boolean | undefined;
  sandboxOffReason: string | undefined;
  /** Settles once the download folders an earlier run left are removed; no download is saved before. */
  readonly downloadsSwept: Promise<void>;

  constructor(readonly options: BrowserOptions) {
    this.downloadsSwept = this.removeStaleDownloads();
  }

  /** The running browser, launching it if needed. */
  async browserNow(): Promise<Browser> {
    if (this.browser?.isConnected()) return this.browser;
    const guard = this.options.launchGuard;
    this.launching ??= (guard ? guard.run(() => this.launch()) : this.launch()).finally(
      () => (this.launching = undefined),
    );
    return this.launching;
  }

  private async launch(): Promise<Browser> {
    const { mode, display, executablePath, launchTimeoutMs, log } = this.options;
    const headless = mode === 'headless' || !display;
    const t0 = performance.now();
    // Imported on first launch: loading Playwright takes about 2.5 s of CPU here, which a daemon
    // started with the browser off, or one that never receives a browser call, should not pay.
    const { chromium } = await import('playwright');
    const start = (sandbox: boolean): Promise<Browser> =>
      chromium.launch({
        executablePath,
        headless,
        chromiumSandbox: sandbox,
        args: [
          ...CHROMIUM_ARGS,
          ...(this.options.proxyServer
            ? [`--proxy-server=${this.options.proxyServer}`, '--proxy-bypass-list=<-loopback>']
            : []),
        ],
        timeout: launchTimeoutMs,
        env: { ...process.env, ...(display ? { DISPLAY: display } : {}) },
      });
    const asRoot = process.getuid?.() === 0;
    let browser: Browser;
    try {
      if (this.sandbox === false) {
        browser = await start(false);
      } else if (asRoot) {
        this.sandboxOffReason = 'the daemon runs as root, and Chromium will not sandbox itself as root';
        browser = await start(false);
        this.sandbox = false;
      } else {
        try {
          browser = await start(true);
          this.sandbox = true;
        } catch (err) {
          const message = err instanceof Error ? err.message : String(err);
          if (!/sandbox/i.test(message)) throw err;
          // Usually: no unprivileged user namespaces and no setuid sandbox helper.
          this.sandboxOffReason = `the kernel does not let Chromium sandbox itself (${oneLine(message).slice(0, 200)})`;
          browser = await start(false);
          this.sandbox = false;
        }
      }
      if (!this.sandbox) log.warn('browser renderers run without their sandbox', { reason: this.sandboxOffReason });
    } catch (err) {
      // The caller reads the cause; the model reads only the type (paths stay out of its text).
      throw new BrowserUnavailableError(`the browser did not start: ${err instanceof Error ? err.message : err}`);
    }
    this.generation++;
    this.browser = browser;
    browser.on('disconnected', () => {
      if (this.browser === browser) {
        this.browser = undefined;
        this.browserPid = undefined;
      }
      this.deaths++;
      log.warn('browser disconnected', { generation: this.generation });
      for (const listener of [...this.deathListeners]) listener();
    });
    try {
      const cdp = await browser.newBrowserCDPSession();
      const info = (await cdp.send('SystemInfo.getProcessInfo')) as {
        processInfo: { type: string; id: number }[];
      };
      this.browserPid = info.processInfo.find((p) => p.type === 'browser')?.id;
      await cdp.detach();
    } catch (err) {
      log.warn('no browser CDP session', { error: String(err) });
    }
    log.info('browser launched', { headless, ms: Math.round(performance.now() - t0), pid: this.browserPid });
    return browser;
  }

  /**
   * A promise that rejects with BrowserCrashedError when a browser disconnects,
   * until disposed. Playwright leaves some calls pending for ever when the
   * browser dies under them (`newPage` in 1.65), so a call races this.
   */
  watchDeath(): { died: Promise<never>; dispose: () => void } {
    let listener!: () => void;
    const died = new Promise<never>((_, reject) => {
      listener = () => reject(new BrowserCrashedError('the browser went away during the call'));
    });
    died.catch(() => undefined); // observed by the race; never an unhandled rejection
    this.deathListeners.add(listener);
    return { died, dispose: () => this.deathListeners.delete(listener) };
  }

  /** Whether the browser of `generation` is still the one running. */
  alive(generation: number): boolean {
    return generation === this.generation && (this.browser?.isConnected() ?? false);
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
    // BrowserSession.close removes its download folder.
    await s?.close();
  }

  /**
   * At start: removes the session folders under the downloads dir that no
   * session owns (an earlier run's; no session outlives its daemon), as the
   * screenshot store's retention does. Only real folders directly inside it
   * that hold nothing but saved downloads (`dl-N-name` files): a symlink, or
   * a folder holding anything else (a downloads dir set to a home folder), is
   * left alone.
   */
  private async removeStaleDownloads(): Promise<void> {
    const root = resolve(this.options.downloadsDir);
    const entries = await readdir(root, { withFileTypes: true }).catch(() => []);
    let removed = 0;
    for (const entry of entries) {
      if (!entry.isDirectory()) continue;
      if ([...this.sessions.keys()].some((id) => sanitizeId(id) === entry.name)) continue;
      const inside = await readdir(join(root, entry.name), { withFileTypes: true }).catch(() => undefined);
      if (!inside?.every((f) => f.isFile() && DOWNLOAD_FILE.test(f.name))) {
        this.options.log.warn('left a folder in the downloads dir that holds more than downloads', {
          folder: entry.name,
        });
        continue;
      }
      if (await this.removeDownloadFolder(entry.name)) removed++;
    }
    if (removed) this.options.log.info('removed download folders of an earlier run', { folders: removed });
  }

  /** Removes the download folder of session `id`, with what it holds (BrowserSession.close). */
  async removeSessionDownloads(id: string): Promise<void> {
    await this.removeDownloadFolder(sanitizeId(id));
  }

  /**
   * Removes `<downloadsDir>/<name>` when it is a real folder directly inside
   * the downloads dir, and nothing else: rm removes a link inside it, never
   * what the link points to.
   */
  private async removeDownloadFolder(name: string): Promise<boolean> {
    const root = resolve(this.options.downloadsDir);
    const dir = join(root, name);
    if (dirname(dir) !== root) return false; // `..`, `.` or a separator: not a folder inside root
    try {
      if (!(await lstat(dir)).isDirectory()) return false; // a symlink, or a file: never followed
      await rm(dir, { recursive: true, force: true });
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
        this.options.log.warn('could not remove a download folder', { error: String(err) });
      }
      return false;
    }
  }

  /** The running browser process's pid (from CDP), for tests that crash it on purpose. */
  get pid(): number | undefined {
    return this.browser?.isConnected() ? this.browserPid : undefined;
  }

  async close(): Promise<void> {
    // Closing the browser closes every context with it; closing 32 contexts one by one first
    // took 18.7 s and overran the shutdown deadline (measured by the soak run).
    const sessions = [...this.sessions.values()];
    this.sessions.clear();
    await this.browser?.close().catch(() => undefined);
    this.browser = undefined;
    await Promise.all(sessions.map((s) => s.close()));
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

/** A tab and what it has logged since the model last read it. */
interface Tab {
  page: Page;
  console: string[];
  network: Request[];
}

export class BrowserSession {
  private context: BrowserContext | undefined;
  private contextGeneration = -1;
  private opening: Promise<BrowserContext> | undefined;
  private readonly tabs = new Map<string, Tab>();
  private readonly ids = new WeakMap<Page, string>();
  private activeId: string | undefined;
  private nextTab = 1;
  private nextDownload = 1;
  /** Tabs opened since the current call began. */
  private openedDuringCall: string[] = [];
  private inCall = false;
  /**
   * Popups Chromium announced (Page.windowOpen, sent before the click that
   * opens one returns) that Playwright has not yet turned into a Page: its
   * 'page' event can come several hundred ms after the call returned.
   */
  private popupsPending = 0;
  /** Set while newTab() opens a tab, so the tab is not taken for a popup. */
  private openingTab = false;
  /** Browser deaths counted when the call began: a death during the call fails it with BrowserCrashedError. */
  private deathsAtBegin = 0;
  /** Download events not yet reported (they survive failed calls). */
  private pendingChanges: BrowserStateChange[] = [];
  private pendingNotices: string[] = [];
  /** Downloads still being saved. */
  private readonly saving = new Set<Promise<void>>();
  /** The session's caps (BrowserOptions): bytes its saved downloads hold, and the downloads being saved. */
  private downloadBytes = 0;
  private readonly downloadsInFlight = new Set<Download>();
  /** Chromium's view of downloads in this session's tabs (Page.downloadWillBegin/downloadProgress), by guid. */
  private readonly downloadUrls = new Map<string, string>();
  private readonly downloadExpected = new Map<string, number>();
  /** Downloads cancelled because the session's bytes would pass the cap. */
  private readonly overByteCap = new WeakSet<Download>();
  /** Whether the download-limit notice waits for a result already (one per result, however many were refused). */
  private downloadLimitNoticed = false;
  /** Set by close(): nothing more is saved, and the download folder goes. */
  private closed = false;
  /** Navigations set off during the current call, each settling at DOMContentLoaded, failure or timeout. */
  private navigations: Promise<void>[] = [];
  private callToken: object = {};
  private droppedNotices = 0;
  private lastReported = '';
  /** The URL policy page-initiated navigations are checked against, and the context it was installed on. */
  private urlPolicy: UrlPolicy | undefined;
  private guardedContext: BrowserContext | undefined;
  /**
   * The browser died between this session's calls and took its tabs: the next
   * call that acts on a tab fails with BrowserCrashedError rather than act on a
   * new blank tab as if it were the page the model left (a `get_page_text` used
   * to answer "The page has no visible text." for a page that was gone).
   */
  private tabsLost = false;
  /** Tabs that closed since the last successful result without close_tab asking (see register). */
  private tabsGoneUnasked = 0;
  /** Tabs close_tab is closing. */
  private readonly closingOnRequest = new Set<string>();

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
    // A context opened again (the browser died) while the model still thought it had tabs there.
    if (this.context && (this.tabs.size > 0 || this.tabsGoneUnasked > 0) && !this.tabsLost) {
      this.tabsLost = true;
      this.notice(TABS_LOST_NOTICE);
    }
    this.tabsGoneUnasked = 0;
    this.tabs.clear();
    this.activeId = undefined;
    this.popupsPending = 0;
    this.openingTab = false; // a newPage() the old browser left pending never settles
    const browser = await this.manager.browserNow();
    const context = await browser.newContext({
      viewport: this.manager.options.viewport,
      acceptDownloads: true,
    });
    this.context = context;
    this.contextGeneration = this.manager.generation;
    context.on('page', (page) => this.register(page));
    // The operator's host lists guard page-started navigations from a context's first page on.
    const policy = this.urlPolicy ?? this.manager.options.urlPolicy;
    if (policy) await this.guardNavigations(policy);
    return context;
  }

  /**
   * Refuses navigations the page starts itself (links, scripts, redirects by
   * script) to URLs the operator's host lists refuse. Only installed when
   * there are lists: routing every request costs time and disables the cache.
   */
  async guardNavigations(policy: UrlPolicy): Promise<void> {
    if (!policy.allowHosts.length && !policy.denyHosts.length) return;
    this.urlPolicy = policy;
    const context = await this.contextNow();
    if (this.guardedContext === context) return;
    this.guardedContext = context;
    await context.route('**/*', async (route) => {
      const request = route.request();
      if (request.isNavigationRequest() && !isAllowedUrl(new URL(request.url()), policy)) {
        this.notice(REFUSED_NAVIGATION_NOTICE);
        await route.abort('blockedbyclient').catch(() => undefined);
      } else {
        await route.fallback().catch(() => undefined);
      }
    });
  }

  /** The host lists in force, if the operator set any. */
  policyWithLists(): UrlPolicy | undefined {
    const policy = this.urlPolicy ?? this.manager.options.urlPolicy;
    return policy && (policy.allowHosts.length || policy.denyHosts.length) ? policy : undefined;
  }

  /**
   * Where a page ended up must pass the host lists too: routing does not see
   * HTTP redirect hops, so an allowed host could redirect to a refused one.
   * Such a page is left for about:blank at once.
   */
  private checkLanding(page: Page, url: string): void {
    const policy = this.policyWithLists();
    if (!policy || !/^https?:/i.test(url) || isAllowedUrl(new URL(url), policy)) return;
    this.notice(REFUSED_NAVIGATION_NOTICE);
    void page.goto('about:blank').catch(() => undefined);
  }

  /** Keeps a notice for the model; a page looping alert() cannot grow the list without bound. */
  private notice(text: string): void {
    if (this.pendingNotices.length < DIALOG_NOTICES_MAX) this.pendingNotices.push(text);
    else this.droppedNotices++;
  }

  private register(page: Page): string {
    const known = this.ids.get(page);
    if (known) return known;
    if (this.tabs.size >= TABS_MAX) {
      // browser_state lists at most 100 tabs; a page that opens more loses the extra ones.
      this.notice(`A tab the page opened was closed: at most ${TABS_MAX} tabs can be open.`);
      void page.close().catch(() => undefined);
      return '';
    }
    const id = `tab-${this.nextTab++}`;
    const tab: Tab = { page, console: [], network: [] };
    this.ids.set(page, id);
    this.tabs.set(id, tab);
    // A tab the page opened comes to the front, as it does for a person.
    this.activeId = id;
    if (this.inCall) this.openedDuringCall.push(id);
    if (!this.openingTab && this.popupsPending > 0) this.popupsPending--;
    void this.watchPopups(page);
    page.on('close', () => {
      // Not closed by close_tab: the page closed itself, or the browser died (Playwright closes every
      // page first, then reports the disconnect). Until a result shows the model the tabs there are.
      if (!this.closingOnRequest.delete(id) && this.tabs.has(id)) this.tabsGoneUnasked++;
      this.forget(id);
    });
    page.on('framenavigated', (frame) => {
      if (frame === page.mainFrame()) this.checkLanding(page, frame.url());
    });
    page.on('request', (request) => this.onRequest(page, request));
    page.on('dialog', (dialog) => void this.onDialog(dialog));
    page.on('download', (download) => this.trackDownload(download));
    // With a listener, Playwright intercepts the native file chooser, which then never opens: files
    // reach pages only through file_upload (off by default, upload roots only).
    page.on('filechooser', () => this.notice(FILE_CHOOSER_NOTICE));
    page.on('console', (message) => push(tab.console, consoleLine(message)));
    page.on('requestfinished', (request) => push(tab.network, request));
    page.on('requestfailed', (request) => push(tab.network, request));
    return id;
  }

  private forget(id: string): void {
    if (!this.tabs.delete(id)) return;
    if (this.activeId === id) this.activeId = [...this.tabs.keys()].at(-1);
  }

  /** Counts the popups a tab opens, from the moment Chromium decides to open them. */
  private async watchPopups(page: Page): Promise<void> {
    try {
      const cdp = await page.context().newCDPSession(page);
      cdp.on('Page.windowOpen', () => this.popupsPending++);
      // Downloads in this tab, while Chromium receives them: the session's byte cap applies before one is saved.
      cdp.on('Page.downloadWillBegin', (event) => this.downloadUrls.set(event.guid, event.url));
      cdp.on('Page.downloadProgress', (event) => this.onDownloadProgress(event));
      // Sent while the click that asks for a navigation is still being dispatched, so before the
      // click returns; the navigation's request only starts later (measured: the result of a link
      // click still showed the old URL when only requests were watched).
      const mainFrameId = (await cdp.send('Page.getFrameTree')).frameTree.frame.id;
      cdp.on('Page.frameRequestedNavigation', (event) => {
        if (event.disposition === 'currentTab' && event.frameId === mainFrameId) this.awaitDocument(page);
      });
      await cdp.send('Page.enable');
    } catch {
      // The tab closed first.
    }
  }

  private async onDialog(dialog: Dialog): Promise<void> {
    const kind = dialog.type().slice(0, 20);
    const message = oneLine(dialog.message()).slice(0, DIALOG_MESSAGE_MAX);
    const article = /^[aeiou]/i.test(kind) ? 'An' : 'A';
    // Leaving a page must not hang a navigation: beforeunload is accepted, every other dialog dismissed.
    if (kind === 'beforeunload') {
      this.notice(`${article} ${kind} dialog "${message}" was accepted, so the page could be left.`);
      await dialog.accept().catch(() => undefined);
    } else {
      this.notice(`${article} ${kind} dialog "${message}" was dismissed.`);
      await dialog.dismiss().catch(() => undefined);
    }
  }

  /**
   * A download the page started: saved under the session's folder, unless the
   * session's caps (BrowserOptions maxDownloads, maxDownloadBytes) are reached;
   * then it is cancelled before it is saved, and reported failed.
   */
  private trackDownload(download: Download): void {
    const downloadId = `dl-${this.nextDownload++}`;
    const { maxDownloads, maxDownloadBytes } = this.manager.options;
    if (this.closed || this.downloadCount > maxDownloads || this.downloadBytes >= maxDownloadBytes) {
      void download
        .cancel()
        .then(() => download.delete())
        .catch(() => undefined);
      this.downloadRefused(downloadId, download.url());
      return;
    }
    const saving = this.saveDownload(download, downloadId).finally(() => this.saving.delete(saving));
    this.saving.add(saving);
  }

  private async saveDownload(download: Download, downloadId: string): Promise<void> {
    const url = download.url();
    const { downloadsDir, maxDownloadBytes, exposeDownloadPaths } = this.manager.options;
    this.pendingChanges.push({ type: 'download_started', download_id: downloadId, url });
    this.downloadsInFlight.add(download);
    let path: string | undefined;
    try {
      await this.manager.downloadsSwept;
      if (this.closed) throw new Error('the session ended');
      const dir = join(downloadsDir, sanitizeId(this.id));
      await mkdir(dir, { recursive: true });
      path = join(dir, `${downloadId}-${safeFileName(download.suggestedFilename())}`);
      await download.saveAs(path);
      const size = (await stat(path)).size;
      if (this.closed) throw new Error('the session ended');
      // Downloads Chromium did not report progress for, or saved side by side, are checked here at the latest.
      if (this.downloadBytes + size > maxDownloadBytes) {
        this.overByteCap.add(download);
        throw new Error('over the byte cap');
      }
      this.downloadBytes += size;
      // The path only for an operator who says another tool can read it (the API contract), and only whole.
      const shown = exposeDownloadPaths && path.length <= DOWNLOAD_PATH_MAX && !/[\p{Cc}\u2028\u2029]/u.test(path);
      this.pendingChanges.push({
        type: 'download_completed',
        download_id: downloadId,
        url,
        ...(shown ? { path } : {}),
        size_bytes: size,
      });
    } catch {
      if (path) await rm(path, { force: true }).catch(() => undefined);
      // A fixed phrase: the error's own text may carry paths (docs/TOOLSETS.md D3).
      if (this.overByteCap.has(download)) this.downloadRefused(downloadId, url);
      else this.pendingChanges.push({ type: 'download_failed', download_id: downloadId, url, error: DOWNLOAD_FAILED });
    } finally {
      this.downloadsInFlight.delete(download);
      // Chromium's progress of downloads no longer in flight is stale (a tab that closed sends no more).
      if (this.downloadsInFlight.size === 0) {
        this.downloadUrls.clear();
        this.downloadExpected.clear();
      }
      // Playwright keeps its own copy until the context closes; not awaited: a stalled download never ends.
      void download.delete().catch(() => undefined);
      // A save that outlived close() may have made the folder again.
      if (this.closed) await this.manager.removeSessionDownloads(this.id);
    }
  }

  /** A download over the session's caps: reported failed with a fixed text, and the model told once per result. */
  private downloadRefused(downloadId: string, url: string): void {
    // A page looping downloads cannot grow the pending events without bound; the notice tells of the rest.
    if (this.pendingChanges.length < STATE_CHANGES_MAX) {
      this.pendingChanges.push({ type: 'download_failed', download_id: downloadId, url, error: DOWNLOAD_LIMIT_ERROR });
    }
    if (this.downloadLimitNoticed) return;
    this.downloadLimitNoticed = true;
    const { maxDownloads, maxDownloadBytes } = this.manager.options;
    this.notice(
      `A download was cancelled: this session reached its download limit (${maxDownloads} downloads, ${maxDownloadBytes} bytes).`,
    );
  }

  /**
   * Chromium's progress of a download in one of the session's tabs. When the
   * bytes it has received or announced (Content-Length) would take the session
   * past its byte cap, the downloads in flight from that URL are cancelled
   * (Playwright does not tell Chromium's guid of a download: the URL is what
   * matches; with no URL known, every download in flight is).
   */
  private onDownloadProgress(event: { guid: string; totalBytes: number; receivedBytes: number; state: string }): void {
    if (event.state !== 'inProgress') {
      this.downloadUrls.delete(event.guid);
      this.downloadExpected.delete(event.guid);
      return;
    }
    this.downloadExpected.set(event.guid, Math.max(event.receivedBytes, event.totalBytes));
    let expected = this.downloadBytes;
    for (const bytes of this.downloadExpected.values()) expected += bytes;
    if (expected <= this.manager.options.maxDownloadBytes) return;
    const url = this.downloadUrls.get(event.guid);
    // Not announced by Playwright yet: its next progress event finds it in flight.
    for (const download of this.downloadsInFlight) {
      if (url !== undefined && download.url() !== url) continue;
      this.overByteCap.add(download);
      void download.cancel().catch(() => undefined);
    }
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
      const tab = this.tabs.get(tabId);
      if (!tab) throw this.noTab(tabId);
      return { page: tab.page, tabId };
    }
    if (this.activeId) {
      const tab = this.tabs.get(this.activeId);
      if (tab) return { page: tab.page, tabId: this.activeId };
    }
    const id = await this.newTab();
    return { page: this.tabs.get(id)!.page, tabId: id };
  }

  async newTab(): Promise<string> {
    const context = await this.contextNow();
    if (this.tabs.size >= TABS_MAX) {
      throw new ToolInputError(`At most ${TABS_MAX} tabs can be open; close one with close_tab first.`);
    }
    this.openingTab = true;
    const page = await context.newPage().finally(() => (this.openingTab = false));
    if (context !== this.context) throw new BrowserCrashedError('the browser went away while a tab opened');
    // The context's 'page' event has usually registered it already; register() returns the same id then.
    const id = this.register(page);
    this.activeId = id;
    return id;
  }

  switchTab(tabId: string): void {
    const tab = this.tabs.get(tabId);
    if (!tab) throw this.noTab(tabId);
    this.activeId = tabId;
    void tab.page.bringToFront().catch(() => undefined);
  }

  async closeTab(tabId: string): Promise<void> {
    const tab = this.tabs.get(tabId);
    if (!tab) throw this.noTab(tabId);
    this.closingOnRequest.add(tabId);
    await tab.page.close({ runBeforeUnload: false });
    this.forget(tabId);
  }

  get activeTabId(): string | undefined {
    return this.activeId;
  }

  /** How many downloads this session has seen begin. */
  get downloadCount(): number {
    return this.nextDownload - 1;
  }

  /**
   * Waits (up to `ms`) for a download after the first `count`: a navigation
   * that turned into a download can fail before Playwright announces the download.
   */
  async downloadSince(count: number, ms: number): Promise<boolean> {
    const deadline = performance.now() + ms;
    while (this.downloadCount <= count && performance.now() < deadline) await sleep(10);
    return this.downloadCount > count;
  }

  /** Console lines of a tab since the last read, oldest first; reading empties the buffer. */
  drainConsole(tabId: string): string[] {
    const tab = this.tabs.get(tabId);
    return tab ? tab.console.splice(0) : [];
  }

  /** Requests of a tab that finished or failed since the last read, oldest first; reading empties the buffer. */
  drainNetwork(tabId: string): Request[] {
    const tab = this.tabs.get(tabId);
    return tab ? tab.network.splice(0) : [];
  }

  /** Starts a call; the token lets a timed-out call that finishes late be ignored. */
  /** See BrowserManager.watchDeath. */
  watchDeath(): { died: Promise<never>; dispose: () => void } {
    return this.manager.watchDeath();
  }

  beginCall(): object {
    const token = {};
    this.callToken = token;
    this.inCall = true;
    this.deathsAtBegin = this.manager.deaths;
    this.openedDuringCall = [];
    this.navigations = [];
    return token;
  }

  /**
   * Ends a call. On success, reports the inventory, the tabs this call opened
   * that are still open, and every pending download event (one per download:
   * the latest). On failure, `tab_opened` is dropped and the rest waits for
   * the next successful result (docs/TOOLSETS.md C4). Either way, a browser
   * that died during the call makes the call fail with BrowserCrashedError.
   */
  async endCall(token: object, ok: boolean, acted = false): Promise<CallReport | undefined> {
    // A call that timed out and finished later must not end the call that runs now.
    if (token !== this.callToken) return undefined;
    if (ok) await this.settle(acted);
    if (token !== this.callToken) return undefined;
    this.inCall = false;
    const openedDuringCall = this.openedDuringCall;
    this.openedDuringCall = [];
    // Whatever error the call failed with (Playwright's own, a timeout), a browser that died
    // during it is the cause; a call that relaunched and finished on a live browser is fine.
    const died = this.manager.deaths !== this.deathsAtBegin;
    if (died && (!ok || !this.manager.alive(this.contextGeneration))) {
      throw new BrowserCrashedError('the browser went away during the call');
    }
    if (!ok) return undefined;
    // This result shows the tabs there are now, and the notice.
    this.tabsLost = false;
    this.tabsGoneUnasked = 0;
    const tabs = await this.inventory();
    // Only tabs still open once the inventory is taken: a popup may close while titles are read.
    const opened = openedDuringCall.filter((id) => tabs.some((t) => t.tab_id === id));
    const latest = new Map<string, BrowserStateChange>();
    for (const change of this.pendingChanges) if ('download_id' in change) latest.set(change.download_id, change);
    const changes: BrowserStateChange[] = [
      ...opened.map((tab_id): BrowserStateChange => ({ type: 'tab_opened', tab_id })),
      ...latest.values(),
    ].slice(0, STATE_CHANGES_MAX);
    // What does not fit in this block (at most 200 changes) waits for the next one.
    const sent = new Set(changes.map((c) => ('download_id' in c ? c.download_id : '')));
    this.pendingChanges = this.pendingChanges.filter((c) => 'download_id' in c && !sent.has(c.download_id));
    const notices = this.pendingNotices.slice(0, DIALOG_NOTICES_MAX);
    const more = this.pendingNotices.length - DIALOG_NOTICES_MAX + this.droppedNotices;
    if (more > 0) notices.push(`${more} more notices (dialogs, refused navigations) were not shown.`);
    const signature = JSON.stringify(tabs);
    const tabsChanged = signature !== this.lastReported;
    return { tabs, changes, notices, tabsChanged };
  }

  /**
   * Lets what the call set off land in this call's result: a popup that
   * Chromium created but Playwright has not announced yet (its 'page' event
   * can come a little after a click returns), and downloads being saved.
   */
  private async settle(acted: boolean): Promise<void> {
    if (acted && this.navigations.length === 0) {
      // A click or key may have asked for a navigation whose first sign (the request) is not out
      // yet: one round trip to the page, then a short grace, lets it show up (measured: without
      // this, 3 of 8 link clicks reported the old URL).
      const page = this.activeId ? this.tabs.get(this.activeId)?.page : undefined;
      await Promise.race([page?.evaluate('0').catch(() => undefined), sleep(NAVIGATION_START_WAIT_MS)]);
      await sleep(NAVIGATION_START_GRACE_MS);
    }
    const deadline = performance.now() + POPUP_WAIT_MS;
    while (this.popupsPending > 0 && performance.now() < deadline && this.connected()) await sleep(20);
    // A popup later than that (or one the browser blocked) is listed, without tab_opened, on a later result.
    this.popupsPending = 0;
    if (this.saving.size) await Promise.race([Promise.allSettled([...this.saving]), sleep(DOWNLOAD_WAIT_MS)]);
    await Promise.all(this.navigations);
    this.navigations = [];
  }

  /**
   * A navigation this call set off (a link click, Enter in a form) is waited
   * for until its new document is parsed, so the next call in the batch (a
   * screenshot, read_page) sees the new page, as a person would wait.
   */
  private onRequest(page: Page, request: Request): void {
    if (request.isNavigationRequest() && request.frame() === page.mainFrame()) this.awaitDocument(page, request);
  }

  /** Waits (within this call) until `page` parses a new document, its navigation fails, or NAVIGATION_WAIT_MS pass. */
  private awaitDocument(page: Page, request?: Request): void {
    if (!this.inCall) return;
    this.navigations.push(
      new Promise<void>((resolve) => {
        const done = (): void => {
          clearTimeout(timer);
          page.off('domcontentloaded', done);
          page.off('requestfailed', failed);
          page.off('close', done);
          resolve();
        };
        const failed = (r: Request): void => {
          if (!request || r === request) done();
        };
        const timer = setTimeout(done, NAVIGATION_WAIT_MS);
        page.on('domcontentloaded', done);
        page.on('requestfailed', failed);
        page.on('close', done);
      }),
    );
  }

  /** Records that a report was sent (its notices shown, its inventory known to the model). */
  reported(report: CallReport, noticesShown: boolean): void {
    this.lastReported = JSON.stringify(report.tabs);
    if (noticesShown) {
      this.pendingNotices = [];
      this.droppedNotices = 0;
      this.downloadLimitNoticed = false;
    }
  }

  async inventory(): Promise<TabEntry[]> {
    const titles = new Map<string, string>();
    for (const [tab_id, { page }] of [...this.tabs]) {
      // A page stuck in a script must not block every call of the session: its title is then ''.
      titles.set(tab_id, await Promise.race([page.title().catch(() => ''), sleep(TITLE_WAIT_MS).then(() => '')]));
    }
    // Tabs may open or close while titles are read: list the tabs open now, and the active one now
    // (a tab that closed meanwhile moved the active mark; listing it would leave no tab active).
    if (this.activeId === undefined || !this.tabs.has(this.activeId)) this.activeId = [...this.tabs.keys()].at(-1);
    return [...this.tabs].map(([tab_id, { page }]) => ({
      tab_id,
      title: titles.get(tab_id) ?? '',
      url: page.url(),
      ...(tab_id === this.activeId ? { active: true } : {}),
    }));
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.context?.close().catch(() => undefined);
    this.context = undefined;
    this.tabs.clear();
    this.activeId = undefined;
    // Downloads end with the session: those still being saved first, then its folder (docs/SECURITY.md).
    for (const download of this.downloadsInFlight) void download.cancel().catch(() => undefined);
    if (this.saving.size) await Promise.race([Promise.allSettled([...this.saving]), sleep(DOWNLOAD_WAIT_MS)]);
    await this.manager.removeSessionDownloads(this.id);
  }
}

function push<T>(ring: T[], item: T): void {
  ring.push(item);
  if (ring.length > LOG_RING_MAX) ring.splice(0, ring.length - LOG_RING_MAX);
}

function consoleLine(message: ConsoleMessage): string {
  return `[${message.type()}] ${oneLine(message.text())}`.slice(0, CONSOLE_LINE_MAX);
}

/** A page-suggested file name reduced to `[A-Za-z0-9._-]`, never hidden or empty, so it cannot leave its folder. */
export function safeFileName(name: string): string {
  const clean = name
    .replace(/[^A-Za-z0-9._-]+/g, '_')
    .replace(/^[.]+/, '')
    .slice(0, 120);
  return clean || 'download';
}
