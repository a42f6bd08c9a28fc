/**
 * `GET /readyz`: whether this daemon can take work now (docs/OPERATIONS.md).
 * No token and nothing secret in the answer: load balancers and container
 * runtimes probe it.
 *
 * Ready means: the server accepts sessions, and a new session would get a
 * desktop now. With a pool (src/desktop-pool/pool.ts) that is a free desktop (a
 * warm one, or room to start one): a full pool is not ready, so a load
 * balancer sends new sessions elsewhere (sessions already here reach it by
 * its own address). With the shared display: the desktop worker answers
 * `displaySize()` within a short bound, and, when the browser is served, its
 * launch circuit is not open. The desktop answer is cached briefly and only
 * one probe runs at a time, so probes cannot load the desktop worker; the
 * browser is never launched for readiness: its launch circuit breaker's
 * state is read.
 */
import type { HttpRoute, ServerStatus } from '../server/server.ts';
import { orAfter } from '../base/resilience.ts';
import { SharedDesktop, type Capacity, type DesktopPool, type Desktops } from '../desktop-pool/pool.ts';
import type { DesktopResources } from '../desktop-pool/desktop.ts';

type DesktopDriver = Pick<DesktopResources['driver'], 'displaySize'>;

export type NotReadyReason =
  | 'shutting_down'
  | 'display_unreachable'
  | 'display_unresponsive'
  | 'browser_starting'
  | 'browser_circuit_open'
  | 'no_free_desktop';

/** The desktops' capacity, in every answer: what a router needs to pick a host with room. */
export type DesktopCapacity = Pick<Capacity, 'mode' | 'max' | 'free' | 'leased' | 'waiting'>;

/**
 * What holds the model in (docs/SECURITY.md), said in /readyz so an operator
 * or an orchestrator sees a daemon that runs less contained than it should.
 */
export interface Containment {
  /** Chromium's managed policy (src/browser/policy.ts): installed, missing, or no browser. */
  browser_policy: 'enforced' | 'missing' | 'off';
  /** The egress proxy (src/browser/egress.ts): non-public addresses refused, allowed by the operator, or no browser. */
  browser_egress: 'filtered' | 'private_networks_allowed' | 'off';
  /** Chromium's renderer sandbox; `not_started` until the browser's first launch tells. */
  browser_sandbox: 'on' | 'off' | 'not_started' | 'off_no_browser';
  /** Each desktop's sandbox (docs/SECURITY.md "A sandbox per desktop"): its own uid, its own user namespace, or none. */
  desktop_sandbox: 'uid' | 'userns' | 'off';
  /** The X display: our own Xvfb, which admits only cookie holders, or a display the operator gave. */
  display_auth: 'cookie' | 'external';
}

/** `instance` is the daemon's `--instance` (docs/DEPLOY.md "Per-pod tokens"), in every answer when given. */
export type Readiness = (
  | {
      status: 'ready';
      display: { width: number; height: number };
      browser: 'off' | 'ok';
      containment: Containment;
      desktops: DesktopCapacity;
    }
  | { status: 'not_ready'; reason: NotReadyReason; desktops: DesktopCapacity }
) & { instance?: string };

export interface ReadinessDeps {
  status: () => ServerStatus;
  /** The shared desktop's driver is asked displaySize() at most once per `cacheMs`; a pool's capacity is read. */
  desktops: Desktops;
  containment: () => Containment;
  /** What the daemon is called in its fleet (`--instance`): a client derives the pod's token from it. */
  instance?: string;
  /** How long the display may take to answer, in ms. Default 1000. */
  timeoutMs?: number;
  /** How long a display answer is reused, in ms. Default 1000. */
  cacheMs?: number;
}

type DisplayCheck = { ok: true; size: { width: number; height: number } } | { ok: false; reason: NotReadyReason };

export interface ReadinessCheck {
  check(): Promise<Readiness>;
  route: HttpRoute;
}

export function createReadiness(deps: ReadinessDeps): ReadinessCheck {
  const timeoutMs = deps.timeoutMs ?? 1_000;
  const cacheMs = deps.cacheMs ?? 1_000;
  let cached: { at: number; value: DisplayCheck } | undefined;
  let running: Promise<DisplayCheck> | undefined;

  const shared = deps.desktops instanceof SharedDesktop ? deps.desktops.desktop : undefined;
  const capacity = (): DesktopCapacity => {
    const { mode, max, free, leased, waiting } = deps.desktops.capacity();
    return { mode, max, free, leased, waiting };
  };
  const probeDisplay = async (driver: DesktopDriver): Promise<DisplayCheck> => {
    // No AbortSignal: cancelling a worker op may end with the worker killed. A late answer is left to finish.
    const size = driver.displaySize().then(
      (s) => s,
      () => 'failed' as const,
    );
    const answer = await orAfter(size, timeoutMs, 'late' as const);
    if (answer === 'late') return { ok: false, reason: 'display_unresponsive' };
    if (answer === 'failed') return { ok: false, reason: 'display_unreachable' };
    return { ok: true, size: { width: answer.width, height: answer.height } };
  };

  const display = (driver: DesktopDriver): Promise<DisplayCheck> => {
    const now = performance.now();
    if (cached && now - cached.at < cacheMs) return Promise.resolve(cached.value);
    running ??= probeDisplay(driver)
      .then((value) => {
        cached = { at: performance.now(), value };
        return value;
      })
      .finally(() => (running = undefined));
    return running;
  };

  const check = async (): Promise<Readiness> => {
    // Every answer, ready or not, says what the desktops hold: a drain waits for leased and waiting to reach 0.
    const notReady = (reason: NotReadyReason): Readiness => ({ status: 'not_ready', reason, desktops: capacity() });
    if (!deps.status().accepting) return notReady('shutting_down');
    if (!shared) {
      const pool = deps.desktops as DesktopPool;
      const desktops = capacity();
      if (desktops.free === 0) return notReady('no_free_desktop');
      return {
        status: 'ready',
        display: pool.defaultSize,
        browser: pool.servesBrowser ? 'ok' : 'off',
        containment: deps.containment(),
        desktops,
      };
    }
    const d = await display(shared.driver);
    if (!d.ok) return notReady(d.reason);
    // The browser launched at start (BrowserManager.warm), as a pooled desktop is free only once its
    // browser runs; a launch that fails ends this too, and calls then get its error.
    if (shared.browser?.warmingUp) return notReady('browser_starting');
    if (shared.browser?.options.launchGuard?.coolingDown) return notReady('browser_circuit_open');
    // Shutdown may have begun while the display answered.
    if (!deps.status().accepting) return notReady('shutting_down');
    return {
      status: 'ready',
      display: d.size,
      browser: shared.browser ? 'ok' : 'off',
      containment: deps.containment(),
      desktops: capacity(),
    };
  };

  const named = async (): Promise<Readiness> => {
    const r = await check();
    return deps.instance === undefined ? r : { ...r, instance: deps.instance };
  };

  return {
    check: named,
    route: {
      method: 'GET',
      path: '/readyz',
      auth: 'none',
      async handle(_req, res) {
        const r = await named();
        res
          .writeHead(r.status === 'ready' ? 200 : 503, {
            'content-type': 'application/json',
            'cache-control': 'no-store',
          })
          .end(JSON.stringify(r));
      },
    },
  };
}
