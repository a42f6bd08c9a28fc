/**
 * The screen as the worker reads it, without nut-js where the X server allows:
 *
 * - **ScreenChanges** (the DAMAGE extension on the root window): the X server
 *   tells us whenever any client draws, so the settle step knows when the
 *   screen last changed instead of comparing frames (docs/PERFORMANCE.md,
 *   "The settle step").
 * - **Framebuffer**: an Xvfb started with `-fbdir` keeps its screen in a
 *   memory-mapped XWD file (src/desktop-driver/xvfb.ts puts it in a private folder);
 *   reading it while the server is grabbed is a consistent frame at the cost
 *   of a memcpy, where an XGetImage through libnut costs a 4 MB reply over
 *   the socket. The software cursor Xvfb draws into that memory is hidden
 *   (XFIXES HideCursor, for as long as this worker's connection lives), so a
 *   frame shows what XGetImage would: no pointer.
 *
 * Both are optional: an X server without DAMAGE, or a display deskbatch did
 * not start (no framebuffer file), falls back to the frame comparison and to
 * libnut's grab.
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { endianness } from 'node:os';
import type { Rect, Size } from '../../base/geometry.ts';
import { DAMAGE_REPORT_NON_EMPTY, type XConnection } from '../x11.ts';

export class ScreenChanges {
  /** DamageNotify events received so far. */
  count = 0;
  /** performance.now() of the last RECENT_CHANGES DamageNotify events, oldest first. */
  private readonly recent: number[] = [];

  private constructor(private readonly conn: XConnection) {}

  /** performance.now() of the last DamageNotify received (-Infinity: none yet). */
  get lastChangeAt(): number {
    return this.recent.at(-1) ?? -Infinity;
  }

  /** Undefined if the server has no DAMAGE 1.1. */
  static async open(conn: XConnection): Promise<ScreenChanges | undefined> {
    const ext = await conn.extension('DAMAGE');
    if (!ext) return undefined;
    const [major, minor] = await conn.extensionVersion(ext.major, 1, 1);
    if (major < 1 || (major === 1 && minor < 1)) return undefined;
    const watch = new ScreenChanges(conn);
    const damage = conn.newId();
    const notify = ext.firstEvent; // DamageNotify is the extension's event 0
    conn.onEvent = (event) => {
      if ((event[0]! & 0x7f) !== notify) return;
      watch.count++;
      watch.recent.push(performance.now());
      if (watch.recent.length > RECENT_CHANGES) watch.recent.shift();
      // Empty the region, so the next drawing sends the next event (ReportNonEmpty reports once per non-empty).
      conn.damageSubtract(ext.major, damage);
    };
    conn.damageCreate(ext.major, damage, DAMAGE_REPORT_NON_EMPTY);
    await conn.sync();
    return watch;
  }

  /**
   * A round trip: every change the server made before now has been reported
   * (events arrive before the reply that follows them), so `lastChangeAt` is current.
   */
  current(): Promise<void> {
    return this.conn.sync();
  }

  /**
   * When the first change after `t` was reported, if one was and it is still among the recent ones
   * (an animation reports a change every frame: its last change says nothing of how soon the first came).
   */
  firstChangeAfter(t: number): number | undefined {
    const i = this.recent.findIndex((at) => at > t);
    if (i < 0 || (i === 0 && this.recent.length === RECENT_CHANGES)) return undefined;
    return this.recent[i];
  }
}

/** How many change times ScreenChanges keeps: a few frames of an animation, or of changes since one input. */
const RECENT_CHANGES = 64;

/** Pixels as libnut gives them too: B,G,R,X, rows `byteWidth` apart. */
export interface BgrxImage {
  data: Buffer;
  width: number;
  height: number;
  byteWidth: number;
}

/** XWD header fields (CARD32, big-endian), by index. */
const XWD = {
  headerSize: 0,
  version: 1,
  format: 2,
  depth: 3,
  width: 4,
  height: 5,
  byteOrder: 7,
  bitsPerPixel: 11,
  bytesPerLine: 12,
  redMask: 14,
  greenMask: 15,
  blueMask: 16,
  colors: 19,
} as const;
const XWD_HEADER_READ = 100;
/** An XWDColor entry after the header: pixel CARD32, r g b CARD16, flags and pad. */
const XWD_COLOR_BYTES = 12;
const Z_PIXMAP = 2;
const LSB_FIRST = 0;

