/**
 * The desktop video of a recorded session (docs/RECORDING.md, `video.mp4` and
 * `video.vtt`): one X display recorded by Debian's `ffmpeg` (x11grab), H.264
 * in fragmented MP4, plus WebVTT chapters marking the calls.
 *
 * - Fragmented MP4 (`empty_moov`: the header holds no sample table, each
 *   fragment carries its own), cut at every keyframe and at least once a
 *   second (`-frag_duration`), each written out at once (`-flush_packets 1`;
 *   without it a still screen's small fragments wait in ffmpeg's buffer): a
 *   daemon killed with SIGKILL leaves a file that plays up to about its last
 *   second.
 * - Encoding (DEFAULT_ENCODING): libx264 `superfast`, CRF 30 with a floor on
 *   the quantiser, a keyframe every 10 s, one thread, constant frame rate.
 *   Measured choices, see the comment there.
 * - ffmpeg never outlives this process: it is started as every child is
 *   (src/base/child-process.ts: setpriv's pdeathsig and an exit hook).
 * - Its argv is built only from validated values: the display name matches
 *   `:N` or `:N.S`, sizes and rates are bounded numbers, and the output path
 *   goes through ffmpeg's `file:` protocol, so no name is read as an option or
 *   as another protocol.
 * - Time zero: x11grab stamps frames with the wall clock, and ffmpeg prints
 *   the first one's as the input's `start:`; the output starts at 0 there. So
 *   `startedAt` is that stamp, not a guess from the time of spawning.
 * - ffmpeg's messages go to the log (warnings and errors, a bounded number),
 *   never to the model; the last lines are quoted in start errors.
 */
