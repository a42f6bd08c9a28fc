/**
 * `deskbatch replay`'s report, and the comparison that fills it: each answer
 * of the replaying daemon against the result recorded for its batch
 * (docs/RECORDING.md, "Replay"). Reading the trajectory and sending its
 * batches is src/recording/replay.ts.
 *
 * What is compared, per batch: every `tool_result` by position (its
 * `tool_use_id`, `toolset_name`, `is_error`, its blocks' number and types;
 * texts equal, `browser_state` tabs and changes equal, images of the same
 * media type and size that look alike), the `failures` (indices, names and
 * error types: messages hold host details, so they are reported, not
 * compared), `halted` and `cancelled`. Times never are.
 *
 * Element references (`ref_N`) come from one counter per daemon process
 * (src/browser/frame-worlds.ts), so the same element gets another number on
 * another daemon: texts are compared with each reference matched to its
 * counterpart, and later calls' inputs are sent with the replayed numbers.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { isAbsolute, relative, resolve } from 'node:path';
import sharp, { type Metadata } from 'sharp';
import type { BatchResult } from '../base/protocol.ts';

/**
 * Default largest mean absolute difference (0–255) between two images'
 * grayscale thumbnails for them to count as the same picture. Measured
 * (docs/RECORDING.md "Replay"): the same state on two desktops 0–0.01, the
 * same picture as a JPEG 0.43, the same page in another host's fonts 3.9;
 * another page 165, an empty desktop against one showing the browser 250. A
 * line of typed text (2–3) or a small box (1.5–3.3) stays under it: texts are
 * compared exactly, images only for a screen that shows something else.
 */
export const DEFAULT_IMAGE_TOLERANCE = 8;
/** The thumbnail both images are reduced to before they are compared (16:10, as the default display). */
export const THUMBNAIL = { width: 32, height: 20 } as const;
/** Longest message or text quoted in a report entry; longer ones are cut with `…`. */
const QUOTE_MAX = 500;

export interface ReplayDifference {
  batch_id: string;
  /** Position of the tool_result (or failure) in the batch, when the difference is inside one. */
  index?: number;
  tool_use_id?: string;
  /** What differs: `text`, `image size`, `image`, `failure type`, `halted`, … */
  what: string;
  recorded: unknown;
  replayed: unknown;
}

export interface NotComparable {
  batch_id: string;
  reason: string;
}

/** One image compared, differing or not. */
export interface ImageComparison {
  batch_id: string;
  index: number;
  tool_use_id: string;
  /** Position of the block in the tool_result's content. */
  block: number;
  media_type: string;
  recorded: { width: number; height: number; bytes: number };
  replayed: { width: number; height: number; bytes: number };
  /** Mean absolute difference of the grayscale thumbnails, 0–255; absent when the recorded file was unreadable. */
  difference?: number;
}

/** A failure both runs had, of the same type, with both messages (they name host details, so they are not compared). */
export interface FailureMessages {
  batch_id: string;
  index: number;
  name: string;
  type: string;
  recorded: string;
  replayed: string;
}

export interface ReplayReport {
  file: string;
  /** The recorded session's id, and the session the replay ran in. */
  recorded_session_id?: string;
  replayed_session_id?: string;
  /** Batches sent to the daemon. */
  batches: number;
  /** Batches whose answer was compared with a recorded result. */
  compared: number;
  differences: ReplayDifference[];
  notComparable: NotComparable[];
  images: ImageComparison[];
  failures: FailureMessages[];
  /** Element references renumbered to the replaying daemon's (recorded → replayed). */
  refs_mapped: number;
  image_tolerance: number;
  /** Redacted input, skipped lines, a later `tools` line, … */
  warnings: string[];
}

/** The trajectory's lines and their fields, as far as replay reads them. */
export type Json = Record<string, unknown>;

interface RecordedImageFile {
  type: 'image_file';
  path: string;
  media_type: string;
  width: number;
  height: number;
  bytes?: number;
  sha256?: string;
}

/** A `batch_finished.result` as recorded: a `batch_result` whose image blocks are `image_file` references. */
interface RecordedResult {
  tool_results: Json[];
  failures: Json[];
  halted: Record<string, unknown>;
  cancelled: boolean;
}

