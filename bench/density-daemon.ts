/**
 * The density section's daemons (bench/density.ts): each its own process,
 * started as an operator starts it (testkit/daemon-process.ts) with no
 * DISPLAY, so it runs its pool or a shared desktop of its own; every one still
 * running is stopped on the way out (`stopAll`). And what is read from one
 * over HTTP: /metrics (a sample, each desktop's memory) and /readyz, polled
 * until a pool is warm or free.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { startDaemonProcess, type DaemonProcess } from '../testkit/daemon-process.ts';
import { BENCH_TOKEN } from './daemon-process.ts';
import { progress } from './stats.ts';

const STOP_GRACE_MS = 20_000;
/** Starting 8 desktops at once on 2 loaded cores takes a while. */
export const WARM_TIMEOUT_MS = 240_000;
export const POLL_MS = 20;
/** Polling /metrics: the handshake budget's rate (10 a second), so a wait never spends it. */
export const METRICS_POLL_MS = 100;
export const MIB = 1024 * 1024;

export const DENSITY_SIZE = { width: 1280, height: 800 };

export interface Daemon {
  proc: DaemonProcess;
  /** http://127.0.0.1:PORT */
  base: string;
  url: string;
  label: string;
  /** When /metrics was last read (performance.now()): its per-desktop memory is cached for a while. */
  scrapedAt: number;
  stop(): Promise<void>;
}

/** Stops for every daemon still running: called in `finally`s, and on SIGINT/SIGTERM. */
const live = new Set<() => Promise<void>>();

export async function startDaemon(label: string, flags: string[]): Promise<Daemon> {
  const dir = await mkdtemp(join(tmpdir(), 'deskbatch-density-'));
  const args = [
    ...['--host', '127.0.0.1', '--port', '0'],
    ...['--browser', 'headful', '--screenshot-format', 'png'],
    ...['--display-size', `${DENSITY_SIZE.width}x${DENSITY_SIZE.height}`],
    ...['--screenshots-dir', join(dir, 'screenshots'), '--downloads-dir', join(dir, 'downloads')],
    // A closed session ends (and its desktop goes) at once: no resume is wanted here.
    ...['--resume-window-ms', '1'],
    ...['--log-level', 'info'],
    // The agents' page is served on 127.0.0.1, which the browser reaches only through this opt-in.
    '--allow-private-networks',
    ...flags,
  ];
  // DISPLAY empty: the daemon owns its displays (a pool, or with --shared-desktop one Xvfb of its own).
  const proc = await startDaemonProcess({ display: '', token: BENCH_TOKEN, args, echo: true }).catch(
    async (err: unknown) => {
      await rm(dir, { recursive: true, force: true });
      throw err;
    },
  );
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> =>
    (stopping ??= (async () => {
      live.delete(stop);
      const exit = await proc.stop(STOP_GRACE_MS);
      if (exit.killed) progress(`${label}: the daemon had to be killed (SIGKILL) after ${STOP_GRACE_MS} ms`);
      await rm(dir, { recursive: true, force: true });
    })());
  live.add(stop);
  const base = proc.url.replace(/^ws:/, 'http:').replace(/\/v1$/, '');
  return { proc, base, url: proc.url, label, scrapedAt: -Infinity, stop };
}

export async function stopAll(): Promise<void> {
  await Promise.all([...live].map((stop) => stop().catch(() => undefined)));
}

/**
 * /metrics of `d`. Its requests count against the daemon's handshake budget (a burst of 100, then 10
 * a second: docs/OPERATIONS.md); past it, the daemon's Retry-After is waited out, a few times at most.
 */
export async function metrics(d: Daemon): Promise<string> {
  for (let attempt = 0; ; attempt++) {
    d.scrapedAt = performance.now();
    const res = await fetch(`${d.base}/metrics`, { headers: { authorization: `Bearer ${BENCH_TOKEN}` } });
    if (res.status === 429 && attempt < 5) {
      await res.arrayBuffer();
      progress(`${d.label}: /metrics past the handshake budget; waiting as its Retry-After says`);
      await sleep(1000 * Number(res.headers.get('retry-after') ?? 1));
      continue;
    }
    if (!res.ok) throw new Error(`${d.label}: /metrics answered ${res.status}`);
    return res.text();
  }
}

/** One sample's value from Prometheus text, e.g. `deskbatch_desktops{state="warm"}`; NaN when absent. */
export function metric(text: string, name: string): number {
  for (const line of text.split('\n')) {
    if (line.startsWith(name) && line.charAt(name.length) === ' ') return Number(line.slice(name.length + 1));
  }
  return NaN;
}

/** `deskbatch_desktop_memory_bytes{desktop="dN"}` of every desktop, MiB. */
export function desktopMemoryMetric(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of text.matchAll(/^deskbatch_desktop_memory_bytes\{desktop="([^"]+)"\} (\S+)$/gm)) {
    out.set(m[1]!, Number(m[2]) / MIB);
  }
  return out;
}

export async function ready(d: Daemon): Promise<boolean> {
  const res = await fetch(`${d.base}/readyz`);
  await res.arrayBuffer();
  return res.status === 200;
}

export async function waitUntil(what: string, probe: () => Promise<boolean>, timeoutMs: number, everyMs = POLL_MS) {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await probe()) return performance.now();
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** Whether `d` holds at least `n` warm desktops (started, ready, leased to no one). */
export async function hasWarm(d: Daemon, n: number): Promise<boolean> {
  return metric(await metrics(d), 'deskbatch_desktops{state="warm"}') >= n;
}

export async function waitWarm(d: Daemon, n: number): Promise<void> {
  await waitUntil(`${n} warm desktops on ${d.label}`, () => hasWarm(d, n), WARM_TIMEOUT_MS, 200);
}
