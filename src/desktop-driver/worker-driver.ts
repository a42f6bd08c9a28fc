/**
 * WorkerDesktopDriver: the DesktopDriver that runs nut-js in a supervised
 * child process (worker.ts).
 *
 * Why a child: nut-js segfaults (exit 139, nothing catchable) when DISPLAY is
 * unreachable at its first call or the X server goes away under it
 * (docs/MEASURED.md). So this class
 * - probes the display socket before starting a child, and refuses with
 *   DisplayUnavailableError instead of spawning one that would crash;
 * - before every call, checks the display socket is still the one the child
 *   connected to (Xvfb recreates it on restart: a new inode or change time means the child's
 *   X connection is dead, so the child is replaced before it can crash);
 * - turns a child exit during a call into DriverCrashedError, and starts a
 *   new child on the next call;
 * - runs one op at a time, and on abort rejects at once with CancelledError,
 *   tells the child to cancel (a hold releases its keys), and kills the child
 *   if it has not answered within ABORT_GRACE_MS.
 *
 * The pointer skips the child: `cursorPosition` is a QueryPointer, and a
 * move, a click and a scroll without modifier keys are XTEST input
 * (pointer.ts), on this process's own X connection (x11.ts). They take the
 * same queue as the child's ops, so they happen in the order asked: a child's
 * op has finished (synced with the X server) before our input is sent, and our
 * input is synced before the child's next op is sent. A capture is told how
 * long ago our last input was, for its settle step (worker/capture.ts). That
 * is safe here, unlike nut-js: x11.ts is the X protocol in JS over a Unix
 * socket, so a display going away is an error on that socket, never a crash.
 * The position is asked of the X server, never remembered from our last op:
 * the pointer also moves without us (a person, another X client).
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { forkChild, programPid, signalChild, type ChildProcess, type Confinement } from '../base/child-process.ts';
import { COMPILED, MODULE_EXTENSION } from '../base/package-root.ts';
import { CancelledError, DisplayUnavailableError, DriverCrashedError, ToolInputError } from '../base/errors.ts';
import type { StartGuard } from '../base/resilience.ts';
import { displaySocketPath, isDisplayReachable } from './display.ts';
import { XPointer } from './pointer.ts';
import { XConnection } from './x11.ts';
import {
  CLICK_COUNT_MAX,
  COMPUTER_SCROLL_AMOUNT_MAX,
  integerIn,
  pixelPoint,
  type CaptureOptions,
  type DesktopDriver,
  type DriverKey,
  type MouseButton,
  type ScrollDirection,
} from './driver.ts';
import type { Point, Size } from '../base/geometry.ts';
import type { CapturedImage, Drawn, DrawnAfter, InputMark } from '../base/image.ts';
import type { ChildMessage, LogLevel, OpArgs, OpName, OpResult, ParentMessage, WireError } from './worker-protocol.ts';

export type DriverLog = (level: LogLevel, msg: string, fields?: object) => void;

export interface WorkerDesktopDriverOptions {
  /** X display name, e.g. ":99". */
  display: string;
  log?: DriverLog;
  /**
   * How long one op may take before the child is presumed stuck, killed and
   * restarted (the call then rejects with DriverCrashedError). Holds and
   * typing get their own duration on top. Default 30 s.
   */
  callTimeoutMs?: number;
  /**
   * Guards getting a ready worker (probing the display, starting a child): after
   * repeated failures, calls fail at once for a cool-down (src/base/resilience.ts).
   */
  startGuard?: StartGuard;
  /** Variables the worker gets on top of the daemon's own (a pooled desktop's XAUTHORITY and HOME). */
  env?: Readonly<Record<string, string>>;
  /** The desktop's sandbox the worker runs in (src/desktop-pool/sandbox.ts), if any. */
  within?: Confinement;
  /**
   * Asks the app under the pointer whether it drew its answer to the daemon's
   * pointer input: the desktop's own Chromium (src/browser/input-frames.ts).
   */
  drawnAfter?: DrawnAfter;
}

