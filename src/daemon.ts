/**
 * Assembles a daemon from its configuration: the desktop driver, the
 * toolsets, the executor and the server. Dependencies point one way:
 * server → executor → toolsets → drivers.
 */
import { readFile, writeFile } from 'node:fs/promises';
import type { AddressInfo, Server } from 'node:net';
import { ConfigError, configWarnings, type DaemonConfig } from './base/config.ts';
import { WorkerDesktopDriver } from './desktop-driver/worker-driver.ts';
import { FRAMEBUFFER_ENV } from './desktop-driver/worker-protocol.ts';
import { Executor } from './executor/executor.ts';
import { Hold } from './desktop-pool/hold.ts';
import { Lane } from './desktop-pool/lane.ts';
import { fitSize, type Geometry, type Size } from './base/geometry.ts';
import type { Logger } from './base/log.ts';
import { PROTOCOL_PATH } from './base/protocol.ts';
import { ScreenshotStore } from './base/screenshot-store.ts';
import { DeskbatchServer, type HttpRoute, type SocketRoute } from './server/server.ts';
import { checkFileName, FileRefusal, FileStore } from './server/session-files.ts';
import { clipboardRoutes } from './server/clipboard-routes.ts';
import { documentRoutes } from './server/document-routes.ts';
import { downloadRoutes } from './server/download-routes.ts';
import { mediaTypeOf } from './base/media-types.ts';
import { safeFileName, type DownloadSettings } from './browser/downloads.ts';
import { ActivityHub } from './base/activity.ts';
import { createOps } from './ops/index.ts';
import { COMPUTER_MEMBERS, createComputerToolset } from '../toolsets/computer/index.ts';
import { BROWSER_MEMBER_NAMES, BROWSER_OPTIONAL_MEMBERS, createBrowserToolset } from '../toolsets/browser/index.ts';
import { createLegacyComputerTool } from '../toolsets/computer-legacy/index.ts';
import { describeToolsets } from '../toolsets/describe.ts';
import { BrowserManager, BrowserUnavailableError, type LaunchMode } from './browser/manager.ts';
import { DEVTOOLS_PORT } from './browser/cdp-door.ts';
import { cdpRoute } from './server/cdp-route.ts';
import { EgressFilter, parsePrivateAllow, startEgressProxy, type EgressProxy } from './browser/egress.ts';
import { browserPolicyState, type PolicyState } from './browser/policy.ts';
import type { Containment } from './ops/health.ts';
import { DisplayUnavailableError } from './base/errors.ts';
import { orAfter, ResourceBreaker } from './base/resilience.ts';
import type { DesktopResources, PartsFactory, SandboxSettings } from './desktop-pool/desktop.ts';
import { chooseSandboxMode, DesktopSandbox, IdAllocator, type SandboxMode } from './desktop-pool/sandbox.ts';
import { DesktopPool, SharedDesktop, type Desktops, type PoolEvent } from './desktop-pool/pool.ts';
import type { Ops } from './ops/index.ts';
import { join, resolve } from 'node:path';
import { displayNumber, displaySocketPath } from './desktop-driver/display.ts';
import { createViewer } from './viewer/index.ts';
import { RecordingStore } from './recording/store.ts';
import { Recorder, type Artifact, type RecorderDeps, type VideoStarter } from './recording/recorder.ts';
import { DesktopVideo } from './recording/video.ts';
import { recordingRoutes } from './recording/routes.ts';
import { TakeoverManager } from './takeover/manager.ts';
import { LinkRegistry } from './server/links.ts';
import { linkRoutes } from './server/link-routes.ts';
import { sweepOwnedTempFolders } from './base/temp-folder.ts';
import { startProfiles, type ProfileStore } from './profiles/index.ts';
import { profileSaveRoute } from './profiles/save-route.ts';
import { SessionProfiles } from './profiles/session-profile.ts';
import { createMcp, type Mcp } from './mcp/index.ts';

export interface Daemon {
  /** ws:// URL clients connect to. */
  url: string;
  address: AddressInfo;
  server: DeskbatchServer;
  /** Where sessions' desktops come from: a pool, or the one shared display. */
  desktops: Desktops;
  store: ScreenshotStore;
  /** Sessions, batches and calls as they happen (metrics, the viewer). */
  activity: ActivityHub;
  /** The sessions' staged files (docs/PROTOCOL.md "Staged documents"). */
  files: FileStore;
  /** Named browser profiles (docs/PROTOCOL.md "Profiles"); off (every call refused `profiles_off`) without a key. */
  profiles: ProfileStore;
  /** The MCP server (docs/MCP.md): /mcp on this port, and `serveStdio` for `deskbatch mcp`. */
  mcp: Mcp;
  /** Graceful shutdown within `config.shutdownDeadlineMs`. Idempotent. */
  close(): Promise<void>;
}

