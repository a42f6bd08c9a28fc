/**
 * Who has re-read the keymap since we last changed it, seen through the X
 * server's RECORD extension.
 *
 * After the worker binds a keysym to a spare keycode, the focused client must
 * re-read its keymap before the key is pressed, or it reads the keycode's old
 * meaning (or nothing) and the character is lost. Clients do that in their own
 * time: Chromium answers each MappingNotify with one XkbGetMap, a few ms later
 * on a quiet machine and much later on a busy one. A fixed wait is either
 * slow or, under load, too short. So the worker records, in the server's own
 * order, its ChangeKeyboardMapping requests and every client's keymap reads
 * (core GetKeyboardMapping, XkbGetMap), and presses the key once the process
 * that owns the focused window has read after the last change. The process,
 * not the window's own connection: Chromium opens several X connections, and
 * the one that re-reads the keymap is not the one that made the window
 * (measured). Processes come from the X-Resource extension; without it the
 * window's own connection must read.
 */
import { POINTER_ROOT, RECORD_CLIENT_DIED, RECORD_CLIENT_STARTED, RECORD_FROM_CLIENT, XConnection } from './x11.ts';

const X_CHANGE_KEYBOARD_MAPPING = 100;
const X_GET_KEYBOARD_MAPPING = 101;
const XKB_GET_MAP = 8;
/** How long recording may take to start before the worker gives up on it (and uses the fixed wait). */
const RECORD_START_TIMEOUT_MS = 5_000;
/**
 * How long a client is waited for to re-read the keymap after a change, at
 * most: the agent's typing (src/desktop-driver/worker/keymap.ts) and a person's keys
 * (src/desktop-driver/keymap-watch.ts) both press the key after this regardless.
 */
export const REREAD_CAP_MS = 1_000;

/**
 * The window whose client gets the keyboard's keys: the focused window, or,
 * when focus follows the pointer (no window manager) or is on the root, the
 * top-level window under the pointer. 0 when there is none.
 */
export async function keyboardTarget(conn: XConnection): Promise<number> {
  let focus = await conn.inputFocus();
  if (focus === POINTER_ROOT || focus === conn.root) focus = (await conn.queryPointer()).child;
  return focus > POINTER_ROOT ? focus : 0;
}

/** Whose keymap changes count: the control connection's own, or every client's (x11vnc's, during a takeover). */
export type ChangesBy = 'us' | 'anyone';

export class KeymapReads {
  /** Our own ChangeKeyboardMapping requests the server has dispatched. */
  private changesSeen = 0;
  /** For each client (by resource id base): changesSeen at its latest keymap read. */
  private readonly readAt = new Map<number, number>();
  /** Each client's process id, once X-Resource has answered (undefined: it cannot tell). */
  private readonly pids = new Map<number, number | undefined>();
  private readonly listeners = new Set<() => void>();

  private constructor(
    private readonly control: XConnection,
    private readonly data: XConnection,
    private readonly xkbOpcode: number | undefined,
    private readonly xresOpcode: number | undefined,
    private readonly changesBy: ChangesBy,
  ) {}

  /** The keymap changes counted so far (see ChangesBy), in the server's order. */
  get changes(): number {
    return this.changesSeen;
  }

