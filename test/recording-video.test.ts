/**
 * The desktop video of a recorded session (src/recording/video.ts), with a
 * real Xvfb and Debian's ffmpeg: a recording plays back at the right size and
 * length with its chapters; a process killed with SIGKILL takes its ffmpeg
 * with it and leaves a playable file; ffmpeg that cannot start rejects
 * start() and leaves no process and no file.
 *
 * Run: node --import tsx --test --test-concurrency=1 test/recording-video.test.ts
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { createLogger, type Logger } from '../src/base/log.ts';
import { DesktopVideo, VideoError, cueText, vttTime } from '../src/recording/video.ts';
import { pickFreeDisplay, startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { until, within } from '../testkit/wait.ts';
import { fragments, isRunning, parseVtt, probe, processesMentioning } from '../testkit/recording.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const CHILD = fileURLToPath(new URL('./fixtures/video-child.ts', import.meta.url));
const WIDTH = 1280;
const HEIGHT = 800;

/** ffmpeg's warnings and errors reach the test output; info lines do not. */
const log: Logger = createLogger('warn', (line) => process.stderr.write(`[video] ${line}`), {}, { format: 'pretty' });

describe('desktop video', () => {
  let display: VirtualDisplay;
  let dir: string;
  before(async () => {
    display = await startTestDisplay({ width: WIDTH, height: HEIGHT });
    dir = mkdtempSync(join(tmpdir(), 'deskbatch-video-test-'));
  });
  after(async () => {
    await display?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('ffmpeg with x11grab and libx264 is installed', async () => {
    assert.equal(await DesktopVideo.available(), true, 'run `bash scripts/setup.sh` (Debian package ffmpeg)');
  });

  test('records frames of the display at its size, as long as it ran, with its chapters', async () => {
    const path = join(dir, 'one.mp4');
    const chaptersPath = join(dir, 'one.vtt');
    const video = await DesktopVideo.start({
      display: display.display,
      xauthority: display.xauthority,
      size: { width: WIDTH, height: HEIGHT },
      fps: 5,
      path,
      chaptersPath,
      log,
    });
    try {
      assert.ok(Math.abs(video.startedAt - Date.now()) < 10_000, 'startedAt is a wall-clock time of now');
      assert.equal(typeof video.pid, 'number');
      assert.equal(statSync(path).mode & 0o777, 0o600, 'video.mp4 is 0600');
      assert.equal(statSync(chaptersPath).mode & 0o777, 0o600, 'video.vtt is 0600');
      // Chapters as the recorder writes them, and titles the model could have chosen.
      video.chapter('computer · toolu_01', video.startedAt - 5_000, video.startedAt + 300);
      video.chapter(
        'browser · toolu_02 --> 00:00:09.000 --> x\n\nWEBVTT <b>bold</b> & more',
        video.startedAt + 300,
        video.startedAt + 700,
      );
      video.chapter(`long · ${'x'.repeat(1_000)}`, video.startedAt + 700, video.startedAt + 650);
      await until('three fragments of video', () => fragments(path) >= 3, {
        timeoutMs: 20_000,
        seen: () => ({ bytes: video.bytes(), fragments: fragments(path) }),
      });
      assert.ok(video.bytes() > 0);
      assert.ok(video.cpuSeconds() > 0, 'ffmpeg used some CPU');
    } finally {
      const stopping = video.stop();
      assert.equal(video.stop(), stopping, 'stop() is idempotent');
      await within(stopping, 'the video to stop', 20_000);
    }
    const wallSeconds = (Date.now() - video.startedAt) / 1000;
    assert.equal(video.pid, undefined, 'no pid once stopped');

    const info = await probe(path);
    const stream = info.streams[0]!;
    assert.equal(stream.width, WIDTH);
    assert.equal(stream.height, HEIGHT);
    const frames = Number(stream.nb_read_frames);
    const duration = Number(info.format.duration);
    console.log(`[measure] ${frames} frames, ${duration} s of video for ${wallSeconds.toFixed(2)} s of wall time`);
    assert.ok(frames >= 10, `frames decoded: ${frames}`);
    assert.ok(
      Math.abs(duration - wallSeconds) <= Math.max(1.5, 0.4 * wallSeconds),
      `video lasts ${duration} s, recorded for ${wallSeconds} s`,
    );

    const cues = parseVtt(readFileSync(chaptersPath, 'utf8'));
    assert.equal(cues.length, 3);
    assert.deepEqual(cues[0], { start: 0, end: 300, text: 'computer · toolu_01' }, 'times clamped at 0');
    assert.deepEqual(cues[1], {
      start: 300,
      end: 700,
      text: 'browser · toolu_02 --&gt; 00:00:09.000 --&gt; x WEBVTT &lt;b&gt;bold&lt;/b&gt; &amp; more',
    });
    assert.equal(cues[2]!.end, 701, 'a cue ends after it starts');
    assert.equal(Array.from(cues[2]!.text).length, 200, 'titles are cut');
    assert.ok(cues[2]!.text.endsWith('…'));
    for (let i = 1; i < cues.length; i++) assert.ok(cues[i]!.start >= cues[i - 1]!.start, 'cues in order');
  });

  test('an odd-sized area is padded to even sides', async () => {
    const path = join(dir, 'odd.mp4');
    const video = await DesktopVideo.start({
      display: display.display,
      xauthority: display.xauthority,
      size: { width: 641, height: 401 },
      fps: 5,
      path,
      chaptersPath: join(dir, 'odd.vtt'),
      log,
    });
    await until('a fragment of video', () => fragments(path) >= 1, { timeoutMs: 20_000 });
    await within(video.stop(), 'the video to stop', 20_000);
    const stream = (await probe(path)).streams[0]!;
    assert.deepEqual([stream.width, stream.height], [642, 402]);
    assert.ok(Number(stream.nb_read_frames) >= 1);
  });

  test('a process killed with SIGKILL takes ffmpeg with it and leaves a playable file', async () => {
    const path = join(dir, 'killed.mp4');
    const chaptersPath = join(dir, 'killed.vtt');
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        CHILD,
        JSON.stringify({
          display: display.display,
          xauthority: display.xauthority,
          path,
          chaptersPath,
          width: WIDTH,
          height: HEIGHT,
        }),
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const exited = new Promise<NodeJS.Signals | null>((resolve) =>
      child.once('exit', (_code, signal) => resolve(signal)),
    );
    try {
      let out = '';
      child.stdout.setEncoding('utf8');
      child.stdout.on('data', (chunk: string) => (out += chunk));
      const started = await until('the child to report ffmpeg started', () => /^\{.*\}\n/.exec(out), {
        timeoutMs: 30_000,
        seen: () => ({ out, exitCode: child.exitCode }),
      });
      const { pid } = JSON.parse(started[0]) as { pid: number };
      assert.ok(isRunning(pid), 'ffmpeg runs');
      assert.match(readFileSync(`/proc/${pid}/cmdline`, 'latin1'), /ffmpeg/);
      await until('two fragments of video', () => fragments(path) >= 2, {
        timeoutMs: 20_000,
        seen: () => ({ bytes: statSync(path).size, fragments: fragments(path) }),
      });

      child.kill('SIGKILL');
      assert.equal(await within(exited, 'the child to die'), 'SIGKILL');
      await until(`ffmpeg (pid ${pid}) to die with its parent`, () => !isRunning(pid), { timeoutMs: 10_000 });

      const info = await probe(path);
      assert.equal(info.streams[0]!.width, WIDTH);
      assert.ok(Number(info.streams[0]!.nb_read_frames) >= 5, `frames decoded: ${info.streams[0]!.nb_read_frames}`);
      const cues = parseVtt(readFileSync(chaptersPath, 'utf8'));
      assert.ok(cues.length >= 1, 'the chapters written before the kill are whole');
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });

  test('ffmpeg that cannot start rejects start() and leaves no process and no files', async () => {
    const path = join(dir, 'nodisplay.mp4');
    const chaptersPath = join(dir, 'nodisplay.vtt');
    const missing = `:${pickFreeDisplay()}`;
    await assert.rejects(
      DesktopVideo.start({ display: missing, size: { width: 640, height: 480 }, fps: 5, path, chaptersPath, log }),
      (err: unknown) => {
        assert.ok(err instanceof VideoError);
        assert.equal(err.code, 'start_failed');
        assert.match(err.message, new RegExp(`ffmpeg exited with code \\d+ before recording ${missing}`));
        assert.match(err.message, /display/i, 'the message quotes ffmpeg');
        return true;
      },
    );
    assert.deepEqual(processesMentioning(path), [], 'no ffmpeg left');
    assert.throws(() => statSync(path), /ENOENT/);
    assert.throws(() => statSync(chaptersPath), /ENOENT/);

    // An area larger than the screen: x11grab refuses it.
    await assert.rejects(
      DesktopVideo.start({
        display: display.display,
        xauthority: display.xauthority,
        size: { width: WIDTH * 2, height: HEIGHT },
        fps: 5,
        path,
        chaptersPath,
        log,
      }),
      (err: unknown) => err instanceof VideoError && err.code === 'start_failed',
    );
    assert.deepEqual(processesMentioning(path), [], 'no ffmpeg left');
  });

  test('options that are not ours are refused before anything starts', async () => {
    const base = {
      display: display.display,
      size: { width: 640, height: 480 },
      fps: 5,
      path: join(dir, 'bad.mp4'),
      chaptersPath: join(dir, 'bad.vtt'),
      log,
    };
    for (const bad of [
      { display: ':1 -f lavfi' },
      { display: 'host:1' },
      { display: '-i' },
      { fps: 0 },
      { fps: Number.NaN },
      { fps: 1000 },
      { size: { width: 640.5, height: 480 } },
      { size: { width: 640, height: 0 } },
      { size: { width: 100_000, height: 480 } },
    ]) {
      await assert.rejects(
        DesktopVideo.start({ ...base, ...bad }),
        (err: unknown) => err instanceof VideoError && err.code === 'bad_options',
        JSON.stringify(bad),
      );
    }
    assert.throws(() => statSync(base.path), /ENOENT/);
  });
});

test('cue text and times', () => {
  assert.equal(vttTime(0), '00:00:00.000');
  assert.equal(vttTime(3_723_004.4), '01:02:03.004');
  assert.equal(vttTime(-5), '00:00:00.000');
  assert.equal(vttTime(100 * 3_600_000), '100:00:00.000');
  assert.equal(cueText(''), '(untitled)');
  assert.equal(cueText(' \n\t '), '(untitled)');
  assert.equal(cueText('a\u2028b\u0000c\rd'), 'a b c d');
  assert.equal(cueText('x\u202eevil'), 'xevil', 'no bidirectional overrides');
  assert.equal(cueText('a--->b'), 'a---&gt;b');
  assert.equal(cueText('\ud800lone'), '\ufffdlone', 'lone surrogates are replaced');
  const long = cueText('😀'.repeat(300));
  assert.equal(Array.from(long).length, 200, 'cut by characters, not code units');
  assert.ok(!long.includes('\ufffd'), 'no pair cut in half');
});
