/**
 * A small zip reader and writer on node:zlib, for the Playwright traces of
 * recorded sessions (src/browser/trace-rewrite.ts rewrites them; the tests open
 * them). Only what those need: the central directory, entries stored or
 * deflated, no encryption, no zip64 (refused with a clear error: a trace
 * that large is refused rather than half read), no multi-disk archives.
 * Bounded: an entry whose uncompressed size passes `maxEntryBytes` is
 * refused before it is inflated, and inflating stops at that size whatever
 * the header claims.
 */
import { open, type FileHandle } from 'node:fs/promises';
import { promisify } from 'node:util';
import * as zlib from 'node:zlib';

const inflateRaw = promisify(zlib.inflateRaw);
const deflateRaw = promisify(zlib.deflateRaw);

const LOCAL_SIG = 0x04034b50;
const CENTRAL_SIG = 0x02014b50;
const END_SIG = 0x06054b50;
const ZIP64_LOCATOR_SIG = 0x07064b50;
const LOCAL_HEADER = 30;
const CENTRAL_HEADER = 46;
const END_RECORD = 22;
/** The end record plus the longest comment it may carry. */
const END_SEARCH = END_RECORD + 0xffff;
const STORED = 0;
const DEFLATED = 8;
/** General purpose flag bits: 0 encrypted, 3 sizes in a data descriptor, 11 UTF-8 names. */
const FLAG_ENCRYPTED = 0x0001;
const FLAG_UTF8 = 0x0800;
const MAX_32 = 0xffffffff;
const MAX_16 = 0xffff;
/** Default bound on one entry's uncompressed size. */
export const ZIP_ENTRY_MAX_BYTES = 512 * 1024 * 1024;
/** Bound on the number of entries of an archive read. */
export const ZIP_ENTRIES_MAX = 200_000;

export class ZipFormatError extends Error {
  override name = 'ZipFormatError';
  readonly code = 'ERR_ZIP_FORMAT';
}

export interface ZipEntry {
  name: string;
  /** 0 stored, 8 deflated. */
  method: number;
  crc32: number;
  compressedSize: number;
  size: number;
  /** MS-DOS time and date, as stored. */
  dosTime: number;
  dosDate: number;
  /** Offset of the entry's local header. */
  localOffset: number;
}

/** CRC-32 (ISO 3309) of `data`: zlib's own where Node has it (20.15+), else a table. */
export const crc32: (data: Uint8Array) => number =
  typeof (zlib as { crc32?: unknown }).crc32 === 'function' ? (data) => zlib.crc32(data) : tableCrc32;