/** Refuses `--browser-enable` names that are not optional browser members. */
function checkEnabled(names: readonly string[]): void {
  const optional: readonly string[] = BROWSER_OPTIONAL_MEMBERS;
  const wrong = names.filter((m) => !optional.includes(m));
  if (wrong.length) throw new ConfigError(`--browser-enable takes ${optional.join(', ')}; not: ${wrong.join(', ')}`);
}

/** Refuses `--disable` names that are no member's, and disabling every computer member (the API rejects that entry). */
function checkDisabled(names: readonly string[]): void {
  const computer: readonly string[] = COMPUTER_MEMBERS.map((m) => m.name);
  const known = new Set<string>([...computer, ...BROWSER_MEMBER_NAMES]);
  const unknown = names.filter((n) => !known.has(n));
  if (unknown.length) throw new ConfigError(`--disable: not a member: ${unknown.join(', ')}`);
  if (computer.every((n) => names.includes(n))) {
    throw new ConfigError('--disable: at least one computer member must stay enabled');
  }
}

/** How long a welcome waits for a fresh display size before it uses the last one known. */
const WELCOME_GEOMETRY_WAIT_MS = 250;

/**
 * The egress proxy every browser request goes through: it refuses non-public
 * addresses (and the daemon's own port) by the address a name resolves to
 * (src/browser/egress.ts). No proxy when the browser is off.
 */
async function startEgress(
  config: DaemonConfig,
  log: Logger,
  daemonPort: () => number | undefined,
): Promise<{ filter: EgressFilter; proxy: EgressProxy | undefined }> {
  for (const entry of config.browserSettings.privateAllow) {
    try {
      parsePrivateAllow(entry);
    } catch (err) {
      throw new ConfigError(`--allow-private: ${(err as Error).message}`);
    }
  }
  let proxy: EgressProxy | undefined;
  const filter = new EgressFilter({
    allowPrivateNetworks: config.browserSettings.allowPrivateNetworks,
    privateAllow: config.browserSettings.privateAllow,
    allowHosts: config.browserSettings.allowHosts,
    ownPorts: () => [daemonPort(), proxy?.port],
  });
  if (config.browser !== 'off') proxy = await startEgressProxy(filter, log.child({ component: 'egress' }));
  return { filter, proxy };
}

/** Whether Chromium's managed policy is in force (undefined: no browser); a warning for each containment that is off. */
async function checkContainment(config: DaemonConfig, log: Logger): Promise<PolicyState | undefined> {
  const policy = config.browser === 'off' ? undefined : await browserPolicyState();
  if (policy && !policy.enforced) {
    log.warn(
      "Chromium's managed policy is not installed: the model can reach file://, chrome:// and DevTools pages and native file dialogs through the browser's own interface, and a page's WebRTC goes around the egress proxy; run `npm run setup` as root (docs/SECURITY.md)",
      { missing: policy.missing },
    );
  }
  for (const warning of configWarnings(config)) log.warn(warning);
  if (config.browser !== 'off' && config.browserSettings.allowPrivateNetworks) {
    log.warn('the browser may reach private, loopback and link-local addresses (--allow-private-networks)');
  }
  return policy;
}

/**
 * How desktops are sandboxed (src/desktop-pool/sandbox.ts): the host is
 * tried now, and a daemon whose desktops cannot be sandboxed does not start
 * unless the operator turned the sandbox off. In shared mode only the
 * daemon's Chromium is (the operator's display is the operator's).
 */
