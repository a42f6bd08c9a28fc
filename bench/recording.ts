/**
 * What recording costs (issue 17, docs/RECORDING.md), on one 1280x800 Xvfb:
 *
 * - a one-call `screenshot` batch on a daemon that records every session
 *   (trajectory, images, the desktop video) against the same batch on one
 *   that does not, measured interleaved (bench/stats.ts `interleave`), so a
 *   drifting load falls on both alike; target: recorded / plain ≤ 1.1x;
 * - a recorded session of one minute, an agent's pace (a pointer move and a
 *   screenshot each second, a browser page visited and read every 10 s): the
 *   bytes per minute of each artifact, and the CPU the video's encoder
 *   (ffmpeg) took, as a share of one core.
 *
 * `BENCH_ONLY=recording` runs this section alone.
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { processCpuSeconds } from '../src/recording/video.ts';
import { startTestDisplay } from '../testkit/display.ts';
import { ffmpegOf } from '../testkit/recording.ts';
import { nextId, toolUse, type BenchClient } from './client.ts';
import { startDaemonProcess, type DaemonProcess } from './daemon-process.ts';
import { figure, interleave, progress, round2, type Figure } from './stats.ts';

export interface RecordingReport {
  figures: Figure[];
  /** Seconds the one-minute session ran. */
  session_s: number;
  /** Bytes per minute of session, by artifact (trajectory, images, video, trace), and in all. */
  bytes_per_minute: Record<string, number>;
  /** ffmpeg's CPU while the session ran, in percent of one core; null without a video. */
  video_cpu_percent: number | null;
  video_fps: number;
}

const SIZE = { width: 1280, height: 800 };
const SESSION_MS = Number(process.env.BENCH_RECORDING_SESSION_MS ?? 60_000);
const FPS = 5;
async function bytesUnder(path: string): Promise<number> {
  const s = await stat(path).catch(() => undefined);
  if (!s) return 0;
  if (!s.isDirectory()) return s.size;
  let n = 0;
  for (const name of await readdir(path)) n += await bytesUnder(join(path, name));
  return n;
}

async function shot(client: BenchClient): Promise<number> {
  const reply = await client.batch(nextId('rec'), [toolUse('computer', 'screenshot')]);
  return reply.ms;
}

export async function recordingSection(pageUrl: string): Promise<RecordingReport> {
  const display = await startTestDisplay(SIZE);
  const started: DaemonProcess[] = [];
  try {
    // Both with a browser: its warm start costs CPU alike on both sides (the recorded one's window is blank
    // until the session below navigates).
    const common = {
      display: display.display,
      framebuffer: display.framebuffer,
      format: 'png' as const,
      browser: 'headless' as const,
    };
    const plain = await startDaemonProcess(common);
    started.push(plain);
    // Headful, so the video shows what an operator's would: the browser's window and the pages it visits.
    const recorded = await startDaemonProcess({
      ...common,
      browser: 'headful',
      extraArgs: ['--record', '--record-video-fps', String(FPS), '--resume-window-ms', '1000'],
    });
    started.push(recorded);

    progress('recording: a screenshot batch, recorded and not, interleaved');
    const a = await plain.connect();
    const b = await recorded.connect();
    const times = await interleave({ plain: () => shot(a), recorded: () => shot(b) });
    a.close();
    b.close();
    const figures = [
      figure('recording.shot.plain', 'screenshot batch, png 1280x800, not recorded', times.plain),
      figure('recording.shot.recorded', 'the same, recorded (trajectory, image, video at 5 fps)', times.recorded),
    ];

    progress(`recording: a recorded session of ${SESSION_MS / 1000} s at an agent's pace`);
    // Recordings from the overhead run end with their sessions (resume window 1 s); the folder is measured
    // once only this session's recording is left to finish.
    await sleep(1_500);
    const before = new Set(await readdir(recorded.recordingsDir).catch(() => [] as string[]));
    const session = await recorded.connect();
    await session.batch(nextId('rec'), [toolUse('computer', 'screenshot')]); // the video starts here
    const ffmpeg = await ffmpegOf(recorded.pid);
    const cpu0 = ffmpeg ? processCpuSeconds(ffmpeg) : undefined;
    const t0 = performance.now();
    for (let i = 0; performance.now() - t0 < SESSION_MS; i++) {
      const tick = performance.now();
      const x = 100 + ((i * 97) % (SIZE.width - 200));
      const y = 100 + ((i * 53) % (SIZE.height - 200));
      const calls = [toolUse('computer', 'mouse_move', { coordinate: [x, y] }), toolUse('computer', 'screenshot')];
      if (i % 10 === 0) {
        calls.push(toolUse('browser', 'navigate', { url: `${pageUrl}?visit=${i}` }));
        calls.push(toolUse('browser', 'get_page_text'));
      }
      await session.paceFor(1);
      await session.batch(nextId('rec'), calls);
      await sleep(Math.max(0, 1_000 - (performance.now() - tick)));
    }
    const seconds = (performance.now() - t0) / 1000;
    const cpu1 = ffmpeg ? processCpuSeconds(ffmpeg) : undefined;
    session.close();
    // The session ends after the resume window; its recording is finalised then (summary.json written).
    const folder = await waitForNewRecording(recorded.recordingsDir, before);
    const dir = join(recorded.recordingsDir, folder);
    const bytes = {
      trajectory: await bytesUnder(join(dir, 'trajectory.jsonl')),
      images: await bytesUnder(join(dir, 'images')),
      video: await bytesUnder(join(dir, 'video.mp4')),
      chapters: await bytesUnder(join(dir, 'video.vtt')),
      trace: await bytesUnder(join(dir, 'trace.zip')),
    };
    const perMinute = Object.fromEntries(
      Object.entries({ ...bytes, total: Object.values(bytes).reduce((x, y) => x + y, 0) }).map(([k, v]) => [
        k,
        Math.round((v / seconds) * 60),
      ]),
    );
    return {
      figures,
      session_s: round2(seconds),
      bytes_per_minute: perMinute,
      video_cpu_percent: cpu0 !== undefined && cpu1 !== undefined ? round2(((cpu1 - cpu0) / seconds) * 100) : null,
      video_fps: FPS,
    };
  } finally {
    for (const d of started) await d.stop();
    await display.stop();
  }
}

async function waitForNewRecording(root: string, before: Set<string>): Promise<string> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    for (const name of await readdir(root).catch(() => [] as string[])) {
      if (before.has(name)) continue;
      if (await stat(join(root, name, 'summary.json')).catch(() => undefined)) return name;
    }
    if (Date.now() > deadline) throw new Error('the recorded session was not finalised within 60 s of its end');
    await sleep(100);
  }
}

export function recordingTable(r: RecordingReport): string {
  const mib = (n: number): string => `${(n / 1024 ** 2).toFixed(2)} MiB`;
  const rows = Object.entries(r.bytes_per_minute).map(([k, v]) => `| ${k} | ${mib(v)} |`);
  return [
    `Recording, a ${r.session_s} s session (a pointer move and a screenshot each second, a page every 10 s):`,
    '',
    '| artifact | bytes per minute |',
    '|---|---|',
    ...rows,
    '',
    r.video_cpu_percent === null
      ? 'video encoder: no video was recorded (ffmpeg missing?)'
      : `video encoder (ffmpeg, ${r.video_fps} fps): ${r.video_cpu_percent}% of one core`,
  ].join('\n');
}
