/**
 * `npm run bench`: issue 5's figures, all measured in one run on this
 * machine, and the ratios between them (never absolute pass/fail in tests:
 * these machines are shared and noisy). docs/PERFORMANCE.md explains each one.
 *
 * For each display size (1280x800, 1920x1080) it starts a real Xvfb with a
 * real page on screen, a floor child (bench/floor.ts: grab + RGB + encode +
 * base64 in one process), the shell-out tools (bench/shellout.ts: scrot +
 * convert, xdotool) and a daemon process per screenshot format
 * (bench/daemon-process.ts), driven over a real ws client (bench/client.ts),
 * and measures each screenshot beside its floor and the shell-out path
 * (bench/desktop.ts). At 1280x800 it also measures the per-call overhead and
 * pointer calls beside xdotool, 10 actions + screenshot batched versus
 * sequential on loopback and over a 20 ms link (bench/proxy.ts), the browser
 * (bench/browser.ts) and pieces of the per-call path alone (bench/anatomy.ts);
 * then, on a small display of its own, memory across 1,000 screenshots
 * (bench/memory.ts). What a ratio compares is measured interleaved, run by
 * run, so the load of this shared machine falls on both sides alike.
 * Last, section `density` (bench/density.ts, issue 15): what a desktop of
 * its own per session costs (memory, CPU at rest, lease and recycle time) and
 * buys (K agents at once on the pool beside the shared lane).
 * Prints the tables on stdout (progress on stderr) and writes
 * bench/results.json. BENCH_ITERATIONS sets the timed iterations per figure;
 * BENCH_ONLY=density runs that section alone (bench/results.json then keeps
 * what else it held and gets a fresh `density`); BENCH_ONLY=calls runs the
 * per-call figures alone (bench/results.json untouched); BENCH_ONLY=browser
 * runs section `browser` (bench/browser.ts: left_click beside Playwright's
 * own click, fresh daemons' start and first calls) alone, and
 * bench/results.json gets a fresh `browser`; BENCH_ONLY=recording runs what
 * recording costs (bench/recording.ts) alone, into `recording`;
 * BENCH_ONLY=takeover runs what a person's takeover in the viewer waits for
 * and costs (bench/takeover.ts, issue 18) alone, into `takeover`;
 * BENCH_ONLY=sandbox runs what a desktop's sandbox costs (bench/sandbox.ts,
 * issue 30: a pool daemon with `--sandbox off` beside one with
 * `--sandbox auto`, sample by sample) alone, into `sandbox`;
 * BENCH_ONLY=watchers runs the agent's screenshot and click batches with 0,
 * 1 and 4 live watchers of its desktop (bench/watchers.ts, issue 36) alone,
 * into `watchers`.
 * Every run prints each row beside its previous recorded figure and lists the
 * rows more than 20% slower (bench/baseline.ts), from bench/baseline.json or
 * the file BENCH_BASELINE names; BENCH_RECORD=1 records the run's rows there
 * (bench/baseline-file.ts).
 */
import { writeResults, writeResultsSection } from './results-file.ts';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import type { ImageFormat } from '../src/base/image.ts';
import type { VirtualDisplay } from '../src/desktop-driver/xvfb.ts';
import { anatomyFigures } from './anatomy.ts';
import type { Comparison } from './baseline.ts';
import { loadComparison, measuredOf, recordIfAsked, type RunRows } from './baseline-file.ts';
import { densityMain, densityRun } from './density.ts';
import type { DensityReport } from './density-report.ts';
import { browserFigures, browserSection, launchFigure, launchSample, withWebPage } from './browser.ts';
import { startDaemonProcess, type DaemonProcess } from './daemon-process.ts';
import { ownBrowserFigures } from './settle-browser.ts';
import {
  daemonFigures,
  linkFigures,
  overheadFigures,
  sizeTag,
  withBenchDisplay,
  type Bench,
  type Size,
} from './desktop.ts';
import { FloorChild, floorFigures } from './floor.ts';
import { machine, sourceState, type MachineInfo } from './machine.ts';
import { MEMORY_SCREENSHOTS, memoryRun, type MemoryReport } from './memory.ts';
import {
  browserRatios,
  callRatios,
  FORMATS,
  ONE_WAY_MS,
  RatioBook,
  ratios,
  recordingRatios,
  SIZES,
  takeoverRatios,
} from './ratios.ts';
import { recordingSection, recordingTable, type RecordingReport } from './recording.ts';
import { densityTable, figureTable, memoryTable, ratioTable } from './report.ts';
import { ShellOut } from './shellout.ts';
import { sandboxMain, sandboxRun, sandboxTable, type SandboxReport } from './sandbox.ts';
import { watchersSection, watchersTable } from './watchers.ts';
import { takeoverSection } from './takeover.ts';
import { takeoverTable, type TakeoverReport } from './takeover-report.ts';
import { startTestDisplay } from '../testkit/display.ts';
import { ITERATIONS, positiveInt, progress, round2, WARMUP, type Figure } from './stats.ts';

