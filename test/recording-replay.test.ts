/**
 * `deskbatch replay` (src/recording/replay.ts): a session recorded by one
 * daemon's recorder (its trajectory, docs/RECORDING.md) is sent again to
 * another, fresh daemon, each session on a desktop of its own (Xvfb, openbox,
 * headful Chromium), and the answers are compared: no differences for the same
 * session, exactly the differences a changed recording has, batches the
 * recording never finished are not comparable, a newer format is refused, and
 * the command's exit codes and output.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { cp, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import sharp from 'sharp';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { ToolUse } from '../src/base/protocol.ts';
import { DEFAULT_IMAGE_TOLERANCE, imageDifference, type ReplayReport } from '../src/recording/replay-compare.ts';
import { ReplayError, replayTrajectory, type ReplayBatch } from '../src/recording/replay.ts';
import { inNamespacesOf } from '../testkit/sandbox-probes.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { ensureBuilt } from '../testkit/build.ts';
import { computerUse, startTestDaemon, TEST_TOKEN, type TestClient, type TestDaemon } from '../testkit/daemon.ts';
import { until, within } from '../testkit/wait.ts';
import { browserUse, startWebServer, type WebServer } from '../testkit/web.ts';

const run = promisify(execFile);
const BIN = fileURLToPath(new URL('../bin/deskbatch.js', import.meta.url));
const SIZE = { width: 1280, height: 800 };
/** Desktops start Xvfb, openbox, a worker and Chromium: slow on a loaded 2-core machine. */
const START_MS = 90_000;
const TOOLS = [{ type: 'computer_toolset_20260801' }, { type: 'browser_toolset_20260801' }];

type Line = Record<string, unknown> & { type: string };

/**
 * The form tells the test server each value its text area takes, and page B when it has painted (two animation
 * frames after it loaded): the test waits for those, since the desktop's keys and the browser's reads travel
 * apart and a read right after typing may come first.
 */
const FORM_PAGE = `<!doctype html><title>replay form</title>
<body style="margin:0;font:24px sans-serif">
<textarea id=t aria-label="the text area" style="display:block;width:100vw;height:70vh;font-size:30px;box-sizing:border-box"></textarea>
<div id=echo>echo:</div>
<a href="/b" id=go style="font-size:30px">to page B</a>
<script>t.addEventListener('input', () => {
  echo.textContent = 'echo: ' + t.value;
  fetch('/log?value=' + encodeURIComponent(t.value));
});</script>`;
const PAGE_B = `<!doctype html><title>page B</title><body style="margin:0;background:#246;color:#fff;font:40px sans-serif"><main>This is page B.</main>
<script>addEventListener('load', () => requestAnimationFrame(() => requestAnimationFrame(() => fetch('/log?painted=b'))));</script>`;
const TYPED = 'typed on the desktop';

/** Waits for the next request to `path` the server gets after this call (earlier ones do not count). */
function nextRequest(web: WebServer, path: string): () => Promise<void> {
  const seen = web.requests.filter((r) => r.path === path).length;
  return () =>
    until(`the page to ask for ${path}`, () => web.requests.filter((r) => r.path === path).length > seen, {
      timeoutMs: 30_000,
      seen: () => web.requests.slice(-5).map((r) => r.path),
    }).then(() => undefined);
}

const textOf = (r: { tool_results: { content: { type: string; text?: string }[] }[] }, i: number): string =>
  r.tool_results[i]!.content.find((x) => x.type === 'text')?.text ?? '';
const firstRef = (text: string): string | undefined => /\[(ref_\d+)\]/.exec(text)?.[1];

/** Runs a batch and checks its result against the API's rules. */
async function batch(client: TestClient, id: string, uses: ToolUse[]) {
  const { result } = await client.batch(id, uses);
  return assertApiValid(uses, result);
}

/** The trajectory of session `sessionId` in recordings folder `dir`, once the recorder finalised it. */
async function recordingOf(dir: string, sessionId: string): Promise<string> {
  return until(
    `the recording of session ${sessionId} to be finalised (its session_closed line)`,
    async () => {
      for (const name of await readdir(dir)) {
        const file = join(dir, name, 'trajectory.jsonl');
        const text = await readFile(file, 'utf8').catch(() => '');
        if (text.includes(`"session_id":"${sessionId}"`) && text.includes('"type":"session_closed"')) return file;
      }
      return undefined;
    },
    { timeoutMs: 30_000, intervalMs: 100 },
  );
}

