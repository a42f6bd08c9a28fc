/*
 * The replay page's model (docs/VIEWER.md "Replay"): what it reads from the
 * daemon and what it makes of it. The requests with the token, the list of
 * recordings, a trajectory read line by line into its batches and calls, and
 * the video's chapters. It renders nothing: the view is replay.js (the list)
 * and replay-player.js (the recording opened).
 *
 * Everything read comes from recordings and may hold model input and page
 * text: it is kept as text, bounded by LIMITS, for the view to show with
 * textContent only.
 */
/* global sessionStorage */
import { cut, TOKEN_KEY } from './common.js';

/**
 * A line of a trajectory, or the daemon's answer, parsed but not checked: fields are read where they are used.
 * @typedef {Record<string, any>} Json
 */
/**
 * What the page makes of one trajectory (readTrajectory), within LIMITS.
 * @typedef {object} Trajectory
 * @property {Json | null} header its `recording` line
 * @property {string[]} tools the names of the tools offered
 * @property {Batch[]} batches the batches kept, in order (`index` is the place here)
 * @property {Call[]} calls the calls of those batches, in order (`seq` is the place here)
 * @property {Map<string, Batch>} byBatchId the batches started and not finished yet
 * @property {{ path: unknown, started_at: number } | null} video when the video's time zero was
 * @property {{ at: any, reason: unknown } | null} closed
 * @property {{ at: any, reason: unknown } | null} stopped
 * @property {number} lines lines read as JSON
 * @property {number} badLines lines that were not JSON (skipped)
 * @property {number} longLines lines over LIMITS.lineChars (skipped)
 * @property {boolean} lastLineCut the last line had no newline and was not JSON
 * @property {boolean} bytesCut only LIMITS.trajectoryBytes were read
 * @property {number} batchesDropped batches past LIMITS.batchesKept
 */
/**
 * A batch: started (`batch`) or a resent one answered from the stored result (`replayed`). Times (`at`) are
 * as the trajectory wrote them (milliseconds since the epoch), not checked.
 * @typedef {object} Batch
 * @property {'batch' | 'replayed'} kind
 * @property {string} batch_id
 * @property {any} at
 * @property {Call[]} calls
 * @property {number} index
 * @property {BatchResult | null} result null: no result was recorded
 */
/**
 * @typedef {object} BatchResult
 * @property {any} at
 * @property {boolean} [cancelled]
 * @property {boolean} replayed
 * @property {unknown} [duration_ms]
 * @property {Record<string, unknown>} halted toolset → index of the call that halted it
 * @property {number} failures
 */
/**
 * One call, from its batch's start line, its events and its batch's result.
 * @typedef {object} Call
 * @property {number} seq its place among all the calls
 * @property {Batch} batch
 * @property {number} index its place in its batch
 * @property {string} id its tool_use_id
 * @property {string} name
 * @property {any} toolset
 * @property {unknown} input bounded (LIMITS.input…)
 * @property {string} phase
 * @property {any} started_at
 * @property {any} ended_at
 * @property {number | undefined} duration_ms
 * @property {any} attempts
 * @property {Json | null} error the failure (ErrorInfo), as recorded
 * @property {string[]} texts
 * @property {ImageFile[]} images
 * @property {string[]} states what each browser_state block said
 * @property {boolean} is_error
 * @property {{ image: ImageFile, call: Call } | null} [shownImage] the latest image returned at or before it
 */
/**
 * An image a call returned, a file of the recording (IMAGE_PATH).
 * @typedef {{ path: string, media_type: unknown, width: any, height: any, bytes: any }} ImageFile
 */
/**
 * A chapter of the video: when a call ran, in seconds from the video's start.
 * @typedef {{ start: number, end: number, title: string, toolUseId: string }} Cue
 */

const RECORDINGS_PATH = '/recordings';

/** What the page keeps and renders at most (docs/VIEWER.md "Replay", Bounds). */
export const LIMITS = {
  /** Recordings listed before a "more" button (retention keeps 200 by default). */
  recordingsShown: 100,
  /** Bytes of a trajectory read; the rest is left unread (the page says so). */
  trajectoryBytes: 64 * 1024 * 1024,
  /** Characters of one trajectory line; a longer one is skipped (counted). */
  lineChars: 8 * 1024 * 1024,
  /** Batches kept from one trajectory; later ones are counted, not kept. */
  batchesKept: 5000,
  /** Batches rendered at first, and added by each "more" click. */
  batchesShown: 100,
  /** Characters of each input string kept (the list shows the input's first `inputShown`). */
  inputChars: 2000,
  inputShown: 300,
  inputItems: 50,
  inputDepth: 4,
  /** Characters of each text a result returned, shown for the selected call. */
  resultChars: 4000,
  /** Characters of an error message (the whole message, but for a pathological one). */
  errorChars: 100_000,
  /** Images kept as blob: URLs for stepping back and forth; older ones are revoked. */
  imagesCached: 16,
  /** Bytes of video played in the page (it is held in memory); a larger one is offered as a download only. */
  videoBytes: 512 * 1024 * 1024,
  /** Bytes of the chapters file read. */
  chaptersBytes: 4 * 1024 * 1024,
};

