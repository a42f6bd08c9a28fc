/**
 * The one way the daemon runs a program: every child process (Xvfb, openbox,
 * ffmpeg, x11vnc, the desktop worker, and the short X tools) is started here,
 * and no other file of src/ imports `node:child_process` (eslint.config.js
 * says so). A program gets an argument array, never a shell string.
 *
 * A long-running child (startChild):
 * - is tied to the daemon's life: it runs under `setpriv --pdeathsig KILL`
 *   where util-linux has it (the kernel kills it when the daemon dies, even by
 *   SIGKILL), and an exit hook SIGKILLs it if the daemon exits without
 *   stopping it (trackChild);
 * - has a deadline to be ready, and every way a start can fail ends in one
 *   StartError with a stable code: `not_installed` (no such program: ENOENT,
 *   or setpriv's exit 127), `start_failed` (it exited first, or could not be
 *   spawned), `start_timeout` (not ready in time), `bad_options` (its caller's
 *   check of its options). The message quotes the end of the child's output;
 *   a child that failed to start is stopped before the error is thrown;
 * - is stopped with a deadline (stopChild): its signal, then SIGKILL.
 * Each program's own error class extends StartError (VirtualDisplayError,
 * VideoError, VncError), so callers can tell which one failed.
 */
import {
  execFile,
  execFileSync,
  fork,
  spawn,
  type ChildProcess,
  type ExecFileException,
  type ForkOptions,
  type SpawnOptions,
} from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { Readable } from 'node:stream';

export type { ChildProcess };

/**
 * A sandbox a child runs in (a desktop's: src/desktop-pool/sandbox.ts). A
 * confined child is the leader of a process group of its own: the command
 * line `wrap` gives may fork on its way in (entering a pid namespace does),
 * so signals go to the whole group (signalChild), never to the first
 * process alone.
 */
export interface Confinement {
  /** The command line that runs `command args` inside (it keeps the stdio, fds and IPC channel it is given). */
  wrap(command: string, args: readonly string[]): [string, string[]];
  /** The part of `env` a confined program may see: nothing of the daemon's own (its token, its paths). */
  environment(env: NodeJS.ProcessEnv | undefined): NodeJS.ProcessEnv;
}

/** Children started in a Confinement: signalled as a process group. */
const groupLeaders = new WeakSet<ChildProcess>();

/**
 * Sends `signal` to a child: to its whole process group when it was started
 * confined (the program itself may be the child of the first process).
 * Returns whether the signal was sent.
 */
export function signalChild(child: ChildProcess, signal: NodeJS.Signals): boolean {
  if (!groupLeaders.has(child) || child.pid === undefined) return child.kill(signal);
  try {
    process.kill(-child.pid, signal);
    return true;
  } catch {
    return false;
  }
}

/** Spawns an already wrapped command line: detached (a process group of its own) and with the confined environment. */
/**
 * The pid of the program a child runs: its own, or for a confined child the
 * process its wrapper started (the first child of the group's leader), once
 * that exists.
 */
export function programPid(child: ChildProcess): number | undefined {
  if (!groupLeaders.has(child) || child.pid === undefined) return child.pid;
  try {
    const first = readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim().split(' ')[0];
    return first ? Number(first) : undefined;
  } catch {
    return undefined;
  }
}

function spawnConfined(
  command: string,
  args: readonly string[],
  options: SpawnOptions,
  within: Confinement | undefined,
): ChildProcess {
  if (!within) return spawn(command, args, options);
  const child = spawn(command, args, {
    ...options,
    env: within.environment(options.env ?? process.env),
    detached: true,
  });
  groupLeaders.add(child);
  return child;
}

/** Why a child process did not start. */
export type StartErrorCode = 'not_installed' | 'bad_options' | 'start_failed' | 'start_timeout';

/** A child process could not start; `code` says why. Each program's subclass names it; messages quote the end of its output. */
export class StartError extends Error {
  constructor(
    readonly code: StartErrorCode,
    message: string,
  ) {
    super(message);
  }
}

type StartErrorClass = new (code: StartErrorCode, message: string) => StartError;

const SETPRIV = '/usr/bin/setpriv';
/** What setpriv (or a shell) exits with when it cannot find the command it was to run. */
const EXIT_COMMAND_NOT_FOUND = 127;
/** After the stop signal, how long a child gets before SIGKILL, unless its caller says otherwise. */
const DEFAULT_STOP_DEADLINE_MS = 3_000;
/** After SIGKILL: only guards against a process stuck in the kernel. */
export const KILL_DEADLINE_MS = 3_000;
/** A child's output lines kept for error messages (OutputLines), and the length each is cut to. */
export const OUTPUT_TAIL_LINES = 12;
export const OUTPUT_LINE_CHARS = 300;
/** A child that exited during its start: how long its output may take to arrive before it is quoted. */
const LAST_WORDS_MS = 500;

