/**
 * Downloads handed to the harness (docs/PROTOCOL.md "Downloads"), end to
 * end: a real page in real Chromium downloads a binary file from a local
 * test server; the daemon keeps it under the `download_id` its
 * `download_completed` carried; the harness lists it and fetches it over the
 * daemon's HTTP routes (the client library, and raw requests for the
 * headers), byte for byte. Another session can neither list nor fetch it;
 * nothing is left once the session ends. A recorded session gets a line per
 * kept download, and its content only when asked.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { DeskbatchClient } from '../src/client/client.ts';
import { DownloadError, type DownloadInfo } from '../src/client/index.ts';
import { downloadsUrl, listDownloads, saveDownload } from '../src/client/downloads.ts';
import { DeskbatchBrowserToolset } from '../src/sdk/index.ts';
import { ZipReader } from '../src/browser/zip.ts';
import type { BatchResult, ToolUse } from '../src/base/protocol.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { TEST_TOKEN, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { until, within } from '../testkit/wait.ts';
import { browserUse as use, startWebServer, type WebServer } from '../testkit/web.ts';

const MiB = 1024 ** 2;
const FILE_BYTES = 10 * MiB;
/** Its name as the server gives it (RFC 5987): not ASCII, with a space. */
const NAME = 'Résumé données ü.bin';

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** Every file under `dir`, recursively. */
async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name));
}

interface Raw {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  bytes: Buffer;
}

/** One GET to the daemon's HTTP port, as a harness without the client library sends it (curl). */
function rawGet(d: TestDaemon, path: string): Promise<Raw> {
  const url = new URL(d.url);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: url.hostname, port: url.port, path, headers: { authorization: `Bearer ${TEST_TOKEN}` } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, bytes: Buffer.concat(chunks) }),
        );
      },
    );
    req.on('error', reject);
    req.end();
  });
}

let batches = 0;
async function run(client: DeskbatchClient, toolUses: ToolUse[]): Promise<BatchResult> {
  const { result } = await client.runBatch(toolUses, { batchId: `f${batches++}` });
  return assertApiValid(toolUses, result);
}

/** The `download_completed` changes a result carried. */
function completedIn(result: BatchResult): { download_id: string; size_bytes?: number }[] {
  const out: { download_id: string; size_bytes?: number }[] = [];
  for (const r of result.tool_results) {
    for (const block of (Array.isArray(r.content) ? r.content : []) as {
      state_changes?: { type: string; download_id: string; size_bytes?: number }[];
    }[]) {
      for (const c of block.state_changes ?? []) if (c.type === 'download_completed') out.push(c);
    }
  }
  return out;
}

function serveFile(web: WebServer, bytes: Buffer): void {
  web.route('/favicon.ico', { status: 204, body: '' });
  web.route('/file.bin', {
    headers: {
      'content-type': 'application/octet-stream',
      'content-disposition': `attachment; filename="resume.bin"; filename*=UTF-8''${encodeURIComponent(NAME)}`,
      'content-length': String(bytes.length),
    },
    body: bytes,
  });
  // A page that downloads the file once it has loaded, as a page's "Export" button would.
  web.route(
    '/get',
    `<title>Get</title><script>onload = () => {
       const a = document.createElement('a'); a.href = '/file.bin'; a.download = ''; document.body.append(a); a.click();
     };</script>`,
  );
}

/** Reads the page until the session's results have reported a completed download; that change. */
async function downloadOnce(client: DeskbatchClient, web: WebServer): Promise<{ download_id: string }> {
  const first = completedIn(await run(client, [use('navigate', { url: `${web.origin}/get` })]))[0];
  if (first) return first;
  return until('download_completed', async () => completedIn(await run(client, [use('get_page_text')]))[0], {
    timeoutMs: 60_000,
  });
}