async function chooseDesktopSandbox(
  config: DaemonConfig,
  log: Logger,
): Promise<{ mode: SandboxMode; settings: SandboxSettings | undefined }> {
  // Shared mode with no browser: nothing of ours runs on the operator's display but the worker.
  if (config.desktops.mode !== 'pool' && config.browser === 'off') return { mode: 'off', settings: undefined };
  let mode: SandboxMode;
  try {
    mode = await chooseSandboxMode(config.sandbox.mode, config.sandbox.uids);
  } catch (err) {
    throw new ConfigError(
      `desktops cannot be sandboxed on this host: ${err instanceof Error ? err.message : String(err)}. ` +
        'Install what is missing (`npm run setup`), allow unprivileged user namespaces, or start with `--sandbox off` ' +
        'to run desktops without a sandbox (docs/SECURITY.md "A sandbox per desktop")',
    );
  }
  if (mode === 'off')
    log.warn('desktops run without a sandbox (--sandbox off): a compromised page reaches the whole host');
  else log.info('desktops are sandboxed', { mode, ...(mode === 'uid' ? { uids: config.sandbox.uids } : {}) });
  return mode === 'off'
    ? { mode, settings: undefined }
    : { mode, settings: { mode, ids: new IdAllocator(config.sandbox.uids) } };
}

/**
 * What each desktop is made of: a desktop worker and (unless the browser is
 * off) a browser, each behind a circuit breaker of its own, so a desktop
 * whose worker or browser keeps failing to start fails only its own
 * session's calls. `sandbox` tells the newest browser's renderer sandbox, for
 * /readyz.
 */
function desktopParts(
  config: DaemonConfig,
  log: Logger,
  proxy: EgressProxy | undefined,
  keepDownload: NonNullable<DownloadSettings['keep']>,
): { makeParts: PartsFactory; sandbox: () => Containment['browser_sandbox'] } {
  const breaker = (what: string, component: string, error: (message: string) => Error): ResourceBreaker =>
    new ResourceBreaker(what, config.resilience.breaker, error, log.child({ component }));
  let lastBrowser: BrowserManager | undefined;
  const newBrowser = (
    mode: LaunchMode,
    id: string,
    display: string,
    env: Record<string, string>,
    downloadsDir: string,
    sandbox: DesktopSandbox | undefined,
    proxyServer: string | undefined,
    devtools: boolean,
  ): BrowserManager =>
    new BrowserManager({
      mode,
      display,
      env,
      ...(sandbox ? { sandbox } : {}),
      ...(sandbox && devtools ? { devtoolsPort: DEVTOOLS_PORT } : {}),
      executablePath: config.browserSettings.executablePath,
      downloadsDir,
      maxDownloads: config.browserSettings.maxDownloads,
      maxDownloadBytes: config.browserSettings.maxDownloadBytes,
      exposeDownloadPaths: config.browserSettings.exposeDownloadPaths,
      keepDownload,
      viewport: config.browserSettings.viewport,
      launchTimeoutMs: config.browserSettings.launchTimeoutMs,
      launchGuard: breaker('browser', 'browser', (message) => new BrowserUnavailableError(message)),
      proxyServer: proxyServer!,
      urlPolicy: { allowHosts: config.browserSettings.allowHosts, denyHosts: config.browserSettings.denyHosts },
      log: log.child({ component: 'browser', desktop: id }),
    });
  const makeParts: PartsFactory = ({ id, display, env, downloadsDir, sandbox }) => {
    const known = lastBrowser;
    const mode = config.browser;
    // A sandboxed desktop's Chromium reaches the proxy through the listener on its own loopback.
    if (sandbox?.egress) proxy?.adopt(sandbox.egress.server);
    const proxyServer = sandbox?.egress ? `http://127.0.0.1:${sandbox.egress.port}` : proxy?.url;
    // The harness's CDP door (--allow-cdp): only a sandboxed pool desktop's browser, which is the session's
    // alone and whose DevTools port only its sandbox reaches (src/browser/cdp-door.ts). Never the shared
    // desktop's (every session's contexts), never one without a sandbox (the port would be on the host).
    const devtools = config.cdp.enabled && sandbox !== undefined && !sandbox.browserOnly;
    const browser =
      mode === 'off'
        ? undefined
        : (lastBrowser = newBrowser(mode, id, display, env, downloadsDir, sandbox?.box, proxyServer, devtools));
    // Where the kernel refused Chromium its sandbox once, it will again: later desktops launch without trying.
    if (browser && known?.sandbox === false) {
      browser.sandbox = false;
      browser.sandboxOffReason = known.sandboxOffReason;
    }
    return {
      driver: new WorkerDesktopDriver({
        display,
        env,
        ...(sandbox && !sandbox.browserOnly ? { within: sandbox.box } : {}),
        log: (level: 'debug' | 'info' | 'warn' | 'error', msg: string, fields?: object) =>
          log[level](msg, { component: 'desktop', desktop: id, ...fields }),
        // The driver's own deadline is a backstop that replaces a hung worker; the executor's timeout,
        // which decides what the model reads, must always fire first.
        callTimeoutMs: 2 * config.callTimeoutMs,
        startGuard: breaker('desktop worker', 'desktop', (message) => new DisplayUnavailableError(message)),
        // The browser draws on this desktop's display: its tabs tell the settle step when they drew after input.
        ...(browser ? { drawnAfter: (mark, timeoutMs) => browser.drawnAfter(mark, timeoutMs) } : {}),
      }),
      browser,
    };
  };
  const sandbox = (): Containment['browser_sandbox'] =>
    config.browser === 'off'
      ? 'off_no_browser'
      : lastBrowser?.sandbox === undefined
        ? 'not_started'
        : lastBrowser.sandbox
          ? 'on'
          : 'off';
  return { makeParts, sandbox };
}