export const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** What the replaying daemon answered a batch: its result, or the error frame that refused it. */
export type Outcome = { kind: 'result'; result: BatchResult } | { kind: 'refused'; code: string; message: string };

/**
 * Compares the answers of one replay with their recorded results, into its
 * report, and matches element references between the two daemons: learnt
 * from texts equal but for their numbers, applied to later calls' inputs.
 */
export class Comparison {
  /** Recorded ref number → the replaying daemon's, learnt from texts that match but for their numbers. */
  private readonly refs = new Map<string, string>();
  private readonly refsTaken = new Map<string, string>();

  constructor(
    private readonly report: ReplayReport,
    /** The trajectory's folder: recorded images are read inside it only. */
    private readonly dir: string,
    private readonly tolerance: number,
    /** Reports a warning (a recorded image unreadable, changed, or outside the folder). */
    private readonly warn: (text: string) => void,
  ) {}

  /** How many element references were renumbered so far. */
  get refsMapped(): number {
    return this.refs.size;
  }

  /** The input with every whole-string element reference (`ref_7`, `[ref_7]`) renumbered to the replaying daemon's. */
  mapRefs(input: unknown): unknown {
    if (this.refs.size === 0) return input;
    if (typeof input === 'string') {
      const m = /^(\[?ref_)(\d+)(\]?)$/.exec(input);
      const to = m ? this.refs.get(m[2]!) : undefined;
      return to !== undefined ? `${m![1]}${to}${m![3]}` : input;
    }
    if (Array.isArray(input)) return input.map((v) => this.mapRefs(v));
    if (isObject(input)) return Object.fromEntries(Object.entries(input).map(([k, v]) => [k, this.mapRefs(v)]));
    return input;
  }

  /** Compares the `result` of a batch's `batch_finished` with what the batch got when it was replayed. */
  async compare(batchId: string, recorded: Json, outcome: Outcome): Promise<void> {
    const result = asRecordedResult(recorded);
    if (!result) {
      this.report.notComparable.push({ batch_id: batchId, reason: 'its recorded result is malformed' });
      return;
    }
    this.report.compared++;
    if (outcome.kind === 'refused') {
      this.differ({
        batch_id: batchId,
        what: 'batch refused',
        recorded: 'ran',
        replayed: `${outcome.code}: ${quote(outcome.message)}`,
      });
      return;
    }
    await this.compareBatch(batchId, result, outcome.result);
  }

  private differ(d: ReplayDifference): void {
    this.report.differences.push(d);
  }

  private async compareBatch(batchId: string, recorded: RecordedResult, replayed: BatchResult): Promise<void> {
    const n = Math.max(recorded.tool_results.length, replayed.tool_results.length);
    if (recorded.tool_results.length !== replayed.tool_results.length) {
      this.differ({
        batch_id: batchId,
        what: 'number of tool_results',
        recorded: recorded.tool_results.length,
        replayed: replayed.tool_results.length,
      });
    }
    for (let i = 0; i < n; i++) {
      const a = recorded.tool_results[i];
      const b = replayed.tool_results[i] as unknown as Json | undefined;
      if (!a || !b) continue;
      await this.compareResult(batchId, i, a, b);
    }
    this.compareFailures(batchId, recorded.failures, replayed.failures as unknown as Json[]);
    if (!sameHalted(recorded.halted, replayed.halted)) {
      this.differ({ batch_id: batchId, what: 'halted', recorded: recorded.halted, replayed: replayed.halted });
    }
    if (recorded.cancelled !== replayed.cancelled) {
      this.differ({ batch_id: batchId, what: 'cancelled', recorded: recorded.cancelled, replayed: replayed.cancelled });
    }
  }

