/**
 * The files a session holds on the daemon's disk: documents its harness
 * staged for `file_upload` (docs/PROTOCOL.md "Staged documents"), and the
 * downloads its pages completed, kept for the harness to fetch
 * (docs/PROTOCOL.md "Downloads").
 *
 * - One `FileStore` per daemon: a private folder (0700, the daemon's own
 *   user: a sandboxed desktop's uid cannot read it), the bounds over every
 *   session, and one `SessionFiles` per session.
 * - A file is stored under its id, never its name: a name can never reach a
 *   path. A document's id is random; a download's is the `download_id` its
 *   `download_completed` carried (`dl-N`, unique within the session). The bytes are streamed to disk and hashed as they come;
 *   bounds are checked chunk by chunk, so an upload over one stops at that
 *   byte and leaves nothing behind.
 * - A session's files are looked up only in its own map: another session's
 *   id is simply unknown here. They go with the session (`remove()`).
 */
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readFile, rm, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { DocumentSettings } from '../base/config.ts';
import type { DownloadInfo, StagedDocumentInfo } from '../base/protocol.ts';
import { ownedTempFolder, sweepOwnedTempFolders } from '../base/temp-folder.ts';

export type FileKind = 'document' | 'download';

/** What a session's file is, as the harness reads it (the HTTP answer, the list), and its kind. */
export interface FileInfo extends StagedDocumentInfo {
  kind: FileKind;
}

export type { DownloadInfo };

/** Downloads not kept that a session remembers (the browser's cap, --max-downloads, bounds them already). */
const NOT_KEPT_MAX = 256;