import { appendFileSync, chmodSync, closeSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { resolve } from 'node:path';
import {
  OUTPUT_LINE_CHARS,
  exitDescription,
  OutputLines,
  runTool,
  running,
  programPid,
  signalChild,
  startChild,
  StartError,
  stopChild,
  type ChildProcess,
  type Confinement,
  type StartErrorCode,
} from '../base/child-process.ts';
import { LOCAL_DISPLAY_NAME } from '../desktop-driver/display.ts';
import type { Logger } from '../base/log.ts';

/**
 * How the video is encoded. The recorder leaves it at DEFAULT_ENCODING; the
 * bench (bench/recording-video.ts) tries others.
 */
export interface VideoEncoding {
  /** libx264 preset. */
  preset: 'ultrafast' | 'superfast' | 'veryfast' | 'faster' | 'fast' | 'medium';
  /** Constant rate factor (0-51, lower is better). */
  crf: number;
  /** Lowest quantiser the rate control may use (0-51). */
  qmin: number;
  /** Seconds between keyframes (x264 also puts one at a scene cut). */
  keyframeSeconds: number;
  /** Encoder threads; 0: as many as x264 likes (1.5 per core). */
  threads: number;
  /** Whether x264 puts a keyframe where the picture changes a lot (a scroll does). */
  sceneCut: boolean;
}

/**
 * Chosen by measurement (bench/recording-video.ts, its header has the table):
 * 1280x800 at 5 fps, Chromium full screen on a page of text, still or
 * scrolling and animated, on a shared 2-core machine. ffmpeg's CPU in % of
 * one core and MB of video per minute, still / moving:
 * - this encoding: 4.0 / 4.6 % CPU, 0.9 / 3.7 MB per minute;
 * - the same with `ultrafast`: 3.1 / 3.4 % CPU, 1.5 / 6.5 MB per minute.
 *   ultrafast codes intra blocks as 16x16 only and without CABAC, so a
 *   keyframe of text costs ~1.6x; one point of a core per desktop buys
 *   recordings 40% smaller (what fills the retention budget and what the
 *   viewer downloads);
 * - `ultrafast`, CRF 30 alone, a keyframe every 2 s, x264's own threads: 3.8
 *   / 4.3 % CPU but 11 / 16 MB per minute. On a still screen CRF keeps
 *   lowering the quantiser (nothing changes, so every bit "improves" the
 *   picture) down to QP 14, so every keyframe of text costs ~350 KB: `qmin`
 *   26 stops that with no visible loss on text, and a keyframe every 10 s
 *   instead of 2 s removes most of the rest. Fragments are cut every second
 *   anyway, so a crash loses no more; seeking decodes at most 50 frames;
 * - VP9 in WebM (libvpx realtime, cpu-used 8): 4.6 / 21 % CPU, 3.7 / 44 MB
 *   per minute and 280 MB of private memory against 62.
 * Also: no scene-cut keyframes (a scroll is a "scene cut": 5% more bytes for
 * nothing), one thread (x264's frame threads hold frames back, a latency the
 * fragments would wait for, and cost memory; 5 fps needs none of them).
 */
export const DEFAULT_ENCODING: VideoEncoding = {
  preset: 'superfast',
  crf: 30,
  qmin: 26,
  keyframeSeconds: 10,
  threads: 1,
  sceneCut: false,
};

export interface VideoOptions {
  /** The X display to record, e.g. `:5`. */
  display: string;
  /**
   * The desktop's sandbox (src/desktop-pool/sandbox.ts): ffmpeg then runs in
   * it, and writes the video to its stdout, a file the daemon opened.
   */
  within?: Confinement;
  /** The display's cookie file (pooled desktops have one), passed as `XAUTHORITY`. */
  xauthority?: string;
  /** The area recorded, from the top left corner: the display's size. An odd side is padded by one black line (H.264 4:2:0 needs even sides). */
  size: { width: number; height: number };
  /** Frames per second, 0.2 to 60. */
  fps: number;
  /** Where the video goes (`…/video.mp4`), created mode 0600. */
  path: string;
  /** Where the chapters go (`…/video.vtt`), created mode 0600. */
  chaptersPath: string;
  log: Logger;
  /** How long ffmpeg may take to start recording; default 15 000 ms. */
  startTimeoutMs?: number;
  /** Default DEFAULT_ENCODING. */
  encoding?: Partial<VideoEncoding>;
}

export type VideoErrorCode = StartErrorCode;

/** The video could not start; `code` says why. Messages quote the end of ffmpeg's output. */
export class VideoError extends StartError {
  override readonly name = 'VideoError';
}

const FFMPEG = 'ffmpeg';
/** ffmpeg links some 200 libraries: on a busy 2-core machine it took up to 3 s to start. */
const FFMPEG_START_TIMEOUT_MS = 15_000;
/** After asking ffmpeg to finish, how long it gets before SIGKILL. */
const FFMPEG_STOP_DEADLINE_MS = 5_000;
/** A fragment is cut at least this often (µs), so a crash loses at most about this much. */
const FRAGMENT_US = 1_000_000;
const MIN_FPS = 0.2;
const MAX_FPS = 60;
/** x11grab cannot capture more than an X screen can be. */
const MAX_SIDE_PX = 16_384;
/** ffmpeg's warnings and errors logged per video; later ones are counted only. */
const FFMPEG_LOGGED_LINES_MAX = 20;
/** Chapter titles are cut to this many characters. */
const MAX_TITLE_CHARS = 200;
/** The kernel's clock ticks per second (`getconf CLK_TCK`), 100 on every Linux architecture node runs on. */
const CLOCK_TICKS = 100;
/** A `start:` stamp further than this from our clock is not a wall-clock time: fall back to ours. */
const MAX_CLOCK_SKEW_MS = 60_000;
/** Limit for the `ffmpeg -devices` / `-encoders` runs of available(). */
const PROBE_TIMEOUT_MS = 30_000;
const FFMPEG_NOT_FOUND = 'ffmpeg not found: run `bash scripts/setup.sh` (Debian package ffmpeg)';

/** A line of `-loglevel level+info` output: `[x11grab @ 0x…] [error] Cannot open display…`. */
const LOG_LINE = /^(?:\[[^\]]*\] )?\[(trace|debug|verbose|info|warning|error|fatal|panic)\] ?(.*)$/;

let availability: Promise<boolean> | undefined;

