/**
 * Downloads are bounded (docs/SECURITY.md "Downloads"): per session at most
 * `maxDownloads` downloads and `maxDownloadBytes` bytes are saved, the rest
 * are cancelled and reported failed with a fixed text; a session's folder goes
 * when the session ends, and folders of an earlier run when the daemon
 * starts; `download_completed.path` is shown only with `exposeDownloadPaths`.
 * A real daemon drives headless Chromium against a local web server; every
 * batch_result is checked against the API's rules.
 */
import assert from 'node:assert/strict';
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ConfigError, resolveConfig, type DaemonConfig } from '../src/base/config.ts';
import type { BatchResult, ToolUse } from '../src/base/protocol.ts';
import { sanitizeId } from '../src/base/screenshot-store.ts';
import { copyNoFollow } from '../src/browser/downloads.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { TEST_TOKEN, type TestClient } from '../testkit/daemon.ts';
import { until } from '../testkit/wait.ts';
import { browserUse as use, startBrowserFixture, type BrowserFixture, type WebServer } from '../testkit/web.ts';
import { failsWith } from '../testkit/errors.ts';

const LIMIT_ERROR = "the session's download limit was reached";
const LOOP_DOWNLOADS = 10;
const MAX_DOWNLOADS = 3;
const MAX_BYTES = 100_000;
const CHUNK_BYTES = 60_000;

interface Change {
  type: string;
  download_id?: string;
  url?: string;
  path?: string;
  size_bytes?: number;
  error?: string;
}
interface Block {
  type: string;
  text?: string;
  state_changes?: Change[];
}

/** What one session's results showed: the latest change per download, and every text. */
class Seen {
  readonly downloads = new Map<string, Change>();
  /** The texts of each result, one list per tool_result. */
  readonly resultTexts: string[][] = [];
  /** Every result as sent, to look for what must never be in one. */
  readonly raw: string[] = [];

  add(result: BatchResult): void {
    for (const r of result.tool_results) {
      this.raw.push(JSON.stringify(r));
      const texts: string[] = [];
      this.resultTexts.push(texts);
      for (const block of (Array.isArray(r.content) ? r.content : []) as Block[]) {
        if (block.type === 'text' && block.text) texts.push(block.text);
        for (const c of block.state_changes ?? []) if (c.download_id) this.downloads.set(c.download_id, c);
      }
    }
  }

  get texts(): string[] {
    return this.resultTexts.flat();
  }

  get ended(): Change[] {
    return [...this.downloads.values()].filter((c) => c.type !== 'download_started');
  }

  of(type: string): Change[] {
    return [...this.downloads.values()].filter((c) => c.type === type);
  }
}

let n = 0;
async function run(client: TestClient, toolUses: ToolUse[], seen: Seen): Promise<BatchResult> {
  const { result } = await client.batch(`dl${n++}`, toolUses);
  const checked = assertApiValid(toolUses, result);
  seen.add(checked);
  return checked;
}

/** Reads the page until `count` downloads of the session have ended (completed or failed). */
async function untilEnded(client: TestClient, seen: Seen, count: number): Promise<void> {
  await until(
    `${count} downloads to end`,
    async () => {
      await run(client, [use('get_page_text')], seen);
      return seen.ended.length >= count;
    },
    { timeoutMs: 30_000, seen: () => [...seen.downloads.values()] },
  );
}

const exists = (path: string): Promise<boolean> =>
  lstat(path).then(
    () => true,
    () => false,
  );

function routes(web: WebServer): void {
  web.route('/favicon.ico', { status: 204, body: '' });
  web.route('/page', '<title>Page</title><p>a page</p>');
  const attachment = (name: string, body: Buffer | string) => ({
    headers: {
      'content-type': 'application/octet-stream',
      'content-disposition': `attachment; filename="${name}"`,
      'content-length': String(Buffer.byteLength(body)),
    },
    body,
  });
  web.route('/tiny', attachment('tiny.txt', 'tiny!'));
  web.route('/chunk', attachment('chunk.bin', Buffer.alloc(CHUNK_BYTES, 0x61)));
  web.route('/huge', attachment('huge.bin', Buffer.alloc(1_000_000, 0x62)));
  // A page that starts downloads in a loop as soon as it has loaded.
  web.route(
    '/loop',
    `<title>Loop</title><script>onload = () => { for (let i = 0; i < ${LOOP_DOWNLOADS}; i++) {
       const a = document.createElement('a'); a.href = '/tiny?' + i; a.download = ''; document.body.append(a); a.click();
     } };</script>`,
  );
}

