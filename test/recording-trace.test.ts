/**
 * The Playwright trace of a recorded session's browser (docs/RECORDING.md):
 * each browser call a named step, network bodies kept only as the operator
 * chose, typed text redacted, a trace saved when the session ends with a
 * call still running, a new trace file after the browser crashed. The
 * archive is read with src/browser/zip.ts, as the viewer's tests would.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { BatchResult, ToolUse } from '../src/base/protocol.ts';
import type { BrowserManager } from '../src/browser/manager.ts';
import type { TraceOptions } from '../src/browser/session.ts';
import { SharedDesktop } from '../src/desktop-pool/pool.ts';
import { redacted, rewriteTrace } from '../src/browser/trace-rewrite.ts';
import { ZipFormatError, ZipReader, ZipWriter, crc32 } from '../src/browser/zip.ts';
import { TraceFolder } from '../src/browser/trace-folder.ts';
import { createLogger } from '../src/base/log.ts';
import { openTrace, steps, type OpenedTrace, type TraceEvent } from '../testkit/recording.ts';
import type { TestClient } from '../testkit/daemon.ts';
import { until } from '../testkit/wait.ts';
import { browserUse, startBrowserFixture, type BrowserFixture } from '../testkit/web.ts';

const CSS_MARKER = 'css-body-marker-7730';
const JSON_MARKER = 'json-body-marker-5521';
const TYPED = 'typed-text-marker-9184';
const PASSWORD = 'password-marker-3307';
const FILLED = 'filled-marker-6620';

/** Big targets at fixed places, so screenshot coordinates hit them (the screenshot is the viewport, 1:1). */
const PAGE = `<!doctype html><title>Trace page</title><link rel="stylesheet" href="/style.css">
<button id="load" style="position:absolute;left:0;top:0;width:400px;height:100px">load</button>
<input id="name" style="position:absolute;left:0;top:150px;width:400px;height:50px">
<input id="secret" type="password" style="position:absolute;left:0;top:250px;width:400px;height:50px">
<p id="out" style="position:absolute;left:0;top:350px">not loaded</p>
<textarea id="notes" aria-label="Notes" style="position:absolute;left:0;top:400px;width:400px;height:80px"></textarea>
<script>
document.getElementById('load').onclick = () => {
  const x = new XMLHttpRequest();
  x.open('GET', '/data.json');
  x.onload = () => { document.getElementById('out').textContent = 'loaded ' + JSON.parse(x.responseText).n; };
  x.send();
};
</script>`;

/** The entries whose (uncompressed) bytes hold `text`. */
function holding(t: OpenedTrace, text: string): string[] {
  return [...t.entries].filter(([, data]) => data.includes(text)).map(([name]) => name);
}

function resourceFor(t: OpenedTrace, path: string): TraceEvent['snapshot'] | undefined {
  return t.network.find((e) => e.type === 'resource-snapshot' && e.snapshot?.request?.url.endsWith(path))?.snapshot;
}