/** The computer toolset, the browser's unless it is off, and the executor that runs their batches. */
function createExecutor(config: DaemonConfig, store: ScreenshotStore, egress: EgressFilter, log: Logger): Executor {
  const computer = createComputerToolset({
    screenshots: config.screenshot,
    maxTypeTextLength: config.limits.maxTypeTextLength,
    disabled: config.disabledMembers,
  });
  const browser =
    config.browser === 'off'
      ? undefined
      : createBrowserToolset({
          screenshots: config.screenshot,
          urlPolicy: { allowHosts: config.browserSettings.allowHosts, denyHosts: config.browserSettings.denyHosts },
          maxTypeTextLength: config.limits.maxTypeTextLength,
          uploadRoots: config.browserSettings.uploadRoots.map((r) => resolve(r)),
          egress,
          enabled: config.browserSettings.enable,
          disabled: config.disabledMembers,
        });
  return new Executor({
    toolsets: browser ? [computer, browser] : [computer],
    // The older `computer` tool, on top of the computer toolset (toolsets/computer-legacy/).
    plainTool: createLegacyComputerTool(computer),
    callTimeoutMs: config.callTimeoutMs,
    exposeErrorMessages: config.exposeErrorMessages,
    images: { limits: config.screenshot.limits, maxBase64Bytes: config.screenshot.maxBase64Bytes },
    lane: new Lane(), // only for batches that name no desktop: a session's batches take their desktop's lane
    retry: config.resilience.retry,
    store,
    log,
  });
}

/**
 * The display and screenshot size a welcome reports for a desktop. The
 * worker answers one call at a time, so a welcome does not wait behind a
 * long hold_key: it takes the last size known after WELCOME_GEOMETRY_WAIT_MS.
 */
function welcomeGeometry(config: DaemonConfig): (desktop: DesktopResources) => Promise<Geometry> {
  const geometries = new WeakMap<DesktopResources, Geometry>();
  return (desktop) => {
    const fresh = desktop.driver.displaySize().then((display) => {
      const g = { display, screenshot: fitSize(display, config.screenshot.limits) };
      geometries.set(desktop, g);
      return g;
    });
    const known = geometries.get(desktop);
    if (!known) return fresh; // nothing known yet (the worker is starting): wait for it
    return orAfter(fresh, WELCOME_GEOMETRY_WAIT_MS, known);
  };
}