const DEFAULT_CALL_TIMEOUT_MS = 30_000;
/** Child startup (fork, and from the sources tsx's compile) may be slow on a loaded machine. */
const WORKER_START_TIMEOUT_MS = 20_000;
/** After an abort, how long the child may take to answer before it is killed. */
const ABORT_GRACE_MS = 1_500;
/** close(): how long the child may take to release everything and exit. */
const CLOSE_GRACE_MS = 2_000;
/** The child's ops that send no input. */
const QUIET_OPS: ReadonlySet<OpName> = new Set(['displaySize', 'cursorPosition', 'capture']);
/** Per-character allowance for typing (the keymap settle is per 19-ish new characters). */
const TYPE_MS_PER_CHAR = 20;

/**
 * The worker of the same tree as this file (src/base/package-root.ts): dist/'s worker.js, plain JavaScript
 * run with no loader, when the daemon is the build bin/deskbatch.js runs; src/'s worker.ts under tsx when
 * the daemon runs from the sources (the tests). A compiled daemon never loads tsx, and its worker neither.
 */
const WORKER_PATH = fileURLToPath(new URL(`./worker${MODULE_EXTENSION}`, import.meta.url));

/** node's flags for the worker: none for the build; for the sources tsx's loader, as an absolute URL (any cwd). */
function workerExecArgv(): string[] {
  if (COMPILED) return [];
  try {
    return ['--import', import.meta.resolve('tsx')];
  } catch {
    return ['--import', 'tsx'];
  }
}

interface Pending {
  id: number;
  op: OpName;
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
}

interface Child {
  proc: ChildProcess;
  /** Identity of the X socket file when the child was started (undefined if not a local socket). */
  socketId: string | undefined;
  ready: Promise<void>;
  pending: Pending | undefined;
  exited: Promise<void>;
  hasExited: boolean;
  /** Killed or exited: never given another op, even before its 'exit' event. */
  dead: boolean;
  /** The X screen size, once asked. */
  size?: Size;
}

/** The daemon's own X connection for the pointer, the identity of the socket it went to, and its XTEST pointer once used. */
interface QueryConnection {
  conn: XConnection;
  socketId: string | undefined;
  pointer?: Promise<XPointer>;
}

/** The daemon's refusal of an argument it checks itself (driver.ts `integerIn`, `pixelPoint`), as the worker's. */
const badInput = (message: string): Error => new ToolInputError(message);

/** What an op in the queue is told while it runs: whether its caller is gone, and how to hear of a cancel. */
interface Slot {
  settled(): boolean;
  onCancel(cancel: () => void): void;
}

export class WorkerDesktopDriver implements DesktopDriver {
  private readonly display: string;
  private readonly log: DriverLog;
  private readonly callTimeoutMs: number;
  private readonly startGuard: StartGuard | undefined;
  private readonly env: Readonly<Record<string, string>>;
  private readonly within: Confinement | undefined;
  private child: Child | undefined;
  /** Serialises ops: each waits for the previous op's slot to be freed. */
  private tail: Promise<void> = Promise.resolve();
  private nextId = 1;
  /** Ops queued or running in the child: a query waits for them (`tail`) only when there are any. */
  private busy = 0;
  private closed = false;
  private closing: Promise<void> | undefined;
  /** Open (or opening) for queries; replaced when it closed or the X socket was recreated. */
  private query: QueryConnection | undefined;
  private queryOpening: Promise<QueryConnection> | undefined;
  /** When our own pointer input last ended (performance.now()), for a capture's settle step. */
  private lastInputAt = -Infinity;
  /** Our own pointer input, when it is the desktop's last input (no child's op with input was sent since). */
  private lastMark: InputMark | undefined;
  private readonly drawnAfter: DrawnAfter | undefined;

  constructor(options: WorkerDesktopDriverOptions) {
    this.display = options.display;
    this.log = options.log ?? (() => {});
    this.callTimeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    this.startGuard = options.startGuard;
    this.env = options.env ?? {};
    this.within = options.within;
    this.drawnAfter = options.drawnAfter;
  }

