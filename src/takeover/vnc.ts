/**
 * Human takeover's VNC side: an x11vnc on a session's X display, reachable
 * only through a unix socket in a private folder, and a bridge that carries
 * one browser viewer's WebSocket (noVNC) to that socket.
 *
 * The server (startVncServer):
 * - x11vnc is started as every child is (src/child-process.ts: an argv, no
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
 *   src/desktop/worker/screen.ts), which hides it from x11vnc's screen reads
 *   too, but XFIXES still gives x11vnc the cursor's image: with `-cursor most`
 *   it sends the exact shape as a Cursor pseudo-rectangle and noVNC draws it
 *   locally, at the viewer's own pointer, with no round trip.
 * - stop() sends SIGINT (see there), then SIGKILL; x11vnc releases the keys
 *   still down as it exits (`-clear_keys`).
 * - Its stderr goes to the log at debug level, a line at a time, bounded; a
 *   start failure quotes its last lines.
 *
 * The bridge (bridgeVnc) parses what the viewer sends (RfbClientStream):
 * a watcher's input is dropped, never forwarded; what a person in control
 * types is counted (InputTally), never kept: no character's keysym and no
 * cut text is logged, stored or passed on except to x11vnc (the bridge
 * holds, in memory and only while they are down, which buttons and keys are
 * down: to pass a browser's key repeat on as a release and a press, and to let
 * go of them if the viewer vanishes).
 */
