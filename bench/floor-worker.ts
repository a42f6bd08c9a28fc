/**
 * The screenshot floor, measured in one process with nothing around it: grab
 * the display exactly as the desktop worker does (src/desktop-driver/worker/capture.ts
 * `capture`: a read of Xvfb's framebuffer file while the X server is grabbed,
 * src/desktop-driver/worker/screen.ts `Framebuffer`), make 3-channel RGB of the
 * B,G,R,X pixels with the worker's own loop (screen.ts `bgrxToRgb`), scale
 * if the output size differs, encode with the daemon's
 * own settings, base64. No IPC inside the timing, no executor, no socket, no
 * file. Each run also grabs once through nut-js (libnut's XGetImage, the
 * worker's way without a framebuffer file), timed apart and outside the
 * total, so the two grab paths are measured side by side.
 *
 * Forked by bench/floor.ts with DISPLAY set to the bench display, one child
 * per display: libnut opens the display on its first call and keeps it, and
 * a process whose X server goes away dies (docs/MEASURED.md), so the
 * bench process itself never loads nut-js.
 *
 * One pipeline run per request, so the bench can interleave floor runs with
 * the daemon's screenshots (the same load on both). Parent → child:
 * FloorRequest; child → parent: `{ type: 'ready' }` once, then a FloorSample
 * (or `{ error }`) per request. Each stage is timed inside the run, and the
 * whole run too (the total is measured, never a sum of medians).
 */
import { performance } from 'node:perf_hooks';
import sharp from 'sharp';
import { bgrxToRgb, Framebuffer } from '../src/desktop-driver/worker/screen.ts';
import { FRAMEBUFFER_ENV } from '../src/desktop-driver/worker-protocol.ts';
import { XConnection } from '../src/desktop-driver/x11.ts';

type Nut = typeof import('@nut-tree-fork/nut-js');
type Pipeline = ReturnType<typeof sharp>;

export interface FloorRequest {
  pipeline: string;
  /** The daemon's screenshot size for this display (src/base/geometry.ts fitSize). */
  output: { width: number; height: number };
  quality: number;
}

/** One run, durations in ms. */
export interface FloorSample {
  total: number;
  grab: number;
  /** nut-js screen.grab() of the same display, not part of `total`. */
  nutGrab: number;
  convert: number;
  encode: number;
  base64: number;
  bytes: number;
}

type Encoder = (p: Pipeline, quality: number) => Pipeline;

/**
 * The daemon's three encoders, with its settings (src/desktop-driver/worker/capture.ts), and
 * cheaper candidates, so a reader sees what the cheapest encode of the same
 * pixels costs.
 */
export const PIPELINES: Record<string, { encode: Encoder; label: string }> = {
  png: {
    label: 'PNG level 1, no adaptive filter',
    encode: (p) => p.png({ compressionLevel: 1, adaptiveFiltering: false }),
  },
  jpeg: { label: 'JPEG q80', encode: (p, q) => p.jpeg({ quality: q }) },
  webp: { label: 'WebP q80 effort 2', encode: (p, q) => p.webp({ quality: q, effort: 2 }) },
  'jpeg-plain-huffman': {
    label: 'JPEG q80 without Huffman optimisation',
    encode: (p, q) => p.jpeg({ quality: q, optimiseCoding: false }),
  },
  'webp-effort0': { label: 'WebP q80 effort 0', encode: (p, q) => p.webp({ quality: q, effort: 0 }) },
};

async function loadNut(): Promise<Nut> {
  // A CommonJS module: its exports arrive as the namespace or as `default`, depending on the loader.
  const mod = (await import('@nut-tree-fork/nut-js')) as Nut & { default?: Nut };
  return mod.default ?? mod;
}

async function runOnce(nut: Nut, fb: Framebuffer, req: FloorRequest): Promise<FloorSample> {
  const encoder = PIPELINES[req.pipeline];
  if (!encoder) throw new Error(`unknown pipeline ${req.pipeline}`);
  const n0 = performance.now();
  await nut.screen.grab();
  const nutGrab = performance.now() - n0;
  const t0 = performance.now();
  const img = await fb.read();
  const t1 = performance.now();
  const rgb = bgrxToRgb(img);
  const t2 = performance.now();
  let p = sharp(rgb, { raw: { width: img.width, height: img.height, channels: 3 } });
  if (img.width !== req.output.width || img.height !== req.output.height) {
    p = p.resize(req.output.width, req.output.height, { fit: 'fill', kernel: 'lanczos3' });
  }
  const encoded = await encoder.encode(p, req.quality).toBuffer();
  const t3 = performance.now();
  const b64 = encoded.toString('base64');
  const t4 = performance.now();
  if (b64.length === 0) throw new Error('empty image');
  return {
    total: t4 - t0,
    grab: t1 - t0,
    nutGrab,
    convert: t2 - t1,
    encode: t3 - t2,
    base64: t4 - t3,
    bytes: encoded.length,
  };
}

// Only when forked as the floor child (bench/floor.ts imports PIPELINES from here too).
if (process.send && process.env.DESKBATCH_BENCH_FLOOR_CHILD === '1') {
  const nut = await loadNut();
  const size = { width: await nut.screen.width(), height: await nut.screen.height() }; // opens the display now
  const conn = await XConnection.open(process.env.DISPLAY ?? '');
  const opened = await Framebuffer.open(process.env[FRAMEBUFFER_ENV] ?? '', conn, size);
  if (!opened.framebuffer) throw new Error(`the floor needs the display's framebuffer file: ${opened.why}`);
  const fb = opened.framebuffer;
  process.on('message', (req: FloorRequest) => {
    runOnce(nut, fb, req).then(
      (sample) => process.send!(sample),
      (err: unknown) => process.send!({ error: String(err) }),
    );
  });
  process.on('disconnect', () => process.exit(0));
  process.send({ type: 'ready' });
}