  private async compareResult(batchId: string, index: number, a: Json, b: Json): Promise<void> {
    const id = typeof a.tool_use_id === 'string' ? a.tool_use_id : String(b.tool_use_id);
    const at = { batch_id: batchId, index, tool_use_id: id };
    for (const field of ['tool_use_id', 'toolset_name', 'is_error'] as const) {
      if (a[field] !== b[field])
        this.differ({ ...at, what: field, recorded: a[field] ?? null, replayed: b[field] ?? null });
    }
    const ca = Array.isArray(a.content) ? a.content.filter(isObject) : [];
    const cb = Array.isArray(b.content) ? b.content.filter(isObject) : [];
    const kinds = (c: Json[]): string[] => c.map((x) => (x.type === 'image_file' ? 'image' : String(x.type)));
    if (kinds(ca).join() !== kinds(cb).join()) {
      this.differ({ ...at, what: 'content blocks', recorded: kinds(ca), replayed: kinds(cb) });
      return;
    }
    for (let j = 0; j < ca.length; j++) {
      const x = ca[j]!;
      const y = cb[j]!;
      if (y.type === 'text') this.compareText(at, String(x.text), String(y.text));
      else if (y.type === 'browser_state') this.compareState(at, x, y);
      else if (y.type === 'image') await this.compareImage(at, j, x, y);
    }
  }

  private compareText(at: Omit<ReplayDifference, 'what' | 'recorded' | 'replayed'>, a: string, b: string): void {
    const pairs = refPairs(a, b);
    if (a === b) {
      // The same numbers on both daemons: they map to themselves (unless that contradicts what is known).
      if (pairs) this.learnRefs(pairs.filter(([from]) => !this.refs.has(from)));
      return;
    }
    if (pairs && this.learnRefs(pairs)) return;
    this.differ({ ...at, what: pairs ? 'text (element references)' : 'text', recorded: quote(a), replayed: quote(b) });
  }

  /** Takes the pairs of references from two texts equal but for them; false when they contradict earlier pairs. */
  private learnRefs(pairs: [string, string][]): boolean {
    for (const [from, to] of pairs) {
      const known = this.refs.get(from);
      const taken = this.refsTaken.get(to);
      if ((known !== undefined && known !== to) || (taken !== undefined && taken !== from)) return false;
    }
    for (const [from, to] of pairs) {
      this.refs.set(from, to);
      this.refsTaken.set(to, from);
    }
    return true;
  }

  private compareState(at: Omit<ReplayDifference, 'what' | 'recorded' | 'replayed'>, a: Json, b: Json): void {
    const tabs = (s: Json): unknown[] =>
      (Array.isArray(s.tabs) ? s.tabs.filter(isObject) : []).map((t) => ({
        tab_id: t.tab_id,
        url: t.url,
        title: t.title,
        active: t.active === true,
      }));
    // A completed download's path names the host's folder and the session: never the same on two daemons.
    const changes = (s: Json): unknown[] =>
      (Array.isArray(s.state_changes) ? s.state_changes.filter(isObject) : []).map(({ path: _path, ...rest }) => rest);
    if (!deepEqual(tabs(a), tabs(b)))
      this.differ({ ...at, what: 'browser_state tabs', recorded: tabs(a), replayed: tabs(b) });
    if (!deepEqual(changes(a), changes(b))) {
      this.differ({ ...at, what: 'browser_state state_changes', recorded: changes(a), replayed: changes(b) });
    }
  }