async function readLines(file: string): Promise<Line[]> {
  return (await readFile(file, 'utf8'))
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Line);
}

const writeLines = (file: string, lines: Line[]): Promise<void> =>
  writeFile(file, lines.map((l) => `${JSON.stringify(l)}\n`).join(''), { mode: 0o600 });

/** A copy of a recording's folder (trajectory and images) to edit. */
async function copyRecording(file: string, into: string): Promise<string> {
  const from = join(file, '..');
  await cp(from, into, { recursive: true });
  return join(into, 'trajectory.jsonl');
}

const finished = (lines: Line[], batchId: string): Record<string, unknown> & { tool_results: Line[] } => {
  const l = lines.find((x) => x.type === 'batch_finished' && (x.result as { batch_id: string }).batch_id === batchId);
  assert.ok(l, `the recording has batch ${batchId}`);
  return l.result as Record<string, unknown> & { tool_results: Line[] };
};

/** Waits until a window titled `title` is shown on the desktop of session `sessionId`: typing before it would land nowhere. */
async function windowShown(d: TestDaemon, sessionId: string, title: string): Promise<void> {
  await until(
    `a window "${title}" on the desktop of session ${sessionId}`,
    async () => {
      const info = d.daemon.desktops.list().find((x) => x.session === sessionId);
      if (!info?.x) return false;
      // The desktop's display is reached from inside its sandbox (docs/SECURITY.md "A sandbox per desktop").
      const args = ['search', '--onlyvisible', '--name', title];
      const [command, argv] = info.processes.xvfb
        ? inNamespacesOf(info.processes.xvfb, 'xdotool', args)
        : ['xdotool', args];
      const found = await run(command, argv, {
        env: { ...process.env, ...info.x },
        timeout: 10_000,
      }).catch(() => ({ stdout: '' }));
      return found.stdout.trim() !== '';
    },
    { timeoutMs: START_MS, intervalMs: 100 },
  );
}