export class Framebuffer {
  private readonly head = Buffer.alloc(XWD_HEADER_READ);
  private pixels: Buffer | undefined;

  private constructor(
    private readonly fd: number,
    private readonly conn: XConnection,
    private readonly size: Size,
  ) {}

  /**
   * Opens Xvfb's framebuffer file and hides the pointer. Undefined (and
   * `why`) if the file does not describe a 32-bit B,G,R,X screen of `size`,
   * or the server has no XFIXES to hide the pointer with.
   */
  static async open(
    path: string,
    conn: XConnection,
    size: Size,
  ): Promise<{ framebuffer: Framebuffer } | { framebuffer?: undefined; why: string }> {
    let fd: number;
    try {
      fd = openSync(path, 'r');
    } catch (err) {
      return { why: `cannot open the framebuffer file: ${(err as Error).message}` };
    }
    const fb = new Framebuffer(fd, conn, size);
    try {
      const layout = fb.layout();
      const why =
        typeof layout === 'string'
          ? layout
          : layout.width !== size.width || layout.height !== size.height
            ? `the framebuffer is ${layout.width}x${layout.height}, the display ${size.width}x${size.height}`
            : undefined;
      if (why) {
        fb.close();
        return { why };
      }
      const xfixes = await conn.extension('XFIXES');
      // HideCursor came with XFIXES 4.
      const [major] = xfixes ? await conn.extensionVersion(xfixes.major, 4, 0) : [0];
      if (!xfixes || major < 4) {
        fb.close();
        return { why: 'the X server has no XFIXES 4 to hide the pointer with' };
      }
      conn.hideCursor(xfixes.major);
      await conn.sync();
      return { framebuffer: fb };
    } catch (err) {
      fb.close();
      throw err;
    }
  }

  /** The file's header, checked: where the pixels start and how they lie, or why they cannot be read. */
  private layout(): { offset: number; width: number; height: number; byteWidth: number } | string {
    if (readSync(this.fd, this.head, 0, XWD_HEADER_READ, 0) < XWD_HEADER_READ) return 'the framebuffer file is short';
    const field = (i: number): number => this.head.readUInt32BE(4 * i);
    if (field(XWD.version) !== 7 || field(XWD.format) !== Z_PIXMAP) return 'the framebuffer file is not an XWD image';
    if (
      field(XWD.depth) !== 24 ||
      field(XWD.bitsPerPixel) !== 32 ||
      field(XWD.byteOrder) !== LSB_FIRST ||
      field(XWD.redMask) !== 0xff0000 ||
      field(XWD.greenMask) !== 0xff00 ||
      field(XWD.blueMask) !== 0xff
    ) {
      return `the framebuffer is depth ${field(XWD.depth)}, ${field(XWD.bitsPerPixel)} bits per pixel: only 24 in 32 is read directly`;
    }
    return {
      offset: field(XWD.headerSize) + field(XWD.colors) * XWD_COLOR_BYTES,
      width: field(XWD.width),
      height: field(XWD.height),
      byteWidth: field(XWD.bytesPerLine),
    };
  }

  /**
   * One consistent frame: read while the X server runs no other client's
   * request. The buffer is reused by the next read: use it before awaiting.
   */
  async read(): Promise<BgrxImage> {
    const layout = this.layout();
    if (typeof layout === 'string') throw new Error(layout);
    if (layout.width !== this.size.width || layout.height !== this.size.height) {
      // Regions were checked against the display's size: never read past the frame.
      throw new Error(
        `the framebuffer is now ${layout.width}x${layout.height}, not ${this.size.width}x${this.size.height}`,
      );
    }
    const bytes = layout.byteWidth * layout.height;
    if (this.pixels?.length !== bytes) this.pixels = Buffer.allocUnsafe(bytes);
    const pixels = this.pixels;
    const got = await this.conn.whileServerGrabbed(() => readSync(this.fd, pixels, 0, bytes, layout.offset));
    if (got !== bytes) throw new Error(`the framebuffer file gave ${got} of ${bytes} bytes`);
    return { data: pixels, width: layout.width, height: layout.height, byteWidth: layout.byteWidth };
  }

