/**
 * The floor: a child process on the bench display that runs the screenshot
 * pipeline with nothing around it (bench/floor-worker.ts says what, and why it
 * is a child), one run per request, so its runs can be interleaved with the
 * daemon's screenshots. This file starts and stops that child and turns its
 * samples into figures: the whole pipeline per encoder, and each stage of it
 * (grab, BGRX→RGB, encode, base64) so a reader sees where the time goes.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { DEFAULT_CONFIG } from '../src/base/config.ts';
import { fitSize } from '../src/base/geometry.ts';
import type { VirtualDisplay } from '../src/desktop-driver/xvfb.ts';
import { FRAMEBUFFER_ENV } from '../src/desktop-driver/worker-protocol.ts';
import { PIPELINES, type FloorRequest, type FloorSample } from './floor-worker.ts';
import { figure, ITERATIONS, timeLoop, WARMUP, type Figure } from './stats.ts';

const CHILD = fileURLToPath(new URL('./floor-worker.ts', import.meta.url));
/** The tsx loader as a URL: the floor runs bench/floor-worker.ts from the sources (the daemon's worker is compiled). */
const TSX = import.meta.resolve('tsx');
const REPLY_TIMEOUT_MS = 60_000;

export class FloorChild {
  /** Samples of every timed run, by pipeline name. */
  readonly samples = new Map<string, FloorSample[]>();
  private readonly output: { width: number; height: number };

  private constructor(
    private readonly child: ChildProcess,
    size: { width: number; height: number },
  ) {
    this.output = fitSize(size, DEFAULT_CONFIG.screenshot.limits);
  }

  static async start(display: VirtualDisplay, size: { width: number; height: number }): Promise<FloorChild> {
    const child = fork(CHILD, [], {
      execArgv: ['--import', TSX],
      env: {
        ...process.env,
        DISPLAY: display.display,
        [FRAMEBUFFER_ENV]: display.framebuffer ?? '',
        DESKBATCH_BENCH_FLOOR_CHILD: '1',
      },
      serialization: 'advanced',
    });
    await reply(child);
    return new FloorChild(child, size);
  }

  /** One run of `pipeline`; its sample is kept unless `record` is false (warm-up). Returns the total, in ms. */
  async run(pipeline: string, record = true): Promise<number> {
    const req: FloorRequest = { pipeline, output: this.output, quality: DEFAULT_CONFIG.screenshot.quality };
    this.child.send(req);
    const sample = (await reply(this.child)) as FloorSample;
    if (record) this.samples.set(pipeline, [...(this.samples.get(pipeline) ?? []), sample]);
    return sample.total;
  }

  /**
   * Runs `pipeline` on its own (warm-up, then timed runs), for the pipelines
   * the daemon does not use; half the usual iterations (at least 10): they are
   * information, not a side of a ratio.
   */
  async alone(pipeline: string): Promise<void> {
    const iterations = Math.max(10, Math.round(ITERATIONS / 3));
    await timeLoop((i) => this.run(pipeline, i >= WARMUP), iterations);
  }

  /** Ends the child (by its pid) and waits for it, so it never outlives the display it holds open. */
  async stop(): Promise<void> {
    const child = this.child;
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGTERM');
    await exited;
  }
}

function reply(child: ChildProcess): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => done(new Error('the floor child did not answer within 60 s')), REPLY_TIMEOUT_MS);
    const onExit = (code: number | null): void => done(new Error(`the floor child exited (${code})`));
    const onMessage = (msg: { error?: string }): void =>
      msg.error ? done(new Error(`floor child: ${msg.error}`)) : done(undefined, msg);
    function done(err: Error | undefined, value?: unknown): void {
      clearTimeout(timer);
      child.off('exit', onExit);
      child.off('message', onMessage);
      if (err) reject(err);
      else resolve(value);
    }
    child.once('exit', onExit);
    child.once('message', onMessage);
  });
}

/** Figures from everything the floor child ran: one per pipeline, plus the stages. */
export function floorFigures(floor: FloorChild, tag: string): Figure[] {
  const out: Figure[] = [];
  for (const [name, samples] of floor.samples) {
    out.push(
      figure(
        `floor.${name}.${tag}`,
        `floor: grab+RGB+${PIPELINES[name]?.label ?? name}+base64 ${tag}`,
        samples.map((s) => s.total),
        { image_bytes: samples.at(-1)?.bytes ?? 0 },
      ),
    );
  }
  const all = [...floor.samples.values()].flat();
  out.push(
    figure(
      `stage.grab.${tag}`,
      `  stage: framebuffer read, X server grabbed ${tag}`,
      all.map((s) => s.grab),
    ),
    figure(
      `stage.nutgrab.${tag}`,
      `  stage: nut-js screen.grab() (XGetImage) ${tag}`,
      all.map((s) => s.nutGrab),
    ),
    figure(
      `stage.convert.${tag}`,
      `  stage: BGRX→RGB (JS loop) ${tag}`,
      all.map((s) => s.convert),
    ),
  );
  for (const [name, samples] of floor.samples) {
    out.push(
      figure(
        `stage.encode.${name}.${tag}`,
        `  stage: encode ${PIPELINES[name]?.label ?? name} ${tag}`,
        samples.map((s) => s.encode),
      ),
    );
  }
  const png = floor.samples.get('png');
  if (png)
    out.push(
      figure(
        `stage.base64.png.${tag}`,
        `  stage: base64 of the PNG ${tag}`,
        png.map((s) => s.base64),
      ),
    );
  return out;
}

/** The cheapest pipeline measured (by median total), for the "cheapest floor" line. */
export function cheapestFloor(figures: readonly Figure[], tag: string): Figure | undefined {
  const floors = figures.filter((f) => f.id.startsWith('floor.') && f.id.endsWith(`.${tag}`));
  return floors.reduce<Figure | undefined>((best, f) => (!best || f.median_ms < best.median_ms ? f : best), undefined);
}