  /** The running worker's pid, if one runs (memory accounting, fault tests). */
  get pid(): number | undefined {
    const child = this.child;
    return child && !child.dead ? programPid(child.proc) : undefined;
  }

  /**
   * The size is asked once per worker and kept: every coordinate call needs it, and a round trip
   * to the worker costs more than the rest of such a call. A worker lives on one X server (the
   * socket identity is checked here too), and Xvfb's screen size is fixed for its life.
   */
  async displaySize(signal?: AbortSignal): Promise<Size> {
    if (signal?.aborted) throw cancelledBy(signal);
    const child = this.child;
    if (child?.size && !child.dead && socketIdentity(this.display) === child.socketId) return child.size;
    const size = await this.call('displaySize', {}, signal);
    if (this.child) this.child.size = size;
    return size;
  }

  /**
   * A QueryPointer on the daemon's own X connection, after every op asked before it. A display that
   * is not a local socket (`host:0`) is asked through the child, as every op.
   */
  cursorPosition(signal?: AbortSignal): Promise<Point> {
    if (!displaySocketPath(this.display)) return this.call('cursorPosition', {}, signal);
    if (this.closed) return Promise.reject(closedError());
    if (signal?.aborted) return Promise.reject(cancelledBy(signal));
    if (this.busy === 0) return this.queryPointer(signal);
    // Behind an op still running in the child: after it, unless cancelled first (then at once, as any op).
    return new Promise<Point>((resolve, reject) => {
      const onAbort = (): void => reject(cancelledBy(signal!));
      signal?.addEventListener('abort', onAbort, { once: true });
      void this.tail.then(() => {
        signal?.removeEventListener('abort', onAbort);
        if (!signal?.aborted) this.queryPointer(signal).then(resolve, reject);
      });
    });
  }

  // Pointer input the daemon sends itself is checked here as the worker checks it at its boundary (driver.ts);
  // these are async so that a refusal is a rejection, and still queue their input before they return.
  async moveMouse(to: Point, signal?: AbortSignal): Promise<void> {
    if (!displaySocketPath(this.display)) return this.call('moveMouse', { to }, signal);
    const point = pixelPoint(to, 'to', badInput);
    return this.pointerInput(signal, { event: 'pointermove', detail: 0 }, (p) => p.sendMove(point));
  }

  async click(
    button: MouseButton,
    count: number,
    modifiers: DriverKey[],
    signal?: AbortSignal,
    at?: Point,
  ): Promise<void> {
    // Modifier keys are the child's (its keyboard holds them down around the click).
    if (modifiers.length || !displaySocketPath(this.display)) {
      return this.call('click', { button, count, modifiers, ...(at ? { at } : {}) }, signal);
    }
    const clicks = integerIn('count', count, 1, CLICK_COUNT_MAX, badInput);
    const point = at && pixelPoint(at, 'at', badInput);
    // A page's last mouseup of the click carries its count (X's click counting: a fresh click is 1), or more after
    // a click at the same point just before: so the mark's time is taken again just before the last press, and
    // only that press's mouseup is dispatched after it.
    return this.pointerInput(signal, { event: 'mouseup', detail: clicks }, (p) =>
      p.sendClick(button, clicks, point, () => {
        if (this.lastMark) this.lastMark = { ...this.lastMark, sentAt: Date.now() };
      }),
    );
  }

  mouseDown(button: MouseButton, signal?: AbortSignal): Promise<void> {
    return this.call('mouseDown', { button }, signal);
  }

  mouseUp(button: MouseButton, signal?: AbortSignal): Promise<void> {
    return this.call('mouseUp', { button }, signal);
  }

  drag(from: Point, to: Point, modifiers: DriverKey[], signal?: AbortSignal): Promise<void> {
    return this.call('drag', { from, to, modifiers }, signal, 2_000);
  }