/** Runs `deskbatch replay` as a user would; resolves with its exit code and output. */
async function cli(args: string[], env: Record<string, string> = {}) {
  await ensureBuilt(); // bin/deskbatch.js runs dist/
  const child = spawn(process.execPath, [BIN, 'replay', ...args], {
    env: { ...process.env, DESKBATCH_TOKEN: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  try {
    const [code] = (await within(once(child, 'exit'), `deskbatch replay ${args.join(' ')} to exit`, 120_000)) as [
      number | null,
    ];
    return { code, stdout, stderr };
  } finally {
    if (child.exitCode === null && child.pid) process.kill(child.pid, 'SIGKILL');
  }
}

describe('deskbatch replay of a session on its own desktop', () => {
  let web: WebServer;
  let a: TestDaemon;
  let b: TestDaemon;
  let root: string;
  let mixed: string;

  /**
   * What the test waits for between two batches, on the recording daemon and on the replaying one alike:
   * the browser window before the desktop clicks into it, the typed text in the page before the browser
   * reads it, page B painted before the desktop's screenshot of it.
   */
  function waits(d: TestDaemon): (batchId: string, sessionId: string) => Promise<void> {
    const typed = nextRequest(web, `/log?value=${encodeURIComponent(`${TYPED}\n`)}`);
    const painted = nextRequest(web, '/log?painted=b');
    return async (batchId, sessionId) => {
      if (batchId === 'b-3') await windowShown(d, sessionId, 'replay form');
      if (batchId === 'b-4') await typed();
      if (batchId === 'b-6') await painted();
    };
  }

  /** Replays on B, with the same waits between batches as the recording had. */
  const replayOnB = (file: string): Promise<ReplayReport> => {
    const wait = waits(b);
    return replayTrajectory({
      file,
      url: b.url,
      token: TEST_TOKEN,
      beforeBatch: ({ batchId, sessionId }: ReplayBatch) => wait(batchId, sessionId),
    });
  };

  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'deskbatch-replay-'));
    web = await startWebServer();
    web.route('/form', FORM_PAGE);
    web.route('/b', PAGE_B);
    web.route('/log', '');
    const desktopDaemon = (recordings?: string): Promise<TestDaemon> =>
      startTestDaemon({
        browser: 'headful',
        desktops: { mode: 'pool', max: 2, warm: 1, sizes: [SIZE] },
        // A session ends soon after its client goes: its recording is finalised, the next replay gets a desktop.
        sessionGraceMs: 1_000,
        ...(recordings ? { recording: { mode: 'all', dir: recordings, video: false, trace: false } } : {}),
      });
    [a, b] = await Promise.all([desktopDaemon(join(root, 'recordings-a')), desktopDaemon()]);
    mixed = await recordMixedSession(join(root, 'recordings-a'));
  });
  after(async () => {
    await Promise.all([a?.close(), b?.close()]);
    await web?.close();
    if (root) await rm(root, { recursive: true, force: true });
  });

  /** Both toolsets in one session, a failure on purpose; recorded by A's recorder. */
  async function recordMixedSession(recordings: string): Promise<string> {
    const client = await a.connect();
    const welcome = await within(client.hello(undefined, { tools: TOOLS }), 'a welcome from A', START_MS);
    const wait = waits(a);
    const step = async (id: string, uses: ToolUse[]) => {
      await wait(id, welcome.session_id);
      return batch(client, id, uses);
    };
    const b1 = await step('b-1', [
      computerUse('screenshot', {}, 'toolu_c1'),
      browserUse('navigate', { url: `${web.origin}/form` }, 'toolu_n1'),
      browserUse('get_page_text', {}, 'toolu_t1'),
    ]);
    assert.equal(b1.failures.length, 0, JSON.stringify(b1.failures));
    const b2 = await step('b-2', [
      browserUse('find', { query: 'the text area' }, 'toolu_f2'),
      browserUse('screenshot', {}, 'toolu_s2'),
    ]);
    const ref = firstRef(textOf(b2, 0));
    assert.ok(ref, `find returned a ref: ${textOf(b2, 0)}`);
    const b3 = await step('b-3', [
      browserUse('left_click', { target: { type: 'ref', ref } }, 'toolu_r3'),
      computerUse('left_click', { coordinate: [640, 300] }, 'toolu_c3'),
      computerUse('type', { text: TYPED }, 'toolu_y3'),
      computerUse('key', { text: 'Return' }, 'toolu_k3'),
    ]);
    assert.equal(b3.failures.length, 0, JSON.stringify(b3.failures));
    const b4 = await step('b-4', [
      computerUse('left_click', { coordinate: [5000, 10] }, 'toolu_x4'),
      computerUse('screenshot', {}, 'toolu_c4'),
      browserUse('get_page_text', {}, 'toolu_t4'),
      browserUse('screenshot', {}, 'toolu_s4'),
    ]);
    assert.deepEqual(
      b4.failures.map((f) => [f.index, f.error.type]),
      [[0, 'ToolInputError']],
    );
    assert.match(textOf(b4, 2), new RegExp(`echo: ${TYPED}`));
    const b5 = await step('b-5', [
      computerUse('mouse_move', { coordinate: [100, 700] }, 'toolu_m5'),
      computerUse('screenshot', {}, 'toolu_c5'),
      browserUse('left_click', { target: { type: 'ref', ref } }, 'toolu_r5'),
      browserUse('navigate', { url: `${web.origin}/b` }, 'toolu_n5'),
      browserUse('get_page_text', {}, 'toolu_t5'),
    ]);
    assert.equal(b5.failures.length, 0, JSON.stringify(b5.failures));
    await step('b-6', [computerUse('screenshot', {}, 'toolu_c6')]);
    client.close();
    return recordingOf(recordings, welcome.session_id);
  }

  test('the recorded mixed session replayed on a fresh daemon: no differences', async (t) => {
    const lines = await readLines(mixed);
    assert.deepEqual(
      lines.filter((l) => l.type === 'batch_started').map((l) => l.batch_id),
      ['b-1', 'b-2', 'b-3', 'b-4', 'b-5', 'b-6'],
    );
    const report = await replayOnB(mixed);
    assert.deepEqual(report.differences, [], JSON.stringify(report.differences, null, 1));
    assert.equal(report.batches, 6);
    assert.equal(report.compared, 6);
    assert.deepEqual(report.notComparable, []);
    assert.deepEqual(report.warnings, []);
    assert.notEqual(report.replayed_session_id, report.recorded_session_id);
    // The find's ref was another number on B (one counter per process, and A issued first): mapped, and used.
    assert.ok(report.refs_mapped >= 1, 'the element reference was renumbered');
    // The failure on purpose: same type, both messages reported.
    assert.deepEqual(
      report.failures.map((f) => [f.batch_id, f.index, f.name, f.type]),
      [['b-4', 0, 'left_click', 'ToolInputError']],
    );
    // Every image compared, with both sizes in bytes; the same state on two desktops looks the same.
    assert.deepEqual(
      report.images.map((i) => i.tool_use_id),
      ['toolu_c1', 'toolu_s2', 'toolu_s4', 'toolu_c5', 'toolu_c6'],
    );
    for (const i of report.images) {
      assert.ok(i.recorded.bytes > 0 && i.replayed.bytes > 0, JSON.stringify(i));
      assert.ok(i.difference !== undefined && i.difference <= DEFAULT_IMAGE_TOLERANCE, JSON.stringify(i));
    }
    t.diagnostic(
      `same state, two desktops: ${report.images.map((i) => `${i.tool_use_id} ${i.difference} (${i.recorded.bytes}/${i.replayed.bytes} bytes)`).join(', ')}`,
    );
  });

  test('image differences: the same state on two desktops is near 0, other states are far apart', async (t) => {
    const lines = await readLines(mixed);
    const image = async (batchId: string, index: number): Promise<Buffer> => {
      const block = (finished(lines, batchId).tool_results[index]!.content as { path: string }[])[0]!;
      return readFile(join(mixed, '..', block.path));
    };
    const [desktop, form, typed, formOnDesktop, pageB] = await Promise.all([
      image('b-1', 0),
      image('b-2', 1),
      image('b-4', 3),
      image('b-5', 1),
      image('b-6', 0),
    ]);
    const measured = {
      'the browser: the form before and after typing a line': await imageDifference(form, typed),
      'the desktop: empty, then the browser on it': await imageDifference(desktop, formOnDesktop),
      'the desktop: the form, then page B': await imageDifference(formOnDesktop, pageB),
      'the same picture, once more as a JPEG of quality 50': await imageDifference(
        formOnDesktop,
        await sharp(formOnDesktop).jpeg({ quality: 50 }).toBuffer(),
      ),
    };
    t.diagnostic(JSON.stringify(measured));
    assert.ok(measured['the desktop: the form, then page B'] > 10 * DEFAULT_IMAGE_TOLERANCE);
    assert.ok(measured['the desktop: empty, then the browser on it'] > 10 * DEFAULT_IMAGE_TOLERANCE);
    assert.ok(measured['the same picture, once more as a JPEG of quality 50'] < DEFAULT_IMAGE_TOLERANCE / 4);
  });

  test('a changed recording: exactly the changed text and image size are reported', async () => {
    const file = await copyRecording(mixed, join(root, 'changed'));
    const lines = await readLines(file);
    const text = finished(lines, 'b-1').tool_results[2]!.content as { type: string; text: string }[];
    const original = text[0]!.text;
    text[0]!.text = 'echo: edited in the file';
    const image = (finished(lines, 'b-2').tool_results[1]!.content as Record<string, unknown>[])[0]!;
    assert.equal(image.type, 'image_file');
    image.width = 1000;
    await writeLines(file, lines);
    const report = await replayOnB(file);
    assert.deepEqual(report.differences, [
      {
        batch_id: 'b-1',
        index: 2,
        tool_use_id: 'toolu_t1',
        what: 'text',
        recorded: 'echo: edited in the file',
        replayed: original,
      },
      {
        batch_id: 'b-2',
        index: 1,
        tool_use_id: 'toolu_s2',
        what: 'image size',
        recorded: `1000x${SIZE.height}`,
        replayed: `${SIZE.width}x${SIZE.height}`,
      },
    ]);
    assert.equal(report.compared, 6);
  });
});

