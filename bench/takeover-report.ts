/**
 * The takeover section's report (bench/takeover.ts): its types as
 * results.json keeps them, a series of trials turned into its spread and
 * figures, and the printed table.
 */
import { figure, mean, median, percentile, round2, type Figure } from './stats.ts';

/** The target for input to photon on loopback. */
export const TARGET_MS = 100;

export type Input = 'mousedown' | 'keydown';
export type PageKind = 'solid' | 'text';

/** One series' spread, in ms: median, 90th percentile (nearest rank), the largest, and how many over the target. */
export interface Spread {
  n: number;
  median_ms: number;
  p90_ms: number;
  max_ms: number;
  over_target: number;
}

/** One trial, in ms after the input (the viewer's event.timeStamp). */
export interface TrialTimes {
  /** The desktop's screen (Xvfb's framebuffer) flipped: VNC's input path and the page's own repaint. */
  screen: number;
  /** The first message of noVNC's socket after the screen's flip reached the page (its event ran). */
  first: number;
  /** The last message before noVNC drew the flip reached the page: the one whose handling drew it. */
  arrived: number;
  /** noVNC drew the flip on its canvas. */
  drawn: number;
  /** Of the time from the screen's flip to the draw, how long noVNC's handler ran on the update's messages. */
  handled: number;
  /** The first animation frame of the viewer that shows it. */
  photon: number;
  /** Bytes of noVNC's socket from the screen's flip to the draw: the update. */
  bytes: number;
}

export interface LatencySeries {
  id: string;
  name: string;
  input: Input;
  page: PageKind;
  /** Input → the viewer's frame showing it: what the target is about. */
  photon: Spread;
  /** Input → noVNC drew it: the same without the viewer's frame, the lower bound. */
  drawn: Spread;
  samples: TrialTimes[];
}

export interface CpuWindow {
  what: string;
  seconds: number;
  /** Share of one core, in percent. */
  x11vnc_percent: number;
  /** The daemon process alone (its VNC bridge), not its children. */
  daemon_percent: number;
  /** Every process of the desktop's Chromium (the agent's page), and of the viewer's (noVNC). */
  desktop_chromium_percent: number;
  viewer_chromium_percent: number;
  /** Updates noVNC drew on its canvas, per second. */
  viewer_draws_per_s: number;
}

/** The lowest latency a frame stream of the daemon's own could have on one page, from medians of this run. */
export interface FrameStream {
  page: PageKind;
  /** A `left_click` batch sent → the desktop's screen flipped: the daemon's input path and the page's repaint. */
  click_to_screen_ms: number;
  /** Capture + JPEG encode alone (the floor child); back to back, the interval between frames. */
  capture_encode_ms: number;
  half_interval_ms: number;
  /** A one-call JPEG screenshot batch: capture, encode, base64, the socket, JSON. */
  capture_encode_transfer_ms: number;
  /** The JPEG decoded and drawn in the viewer page. */
  decode_ms: number;
  jpeg_bytes: number;
  floor_ms: number;
  /** VNC's click → noVNC drew it, on the same page: the same end point. */
  vnc_drawn_ms: number;
}

export interface TakeoverReport {
  figures: Figure[];
  latency: LatencySeries[];
  take_ms: number[];
  x11vnc_start_ms: number[];
  cpu: CpuWindow[];
  x11vnc_rss_mib: { still: number; after_flipping: number; peak: number };
  frame_stream: FrameStream[];
  /** The viewer's clock against the bench's (ms), to place the desktop's screen change on the page's time line. */
  clock: { offset: number; uncertainty: number };
  target_ms: number;
}

function spread(samples: readonly number[]): Spread {
  return {
    n: samples.length,
    median_ms: round2(median(samples)),
    p90_ms: round2(percentile(samples, 0.9)),
    max_ms: round2(Math.max(...samples)),
    over_target: samples.filter((v) => v > TARGET_MS).length,
  };
}

export const ON: Record<PageKind, string> = { solid: 'black/white flip', text: 'text page inverts' };