/** The argv of ffmpeg for `options` (validated by the caller). Exported for the bench and tests. */
export function videoArgs(
  options: Pick<VideoOptions, 'display' | 'size' | 'fps' | 'path'>,
  encoding: VideoEncoding = DEFAULT_ENCODING,
  toStdout = false,
): string[] {
  const { width, height } = options.size;
  const odd = width % 2 === 1 || height % 2 === 1;
  return [
    '-hide_banner',
    '-nostdin',
    '-nostats',
    // Info level, each line tagged with its level: the input's `start:` stamp and the
    // output's header line are info; only warnings and errors are logged.
    '-loglevel',
    'level+info',
    '-f',
    'x11grab',
    '-framerate',
    String(options.fps),
    '-video_size',
    `${width}x${height}`,
    '-draw_mouse',
    '1',
    '-i',
    options.display,
    ...(odd ? ['-vf', 'pad=ceil(iw/2)*2:ceil(ih/2)*2'] : []),
    // Constant frame rate at exactly `fps`, frames placed by their wall-clock
    // stamps (repeated or dropped when ffmpeg falls behind): without it ffmpeg
    // guesses the output rate from the first stamps' jitter (10.08, even 80).
    '-r',
    String(options.fps),
    '-c:v',
    'libx264',
    '-preset',
    encoding.preset,
    '-tune',
    'stillimage',
    '-crf',
    String(encoding.crf),
    '-qmin',
    String(encoding.qmin),
    '-pix_fmt',
    'yuv420p',
    // No B-frames: they would hold frames back and shift the first frame's
    // presentation time off 0 (superfast uses 3).
    '-bf',
    '0',
    '-g',
    String(Math.max(1, Math.round(options.fps * encoding.keyframeSeconds))),
    '-threads',
    String(encoding.threads),
    ...(encoding.sceneCut ? [] : ['-sc_threshold', '0']),
    '-movflags',
    '+frag_keyframe+empty_moov+default_base_moof',
    '-frag_duration',
    String(FRAGMENT_US),
    '-flush_packets',
    '1',
    '-f',
    'mp4',
    '-y',
    toStdout ? 'pipe:1' : `file:${resolve(options.path)}`,
  ];
}

function checkOptions(options: VideoOptions, encoding: VideoEncoding): void {
  const bad = (msg: string): never => {
    throw new VideoError('bad_options', msg);
  };
  if (typeof options.display !== 'string' || !LOCAL_DISPLAY_NAME.test(options.display)) {
    bad(`display must look like :N or :N.S, got ${JSON.stringify(String(options.display).slice(0, 40))}`);
  }
  for (const side of ['width', 'height'] as const) {
    const v = options.size?.[side];
    if (!Number.isInteger(v) || v < 2 || v > MAX_SIDE_PX)
      bad(`size.${side} must be an integer from 2 to ${MAX_SIDE_PX}`);
  }
  if (!Number.isFinite(options.fps) || options.fps < MIN_FPS || options.fps > MAX_FPS) {
    bad(`fps must be a number from ${MIN_FPS} to ${MAX_FPS}, got ${options.fps}`);
  }
  if (typeof options.path !== 'string' || options.path === '') bad('path must be a file path');
  if (typeof options.chaptersPath !== 'string' || options.chaptersPath === '') bad('chaptersPath must be a file path');
  const int = (name: string, v: number, lo: number, hi: number): void => {
    if (!Number.isInteger(v) || v < lo || v > hi) bad(`encoding.${name} must be an integer from ${lo} to ${hi}`);
  };
  int('crf', encoding.crf, 0, 51);
  int('qmin', encoding.qmin, 0, 51);
  int('threads', encoding.threads, 0, 16);
  if (!['ultrafast', 'superfast', 'veryfast', 'faster', 'fast', 'medium'].includes(encoding.preset)) {
    bad('encoding.preset is not a libx264 preset');
  }
  if (!Number.isFinite(encoding.keyframeSeconds) || encoding.keyframeSeconds <= 0 || encoding.keyframeSeconds > 600) {
    bad('encoding.keyframeSeconds must be a number of seconds from 0 to 600');
  }
}

/** Creates (or empties) `path` with mode 0600, before ffmpeg opens it: ffmpeg would create it 0644. */
function createPrivateFile(path: string, content: string): void {
  const fd = openSync(path, 'w', 0o600);
  try {
    chmodSync(path, 0o600);
    if (content) writeFileSync(fd, content);
  } finally {
    closeSync(fd);
  }
}

