/**
 * Where recordings live (docs/RECORDING.md): one folder per session under the
 * recordings directory, named after the sanitised session id, mode 0700.
 *
 * Retention, like the screenshot store's: finished recordings are removed
 * oldest first once there are more than `maxSessions`, once all recordings
 * together (live ones included) hold more than `maxBytes`, or once one
 * finished longer than `maxAgeMs` ago. A live recording is never removed:
 * it stops growing instead (SessionRecording's own byte bound).
 *
 * Files are served by name only: `resolve()` accepts the names a recording
 * writes and nothing else, so no request can reach outside a recording.
 */
import { createReadStream } from 'node:fs';
import { mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join, resolve, sep } from 'node:path';
import { Readable } from 'node:stream';
import type { Logger } from '../base/log.ts';
import { sanitizeId } from '../base/screenshot-store.ts';

export const TRAJECTORY_FILE = 'trajectory.jsonl';
export const SUMMARY_FILE = 'summary.json';
export const IMAGES_DIR = 'images';

/** The files a recording may hold, and how each is served. */
const SERVED: readonly { pattern: RegExp; type: string }[] = [
  { pattern: /^trajectory\.jsonl$/, type: 'application/x-ndjson; charset=utf-8' },
  { pattern: /^summary\.json$/, type: 'application/json; charset=utf-8' },
  { pattern: /^video\.mp4$/, type: 'video/mp4' },
  { pattern: /^video\.vtt$/, type: 'text/vtt; charset=utf-8' },
  { pattern: /^trace(?:-\d{1,4})?\.zip$/, type: 'application/zip' },
  { pattern: /^images\/[A-Za-z0-9_-]{1,200}\.png$/, type: 'image/png' },
  { pattern: /^images\/[A-Za-z0-9_-]{1,200}\.jpg$/, type: 'image/jpeg' },
  { pattern: /^images\/[A-Za-z0-9_-]{1,200}\.webp$/, type: 'image/webp' },
  { pattern: /^images\/[A-Za-z0-9_-]{1,200}\.gif$/, type: 'image/gif' },
];

/** What the listing says of one recording; `summary.json` holds the same once it finished. */
export interface RecordingSummary {
  id: string;
  session_id: string;
  started_at: number;
  /** Absent while the session runs (or when the daemon died before it ended). */
  ended_at?: number;
  batches: number;
  calls: number;
  failures: number;
  cancelled: number;
  /** Files present, by name (`images/…` counted, not listed). */
  files: string[];
  images: number;
}

export interface RecordingInfo extends RecordingSummary {
  bytes: number;
  live: boolean;
}

interface Entry {
  id: string;
  dir: string;
  bytes: number;
  live: boolean;
  /** When it finished (or the folder's newest change, for one found on disk); age counts from here. */
  endedAt: number;
  startedAt: number;
  summary?: RecordingSummary;
}

export interface RecordingRetention {
  maxSessions: number;
  maxBytes: number;
  maxAgeMs: number;
}

/** Bytes of every file under `dir`. */
async function folderBytes(dir: string): Promise<{ bytes: number; newest: number }> {
  let bytes = 0;
  let newest = 0;
  for (const ent of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    const path = join(dir, ent.name);
    if (ent.isDirectory()) {
      const sub = await folderBytes(path);
      bytes += sub.bytes;
      newest = Math.max(newest, sub.newest);
    } else if (ent.isFile()) {
      const s = await stat(path).catch(() => undefined);
      if (!s) continue;
      bytes += s.size;
      newest = Math.max(newest, s.mtimeMs);
    }
  }
  return { bytes, newest };
}

export class RecordingStore {
  readonly root: string;
  private readonly entries = new Map<string, Entry>();
  private sweeper: NodeJS.Timeout | undefined;

  constructor(
    root: string,
    private readonly retention: RecordingRetention,
    private readonly log: Logger,
    /** Told of each recording removed by retention (metrics). */
    private readonly onRemoved: (id: string, reason: 'count' | 'bytes' | 'age' | 'not_kept') => void = () => undefined,
  ) {
    this.root = resolve(root);
  }