describe('downloads handed to the harness', () => {
  let web: WebServer;
  let d: TestDaemon;
  const bytes = randomBytes(FILE_BYTES);
  const clients: DeskbatchClient[] = [];
  const connect = async (): Promise<DeskbatchClient> => {
    const c = await DeskbatchClient.connect(d.url, { token: TEST_TOKEN, reconnect: false });
    clients.push(c);
    return c;
  };

  before(async () => {
    web = await startWebServer();
    serveFile(web, bytes);
    d = await startTestDaemon({ display: undefined, browser: 'headless', sessionGraceMs: 300 });
  });
  after(async () => {
    for (const c of clients) await c.close().catch(() => undefined);
    await d?.close();
    await web?.close();
  });

  test('a 10 MiB binary download is fetched by its download_id with the same sha256; another session cannot', async () => {
    const a = await connect();
    const completed = await downloadOnce(a, web);
    assert.match(completed.download_id, /^dl-[0-9]+$/);

    // The list: by the id download_completed carried, with the name the server gave and the bytes' hash.
    const list = await a.downloads();
    assert.deepEqual(
      list.map(({ created_at: _at, ...rest }) => rest),
      [
        {
          download_id: completed.download_id,
          name: NAME,
          media_type: 'application/octet-stream',
          size: FILE_BYTES,
          sha256: sha256(bytes),
          state: 'complete',
        } satisfies Omit<DownloadInfo, 'created_at'>,
      ],
    );

    // Fetched as a stream through the client library: byte for byte.
    const fetched = await a.fetchDownload(completed.download_id);
    assert.equal(fetched.name, NAME);
    assert.equal(fetched.size, FILE_BYTES);
    const chunks: Buffer[] = [];
    for await (const c of fetched.body as AsyncIterable<Buffer>) chunks.push(c);
    const got = Buffer.concat(chunks);
    assert.equal(sha256(got), sha256(bytes));
    assert.ok(got.equals(bytes));

    // Written to a file here, checked against the daemon's size and sha256.
    const local = await mkdtemp(join(tmpdir(), 'deskbatch-fetched-'));
    try {
      const saved = await a.fetchDownload(completed.download_id, { path: join(local, 'out.bin') });
      assert.equal(saved.sha256, sha256(bytes));
      assert.ok((await readFile(join(local, 'out.bin'))).equals(bytes));
    } finally {
      await rm(local, { recursive: true, force: true });
    }

    // The SDK's browser toolset class over the same session: the same list, and the file.
    const sdk = new DeskbatchBrowserToolset(a);
    assert.deepEqual(await sdk.downloads(), list);
    const viaSdk = await mkdtemp(join(tmpdir(), 'deskbatch-fetched-'));
    try {
      await sdk.fetchDownload(completed.download_id, { path: join(viaSdk, 'sdk.bin') });
      assert.equal(sha256(await readFile(join(viaSdk, 'sdk.bin'))), sha256(bytes));
    } finally {
      await rm(viaSdk, { recursive: true, force: true });
    }

    // As curl sees it: the headers a harness saves the file by.
    const raw = await rawGet(d, `/v1/sessions/${a.sessionId}/downloads/${completed.download_id}`);
    assert.equal(raw.status, 200);
    assert.equal(raw.headers['content-length'], String(FILE_BYTES));
    assert.equal(raw.headers['content-type'], 'application/octet-stream');
    assert.equal(
      raw.headers['content-disposition'],
      `attachment; filename="R_sum_ donn_es _.bin"; filename*=UTF-8''${encodeURIComponent(NAME)}`,
    );
    assert.equal(raw.headers['x-content-sha256'], sha256(bytes));
    assert.ok(raw.bytes.equals(bytes));

    // Another session: lists nothing, and the same id is not found there.
    const b = await connect();
    assert.deepEqual(await b.downloads(), []);
    await assert.rejects(
      b.fetchDownload(completed.download_id),
      (e: unknown) => e instanceof DownloadError && e.code === 'download_not_found' && e.status === 404,
    );
    const other = await rawGet(d, `/v1/sessions/${b.sessionId}/downloads/${completed.download_id}`);
    assert.equal(other.status, 404);
    assert.equal(JSON.parse(other.bytes.toString()).error, 'download_not_found');
    // Neither an unknown nor a malformed id, nor a session id that is not live, reaches a file.
    for (const path of [
      `/v1/sessions/${a.sessionId}/downloads/dl-999`,
      `/v1/sessions/${a.sessionId}/downloads/..%2F..%2Fetc%2Fpasswd`,
      `/v1/sessions/${a.sessionId}/downloads/doc_x`,
      `/v1/sessions/s_not_live/downloads/${completed.download_id}`,
    ]) {
      const r = await rawGet(d, path);
      assert.equal(r.status, 404, path);
      assert.equal(r.bytes.length < 200, true, path);
    }

    // The metrics count the bytes kept (in) and fetched (out): four fetches above.
    const metrics = (await rawGet(d, '/metrics')).bytes.toString();
    const counted = (direction: string): number =>
      Number(
        new RegExp(`^deskbatch_download_bytes_total\\{direction="${direction}"\\} (\\d+)`, 'm').exec(metrics)?.[1],
      );
    assert.equal(counted('in'), FILE_BYTES);
    assert.equal(counted('out'), 4 * FILE_BYTES);

    // All of them in one zip, streamed with its length known: the file under its name, its CRC good (unzip -t).
    const zip = await rawGet(d, `/v1/sessions/${a.sessionId}/downloads.zip`);
    assert.equal(zip.status, 200);
    assert.equal(zip.headers['content-type'], 'application/zip');
    assert.equal(zip.headers['content-length'], String(zip.bytes.length));
    const zipDir = await mkdtemp(join(tmpdir(), 'deskbatch-zip-'));
    try {
      await writeFile(join(zipDir, 'all.zip'), zip.bytes);
      execFileSync('unzip', ['-tq', join(zipDir, 'all.zip')]);
      const reader = await ZipReader.open(join(zipDir, 'all.zip'));
      try {
        assert.deepEqual(
          reader.entries.map((e) => e.name),
          [NAME],
        );
        assert.ok((await reader.read(NAME)).equals(bytes));
      } finally {
        await reader.close();
      }
    } finally {
      await rm(zipDir, { recursive: true, force: true });
    }
    // The client library's zip: the same bytes.
    const viaClient = await a.fetchDownloadsZip();
    const zipChunks: Buffer[] = [];
    for await (const c of viaClient.body as AsyncIterable<Buffer>) zipChunks.push(c);
    assert.equal(viaClient.size, zip.bytes.length);
    assert.ok(Buffer.concat(zipChunks).equals(zip.bytes));
    // The other session's zip is empty.
    const otherZip = await rawGet(d, `/v1/sessions/${b.sessionId}/downloads.zip`);
    assert.equal(otherZip.status, 200);
    assert.equal(otherZip.bytes.length, 22, 'an archive with no entry: its end record alone');

    // The session ends: its downloads go with it, from the list, the route and the disk.
    const session = a.sessionId;
    await a.close();
    await until('the session to end', () => !d.daemon.server.findSession(session));
    assert.equal((await rawGet(d, `/v1/sessions/${session}/downloads`)).status, 404);
    // The session leaves the server's map before its files' folder is removed (an rm on the thread pool).
    await until('its files to leave the disk', async () => (await filesUnder(d.daemon.files.root)).length === 0, {
      seen: () => filesUnder(d.daemon.files.root),
    });
  });
});

