/**
 * Fetching a session's downloads over the daemon's HTTP routes
 * (docs/PROTOCOL.md "Downloads"): the list, and one download's bytes as a
 * stream or written to a file here, checked against the size and SHA-256
 * the daemon hashed when it kept the file. `DeskbatchClient.downloads` and
 * `fetchDownload` call these with the client's URL, token and session.
 */
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { unlink } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { DownloadInfo } from '../base/protocol.ts';
import { DeskbatchError } from './errors.ts';
import { readBounded, refusalOf, send, sessionUrl } from './session-http.ts';

export type { DownloadInfo };

/** A download being fetched: what the daemon said of it, and its bytes as they come. */
export interface FetchedDownload {
  download_id: string;
  name: string;
  media_type: string;
  size: number;
  sha256: string;
  body: Readable;
}

/**
 * The daemon answered a download call with a refusal (`code`: `download_not_found`, `session_not_found`, or
 * `http_<status>`), or the bytes fetched were not the bytes kept (`ERR_DOWNLOAD_MISMATCH`).
 */
export class DownloadError extends DeskbatchError {
  override name = 'DownloadError';
  constructor(
    override readonly code: string,
    message: string,
    readonly status?: number,
  ) {
    super(message);
  }
}

/** Where a session's downloads are, on the daemon that `wsUrl` (`ws://host:port/v1`) names. */
export function downloadsUrl(wsUrl: string, sessionId: string): URL {
  return sessionUrl(wsUrl, sessionId, 'downloads');
}

/** Largest JSON answer read (a list). */
const MAX_ANSWER_BYTES = 1024 * 1024;

const get = (url: URL, token: string, signal: AbortSignal | undefined): Promise<IncomingMessage> =>
  send(url, token, signal ? { signal } : {});

async function refused(res: IncomingMessage): Promise<DownloadError> {
  const { code, message, status } = await refusalOf(res);
  return new DownloadError(code, message, status);
}

export async function listDownloads(url: URL, token: string): Promise<DownloadInfo[]> {
  const res = await get(url, token, undefined);
  if (res.statusCode !== 200) throw await refused(res);
  return (JSON.parse((await readBounded(res, MAX_ANSWER_BYTES)).toString()) as { downloads: DownloadInfo[] }).downloads;
}

/** The name in a Content-Disposition: `filename*` (RFC 5987, UTF-8) when given, else `filename`. */
function dispositionName(header: string | undefined): string {
  const exact = /filename\*=UTF-8''([^;]+)/i.exec(header ?? '')?.[1];
  if (exact) {
    try {
      return decodeURIComponent(exact);
    } catch {
      // Not percent-encoding the daemon makes: the plain name below.
    }
  }
  return /filename="([^"]*)"/.exec(header ?? '')?.[1] ?? '';
}

/** One download's bytes as a stream, and what the daemon says of them (its headers). */
export async function openDownload(
  url: URL,
  token: string,
  downloadId: string,
  signal?: AbortSignal,
): Promise<FetchedDownload> {
  const target = new URL(url);
  target.pathname += `/${encodeURIComponent(downloadId)}`;
  const res = await get(target, token, signal);
  if (res.statusCode !== 200) throw await refused(res);
  return {
    download_id: downloadId,
    name: dispositionName(res.headers['content-disposition']),
    media_type: res.headers['content-type'] ?? 'application/octet-stream',
    size: Number(res.headers['content-length']),
    sha256: String(res.headers['x-content-sha256'] ?? ''),
    body: res,
  };
}

/** Every download the session kept, as one zip (stored entries), streamed; `size` is its Content-Length. */
export async function openDownloadsZip(
  url: URL,
  token: string,
  signal?: AbortSignal,
): Promise<{ size: number; body: Readable }> {
  const target = new URL(url);
  target.pathname += '.zip';
  const res = await get(target, token, signal);
  if (res.statusCode !== 200) throw await refused(res);
  return { size: Number(res.headers['content-length']), body: res };
}

/**
 * Writes one download to `path` here, streamed; rejects with DownloadError `ERR_DOWNLOAD_MISMATCH` (and
 * removes the file) when the bytes written are not the size and SHA-256 the daemon kept.
 */
export async function saveDownload(
  url: URL,
  token: string,
  downloadId: string,
  path: string,
  signal?: AbortSignal,
): Promise<Omit<FetchedDownload, 'body'>> {
  const { body, ...info } = await openDownload(url, token, downloadId, signal);
  const hash = createHash('sha256');
  let size = 0;
  const count = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      size += chunk.length;
      hash.update(chunk);
      done(null, chunk);
    },
  });
  try {
    const file = createWriteStream(path, { mode: 0o600 });
    await (signal ? pipeline(body, count, file, { signal }) : pipeline(body, count, file));
    const sha256 = hash.digest('hex');
    if (size !== info.size || sha256 !== info.sha256) {
      throw new DownloadError(
        'ERR_DOWNLOAD_MISMATCH',
        `the bytes fetched (${size}, sha256 ${sha256}) are not the ones kept (${info.size}, sha256 ${info.sha256})`,
      );
    }
  } catch (err) {
    await unlink(path).catch(() => undefined);
    throw err;
  }
  return info;
}
