/**
 * Session recordings (docs/RECORDING.md): a real daemon on a real Xvfb
 * records what its sessions did; the files are read back from disk and over
 * HTTP, behind the token.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { computerUse as use, startTestDaemon, TEST_TOKEN, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { rawGet } from '../testkit/raw-http.ts';
import { until } from '../testkit/wait.ts';
import { browserUse, startBrowserFixture } from '../testkit/web.ts';
import { createLogger } from '../src/base/log.ts';
import { emptySummary, RecordingStore } from '../src/recording/store.ts';
import type { BatchResult } from '../src/base/protocol.ts';

interface Line {
  type: string;
  at: number;
  [k: string]: unknown;
}

async function lines(dir: string, session: string): Promise<Line[]> {
  const text = await readFile(join(dir, session, 'trajectory.jsonl'), 'utf8');
  return text
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l) as Line);
}

describe('recordings', () => {
  let display: VirtualDisplay;
  const dirs: string[] = [];
  const newDir = async (): Promise<string> => {
    const d = await mkdtemp(join(tmpdir(), 'deskbatch-rec-'));
    dirs.push(d);
    return d;
  };
  before(async () => (display = await startTestDisplay({ width: 640, height: 400 })));
  after(async () => {
    await display?.stop();
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  const daemon = (
    dir: string,
    recording: NonNullable<Parameters<typeof startTestDaemon>[0]>['recording'] = {},
  ): Promise<TestDaemon> =>
    startTestDaemon({
      display: display.display,
      displayFramebuffer: display.framebuffer,
      browser: 'off',
      recording: { mode: 'all', dir, video: false, trace: false, ...recording },
    });

  test('the trajectory holds every batch, event and result; images are files beside it', async () => {
    const dir = await newDir();
    const td = await daemon(dir);
    let session = '';
    let results: BatchResult[] = [];
    try {
      const c = await td.connect();
      const welcome = await c.hello(undefined, { record: true, tools: [{ type: 'computer_toolset_20260801' }] });
      assert.equal(welcome.recording, true);
      session = welcome.session_id;
      const ok = await c.batch('b1', [
        use('screenshot', {}, 'toolu_shot1'),
        use('mouse_move', { coordinate: [10, 10] }, 'toolu_move1'),
      ]);
      // A click outside the screen fails; the screenshot after it is not executed.
      const bad = await c.batch('b2', [
        use('left_click', { coordinate: [99_999, 5] }, 'toolu_bad1'),
        use('screenshot', {}, 'toolu_skip1'),
      ]);
      results = [ok.result, bad.result];
      assert.equal(bad.result.failures.length, 1);
    } finally {
      await td.close(); // the session closes with the daemon: its recording is finalised first
    }
    const folder = (await readdir(dir))[0]!;
    const all = await lines(dir, folder);
    const first = all[0]!;
    assert.equal(first.type, 'recording');
    assert.equal(first.format, 'deskbatch.trajectory');
    assert.equal(first.version, 1);
    assert.equal(first.session_id, session);
    assert.deepEqual(
      all.map((l) => l.type),
      [
        'recording',
        'tools',
        'batch_started',
        ...Array(4).fill('tool_event'),
        'batch_finished',
        'batch_started',
        ...Array(3).fill('tool_event'), // started, failed, not_executed
        'batch_finished',
        'session_closed',
      ],
    );
    const started = all.filter((l) => l.type === 'batch_started');
    assert.deepEqual(
      started.map((l) => (l.tool_uses as { id: string }[]).map((t) => t.id)),
      [
        ['toolu_shot1', 'toolu_move1'],
        ['toolu_bad1', 'toolu_skip1'],
      ],
    );
    const finished = all.filter((l) => l.type === 'batch_finished').map((l) => l.result as BatchResult);
    // The failing batch: its failure with the whole error, the skipped call's text, as the client got them.
    assert.deepEqual(finished[1]!.failures, results[1]!.failures);
    assert.deepEqual(finished[1]!.tool_results, results[1]!.tool_results);
    assert.ok(finished[1]!.failures[0]!.error.message.length > 0);
    // The image: a file beside the trajectory, the bytes the client received.
    const block = finished[0]!.tool_results[0]!.content[0] as unknown as Record<string, unknown>;
    assert.equal(block.type, 'image_file');
    const sent = results[0]!.tool_results[0]!.content[0]!;
    assert.equal(sent.type, 'image');
    const bytes = await readFile(join(dir, folder, block.path as string));
    assert.equal(bytes.toString('base64'), sent.source.data);
    assert.equal(block.sha256, createHash('sha256').update(bytes).digest('hex'));
    assert.equal(block.bytes, bytes.length);
    assert.equal(block.width, 640);
    assert.equal(block.height, 400);
    // Files are the operator's alone.
    assert.equal((await stat(join(dir, folder))).mode & 0o777, 0o700);
    assert.equal((await stat(join(dir, folder, 'trajectory.jsonl'))).mode & 0o777, 0o600);
    const summary = JSON.parse(await readFile(join(dir, folder, 'summary.json'), 'utf8')) as Record<string, unknown>;
    assert.equal(summary.batches, 2);
    assert.equal(summary.failures, 1);
  });

  test('--record-on-request records only the sessions that ask; the welcome says which', async () => {
    const dir = await newDir();
    const td = await daemon(dir, { mode: 'on_request' });
    try {
      const asks = await td.connect();
      const yes = await asks.hello(undefined, { record: true });
      assert.equal(yes.recording, true);
      const quiet = await td.connect();
      const no = await quiet.hello(undefined, { record: false });
      assert.equal(no.recording, false);
      const plain = await td.connect();
      const v1 = await plain.hello();
      assert.equal('recording' in v1, false, 'a client that did not ask sees no new field');
      for (const c of [asks, quiet, plain]) await c.batch('b', [use('cursor_position')]);
    } finally {
      await td.close();
    }
    assert.deepEqual(await readdir(dir), [yes_folder(await readdir(dir))]);
    function yes_folder(names: string[]): string {
      assert.equal(names.length, 1, `one recording, got ${names.join(', ')}`);
      return names[0]!;
    }
  });

  test('with recording off, a hello that asks is told no and nothing is written', async () => {
    const dir = await newDir();
    const td = await daemon(dir, { mode: 'off' });
    try {
      const c = await td.connect();
      const w = await c.hello(undefined, { record: true });
      assert.equal(w.recording, false);
      await c.batch('b', [use('cursor_position')]);
    } finally {
      await td.close();
    }
    assert.deepEqual(await readdir(dir), []);
  });

  test('typed text can be redacted: it is nowhere in the recording', async () => {
    const dir = await newDir();
    const td = await daemon(dir, { redact: { typed: true, passwords: false } });
    const secret = 'hunter2-correct-horse';
    try {
      const c = await td.connect();
      await c.hello();
      await c.batch('b', [use('type', { text: secret }, 'toolu_type1')]);
    } finally {
      await td.close();
    }
    const folder = (await readdir(dir))[0]!;
    const text = await readFile(join(dir, folder, 'trajectory.jsonl'), 'utf8');
    assert.ok(!text.includes(secret), 'the typed text is not in the trajectory');
    const started = (await lines(dir, folder)).find((l) => l.type === 'batch_started')!;
    assert.deepEqual((started.tool_uses as { input: unknown }[])[0]!.input, { text: `[${secret.length} characters]` });
  });

  test('--record-keep failures deletes a recording whose session had no failure', async () => {
    const dir = await newDir();
    const td = await daemon(dir, { keep: 'failures' });
    let failed = '';
    try {
      const clean = await td.connect();
      await clean.hello();
      await clean.batch('b', [use('cursor_position')]);
      const bad = await td.connect();
      failed = (await bad.hello()).session_id;
      await bad.batch('b', [use('left_click', { coordinate: [99_999, 0] })]);
    } finally {
      await td.close();
    }
    assert.deepEqual(await readdir(dir), [failed]);
  });

  test('a live recording that reaches the byte budget stops growing, and says so; once finished, retention removes it', async () => {
    const dir = await newDir();
    const td = await daemon(dir, { retention: { maxBytes: 4_000 } });
    try {
      const c = await td.connect();
      const id = (await c.hello()).session_id;
      await c.batch('b1', [use('screenshot', {}, 'toolu_big1')]); // a PNG larger than the whole budget
      const all = await until('the stopped line', async () => {
        const got = await lines(dir, id).catch(() => []);
        return got.some((l) => l.type === 'stopped') && got;
      });
      await c.batch('b2', [use('cursor_position', {}, 'toolu_after1')]);
      const after = await lines(dir, id);
      assert.equal(after.at(-1)!.type, 'stopped', 'nothing is written after it');
      assert.equal(after.at(-1)!.reason, 'byte_budget');
      assert.equal(after.length, all.length);
      assert.ok(!JSON.stringify(after).includes('toolu_after1'), 'the later batch is not in the recording');
    } finally {
      await td.close();
    }
    // Finished, it is over the budget on its own: retention removes it.
    assert.deepEqual(await readdir(dir), []);
  });

  test('recordings are served only with the token, and only the files a recording writes', async () => {
    // The recordings folder inside one of the test's own, beside a file no request may reach.
    const outer = await newDir();
    const dir = join(outer, 'recordings');
    await writeFile(join(outer, 'secret.txt'), 'not a recording\n');
    const td = await daemon(dir);
    try {
      const c = await td.connect();
      const id = (await c.hello()).session_id;
      await c.batch('b1', [use('screenshot', {}, 'toolu_a')]);
      const base = td.url.replace(/^ws/, 'http').replace(/\/v1$/, '');
      const auth = { authorization: `Bearer ${TEST_TOKEN}` };
      // The listing names the live recording once its first batch is on disk.
      const listed = await until('the live recording in the listing', async () => {
        const r = await fetch(`${base}/recordings`, { headers: auth });
        const body = (await r.json()) as { recordings: { id: string; live: boolean; batches: number }[] };
        return body.recordings.find((x) => x.id === id && x.batches === 1);
      });
      assert.equal(listed.live, true);
      for (const path of ['/recordings', `/recordings/${id}/trajectory.jsonl`]) {
        assert.equal((await fetch(`${base}${path}`)).status, 401, `${path} without the token`);
        assert.equal(
          (await fetch(`${base}${path}`, { headers: { authorization: 'Bearer wrong-token-0123456789abcdef0123' } }))
            .status,
          401,
        );
      }
      const metrics = await (await fetch(`${base}/metrics`, { headers: auth })).text();
      for (const line of [
        /^deskbatch_recording_bytes_written_total\{artifact="trajectory"\} [1-9]\d*$/m,
        /^deskbatch_recording_bytes_written_total\{artifact="images"\} [1-9]\d*$/m,
        /^deskbatch_recordings\{state="live"\} 1$/m,
        /^deskbatch_recordings_bytes [1-9]\d*$/m,
      ]) {
        assert.match(metrics, line);
      }
      const traj = await fetch(`${base}/recordings/${id}/trajectory.jsonl`, { headers: auth });
      assert.equal(traj.status, 200);
      assert.equal(traj.headers.get('x-content-type-options'), 'nosniff');
      assert.match(traj.headers.get('content-security-policy') ?? '', /sandbox/);
      assert.match(await traj.text(), /"type":"recording"/);
      const download = await fetch(`${base}/recordings/${id}/trajectory.jsonl?download=1`, { headers: auth });
      assert.match(download.headers.get('content-disposition') ?? '', /^attachment; filename="/);
      await download.arrayBuffer();
      // Sent as written (fetch would resolve the `..` away first), each at a file that is there:
      // only the daemon's own checks answer 404.
      await writeFile(join(dir, id, 'other.txt'), 'not a file a recording writes\n');
      const port = Number(new URL(base).port);
      for (const bad of [
        `/recordings/${id}/../../secret.txt`,
        `/recordings/${id}/%2e%2e%2f%2e%2e%2fsecret.txt`,
        `/recordings/${id}/images/..%2f..%2f..%2fsecret.txt`,
        `/recordings/${id}/other.txt`,
        `/recordings/..%2f${id}/trajectory.jsonl`,
        `/recordings/nope/trajectory.jsonl`,
        `/recordings/${id}/video.mp4`, // not written: this daemon records no video
      ]) {
        const r = await rawGet(port, bad, { headers: auth });
        assert.equal(r.status, 404, `${bad}: ${r.body}`);
      }
    } finally {
      await td.close();
    }
  });
});

describe('recording retention', () => {
  const log = createLogger('error', () => undefined);
  const summary = (id: string, started: number) => ({ ...emptySummary(id, id, started), ended_at: started });

  test('the oldest finished recordings go first, by count and by bytes; live ones stay', async () => {
    const root = await mkdtemp(join(tmpdir(), 'deskbatch-rec-ret-'));
    try {
      const removed: string[] = [];
      const store = new RecordingStore(
        root,
        { maxSessions: 2, maxBytes: 10_000, maxAgeMs: 3_600_000 },
        log,
        (id, why) => removed.push(`${id}:${why}`),
      );
      await store.init();
      const live = await store.open('s_live');
      for (const [i, name] of ['s_a', 's_b', 's_c'].entries()) {
        const { id } = await store.open(name);
        await store.finish(id, summary(id, Date.now() + i), true);
      }
      // Four recordings, at most two: the two oldest finished go (the live one is never removed).
      assert.deepEqual(removed, ['s_a:count', 's_b:count']);
      assert.ok(existsSync(live.dir));
      assert.deepEqual((await readdir(root)).sort(), ['s_c', 's_live']);
      // Bytes: a live recording that grows past the budget pushes out the finished one.
      store.grew(live.id, 20_000);
      await store.prune();
      assert.deepEqual(removed, ['s_a:count', 's_b:count', 's_c:bytes']);
      store.close();
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  test('an earlier run’s recordings count, and those past the age bound are removed at start', async () => {
    const root = await mkdtemp(join(tmpdir(), 'deskbatch-rec-age-'));
    try {
      const first = new RecordingStore(root, { maxSessions: 10, maxBytes: 1e9, maxAgeMs: 86_400_000 }, log);
      await first.init();
      const old = await first.open('s_old');
      await first.finish(old.id, summary(old.id, Date.now() - 3_600_000), true);
      const young = await first.open('s_young');
      await first.finish(young.id, summary(young.id, Date.now()), true);
      first.close();
      assert.deepEqual((await readdir(root)).sort(), ['s_old', 's_young']);
      const second = new RecordingStore(root, { maxSessions: 10, maxBytes: 1e9, maxAgeMs: 60_000 }, log);
      await second.init();
      assert.deepEqual(await readdir(root), ['s_young']);
      assert.deepEqual(
        (await second.list(() => undefined)).map((r) => r.id),
        ['s_young'],
      );
      second.close();
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});

describe('recording a browser session with password redaction', () => {
  test('text typed or set into a password field is redacted; other typed text is kept', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'deskbatch-rec-pw-'));
    const f = await startBrowserFixture({
      recording: { mode: 'all', dir, video: false, trace: false, redact: { typed: false, passwords: true } },
    });
    const user = 'alice-visible-name';
    const typed = 'typed-secret-1234';
    const set = 'set-secret-5678';
    try {
      f.web.route(
        '/login',
        '<!doctype html><title>login</title><style>input{display:block;width:300px;height:30px;margin:0 0 10px}</style>' +
          '<input id="user"><input id="pw" type="password">',
      );
      await f.client.hello();
      const { result } = await f.client.batch('b1', [
        browserUse('navigate', { url: `${f.web.origin}/login` }),
        browserUse('find', { query: 'password' }),
      ]);
      const ref = /\[(ref_\d+)\]/.exec(JSON.stringify(result.tool_results[1]!.content))?.[1];
      assert.ok(ref, 'find names the password field');
      await f.client.batch('b2', [
        browserUse('left_click', { target: { type: 'coordinate', x: 10, y: 10 } }),
        browserUse('type', { text: user }, 'toolu_user'),
        browserUse('left_click', { target: { type: 'ref', ref } }),
        browserUse('type', { text: typed }, 'toolu_pw'),
        browserUse('form_input', { target: { type: 'ref', ref }, value: set }, 'toolu_set'),
      ]);
    } finally {
      await f.close();
    }
    const folder = (await readdir(dir))[0]!;
    const text = await readFile(join(dir, folder, 'trajectory.jsonl'), 'utf8');
    assert.ok(text.includes(user), 'text typed into an ordinary field is kept');
    assert.ok(!text.includes(typed), 'text typed into the password field is not in the recording');
    assert.ok(!text.includes(set), 'a value set into the password field is not in the recording');
    const inputs = new Map(
      (await lines(dir, folder))
        .filter((l) => l.type === 'batch_started')
        .flatMap((l) => l.tool_uses as { id: string; input: Record<string, unknown> }[])
        .map((t) => [t.id, t.input]),
    );
    assert.equal(inputs.get('toolu_pw')!.text, `[${typed.length} characters]`);
    // Held to the batch's end, its lines still come in order: batch_started, its events, batch_finished.
    const kinds = (await lines(dir, folder))
      .filter(
        (l) =>
          (l.batch_id ??
            (l.event as { batch_id?: string } | undefined)?.batch_id ??
            (l.result as BatchResult | undefined)?.batch_id) === 'b2',
      )
      .map((l) => l.type);
    assert.deepEqual(kinds, ['batch_started', ...Array(10).fill('tool_event'), 'batch_finished']);
    assert.equal(inputs.get('toolu_set')!.value, `[${set.length} characters]`);
    await rm(dir, { recursive: true, force: true });
  });
});