describe('the browser trace of a recorded session', () => {
  let fx: BrowserFixture;
  let dir: string;
  let n = 0;

  const manager = (): BrowserManager => {
    const desktops = fx.daemon.daemon.desktops;
    assert.ok(desktops instanceof SharedDesktop && desktops.desktop.browser, 'one shared desktop with a browser');
    return desktops.desktop.browser;
  };

  const run = async (client: TestClient, uses: ToolUse[]): Promise<BatchResult> =>
    (await client.batch(`batch-${n++}`, uses)).result;

  /** A session whose browser records a trace at `<dir>/<name>/trace.zip`, from before its first call unless `later`. */
  async function recorded(
    name: string,
    options: Omit<TraceOptions, 'path'>,
  ): Promise<{ client: TestClient; id: string; path: string; record: () => Promise<void> }> {
    const client = await fx.daemon.connect();
    const id = (await client.hello()).session_id;
    const path = join(dir, name, 'trace.zip');
    const record = () =>
      manager()
        .session(id)
        .recordTrace({ path, ...options });
    return { client, id, path, record };
  }

  /** Ends the session (its connection drops, its grace runs out) and waits for its trace. */
  async function end(client: TestClient, file: string): Promise<void> {
    client.close();
    await until(`${file} to be saved when the session ended`, () => existsSync(file), { timeoutMs: 30_000 });
  }

  /** The calls every session here makes: load, click (an XHR), type, read, and a call that fails. */
  const flow = (prefix: string): ToolUse[] => [
    browserUse('navigate', { url: `${fx.web.origin}/page` }, `${prefix}_nav`),
    browserUse('left_click', { target: { type: 'coordinate', x: 100, y: 50 } }, `${prefix}_load`),
    browserUse('left_click', { target: { type: 'coordinate', x: 100, y: 175 } }, `${prefix}_focus`),
    browserUse('type', { text: TYPED }, `${prefix}_type`),
    browserUse('left_click', { target: { type: 'coordinate', x: 100, y: 275 } }, `${prefix}_focus_pw`),
    browserUse('type', { text: PASSWORD }, `${prefix}_type_pw`),
    browserUse('get_page_text', {}, `${prefix}_read`),
  ];
  const failing = (prefix: string): ToolUse => browserUse('switch_tab', { tab_id: 'no-such-tab' }, `${prefix}_fail`);

  async function runFlow(client: TestClient, prefix: string): Promise<void> {
    const r = await run(client, flow(prefix));
    assert.ok(!r.tool_results.some((x) => x.is_error), JSON.stringify(r.tool_results));
    const text = r.tool_results.at(-1)!.content;
    assert.match(JSON.stringify(text), /loaded 1/, 'the XHR answered before the page was read');
    const f = await run(client, [failing(prefix)]);
    assert.equal(f.tool_results[0]!.is_error, true, 'switch_tab to a tab that does not exist fails');
  }

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'deskbatch-trace-'));
    fx = await startBrowserFixture({ sessionGraceMs: 100 });
    fx.web.route('/page', PAGE);
    fx.web.route('/style.css', {
      body: `/* ${CSS_MARKER} */ body { background: rgb(250, 250, 240) }`,
      headers: { 'content-type': 'text/css' },
    });
    fx.web.route('/data.json', {
      body: JSON.stringify({ marker: JSON_MARKER, n: 1 }),
      headers: { 'content-type': 'application/json' },
    });
  });
  after(async () => {
    await fx?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('each call is a named step, in order, also the one that failed; bodies but stylesheets are left out', async () => {
    const s = await recorded('default', { networkBodies: false, redactTyped: false });
    await s.record(); // before the session's context opened: tracing starts with it
    await runFlow(s.client, 'a');
    // Playwright keeps a stopped trace's files (unredacted) until the browser closes: the session removes them.
    const folder = manager().traceFolder;
    assert.ok(folder, "the browser has a folder for its traces' working files");
    const files = async () =>
      (await readdir(folder.dir, { recursive: true, withFileTypes: true }))
        .filter((d) => d.isFile() && !(d.name === 'owner' && d.parentPath === folder.dir))
        .map((d) => d.name);
    assert.ok((await files()).length > 0, 'the running trace writes its files there');
    await end(s.client, s.path);
    await until('the trace working files to be removed', async () => (await files()).length === 0, { seen: files });

    assert.equal((await stat(s.path)).mode & 0o777, 0o600);
    const t = await openTrace(s.path);
    const names = steps(t);
    assert.deepEqual(
      names.map((x) => x.title),
      [
        'navigate · a_nav',
        'left_click · a_load',
        'left_click · a_focus',
        'type · a_type',
        'left_click · a_focus_pw',
        'type · a_type_pw',
        'get_page_text · a_read',
        'switch_tab · a_fail',
      ],
    );
    assert.ok(
      names.every((x) => x.ended),
      `every step ended: ${JSON.stringify(names)}`,
    );
    // Playwright's own actions sit inside the step that made them.
    const nav = names[0]!.callId;
    assert.ok(
      t.trace.some((e) => e.type === 'before' && e.method === 'goto' && e.parentId === nav),
      'the navigation is inside its step',
    );
    const typing = t.trace.find((e) => e.type === 'before' && e.method === 'keyboardType');
    assert.equal(typing?.params?.text, TYPED, 'typed text is kept when not redacted');
    assert.equal(typing?.parentId, names[3]!.callId);

    // The stylesheet's body stays (snapshots render with it); the XHR's JSON body does not.
    const css = resourceFor(t, '/style.css');
    assert.ok(css?.response?.content?._file, 'the stylesheet keeps its body');
    assert.ok(t.entries.get(css.response.content._file)?.includes(CSS_MARKER));
    const json = resourceFor(t, '/data.json');
    assert.ok(json, 'the XHR is in the trace');
    assert.equal(json.response?.content?._file, undefined, 'the XHR response body is left out');
    assert.deepEqual(holding(t, JSON_MARKER), [], 'no entry holds the JSON body');
    const page = resourceFor(t, '/page');
    assert.equal(page?.response?.content?._file, undefined, 'the document body is left out');
    assert.ok(
      [...t.entries.keys()].some((name) => name.startsWith('screencast/')),
      'screencast frames are kept',
    );
  });

  test('with network bodies and typed text redacted: the JSON body is there, the typed text nowhere', async () => {
    const s = await recorded('bodies-redacted', { networkBodies: true, redactTyped: true });
    // A call before recording starts: tracing starts on the open context, from the next call on.
    const first = await run(s.client, [browserUse('navigate', { url: `${fx.web.origin}/page` }, 'b_before')]);
    assert.ok(!first.tool_results[0]!.is_error);
    await s.record();
    await runFlow(s.client, 'b');
    // form_input fills a field (Playwright's fill); key presses one character.
    const found = await run(s.client, [browserUse('find', { query: 'Notes textarea' }, 'b_find')]);
    const ref = /\[(ref_\d+)\]/.exec(JSON.stringify(found.tool_results[0]!.content))?.[1];
    assert.ok(ref, JSON.stringify(found.tool_results));
    const filled = await run(s.client, [
      browserUse('form_input', { target: { type: 'ref', ref }, value: FILLED }, 'b_fill'),
      browserUse('key', { text: 'q' }, 'b_key'),
    ]);
    assert.ok(!filled.tool_results.some((x) => x.is_error), JSON.stringify(filled.tool_results));
    await end(s.client, s.path);

    const t = await openTrace(s.path);
    const titles = steps(t).map((x) => x.title);
    assert.equal(titles[0], 'navigate · b_nav', 'the call before recordTrace is not in the trace');
    assert.equal(titles.length, 11);
    const json = resourceFor(t, '/data.json');
    assert.ok(json?.response?.content?._file, 'the XHR keeps its body');
    assert.ok(t.entries.get(json.response.content._file)?.includes(JSON_MARKER));
    assert.ok(holding(t, CSS_MARKER).length > 0);
    for (const secret of [TYPED, PASSWORD, FILLED]) {
      assert.deepEqual(holding(t, secret), [], `no entry holds ${secret}`);
    }
    const typed = t.trace.filter((e) => e.type === 'before' && e.method === 'keyboardType').map((e) => e.params?.text);
    assert.deepEqual(typed, [redacted(TYPED), redacted(PASSWORD)]);
    const fill = t.trace.find((e) => e.type === 'before' && e.method === 'fill');
    assert.equal(fill?.params?.value, redacted(FILLED));
    const press = t.trace.find((e) => e.type === 'before' && e.method === 'keyboardPress');
    assert.equal(press?.params?.key, redacted('q'), 'a single character pressed is typed text');
    assert.ok(t.entries.get('trace.trace')!.includes(`"__playwright_value_":"${redacted(TYPED)}"`));
  });

  test('passwords only: what was typed into the password field goes, the other typed text stays', async () => {
    const s = await recorded('passwords', { networkBodies: false, redactTyped: false, redactPasswords: true });
    await s.record();
    await runFlow(s.client, 'c');
    await end(s.client, s.path);
    const t = await openTrace(s.path);
    assert.deepEqual(holding(t, PASSWORD), [], 'no entry holds the password');
    assert.ok(holding(t, TYPED).includes('trace.trace'), 'the text typed elsewhere is kept');
  });

  test('a session that ends while a call runs: the trace is saved with that call as far as it got', async () => {
    let answer!: () => void;
    fx.web.route('/slow', { body: '<title>slow</title>slow', until: new Promise<void>((r) => (answer = r)) });
    try {
      const s = await recorded('ends-mid-call', { networkBodies: false, redactTyped: false });
      await s.record();
      s.client.send({
        type: 'batch',
        batch_id: 'hanging',
        tool_uses: [browserUse('navigate', { url: `${fx.web.origin}/slow` }, 'd_slow')],
      });
      await until('the slow page to be asked for', () => fx.web.requests.some((q) => q.path === '/slow'), {
        timeoutMs: 30_000,
      });
      await end(s.client, s.path);
      const t = await openTrace(s.path);
      assert.deepEqual(
        steps(t).map((x) => x.title),
        ['navigate · d_slow'],
      );
      assert.ok(t.trace.some((e) => e.type === 'before' && e.method === 'goto'));
    } finally {
      answer();
    }
  });

  test("after a browser crash, the next context records into trace-2.zip; the dead context's trace is lost", async () => {
    const s = await recorded('crash', { networkBodies: false, redactTyped: false });
    await s.record();
    const r = await run(s.client, [browserUse('navigate', { url: `${fx.web.origin}/page` }, 'e_before')]);
    assert.ok(!r.tool_results[0]!.is_error);
    const m = manager();
    const pid = m.pid;
    assert.ok(pid, 'the browser runs');
    const generation = m.generation;
    const deaths = m.deaths;
    const deadFolder = m.traceFolder?.dir;
    assert.ok(deadFolder && existsSync(deadFolder));
    process.kill(pid, 'SIGKILL');
    await until('the browser to be seen dead', () => m.deaths > deaths, { timeoutMs: 30_000 });
    await until("the dead browser's trace folder to be removed", () => !existsSync(deadFolder));
    const again = await run(s.client, [browserUse('navigate', { url: `${fx.web.origin}/page` }, 'e_after')]);
    assert.ok(!again.tool_results[0]!.is_error, JSON.stringify(again.tool_results));
    assert.ok(m.generation > generation, 'a new browser was launched');
    const second = join(dir, 'crash', 'trace-2.zip');
    await end(s.client, second);
    assert.equal(existsSync(s.path), false, "the dead context's trace could not be saved");
    const t = await openTrace(second);
    assert.deepEqual(
      steps(t).map((x) => x.title),
      ['navigate · e_after'],
    );
  });
});