/** `hh:mm:ss.ttt` of a WebVTT cue timing. */
export function vttTime(ms: number): string {
  const total = Math.max(0, Math.round(ms));
  const h = Math.floor(total / 3_600_000);
  const m = Math.floor(total / 60_000) % 60;
  const s = Math.floor(total / 1000) % 60;
  const t = total % 1000;
  const two = (n: number): string => String(n).padStart(2, '0');
  return `${two(h)}:${two(m)}:${two(s)}.${String(t).padStart(3, '0')}`;
}

/**
 * A chapter title as WebVTT cue text: one line (control and line-separator
 * characters become spaces), no bidirectional overrides, at most
 * MAX_TITLE_CHARS characters, and `&`, `<`, `>` escaped, so the text can
 * neither end the cue, nor open a tag, nor hold `-->`.
 */
export function cueText(title: string): string {
  let text = String(title)
    .toWellFormed()
    .replace(/[\p{Cc}\p{Zl}\p{Zp}]/gu, ' ')
    .replace(/[\u202a-\u202e\u2066-\u2069]/g, '')
    .replace(/\s+/g, ' ')
    .trim();
  const chars = Array.from(text);
  if (chars.length > MAX_TITLE_CHARS) text = `${chars.slice(0, MAX_TITLE_CHARS - 1).join('')}…`;
  if (text === '') text = '(untitled)';
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** ffmpeg's stderr, line by line: what start() waits for, the tail for errors, warnings to the log. */
class FfmpegOutput {
  /** Wall-clock stamp (ms) of the first frame, from the input's `start:`. */
  firstFrameAt: number | undefined;
  /** Our clock when the input's description was read: the fallback for firstFrameAt. */
  inputSeenAt: number | undefined;
  /** Set once the output's header is written: ffmpeg is recording. */
  recording = false;
  onRecording: (() => void) | undefined;
  private inInput = false;
  private logged = 0;
  private dropped = 0;
  /** Set once start() is over: from then on warnings and errors go to the log. */
  log: Logger | undefined;
  /** Its warnings and errors: the last ones are quoted in start errors. */
  readonly lines = new OutputLines({ onLine: (line) => this.line(line) });

  /** Reads one line; says whether it belongs in the tail (a warning or worse). */
  private line(raw: string): boolean {
    const m = LOG_LINE.exec(raw);
    const level = m?.[1] ?? 'info';
    const text = (m?.[2] ?? raw).slice(0, OUTPUT_LINE_CHARS);
    if (level === 'info') {
      if (/^Input #0, x11grab/.test(text)) {
        this.inInput = true;
        this.inputSeenAt = Date.now();
      } else if (this.inInput && this.firstFrameAt === undefined) {
        const start = /\bstart: (\d+(?:\.\d+)?)/.exec(text);
        if (start) {
          const at = Math.round(Number(start[1]) * 1000);
          if (Math.abs(at - Date.now()) < MAX_CLOCK_SKEW_MS) this.firstFrameAt = at;
        }
      }
      if (/^Output #0, mp4/.test(text) && !this.recording) {
        this.inInput = false;
        this.recording = true;
        this.onRecording?.();
      }
      return false;
    }
    if (level !== 'warning' && level !== 'error' && level !== 'fatal' && level !== 'panic') return false;
    if (!this.log) return true;
    if (this.logged < FFMPEG_LOGGED_LINES_MAX) {
      this.logged++;
      // Its harmless start-up warnings are debug; its errors mean frames are being lost.
      if (level === 'warning') this.log.debug(`ffmpeg: ${text}`);
      else this.log.warn(`ffmpeg: ${text}`);
    } else {
      this.dropped++;
    }
    return true;
  }

  droppedLines(): number {
    return this.dropped;
  }
}

/** CPU seconds (user + system) process `pid` used so far, from /proc/<pid>/stat; undefined when it is gone. */
export function processCpuSeconds(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces and parentheses): state is field 3, utime 14, stime 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]);
    return Number.isFinite(ticks) ? ticks / CLOCK_TICKS : undefined;
  } catch {
    return undefined;
  }
}

