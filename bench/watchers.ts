/**
 * Watchers never slow the agent (issue 36, docs/VIEWER.md "Live view"): the agent's one-call `screenshot`
 * batch and one-call `left_click` batch, on a screen that moves all the time, with 0, 1 and 4 watchers of
 * the desktop's live view; the target is each p50 within 10% of the same batch with none.
 *
 * Set-up: a daemon process (bench/daemon-process.ts, `--browser headful`, JPEG screenshots) on a 1280x800
 * Xvfb of its own, so one shared desktop; its agent's page moves a 240 px box across the window every
 * frame (a spinner, a video: the screen a watcher sees change all the time). Each watcher is a WebSocket
 * to `/viewer/vnc` with the token, doing what noVNC does: the RFB handshake, noVNC's encodings (Tight,
 * ZRLE, Hextile, Raw, CopyRect), then an incremental update request on every frame (60 a second); what
 * comes back crosses the daemon's bridge and is counted, not drawn (a viewer's drawing is its own
 * machine's cost, not the daemon's).
 *
 * The watcher counts are not interleaved call by call (x11vnc starts with the first watcher and stops with
 * the last): they run in rounds, each round every count in turn, starting with the next count each time,
 * so load that drifts during the run falls on all of them alike. `BENCH_ONLY=watchers` runs this alone.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import WebSocket from 'ws';
import { startTestDisplay } from '../testkit/display.ts';
import { startWebServer } from '../testkit/web.ts';
import { nextId, toolUse, type BenchClient } from './client.ts';
import { BENCH_TOKEN, startDaemonProcess } from './daemon-process.ts';
import { figure, ITERATIONS, positiveInt, progress, round2, WARMUP, type Figure } from './stats.ts';

const DESKTOP = { width: 1280, height: 800 };
export const WATCHER_COUNTS = [0, 1, 4] as const;
/** Rounds of every count; each round times ITERATIONS / ROUNDS batches of each kind per count. */
const ROUNDS = positiveInt(process.env.BENCH_WATCHER_ROUNDS, 3);

/** A box that crosses the window, moved on every animation frame. */
const MOVING_PAGE = `<!doctype html><html><head><title>moving</title><style>
html, body { margin: 0; height: 100%; background: #fff; overflow: hidden; }
#box { position: fixed; top: 200px; left: 0; width: 240px; height: 240px; background: #c33; }
</style></head><body><div id="box"></div><script>
const box = document.getElementById('box');
let x = 0;
const step = () => { x = (x + 12) % (innerWidth - 240); box.style.transform = 'translateX(' + x + 'px)'; requestAnimationFrame(step); };
requestAnimationFrame(step);
</script></body></html>`;

/** noVNC's encodings (its core/rfb.js _sendEncodings): CopyRect, Tight, ZRLE, Hextile, Raw, quality 6, compression 2. */
const NOVNC_ENCODINGS = [1, 7, 16, 5, 0, -32 + 6, -256 + 2];

/** One watcher: noVNC's side of the RFB handshake, then an update request every frame, the answers counted. */
class Watcher {
  bytes = 0;
  private timer: NodeJS.Timeout | undefined;
  private constructor(private readonly ws: WebSocket) {}

  static async open(url: string): Promise<Watcher> {
    const ws = new WebSocket(url, ['deskbatch.vnc.v1', `deskbatch.token.${BENCH_TOKEN}`], {
      perMessageDeflate: false,
    });
    const w = new Watcher(ws);
    await new Promise<void>((resolve, reject) => {
      let buffer = Buffer.alloc(0);
      let phase: 'version' | 'security' | 'result' | 'init' | 'messages' = 'version';
      ws.on('message', (data: Buffer) => {
        w.bytes += data.length;
        if (phase === 'messages') return;
        buffer = Buffer.concat([buffer, data]);
        if (phase === 'version' && buffer.length >= 12) {
          ws.send(Buffer.from('RFB 003.008\n'));
          buffer = buffer.subarray(12);
          phase = 'security';
        }
        if (phase === 'security' && buffer.length >= 1 && buffer.length >= 1 + buffer[0]!) {
          if (!buffer.subarray(1, 1 + buffer[0]!).includes(1)) return reject(new Error('no None security type'));
          ws.send(Buffer.from([1]));
          buffer = buffer.subarray(1 + buffer[0]!);
          phase = 'result';
        }
        if (phase === 'result' && buffer.length >= 4) {
          if (buffer.readUInt32BE(0) !== 0) return reject(new Error('VNC security failed'));
          ws.send(Buffer.from([1])); // ClientInit, shared
          buffer = buffer.subarray(4);
          phase = 'init';
        }
        if (phase === 'init' && buffer.length >= 24 && buffer.length >= 24 + buffer.readUInt32BE(20)) {
          phase = 'messages';
          const encodings = Buffer.alloc(4 + 4 * NOVNC_ENCODINGS.length);
          encodings[0] = 2;
          encodings.writeUInt16BE(NOVNC_ENCODINGS.length, 2);
          NOVNC_ENCODINGS.forEach((e, i) => encodings.writeInt32BE(e, 4 + 4 * i));
          ws.send(encodings);
          const request = (incremental: boolean): Buffer => {
            const b = Buffer.alloc(10);
            b[0] = 3;
            b[1] = incremental ? 1 : 0;
            b.writeUInt16BE(DESKTOP.width, 6);
            b.writeUInt16BE(DESKTOP.height, 8);
            return b;
          };
          ws.send(request(false));
          w.timer = setInterval(() => ws.readyState === WebSocket.OPEN && ws.send(request(true)), 16);
          resolve();
        }
      });
      ws.once('unexpected-response', (_req, res) => reject(new Error(`VNC socket refused: ${res.statusCode}`)));
      ws.once('error', reject);
      ws.once('close', () => reject(new Error('VNC socket closed during the handshake')));
    });
    return w;
  }

