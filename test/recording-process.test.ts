/**
 * Recording as an operator runs it (`deskbatch serve --record`): a daemon
 * process on a real Xvfb with a headful Chromium records a mixed session;
 * afterwards its folder holds the trajectory, a video that plays for about as
 * long as the session's computer part ran with a chapter per call, and the
 * browser's trace with the calls as named steps. Killed with SIGKILL in the
 * middle of a session, the daemon takes its ffmpeg with it and leaves a
 * video that still plays and a trajectory whose every whole line parses; the
 * browser's trace working files it left are swept by the next daemon.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { RecordingClient } from '../testkit/ws-client.ts';
import { computerUse as use, TEST_TOKEN } from '../testkit/daemon.ts';
import { startDaemonProcess, type DaemonProcess } from '../testkit/daemon-process.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { ffmpegOf, fragments, isRunning, openTrace, parseVtt, probe, steps } from '../testkit/recording.ts';
import { until } from '../testkit/wait.ts';
import { browserUse, startWebServer, type WebServer } from '../testkit/web.ts';
import type { BatchResult, ServerMessage, ToolUse, Welcome } from '../src/base/protocol.ts';
import { TraceFolder } from '../src/browser/trace-folder.ts';
import { createLogger } from '../src/base/log.ts';

/** A client for a daemon process: hello, then batches one at a time. */
async function connect(url: string): Promise<{
  hello(): Promise<Welcome>;
  batch(id: string, uses: ToolUse[]): Promise<BatchResult>;
  close(): void;
}> {
  const ws = await RecordingClient.connect(url, TEST_TOKEN, {});
  const client = new RecordingClient(ws, { onInvalid: 'throw', keep: true });
  return {
    async hello() {
      client.send({ type: 'hello', record: true });
      return client.next((m: ServerMessage): m is Welcome => m.type === 'welcome');
    },
    async batch(id, uses) {
      client.send({ type: 'batch', batch_id: id, tool_uses: uses });
      return client.next((m: ServerMessage): m is BatchResult => m.type === 'batch_result' && m.batch_id === id);
    },
    close: () => client.terminate(),
  };
}

/** The browser trace folders (src/browser/trace-folder.ts) in `root` whose owner file names process `pid`. */
async function tracesOwnedBy(pid: number, root: string): Promise<string[]> {
  const found: string[] = [];
  for (const name of await readdir(root)) {
    if (!name.startsWith('deskbatch-traces-')) continue;
    const owner = await readFile(join(root, name, 'owner'), 'utf8').catch(() => '');
    if (Number(owner.trim()) === pid) found.push(name);
  }
  return found;
}