/**
 * `setpriv --pdeathsig KILL -- cmd args…` when setpriv exists (util-linux,
 * present on Debian): the kernel kills the command when this process dies.
 * setpriv execs the command, so the child's pid is the command's.
 */
export function dieWithParent(command: string, args: readonly string[]): [string, string[]] {
  return existsSync(SETPRIV) ? [SETPRIV, ['--pdeathsig', 'KILL', '--', command, ...args]] : [command, [...args]];
}

/**
 * Children still running, each with the synchronous clean-up to do after
 * SIGKILLing it if this process exits without stopping it.
 */
const liveChildren = new Map<ChildProcess, () => void>();
let exitHookInstalled = false;

/** SIGKILLs `child` if this process exits while it still runs, then runs `afterKill` (synchronously: nothing runs after). */
export function trackChild(child: ChildProcess, afterKill: () => void = () => {}): void {
  // Called again for a child already tracked, it only sets what to do after the kill.
  if (!liveChildren.has(child)) child.once('exit', () => liveChildren.delete(child));
  liveChildren.set(child, afterKill);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const [c, after] of liveChildren) {
      try {
        signalChild(c, 'SIGKILL');
        after();
      } catch {
        // already gone, or nothing left to clean
      }
    }
  });
}

/** How a child ended, for messages: `was killed by SIGKILL`, `exited with code 1`. */
export function exitDescription(code: number | null, signal: NodeJS.Signals | null): string {
  return signal ? `was killed by ${signal}` : `exited with code ${code}`;
}

/** Whether `child` still runs (it started, and no exit was seen). */
export function running(child: ChildProcess): boolean {
  return child.pid !== undefined && child.exitCode === null && child.signalCode === null;
}

/** Resolves when `child` has exited (immediately if it already has). */
export function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/** Resolves with 'done' when `promise` settles first, with 'deadline' after `ms`. */
export async function raceDeadline(promise: Promise<unknown>, ms: number): Promise<'done' | 'deadline'> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'deadline'>((resolve) => {
    timer = setTimeout(() => resolve('deadline'), ms);
  });
  try {
    return await Promise.race([promise.then(() => 'done' as const), deadline]);
  } finally {
    clearTimeout(timer);
  }
}

export interface StopOptions {
  /** The first signal: SIGTERM unless the program finishes better on another (ffmpeg and x11vnc: SIGINT). */
  signal?: NodeJS.Signals;
  /** How long the child gets after it, before SIGKILL; default 3 s. */
  deadlineMs?: number;
  /** What else to wait for once it exited (its clean-up), within the same bound as the SIGKILL. */
  gone?: Promise<unknown>;
}

/**
 * Sends `signal`, then SIGKILL if the child has not exited within the
 * deadline; resolves once it has exited (bounded: a process stuck in the
 * kernel cannot hold the caller). Says whether it took SIGKILL; 'not running'
 * for a child that never started or already ended.
 */
export async function stopChild(
  child: ChildProcess,
  options: StopOptions = {},
): Promise<'stopped' | 'killed' | 'not running'> {
  const gone = options.gone ?? exited(child);
  if (!running(child)) {
    await raceDeadline(gone, KILL_DEADLINE_MS);
    return 'not running';
  }
  child.ref(); // keep the loop alive until it is seen to go
  signalChild(child, options.signal ?? 'SIGTERM');
  if ((await raceDeadline(gone, options.deadlineMs ?? DEFAULT_STOP_DEADLINE_MS)) === 'done') return 'stopped';
  signalChild(child, 'SIGKILL');
  await raceDeadline(gone, KILL_DEADLINE_MS);
  return 'killed';
}

/** The end of a log file a child writes, for error messages: `:\n…`, or '' when it is empty or unreadable. */
export async function fileTail(path: string, chars = 2_000): Promise<string> {
  try {
    const text = (await readFile(path, 'utf8')).trim();
    if (!text) return '';
    return `:\n${text.length > chars ? `…${text.slice(-chars)}` : text}`;
  } catch {
    return '';
  }
}

/**
 * A child's output read line by line, bounded: a line is cut at `lineChars`
 * (and a stream without newlines cannot grow the buffer), and the last `lines`
 * lines are kept for error messages. `onLine` sees every line first (a
 * program's own parser: readiness, progress, logging) and can leave it out of
 * the tail by returning false.
 */
export class OutputLines {
  private pending = '';
  private readonly kept: string[] = [];

