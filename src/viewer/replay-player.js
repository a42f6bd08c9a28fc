/*
 * The replay page's player (docs/VIEWER.md "Replay"): the recording opened
 * from the list (replay.js), its trajectory's batches and calls beside what
 * the screen showed at each call, the image the call (or an earlier one)
 * returned, or the desktop video at the call's time; stepping through the
 * calls with the keys; its files to download. What it shows comes from the
 * model (replay-model.js), written with textContent only.
 */
/* global document */
import { badge, byId, cut, el, renderError } from './common.js';
import {
  api,
  AuthError,
  batchState,
  callAt,
  callTime,
  cueAt,
  describeFailure,
  fileUrl,
  HttpError,
  LIMITS,
  readChapters,
  readTrajectory,
  TRACE_FILE,
} from './replay-model.js';

/**
 * @typedef {import('./replay-model.js').Json} Json
 * @typedef {import('./replay-model.js').Batch} Batch
 * @typedef {import('./replay-model.js').Call} Call
 * @typedef {import('./replay-model.js').Cue} Cue
 * @typedef {import('./replay-model.js').Trajectory} Trajectory
 */
/**
 * The open recording (`current`): its info, trajectory, selection, and the blob: URLs it made.
 * @typedef {object} Playback
 * @property {string} id
 * @property {Json} info its entry in the list (or one made of its id)
 * @property {AbortController} abort aborts its requests when it is closed
 * @property {Trajectory | null} t null until read
 * @property {number} selected the selected call's `seq` (-1: none)
 * @property {number} shown how many batches the timeline renders
 * @property {Map<number, HTMLElement>} rows each rendered call's row, by `seq`
 * @property {Map<string, string>} images image path → blob: URL, least recently used first
 * @property {number | undefined} imageTimer
 * @property {string | null} videoUrl
 * @property {string | null} downloadUrl
 * @property {Cue[]} chapters
 * @property {number | null} ownSeekAt where this page last seeked the video to (its `seeked` event is not the user's)
 * @typedef {Playback & { t: Trajectory }} Loaded an open recording whose trajectory was read
 */

const ui = {
  player: byId('player'),
  title: byId('player-title'),
  prev: /** @type {HTMLButtonElement} */ (byId('prev')),
  next: /** @type {HTMLButtonElement} */ (byId('next')),
  reload: byId('reload'),
  selection: byId('selection'),
  videoFigure: byId('video-figure'),
  video: /** @type {HTMLVideoElement} */ (byId('video')),
  chapter: byId('chapter'),
  videoNote: byId('video-note'),
  shot: /** @type {HTMLImageElement} */ (byId('shot')),
  caption: byId('shot-caption'),
  downloads: byId('downloads'),
  sessionInfo: byId('session-info'),
  trajectoryNote: byId('trajectory-note'),
  batches: byId('batches'),
  moreBatches: byId('more-batches'),
};

// ---- formatting

export const clock = (/** @type {unknown} */ at) => (typeof at === 'number' ? new Date(at).toLocaleString() : '');