describe('the browser trace when a call times out', () => {
  let fx: BrowserFixture;
  let dir: string;
  let answer!: () => void;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'deskbatch-trace-timeout-'));
    // A short call timeout; the browser starts with the daemon, so no call pays for its launch.
    fx = await startBrowserFixture({
      callTimeoutMs: 6_000,
      sessionGraceMs: 100,
      browserSettings: { launchAtStart: true },
    });
    fx.web.route('/page', '<title>page</title>page');
    fx.web.route('/slow', { body: '<title>slow</title>slow', until: new Promise<void>((r) => (answer = r)) });
  });
  after(async () => {
    answer?.();
    await fx?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test("the timed-out call's step ends when the next call starts: the next step is not inside it", async () => {
    const desktops = fx.daemon.daemon.desktops;
    assert.ok(desktops instanceof SharedDesktop && desktops.desktop.browser);
    const manager = desktops.desktop.browser;
    await until('the browser to start with the daemon', () => manager.pid !== undefined, { timeoutMs: 60_000 });
    const client = await fx.daemon.connect();
    const id = (await client.hello()).session_id;
    const path = join(dir, 'trace.zip');
    const nav = (url: string, toolUseId: string) => browserUse('navigate', { url }, toolUseId);
    // The context opens before recording starts: on a busy machine its first page can take longer
    // than the short call timeout (4.9 s seen), so it may take a second try.
    let tries = 0;
    await until(
      'the first page to load within the call timeout',
      async () => {
        const warm = await client.batch(`t0-${tries}`, [nav(`${fx.web.origin}/page`, `t_warm${tries++}`)]);
        return !warm.result.tool_results[0]!.is_error;
      },
      { timeoutMs: 60_000 },
    );
    await manager.session(id).recordTrace({ path, networkBodies: false, redactTyped: false });
    const first = await client.batch('t1b', [nav(`${fx.web.origin}/page`, 't_first')]);
    assert.ok(!first.result.tool_results[0]!.is_error, JSON.stringify(first.result));
    const slow = await client.batch('t2', [nav(`${fx.web.origin}/slow`, 't_slow')]);
    assert.equal(slow.result.tool_results[0]!.is_error, true, 'the navigation to a page that never answers times out');
    const next = await client.batch('t3', [nav(`${fx.web.origin}/page`, 't_next')]);
    assert.ok(!next.result.tool_results[0]!.is_error, JSON.stringify(next.result));
    client.close();
    await until('the trace to be saved when the session ended', () => existsSync(path), { timeoutMs: 30_000 });

    const t = await openTrace(path);
    const groups = t.trace.filter((e) => e.type === 'before' && e.method === 'tracingGroup');
    assert.deepEqual(
      groups.map((g) => [g.title, g.parentId]),
      [
        ['navigate · t_first', undefined],
        ['navigate · t_slow', undefined],
        ['navigate · t_next', undefined],
      ],
    );
    assert.ok(steps(t).every((x) => x.ended));
    const gotos = t.trace.filter((e) => e.type === 'before' && e.method === 'goto');
    assert.deepEqual(
      gotos.map((g) => g.parentId),
      groups.map((g) => g.callId),
      'each navigation is inside its own step',
    );
  });
});

