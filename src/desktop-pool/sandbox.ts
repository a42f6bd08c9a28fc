/**
 * A desktop's sandbox (docs/SECURITY.md "A sandbox per desktop"): every
 * process of one desktop (Xvfb, openbox, the desktop worker, Chromium) runs
 *
 * - as an identity of its own: in `uid` mode (the daemon runs as root) a
 *   uid and gid from the operator's range, one per desktop; in `userns` mode
 *   (the daemon is an unprivileged user) an unprivileged uid inside a user
 *   namespace of the desktop's own; never root, no capabilities, and
 *   `no_new_privs`;
 * - in namespaces of its own: mount (the system read-only, a private /tmp
 *   and /dev/shm, the desktop's own folders and nothing else of the daemon:
 *   no data folder, token, recordings, or other desktop), pid (it sees and
 *   signals only its own desktop's processes), network (loopback only: the
 *   one way out is the egress proxy's listener, which the daemon holds,
 *   below), IPC and UTS.
 *
 * The mechanism: bubblewrap (Debian's `bubblewrap`, the sandbox Flatpak
 * uses) builds the namespaces once per desktop around a holder process that
 * only waits; each program then joins them with util-linux's `nsenter` and
 * drops to the desktop's identity with `setpriv` (wrap). Ending the holder
 * ends every process in the sandbox (it is the pid namespace's init).
 *
 * The egress proxy: a short-lived Node.js process inside the sandbox opens
 * a listening socket on the sandbox's own loopback and hands it to the
 * daemon over its IPC channel; the daemon's proxy serves connections on it.
 * Chromium's `--proxy-server` names that address. A request that ignores
 * the proxy setting has no route anywhere.
 *
 * The mirror image, for the harness's CDP door (src/browser/cdp-door.ts): a
 * short-lived process inside connects to a port on the sandbox's loopback
 * (Chromium's DevTools) and hands the connected socket to the daemon
 * (connectInside). Nothing outside the sandbox can reach that port otherwise.
 */
import { existsSync, lstatSync, readdirSync, readFileSync, readlinkSync, realpathSync } from 'node:fs';
import { chmod, chown, mkdir, mkdtemp, rm, statfs, writeFile } from 'node:fs/promises';
import type { Server, Socket } from 'node:net';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import {
  exited,
  KILL_DEADLINE_MS,
  OutputLines,
  raceDeadline,
  startChild,
  StartError,
  stopChild,
  type ChildProcess,
  type Confinement,
} from '../base/child-process.ts';
import { COMPILED, PACKAGE_ROOT, moduleFolders } from '../base/package-root.ts';
import { ownedTempFolder } from '../base/temp-folder.ts';

/** How desktops are sandboxed: `uid` (root daemon), `userns` (unprivileged daemon), `off` (the operator's `--sandbox off`). */
export type SandboxMode = 'uid' | 'userns' | 'off';

/** A sandbox could not be made; the message says why. */
export class SandboxError extends StartError {
  override readonly name = 'SandboxError';
}

/** The operator's range of uids (and gids: the same numbers) for `uid` mode. */
export interface IdRange {
  first: number;
  count: number;
}

/** The default range: far above login users and the usual subordinate-id ranges (docs/SECURITY.md). */
export const DEFAULT_ID_RANGE: IdRange = { first: 2_000_000_000, count: 1000 };

const BWRAP = '/usr/bin/bwrap';
const NSENTER = '/usr/bin/nsenter';
const SETPRIV = '/usr/bin/setpriv';
const HOLDER = '/usr/bin/sleep';
const BWRAP_NOT_FOUND = 'bubblewrap not found: run `npm run setup` (Debian package bubblewrap)';
const HOLDER_START_MS = 10_000;
const PROXY_LISTENER_START_MS = 15_000;
/** connectInside: how long its process may take, from its spawn to the socket in the daemon's hands. */
const CONNECT_INSIDE_MS = 15_000;
/** The path a DevTools endpoint's `/json/version` names for the browser's WebSocket (Chromium's form). */
const DEVTOOLS_BROWSER_PATH = /^\/devtools\/browser\/[A-Za-z0-9-]{1,64}$/;