describe('recording, as the operator runs it', () => {
  let display: VirtualDisplay;
  let web: WebServer;
  const dirs: string[] = [];
  before(async () => {
    display = await startTestDisplay({ width: 1024, height: 768 });
    web = await startWebServer();
    web.route('/page', '<!doctype html><title>recorded page</title><h1>Hello from the recorded page</h1>');
  });
  after(async () => {
    await web?.close();
    await display?.stop();
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  const start = async (): Promise<{ daemon: DaemonProcess; dir: string; temp: string }> => {
    const dir = await mkdtemp(join(tmpdir(), 'deskbatch-rec-proc-'));
    dirs.push(dir);
    // A temporary folder of its own: another test file's daemon, starting a browser meanwhile, would sweep a
    // killed daemon's trace folder from the shared one before this file looks for it (seen once in CI).
    const temp = join(dir, 'tmp');
    await mkdir(temp);
    const daemon = await startDaemonProcess({
      display: display.display,
      token: TEST_TOKEN,
      args: [
        ...['--host', '127.0.0.1', '--port', '0', '--browser', 'headful'],
        ...['--record', '--recordings-dir', join(dir, 'recordings'), '--resume-window-ms', '200'],
        ...['--screenshots-dir', join(dir, 'shots'), '--downloads-dir', join(dir, 'downloads')],
        '--allow-private-networks',
      ],
      env: { DESKBATCH_FRAMEBUFFER: display.framebuffer ?? '', TMPDIR: temp },
      echo: true,
    });
    return { daemon, dir, temp };
  };

  test('a session leaves its trajectory, a video with a chapter per call, and the browser trace', async () => {
    const { daemon, dir } = await start();
    let session = '';
    const ids: string[] = [];
    try {
      const c = await connect(daemon.url);
      session = (await c.hello()).session_id;
      const calls = [
        use('screenshot', {}, 'toolu_p_shot'),
        use('mouse_move', { coordinate: [200, 200] }, 'toolu_p_move'),
        browserUse('navigate', { url: `${web.origin}/page` }, 'toolu_p_nav'),
        browserUse('get_page_text', {}, 'toolu_p_text'),
        use('left_click', { coordinate: [99_999, 1] }, 'toolu_p_bad'),
      ];
      ids.push(...calls.map((t) => t.id));
      const r = await c.batch('p1', calls);
      assert.equal(r.failures.length, 1);
      assert.match(JSON.stringify(r.tool_results[3]!.content), /Hello from the recorded page/);
      c.close();
      // The session ends after its resume window (200 ms); the recording is finalised then.
      const folder = join(dir, 'recordings', session);
      await until('the recording to be finalised', () => stat(join(folder, 'summary.json')).catch(() => undefined), {
        timeoutMs: 60_000,
      });
      const lines = (await readFile(join(folder, 'trajectory.jsonl'), 'utf8'))
        .trimEnd()
        .split('\n')
        .map((l) => JSON.parse(l) as { type: string; at: number; started_at?: number });
      const video = lines.find((l) => l.type === 'video');
      assert.ok(video?.started_at, 'the trajectory says when the video started');
      const closed = lines.find((l) => l.type === 'session_closed')!;
      // The video: plays, at the display's size, for about as long as from its start to the session's end.
      const p = await probe(join(folder, 'video.mp4'));
      assert.equal(p.streams[0]!.width, 1024);
      assert.equal(p.streams[0]!.height, 768);
      assert.ok(Number(p.streams[0]!.nb_read_frames) > 0, 'frames are present');
      const expected = (closed.at - video.started_at) / 1000;
      const duration = Number(p.format.duration);
      assert.ok(
        Math.abs(duration - expected) < Math.max(2, expected * 0.5),
        `video lasts ${duration} s, the session ran ${expected} s after it started`,
      );
      // A chapter for each call that ran, named after it, in the video's time.
      const cues = parseVtt(await readFile(join(folder, 'video.vtt'), 'utf8'));
      for (const id of ['toolu_p_shot', 'toolu_p_move', 'toolu_p_nav', 'toolu_p_text', 'toolu_p_bad']) {
        assert.ok(
          cues.some((cue) => cue.text.endsWith(`· ${id}`)),
          `a chapter for ${id}: ${cues.map((x) => x.text).join(', ')}`,
        );
      }
      for (const cue of cues) assert.ok(cue.start <= cue.end && cue.end <= duration * 1000 + 1000);
      // The trace: the browser calls as named steps, in order.
      const trace = await openTrace(join(folder, 'trace.zip'));
      assert.deepEqual(
        steps(trace).map((s) => s.title),
        ['navigate · toolu_p_nav', 'get_page_text · toolu_p_text'],
      );
      const summary = JSON.parse(await readFile(join(folder, 'summary.json'), 'utf8')) as { files: string[] };
      // What the recording holds besides the summary itself (written last).
      assert.deepEqual(summary.files, ['trace.zip', 'trajectory.jsonl', 'video.mp4', 'video.vtt']);
    } finally {
      await daemon.stop(15_000);
    }
  });

  test('killed with SIGKILL mid-session: ffmpeg goes with it, the video still plays, every whole line parses', async () => {
    const { daemon, dir, temp } = await start();
    let ffmpeg: number | undefined;
    try {
      const c = await connect(daemon.url);
      const session = (await c.hello()).session_id;
      const video = join(dir, 'recordings', session, 'video.mp4');
      await c.batch('k0', [use('screenshot')]);
      ffmpeg = await until('the video encoder to start', () => ffmpegOf(daemon.pid), { timeoutMs: 30_000 });
      // The screen changes (a window drawn by the browser's navigate, the pointer moving) until the video
      // holds two fragments (ffmpeg cuts one a second).
      await c.batch('k1', [browserUse('navigate', { url: `${web.origin}/page` })]);
      let i = 0;
      await until(
        'the video to hold two fragments',
        async () => {
          await c.batch(`k${(i += 1) + 1}`, [use('mouse_move', { coordinate: [100 + ((i * 37) % 800), 300] })]);
          return fragments(video) >= 2;
        },
        { timeoutMs: 60_000, intervalMs: 200, seen: () => fragments(video) },
      );
      process.kill(daemon.pid, 'SIGKILL');
      const exit = await daemon.exited;
      assert.equal(exit.signal, 'SIGKILL');
      await until('ffmpeg to end with the daemon', () => !isRunning(ffmpeg!), { timeoutMs: 10_000 });
      const p = await probe(video);
      assert.ok(Number(p.streams[0]!.nb_read_frames) > 0, 'frames decode after the kill');
      assert.ok(Number(p.format.duration) > 0);
      const text = await readFile(join(dir, 'recordings', session, 'trajectory.jsonl'), 'utf8');
      // The browser's trace working files (unredacted) outlive the killed daemon; the next one to start a
      // browser sweeps them.
      const left = await tracesOwnedBy(daemon.pid, temp);
      assert.equal(left.length, 1, 'the killed daemon left its browser trace folder');
      await TraceFolder.sweepStale(
        createLogger('error', () => undefined),
        temp,
      );
      assert.deepEqual(await tracesOwnedBy(daemon.pid, temp), [], 'swept once its owner is gone');
      // The last piece is empty, or a line the kill cut short: every piece before it is a whole line.
      const whole = text.split('\n').slice(0, -1);
      assert.ok(whole.length >= 3);
      for (const line of whole) JSON.parse(line);
    } finally {
      await daemon.stop(15_000);
      if (ffmpeg !== undefined && isRunning(ffmpeg)) process.kill(ffmpeg, 'SIGKILL');
    }
  });
});