  async scroll(
    direction: ScrollDirection,
    amount: number,
    modifiers: DriverKey[],
    signal?: AbortSignal,
  ): Promise<void> {
    if (modifiers.length || !displaySocketPath(this.display)) {
      return this.call('scroll', { direction, amount, modifiers }, signal);
    }
    const clicks = integerIn('amount', amount, 1, COMPUTER_SCROLL_AMOUNT_MAX, badInput);
    // No mark: the wheel's notches are merged and the scroll drawn by the compositor, not in the frame a
    // page's word follows; the settle step waits its reaction window.
    return this.pointerInput(signal, undefined, (p) => p.sendWheel(direction, clicks));
  }

  pressKeys(chord: DriverKey[], repeat: number, signal?: AbortSignal): Promise<void> {
    return this.call('pressKeys', { chord, repeat }, signal, repeat * 5);
  }

  holdKeys(chord: DriverKey[], durationMs: number, signal?: AbortSignal): Promise<void> {
    return this.call('holdKeys', { chord, durationMs }, signal, durationMs);
  }

  typeText(text: string, signal?: AbortSignal): Promise<void> {
    return this.call('typeText', { text }, signal, text.length * TYPE_MS_PER_CHAR);
  }

  async capture(options: CaptureOptions, signal?: AbortSignal): Promise<CapturedImage> {
    const mark = this.lastMark;
    const word = await this.drawnSince(options, mark);
    // How long ago our own input was is reckoned when the capture is sent, behind the input queued before it.
    const args = (): OpArgs<'capture'> => {
      if (!Number.isFinite(this.lastInputAt)) return { options };
      const now = performance.now();
      const drawn =
        word !== undefined && this.lastMark === mark
          ? { drawnAgoMs: now - word.at, ...(word.moving ? { moving: word.moving } : {}) }
          : {};
      return { options, inputAgoMs: now - this.lastInputAt, ...drawn };
    };
    const img = await this.call('capture', args, signal, options.settle?.maxMs ?? 0);
    if (img.settled) this.log('debug', 'screen settled', img.settled);
    // With 'advanced' serialization a Buffer arrives as a plain Uint8Array.
    const data = img.data;
    return { ...img, data: Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength) };
  }

  /** Asks the child to release everything and exit; kills it after CLOSE_GRACE_MS. Idempotent. */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private async shutdown(): Promise<void> {
    this.closed = true;
    this.query?.conn.close();
    this.query = undefined;
    void this.queryOpening?.then(
      (q) => q.conn.close(),
      () => undefined,
    );
    const child = this.child;
    this.child = undefined;
    if (!child || child.hasExited) return;
    const pending = child.pending;
    if (pending) {
      child.pending = undefined;
      this.send(child, { op: 'cancel', id: pending.id });
      pending.reject(new CancelledError('desktop driver closed'));
    }
    // The child cancels its current op, releases keys and buttons, restores the keymap, answers and exits.
    this.send(child, { op: 'shutdown', id: this.nextId++ });
    const timer = setTimeout(() => this.kill(child, 'did not exit after close'), CLOSE_GRACE_MS);
    await child.exited;
    clearTimeout(timer);
  }

  // -------------------------------------------------------------------------

  private async queryPointer(signal: AbortSignal | undefined): Promise<Point> {
    const { x, y } = await this.onDisplay(signal, (q) => q.conn.queryPointer());
    return { x, y };
  }

  /**
   * When the app under the pointer said it drew its answer to our last
   * pointer input `mark`, if it says so within the reaction window that the
   * capture's settle step would otherwise wait out (SettleOptions). Asked only
   * when that input is the desktop's last and nothing is queued after it.
   */
  private async drawnSince(options: CaptureOptions, mark: InputMark | undefined): Promise<Drawn | undefined> {
    const settle = options.settle;
    if (!mark || !this.drawnAfter || !settle || this.busy > 0) return undefined;
    const left = this.lastInputAt + settle.reactionMs - performance.now();
    if (left <= 0 || performance.now() - this.lastInputAt >= settle.afterInputMs) return undefined;
    return this.drawnAfter(mark, left);
  }

  /**
   * Pointer input on our own X connection, in the queue with the child's ops:
   * `send` writes the events, and the caller is answered once the X server
   * has taken them (a sync, within the call time limit), so nothing later,
   * ours or the child's, overtakes them, and the settle step counts from
   * there. Once sent it runs to its end (its caller is answered at once on
   * abort, as for a child's op, but the queue waits): a click is never cut in
   * half.
   */
  private pointerInput(
    signal: AbortSignal | undefined,
    mark: Omit<InputMark, 'sentAt'> | undefined,
    send: (pointer: XPointer) => Promise<void> | void,
  ): Promise<void> {
    return this.enqueue(signal, async () => {
      this.lastMark = mark && { ...mark, sentAt: Date.now() };
      try {
        await this.onDisplay(undefined, async (q) => {
          await send(await this.pointerOn(q));
          await q.conn.sync();
        });
      } finally {
        this.lastInputAt = performance.now();
      }
    });
  }

  /** The XTEST pointer on connection `q`, made on first use. */
  private pointerOn(q: QueryConnection): Promise<XPointer> {
    q.pointer ??= q.conn.queryExtension('XTEST').then((xtest) => {
      if (xtest === undefined) throw new Error('the X server has no XTEST extension');
      return new XPointer(q.conn, xtest, (msg, fields) => this.log('debug', msg, fields));
    });
    return q.pointer;
  }

  /**
   * Runs `use` on our own X connection (opened again when it closed or the X
   * socket was recreated), within the call time limit: a stopped X server
   * never answers, so its connection is dropped and the next use opens
   * another. An X error or a lost display is DisplayUnavailableError.
   */
  private async onDisplay<T>(signal: AbortSignal | undefined, use: (q: QueryConnection) => Promise<T>): Promise<T> {
    if (this.closed) throw closedError();
    if (signal?.aborted) throw cancelledBy(signal);
    const q = this.query?.conn.closed === false ? this.query : undefined;
    // The socket was recreated (a new X server on this display): the connection is to the old one.
    const current = q && q.socketId === socketIdentity(this.display) ? q : await this.openQuery();
    const conn = current.conn;
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    try {
      return await new Promise<T>((resolve, reject) => {
        timer = setTimeout(() => {
          conn.close();
          reject(
            new DisplayUnavailableError(`X display ${this.display} did not answer within ${this.callTimeoutMs} ms`),
          );
        }, this.callTimeoutMs);
        if (signal) {
          // This caller only: the connection is shared with the other sessions' queries, and fine.
          onAbort = () => reject(cancelledBy(signal));
          signal.addEventListener('abort', onAbort, { once: true });
        }
        use(current).then(resolve, (err: unknown) =>
          reject(new DisplayUnavailableError(`X display ${this.display}: ${(err as Error).message}`)),
        );
      });
    } finally {
      clearTimeout(timer);
      if (onAbort) signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Opens the query connection (one at a time), with the desktop's own X cookie. */
  private openQuery(): Promise<QueryConnection> {
    this.query?.conn.close();
    this.query = undefined;
    this.queryOpening ??= (async () => {
      const socketId = socketIdentity(this.display);
      let conn: XConnection;
      try {
        // A stopped X server accepts the socket and never answers the setup: bounded like a call.
        conn = await XConnection.open(
          this.display,
          this.env.XAUTHORITY ?? this.xauthorityFallback(),
          this.callTimeoutMs,
        );
      } catch (err) {
        // As a child's probe says it (readyChild): the socket's path is the operator's, in the log.
        this.log('debug', 'X connection failed', { display: this.display, error: (err as Error).message });
        throw new DisplayUnavailableError(`X display ${this.display} is not reachable`);
      }
      if (this.closed) {
        conn.close();
        throw closedError();
      }
      this.query = { conn, socketId };
      return this.query;
    })().finally(() => (this.queryOpening = undefined));
    return this.queryOpening;
  }

  /** Where the child finds its cookie when the desktop names no XAUTHORITY: the daemon's, or ~/.Xauthority of the HOME it gets. */
  private xauthorityFallback(): string | undefined {
    return process.env.XAUTHORITY || (this.env.HOME ? join(this.env.HOME, '.Xauthority') : undefined);
  }

  /**
   * Runs one op in the child. The caller's promise settles on the child's
   * answer, on abort (CancelledError, at once) or on a crash. `op` and `args`
   * are checked against the protocol's table (worker-protocol.ts), and so is
   * the result's type; `args` given as a function are made when the op is sent.
   */
  private call<N extends OpName>(
    op: N,
    args: OpArgs<N> | (() => OpArgs<N>),
    signal: AbortSignal | undefined,
    extraMs = 0,
  ): Promise<OpResult<N>> {
    return this.enqueue(signal, async (slot) => {
      const child = await this.ensureChild();
      if (slot.settled()) return undefined as OpResult<N>; // aborted while the child started: never sent
      const sent = typeof args === 'function' ? args() : args;
      // The child's input comes after ours: the app's word about ours no longer tells the settle step anything.
      if (!QUIET_OPS.has(op)) this.lastMark = undefined;
      return this.request(child, op, sent, this.callTimeoutMs + extraMs, (cancel) => slot.onCancel(cancel));
    });
  }

  /**
   * Runs `run` in the queue of ops: after every op asked before it. The
   * caller's promise settles on `run`'s end or on abort (CancelledError, at
   * once); the queue slot is held until `run` has really ended, so the next
   * op never overlaps it.
   */
  private enqueue<T>(signal: AbortSignal | undefined, run: (slot: Slot) => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(closedError());
    if (signal?.aborted) return Promise.reject(cancelledBy(signal));
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      let onAbortRunning: (() => void) | undefined;
      const finish = (fn: () => void): void => {
        if (settled) return;
        settled = true;
        signal?.removeEventListener('abort', onAbort);
        fn();
      };
      const onAbort = (): void => {
        finish(() => reject(cancelledBy(signal!)));
        onAbortRunning?.();
      };
      signal?.addEventListener('abort', onAbort, { once: true });

      const prev = this.tail;
      let freeSlot!: () => void;
      this.tail = new Promise<void>((r) => (freeSlot = r));
      this.busy++;
      const slot: Slot = { settled: () => settled, onCancel: (cancel) => (onAbortRunning = cancel) };
      void prev
        .then(async () => {
          if (settled) return; // aborted while queued: never run
          if (this.closed) throw closedError();
          const result = await run(slot);
          finish(() => resolve(result));
        })
        .catch((err: unknown) => finish(() => reject(err instanceof Error ? err : new Error(String(err)))))
        .finally(() => {
          this.busy--;
          freeSlot();
        });
    });
  }

  /**
   * Sends one op and waits for its answer, the child's death, or the deadline.
   * The answer's type is the protocol's: the child is ours, and answers `op`
   * with its result (`null` for a void one).
   */
  private request<N extends OpName>(
    child: Child,
    op: N,
    args: OpArgs<N>,
    timeoutMs: number,
    onCancelHook: (cancel: () => void) => void,
  ): Promise<OpResult<N>> {
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      let abortTimer: NodeJS.Timeout | undefined;
      const deadline = setTimeout(() => {
        this.kill(child, `${op} did not finish within ${timeoutMs} ms`);
      }, timeoutMs);
      const done = (): void => {
        clearTimeout(deadline);
        clearTimeout(abortTimer);
      };
      child.pending = {
        id,
        op,
        resolve: (v) => {
          done();
          resolve(v as OpResult<N>);
        },
        reject: (e) => {
          done();
          reject(e);
        },
      };
      onCancelHook(() => {
        // The caller already got CancelledError. Ask the child to stop (a hold
        // releases its keys); if it does not answer soon, kill it. The slot stays
        // busy until one of the two happens.
        if (child.pending?.id !== id) return;
        this.send(child, { op: 'cancel', id });
        abortTimer = setTimeout(
          () => this.kill(child, `${op} did not stop within ${ABORT_GRACE_MS} ms of cancel`),
          ABORT_GRACE_MS,
        );
      });
      if (!this.send(child, { id, op, args })) {
        child.pending = undefined;
        done();
        reject(new DriverCrashedError(`desktop worker is not reachable (${op})`));
      }
    });
  }

  private send(child: Child, msg: ParentMessage): boolean {
    if (child.hasExited || !child.proc.connected) return false;
    try {
      child.proc.send(msg, (err) => {
        if (err) this.log('warn', 'sending to desktop worker failed', { error: err.message });
      });
      return true;
    } catch (err) {
      this.log('warn', 'sending to desktop worker failed', { error: (err as Error).message });
      return false;
    }
  }

  private kill(child: Child, reason: string): void {
    if (child.hasExited) return;
    child.dead = true;
    this.log('warn', `killing desktop worker: ${reason}`, { pid: child.proc.pid });
    const p = child.pending;
    if (p) {
      child.pending = undefined;
      p.reject(new DriverCrashedError(`desktop worker killed: ${reason}`));
    }
    signalChild(child.proc, 'SIGKILL');
  }

  /** Returns a ready child for the current X server, starting one if needed, unless the start guard refuses. */
  private ensureChild(): Promise<Child> {
    return this.startGuard ? this.startGuard.run(() => this.readyChild()) : this.readyChild();
  }

  private async readyChild(): Promise<Child> {
    // A live child on the same X socket is its own probe: it exits (code 70) the moment its X
    // connection closes. The stat catches a server that was replaced.
    const socketId = socketIdentity(this.display);
    const child = this.child;
    if (child && !child.dead && socketId === child.socketId) {
      await child.ready;
      return child;
    }
    // Before starting a child, or when the server was replaced: is anyone listening? (~0.2 ms;
    // a child started against a stale socket would segfault in libnut.)
    const reachable = await isDisplayReachable(this.display);
    if (child && !child.dead && (!reachable || socketId !== child.socketId)) {
      this.log('info', 'X display went away or was restarted under the desktop worker; replacing it', {
        display: this.display,
      });
      this.kill(child, 'X display went away');
    }
    if (child && !child.dead) {
      await child.ready;
      return child;
    }
    // A killed child may not have exited yet: let it go first, so two workers never overlap.
    if (child) await child.exited;
    this.child = undefined;
    if (!reachable) throw new DisplayUnavailableError(`X display ${this.display} is not reachable`);
    if (this.closed) throw closedError();
    const fresh = this.spawn(socketId);
    this.child = fresh;
    await fresh.ready;
    if (this.closed) {
      // close() ran while this child was starting and did not see it.
      this.kill(fresh, 'desktop driver closed');
      throw closedError();
    }
    return fresh;
  }

  private spawn(socketId: string | undefined): Child {
    const proc = forkChild(
      WORKER_PATH,
      {
        execArgv: workerExecArgv(),
        serialization: 'advanced',
        stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
        // Under tsx, no compile cache: the worker is started again after a crash, and code it would load from
        // a writable cache folder (/tmp/tsx-<uid>) is code anyone who can write there chooses (docs/SECURITY.md).
        // The build has no cache to turn off.
        env: {
          ...process.env,
          ...this.env,
          DISPLAY: this.display,
          ...(COMPILED ? {} : { TSX_DISABLE_CACHE: '1' }),
        },
      },
      this.within,
    );
    this.log('info', 'desktop worker started', { pid: proc.pid, display: this.display });
    let markReady!: () => void;
    let failReady!: (err: Error) => void;
    const ready = new Promise<void>((resolve, reject) => {
      markReady = resolve;
      failReady = reject;
    });
    ready.catch(() => {}); // observed by ensureChild; never an unhandled rejection
    let markExited!: () => void;
    const child: Child = {
      proc,
      socketId,
      ready,
      pending: undefined,
      exited: new Promise<void>((r) => (markExited = r)),
      hasExited: false,
      dead: false,
    };
    const startTimer = setTimeout(() => {
      failReady(new DriverCrashedError(`desktop worker did not start within ${WORKER_START_TIMEOUT_MS} ms`));
      this.kill(child, 'start timeout');
    }, WORKER_START_TIMEOUT_MS);

    for (const [stream, level] of [
      [proc.stdout, 'info'],
      [proc.stderr, 'warn'],
    ] as const) {
      if (!stream) continue;
      createInterface({ input: stream }).on('line', (line) => {
        if (line.trim()) this.log(level, `desktop worker: ${line}`, { pid: proc.pid });
      });
    }

    proc.on('message', (raw: unknown) => {
      // The child is our worker.ts: it sends only ChildMessages (worker-protocol.ts).
      const msg = raw as ChildMessage;
      if ('type' in msg) {
        if (msg.type === 'ready') {
          clearTimeout(startTimer);
          markReady();
        } else {
          this.log(msg.level, `desktop worker: ${msg.msg}`, { pid: proc.pid, ...msg.fields });
        }
        return;
      }
      const p = child.pending;
      if (!p || p.id !== msg.id) return; // answer to a call that was cancelled or closed
      child.pending = undefined;
      if (msg.ok) p.resolve(msg.result);
      else p.reject(toError(msg.error, p.op));
    });

    proc.on('error', (err) => {
      // Spawn failure or IPC failure; 'exit' may or may not follow.
      this.log('error', 'desktop worker error', { error: err.message });
      // Never spawned (EAGAIN, EMFILE): no 'exit' will come, so settle as if it had exited.
      if (proc.pid === undefined) gone(null, null);
      else if (!proc.connected && proc.exitCode === null && proc.signalCode === null) signalChild(proc, 'SIGKILL');
    });

    const gone = (code: number | null, signal: NodeJS.Signals | null): void => {
      if (child.hasExited) return;
      child.hasExited = true;
      child.dead = true;
      clearTimeout(startTimer);
      const how = signal ? `signal ${signal}` : `code ${code}`;
      const why =
        code === 70
          ? 'its X connection closed'
          : signal === 'SIGSEGV' || code === 139
            ? 'segfault; the X display probably went away'
            : how;
      failReady(new DriverCrashedError(`desktop worker exited during start (${why})`));
      const p = child.pending;
      if (p) {
        child.pending = undefined;
        p.reject(new DriverCrashedError(`desktop worker exited during ${p.op} (${why})`));
      }
      if (this.child === child) this.child = undefined;
      this.log(code === 0 && !signal ? 'info' : 'warn', `desktop worker exited (${why})`, { pid: proc.pid });
      markExited();
    };
    proc.on('exit', gone);
    return child;
  }
}

