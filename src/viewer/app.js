/*
 * The deskbatch live viewer's page script (docs/VIEWER.md). Served as a static
 * file from this daemon; runs under a CSP that allows no inline code.
 *
 * Everything shown comes from the feed and may hold model input and page text,
 * so it is written with textContent only, never parsed as HTML.
 *
 * The token: taken from the URL fragment `#token=…` (which browsers never send
 * to the server) and then removed from the address bar, or typed into the
 * form; kept in sessionStorage only (gone when the tab closes).
 */
/* global location, history, sessionStorage, WebSocket, requestAnimationFrame, window */
import { badge, byId, el, onJsonMessage, onLogin, renderError, showLoginForm, TOKEN_KEY } from './common.js';
import { decorateSessions, setTakeover, stopTakeover } from './takeover.js';

const SUBPROTOCOL = 'deskbatch.viewer.v1';
const TOKEN_PREFIX = 'deskbatch.token.';
const FEED_PATH = '/viewer/feed';
const MEDIA_TYPES = new Set(['image/png', 'image/jpeg', 'image/webp', 'image/gif']);
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const CLOSE_READ_ONLY = 1008;
const CLOSE_TOO_MANY_VIEWERS = 1013;
const MAX_FEED_RETRY_MS = 30_000;

/**
 * What the feed sends, parsed but not checked: its types are src/viewer/feed.ts (Node.js code this check does
 * not read), and the page reads it as it did before it was type-checked.
 * @typedef {Record<string, any>} Received
 */

const ui = {
  state: byId('state'),
  dropped: byId('dropped'),
  forget: byId('forget'),
  login: byId('login'),
  token: /** @type {HTMLInputElement} */ (byId('token')),
  loginMessage: byId('login-message'),
  shot: /** @type {HTMLImageElement} */ (byId('shot')),
  caption: byId('shot-caption'),
  sessions: byId('sessions'),
};

const model = {
  /** @type {Map<string, Received>} id → session view, in the order first seen. */
  sessions: new Map(),
  /** @type {Map<string, Received>} id → timeline entry, oldest first (Map keeps insertion order). */
  entries: new Map(),
  maxEntries: 200,
  /** @type {Received | null} */
  image: null,
  dropped: 0,
};

/** @type {WebSocket | undefined} */
let socket;
let everConnected = false;
let retryMs = 1000;
/** @type {number | undefined} */
let retryTimer;
let renderQueued = false;
/** @type {Received | null | undefined} */
let shownImage;

// ---- token

/** Moves a `#token=` fragment into sessionStorage and out of the address bar. */
function takeTokenFromFragment() {
  const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (!match) return;
  history.replaceState(null, '', location.pathname + location.search);
  let token = '';
  try {
    token = decodeURIComponent(match[1]);
  } catch {
    token = '';
  }
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
}

/** @param {string} message */
function showLogin(message) {
  showLoginForm(ui, message);
  setState('no-token', 'not connected');
}

onLogin(ui, connect);

ui.forget.addEventListener('click', () => {
  sessionStorage.removeItem(TOKEN_KEY);
  everConnected = false;
  clearTimeout(retryTimer);
  stopTakeover();
  const s = socket;
  socket = undefined;
  if (s) s.close(1000);
  showLogin('');
});

// ---- connection

/**
 * @param {string} state
 * @param {string} text
 */
function setState(state, text) {
  ui.state.dataset.state = state;
  ui.state.textContent = text;
}

