/**
 * `GET /readyz`: whether this daemon can take work now (docs/OPERATIONS.md).
 * No token and nothing secret in the answer: load balancers and container
 * runtimes probe it.
 *
 * Ready means: the server accepts sessions, the desktop worker answers
 * `displaySize()` within a short bound, and, when the browser is served, its
 * launch circuit is not open. The desktop answer is cached briefly and only
 * one probe runs at a time, so probes cannot load the desktop worker; the
 * browser is never launched for readiness: its launch circuit breaker's
 * state is read.
 */
import type { HttpRoute, ServerStatus } from '../server/server.ts';
import { orAfter } from '../resilience.ts';

export type NotReadyReason = 'shutting_down' | 'display_unreachable' | 'display_unresponsive' | 'browser_circuit_open';

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
  /** The X display: our own Xvfb, which admits only cookie holders, or a display the operator gave. */
  display_auth: 'cookie' | 'external';
}

export type Readiness =
  | {
      status: 'ready';
      display: { width: number; height: number };
      browser: 'off' | 'ok';
      containment: Containment;
    }
  | { status: 'not_ready'; reason: NotReadyReason };

/** The browser's launch circuit (src/resilience.ts ResourceBreaker): open means launches are refused now. */
export interface BrowserCircuitView {
  open(): boolean;
}

export interface ReadinessDeps {
  status: () => ServerStatus;
  /** The desktop driver's displaySize(); asked at most once per `cacheMs`. */
  displaySize: () => Promise<{ width: number; height: number }>;
  /** Undefined when the daemon serves no browser. */
  browser?: BrowserCircuitView;
  containment: () => Containment;
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

  const probeDisplay = async (): Promise<DisplayCheck> => {
    // No AbortSignal: cancelling a worker op may end with the worker killed. A late answer is left to finish.
    const size = deps.displaySize().then(
      (s) => s,
      () => 'failed' as const,
    );
    const answer = await orAfter(size, timeoutMs, 'late' as const);
    if (answer === 'late') return { ok: false, reason: 'display_unresponsive' };
    if (answer === 'failed') return { ok: false, reason: 'display_unreachable' };
    return { ok: true, size: { width: answer.width, height: answer.height } };
  };

  const display = (): Promise<DisplayCheck> => {
    const now = performance.now();
    if (cached && now - cached.at < cacheMs) return Promise.resolve(cached.value);
    running ??= probeDisplay()
      .then((value) => {
        cached = { at: performance.now(), value };
        return value;
      })
      .finally(() => (running = undefined));
    return running;
  };

  const check = async (): Promise<Readiness> => {
    if (!deps.status().accepting) return { status: 'not_ready', reason: 'shutting_down' };
    const d = await display();
    if (!d.ok) return { status: 'not_ready', reason: d.reason };
    if (deps.browser?.open()) return { status: 'not_ready', reason: 'browser_circuit_open' };
    // Shutdown may have begun while the display answered.
    if (!deps.status().accepting) return { status: 'not_ready', reason: 'shutting_down' };
    return { status: 'ready', display: d.size, browser: deps.browser ? 'ok' : 'off', containment: deps.containment() };
  };

  return {
    check,
    route: {
      method: 'GET',
      path: '/readyz',
      auth: 'none',
      async handle(_req, res) {
        const r = await check();
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