  constructor(
    private readonly options: {
      lines?: number;
      lineChars?: number;
      /** Sees each non-blank line, trimmed; returns whether it belongs in the tail (default: every line). */
      onLine?: (line: string) => boolean | void;
    } = {},
  ) {}

  /** Reads `stream` (utf8) into this. */
  read(stream: Readable | null): this {
    stream?.setEncoding('utf8');
    stream?.on('data', (chunk: string) => this.write(chunk));
    return this;
  }

  write(chunk: string): void {
    const lineChars = this.options.lineChars ?? OUTPUT_LINE_CHARS;
    this.pending += chunk;
    if (this.pending.length > 64 * lineChars && !/[\r\n]/.test(this.pending)) this.pending += '\n';
    const lines = this.pending.split(/\r?\n|\r/);
    this.pending = lines.pop() ?? '';
    for (const raw of lines) {
      const line = raw.trim();
      if (!line) continue;
      if (this.options.onLine?.(line) === false) continue;
      this.kept.push(line.slice(0, lineChars));
      if (this.kept.length > (this.options.lines ?? OUTPUT_TAIL_LINES)) this.kept.shift();
    }
  }

  /** The lines kept, joined. */
  text(): string {
    return this.kept.join('\n');
  }

  /** `:\n` and the lines kept, or '' when there are none: the end of an error message. */
  quoted(): string {
    return this.kept.length ? `:\n${this.text()}` : '';
  }
}

export interface StartOptions<T> {
  /** The program as messages name it: `Xvfb`, `ffmpeg`. */
  name: string;
  command: string;
  args: readonly string[];
  /** stdio, env, detached: as for `spawn`. */
  spawn: SpawnOptions;
  /** The program's error class. */
  error: StartErrorClass;
  /** What a missing program is told, e.g. `Xvfb not found: run …`. */
  notInstalled: string;
  timeoutMs: number;
  /**
   * Resolves once the child is ready (with what it reported), called right
   * after the spawn; `signal` aborts when the start has failed otherwise, so
   * a polling loop can end.
   */
  ready: (child: ChildProcess, signal: AbortSignal) => Promise<T>;
  /** Completes `Xvfb exited with code 1 …`, e.g. `before reporting its display`. */
  exitedBefore: string;
  /** Completes `Xvfb … within 10000 ms`, e.g. `did not report its display`. */
  notReady: string;
  /** The end of its output for messages (`:\n…`, or ''): OutputLines.quoted or fileTail. */
  tail: () => string | Promise<string>;
  /** How a child that failed to start is ended: its first signal (default SIGTERM, then SIGKILL). */
  abortSignal?: NodeJS.Signals;
  /** The sandbox it runs in, if any. */
  within?: Confinement;
}

/**
 * Starts a program under dieWithParent and trackChild, and resolves once
 * `ready` does; rejects with the program's StartError otherwise, after
 * stopping what it started.
 */
export async function startChild<T>(o: StartOptions<T>): Promise<{ child: ChildProcess; ready: T }> {
  const [command, args] = dieWithParent(
    ...(o.within ? o.within.wrap(o.command, o.args) : ([o.command, o.args] as const)),
  );
  const child = spawnConfined(command, args, o.spawn, o.within);
  trackChild(child);
  const aborted = new AbortController();
  const quote = async (): Promise<string> => {
    // Its last words may still be on their way: let its pipes drain first.
    const pipes = [child.stdout, child.stderr].filter((s): s is Readable => s !== null && !s.closed);
    await raceDeadline(Promise.all(pipes.map((s) => new Promise((r) => s.once('close', r)))), LAST_WORDS_MS);
    return o.tail();
  };
  let timer: NodeJS.Timeout | undefined;
  let onExit: ((code: number | null, signal: NodeJS.Signals | null) => void) | undefined;
  try {
    const ready = await new Promise<T>((resolve, reject) => {
      const onError = (err: NodeJS.ErrnoException): void => {
        aborted.abort();
        reject(
          err.code === 'ENOENT'
            ? new o.error('not_installed', o.notInstalled)
            : new o.error('start_failed', `cannot start ${o.name}: ${err.message}`),
        );
      };
      onExit = (code, signal) => {
        aborted.abort();
        void quote().then((tail) =>
          reject(
            code === EXIT_COMMAND_NOT_FOUND
              ? new o.error('not_installed', `${o.notInstalled}${tail}`)
              : new o.error('start_failed', `${o.name} ${exitDescription(code, signal)} ${o.exitedBefore}${tail}`),
          ),
        );
      };
      // Kept after the start too: an 'error' with no listener would end the daemon.
      child.on('error', onError);
      child.once('exit', onExit);
      timer = setTimeout(() => {
        aborted.abort();
        void Promise.resolve(o.tail()).then((tail) =>
          reject(new o.error('start_timeout', `${o.name} ${o.notReady} within ${o.timeoutMs} ms${tail}`)),
        );
      }, o.timeoutMs);
      o.ready(child, aborted.signal).then(resolve, reject);
    });
    return { child, ready };
  } catch (err) {
    aborted.abort();
    await stopChild(child, { signal: o.abortSignal ?? 'SIGTERM' });
    throw err;
  } finally {
    clearTimeout(timer);
    if (onExit) child.off('exit', onExit);
  }
}

