/**
 * What the desktop video of a recorded session costs (src/recording/video.ts):
 * CPU of its ffmpeg (utime+stime from /proc, % of one core), memory (RSS, PSS, private),
 * bytes per minute of video, and how long ffmpeg takes to start recording.
 * One 1280x800 display with openbox and Chromium full screen, at 5 fps, on
 * two pages served from 127.0.0.1:
 * - `still`: a page of text in two columns, a header, a picture; nothing moves;
 * - `moving`: the same page scrolling 40 px every second and a box crossing
 *   it at every animation frame, a clock in the header: every frame differs.
 * For each page, the recorder's encoding (DEFAULT_ENCODING) and the
 * alternatives it was chosen over, in turn, plus VP9 in WebM (libvpx-vp9,
 * realtime, cpu-used 8) for comparison.
 *
 *   node --import tsx bench/recording-video.ts     (VIDEO_BENCH_SECONDS=60 by default)
 *
 * Measured on the 2-core development machine, shared with other work (load
 * 3 to 14 during the run), 60 s each (CPU and bytes from the second second
 * on; "start" is spawn to recording, ffmpeg links some 200 libraries):
 *
 * | page   | encoder                                      | CPU, % of a core | MB/min | RSS / PSS / USS MB | start ms |
 * |--------|----------------------------------------------|------|-------|-----------------|-------|
 * | still  | default: superfast crf30 qmin26 key10s t1    |  4.0 |  0.93 |  87 /  70 /  62 |  3150 |
 * | still  | superfast … with scene cuts                  |  3.9 |  1.07 |  87 /  69 /  63 |  2790 |
 * | still  | ultrafast crf30 qmin26 key10s t1             |  3.1 |  1.53 |  80 /  61 /  55 |  1463 |
 * | still  | superfast crf30 qmin0 key2s t1               |  4.9 |  6.92 |  88 /  70 /  63 |  1475 |
 * | still  | ultrafast crf30 qmin0 key2s auto-threads     |  3.8 | 10.99 |  94 /  76 /  69 |  1096 |
 * | still  | vp9 webm rt cpu-used 8                       |  4.6 |  3.67 | 304 / 287 / 280 | 10491 |
 * | moving | default: superfast crf30 qmin26 key10s t1    |  4.6 |  3.69 |  89 /  69 /  64 |  1894 |
 * | moving | superfast … with scene cuts                  |  4.6 |  3.89 |  88 /  69 /  64 |   992 |
 * | moving | ultrafast crf30 qmin26 key10s t1             |  3.4 |  6.46 |  80 /  61 /  56 |  1727 |
 * | moving | superfast crf30 qmin0 key2s t1               |  5.6 | 11.27 |  89 /  71 /  65 |  1096 |
 * | moving | ultrafast crf30 qmin0 key2s auto-threads     |  4.3 | 15.94 |  94 /  75 /  70 |   979 |
 * | moving | vp9 webm rt cpu-used 8                       | 21.4 | 44.29 | 309 / 291 / 284 | 10933 |
 *
 * (VP9's "start" is its first bytes on disk: WebM clusters are written late.)
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { dieWithParent } from '../src/base/child-process.ts';
import { silentLogger } from '../src/base/log.ts';
import { DEFAULT_ENCODING, DesktopVideo, type VideoEncoding } from '../src/recording/video.ts';
import { launchKioskChromium } from '../testkit/chromium.ts';
import { startTestDisplay } from '../testkit/display.ts';
import { startWebServer } from '../testkit/web.ts';

const WIDTH = 1280;
const HEIGHT = 800;
const FPS = 5;
const SECONDS = Number(process.env.VIDEO_BENCH_SECONDS ?? 60);
const CLOCK_TICKS = 100;

const WORDS =
  'the quick brown fox jumps over lazy dog desktop batch recording video frame session agent model browser screen window chapter cue'.split(
    ' ',
  );

/** A page of text: deterministic, so every run records the same picture. */
function page(moving: boolean): string {
  let seed = 1;
  const next = (): number => (seed = (seed * 1103515245 + 12345) % 2147483648);
  const paragraphs = Array.from(
    { length: 30 },
    () => `<p>${Array.from({ length: 80 }, () => WORDS[next() % WORDS.length]).join(' ')}</p>`,
  ).join('');
  const animation = `<div id=b style="position:absolute;width:160px;height:120px;background:#e33;top:200px;left:0;border-radius:12px"></div>
<script>
let x = 0, d = 1;
setInterval(() => { document.getElementById('t').textContent = new Date().toISOString(); }, 100);
function f() { x += 6 * d; if (x > 1100 || x < 0) d = -d; document.getElementById('b').style.left = x + 'px'; requestAnimationFrame(f); }
f();
setInterval(() => { if (innerHeight + scrollY >= document.body.scrollHeight - 5) scrollTo(0, 0); else scrollBy(0, 40); }, 1000);
</script>`;
  return `<!doctype html><html><head><meta charset=utf-8><style>
body{font-family:DejaVu Sans;margin:20px;background:#fafafa}
header{background:linear-gradient(90deg,#2b5876,#4e4376);color:#fff;padding:16px;font-size:24px}
nav a{margin-right:12px;color:#06c}
.col{columns:2;font-size:14px}
</style></head><body><header>Deskbatch test page <span id=t></span></header>
<nav><a href=#>Home</a><a href=#>Search</a><a href=#>Settings</a><a href=#>Account</a></nav>
<svg width=300 height=100><circle cx=50 cy=50 r=40 fill=orange /><rect x=120 y=20 width=150 height=60 fill=teal /></svg>
<div class=col>${paragraphs}</div>${moving ? animation : ''}</body></html>`;
}

