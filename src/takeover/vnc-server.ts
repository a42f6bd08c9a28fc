/**
 * Human takeover's VNC server: an x11vnc on a session's X display, reachable
 * only through a unix socket in a private folder. The viewer's WebSocket
 * reaches that socket through the bridge (src/takeover/vnc-bridge.ts).
 *
 * The server (startVncServer):
 * - x11vnc is started as every child is (src/base/child-process.ts: an argv, no
 *   shell, setpriv's pdeathsig and an exit hook), in a process group of its
 *   own; it runs only while a person holds the desktop, and stop() ends it.
 * - It listens on `<dir>/vnc.sock` and on nothing else: `-rfbport 0` closes
 *   the IPv4 port, but libvncserver still listened on [::]:5900 with
 *   `-rfbport 0 -noipv6` (seen with `ss -ltnp`) until `-rfbportv6 -1` was
 *   added too. The folder (0700, the caller's) is the access control, so no
 *   VNC password (`-nopw` only silences the banner about it).
 * - Every side channel is shut: no rc file, no remote control, no
 *   VNC_CONNECT reverse connections (an X client on the display could
 *   otherwise make x11vnc dial out), no external commands, no http server,
 *   no bell, no RECORD. The desktop's selections are not sent to viewers
 *   (`-seldir recv`): a viewer's clipboard goes to the desktop (CLIPBOARD,
 *   PRIMARY and CUT_BUFFER0), nothing comes back that way.
 * - `X11VNC_AVOID_WINDOWS=never`: x11vnc otherwise waits 8 to 45 s after its
 *   first client (for a display manager that could kill it) before it makes
 *   the window that owns the selections and sets up XFIXES: until then a
 *   paste reached CUT_BUFFER0 only. Even so it does that step late when a
 *   viewer connects early, so start-up waits for it (SELECTION_WINDOW_LINE).
 * - The pointer: the desktop worker hides the X cursor (XFIXES HideCursor,
 *   src/desktop-driver/worker/screen.ts), which hides it from x11vnc's screen reads
 *   too, but XFIXES still gives x11vnc the cursor's image: with `-cursor most`
 *   it sends the exact shape as a Cursor pseudo-rectangle and noVNC draws it
 *   locally, at the viewer's own pointer, with no round trip.
 * - stop() sends SIGINT (see there), then SIGKILL; x11vnc releases the keys
 *   still down as it exits (`-clear_keys`).
 * - Its stderr goes to the log at debug level, a line at a time, bounded; a
 *   start failure quotes its last lines.
 */