describe('download caps and retention', () => {
  let f: BrowserFixture;
  let dir: string;
  let outside: string;
  const seen1 = new Seen();
  let session1: string;
  /** Every connection of the daemon: all close for its sessions to end. */
  const clients: TestClient[] = [];
  const connect = async (): Promise<{ client: TestClient; session: string }> => {
    const client = await f.daemon.connect();
    clients.push(client);
    return { client, session: (await client.hello()).session_id };
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'deskbatch-dl-caps-'));
    outside = await mkdtemp(join(tmpdir(), 'deskbatch-dl-outside-'));
    await writeFile(join(outside, 'keep.txt'), 'keep');
    // What an earlier run left: a session folder; and what is not ours: a link out of the downloads dir,
    // and a folder holding more than downloads (a link out among them).
    await mkdir(join(dir, 'old-session'));
    await writeFile(join(dir, 'old-session', 'dl-1-old.bin'), 'old');
    await symlink(outside, join(dir, 'link-out'));
    await mkdir(join(dir, 'not-ours'));
    await writeFile(join(dir, 'not-ours', 'notes.txt'), 'notes');
    await symlink(outside, join(dir, 'not-ours', 'link-in'));
    f = await startBrowserFixture({
      sessionGraceMs: 200,
      browserSettings: { downloadsDir: dir, maxDownloads: MAX_DOWNLOADS, maxDownloadBytes: MAX_BYTES },
    });
    routes(f.web);
    session1 = (await f.client.hello()).session_id;
  });
  after(async () => {
    await f?.close();
    await rm(dir, { recursive: true, force: true });
    await rm(outside, { recursive: true, force: true });
  });

  test('at start, session folders of an earlier run go; links and folders holding more are left alone', async () => {
    await until('the old session folder to be removed', async () => !(await exists(join(dir, 'old-session'))));
    assert.ok((await lstat(join(dir, 'link-out'))).isSymbolicLink(), 'a link is left alone');
    assert.deepEqual((await readdir(join(dir, 'not-ours'))).sort(), ['link-in', 'notes.txt']);
    assert.equal(await readFile(join(outside, 'keep.txt'), 'utf8'), 'keep');
  });

  test('a page looping downloads gets at most the cap saved; the rest fail with a fixed text', async () => {
    await run(f.client, [use('navigate', { url: `${f.web.origin}/loop` })], seen1);
    await untilEnded(f.client, seen1, LOOP_DOWNLOADS);
    const completed = seen1.of('download_completed');
    const failed = seen1.of('download_failed');
    assert.equal(completed.length, MAX_DOWNLOADS, JSON.stringify(completed));
    assert.equal(failed.length, LOOP_DOWNLOADS - MAX_DOWNLOADS, JSON.stringify(failed));
    for (const c of failed) assert.equal(c.error, LIMIT_ERROR);
    for (const c of completed) assert.equal(c.size_bytes, 5);
    // Only what was saved is on disk.
    const files = await readdir(join(dir, sanitizeId(session1)));
    assert.equal(files.length, MAX_DOWNLOADS, files.join(', '));
    // The model is told on a result that holds text, once per result however many were refused
    // meanwhile (refusals after that result are told again on a later one: how many results that
    // takes depends on how fast Chromium starts the page's downloads, so it is not counted).
    const notice = `A download was cancelled: this session reached its download limit (${MAX_DOWNLOADS} downloads, ${MAX_BYTES} bytes).`;
    const perResult = seen1.resultTexts.map((texts) => texts.filter((t) => /download limit/.test(t)));
    assert.ok(
      perResult.some((n) => n.length > 0),
      seen1.texts.join('\n'),
    );
    for (const n of perResult) assert.ok(n.length <= 1, `one notice per result: ${n.join(' | ')}`);
    for (const n of perResult.flat()) assert.equal(n, notice);
  });

  test('download_completed carries no path by default, and no result names the downloads dir', () => {
    const completed = seen1.of('download_completed');
    assert.ok(completed.length > 0);
    for (const c of completed) assert.equal('path' in c, false, JSON.stringify(c));
    for (const r of seen1.raw) assert.ok(!r.includes(dir), r);
  });

  test('a download that would pass the byte cap is cancelled or deleted, and reported failed', async () => {
    const { client, session } = await connect();
    const seen = new Seen();
    // One at a time: each download ends before the next starts.
    await run(client, [use('navigate', { url: `${f.web.origin}/chunk` })], seen);
    await untilEnded(client, seen, 1);
    assert.deepEqual(
      seen.of('download_completed').map((c) => c.size_bytes),
      [CHUNK_BYTES],
    );
    // 2 × 60,000 bytes would pass 100,000; so would 1,000,000 (announced by Content-Length).
    await run(client, [use('navigate', { url: `${f.web.origin}/chunk` })], seen);
    await untilEnded(client, seen, 2);
    await run(client, [use('navigate', { url: `${f.web.origin}/huge` })], seen);
    await untilEnded(client, seen, 3);
    const failed = seen.of('download_failed');
    assert.deepEqual(
      failed.map((c) => [c.url, c.error]),
      [
        [`${f.web.origin}/chunk`, LIMIT_ERROR],
        [`${f.web.origin}/huge`, LIMIT_ERROR],
      ],
    );
    const folder = join(dir, sanitizeId(session));
    const files = await readdir(folder);
    assert.equal(files.length, 1, files.join(', '));
    assert.equal((await stat(join(folder, files[0]!))).size, CHUNK_BYTES);
    assert.ok(
      seen.texts.some((t) => /download limit/.test(t)),
      seen.texts.join('\n'),
    );
  });

  test("a session's download folder is removed when the session ends", async () => {
    const { client, session } = await connect();
    const seen = new Seen();
    await run(client, [use('navigate', { url: `${f.web.origin}/tiny` })], seen);
    await untilEnded(client, seen, 1);
    assert.equal(seen.of('download_completed').length, 1);
    const folders = [session1, session].map((id) => join(dir, sanitizeId(id)));
    for (const folder of folders) assert.ok(await exists(folder), folder);
    // Every connection closes; each session ends after sessionGraceMs.
    for (const c of [f.client, ...clients]) c.close();
    await until('every session to end', () => f.daemon.daemon.server.sessionCount === 0, { timeoutMs: 30_000 });
    await until(
      'the session folders to be removed',
      async () => (await readdir(dir)).every((name) => name === 'link-out' || name === 'not-ours'),
      { timeoutMs: 30_000, seen: () => readdir(dir) },
    );
    assert.equal(await readFile(join(outside, 'keep.txt'), 'utf8'), 'keep');
  });
});