interface Sample {
  page: string;
  encoder: string;
  cpuPercent: number;
  mbPerMinute: number;
  rss: number;
  pss: number;
  uss: number;
  startMs: number;
}

function procCpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

/** RSS, PSS and private (USS) memory, MB, from /proc/<pid>/smaps_rollup. */
function memoryMb(pid: number): { rss: number; pss: number; uss: number } {
  const text = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  const kb = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN);
  return {
    rss: kb('Rss') / 1024,
    pss: kb('Pss') / 1024,
    uss: (kb('Private_Clean') + kb('Private_Dirty')) / 1024,
  };
}

async function x264Sample(
  pageName: string,
  name: string,
  encoding: VideoEncoding,
  display: { display: string; xauthority: string },
  dir: string,
): Promise<Sample> {
  const path = join(dir, `${pageName}-${name}.mp4`);
  const t0 = performance.now();
  const video = await DesktopVideo.start({
    display: display.display,
    xauthority: display.xauthority,
    size: { width: WIDTH, height: HEIGHT },
    fps: FPS,
    path,
    chaptersPath: join(dir, `${pageName}-${name}.vtt`),
    log: silentLogger,
    encoding,
  });
  const startMs = performance.now() - t0;
  try {
    // Steady state: from the first second on (start-up, linking and probing, is counted in startMs).
    await sleep(1000);
    const cpu0 = video.cpuSeconds();
    const bytes0 = video.bytes();
    const w0 = performance.now();
    await sleep(SECONDS * 1000);
    const cpu1 = video.cpuSeconds();
    const bytes1 = video.bytes();
    const wall = (performance.now() - w0) / 1000;
    const memory = memoryMb(video.pid!);
    return {
      page: pageName,
      encoder: name,
      cpuPercent: ((cpu1 - cpu0) / wall) * 100,
      mbPerMinute: (((bytes1 - bytes0) / wall) * 60) / 1e6,
      ...memory,
      startMs,
    };
  } finally {
    await video.stop();
  }
}

