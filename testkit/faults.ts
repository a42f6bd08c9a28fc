/**
 * Fault injection for tests and the soak run: find the processes a daemon
 * started (its desktop worker, its Chromium) by walking /proc from the
 * daemon's pid, and kill them. Only descendants of the given pid are ever
 * touched: other people's browsers and workers run on this machine.
 */
import { existsSync, readFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';

interface ProcInfo {
  pid: number;
  ppid: number;
  argv: string[];
}

async function processes(): Promise<ProcInfo[]> {
  const out: ProcInfo[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    if (!stat) continue;
    // The command name in parentheses may hold spaces: the fields start after the last ')'.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    const argv = (await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '')).split('\0').filter(Boolean);
    out.push({ pid: Number(entry), ppid, argv });
  }
  return out;
}

/** Every live descendant of `root` (children, grandchildren, …), with its argv. */
export async function descendants(root: number): Promise<ProcInfo[]> {
  const all = await processes();
  const byParent = new Map<number, ProcInfo[]>();
  for (const p of all) byParent.set(p.ppid, [...(byParent.get(p.ppid) ?? []), p]);
  const found: ProcInfo[] = [];
  const queue = [root];
  while (queue.length > 0) {
    for (const child of byParent.get(queue.shift()!) ?? []) {
      found.push(child);
      queue.push(child.pid);
    }
  }
  return found;
}

/** The desktop worker (nut-js child) processes under `root`. */
export async function desktopWorkerPids(root = process.pid): Promise<number[]> {
  return (await descendants(root))
    .filter((p) => p.argv.some((a) => /src\/desktop-driver\/worker\.(ts|js)$/.test(a)))
    .map((p) => p.pid);
}

/**
 * The Chromium browser processes under `root`, without its zygotes, renderers
 * and other helpers. Chromium rewrites those helpers' command lines into one
 * space-separated string (no NUL separators), so `--type=` is looked for
 * inside each argument, not only at its start (which would also return the
 * zygotes and their children when `root` is not the browser's direct
 * parent). The program must be `chromium` itself, not
 * `chrome_crashpad_handler` beside it.
 */
export async function chromiumBrowserPids(root = process.pid): Promise<number[]> {
  return (await descendants(root))
    .filter((p) => /(^|\/)chromium(\s|$)/.test(p.argv[0] ?? '') && !p.argv.some((a) => /(^|\s)--type=/.test(a)))
    .map((p) => p.pid);
}

/**
 * The direct children of `root` (default: this process) whose argv matches
 * `argv`, read from /proc/<root>/task/<tid>/children: a handful of reads, so
 * it stays fast on a loaded machine where walking all of /proc does not (a
 * kill loop must catch a process before it finishes starting).
 */
export async function childPids(argv: RegExp, root = process.pid): Promise<number[]> {
  const tasks = await readdir(`/proc/${root}/task`).catch(() => [] as string[]);
  const children = new Set<number>();
  for (const tid of tasks) {
    const text = await readFile(`/proc/${root}/task/${tid}/children`, 'utf8').catch(() => '');
    for (const pid of text.split(' ').filter(Boolean)) children.add(Number(pid));
  }
  const found: number[] = [];
  for (const pid of children) {
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (argv.test(cmdline.split('\0').join(' '))) found.push(pid);
  }
  return found;
}

/** SIGKILLs each pid; a pid that is already gone is not an error. Returns how many were signalled. */
/**
 * childPids, and the children matching `argv` of those children that are
 * `nsenter` (a program started in a desktop's sandbox, src/desktop-pool/sandbox.ts).
 */
export async function childOrSandboxedPids(argv: RegExp, root = process.pid): Promise<number[]> {
  const direct = await childPids(argv, root);
  const launchers = await childPids(/^\S*nsenter\s/, root);
  const inner = await Promise.all(launchers.map((pid) => childPids(argv, pid)));
  return [...direct, ...inner.flat()];
}

/**
 * The process that waits for `pid` outside its sandbox: `nsenter`, when `pid`
 * runs in a desktop's sandbox (src/desktop-pool/sandbox.ts). A stopped
 * program stops its nsenter too (nsenter follows its child's job control), and
 * a stopped nsenter holds the program's pipes open after the program died: a
 * test that stops and then kills a sandboxed program kills its nsenter with it.
 */
export function launcherOf(pid: number): number[] {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    return readFileSync(`/proc/${ppid}/cmdline`, 'utf8').split('\0')[0]?.endsWith('nsenter') ? [ppid] : [];
  } catch {
    return [];
  }
}

/**
 * Kills the program `pid` with SIGKILL and returns once it and, when it runs
 * in a desktop's sandbox, its nsenter (`launcherOf`) are both reaped. Only
 * then are the program's pipes closed: a daemon in this process has heard of
 * the end (Playwright's CDP pipe, the worker's IPC) before anything the test
 * sends next can reach it.
 */
export async function killAndReap(pid: number, what: string): Promise<void> {
  const gone = [pid, ...launcherOf(pid)];
  killAll([pid]);
  await waitFor(
    `${what} (pids ${gone.join(', ')}) to be reaped`,
    async () => (gone.some((p) => existsSync(`/proc/${p}`)) ? undefined : true),
    30_000,
    10,
  );
}

export function killAll(pids: readonly number[], signal: NodeJS.Signals = 'SIGKILL'): number {
  let n = 0;
  for (const pid of pids) {
    try {
      process.kill(pid, signal);
      n++;
    } catch {
      // already exited
    }
  }
  return n;
}

/** Polls `probe` every `everyMs` until it returns a value other than undefined, or throws after `timeoutMs`. */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  timeoutMs = 30_000,
  everyMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Resident set size and open file descriptors of a process, from /proc. */
export async function processFootprint(pid: number): Promise<{ rssBytes: number; fds: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const rssKb = Number(/^VmRSS:\s+(\d+)\s+kB/m.exec(status)?.[1] ?? NaN);
  const fds = (await readdir(`/proc/${pid}/fd`)).length;
  return { rssBytes: rssKb * 1024, fds };
}

/** Failure types a call may get while a resource (the worker, X, Chromium) is down or coming back: all retryable. */
export const RESOURCE_DOWN_TYPES: readonly string[] = [
  'DriverCrashedError',
  'DisplayUnavailableError',
  'BrowserCrashedError',
  'BrowserUnavailableError',
  'TimeoutError',
];