export async function startDaemon(config: DaemonConfig, log: Logger): Promise<Daemon> {
  checkDisabled(config.disabledMembers);
  checkEnabled(config.browserSettings.enable);
  // First: a key file the daemon must refuse stops the start before anything is launched.
  const profiles = await startProfiles(config.profiles, log.child({ component: 'profiles' }), (event) =>
    log.debug(`profile ${event.kind}`, { ...event }),
  );
  const store = new ScreenshotStore(config.screenshotsDir, config.retention, log);
  await store.init();
  // What a daemon killed with SIGKILL left in the temporary folder: its desktops' HOMEs, display files, VNC sockets.
  const swept = await sweepOwnedTempFolders();
  if (swept.length)
    log.info('removed the temporary folders of a daemon that no longer runs', { folders: swept.length });
  const listening: { port?: number } = {}; // set once the server listens
  const egress = await startEgress(config, log, () => listening.port);
  const policy = await checkContainment(config, log);
  // A completed download, kept in its session's files for the harness to fetch (docs/PROTOCOL.md "Downloads").
  // Called only once a page downloads, so `server`, `files` and `activity` below are set by then.
  const keepDownload: NonNullable<DownloadSettings['keep']> = async (session, download, body) => {
    const kept = server.findSession(session)?.files;
    if (!kept) return void body.destroy();
    let name: string;
    try {
      name = checkFileName(download.name);
    } catch {
      name = safeFileName(download.name);
    }
    const t0 = performance.now();
    try {
      const info = await kept.add('download', name, mediaTypeOf(name), body, download.size, download.downloadId);
      log.debug('download kept for the harness', { session, bytes: info.size, ms: Math.round(performance.now() - t0) });
      const { document_id, media_type, size, sha256 } = info;
      activity.publish({
        type: 'download_kept',
        session,
        download: { download_id: document_id, name: info.name, media_type, size, sha256 },
        at: Date.now(),
      });
    } catch (err) {
      body.destroy();
      const reason = err instanceof FileRefusal ? err.code : 'aborted';
      kept.downloadNotKept(download.downloadId, name, download.size, reason);
      log.warn('a download was not kept for the harness', { session, reason });
    }
  };
  const parts = desktopParts(config, log, egress.proxy, keepDownload);
  const sandbox = await chooseDesktopSandbox(config, log);
  // The pool reports to the metrics, which are made further down.
  const reportTo: { metrics?: Ops['metrics'] } = {};
  const shared =
    config.desktops.mode === 'shared' && sandbox.settings && config.browser !== 'off'
      ? await startSharedSandbox(config, sandbox.settings)
      : undefined;
  const desktops = createDesktops(config, parts.makeParts, sandbox.settings, shared, log, (event) =>
    reportTo.metrics?.desktopEvent(event),
  );
  const executor = createExecutor(config, store, egress.filter, log);
  const activity = new ActivityHub((err) =>
    log.error('activity observer failed; unsubscribed', { error: String(err) }),
  );
  // The profile each session's hello names: leased, loaded into its browser, saved at its end (docs/PROTOCOL.md "Profiles").
  const sessionProfiles = new SessionProfiles({
    store: profiles.store,
    activity,
    log: log.child({ component: 'profiles' }),
  });
  // Each session's staged files (docs/PROTOCOL.md "Staged documents"), in a private folder of the daemon's.
  const files = await FileStore.open(config.documents, (event) => reportTo.metrics?.fileEvent(event));
  // Endpoints beside the protocol's own, on the same port; each module adds its own.
  // Prefix routes are tried in order: the downloads' and the clipboard's answer only their own paths, the
  // documents' the rest.
  // Scoped links to one session's viewer (docs/SECURITY.md "Links"), made behind the token.
  const links = new LinkRegistry({ activity, log: log.child({ component: 'links' }) });
  const routes: HttpRoute[] = [
    ...profiles.routes,
    ...linkRoutes({
      links,
      isLive: (id) => server.findSession(id) !== undefined,
      takeover: config.takeover.enabled,
    }),
    // Before the documents' routes, which answer every other path under /v1/sessions.
    profileSaveRoute({
      sessionOf: (id) => (server.findSession(id) ? { profile: sessionProfiles.of(id) } : undefined),
    }),
    ...downloadRoutes({ filesOf: (id) => server.findSession(id)?.files }),
    ...clipboardRoutes({
      sessionOf: (id) => {
        const session = server.findSession(id);
        return session && { desktop: session.desktop?.desktop };
      },
      settings: config.clipboard,
      used: (session, op, clipboard) => activity.publish({ type: 'clipboard', session, op, clipboard, at: Date.now() }),
    }),
    ...documentRoutes({
      filesOf: (id) => server.findSession(id)?.files,
      settings: config.documents,
      staged: (session, info) => {
        const { document_id, name, media_type, size, sha256 } = info;
        activity.publish({
          type: 'document_staged',
          session,
          document: { document_id, name, media_type, size, sha256 },
          at: Date.now(),
        });
      },
      removed: (session, documentId) =>
        activity.publish({ type: 'document_removed', session, document_id: documentId, at: Date.now() }),
    }),
  ];
  // MCP (docs/MCP.md): /mcp on this port, and stdio for `deskbatch mcp`; each MCP session gets a session of
  // its own, opened and run as a WebSocket client's is.
  const mcp = createMcp({
    host: {
      openSession: (request) => server.openSession(request),
      endSessionNow: (session) => server.endSessionNow(session),
      welcome: (session) => server.welcome(session, false),
      accepting: () => server.accepting(),
    },
    served: executor.served,
    config,
    log: log.child({ component: 'mcp' }),
  });
  routes.push(...mcp.routes);
  const sockets: SocketRoute[] = [];
  // The live viewer: GET /viewer (the page) and its feed /viewer/feed (docs/VIEWER.md).
  const viewer = createViewer({
    activity,
    log: log.child({ component: 'viewer' }),
    // With takeover on, the page gets its side of it (the snapshot's flag); noVNC is the live view's.
    ...(config.takeover.enabled ? { takeover: {} } : {}),
    novncDir: config.takeover.novncDir,
    embedOrigins: config.embedOrigins,
  });
  routes.push(...viewer.routes);
  sockets.push(viewer.socket);
  // Session recordings (docs/RECORDING.md): written as the activity goes by, served behind the token.
  const recorder =
    config.recording.mode === 'off'
      ? undefined
      : await startRecorder(config, activity, log, {
          desktopOf: (id) => server.findSession(id)?.desktop?.desktop,
          bytes: (artifact, n) => reportTo.metrics?.recordingBytes(artifact, n),
          documentContent: (id, documentId) => server.findSession(id)?.files?.open(documentId),
          downloadContent: (id, downloadId) => server.findSession(id)?.files?.open(downloadId),
          removed: (reason) => reportTo.metrics?.recordingRemoved(reason),
        });
  if (recorder) routes.push(...recordingRoutes(recorder.store, (id) => recorder.recorder.summary(id)));
  // The live view of every desktop (its VNC socket), and human takeover from the viewer (docs/VIEWER.md
  // "Takeover"): the take only when the operator allows it (`settings.enabled`).
  const vnc = new TakeoverManager({
    settings: config.takeover,
    activity,
    log: log.child({ component: 'takeover' }),
    desktopOf: (id) => server.findSession(id)?.desktop?.desktop,
    notify: (id, message) => server.notifySession(id, message),
  });
  const takeover = config.takeover.enabled ? vnc : undefined;
  sockets.push(...vnc.sockets());
  // The harness's CDP door (docs/PROTOCOL.md "CDP for the harness"): the route answers with a refusal when off.
  const cdpRefused = cdpUnavailable(config, sandbox.mode);
  const cdp = cdpRoute({
    settings: config.cdp,
    heartbeatMs: config.heartbeatMs,
    unavailable: cdpRefused,
    sessionOf: (id) => {
      const session = server.findSession(id);
      return session && { desktop: session.desktop?.desktop };
    },
    activity,
    log: log.child({ component: 'cdp' }),
  });
  sockets.push(cdp.route);
  if (config.cdp.enabled) {
    if (cdpRefused) log.warn(`--allow-cdp: every session's CDP connection will be refused: ${cdpRefused}`);
    else log.info("harnesses may drive their session's browser over CDP (--allow-cdp)");
  }
  // /metrics and /readyz (docs/OPERATIONS.md); `server` is read only when a request comes.
  const ops = createOps({
    activity,
    executor,
    desktops,
    status: () => server.status(),
    containment: (): Containment => ({
      browser_policy: policy === undefined ? 'off' : policy.enforced ? 'enforced' : 'missing',
      browser_egress: !egress.proxy
        ? 'off'
        : config.browserSettings.allowPrivateNetworks
          ? 'private_networks_allowed'
          : 'filtered',
      browser_sandbox: parts.sandbox(),
      desktop_sandbox: sandbox.mode,
      display_auth: config.displayAuth,
    }),
    ...(recorder ? { recordings: () => recorder.store.usage } : {}),
    files: () => files.usage,
    live: () => ({
      watchers: vnc.live.watchers,
      vncServers: vnc.live.servers,
      linkSockets: links.sockets,
      links: links.counts,
    }),
    ...(config.instance !== undefined ? { instance: config.instance } : {}),
  });
  reportTo.metrics = ops.metrics;
  routes.push(...ops.routes);
  const server: DeskbatchServer = new DeskbatchServer({
    config,
    executor,
    desktops,
    describeToolsets: describeToolsets(executor.served, executor.plainTool),
    log,
    activity,
    routes,
    sockets,
    ...(takeover ? { takeover } : {}),
    links,
    files,
    profiles: sessionProfiles,
    ...(recorder
      ? {
          secretInput: (session: string, toolUse: string) => recorder.recorder.secretInput(session, toolUse),
          sessionEnding: (session: string) => recorder.recorder.sessionEnding(session),
        }
      : {}),
    geometry: welcomeGeometry(config),
  });
  const address = await server.listen();
  listening.port = address.port;
  // The shared desktop's browser starts now, in the background, as a pooled desktop's does when it is
  // built warm: the first browser call should not wait for Chromium's launch (1–2 s here). After
  // listen(), so loading Playwright does not hold up the daemon's start.
  if (desktops instanceof SharedDesktop && config.browserSettings.launchAtStart) desktops.desktop.browser?.warm();
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  log.info(
    desktops.mode === 'pool'
      ? `desktops: a pool of up to ${config.desktops.max} (--desktops), ${config.desktops.warm} kept warm (--warm), one per session`
      : 'desktops: one, shared by every session (DISPLAY given)',
    { mode: desktops.mode, max: config.desktops.max, warm: config.desktops.warm },
  );
  let closing: Promise<void> | undefined;
  return {
    url: `ws://${host}:${address.port}${PROTOCOL_PATH}`,
    address,
    server,
    desktops,
    store,
    activity,
    files,
    profiles: profiles.store,
    mcp,
    close() {
      closing ??= (async () => {
        // Before any session ends: a desktop it gives back is not replaced by a new warm one, which the
        // pool would start during the shutdown.
        desktops.beginClose();
        // First: the agents' waiting batches are let go, and told the person's control ended.
        links.close();
        await vnc.close();
        cdp.close();
        await mcp.close();
        await server.close();
        await files.close();
        profiles.store.close();
        // Every session closed: their recordings are finalised (the videos' last fragments written).
        await recorder?.recorder.close();
        ops.metrics.close();
        viewer.close();
        await desktops.close();
        await egress.proxy?.close();
      })();
      return closing;
    },
  };
}

