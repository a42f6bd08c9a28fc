/**
 * The browser driver: one Chromium (Debian's, never a downloaded one), started
 * in the background with its desktop (`warm`, or a pooled desktop built warm)
 * or else on first use, kept running, relaunched after a crash; one BrowserSession
 * (session.ts) per session, each with its own BrowserContext, so sessions
 * never see each other's tabs, cookies or storage.
 */
import { realpath } from 'node:fs/promises';
import type { BrowserMode } from '../base/config.ts';
import type { Browser } from 'playwright';
import type { Logger } from '../base/log.ts';
import type { StartGuard } from '../base/resilience.ts';
import { sanitizeId } from '../base/screenshot-store.ts';
import { oneLine } from '../base/text.ts';
import { removeDownloadFolder, removeStaleDownloads, type DownloadSettings } from './downloads.ts';
import { BrowserCrashedError, BrowserUnavailableError } from './failures.ts';
import type { SettleCounts } from './call-watch.ts';
import { InputFrames } from './input-frames.ts';
import type { Drawn, InputMark } from '../base/image.ts';
import { BrowserSession, type SessionHost } from './session.ts';
import { openDevtools, type DevtoolsOptions, type DevtoolsSandbox } from './cdp-door.ts';
import type { WebSocket } from 'ws';
import { TraceFolder } from './trace-folder.ts';
import type { UrlPolicy } from './url-policy.ts';

// Where the daemon and the tests have always found them.
export { BrowserCrashedError, BrowserUnavailableError };

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
  /** Keeps each completed download for its session's harness (DownloadSettings.keep); the daemon's store. */
  keepDownload?: DownloadSettings['keep'];
  viewport: { width: number; height: number };
  launchTimeoutMs: number;
  /** The URL policy, also applied to navigations pages start themselves. */
  urlPolicy?: UrlPolicy;
  /** The egress proxy every browser request goes through (src/browser/egress.ts), loopback included. */
  proxyServer?: string;
  /** Guards launches: after repeated failures, calls fail at once for a cool-down (src/base/resilience.ts). */
  launchGuard?: StartGuard;
  /** Variables Chromium gets on top of the daemon's own (a pooled desktop's XAUTHORITY and HOME). */
  env?: Readonly<Record<string, string>>;
  /**
   * The desktop's sandbox Chromium runs in (src/desktop-pool/sandbox.ts):
   * then Chromium's own sandbox is always on, and it gets only the
   * sandbox's environment.
   */
  sandbox?: BrowserSandbox;
  /**
   * Chromium's DevTools also listen on this port, on the sandbox's own
   * loopback (`--remote-debugging-port`), for the harness's CDP door
   * (cdp-door.ts). Only with `sandbox`: without one it would listen on the
   * host's loopback, where any local process could drive the browser with no
   * token. The daemon sets it for a pool desktop's browser alone, with
   * `--allow-cdp` (src/daemon.ts).
   */
  devtoolsPort?: number;
  log: Logger;
}

