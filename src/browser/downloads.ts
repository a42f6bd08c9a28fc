/**
 * Downloads: each session saves what its pages download into its own folder
 * under the downloads dir, within the session's caps (a number of downloads,
 * a number of bytes); the folder goes when the session ends, and at start the
 * folders an earlier run left are removed (docs/SECURITY.md). What happened
 * is kept as `download_*` state changes for the next successful result
 * (docs/TOOLSETS.md D3). A completed download is also handed to `keep`
 * (when the daemon gives one) before its `download_completed` is reported:
 * the daemon keeps a copy for the session's harness to fetch by that
 * `download_id` (docs/PROTOCOL.md "Downloads").
 */
import { constants, createWriteStream } from 'node:fs';
import type { Readable } from 'node:stream';
import { lstat, mkdir, open, readdir, rm, stat } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Download } from 'playwright';
import type { Logger } from '../base/log.ts';
import type { BrowserStateChange } from '../base/protocol.ts';
import { sanitizeId } from '../base/screenshot-store.ts';
import type { Notices } from './notices.ts';

/** browser_state carries at most this many state changes (docs/TOOLSETS.md E). */
export const STATE_CHANGES_MAX = 200;
/** How long a call's end waits for downloads being saved. */
const DOWNLOAD_WAIT_MS = 2_000;
/** Fixed, path-free texts for a download over the session's caps (docs/TOOLSETS.md D3). */
const DOWNLOAD_LIMIT_ERROR = "the session's download limit was reached";
const DOWNLOAD_FAILED = 'the download failed';
/** How Downloads.save names a saved file (`dl-N-` and a safeFileName). */
const DOWNLOAD_FILE = /^dl-[0-9]+-[A-Za-z0-9._-]+$/;
/** The longest download path shown (with --expose-download-paths): a longer one would be cut, so it is left out. */
const DOWNLOAD_PATH_MAX = 4096;

/** What the downloads of every session share (the operator's settings, BrowserOptions). */
export interface DownloadSettings {
  downloadsDir: string;
  maxDownloads: number;
  maxDownloadBytes: number;
  exposeDownloadPaths: boolean;
  /** Settles once the folders of an earlier run are removed; no download is saved before. */
  swept: Promise<void>;
  /** Removes the download folder of session `id`, with what it holds. */
  removeFolder(id: string): Promise<void>;
  /**
   * Keeps a completed download for session `sessionId`'s harness (the daemon's store, src/daemon.ts): `body`
   * is the saved file, opened without following a link. Settles once kept or refused; it never throws.
   */
  keep?(sessionId: string, download: KeptDownload, body: Readable): Promise<void>;
}

/** A completed download as the daemon keeps it for the harness. */
export interface KeptDownload {
  /** The id its `download_completed` carries. */
  downloadId: string;
  /** The name the page suggested (Playwright's suggestedFilename), as the harness will read it. */
  name: string;
  url: string;
  size: number;
}

/** Chromium's progress of a download (CDP `Page.downloadProgress`). */
export interface DownloadProgress {
  guid: string;
  totalBytes: number;
  receivedBytes: number;
  state: string;
}

/** One session's downloads. */
export class Downloads {
  private next = 1;
  /** Download events not yet reported (they survive failed calls). */
  private pending: BrowserStateChange[] = [];
  /** Downloads still being saved. */
  private readonly saving = new Set<Promise<void>>();
  /** The session's caps: bytes its saved downloads hold, and the downloads being saved. */
  private bytes = 0;
  private readonly inFlight = new Set<Download>();
  /** Chromium's view of downloads in this session's tabs (Page.downloadWillBegin/downloadProgress), by guid. */
  private readonly urls = new Map<string, string>();
  private readonly expected = new Map<string, number>();
  /** Downloads cancelled because the session's bytes would pass the cap. */
  private readonly overByteCap = new WeakSet<Download>();
  /** Whether the download-limit notice waits for a result already (one per result, however many were refused). */
  private limitNoticed = false;
  /** Set by stop(): nothing more is saved, and the download folder goes. */
  private stopped = false;

  constructor(
    private readonly sessionId: string,
    private readonly settings: DownloadSettings,
    private readonly notices: Notices,
  ) {}

  /** How many downloads this session has seen begin. */
  get count(): number {
    return this.next - 1;
  }

  /**
   * Waits (up to `ms`) for a download after the first `count`: a navigation
   * that turned into a download can fail before Playwright announces the download.
   */
  async since(count: number, ms: number): Promise<boolean> {
    const deadline = performance.now() + ms;
    while (this.count <= count && performance.now() < deadline) await sleep(10);
    return this.count > count;
  }