describe('download paths with exposeDownloadPaths', () => {
  let f: BrowserFixture;
  let dir: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'deskbatch-dl-paths-'));
    f = await startBrowserFixture({ browserSettings: { downloadsDir: dir, exposeDownloadPaths: true } });
    routes(f.web);
  });
  after(async () => {
    await f?.close();
    await rm(dir, { recursive: true, force: true });
  });

  test('download_completed carries the saved file path', async () => {
    const session = (await f.client.hello()).session_id;
    const seen = new Seen();
    await run(f.client, [use('navigate', { url: `${f.web.origin}/tiny` })], seen);
    await untilEnded(f.client, seen, 1);
    const [done] = seen.of('download_completed');
    assert.ok(done?.path, JSON.stringify(done));
    assert.ok(done.path.startsWith(join(dir, sanitizeId(session)) + '/'), done.path);
    assert.equal(await readFile(done.path, 'utf8'), 'tiny!');
  });
});

describe('download caps in the config', () => {
  const base = { token: TEST_TOKEN, tokenConfigured: true };

  test('default to 50 downloads and 500 MiB per session, paths hidden', () => {
    const { maxDownloads, maxDownloadBytes, exposeDownloadPaths }: DaemonConfig['browserSettings'] =
      resolveConfig(base).browserSettings;
    assert.deepEqual([maxDownloads, maxDownloadBytes, exposeDownloadPaths], [50, 500 * 1024 * 1024, false]);
  });

  test('must be whole numbers, 0 or more (0 refuses every download)', () => {
    assert.equal(resolveConfig({ ...base, browserSettings: { maxDownloads: 0 } }).browserSettings.maxDownloads, 0);
    assert.throws(
      () => resolveConfig({ ...base, browserSettings: { maxDownloads: -1 } }),
      failsWith(ConfigError, '--max-downloads must be a whole number, 0 or more, got -1'),
    );
    assert.throws(
      () => resolveConfig({ ...base, browserSettings: { maxDownloadBytes: NaN } }),
      failsWith(ConfigError, '--max-download-bytes must be a whole number, 0 or more, got NaN'),
    );
    assert.throws(
      () => resolveConfig({ ...base, browserSettings: { maxDownloadBytes: 1.5 } }),
      failsWith(ConfigError, '--max-download-bytes must be a whole number, 0 or more, got 1.5'),
    );
  });
});

test("a saved download is copied out of the desktop's folder only as a regular file, never through a link", async () => {
  // In a desktop's sandbox Chromium saves into a folder the desktop can write: a compromised desktop
  // could put a link to one of the daemon's files in place of the download.
  const dir = await mkdtemp(join(tmpdir(), 'deskbatch-copy-'));
  try {
    await writeFile(join(dir, 'secret'), 'the-token');
    await writeFile(join(dir, 'saved'), 'download bytes');
    await symlink(join(dir, 'secret'), join(dir, 'swapped'));
    await copyNoFollow(join(dir, 'saved'), join(dir, 'out-1'));
    assert.equal(await readFile(join(dir, 'out-1'), 'utf8'), 'download bytes');
    await assert.rejects(copyNoFollow(join(dir, 'swapped'), join(dir, 'out-2')), /ELOOP/);
    await assert.rejects(copyNoFollow(dir, join(dir, 'out-3')), /not a regular file|EISDIR/);
    assert.ok(!(await readdir(dir)).includes('out-2'), 'nothing of the link target was written');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