/** What the browser needs of its desktop's sandbox. */
export interface BrowserSandbox {
  /** An executable that runs `command` inside, with the arguments it is given. */
  launcher(command: string): Promise<string>;
  environment(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv;
  /** The host's pid of a process as the sandbox numbers it. */
  hostPid(innerPid: number): number | undefined;
  /** Where Chromium writes downloads (a folder both sides see). */
  folders: { downloads: string };
  /** A connection to a port on its own loopback, with the DevTools WebSocket path there (cdp-door.ts). */
  connectInside: DevtoolsSandbox['connectInside'];
}

/**
 * Where Chromium's own background services are sent instead of Google: loopback port 1, which
 * Chromium refuses to contact (`ERR_UNSAFE_PORT`, decided on the URL before a proxy is chosen or
 * a socket opened), so the request fails inside the browser and never reaches the egress proxy.
 * Should a later Chromium allow the port, the request reaches the proxy, which logs it (and
 * refuses loopback unless private networks are allowed): test/browser-quiet.test.ts then fails.
 */
const NOWHERE = 'http://127.0.0.1:1/';

/** Chromium switches that matter on a VM with no outside network (docs/MEASURED.md). */
const CHROMIUM_ARGS = [
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--disable-quic',
  // Chromium 156 still calls Google from an idle browser, measured through the egress proxy (one
  // pool desktop, a minute after one navigate): `update.googleapis.com` (ports 443 and 80) at
  // start and a minute later, the component updater asking for the on-device AI model's manifest
  // (`ceofaddefefcbblgcgnibnonglccbfja`, registered on demand, which `--disable-component-update`
  // does not stop); and `accounts.google.com/ListAccounts` at start, retried at 1, 4, 12 and 38 s
  // (the sign-in code lists the profile's Google accounts although `BrowserSignin` is 0). Nothing
  // tried turns either off: the policy `ComponentUpdatesEnabled` only marks the check
  // `updatedisabled`, the listing is still sent at start with `AvoidAutoTriggerListAccountsOnStale`
  // enabled, and disabling `OptimizationGuideManifestBroker` or `DIPS` changed nothing. So their
  // servers are pointed nowhere (docs/SECURITY.md, "Chromium calling home"). No `--disable-features`
  // here: Chromium keeps only the last one, which would drop Playwright's own list.
  `--component-updater=url-source=${NOWHERE}`,
  `--gaia-url=${NOWHERE}`,
  // WebRTC is kept inside the egress proxy by the managed policy's `WebRtcIPHandling`
  // (src/browser/policy.ts); the switch `--force-webrtc-ip-handling-policy` has no effect on
  // this Chromium (measured: STUN and TURN packets left with it), so it is not passed.
];

export class BrowserManager implements SessionHost {
  private browser: Browser | undefined;
  private launching: Promise<Browser> | undefined;
  /** A background launch (warm) that no call has joined yet. */
  private warming: Promise<Browser> | undefined;
  /**
   * Whether the background launch (warm) still runs, joined by a call or not:
   * a shared desktop is not ready until it ends (src/ops/health.ts), as a
   * pooled desktop is not free until its browser runs.
   */
  warmingUp = false;
  private readonly sessions = new Map<string, BrowserSession>();
  private browserPid: number | undefined;
  /** Bumped on every launch, so a session can tell its context died with an older browser. */
  generation = 0;
  /** Bumped whenever a browser disconnects, so a call can tell the browser died while it ran. */
  deaths = 0;
  /** Set by close(): a disconnect then is no crash. */
  private closing = false;
  private readonly deathListeners = new Set<() => void>();
  /**
   * Whether Chromium's renderer sandbox is on: undefined until a launch tells.
   * Root cannot use it (Chromium refuses to start sandboxed as root), and a
   * kernel without unprivileged user namespaces cannot either; then the
   * browser runs without it and `sandboxOffReason` says why.
   */
  sandbox: boolean | undefined;
  sandboxOffReason: string | undefined;
  /** How its sessions' actions settled (call-watch.ts), for tests. */
  readonly actionSettles: SettleCounts = { navigation: 0, roundTrip: 0, capped: 0, unwatched: 0 };
  /** Where the running browser's traces are written while they run (trace-folder.ts); undefined if it could not be made. */
  traceFolder: TraceFolder | undefined;
  /** What every session's downloads share: the operator's settings, and the sweep of an earlier run's folders. */
  readonly downloadSettings: DownloadSettings;
  /** Its tabs' word that they drew after pointer input (input-frames.ts); undefined when it runs headless. */
  readonly inputFrames: InputFrames | undefined;

  constructor(readonly options: BrowserOptions) {
    if (options.devtoolsPort !== undefined && !options.sandbox)
      throw new Error('a DevTools port is opened only inside a sandbox: outside, any local process could use it');
    const { downloadsDir, maxDownloads, maxDownloadBytes, exposeDownloadPaths, log } = options;
    // No download is saved before the folders an earlier run left are removed.
    const swept = removeStaleDownloads(
      downloadsDir,
      (folder) => [...this.sessions.keys()].some((id) => sanitizeId(id) === folder),
      log,
    );
    this.downloadSettings = {
      downloadsDir,
      maxDownloads,
      maxDownloadBytes,
      exposeDownloadPaths,
      swept,
      removeFolder: (id) => this.removeSessionDownloads(id),
      ...(options.keepDownload ? { keep: options.keepDownload } : {}),
    };
    // A headless browser draws on no display: pointer input on the desktop never reaches it.
    this.inputFrames = options.mode === 'headless' || !options.display ? undefined : new InputFrames();
  }

