/**
 * The bench's daemon: its own process, started by the one starter of the soak
 * and the bench (testkit/daemon-process.ts), with its warnings and errors
 * echoed to the bench's stderr. On top: a warm-up call that waits for the
 * desktop worker, fresh connections, and the memory figures of the daemon and
 * its worker. `stop()` also removes its temp folder.
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ImageFormat } from '../src/base/image.ts';
import { startDaemonProcess as startProcess } from '../testkit/daemon-process.ts';
import { FRAMEBUFFER_ENV } from '../src/desktop-driver/worker-protocol.ts';
import { desktopWorkerPids, processFootprint } from '../testkit/faults.ts';
import { BenchClient, nextId, toolUse } from './client.ts';

export const BENCH_TOKEN = 'bench-token-0123456789abcdefghij';
const STOP_GRACE_MS = 15_000;
const GC_PRELOAD = new URL('./gc-on-signal.mjs', import.meta.url).href;
/** Time for a full GC to run and V8 to return pages, before RSS is read again. */
const COLLECT_WAIT_MS = 500;

export interface DaemonProcessOptions {
  display: string;
  /** The display's framebuffer file (src/desktop-driver/xvfb.ts `VirtualDisplay.framebuffer`), as an operator passes it. */
  framebuffer?: string;
  format: ImageFormat;
  browser: 'off' | 'headless' | 'headful';
  /**
   * Preload bench/gc-on-signal.mjs with --expose-gc (in NODE_OPTIONS, so the
   * desktop worker gets it too): `footprint({ collect: true })` can then ask
   * both processes for a full garbage collection and their heap figures.
   */
  gcOnSignal?: boolean;
  /** Return as soon as it listens, without the warm-up call that waits for the desktop worker (default: wait). */
  waitForWorker?: boolean;
  /** More flags for `serve` (e.g. `--record`). */
  extraArgs?: readonly string[];
  /** Keep every line it logs in a file of its temp folder (`DaemonProcess.logFile`), to read figures it logs. */
  keepLog?: boolean;
}

/** process.memoryUsage() of a process right after a full GC, in bytes. */
export interface HeapUsage {
  heapUsed: number;
  heapTotal: number;
  external: number;
  arrayBuffers: number;
}

export interface Footprint {
  rss: number;
  /** The anonymous part of RSS (heaps, malloc), from /proc/<pid>/status RssAnon; the rest is mapped files. */
  rssAnon: number;
  /** Only after a collection, from processes started with `gcOnSignal`. */
  heap?: HeapUsage;
}

export interface DaemonProcess {
  url: string;
  pid: number;
  /** A fresh connection (a new session). */
  connect(): Promise<BenchClient>;
  /** Where its recordings go (`--record`), inside its own folder. */
  recordingsDir: string;
  /** Its log, one JSON object a line, with `keepLog` (removed by stop(), like the folder it is in). */
  logFile: string | undefined;
  /** RSS of the daemon process and of its desktop worker child; with `collect`, after a full GC, and their heaps. */
  footprint(options?: { collect?: boolean }): Promise<{ daemon: Footprint; worker: Footprint | undefined }>;
  stop(): Promise<void>;
}

export async function startDaemonProcess(options: DaemonProcessOptions): Promise<DaemonProcess> {
  const dir = await mkdtemp(join(tmpdir(), 'deskbatch-bench-'));
  const args = [
    ...['--host', '127.0.0.1', '--port', '0'],
    ...['--browser', options.browser],
    ...['--screenshot-format', options.format],
    ...['--screenshots-dir', join(dir, 'screenshots'), '--downloads-dir', join(dir, 'downloads')],
    ...['--log-level', 'info'],
    // The bench's pages are served on 127.0.0.1, which the browser reaches only through this opt-in.
    '--allow-private-networks',
    // Recordings, when a bench turns them on, go into this daemon's own folder, removed by stop().
    ...['--recordings-dir', join(dir, 'recordings')],
    ...(options.extraArgs ?? []),
  ];
  const child = await startProcess({
    display: options.display,
    token: BENCH_TOKEN,
    args,
    ...(options.keepLog ? { logFile: join(dir, 'daemon.log') } : {}),
    env: {
      ...(options.framebuffer ? { [FRAMEBUFFER_ENV]: options.framebuffer } : {}),
      ...(options.gcOnSignal
        ? { NODE_OPTIONS: withGcPreload(process.env.NODE_OPTIONS), DESKBATCH_BENCH_HEAP_DIR: dir }
        : {}),
    },
    echo: true,
  }).catch(async (err: unknown) => {
    await rm(dir, { recursive: true, force: true });
    throw err;
  });
  const stop = once(async () => {
    await child.stop(STOP_GRACE_MS);
    await rm(dir, { recursive: true, force: true });
  });
  const daemon: DaemonProcess = {
    url: child.url,
    pid: child.pid,
    connect: () => BenchClient.open(child.url, BENCH_TOKEN),
    recordingsDir: join(dir, 'recordings'),
    logFile: options.keepLog ? join(dir, 'daemon.log') : undefined,
    footprint: (opts) => footprint(child.pid, dir, opts?.collect ?? false),
    stop,
  };
  try {
    if (options.waitForWorker !== false) await waitForWorker(daemon);
    return daemon;
  } catch (err) {
    await stop();
    throw err;
  }
}

/** The desktop worker starts after the daemon listens (1–3 s): one call waits for it. */
async function waitForWorker(daemon: DaemonProcess): Promise<void> {
  const client = await daemon.connect();
  try {
    await client.batch(nextId('warm'), [toolUse('computer', 'cursor_position')]);
  } finally {
    client.close();
  }
}

async function footprint(
  pid: number,
  heapDir: string,
  collect: boolean,
): Promise<{ daemon: Footprint; worker: Footprint | undefined }> {
  const [workerPid] = await desktopWorkerPids(pid);
  const asked = collect ? [pid, workerPid].filter((p): p is number => p !== undefined && catchesSigusr2(p)) : [];
  for (const p of asked) {
    await rm(heapFile(heapDir, p), { force: true });
    process.kill(p, 'SIGUSR2');
  }
  if (asked.length) await sleep(COLLECT_WAIT_MS);
  const one = async (p: number): Promise<Footprint> => {
    const rss = (await processFootprint(p)).rssBytes;
    const rssAnon = await anonRss(p);
    if (!asked.includes(p)) return { rss, rssAnon };
    const heap = await readFile(heapFile(heapDir, p), 'utf8').then(
      (text) => JSON.parse(text) as HeapUsage,
      () => undefined,
    );
    return heap ? { rss, rssAnon, heap } : { rss, rssAnon };
  };
  return { daemon: await one(pid), worker: workerPid === undefined ? undefined : await one(workerPid) };
}

const heapFile = (dir: string, pid: number): string => join(dir, `${pid}.json`);

async function anonRss(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  return Number(/^RssAnon:\s+(\d+)\s+kB/m.exec(status)?.[1] ?? NaN) * 1024;
}

/** Whether `pid` has a SIGUSR2 handler (SigCgt in /proc): the signal's default action would end the process. */
function catchesSigusr2(pid: number): boolean {
  try {
    const caught = /^SigCgt:\s+([0-9a-f]+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return caught !== undefined && (BigInt(`0x${caught}`) & (1n << 11n)) !== 0n; // SIGUSR2 is 12
  } catch {
    return false;
  }
}

function withGcPreload(existing: string | undefined): string {
  return [existing, '--expose-gc', `--import=${GC_PRELOAD}`].filter(Boolean).join(' ');
}

function once(fn: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  return () => (running ??= fn());
}
