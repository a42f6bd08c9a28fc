/**
 * Where a session's desktop comes from (docs/PROTOCOL.md "Desktops").
 *
 * - `DesktopPool` (no `DISPLAY` given): every session leases a desktop of its
 *   own for its lifetime (src/desktop-pool/desktop.ts: own Xvfb and X cookie,
 *   openbox, worker, browser, HOME). When the session ends the desktop is
 *   destroyed, every process and folder of it, and a fresh one is built in
 *   its place: nothing of one session reaches the next. At most `max`
 *   desktops exist at once; `warm` of them are kept started and idle, so a
 *   lease is immediate. When none is free, sessions wait in one FIFO queue
 *   (bounded in length and in time, so none waits for ever and none is
 *   overtaken), or are refused at once with a retry hint, as each asked.
 * - `SharedDesktop` (`DISPLAY` given): one desktop for every session, its
 *   lane running their computer batches one at a time (the v1 behaviour).
 *
 * A pooled desktop whose Xvfb or openbox dies is rebuilt: a leased one in
 * place, for the same session (its calls fail as retryable meanwhile), an
 * idle one replaced. Nothing of it reaches another desktop: each has its
 * own worker, browser and circuit breakers.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Hold } from './hold.ts';
import { Lane } from './lane.ts';
import type { Size } from '../base/geometry.ts';
import type { Logger } from '../base/log.ts';
import {
  buildDesktop,
  destroyParts,
  type DesktopParts,
  type DesktopResources,
  type PartsFactory,
  type SandboxSettings,
} from './desktop.ts';

export type DesktopMode = 'pool' | 'shared';
/** `broken`: a start failed (cooling down before the next try), or its display died and it is being rebuilt. */
export type DesktopState = 'starting' | 'warm' | 'leased' | 'recycling' | 'broken';
export const DESKTOP_STATES: readonly DesktopState[] = ['starting', 'warm', 'leased', 'recycling', 'broken'];

export interface Capacity {
  mode: DesktopMode;
  /** Desktops this daemon may hold at once. */
  max: number;
  /** New sessions that would get a desktop now without queueing (warm ones, plus room to start more). */
  free: number;
  /** Sessions holding a desktop. */
  leased: number;
  /** Sessions queued for one. */
  waiting: number;
  /** Desktops by state. */
  states: Record<DesktopState, number>;
}

export interface DesktopInfo {
  id: string;
  state: DesktopState;
  session: string | undefined;
  display: Size;
  /** Roots of its process trees, for memory accounting and fault tests. */
  processes: { xvfb?: number; windowManager?: number; worker?: number; browser?: number };
  /** How an X client reaches its display (operators' tools and tests; never sent to a client). */
  x?: { DISPLAY: string; XAUTHORITY: string };
  /** Its HOME and downloads folders (a pooled desktop's; removed with it). */
  folders?: { home: string; downloads: string };
}

/** No desktop for a new session now; `retryAfterMs` says when trying again is worth it. */
export class NoDesktopError extends Error {
  override readonly name = 'NoDesktopError';
  readonly code = 'no_desktop';
  constructor(
    message: string,
    readonly retryAfterMs: number,
  ) {
    super(message);
  }
}

export interface LeaseRequest {
  sessionId: string;
  /** The display size asked for; the pool's default when absent. The caller checks it is allowed. */
  size?: Size;
  /** What to do when no desktop is free: queue for one, or be refused at once. */
  whenBusy: 'wait' | 'refuse';
  /** Aborting leaves the queue (the connection went away). */
  signal: AbortSignal;
  /** Called with the session's place in the queue (1 = next), each time it changes. */
  onQueue?: (position: number, waiting: number) => void;
}

export interface DesktopLease {
  desktop: DesktopResources;
  waitedMs: number;
  /** The session ended: the desktop goes back (a pooled one is destroyed and replaced). Idempotent. */
  release(): void;
}

export interface Desktops {
  readonly mode: DesktopMode;
  lease(request: LeaseRequest): Promise<DesktopLease>;
  capacity(): Capacity;
  list(): DesktopInfo[];
  /**
   * The daemon begins shutting down: no desktop is started or rebuilt from now on (not even in place of
   * one whose session ends meanwhile), no session gets one. Idempotent; close() does it first.
   */
  beginClose(): void;
  close(): Promise<void>;
}