let crcTable: Uint32Array | undefined;
function tableCrc32(data: Uint8Array): number {
  if (!crcTable) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      crcTable[n] = c >>> 0;
    }
  }
  let c = 0xffffffff;
  for (const byte of data) c = crcTable[(c ^ byte) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

export interface ZipReadOptions {
  /** Largest uncompressed entry read() accepts (default ZIP_ENTRY_MAX_BYTES). */
  maxEntryBytes?: number;
}

/** An archive opened for reading: its central directory now, entries on demand. */
export class ZipReader {
  private constructor(
    private readonly file: FileHandle,
    readonly entries: readonly ZipEntry[],
    private readonly maxEntryBytes: number,
  ) {}

  static async open(path: string, options: ZipReadOptions = {}): Promise<ZipReader> {
    const file = await open(path, 'r');
    try {
      const entries = await readDirectory(file);
      return new ZipReader(file, entries, options.maxEntryBytes ?? ZIP_ENTRY_MAX_BYTES);
    } catch (err) {
      await file.close();
      throw err;
    }
  }

  entry(name: string): ZipEntry | undefined {
    return this.entries.find((e) => e.name === name);
  }

  /** The entry's bytes as stored (deflated or not), for copying it unchanged. */
  async raw(entry: ZipEntry): Promise<Buffer> {
    const header = await readAt(this.file, entry.localOffset, LOCAL_HEADER);
    if (header.readUInt32LE(0) !== LOCAL_SIG) throw new ZipFormatError(`${entry.name}: no local header where expected`);
    const start = entry.localOffset + LOCAL_HEADER + header.readUInt16LE(26) + header.readUInt16LE(28);
    return readAt(this.file, start, entry.compressedSize);
  }

  /** The entry's uncompressed bytes, checked against its CRC; refused past the size bound. */
  async read(entry: ZipEntry | string): Promise<Buffer> {
    const e = typeof entry === 'string' ? this.entry(entry) : entry;
    if (!e) throw new ZipFormatError(`no entry ${JSON.stringify(entry)}`);
    if (e.size > this.maxEntryBytes) {
      throw new ZipFormatError(
        `${e.name} is ${e.size} bytes uncompressed, more than the ${this.maxEntryBytes} allowed`,
      );
    }
    const raw = await this.raw(e);
    let data: Buffer;
    if (e.method === STORED) {
      data = raw;
    } else {
      try {
        // maxOutputLength stops a deflate stream that inflates past what its header said.
        data = await inflateRaw(raw, { maxOutputLength: Math.max(e.size, 1) });
      } catch (err) {
        throw new ZipFormatError(`${e.name}: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
    if (data.length !== e.size) throw new ZipFormatError(`${e.name}: ${data.length} bytes, the header says ${e.size}`);
    if (crc32(data) !== e.crc32) throw new ZipFormatError(`${e.name}: CRC mismatch`);
    return data;
  }

  async close(): Promise<void> {
    await this.file.close();
  }
}

async function readAt(file: FileHandle, position: number, length: number): Promise<Buffer> {
  const buffer = Buffer.alloc(length);
  let done = 0;
  while (done < length) {
    const { bytesRead } = await file.read(buffer, done, length - done, position + done);
    if (bytesRead === 0) throw new ZipFormatError('the archive ends early');
    done += bytesRead;
  }
  return buffer;
}

async function readDirectory(file: FileHandle): Promise<ZipEntry[]> {
  const { size } = await file.stat();
  if (size < END_RECORD) throw new ZipFormatError('not a zip archive: too short');
  const tailLength = Math.min(size, END_SEARCH);
  const tail = await readAt(file, size - tailLength, tailLength);
  let end = -1;
  for (let i = tailLength - END_RECORD; i >= 0; i--) {
    if (tail.readUInt32LE(i) === END_SIG && i + END_RECORD + tail.readUInt16LE(i + 20) === tailLength) {
      end = i;
      break;
    }
  }
  if (end < 0) throw new ZipFormatError('not a zip archive: no end of central directory record');
  if (end >= 20 && tail.readUInt32LE(end - 20) === ZIP64_LOCATOR_SIG) {
    throw new ZipFormatError('zip64 archives are not supported');
  }
  const disk = tail.readUInt16LE(end + 4);
  const cdDisk = tail.readUInt16LE(end + 6);
  const onDisk = tail.readUInt16LE(end + 8);
  const count = tail.readUInt16LE(end + 10);
  const cdSize = tail.readUInt32LE(end + 12);
  const cdOffset = tail.readUInt32LE(end + 16);
  if (count === MAX_16 || cdSize === MAX_32 || cdOffset === MAX_32) {
    throw new ZipFormatError('zip64 archives are not supported');
  }
  if (disk !== 0 || cdDisk !== 0 || onDisk !== count) throw new ZipFormatError('multi-disk archives are not supported');
  if (count > ZIP_ENTRIES_MAX) throw new ZipFormatError(`${count} entries, more than the ${ZIP_ENTRIES_MAX} allowed`);
  const endOffset = size - tailLength + end;
  if (cdOffset + cdSize > endOffset) throw new ZipFormatError('the central directory lies outside the archive');
  const cd = await readAt(file, cdOffset, cdSize);
  const entries: ZipEntry[] = [];
  let p = 0;
  for (let i = 0; i < count; i++) {
    if (p + CENTRAL_HEADER > cd.length || cd.readUInt32LE(p) !== CENTRAL_SIG) {
      throw new ZipFormatError(`central directory entry ${i} is damaged`);
    }
    const flags = cd.readUInt16LE(p + 8);
    const method = cd.readUInt16LE(p + 10);
    const nameLength = cd.readUInt16LE(p + 28);
    const extraLength = cd.readUInt16LE(p + 30);
    const commentLength = cd.readUInt16LE(p + 32);
    const entry: ZipEntry = {
      name: cd.toString(flags & FLAG_UTF8 ? 'utf8' : 'latin1', p + CENTRAL_HEADER, p + CENTRAL_HEADER + nameLength),
      method,
      dosTime: cd.readUInt16LE(p + 12),
      dosDate: cd.readUInt16LE(p + 14),
      crc32: cd.readUInt32LE(p + 16),
      compressedSize: cd.readUInt32LE(p + 20),
      size: cd.readUInt32LE(p + 24),
      localOffset: cd.readUInt32LE(p + 42),
    };
    if (entry.compressedSize === MAX_32 || entry.size === MAX_32 || entry.localOffset === MAX_32) {
      throw new ZipFormatError(`${entry.name}: zip64 entries are not supported`);
    }
    if (flags & FLAG_ENCRYPTED) throw new ZipFormatError(`${entry.name}: encrypted entries are not supported`);
    if (method !== STORED && method !== DEFLATED) {
      throw new ZipFormatError(`${entry.name}: compression method ${method} is not supported`);
    }
    if (entry.localOffset + LOCAL_HEADER + entry.compressedSize > cdOffset) {
      throw new ZipFormatError(`${entry.name}: its data lies outside the archive`);
    }
    entries.push(entry);
    p += CENTRAL_HEADER + nameLength + extraLength + commentLength;
  }
  return entries;
}

function dosDateTime(date: Date): { dosTime: number; dosDate: number } {
  const year = Math.min(Math.max(date.getFullYear(), 1980), 2107);
  return {
    dosTime: (date.getHours() << 11) | (date.getMinutes() << 5) | (date.getSeconds() >> 1),
    dosDate: ((year - 1980) << 9) | ((date.getMonth() + 1) << 5) | date.getDate(),
  };
}

export interface ZipAddOptions {
  /** Deflate it (default true); false stores it as it is. */
  compress?: boolean;
}

/**
 * Writes an archive front to back: each entry's local header with its sizes
 * and CRC (no data descriptors), then the central directory. The file is
 * created with mode 0600; close() without finish() leaves it incomplete.
 */
export class ZipWriter {
  private readonly written: ZipEntry[] = [];
  private offset = 0;
  private readonly names = new Set<string>();

  private constructor(private readonly file: FileHandle) {}

  static async create(path: string): Promise<ZipWriter> {
    return new ZipWriter(await open(path, 'wx', 0o600));
  }

  /** Adds `data` under `name`, deflated unless `compress` is false (or deflating does not make it smaller). */
  async add(name: string, data: Buffer, options: ZipAddOptions = {}): Promise<void> {
    let method = STORED;
    let stored = data;
    if (options.compress !== false && data.length > 0) {
      const deflated = await deflateRaw(data);
      if (deflated.length < data.length) {
        method = DEFLATED;
        stored = deflated;
      }
    }
    await this.put({ name, method, crc32: crc32(data), size: data.length, ...dosDateTime(new Date()) }, stored);
  }

  /** Copies an entry of another archive as stored there (ZipReader.raw), without inflating it. */
  async copy(entry: ZipEntry, raw: Buffer): Promise<void> {
    if (raw.length !== entry.compressedSize) throw new ZipFormatError(`${entry.name}: raw data of the wrong length`);
    await this.put(entry, raw);
  }

  private async put(entry: Omit<ZipEntry, 'compressedSize' | 'localOffset'>, data: Buffer): Promise<void> {
    if (this.names.has(entry.name)) throw new ZipFormatError(`${entry.name}: already in the archive`);
    const name = Buffer.from(entry.name, 'utf8');
    if (name.length > MAX_16) throw new ZipFormatError('an entry name is too long');
    if (this.written.length >= MAX_16 - 1) throw new ZipFormatError('too many entries for a zip without zip64');
    if (
      entry.size >= MAX_32 ||
      data.length >= MAX_32 ||
      this.offset + LOCAL_HEADER + name.length + data.length >= MAX_32
    ) {
      throw new ZipFormatError(`${entry.name}: the archive would need zip64, which is not supported`);
    }
    const header = Buffer.alloc(LOCAL_HEADER);
    header.writeUInt32LE(LOCAL_SIG, 0);
    header.writeUInt16LE(20, 4);
    header.writeUInt16LE(FLAG_UTF8, 6);
    header.writeUInt16LE(entry.method, 8);
    header.writeUInt16LE(entry.dosTime, 10);
    header.writeUInt16LE(entry.dosDate, 12);
    header.writeUInt32LE(entry.crc32, 14);
    header.writeUInt32LE(data.length, 18);
    header.writeUInt32LE(entry.size, 22);
    header.writeUInt16LE(name.length, 26);
    header.writeUInt16LE(0, 28);
    const localOffset = this.offset;
    await this.write(Buffer.concat([header, name]));
    await this.write(data);
    this.names.add(entry.name);
    this.written.push({ ...entry, compressedSize: data.length, localOffset });
  }

  private async write(data: Buffer): Promise<void> {
    let done = 0;
    while (done < data.length) {
      const { bytesWritten } = await this.file.write(data, done, data.length - done, this.offset + done);
      done += bytesWritten;
    }
    this.offset += data.length;
  }

  /** Bytes written so far (the whole archive, once finished). */
  get bytes(): number {
    return this.offset;
  }

  /** Writes the central directory and closes the file. */
  async finish(): Promise<void> {
    const parts: Buffer[] = [];
    for (const e of this.written) {
      const name = Buffer.from(e.name, 'utf8');
      const h = Buffer.alloc(CENTRAL_HEADER);
      h.writeUInt32LE(CENTRAL_SIG, 0);
      h.writeUInt16LE((3 << 8) | 20, 4); // made by: Unix, spec 2.0
      h.writeUInt16LE(20, 6);
      h.writeUInt16LE(FLAG_UTF8, 8);
      h.writeUInt16LE(e.method, 10);
      h.writeUInt16LE(e.dosTime, 12);
      h.writeUInt16LE(e.dosDate, 14);
      h.writeUInt32LE(e.crc32, 16);
      h.writeUInt32LE(e.compressedSize, 20);
      h.writeUInt32LE(e.size, 24);
      h.writeUInt16LE(name.length, 28);
      h.writeUInt32LE((0o100600 * 0x10000) >>> 0, 38); // external attributes: a regular file, mode 0600
      h.writeUInt32LE(e.localOffset, 42);
      parts.push(h, name);
    }
    const cd = Buffer.concat(parts);
    if (this.offset + cd.length >= MAX_32)
      throw new ZipFormatError('the archive would need zip64, which is not supported');
    const end = Buffer.alloc(END_RECORD);
    end.writeUInt32LE(END_SIG, 0);
    end.writeUInt16LE(this.written.length, 8);
    end.writeUInt16LE(this.written.length, 10);
    end.writeUInt32LE(cd.length, 12);
    end.writeUInt32LE(this.offset, 16);
    await this.write(Buffer.concat([cd, end]));
    await this.file.close();
  }

  /** Closes the file without finishing it (after a failure). */
  async abort(): Promise<void> {
    await this.file.close().catch(() => undefined);
  }
}
