/**
 * A minimal X11 protocol client over the display's Unix socket: just what the
 * desktop worker needs that nut-js cannot do safely: read and change the
 * keyboard mapping, send XTEST key events by keycode, query the pointer and
 * focus, and keep a root-window property. No native code, so a broken
 * display is an error here, never a crash. Used inside the worker process
 * (worker.ts), and by the daemon itself for read-only queries that need no
 * worker round trip (worker-driver.ts: the pointer position).
 */
import { connect, type Socket } from 'node:net';
import { readFileSync } from 'node:fs';
import { hostname, homedir } from 'node:os';
import { join } from 'node:path';
import { displayNumber, displaySocketPath } from './display.ts';

const X_CREATE_WINDOW = 1;
const X_DESTROY_WINDOW = 4;
const X_CONVERT_SELECTION = 24;
const X_SEND_EVENT = 25;
const X_QUERY_TREE = 15;
const X_INTERN_ATOM = 16;
const X_CHANGE_PROPERTY = 18;
const X_GET_PROPERTY = 20;
const X_GRAB_SERVER = 36;
const X_UNGRAB_SERVER = 37;
const X_QUERY_POINTER = 38;
const X_GET_INPUT_FOCUS = 43;
const X_QUERY_EXTENSION = 98;
const X_CHANGE_KEYBOARD_MAPPING = 100;
const X_GET_KEYBOARD_MAPPING = 101;
const X_MAPPING_NOTIFY = 34;
const XRES_QUERY_CLIENT_IDS = 4;
const XRES_LOCAL_CLIENT_PID_MASK = 2;
const RECORD_CREATE_CONTEXT = 1;
const RECORD_ENABLE_CONTEXT = 5;
const RECORD_FREE_CONTEXT = 7;
/** RECORD's client spec for every client, those connected now and later. */
const RECORD_ALL_CLIENTS = 3;
/** RECORD reply categories (the reply's second byte). */
export const RECORD_FROM_CLIENT = 1;
export const RECORD_CLIENT_STARTED = 2;
export const RECORD_CLIENT_DIED = 3;
export const RECORD_END_OF_DATA = 5;
const XTEST_FAKE_INPUT = 2;
/**
 * The largest reply taken (16 MiB): the largest we ask for is the keyboard
 * mapping (at most 255 keycodes × a few keysyms) or a batch of RECORD data.
 */
const MAX_REPLY_BYTES = 16 * 1024 * 1024;
/** QueryVersion of XFIXES and of DAMAGE: minor opcode 0 of both. */
const EXT_QUERY_VERSION = 0;
const XFIXES_HIDE_CURSOR = 29;
const DAMAGE_CREATE = 1;
const DAMAGE_SUBTRACT = 3;
/** DAMAGE's report level that sends one DamageNotify when the damage region becomes non-empty. */
export const DAMAGE_REPORT_NON_EMPTY = 3;
export const KEY_PRESS = 2;
export const KEY_RELEASE = 3;
export const BUTTON_PRESS = 4;
export const BUTTON_RELEASE = 5;
const MOTION_NOTIFY = 6;
export const LOCK_MASK = 0x02;
/** GetInputFocus's answer when focus follows the pointer (0 is None). */
export const POINTER_ROOT = 1;
const XA_INTEGER = 19;
const XA_WINDOW = 33;
const ANY_PROPERTY_TYPE = 0;
const CLIENT_MESSAGE = 33;
/** SubstructureNotify | SubstructureRedirect: how EWMH requests reach the window manager. */
const EWMH_REQUEST_MASK = 0x180000;
/**
 * Root-window property listing the keycodes deskbatch uses as spare slots. A
 * worker that was killed leaves its bindings behind; without this record the
 * next worker would see those keycodes as taken (measured: "needs 1 spare
 * keycodes, the keymap has 0" after one kill). It lives and dies with the X server.
 */
export const SLOTS_PROPERTY = '_DESKBATCH_SPARE_KEYCODES';

interface Waiter {
  resolve: (reply: Buffer) => void;
  reject: (err: Error) => void;
  /** Set for a request answered by many replies (RECORD's EnableContext): it stays registered. */
  stream?: boolean;
}