/** What the pool reports for metrics (src/ops/metrics.ts). */
export type PoolEvent =
  | { kind: 'leased'; waitedMs: number }
  | { kind: 'started'; ms: number }
  | { kind: 'recycled'; ms: number }
  | { kind: 'start_failed' }
  | { kind: 'rebuilt' };

export interface PoolOptions {
  max: number;
  warm: number;
  defaultSize: Size;
  /** Sessions that may queue for a desktop; more are refused. */
  maxWaiting: number;
  /** How long a session may queue before it is refused. */
  maxWaitMs: number;
  downloadsRoot: string;
  makeParts: PartsFactory;
  servesBrowser: boolean;
  /** How each desktop is sandboxed; absent: not at all (`--sandbox off`). */
  sandbox?: SandboxSettings;
  log: Logger;
  onEvent?: (event: PoolEvent) => void;
}

const sameSize = (a: Size, b: Size): boolean => a.width === b.width && a.height === b.height;
/** After a failed start, the first pause before the next; doubled per failure in a row, up to the cap. */
const START_BACKOFF_MS = 1_000;
const START_BACKOFF_CAP_MS = 30_000;
/** What `retry_after_ms` says before any start was timed. */
const DEFAULT_START_MS = 3_000;
/** The pause after the `n`th failed start in a row. */
const startBackoffMs = (n: number): number => Math.min(START_BACKOFF_CAP_MS, START_BACKOFF_MS * 2 ** (n - 1));

/** A count of zero for every state. */
const noDesktops = (): Record<DesktopState, number> =>
  Object.fromEntries(DESKTOP_STATES.map((s) => [s, 0])) as Record<DesktopState, number>;

class PooledDesktop implements DesktopResources {
  readonly lane = new Lane();
  readonly hold = new Hold();
  state: DesktopState = 'starting';
  session: string | undefined;
  parts: DesktopParts | undefined;

  constructor(
    readonly id: string,
    readonly size: Size,
  ) {}

  get driver(): DesktopResources['driver'] {
    return this.need().driver;
  }

  get browser(): DesktopResources['browser'] {
    return this.need().browser;
  }

  get clipboard(): DesktopResources['clipboard'] {
    return this.parts?.clipboard;
  }

  get screen(): DesktopResources['screen'] {
    const d = this.parts?.display;
    const within = this.parts?.sandbox;
    return d ? { display: d.display, xauthority: d.xauthority, ...(within ? { within } : {}) } : undefined;
  }

  private need(): DesktopParts {
    if (!this.parts) throw new Error(`desktop ${this.id} is not started`);
    return this.parts;
  }

  processes(): DesktopInfo['processes'] {
    const p = this.parts;
    if (!p) return {};
    return {
      xvfb: p.display.pid,
      windowManager: p.display.windowManagerPid,
      worker: p.driver.pid,
      browser: p.browser?.pid,
    };
  }
}

interface Waiter {
  request: LeaseRequest;
  size: Size;
  since: number;
  position: number;
  resolve: (lease: DesktopLease) => void;
  reject: (err: Error) => void;
  cleanup: () => void;
}

export class DesktopPool implements Desktops {
  readonly mode = 'pool' as const;
  private readonly desktops = new Set<PooledDesktop>();
  private readonly waiters: Waiter[] = [];
  private built = 0;
  private failuresInRow = 0;
  private startMs = DEFAULT_START_MS;
  private closed = false;
  /** Aborted by close(): ends a rebuild's pause between attempts. */
  private readonly closing = new AbortController();
  /** Starts, rebuilds and teardowns under way: close() waits for them, so none is cut off by the process's exit. */
  private readonly underWay = new Set<Promise<void>>();

  constructor(private readonly options: PoolOptions) {}

  /** Runs `work` in the background, counted in underWay until it settles; a failure is logged, never thrown. */
  private background(work: Promise<void>): void {
    const tracked = work.catch((err: unknown) =>
      this.options.log.error('a desktop start, rebuild or teardown failed', { error: String(err) }),
    );
    this.underWay.add(tracked);
    void tracked.finally(() => this.underWay.delete(tracked));
  }