/**
 * The process connectInside runs in the sandbox (CommonJS, `node -e`; the port is its argument): asks
 * `/json/version` for the browser's WebSocket path (retrying while nothing listens yet: a browser just
 * launched may not have opened its port), connects, and sends the socket with the path over its IPC
 * channel, then leaves. Its errors go to stderr, which the daemon quotes.
 */
const CONNECT_INSIDE_CODE = `
const http = require('node:http');
const net = require('node:net');
const port = Number(process.argv[1]);
const fail = (message) => { process.stderr.write(message + '\\n'); process.exit(1); };
const until = Date.now() + ${CONNECT_INSIDE_MS - 3_000};
const ask = () => {
  const req = http.get({ host: '127.0.0.1', port, path: '/json/version', timeout: 5000 }, (res) => {
    let body = '';
    res.setEncoding('utf8');
    res.on('data', (chunk) => { if (body.length < 65536) body += chunk; });
    res.on('end', () => {
      let path;
      try { path = new URL(JSON.parse(body).webSocketDebuggerUrl).pathname; }
      catch { return fail('no webSocketDebuggerUrl in /json/version (HTTP ' + res.statusCode + '): ' + body.slice(0, 200)); }
      const socket = net.connect(port, '127.0.0.1', () =>
        process.send({ path }, socket, () => process.disconnect()));
      socket.on('error', (err) => fail('cannot connect to 127.0.0.1:' + port + ': ' + err.message));
    });
  });
  req.on('timeout', () => req.destroy(new Error('no answer within 5000 ms')));
  req.on('error', (err) => {
    if (err.code === 'ECONNREFUSED' && Date.now() < until) setTimeout(ask, 50);
    else fail('GET http://127.0.0.1:' + port + '/json/version: ' + err.message);
  });
};
ask();
`;
/** Bytes of the sandbox's private /tmp and /dev/shm (memory): Chromium's profile and shared memory live there. */
const TMPFS_BYTES = 1024 * 1024 * 1024;
/**
 * The package's files a desktop's programs need (the worker's code): read-only, and nothing else of it.
 * The code is the tree this daemon runs (src/base/package-root.ts): the build (dist/, plain JavaScript) for
 * a daemon started by bin/deskbatch.js, the sources (src/, through tsx) for one the tests run in-process;
 * its dependencies are in the node_modules folders Node.js searches (`moduleFolders`): the checkout's
 * own, or, for the installed package, the node_modules it sits in.
 */
const CODE_FOLDER = COMPILED ? 'dist' : 'src';
/** Those paths, each folder before what lies inside it, so that no bind hides another. */
const codePaths = (): string[] =>
  [join(PACKAGE_ROOT, 'package.json'), join(PACKAGE_ROOT, CODE_FOLDER), ...moduleFolders()].sort(
    (x, y) => x.length - y.length,
  );

/**
 * Variables a confined program may get from what its caller passes: the
 * daemon's own environment may hold its token (DESKBATCH_TOKEN) or paths,
 * and a desktop's processes can read each other's environment.
 */
const ENV_KEPT = new Set([
  'PATH',
  'HOME',
  'LANG',
  'LANGUAGE',
  'TZ',
  'DISPLAY',
  'XAUTHORITY',
  'TSX_DISABLE_CACHE',
  'DESKBATCH_FRAMEBUFFER',
  'FONTCONFIG_PATH',
]);
const ENV_KEPT_PREFIXES = ['LC_', 'XDG_'];

/** Hands out the uids of `uid` mode: the lowest free one of the range, never two desktops the same. */
export class IdAllocator {
  private readonly taken = new Set<number>();
  constructor(private readonly range: IdRange) {}

  take(): number {
    for (let i = 0; i < this.range.count; i++) {
      const id = this.range.first + i;
      if (!this.taken.has(id)) {
        this.taken.add(id);
        return id;
      }
    }
    throw new SandboxError('start_failed', `every uid of the sandbox range is in use (${this.range.count} desktops)`);
  }