  /**
   * Starts recording, or undefined when the server has no RECORD extension.
   * `control` is the connection that changes the keymap (`changesBy: 'us'`);
   * a second connection, with the cookie in `xauthority` if given, carries
   * the recorded data.
   */
  static async open(
    display: string,
    control: XConnection,
    options: { changesBy?: ChangesBy; xauthority?: string } = {},
  ): Promise<KeymapReads | undefined> {
    const record = await control.queryExtension('RECORD');
    if (record === undefined) return undefined;
    const xkb = await control.queryExtension('XKEYBOARD');
    const xres = await control.queryExtension('X-Resource');
    const data = await XConnection.open(display, options.xauthority);
    try {
      const reads = new KeymapReads(control, data, xkb, xres, options.changesBy ?? 'us');
      const context = control.newId();
      control.recordCreateContext(record, context, [
        { coreRequests: [X_CHANGE_KEYBOARD_MAPPING, X_GET_KEYBOARD_MAPPING], clientLifetimes: true },
        ...(xkb === undefined
          ? []
          : [{ extRequests: { major: xkb, minor: [XKB_GET_MAP, XKB_GET_MAP] as [number, number] } }]),
      ]);
      await control.sync();
      // Enabling answers with a first reply (StartOfData) once recording has begun; a server that
      // never does must not hold the worker's start.
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve, reject) => {
        timer = setTimeout(() => reject(new Error('RECORD did not start within 5 s')), RECORD_START_TIMEOUT_MS);
        data
          .recordEnableContext(record, context, (reply) => {
            resolve();
            reads.onReply(reply);
          })
          .catch(reject);
      }).finally(() => clearTimeout(timer));
      return reads;
    } catch (err) {
      data.close();
      throw err;
    }
  }

  /** Parses one RECORD reply: the requests one client sent, in dispatch order. */
  private onReply(reply: Buffer): void {
    const client = (reply.readUInt32LE(12) & ~this.control.resourceIdMask) >>> 0;
    if (reply[1] === RECORD_CLIENT_STARTED || reply[1] === RECORD_CLIENT_DIED) {
      // The server reuses a departed client's ids: what we knew of it is not true of the next one (measured).
      this.readAt.delete(client);
      this.pids.delete(client);
      return;
    }
    if (reply[1] !== RECORD_FROM_CLIENT) return;
    const counted = this.changesBy === 'anyone' || client === this.control.resourceIdBase;
    let o = 32;
    while (o + 4 <= reply.length) {
      const [major, minor] = [reply[o]!, reply[o + 1]!];
      const units = reply.readUInt16LE(o + 2);
      if (units === 0) break; // BIG-REQUESTS length: none of the requests we record uses it
      if (counted && major === X_CHANGE_KEYBOARD_MAPPING) this.changesSeen++;
      else if (major === X_GET_KEYBOARD_MAPPING || (major === this.xkbOpcode && minor === XKB_GET_MAP)) {
        this.readAt.set(client, this.changesSeen);
        this.learnPid(client);
      }
      o += units * 4;
    }
    for (const l of this.listeners) l();
  }

  /** Asks X-Resource for a client's process once; listeners re-check when it answers. */
  private learnPid(client: number): void {
    if (this.xresOpcode === undefined || this.pids.has(client) || this.control.closed) return;
    this.pids.set(client, undefined);
    this.control.clientPid(this.xresOpcode, client).then(
      (pid) => {
        if (!this.pids.has(client)) return; // it left while we asked
        this.pids.set(client, pid);
        for (const l of this.listeners) l();
      },
      () => {}, // the client is gone or X-Resource refused: it stays unknown
    );
  }

  /** The client (resource id base) that owns `window`. */
  owner(window: number): number {
    return (window & ~this.control.resourceIdMask) >>> 0;
  }

  /**
   * Resolves true once the owner of `window`, or another client of its
   * process, has read the keymap after our `changes`-th change (counting from
   * the first since open); false after `capMs` or when the abort given to
   * `onAbort` is called.
   */
  waitForRead(window: number, changes: number, capMs: number, onAbort: (abort: () => void) => void): Promise<boolean> {
    const owner = this.owner(window);
    this.learnPid(owner);
    const readSince = (client: number): boolean => (this.readAt.get(client) ?? -1) >= changes;
    const done = (): boolean => {
      if (this.changesSeen < changes) return false;
      if (readSince(owner)) return true;
      const pid = this.pids.get(owner);
      if (pid === undefined) return false;
      for (const client of this.readAt.keys()) if (readSince(client) && this.pids.get(client) === pid) return true;
      return false;
    };
    if (done()) return Promise.resolve(true);
    return new Promise((resolve) => {
      const finish = (ok: boolean): void => {
        clearTimeout(timer);
        this.listeners.delete(check);
        resolve(ok);
      };
      const check = (): void => {
        // The owner's process may be unknown yet (a client reusing a departed one's ids): ask again.
        this.learnPid(owner);
        if (done()) finish(true);
      };
      const timer = setTimeout(() => finish(false), capMs);
      this.listeners.add(check);
      onAbort(() => finish(false));
    });
  }

  close(): void {
    this.data.close();
  }
}