  /** The display size of a session that asks for none. */
  get defaultSize(): Size {
    return this.options.defaultSize;
  }

  /** Whether its desktops run a browser. */
  get servesBrowser(): boolean {
    return this.options.servesBrowser;
  }

  /** Starts the warm desktops. */
  start(): void {
    this.reconcile();
  }

  lease(request: LeaseRequest): Promise<DesktopLease> {
    const size = request.size ?? this.options.defaultSize;
    if (this.closed) return Promise.reject(new NoDesktopError('the daemon is shutting down', 0));
    if (request.signal.aborted) return Promise.reject(new NoDesktopError('the session went away', 0));
    const since = performance.now();
    if (!this.waiters.length) {
      const warm = this.idle(size);
      if (warm) return Promise.resolve(this.assign(warm, request.sessionId, since));
    }
    // Queueing is bounded: a refusal now beats a wait nobody can see the end of.
    const startable = !this.waiters.length && this.room() > 0;
    if (!startable && request.whenBusy === 'refuse') {
      return Promise.reject(
        new NoDesktopError(`every one of the ${this.options.max} desktops is in use`, this.retryAfterMs()),
      );
    }
    if (this.waiters.length >= this.options.maxWaiting) {
      return Promise.reject(
        new NoDesktopError(
          `every desktop is in use and ${this.waiters.length} sessions already wait for one`,
          this.retryAfterMs(),
        ),
      );
    }
    return new Promise<DesktopLease>((resolve, reject) => {
      const waiter: Waiter = {
        request,
        size,
        since,
        position: 0,
        resolve,
        reject,
        cleanup: () => {
          clearTimeout(timer);
          request.signal.removeEventListener('abort', onAbort);
        },
      };
      const leave = (err: Error): void => {
        const i = this.waiters.indexOf(waiter);
        if (i < 0) return;
        this.waiters.splice(i, 1);
        waiter.cleanup();
        reject(err);
        this.reconcile();
      };
      const onAbort = (): void => leave(new NoDesktopError('the session went away while it waited', 0));
      const timer = setTimeout(
        () =>
          leave(new NoDesktopError(`no desktop became free within ${this.options.maxWaitMs} ms`, this.retryAfterMs())),
        this.options.maxWaitMs,
      );
      timer.unref();
      request.signal.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
      this.reconcile();
    });
  }

  capacity(): Capacity {
    const states = noDesktops();
    let leased = 0;
    for (const d of this.desktops) {
      states[d.state]++;
      if (d.session !== undefined) leased++;
    }
    // Starting desktops no session waits for count as free: a new session takes the first one ready.
    const free = Math.max(0, states.warm + states.starting + this.room() - this.waiters.length);
    return { mode: 'pool', max: this.options.max, free, leased, waiting: this.waiters.length, states };
  }

  list(): DesktopInfo[] {
    return [...this.desktops].map((d) => ({
      id: d.id,
      state: d.state,
      session: d.session,
      display: d.size,
      processes: d.processes(),
      ...(d.parts ? { x: d.parts.display.env, folders: { home: d.parts.home, downloads: d.parts.downloads } } : {}),
    }));
  }

  beginClose(): void {
    if (this.closed) return;
    this.closed = true;
    this.closing.abort();
    for (const w of this.waiters.splice(0)) {
      w.cleanup();
      w.reject(new NoDesktopError('the daemon is shutting down', 0));
    }
  }

  async close(): Promise<void> {
    this.beginClose();
    // A desktop still starting is torn down as its start ends (startDesktop), a recycling one by its
    // recycle (not twice: its uid would go back to the allocator twice), both before close() resolves: a
    // daemon that exits right after it leaves no processes, HOME or downloads folder behind.
    const destroys = [...this.desktops].filter((d) => d.state !== 'recycling').map((d) => destroyParts(d.parts ?? {}));
    await Promise.all(destroys);
    // Work that began meanwhile (a session released its desktop during the destroys) is waited for too.
    while (this.underWay.size) await Promise.all(this.underWay);
    this.desktops.clear();
  }

