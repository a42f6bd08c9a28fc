/**
 * Memory: the RSS of a daemon process (and, separately, of its desktop worker
 * child) at rest and across 1,000 screenshots, read from /proc/<pid>/status
 * (VmRSS). The daemon runs as its own process so the figure is its own.
 *
 * To keep this part short it runs on a display of its own, 640x400, showing
 * the same page as the other displays (so the images are real ones, not
 * black), with JPEG screenshots at that size: every screenshot still goes
 * the whole way (grab, RGB, encode, IPC, base64, result cache, file,
 * socket). One
 * screenshot per batch, alternating between two connections (two sessions),
 * so the daemon's per-connection message-rate limit never makes us wait.
 *
 * What may grow, and its bound: each session's result cache (the last 256
 * batch results, at most 32 MiB: src/base/config.ts resultCache), the screenshot
 * store's file list (2,000 files: retention; the images are on disk, not in
 * memory), and libvips' operation cache in the worker (sharp's defaults).
 * With one screenshot per batch over two sessions, both caches are full
 * after 512 screenshots: from then on memory should stay flat.
 *
 * RSS goes up and down by several MiB depending on when V8 last collected,
 * as much as the caches hold. So each reading is taken twice: as found, and
 * right after a full GC in the daemon and its worker (bench/gc-on-signal.mjs,
 * preloaded with --expose-gc into this run's daemon only), which is what
 * growth is judged on.
 */
import { resultBytes } from '../src/server/session.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULT_CONFIG } from '../src/base/config.ts';
import { nextId, toolUse } from './client.ts';
import { startDaemonProcess, type DaemonProcess } from './daemon-process.ts';
import { withBenchDisplay } from './desktop.ts';
import { figure, mean, positiveInt, progress, type Figure } from './stats.ts';

/** 1,000 (issue 5); `BENCH_MEMORY_SCREENSHOTS` overrides, for a quick try of the bench itself. */
export const MEMORY_SCREENSHOTS = positiveInt(process.env.BENCH_MEMORY_SCREENSHOTS, 1_000);
const WARMUP_SCREENSHOTS = 20;
/** RSS is read ten times along the way. */
const SAMPLE_EVERY = Math.max(1, Math.round(MEMORY_SCREENSHOTS / 10));
/** The memory run's own display: small, so 1,000 screenshots stay quick. */
const SIZE = { width: 640, height: 400 };
const MIB = 1024 * 1024;

/** RSS as found, and again right after a full garbage collection in both processes, with the daemon's heap then. */
export interface RssSample {
  screenshots: number;
  daemon_mib: number;
  worker_mib: number | null;
  daemon_gc_mib: number;
  worker_gc_mib: number | null;
  /** The anonymous part of the daemon's RSS after the collection (heaps, malloc; the rest is mapped files). */
  daemon_gc_anon_mib: number;
  /** The daemon's V8 heap in use after the collection, and what V8 has committed for it. */
  daemon_heap_mib: number | null;
  daemon_heap_total_mib: number | null;
  /** The daemon's memory outside the V8 heap held by JS objects (Buffers) after the collection. */
  daemon_external_mib: number | null;
}

export interface MemoryReport {
  settings: string;
  samples: RssSample[];
  rest: RssSample;
  after: RssSample;
  /** RSS after the first half: both result caches are full by then. */
  half: RssSample;
  /** What the result caches can hold in this run, as the daemon counts it: sessions × min(256 × a result, cap). */
  result_cache_bound_mib: number;
  figure: Figure;
}

/** The sample taken closest to `screenshots`. */
function nearest(samples: readonly RssSample[], screenshots: number): RssSample {
  return samples.reduce((a, b) =>
    Math.abs(b.screenshots - screenshots) < Math.abs(a.screenshots - screenshots) ? b : a,
  );
}

const mib = (bytes: number): number => Math.round((bytes / MIB) * 10) / 10;

export async function memoryRun(): Promise<MemoryReport> {
  return withBenchDisplay(SIZE, async (display) => {
    const daemon = await startDaemonProcess({
      display: display.display,
      framebuffer: display.framebuffer,
      format: 'jpeg',
      browser: 'off',
      gcOnSignal: true,
    });
    try {
      return await measure(daemon);
    } finally {
      await daemon.stop();
    }
  });
}

async function measure(daemon: DaemonProcess): Promise<MemoryReport> {
  const clients = [await daemon.connect(), await daemon.connect()];
  const sample = async (screenshots: number): Promise<RssSample> => {
    const raw = await daemon.footprint();
    const collected = await daemon.footprint({ collect: true });
    const heap = collected.daemon.heap;
    return {
      screenshots,
      daemon_mib: mib(raw.daemon.rss),
      worker_mib: raw.worker ? mib(raw.worker.rss) : null,
      daemon_gc_mib: mib(collected.daemon.rss),
      worker_gc_mib: collected.worker ? mib(collected.worker.rss) : null,
      daemon_gc_anon_mib: mib(collected.daemon.rssAnon),
      daemon_heap_mib: heap ? mib(heap.heapUsed) : null,
      daemon_heap_total_mib: heap ? mib(heap.heapTotal) : null,
      daemon_external_mib: heap ? mib(heap.external) : null,
    };
  };
  const shoot = async (i: number): Promise<{ ms: number; bytes: number; cached: number }> => {
    const client = clients[i % clients.length]!;
    await client.paceFor(1);
    const reply = await client.batch(nextId('m'), [toolUse('computer', 'screenshot')]);
    // What the session's result cache counts for this result.
    const cached = resultBytes(reply.message);
    return { ms: reply.ms, bytes: reply.bytes, cached };
  };
  try {
    for (let i = 0; i < WARMUP_SCREENSHOTS; i++) await shoot(i);
    await sleep(1_000);
    const rest = await sample(0);
    const samples = [rest];
    const times: number[] = [];
    const sizes: number[] = [];
    const cachedSizes: number[] = [];
    for (let i = 1; i <= MEMORY_SCREENSHOTS; i++) {
      const { ms, bytes, cached } = await shoot(i);
      times.push(ms);
      sizes.push(bytes);
      cachedSizes.push(cached);
      if (i % SAMPLE_EVERY === 0 || i === MEMORY_SCREENSHOTS) {
        samples.push(await sample(i));
        const last = samples.at(-1)!;
        progress(`memory: ${i} screenshots, daemon RSS ${last.daemon_mib} MiB (${last.daemon_gc_mib} after GC)`);
      }
    }
    const { maxEntries, maxBytes } = DEFAULT_CONFIG.resultCache;
    const quality = DEFAULT_CONFIG.screenshot.quality;
    const settings = `${SIZE.width}x${SIZE.height} display, JPEG q${quality}, one per batch, 2 sessions`;
    return {
      settings,
      samples,
      rest,
      half: nearest(samples, MEMORY_SCREENSHOTS / 2),
      after: samples.at(-1)!,
      result_cache_bound_mib: mib(clients.length * Math.min(maxEntries * mean(cachedSizes), maxBytes)),
      figure: figure('memory.shot', `screenshot during the memory run (${settings})`, times, {
        sent_bytes: mean(sizes),
      }),
    };
  } finally {
    for (const c of clients) c.close();
  }
}
