/**
 * A zip archive written as a stream, for a session's downloads in one
 * answer (download-routes.ts): entries stored as they are (no compression:
 * most downloads are compressed already, and storing keeps the archive's
 * length known before a byte is sent), each one's CRC-32 in a data
 * descriptor after its bytes, so a file is read once, chunk by chunk, and
 * never held whole. No zip64: the archive stays under 4 GiB (the staged
 * files' bounds keep it far below; a larger one is refused before it starts).
 * src/browser/zip.ts is the reader and the whole-buffer writer of traces.
 */
import { crc32 } from 'node:zlib';
import type { Readable } from 'node:stream';

const LOCAL_SIG = 0x04034b50;
const DESCRIPTOR_SIG = 0x08074b50;
const CENTRAL_SIG = 0x02014b50;
const END_SIG = 0x06054b50;
const LOCAL_HEADER = 30;
const DESCRIPTOR = 16;
const CENTRAL_HEADER = 46;
const END_RECORD = 22;
/** Bit 3: sizes and CRC in a data descriptor; bit 11: the name is UTF-8. */
const FLAGS = 0x0008 | 0x0800;
const MAX_32 = 0xffffffff;
const MAX_16 = 0xffff;

export interface ZipStreamEntry {
  name: string;
  size: number;
  mtime: Date;
  /** The entry's bytes, opened when the archive reaches it. */
  open(): Readable;
}

function dosDateTime(date: Date): { time: number; date: number } {
  const year = Math.max(1980, date.getFullYear());
  return {
    time: (date.getHours() << 11) | (date.getMinutes() << 5) | (date.getSeconds() >> 1),
    date: ((year - 1980) << 9) | ((date.getMonth() + 1) << 5) | date.getDate(),
  };
}

/** The archive's length in bytes, or undefined when it would need zip64 (4 GiB or 65,535 entries). */
export function zipLength(entries: readonly Pick<ZipStreamEntry, 'name' | 'size'>[]): number | undefined {
  let local = 0;
  let central = 0;
  for (const e of entries) {
    const name = Buffer.byteLength(e.name);
    if (name > MAX_16) return undefined;
    local += LOCAL_HEADER + name + e.size + DESCRIPTOR;
    central += CENTRAL_HEADER + name;
  }
  const total = local + central + END_RECORD;
  return entries.length >= MAX_16 || local >= MAX_32 || total >= MAX_32 ? undefined : total;
}

/**
 * The archive's bytes, in order. An entry whose bytes are not `size` long (its file changed) fails the
 * stream rather than write an archive whose length or directory would be wrong.
 */
export async function* zipStream(entries: readonly ZipStreamEntry[]): AsyncGenerator<Buffer> {
  const central: Buffer[] = [];
  let offset = 0;
  for (const e of entries) {
    const name = Buffer.from(e.name, 'utf8');
    const { time, date } = dosDateTime(e.mtime);
    const local = Buffer.alloc(LOCAL_HEADER);
    local.writeUInt32LE(LOCAL_SIG, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(FLAGS, 6);
    local.writeUInt16LE(0, 8); // stored
    local.writeUInt16LE(time, 10);
    local.writeUInt16LE(date, 12);
    // CRC and sizes 0 here: they follow the bytes, in the descriptor.
    local.writeUInt16LE(name.length, 26);
    yield Buffer.concat([local, name]);
    let crc = 0;
    let size = 0;
    for await (const chunk of e.open() as AsyncIterable<Buffer>) {
      crc = crc32(chunk, crc);
      size += chunk.length;
      yield chunk;
    }
    if (size !== e.size) throw new Error(`${e.name}: ${size} bytes read, ${e.size} expected`);
    const descriptor = Buffer.alloc(DESCRIPTOR);
    descriptor.writeUInt32LE(DESCRIPTOR_SIG, 0);
    descriptor.writeUInt32LE(crc, 4);
    descriptor.writeUInt32LE(size, 8);
    descriptor.writeUInt32LE(size, 12);
    yield descriptor;
    const h = Buffer.alloc(CENTRAL_HEADER);
    h.writeUInt32LE(CENTRAL_SIG, 0);
    h.writeUInt16LE((3 << 8) | 20, 4); // made by: Unix, spec 2.0
    h.writeUInt16LE(20, 6);
    h.writeUInt16LE(FLAGS, 8);
    h.writeUInt16LE(0, 10);
    h.writeUInt16LE(time, 12);
    h.writeUInt16LE(date, 14);
    h.writeUInt32LE(crc, 16);
    h.writeUInt32LE(size, 20);
    h.writeUInt32LE(size, 24);
    h.writeUInt16LE(name.length, 28);
    h.writeUInt32LE((0o100644 << 16) >>> 0, 38); // a regular file, rw-r--r--
    h.writeUInt32LE(offset, 42);
    central.push(h, name);
    offset += LOCAL_HEADER + name.length + size + DESCRIPTOR;
  }
  const directory = Buffer.concat(central);
  const end = Buffer.alloc(END_RECORD);
  end.writeUInt32LE(END_SIG, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(directory.length, 12);
  end.writeUInt32LE(offset, 16);
  yield Buffer.concat([directory, end]);
}