  give(id: number): void {
    this.taken.delete(id);
  }
}

/** Where a desktop's folders are: all of them on the host, bound at the same paths inside. */
export interface SandboxFolders {
  /** The root (0711, the daemon's): everything below belongs to the desktop. */
  root: string;
  /** The desktop's HOME. */
  home: string;
  /** Its display's files (X cookie, window manager config). */
  display: string;
  /** Its X socket folder: /tmp/.X11-unix inside. */
  x11: string;
  /** Where its Xvfb keeps the screen (/dev/shm when there is room). */
  framebuffer: string;
  /** Where Chromium saves downloads before the daemon moves them (Playwright's downloadsPath). */
  downloads: string;
}

export interface SandboxOptions {
  id: string;
  mode: Exclude<SandboxMode, 'off'>;
  /** `uid` mode: the desktop's uid and gid. */
  uid?: number;
  /**
   * Host paths the programs need besides the system (an operator's X socket
   * and cookie, in shared mode): bound read-only (`rw` to write) at the same
   * path inside.
   */
  extraBinds?: { path: string; rw?: boolean; at?: string }[];
  /** Bytes the framebuffer needs: on /dev/shm when it has room for it four times over. */
  framebufferBytes: number;
}

/** A running sandbox of one desktop. */
export class DesktopSandbox implements Confinement {
  /** The programs' identity as the host sees it. */
  readonly uid: number;
  /** The cookie file its programs get as XAUTHORITY, whatever their caller passes (shared mode's copy). */
  xauthority: string | undefined;
  private stopping: Promise<void> | undefined;
  private launcherDir: string | undefined;

  private constructor(
    readonly mode: Exclude<SandboxMode, 'off'>,
    readonly folders: SandboxFolders,
    private readonly holder: ChildProcess,
    /** The sandbox's init on the host (its pid namespace's pid 1): ending it ends every process in it. */
    private readonly initPid: number,
    /**
     * The holder's pid on the host: what programs join (nsenter -t). Not the
     * init: the init's root and working folder may still be the host's (seen:
     * 1 join in 6 landed in the host's mount tree through nsenter -r -w).
     */
    readonly holderPid: number,
    private readonly innerId: number,
    private readonly removeOnStop: string[],
  ) {
    this.uid = innerId;
  }

  /** Makes the desktop's folders and namespaces; rejects with SandboxError, leaving nothing behind. */
  static async start(o: SandboxOptions): Promise<DesktopSandbox> {
    if (!existsSync(BWRAP)) throw new SandboxError('not_installed', BWRAP_NOT_FOUND);
    // userns: the daemon's own uid, mapped to itself in the desktop's user namespace.
    const innerId = o.mode === 'uid' ? o.uid! : process.getuid!();
    const hostOwner = innerId;
    const root = await ownedTempFolder(`${o.id}-sandbox`);
    const removeOnStop = [root];
    try {
      await chmod(root, 0o711);
      const sub = async (name: string, mode = 0o700): Promise<string> => {
        const path = join(root, name);
        await mkdir(path, { mode });
        await chmod(path, mode);
        await chown(path, hostOwner, hostOwner);
        return path;
      };
      let framebuffer: string;
      try {
        const fs = await statfs('/dev/shm');
        if (fs.bavail * fs.bsize < 4 * o.framebufferBytes) throw new Error('no room');
        framebuffer = await mkdtemp('/dev/shm/deskbatch-fb-');
        removeOnStop.push(framebuffer);
        await chown(framebuffer, hostOwner, hostOwner);
      } catch {
        framebuffer = await sub('framebuffer');
      }
      const folders: SandboxFolders = {
        root,
        home: await sub('home'),
        display: await sub('display'),
        x11: await sub('x11', 0o1777),
        framebuffer,
        downloads: await sub('downloads'),
      };
      const args = bwrapArgs(o, folders, innerId);
      // Read from the spawn on: a bubblewrap that fails at once says why on stderr, before any ready.
      const output = new OutputLines();
      const { child, ready } = await startChild({
        name: 'bubblewrap',
        command: BWRAP,
        args,
        spawn: { stdio: ['ignore', 'ignore', 'pipe', 'pipe'] },
        error: SandboxError,
        notInstalled: BWRAP_NOT_FOUND,
        timeoutMs: HOLDER_START_MS,
        exitedBefore: 'before the sandbox was ready',
        notReady: 'did not make the sandbox',
        tail: () => output.quoted(),
        ready: async (started, aborted) => {
          output.read(started.stderr);
          const init = await readInfo(started.stdio[3] as Readable);
          // bubblewrap reports its init before the mounts are made: ready once the holder itself runs.
          let holder: number | undefined;
          while (!aborted.aborted && (holder = holderOf(init)) === undefined)
            await new Promise((r) => setTimeout(r, 5));
          return { init, holder: holder ?? 0 };
        },
      });
      // A forgotten stop() must not keep the daemon alive (the exit hook and --die-with-parent end it).
      child.unref();
      (child.stderr as Socket | null)?.unref();
      (child.stdio[3] as Socket | null)?.unref();
      return new DesktopSandbox(o.mode, folders, child, ready.init, ready.holder, innerId, removeOnStop);
    } catch (err) {
      for (const dir of removeOnStop) await rm(dir, { recursive: true, force: true }).catch(() => undefined);
      throw err instanceof StartError
        ? err
        : new SandboxError('start_failed', `cannot make the sandbox: ${String(err)}`);
    }
  }