describe('the zip reader and writer', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'deskbatch-zip-'));
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('what the writer stores or deflates, the reader reads back; an entry over the bound is refused', async () => {
    const path = join(dir, 'a.zip');
    const w = await ZipWriter.create(path);
    const big = Buffer.alloc(100_000, 'x');
    await w.add('big.txt', big);
    await w.add('small.bin', Buffer.from([1, 2, 3]), { compress: false });
    await w.add('empty', Buffer.alloc(0));
    await w.add('names/ünïcode.txt', Buffer.from('é'));
    await w.finish();
    assert.equal((await stat(path)).mode & 0o777, 0o600);

    const r = await ZipReader.open(path);
    assert.deepEqual(
      r.entries.map((e) => [e.name, e.method]),
      [
        ['big.txt', 8],
        ['small.bin', 0],
        ['empty', 0],
        ['names/ünïcode.txt', 0],
      ],
    );
    assert.ok(r.entry('big.txt')!.compressedSize < 1_000);
    assert.deepEqual(await r.read('big.txt'), big);
    assert.deepEqual(await r.read('small.bin'), Buffer.from([1, 2, 3]));
    assert.equal((await r.read('names/ünïcode.txt')).toString(), 'é');
    await r.close();

    const bounded = await ZipReader.open(path, { maxEntryBytes: 50_000 });
    await assert.rejects(bounded.read('big.txt'), ZipFormatError);
    assert.deepEqual(await bounded.read('small.bin'), Buffer.from([1, 2, 3]));
    await bounded.close();
  });

  test('zip64, damaged data and files that are no zip are refused with a clear error', async () => {
    const path = join(dir, 'b.zip');
    const w = await ZipWriter.create(path);
    await w.add('a.txt', Buffer.from('hello hello hello hello hello'));
    await w.finish();
    const { readFile } = await import('node:fs/promises');
    const good = await readFile(path);

    // An end record whose entry count says "see the zip64 record".
    const zip64 = Buffer.from(good);
    zip64.writeUInt16LE(0xffff, zip64.length - 22 + 10);
    await writeFile(join(dir, 'zip64.zip'), zip64);
    await assert.rejects(ZipReader.open(join(dir, 'zip64.zip')), /zip64/);

    // One flipped byte in the deflated data: the CRC (or inflate) catches it.
    const damaged = Buffer.from(good);
    damaged[30 + 'a.txt'.length + 2]! ^= 0xff;
    await writeFile(join(dir, 'damaged.zip'), damaged);
    const r = await ZipReader.open(join(dir, 'damaged.zip'));
    await assert.rejects(r.read('a.txt'), ZipFormatError);
    await r.close();

    await writeFile(join(dir, 'not.zip'), 'not a zip at all, just text');
    await assert.rejects(ZipReader.open(join(dir, 'not.zip')), /no end of central directory/);
    assert.equal(crc32(Buffer.from('123456789')), 0xcbf43926);
  });

  test('a rewrite that fails leaves no output behind', async () => {
    const path = join(dir, 'c.zip');
    const w = await ZipWriter.create(path);
    await w.add('trace.trace', Buffer.alloc(10_000, 'y'));
    await w.finish();
    const out = join(dir, 'c-out.zip');
    await assert.rejects(
      rewriteTrace(path, out, { networkBodies: false, redactTyped: true, maxEntryBytes: 1_000 }),
      ZipFormatError,
    );
    assert.equal(existsSync(out), false);
  });
});