describe('deskbatch replay: cut-off, changed, newer and redacted recordings, and the command', () => {
  let web: WebServer;
  let c: TestDaemon;
  let root: string;
  let session: string;
  let typedSession: string;

  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'deskbatch-replay-'));
    web = await startWebServer();
    web.route('/form', FORM_PAGE);
    web.route('/b', PAGE_B);
    web.route('/log', '');
    // A browser only (no display), recording every session with typed text redacted.
    c = await startTestDaemon({
      display: undefined,
      browser: 'headless',
      sessionGraceMs: 500,
      recording: {
        mode: 'all',
        dir: join(root, 'recordings'),
        video: false,
        trace: false,
        redact: { typed: true, passwords: false },
      },
    });
    const client = await c.connect();
    const welcome = await client.hello(undefined, { tools: TOOLS });
    await batch(client, 'c-1', [browserUse('navigate', { url: `${web.origin}/form` }), browserUse('get_page_text')]);
    const c2 = await batch(client, 'c-2', [browserUse('find', { query: 'to page B link' })]);
    const ref = firstRef(textOf(c2, 0));
    assert.ok(ref, textOf(c2, 0));
    await batch(client, 'c-3', [
      browserUse('left_click', { target: { type: 'ref', ref } }),
      browserUse('get_page_text'),
      browserUse('screenshot'),
    ]);
    const c4 = await batch(client, 'c-4', [
      browserUse('navigate', { url: 'file:///etc/hostname' }),
      browserUse('get_page_text'),
    ]);
    assert.equal(c4.failures.length, 1);
    client.close();
    session = await recordingOf(join(root, 'recordings'), welcome.session_id);

    const typing = await c.connect();
    const w2 = await typing.hello();
    await batch(typing, 't-1', [
      browserUse('navigate', { url: `${web.origin}/form` }),
      browserUse('left_click', { target: { type: 'coordinate', x: 300, y: 200 } }),
      browserUse('type', { text: 'secret words' }),
      browserUse('get_page_text'),
    ]);
    typing.close();
    typedSession = await recordingOf(join(root, 'recordings'), w2.session_id);
  });
  after(async () => {
    await c?.close();
    await web?.close();
    if (root) await rm(root, { recursive: true, force: true });
  });

  const replay = (file: string) => replayTrajectory({ file, url: c.url, token: TEST_TOKEN });

  test('unknown line types and fields are ignored', async () => {
    const file = await copyRecording(session, join(root, 'unknown'));
    const lines = (await readLines(file)).map((l) => (l.type === 'recording' ? l : { ...l, added_later: { x: 1 } }));
    lines.splice(1, 0, { type: 'from_the_future', at: 1, what: 'a line type added later' });
    lines.splice(5, 0, { type: 'annotation', at: 2, note: 'another' });
    await writeLines(file, lines);
    const report = await replay(file);
    assert.deepEqual(report.differences, []);
    assert.deepEqual(report.warnings, []);
    assert.equal(report.compared, 4);
  });

  test('a recording cut off during a batch (its daemon killed): that batch is not comparable, not a difference', async () => {
    const file = await copyRecording(session, join(root, 'cut'));
    const text = await readFile(file, 'utf8');
    // Up to the last batch's events, then half of its batch_finished line, as a killed writer could leave it.
    const at = text.lastIndexOf('{"type":"batch_finished"');
    await writeFile(file, text.slice(0, at + 40));
    const report = await replay(file);
    assert.deepEqual(report.differences, []);
    assert.equal(report.batches, 4);
    assert.equal(report.compared, 3);
    assert.deepEqual(
      report.notComparable.map((n) => n.batch_id),
      ['c-4'],
    );
    assert.equal(report.warnings.length, 1);
    assert.match(report.warnings[0]!, /is not JSON/);
  });

  test('a newer version or another format is refused with a clear message', async () => {
    const lines = await readLines(session);
    const newer = join(root, 'newer.jsonl');
    await writeLines(newer, [{ ...lines[0]!, version: 2 }, ...lines.slice(1)]);
    await assert.rejects(replay(newer), (err: Error) => {
      assert.ok(err instanceof ReplayError);
      assert.match(err.message, /is version 2 of deskbatch\.trajectory; this deskbatch reads version 1/);
      return true;
    });
    const other = join(root, 'other.jsonl');
    await writeLines(other, [{ ...lines[0]!, format: 'something.else' }]);
    await assert.rejects(replay(other), /has format "something\.else"; deskbatch replays "deskbatch\.trajectory"/);
    const notOne = join(root, 'not-one.jsonl');
    await writeLines(notOne, lines.slice(1));
    await assert.rejects(replay(notOne), /is not a deskbatch trajectory: its first line is a "tools" line/);
  });

  test('a redacted recording: replay says so, and the calls send the placeholder', async () => {
    const lines = await readLines(typedSession);
    const typed = lines.find((l) => l.type === 'batch_started')!.tool_uses as {
      name: string;
      input: { text?: string };
    }[];
    assert.equal(typed.find((u) => u.name === 'type')!.input.text, '[12 characters]');
    const report = await replay(typedSession);
    assert.equal(report.warnings.length, 1);
    assert.match(
      report.warnings[0]!,
      /typed text was redacted in this recording \(redaction: typed\): 1 call sent the placeholder/,
    );
    assert.deepEqual(
      report.differences.map((d) => [d.batch_id, d.index, d.what]),
      [['t-1', 3, 'text']],
    );
    assert.match(String(report.differences[0]!.recorded), /echo: secret words/);
    assert.match(String(report.differences[0]!.replayed), /echo: \[12 characters\]/);
  });

  test('the command: exit 0 and a summary when nothing differs, 1 and a line per difference, 2 on usage errors', async () => {
    const same = await cli([session, '--url', c.url], { DESKBATCH_TOKEN: TEST_TOKEN });
    assert.equal(same.code, 0, same.stderr);
    assert.match(
      same.stdout,
      /^same: 4 batches replayed in session s_[\w-]+, 4 compared, 0 differences, 0 not comparable, 1 image \(largest difference [\d.]+, tolerance 8\)\n$/,
    );

    const file = await copyRecording(session, join(root, 'cli-changed'));
    const lines = await readLines(file);
    const content = finished(lines, 'c-3').tool_results[1]!.content as { text: string }[];
    content[0]!.text = 'This is not page B.';
    await writeLines(file, lines);
    const differs = await cli([file, '--url', c.url, '--token', TEST_TOKEN]);
    assert.equal(differs.code, 1, differs.stderr);
    const out = differs.stdout.trimEnd().split('\n');
    assert.equal(out.length, 2, differs.stdout);
    assert.match(
      out[0]!,
      /^batch c-3 #1 toolu_b\d+: text: recorded "This is not page B\.", replayed "This is page B\."$/,
    );
    assert.match(
      out[1]!,
      /^different: 4 batches replayed in session s_[\w-]+, 4 compared, 1 difference, 0 not comparable/,
    );

    const json = await cli([file, '--url', c.url, '--token', TEST_TOKEN, '--json', '--image-tolerance', '0.5']);
    assert.equal(json.code, 1, json.stderr);
    const report = JSON.parse(json.stdout) as ReplayReport;
    assert.equal(report.image_tolerance, 0.5);
    assert.deepEqual(
      report.differences.map((d) => [d.batch_id, d.index, d.what, d.recorded, d.replayed]),
      [['c-3', 1, 'text', 'This is not page B.', 'This is page B.']],
    );

    const noUrl = await cli([session], { DESKBATCH_TOKEN: TEST_TOKEN });
    assert.equal(noUrl.code, 2);
    assert.match(noUrl.stderr, /--url is required/);
    const noToken = await cli([session, '--url', c.url]);
    assert.equal(noToken.code, 2);
    assert.match(noToken.stderr, /no token/);
    const badTolerance = await cli([session, '--url', c.url, '--image-tolerance', 'lots'], {
      DESKBATCH_TOKEN: TEST_TOKEN,
    });
    assert.equal(badTolerance.code, 2);
    const newer = join(root, 'cli-newer.jsonl');
    await writeLines(newer, [{ ...lines[0]!, version: 7 }]);
    const refused = await cli([newer, '--url', c.url], { DESKBATCH_TOKEN: TEST_TOKEN });
    assert.equal(refused.code, 2);
    assert.match(refused.stderr, /version 7 of deskbatch\.trajectory/);
    const wrongToken = await cli([session, '--url', c.url, '--token', 'not-the-token-0123456789abcdef-012345']);
    assert.equal(wrongToken.code, 2);
    assert.match(wrongToken.stderr, /could not open a session .*401/);
  });
});