export class DesktopVideo {
  /** Whether ffmpeg with x11grab and libx264 is installed (checked once, cached). */
  static available(): Promise<boolean> {
    availability ??= (async () => {
      let timedOut = false;
      const run = async (args: string[]): Promise<string> => {
        const { stdout, error } = await runTool(FFMPEG, ['-hide_banner', ...args], { timeoutMs: PROBE_TIMEOUT_MS });
        if (error?.killed) timedOut = true;
        return error ? '' : stdout;
      };
      const [devices, encoders] = await Promise.all([run(['-devices']), run(['-encoders'])]);
      // A machine too busy to answer in time is asked again next time.
      if (timedOut) availability = undefined;
      return /^\s*D\S*\s+x11grab\s/m.test(devices) && /^\s*V\S*\s+libx264\s/m.test(encoders);
    })();
    return availability;
  }

  /** Spawns ffmpeg; resolves once it is recording (its output's header is written), rejects with a VideoError if it cannot start. */
  static async start(options: VideoOptions): Promise<DesktopVideo> {
    const encoding: VideoEncoding = { ...DEFAULT_ENCODING, ...options.encoding };
    checkOptions(options, encoding);
    const log = options.log;
    const spawnedAt = Date.now();
    createPrivateFile(options.path, '');
    try {
      createPrivateFile(options.chaptersPath, 'WEBVTT\n\n');
    } catch (err) {
      rmSync(options.path, { force: true });
      throw err;
    }

    const output = new FfmpegOutput();
    let child: ChildProcess;
    // In a sandbox ffmpeg cannot open the recording's folder: it writes to the file this process opens for it.
    const within = options.within;
    const out = within ? openSync(options.path, 'w') : undefined;
    try {
      ({ child } = await startChild({
        name: 'ffmpeg',
        command: FFMPEG,
        args: videoArgs(options, encoding, within !== undefined),
        ...(within ? { within } : {}),
        spawn: {
          stdio: ['ignore', out ?? 'ignore', 'pipe'],
          // A process group of its own: a Ctrl-C at the daemon's terminal is the
          // daemon's to handle (it stops the video in order), not ffmpeg's.
          detached: true,
          env: { ...process.env, ...(options.xauthority ? { XAUTHORITY: options.xauthority } : {}) },
        },
        error: VideoError,
        notInstalled: FFMPEG_NOT_FOUND,
        timeoutMs: options.startTimeoutMs ?? FFMPEG_START_TIMEOUT_MS,
        exitedBefore: `before recording ${options.display}`,
        notReady: `did not start recording ${options.display}`,
        tail: () => output.lines.quoted(),
        abortSignal: 'SIGKILL',
        ready: (started) => {
          output.lines.read(started.stderr);
          return new Promise<void>((resolve) => (output.onRecording = resolve));
        },
      }));
    } catch (err) {
      rmSync(options.path, { force: true });
      rmSync(options.chaptersPath, { force: true });
      throw err;
    } finally {
      if (out !== undefined) closeSync(out);
    }
    output.log = log;
    const startedAt = output.firstFrameAt ?? output.inputSeenAt ?? spawnedAt;
    log.info('desktop video started', {
      display: options.display,
      pid: programPid(child),
      width: options.size.width,
      height: options.size.height,
      fps: options.fps,
      ms: Date.now() - spawnedAt,
      ...(output.firstFrameAt === undefined ? { clock: 'estimated' } : {}),
    });
    return new DesktopVideo(child, startedAt, options, output);
  }

  /** Epoch ms of the video's time zero (its first frame). */
  readonly startedAt: number;
  private readonly child: ChildProcess;
  private readonly options: VideoOptions;
  private readonly output: FfmpegOutput;
  private stopping: Promise<void> | undefined;
  private lastCpuSeconds = 0;
  private chapterFailed = false;
  private readonly exitListeners: ((reason: string) => void)[] = [];

