/**
 * A minimal RFB 3.8 client over a WebSocket, as noVNC speaks to the takeover
 * bridge (src/takeover/vnc-bridge.ts): the handshake with security type None,
 * ServerInit, and the few messages the tests send and read. It asks for Raw
 * pixels and the Cursor pseudo-encoding only (unless told otherwise), so
 * every FramebufferUpdate can be parsed without a decoder.
 *
 *   const c = await RfbTestClient.open(url);
 *   c.pointer(123, 45);
 *   const update = await c.update({ incremental: false });
 */
import WebSocket, { type RawData } from 'ws';

export const ENCODING_RAW = 0;
export const ENCODING_CURSOR = -239;
export const ENCODING_DESKTOP_SIZE = -223;

export interface ServerInit {
  width: number;
  height: number;
  bitsPerPixel: number;
  depth: number;
  name: string;
}

export interface Rect {
  x: number;
  y: number;
  width: number;
  height: number;
  encoding: number;
  /** Bytes of the rectangle's data (for a Cursor: pixels and mask). */
  bytes: number;
  /** Cursor pseudo-rectangles: how many bits of the mask are set (pixels drawn). */
  maskBits?: number;
}

export interface Update {
  rects: Rect[];
  /** Bytes of the whole message. */
  bytes: number;
  at: number;
}

export interface SocketOptions {
  /** Subprotocols to offer (the daemon's VNC socket wants its own, the token's and, for the holder, the lease's). */
  protocols?: string[];
  headers?: Record<string, string>;
}

interface Waiter {
  check: () => boolean;
  resolve: () => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
  what: string;
}

export class RfbTestClient {
  serverInit!: ServerInit;
  readonly updates: Update[] = [];
  /** Server messages other than updates, by type (2 Bell, 3 ServerCutText...). */
  readonly others: number[] = [];
  /** Bytes received from the server, all told. */
  received = 0;
  closeCode: number | undefined;
  closeReason = '';
  readonly closed: Promise<void>;
  private buf: Buffer = Buffer.alloc(0);
  private phase: 'version' | 'security' | 'result' | 'init' | 'messages' = 'version';
  private waiters: Waiter[] = [];
  private onClosed!: () => void;

  private constructor(readonly ws: WebSocket) {
    this.closed = new Promise((resolve) => (this.onClosed = resolve));
    ws.on('message', (data: RawData) => {
      const chunk = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
      this.received += chunk.length;
      this.buf = Buffer.concat([this.buf, chunk]);
      this.parse();
      this.check();
    });
    ws.on('close', (code, reason) => {
      this.closeCode = code;
      this.closeReason = reason.toString();
      for (const w of this.waiters.splice(0)) {
        clearTimeout(w.timer);
        w.reject(new Error(`the connection closed (${code} ${this.closeReason}) while waiting for ${w.what}`));
      }
      this.onClosed();
    });
    ws.on('error', () => {});
  }

