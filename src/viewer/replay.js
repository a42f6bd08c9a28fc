/*
 * The deskbatch replay page's script (docs/VIEWER.md "Replay"). Served as a
 * static file from this daemon; runs under a CSP that allows no inline code.
 *
 * It lists the recordings (`GET /recordings`) and plays one back from its
 * files (`GET /recordings/<id>/<file>`, docs/RECORDING.md): the trajectory's
 * batches and calls beside what the screen showed at each call, the image the
 * call (or an earlier one) returned, or the desktop video at the call's time.
 *
 * Everything shown comes from recordings and may hold model input and page
 * text, so it is written with textContent only, never parsed as HTML. Every
 * request carries the token in the Authorization header; media are shown
 * through blob: URLs, revoked when no longer shown.
 *
 * The token: the live page's (same sessionStorage key), or taken from the URL
 * fragment `#token=…` (then removed from the address bar), or typed into the
 * form.
 *
 * The page's view is this file (the token, the list of recordings, the page's
 * start) and replay-player.js (the recording opened: timeline, selection and
 * keys, image, video, downloads). What it reads and makes of the recordings
 * (requests, the trajectory's batches and calls, the chapters) is its model,
 * replay-model.js.
 */
/* global location, history, sessionStorage */
import { badge, byId, el, onLogin, showLoginForm, TOKEN_KEY } from './common.js';
import {
  AuthError,
  describeFailure,
  HttpError,
  LIMITS,
  onAuthFailure,
  readRecordings,
  recordingState,
} from './replay-model.js';
import { clock, closeRecording, duration, opened, openRecording, size } from './replay-player.js';

/** @typedef {import('./replay-model.js').Json} Json */

const ui = {
  state: byId('state'),
  forget: byId('forget'),
  login: byId('login'),
  token: /** @type {HTMLInputElement} */ (byId('token')),
  loginMessage: byId('login-message'),
  list: byId('list'),
  refresh: byId('refresh'),
  listNote: byId('list-note'),
  recordings: byId('recordings'),
  moreRecordings: byId('more-recordings'),
  player: byId('player'),
  reload: byId('reload'),
};

// ---- token

/** Moves a `#token=` fragment into sessionStorage and out of the address bar; returns `#recording=` if any. */
function readFragment() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ''));
  const token = params.get('token');
  const recording = params.get('recording') || undefined;
  if (params.has('token')) {
    history.replaceState(null, '', location.pathname + location.search + recordingHash(recording));
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
  }
  return recording;
}

const recordingHash = (/** @type {string | undefined} */ id) => (id ? `#recording=${encodeURIComponent(id)}` : '');

/**
 * @param {string} state
 * @param {string} text
 */
function setState(state, text) {
  ui.state.dataset.state = state;
  ui.state.textContent = text;
}

/** @param {string} message */
function showLogin(message) {
  showLoginForm(ui, message);
  ui.list.hidden = true;
  ui.player.hidden = true;
  ui.recordings.replaceChildren();
  setState('no-token', 'no token');
}

onAuthFailure(
  () => showLogin(''),
  () => {
    closeRecording();
    showLogin('The daemon refused that token.');
  },
);
onLogin(ui, () => void loadList());

ui.forget.addEventListener('click', () => {
  sessionStorage.removeItem(TOKEN_KEY);
  closeRecording();
  history.replaceState(null, '', location.pathname + location.search);
  showLogin('');
});

// ---- the list

const list = { recordings: /** @type {Json[]} */ ([]), shown: LIMITS.recordingsShown };

