/**
 * The clipboard to and from the harness (docs/PROTOCOL.md "Clipboard"), end
 * to end: a real daemon with pool desktops and headful Chromium, a real page.
 * The harness puts a non-ASCII text on its desktop's clipboard, the model's
 * batch clicks the page's text area and presses ctrl+v, and the page's
 * `paste` event tells the test server exactly that text; the page's `copy`
 * event puts another text there, which the harness reads back. Another
 * session's desktop has a clipboard of its own. Bad input is refused with a
 * clear error and changes nothing; a session gone leaves no xclip behind.
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { DeskbatchClient } from '../src/client/client.ts';
import { ClipboardError } from '../src/client/index.ts';
import type { BatchResult, ToolUse } from '../src/base/protocol.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { computerUse, TEST_TOKEN, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { processesMentioning } from '../testkit/recording.ts';
import { until } from '../testkit/wait.ts';
import { browserUse, startWebServer, type WebServer } from '../testkit/web.ts';

const SIZE = { width: 1024, height: 768 };
const START_MS = 60_000;
const PASTED = 'Grüße, 世界 ✓';
const COPIED = 'Kopiert: Straße ✓ 日本';
const MAX_TEXT = 4096;

/** A page filled by a focused text area: a paste is posted to /pasted; a copy puts COPIED on the clipboard. */
const PAGE = `<!doctype html><meta charset=utf-8><title>clip-page</title>
<body style="margin:0"><textarea id=t autofocus style="width:100vw;height:100vh"></textarea>
<script>
fetch('/loaded');
t.addEventListener('paste', (e) => {
  fetch('/pasted', { method: 'POST', body: e.clipboardData.getData('text/plain') });
});
t.addEventListener('copy', (e) => {
  e.clipboardData.setData('text/plain', ${JSON.stringify(COPIED)});
  e.preventDefault();
});
</script>`;