  /** Learns the recordings already on disk (an earlier run's), applies retention, and checks age hourly. */
  async init(): Promise<void> {
    await mkdir(this.root, { recursive: true, mode: 0o700 });
    for (const ent of await readdir(this.root, { withFileTypes: true })) {
      if (!ent.isDirectory() || sanitizeId(ent.name) !== ent.name) continue;
      const dir = join(this.root, ent.name);
      const { bytes, newest } = await folderBytes(dir);
      const summary = await readSummary(dir);
      const started = summary?.started_at ?? newest;
      this.entries.set(ent.name, {
        id: ent.name,
        dir,
        bytes,
        live: false,
        endedAt: summary?.ended_at ?? newest,
        startedAt: started,
        ...(summary ? { summary } : {}),
      });
    }
    await this.prune();
    this.sweeper = setInterval(() => void this.prune(), Math.min(3_600_000, this.retention.maxAgeMs));
    this.sweeper.unref();
  }

  close(): void {
    clearInterval(this.sweeper);
  }

  /** A new live recording's folder (and its images folder). A folder left by an earlier session of that id is replaced. */
  async open(sessionId: string): Promise<{ id: string; dir: string }> {
    const id = sanitizeId(sessionId, 128);
    const dir = join(this.root, id);
    if (!dir.startsWith(this.root + sep)) throw new Error('recording path escapes its directory');
    await rm(dir, { recursive: true, force: true });
    await mkdir(join(dir, IMAGES_DIR), { recursive: true, mode: 0o700 });
    this.entries.delete(id);
    this.entries.set(id, { id, dir, bytes: 0, live: true, endedAt: Date.now(), startedAt: Date.now() });
    return { id, dir };
  }

  /** A live recording wrote `bytes` more. */
  grew(id: string, bytes: number): void {
    const e = this.entries.get(id);
    if (e) e.bytes += bytes;
  }

  /** Bytes all recordings hold now. */
  get usage(): { recordings: number; live: number; bytes: number } {
    let bytes = 0;
    let live = 0;
    for (const e of this.entries.values()) {
      bytes += e.bytes;
      if (e.live) live++;
    }
    return { recordings: this.entries.size, live, bytes };
  }

  /**
   * A recording ended: its summary is written, its size measured again (the video and the trace were written
   * by other processes), and it is kept, or removed when `keep` is false. Then retention runs.
   */
  async finish(id: string, summary: RecordingSummary, keep: boolean): Promise<void> {
    const e = this.entries.get(id);
    if (!e) return;
    e.live = false;
    e.endedAt = summary.ended_at ?? Date.now();
    if (!keep) {
      await this.remove(e, 'not_kept');
      return;
    }
    await writeFile(join(e.dir, SUMMARY_FILE), JSON.stringify(summary), { mode: 0o600 }).catch((err: unknown) =>
      this.log.warn('could not write a recording summary', { recording: id, error: String(err) }),
    );
    e.summary = summary;
    e.bytes = (await folderBytes(e.dir)).bytes;
    await this.prune();
  }

  /** Every recording, newest first. */
  async list(live: (id: string) => RecordingSummary | undefined): Promise<RecordingInfo[]> {
    const out: RecordingInfo[] = [];
    for (const e of this.entries.values()) {
      const summary = (e.live ? live(e.id) : undefined) ?? e.summary ?? (await this.summaryOf(e));
      out.push({ ...summary, bytes: e.bytes, live: e.live });
    }
    return out.sort((a, b) => b.started_at - a.started_at);
  }

  /**
   * The file `name` of recording `id`, with its content type, or undefined when either is not one a recording
   * writes. `name` is matched against the fixed list above: no `..`, no other folder, no other file.
   */
  resolve(id: string, name: string): { path: string; type: string } | undefined {
    const e = this.entries.get(id);
    const served = SERVED.find((s) => s.pattern.test(name));
    if (!e || !served) return undefined;
    const path = resolve(e.dir, name);
    if (!path.startsWith(e.dir + sep)) return undefined;
    return { path, type: served.type };
  }