import { lstatSync, readFileSync, rmSync, statSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { isAbsolute, join } from 'node:path';
import {
  OUTPUT_LINE_CHARS,
  KILL_DEADLINE_MS,
  exited,
  OutputLines,
  raceDeadline,
  runTool,
  programPid,
  runToolSync,
  signalChild,
  running,
  startChild,
  StartError,
  stopChild,
  type ChildProcess,
  type Confinement,
  type StartErrorCode,
} from '../base/child-process.ts';
import { LOCAL_DISPLAY_NAME } from '../desktop-driver/display.ts';
import type { Logger } from '../base/log.ts';

export interface VncServerOptions {
  /** The X display, e.g. `:5`. */
  display: string;
  /** The display's cookie file, passed as `XAUTHORITY`. */
  xauthority?: string;
  /** a 0700 folder made by the caller; the unix socket goes in it */
  dir: string;
  /**
   * The desktop's sandbox (src/desktop-pool/sandbox.ts): x11vnc then runs in
   * it, and `dir` is the sandbox's (its owner is the desktop's).
   */
  within?: Confinement;
  log: Logger;
  /** How long x11vnc may take to accept a connection; default 10 000 ms. */
  startTimeoutMs?: number;
}

export interface VncServer {
  readonly socketPath: string;
  readonly pid: number;
  /** resolves when the process ended (for any reason), once its socket and shared memory are removed */
  readonly exited: Promise<void>;
  /** SIGINT (x11vnc releases the keys still down and exits), SIGKILL after 3 s; resolves once exited has. Idempotent. */
  stop(): Promise<void>;
}

export type VncErrorCode = StartErrorCode;

/** x11vnc could not start; `code` says why. Messages quote the end of its output. */
export class VncError extends StartError {
  override readonly name = 'VncError';
}

const X11VNC = 'x11vnc';
const X11VNC_NOT_FOUND = 'x11vnc not found: run `bash scripts/setup.sh` (Debian package x11vnc)';
const SOCKET_NAME = 'vnc.sock';
/** sun_path holds 108 bytes with the terminating NUL. */
const MAX_SOCKET_PATH_BYTES = 107;
const X11VNC_START_TIMEOUT_MS = 10_000;
/** Between two connection attempts while x11vnc starts. */
const PROBE_INTERVAL_MS = 20;
/** After SIGINT, how long x11vnc gets before SIGKILL. */
const X11VNC_STOP_DEADLINE_MS = 3_000;
/** x11vnc's lines logged per server (it writes ~20 per connection); later ones are counted only. */
const X11VNC_LOGGED_LINES_MAX = 2_000;
/**
 * What x11vnc writes once it owns a window for the selections, set up in
 * the same step as XFIXES (its cursor shapes): about 0.1 s after it starts
 * when no client connects before, but 0.6 s after a first connection, and
 * 4 s when a viewer is mid-handshake (measured), a time in which a paste
 * reaches CUT_BUFFER0 only. So start-up waits for this line before it
 * connects at all; an x11vnc that never writes it costs SELECTIONS_GRACE_MS.
 */
const SELECTION_WINDOW_LINE = /\bcreated selwin\b/;
const SELECTIONS_GRACE_MS = 2_000;
/** What every RFB 3.x server sends first. */
const RFB_GREETING = /^RFB \d{3}\.\d{3}\n$/;

/**
 * Latency. x11vnc polls the screen (DAMAGE telling it where to look) every
 * `-wait` ms and holds a change back `-defer` ms to send it with the next.
 * Measured on a shared 2-core machine, 1280x800, one viewer asking for
 * updates as noVNC does, x11vnc's CPU in % of one core:
 * - `-defer 10 -wait 10` (what x11vnc picks by itself here after timing a
 *   read of Xvfb's screen; its defaults are 20 and 20): still screen 1.2%,
 *   an animated page 5.2% (6.2% with Tight, noVNC's choice) at 41 updates
 *   a second; a pointer event is in X within 2 ms (median), 16 ms at most.
 * - `-defer 5 -wait 5`: 58 updates a second, for twice the idle cost (2.4 to
 *   2.8%) and 6.6% (8% Tight) animated. Not taken: frames already come
 *   every ~24 ms.
 * - `-noxdamage`: 2.4% still, 7.3% animated, pointer events up to 26 ms.
 *   DAMAGE stays on.
 * - `-threads`: the handshake on the unix socket never got its ServerInit.
 * - Naps: after 3 s without input x11vnc sleeps up to 40 ms between polls,
 *   after 60 s without any change 250 ms (`-sb`), and input waits for the
 *   nap to end: the first pointer events after a still minute took 68 and
 *   251 ms to reach X. With `-nonap -sb 0`: 1 to 3 ms, for 1.0% CPU on a
 *   still screen instead of 0.1%; x11vnc runs only while a person holds
 *   the desktop.
 * - Bog detection stays on (no `-nowait_bog`): it sleeps up to 1.5 s only
 *   after three polls in a row each took over 0.25 s without user input, a
 *   machine already too loaded to keep up; input never triggers it.
 * - Its memory: 14 to 15 MB resident, 19 to 20 MB while the screen changes.
 */
const LATENCY_ARGS = ['-defer', '10', '-wait', '10', '-nonap', '-sb', '0'];

/** The argv of x11vnc for `display`, listening on `socketPath` only. Exported for the tests. */
export function vncArgs(display: string, socketPath: string): string[] {
  return [
    '-display',
    display,
    '-unixsock',
    socketPath,
    // No TCP listener, IPv4 nor IPv6 (see the header): the socket is the only way in.
    '-rfbport',
    '0',
    '-rfbportv6',
    '-1',
    '-noipv6',
    '-nopw',
    '-shared',
    '-forever',
    // Side channels: rc file, remote control (X property and -R), VNC_CONNECT reverse connections,
    // external commands, name look-ups.
    '-norc',
    '-noremote',
    '-novncconnect',
    '-nocmds',
    '-nolookup',
    // Keyboard: keysyms from noVNC become keycodes through XKB, with the display's own layout.
    '-xkb',
    // x11vnc releases every key still down when it exits (a person leaving with Shift held).
    '-clear_keys',
    // Key repeat is the person's own, never the X server's: with the server's autorepeat on
    // (-repeat), a key-up that arrived late (a busy machine, a slow link) let X repeat the key, and
    // a typed password got 4-5 characters too many (seen in CI). So x11vnc turns the display's
    // autorepeat off while a viewer is connected (its default; back on when the last one leaves,
    // and x11vnc is stopped only after its viewers are closed), and the bridge passes the browser's
    // repeats on as a release and a press each (Tally.key in src/takeover/vnc-bridge.ts), as x11vnc
    // ignores a press of a key already down.
    '-norepeat',
    '-nobell',
    '-noxrecord',
    // Pointer: exact cursor shapes through XFIXES, sent as Cursor pseudo-rectangles; motion
    // through XTEST as the desktop worker moves it (x11vnc would warp the pointer instead,
    // as Xvfb has XINERAMA); windows dragged as they are, not as wireframes.
    '-cursor',
    'most',
    '-noxwarppointer',
    '-nowf',
    // Clipboard: the viewer's text goes to the desktop's selections; the desktop's never go out.
    '-seldir',
    'recv',
    ...LATENCY_ARGS,
  ];
}

/** x11vnc's stderr, line by line: each to the log at debug level (bounded), the last ones kept for errors. */
class StderrLines {
  private logged = 0;
  dropped = 0;
  /** Set once x11vnc has said it made its selection window (and, next, set up XFIXES for the cursor). */
  selectionsReady = false;
  readonly lines = new OutputLines({ onLine: (line) => this.line(line) });

  constructor(private readonly log: Logger) {}

  private line(line: string): void {
    if (!this.selectionsReady && SELECTION_WINDOW_LINE.test(line)) this.selectionsReady = true;
    if (this.logged < X11VNC_LOGGED_LINES_MAX) {
      this.logged++;
      this.log.debug('x11vnc', { line: line.slice(0, OUTPUT_LINE_CHARS) });
    } else {
      this.dropped++;
    }
  }
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

const IPCRM = '/usr/bin/ipcrm';
/** Limit for one ipcrm run. */
const IPCRM_TIMEOUT_MS = 5_000;

/**
 * The System V shared memory segments x11vnc `pid` made (MIT-SHM, its
 * screen reads: 34 segments, ~5 MB, at 1024x768): x11vnc removes them as it
 * exits, but one killed (SIGKILL after a stop that timed out, the exit
 * hook) leaves them until the machine restarts. Only segments of this user,
 * made by that pid since `sinceEpochSeconds`.
 */
function sharedMemoryOf(pid: number, sinceEpochSeconds: number): string[] {
  let rows: string[][];
  try {
    rows = readFileSync('/proc/sysvipc/shm', 'utf8')
      .trim()
      .split('\n')
      .map((line) => line.trim().split(/\s+/));
  } catch {
    return [];
  }
  const head = rows.shift() ?? [];
  const [id, cpid, uid, ctime] = ['shmid', 'cpid', 'uid', 'ctime'].map((name) => head.indexOf(name)) as [
    number,
    number,
    number,
    number,
  ];
  if (id < 0 || cpid < 0 || uid < 0 || ctime < 0) return [];
  const me = process.getuid?.();
  return rows
    .filter((r) => Number(r[cpid]) === pid && Number(r[uid]) === me && Number(r[ctime]) >= sinceEpochSeconds)
    .map((r) => r[id]!)
    .filter((v) => /^\d+$/.test(v));
}

/** Removes what sharedMemoryOf lists (a segment still attached goes when its last user detaches). Never throws. */
async function removeSharedMemory(pid: number, sinceEpochSeconds: number, log: Logger): Promise<void> {
  const ids = sharedMemoryOf(pid, sinceEpochSeconds);
  if (ids.length === 0) return;
  const { error } = await runTool(
    IPCRM,
    ids.flatMap((v) => ['-m', v]),
    { timeoutMs: IPCRM_TIMEOUT_MS },
  );
  if (error) log.debug('cannot remove the shared memory x11vnc left', { pid, error: error.message });
  else log.debug('removed the shared memory x11vnc left', { pid, segments: ids.length });
}

/** Whether a server accepts on `path` and greets as RFB does (then the probe hangs up). */
function greets(path: string, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(path);
    let got = Buffer.alloc(0);
    const done = (ok: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.on('error', () => done(false));
    socket.on('close', () => done(false));
    socket.on('data', (chunk: Buffer) => {
      got = Buffer.concat([got, chunk]);
      if (got.length >= 12) done(RFB_GREETING.test(got.subarray(0, 12).toString('latin1')));
    });
  });
}

function checkServerOptions(o: VncServerOptions): string {
  const bad = (msg: string): never => {
    throw new VncError('bad_options', msg);
  };
  if (typeof o.display !== 'string' || !LOCAL_DISPLAY_NAME.test(o.display)) {
    bad(`display must look like :N or :N.S, got ${JSON.stringify(String(o.display).slice(0, 40))}`);
  }
  if (typeof o.dir !== 'string' || !isAbsolute(o.dir)) bad('dir must be an absolute path');
  let st;
  try {
    st = statSync(o.dir);
  } catch {
    return bad('dir does not exist');
  }
  if (!st.isDirectory()) bad('dir is not a folder');
  if ((st.mode & 0o077) !== 0) bad(`dir must be private (mode 0700), it is ${(st.mode & 0o777).toString(8)}`);
  const uid = process.getuid?.();
  if (!o.within && uid !== undefined && st.uid !== uid) bad("dir must be this process's user's");
  const socketPath = join(o.dir, SOCKET_NAME);
  if (Buffer.byteLength(socketPath) > MAX_SOCKET_PATH_BYTES) {
    bad(`the socket path would be over ${MAX_SOCKET_PATH_BYTES} bytes: choose a shorter dir`);
  }
  return socketPath;
}

/** Removes `path` if it is a socket (a stale one of an x11vnc killed before it could). */
function removeSocket(path: string): void {
  try {
    if (lstatSync(path).isSocket()) rmSync(path, { force: true });
  } catch {
    // not there
  }
}

/**
 * Starts x11vnc on `o.display`, listening on `<o.dir>/vnc.sock` only, and
 * resolves once that socket accepts a connection and greets. Rejects with a
 * VncError otherwise, after killing what it started.
 */
export async function startVncServer(o: VncServerOptions): Promise<VncServer> {
  const socketPath = checkServerOptions(o);
  const log = o.log;
  const timeoutMs = o.startTimeoutMs ?? X11VNC_START_TIMEOUT_MS;
  removeSocket(socketPath);
  const spawnedAt = performance.now();
  const spawnedAtEpochSeconds = Math.floor(Date.now() / 1000) - 1;
  const stderr = new StderrLines(log);
  // Ended, and what a killed x11vnc leaves (its socket, its shared memory) removed.
  const cleanedUp = (started: ChildProcess): Promise<void> =>
    exited(started).then(async () => {
      removeSocket(socketPath);
      if (started.pid !== undefined) await removeSharedMemory(started.pid, spawnedAtEpochSeconds, log);
    });
  let gone: Promise<void> | undefined;
  let child: ChildProcess;
  try {
    ({ child } = await startChild({
      name: 'x11vnc',
      command: X11VNC,
      args: vncArgs(o.display, socketPath),
      ...(o.within ? { within: o.within } : {}),
      spawn: {
        stdio: ['ignore', 'ignore', 'pipe'],
        // A process group of its own: a Ctrl-C at the daemon's terminal is the daemon's to handle.
        detached: true,
        // Not the daemon's environment (its token): what x11vnc needs, and a HOME in the private folder.
        env: {
          PATH: process.env.PATH ?? '/usr/bin:/bin',
          HOME: o.dir,
          LANG: 'C.UTF-8',
          X11VNC_AVOID_WINDOWS: 'never',
          // x11vnc owns the selections after a person's paste and answers other clients' reads of
          // them. It ignores the X error of answering a client that already left only if the error
          // arrives before it puts its usual error handler back, and by default it waits for the
          // error only now and then (at most every 0.2 s). An error that came later was fatal, and
          // x11vnc's exit path (it releases keys with -clear_keys) then made X calls from inside the
          // error handler and deadlocked: x11vnc hung, answered no viewer and ignored SIGTERM (seen
          // in CI: BadWindow on the window of a reader, xclip, gone before the answer). With this
          // set, every answer waits for its errors while they are still ignored.
          X11VNC_SENDEVENT_SYNC: '1',
          ...(o.xauthority ? { XAUTHORITY: o.xauthority } : {}),
        },
      },
      error: VncError,
      notInstalled: X11VNC_NOT_FOUND,
      timeoutMs,
      exitedBefore: `during start-up on ${o.display}`,
      notReady: `did not accept connections on ${o.display}`,
      tail: () => stderr.lines.quoted(),
      abortSignal: 'SIGKILL',
      ready: async (started, aborted) => {
        stderr.lines.read(started.stderr);
        gone = cleanedUp(started);
        const deadline = performance.now() + timeoutMs;
        while (!aborted.aborted) {
          const waitingForSelections = !stderr.selectionsReady && performance.now() - spawnedAt < SELECTIONS_GRACE_MS;
          const left = deadline - performance.now();
          if (!waitingForSelections && left > 0 && (await greets(socketPath, Math.min(left, 2_000)))) return;
          await sleep(PROBE_INTERVAL_MS);
        }
      },
    }));
  } catch (err) {
    if (gone) await raceDeadline(gone, IPCRM_TIMEOUT_MS);
    removeSocket(socketPath);
    throw err;
  }
  const ended: Promise<void> = gone ?? cleanedUp(child);

  const pid = programPid(child) ?? (child.pid as number);
  log.info('vnc server started', { display: o.display, pid, ms: Math.round(performance.now() - spawnedAt) });
  // A forgotten stop() must not keep the process alive (the exit hook and pdeathsig end x11vnc).
  child.unref();
  (child.stderr as Socket | null)?.unref();
  let stopping: Promise<void> | undefined;
  // The exit hook of trackChild SIGKILLs x11vnc if this process exits without stop(): its shared
  // memory must go too, synchronously, as nothing runs after.
  const onProcessExit = (): void => {
    try {
      signalChild(child, 'SIGKILL');
      const ids = sharedMemoryOf(pid, spawnedAtEpochSeconds);
      if (ids.length)
        runToolSync(
          IPCRM,
          ids.flatMap((v) => ['-m', v]),
          { timeoutMs: IPCRM_TIMEOUT_MS },
        );
    } catch {
      // gone already, or nothing to remove
    }
  };
  process.on('exit', onProcessExit);
  void ended.then(() => process.off('exit', onProcessExit));
  child.on('error', (err) => log.debug('x11vnc process error', { error: err.message }));
  child.once('exit', (code, signal) => {
    if (stopping) return;
    log.warn('vnc server exited unexpectedly', { display: o.display, pid, code, signal });
  });

  return {
    socketPath,
    pid,
    exited: ended,
    stop(): Promise<void> {
      stopping ??= (async () => {
        if (running(child)) {
          // SIGINT, not SIGTERM: x11vnc cleans up after SIGINT in its main loop, but after any other
          // signal inside the handler, which deadlocked whenever the signal came while it was in
          // Xlib or writing its log (seen with gdb: right after a viewer left, every time).
          if (
            (await stopChild(child, { signal: 'SIGINT', deadlineMs: X11VNC_STOP_DEADLINE_MS, gone: ended })) ===
            'killed'
          ) {
            log.warn('x11vnc did not stop in time; killed', { display: o.display, pid });
          }
        }
        // Its socket and shared memory removed too; bounded, as the kernel could hold a process.
        await raceDeadline(ended, KILL_DEADLINE_MS + IPCRM_TIMEOUT_MS);
        removeSocket(socketPath);
        log.info('vnc server stopped', {
          display: o.display,
          pid,
          ...(stderr.dropped ? { x11vnc_lines_dropped: stderr.dropped } : {}),
        });
      })();
      return stopping;
    },
  };
}