  /** Room to start another desktop. */
  private room(): number {
    return this.options.max - this.desktops.size;
  }

  private idle(size: Size): PooledDesktop | undefined {
    for (const d of this.desktops) if (d.state === 'warm' && sameSize(d.size, size)) return d;
    return undefined;
  }

  private retryAfterMs(): number {
    // The next desktop frees up at best one teardown and start from now.
    return Math.max(1_000, Math.round(this.startMs * 1.5));
  }

  private assign(d: PooledDesktop, sessionId: string, since: number): DesktopLease {
    d.state = 'leased';
    d.session = sessionId;
    const waitedMs = performance.now() - since;
    this.options.onEvent?.({ kind: 'leased', waitedMs });
    this.options.log.info('desktop leased', { desktop: d.id, session: sessionId, waited_ms: Math.round(waitedMs) });
    let released = false;
    return {
      desktop: d,
      waitedMs,
      release: () => {
        if (released) return;
        released = true;
        this.background(this.recycle(d));
      },
    };
  }

  /**
   * Serves the queue in order, then keeps `warm` desktops ready. A queued
   * session is covered by a desktop of its size that is idle (it gets it),
   * or starting (it waits for it); else one is started if there is room, or
   * an idle desktop of another size is torn down to make room. The first
   * session that cannot be covered stops the walk: nobody overtakes it.
   */
  private reconcile(): void {
    if (this.closed) return;
    const starting = new Map<string, number>();
    const key = (s: Size): string => `${s.width}x${s.height}`;
    for (const d of this.desktops) {
      if (d.state === 'starting' && d.session === undefined)
        starting.set(key(d.size), (starting.get(key(d.size)) ?? 0) + 1);
    }
    for (let i = 0; i < this.waiters.length;) {
      const w = this.waiters[i]!;
      const warm = this.idle(w.size);
      if (warm) {
        this.waiters.splice(i, 1);
        w.cleanup();
        w.resolve(this.assign(warm, w.request.sessionId, w.since));
        continue;
      }
      const k = key(w.size);
      const coming = starting.get(k) ?? 0;
      if (coming > 0) starting.set(k, coming - 1);
      else if (this.room() > 0) this.startDesktop(w.size);
      else {
        const other = [...this.desktops].find((d) => d.state === 'warm');
        if (other) this.background(this.recycle(other));
        break;
      }
      i++;
    }
    // Queue positions, told only when they change.
    this.waiters.forEach((w, i) => {
      if (w.position === i + 1) return;
      w.position = i + 1;
      w.request.onQueue?.(w.position, this.waiters.length);
    });
    const size = this.options.defaultSize;
    let ready = [...this.desktops].filter((d) => d.state === 'warm' && sameSize(d.size, size)).length;
    ready += starting.get(key(size)) ?? 0;
    while (ready < this.options.warm && this.room() > 0 && !this.waiters.length) {
      this.startDesktop(size);
      ready++;
    }
  }

  private startDesktop(size: Size): void {
    const d = new PooledDesktop(`d${++this.built}`, size);
    this.desktops.add(d);
    const t0 = performance.now();
    this.background(
      this.build(d).then(
        async (parts) => {
          if (this.closed) return destroyParts(parts);
          const ms = performance.now() - t0;
          this.startMs = ms;
          this.failuresInRow = 0;
          this.options.onEvent?.({ kind: 'started', ms });
          d.parts = parts;
          d.state = 'warm';
          parts.display.onUnexpectedExit((what) => this.background(this.broke(d, what)));
          this.reconcile();
        },
        (err: unknown) => {
          this.failuresInRow++;
          this.options.onEvent?.({ kind: 'start_failed' });
          const pause = startBackoffMs(this.failuresInRow);
          this.options.log.error('a desktop did not start', { desktop: d.id, error: String(err), retry_in_ms: pause });
          d.state = 'broken';
          // It holds its place in the count for the pause, so a failing start is not retried in a tight loop.
          setTimeout(() => {
            this.desktops.delete(d);
            this.reconcile();
          }, pause).unref();
        },
      ),
    );
  }