/**
 * Forks a Node.js module (the desktop worker) with an IPC channel, in
 * `within` when given; the exit hook SIGKILLs it if the daemon exits first.
 */
export function forkChild(modulePath: string, options: ForkOptions, within?: Confinement): ChildProcess {
  let child: ChildProcess;
  if (within) {
    // fork runs `execPath …execArgv modulePath`: the sandbox's command line goes in front of node's.
    const [command, args] = dieWithParent(...within.wrap(process.execPath, options.execArgv ?? []));
    child = fork(modulePath, [], {
      ...options,
      execPath: command,
      execArgv: args,
      env: within.environment(options.env ?? process.env),
      detached: true,
    });
    groupLeaders.add(child);
  } else {
    child = fork(modulePath, [], options);
  }
  trackChild(child);
  return child;
}

export interface ToolOptions {
  env?: NodeJS.ProcessEnv;
  /** It is killed after this long. */
  timeoutMs: number;
  /** The sandbox it runs in, if any. */
  within?: Confinement;
}

/** What a short run of a tool printed, or how it failed (`error.code` is `ENOENT` when it is not installed). */
export interface ToolRun {
  stdout: string;
  stderr: string;
  error?: ExecFileException;
}

/** Runs a short-lived tool (xprop, xdpyinfo, ipcrm, ffmpeg's listings) and resolves with what it printed; never rejects. */
export function runTool(command: string, args: readonly string[], options: ToolOptions): Promise<ToolRun> {
  const within = options.within;
  const [cmd, argv] = within ? within.wrap(command, args) : [command, args];
  const env = within ? within.environment(options.env ?? process.env) : options.env;
  return new Promise((resolve) => {
    execFile(cmd, argv, { env, timeout: options.timeoutMs, encoding: 'utf8' }, (err, stdout, stderr) =>
      resolve({ stdout, stderr, ...(err ? { error: err } : {}) }),
    );
  });
}

/** What a short run of a tool printed as bytes (runToolBytes); `truncated` when it printed more than its bound. */
export interface ToolBytesRun {
  stdout: Buffer;
  stderr: string;
  truncated: boolean;
  error?: ExecFileException;
}

/**
 * Runs a short-lived tool whose output is bytes (xclip's reading of a
 * clipboard, an image): it is killed after `timeoutMs`, and once it printed
 * more than `maxBytes` (then `truncated`). Never rejects.
 */
export function runToolBytes(
  command: string,
  args: readonly string[],
  options: ToolOptions & { maxBytes: number },
): Promise<ToolBytesRun> {
  const within = options.within;
  const [cmd, argv] = within ? within.wrap(command, args) : [command, args];
  const env = within ? within.environment(options.env ?? process.env) : options.env;
  return new Promise((resolve) => {
    execFile(
      cmd,
      argv,
      { env, timeout: options.timeoutMs, encoding: 'buffer', maxBuffer: options.maxBytes },
      (err, stdout, stderr) => {
        const truncated = err?.code === 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER';
        resolve({ stdout, stderr: stderr.toString('utf8'), truncated, ...(err ? { error: err } : {}) });
      },
    );
  });
}

/** How a program run by runAttached ended; `error` when it could not be started (`code` ENOENT: not installed). */
export interface AttachedRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  error?: NodeJS.ErrnoException;
}

/**
 * Runs a program on this process's own terminal (its stdin, stdout and stderr are ours, so `sudo`
 * may ask for a password) until it ends, with no time limit: for a command a person runs
 * (`deskbatch setup`), never for the daemon. Never rejects.
 */
export function runAttached(command: string, args: readonly string[]): Promise<AttachedRun> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: 'inherit' });
    child.once('error', (error) => resolve({ code: null, signal: null, error }));
    child.once('exit', (code, signal) => resolve({ code, signal }));
  });
}

/** runTool, synchronously: only for an exit hook, where nothing asynchronous runs any more. Throws on failure. */
export function runToolSync(command: string, args: readonly string[], options: ToolOptions): void {
  execFileSync(command, args, { env: options.env, timeout: options.timeoutMs, stdio: 'ignore' });
}