/**
 * Why no session's browser may be reached over CDP on this daemon, or undefined when a pool desktop's may
 * (src/server/cdp-route.ts answers it with 409).
 */
function cdpUnavailable(config: DaemonConfig, sandbox: SandboxMode): string | undefined {
  if (config.browser === 'off') return 'this daemon runs no browser (--browser off)';
  if (config.desktops.mode === 'shared') {
    return "the desktop is shared: its one browser holds every session's contexts, so CDP to it would reach them all";
  }
  if (sandbox === 'off') {
    return "desktops run without a sandbox (--sandbox off): the browser's DevTools port would listen on the host, open to every local process";
  }
  return undefined;
}

/** The recordings' store, its retention applied to what an earlier run left, and the recorder observing `activity`. */
async function startRecorder(
  config: DaemonConfig,
  activity: ActivityHub,
  log: Logger,
  report: {
    desktopOf: (sessionId: string) => DesktopResources | undefined;
    bytes: (artifact: Artifact, bytes: number) => void;
    removed: (reason: 'count' | 'bytes' | 'age' | 'not_kept') => void;
    documentContent: RecorderDeps['documentContent'];
    downloadContent: RecorderDeps['downloadContent'];
  },
): Promise<{ store: RecordingStore; recorder: Recorder }> {
  const rlog = log.child({ component: 'recording' });
  const store = new RecordingStore(config.recording.dir, config.recording.retention, rlog, (_id, why) =>
    report.removed(why),
  );
  await store.init();
  const video = config.recording.video ? await videoStarter(config.recording.videoFps, rlog) : undefined;
  const recorder = new Recorder({
    settings: config.recording,
    store,
    log: rlog,
    ...(video ? { video } : {}),
    onBytes: report.bytes,
    desktopOf: report.desktopOf,
    desktopMode: config.desktops.mode,
    ...(report.documentContent ? { documentContent: report.documentContent } : {}),
    ...(report.downloadContent ? { downloadContent: report.downloadContent } : {}),
  });
  recorder.attach(activity);
  log.info(`recording ${config.recording.mode === 'all' ? 'every session' : 'sessions that ask'} into ${store.root}`);
  return { store, recorder };
}

