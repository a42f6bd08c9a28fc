/**
 * Runs the daemon the way an operator does, as its own process
 * (`node bin/deskbatch.js serve …`), for the soak (bench/soak.ts) and the bench
 * (bench/daemon-process.ts): its event loop is not the caller's and its RSS is
 * its own. It is the compiled daemon (dist/, built first when the sources
 * changed: testkit/build.ts), with no loader, as an operator's is. DISPLAY is the caller's display, so the daemon starts none of its
 * own; the token comes from DESKBATCH_TOKEN, so nothing is written under
 * ~/.deskbatch.
 *
 * `command` runs another daemon the same way: the installed package's
 * (`npx deskbatch serve` in a project that installed it: test/package.test.ts).
 * Its launcher (npx, and the shell npm runs the command in) does not pass
 * SIGTERM on, so `pid` and the signals are the daemon's own, from its
 * listening line.
 *
 * The listening URL is read from the daemon's log line
 * "deskbatch listening on ws://…" (JSON lines). Every line can go to a log
 * file; lines are counted by level and warnings and errors by text; with
 * `echo`, warnings, errors and lines that are not JSON are also printed on our
 * stderr until `stop()`. `stop()` sends SIGTERM to the pid we started, and
 * SIGKILL if it has not exited in time; never anything by name.
 */
import { spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { ensureBuilt } from './build.ts';
import { until } from './wait.ts';

const CLI = fileURLToPath(new URL('../bin/deskbatch.js', import.meta.url));
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const START_TIMEOUT_MS = 60_000;

export interface DaemonProcessOptions {
  /** The X display the daemon drives (DISPLAY). */
  display: string;
  /** Its token (DESKBATCH_TOKEN). */
  token: string;
  /** The flags after `serve`. */
  args: readonly string[];
  /** More environment, over ours; a variable set to undefined is left out. */
  env?: Record<string, string | undefined>;
  /** Every line the daemon prints goes here. */
  logFile?: string;
  /** Print its warnings and errors, and lines that are not JSON, on our stderr (until `stop()`). */
  echo?: boolean;
  /** Run it as this uid (and gid), an unprivileged user, through setpriv (as root only). */
  runAs?: number;
  /**
   * What starts it, instead of `node bin/deskbatch.js serve` in this checkout: `file` with `args` (then
   * `options.args`), in `cwd`. E.g. `npx deskbatch serve` where the package is installed.
   */
  command?: { file: string; args: readonly string[]; cwd: string };
}

export interface ProcessExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface DaemonProcess {
  /** The daemon's own pid (not its launcher's, with `command`). */
  pid: number;
  /** ws://…/v1 from its "listening on" line. */
  url: string;
  exited: Promise<ProcessExit>;
  hasExited(): boolean;
  /** Log lines by level. */
  logCounts: Record<string, number>;
  /** `level: msg` of its warnings and errors, with how often each came. */
  warnings: Map<string, number>;
  /**
   * SIGTERM, then SIGKILL after `graceMs`; resolves with how it exited and whether it had to be
   * killed. Once: later calls get the same answer.
   */
  stop(graceMs: number): Promise<ProcessExit & { killed: boolean }>;
}

/** Sends `signal` to `pid`; false when it is gone. */
function signal(pid: number, sig: NodeJS.Signals | 0): boolean {
  try {
    process.kill(pid, sig);
    return true;
  } catch {
    return false;
  }
}

export async function startDaemonProcess(options: DaemonProcessOptions): Promise<DaemonProcess> {
  const launcher = options.command;
  if (!launcher) await ensureBuilt();
  const argv = [CLI, 'serve', ...options.args];
  const u = options.runAs === undefined ? undefined : String(options.runAs);
  // setpriv execs node: the pid is the daemon's.
  const [command, args] = launcher
    ? [launcher.file, [...launcher.args, ...options.args]]
    : u
      ? ['setpriv', ['--reuid', u, '--regid', u, '--clear-groups', '--', process.execPath, ...argv]]
      : [process.execPath, argv];
  const child = spawn(command, args, {
    cwd: launcher?.cwd ?? ROOT,
    env: { ...process.env, DISPLAY: options.display, DESKBATCH_TOKEN: options.token, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const log = options.logFile === undefined ? undefined : createWriteStream(options.logFile);
  log?.on('error', () => undefined); // a full disk must not end the run it logs for
  const logCounts: Record<string, number> = {};
  const warnings = new Map<string, number>();
  let echo = options.echo === true;
  let exitedFlag = false;
  const exited = new Promise<ProcessExit>((resolve) =>
    child.once('exit', (code, signal) => {
      exitedFlag = true;
      log?.end();
      resolve({ code, signal });
    }),
  );
  let resolveUrl!: (url: string) => void;
  const url = new Promise<string>((resolve) => (resolveUrl = resolve));
  /** The daemon's pid: the child's, or, behind a launcher, the one its listening line gives. */
  let daemonPid = child.pid!;
  const onLine = (line: string): void => {
    let entry: { level?: string; msg?: string; pid?: number } | undefined;
    try {
      entry = JSON.parse(line) as { level?: string; msg?: string; pid?: number };
    } catch {
      entry = undefined;
    }
    if (echo && (!entry || entry.level === 'warn' || entry.level === 'error')) {
      process.stderr.write(`[daemon ${child.pid}] ${line}\n`);
    }
    if (!entry) return;
    const level = entry.level ?? '?';
    logCounts[level] = (logCounts[level] ?? 0) + 1;
    const m = /^deskbatch listening on (ws:\/\/\S+)$/.exec(entry.msg ?? '');
    if (m) {
      if (launcher && typeof entry.pid === 'number') daemonPid = entry.pid;
      resolveUrl(m[1]!);
    }
    if (level === 'warn' || level === 'error') {
      const key = `${level}: ${entry.msg}`;
      warnings.set(key, (warnings.get(key) ?? 0) + 1);
    }
  };
  for (const stream of [child.stdout, child.stderr]) {
    let pending = '';
    stream.on('data', (chunk: Buffer) => {
      if (log && !log.writableEnded) log.write(chunk);
      pending += chunk.toString();
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) if (line) onLine(line);
    });
  }

  let stopping: Promise<ProcessExit & { killed: boolean }> | undefined;
  const stop = (graceMs: number): Promise<ProcessExit & { killed: boolean }> =>
    (stopping ??= (async () => {
      echo = false; // its shutdown warnings (the browser going away) are expected
      const behind = daemonPid !== child.pid;
      if (!exitedFlag) signal(daemonPid, 'SIGTERM');
      let killed = false;
      const kill = (): void => {
        killed = true;
        if (behind) signal(daemonPid, 'SIGKILL');
        child.kill('SIGKILL');
      };
      const timer = setTimeout(kill, graceMs);
      const e = await exited;
      clearTimeout(timer);
      // A launcher that went first (killed, or crashed) leaves the daemon to be ended here.
      if (behind && signal(daemonPid, 0)) {
        await until(`the daemon (pid ${daemonPid}) to exit after its launcher`, () => !signal(daemonPid, 0), {
          timeoutMs: graceMs,
        }).catch(kill);
      }
      return { ...e, killed };
    })());

  const where = options.logFile === undefined ? '' : `; see ${options.logFile}`;
  const startTimeout = new AbortController();
  try {
    const started = await Promise.race([
      url,
      exited.then((e) => {
        throw new Error(`the daemon exited at start (${e.code ?? e.signal})${where}`);
      }),
      delay(START_TIMEOUT_MS, undefined, { signal: startTimeout.signal }).then(() => {
        throw new Error(`the daemon did not report its address within ${START_TIMEOUT_MS / 1000} s${where}`);
      }),
    ]);
    if (launcher && daemonPid === child.pid) throw new Error('the listening line gave no pid');
    return { pid: daemonPid, url: started, exited, hasExited: () => exitedFlag, logCounts, warnings, stop };
  } catch (err) {
    await stop(15_000);
    throw err;
  } finally {
    startTimeout.abort();
  }
}
