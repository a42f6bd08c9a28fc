/**
 * What a takeover viewer sends, parsed: the RFB client-to-server stream
 * (RfbClientStream), split into whole messages as far as the VNC bridge
 * (src/takeover/vnc-bridge.ts) needs them to drop a watcher's input and
 * count a holder's; RfbProtocolError for a stream that breaks the protocol
 * or a limit, with the WebSocket close code to answer with.
 */

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

/** WebSocket close codes (RFC 6455 7.4.1) a broken stream is answered with. */
const WS_PROTOCOL_ERROR = 1002;
export const WS_TOO_BIG = 1009;

/**
 * The viewer's stream broke the protocol (or a limit); `wsCode` is the WebSocket close code to answer
 * with. `code` is stable, as the daemon's errors' are (src/base/errors.ts).
 */
export class RfbProtocolError extends Error {
  override readonly name = 'RfbProtocolError';
  readonly code = 'ERR_RFB_PROTOCOL';
  constructor(
    message: string,
    readonly wsCode: number = WS_PROTOCOL_ERROR,
  ) {
    super(message);
  }
}

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