  /**
   * Opens the WebSocket (offering `socket.protocols`, sending `socket.headers`); the handshake then runs by
   * itself. Rejects with the HTTP status when the upgrade is refused.
   */
  static async connect(url: string, socket: SocketOptions = {}): Promise<RfbTestClient> {
    const ws = new WebSocket(url, socket.protocols ?? [], {
      perMessageDeflate: false,
      ...(socket.headers ? { headers: socket.headers } : {}),
    });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('unexpected-response', (_req, res) => {
        res.resume();
        reject(new Error(`the VNC socket was refused: ${res.statusCode}`));
      });
      ws.once('error', reject);
    });
    return new RfbTestClient(ws);
  }

  /** Connects, completes the handshake and sets the encodings; resolves after ServerInit. */
  static async open(
    url: string,
    encodings: number[] = [ENCODING_RAW, ENCODING_CURSOR],
    socket: SocketOptions = {},
  ): Promise<RfbTestClient> {
    const c = await RfbTestClient.connect(url, socket);
    await c.wait('ServerInit', () => c.phase === 'messages');
    c.setEncodings(encodings);
    return c;
  }

  send(bytes: Buffer | number[]): void {
    this.ws.send(Buffer.from(bytes as Buffer), { binary: true });
  }

  setEncodings(list: number[]): void {
    const b = Buffer.alloc(4 + 4 * list.length);
    b[0] = 2;
    b.writeUInt16BE(list.length, 2);
    list.forEach((e, i) => b.writeInt32BE(e, 4 + 4 * i));
    this.send(b);
  }

  static pointerBytes(x: number, y: number, mask = 0): Buffer {
    const b = Buffer.alloc(6);
    b[0] = 5;
    b[1] = mask;
    b.writeUInt16BE(x, 2);
    b.writeUInt16BE(y, 4);
    return b;
  }

  static keyBytes(keysym: number, down: boolean): Buffer {
    const b = Buffer.alloc(8);
    b[0] = 4;
    b[1] = down ? 1 : 0;
    b.writeUInt32BE(keysym, 4);
    return b;
  }

  /** ClientCutText, classic form: Latin-1. */
  static cutTextBytes(text: string): Buffer {
    const body = Buffer.from(text, 'latin1');
    const b = Buffer.alloc(8);
    b[0] = 6;
    b.writeUInt32BE(body.length, 4);
    return Buffer.concat([b, body]);
  }

  static updateRequestBytes(incremental: boolean, width: number, height: number): Buffer {
    const b = Buffer.alloc(10);
    b[0] = 3;
    b[1] = incremental ? 1 : 0;
    b.writeUInt16BE(width, 6);
    b.writeUInt16BE(height, 8);
    return b;
  }

  pointer(x: number, y: number, mask = 0): void {
    this.send(RfbTestClient.pointerBytes(x, y, mask));
  }

  key(keysym: number, down: boolean): void {
    this.send(RfbTestClient.keyBytes(keysym, down));
  }

  cutText(text: string): void {
    this.send(RfbTestClient.cutTextBytes(text));
  }

  /** Asks for the whole screen and resolves with the next FramebufferUpdate. */
  async update(options: { incremental: boolean; timeoutMs?: number }): Promise<Update> {
    const seen = this.updates.length;
    this.send(RfbTestClient.updateRequestBytes(options.incremental, this.serverInit.width, this.serverInit.height));
    await this.wait('a FramebufferUpdate', () => this.updates.length > seen, options.timeoutMs);
    return this.updates[seen]!;
  }

  /** Resolves once `check` holds (checked after every message), or fails naming `what`. */
  wait(what: string, check: () => boolean, timeoutMs = 10_000): Promise<void> {
    if (check()) return Promise.resolve();
    if (this.closeCode !== undefined) return Promise.reject(new Error(`the connection is closed: ${what}`));
    return new Promise((resolve, reject) => {
      const w: Waiter = {
        check,
        resolve,
        reject,
        what,
        timer: setTimeout(() => {
          this.waiters = this.waiters.filter((x) => x !== w);
          reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
        }, timeoutMs),
      };
      this.waiters.push(w);
    });
  }

  close(): Promise<void> {
    this.ws.close();
    return this.closed;
  }

  private check(): void {
    for (const w of [...this.waiters]) {
      if (!w.check()) continue;
      clearTimeout(w.timer);
      this.waiters = this.waiters.filter((x) => x !== w);
      w.resolve();
    }
  }

  private parse(): void {
    for (;;) {
      const n = this.next();
      if (n === 0) return;
      this.buf = this.buf.subarray(n);
    }
  }

  /** Handles the message at the head of the buffer; returns its length, 0 if it is not all in yet. */
  private next(): number {
    const b = this.buf;
    switch (this.phase) {
      case 'version':
        if (b.length < 12) return 0;
        this.send(Buffer.from('RFB 003.008\n', 'latin1'));
        this.phase = 'security';
        return 12;
      case 'security': {
        if (b.length < 1 || b.length < 1 + b[0]!) return 0;
        const types = [...b.subarray(1, 1 + b[0]!)];
        if (!types.includes(1)) throw new Error(`the server offers no security type None: ${types}`);
        this.send([1]);
        this.phase = 'result';
        return 1 + b[0]!;
      }
      case 'result':
        if (b.length < 4) return 0;
        if (b.readUInt32BE(0) !== 0) throw new Error('security handshake failed');
        this.send([1]); // ClientInit, shared
        this.phase = 'init';
        return 4;
      case 'init': {
        if (b.length < 24) return 0;
        const nameLength = b.readUInt32BE(20);
        if (b.length < 24 + nameLength) return 0;
        this.serverInit = {
          width: b.readUInt16BE(0),
          height: b.readUInt16BE(2),
          bitsPerPixel: b[4]!,
          depth: b[5]!,
          name: b.subarray(24, 24 + nameLength).toString('latin1'),
        };
        this.phase = 'messages';
        return 24 + nameLength;
      }
      case 'messages':
        break;
    }
    if (b.length < 1) return 0;
    switch (b[0]) {
      case 0:
        return this.framebufferUpdate();
      case 2: // Bell
        this.others.push(2);
        return 1;
      case 3: {
        if (b.length < 8) return 0;
        const raw = b.readUInt32BE(4);
        const size = raw >= 0x8000_0000 ? 0x1_0000_0000 - raw : raw;
        if (b.length < 8 + size) return 0;
        this.others.push(3);
        return 8 + size;
      }
      default:
        throw new Error(`server message type ${b[0]} is not handled by this test client`);
    }
  }

  private framebufferUpdate(): number {
    const b = this.buf;
    if (b.length < 4) return 0;
    const count = b.readUInt16BE(2);
    const bpp = this.serverInit.bitsPerPixel / 8;
    let pos = 4;
    const rects: Rect[] = [];
    for (let i = 0; i < count; i++) {
      if (b.length < pos + 12) return 0;
      const rect: Rect = {
        x: b.readUInt16BE(pos),
        y: b.readUInt16BE(pos + 2),
        width: b.readUInt16BE(pos + 4),
        height: b.readUInt16BE(pos + 6),
        encoding: b.readInt32BE(pos + 8),
        bytes: 0,
      };
      pos += 12;
      if (rect.encoding === ENCODING_RAW) {
        rect.bytes = rect.width * rect.height * bpp;
      } else if (rect.encoding === ENCODING_CURSOR) {
        const pixels = rect.width * rect.height * bpp;
        const maskBytes = Math.floor((rect.width + 7) / 8) * rect.height;
        rect.bytes = pixels + maskBytes;
        if (b.length < pos + rect.bytes) return 0;
        let bits = 0;
        for (const byte of b.subarray(pos + pixels, pos + rect.bytes)) {
          for (let v = byte; v; v &= v - 1) bits++;
        }
        rect.maskBits = bits;
      } else if (rect.encoding === ENCODING_DESKTOP_SIZE) {
        rect.bytes = 0;
      } else {
        throw new Error(`rectangle encoding ${rect.encoding} is not handled by this test client`);
      }
      if (b.length < pos + rect.bytes) return 0;
      pos += rect.bytes;
      rects.push(rect);
    }
    this.updates.push({ rects, bytes: pos, at: performance.now() });
    return pos;
  }
}