/** Encoders the daemon does not use, timed in the floor child to show what the cheapest encode costs. */
const CHEAPER_PIPELINES = ['jpeg-plain-huffman', 'webp-effort0'];

/** Sections that run alone with BENCH_ONLY. */
const SECTIONS = ['density', 'calls', 'browser', 'recording', 'takeover', 'sandbox', 'watchers'] as const;
/** Timed runs per figure of `BENCH_ONLY=calls`: each is a few ms, so more than the full run's, for steadier medians. */
const CALLS_ITERATIONS = positiveInt(process.env.BENCH_ITERATIONS, 200);

interface Run {
  figures: Figure[];
  launches: number[];
  memory?: MemoryReport;
  density?: DensityReport;
  recording?: RecordingReport;
  takeover?: TakeoverReport;
  sandbox?: SandboxReport;
}

/**
 * Everything measured on one display size. The first size also does the
 * per-call, link, browser and anatomy parts (they do not depend on the size).
 */
async function benchSize(size: Size, first: boolean, pageUrl: string, run: Run): Promise<void> {
  await withBenchDisplay(size, async (display, kiosk) => {
    const floor = await FloorChild.start(display, size);
    try {
      const shell = await ShellOut.open(display.display);
      try {
        await measureSize({ size, tag: sizeTag(size), floor, shell, kiosk }, display, first, pageUrl, run);
      } finally {
        await shell.close();
      }
    } finally {
      await floor.stop();
    }
  });
}

async function measureSize(
  bench: Bench,
  display: VirtualDisplay,
  first: boolean,
  pageUrl: string,
  run: Run,
): Promise<void> {
  const { tag, floor } = bench;
  for (const format of FORMATS) {
    progress(`${tag}: starting a daemon (${format})`);
    // Browser launch samples come from the PNG and JPEG daemons at 1280x800; the others start without one.
    const browser = first && format !== 'webp';
    const daemon = await startDaemonProcess({
      display: display.display,
      framebuffer: display.framebuffer,
      format,
      browser: browser ? 'headless' : 'off',
    });
    try {
      run.figures.push(...(await daemonFigures(daemon, bench, format, first && format === 'png')));
      if (first && format === 'png') run.figures.push(...(await linkFigures(daemon, bench.size, ONE_WAY_MS)));
      if (browser) await browserPart(daemon, format, pageUrl, run);
    } finally {
      await daemon.stop();
    }
  }
  if (first) run.figures.push(...(await ownBrowserFigures(display, bench.size)));
  if (first) {
    progress(`${tag}: parts of the per-call path`);
    const pngBytes = floor.samples.get('png')?.at(-1)?.bytes ?? 65_536;
    run.figures.push(...(await anatomyFigures(display.display, tag, pngBytes)));
  }
  progress(`${tag}: cheaper encoders on their own (floor child)`);
  for (const name of CHEAPER_PIPELINES) await floor.alone(name);
  run.figures.push(...floorFigures(floor, tag));
}

/** A launch sample from every daemon at 1280x800, and the per-call browser figures from the PNG one. */
async function browserPart(daemon: DaemonProcess, format: ImageFormat, pageUrl: string, run: Run): Promise<void> {
  progress('browser launch');
  run.launches.push(await launchSample(daemon, pageUrl));
  if (format !== 'png') return;
  progress('browser calls');
  run.figures.push(...(await browserFigures(daemon, pageUrl)));
}

/**
 * `BENCH_ONLY=calls`: the per-call figures alone (ping, replayed batch, one and ten `cursor_position` calls
 * per batch) on a PNG daemon process over a plain Xvfb at the first size, and their ratios. Nothing is
 * written to bench/results.json.
 */
async function callsMain(): Promise<void> {
  const previous = await loadComparison();
  const size = SIZES[0]!;
  const tag = sizeTag(size);
  const load = os.loadavg();
  progress(`calls: ${CALLS_ITERATIONS} timed iterations per figure; load average ${load.map(round2).join(' ')}`);
  const display = await startTestDisplay(size);
  try {
    const daemon = await startDaemonProcess({
      display: display.display,
      framebuffer: display.framebuffer,
      format: 'png',
      browser: 'off',
    });
    try {
      const figures = await overheadFigures(daemon, { tag }, CALLS_ITERATIONS);
      const book = new RatioBook(figures);
      callRatios(book, tag);
      const source = await sourceState();
      const info = machine(load);
      const dirty = source?.uncommitted.length ? ` + uncommitted changes in ${source.uncommitted.length} files` : '';
      console.log(figureTable(figures, previous));
      console.log(`\n${ratioTable(book.ratios, previous)}`);
      console.log(
        `\nmeasured: commit ${source?.commit ?? 'unknown'}${dirty}; load average ${info.loadavg_start.join(' ')} → ` +
          `${info.loadavg_end.join(' ')}`,
      );
      await printPrevious(previous, { figures, ratios: book.ratios }, info, source);
    } finally {
      await daemon.stop();
    }
  } finally {
    await display.stop();
  }
}