  /** `nsenter` into the holder's namespaces, then `setpriv` down to the desktop's identity, then the program. */
  wrap(command: string, args: readonly string[]): [string, string[]] {
    const enter =
      this.mode === 'uid'
        ? ['-t', String(this.holderPid), '-m', '-p', '-n', '-i', '-u', '-r', '-w']
        : ['-t', String(this.holderPid), '-U', '--preserve-credentials', '-m', '-p', '-n', '-i', '-u', '-r', '-w'];
    const drop =
      this.mode === 'uid'
        ? ['--reuid', String(this.innerId), '--regid', String(this.innerId), '--clear-groups', '--bounding-set', '-all']
        : [];
    // The inner setpriv's pdeathsig: the program dies with nsenter, which waits for it outside.
    return [
      NSENTER,
      [...enter, '--', SETPRIV, '--pdeathsig', 'KILL', ...drop, '--no-new-privs', '--', command, ...args],
    ];
  }

  environment(env: NodeJS.ProcessEnv | undefined): NodeJS.ProcessEnv {
    const kept: NodeJS.ProcessEnv = {};
    for (const [k, v] of Object.entries(env ?? {})) {
      if (v !== undefined && (ENV_KEPT.has(k) || ENV_KEPT_PREFIXES.some((p) => k.startsWith(p)))) kept[k] = v;
    }
    kept.HOME = this.folders.home;
    kept.TMPDIR = '/tmp';
    if (this.xauthority) kept.XAUTHORITY = this.xauthority;
    return kept;
  }

  /** A new folder (0700, the desktop's) in the sandbox's own, at the same path on both sides. */
  async privateFolder(kind: string): Promise<string> {
    const dir = await mkdtemp(join(this.folders.root, `${kind}-`));
    await chown(dir, this.innerId, this.innerId);
    return dir;
  }

  /** Makes a file the daemon wrote readable by the desktop's programs (its owner becomes theirs). */
  async give(path: string): Promise<void> {
    if (this.mode === 'uid') await chown(path, this.innerId, this.innerId);
  }

  /**
   * An executable file that runs `command` in this sandbox with the
   * arguments it is given (Playwright starts Chromium by a path). It lives
   * in a folder of the daemon's own that the sandbox cannot see or write:
   * the daemon runs it.
   */
  async launcher(command: string): Promise<string> {
    this.launcherDir ??= await ownedTempFolder('launcher');
    const [cmd, args] = this.wrap(command, []);
    const words = [SETPRIV, '--pdeathsig', 'KILL', '--', cmd, ...args];
    for (const w of words)
      if (!/^[A-Za-z0-9_./=:,+-]+$/.test(w)) throw new SandboxError('bad_options', `cannot quote ${w}`);
    const path = join(this.launcherDir, 'run');
    await writeFile(path, `#!/bin/sh\nexec ${words.join(' ')} "$@"\n`, { mode: 0o700 });
    return path;
  }