interface Raw {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** One request to the daemon's HTTP port as curl would send it. */
function raw(
  d: TestDaemon,
  method: string,
  path: string,
  options: { body?: Buffer; type?: string; token?: string } = {},
): Promise<Raw> {
  const url = new URL(d.url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        method,
        path,
        headers: {
          authorization: `Bearer ${options.token ?? TEST_TOKEN}`,
          ...(options.type ? { 'content-type': options.type } : {}),
          ...(options.body ? { 'content-length': String(options.body.length) } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }),
        );
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

let batches = 0;
async function run(client: DeskbatchClient, toolUses: ToolUse[]): Promise<BatchResult> {
  const { result } = await client.runBatch(toolUses, { batchId: `c${batches++}` });
  assertApiValid(toolUses, result);
  assert.equal(result.failures.length, 0, JSON.stringify(result.failures));
  return result;
}

/** The xclip processes serving a set clipboard now (each desktop's own; none of another test's). */
const owners = (): number[] => processesMentioning('xclip\0-quiet');

describe('the clipboard to and from the harness', () => {
  let web: WebServer;
  let d: TestDaemon;
  const clients: DeskbatchClient[] = [];
  const connect = async (): Promise<DeskbatchClient> => {
    const c = await DeskbatchClient.connect(d.url, {
      token: TEST_TOKEN,
      reconnect: false,
      handshakeTimeoutMs: START_MS,
    });
    clients.push(c);
    return c;
  };

  before(async () => {
    web = await startWebServer();
    web.route('/favicon.ico', { status: 204, body: '' });
    web.route('/clip', { body: PAGE, headers: { 'content-type': 'text/html; charset=utf-8' } });
    web.route('/loaded', { body: '' });
    web.route('/pasted', { body: '' });
    d = await startTestDaemon({
      browser: 'headful',
      desktops: { mode: 'pool', max: 2, warm: 2, sizes: [SIZE] },
      clipboard: { maxTextBytes: MAX_TEXT, maxImageBytes: 1024 ** 2 },
      sessionGraceMs: 300,
    });
  });
  after(async () => {
    for (const c of clients) await c.close().catch(() => undefined);
    await d?.close();
    await web?.close();
  });

  test('a non-ASCII text set by the harness is pasted into the page; what the page copies is read back', async () => {
    const a = await connect();
    await run(a, [browserUse('navigate', { url: `${web.origin}/clip` })]);
    await until('the page to load', () => web.requests.some((r) => r.path === '/loaded'), { timeoutMs: START_MS });

    assert.equal(await a.clipboard(), undefined, 'a fresh desktop has nothing on its clipboard');
    await a.setClipboard(PASTED);
    assert.equal(await a.clipboard(), PASTED, 'what the harness set reads back');

    // The model pastes it: a click into the text area, then ctrl+v.
    await run(a, [computerUse('left_click', { coordinate: [300, 300] }), computerUse('key', { text: 'ctrl+v' })]);
    const pasted = await until(
      'the page to tell what was pasted',
      () => web.requests.find((r) => r.method === 'POST' && r.path === '/pasted'),
      { timeoutMs: 30_000 },
    );
    assert.equal(pasted.bytes.toString('utf8'), PASTED);

    // The page copies: Chromium takes the selection over, and the harness reads the page's text.
    await run(a, [computerUse('key', { text: 'ctrl+c' })]);
    await until("the page's copy to be on the clipboard", async () => (await a.clipboard()) === COPIED, {
      timeoutMs: 30_000,
    });
    // Headers as curl sees them: UTF-8 text, its sha256.
    const got = await raw(d, 'GET', `/v1/sessions/${a.sessionId}/clipboard`);
    assert.equal(got.status, 200);
    assert.equal(got.headers['content-type'], 'text/plain; charset=utf-8');
    assert.equal(got.body, COPIED);
    // No image there: nothing, not the text's bytes.
    assert.equal(await a.clipboard('image/png'), undefined);

    // Bytes in and out are counted.
    const metrics = await (
      await fetch(d.url.replace('ws:', 'http:').replace('/v1', '/metrics'), {
        headers: { authorization: `Bearer ${TEST_TOKEN}` },
      })
    ).text();
    const inBytes = Buffer.byteLength(PASTED);
    assert.match(metrics, new RegExp(`deskbatch_clipboard_bytes_total\\{direction="in"\\} ${inBytes}\\b`));
    assert.match(metrics, /deskbatch_clipboard_bytes_total\{direction="out"\} [1-9]/);
  });

  test("another session's desktop has a clipboard of its own", async () => {
    const a = clients[0]!;
    const b = await connect();
    assert.equal(await b.clipboard(), undefined, "b's desktop shows nothing of a's clipboard");
    await b.setClipboard('only b');
    assert.equal(await b.clipboard(), 'only b');
    assert.equal(await a.clipboard(), COPIED, "b's set did not reach a's desktop");
  });

  test('bad input: each a clear error, nothing changed', async () => {
    const a = clients[0]!;
    await a.setClipboard(PASTED);
    const path = `/v1/sessions/${a.sessionId}/clipboard`;
    const text = 'text/plain; charset=utf-8';

    const over = await raw(d, 'PUT', path, { body: Buffer.alloc(MAX_TEXT + 1, 'x'), type: text });
    assert.equal(over.status, 413);
    assert.equal(JSON.parse(over.body).error, 'clipboard_too_large');
    await assert.rejects(a.setClipboard('y'.repeat(MAX_TEXT + 1)), (err: unknown) => {
      assert.ok(err instanceof ClipboardError);
      assert.equal(err.code, 'clipboard_too_large');
      return true;
    });

    const empty = await raw(d, 'PUT', path, { body: Buffer.alloc(0), type: text });
    assert.equal(empty.status, 400);
    assert.equal(JSON.parse(empty.body).error, 'empty_clipboard');

    const latin1 = await raw(d, 'PUT', path, { body: Buffer.from('x'), type: 'text/plain; charset=iso-8859-1' });
    assert.equal(latin1.status, 415);
    const notUtf8 = await raw(d, 'PUT', path, { body: Buffer.from([0xff, 0xfe, 0x41]), type: text });
    assert.equal(notUtf8.status, 400);
    assert.equal(JSON.parse(notUtf8.body).error, 'bad_text');
    const notPng = await raw(d, 'PUT', path, { body: Buffer.from('not a png'), type: 'image/png' });
    assert.equal(notPng.status, 400);
    assert.equal(JSON.parse(notPng.body).error, 'bad_image');

    const token = await raw(d, 'PUT', path, { body: Buffer.from('x'), type: text, token: 'wrong-token-0123456789' });
    assert.equal(token.status, 401);
    const unknown = await raw(d, 'PUT', '/v1/sessions/s_nosuchsession/clipboard', {
      body: Buffer.from('x'),
      type: text,
    });
    assert.equal(unknown.status, 404);
    assert.equal(JSON.parse(unknown.body).error, 'session_not_found');
    assert.equal((await raw(d, 'GET', '/v1/sessions/s_nosuchsession/clipboard')).status, 404);
    // HEAD would read the clipboard (the server answers it as GET) for an answer with no body.
    const head = await raw(d, 'HEAD', path);
    assert.equal(head.status, 405);
    assert.equal(head.headers.allow, 'GET, PUT');

    assert.equal(await a.clipboard(), PASTED, 'no refused set changed the clipboard');
  });

  test('a session gone: 404, and the xclip serving its clipboard is stopped with its desktop', async () => {
    const a = clients[0]!;
    const id = a.sessionId;
    const before = new Set(owners());
    await a.setClipboard('the last text');
    const mine = owners().filter((pid) => !before.has(pid));
    assert.ok(mine.length >= 1, 'an xclip serves the set (with its sandbox wrapper)');
    await a.close();
    await until(
      'the session to end',
      async () => (await raw(d, 'GET', `/v1/sessions/${id}/clipboard`)).status === 404,
      { timeoutMs: 30_000 },
    );
    await until('its xclip to be stopped', () => !owners().some((pid) => mine.includes(pid)), { timeoutMs: 30_000 });
    const late = await raw(d, 'PUT', `/v1/sessions/${id}/clipboard`, {
      body: Buffer.from('too late'),
      type: 'text/plain',
    });
    assert.equal(late.status, 404);
    assert.equal(JSON.parse(late.body).error, 'session_not_found');
  });
});