/** Records a desktop's display with ffmpeg (src/recording/video.ts); undefined, with a warning, without ffmpeg. */
async function videoStarter(fps: number, log: Logger): Promise<VideoStarter | undefined> {
  if (!(await DesktopVideo.available())) {
    log.warn('recordings have no desktop video: ffmpeg with x11grab and libx264 is not installed (npm run setup)');
    return undefined;
  }
  return async (desktop, paths) => {
    const screen = desktop.screen;
    if (!screen) return undefined;
    const size = await desktop.driver.displaySize();
    return DesktopVideo.start({
      display: screen.display,
      ...(screen.xauthority ? { xauthority: screen.xauthority } : {}),
      ...(screen.within ? { within: screen.within } : {}),
      size,
      fps,
      ...paths,
      log: log.child({ desktop: desktop.id }),
    });
  };
}

/**
 * The desktops sessions act on: a pool of their own (src/desktop-pool/pool.ts),
 * or the one display the operator gave, shared.
 */
function createDesktops(
  config: DaemonConfig,
  makeParts: PartsFactory,
  sandbox: SandboxSettings | undefined,
  shared: SharedSandbox | undefined,
  log: Logger,
  onEvent: (event: PoolEvent) => void,
): Desktops {
  const downloadsRoot = resolve(config.browserSettings.downloadsDir);
  if (config.desktops.mode === 'pool') {
    const pool = new DesktopPool({
      ...config.desktops,
      defaultSize: config.desktops.sizes[0]!,
      downloadsRoot,
      makeParts,
      servesBrowser: config.browser !== 'off',
      ...(sandbox ? { sandbox } : {}),
      log: log.child({ component: 'desktops' }),
      onEvent,
    });
    pool.start();
    return pool;
  }
  const { driver, browser } = makeParts({
    id: 'shared',
    display: config.display ?? '',
    // Always set, also when empty: a value in the daemon's own environment may name another display's screen.
    env: { [FRAMEBUFFER_ENV]: config.displayFramebuffer ?? '' },
    downloadsDir: downloadsRoot,
    ...(shared ? { sandbox: { ...shared, browserOnly: true } } : {}),
  });
  // Start the desktop worker now: its first start (nut-js; from the sources, tsx too) takes 1–3 s, which the first batch should not wait for.
  let size: Size | undefined;
  driver.displaySize().then(
    (s) => (size = s),
    (err: unknown) => log.warn('display not reachable at start', { error: String(err) }),
  );
  return new SharedDesktop(
    {
      id: 'shared',
      driver,
      browser,
      lane: new Lane(),
      hold: new Hold(),
      ...(config.display
        ? {
            screen: {
              display: config.display,
              ...(process.env.XAUTHORITY ? { xauthority: process.env.XAUTHORITY } : {}),
            },
          }
        : {}),
    },
    () => size,
    () => ({ worker: driver.pid, browser: browser?.pid }),
    async () => {
      await browser?.close();
      await driver.close();
      shared?.egress?.server.close();
      await shared?.box.stop();
    },
  );
}