/** BENCH_ONLY=browser: section `browser` alone; bench/results.json keeps what else it held and gets a fresh `browser`. */
async function browserMain(): Promise<void> {
  const previous = await loadComparison();
  const load = os.loadavg();
  const started = performance.now();
  const figures = await browserSection();
  const book = new RatioBook(figures);
  browserRatios(book);
  const info = machine(load);
  console.log(figureTable(figures, previous));
  console.log(`\n${ratioTable(book.ratios, previous)}`);
  const duration = round2((performance.now() - started) / 1000);
  console.log(
    `browser: ${duration} s on ${info.cpus} CPUs, load average ${info.loadavg_start.join(' ')} → ` +
      `${info.loadavg_end.join(' ')}; written to bench/results.json (key "browser")`,
  );
  const browser = { machine: info, source: await sourceState(), duration_s: duration, figures, ratios: book.ratios };
  await writeResultsSection('browser', browser);
  await printPrevious(previous, { figures, ratios: book.ratios }, info, browser.source);
}

/** BENCH_ONLY=recording: what recording costs, alone; bench/results.json keeps what else it held and gets a fresh `recording`. */
async function recordingMain(): Promise<void> {
  const previous = await loadComparison();
  const load = os.loadavg();
  const report = await withWebPage((url) => recordingSection(url));
  const book = new RatioBook(report.figures);
  recordingRatios(book);
  const info = machine(load);
  console.log(figureTable(report.figures, previous));
  console.log(`\n${ratioTable(book.ratios, previous)}`);
  console.log(`\n${recordingTable(report)}`);
  console.log(`\nload average ${info.loadavg_start.join(' ')} → ${info.loadavg_end.join(' ')}`);
  const recording = { machine: info, source: await sourceState(), ...report, ratios: book.ratios };
  await writeResultsSection('recording', recording);
  await printPrevious(previous, { figures: report.figures, ratios: book.ratios }, info, recording.source);
}

/** BENCH_ONLY=takeover: issue 18's figures alone; bench/results.json keeps what else it held and gets a fresh `takeover`. */
async function takeoverMain(): Promise<void> {
  const previous = await loadComparison();
  const load = os.loadavg();
  const started = performance.now();
  const report = await takeoverSection();
  const book = new RatioBook(report.figures);
  takeoverRatios(book);
  const info = machine(load);
  const duration = round2((performance.now() - started) / 1000);
  console.log(figureTable(report.figures, previous));
  console.log(`\n${ratioTable(book.ratios, previous)}`);
  console.log(`\n${takeoverTable(report)}`);
  console.log(
    `\ntakeover: ${duration} s on ${info.cpus} CPUs (${info.cpu_model}), load average ${info.loadavg_start.join(' ')} → ` +
      `${info.loadavg_end.join(' ')}; written to bench/results.json (key "takeover")`,
  );
  const takeover = { machine: info, source: await sourceState(), duration_s: duration, ...report, ratios: book.ratios };
  await writeResultsSection('takeover', takeover);
  await printPrevious(previous, { figures: report.figures, ratios: book.ratios }, info, takeover.source);
}

/** BENCH_ONLY=watchers: issue 36's rows alone; bench/results.json keeps what else it held and gets a fresh `watchers`. */
async function watchersMain(): Promise<void> {
  const previous = await loadComparison();
  const load = os.loadavg();
  const started = performance.now();
  const report = await watchersSection();
  const info = machine(load);
  const duration = round2((performance.now() - started) / 1000);
  console.log(figureTable(report.figures, previous));
  console.log(`\n${watchersTable(report)}`);
  console.log(
    `\nwatchers: ${duration} s on ${info.cpus} CPUs (${info.cpu_model}), load average ${info.loadavg_start.join(' ')} → ` +
      `${info.loadavg_end.join(' ')}; written to bench/results.json (key "watchers")`,
  );
  const watchers = { machine: info, source: await sourceState(), duration_s: duration, ...report };
  await writeResultsSection('watchers', watchers);
  await printPrevious(previous, { figures: report.figures, ratios: [] }, info, watchers.source);
}