  /** Starts the processes of `d` (first start, or a rebuild), warm: worker and browser running. */
  private build(d: PooledDesktop): Promise<DesktopParts> {
    const { downloadsRoot, makeParts, log, servesBrowser, sandbox } = this.options;
    return buildDesktop({
      id: d.id,
      size: d.size,
      downloadsRoot,
      makeParts,
      warm: true,
      browser: servesBrowser,
      ...(sandbox ? { sandbox } : {}),
      log,
    });
  }

  /** Tears a desktop down and frees its place; the queue and the warm set are then refilled. */
  private async recycle(d: PooledDesktop): Promise<void> {
    if (d.state === 'recycling') return;
    d.state = 'recycling';
    const session = d.session;
    d.session = undefined;
    const t0 = performance.now();
    await destroyParts(d.parts ?? {});
    d.parts = undefined;
    this.desktops.delete(d);
    const ms = performance.now() - t0;
    this.options.onEvent?.({ kind: 'recycled', ms });
    this.options.log.info('desktop torn down', { desktop: d.id, session, ms: Math.round(ms) });
    this.reconcile();
  }

  /**
   * Its Xvfb or openbox died. An idle desktop is replaced; a leased one is
   * rebuilt in place for its session, whose calls fail as retryable until it is.
   */
  private async broke(d: PooledDesktop, what: string): Promise<void> {
    if (this.closed || d.state === 'recycling') return;
    this.options.log.warn('a desktop lost its display; rebuilding it', { desktop: d.id, session: d.session, what });
    if (d.state !== 'leased') return this.recycle(d);
    d.state = 'broken';
    const old = d.parts;
    for (let attempt = 1; ; attempt++) {
      // The session ended, or the daemon closes: the old parts go with the desktop (recycle, close).
      if (d.session === undefined || this.closed) return;
      try {
        const parts = await this.build(d);
        // The session ended while it was rebuilt: the new parts go with the rest.
        if (d.session === undefined || this.closed) return destroyParts(parts);
        d.parts = parts;
        d.state = 'leased';
        parts.display.onUnexpectedExit((w) => this.background(this.broke(d, w)));
        this.options.onEvent?.({ kind: 'rebuilt' });
        break;
      } catch (err) {
        if (d.session === undefined || this.closed) return;
        const pause = startBackoffMs(attempt);
        this.options.log.error('a desktop could not be rebuilt', {
          desktop: d.id,
          error: String(err),
          retry_in_ms: pause,
        });
        await sleep(pause, undefined, { signal: this.closing.signal, ref: false }).catch(() => undefined);
      }
    }
    // Only now: the session's calls meanwhile failed on the old parts' dead display, as retryable errors.
    // The downloads folder is the desktop's own (the same path, kept for its session); the HOME was the old
    // parts' alone, as each build makes a new one.
    // Everything else of the old parts goes: its processes, HOME, sandbox (and its uid) and egress listener.
    if (old) {
      const { downloads: _kept, ...gone } = old;
      await destroyParts(gone);
    }
  }
}

/** One desktop every session shares (`DISPLAY` given): today's lane. */
export class SharedDesktop implements Desktops {
  readonly mode = 'shared' as const;
  private sessions = 0;

  constructor(
    readonly desktop: DesktopResources,
    private readonly size: () => Size | undefined,
    private readonly processes: () => DesktopInfo['processes'],
    private readonly closeAll: () => Promise<void>,
  ) {}

  lease(): Promise<DesktopLease> {
    this.sessions++;
    let released = false;
    return Promise.resolve({
      desktop: this.desktop,
      waitedMs: 0,
      release: () => {
        if (released) return;
        released = true;
        this.sessions--;
      },
    });
  }

  capacity(): Capacity {
    const states = noDesktops();
    states[this.sessions ? 'leased' : 'warm'] = 1;
    return { mode: 'shared', max: 1, free: 1, leased: this.sessions, waiting: 0, states };
  }

  list(): DesktopInfo[] {
    const display = this.size() ?? { width: 0, height: 0 };
    return [
      {
        id: this.desktop.id,
        state: this.sessions ? 'leased' : 'warm',
        session: undefined,
        display,
        processes: this.processes(),
      },
    ];
  }

  beginClose(): void {}

  close(): Promise<void> {
    return this.closeAll();
  }
}