/** The shared desktop's browser sandbox: Chromium alone, on the operator's display. */
interface SharedSandbox {
  box: DesktopSandbox;
  egress?: { server: Server; port: number };
}

/**
 * Shared mode: the operator's display cannot be sandboxed, but the daemon's
 * Chromium on it can. Its sandbox gets the display's socket (bound at its
 * usual path) and a copy of its cookie; the worker stays outside, driving
 * the operator's display.
 */
async function startSharedSandbox(config: DaemonConfig, settings: SandboxSettings): Promise<SharedSandbox> {
  // No display: a headless browser, with nothing of X to bring in.
  const n = config.display ? displayNumber(config.display) : '';
  if (n === undefined) {
    throw new ConfigError(
      `the browser's sandbox needs a local display (:N), got ${JSON.stringify(config.display)}; or start with --sandbox off`,
    );
  }
  const uid = settings.mode === 'uid' ? settings.ids.take() : undefined;
  const box = await DesktopSandbox.start({
    id: 'shared',
    mode: settings.mode,
    ...(uid !== undefined ? { uid } : {}),
    framebufferBytes: 0,
    ...(n ? { extraBinds: [{ path: displaySocketPath(`:${n}`)!, at: `/tmp/.X11-unix/X${n}`, rw: true }] } : {}),
  });
  try {
    // The operator's cookie file may be unreadable to the sandbox's uid: a copy of its own.
    const cookie = process.env.XAUTHORITY ? await readFile(process.env.XAUTHORITY).catch(() => undefined) : undefined;
    if (cookie) {
      const path = join(box.folders.display, 'Xauthority');
      await writeFile(path, cookie, { mode: 0o600 });
      await box.give(path);
      box.xauthority = path;
    }
    const egress = config.browser === 'off' ? undefined : await box.proxyListener();
    return { box, ...(egress ? { egress } : {}) };
  } catch (err) {
    await box.stop();
    throw err;
  }
}