import { lstatSync, readFileSync, rmSync, statSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { isAbsolute, join } from 'node:path';
import type { RawData, WebSocket } from 'ws';
import {
  exited,
  OutputLines,
  raceDeadline,
  runTool,
  runToolSync,
  running,
  startChild,
  StartError,
  stopChild,
  type ChildProcess,
  type StartErrorCode,
} from '../child-process.ts';
import type { Logger } from '../log.ts';

// ---------------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------------

export interface VncServerOptions {
  /** The X display, e.g. `:5`. */
  display: string;
  /** The display's cookie file, passed as `XAUTHORITY`. */
  xauthority?: string;
  /** a 0700 folder made by the caller; the unix socket goes in it */
  dir: string;
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
const DEFAULT_START_TIMEOUT_MS = 10_000;
/** Between two connection attempts while x11vnc starts. */
const PROBE_INTERVAL_MS = 20;
/** After SIGINT, how long x11vnc gets before SIGKILL. */
const STOP_DEADLINE_MS = 3_000;
/** After SIGKILL: only guards against a process stuck in the kernel. */
const KILL_DEADLINE_MS = 3_000;
/** Lines of x11vnc's stderr kept for error messages, and the length each is cut to. */
const TAIL_LINES = 12;
const LINE_CHARS = 300;
/** x11vnc's lines logged per server (it writes ~20 per connection); later ones are counted only. */
const MAX_LOGGED_LINES = 2_000;
const DISPLAY_NAME = /^:\d{1,5}(\.\d{1,3})?$/;
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
    // repeats on as a release and a press each (Tally.key), as x11vnc ignores a press of a key
    // already down.
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
  readonly lines = new OutputLines({ lines: TAIL_LINES, lineChars: LINE_CHARS, onLine: (line) => this.line(line) });

  constructor(private readonly log: Logger) {}

  private line(line: string): void {
    if (!this.selectionsReady && SELECTION_WINDOW_LINE.test(line)) this.selectionsReady = true;
    if (this.logged < MAX_LOGGED_LINES) {
      this.logged++;
      this.log.debug('x11vnc', { line: line.slice(0, LINE_CHARS) });
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
  if (typeof o.display !== 'string' || !DISPLAY_NAME.test(o.display)) {
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
  if (uid !== undefined && st.uid !== uid) bad("dir must be this process's user's");
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
  const timeoutMs = o.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS;
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

  const pid = child.pid as number;
  log.info('vnc server started', { display: o.display, pid, ms: Math.round(performance.now() - spawnedAt) });
  // A forgotten stop() must not keep the process alive (the exit hook and pdeathsig end x11vnc).
  child.unref();
  (child.stderr as Socket | null)?.unref();
  let stopping: Promise<void> | undefined;
  // The exit hook of trackChild SIGKILLs x11vnc if this process exits without stop(): its shared
  // memory must go too, synchronously, as nothing runs after.
  const onProcessExit = (): void => {
    try {
      child.kill('SIGKILL');
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
          if ((await stopChild(child, { signal: 'SIGINT', deadlineMs: STOP_DEADLINE_MS, gone: ended })) === 'killed') {
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

// ---------------------------------------------------------------------------------------------
// What a viewer sends: the RFB client-to-server stream
// ---------------------------------------------------------------------------------------------

/** A ClientCutText longer than this closes the bridge (libvncserver refuses over 1 MB too). */
export const MAX_CUT_TEXT_BYTES = 1024 * 1024;
/** The Fence extension allows at most this much payload. */
const MAX_FENCE_PAYLOAD = 64;

/** One message of the viewer's stream, parsed as far as the bridge needs. */
export type RfbClientMessage =
  /** ProtocolVersion, the security type chosen, ClientInit: the handshake's three client messages. */
  | { type: 'version' | 'security' | 'client-init' }
  | { type: 'set-pixel-format' | 'set-encodings' | 'update-request' }
  | { type: 'key'; down: boolean; keysym: number }
  | { type: 'pointer'; mask: number; x: number; y: number }
  /** `extended`: the Extended Clipboard form (a negative length), whose body is flags and zlib data, not text. */
  | { type: 'cut-text'; length: number; extended: boolean }
  /** EnableContinuousUpdates (150), Fence (248), xvp (250), SetDesktopSize (251). */
  | { type: 'continuous-updates' | 'fence' | 'xvp' | 'desktop-size' }
  /** QEMU Extended Key Event (255, subtype 0). */
  | { type: 'qemu-key'; down: boolean; keysym: number };

export interface RfbSegment {
  /** The message's bytes, exactly as the viewer sent them (ClientInit excepted, see RfbClientStream). */
  bytes: Buffer;
  message: RfbClientMessage;
}

/** The viewer's stream broke the protocol (or a limit); `wsCode` is the WebSocket close code to answer with. */
export class RfbProtocolError extends Error {
  override readonly name = 'RfbProtocolError';
  constructor(
    message: string,
    readonly wsCode: number = WS_PROTOCOL_ERROR,
  ) {
    super(message);
  }
}

const WS_NORMAL = 1000;
const WS_GOING_AWAY = 1001;
const WS_PROTOCOL_ERROR = 1002;
const WS_UNSUPPORTED_DATA = 1003;
const WS_TOO_BIG = 1009;
const WS_INTERNAL_ERROR = 1011;

/** RFB security type None: what x11vnc offers on its unix socket. */
const SECURITY_NONE = 1;
/** Every length a message's size depends on lies in its first 9 bytes; the version is 12. */
const HEADER_BYTES = 12;
/** The smallest buffer the parser keeps for a message split across frames. */
const MIN_HELD_BYTES = 4096;

/**
 * Splits the viewer's byte stream into RFB messages (RFB 3.7/3.8, the
 * client's side, docs: RFC 6143 and the community extensions noVNC sends):
 * messages may arrive split across frames or several in one. A message is
 * returned whole once all its bytes are in; only the start of one message
 * (at most MAX_CUT_TEXT_BYTES + 8 bytes) is held between frames. Throws RfbProtocolError for anything
 * else: an unknown message type, a security type other than None, an
 * oversized cut text. The ClientInit's shared flag is always sent as 1, so
 * no viewer can ask x11vnc to drop the others.
 */
export class RfbClientStream {
  private phase: 'version' | 'security' | 'client-init' | 'messages' = 'version';
  /** The start of a message not complete yet: `held[0, heldLength)`; the buffer is ours alone. */
  private held: Buffer = Buffer.alloc(0);
  private heldLength = 0;
  private failed = false;

  push(chunk: Buffer): RfbSegment[] {
    if (this.failed) throw new RfbProtocolError('the stream already failed');
    // Without a partial message held, messages are read from the chunk itself, not copied.
    const fromHeld = this.heldLength > 0;
    if (fromHeld) this.append(chunk);
    const data = fromHeld ? this.held.subarray(0, this.heldLength) : chunk;
    const out: RfbSegment[] = [];
    let pos = 0;
    try {
      for (;;) {
        const need = this.messageLength(data.subarray(pos, pos + HEADER_BYTES));
        if (need === undefined || data.length - pos < need) break;
        const bytes = data.subarray(pos, pos + need);
        // Held bytes get overwritten later: what leaves is a copy.
        out.push(this.take(fromHeld ? Buffer.from(bytes) : bytes));
        pos += need;
      }
    } catch (err) {
      this.failed = true;
      this.held = Buffer.alloc(0);
      this.heldLength = 0;
      throw err;
    }
    const rest = data.length - pos;
    if (fromHeld) {
      if (pos > 0) this.held.copyWithin(0, pos, this.heldLength);
      this.heldLength = rest;
      // A huge frame grew the buffer once; what is held now is at most one message.
      if (this.held.length > 4 * Math.max(rest, MIN_HELD_BYTES)) this.resize(Math.max(2 * rest, MIN_HELD_BYTES));
    } else if (rest > 0) {
      this.resize(Math.max(2 * rest, MIN_HELD_BYTES));
      chunk.copy(this.held, 0, pos);
      this.heldLength = rest;
    }
    return out;
  }

  /** Appends `chunk` after the held bytes, growing the buffer by doubling (so many small frames cost linear time). */
  private append(chunk: Buffer): void {
    const need = this.heldLength + chunk.length;
    if (need > this.held.length) this.resize(Math.max(need, 2 * this.held.length));
    chunk.copy(this.held, this.heldLength);
    this.heldLength = need;
  }

  private resize(capacity: number): void {
    const next = Buffer.allocUnsafe(capacity);
    this.held.copy(next, 0, 0, this.heldLength);
    this.held = next;
  }

  /** Bytes of the message at the head of `buf`, or undefined until enough of its header is in. */
  private messageLength(buf: Buffer): number | undefined {
    if (buf.length === 0) return undefined;
    switch (this.phase) {
      case 'version':
        return 12;
      case 'security':
      case 'client-init':
        return 1;
      case 'messages':
        break;
    }
    const type = buf[0]!;
    switch (type) {
      case 0: // SetPixelFormat
        return 20;
      case 2: // SetEncodings: u16 count at 2
        return buf.length < 4 ? undefined : 4 + 4 * buf.readUInt16BE(2);
      case 3: // FramebufferUpdateRequest
        return 10;
      case 4: // KeyEvent
        return 8;
      case 5: // PointerEvent
        return 6;
      case 6: {
        // ClientCutText: u32 length at 4; negative (two's complement) in the Extended Clipboard form
        if (buf.length < 8) return undefined;
        const size = cutTextSize(buf.readUInt32BE(4));
        if (size > MAX_CUT_TEXT_BYTES) {
          throw new RfbProtocolError(`cut text of ${size} bytes is over the ${MAX_CUT_TEXT_BYTES} limit`, WS_TOO_BIG);
        }
        return 8 + size;
      }
      case 150: // EnableContinuousUpdates
        return 10;
      case 248: {
        // Fence: u8 payload length at 8
        if (buf.length < 9) return undefined;
        const n = buf[8]!;
        if (n > MAX_FENCE_PAYLOAD) throw new RfbProtocolError(`fence payload of ${n} bytes`);
        return 9 + n;
      }
      case 250: // xvp
        return 4;
      case 251: // SetDesktopSize: u8 number of screens at 6, 16 bytes each
        return buf.length < 8 ? undefined : 8 + 16 * buf[6]!;
      case 255: {
        // QEMU client message: subtype 0 is the extended key event
        if (buf.length < 2) return undefined;
        if (buf[1] !== 0) throw new RfbProtocolError(`QEMU message subtype ${buf[1]}`);
        return 12;
      }
      default:
        throw new RfbProtocolError(`client message type ${type}`);
    }
  }

  private take(bytes: Buffer): RfbSegment {
    switch (this.phase) {
      case 'version': {
        const version = bytes.toString('latin1');
        if (version !== 'RFB 003.008\n' && version !== 'RFB 003.007\n') {
          throw new RfbProtocolError('protocol version other than 3.7 or 3.8');
        }
        this.phase = 'security';
        return { bytes, message: { type: 'version' } };
      }
      case 'security':
        if (bytes[0] !== SECURITY_NONE) throw new RfbProtocolError(`security type ${bytes[0]}`);
        this.phase = 'client-init';
        return { bytes, message: { type: 'security' } };
      case 'client-init':
        this.phase = 'messages';
        return { bytes: Buffer.from([1]), message: { type: 'client-init' } };
      case 'messages':
        break;
    }
    switch (bytes[0]) {
      case 0:
        return { bytes, message: { type: 'set-pixel-format' } };
      case 2:
        return { bytes, message: { type: 'set-encodings' } };
      case 3:
        return { bytes, message: { type: 'update-request' } };
      case 4:
        return { bytes, message: { type: 'key', down: bytes[1] !== 0, keysym: bytes.readUInt32BE(4) } };
      case 5:
        return {
          bytes,
          message: { type: 'pointer', mask: bytes[1]!, x: bytes.readUInt16BE(2), y: bytes.readUInt16BE(4) },
        };
      case 6: {
        const raw = bytes.readUInt32BE(4);
        return { bytes, message: { type: 'cut-text', length: cutTextSize(raw), extended: raw >= 0x8000_0000 } };
      }
      case 150:
        return { bytes, message: { type: 'continuous-updates' } };
      case 248:
        return { bytes, message: { type: 'fence' } };
      case 250:
        return { bytes, message: { type: 'xvp' } };
      case 251:
        return { bytes, message: { type: 'desktop-size' } };
      default:
        // 255: the only one messageLength lets through is subtype 0
        return {
          bytes,
          message: { type: 'qemu-key', down: bytes.readUInt16BE(2) !== 0, keysym: bytes.readUInt32BE(4) },
        };
    }
  }
}

/** The body's size of a ClientCutText whose length field reads `raw` (negative in the extended form). */
function cutTextSize(raw: number): number {
  return raw >= 0x8000_0000 ? 0x1_0000_0000 - raw : raw;
}

// ---------------------------------------------------------------------------------------------
// Counting input without keeping it
// ---------------------------------------------------------------------------------------------

export interface InputTally {
  keys: number;
  characters: number;
  clicks: number;
  wheel: number;
  pasted: number;
  moves: number;
}

/** Control, Meta, Alt, Super, Hyper (left and right): while one is down, a letter is a shortcut, not a character. */
function isShortcutModifier(keysym: number): boolean {
  return keysym >= 0xffe3 && keysym <= 0xffee && keysym !== 0xffe5 && keysym !== 0xffe6;
}

/**
 * Whether pressing `keysym` types a printable character (X11 keysymdef.h):
 * Latin-1 (0x20-0x7e, 0xa0-0xff); the legacy character sets 0x100-0x20ff
 * (Latin 2-4 and 9, Kana, Arabic, Cyrillic, Greek, Hebrew, Thai, Korean,
 * technical and currency signs: noVNC sends these, not Unicode keysyms, for
 * the characters that have one); the keypad's digits, operators and space;
 * and Unicode keysyms 0x01000000 + code point, control characters excepted.
 * Modifiers, function, cursor and editing keys, dead keys: no.
 */
export function isCharacterKeysym(keysym: number): boolean {
  if (keysym >= 0x20 && keysym <= 0x7e) return true;
  if (keysym >= 0xa0 && keysym <= 0x20ff) return true;
  if (keysym === 0xff80 || (keysym >= 0xffaa && keysym <= 0xffb9) || keysym === 0xffbd) return true;
  if (keysym >= 0x0100_0000 && keysym <= 0x0110_ffff) {
    const cp = keysym - 0x0100_0000;
    return cp >= 0x20 && !(cp >= 0x7f && cp <= 0x9f);
  }
  return false;
}

/** Non-character keys a bridge remembers as down; more are not remembered (a keyboard has no more). */
const MAX_KEYS_DOWN = 32;

/**
 * Counts the input a bridge forwarded, and what it must let go of if the
 * viewer vanishes mid-press: the buttons, and the non-character keys down
 * (Shift, Control, arrows, function keys). A character key is never
 * remembered; x11vnc releases any key still down when it stops (-clear_keys).
 */
/** A KeyEvent letting go of `keysym`. */
function keyUp(keysym: number): Buffer {
  const up = Buffer.alloc(8);
  up[0] = 4;
  up.writeUInt32BE(keysym, 4);
  return up;
}

class Tally {
  readonly counts: InputTally = { keys: 0, characters: 0, clicks: 0, wheel: 0, pasted: 0, moves: 0 };
  /**
   * Keys down now, to release a repeat's predecessor and every key when the viewer leaves. Held only
   * while down, in memory; never logged or counted anywhere.
   */
  readonly keysDown = new Set<number>();
  /** The button mask of the last pointer event, and where it was. */
  buttons = 0;
  x = 0;
  y = 0;

  /** Counts a key event; true for a press of a key already down (the browser's repeat). */
  key(down: boolean, keysym: number): boolean {
    if (!down) {
      this.keysDown.delete(keysym);
      return false;
    }
    const repeat = this.keysDown.has(keysym);
    if (!repeat && this.keysDown.size < MAX_KEYS_DOWN) this.keysDown.add(keysym);
    this.counts.keys++;
    if (isCharacterKeysym(keysym) && ![...this.keysDown].some(isShortcutModifier)) this.counts.characters++;
    return repeat;
  }

  /** The messages that let go of every button and remembered key. */
  releases(): Buffer[] {
    const out: Buffer[] = [];
    for (const keysym of this.keysDown) out.push(keyUp(keysym));
    if (this.buttons !== 0) out.push(Buffer.from([5, 0, this.x >> 8, this.x & 0xff, this.y >> 8, this.y & 0xff]));
    return out;
  }

  pointer(mask: number, x: number, y: number): void {
    this.counts.moves++;
    const pressed = mask & ~this.buttons;
    // Buttons 1-3: bits 0-2; the wheel's 4-7: bits 3-6.
    for (let bit = 0; bit < 7; bit++) {
      if (!(pressed & (1 << bit))) continue;
      if (bit < 3) this.counts.clicks++;
      else this.counts.wheel++;
    }
    this.buttons = mask;
    this.x = x;
    this.y = y;
  }

  cutText(length: number, extended: boolean): void {
    // The classic form is Latin-1, a byte a character. The extended form's flags and zlib data
    // are not text, and this x11vnc has no handler for its text (measured: a Provide never
    // reached the X selections; noVNC sends the classic form to it, as it offers no Notify).
    if (!extended) this.counts.pasted += length;
  }
}

// ---------------------------------------------------------------------------------------------
// The bridge
// ---------------------------------------------------------------------------------------------

export interface BridgeOptions {
  /** false: watcher; every input message (KeyEvent, PointerEvent, ClientCutText) is dropped, never forwarded */
  control: boolean;
  /** Called after a frame whose input was forwarded, with the counts so far (a copy). Errors it throws are logged. */
  onInput?: (tally: Readonly<InputTally>) => void;
  /** The holder's keys the desktop's keymap lacks are bound, and the binding read, before their press. */
  keymap?: KeymapGuard;
  log: Logger;
}

export interface VncBridge {
  /** The input forwarded so far (a copy). A watcher's stays at zero. */
  readonly tally: Readonly<InputTally>;
  /** Closes both sides. Idempotent. */
  close(): void;
  /** Resolves once both the WebSocket and the unix socket are closed. */
  readonly closed: Promise<void>;
}

/** Over this many unsent bytes on the WebSocket, the bridge stops reading x11vnc until it drains... */
const WS_HIGH_WATER_BYTES = 16 * 1024 * 1024;
/** A watcher with more than this unsent is dropped rather than waited for (x11vnc would block on it). */
const WATCHER_MAX_BUFFERED_BYTES = 4 * 1024 * 1024;
/** Close code for a watcher dropped for being slow: try again later. */
const WS_TRY_AGAIN_LATER = 1013;
/** ...to this. */
const WS_LOW_WATER_BYTES = 4 * 1024 * 1024;
/** A WebSocket whose peer does not answer the close handshake within this is cut. */
const WS_CLOSE_GRACE_MS = 2_000;
/** WebSocket readyState OPEN (the `ws` constant). */
const WS_OPEN = 1;

/** What the bridge asks before a holder's key press reaches x11vnc; src/desktop/keymap-watch.ts is the real one. */
export interface KeymapGuard {
  /** Whether the desktop's keymap lacks `keysym`: x11vnc would bind it to a spare keycode and press it at once. */
  lacks(keysym: number): boolean;
  /** Taken right before the release that makes x11vnc bind a keysym. */
  mark(): number;
  /** Resolves, never rejects, once the binding after `mark` was read by the client that gets the keys (or a cap passed). */
  settled(mark: number, keysym: number): Promise<void>;
}

/** What goes to x11vnc: the viewer's bytes, or a keysym to have bound (and its binding read) before what follows. */
type Outgoing = Buffer | { bind: number };

/** What a watcher never forwards: everything that acts on the desktop. */
const ACTS_ON_DESKTOP = new Set<RfbClientMessage['type']>([
  'key',
  'qemu-key',
  'pointer',
  'cut-text',
  'desktop-size',
  'xvp',
]);

function asBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

/**
 * Carries `ws` (binary frames of noVNC's RFB stream) to `server`'s unix
 * socket and back. Server-to-client bytes pass as they are; the viewer's
 * stream is parsed (RfbClientStream) and, for a watcher, stripped of input.
 * Either side closing closes the other; a protocol error closes both.
 * Bounded both ways: over WS_HIGH_WATER_BYTES unsent to the viewer, x11vnc's
 * socket is not read until the WebSocket drains; while x11vnc does not take
 * what the viewer sends, the WebSocket is not read.
 */
export function bridgeVnc(ws: WebSocket, server: VncServer, o: BridgeOptions): VncBridge {
  const log = o.log;
  const parser = new RfbClientStream();
  const tally = new Tally();
  const socket = connect(server.socketPath);
  let closing = false;
  let handshakeDone = false;
  let socketClosed = false;
  let wsClosed = ws.readyState === 3;
  let graceTimer: NodeJS.Timeout | undefined;
  let resolveClosed!: () => void;
  const closed = new Promise<void>((resolve) => (resolveClosed = resolve));
  const settle = (): void => {
    if (!socketClosed || !wsClosed) return;
    clearTimeout(graceTimer);
    resolveClosed();
  };

  const close = (code: number, reason: string): void => {
    if (closing) return;
    closing = true;
    log.debug('vnc bridge closed', { reason, control: o.control, ...tally.counts });
    try {
      // A person who leaves with a button or Shift down: let go of them before hanging up.
      const releases = o.control && handshakeDone ? tally.releases() : [];
      if (releases.length && !socket.destroyed && socket.writable) {
        socket.end(Buffer.concat(releases));
        // The unix socket closes once x11vnc has read them; bounded all the same.
        setTimeout(() => socket.destroy(), WS_CLOSE_GRACE_MS).unref();
      } else {
        socket.destroy();
      }
    } catch {
      socket.destroy();
    }
    try {
      if (ws.readyState === WS_OPEN || ws.readyState === 0) {
        ws.close(code, reason);
        graceTimer = setTimeout(() => ws.terminate(), WS_CLOSE_GRACE_MS);
        graceTimer.unref();
      }
    } catch {
      ws.terminate();
    }
  };

  const guarded =
    <A extends unknown[]>(what: string, fn: (...args: A) => void) =>
    (...args: A): void => {
      try {
        fn(...args);
      } catch (err) {
        log.warn('vnc bridge error', { in: what, error: (err as Error).message });
        close(WS_INTERNAL_ERROR, 'internal error');
      }
    };

  // x11vnc → viewer.
  let paused = false;
  const afterSend = guarded('send', (err?: Error) => {
    if (err) return; // the ws's own 'close' follows
    if (paused && ws.bufferedAmount <= WS_LOW_WATER_BYTES) {
      paused = false;
      socket.resume();
    }
  });
  socket.on(
    'data',
    guarded('socket data', (chunk: Buffer) => {
      if (closing || ws.readyState !== WS_OPEN) return;
      ws.send(chunk, { binary: true }, afterSend);
      // x11vnc is single-threaded: a watcher it cannot write to would freeze the holder's screen too.
      // So a watcher that falls behind is dropped (its page reconnects); only the holder is waited for.
      if (!o.control && ws.bufferedAmount > WATCHER_MAX_BUFFERED_BYTES) {
        return close(WS_TRY_AGAIN_LATER, 'this viewer fell behind');
      }
      if (!paused && ws.bufferedAmount > WS_HIGH_WATER_BYTES) {
        paused = true;
        socket.pause();
      }
    }),
  );
  socket.on(
    'drain',
    guarded('socket drain', () => {
      if (ws.isPaused) ws.resume();
    }),
  );
  socket.on('error', (err: NodeJS.ErrnoException) =>
    log.debug('vnc bridge socket error', { error: err.code ?? err.message }),
  );
  socket.on(
    'close',
    guarded('socket close', () => {
      socketClosed = true;
      close(WS_GOING_AWAY, "the desktop's VNC server closed the connection");
      settle();
    }),
  );

  // viewer → x11vnc, in order; a key the keymap lacks holds what follows it until its binding is read.
  const queue: Outgoing[] = [];
  let binding = false;
  const pump = guarded('pump', () => {
    const bytes: Buffer[] = [];
    while (!binding && !closing && queue.length) {
      const item = queue.shift()!;
      if (Buffer.isBuffer(item)) {
        bytes.push(item);
        continue;
      }
      // Its release first: x11vnc binds the keysym to a spare keycode (a release of a key not down types nothing).
      const keymap = o.keymap!;
      const mark = keymap.mark();
      bytes.push(keyUp(item.bind));
      binding = true;
      void keymap.settled(mark, item.bind).then(() => {
        binding = false;
        pump();
      });
    }
    if (bytes.length && !socket.write(bytes.length === 1 ? bytes[0]! : Buffer.concat(bytes)) && !ws.isPaused) {
      ws.pause();
    }
  });
  ws.on(
    'message',
    guarded('ws message', (data: RawData, isBinary: boolean) => {
      if (closing) return;
      if (!isBinary) return close(WS_UNSUPPORTED_DATA, 'binary frames only');
      let segments: RfbSegment[];
      try {
        segments = parser.push(asBuffer(data));
      } catch (err) {
        if (!(err instanceof RfbProtocolError)) throw err;
        log.debug('vnc bridge: viewer broke the protocol', { error: err.message, control: o.control });
        return close(err.wsCode, err.wsCode === WS_TOO_BIG ? 'cut text too long' : 'unexpected RFB message');
      }
      let input = false;
      const out: Outgoing[] = [];
      for (const { bytes, message } of segments) {
        if (message.type === 'client-init') handshakeDone = true;
        if (!o.control && ACTS_ON_DESKTOP.has(message.type)) continue;
        switch (message.type) {
          case 'key':
          case 'qemu-key':
            // A repeat: let go first, so that x11vnc (which ignores a press of a key already down) types it again.
            if (tally.key(message.down, message.keysym)) out.push(keyUp(message.keysym));
            else if (message.type === 'key' && message.down && o.keymap?.lacks(message.keysym)) {
              out.push({ bind: message.keysym });
            }
            input = true;
            break;
          case 'pointer':
            tally.pointer(message.mask, message.x, message.y);
            input = true;
            break;
          case 'cut-text':
            tally.cutText(message.length, message.extended);
            input = true;
            break;
          default:
            break;
        }
        out.push(bytes);
      }
      queue.push(...out);
      pump();
      if (input && o.onInput) {
        try {
          o.onInput({ ...tally.counts });
        } catch (err) {
          log.warn('vnc bridge: onInput failed', { error: (err as Error).message });
        }
      }
    }),
  );
  ws.on('error', (err: Error) => log.debug('vnc bridge ws error', { error: err.message }));
  ws.on(
    'close',
    guarded('ws close', () => {
      wsClosed = true;
      close(WS_NORMAL, 'closed');
      settle();
    }),
  );
  if (wsClosed) close(WS_NORMAL, 'closed');

  return {
    get tally(): Readonly<InputTally> {
      return { ...tally.counts };
    },
    close: () => close(WS_NORMAL, 'closed'),
    closed,
  };
}
