/**
 * Staged documents (docs/PROTOCOL.md "Staged documents"), end to end: a
 * harness stages files for its session over the daemon's HTTP routes (the
 * client library, and raw requests for what a client library would never
 * send), and `file_upload.document_ids` hands them to a real page in real
 * Chromium, which posts the bytes it read to a local test server. Bounds,
 * bad names, other sessions' ids and ended sessions are refused; nothing is
 * left behind on the daemon's disk.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { request } from 'node:http';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { DeskbatchClient } from '../src/client/client.ts';
import { DocumentRefusedError, documentsUrl, stageDocument } from '../src/client/documents.ts';
import { DeskbatchBrowserToolset, stagedDocumentsPolicy, type FilePolicy } from '../src/sdk/index.ts';
import type { BatchResult, ToolUse, Welcome } from '../src/base/protocol.ts';
import type { Activity } from '../src/base/activity.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { TEST_TOKEN, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { until, within } from '../testkit/wait.ts';
import { startDaemonProcess, type DaemonProcess } from '../testkit/daemon-process.ts';
import { RecordingClient } from '../testkit/ws-client.ts';
import { newLogDir } from '../testkit/artifacts.ts';
import { processRuns } from '../src/base/temp-folder.ts';
import { browserUse as use, startWebServer, type WebServer } from '../testkit/web.ts';

const MiB = 1024 ** 2;
const BOUNDS = { maxPerSession: 4, maxFileBytes: 1 * MiB, maxSessionBytes: 2.5 * MiB, maxTotalBytes: 3.25 * MiB };

/** A page whose file input posts each chosen file's bytes, name and type to /received. */
const UPLOAD_PAGE = `<!doctype html><title>Upload</title>
<label>Attachment <input type="file" id="f" multiple></label>
<script>
document.getElementById('f').addEventListener('change', async (e) => {
  for (const file of e.target.files) {
    const q = 'name=' + encodeURIComponent(file.name) + '&type=' + encodeURIComponent(file.type);
    await fetch('/received?' + q, { method: 'POST', body: await file.arrayBuffer() });
  }
});
</script>`;

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** Every file under `dir`, recursively (the daemon's store: one folder per session). */
async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name));
}

interface Raw {
  status: number;
  body: { error?: string; message?: string; document_id?: string; documents?: unknown[] };
}