  close(): void {
    closeSync(this.fd);
  }
}

/**
 * The RGB buffer of the last conversion, used again by the next one of the
 * same size: its users (the worker's capture, the bench's floor) convert one
 * frame at a time, and sharp has finished with it once the encode resolves. Without it every capture allocates 3–6 MB that only a
 * garbage collection (of the whole worker heap) gives back.
 */
let rgbReused: Buffer | undefined;

const LITTLE_ENDIAN = endianness() === 'LE';

/**
 * `pixels` B,G,R,X pixels of `src` from byte `from` to R,G,B in `out`: four
 * pixels (four words read as X<<24|R<<16|G<<8|B on a little-endian machine)
 * become three words, the rest one byte at a time. Both buffers 4-aligned.
 */
function wordsToRgb(src: Buffer, from: number, pixels: number, out: Buffer): void {
  const s = new Uint32Array(src.buffer, src.byteOffset + from, pixels);
  const d = new Uint32Array(out.buffer, out.byteOffset, (pixels * 3) >> 2);
  const blocks = pixels & ~3;
  let o = 0;
  for (let i = 0; i < blocks; i += 4) {
    const p0 = s[i]!;
    const p1 = s[i + 1]!;
    const p2 = s[i + 2]!;
    const p3 = s[i + 3]!;
    d[o] = ((p0 >> 16) & 0xff) | (p0 & 0xff00) | ((p0 & 0xff) << 16) | (((p1 >> 16) & 0xff) << 24);
    d[o + 1] = ((p1 >> 8) & 0xff) | ((p1 & 0xff) << 8) | (p2 & 0xff0000) | (((p2 >> 8) & 0xff) << 24);
    d[o + 2] = (p2 & 0xff) | (((p3 >> 16) & 0xff) << 8) | ((p3 & 0xff00) << 8) | ((p3 & 0xff) << 24);
    o += 3;
  }
  for (let i = blocks, b = o * 4; i < pixels; i++, b += 3) {
    const at = from + i * 4;
    out[b] = src[at + 2]!;
    out[b + 1] = src[at + 1]!;
    out[b + 2] = src[at]!;
  }
}

function rgbBuffer(bytes: number): Buffer {
  if (rgbReused?.length !== bytes) rgbReused = Buffer.allocUnsafe(bytes);
  return rgbReused;
}

/**
 * libnut and Xvfb's framebuffer both hold 4 bytes per pixel in B,G,R,X order,
 * rows `byteWidth` apart. The 4th byte is NOT alpha (docs/MEASURED.md): giving
 * it to sharp as RGBA yields mostly black images, so we copy out 3-channel RGB
 * (measured faster than sharp's own channel recombination), of `area` if given.
 */
export function bgrxToRgb(img: BgrxImage, area?: Rect): Buffer {
  const { x: left, y: top, width, height } = area ?? { x: 0, y: 0, width: img.width, height: img.height };
  const src = img.data;
  const stride = img.byteWidth;
  const out = rgbBuffer(width * height * 3);
  // Whole rows lie end to end: four pixels at a time, as 32-bit words (1.5-2x the byte loop's speed).
  if (LITTLE_ENDIAN && left === 0 && stride === width * 4 && src.byteOffset % 4 === 0 && out.byteOffset % 4 === 0) {
    wordsToRgb(src, top * stride, width * height, out);
    return out;
  }
  let o = 0;
  for (let row = top; row < top + height; row++) {
    const start = row * stride + left * 4;
    const end = start + width * 4;
    for (let i = start; i < end; i += 4) {
      out[o] = src[i + 2]!;
      out[o + 1] = src[i + 1]!;
      out[o + 2] = src[i]!;
      o += 3;
    }
  }
  return out;
}