describe('a paused harness: the daemon reads the file only as fast as the harness takes it', () => {
  test('40 MiB fetched by a reader that pauses: the daemon stops reading far short of the file, then all arrives', async () => {
    const web = await startWebServer();
    const big = Buffer.alloc(40 * MiB, 0x5a);
    big.write('the first bytes', 0);
    serveFile(web, big);
    const d = await startTestDaemon({ display: undefined, browser: 'headless' });
    const c = await DeskbatchClient.connect(d.url, { token: TEST_TOKEN, reconnect: false });
    try {
      const { download_id } = await downloadOnce(c, web);
      const out = async (): Promise<number> => {
        const text = (await rawGet(d, '/metrics')).bytes.toString();
        return Number(/^deskbatch_download_bytes_total\{direction="out"\} (\d+)/m.exec(text)?.[1] ?? 0);
      };
      const { body } = await c.fetchDownload(download_id);
      body.pause();
      // Read nothing more: the daemon's reading stops once the socket's buffers are full.
      let last = -1;
      let since = performance.now();
      const held = await until(
        'the daemon to stop reading',
        async () => {
          const now = await out();
          if (now !== last) [last, since] = [now, performance.now()];
          return now > 0 && performance.now() - since > 500 ? now : undefined;
        },
        { timeoutMs: 30_000 },
      );
      assert.ok(held < big.length / 2, `read ${held} of ${big.length} bytes with the harness paused`);
      const hash = createHash('sha256');
      for await (const chunk of body as AsyncIterable<Buffer>) hash.update(chunk);
      assert.equal(hash.digest('hex'), sha256(big));
      assert.equal(await out(), big.length);
    } finally {
      await c.close().catch(() => undefined);
      await d.close();
      await web.close();
    }
  });
});