  private constructor(child: ChildProcess, startedAt: number, options: VideoOptions, output: FfmpegOutput) {
    this.child = child;
    this.startedAt = startedAt;
    this.options = options;
    this.output = output;
    // A forgotten stop() must not keep the process alive (the exit hook and pdeathsig end ffmpeg).
    child.unref();
    (child.stderr as Socket | null)?.unref();
    child.on('error', (err) => options.log.debug('ffmpeg process error', { error: err.message }));
    child.once('close', (code, signal) => {
      if (this.stopping) return;
      const reason = `ffmpeg ${exitDescription(code, signal)}`;
      options.log.warn('desktop video stopped unexpectedly', {
        display: options.display,
        code,
        signal,
        ffmpeg: output.lines.text(),
      });
      for (const listener of this.exitListeners) listener(reason);
    });
  }

  /** ffmpeg's pid while it runs. */
  get pid(): number | undefined {
    return this.running() ? programPid(this.child) : undefined;
  }

  /** Calls `listener` once if ffmpeg exits other than through stop() (the display went, the disk filled). */
  onUnexpectedExit(listener: (reason: string) => void): void {
    this.exitListeners.push(listener);
  }

  /**
   * Appends one WebVTT cue from `startAt` to `endAt` (epoch ms; relative to
   * startedAt in the file, clamped at 0), titled `title` (cueText). The append
   * is synchronous, so a crash keeps every cue written. A failure to write is
   * logged once, never thrown: the session goes on without chapters.
   */
  chapter(title: string, startAt: number, endAt: number): void {
    if (!Number.isFinite(startAt) || !Number.isFinite(endAt)) return;
    const start = Math.max(0, Math.round(startAt - this.startedAt));
    // A cue must end after it starts.
    const end = Math.max(start + 1, Math.round(endAt - this.startedAt));
    try {
      appendFileSync(this.options.chaptersPath, `${vttTime(start)} --> ${vttTime(end)}\n${cueText(title)}\n\n`);
    } catch (err) {
      if (this.chapterFailed) return;
      this.chapterFailed = true;
      this.options.log.warn('cannot write the video chapters', {
        error: (err as NodeJS.ErrnoException).code ?? 'error',
      });
    }
  }

  private paused = false;

  /**
   * Takes no frames until resume(): ffmpeg is stopped (SIGSTOP), so nothing of the screen is grabbed, and
   * the video holds its last frame over the gap (x11grab stamps frames with the wall clock).
   */
  pause(): void {
    if (this.paused || !this.running() || this.stopping) return;
    this.paused = signalChild(this.child, 'SIGSTOP');
  }

  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    if (this.running()) signalChild(this.child, 'SIGCONT');
  }

  /**
   * Asks ffmpeg to finish (SIGINT: it writes its last fragment and exits),
   * and waits for it to exit; SIGKILL after FFMPEG_STOP_DEADLINE_MS (the file stays
   * playable up to its last whole fragment). Idempotent.
   */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      if (!this.running()) return;
      this.resume(); // a stopped ffmpeg would not see the SIGINT until continued
      this.cpuSeconds();
      if ((await stopChild(this.child, { signal: 'SIGINT', deadlineMs: FFMPEG_STOP_DEADLINE_MS })) === 'killed') {
        this.options.log.warn('ffmpeg did not finish in time; killed', { display: this.options.display });
      }
      const dropped = this.output.droppedLines();
      this.options.log.info('desktop video stopped', {
        display: this.options.display,
        bytes: this.bytes(),
        cpu_s: Math.round(this.lastCpuSeconds * 100) / 100,
        ...(dropped ? { ffmpeg_lines_dropped: dropped } : {}),
      });
    })();
    return this.stopping;
  }

  /** CPU seconds (user + system) ffmpeg used so far, from /proc/<pid>/stat; after it exited, the last value read. */
  cpuSeconds(): number {
    const pid = this.pid;
    if (pid === undefined) return this.lastCpuSeconds;
    this.lastCpuSeconds = processCpuSeconds(pid) ?? this.lastCpuSeconds; // undefined: it exited meanwhile
    return this.lastCpuSeconds;
  }

  /** Bytes of the video file written so far. */
  bytes(): number {
    try {
      return statSync(this.options.path).size;
    } catch {
      return 0;
    }
  }

  private running(): boolean {
    return running(this.child);
  }
}