  /**
   * A download the page started: saved under the session's folder, unless the
   * session's caps (maxDownloads, maxDownloadBytes) are reached; then it is
   * cancelled before it is saved, and reported failed.
   */
  track(download: Download): void {
    const downloadId = `dl-${this.next++}`;
    const { maxDownloads, maxDownloadBytes } = this.settings;
    if (this.stopped || this.count > maxDownloads || this.bytes >= maxDownloadBytes) {
      void download
        .cancel()
        .then(() => download.delete())
        .catch(() => undefined);
      this.refused(downloadId, download.url());
      return;
    }
    const saving = this.save(download, downloadId).finally(() => this.saving.delete(saving));
    this.saving.add(saving);
  }

  private async save(download: Download, downloadId: string): Promise<void> {
    const url = download.url();
    const { downloadsDir, maxDownloadBytes, exposeDownloadPaths } = this.settings;
    this.pending.push({ type: 'download_started', download_id: downloadId, url });
    this.inFlight.add(download);
    let path: string | undefined;
    try {
      await this.settings.swept;
      if (this.stopped) throw new Error('the session ended');
      const dir = join(downloadsDir, sanitizeId(this.sessionId));
      await mkdir(dir, { recursive: true });
      path = join(dir, `${downloadId}-${safeFileName(download.suggestedFilename())}`);
      await copyNoFollow(await download.path(), path);
      const size = (await stat(path)).size;
      if (this.stopped) throw new Error('the session ended');
      // Downloads Chromium did not report progress for, or saved side by side, are checked here at the latest.
      if (this.bytes + size > maxDownloadBytes) {
        this.overByteCap.add(download);
        throw new Error('over the byte cap');
      }
      this.bytes += size;
      if (this.settings.keep) {
        const body = await openNoFollow(path);
        const name = download.suggestedFilename();
        await this.settings.keep(this.sessionId, { downloadId, name, url, size }, body);
      }
      // The path only for an operator who says another tool can read it (the API contract), and only whole.
      const shown = exposeDownloadPaths && path.length <= DOWNLOAD_PATH_MAX && !/[\p{Cc}\u2028\u2029]/u.test(path);
      this.pending.push({
        type: 'download_completed',
        download_id: downloadId,
        url,
        ...(shown ? { path } : {}),
        size_bytes: size,
      });
    } catch {
      if (path) await rm(path, { force: true }).catch(() => undefined);
      // A fixed phrase: the error's own text may carry paths (docs/TOOLSETS.md D3).
      if (this.overByteCap.has(download)) this.refused(downloadId, url);
      else this.pending.push({ type: 'download_failed', download_id: downloadId, url, error: DOWNLOAD_FAILED });
    } finally {
      this.inFlight.delete(download);
      // Chromium's progress of downloads no longer in flight is stale (a tab that closed sends no more).
      if (this.inFlight.size === 0) {
        this.urls.clear();
        this.expected.clear();
      }
      // Playwright keeps its own copy until the context closes; not awaited: a stalled download never ends.
      void download.delete().catch(() => undefined);
      // A save that outlived stop() may have made the folder again.
      if (this.stopped) await this.settings.removeFolder(this.sessionId);
    }
  }

  /** A download over the session's caps: reported failed with a fixed text, and the model told once per result. */
  private refused(downloadId: string, url: string): void {
    // A page looping downloads cannot grow the pending events without bound; the notice tells of the rest.
    if (this.pending.length < STATE_CHANGES_MAX) {
      this.pending.push({ type: 'download_failed', download_id: downloadId, url, error: DOWNLOAD_LIMIT_ERROR });
    }
    if (this.limitNoticed) return;
    this.limitNoticed = true;
    const { maxDownloads, maxDownloadBytes } = this.settings;
    this.notices.add(
      `A download was cancelled: this session reached its download limit (${maxDownloads} downloads, ${maxDownloadBytes} bytes).`,
    );
  }

  /** Chromium is about to download `url` in one of the session's tabs (CDP `Page.downloadWillBegin`). */
  willBegin(guid: string, url: string): void {
    this.urls.set(guid, url);
  }

  /**
   * Chromium's progress of a download in one of the session's tabs. When the
   * bytes it has received or announced (Content-Length) would take the session
   * past its byte cap, the downloads in flight from that URL are cancelled
   * (Playwright does not tell Chromium's guid of a download: the URL is what
   * matches; with no URL known, every download in flight is).
   */
  progress(event: DownloadProgress): void {
    if (event.state !== 'inProgress') {
      this.urls.delete(event.guid);
      this.expected.delete(event.guid);
      return;
    }
    this.expected.set(event.guid, Math.max(event.receivedBytes, event.totalBytes));
    let expected = this.bytes;
    for (const bytes of this.expected.values()) expected += bytes;
    if (expected <= this.settings.maxDownloadBytes) return;
    const url = this.urls.get(event.guid);
    // Not announced by Playwright yet: its next progress event finds it in flight.
    for (const download of this.inFlight) {
      if (url !== undefined && download.url() !== url) continue;
      this.overByteCap.add(download);
      void download.cancel().catch(() => undefined);
    }
  }