describe('a sandboxed pool desktop: the download is kept by the daemon, and goes with the session and its desktop', () => {
  let web: WebServer;
  let d: TestDaemon;
  const bytes = randomBytes(2 * MiB);
  before(async () => {
    web = await startWebServer();
    serveFile(web, bytes);
    d = await startTestDaemon({
      browser: 'headless',
      desktops: { mode: 'pool', max: 1, warm: 1, sizes: [{ width: 1024, height: 640 }] },
      sessionGraceMs: 300,
    });
  });
  after(async () => {
    await d?.close();
    await web?.close();
  });

  test('fetched byte for byte from a sandboxed desktop, then gone once the session ended', async () => {
    const a = await d.connect();
    const welcome = await within(a.hello(undefined, { desktop: {} }), 'a pool desktop', 60_000);
    const desktop = welcome.desktop?.id;
    assert.ok(desktop);
    const url = downloadsUrl(d.url, welcome.session_id);
    await a.batch('p-get', [use('navigate', { url: `${web.origin}/get` })]);
    const [kept] = await until(
      'the download to be kept',
      async () => {
        await a.batch(`p-read-${batches++}`, [use('get_page_text')]);
        const list = await listDownloads(url, TEST_TOKEN);
        return list.length ? list : undefined;
      },
      { timeoutMs: 60_000 },
    );
    assert.equal(kept!.state, 'complete');
    assert.equal(kept!.sha256, sha256(bytes));
    const local = await mkdtemp(join(tmpdir(), 'deskbatch-fetched-'));
    try {
      await saveDownload(url, TEST_TOKEN, kept!.download_id, join(local, 'pool.bin'));
      assert.ok((await readFile(join(local, 'pool.bin'))).equals(bytes));
    } finally {
      await rm(local, { recursive: true, force: true });
    }
    a.close(); // dropped: the session ends after its grace period, and its desktop is torn down
    await until('the desktop to be recycled', () => !d.daemon.desktops.list().some((x) => x.id === desktop), {
      timeoutMs: 30_000,
    });
    assert.deepEqual(await filesUnder(d.daemon.files.root), []);
    await assert.rejects(
      listDownloads(url, TEST_TOKEN),
      (e: unknown) => e instanceof DownloadError && e.code === 'session_not_found',
    );
  });
});

describe('recorded sessions: a line per kept download, its content only when asked', () => {
  for (const copy of [false, true]) {
    test(copy ? 'with --record-downloads, a copy beside the trajectory' : 'by default, the line only', async () => {
      const dir = await mkdtemp(join(tmpdir(), 'deskbatch-rec-dl-'));
      const web = await startWebServer();
      const bytes = randomBytes(64 * 1024);
      serveFile(web, bytes);
      const d = await startTestDaemon({
        display: undefined,
        browser: 'headless',
        recording: { mode: 'all', dir, video: false, trace: false, downloads: copy },
      });
      const c = await DeskbatchClient.connect(d.url, { token: TEST_TOKEN, reconnect: false });
      try {
        const { download_id } = await downloadOnce(c, web);
        const found = await until('the download_kept line', async () => {
          const file = (await filesUnder(dir)).find((f) => f.endsWith('trajectory.jsonl'));
          const text = file ? await readFile(file, 'utf8') : '';
          return text.includes('"download_kept"') ? text : undefined;
        });
        const line = found
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as Record<string, unknown>)
          .find((l) => l.type === 'download_kept')!;
        assert.deepEqual(
          { ...line, at: 0 },
          {
            type: 'download_kept',
            at: 0,
            download_id,
            name: NAME,
            media_type: 'application/octet-stream',
            size: bytes.length,
            sha256: sha256(bytes),
            ...(copy ? { path: `downloads/${download_id}` } : {}),
          },
        );
        const copies = await until('the copy, if asked for, to be written', async () => {
          const files = (await filesUnder(dir)).filter((f) => f.includes(join('downloads', '')));
          return !copy || files.length ? files : undefined;
        });
        if (copy) {
          assert.equal(copies.length, 1);
          assert.ok((await readFile(copies[0]!)).equals(bytes));
        } else assert.deepEqual(copies, []);
      } finally {
        await c.close().catch(() => undefined);
        await d.close();
        await web.close();
        await rm(dir, { recursive: true, force: true });
      }
    });
  }
});