/** What a RECORD context records: core requests by opcode, and one extension's requests by minor opcode. */
export interface RecordRange {
  coreRequests?: [first: number, last: number];
  extRequests?: { major: number; minor: [first: number, last: number] };
  /** Also report clients connecting (ClientStarted) and leaving (ClientDied). */
  clientLifetimes?: boolean;
}

/**
 * The MIT-MAGIC-COOKIE-1 for `displayNumber` from the Xauthority file (`xauthority`, else this process's
 * XAUTHORITY, else ~/.Xauthority), if any.
 */
function findXauthCookie(displayNumber: string, xauthority?: string): { name: Buffer; data: Buffer } | undefined {
  const file = xauthority || process.env.XAUTHORITY || join(homedir(), '.Xauthority');
  let buf: Buffer;
  try {
    buf = readFileSync(file);
  } catch {
    return undefined; // no file: the server may allow local connections without auth (Xvfb's default)
  }
  const host = hostname();
  let fallback: { name: Buffer; data: Buffer } | undefined;
  let off = 0;
  const field = (): Buffer => {
    const len = buf.readUInt16BE(off);
    const b = buf.subarray(off + 2, off + 2 + len);
    off += 2 + len;
    return b;
  };
  try {
    while (off + 2 <= buf.length) {
      const family = buf.readUInt16BE(off);
      off += 2;
      const address = field().toString('latin1');
      const number = field().toString('latin1');
      const name = field();
      const data = field();
      if (name.toString('latin1') !== 'MIT-MAGIC-COOKIE-1') continue;
      if (number !== displayNumber && number !== '') continue;
      // FamilyWild (0xffff) or FamilyLocal (256) with our host name, as Xlib picks it.
      if (family === 0xffff || (family === 256 && address === host)) return { name, data };
      if (family === 256) fallback ??= { name, data };
    }
  } catch {
    // truncated file: use what we found
  }
  return fallback;
}

export class XConnection {
  minKeycode = 0;
  maxKeycode = 0;
  root = 0;
  /** This connection's own XIDs are resourceIdBase | n; any window's owner is `window & ~resourceIdMask`. */
  resourceIdBase = 0;
  resourceIdMask = 0;
  closed = false;
  onMappingNotify: () => void = () => {};
  /** Every other event (an extension's, such as DAMAGE's DamageNotify), as its 32 bytes. */
  onEvent: (event: Buffer) => void = () => {};
  onClose: () => void = () => {};
  private buf: Buffer = Buffer.alloc(0);
  private seq = 0;
  private corked = false;
  private nextId = 1;
  private readonly waiters = new Map<number, Waiter>();
  /** Errors for requests without replies; reported by the next sync(). */
  private asyncErrors: string[] = [];

  private constructor(private readonly socket: Socket) {}

  /** `xauthority`: the cookie file to use instead of this process's XAUTHORITY (a pooled desktop's own). */
  /** Connects and completes the setup; with `timeoutMs`, a server that does not answer in time is given up (the socket destroyed). */
  static async open(display: string, xauthority?: string, timeoutMs?: number): Promise<XConnection> {
    const path = displaySocketPath(display);
    if (!path) throw new Error(`unsupported DISPLAY ${display}`);
    const socket = connect(path);
    const timer =
      timeoutMs === undefined
        ? undefined
        : setTimeout(
            () => socket.destroy(new Error(`X server on ${display} did not complete the setup within ${timeoutMs} ms`)),
            timeoutMs,
          );
    try {
      await new Promise<void>((resolve, reject) => {
        socket.once('connect', resolve);
        socket.once('error', reject);
      });
      const conn = new XConnection(socket);
      await conn.handshake(displayNumber(display)!, xauthority);
      return conn;
    } finally {
      clearTimeout(timer);
    }
  }