  /** Lets downloads being saved finish (up to DOWNLOAD_WAIT_MS), so a call's result reports them. */
  async settle(): Promise<void> {
    if (this.saving.size) await Promise.race([Promise.allSettled([...this.saving]), sleep(DOWNLOAD_WAIT_MS)]);
  }

  /** The pending events to report: one per download, the latest. */
  latest(): BrowserStateChange[] {
    const latest = new Map<string, BrowserStateChange>();
    for (const change of this.pending) if ('download_id' in change) latest.set(change.download_id, change);
    return [...latest.values()];
  }

  /** A result carries `changes`: the events of the downloads they report are done; the rest waits for the next one. */
  sent(changes: readonly BrowserStateChange[]): void {
    const sent = new Set(changes.map((c) => ('download_id' in c ? c.download_id : '')));
    this.pending = this.pending.filter((c) => 'download_id' in c && !sent.has(c.download_id));
  }

  /** A result showed the notices: a later refusal is told again. */
  noticeShown(): void {
    this.limitNoticed = false;
  }

  /** The session is ending: nothing more is saved. */
  stop(): void {
    this.stopped = true;
  }

  /** Downloads end with the session: those still being saved first, then its folder (docs/SECURITY.md). */
  async discard(): Promise<void> {
    for (const download of this.inFlight) void download.cancel().catch(() => undefined);
    await this.settle();
    await this.settings.removeFolder(this.sessionId);
  }
}

/**
 * At start: removes the session folders under the downloads dir that no
 * session owns (an earlier run's; no session outlives its daemon), as the
 * screenshot store's retention does. Only real folders directly inside it
 * that hold nothing but saved downloads (`dl-N-name` files): a symlink, or
 * a folder holding anything else (a downloads dir set to a home folder), is
 * left alone.
 */
export async function removeStaleDownloads(
  downloadsDir: string,
  owned: (folder: string) => boolean,
  log: Logger,
): Promise<void> {
  const root = resolve(downloadsDir);
  const entries = await readdir(root, { withFileTypes: true }).catch(() => []);
  let removed = 0;
  for (const entry of entries) {
    if (!entry.isDirectory()) continue;
    if (owned(entry.name)) continue;
    const inside = await readdir(join(root, entry.name), { withFileTypes: true }).catch(() => undefined);
    if (!inside?.every((f) => f.isFile() && DOWNLOAD_FILE.test(f.name))) {
      log.warn('left a folder in the downloads dir that holds more than downloads', { folder: entry.name });
      continue;
    }
    if (await removeDownloadFolder(downloadsDir, entry.name, log)) removed++;
  }
  if (removed) log.info('removed download folders of an earlier run', { folders: removed });
}

/**
 * Removes `<downloadsDir>/<name>` when it is a real folder directly inside
 * the downloads dir, and nothing else: rm removes a link inside it, never
 * what the link points to.
 */
export async function removeDownloadFolder(downloadsDir: string, name: string, log: Logger): Promise<boolean> {
  const root = resolve(downloadsDir);
  const dir = join(root, name);
  if (dirname(dir) !== root) return false; // `..`, `.` or a separator: not a folder inside root
  try {
    if (!(await lstat(dir)).isDirectory()) return false; // a symlink, or a file: never followed
    await rm(dir, { recursive: true, force: true });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
      log.warn('could not remove a download folder', { error: String(err) });
    }
    return false;
  }
}

/** A page-suggested file name reduced to `[A-Za-z0-9._-]`, never hidden or empty, so it cannot leave its folder. */
export function safeFileName(name: string): string {
  const clean = name
    .replace(/[^A-Za-z0-9._-]+/g, '_')
    .replace(/^[.]+/, '')
    .slice(0, 120);
  return clean || 'download';
}

/**
 * Copies the file Chromium saved to `to`, never through a link: in a
 * desktop's sandbox Chromium saves into a folder the desktop can write
 * (src/desktop-pool/sandbox.ts), and a compromised desktop could swap the
 * file for a link to one of the daemon's (O_NOFOLLOW refuses it; so is
 * anything but a regular file).
 */
export async function copyNoFollow(from: string, to: string): Promise<void> {
  const source = await open(from, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    if (!(await source.stat()).isFile()) throw new Error('the saved download is not a regular file');
    await pipeline(source.createReadStream({ autoClose: false }), createWriteStream(to));
  } finally {
    await source.close();
  }
}

/** A saved download's bytes as a stream, opened as copyNoFollow opens: never through a link, only a regular file. */
export async function openNoFollow(path: string): Promise<Readable> {
  const file = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    if (!(await file.stat()).isFile()) throw new Error('the saved download is not a regular file');
  } catch (err) {
    await file.close();
    throw err;
  }
  return file.createReadStream();
}