function connect() {
  clearTimeout(retryTimer);
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) {
    showLogin('');
    return;
  }
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  let ws;
  try {
    ws = new WebSocket(`${scheme}//${location.host}${FEED_PATH}`, [SUBPROTOCOL, TOKEN_PREFIX + token]);
  } catch {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin('That token has characters a browser cannot send in a WebSocket subprotocol.');
    return;
  }
  socket = ws;
  ui.login.hidden = true;
  ui.forget.hidden = false;
  setState(everConnected ? 'reconnecting' : 'connecting', everConnected ? 'reconnecting…' : 'connecting…');
  let opened = false;
  ws.addEventListener('open', () => {
    opened = true;
  });
  onJsonMessage(ws, () => socket === ws, receive);
  ws.addEventListener('close', (event) => {
    if (socket !== ws) return;
    socket = undefined;
    if (!opened && !everConnected) {
      // The handshake was refused (the browser does not say why): most often a wrong token.
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin(
        'Could not connect. Check the token; open this page as http://127.0.0.1:<port>/viewer or ' +
          'http://localhost:<port>/viewer (other host names are refused); and check that the daemon runs.',
      );
      return;
    }
    let why = opened ? 'disconnected' : 'could not reconnect (is the daemon running? did its token change?)';
    if (event.code === CLOSE_TOO_MANY_VIEWERS) why = 'too many viewers are connected';
    if (event.code === CLOSE_READ_ONLY) why = 'the feed closed the connection';
    setState('disconnected', `${why}; retrying in ${Math.round(retryMs / 1000)} s`);
    retryTimer = setTimeout(connect, retryMs);
    retryMs = Math.min(retryMs * 2, MAX_FEED_RETRY_MS);
  });
}

// ---- the model

/** @param {Received} message */
function receive(message) {
  switch (message && message.type) {
    case 'snapshot':
      model.sessions = new Map((message.sessions || []).map((/** @type {Received} */ s) => [s.id, s]));
      model.entries = new Map();
      model.maxEntries = (message.limits && message.limits.entries) || model.maxEntries;
      for (const entry of message.entries || []) upsert(entry);
      model.image = message.image || null;
      model.dropped = message.dropped || 0;
      everConnected = true;
      retryMs = 1000;
      setState('connected', 'connected');
      // Human takeover (takeover.js): its control socket and view, only when the daemon allows it.
      setTakeover(message.takeover === true, message.now);
      break;
    case 'session':
      model.sessions.set(message.session.id, message.session);
      break;
    case 'entries':
      for (const entry of message.entries) upsert(entry);
      break;
    case 'image':
      model.image = message.image;
      break;
    default:
      return;
  }
  scheduleRender();
}

/** @param {Received} entry */
function upsert(entry) {
  model.entries.set(entry.id, entry);
  // Not empty while over the bound, so the oldest key is there.
  while (model.entries.size > model.maxEntries) {
    model.entries.delete(/** @type {string} */ (model.entries.keys().next().value));
  }
}

// ---- rendering

function scheduleRender() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => {
    renderQueued = false;
    render();
  });
}

function render() {
  ui.dropped.hidden = model.dropped === 0;
  ui.dropped.textContent = `${model.dropped} update${model.dropped === 1 ? '' : 's'} dropped (slow connection)`;
  renderImage();
  renderSessions();
  decorateSessions();
}

const time = (/** @type {unknown} */ at) => (typeof at === 'number' ? new Date(at).toLocaleTimeString() : '');
const ms = (/** @type {unknown} */ value) => (typeof value === 'number' ? `${value} ms` : '');

function renderImage() {
  const image = model.image;
  if (image === shownImage) return;
  shownImage = image;
  if (!image) {
    ui.shot.hidden = true;
    ui.shot.removeAttribute('src');
    ui.caption.textContent = 'No image yet.';
    return;
  }
  const usable = typeof image.data === 'string' && MEDIA_TYPES.has(image.media_type) && BASE64.test(image.data);
  if (usable) {
    ui.shot.src = `data:${image.media_type};base64,${image.data}`;
    ui.shot.hidden = false;
  } else {
    ui.shot.hidden = true;
    ui.shot.removeAttribute('src');
  }
  const parts = [
    time(image.at),
    `session ${image.session}`,
    `batch ${image.batch_id}`,
    `${image.name || 'call'} (${image.tool_use_id})`,
  ];
  if (image.width && image.height) parts.push(`${image.width}×${image.height}`);
  if (image.note) parts.push(image.note);
  ui.caption.textContent = parts.join(' · ');
}