  private async handshake(displayNumber: string, xauthority?: string): Promise<void> {
    const cookie = findXauthCookie(displayNumber, xauthority);
    const name = cookie?.name ?? Buffer.alloc(0);
    const data = cookie?.data ?? Buffer.alloc(0);
    const head = Buffer.alloc(12);
    head[0] = 0x6c; // 'l': little-endian
    head.writeUInt16LE(11, 2);
    head.writeUInt16LE(name.length, 6);
    head.writeUInt16LE(data.length, 8);
    this.socket.write(Buffer.concat([head, pad4(name), pad4(data)]));
    const setup = await new Promise<Buffer>((resolve, reject) => {
      const onData = (chunk: Buffer): void => {
        this.buf = Buffer.concat([this.buf, chunk]);
        if (this.buf.length < 8) return;
        const total = 8 + this.buf.readUInt16LE(6) * 4;
        if (this.buf.length < total) return;
        cleanup();
        resolve(this.buf.subarray(0, total));
        this.buf = this.buf.subarray(total);
      };
      const onEnd = (): void => {
        cleanup();
        reject(new Error('X server closed the connection during setup'));
      };
      const cleanup = (): void => {
        this.socket.off('data', onData);
        this.socket.off('close', onEnd);
        this.socket.off('error', onEnd);
      };
      this.socket.on('data', onData);
      this.socket.on('close', onEnd);
      this.socket.on('error', onEnd);
    });
    if (setup[0] !== 1) {
      const reason = setup[0] === 0 ? setup.subarray(8, 8 + setup[1]!).toString('latin1') : 'authentication required';
      this.socket.destroy();
      throw new Error(`X connection refused: ${reason.trim()}`);
    }
    this.resourceIdBase = setup.readUInt32LE(12);
    this.resourceIdMask = setup.readUInt32LE(16);
    this.minKeycode = setup[34]!;
    this.maxKeycode = setup[35]!;
    // The first screen's root window follows the vendor string and the pixmap formats.
    const vendorLength = setup.readUInt16LE(24);
    const formats = setup[29]!;
    this.root = setup.readUInt32LE(40 + vendorLength + ((4 - (vendorLength % 4)) % 4) + 8 * formats);
    this.socket.on('data', (chunk: Buffer) => this.onData(chunk));
    this.socket.on('error', () => this.socket.destroy());
    this.socket.on('close', () => {
      this.closed = true;
      for (const w of this.waiters.values()) w.reject(new Error('X connection closed'));
      this.waiters.clear();
      this.onClose();
    });
  }

  private onData(chunk: Buffer): void {
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    while (this.buf.length >= 32) {
      const type = this.buf[0]!;
      const len = type === 1 ? 32 + this.buf.readUInt32LE(4) * 4 : 32;
      if (len > MAX_REPLY_BYTES) {
        // No reply we ask for comes near this; the X server is not one to trust (a desktop's sandbox
        // could put its own on the socket): never buffer without bound for it.
        this.socket.destroy();
        return;
      }
      if (this.buf.length < len) return;
      const msg = this.buf.subarray(0, len);
      this.buf = this.buf.subarray(len);
      const seq = msg.readUInt16LE(2);
      if (type === 1 || type === 0) {
        const w = this.waiters.get(seq);
        if (!w?.stream || type === 0 || msg[1] === RECORD_END_OF_DATA) this.waiters.delete(seq);
        if (type === 1) w?.resolve(msg);
        else {
          const err = `X error ${msg[1]} (request ${msg[10]}.${msg.readUInt16LE(8)})`;
          if (w) w.reject(new Error(err));
          else this.asyncErrors.push(err);
        }
      } else if ((type & 0x7f) === X_MAPPING_NOTIFY) {
        this.onMappingNotify();
      } else {
        this.onEvent(msg);
      }
    }
  }

  private send(req: Buffer): number {
    if (this.closed) throw new Error('X connection closed');
    this.seq = (this.seq + 1) & 0xffff;
    // The requests of one turn of the event loop leave in one write (a click's press, release and
    // sync; two reads asked together): one wake-up of the X server instead of one per request.
    if (!this.corked) {
      this.corked = true;
      this.socket.cork();
      process.nextTick(() => {
        this.corked = false;
        this.socket.uncork();
      });
    }
    this.socket.write(req);
    return this.seq;
  }