  private async compareImage(
    at: Omit<ReplayDifference, 'what' | 'recorded' | 'replayed' | 'index' | 'tool_use_id'> & {
      index: number;
      tool_use_id: string;
    },
    block: number,
    a: Json,
    b: Json,
  ): Promise<void> {
    const source = isObject(b.source) ? b.source : {};
    const replayedBytes = Buffer.from(typeof source.data === 'string' ? source.data : '', 'base64');
    const replayedMedia = String(source.media_type);
    let meta: Metadata;
    try {
      meta = await sharp(replayedBytes).metadata();
    } catch (err) {
      this.differ({ ...at, what: 'image', recorded: 'an image', replayed: `undecodable: ${(err as Error).message}` });
      return;
    }
    const replayed = { width: meta.width ?? 0, height: meta.height ?? 0, bytes: replayedBytes.length };
    const recordedImage = await this.recordedImage(at.batch_id, a);
    const recorded = recordedImage.size;
    const media = recordedImage.media_type;
    const comparison: ImageComparison = {
      batch_id: at.batch_id,
      index: at.index,
      tool_use_id: at.tool_use_id,
      block,
      media_type: replayedMedia,
      recorded,
      replayed,
    };
    if (media !== replayedMedia)
      this.differ({ ...at, what: 'image media type', recorded: media, replayed: replayedMedia });
    const sizeKnown = recorded.width > 0 && recorded.height > 0;
    if (sizeKnown && (recorded.width !== replayed.width || recorded.height !== replayed.height)) {
      this.differ({
        ...at,
        what: 'image size',
        recorded: `${recorded.width}x${recorded.height}`,
        replayed: `${replayed.width}x${replayed.height}`,
      });
    }
    if (recordedImage.data) {
      const difference = await imageDifference(recordedImage.data, replayedBytes);
      comparison.difference = round2(difference);
      if (difference > this.tolerance) {
        this.differ({
          ...at,
          what: 'image',
          recorded: `${recorded.width}x${recorded.height}, ${recorded.bytes} bytes`,
          replayed: `${replayed.width}x${replayed.height}, ${replayed.bytes} bytes; differs by ${round2(difference)} (tolerance ${this.tolerance})`,
        });
      }
    }
    this.report.images.push(comparison);
  }