  /**
   * The word of the tab under the pointer that it drew its answer to `mark`,
   * or undefined: the browser does not run on the display, or no tab said so
   * within `timeoutMs` (the input reached none).
   */
  drawnAfter(mark: InputMark, timeoutMs: number): Promise<Drawn | undefined> {
    if (!this.inputFrames || !this.browser?.isConnected()) return Promise.resolve(undefined);
    return this.inputFrames.drawnAfter(mark, timeoutMs);
  }

  /**
   * The running browser, launching it if needed. A background launch
   * (`warm`) still under way is joined, through the launch guard, so the
   * guard counts its outcome as this call's own launch.
   */
  async browserNow(): Promise<Browser> {
    if (this.browser?.isConnected()) return this.browser;
    if (!this.launching) {
      const warming = this.warming;
      this.warming = undefined;
      const start = (): Promise<Browser> => warming ?? this.launch();
      const guard = this.options.launchGuard;
      const launching = guard ? guard.run(start) : start();
      this.launching = launching;
      void launching
        .finally(() => {
          if (this.launching === launching) this.launching = undefined;
        })
        .catch(() => undefined); // the caller gets the failure
    }
    return this.launching;
  }

  /**
   * Starts the browser now, in the background, so the first call finds it
   * running (the shared desktop's, at daemon start; a pooled desktop's is
   * launched when the desktop is built warm). Not through the launch guard:
   * a failure here is logged and left for the first call, which then
   * launches as it would have without this (through the guard: the same
   * error, counted once), or, if it comes while this launch still runs,
   * joins it (browserNow).
   */
  warm(): void {
    if (this.browser?.isConnected() || this.launching || this.warming || this.closing) return;
    const warming = this.launch();
    this.warming = warming;
    this.warmingUp = true;
    void warming
      .catch((err: unknown) =>
        this.options.log.warn('browser did not start in the background; the first browser call will launch it', {
          error: err instanceof Error ? err.message : String(err),
        }),
      )
      .finally(() => {
        this.warmingUp = false;
        if (this.warming === warming) this.warming = undefined;
      });
  }