/** Why a file was refused, with the HTTP status the route answers. `code` is stable; `message` names the bound. */
export class FileRefusal extends Error {
  override readonly name = 'FileRefusal';
  constructor(
    readonly code:
      | 'bad_name'
      | 'bad_media_type'
      | 'empty'
      | 'file_too_large'
      | 'too_many_files'
      | 'session_bytes'
      | 'daemon_bytes'
      | 'session_gone'
      | 'id_taken'
      | 'aborted',
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

/** Longest name, in UTF-8 bytes (a file name on most file systems). */
export const MAX_NAME_BYTES = 255;
/** A download's id as `download_completed` carries it (src/browser/downloads.ts). */
export const DOWNLOAD_ID = /^dl-[1-9][0-9]{0,8}$/;
/** Longest media type. */
const MAX_MEDIA_TYPE = 127;

/** Controls (C0, DEL, C1), the line and paragraph separators, and the bidi controls that reorder how a name reads. */
const FORBIDDEN_IN_NAME = /[\p{Cc}\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/u;

/**
 * A staged file's name, NFC, as the page will see it (`File.name`), or a refusal: 1–255 UTF-8 bytes, no `/` or
 * `\`, not `.` or `..` nor starting with `..`, no control or bidi characters. The name is never a path here; the
 * checks keep a page (or a person reading a list) from reading it as one.
 */
export function checkFileName(raw: string): string {
  const name = raw.normalize('NFC');
  const bad = (why: string): FileRefusal => new FileRefusal('bad_name', `the name ${why}`, 400);
  if (!name) throw bad('is empty');
  if (Buffer.byteLength(name) > MAX_NAME_BYTES) throw bad(`is longer than ${MAX_NAME_BYTES} bytes (UTF-8)`);
  if (/[/\\]/.test(name)) throw bad('holds / or \\');
  if (name === '.' || name.startsWith('..')) throw bad('is . or starts with ..');
  if (FORBIDDEN_IN_NAME.test(name)) throw bad('holds a control or bidi character');
  return name;
}

/** `type/subtype`, lower case, parameters dropped (`text/plain; charset=utf-8` keeps `text/plain`). */
export function checkMediaType(raw: string | undefined): string {
  const type = (raw ?? '').split(';')[0]!.trim().toLowerCase();
  if (!type) return 'application/octet-stream';
  if (type.length > MAX_MEDIA_TYPE || !/^[a-z0-9][a-z0-9!#$&^_.+-]*\/[a-z0-9][a-z0-9!#$&^_.+-]*$/.test(type)) {
    throw new FileRefusal('bad_media_type', 'the media type is not type/subtype', 400);
  }
  return type;
}

export type FileStoreEvent =
  | { kind: 'stored'; fileKind: FileKind; bytes: number }
  | { kind: 'read'; fileKind: FileKind; bytes: number }
  | { kind: 'refused'; fileKind: FileKind; code: FileRefusal['code'] };

interface Entry {
  info: FileInfo;
  path: string;
}

/** The daemon's files, over every session. */
export class FileStore {
  /** Bytes held and being written, over every session. */
  private bytes = 0;
  private readonly sessions = new Set<SessionFiles>();

  private constructor(
    readonly root: string,
    readonly settings: DocumentSettings,
    readonly onEvent: (event: FileStoreEvent) => void,
  ) {}

  /**
   * A new private folder in `settings.dir`, else the system's temporary folder. What a daemon killed with
   * SIGKILL left there is removed first (the temporary folder's is swept by the daemon at start).
   */
  static async open(settings: DocumentSettings, onEvent: (event: FileStoreEvent) => void = () => undefined) {
    if (settings.dir) {
      await mkdir(settings.dir, { recursive: true, mode: 0o700 });
      await sweepOwnedTempFolders(settings.dir);
    }
    return new FileStore(await ownedTempFolder('files', settings.dir), settings, onEvent);
  }

  /** Bytes held now (and being written), and files held, over every session. */
  get usage(): { bytes: number; files: number } {
    let files = 0;
    for (const s of this.sessions) files += s.count;
    return { bytes: this.bytes, files };
  }

  /** The files of a new session, in a folder of its own named at random (never the session's id). */
  forSession(): SessionFiles {
    const files = new SessionFiles(this, join(this.root, randomBytes(12).toString('base64url')));
    this.sessions.add(files);
    return files;
  }

  /** @internal SessionFiles' share of the daemon's bytes. */
  take(n: number): boolean {
    if (this.bytes + n > this.settings.maxTotalBytes) return false;
    this.bytes += n;
    return true;
  }

  /** @internal */
  give(n: number): void {
    this.bytes -= n;
  }

  /** @internal */
  forget(files: SessionFiles): void {
    this.sessions.delete(files);
  }

  /** Every session's files and the folder (the daemon closes). */
  async close(): Promise<void> {
    await Promise.all([...this.sessions].map((s) => s.remove()));
    await rm(this.root, { recursive: true, force: true });
  }
}

/** A staged document as `file_upload` uses it (the executor's `BatchRequest.documents` takes a `SessionFiles`). */
export interface DocumentForUpload {
  name: string;
  mediaType: string;
  size: number;
  read(): Promise<Buffer>;
}

/** One session's files. */
export class SessionFiles {
  private readonly entries = new Map<string, Entry>();
  /** Downloads the store refused, listed as `not_kept`. */
  private readonly notKept: DownloadInfo[] = [];
  /** Files being written: they hold their place in the count. */
  private writing = 0;
  private bytes = 0;
  private readonly aborts = new Set<AbortController>();
  /** Files being read out (a route's answer, a recording's copy): closed when the session ends. */
  private readonly reading = new Set<Readable>();
  private removed = false;
  private made: Promise<unknown> | undefined;

  constructor(
    private readonly store: FileStore,
    private readonly dir: string,
  ) {}

  get count(): number {
    return this.entries.size;
  }

  /**
   * Streams `body` to disk under a new random id. Refused (nothing kept) when the name or media type is bad,
   * the body is empty, or it would pass a bound: the session's files, a file's bytes, the session's bytes or
   * the daemon's. `declared` (Content-Length) refuses an upload over a bound before a byte is read. `id`
   * names a download by its `download_id` (DOWNLOAD_ID); a document always gets a random one.
   */
  async add(
    kind: FileKind,
    rawName: string,
    rawMediaType: string | undefined,
    body: Readable,
    declared?: number,
    id?: string,
  ): Promise<FileInfo> {
    const { settings } = this.store;
    try {
      if (this.removed) throw new FileRefusal('session_gone', 'the session has ended', 404);
      const name = checkFileName(rawName);
      const mediaType = checkMediaType(rawMediaType);
      if (id !== undefined && (kind !== 'download' || !DOWNLOAD_ID.test(id) || this.entries.has(id))) {
        throw new FileRefusal('id_taken', 'the id is not a new download id of this session', 409);
      }
      if (this.entries.size + this.writing >= settings.maxPerSession) {
        throw new FileRefusal(
          'too_many_files',
          `the session holds its maximum of ${settings.maxPerSession} files (files per session)`,
          409,
        );
      }
      if (declared !== undefined) this.checkBytes(declared, declared);
      this.writing++;
      try {
        return await this.write(kind, name, mediaType, body, id);
      } finally {
        this.writing--;
      }
    } catch (err) {
      if (err instanceof FileRefusal) this.store.onEvent({ kind: 'refused', fileKind: kind, code: err.code });
      throw err;
    }
  }

  /** Refuses `total` bytes of one file when a bound would be passed by the `more` not yet counted. */
  private checkBytes(total: number, more: number): void {
    const { settings } = this.store;
    if (total > settings.maxFileBytes) {
      throw new FileRefusal(
        'file_too_large',
        `the file is larger than ${settings.maxFileBytes} bytes (bytes per file)`,
        413,
      );
    }
    if (this.bytes + more > settings.maxSessionBytes) {
      throw new FileRefusal(
        'session_bytes',
        `the session's files would pass ${settings.maxSessionBytes} bytes (bytes per session)`,
        413,
      );
    }
  }

  private async write(
    kind: FileKind,
    name: string,
    mediaType: string,
    body: Readable,
    given: string | undefined,
  ): Promise<FileInfo> {
    // A failed mkdir (a full disk, for a while) is not kept: the next file tries again.
    this.made ??= mkdir(this.dir, { recursive: true, mode: 0o700 }).catch((err: unknown) => {
      this.made = undefined;
      throw err;
    });
    await this.made;
    if (this.removed) throw new FileRefusal('session_gone', 'the session has ended', 404);
    const id = given ?? `${kind === 'document' ? 'doc' : 'dl'}_${randomBytes(16).toString('base64url')}`;
    const path = join(this.dir, id);
    const hash = createHash('sha256');
    const abort = new AbortController();
    this.aborts.add(abort);
    let size = 0;
    const count = new Transform({
      transform: (chunk: Buffer, _encoding, done) => {
        try {
          this.checkBytes(size + chunk.length, chunk.length);
          if (!this.store.take(chunk.length)) {
            throw new FileRefusal(
              'daemon_bytes',
              `the daemon's files would pass ${this.store.settings.maxTotalBytes} bytes (bytes in all)`,
              507,
            );
          }
        } catch (err) {
          done(err as Error);
          return;
        }
        size += chunk.length;
        this.bytes += chunk.length;
        hash.update(chunk);
        done(null, chunk);
      },
    });
    try {
      await pipeline(body, count, createWriteStream(path, { flags: 'wx', mode: 0o600 }), { signal: abort.signal });
      if (this.removed) throw new FileRefusal('session_gone', 'the session ended during the upload', 404);
      if (size === 0) throw new FileRefusal('empty', 'the file is empty', 400);
    } catch (err) {
      this.bytes -= size;
      this.store.give(size);
      await unlink(path).catch(() => undefined);
      if (err instanceof FileRefusal) throw err;
      if (this.removed) throw new FileRefusal('session_gone', 'the session ended during the upload', 404);
      throw new FileRefusal('aborted', 'the upload did not complete', 400);
    } finally {
      this.aborts.delete(abort);
    }
    const info: FileInfo = {
      document_id: id,
      kind,
      name,
      media_type: mediaType,
      size,
      sha256: hash.digest('hex'),
      created_at: new Date().toISOString(),
    };
    this.entries.set(id, { info, path });
    this.store.onEvent({ kind: 'stored', fileKind: kind, bytes: size });
    return info;
  }

  /** The session's files of `kind`, oldest first. */
  list(kind: FileKind): FileInfo[] {
    return [...this.entries.values()].filter((e) => e.info.kind === kind).map((e) => ({ ...e.info }));
  }

  /** A completed download the store refused: listed as `not_kept`, with the refusal's code. */
  downloadNotKept(downloadId: string, name: string, size: number, reason: FileRefusal['code']): void {
    if (this.removed || this.notKept.length >= NOT_KEPT_MAX) return;
    this.notKept.push({
      download_id: downloadId,
      name,
      media_type: 'application/octet-stream',
      size,
      sha256: null,
      state: 'not_kept',
      reason,
      created_at: new Date().toISOString(),
    });
  }

  /** The session's downloads, kept or not, in the order they completed. */
  downloads(): DownloadInfo[] {
    const kept = this.list('download').map(
      ({ document_id, name, media_type, size, sha256, created_at }): DownloadInfo => ({
        download_id: document_id,
        name,
        media_type,
        size,
        sha256,
        state: 'complete',
        created_at,
      }),
    );
    const order = (d: DownloadInfo): number => Number(d.download_id.slice(3));
    return [...kept, ...this.notKept.map((d) => ({ ...d }))].sort((a, b) => order(a) - order(b));
  }

  info(id: string, kind?: FileKind): FileInfo | undefined {
    const entry = this.entries.get(id);
    return entry && (!kind || entry.info.kind === kind) ? { ...entry.info } : undefined;
  }

  /** The file's content as a stream (for a route that hands it back, or a recording's copy). */
  open(id: string): Readable | undefined {
    const entry = this.entries.get(id);
    return entry ? this.track(createReadStream(entry.path)) : undefined;
  }

  /**
   * A stream reading one of the session's files, closed when the session ends (an unlinked file stays
   * readable on Linux: a stalled reader would hold its bytes on disk). A failed read ends it with its error,
   * heard here so that it never goes unheard.
   */
  private track<T extends Readable>(stream: T): T {
    this.reading.add(stream);
    stream.on('error', () => undefined);
    stream.once('close', () => this.reading.delete(stream));
    return stream;
  }

  /**
   * A file handed back to the harness (a download's route): its info and its bytes as a stream, whose bytes
   * count as read (`read` events, as they go). Undefined when the session has no file of `kind` by that id.
   */
  handOut(id: string, kind: FileKind): { info: FileInfo; body: Readable } | undefined {
    const entry = this.entries.get(id);
    if (!entry || entry.info.kind !== kind) return undefined;
    const file = this.track(createReadStream(entry.path));
    const counted = new Transform({
      transform: (chunk: Buffer, _encoding, done) => {
        this.store.onEvent({ kind: 'read', fileKind: kind, bytes: chunk.length });
        done(null, chunk);
      },
    });
    file.on('error', (err) => counted.destroy(err));
    counted.on('close', () => file.destroy());
    return { info: { ...entry.info }, body: file.pipe(counted) };
  }

  /** A staged document for a member (`file_upload`): its bytes read whole, as the page is handed them. */
  document(id: string): DocumentForUpload | undefined {
    const entry = this.entries.get(id);
    if (!entry || entry.info.kind !== 'document') return undefined;
    const { name, media_type, size } = entry.info;
    return {
      name,
      mediaType: media_type,
      size,
      read: async () => {
        const bytes = await readFile(entry.path);
        this.store.onEvent({ kind: 'read', fileKind: 'document', bytes: bytes.length });
        return bytes;
      },
    };
  }

  /** Removes one file; false when the session has none by that id. */
  async delete(id: string, kind?: FileKind): Promise<boolean> {
    const entry = this.entries.get(id);
    if (!entry || (kind && entry.info.kind !== kind)) return false;
    this.entries.delete(id);
    this.bytes -= entry.info.size;
    this.store.give(entry.info.size);
    await rm(entry.path, { force: true });
    return true;
  }

  /** The session ended: uploads under way stop, every file and the folder go. Idempotent. */
  async remove(): Promise<void> {
    this.removed = true;
    for (const a of this.aborts) a.abort();
    for (const stream of this.reading) stream.destroy();
    for (const entry of this.entries.values()) {
      this.store.give(entry.info.size);
      this.bytes -= entry.info.size;
    }
    this.entries.clear();
    this.notKept.length = 0;
    this.store.forget(this);
    await rm(this.dir, { recursive: true, force: true });
  }
}