export function series(input: Input, kind: PageKind, samples: TrialTimes[]): LatencySeries {
  const what = input === 'mousedown' ? 'click' : 'key';
  return {
    id: `takeover.${what}.${kind}`,
    name: `takeover: ${what} → photon, ${ON[kind]}`,
    input,
    page: kind,
    photon: spread(samples.map((s) => s.photon)),
    drawn: spread(samples.map((s) => s.drawn)),
    samples: samples.map((s) => ({
      screen: round2(s.screen),
      first: round2(s.first),
      arrived: round2(s.arrived),
      drawn: round2(s.drawn),
      handled: round2(s.handled),
      photon: round2(s.photon),
      bytes: s.bytes,
    })),
  };
}

/** The series' figures: the whole (input → photon), then its parts, each per trial. */
export function seriesFigures(s: LatencySeries): Figure[] {
  const t = s.samples;
  const part = (id: string, name: string, of: (x: TrialTimes) => number): Figure =>
    figure(`${s.id}.${id}`, name, t.map(of));
  return [
    figure(
      `${s.id}.photon`,
      s.name,
      t.map((x) => x.photon),
      { sent_bytes: mean(t.map((x) => x.bytes)) },
    ),
    part('drawn', '  input → drawn on the noVNC canvas', (x) => x.drawn),
    part('screen', "    input → the desktop's screen flipped", (x) => x.screen),
    part('to-first', "    screen flipped → the update's first message at the viewer", (x) => x.first - x.screen),
    part('to-arrived', '    first message → last message', (x) => x.arrived - x.first),
    part('to-drawn', '    last message → drawn (its handling by noVNC)', (x) => x.drawn - x.arrived),
    part('handled', "    (within first message → drawn: noVNC's handler on the messages, summed)", (x) => x.handled),
    part('to-frame', "    drawn → the viewer's frame", (x) => x.photon - x.drawn),
  ];
}

export function takeoverTable(r: TakeoverReport): string {
  const cell = (v: number, w = 8): string => (Number.isFinite(v) ? v.toFixed(2) : 'n/a').padStart(w);
  const sp = (s: Spread): string =>
    `${cell(s.median_ms)} ${cell(s.p90_ms)} ${cell(s.max_ms)} ${String(s.over_target).padStart(5)}`;
  const w = Math.max(...r.latency.map((s) => s.name.length));
  const head = `${'series'.padEnd(w)}  photon: median      p90      max  >100   drawn: median      p90      max  >100    n`;
  const lat = r.latency.map(
    (s) => `${s.name.padEnd(w)}        ${sp(s.photon)}        ${sp(s.drawn)} ${String(s.photon.n).padStart(4)}`,
  );
  const cpu = r.cpu.map(
    (c) =>
      `${c.what.padEnd(40)} ${cell(c.x11vnc_percent)} ${cell(c.daemon_percent)} ${cell(c.desktop_chromium_percent, 9)} ` +
      `${cell(c.viewer_chromium_percent, 9)} ${cell(c.viewer_draws_per_s, 9)}   (${c.seconds} s)`,
  );
  const streams = r.frame_stream.map(
    (f) =>
      `${ON[f.page].padEnd(18)} ${cell(f.click_to_screen_ms)} + ${cell(f.half_interval_ms)} + ${cell(f.capture_encode_transfer_ms)} + ${cell(f.decode_ms)} = ${cell(f.floor_ms)}   VNC ${cell(f.vnc_drawn_ms)}   (JPEG ${f.jpeg_bytes} B)`,
  );
  return [
    `Takeover: input to photon through x11vnc and noVNC, measured in the viewer page (ms; >${r.target_ms}: samples over the target)`,
    head,
    ...lat,
    `(viewer clock − bench clock: ${r.clock.offset} ± ${r.clock.uncertainty} ms)`,
    '',
    `take ("Take control" → noVNC connected): ${r.take_ms.join(', ')} ms; x11vnc's own start: ${r.x11vnc_start_ms.join(', ')} ms`,
    '',
    `${'CPU, % of one core'.padEnd(40)}   x11vnc   daemon  Chromium: desktop  viewer   updates drawn/s`,
    ...cpu,
    `x11vnc RSS: ${r.x11vnc_rss_mib.still} MiB still, ${r.x11vnc_rss_mib.after_flipping} MiB after flipping, peak ${r.x11vnc_rss_mib.peak} MiB`,
    '',
    "A frame stream of the daemon's own, at least (medians, ms): click → screen + half an interval of back-to-back",
    'captures + capture/encode/transfer + decode/draw, beside VNC click → drawn on the same page',
    ...streams,
  ].join('\n');
}