  private async launch(): Promise<Browser> {
    const { mode, display, executablePath, launchTimeoutMs, log } = this.options;
    const headless = mode === 'headless' || !display;
    const t0 = performance.now();
    // Imported on first launch: loading Playwright takes about 2.5 s of CPU here, which a daemon
    // started with the browser off should not pay, nor a daemon's start before it listens (the
    // shared desktop's background launch starts after listen(): src/daemon.ts).
    const { chromium } = await import('playwright');
    // Recorded sessions' traces (BrowserSession.recordTrace) are written here, not among Playwright's other artifacts.
    const traces = await TraceFolder.create(log).catch((err: unknown) => {
      log.warn('no folder for browser traces', { error: String(err) });
      return undefined;
    });
    const confined = this.options.sandbox;
    // In a sandbox the path is opened inside, where only the system is: a link (an operator's, a test's) is
    // followed here, to the file it names.
    const executable = confined
      ? await confined.launcher(await realpath(executablePath).catch(() => executablePath))
      : executablePath;
    const env = { ...process.env, ...this.options.env, ...(display ? { DISPLAY: display } : {}) };
    const start = (sandbox: boolean): Promise<Browser> =>
      chromium.launch({
        executablePath: executable,
        headless,
        chromiumSandbox: sandbox,
        ...(confined ? { downloadsPath: confined.folders.downloads } : {}),
        args: [
          ...CHROMIUM_ARGS,
          ...(this.options.proxyServer
            ? [`--proxy-server=${this.options.proxyServer}`, '--proxy-bypass-list=<-loopback>']
            : []),
          // Next to Playwright's --remote-debugging-pipe, on the sandbox's loopback (the constructor checks).
          ...(confined && this.options.devtoolsPort !== undefined
            ? [`--remote-debugging-port=${this.options.devtoolsPort}`]
            : []),
        ],
        timeout: launchTimeoutMs,
        ...(traces ? { tracesDir: traces.dir } : {}),
        env: confined ? confined.environment(env) : env,
      });
    const asRoot = process.getuid?.() === 0;
    let browser: Browser;
    try {
      if (confined) {
        // In a desktop's sandbox Chromium's own runs too, as an unprivileged user: never without it.
        browser = await start(true);
        this.sandbox = true;
      } else if (this.sandbox === false) {
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
      await traces?.remove();
      // The caller reads the cause; the model reads only the type (paths stay out of its text).
      throw new BrowserUnavailableError(`the browser did not start: ${err instanceof Error ? err.message : err}`);
    }
    if (this.closing) {
      // close() came while Chromium started (a background launch at a daemon stopped at once).
      await browser.close().catch(() => undefined);
      await traces?.remove();
      throw new BrowserUnavailableError('the browser was closed while it started');
    }
    this.generation++;
    this.browser = browser;
    this.traceFolder = traces;
    browser.on('disconnected', () => {
      if (this.browser === browser) {
        this.browser = undefined;
        this.browserPid = undefined;
      }
      if (this.traceFolder === traces) this.traceFolder = undefined;
      // Traces still running in it are lost with the browser (BrowserSession.saveTrace logs them).
      void traces?.remove();
      this.deaths++;
      // close() ends it on purpose (a pooled desktop torn down at every session's end): no warning then.
      if (this.closing) log.debug('browser closed', { generation: this.generation });
      else log.warn('browser disconnected', { generation: this.generation });
      for (const listener of [...this.deathListeners]) listener();
    });
    try {
      const cdp = await browser.newBrowserCDPSession();
      const info = (await cdp.send('SystemInfo.getProcessInfo')) as {
        processInfo: { type: string; id: number }[];
      };
      const reported = info.processInfo.find((p) => p.type === 'browser')?.id;
      // A sandboxed Chromium numbers itself in its own pid namespace.
      this.browserPid = reported !== undefined && confined ? confined.hostPid(reported) : reported;
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

  /**
   * Whether the browser of `generation` still answers: one round trip (a CDP
   * session opened and closed), raced with its death. Asked when a session's
   * tabs vanished unasked during a call, because a dying browser closes its
   * pages before Playwright reports the disconnect.
   */
  async answers(generation: number): Promise<boolean> {
    const browser = this.browser;
    if (!browser || !this.alive(generation)) return false;
    const death = this.watchDeath();
    try {
      const cdp = await Promise.race([browser.newBrowserCDPSession(), death.died]);
      await cdp.detach().catch(() => undefined);
      return this.alive(generation);
    } catch {
      return false;
    } finally {
      death.dispose();
    }
  }

  /** Whether the harness may reach this browser over CDP: its DevTools listen in its sandbox (`devtoolsPort`). */
  get devtools(): boolean {
    return this.options.devtoolsPort !== undefined && this.options.sandbox !== undefined;
  }

  /**
   * A WebSocket client to the running browser's own DevTools endpoint, open
   * (cdp-door.ts); the harness's CDP door relays it. Launches the browser
   * first if it does not run. Rejects when there is no door (`devtools`),
   * the browser does not start, or its endpoint does not answer.
   */
  async openDevtools(options: DevtoolsOptions): Promise<WebSocket> {
    const { devtoolsPort, sandbox } = this.options;
    if (devtoolsPort === undefined || !sandbox) throw new BrowserUnavailableError('this browser has no DevTools port');
    await this.browserNow();
    return openDevtools(sandbox, devtoolsPort, options);
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

  /** Removes the download folder of session `id`, with what it holds (BrowserSession.close). */
  async removeSessionDownloads(id: string): Promise<void> {
    await removeDownloadFolder(this.options.downloadsDir, sanitizeId(id), this.options.log);
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
    this.closing = true;
    // Recorded sessions' traces are saved from their contexts, which closing the browser would end unsaved.
    await Promise.all(sessions.map((s) => s.saveTrace()));
    // A launch under way closes what it started once it has (launch).
    await (this.launching ?? this.warming)?.catch(() => undefined);
    await this.browser?.close().catch(() => undefined);
    this.browser = undefined;
    await Promise.all(sessions.map((s) => s.close()));
  }
}
