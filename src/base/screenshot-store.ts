/**
 * Every image the daemon returns is also written under the screenshots
 * directory (docs/PROTOCOL.md "Screenshots"): one folder per session, a file
 * named after the batch and tool_use ids. Names are built only from sanitised
 * ids, so no input can escape the directory. Retention is bounded by count and
 * bytes; the oldest files go first.
 */
import { mkdir, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { join, resolve, sep } from 'node:path';
import type { Logger } from './log.ts';
import type { CapturedImage } from './image.ts';
import type { ScreenshotFile } from './protocol.ts';

export interface RetentionOptions {
  maxFiles: number;
  maxBytes: number;
}

const EXTENSION: Record<CapturedImage['mediaType'], string> = {
  'image/png': 'png',
  'image/jpeg': 'jpg',
  'image/webp': 'webp',
};

/** Keeps `[A-Za-z0-9._-]`, replaces the rest, and never yields `.`/`..` or an empty name. */
export function sanitizeId(id: string, maxLength = 96): string {
  const clean = id.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, maxLength);
  return clean || '_';
}

interface Entry {
  path: string;
  bytes: number;
}

export class ScreenshotStore {
  readonly root: string;
  /** Files in write order, oldest first. */
  private readonly entries: Entry[] = [];
  private totalBytes = 0;
  private counter = 0;

  constructor(
    root: string,
    private readonly retention: RetentionOptions,
    private readonly log: Logger,
  ) {
    this.root = resolve(root);
  }

  /** Learns the files already on disk (from an earlier run), so retention covers them too. */
  async init(): Promise<void> {
    await mkdir(this.root, { recursive: true });
    const found: (Entry & { mtimeMs: number })[] = [];
    for (const session of await readdir(this.root, { withFileTypes: true })) {
      if (!session.isDirectory()) continue;
      const dir = join(this.root, session.name);
      for (const name of await readdir(dir)) {
        const path = join(dir, name);
        const s = await stat(path).catch(() => undefined);
        if (s?.isFile()) found.push({ path, bytes: s.size, mtimeMs: s.mtimeMs });
      }
    }
    found.sort((a, b) => a.mtimeMs - b.mtimeMs);
    for (const { path, bytes } of found) this.track({ path, bytes });
    await this.prune();
  }

  async write(sessionId: string, batchId: string, toolUseId: string, image: CapturedImage): Promise<ScreenshotFile> {
    const dirName = sanitizeId(sessionId);
    // The counter keeps names unique when ids repeat after sanitising.
    const fileName = `${sanitizeId(batchId)}_${sanitizeId(toolUseId)}_${(this.counter++).toString(36)}.${EXTENSION[image.mediaType]}`;
    const dir = join(this.root, dirName);
    const path = join(dir, fileName);
    if (!path.startsWith(this.root + sep)) throw new Error('screenshot path escapes its directory');
    await mkdir(dir, { recursive: true });
    await writeFile(path, image.data, { mode: 0o600 });
    this.track({ path, bytes: image.data.length });
    await this.prune();
    return {
      tool_use_id: toolUseId,
      path: `${dirName}/${fileName}`,
      width: image.width,
      height: image.height,
      bytes: image.data.length,
    };
  }

  get usage(): { files: number; bytes: number } {
    return { files: this.entries.length, bytes: this.totalBytes };
  }

  private track(entry: Entry): void {
    this.entries.push(entry);
    this.totalBytes += entry.bytes;
  }

  private async prune(): Promise<void> {
    while (
      this.entries.length > 0 &&
      (this.entries.length > this.retention.maxFiles || this.totalBytes > this.retention.maxBytes)
    ) {
      const oldest = this.entries.shift()!;
      this.totalBytes -= oldest.bytes;
      await rm(oldest.path, { force: true }).catch((err: unknown) =>
        this.log.warn('could not remove old screenshot', { error: String(err) }),
      );
    }
  }
}