/** The files a recording serves (src/recording/store.ts); nothing else is ever requested. */
const IMAGE_PATH = /^images\/[A-Za-z0-9_-]{1,200}\.(?:png|jpg|webp|gif)$/;
export const TRACE_FILE = /^trace(?:-\d{1,4})?\.zip$/;

/**
 * An input made small enough to keep: strings cut, lists and objects shortened, images never kept.
 * @param {any} value
 * @returns {unknown}
 */
function bounded(value, depth = 0) {
  if (typeof value === 'string') return cut(value, LIMITS.inputChars);
  if (value === null || typeof value !== 'object') return value;
  if (depth >= LIMITS.inputDepth) return '[…]';
  if (value.type === 'image' && value.source) return '[image omitted]';
  if (Array.isArray(value)) {
    const items = value.slice(0, LIMITS.inputItems).map((v) => bounded(v, depth + 1));
    if (value.length > items.length) items.push(`… (${value.length - items.length} more items)`);
    return items;
  }
  /** @type {Record<string, unknown>} */
  const out = {};
  const keys = Object.keys(value);
  for (const key of keys.slice(0, LIMITS.inputItems)) out[key] = bounded(value[key], depth + 1);
  if (keys.length > LIMITS.inputItems) out['…'] = `${keys.length - LIMITS.inputItems} more fields`;
  return out;
}

// ---- requests

/** No token, or the daemon refused it: the page was told first (onAuthFailure). */
export class AuthError extends Error {
  code = 'ERR_AUTH';
}
/** A request that got no answer (status 0) or one other than 2xx. */
export class HttpError extends Error {
  code = 'ERR_HTTP';
  /**
   * @param {number} status
   * @param {number} [retryAfter] seconds the daemon asked to wait
   */
  constructor(status, retryAfter) {
    super(`HTTP ${status}`);
    this.status = status;
    this.retryAfter = retryAfter;
  }
}

/** A recording's file `name` (src/recording/store.ts), for recording `id`. */
export const fileUrl = (/** @type {string} */ id, /** @type {string} */ name) =>
  `${RECORDINGS_PATH}/${encodeURIComponent(id)}/${name.split('/').map(encodeURIComponent).join('/')}`;

/** What the page does when there is no token, or when the daemon refuses it (replay.js: the login form). */
const authFailure = { missing: () => {}, refused: () => {} };

/**
 * Sets what `api` does, before it throws an AuthError, when there is no token or the daemon refused it.
 * @param {() => void} missing
 * @param {() => void} refused
 */
export function onAuthFailure(missing, refused) {
  authFailure.missing = missing;
  authFailure.refused = refused;
}

/**
 * GET with the token; 401 forgets the token, tells the page (onAuthFailure) and throws.
 * @param {string} path
 * @param {AbortSignal} [signal]
 */
export async function api(path, signal) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) {
    authFailure.missing();
    throw new AuthError('no token');
  }
  let res;
  try {
    res = await fetch(path, {
      headers: { authorization: `Bearer ${token}` },
      cache: 'no-store',
      credentials: 'omit',
      referrerPolicy: 'no-referrer',
      signal,
    });
  } catch (/** @type {any} */ err) {
    if (err && err.name === 'AbortError') throw err;
    // A token with characters a header cannot carry fails here, before any request; so does a stopped daemon.
    throw new HttpError(0);
  }
  if (res.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    authFailure.refused();
    throw new AuthError('refused');
  }
  if (!res.ok) {
    const retryAfter = Number(res.headers.get('retry-after')) || 1;
    await res.body?.cancel().catch(() => undefined);
    throw new HttpError(res.status, retryAfter);
  }
  return res;
}

/**
 * What went wrong, in words for the page.
 * @param {any} err
 */
export function describeFailure(err) {
  if (err instanceof HttpError) {
    if (err.status === 0) return 'the daemon could not be reached';
    if (err.status === 429) return `too many requests; the daemon asks to wait ${err.retryAfter} s`;
    if (err.status === 404) return 'not found';
    return `the daemon answered ${err.status}`;
  }
  return String((err && err.message) || err);
}