  private request(req: Buffer): Promise<Buffer> {
    const seq = this.send(req);
    return new Promise((resolve, reject) => this.waiters.set(seq, { resolve, reject }));
  }

  /** Round trip: the server has processed everything sent before. Throws the first X error since the last sync. */
  async sync(): Promise<void> {
    const req = newRequest(X_GET_INPUT_FOCUS, 4);
    await this.request(req);
    const errors = this.asyncErrors;
    this.asyncErrors = [];
    if (errors.length) throw new Error(errors.join('; '));
  }

  /** The window that has the keyboard focus: 0 for None, 1 for PointerRoot. */
  async inputFocus(): Promise<number> {
    const req = newRequest(X_GET_INPUT_FOCUS, 4);
    return (await this.request(req)).readUInt32LE(8);
  }

  /**
   * The process id of the local client owning `xid` (X-Resource 1.2,
   * XResQueryClientIds with LocalClientPIDMask), undefined if the server
   * cannot tell (a remote client).
   */
  async clientPid(xresOpcode: number, xid: number): Promise<number | undefined> {
    const req = newRequest(xresOpcode, 16, XRES_QUERY_CLIENT_IDS);
    req.writeUInt32LE(1, 4); // one spec
    req.writeUInt32LE(xid, 8);
    req.writeUInt32LE(XRES_LOCAL_CLIENT_PID_MASK, 12);
    const reply = await this.request(req);
    // ClientIdValue: spec (client, mask), length in bytes, then the value (the pid: one CARD32).
    for (let i = 0, o = 32; i < reply.readUInt32LE(8) && o + 16 <= reply.length; i++) {
      const length = reply.readUInt32LE(o + 8);
      if (reply.readUInt32LE(o + 4) === XRES_LOCAL_CLIENT_PID_MASK && length === 4) return reply.readUInt32LE(o + 12);
      o += 12 + length;
    }
    return undefined;
  }

  /** A new XID owned by this connection. */
  newId(): number {
    return (this.resourceIdBase | (this.nextId++ & this.resourceIdMask)) >>> 0;
  }

  /**
   * RECORD CreateContext for all clients (RECORD 1.13, XRecordCreateContext):
   * no extra element headers, so each recorded request arrives bare.
   */
  recordCreateContext(recordOpcode: number, context: number, ranges: RecordRange[]): void {
    const req = newRequest(recordOpcode, 24 + 24 * ranges.length, RECORD_CREATE_CONTEXT);
    req.writeUInt32LE(context, 4);
    req[8] = 0; // element header: none
    req.writeUInt32LE(1, 12); // one client spec
    req.writeUInt32LE(ranges.length, 16);
    req.writeUInt32LE(RECORD_ALL_CLIENTS, 20);
    ranges.forEach((r, i) => {
      const o = 24 + 24 * i; // RECORDRANGE: core-requests, core-replies, ext-requests, ext-replies, ...
      if (r.coreRequests) [req[o], req[o + 1]] = r.coreRequests;
      if (r.extRequests) {
        req[o + 4] = req[o + 5] = r.extRequests.major;
        req.writeUInt16LE(r.extRequests.minor[0], o + 6);
        req.writeUInt16LE(r.extRequests.minor[1], o + 8);
      }
      if (r.clientLifetimes) req[o + 22] = req[o + 23] = 1;
    });
    this.send(req);
  }

  /**
   * RECORD EnableContext: this connection then carries only the context's
   * data, one reply per recorded element, until the context is disabled or freed.
   */
  recordEnableContext(recordOpcode: number, context: number, onReply: (reply: Buffer) => void): Promise<void> {
    const req = newRequest(recordOpcode, 8, RECORD_ENABLE_CONTEXT);
    req.writeUInt32LE(context, 4);
    const seq = this.send(req);
    return new Promise((resolve, reject) => {
      this.waiters.set(seq, {
        stream: true,
        resolve: (reply) => {
          onReply(reply);
          if (reply[1] === RECORD_END_OF_DATA) resolve();
        },
        reject,
      });
    });
  }