  close(): void {
    clearInterval(this.timer);
    this.ws.close();
  }
}

export interface WatchersReport {
  figures: Figure[];
  /** Each count's p50 over the p50 with no watcher, per batch kind. */
  ratios: Array<{ kind: string; watchers: number; ratio: number; within_target: boolean }>;
  /** Bytes a watcher received per second, on average, per count. */
  watcher_bytes_per_s: Record<string, number>;
}

export async function watchersSection(): Promise<WatchersReport> {
  const stops: Array<() => Promise<void>> = [];
  try {
    const web = await startWebServer();
    stops.push(() => web.close());
    web.route('/moving', MOVING_PAGE);
    const display = await startTestDisplay(DESKTOP);
    stops.push(() => display.stop());
    progress('watchers: starting a daemon (headful browser, jpeg)');
    const daemon = await startDaemonProcess({ display: display.display, format: 'jpeg', browser: 'headful' });
    stops.push(() => daemon.stop());
    const agent: BenchClient = await daemon.connect();
    stops.push(async () => agent.close());
    await agent.paceFor(1);
    await agent.batch(nextId('w'), [toolUse('browser', 'navigate', { url: `${web.origin}/moving` })]);
    const vncUrl = `${daemon.url.replace(/\/v1$/, '/viewer/vnc')}?desktop=shared`;

    const watchers: Watcher[] = [];
    stops.push(async () => watchers.splice(0).forEach((w) => w.close()));
    const setWatchers = async (n: number): Promise<void> => {
      while (watchers.length > n) watchers.pop()!.close();
      while (watchers.length < n) watchers.push(await Watcher.open(vncUrl));
      // Let x11vnc's first full frames go out before timing.
      if (n > 0) await sleep(500);
    };
    const kinds = {
      screenshot: () => [toolUse('computer', 'screenshot')],
      click: () => [toolUse('computer', 'left_click', { coordinate: [640, 100] })],
    };
    const times: Record<string, number[]> = {};
    const bytes: Record<string, { bytes: number; ms: number }> = {};
    const perRound = Math.max(1, Math.ceil(ITERATIONS / ROUNDS));
    for (let round = 0; round < ROUNDS; round++) {
      for (let k = 0; k < WATCHER_COUNTS.length; k++) {
        const n = WATCHER_COUNTS[(round + k) % WATCHER_COUNTS.length]!;
        progress(`watchers: round ${round + 1}/${ROUNDS}, ${n} watcher(s)`);
        await setWatchers(n);
        const before = watchers.reduce((s, w) => s + w.bytes, 0);
        const t0 = performance.now();
        for (let i = 0; i < (round === 0 ? WARMUP : 0) + perRound; i++) {
          for (const [kind, make] of Object.entries(kinds)) {
            await agent.paceFor(1);
            const s = performance.now();
            await agent.batch(nextId('w'), make());
            if (round > 0 || i >= WARMUP) (times[`${kind}.${n}`] ??= []).push(performance.now() - s);
          }
        }
        const b = (bytes[String(n)] ??= { bytes: 0, ms: 0 });
        b.bytes += watchers.reduce((s, w) => s + w.bytes, 0) - before;
        b.ms += performance.now() - t0;
      }
    }
    await setWatchers(0);
    const figures: Figure[] = [];
    const ratios: WatchersReport['ratios'] = [];
    for (const kind of Object.keys(kinds)) {
      const base = figure(
        `watchers.${kind}.0`,
        `${kind}, one-call batch, moving screen, 0 watchers`,
        times[`${kind}.0`]!,
      );
      for (const n of WATCHER_COUNTS) {
        const f =
          n === 0
            ? base
            : figure(
                `watchers.${kind}.${n}`,
                `${kind}, one-call batch, moving screen, ${n} watcher(s)`,
                times[`${kind}.${n}`]!,
              );
        figures.push(f);
        if (n > 0) {
          const ratio = round2(f.median_ms / base.median_ms);
          ratios.push({ kind, watchers: n, ratio, within_target: ratio <= 1.1 });
        }
      }
    }
    const watcher_bytes_per_s = Object.fromEntries(
      Object.entries(bytes).map(([n, b]) => [n, Number(n) ? Math.round(b.bytes / Number(n) / (b.ms / 1000)) : 0]),
    );
    return { figures, ratios, watcher_bytes_per_s };
  } finally {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
  }
}

/** The section's table: each figure, and each count's p50 against none. */
export function watchersTable(report: WatchersReport): string {
  const rows = report.figures.map(
    (f) =>
      `${f.name.padEnd(58)} p50 ${String(f.median_ms).padStart(8)} ms  p95 ${String(f.p95_ms).padStart(8)} ms  n ${f.n}`,
  );
  const ratios = report.ratios.map(
    (r) =>
      `${r.kind} with ${r.watchers} watcher(s) / none: ${r.ratio} (target ≤ 1.10: ${r.within_target ? 'met' : 'MISSED'})`,
  );
  const bytes = Object.entries(report.watcher_bytes_per_s)
    .filter(([n]) => n !== '0')
    .map(([n, b]) => `${n} watcher(s): ${Math.round(b / 1024)} KiB/s each`);
  return [...rows, '', ...ratios, '', `bytes to each watcher: ${bytes.join(', ')}`].join('\n');
}