  /** The host pids of the processes in the sandbox's pid namespace now. */
  private processes(): number[] {
    let ns: string;
    try {
      ns = readlinkSync(`/proc/${this.holderPid}/ns/pid`);
    } catch {
      return [];
    }
    const pids: number[] = [];
    for (const name of readdirSync('/proc')) {
      if (!/^\d+$/.test(name)) continue;
      try {
        if (readlinkSync(`/proc/${name}/ns/pid`) === ns) pids.push(Number(name));
      } catch {
        // gone meanwhile
      }
    }
    return pids;
  }

  /** The host's pid of the process the sandbox knows as `innerPid` (CDP reports pids as its pid namespace sees them). */
  hostPid(innerPid: number): number | undefined {
    let ns: string;
    try {
      ns = readlinkSync(`/proc/${this.holderPid}/ns/pid`);
    } catch {
      return undefined;
    }
    for (const name of readdirSync('/proc')) {
      if (!/^\d+$/.test(name)) continue;
      try {
        if (readlinkSync(`/proc/${name}/ns/pid`) !== ns) continue;
        const nspid = /^NSpid:\s+(.+)$/m
          .exec(readFileSync(`/proc/${name}/status`, 'utf8'))?.[1]
          ?.trim()
          .split(/\s+/);
        if (nspid && Number(nspid[nspid.length - 1]) === innerPid) return Number(name);
      } catch {
        // gone meanwhile
      }
    }
    return undefined;
  }

  /**
   * A listening socket on the sandbox's own loopback, handed to the daemon:
   * the egress proxy serves it. A process inside opens it and passes it over
   * its IPC channel, then exits.
   */
  async proxyListener(): Promise<{ server: Server; port: number }> {
    const code =
      "const s=require('node:net').createServer();s.listen(0,'127.0.0.1',()=>" +
      'process.send({port:s.address().port},s,()=>{s.close();process.disconnect()}))';
    const { ready } = await startChild({
      name: 'the egress listener',
      command: process.execPath,
      args: ['-e', code],
      spawn: { stdio: ['ignore', 'ignore', 'pipe', 'ipc'] },
      within: this,
      error: SandboxError,
      notInstalled: `${process.execPath} not found`,
      timeoutMs: PROXY_LISTENER_START_MS,
      exitedBefore: 'before it handed over its socket',
      notReady: 'did not hand over its socket',
      tail: () => '',
      ready: (child) =>
        new Promise<{ server: Server; port: number }>((resolve) => {
          child.once('message', (msg: { port: number }, handle: unknown) =>
            resolve({ server: handle as Server, port: msg.port }),
          );
        }),
    });
    return ready;
  }

  /**
   * A TCP connection to `port` on the sandbox's own loopback, handed to the
   * daemon, with the path of the browser's DevTools WebSocket there (from
   * `/json/version`, e.g. `/devtools/browser/<guid>`): a process inside
   * connects and passes the socket over its IPC channel, then exits (the
   * mirror image of proxyListener). Rejects with SandboxError saying why:
   * nothing listens, no DevTools answer, or no socket within 15 s.
   */
  async connectInside(port: number): Promise<{ socket: Socket; path: string }> {
    if (!Number.isInteger(port) || port < 1 || port > 65535)
      throw new SandboxError('bad_options', `not a port: ${port}`);
    const output = new OutputLines();
    const { ready } = await startChild({
      name: 'the DevTools connector',
      command: process.execPath,
      args: ['-e', CONNECT_INSIDE_CODE, String(port)],
      spawn: { stdio: ['ignore', 'ignore', 'pipe', 'ipc'] },
      within: this,
      error: SandboxError,
      notInstalled: `${process.execPath} not found`,
      timeoutMs: CONNECT_INSIDE_MS,
      exitedBefore: 'before it handed over its socket',
      notReady: 'did not hand over its socket',
      tail: () => output.quoted(),
      ready: (child) => {
        output.read(child.stderr);
        return new Promise<{ socket: Socket; path: string }>((resolve, reject) => {
          child.once('message', (msg: { path?: unknown }, handle: unknown) => {
            const path = typeof msg?.path === 'string' ? msg.path : '';
            if (DEVTOOLS_BROWSER_PATH.test(path) && handle) return resolve({ socket: handle as Socket, path });
            (handle as Socket | undefined)?.destroy();
            reject(
              new SandboxError(
                'start_failed',
                `the DevTools connector sent no socket or an odd path: ${path.slice(0, 100)}`,
              ),
            );
          });
        });
      },
    });
    return ready;
  }