  /** A recorded image block: an `image_file` beside the trajectory (or, should a writer inline one, a base64 image). */
  private async recordedImage(
    batchId: string,
    a: Json,
  ): Promise<{ media_type: string; size: { width: number; height: number; bytes: number }; data?: Buffer }> {
    if (a.type === 'image') {
      const source = isObject(a.source) ? a.source : {};
      const data = Buffer.from(typeof source.data === 'string' ? source.data : '', 'base64');
      const meta = await sharp(data)
        .metadata()
        .catch(() => ({ width: 0, height: 0 }));
      return {
        media_type: String(source.media_type),
        size: { width: meta.width ?? 0, height: meta.height ?? 0, bytes: data.length },
        data,
      };
    }
    const file = a as Partial<RecordedImageFile>;
    const size = {
      width: isSize(file.width) ? file.width : 0,
      height: isSize(file.height) ? file.height : 0,
      bytes: typeof file.bytes === 'number' ? file.bytes : 0,
    };
    const media_type = String(file.media_type);
    const path = this.insideRecording(file.path);
    if (!path) {
      this.warn(`batch ${batchId}: an image_file whose path is not inside the recording's folder was not read`);
      return { media_type, size };
    }
    let data: Buffer;
    try {
      data = await readFile(path);
    } catch (err) {
      this.warn(
        `batch ${batchId}: the recorded image ${file.path} could not be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
      );
      return { media_type, size };
    }
    if (size.bytes === 0) size.bytes = data.length;
    if (size.width === 0 || size.height === 0) {
      // The recorder names the size only when it knows it: then it is the file's own.
      const meta = await sharp(data)
        .metadata()
        .catch(() => undefined);
      size.width = meta?.width ?? 0;
      size.height = meta?.height ?? 0;
    }
    if (typeof file.sha256 === 'string' && createHash('sha256').update(data).digest('hex') !== file.sha256) {
      this.warn(
        `batch ${batchId}: the recorded image ${file.path} does not match its sha256: it changed after recording`,
      );
    }
    return { media_type, size, data };
  }

  /** `images/…` resolved inside the trajectory's folder, or undefined for a path that leaves it. */
  private insideRecording(path: unknown): string | undefined {
    if (typeof path !== 'string' || path === '' || path.includes('\0') || isAbsolute(path)) return undefined;
    const full = resolve(this.dir, path);
    const rel = relative(this.dir, full);
    return rel === '' || rel.startsWith('..') || isAbsolute(rel) ? undefined : full;
  }

  private compareFailures(batchId: string, a: Json[], b: Json[]): void {
    const byIndex = (list: Json[]): Map<number, Json> =>
      new Map(list.filter((f) => typeof f.index === 'number').map((f) => [f.index as number, f]));
    const fa = byIndex(a);
    const fb = byIndex(b);
    const indices = [...new Set([...fa.keys(), ...fb.keys()])].sort((x, y) => x - y);
    for (const index of indices) {
      const x = fa.get(index);
      const y = fb.get(index);
      const ex = isObject(x?.error) ? x.error : {};
      const ey = isObject(y?.error) ? y.error : {};
      const at = {
        batch_id: batchId,
        index,
        tool_use_id: String((x ?? y)!.tool_use_id),
      };
      const summary = (f: Json | undefined, e: Json): unknown =>
        f ? { name: f.name, type: e.type, message: quote(String(e.message ?? '')) } : null;
      if (!x || !y) {
        this.differ({ ...at, what: 'failure', recorded: summary(x, ex), replayed: summary(y, ey) });
        continue;
      }
      if (x.name !== y.name) this.differ({ ...at, what: 'failure name', recorded: x.name, replayed: y.name });
      if (ex.type !== ey.type) {
        this.differ({ ...at, what: 'failure type', recorded: summary(x, ex), replayed: summary(y, ey) });
        continue;
      }
      this.report.failures.push({
        batch_id: batchId,
        index,
        name: String(x.name),
        type: String(ex.type),
        recorded: quote(String(ex.message ?? '')),
        replayed: quote(String(ey.message ?? '')),
      });
    }
  }
}

// ---------------------------------------------------------------- helpers

export function isSize(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v > 0;
}

function asRecordedResult(r: Json): RecordedResult | undefined {
  if (!Array.isArray(r.tool_results) || !r.tool_results.every(isObject)) return undefined;
  return {
    tool_results: r.tool_results,
    failures: Array.isArray(r.failures) ? r.failures.filter(isObject) : [],
    halted: isObject(r.halted) ? r.halted : {},
    cancelled: r.cancelled === true,
  };
}

/**
 * The pairs of element references (`ref_N`) at the same places in two texts
 * that are otherwise equal, or undefined when the texts differ elsewhere.
 */
export function refPairs(a: string, b: string): [string, string][] | undefined {
  const REF = /\bref_(\d+)\b/g;
  const split = (s: string): { rest: string; refs: string[] } => {
    const refs: string[] = [];
    const rest = s.replace(REF, (_m, n: string) => {
      refs.push(n);
      return 'ref_#';
    });
    return { rest, refs };
  };
  const x = split(a);
  const y = split(b);
  if (x.refs.length === 0 || x.rest !== y.rest) return undefined;
  return x.refs.map((n, i) => [n, y.refs[i]!]);
}

function sameHalted(a: Record<string, unknown>, b: Record<string, unknown>): boolean {
  const ka = Object.keys(a).sort();
  const kb = Object.keys(b).sort();
  return ka.join('\0') === kb.join('\0') && ka.every((k) => a[k] === b[k]);
}

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((v, i) => deepEqual(v, b[i]));
  if (isObject(a) && isObject(b)) {
    const ka = Object.keys(a).filter((k) => a[k] !== undefined);
    const kb = Object.keys(b).filter((k) => b[k] !== undefined);
    return ka.length === kb.length && ka.every((k) => deepEqual(a[k], b[k]));
  }
  return false;
}

function quote(s: string): string {
  return s.length > QUOTE_MAX ? `${s.slice(0, QUOTE_MAX)}…` : s;
}

function round2(n: number): number {
  return Math.round(n * 100) / 100;
}

/**
 * How different two images look, 0 (the same picture) to 255: each is
 * reduced to a THUMBNAIL-sized grayscale picture (stretched to fill it, so
 * images of different sizes can still be compared) and the thumbnails'
 * pixels' mean absolute difference is taken.
 */
export async function imageDifference(a: Buffer, b: Buffer): Promise<number> {
  const thumb = (img: Buffer): Promise<Buffer> =>
    sharp(img)
      .flatten({ background: '#ffffff' })
      .grayscale()
      .resize(THUMBNAIL.width, THUMBNAIL.height, { fit: 'fill' })
      .raw()
      .toBuffer();
  const [x, y] = await Promise.all([thumb(a), thumb(b)]);
  let sum = 0;
  for (let i = 0; i < x.length; i++) sum += Math.abs(x[i]! - y[i]!);
  return sum / x.length;
}