/**
 * The daemon's list of recordings (`GET /recordings`, newest first: src/recording/routes.ts).
 * @returns {Promise<Json[]>}
 */
export async function readRecordings() {
  const res = await api(RECORDINGS_PATH);
  const body = await res.json();
  return Array.isArray(body && body.recordings) ? body.recordings : [];
}

/**
 * A listed recording's state, in words.
 * @param {Json} r
 */
export function recordingState(r) {
  if (r.live) return 'live';
  return typeof r.ended_at === 'number' ? 'finished' : 'ended without a close (daemon stopped)';
}

// ---- the trajectory

/** @returns {Trajectory} */
function newTrajectory() {
  return {
    header: null,
    tools: [],
    batches: [],
    calls: [],
    byBatchId: new Map(),
    video: null,
    closed: null,
    stopped: null,
    lines: 0,
    badLines: 0,
    longLines: 0,
    lastLineCut: false,
    bytesCut: false,
    batchesDropped: 0,
  };
}

/**
 * Reads the trajectory once, line by line as it arrives; keeps what LIMITS allow.
 * @param {string} id
 * @param {AbortSignal} signal
 */
export async function readTrajectory(id, signal) {
  const t = newTrajectory();
  const res = await api(fileUrl(id, 'trajectory.jsonl'), signal);
  // A 200 answer to a GET always has a body (only 101, 103, 204, 205 and 304 have none).
  const reader = /** @type {ReadableStream<Uint8Array>} */ (res.body).getReader();
  const decoder = new TextDecoder();
  let pending = '';
  let skipping = false;
  let bytes = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes += value.byteLength;
    if (bytes > LIMITS.trajectoryBytes) {
      t.bytesCut = true;
      await reader.cancel().catch(() => undefined);
      break;
    }
    pending += decoder.decode(value, { stream: true });
    let start = 0;
    for (let nl = pending.indexOf('\n'); nl >= 0; nl = pending.indexOf('\n', start)) {
      if (skipping) skipping = false;
      else take(t, pending.slice(start, nl));
      start = nl + 1;
    }
    pending = pending.slice(start);
    if (pending.length > LIMITS.lineChars) {
      if (!skipping) t.longLines++;
      skipping = true;
      pending = '';
    }
  }
  if (!t.bytesCut) {
    pending += decoder.decode();
    // A last line without its newline: the daemon stopped while writing it (or it is still being written).
    if (!skipping && pending.trim()) {
      if (!take(t, pending, true)) t.lastLineCut = true;
    }
  }
  finishTrajectory(t);
  return t;
}

/**
 * Parses and applies one line; false when it is not JSON.
 * @param {Trajectory} t
 * @param {string} text
 */
function take(t, text, last = false) {
  if (!text.trim()) return true;
  let rec;
  try {
    rec = JSON.parse(text);
  } catch {
    if (!last) t.badLines++;
    return false;
  }
  t.lines++;
  if (rec && typeof rec === 'object') apply(t, rec);
  return true;
}

/**
 * A new batch at the end of `t`; undefined (counted) past LIMITS.batchesKept.
 * @param {Trajectory} t
 * @param {unknown} batchId
 * @param {any} at
 * @param {Batch['kind']} kind
 * @returns {Batch | undefined}
 */
function newBatch(t, batchId, at, kind) {
  if (t.batches.length >= LIMITS.batchesKept) {
    t.batchesDropped++;
    return undefined;
  }
  const batch = { kind, batch_id: String(batchId), at, calls: [], index: t.batches.length, result: null };
  t.batches.push(batch);
  return batch;
}

/**
 * A new call at the end of `batch` (and of `t`).
 * @param {Trajectory} t
 * @param {Batch} batch
 * @param {number} index
 * @param {Json} fields `id`, `name`, `toolset` and `input`, as recorded
 */
function newCall(t, batch, index, fields) {
  /** @type {Call} */
  const call = {
    seq: t.calls.length,
    batch,
    index,
    id: String(fields.id || ''),
    name: String(fields.name || 'call'),
    toolset: fields.toolset || null,
    input: fields.input === undefined ? undefined : bounded(fields.input),
    phase: 'pending',
    started_at: undefined,
    ended_at: undefined,
    duration_ms: undefined,
    attempts: undefined,
    error: null,
    texts: [],
    images: [],
    states: [],
    is_error: false,
  };
  batch.calls.push(call);
  t.calls.push(call);
  return call;
}

/**
 * Applies one line of the trajectory (docs/RECORDING.md) to `t`.
 * @param {Trajectory} t
 * @param {Json} rec
 */