/** VP9 in WebM, for comparison: a plain ffmpeg run, stopped with SIGINT. */
async function vp9Sample(
  pageName: string,
  display: { display: string; xauthority: string },
  dir: string,
): Promise<Sample> {
  const path = join(dir, `${pageName}-vp9.webm`);
  const args = [
    ...['-hide_banner', '-nostdin', '-nostats', '-loglevel', 'error'],
    ...['-f', 'x11grab', '-framerate', String(FPS), '-video_size', `${WIDTH}x${HEIGHT}`, '-i', display.display],
    ...['-r', String(FPS), '-c:v', 'libvpx-vp9', '-deadline', 'realtime', '-cpu-used', '8', '-row-mt', '1'],
    ...['-crf', '40', '-b:v', '0', '-g', String(FPS * 10), '-threads', '1', '-f', 'webm', '-y', `file:${path}`],
  ];
  const [command, argv] = dieWithParent('ffmpeg', args);
  const t0 = performance.now();
  const child = spawn(command, argv, {
    stdio: 'ignore',
    env: { ...process.env, XAUTHORITY: display.xauthority },
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    const size = (): number => {
      try {
        return statSync(path).size;
      } catch {
        return 0;
      }
    };
    while (size() === 0) {
      if (performance.now() - t0 > 20_000) throw new Error('ffmpeg (vp9) did not start');
      await sleep(20);
    }
    const startMs = performance.now() - t0;
    await sleep(1000);
    const cpu0 = procCpuSeconds(child.pid!);
    const bytes0 = size();
    const w0 = performance.now();
    await sleep(SECONDS * 1000);
    const cpu1 = procCpuSeconds(child.pid!);
    const bytes1 = size();
    const wall = (performance.now() - w0) / 1000;
    return {
      page: pageName,
      encoder: 'vp9 webm rt cpu-used 8',
      cpuPercent: ((cpu1 - cpu0) / wall) * 100,
      mbPerMinute: (((bytes1 - bytes0) / wall) * 60) / 1e6,
      ...memoryMb(child.pid!),
      startMs,
    };
  } finally {
    child.kill('SIGINT');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  }
}

const ALTERNATIVES: [string, VideoEncoding][] = [
  ['default: superfast crf30 qmin26 key10s t1', DEFAULT_ENCODING],
  ['superfast … with scene cuts', { ...DEFAULT_ENCODING, sceneCut: true }],
  ['ultrafast crf30 qmin26 key10s t1', { ...DEFAULT_ENCODING, preset: 'ultrafast' }],
  ['superfast crf30 qmin0 key2s t1', { ...DEFAULT_ENCODING, qmin: 0, keyframeSeconds: 2 }],
  [
    'ultrafast crf30 qmin0 key2s auto-threads (the brief)',
    { ...DEFAULT_ENCODING, preset: 'ultrafast', qmin: 0, keyframeSeconds: 2, threads: 0, sceneCut: true },
  ],
];

async function main(): Promise<void> {
  const display = await startTestDisplay({ width: WIDTH, height: HEIGHT });
  const web = await startWebServer();
  web.route('/still', page(false));
  web.route('/moving', page(true));
  const dir = mkdtempSync(join(tmpdir(), 'deskbatch-video-bench-'));
  const samples: Sample[] = [];
  try {
    for (const pageName of ['still', 'moving']) {
      const browser = await launchKioskChromium({
        display: display.display,
        width: WIDTH,
        height: HEIGHT,
        url: `${web.origin}/${pageName}`,
      });
      try {
        for (const [name, encoding] of ALTERNATIVES) {
          const s = await x264Sample(pageName, name, encoding, display, dir);
          console.error(JSON.stringify(s));
          samples.push(s);
        }
        const s = await vp9Sample(pageName, display, dir);
        console.error(JSON.stringify(s));
        samples.push(s);
      } finally {
        await browser.close();
      }
    }
  } finally {
    await web.close();
    await display.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(`| page | encoder | ffmpeg CPU, % of a core | MB per minute | RSS / PSS / USS MB | start ms |`);
  console.log(`|---|---|---|---|---|---|`);
  for (const s of samples) {
    console.log(
      `| ${s.page} | ${s.encoder} | ${s.cpuPercent.toFixed(1)} | ${s.mbPerMinute.toFixed(2)} | ${s.rss.toFixed(0)} / ${s.pss.toFixed(0)} / ${s.uss.toFixed(0)} | ${s.startMs.toFixed(0)} |`,
    );
  }
}

await main();