describe('browser trace folders a killed daemon left behind', () => {
  test('are swept: ours whose owner is gone, or old ones without an owner; a running owner’s stay', async () => {
    const root = await mkdtemp(join(tmpdir(), 'deskbatch-trace-sweep-'));
    try {
      // A process that has exited (and was reaped): its pid names no running process.
      const child = spawn('true');
      const gone = child.pid!;
      await once(child, 'exit');
      const folder = async (name: string, owner: string | undefined, ageMs = 0): Promise<string> => {
        const dir = join(root, `deskbatch-traces-${name}`);
        await mkdir(join(dir, 'resources'), { recursive: true });
        await writeFile(join(dir, 'resources', 'body'), 'unredacted');
        if (owner !== undefined) await writeFile(join(dir, 'owner'), owner);
        if (ageMs) await utimes(dir, new Date(Date.now() - ageMs), new Date(Date.now() - ageMs));
        return dir;
      };
      await folder('dead', `${gone}\n`);
      await folder('live', `${process.pid}\n`, 3 * 3_600_000); // old, but its owner runs
      await folder('old', undefined, 2 * 3_600_000);
      await folder('young', undefined);
      await mkdir(join(root, 'other-folder'));
      await TraceFolder.sweepStale(
        createLogger('error', () => undefined),
        root,
      );
      assert.deepEqual((await readdir(root)).sort(), [
        'deskbatch-traces-live',
        'deskbatch-traces-young',
        'other-folder',
      ]);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