function apply(t, rec) {
  switch (rec.type) {
    case 'recording':
      t.header = rec;
      return;
    case 'tools':
      t.tools = (Array.isArray(rec.tools) ? rec.tools : [])
        .slice(0, 50)
        .map((/** @type {any} */ tool) => String((tool && (tool.name || tool.type)) || '?'));
      return;
    case 'batch_started': {
      const batch = newBatch(t, rec.batch_id, rec.at, 'batch');
      if (!batch) return;
      t.byBatchId.set(batch.batch_id, batch);
      const uses = Array.isArray(rec.tool_uses) ? rec.tool_uses : [];
      uses.forEach((/** @type {any} */ tu, /** @type {number} */ i) =>
        newCall(t, batch, i, { id: tu && tu.id, name: tu && tu.name, input: tu && tu.input }),
      );
      return;
    }
    case 'tool_event': {
      const e = rec.event || {};
      const batch = t.byBatchId.get(String(e.batch_id));
      if (batch) applyEvent(batch, e, rec.at);
      return;
    }
    case 'batch_finished': {
      const r = rec.result || {};
      let batch = t.byBatchId.get(String(r.batch_id));
      if (!batch) {
        // Past the bound: counted at its batch_started line.
        if (t.batches.length >= LIMITS.batchesKept) return;
        // Its batch_started line was lost: the result alone still names the calls (under the bound: a batch).
        batch = /** @type {Batch} */ (newBatch(t, r.batch_id, rec.at, 'batch'));
      }
      t.byBatchId.delete(batch.batch_id);
      batch.result = {
        at: rec.at,
        cancelled: r.cancelled === true,
        replayed: r.replayed === true,
        duration_ms: r.duration_ms,
        halted: r.halted && typeof r.halted === 'object' ? r.halted : {},
        failures: Array.isArray(r.failures) ? r.failures.length : 0,
      };
      const results = Array.isArray(r.tool_results) ? r.tool_results : [];
      for (const tr of results) {
        const call =
          batch.calls.find((c) => c.id === tr.tool_use_id) ||
          newCall(t, batch, batch.calls.length, { id: tr.tool_use_id, name: '(unknown)' });
        call.is_error = tr.is_error === true;
        if (tr.toolset_name && !call.toolset) call.toolset = tr.toolset_name;
        for (const block of Array.isArray(tr.content) ? tr.content : []) {
          if (!block) continue;
          if (block.type === 'text' && call.texts.length < 20) call.texts.push(cut(block.text, LIMITS.resultChars));
          else if (block.type === 'image_file' && IMAGE_PATH.test(String(block.path))) {
            call.images.push({
              path: block.path,
              media_type: block.media_type,
              width: block.width,
              height: block.height,
              bytes: block.bytes,
            });
          } else if (block.type === 'browser_state' && Array.isArray(block.tabs)) {
            call.states.push(`${block.tabs.length} tab${block.tabs.length === 1 ? '' : 's'}`);
          }
        }
      }
      for (const f of Array.isArray(r.failures) ? r.failures : []) {
        const call = batch.calls.find((c) => c.id === f.tool_use_id) || batch.calls[f.index];
        if (call && f.error) {
          call.error = f.error;
          if (call.phase === 'pending' || call.phase === 'started') call.phase = 'failed';
        }
      }
      return;
    }
    case 'batch_replayed': {
      const batch = newBatch(t, rec.batch_id, rec.at, 'replayed');
      if (batch) batch.result = { at: rec.at, replayed: true, halted: {}, failures: 0 };
      return;
    }
    case 'video':
      if (typeof rec.started_at === 'number') t.video = { path: rec.path, started_at: rec.started_at };
      return;
    case 'session_closed':
      t.closed = { at: rec.at, reason: rec.reason };
      return;
    case 'stopped':
      t.stopped = { at: rec.at, reason: rec.reason };
      return;
    default:
      // Types this page does not know are ignored (docs/RECORDING.md).
      return;
  }
}

/**
 * Applies one tool_event to its call.
 * @param {Batch} batch
 * @param {Json} e the event
 * @param {any} at when it was written
 */
function applyEvent(batch, e, at) {
  const call = batch.calls[e.index] || batch.calls.find((c) => c.id === e.tool_use_id);
  if (!call) return;
  if (e.toolset_name !== undefined) call.toolset = e.toolset_name;
  if (e.name) call.name = String(e.name);
  call.phase = String(e.phase);
  if (e.phase === 'started') call.started_at = at;
  else call.ended_at = at;
  if (typeof e.duration_ms === 'number') call.duration_ms = e.duration_ms;
  if (e.attempts) call.attempts = e.attempts;
  if (e.error) call.error = e.error;
}

