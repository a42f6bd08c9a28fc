/**
 * Human takeover's VNC bridge (bridgeVnc): carries one browser viewer's
 * WebSocket (noVNC) to the unix socket of the session's x11vnc
 * (src/takeover/vnc-server.ts).
 *
 * The bridge (bridgeVnc) parses what the viewer sends (RfbClientStream):
 * a watcher's input is dropped, never forwarded; what a person in control
 * types is counted (InputTally), never kept: no character's keysym and no
 * cut text is logged, stored or passed on except to x11vnc (the bridge
 * holds, in memory and only while they are down, which buttons and keys are
 * down: to pass a browser's key repeat on as a release and a press, and to let
 * go of them if the viewer vanishes).
 */
import { connect } from 'node:net';
import type { RawData, WebSocket } from 'ws';
import type { Logger } from '../base/log.ts';
import { RfbClientStream, RfbProtocolError, WS_TOO_BIG, type RfbClientMessage, type RfbSegment } from './rfb-stream.ts';
import type { VncServer } from './vnc-server.ts';

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

/** A KeyEvent letting go of `keysym`. */
function keyUp(keysym: number): Buffer {
  const up = Buffer.alloc(8);
  up[0] = 4;
  up.writeUInt32BE(keysym, 4);
  return up;
}

/**
 * Counts the input a bridge forwarded, and what it must let go of if the
 * viewer vanishes mid-press: the buttons, and the non-character keys down
 * (Shift, Control, arrows, function keys). A character key is never
 * remembered; x11vnc releases any key still down when it stops (-clear_keys).
 */
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

/** WebSocket close codes (RFC 6455 7.4.1) the bridge closes with; a broken stream's are RfbProtocolError's. */
const WS_NORMAL = 1000;
const WS_GOING_AWAY = 1001;
const WS_UNSUPPORTED_DATA = 1003;
const WS_INTERNAL_ERROR = 1011;

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
/** ...to this. */
const WS_LOW_WATER_BYTES = 4 * 1024 * 1024;
/** A watcher with more than this unsent is dropped rather than waited for (x11vnc would block on it). */
const WATCHER_MAX_BUFFERED_BYTES = 4 * 1024 * 1024;
/** Close code for a watcher dropped for being slow: try again later. */
const WS_TRY_AGAIN_LATER = 1013;
/** A WebSocket whose peer does not answer the close handshake within this is cut. */
const WS_CLOSE_GRACE_MS = 2_000;
/** WebSocket readyState OPEN (the `ws` constant). */
const WS_OPEN = 1;

/** What the bridge asks before a holder's key press reaches x11vnc; src/desktop-driver/keymap-watch.ts is the real one. */
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

/**
 * The pseudo-encodings by which a viewer draws the pointer itself, at its own mouse: Cursor (-239),
 * XCursor (-240), PointerPos (-232) and VMware's cursor (0x574d5664). A watcher's SetEncodings goes to
 * x11vnc without them, so x11vnc draws the desktop's pointer into that watcher's picture, where the agent
 * moves it (a watcher's own mouse acts on nothing).
 */
const CURSOR_ENCODINGS = new Set([-239, -240, -232, 0x574d5664]);

/** A SetEncodings message without CURSOR_ENCODINGS. */
export function withoutCursorEncodings(bytes: Buffer): Buffer {
  const count = bytes.readUInt16BE(2);
  const kept: number[] = [];
  for (let i = 0; i < count; i++) {
    const encoding = bytes.readInt32BE(4 + 4 * i);
    if (!CURSOR_ENCODINGS.has(encoding)) kept.push(encoding);
  }
  const out = Buffer.alloc(4 + 4 * kept.length);
  out[0] = 2;
  out.writeUInt16BE(kept.length, 2);
  kept.forEach((e, i) => out.writeInt32BE(e, 4 + 4 * i));
  return out;
}

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
        if (!o.control && message.type === 'set-encodings') {
          out.push(withoutCursorEncodings(bytes));
          continue;
        }
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