/**
 * A session's part of the timeline: its batches by entry id, each with its batch entry (null when it left the
 * timeline) and its call entries.
 * @typedef {{ session: Received, batches: Map<string, Batch> }} SessionGroup
 * @typedef {{ entry: Received | null, batch_id: string, calls: Received[] }} Batch
 */

/** Groups the entries by session, then by batch (calls in index order). */
function groups() {
  /** @type {Map<string, SessionGroup>} */
  const sessions = new Map();
  const sessionGroup = (/** @type {string} */ id) => {
    let group = sessions.get(id);
    if (!group) {
      group = { session: model.sessions.get(id) || { id }, batches: new Map() };
      sessions.set(id, group);
    }
    return group;
  };
  for (const id of model.sessions.keys()) sessionGroup(id);
  for (const entry of model.entries.values()) {
    const group = sessionGroup(entry.session);
    const key = entry.kind === 'batch' ? entry.id : entry.batch;
    let batch = group.batches.get(key);
    if (!batch) {
      batch = { entry: null, batch_id: entry.batch_id, calls: [] };
      group.batches.set(key, batch);
    }
    if (entry.kind === 'batch') batch.entry = entry;
    else batch.calls.push(entry);
  }
  // Newest session first.
  return [...sessions.values()].reverse().sort((a, b) => (b.session.opened_at || 0) - (a.session.opened_at || 0));
}

// ---- a session's live view and its links (docs/VIEWER.md "Links")

/** @type {Map<string, { url: string, expires: number } | { error: string }>} the link made here per session */
const madeLinks = new Map();

/**
 * Watch live (this session's page, /viewer/live, in a new tab of this origin: it reads the token from this
 * tab's sessionStorage, which a tab it opens starts with) and Share link (POST /v1/sessions/<id>/links with
 * the token: a read-only link, shown to copy).
 * @param {string} id
 */
function shareTools(id) {
  const node = el('div', 'session-share');
  const watch = el('button', 'watch-live', 'Watch live');
  watch.type = 'button';
  watch.addEventListener('click', () => window.open(`/viewer/live?session=${encodeURIComponent(id)}`, '_blank'));
  const share = el('button', 'share-link', 'Share link (view only)');
  share.type = 'button';
  share.addEventListener('click', () => void makeLink(id));
  node.append(watch, share);
  const made = madeLinks.get(id);
  if (made && 'url' in made) {
    const field = el('input', 'link-url');
    field.readOnly = true;
    field.value = made.url;
    node.append(field, el('span', 'meta', `until ${time(made.expires)}`));
  } else if (made) node.append(el('span', 'meta', made.error));
  return node;
}

/** @param {string} id */
async function makeLink(id) {
  const token = sessionStorage.getItem(TOKEN_KEY) || '';
  try {
    const res = await fetch(`/v1/sessions/${encodeURIComponent(id)}/links`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ mode: 'view' }),
    });
    const body = await res.json();
    if (!res.ok || typeof body.path !== 'string') throw new Error(String(body.message || res.status));
    madeLinks.set(id, { url: `${location.origin}${body.path}`, expires: Number(body.expires_at) });
  } catch (/** @type {any} */ err) {
    madeLinks.set(id, { error: `no link: ${String(err && err.message)}` });
  }
  scheduleRender();
}

function renderSessions() {
  const list = groups();
  if (list.length === 0) {
    ui.sessions.replaceChildren(el('p', 'empty', 'No sessions yet.'));
    return;
  }
  ui.sessions.replaceChildren(...list.map(renderSession));
}