async function loadList() {
  setState('connecting', 'loading recordings…');
  let recordings;
  try {
    recordings = await readRecordings();
  } catch (err) {
    if (err instanceof AuthError) return;
    ui.list.hidden = false;
    ui.forget.hidden = false;
    if (err instanceof HttpError && err.status === 404) {
      setState('disconnected', 'recording is off');
      ui.listNote.textContent =
        'This daemon records nothing: start it with --record or --record-on-request (docs/RECORDING.md).';
    } else {
      setState('disconnected', `could not list recordings: ${describeFailure(err)}`);
    }
    return;
  }
  ui.login.hidden = true;
  ui.forget.hidden = false;
  ui.list.hidden = false;
  list.recordings = recordings;
  setState('connected', `${list.recordings.length} recording${list.recordings.length === 1 ? '' : 's'}`);
  ui.listNote.textContent = `listed ${new Date().toLocaleTimeString()}`;
  renderList();
}

ui.refresh.addEventListener('click', () => void loadList());
ui.moreRecordings.addEventListener('click', () => {
  list.shown += LIMITS.recordingsShown;
  renderList();
});

function renderList() {
  const rows = list.recordings.slice(0, list.shown).map(renderRow);
  if (rows.length === 0) {
    const row = el('tr');
    const cell = el('td', 'empty', 'No recordings yet.');
    cell.colSpan = 8;
    row.append(cell);
    rows.push(row);
  }
  ui.recordings.replaceChildren(...rows);
  const hidden = list.recordings.length - list.shown;
  ui.moreRecordings.hidden = hidden <= 0;
  ui.moreRecordings.textContent = `Show ${Math.min(hidden, LIMITS.recordingsShown)} more (${hidden} not shown)`;
}

/** @param {Json} r a recording of the list */
function renderRow(r) {
  const row = el('tr', 'recording');
  row.dataset.id = String(r.id);
  row.tabIndex = 0;
  if (opened()?.id === r.id) row.setAttribute('aria-selected', 'true');
  const end = typeof r.ended_at === 'number' ? r.ended_at : r.live ? Date.now() : undefined;
  const failures = el('td', 'num failures', r.failures);
  if (r.failures > 0) failures.dataset.failed = 'true';
  if (r.cancelled > 0) failures.textContent = `${r.failures} (${r.cancelled} cancelled)`;
  const state = el('td', 'rec-state');
  state.append(badge(r.live ? 'running' : typeof r.ended_at === 'number' ? 'finished' : 'partial', recordingState(r)));
  row.append(
    el('td', 'started', clock(r.started_at)),
    el('td', 'duration', end !== undefined ? `${duration(end - r.started_at)}${r.live ? ' so far' : ''}` : 'unknown'),
    el('td', 'num batches', r.batches),
    el('td', 'num calls', r.calls),
    failures,
    el('td', 'num size', size(r.bytes)),
    state,
    el('td', 'session-id', r.session_id),
  );
  const choose = () => void open(r.id);
  row.addEventListener('click', choose);
  row.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' || event.key === ' ') {
      event.preventDefault();
      choose();
    }
  });
  return row;
}

/**
 * Opens recording `id` in the player with what the list says of it (`keepSeq`: the call to select), puts its
 * link in the address bar and marks its row.
 * @param {string} id
 * @param {number} [keepSeq]
 */
function open(id, keepSeq) {
  history.replaceState(null, '', location.pathname + location.search + recordingHash(id));
  for (const row of /** @type {HTMLCollectionOf<HTMLElement>} */ (ui.recordings.children)) {
    if (row.dataset.id === id) row.setAttribute('aria-selected', 'true');
    else row.removeAttribute('aria-selected');
  }
  const info = list.recordings.find((r) => r.id === id) || { id, session_id: id, files: [] };
  return openRecording(id, info, keepSeq);
}

ui.reload.addEventListener('click', () => {
  const playing = opened();
  if (!playing) return;
  const { id, selected } = playing;
  void loadList().then(() => open(id, selected));
});

// ---- start

const wanted = readFragment();
if (!sessionStorage.getItem(TOKEN_KEY)) {
  showLogin('');
} else {
  void loadList().then(() => {
    if (wanted && opened() === null && list.recordings.some((r) => r.id === wanted)) void open(wanted);
  });
}