/**
 * For each call, the latest image returned at or before it.
 * @param {Trajectory} t
 */
function finishTrajectory(t) {
  /** @type {Call['shownImage']} */
  let latest = null;
  for (const call of t.calls) {
    if (call.images.length) latest = { image: call.images[call.images.length - 1], call };
    call.shownImage = latest;
  }
}

/**
 * When a call happened: its start, or (never started) when it was skipped, or its batch's start.
 * @param {Call} call
 * @returns {any} a time as recorded (milliseconds since the epoch), not checked
 */
export const callTime = (call) => call.started_at ?? call.ended_at ?? call.batch.at;

// ---- chapters (video.vtt)

/**
 * Seconds, from a WebVTT timestamp (`[hh:]mm:ss.ttt`); NaN for anything else.
 * @param {string} text
 */
function parseTimestamp(text) {
  const m = /^(?:(\d+):)?(\d{1,2}):(\d{2})\.(\d{3})$/.exec(text.trim());
  if (!m) return NaN;
  return Number(m[1] || 0) * 3600 + Number(m[2]) * 60 + Number(m[3]) + Number(m[4]) / 1000;
}

/**
 * A cue's text as written (WebVTT escapes `&`, `<` and `>`); shown with textContent, so nothing else is undone.
 * @param {string} text
 */
function unescapeCue(text) {
  return text
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&nbsp;/g, '\u00a0')
    .replace(/&lrm;|&rlm;/g, '')
    .replace(/&amp;/g, '&');
}

/**
 * WebVTT cues: `{ start, end, title, toolUseId }` (the title is `member · tool_use_id`, docs/RECORDING.md).
 * @param {string} text
 */
function parseChapters(text) {
  /** @type {Cue[]} */
  const cues = [];
  const blocks = text.replace(/\r\n?/g, '\n').split(/\n{2,}/);
  for (const block of blocks) {
    const lines = block.split('\n');
    const timing = lines.findIndex((l) => l.includes('-->'));
    if (timing < 0) continue;
    const [from, to] = lines[timing].split('-->');
    const start = parseTimestamp(from);
    const end = parseTimestamp((to || '').trim().split(/\s+/)[0] || '');
    if (!Number.isFinite(start) || !Number.isFinite(end)) continue;
    const title = unescapeCue(
      lines
        .slice(timing + 1)
        .join(' ')
        .trim(),
    );
    const sep = title.lastIndexOf(' · ');
    cues.push({ start, end, title, toolUseId: sep >= 0 ? title.slice(sep + 3) : '' });
    if (cues.length >= 100_000) break;
  }
  return cues.sort((a, b) => a.start - b.start);
}

/**
 * A batch's state, as its badge says it.
 * @param {Batch} batch
 */
export function batchState(batch) {
  if (batch.kind === 'replayed') return 'replayed';
  if (!batch.result) return 'unfinished';
  return batch.result.cancelled ? 'cancelled' : 'finished';
}

/**
 * The chapters of a recording's `video.vtt`; null when it has none or it is larger than LIMITS allow.
 * @param {string} id
 * @param {AbortSignal} signal
 */
export async function readChapters(id, signal) {
  const res = await api(fileUrl(id, 'video.vtt'), signal).catch((err) => {
    if (err instanceof HttpError && err.status === 404) return null;
    throw err;
  });
  if (!res) return null;
  const length = Number(res.headers.get('content-length'));
  if (length > LIMITS.chaptersBytes) {
    await res.body?.cancel();
    return null;
  }
  return parseChapters(await res.text());
}

/**
 * The chapter of the latest call started by `seconds` (between two calls, the earlier one's).
 * @param {Cue[]} chapters
 * @param {number} seconds
 */
export function cueAt(chapters, seconds) {
  /** @type {Cue | null} */
  let found = null;
  for (const cue of chapters) {
    if (cue.start > seconds + 0.0005) break;
    found = cue;
  }
  return found;
}

/**
 * The call on screen `seconds` into the video: its chapter's, or the latest call started by then.
 * @param {Call[]} calls a trajectory's calls
 * @param {{ started_at: number }} video its video
 * @param {Cue[]} chapters
 * @param {number} seconds
 */
export function callAt(calls, video, chapters, seconds) {
  const cue = cueAt(chapters, seconds);
  if (cue) {
    const call = calls.find((c) => c.id === cue.toolUseId);
    if (call) return call;
  }
  const at = video.started_at + seconds * 1000;
  /** @type {Call | null} */
  let found = null;
  for (const call of calls) {
    if (callTime(call) > at) break;
    found = call;
  }
  return found;
}