  recordFreeContext(recordOpcode: number, context: number): void {
    const req = newRequest(recordOpcode, 8, RECORD_FREE_CONTEXT);
    req.writeUInt32LE(context, 4);
    this.send(req);
  }

  /** The current modifier and button state (QueryPointer's mask): 0x01 Shift, 0x02 Lock, 0x04 Control... */
  async modifierState(): Promise<number> {
    return (await this.queryPointer()).mask;
  }

  async internAtom(name: string): Promise<number> {
    const n = pad4(Buffer.from(name, 'latin1'));
    const req = newRequest(X_INTERN_ATOM, 8 + n.length);
    req.writeUInt16LE(name.length, 4);
    n.copy(req, 8);
    return (await this.request(req)).readUInt32LE(8);
  }

  /** A root-window property of 32-bit INTEGERs (empty if unset). */
  async getRootIntegers(atom: number): Promise<number[]> {
    const req = newRequest(X_GET_PROPERTY, 24);
    req.writeUInt32LE(this.root, 4);
    req.writeUInt32LE(atom, 8);
    req.writeUInt32LE(XA_INTEGER, 12);
    req.writeUInt32LE(0, 16); // offset
    req.writeUInt32LE(1024, 20); // length in 32-bit units
    const reply = await this.request(req);
    if (reply[1] !== 32) return [];
    const n = reply.readUInt32LE(16);
    return Array.from({ length: n }, (_, i) => reply.readUInt32LE(32 + 4 * i));
  }

  setRootIntegers(atom: number, values: number[]): void {
    const req = newRequest(X_CHANGE_PROPERTY, 24 + 4 * values.length, 0); // Replace
    req.writeUInt32LE(this.root, 4);
    req.writeUInt32LE(atom, 8);
    req.writeUInt32LE(XA_INTEGER, 12);
    req[16] = 32; // format
    req.writeUInt32LE(values.length, 20);
    values.forEach((v, i) => req.writeUInt32LE(v, 24 + 4 * i));
    this.send(req);
  }

  /** An extension's major opcode, undefined if the server lacks it. */
  async queryExtension(name: string): Promise<number | undefined> {
    return (await this.extension(name))?.major;
  }

  /** An extension's major opcode and its first event code, undefined if the server lacks it. */
  async extension(name: string): Promise<{ major: number; firstEvent: number } | undefined> {
    const n = pad4(Buffer.from(name, 'latin1'));
    const req = newRequest(X_QUERY_EXTENSION, 8 + n.length);
    req.writeUInt16LE(name.length, 4);
    n.copy(req, 8);
    const reply = await this.request(req);
    return reply[8] ? { major: reply[9]!, firstEvent: reply[10]! } : undefined;
  }

  /**
   * An extension's QueryVersion (minor opcode 0, client version `major.minor`),
   * which XFIXES and DAMAGE require before any other request; resolves with
   * the server's version.
   */
  async extensionVersion(opcode: number, major: number, minor: number): Promise<[number, number]> {
    const req = newRequest(opcode, 12, EXT_QUERY_VERSION);
    req.writeUInt32LE(major, 4);
    req.writeUInt32LE(minor, 8);
    const reply = await this.request(req);
    return [reply.readUInt32LE(8), reply.readUInt32LE(12)];
  }

  /** XFixesHideCursor on the root: the pointer is not drawn until this connection closes. */
  hideCursor(xfixesOpcode: number): void {
    const req = newRequest(xfixesOpcode, 8, XFIXES_HIDE_CURSOR);
    req.writeUInt32LE(this.root, 4);
    this.send(req);
  }

  /** DamageCreate on the root window: DamageNotify events for what any client draws. */
  damageCreate(damageOpcode: number, damage: number, level: number): void {
    const req = newRequest(damageOpcode, 16, DAMAGE_CREATE);
    req.writeUInt32LE(damage, 4);
    req.writeUInt32LE(this.root, 8);
    req[12] = level;
    this.send(req);
  }

