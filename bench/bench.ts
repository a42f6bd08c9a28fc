/**
 * `npm run bench`: end-to-end latencies through a real daemon on a real Xvfb,
 * with a real page on screen (kiosk Chromium), over a real ws client on
 * loopback. Prints median and p95 per figure and writes bench/results.json.
 * Figures, never pass/fail: these machines are shared and noisy.
 */
import { writeFile } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import type { ImageFormat } from '../src/desktop/driver.ts';
import type { ToolUse } from '../src/protocol.ts';
import { launchKioskChromium } from '../test/helpers/chromium.ts';
import { startTestDaemon, type TestClient } from '../test/helpers/daemon.ts';
import { startTestDisplay } from '../test/helpers/display.ts';
import { startEventPageServer } from '../test/helpers/event-page.ts';
import { startWebServer } from '../test/helpers/web.ts';

const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 40);
const WARMUP = 5;

interface Figure {
  name: string;
  median_ms: number;
  p95_ms: number;
  n: number;
  bytes?: number;
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

let seq = 0;
const use = (name: string, input: Record<string, unknown> = {}): ToolUse => ({
  type: 'tool_use',
  id: `toolu_bench_${seq++}`,
  name,
  toolset_name: 'computer',
  input,
});

/** Times one-batch round trips: send → batch_result received. */
async function measure(client: TestClient, name: string, make: () => ToolUse[]): Promise<Figure> {
  const times: number[] = [];
  let bytes = 0;
  for (let i = 0; i < WARMUP + ITERATIONS; i++) {
    const t0 = performance.now();
    const { result } = await client.batch(`bench-${seq++}`, make());
    const dt = performance.now() - t0;
    if (result.failures.length) throw new Error(`${name} failed: ${JSON.stringify(result.failures[0])}`);
    if (i < WARMUP) continue;
    times.push(dt);
    const block = result.tool_results[0]!.content[0]!;
    if (block.type === 'image') bytes += Buffer.byteLength(block.source.data, 'base64');
  }
  times.sort((a, b) => a - b);
  return {
    name,
    median_ms: round(quantile(times, 0.5)),
    p95_ms: round(quantile(times, 0.95)),
    n: times.length,
    ...(bytes ? { bytes: Math.round(bytes / times.length) } : {}),
  };
}

const round = (v: number): number => Math.round(v * 100) / 100;

async function benchDisplay(width: number, height: number): Promise<Figure[]> {
  const display = await startTestDisplay({ width, height });
  const page = await startEventPageServer();
  const browser = await launchKioskChromium({ display: display.display, width, height, url: page.url });
  const figures: Figure[] = [];
  try {
    for (const format of ['png', 'jpeg', 'webp'] as ImageFormat[]) {
      const daemon = await startTestDaemon({ display: display.display, screenshot: { format } });
      try {
        const client = await daemon.connect();
        await client.hello();
        const size = `${width}x${height}`;
        if (format === 'png') {
          figures.push(
            await measure(client, `cursor_position (per-call overhead) ${size}`, () => [use('cursor_position')]),
          );
          figures.push(
            await measure(client, `left_click ${size}`, () => [
              use('left_click', { coordinate: [width / 2, height - 50] }),
            ]),
          );
          figures.push(
            await measure(client, `type 20 chars ${size}`, () => [
              use('left_click', { coordinate: [100, 100] }),
              use('type', { text: 'The quick brown fox.' }),
            ]),
          );
        }
        figures.push(await measure(client, `screenshot ${format} ${size}`, () => [use('screenshot')]));
      } finally {
        await daemon.close();
      }
    }
  } finally {
    await browser.close();
    await page.close();
    await display.stop();
  }
  return figures;
}

/** Browser figures: headless Chromium, 1280x800 viewport, a local page. */
async function benchBrowser(): Promise<Figure[]> {
  const web = await startWebServer();
  web.route('/', '<title>bench</title><button id="b" style="width:400px;height:200px">click me</button>');
  const figures: Figure[] = [];
  try {
    const launches: number[] = [];
    for (let i = 0; i < 3; i++) {
      const daemon = await startTestDaemon({ display: undefined, browser: 'headless' });
      try {
        const client = await daemon.connect();
        const t0 = performance.now();
        await client.batch(`launch-${i}`, [busing('navigate', { url: `${web.origin}/` })]);
        launches.push(performance.now() - t0);
      } finally {
        await daemon.close();
      }
    }
    launches.sort((a, b) => a - b);
    figures.push({
      name: 'browser launch + first navigate',
      median_ms: round(quantile(launches, 0.5)),
      p95_ms: round(launches.at(-1)!),
      n: 3,
    });
    const daemon = await startTestDaemon({ display: undefined, browser: 'headless' });
    try {
      const client = await daemon.connect();
      await client.batch('warm', [busing('navigate', { url: `${web.origin}/` })]);
      figures.push(
        await measure(client, 'browser navigate (local page)', () => [busing('navigate', { url: `${web.origin}/` })]),
      );
      figures.push(
        await measure(client, 'browser left_click (coordinate)', () => [
          busing('left_click', { target: { type: 'coordinate', x: 100, y: 100 } }),
        ]),
      );
      figures.push(await measure(client, 'browser screenshot png 1280x800', () => [busing('screenshot')]));
    } finally {
      await daemon.close();
    }
  } finally {
    await web.close();
  }
  return figures;
}

const busing = (name: string, input: Record<string, unknown> = {}): ToolUse => ({
  type: 'tool_use',
  id: `toolu_bench_${seq++}`,
  name,
  toolset_name: 'browser',
  input,
});

async function main(): Promise<void> {
  const started = performance.now();
  const figures = [...(await benchDisplay(1280, 800)), ...(await benchDisplay(1920, 1080)), ...(await benchBrowser())];
  const width = Math.max(...figures.map((f) => f.name.length));
  console.log(`${'figure'.padEnd(width)}  median ms    p95 ms   bytes`);
  for (const f of figures) {
    console.log(
      `${f.name.padEnd(width)}  ${f.median_ms.toFixed(2).padStart(9)} ${f.p95_ms.toFixed(2).padStart(9)}   ${f.bytes ?? ''}`,
    );
  }
  const out = {
    date: new Date().toISOString(),
    node: process.version,
    iterations: ITERATIONS,
    figures,
    duration_s: round((performance.now() - started) / 1000),
  };
  await writeFile(new URL('./results.json', import.meta.url), `${JSON.stringify(out, null, 2)}\n`);
  console.log(`\n${figures.length} figures in ${out.duration_s} s; written to bench/results.json`);
}

await main();