/** @param {SessionGroup} group */
function renderSession(group) {
  const { session } = group;
  const node = el('article', 'session');
  node.dataset.session = session.id;
  node.dataset.closed = String(session.closed_at !== undefined);
  const header = el('header');
  header.append(el('span', 'session-id', `session ${session.id}`));
  if (session.desktop) header.append(el('span', 'session-desktop', `desktop ${session.desktop}`));
  if (session.opened_at) header.append(el('time', null, `opened ${time(session.opened_at)}`));
  if (session.closed_at) header.append(el('time', null, `closed ${time(session.closed_at)} (${session.close_reason})`));
  node.append(header);
  if (!session.closed_at) node.append(shareTools(session.id));
  // The files its harness staged (names are the harness's: shown as text, never markup).
  const documents = Array.isArray(session.documents) ? session.documents : [];
  if (documents.length) {
    const list = el('ul', 'session-files');
    for (const doc of documents) {
      const item = el('li', null, `${doc.name} (${doc.size} bytes, ${doc.media_type})`);
      item.title = `sha256 ${doc.sha256}`;
      list.append(item);
    }
    node.append(el('p', 'session-files-title', `Staged files: ${documents.length}`), list);
  }
  // The downloads its pages completed, kept for its harness (names are the page's: text, never markup).
  const downloads = Array.isArray(session.downloads) ? session.downloads : [];
  if (downloads.length) {
    const list = el('ul', 'session-files session-downloads');
    for (const dl of downloads) {
      const item = el('li', null, `${dl.name} (${dl.size} bytes, ${dl.media_type})`);
      item.title = `${dl.download_id}, sha256 ${dl.sha256}`;
      list.append(item);
    }
    node.append(el('p', 'session-files-title', `Downloads: ${downloads.length}`), list);
  }
  const batches = [...group.batches.values()].reverse();
  if (batches.length === 0) node.append(el('p', 'empty', 'No calls in the timeline.'));
  for (const batch of batches) node.append(renderBatch(batch));
  return node;
}

/** @param {Batch} batch */
function renderBatch(batch) {
  const entry = batch.entry;
  const node = el('section', 'batch');
  node.dataset.batchId = batch.batch_id;
  const state = entry ? (entry.cancelled ? 'cancelled' : entry.state) : 'partial';
  node.dataset.state = state;
  const header = el('header');
  header.append(el('span', 'batch-id', `batch ${batch.batch_id}`), badge(state));
  if (entry) {
    header.append(el('time', null, time(entry.started_at)));
    if (entry.duration_ms !== undefined) header.append(el('span', 'duration', ms(entry.duration_ms)));
    if (entry.state === 'replayed') header.append(el('span', 'meta', 'answered from the stored result'));
    if (entry.calls > batch.calls.length) {
      header.append(el('span', 'meta', `${entry.calls - batch.calls.length} earlier calls not in the timeline`));
    }
  } else {
    header.append(el('span', 'meta', 'older part of this batch left the timeline'));
  }
  node.append(header);
  if (batch.calls.length) {
    const calls = el('ol', 'calls');
    batch.calls.sort((a, b) => a.index - b.index);
    calls.start = batch.calls[0].index + 1;
    for (const call of batch.calls) calls.append(renderCall(call));
    node.append(calls);
  }
  return node;
}

/** @param {Received} call */
function renderCall(call) {
  const node = el('li', 'call');
  node.dataset.phase = call.phase;
  node.dataset.index = String(call.index);
  const line = el('div', 'call-line');
  line.append(
    el('span', 'call-name', call.name),
    el('span', 'toolset', call.toolset || 'no toolset'),
    badge(call.phase),
  );
  if (call.duration_ms !== undefined) line.append(el('span', 'duration', ms(call.duration_ms)));
  if (call.attempts) line.append(el('span', 'meta', `${call.attempts} attempts`));
  node.append(line);
  const input = call.input && typeof call.input === 'object' && Object.keys(call.input).length ? call.input : null;
  if (input) node.append(el('code', 'input', JSON.stringify(input)));
  if (call.error) node.append(renderError(call.error));
  return node;
}

// ---- start

takeTokenFromFragment();
connect();