  /** Streams a resolved file; rejects when it does not exist (yet). */
  async read(path: string): Promise<{ size: number; stream: NodeJS.ReadableStream }> {
    const s = await stat(path);
    if (!s.isFile()) throw new Error('not a file');
    // A live video grows while it is read: what is sent stops at the size announced.
    const stream = s.size > 0 ? createReadStream(path, { start: 0, end: s.size - 1 }) : Readable.from([]);
    return { size: s.size, stream };
  }

  /** The summary of a recording found on disk without one (its daemon died): counted from its trajectory once. */
  private async summaryOf(e: Entry): Promise<RecordingSummary> {
    const summary = await summarizeFolder(e.id, e.dir, e.startedAt);
    e.summary = summary;
    return summary;
  }

  private async remove(e: Entry, reason: 'count' | 'bytes' | 'age' | 'not_kept'): Promise<void> {
    this.entries.delete(e.id);
    await rm(e.dir, { recursive: true, force: true }).catch((err: unknown) =>
      this.log.warn('could not remove a recording', { recording: e.id, error: String(err) }),
    );
    this.onRemoved(e.id, reason);
  }

  /** Removes finished recordings, oldest first, until every bound holds. */
  async prune(): Promise<void> {
    const { maxSessions, maxBytes, maxAgeMs } = this.retention;
    const cutoff = Date.now() - maxAgeMs;
    const finished = [...this.entries.values()].filter((e) => !e.live).sort((a, b) => a.startedAt - b.startedAt);
    for (const e of finished) {
      const { recordings, bytes } = this.usage;
      const reason =
        e.endedAt < cutoff ? 'age' : recordings > maxSessions ? 'count' : bytes > maxBytes ? 'bytes' : undefined;
      if (reason) await this.remove(e, reason);
    }
  }
}

async function readSummary(dir: string): Promise<RecordingSummary | undefined> {
  try {
    return JSON.parse(await readFile(join(dir, SUMMARY_FILE), 'utf8')) as RecordingSummary;
  } catch {
    return undefined;
  }
}

/** A recording's summary before anything was counted. */
export function emptySummary(id: string, sessionId: string, startedAt: number): RecordingSummary {
  return {
    id,
    session_id: sessionId,
    started_at: startedAt,
    batches: 0,
    calls: 0,
    failures: 0,
    cancelled: 0,
    files: [],
    images: 0,
  };
}

/** Counts a trajectory's batches, calls and failures, and lists the folder's files. */
export async function summarizeFolder(id: string, dir: string, fallbackStart: number): Promise<RecordingSummary> {
  const summary = emptySummary(id, id, fallbackStart);
  const text = await readFile(join(dir, TRAJECTORY_FILE), 'utf8').catch(() => '');
  for (const line of text.split('\n')) {
    let rec: {
      type?: string;
      at?: number;
      session_id?: string;
      result?: { failures?: unknown[]; cancelled?: boolean; tool_results?: unknown[] };
    };
    try {
      rec = JSON.parse(line) as typeof rec;
    } catch {
      continue; // a line cut by a crash
    }
    if (rec.type === 'recording') {
      summary.session_id = rec.session_id ?? id;
      summary.started_at = rec.at ?? fallbackStart;
    } else if (rec.type === 'batch_finished' && rec.result) {
      summary.batches++;
      summary.calls += rec.result.tool_results?.length ?? 0;
      summary.failures += rec.result.failures?.length ?? 0;
      if (rec.result.cancelled) summary.cancelled++;
    } else if (rec.type === 'session_closed') {
      summary.ended_at = rec.at;
    }
  }
  return { ...summary, ...(await listFiles(dir)) };
}

/** The files of a recording folder: names, and how many images. */
export async function listFiles(dir: string): Promise<{ files: string[]; images: number }> {
  return {
    files: (await readdir(dir).catch(() => [] as string[]))
      .filter((n) => n !== IMAGES_DIR && !n.startsWith('.'))
      .sort(),
    images: (await readdir(join(dir, IMAGES_DIR)).catch(() => [] as string[])).length,
  };
}