/** One request to the daemon's HTTP port, as a harness without the client library sends it. */
function raw(
  d: TestDaemon,
  method: string,
  path: string,
  body?: Buffer,
  headers: Record<string, string> = {},
): Promise<Raw> {
  const url = new URL(d.url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        method,
        path,
        headers: { authorization: `Bearer ${TEST_TOKEN}`, ...headers },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          const isJson = res.headers['content-type'] === 'application/json';
          resolve({
            status: res.statusCode ?? 0,
            body: isJson ? (JSON.parse(text) as Raw['body']) : { message: text },
          });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

const textOf = (r: BatchResult, i = 0): string =>
  (r.tool_results[i]!.content as { type: string; text?: string }[])
    .filter((b) => b.type === 'text')
    .map((b) => b.text)
    .join('\n');

let batches = 0;
async function run(client: DeskbatchClient, toolUses: ToolUse[]): Promise<BatchResult> {
  const { result } = await client.runBatch(toolUses, { batchId: `b${batches++}` });
  return assertApiValid(toolUses, result);
}

/** Navigates to the upload page and returns the file input's ref. */
async function fileInput(client: DeskbatchClient, web: WebServer): Promise<string> {
  const r = await run(client, [
    use('navigate', { url: `${web.origin}/upload` }),
    use('find', { query: 'file input Attachment' }),
  ]);
  const ref = /\[(ref_\d+)\]/.exec(textOf(r, 1))?.[1];
  assert.ok(ref, textOf(r, 1));
  return ref;
}

const received = (web: WebServer) => web.requests.filter((r) => r.method === 'POST' && r.path.startsWith('/received'));

describe('staged documents on a shared desktop', () => {
  let web: WebServer;
  let d: TestDaemon;
  const clients: DeskbatchClient[] = [];
  const connect = async (): Promise<DeskbatchClient> => {
    const c = await DeskbatchClient.connect(d.url, { token: TEST_TOKEN, reconnect: false });
    clients.push(c);
    return c;
  };

  before(async () => {
    web = await startWebServer();
    web.route('/upload', UPLOAD_PAGE);
    web.route('/received', { status: 204, body: '' });
    d = await startTestDaemon({
      display: undefined,
      browser: 'headless',
      browserSettings: { enable: ['file_upload'] },
      documents: BOUNDS,
      sessionGraceMs: 500,
    });
  });
  after(async () => {
    for (const c of clients) await c.close().catch(() => undefined);
    await d?.close();
    await web?.close();
  });

  test('a staged document reaches the page byte for byte: binary, a non-ASCII name, at the size bound', async () => {
    const client = await connect();
    const bytes = Buffer.concat([
      Buffer.from(Array.from({ length: 256 }, (_, i) => i)),
      randomBytes(BOUNDS.maxFileBytes - 256),
    ]);
    // Given decomposed (NFD): the daemon keeps the composed form, as the page will read it.
    const name = 'Résumé – 日本語 ü.bin'.normalize('NFD');
    const info = await client.stage(name, bytes, { mediaType: 'application/x-deskbatch-test' });
    assert.equal(info.size, BOUNDS.maxFileBytes);
    assert.equal(info.sha256, sha256(bytes));
    assert.equal(info.name, name.normalize('NFC'));
    assert.equal(info.media_type, 'application/x-deskbatch-test');
    assert.match(info.document_id, /^doc_[A-Za-z0-9_-]{22}$/);
    assert.deepEqual(
      (await client.documents()).map((x) => x.document_id),
      [info.document_id],
    );

    const ref = await fileInput(client, web);
    const r = await run(client, [
      use('file_upload', { target: { type: 'ref', ref }, document_ids: [info.document_id] }),
    ]);
    assert.equal(r.tool_results[0]!.is_error ?? false, false, textOf(r));
    assert.equal(textOf(r).split('\n')[0], 'Uploaded.');
    const got = await until('the page to post the file it read', () => received(web)[0]);
    const q = new URL(got.path, web.origin).searchParams;
    assert.equal(q.get('name'), name.normalize('NFC'));
    assert.equal(q.get('type'), 'application/x-deskbatch-test');
    assert.equal(got.bytes.length, bytes.length);
    assert.ok(got.bytes.equals(bytes), 'the bytes the page read are the bytes staged');
    // The metrics count the bytes in (staged) and out (handed to the page).
    const metrics = (await raw(d, 'GET', '/metrics')).body.message ?? '';
    const counted = (direction: string): number =>
      Number(new RegExp(`^deskbatch_staged_bytes_total\\{direction="${direction}"\\} (\\d+)`, 'm').exec(metrics)?.[1]);
    assert.ok(counted('in') >= bytes.length && counted('out') >= bytes.length, metrics.slice(0, 200));
    // The client library can take a stream and a file as well as bytes; a file one byte over the bound is refused.
    const over = client.stage('over.bin', Readable.from([randomBytes(BOUNDS.maxFileBytes + 1)]));
    await assert.rejects(over, (e: unknown) => e instanceof DocumentRefusedError && e.code === 'file_too_large');
    const local = join(await mkdtemp(join(tmpdir(), 'deskbatch-local-')), 'local.txt');
    await writeFile(local, 'from a file of the harness\n');
    const fromPath = await client.stage('local.txt', { path: local }, { mediaType: 'text/plain' });
    assert.equal(fromPath.sha256, sha256(Buffer.from('from a file of the harness\n')));
    await rm(dirname(local), { recursive: true });
    await client.removeDocument(fromPath.document_id);
    assert.equal((await client.documents()).length, 1);
    await client.removeDocument(info.document_id);
    assert.deepEqual(await client.documents(), []);
    assert.deepEqual(await filesUnder(d.daemon.files.root), []);
  });

  test("another session's id is refused naming the index, and the other session never sees the file", async () => {
    const a = await connect();
    const b = await connect();
    const secret = Buffer.from('for B only\n');
    const theirs = await b.stage('b.txt', secret, { mediaType: 'text/plain' });
    const ref = await fileInput(a, web);
    const before = received(web).length;
    for (const input of [
      { document_ids: [theirs.document_id] },
      { document_ids: ['doc_never-staged'] },
      { document_ids: ['../../etc/passwd'] },
    ]) {
      const r = await run(a, [use('file_upload', { target: { type: 'ref', ref }, ...input })]);
      assert.equal(r.tool_results[0]!.is_error, true);
      assert.equal(textOf(r), 'document_ids[0] is not a document this session staged; nothing was uploaded.');
    }
    // The SDK's order: paths first (this daemon has no upload roots), then documents.
    const both = await run(a, [
      use('file_upload', { target: { type: 'ref', ref }, paths: ['/etc/passwd'], document_ids: [theirs.document_id] }),
    ]);
    assert.equal(textOf(both), 'file_upload has no configured upload roots');
    // A's own document at index 0 and B's at 1: refused at index 1, nothing uploaded.
    const own = await a.stage('a.txt', Buffer.from('A\n'));
    const mixed = await run(a, [
      use('file_upload', { target: { type: 'ref', ref }, document_ids: [own.document_id, theirs.document_id] }),
    ]);
    assert.match(textOf(mixed), /^document_ids\[1\] is not a document this session staged/);
    assert.equal(received(web).length, before, 'nothing reached the page');

    // A can neither list, nor remove, B's document; B still has it.
    assert.deepEqual(
      (await a.documents()).map((x) => x.document_id),
      [own.document_id],
    );
    const aDocs = documentsUrl(d.url, a.sessionId).pathname;
    assert.equal((await raw(d, 'DELETE', `${aDocs}/${theirs.document_id}`)).status, 404);
    assert.deepEqual(
      (await b.documents()).map((x) => x.document_id),
      [theirs.document_id],
    );
    await a.removeDocument(own.document_id);
    await b.removeDocument(theirs.document_id);
  });

  test("the SDK's browser toolset: document_ids pass with stagedDocumentsPolicy, and the daemon vets them", async () => {
    const connect = (filePolicy?: FilePolicy) =>
      DeskbatchBrowserToolset.connect({
        url: d.url,
        token: TEST_TOKEN,
        reconnect: false,
        configs: { file_upload: { enabled: true } },
        confirm: () => true,
        ...(filePolicy ? { filePolicy } : {}),
      });
    const browser = await connect(stagedDocumentsPolicy());
    try {
      const doc = await browser.client.stage('sdk.txt', Buffer.from('through the SDK\n'), { mediaType: 'text/plain' });
      const call = async (name: string, input: Record<string, unknown>) => {
        const r = await browser.toolResult({
          type: 'tool_use',
          id: `toolu_sdk_${batches++}`,
          name,
          toolset_name: 'browser',
          input,
        });
        const content = typeof r.content === 'string' ? [{ type: 'text', text: r.content }] : (r.content ?? []);
        return {
          error: r.is_error === true,
          text: content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join('\n'),
        };
      };
      await call('navigate', { url: `${web.origin}/upload` });
      const ref = /\[(ref_\d+)\]/.exec((await call('find', { query: 'file input Attachment' })).text)?.[1];
      assert.ok(ref);
      const before = received(web).length;
      const ok = await call('file_upload', { target: { type: 'ref', ref }, document_ids: [doc.document_id] });
      assert.equal(ok.error, false, ok.text);
      const got = await until('the page to post the SDK upload', () => received(web)[before]);
      assert.equal(got.body, 'through the SDK\n');
      const unknown = await call('file_upload', { target: { type: 'ref', ref }, document_ids: ['doc_unknown'] });
      assert.deepEqual(unknown, {
        error: true,
        text: 'document_ids[0] is not a document this session staged; nothing was uploaded.',
      });
      const path = await call('file_upload', { target: { type: 'ref', ref }, paths: ['/etc/passwd'] });
      assert.deepEqual(path, { error: true, text: 'file_upload has no configured upload roots' });
      await browser.client.removeDocument(doc.document_id);
    } finally {
      await browser.close();
    }
    // Without a file policy the SDK refuses every document id itself, as its runner does.
    const plain = await connect();
    try {
      const r = await plain.toolResult({
        type: 'tool_use',
        id: 'toolu_sdk_plain',
        name: 'file_upload',
        toolset_name: 'browser',
        input: { target: { type: 'ref', ref: 'ref_1' }, document_ids: ['doc_x'] },
      });
      assert.equal(r.is_error, true);
      assert.match(JSON.stringify(r.content), /file_upload has no configured document allowlist/);
    } finally {
      await plain.close();
    }
  });

  test('bad input: each a clear error that names its bound, nothing left behind', async () => {
    // The earlier tests removed their files; their sessions may still be ending.
    await until('no file of an earlier test on disk', async () => (await filesUnder(d.daemon.files.root)).length === 0);
    const client = await connect();
    const path = documentsUrl(d.url, client.sessionId).pathname;
    const post = (name: string | undefined, body: Buffer, headers: Record<string, string> = {}) =>
      raw(d, 'POST', name === undefined ? path : `${path}?name=${encodeURIComponent(name)}`, body, headers);
    const cases: [string | undefined, Buffer, number, string, RegExp][] = [
      ['empty.txt', Buffer.alloc(0), 400, 'empty', /empty/],
      [undefined, Buffer.from('x'), 400, 'bad_name', /\?name=/],
      ['', Buffer.from('x'), 400, 'bad_name', /empty/],
      ['a/b.txt', Buffer.from('x'), 400, 'bad_name', /\//],
      ['a\\b.txt', Buffer.from('x'), 400, 'bad_name', /\\/],
      ['..', Buffer.from('x'), 400, 'bad_name', /\.\./],
      ['../etc/passwd', Buffer.from('x'), 400, 'bad_name', /\//],
      ['..hidden', Buffer.from('x'), 400, 'bad_name', /\.\./],
      ['line\nbreak.txt', Buffer.from('x'), 400, 'bad_name', /control/],
      ['nul\u0000.txt', Buffer.from('x'), 400, 'bad_name', /control/],
      ['evil\u202Etxt.exe', Buffer.from('x'), 400, 'bad_name', /bidi/],
      ['x'.repeat(256), Buffer.from('x'), 400, 'bad_name', /255 bytes/],
      ['big.bin', Buffer.alloc(BOUNDS.maxFileBytes + 1, 1), 413, 'file_too_large', /bytes per file/],
    ];
    for (const [name, body, status, code, message] of cases) {
      const r = await post(name, body);
      assert.equal(r.status, status, `${JSON.stringify(name)}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error, code);
      assert.match(r.body.message ?? '', message);
    }
    // A bad media type, and a body with no length (chunked) over the bound: stopped at the bound.
    const badType = await post('x.txt', Buffer.from('x'), { 'content-type': 'not a type' });
    assert.equal(badType.body.error, 'bad_media_type');
    const chunked = await stageDocument(
      documentsUrl(d.url, client.sessionId),
      TEST_TOKEN,
      'chunked.bin',
      Readable.from(
        (function* () {
          for (let i = 0; i <= BOUNDS.maxFileBytes / 65536; i++) yield randomBytes(65536);
        })(),
      ),
    ).catch((e: unknown) => e);
    assert.ok(chunked instanceof DocumentRefusedError && chunked.code === 'file_too_large', String(chunked));
    assert.deepEqual(await client.documents(), []);
    assert.deepEqual(await filesUnder(d.daemon.files.root), []);
    assert.deepEqual(d.daemon.files.usage, { bytes: 0, files: 0 });

    // The session's bounds: its count, then its bytes.
    const mib = Buffer.alloc(BOUNDS.maxFileBytes, 7);
    await client.stage('1.bin', mib);
    await client.stage('2.bin', mib);
    const third = await client.stage('3.bin', mib).catch((e: unknown) => e);
    assert.ok(third instanceof DocumentRefusedError && third.code === 'session_bytes', String(third));
    assert.match(third.message, /bytes per session/);
    await client.stage('small-3.txt', Buffer.from('3'));
    await client.stage('small-4.txt', Buffer.from('4'));
    const fifth = await client.stage('small-5.txt', Buffer.from('5')).catch((e: unknown) => e);
    assert.ok(fifth instanceof DocumentRefusedError && fifth.code === 'too_many_files', String(fifth));
    assert.match(fifth.message, /files per session/);
    // The daemon's bound, over every session: another session takes what is left and passes it.
    const other = await connect();
    await other.stage('o1.bin', mib);
    const past = await other.stage('o2.bin', Buffer.alloc(BOUNDS.maxFileBytes / 2, 1)).catch((e: unknown) => e);
    assert.ok(past instanceof DocumentRefusedError && past.code === 'daemon_bytes', String(past));
    assert.match(past.message, /bytes in all/);
    assert.equal((await filesUnder(d.daemon.files.root)).length, 5, 'only the five stored files are on disk');

    // An unknown session, a wrong token: refused as the same 404, and 401.
    const unknown = await raw(d, 'POST', '/v1/sessions/s_AAAAAAAAAAAAAAAAAAAAAA/documents?name=x', Buffer.from('x'));
    assert.deepEqual([unknown.status, unknown.body.error], [404, 'session_not_found']);
    const malformed = await raw(d, 'GET', '/v1/sessions/..%2F..%2Fetc/documents');
    assert.deepEqual([malformed.status, malformed.body.error], [404, 'session_not_found']);
    const noToken = await raw(d, 'GET', path, undefined, {
      authorization: 'Bearer wrong-token-wrong-token-wrong-token',
    });
    assert.equal(noToken.status, 401);

    await client.close();
    await other.close();
    await until(
      'both sessions to end and their files to go',
      async () => d.daemon.files.usage.files === 0 && (await filesUnder(d.daemon.files.root)).length === 0,
    );
  });

  test('an upload whose client goes mid-body ends: its bytes are given back, nothing stays on disk', async () => {
    const client = await connect();
    const path = documentsUrl(d.url, client.sessionId).pathname;
    // Before, the write waited for the session's end: its place, its bytes and a file stayed held meanwhile.
    const heldBefore = d.daemon.files.usage.bytes;
    const onDisk = (await filesUnder(d.daemon.files.root)).length;
    const url = new URL(d.url.replace('ws:', 'http:'));
    const cut = request({
      host: url.hostname,
      port: url.port,
      method: 'POST',
      path: `${path}?name=cut.bin`,
      headers: { authorization: `Bearer ${TEST_TOKEN}`, 'content-length': '100000' },
    });
    cut.on('error', () => undefined);
    cut.write(Buffer.alloc(5000, 1));
    await until('the cut upload to be under way', () => d.daemon.files.usage.bytes >= heldBefore + 5000, {
      seen: () => d.daemon.files.usage,
    });
    cut.destroy();
    await until('the cut upload to be given back', () => d.daemon.files.usage.bytes === heldBefore, {
      seen: () => d.daemon.files.usage,
    });
    await until('its partial file to go', async () => (await filesUnder(d.daemon.files.root)).length === onDisk);
    assert.deepEqual(await client.documents(), [], 'the session lists nothing of it');
    await client.close();
  });

  test('a resumed session keeps its documents; an ended one loses them, and a stage into it is refused', async () => {
    const first = await d.connect();
    const { session_id: sessionId } = await first.hello();
    const url = documentsUrl(d.url, sessionId);
    const doc = await stageDocument(url, TEST_TOKEN, 'keep.txt', Buffer.from('kept across a resume\n'));
    const closed = new Promise<Activity>((resolve) =>
      d.daemon.activity.subscribe((a) => void (a.type === 'session_closed' && a.session === sessionId && resolve(a))),
    );
    // Dropped, and resumed within the grace period: the same session, with its document.
    first.close();
    const tc = await d.connect();
    const welcome = await tc.hello(sessionId);
    assert.equal(welcome.resumed, true);
    const { result: found } = await tc.batch('r-find', [
      use('navigate', { url: `${web.origin}/upload` }),
      use('find', { query: 'file input Attachment' }),
    ]);
    const ref = /\[(ref_\d+)\]/.exec(textOf(found, 1))?.[1];
    assert.ok(ref, textOf(found, 1));
    const before = received(web).length;
    const { result } = await tc.batch('r-up', [
      use('file_upload', { target: { type: 'ref', ref }, document_ids: [doc.document_id] }),
    ]);
    assert.equal(textOf(result).split('\n')[0], 'Uploaded.', textOf(result));
    const got = await until("the resumed session's upload", () => received(web)[before]);
    assert.equal(got.body, 'kept across a resume\n');

    // A slow upload under way when the session ends: answered 404, nothing kept.
    const body = new Readable({ read() {} });
    const slow = stageDocument(url, TEST_TOKEN, 'slow.bin', body).catch((e: unknown) => e);
    body.push(randomBytes(64 * 1024));
    await until('the slow upload to be under way', () => d.daemon.files.usage.bytes > doc.size);
    tc.close(); // dropped: the session expires after the grace period
    await within(closed, 'the session to end', 10_000);
    const refused = await slow;
    assert.ok(refused instanceof DocumentRefusedError && refused.code === 'session_not_found', String(refused));
    const list = await raw(d, 'GET', url.pathname);
    assert.deepEqual([list.status, list.body.error], [404, 'session_not_found']);
    const again = await stageDocument(url, TEST_TOKEN, 'late.txt', Buffer.from('late')).catch((e: unknown) => e);
    assert.ok(again instanceof DocumentRefusedError && again.code === 'session_not_found', String(again));
    // The session leaves the server's map before its folder's rm has run.
    await until('its files to leave the disk', async () => (await filesUnder(d.daemon.files.root)).length === 0, {
      seen: () => filesUnder(d.daemon.files.root),
    });
    assert.deepEqual(d.daemon.files.usage, { bytes: 0, files: 0 });
  });
});

/** A process's resident set and its peak since the last reset (/proc/<pid>/status), in bytes. */
async function memoryOf(pid: number): Promise<{ rss: number; peak: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1]) * 1024;
  return { rss: kb('VmRSS'), peak: kb('VmHWM') };
}

describe("staging streams to disk: the daemon's memory", () => {
  let daemon: DaemonProcess;
  let client: RecordingClient;
  let documentsDir: string;
  /** A folder as a daemon killed with SIGKILL would leave it: swept when the next one starts. */
  let stale: string;
  before(async () => {
    documentsDir = await mkdtemp(join(tmpdir(), 'deskbatch-docs-dir-'));
    let pid = 4_000_000;
    while (processRuns(pid)) pid++;
    stale = join(documentsDir, `deskbatch-files-p${pid}-AbCdEf`);
    await mkdir(join(stale, 'session'), { recursive: true });
    await writeFile(join(stale, 'session', 'doc_left'), 'left behind');
    daemon = await startDaemonProcess({
      display: ':0',
      token: TEST_TOKEN,
      // The flags as an operator gives them: the documents on a disk of their own, a smaller bound per file.
      args: [
        '--port',
        '0',
        '--browser',
        'off',
        '--sandbox',
        'off',
        '--documents-dir',
        documentsDir,
        '--max-document-bytes',
        String(12 * MiB),
      ],
      // Each 64 KiB the socket reads is a new buffer, garbage once written: until V8's next scavenge it still
      // counts in the resident set (10 MiB of it here with the default young generation). A 1 MiB one scavenges
      // every MiB or so, so what stays resident is what the daemon holds.
      env: { NODE_OPTIONS: '--max-semi-space-size=1' },
      logFile: join(newLogDir('daemon-process'), 'daemon.log'),
    });
    client = new RecordingClient(await RecordingClient.connect(daemon.url, TEST_TOKEN), {
      onInvalid: 'throw',
      keep: true,
    });
  });
  after(async () => {
    client?.terminate();
    await daemon?.stop(15_000);
    await rm(documentsDir, { recursive: true, force: true });
  });

  test("a 10 MiB document raises the daemon's peak resident memory by less than 8 MiB", async () => {
    client.send({ type: 'hello', client: 'deskbatch-tests/1' });
    const welcome = await client.next((m): m is Welcome => m.type === 'welcome');
    const url = documentsUrl(daemon.url, welcome.session_id);
    // Generated as sent, 64 KiB at a time, so this process holds no copy either; hashed on the way.
    const source = (bytes: number, hash: ReturnType<typeof createHash>) =>
      Readable.from(
        (function* () {
          for (let sent = 0; sent < bytes; sent += 65536) {
            const chunk = randomBytes(Math.min(65536, bytes - sent));
            hash.update(chunk);
            yield chunk;
          }
        })(),
      );
    // Once first, so the code on the way is loaded and compiled; then the peak is reset (clear_refs 5).
    const warm = await stageDocument(url, TEST_TOKEN, 'warm.bin', source(2 * MiB, createHash('sha256')));
    await stageDocument(url, TEST_TOKEN, 'warm2.bin', source(2 * MiB, createHash('sha256')));
    assert.equal(warm.size, 2 * MiB);
    const before = await memoryOf(daemon.pid);
    await writeFile(`/proc/${daemon.pid}/clear_refs`, '5');
    const hash = createHash('sha256');
    const info = await stageDocument(url, TEST_TOKEN, 'ten.bin', source(10 * MiB, hash));
    const afterwards = await memoryOf(daemon.pid);
    assert.equal(info.size, 10 * MiB);
    assert.equal(info.sha256, hash.digest('hex'));
    const growth = afterwards.peak - before.rss;
    console.log(
      `# 10 MiB staged: peak RSS ${(afterwards.peak / MiB).toFixed(1)} MiB, ${(growth / MiB).toFixed(2)} MiB over the ${(before.rss / MiB).toFixed(1)} MiB before`,
    );
    assert.ok(growth < 8 * MiB, `the peak grew by ${(growth / MiB).toFixed(2)} MiB`);
    // Kept under --documents-dir, whose leftovers of a dead daemon went at start; --max-document-bytes holds.
    const kept = await filesUnder(documentsDir);
    assert.equal(kept.filter((f) => f.endsWith(info.document_id)).length, 1, kept.join(' '));
    assert.ok(!kept.some((f) => f.startsWith(stale)), "the dead daemon's folder was swept");
    const over = await stageDocument(url, TEST_TOKEN, 'over.bin', source(12 * MiB + 1, createHash('sha256'))).catch(
      (e: unknown) => e,
    );
    assert.ok(over instanceof DocumentRefusedError && over.code === 'file_too_large', String(over));
  });
});

describe('a pool desktop: the sandboxed browser gets the bytes; the files go with the session and its desktop', () => {
  let web: WebServer;
  let d: TestDaemon;
  before(async () => {
    web = await startWebServer();
    web.route('/upload', UPLOAD_PAGE);
    web.route('/received', { status: 204, body: '' });
    d = await startTestDaemon({
      browser: 'headless',
      desktops: { mode: 'pool', max: 1, warm: 1, sizes: [{ width: 1024, height: 640 }] },
      browserSettings: { enable: ['file_upload'] },
      sessionGraceMs: 300,
    });
  });
  after(async () => {
    await d?.close();
    await web?.close();
  });

  test('uploaded from a sandboxed desktop, then gone once the session ended and its desktop was recycled', async () => {
    const a = await d.connect();
    const welcome = await within(a.hello(undefined, { desktop: {} }), 'a pool desktop', 60_000);
    const desktop = welcome.desktop?.id;
    assert.ok(desktop);
    const url = documentsUrl(d.url, welcome.session_id);
    const bytes = randomBytes(200_000);
    const doc = await stageDocument(url, TEST_TOKEN, 'pool.bin', bytes);
    const { result: found } = await a.batch('p-find', [
      use('navigate', { url: `${web.origin}/upload` }),
      use('find', { query: 'file input Attachment' }),
    ]);
    const ref = /\[(ref_\d+)\]/.exec(textOf(found, 1))?.[1];
    assert.ok(ref, textOf(found, 1));
    const { result } = await a.batch('p-up', [
      use('file_upload', { target: { type: 'ref', ref }, document_ids: [doc.document_id] }),
    ]);
    assert.equal(textOf(result).split('\n')[0], 'Uploaded.', textOf(result));
    const got = await until('the sandboxed page to post the file', () => received(web)[0]);
    assert.ok(got.bytes.equals(bytes), 'byte for byte');

    a.close(); // dropped: the session ends after its grace period, and its desktop is torn down
    await until('the desktop to be recycled', () => !d.daemon.desktops.list().some((x) => x.id === desktop), {
      timeoutMs: 30_000,
    });
    assert.deepEqual(await filesUnder(d.daemon.files.root), []);
    const list = await raw(d, 'GET', url.pathname);
    assert.equal(list.status, 404);
    // The next session, on the next desktop, does not know the id.
    const b = await d.connect();
    const next = await within(b.hello(undefined, { desktop: {} }), 'the next pool desktop', 60_000);
    assert.notEqual(next.desktop?.id, desktop);
    const { result: navB } = await b.batch('q-find', [
      use('navigate', { url: `${web.origin}/upload` }),
      use('find', { query: 'file input Attachment' }),
    ]);
    const refB = /\[(ref_\d+)\]/.exec(textOf(navB, 1))?.[1];
    const { result: refused } = await b.batch('q-up', [
      use('file_upload', { target: { type: 'ref', ref: refB }, document_ids: [doc.document_id] }),
    ]);
    assert.equal(textOf(refused), 'document_ids[0] is not a document this session staged; nothing was uploaded.');
    assert.equal(received(web).length, 1);
  });
});

describe('recorded sessions: a line per staged document, its content only when asked', () => {
  for (const copy of [false, true]) {
    test(copy ? 'with --record-documents, a copy beside the trajectory' : 'by default, the line only', async () => {
      const dir = await mkdtemp(join(tmpdir(), 'deskbatch-rec-docs-'));
      const d = await startTestDaemon({
        display: undefined,
        browser: 'off',
        recording: { mode: 'all', dir, video: false, trace: false, documents: copy },
      });
      try {
        const c = await d.connect();
        const { session_id } = await c.hello();
        const bytes = randomBytes(5000);
        const doc = await stageDocument(documentsUrl(d.url, session_id), TEST_TOKEN, 'notes é.bin', bytes, {
          mediaType: 'application/pdf',
        });
        const trajectory = async () => {
          const files = await filesUnder(dir);
          const file = files.find((f) => f.endsWith('trajectory.jsonl'));
          return file ? { file, text: await readFile(file, 'utf8') } : undefined;
        };
        const found = await until('the document_staged line', async () => {
          const t = await trajectory();
          return t?.text.includes('"document_staged"') ? t : undefined;
        });
        const line = found.text
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as Record<string, unknown>)
          .find((l) => l.type === 'document_staged')!;
        assert.deepEqual(
          { ...line, at: 0 },
          {
            type: 'document_staged',
            at: 0,
            document_id: doc.document_id,
            name: 'notes é.bin',
            media_type: 'application/pdf',
            size: 5000,
            sha256: sha256(bytes),
            ...(copy ? { path: `documents/${doc.document_id}` } : {}),
          },
        );
        const copies = (await filesUnder(dir)).filter((f) => f.includes(`${join('documents', '')}`));
        if (copy) {
          assert.equal(copies.length, 1);
          assert.ok((await readFile(copies[0]!)).equals(bytes));
        } else assert.deepEqual(copies, []);
      } finally {
        await d.close();
        await rm(dir, { recursive: true, force: true });
      }
    });
  }
});