async function main(): Promise<void> {
  const only = process.env.BENCH_ONLY;
  if (only !== undefined && only !== '') {
    if (!(SECTIONS as readonly string[]).includes(only)) {
      throw new Error(`BENCH_ONLY must be one of ${SECTIONS.join(', ')}, got ${JSON.stringify(only)}`);
    }
    if (only === 'calls') return callsMain();
    if (only === 'recording') return recordingMain();
    if (only === 'takeover') return takeoverMain();
    if (only === 'sandbox') return sandboxMain();
    if (only === 'watchers') return watchersMain();
    return only === 'browser' ? browserMain() : densityMain();
  }
  // Read first: a baseline that cannot be read fails the run before it measures anything.
  const previous = await loadComparison();
  const started = performance.now();
  const load = os.loadavg();
  progress(
    `${ITERATIONS} timed iterations per figure after ${WARMUP} warm-up; load average ${load.map(round2).join(' ')}`,
  );
  const run: Run = { figures: [], launches: [] };
  await withWebPage(async (url) => {
    for (const [i, size] of SIZES.entries()) await benchSize(size, i === 0, url, run);
  });
  // BENCH_SKIP=memory,browser,density leaves out the longest sections (a quicker run while working).
  const skip = new Set((process.env.BENCH_SKIP ?? '').split(','));
  if (!skip.has('memory')) {
    progress(`memory across ${MEMORY_SCREENSHOTS} screenshots`);
    run.memory = await memoryRun();
    run.figures.push(run.memory.figure);
  }
  if (run.launches.length) run.figures.push(launchFigure(run.launches));
  if (!skip.has('browser')) {
    progress('browser: the click beside Playwright, fresh daemons');
    run.figures.push(...(await browserSection()));
  }
  if (!skip.has('density')) {
    progress('density: a desktop per session');
    run.density = await densityRun();
  }
  if (!skip.has('recording')) {
    run.recording = await withWebPage((url) => recordingSection(url));
    run.figures.push(...run.recording.figures);
  }
  if (!skip.has('takeover')) {
    progress('takeover: input to photon through the viewer');
    run.takeover = await takeoverSection();
    run.figures.push(...run.takeover.figures);
  }
  if (!skip.has('sandbox')) {
    progress('sandbox: a pool with --sandbox off beside one with --sandbox auto');
    run.sandbox = await sandboxRun();
  }
  const book = ratios(run.figures, run.memory);
  const duration = round2((performance.now() - started) / 1000);
  const info = machine(load);
  const source = await sourceState();

  console.log(figureTable(run.figures, previous));
  console.log(`\n${ratioTable(book.ratios, previous)}`);
  if (run.memory) console.log(`\n${memoryTable(run.memory)}`);
  if (run.density) console.log(`\n${densityTable(run.density, previous)}`);
  if (run.recording) console.log(`\n${recordingTable(run.recording)}`);
  if (run.takeover) console.log(`\n${takeoverTable(run.takeover)}`);
  if (run.sandbox) console.log(`\n${sandboxTable(run.sandbox, previous)}`);
  if (source) {
    const dirty = source.uncommitted.length ? ` + uncommitted changes in ${source.uncommitted.length} files` : '';
    console.log(`\nmeasured: commit ${source.commit}${dirty}`);
  }
  console.log(
    `${run.figures.length} figures, ${book.ratios.length} ratios in ${duration} s on ${info.cpus} CPUs, ` +
      `load average ${info.loadavg_start.join(' ')} → ${info.loadavg_end.join(' ')}; written to bench/results.json`,
  );
  const out = {
    machine: info,
    source,
    iterations: ITERATIONS,
    warmup: WARMUP,
    duration_s: duration,
    figures: run.figures,
    ratios: book.ratios,
    memory: run.memory ?? null,
    density: run.density ?? null,
    recording: run.recording ?? null,
    takeover: run.takeover ?? null,
    sandbox: run.sandbox ?? null,
  };
  await writeResults(out);
  const rows = { figures: run.figures, ratios: book.ratios, density: run.density, sandbox: run.sandbox };
  await printPrevious(previous, rows, info, source);
}

/**
 * After the tables: the rows more than 20% slower than their previous figures (bench/baseline.ts), and with
 * BENCH_RECORD=1 this run's rows recorded as the baseline.
 */
async function printPrevious(
  previous: Comparison,
  rows: RunRows,
  info: MachineInfo,
  source: Awaited<ReturnType<typeof sourceState>>,
): Promise<void> {
  console.log(`\n${previous.summary()}`);
  const recorded = await recordIfAsked(rows, measuredOf(info, source));
  if (recorded) console.log(recorded);
}

await main();