  /** DamageSubtract with no repair region: empties `damage`, so the next drawing reports again. */
  damageSubtract(damageOpcode: number, damage: number): void {
    const req = newRequest(damageOpcode, 16, DAMAGE_SUBTRACT);
    req.writeUInt32LE(damage, 4);
    this.send(req);
  }

  /**
   * Runs `read` while the server processes no other client's request
   * (GrabServer, then a round trip so that the request in progress has
   * finished, then UngrabServer in the same tick): what `read` sees of the
   * server's state is one consistent moment. `read` must be synchronous.
   */
  async whileServerGrabbed<T>(read: () => T): Promise<T> {
    const grab = newRequest(X_GRAB_SERVER, 4);
    this.send(grab);
    try {
      await this.sync();
      return read();
    } finally {
      if (!this.closed) {
        const ungrab = newRequest(X_UNGRAB_SERVER, 4);
        this.send(ungrab);
      }
    }
  }

  /** The core keymap: `keysyms[(keycode - minKeycode) * perKeycode + column]`. */
  async getKeyboardMapping(): Promise<{ perKeycode: number; keysyms: Uint32Array }> {
    const count = this.maxKeycode - this.minKeycode + 1;
    const req = newRequest(X_GET_KEYBOARD_MAPPING, 8);
    req[4] = this.minKeycode;
    req[5] = count;
    const reply = await this.request(req);
    const perKeycode = reply[1]!;
    const keysyms = new Uint32Array(count * perKeycode);
    for (let i = 0; i < keysyms.length; i++) keysyms[i] = reply.readUInt32LE(32 + 4 * i);
    return { perKeycode, keysyms };
  }

  /** Maps `keycode` to `keysym` on both levels (Shift does not change it), or clears it with 0. */
  changeKeyboardMapping(keycode: number, keysym: number): void {
    const req = newRequest(X_CHANGE_KEYBOARD_MAPPING, 16, 1); // keycode count
    req[4] = keycode;
    req[5] = 2; // keysyms per keycode in this request
    req.writeUInt32LE(keysym, 8);
    req.writeUInt32LE(keysym, 12);
    this.send(req);
  }

  /** XTestFakeInput: KeyPress/KeyRelease with a keycode, ButtonPress/ButtonRelease with a button. */
  fakeInput(xtestOpcode: number, type: number, detail: number): void {
    this.send(fakeInputRequest(xtestOpcode, type, detail));
  }

  /** XTestFakeInput MotionNotify: moves the pointer to (x, y) on the root window, in the same queue as fakeInput's events. */
  fakeMotion(xtestOpcode: number, x: number, y: number): void {
    const req = fakeInputRequest(xtestOpcode, MOTION_NOTIFY, 0); // detail 0: absolute
    req.writeUInt32LE(this.root, 12);
    req.writeInt16LE(x, 24);
    req.writeInt16LE(y, 26);
    this.send(req);
  }

  /**
   * QueryPointer on the root: the pointer's position, the top-level window it
   * is over (0 for the root itself) and the modifier and button mask.
   */
  async queryPointer(): Promise<{ x: number; y: number; child: number; mask: number }> {
    const req = newRequest(X_QUERY_POINTER, 8);
    req.writeUInt32LE(this.root, 4);
    const reply = await this.request(req);
    return {
      child: reply.readUInt32LE(12),
      x: reply.readInt16LE(16),
      y: reply.readInt16LE(18),
      mask: reply.readUInt16LE(24),
    };
  }

  /** The children of `window`, bottom to top. */
  async queryTree(window: number): Promise<number[]> {
    const req = newRequest(X_QUERY_TREE, 8);
    req.writeUInt32LE(window, 4);
    const reply = await this.request(req);
    const n = reply.readUInt16LE(16);
    return Array.from({ length: n }, (_, i) => reply.readUInt32LE(32 + 4 * i));
  }

  /** The parent of `window` (0 for the root). */
  async parentOf(window: number): Promise<number> {
    const req = newRequest(X_QUERY_TREE, 8);
    req.writeUInt32LE(window, 4);
    return (await this.request(req)).readUInt32LE(12);
  }