/**
 * Identity of the display's X socket file (inode and change time), or
 * undefined (no socket, or not a local display). An X server recreates its
 * socket at start; ext4 readily reuses the inode number, so the change time
 * (ns) is part of the identity.
 */
function socketIdentity(display: string): string | undefined {
  const path = displaySocketPath(display);
  if (!path) return undefined;
  try {
    // Synchronous on purpose: 5 µs on this local socket file, where the promise form costs 50 µs of
    // thread-pool round trip on every worker call (bench: anatomy.stat).
    const st = statSync(path, { bigint: true });
    return `${st.dev}:${st.ino}:${st.ctimeNs}`;
  } catch {
    return undefined;
  }
}

/** Every call on a closed driver: retryable (a pooled desktop whose display died is replaced under its session). */
function closedError(): DisplayUnavailableError {
  return new DisplayUnavailableError('the desktop was closed (shut down, or replaced after its display died)');
}

function cancelledBy(signal: AbortSignal): CancelledError {
  const reason = signal.reason;
  if (reason instanceof CancelledError) return reason;
  return new CancelledError(reason instanceof Error ? reason.message : 'cancelled');
}

/** Rebuilds the child's error: model-facing input errors become ToolInputError, the rest keep name and message. */
function toError(e: Partial<WireError> | undefined, op: OpName): Error {
  const message = e?.message ?? `${op} failed`;
  switch (e?.name) {
    case 'ToolInputError':
      return new ToolInputError(message);
    case 'CancelledError':
      return new CancelledError(message);
    default: {
      const err = new Error(`${op}: ${message}`);
      if (e?.name && e.name !== 'Error') err.name = e.name;
      return err;
    }
  }
}