  /** Ends every process in the sandbox and removes its folders. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      // The init first: the kernel then kills every process of its pid namespace, and the init ends only
      // once all of them are gone; bubblewrap outside reaps it and exits. Only that exit says the sandbox is
      // empty: a SIGKILLed process may take a while to end (an Xvfb unmapping its framebuffer), and
      // SIGKILLing bubblewrap at once resolved stop() while an Xvfb of the sandbox still ran.
      const inside = this.processes();
      try {
        process.kill(this.initPid, 'SIGKILL');
      } catch {
        // already gone
      }
      await raceDeadline(exited(this.holder), KILL_DEADLINE_MS);
      // Bubblewrap, if it has not ended (killed, it leaves the init's exit to the kernel: waited for next).
      await stopChild(this.holder, { signal: 'SIGKILL' });
      await allGone(inside, KILL_DEADLINE_MS);
      for (const dir of [...this.removeOnStop, ...(this.launcherDir ? [this.launcherDir] : [])]) {
        await rm(dir, { recursive: true, force: true }).catch(() => undefined);
      }
    })();
    return this.stopping;
  }
}

/** A process that has ended: gone, or a zombie (its parent has not reaped it yet). */
function ended(pid: number): boolean {
  try {
    // The state follows the command name in parentheses, which may itself hold spaces or parentheses.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return /^[ZX]/.test(stat.slice(stat.lastIndexOf(')') + 2));
  } catch {
    return true;
  }
}

/** Resolves once every one of `pids` has ended, or after `ms`. */
async function allGone(pids: readonly number[], ms: number): Promise<void> {
  const until = performance.now() + ms;
  while (pids.some((pid) => !ended(pid)) && performance.now() < until) await new Promise((r) => setTimeout(r, 10));
}

/** The holder's bubblewrap command line. */
function bwrapArgs(o: SandboxOptions, folders: SandboxFolders, innerId: number): string[] {
  const args = ['--die-with-parent', '--unshare-pid', '--unshare-net', '--unshare-ipc', '--unshare-uts'];
  // userns: one user namespace, the daemon's uid mapped to itself (not root inside, so Chromium
  // sandboxes itself). No --uid and no --dev: either makes bubblewrap nest a second user namespace,
  // whose owner could not join the others (nsenter: ns/ipc, EPERM).
  if (o.mode === 'userns') args.push('--unshare-user');
  args.push('--hostname', 'desktop');
  // The system, read-only: /usr and /etc (merged /usr: /bin, /lib… are links into it).
  args.push('--ro-bind', '/usr', '/usr', '--ro-bind', '/etc', '/etc', '--ro-bind-try', '/sys', '/sys');
  for (const top of ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32']) {
    let st;
    try {
      st = lstatSync(top);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) args.push('--symlink', readlinkSync(top), top);
    else args.push('--ro-bind', top, top);
  }
  // Node.js itself, where it is not under /usr (nvm, /opt).
  const nodeRoot = dirname(dirname(realpathSync(process.execPath)));
  if (!nodeRoot.startsWith('/usr/') && nodeRoot !== '/usr' && nodeRoot !== '/')
    args.push('--ro-bind', nodeRoot, nodeRoot);
  args.push('--proc', '/proc');
  if (o.mode === 'uid') args.push('--dev', '/dev');
  else {
    args.push('--perms', '0755', '--tmpfs', '/dev', '--symlink', '/proc/self/fd', '/dev/fd');
    for (const dev of ['null', 'zero', 'full', 'random', 'urandom'])
      args.push('--dev-bind', `/dev/${dev}`, `/dev/${dev}`);
  }
  args.push('--size', String(TMPFS_BYTES), '--perms', '1777', '--tmpfs', '/tmp');
  args.push('--size', String(TMPFS_BYTES), '--perms', '1777', '--tmpfs', '/dev/shm');
  // Parents of what is bound, made searchable: bubblewrap makes missing ones 0700 as root.
  const parents = new Set<string>();
  for (const path of [join(PACKAGE_ROOT, CODE_FOLDER), folders.root, folders.framebuffer]) {
    for (let dir = dirname(path); !['/', '/tmp', '/dev/shm', '/dev'].includes(dir); dir = dirname(dir))
      parents.add(dir);
  }
  for (const dir of [...parents].sort((x, y) => x.length - y.length)) args.push('--perms', '0755', '--dir', dir);
  for (const path of codePaths()) {
    if (existsSync(path)) args.push('--ro-bind', realpathSync(path), path);
  }
  args.push('--bind', folders.root, folders.root);
  if (!folders.framebuffer.startsWith(`${folders.root}/`))
    args.push('--bind', folders.framebuffer, folders.framebuffer);
  args.push('--bind', folders.x11, '/tmp/.X11-unix');
  for (const b of o.extraBinds ?? []) args.push(b.rw ? '--bind' : '--ro-bind', b.path, b.at ?? b.path);
  args.push('--chdir', folders.home, '--setenv', 'HOME', folders.home, '--info-fd', '3', '--');
  if (o.mode === 'uid') {
    args.push(SETPRIV, '--reuid', String(innerId), '--regid', String(innerId), '--clear-groups');
    args.push('--bounding-set', '-all', '--no-new-privs', '--');
  }
  args.push(HOLDER, 'infinity');
  return args;
}

/**
 * The holder's pid, once the sandbox's init (`pid`) runs it: bubblewrap
 * executes it once every mount and namespace is in place.
 */
function holderOf(pid: number): number | undefined {
  try {
    const child = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(' ')[0];
    if (!child || readFileSync(`/proc/${child}/cmdline`, 'utf8') !== `${HOLDER}\0infinity\0`) return undefined;
    return Number(child);
  } catch {
    return undefined;
  }
}

/**
 * Reads bubblewrap's `--info-fd` JSON: the pid (on the host) of the sandbox's
 * init. The pipe is read to its end, never closed first: bubblewrap writes
 * the rest after the pid, and a write to a closed pipe kills it (SIGPIPE,
 * seen in 1 start in 3 on a busy machine).
 */
function readInfo(fd3: Readable): Promise<number> {
  return new Promise<number>((resolve) => {
    let text = '';
    fd3.setEncoding('utf8');
    fd3.on('data', (chunk: string) => {
      if (text.length > 4096) return;
      text += chunk;
      const m = /"child-pid":\s*(\d+)/.exec(text);
      if (m) resolve(Number(m[1]));
    });
    fd3.on('error', () => undefined);
  });
}

/**
 * The mode this host gives desktops: `off` when the operator asked for it;
 * else `uid` as root and `userns` otherwise, proven by making (and ending) a
 * sandbox now. Rejects with SandboxError saying why when it cannot.
 */
export async function chooseSandboxMode(requested: 'auto' | 'off', range: IdRange): Promise<SandboxMode> {
  if (requested === 'off') return 'off';
  const mode = process.getuid?.() === 0 ? 'uid' : 'userns';
  const probe = await DesktopSandbox.start({ id: 'probe', mode, uid: range.first, framebufferBytes: 0 });
  try {
    // A program must run in it as the desktop's identity, not only the holder.
    await probe.proxyListener().then(({ server }) => server.close());
  } finally {
    await probe.stop();
  }
  return mode;
}