  /** CreateWindow: a 1x1 InputOnly child of the root, never mapped (a selection requestor, say). */
  createInputOnlyWindow(window: number): void {
    const req = newRequest(X_CREATE_WINDOW, 32, 0); // depth 0: CopyFromParent, as InputOnly needs
    req.writeUInt32LE(window, 4);
    req.writeUInt32LE(this.root, 8);
    req.writeUInt16LE(1, 16); // width
    req.writeUInt16LE(1, 18); // height
    req.writeUInt16LE(2, 22); // class InputOnly; visual 0 (CopyFromParent) and no values follow
    this.send(req);
  }

  destroyWindow(window: number): void {
    const req = newRequest(X_DESTROY_WINDOW, 8);
    req.writeUInt32LE(window, 4);
    this.send(req);
  }

  /** ConvertSelection at CurrentTime: the owner is asked to put `selection` as `target` in `property` of `requestor`. */
  convertSelection(requestor: number, selection: number, target: number, property: number): void {
    const req = newRequest(X_CONVERT_SELECTION, 24);
    req.writeUInt32LE(requestor, 4);
    req.writeUInt32LE(selection, 8);
    req.writeUInt32LE(target, 12);
    req.writeUInt32LE(property, 16);
    this.send(req);
  }

  /** Whether `window` has property `atom` (of any type). */
  async hasProperty(window: number, atom: number): Promise<boolean> {
    const req = newRequest(X_GET_PROPERTY, 24);
    req.writeUInt32LE(window, 4);
    req.writeUInt32LE(atom, 8);
    req.writeUInt32LE(ANY_PROPERTY_TYPE, 12);
    return (await this.request(req)).readUInt32LE(8) !== 0;
  }

  /** A root-window property holding one WINDOW (0 if unset). */
  async getRootWindow(atom: number): Promise<number> {
    const req = newRequest(X_GET_PROPERTY, 24);
    req.writeUInt32LE(this.root, 4);
    req.writeUInt32LE(atom, 8);
    req.writeUInt32LE(XA_WINDOW, 12);
    req.writeUInt32LE(1, 20);
    const reply = await this.request(req);
    return reply[1] === 32 && reply.readUInt32LE(16) >= 1 ? reply.readUInt32LE(32) : 0;
  }

  /** Sends a 32-bit ClientMessage about `window` to the window manager (EWMH: to the root, substructure masks). */
  sendToWindowManager(window: number, type: number, data: number[]): void {
    const req = newRequest(X_SEND_EVENT, 44, 0); // propagate: no
    req.writeUInt32LE(this.root, 4);
    req.writeUInt32LE(EWMH_REQUEST_MASK, 8);
    req[12] = CLIENT_MESSAGE;
    req[13] = 32; // format
    req.writeUInt32LE(window, 16);
    req.writeUInt32LE(type, 20);
    data.slice(0, 5).forEach((v, i) => req.writeUInt32LE(v >>> 0, 24 + 4 * i));
    this.send(req);
  }

  close(): void {
    this.closed = true;
    this.socket.destroy();
  }
}

/** An XTestFakeInput request (xXTestFakeInputReq, 36 bytes): time 0 (now), root and position 0 unless set. */
function fakeInputRequest(xtestOpcode: number, type: number, detail: number): Buffer {
  const req = newRequest(xtestOpcode, 36, XTEST_FAKE_INPUT);
  req[4] = type;
  req[5] = detail;
  return req;
}

/**
 * A request of `bytes` (a multiple of 4), zeroed, with its header written:
 * the major opcode, the byte after it (an extension's minor opcode, or a core
 * request's one-byte field) and the length in 4-byte units.
 */
function newRequest(opcode: number, bytes: number, second = 0): Buffer {
  const req = Buffer.alloc(bytes);
  req[0] = opcode;
  req[1] = second;
  req.writeUInt16LE(bytes / 4, 2);
  return req;
}

function pad4(b: Buffer): Buffer {
  const rem = b.length % 4;
  return rem ? Buffer.concat([b, Buffer.alloc(4 - rem)]) : b;
}