/** @param {unknown} ms */
export function duration(ms) {
  if (typeof ms !== 'number' || !Number.isFinite(ms)) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s - m * 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/**
 * `+m:ss.s` from the recording's start.
 * @param {unknown} at
 * @param {unknown} start
 */
function offset(at, start) {
  if (typeof at !== 'number' || typeof start !== 'number') return '';
  const s = Math.max(0, at - start) / 1000;
  const m = Math.floor(s / 60);
  return `+${m}:${(s - m * 60).toFixed(1).padStart(4, '0')}`;
}

/** @param {unknown} bytes */
export function size(bytes) {
  if (typeof bytes !== 'number') return '';
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  if (bytes < 1024 * 1024 * 1024) return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
  return `${(bytes / 1024 / 1024 / 1024).toFixed(2)} GiB`;
}

// ---- playing one back

/** @type {Playback | null} */
let current = null;

/** The open recording's id and selected call (`seq`), or null when none is open. */
export function opened() {
  return current && { id: current.id, selected: current.selected };
}

/** Closes the open recording, if any: its requests are aborted, its blob: URLs revoked, its media let go. */
export function closeRecording() {
  if (!current) return;
  current.abort.abort();
  clearTimeout(current.imageTimer);
  for (const url of current.images.values()) URL.revokeObjectURL(url);
  if (current.videoUrl) URL.revokeObjectURL(current.videoUrl);
  if (current.downloadUrl) URL.revokeObjectURL(current.downloadUrl);
  ui.video.pause();
  ui.video.removeAttribute('src');
  ui.video.load();
  ui.shot.removeAttribute('src');
  ui.shot.hidden = true;
  current = null;
}

/**
 * Opens recording `id` in the player (closing the one open): reads its trajectory, renders it, loads its video.
 * @param {string} id
 * @param {Json} info its entry in the list (or one made of its id)
 * @param {number} [keepSeq] the call to select (a reload keeps the selection)
 */
export async function openRecording(id, info, keepSeq) {
  closeRecording();
  /** @type {Playback} */
  const state = {
    id,
    info,
    abort: new AbortController(),
    t: null,
    selected: -1,
    shown: LIMITS.batchesShown,
    rows: new Map(),
    images: new Map(),
    imageTimer: undefined,
    videoUrl: null,
    downloadUrl: null,
    chapters: [],
    ownSeekAt: null,
  };
  current = state;
  ui.player.hidden = false;
  ui.title.textContent = `session ${info.session_id}`;
  ui.reload.hidden = !info.live;
  ui.selection.textContent = 'Loading the trajectory…';
  ui.batches.replaceChildren();
  ui.moreBatches.hidden = true;
  ui.trajectoryNote.textContent = '';
  ui.caption.textContent = 'No image yet.';
  ui.videoFigure.hidden = true;
  ui.videoNote.textContent = '';
  ui.chapter.textContent = 'No chapter.';
  let t;
  try {
    t = await readTrajectory(id, state.abort.signal);
  } catch (/** @type {any} */ err) {
    if (current !== state || err instanceof AuthError || (err && err.name === 'AbortError')) return;
    ui.selection.textContent = `Could not read the trajectory: ${describeFailure(err)}.`;
    renderDownloads(state);
    return;
  }
  if (current !== state) return;
  const loaded = /** @type {Loaded} */ (state);
  loaded.t = t;
  renderSessionInfo(loaded);
  renderDownloads(loaded);
  renderTimeline(loaded);
  void loadVideo(loaded);
  if (t.calls.length === 0) {
    ui.selection.textContent = 'This recording has no calls.';
    return;
  }
  select(Math.min(keepSeq ?? 0, t.calls.length - 1), { scroll: keepSeq !== undefined });
}

/** @param {Loaded} state */
function renderSessionInfo(state) {
  const { t, info } = state;
  const h = t.header || {};
  /** @type {[string, unknown][]} */
  const facts = [];
  facts.push(['session', h.session_id || info.session_id]);
  if (h.desktop && h.desktop.id) facts.push(['desktop', h.desktop.id]);
  facts.push(['started', clock(h.at ?? info.started_at)]);
  if (t.closed) facts.push(['ended', `${clock(t.closed.at)} (${t.closed.reason})`]);
  else facts.push(['ended', info.live ? 'still running' : 'no close recorded (the daemon stopped)']);
  if (t.tools.length) facts.push(['tools offered', t.tools.join(', ')]);
  if (h.redaction) {
    const on = Object.entries(h.redaction)
      .filter(([, v]) => v === true)
      .map(([k]) => k);
    facts.push(['redacted', on.length ? on.join(', ') : 'nothing']);
  }
  if (h.daemon) facts.push(['daemon', `${h.daemon.version} (protocol ${h.daemon.protocol})`]);
  if (t.stopped) facts.push(['stopped early', `${t.stopped.reason} at ${clock(t.stopped.at)}`]);
  const dl = el('dl');
  for (const [k, v] of facts) dl.append(el('dt', null, k), el('dd', null, v));
  ui.sessionInfo.replaceChildren(el('h2', null, 'Session'), dl);
  const notes = [`${t.batches.length} batches, ${t.calls.length} calls, ${t.lines} lines`];
  if (t.lastLineCut) notes.push('the last line was cut (the daemon stopped while writing it): it is left out');
  if (t.badLines) notes.push(`${t.badLines} unreadable lines skipped`);
  if (t.longLines) notes.push(`${t.longLines} lines over ${LIMITS.lineChars} characters skipped`);
  if (t.bytesCut) notes.push(`only the first ${size(LIMITS.trajectoryBytes)} were read`);
  if (t.batchesDropped) notes.push(`${t.batchesDropped} later batches not kept (the page keeps ${LIMITS.batchesKept})`);
  ui.trajectoryNote.textContent = notes.join(' · ');
  ui.trajectoryNote.dataset.lastLineCut = String(t.lastLineCut);
}

// ---- downloads

/** @param {Playback} state */
function renderDownloads(state) {
  const files = new Set(Array.isArray(state.info.files) ? state.info.files : []);
  const hasVideo = files.has('video.mp4') || Boolean(state.t && state.t.video);
  const items = [];
  items.push(downloadItem(state, 'trajectory.jsonl', 'Trajectory', 'JSON Lines; deskbatch replay reads it'));
  if (hasVideo) {
    items.push(downloadItem(state, 'video.mp4', 'Video', 'the desktop, H.264 MP4'));
    if (files.has('video.vtt') || state.t?.video) items.push(downloadItem(state, 'video.vtt', 'Chapters', 'WebVTT'));
  } else {
    items.push(el('li', 'absent', 'No video in this recording (video off, ffmpeg missing, or no computer call).'));
  }
  const traces = [...files].filter((f) => TRACE_FILE.test(f)).sort();
  if (traces.length === 0) items.push(el('li', 'absent', 'No browser trace in this recording.'));
  for (const name of traces) {
    items.push(downloadItem(state, name, 'Trace', `open with npx playwright show-trace ${name}`));
  }
  ui.downloads.replaceChildren(...items);
}

/**
 * @param {Playback} state
 * @param {string} name the file
 * @param {string} label
 * @param {string} note
 */
function downloadItem(state, name, label, note) {
  const li = el('li');
  const link = el('a', 'download', `${label} (${name})`);
  link.href = fileUrl(state.id, name);
  link.dataset.file = name;
  const status = el('span', 'meta');
  link.addEventListener('click', (event) => {
    // The route needs the token in a header, which a plain link cannot send: fetch it, then save the blob.
    event.preventDefault();
    void download(state, name, status);
  });
  li.append(link, el('span', 'meta', ` — ${note}`), status);
  return li;
}

/**
 * @param {Playback} state
 * @param {string} name the file
 * @param {HTMLElement} status where it says how it went
 */
async function download(state, name, status) {
  status.textContent = ' — fetching…';
  try {
    const res = await api(`${fileUrl(state.id, name)}?download=1`, state.abort.signal);
    const blob = await res.blob();
    if (current !== state) return;
    if (state.downloadUrl) URL.revokeObjectURL(state.downloadUrl);
    state.downloadUrl = URL.createObjectURL(blob);
    const a = el('a');
    a.href = state.downloadUrl;
    a.download = `${state.id}-${name}`;
    a.hidden = true;
    document.body.append(a);
    a.click();
    a.remove();
    status.textContent = ` — saved (${size(blob.size)})`;
  } catch (/** @type {any} */ err) {
    if (err instanceof AuthError || (err && err.name === 'AbortError')) return;
    status.textContent = ` — ${describeFailure(err)}`;
  }
}

// ---- the timeline

/** @param {Loaded} state */
function renderTimeline(state) {
  const { t } = state;
  state.rows = new Map();
  const shown = t.batches.slice(0, state.shown);
  if (shown.length === 0) {
    ui.batches.replaceChildren(el('p', 'empty', 'No batches in this recording.'));
  } else {
    ui.batches.replaceChildren(...shown.map((b) => renderBatch(state, b)));
  }
  const hidden = t.batches.length - shown.length;
  ui.moreBatches.hidden = hidden <= 0;
  ui.moreBatches.textContent = `Show ${Math.min(hidden, LIMITS.batchesShown)} more batches (${hidden} not shown)`;
  if (state.selected >= 0) markSelected(state, state.selected, false);
}

ui.moreBatches.addEventListener('click', () => {
  if (!current || !current.t) return;
  current.shown += LIMITS.batchesShown;
  renderTimeline(/** @type {Loaded} */ (current));
});

/**
 * @param {Loaded} state
 * @param {Batch} batch
 */
function renderBatch(state, batch) {
  const start = state.t.header?.at ?? state.info.started_at;
  const node = el('section', 'batch');
  node.dataset.batchId = batch.batch_id;
  const s = batchState(batch);
  node.dataset.state = s;
  const header = el('header');
  const when = el('time', null, offset(batch.at, start));
  when.title = clock(batch.at);
  header.append(el('span', 'batch-id', `batch ${batch.batch_id}`), badge(s), when);
  const r = batch.result;
  if (r && typeof r.duration_ms === 'number') header.append(el('span', 'duration', duration(r.duration_ms)));
  if (batch.kind === 'replayed') header.append(el('span', 'meta', 'resent: answered from the stored result'));
  else if (r && r.replayed) header.append(el('span', 'meta', 'answered from the stored result'));
  if (!r && batch.kind === 'batch') header.append(el('span', 'meta', 'no result recorded'));
  if (r && r.failures) header.append(el('span', 'meta fail', `${r.failures} failure${r.failures === 1 ? '' : 's'}`));
  node.append(header);
  const halted = r ? Object.entries(r.halted) : [];
  if (halted.length) {
    node.append(
      el(
        'p',
        'halted',
        `halted: ${halted.map(([toolset, index]) => `${toolset} (by call ${Number(index) + 1})`).join(', ')}`,
      ),
    );
  }
  if (r && r.cancelled) node.append(el('p', 'cancelled', 'cancelled: the calls after the cancel did not run'));
  if (batch.calls.length) {
    const calls = el('ol', 'calls');
    for (const call of batch.calls) calls.append(renderCall(state, call, start));
    node.append(calls);
  }
  return node;
}

/**
 * @param {Loaded} state
 * @param {Call} call
 * @param {unknown} start the recording's start, for the call's offset
 */
function renderCall(state, call, start) {
  const node = el('li', 'call');
  node.dataset.phase = call.phase;
  node.dataset.seq = String(call.seq);
  node.dataset.toolUseId = call.id;
  const line = el('div', 'call-line');
  line.append(
    el('span', 'call-name', call.name),
    el('span', 'toolset', call.toolset || 'no toolset'),
    badge(call.phase),
  );
  const when = el('time', null, offset(callTime(call), start));
  when.title = clock(callTime(call));
  line.append(when);
  if (call.duration_ms !== undefined) line.append(el('span', 'duration', duration(call.duration_ms)));
  if (call.attempts) line.append(el('span', 'meta', `${call.attempts} attempts`));
  if (call.images.length) line.append(el('span', 'meta has-image', `▣ ${call.images.length} image`));
  node.append(line);
  if (call.input && typeof call.input === 'object' && Object.keys(call.input).length) {
    node.append(el('code', 'input', cut(JSON.stringify(call.input), LIMITS.inputShown)));
  }
  if (call.error)
    node.append(renderError(call.error, { messageChars: LIMITS.errorChars, fieldChars: LIMITS.inputChars }));
  node.addEventListener('click', () => select(call.seq, { scroll: false }));
  state.rows.set(call.seq, node);
  return node;
}

/**
 * The selected call's details: the whole kept input and what it returned.
 * @param {Call} call
 */
function renderDetails(call) {
  const node = el('div', 'details');
  // The timeline shows the input's first characters; the whole kept input only when that was not all of it.
  if (call.input !== undefined && JSON.stringify(call.input).length > LIMITS.inputShown) {
    node.append(el('div', 'detail-label', 'input'), el('pre', 'detail', JSON.stringify(call.input, null, 2)));
  }
  for (const text of call.texts) node.append(el('div', 'detail-label', 'returned text'), el('pre', 'detail', text));
  for (const image of call.images) {
    node.append(
      el('div', 'detail-label', 'returned image'),
      el('div', 'detail', `${image.path} · ${image.width ?? '?'}×${image.height ?? '?'} · ${size(image.bytes)}`),
    );
  }
  if (call.states.length)
    node.append(el('div', 'detail-label', 'browser state'), el('div', 'detail', call.states.join('; ')));
  if (call.is_error) node.append(el('div', 'meta', 'the model was told this call failed (is_error)'));
  return node;
}

// ---- selection

/**
 * Selects the call `seq`: its row, its details, its image and (`seek`) its place in the video.
 * @param {number} seq
 * @param {{ seek?: boolean, scroll?: boolean }} [options]
 */
function select(seq, { seek = true, scroll = true } = {}) {
  if (!current || !current.t) return;
  const state = /** @type {Loaded} */ (current);
  const call = state.t.calls[seq];
  if (!call) return;
  if (call.batch.index >= state.shown) {
    state.shown = (Math.floor(call.batch.index / LIMITS.batchesShown) + 1) * LIMITS.batchesShown;
    renderTimeline(state);
  }
  state.selected = seq;
  markSelected(state, seq, scroll);
  const start = state.t.header?.at ?? state.info.started_at;
  ui.selection.textContent =
    `Call ${seq + 1} of ${state.t.calls.length}: ${call.name} (${call.id}) · batch ${call.batch.batch_id}, ` +
    `call ${call.index + 1} · ${call.phase} · ${offset(callTime(call), start)} (${clock(callTime(call))})`;
  ui.prev.disabled = seq === 0;
  ui.next.disabled = seq === state.t.calls.length - 1;
  showImage(state, call);
  if (seek) seekVideo(state, call);
}

/**
 * @param {Loaded} state
 * @param {number} seq
 * @param {boolean} scroll
 */
function markSelected(state, seq, scroll) {
  for (const node of ui.batches.querySelectorAll('li.call[aria-current]')) {
    node.removeAttribute('aria-current');
    node.querySelector('.details')?.remove();
  }
  const node = state.rows.get(seq);
  if (!node) return;
  node.setAttribute('aria-current', 'true');
  node.append(renderDetails(state.t.calls[seq]));
  if (scroll) node.scrollIntoView({ block: 'nearest' });
}

/** @param {number} delta */
function step(delta) {
  if (!current || !current.t || current.t.calls.length === 0) return;
  const next = Math.max(0, Math.min(current.t.calls.length - 1, current.selected + delta));
  if (next !== current.selected) select(next);
}

ui.prev.addEventListener('click', () => step(-1));
ui.next.addEventListener('click', () => step(1));
document.addEventListener('keydown', (event) => {
  if (ui.player.hidden || event.altKey || event.ctrlKey || event.metaKey) return;
  const target = /** @type {Element | null} */ (event.target);
  // The video's own controls and the form keep their keys.
  if (target && ['INPUT', 'TEXTAREA', 'SELECT', 'VIDEO'].includes(target.tagName)) return;
  if (target && target.closest && target.closest('tr.recording')) return;
  if (event.key === 'ArrowDown' || event.key === 'ArrowRight' || event.key === 'j') step(1);
  else if (event.key === 'ArrowUp' || event.key === 'ArrowLeft' || event.key === 'k') step(-1);
  else return;
  event.preventDefault();
});

// ---- the image at or before the selected call

/**
 * @param {Loaded} state
 * @param {Call} call
 */
function showImage(state, call) {
  const shown = call.shownImage;
  clearTimeout(state.imageTimer);
  if (!shown) {
    ui.shot.hidden = true;
    ui.shot.removeAttribute('src');
    delete ui.shot.dataset.path;
    ui.caption.textContent = 'No image was returned at or before this call.';
    return;
  }
  const { image, call: from } = shown;
  const parts = [`${from.name} (${from.id})`, `batch ${from.batch.batch_id}`, clock(from.ended_at ?? callTime(from))];
  if (image.width && image.height) parts.push(`${image.width}×${image.height}`);
  parts.push(size(image.bytes));
  if (from !== call) parts.push(`returned ${call.seq - from.seq} call${call.seq - from.seq === 1 ? '' : 's'} earlier`);
  const caption = parts.join(' · ');
  const cached = state.images.get(image.path);
  if (cached) {
    // Most recently used last.
    state.images.delete(image.path);
    state.images.set(image.path, cached);
    putImage(image.path, cached, caption);
    return;
  }
  ui.caption.textContent = `${caption} · loading…`;
  // Stepping fast through calls asks for the image only where it stops (each request spends the rate budget).
  state.imageTimer = setTimeout(() => void fetchImage(state, image.path, caption), 60);
}

/**
 * @param {Loaded} state
 * @param {string} path
 * @param {string} caption
 */
async function fetchImage(state, path, caption, retried = false) {
  try {
    const res = await api(fileUrl(state.id, path), state.abort.signal);
    const blob = await res.blob();
    if (current !== state) return;
    const url = URL.createObjectURL(blob);
    state.images.set(path, url);
    while (state.images.size > LIMITS.imagesCached) {
      const [oldest, oldUrl] = /** @type {[string, string]} */ (state.images.entries().next().value);
      state.images.delete(oldest);
      URL.revokeObjectURL(oldUrl);
    }
    const call = state.t.calls[state.selected];
    if (call && call.shownImage && call.shownImage.image.path === path) putImage(path, url, caption);
  } catch (/** @type {any} */ err) {
    if (current !== state || err instanceof AuthError || (err && err.name === 'AbortError')) return;
    if (err instanceof HttpError && err.status === 429 && !retried) {
      ui.caption.textContent = `${caption} · ${describeFailure(err)}; trying again`;
      // api sets retryAfter for every answer it got (status 0 is none).
      const wait = /** @type {number} */ (err.retryAfter);
      state.imageTimer = setTimeout(() => void fetchImage(state, path, caption, true), wait * 1000);
      return;
    }
    ui.caption.textContent = `${caption} · the image could not be loaded: ${describeFailure(err)}`;
  }
}

/**
 * @param {string} path
 * @param {string} url its blob: URL
 * @param {string} caption
 */
function putImage(path, url, caption) {
  ui.shot.src = url;
  ui.shot.dataset.path = path;
  ui.shot.hidden = false;
  ui.caption.textContent = caption;
}

// ---- the video

/** @param {Loaded} state */
async function loadVideo(state) {
  const { t, info } = state;
  const files = new Set(Array.isArray(info.files) ? info.files : []);
  if (!t.video && !files.has('video.mp4')) return;
  const warning = t.video ? '' : 'the trajectory does not say when the video started: calls cannot be found in it';
  ui.videoNote.textContent = 'Loading the video…';
  try {
    if (t.video && (files.has('video.vtt') || info.live || files.size === 0)) {
      const chapters = await readChapters(state.id, state.abort.signal);
      if (chapters) state.chapters = chapters;
    }
    const res = await api(fileUrl(state.id, 'video.mp4'), state.abort.signal);
    const length = Number(res.headers.get('content-length'));
    if (length > LIMITS.videoBytes) {
      await res.body?.cancel();
      if (current === state) {
        ui.videoNote.textContent = `The video (${size(length)}) is larger than the page plays (${size(LIMITS.videoBytes)}): download it.`;
      }
      return;
    }
    const blob = await res.blob();
    if (current !== state) return;
    state.videoUrl = URL.createObjectURL(blob);
    ui.video.src = state.videoUrl;
    ui.videoFigure.hidden = false;
    ui.videoNote.textContent = [
      `Video ${size(blob.size)}`,
      t.video ? `time zero ${clock(t.video.started_at)}` : '',
      state.chapters.length ? `${state.chapters.length} chapters` : 'no chapters',
      warning,
    ]
      .filter(Boolean)
      .join(' · ');
    const call = t.calls[state.selected];
    if (call) seekVideo(state, call);
  } catch (/** @type {any} */ err) {
    if (current !== state || err instanceof AuthError || (err && err.name === 'AbortError')) return;
    ui.videoNote.textContent = `The video could not be loaded: ${describeFailure(err)}.`;
  }
}

/**
 * Seconds into the video at which `call` ran (negative: before the video started).
 * @param {{ started_at: number }} video the trajectory's video
 * @param {Call} call
 */
function videoTime(video, call) {
  return (callTime(call) - video.started_at) / 1000;
}

/**
 * @param {Loaded} state
 * @param {Call} call
 */
function seekVideo(state, call) {
  if (!state.videoUrl || !state.t.video) return;
  const cue = state.chapters.find((c) => c.toolUseId === call.id);
  let at = cue ? cue.start : videoTime(state.t.video, call);
  const before = at < 0;
  at = Math.max(0, at);
  const apply = () => {
    const end = Number.isFinite(ui.video.duration) ? ui.video.duration : at;
    state.ownSeekAt = Math.min(at, end);
    ui.video.currentTime = state.ownSeekAt;
  };
  if (ui.video.readyState >= 1) apply();
  else ui.video.addEventListener('loadedmetadata', apply, { once: true });
  showChapter(state, at, before ? 'this call ran before the video started' : '');
}

/**
 * @param {Playback} state
 * @param {number} seconds into the video
 * @param {string} note
 */
function showChapter(state, seconds, note) {
  const cue = cueAt(state.chapters, seconds);
  const parts = [cue ? `chapter: ${cue.title} (${cue.start.toFixed(1)}–${cue.end.toFixed(1)} s)` : 'no chapter here'];
  if (note) parts.push(note);
  ui.chapter.textContent = parts.join(' · ');
  ui.chapter.dataset.toolUseId = cue ? cue.toolUseId : '';
}

function followVideo() {
  const state = current;
  const t = state && state.t;
  if (!state || !t || !t.video || !state.videoUrl) return;
  showChapter(state, ui.video.currentTime, '');
  // The call on screen at the video's current time.
  const call = callAt(t.calls, t.video, state.chapters, ui.video.currentTime);
  if (call && call.seq !== state.selected) select(call.seq, { seek: false });
}

ui.video.addEventListener('timeupdate', () => {
  if (!ui.video.paused && !ui.video.seeking) followVideo();
});
ui.video.addEventListener('seeked', () => {
  if (!current) return;
  // A seek this page made shows the chapter it chose; one made with the video's own controls moves the selection.
  if (current.ownSeekAt !== null && Math.abs(ui.video.currentTime - current.ownSeekAt) < 0.05) {
    current.ownSeekAt = null;
    return;
  }
  followVideo();
});
