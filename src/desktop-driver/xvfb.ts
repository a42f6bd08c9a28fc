/**
 * Starts a private virtual X display: Xvfb plus (by default) the openbox
 * window manager, for tests, the benchmark and the container entrypoint.
 *
 * - Xvfb picks its own display number (`-displayfd`): it takes the lowest free
 *   number using its own lock files (/tmp/.X<n>-lock), so parallel starts never
 *   collide and there is no check-then-use race.
 * - `-noreset`: without it the server resets its keyboard map whenever the last
 *   client leaves; `-nolisten tcp`: local sockets only (docs/MEASURED.md).
 * - openbox runs with a generated minimal config (OPENBOX_RC below) that binds
 *   no keys and no modifier+mouse chords, so Alt+click, Alt+Tab, Ctrl+Alt+arrows
 *   reach the applications instead of the window manager.
 * - Children never outlive this process (src/base/child-process.ts: setpriv's
 *   pdeathsig and an exit hook). They are unref'd, so a forgotten `stop()`
 *   does not keep the process alive.
 */
import { rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import {
  chmod,
  lstat,
  mkdir,
  mkdtemp,
  open,
  readdir,
  readFile,
  rename,
  rm,
  stat,
  statfs,
  writeFile,
} from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import {
  fileTail,
  programPid,
  runTool,
  startChild,
  StartError,
  stopChild,
  trackChild,
  type ChildProcess,
  type Confinement,
  type StartErrorCode,
} from '../base/child-process.ts';
import { ownedTempFolder, processRuns } from '../base/temp-folder.ts';
import { isDisplayReachable, placeDisplaySocket } from './display.ts';

export type VirtualDisplayLogLevel = 'debug' | 'info' | 'warn' | 'error';
export type VirtualDisplayLogger = (
  level: VirtualDisplayLogLevel,
  msg: string,
  fields?: Record<string, unknown>,
) => void;

export interface VirtualDisplayOptions {
  /** Screen width in pixels. */
  width: number;
  /** Screen height in pixels. */
  height: number;
  /** Bits per pixel; default 24. */
  depth?: number;
  /** Start openbox on the display (focus then follows the newest window); default true. */
  windowManager?: boolean;
  /** Limit for Xvfb and for openbox each to become ready; default 10 000 ms. */
  startTimeoutMs?: number;
  log?: VirtualDisplayLogger;
  /**
   * A folder for Xvfb's and openbox's logs (`xvfb.log`, `openbox.log`), kept
   * after the display stops. By default they live in a temporary folder that
   * stop() removes.
   */
  logDir?: string;
  /**
   * The client authority file (what `XAUTHORITY` names) that gets this
   * display's cookie, created mode 0600 if missing; several displays may share
   * one. By default a file of the display's own, removed by stop().
   */
  xauthority?: string;
  /**
   * Runs Xvfb and openbox in a desktop's sandbox (src/desktop-pool/sandbox.ts),
   * with their files in its folders. The display's number is then reserved
   * on the host (its lock file), and the host's `/tmp/.X11-unix/X<n>` is a
   * link to the socket in the sandbox's folder, so clients outside (the
   * daemon) reach it by the same name as clients inside.
   */
  sandbox?: DisplaySandbox;
}

/** What startVirtualDisplay needs of a sandbox: to run programs in it, and its folders. */
export interface DisplaySandbox extends Confinement {
  folders: { display: string; x11: string; framebuffer: string };
  /** Makes a file the daemon wrote readable by the programs inside. */
  give(path: string): Promise<void>;
}

export interface VirtualDisplay {
  /** The X display name, e.g. `:3`: pass it as `DISPLAY` to clients. */
  display: string;
  width: number;
  height: number;
  /** PID of the Xvfb process. */
  pid: number;
  /**
   * The authority file holding this display's cookie: X clients need it
   * (`XAUTHORITY`), since the server refuses connections without the cookie.
   */
  xauthority: string;
  /** `DISPLAY` and `XAUTHORITY` for a client of this display. */
  env: { DISPLAY: string; XAUTHORITY: string };
  /** PID of openbox, when it was started. */
  windowManagerPid?: number;
  /**
   * The file Xvfb keeps its screen in (`-fbdir`, an XWD image mapped in
   * memory, in a folder only this user can read, on /dev/shm where there is
   * one): the desktop worker reads screenshots from it
   * (src/desktop-driver/worker/screen.ts). Set for depth 24 only.
   */
  framebuffer?: string;
  /**
   * Calls `listener` once if Xvfb or openbox exits other than through stop()
   * (killed, crashed): the desktop is then broken and its owner rebuilds it.
   */
  onUnexpectedExit(listener: (what: 'Xvfb' | 'openbox') => void): void;
  /** Stops openbox and Xvfb (SIGTERM, SIGKILL after stopChild's deadline) and waits for both to exit. Idempotent. */
  stop(): Promise<void>;
}

export type VirtualDisplayErrorCode = StartErrorCode;

/** Starting the virtual display failed; `code` says how. The message carries the tail of the process's log. */
export class VirtualDisplayError extends StartError {
  override readonly name = 'VirtualDisplayError';
}

const DEFAULT_DEPTH = 24;
const DISPLAY_START_TIMEOUT_MS = 10_000;
/** Interval between readiness probes (X socket, window manager property). */
const POLL_INTERVAL_MS = 20;
/** Limit for one xprop / xdpyinfo run. */
const X_TOOL_TIMEOUT_MS = 5_000;
/** Fixed DPI, so browsers pick a device scale factor of 1. */
const XVFB_DPI = 96;
/** Xvfb refuses screens larger than this in either direction. */
const MAX_SCREEN_PX = 16_384;

const XVFB_NOT_FOUND = 'Xvfb not found: run `bash scripts/setup.sh` (Debian package xvfb)';
const OPENBOX_NOT_FOUND = 'openbox not found: run `bash scripts/setup.sh` (Debian package openbox)';

/**
 * openbox config: one desktop, new windows take focus, titlebar drag moves,
 * edge drag resizes. Deliberately no <keyboard> bindings and no
 * modifier+button chords and no root-window bindings (the stock config grabs
 * Alt+drag, Alt+Tab, Ctrl+Alt+arrows, and switches desktops on root scroll),
 * so every key and chord an agent sends reaches the application. And nothing
 * bound in the `Client` context: such a binding is a pointer grab that
 * freezes input on every press until openbox replays it, which lost and
 * misplaced fast clicks; the desktop worker does click-to-focus itself
 * (src/desktop-driver/pointer.ts).
 */
const OPENBOX_RC = `<?xml version="1.0" encoding="UTF-8"?>
<openbox_config xmlns="http://openbox.org/3.4/rc">
  <focus><focusNew>yes</focusNew><followMouse>no</followMouse></focus>
  <placement><policy>Smart</policy></placement>
  <desktops><number>1</number><popupTime>0</popupTime></desktops>
  <keyboard></keyboard>
  <mouse>
    <dragThreshold>4</dragThreshold>
    <doubleClickTime>400</doubleClickTime>
    <context name="Titlebar">
      <mousebind button="Left" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
      <mousebind button="Left" action="Drag"><action name="Move"/></mousebind>
      <mousebind button="Left" action="DoubleClick"><action name="ToggleMaximize"/></mousebind>
    </context>
    <context name="Top"><mousebind button="Left" action="Drag"><action name="Resize"><edge>top</edge></action></mousebind></context>
    <context name="Bottom"><mousebind button="Left" action="Drag"><action name="Resize"><edge>bottom</edge></action></mousebind></context>
    <context name="Left"><mousebind button="Left" action="Drag"><action name="Resize"><edge>left</edge></action></mousebind></context>
    <context name="Right"><mousebind button="Left" action="Drag"><action name="Resize"><edge>right</edge></action></mousebind></context>
    <context name="TLCorner"><mousebind button="Left" action="Drag"><action name="Resize"/></mousebind></context>
    <context name="TRCorner"><mousebind button="Left" action="Drag"><action name="Resize"/></mousebind></context>
    <context name="BLCorner"><mousebind button="Left" action="Drag"><action name="Resize"/></mousebind></context>
    <context name="BRCorner"><mousebind button="Left" action="Drag"><action name="Resize"/></mousebind></context>
    <context name="Close"><mousebind button="Left" action="Click"><action name="Close"/></mousebind></context>
    <context name="Maximize"><mousebind button="Left" action="Click"><action name="ToggleMaximize"/></mousebind></context>
    <context name="Iconify"><mousebind button="Left" action="Click"><action name="Iconify"/></mousebind></context>
  </mouse>
</openbox_config>
`;

/**
 * Folders of displays not stopped yet (their logs, cookie, framebuffer):
 * removed if the process exits first, also when it exits while a display is
 * still starting (a daemon shut down while a pool desktop was being built).
 */
const ownedDirs = new Set<string>();
let dirsHookInstalled = false;

function ownDir(dir: string): void {
  ownedDirs.add(dir);
  if (dirsHookInstalled) return;
  dirsHookInstalled = true;
  process.on('exit', () => {
    for (const d of ownedDirs) rmSync(d, { recursive: true, force: true });
  });
}

/** Where Xvfb's framebuffer file goes when it can (a tmpfs on Linux); else beside its other files. */
const SHM_DIR = '/dev/shm';
/** The folders of framebuffer files on /dev/shm: `deskbatch-fb-XXXXXX`. */
const FRAMEBUFFER_DIR_PREFIX = 'deskbatch-fb-';
/** The name Xvfb gives screen 0's file in its -fbdir. */
const XVFB_FRAMEBUFFER_FILE = 'Xvfb_screen0';

/**
 * A folder of its own for Xvfb's framebuffer file: on /dev/shm (memory) when
 * it has room for it four times over (Chromium uses it too, and Xvfb fails
 * to start when it cannot write its screen there), else `fallback` (on a disk
 * the kernel writes the screen back to it now and then, which costs I/O, not
 * correctness).
 */
async function framebufferDir(bytes: number, fallback: string): Promise<string> {
  try {
    const fs = await statfs(SHM_DIR);
    if (fs.bavail * fs.bsize >= 4 * bytes) return await mkdtemp(join(SHM_DIR, FRAMEBUFFER_DIR_PREFIX));
  } catch {
    // no /dev/shm here, or not writable
  }
  return fallback;
}

/** A framebuffer folder younger than this is never swept: its Xvfb may be starting. */
const SWEEP_MIN_AGE_MS = 10 * 60_000;
let sweptOnce = false;

/**
 * Removes framebuffer folders on /dev/shm that a killed daemon left behind
 * (SIGKILL, the OOM killer: nothing ran its stop()). Each holds a whole
 * screen in memory, and /dev/shm outlives a container's restart in its pod.
 * A folder is taken only if it is this user's, older than SWEEP_MIN_AGE_MS,
 * and its file is mapped by no process (a live Xvfb maps it). Returns the
 * folders removed.
 */
export async function sweepStaleFramebuffers(minAgeMs = SWEEP_MIN_AGE_MS): Promise<string[]> {
  const uid = process.getuid?.();
  const names = await readdir(SHM_DIR).catch(() => [] as string[]);
  const stale: string[] = [];
  for (const name of names) {
    if (!name.startsWith(FRAMEBUFFER_DIR_PREFIX)) continue;
    const dir = join(SHM_DIR, name);
    const st = await stat(dir).catch(() => undefined);
    if (st?.isDirectory() && st.uid === uid && Date.now() - st.mtimeMs >= minAgeMs) stale.push(dir);
  }
  if (stale.length === 0) return [];
  const mapped = new Set<string>();
  for (const pid of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(pid)) continue;
    const maps = await readFile(`/proc/${pid}/maps`, 'utf8').catch(() => '');
    for (const dir of stale) if (maps.includes(`${dir}/`)) mapped.add(dir);
  }
  const removed = stale.filter((dir) => !mapped.has(dir));
  for (const dir of removed) await rm(dir, { recursive: true, force: true });
  return removed;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** The host's X socket folder and lock files (the X convention every X server follows). */
const X11_UNIX = '/tmp/.X11-unix';
const lockPath = (n: number): string => `/tmp/.X${n}-lock`;
const socketPath = (n: number): string => `${X11_UNIX}/X${n}`;
/** Display numbers a sandboxed display takes from: above the ones people and CI start by hand. */
const SANDBOX_FIRST_DISPLAY = 100;
const SANDBOX_DISPLAYS = 5_000;

/**
 * Reserves a display number on the host for a sandboxed Xvfb (whose own
 * lock files are in its private /tmp): its lock file, created exclusively
 * with this process's pid as X servers write it; a lock whose process is
 * gone is taken over, as X servers do.
 */
async function reserveDisplayNumber(): Promise<number> {
  await mkdir(X11_UNIX, { recursive: true, mode: 0o1777 });
  for (let n = SANDBOX_FIRST_DISPLAY; n < SANDBOX_FIRST_DISPLAY + SANDBOX_DISPLAYS; n++) {
    let lock;
    for (let attempt = 0; !lock && attempt < 2; attempt++) {
      try {
        lock = await open(lockPath(n), 'wx', 0o444);
      } catch {
        const owner = Number((await readFile(lockPath(n), 'utf8').catch(() => '')).trim());
        if (!Number.isSafeInteger(owner) || owner <= 0 || processRuns(owner)) break;
        await rm(lockPath(n), { force: true });
      }
    }
    if (!lock) continue;
    await lock.writeFile(`${String(process.pid).padStart(10)}\n`);
    await lock.close();
    if (!(await lstat(socketPath(n)).catch(() => undefined))) return n;
    await rm(lockPath(n), { force: true });
  }
  throw new VirtualDisplayError('start_failed', `no free display number from ${SANDBOX_FIRST_DISPLAY}`);
}

/**
 * Spawns Xvfb with `-displayfd 3` and resolves with the display number it
 * writes to fd 3 once it accepts connections.
 */
async function spawnXvfb(
  screen: string,
  authPath: string,
  fbDir: string | undefined,
  logFd: number,
  logPath: string,
  timeoutMs: number,
  reserved: number | undefined,
  within: Confinement | undefined,
): Promise<{ child: ChildProcess; displayNumber: number }> {
  const { child, ready } = await startChild({
    name: 'Xvfb',
    command: 'Xvfb',
    ...(within ? { within } : {}),
    args: [
      ...(reserved !== undefined ? [`:${reserved}`] : []),
      ...(fbDir ? ['-fbdir', fbDir] : []),
      '-displayfd',
      '3',
      '-screen',
      '0',
      screen,
      '-dpi',
      String(XVFB_DPI),
      '-nolisten',
      'tcp',
      '-noreset',
      '-auth',
      authPath,
    ],
    spawn: { stdio: ['ignore', logFd, logFd, 'pipe'] },
    error: VirtualDisplayError,
    notInstalled: XVFB_NOT_FOUND,
    timeoutMs,
    exitedBefore: 'before reporting its display',
    notReady: 'did not report its display',
    tail: () => fileTail(logPath),
    ready: (started) => {
      const fd3 = started.stdio[3] as Readable;
      return new Promise<number>((resolve) => {
        let text = '';
        fd3.setEncoding('utf8');
        fd3.on('data', (chunk: string) => {
          text += chunk;
          const m = /^(\d+)\n/.exec(text);
          if (m) resolve(Number(m[1]));
        });
      }).finally(() => fd3.destroy());
    },
  });
  return { child, displayNumber: ready };
}

/** The authority file updates of this process, one at a time (setXauthEntry). */
let xauthUpdates: Promise<void> = Promise.resolve();

/**
 * Puts the cookie for display `number` in the authority file at `path`
 * (created mode 0600), replacing any entry for that number: an older one, for
 * a display that used the number before, would be found first and refused.
 * `cookie` undefined just removes the entry.
 */
function setXauthEntry(path: string, number: string, cookie: Buffer | undefined): Promise<void> {
  // Read, change, write: two displays started at once by this process would
  // each write back what they read and lose the other's entry, so the updates
  // run one at a time; the new file is renamed into place so that an X client
  // reading it meanwhile sees the old or the new file, never half of one.
  const run = xauthUpdates.then(() => rewriteXauth(path, number, cookie));
  xauthUpdates = run.catch(() => undefined);
  return run;
}

async function rewriteXauth(path: string, number: string, cookie: Buffer | undefined): Promise<void> {
  const old = await readFile(path).catch(() => Buffer.alloc(0));
  const kept: Buffer[] = [];
  let off = 0;
  try {
    while (off + 2 <= old.length) {
      const start = off;
      off += 2; // family
      const fields: Buffer[] = [];
      for (let i = 0; i < 4; i++) {
        const len = old.readUInt16BE(off);
        fields.push(old.subarray(off + 2, off + 2 + len));
        off += 2 + len;
      }
      if (off > old.length) break;
      if (fields[1]!.toString('latin1') !== number) kept.push(old.subarray(start, off));
    }
  } catch {
    // a truncated tail: keep what parsed
  }
  if (cookie) kept.push(xauthEntry(number, cookie));
  const temp = `${path}.${process.pid}.tmp`;
  await writeFile(temp, Buffer.concat(kept), { mode: 0o600 });
  await chmod(temp, 0o600);
  await rename(temp, path);
}

/**
 * One Xauthority entry (the Xau file format: big-endian lengths): FamilyWild,
 * no address, `number` ('' for any display), MIT-MAGIC-COOKIE-1 and `cookie`.
 */
function xauthEntry(number: string, cookie: Buffer): Buffer {
  const field = (data: Buffer): Buffer => {
    const len = Buffer.alloc(2);
    len.writeUInt16BE(data.length);
    return Buffer.concat([len, data]);
  };
  const family = Buffer.alloc(2);
  family.writeUInt16BE(0xffff);
  return Buffer.concat([
    family,
    field(Buffer.alloc(0)),
    field(Buffer.from(number, 'latin1')),
    field(Buffer.from('MIT-MAGIC-COOKIE-1', 'latin1')),
    field(cookie),
  ]);
}

/** Runs an X client tool with an argument array; resolves with stdout, rejects on failure. */
async function runXTool(
  command: string,
  args: string[],
  display: string,
  xauthority?: string,
  within?: Confinement,
): Promise<string> {
  const run = await runTool(command, args, {
    env: { ...process.env, DISPLAY: display, ...(xauthority ? { XAUTHORITY: xauthority } : {}) },
    timeoutMs: X_TOOL_TIMEOUT_MS,
    ...(within ? { within } : {}),
  });
  if (!run.error) return run.stdout;
  if (run.error.code === 'ENOENT') {
    throw new VirtualDisplayError(
      'not_installed',
      `${command} not found: run \`bash scripts/setup.sh\` (Debian package x11-utils)`,
    );
  }
  throw new Error(`${command} ${args.join(' ')} failed: ${run.stderr.trim() || run.error.message}`);
}

/** Whether a window manager has announced itself on the display (EWMH `_NET_SUPPORTING_WM_CHECK`). */
async function windowManagerRunning(display: string, xauthority: string, within?: Confinement): Promise<boolean> {
  try {
    // A sandboxed display's socket is only in its sandbox (and Xlib knows no other place): xprop runs there too.
    const out = await runXTool('xprop', ['-root', '_NET_SUPPORTING_WM_CHECK'], display, xauthority, within);
    return /window id # 0x[0-9a-f]+/i.test(out);
  } catch (err) {
    if (err instanceof VirtualDisplayError) throw err;
    return false;
  }
}

async function startOpenbox(
  display: string,
  xauthority: string,
  rcPath: string,
  logFd: number,
  logPath: string,
  timeoutMs: number,
  within: Confinement | undefined,
): Promise<ChildProcess> {
  const { child } = await startChild({
    name: 'openbox',
    ...(within ? { within } : {}),
    command: 'openbox',
    args: ['--sm-disable', '--config-file', rcPath],
    spawn: { stdio: ['ignore', logFd, logFd], env: { ...process.env, DISPLAY: display, XAUTHORITY: xauthority } },
    error: VirtualDisplayError,
    notInstalled: OPENBOX_NOT_FOUND,
    timeoutMs,
    exitedBefore: 'during start-up',
    notReady: `did not come up on ${display}`,
    tail: () => fileTail(logPath),
    ready: async (_child, aborted) => {
      while (!aborted.aborted && !(await windowManagerRunning(display, xauthority, within)))
        await sleep(POLL_INTERVAL_MS);
    },
  });
  return child;
}

function checkDimension(name: string, value: number): void {
  if (!Number.isInteger(value) || value < 1 || value > MAX_SCREEN_PX) {
    throw new VirtualDisplayError('bad_options', `${name} must be an integer from 1 to ${MAX_SCREEN_PX}, got ${value}`);
  }
}

/** Starts Xvfb (and openbox unless `windowManager: false`) and resolves once clients can use the display. */
export async function startVirtualDisplay(options: VirtualDisplayOptions): Promise<VirtualDisplay> {
  const {
    width,
    height,
    depth = DEFAULT_DEPTH,
    windowManager = true,
    startTimeoutMs = DISPLAY_START_TIMEOUT_MS,
  } = options;
  const log = options.log ?? ((): void => {});
  checkDimension('width', width);
  checkDimension('height', height);
  if (![8, 16, 24].includes(depth)) {
    throw new VirtualDisplayError('bad_options', `depth must be 8, 16 or 24, got ${depth}`);
  }

  const startedAt = performance.now();
  const sandbox = options.sandbox;
  const within: Confinement | undefined = sandbox;
  const workDir = sandbox ? sandbox.folders.display : await ownedTempFolder('xvfb');
  if (!sweptOnce) {
    sweptOnce = true;
    void sweepStaleFramebuffers().then(
      (removed) => removed.length && log('info', 'removed framebuffer folders a killed daemon left', { removed }),
      () => undefined,
    );
  }
  ownDir(workDir);
  const fbDir =
    depth !== 24
      ? undefined
      : sandbox
        ? sandbox.folders.framebuffer
        : await framebufferDir(width * height * 4, workDir);
  if (fbDir) ownDir(fbDir);
  // The server's cookie: only clients that hold it can connect (no other local user or process).
  const cookie = randomBytes(16);
  const serverAuthPath = join(workDir, 'server-auth');
  await writeFile(serverAuthPath, xauthEntry('', cookie), { mode: 0o600 });
  await sandbox?.give(serverAuthPath);
  const xauthority = options.xauthority ?? join(workDir, 'Xauthority');
  // A sandboxed display's logs stay out of its programs' reach: the daemon quotes them.
  const privateLogs = sandbox && !options.logDir ? await ownedTempFolder('xvfb-logs') : undefined;
  if (privateLogs) ownDir(privateLogs);
  const logDir = options.logDir ?? privateLogs ?? workDir;
  const xvfbLogPath = join(logDir, 'xvfb.log');
  const openboxLogPath = join(logDir, 'openbox.log');
  const rcPath = join(workDir, 'openbox-rc.xml');
  // Logs go to files, not pipes: nothing has to drain them, and the error messages quote their tails.
  const xvfbLog = await open(xvfbLogPath, 'a');
  const openboxLog = windowManager ? await open(openboxLogPath, 'a') : undefined;
  let xvfb: ChildProcess | undefined;
  let openbox: ChildProcess | undefined;
  // A sandboxed display's number, reserved on the host (its lock file and, once it runs, the link to its socket).
  let reserved: number | undefined;

  const cleanUp = async (): Promise<void> => {
    if (openbox) await stopChild(openbox);
    if (xvfb) await stopChild(xvfb);
    await xvfbLog.close().catch(() => {});
    await openboxLog?.close().catch(() => {});
    await rm(workDir, { recursive: true, force: true });
    if (fbDir) await rm(fbDir, { recursive: true, force: true });
    ownedDirs.delete(workDir);
    if (fbDir) ownedDirs.delete(fbDir);
    if (privateLogs) {
      await rm(privateLogs, { recursive: true, force: true });
      ownedDirs.delete(privateLogs);
    }
    if (reserved !== undefined) {
      placeDisplaySocket(String(reserved), undefined);
      await rm(lockPath(reserved), { force: true });
    }
  };

  let display: string;
  try {
    if (sandbox) reserved = await reserveDisplayNumber();
    const started = await spawnXvfb(
      `${width}x${height}x${depth}`,
      serverAuthPath,
      fbDir,
      xvfbLog.fd,
      xvfbLogPath,
      startTimeoutMs,
      reserved,
      within,
    );
    xvfb = started.child;
    display = `:${started.displayNumber}`;
    await setXauthEntry(xauthority, String(started.displayNumber), cookie);
    await sandbox?.give(xauthority);
    // The daemon's own X connections find the sandboxed server's socket in its folder (display.ts).
    if (sandbox)
      placeDisplaySocket(String(started.displayNumber), join(sandbox.folders.x11, `X${started.displayNumber}`));
    // -displayfd is written once the server listens; the probe double-checks the socket path we hand out.
    const deadline = Date.now() + startTimeoutMs;
    while (!(await isDisplayReachable(display))) {
      if (Date.now() > deadline) {
        throw new VirtualDisplayError('start_timeout', `Xvfb reported ${display} but its socket did not answer`);
      }
      await sleep(POLL_INTERVAL_MS);
    }
    log('debug', 'Xvfb ready', { display, pid: xvfb.pid, ms: Math.round(performance.now() - startedAt) });

    if (windowManager && openboxLog) {
      await writeFile(rcPath, OPENBOX_RC);
      await sandbox?.give(rcPath);
      openbox = await startOpenbox(display, xauthority, rcPath, openboxLog.fd, openboxLogPath, startTimeoutMs, within);
      log('debug', 'openbox ready', { display, pid: openbox.pid, ms: Math.round(performance.now() - startedAt) });
    }
  } catch (err) {
    await cleanUp();
    throw err;
  }
  const displayNumber = display.slice(1);
  // Its folders go with the exit hook of ownDir; a killed Xvfb leaves its lock and socket behind.
  // (A sandboxed one's socket is in its own folder: the host's path of that number is not its to remove.)
  trackChild(xvfb, () => {
    for (const path of [lockPath(Number(displayNumber)), ...(sandbox ? [] : [socketPath(Number(displayNumber))])]) {
      rmSync(path, { recursive: true, force: true });
    }
  });
  xvfb.unref();
  openbox?.unref();
  // The children hold their own copies of the log descriptors.
  await xvfbLog.close().catch(() => {});
  await openboxLog?.close().catch(() => {});

  const xvfbChild = xvfb;
  const openboxChild = openbox;
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      await cleanUp();
      if (options.xauthority) await setXauthEntry(options.xauthority, displayNumber, undefined).catch(() => undefined);
      log('debug', 'virtual display stopped', { display });
    })();
    return stopping;
  };

  // A display that dies on its own is worth a warning (tests then fail in confusing ways), and its owner hears of it.
  const exitListeners: ((what: 'Xvfb' | 'openbox') => void)[] = [];
  let exitedUnasked = false;
  const watch = (child: ChildProcess, what: 'Xvfb' | 'openbox'): void => {
    child.once('exit', (code, signal) => {
      if (stopping) return;
      log('warn', `${what} exited unexpectedly`, { display, code, signal });
      if (exitedUnasked) return;
      exitedUnasked = true;
      for (const listener of exitListeners) listener(what);
    });
  };
  watch(xvfbChild, 'Xvfb');
  if (openboxChild) watch(openboxChild, 'openbox');

  log('info', 'virtual display started', {
    display,
    width,
    height,
    windowManager,
    ms: Math.round(performance.now() - startedAt),
  });
  return {
    display,
    width,
    height,
    pid: programPid(xvfbChild) ?? (xvfbChild.pid as number),
    xauthority,
    env: { DISPLAY: display, XAUTHORITY: xauthority },
    ...(openboxChild?.pid !== undefined ? { windowManagerPid: programPid(openboxChild) ?? openboxChild.pid } : {}),
    ...(fbDir ? { framebuffer: join(fbDir, XVFB_FRAMEBUFFER_FILE) } : {}),
    onUnexpectedExit: (listener) => void exitListeners.push(listener),
    stop,
  };
}

/** Size of the display's root window, read with `xdpyinfo` (Debian package x11-utils). */
export async function displaySize(display: string): Promise<{ width: number; height: number }> {
  const out = await runXTool('xdpyinfo', ['-display', display], display);
  const m = /dimensions:\s+(\d+)x(\d+) pixels/.exec(out);
  if (!m) throw new Error(`cannot find the screen dimensions in the output of xdpyinfo -display ${display}`);
  return { width: Number(m[1]), height: Number(m[2]) };
}
