/*
 * Human takeover on the live page (docs/VIEWER.md "Takeover"): an operator
 * takes one desktop from its agent, acts on it through noVNC, and hands it
 * back with an outcome and a note the agent reads.
 *
 * Only when the feed's snapshot says `takeover: true` (app.js calls
 * setTakeover): then the page holds the control socket `/viewer/control`
 * (the daemon's state of each desktop, its help requests, and this page's
 * take, extend, return and resume), and opens `/viewer/vnc` with noVNC,
 * loaded from `/viewer/novnc/` only when a desktop is shown.
 *
 * Everything from the daemon may hold model-written text (a help request's
 * reason, a session id, an operator's name): it goes in through textContent.
 * Keys typed into this page's own fields never reach noVNC (its keyboard
 * listens on its own canvas only), and keys on the desktop view stop there.
 */
/* global location, sessionStorage, localStorage, WebSocket */
import { byId, el, onJsonMessage, part, parts, TOKEN_KEY } from './common.js';

const CONTROL_PATH = '/viewer/control';
const VNC_PATH = '/viewer/vnc';
const RFB_MODULE = '/viewer/novnc/core/rfb.js';
const CONTROL_SUBPROTOCOL = 'deskbatch.control.v1';
const VNC_SUBPROTOCOL = 'deskbatch.vnc.v1';
const TOKEN_PREFIX = 'deskbatch.token.';
const LEASE_PREFIX = 'deskbatch.lease.';
/** The operator's name, kept for convenience (not a secret). */
const OPERATOR_KEY = 'deskbatch.viewer.operator';
/** The lease this tab holds (in this tab only, like the token): a reload within the grace takes it back. */
const LEASE_KEY = 'deskbatch.viewer.lease';
const MAX_OPERATOR = 64;
const MAX_NOTE = 1000;
const MAX_CONTROL_RETRY_MS = 30_000;
const MAX_VNC_RETRY_MS = 10_000;
/** What is rendered of what the daemon sends (it bounds them too). */
const MAX_DESKTOPS = 64;
const MAX_HELP = 50;
const MAX_REASON_CHARS = 2000;
/** A desktop id or request id that may go into an element id as it is. */
const SAFE_ID = /^[A-Za-z0-9_-]{1,64}$/;

/** @typedef {Record<string, any>} Received what the control socket sends (its `state`…), parsed, not checked */

const ui = {
  banner: byId('help-banner'),
  requests: byId('help-requests'),
  panel: byId('takeover'),
  name: /** @type {HTMLInputElement} */ (byId('takeover-name')),
  record: /** @type {HTMLInputElement} */ (byId('takeover-record')),
  connection: byId('takeover-connection'),
  novncMissing: byId('novnc-missing'),
  message: byId('takeover-message'),
  ended: byId('takeover-ended'),
  desktops: byId('desktops'),
  live: byId('takeover-live'),
  waitingBar: byId('waiting-bar'),
  waitingText: byId('waiting-text'),
  controlBar: byId('control-bar'),
  countdown: byId('takeover-countdown'),
  extend: /** @type {HTMLButtonElement} */ (byId('extend-button')),
  watchBar: byId('watch-bar'),
  watchText: byId('watch-text'),
  watchStop: byId('watch-stop'),
  vncStatus: byId('vnc-status'),
  screen: byId('vnc-screen'),
  tools: byId('control-tools'),
  pasteForm: byId('paste-form'),
  pasteText: /** @type {HTMLTextAreaElement} */ (byId('paste-text')),
  pasteHint: byId('paste-hint'),
  handback: byId('handback-form'),
  note: /** @type {HTMLTextAreaElement} */ (byId('handback-note')),
  handbackButton: /** @type {HTMLButtonElement} */ (byId('handback-button')),
};

const t = {
  enabled: false,
  /** The daemon's clock minus this page's (from the feed's snapshot), for countdowns. */
  clockOffsetMs: 0,
  socket: /** @type {WebSocket | undefined} */ (undefined),
  retryMs: 1000,
  retryTimer: /** @type {number | undefined} */ (undefined),
  /** @type {Received | null} The last `state` message, or null. */
  state: null,
  /** @type {import('./takeover-state.js').Hold | null} What this page holds or asked for. */
  hold: null,
  /** @type {import('./takeover-state.js').View | null} The desktop shown. */
  view: null,
  /** @type {boolean | undefined} undefined: not checked yet; true/false: whether noVNC is served. */
  novnc: undefined,
  rfbModule: /** @type {Promise<typeof import('./rfb.js').default> | undefined} */ (undefined),
  ticker: /** @type {number | undefined} */ (undefined),
  /** @type {Map<string, HTMLElement>} desktop id → its node in #desktops, kept: no button is replaced under a click */
  desktopNodes: new Map(),
  /** @type {Map<string, HTMLElement>} request key → its node in #help-requests. */
  helpNodes: new Map(),
};

const now = () => Date.now() + t.clockOffsetMs;

function mmss(/** @type {number} */ ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
}

function ago(/** @type {number} */ at) {
  const s = Math.max(0, Math.round((now() - at) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  return `${Math.floor(s / 3600)} h ago`;
}

const cut = (/** @type {string} */ text, /** @type {number} */ max) =>
  text.length > max ? `${text.slice(0, max)}…` : text;
const str = (/** @type {unknown} */ value) => (typeof value === 'string' ? value : '');

// ---- switched on and off by the feed's snapshot

/** Called with every feed snapshot: `on` is its `takeover`, `serverNow` its `now`. */
export function setTakeover(/** @type {boolean} */ on, /** @type {unknown} */ serverNow) {
  if (typeof serverNow === 'number') t.clockOffsetMs = serverNow - Date.now();
  if (!on) {
    stopTakeover();
    return;
  }
  if (t.enabled) return;
  t.enabled = true;
  ui.panel.hidden = false;
  ui.name.value = localStorage.getItem(OPERATOR_KEY) || '';
  checkNovnc();
  const kept = readKeptLease();
  if (kept) t.hold = { desktop: kept.desktop, lease: kept.lease, expiresAt: 0, returning: false };
  t.ticker = setInterval(tick, 1000);
  connect();
  render();
}

/** Closes the control socket and the desktop view (the token was forgotten, or takeover is off). */
export function stopTakeover() {
  if (!t.enabled) return;
  t.enabled = false;
  clearInterval(t.ticker);
  clearTimeout(t.retryTimer);
  const s = t.socket;
  t.socket = undefined;
  if (s) s.close(1000);
  closeView();
  t.state = null;
  t.hold = null;
  sessionStorage.removeItem(LEASE_KEY);
  ui.panel.hidden = true;
  ui.banner.hidden = true;
  ui.live.hidden = true;
  decorateSessions();
}

function checkNovnc() {
  if (t.novnc !== undefined) return;
  fetch(RFB_MODULE, { method: 'HEAD', cache: 'no-store' })
    .then((res) => (t.novnc = res.ok))
    .catch(() => (t.novnc = false))
    .finally(render);
}

// ---- the control socket

function setConnection(/** @type {string} */ state, /** @type {string} */ text) {
  ui.connection.dataset.state = state;
  ui.connection.textContent = text;
}

function connect() {
  clearTimeout(t.retryTimer);
  if (!t.enabled) return;
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) return;
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  let ws;
  try {
    ws = new WebSocket(`${scheme}//${location.host}${CONTROL_PATH}`, [CONTROL_SUBPROTOCOL, TOKEN_PREFIX + token]);
  } catch {
    setConnection('disconnected', 'control: cannot connect');
    return;
  }
  t.socket = ws;
  setConnection('connecting', 'control: connecting…');
  ws.addEventListener('open', () => {
    if (t.socket !== ws) return;
    t.retryMs = 1000;
    setConnection('connected', 'control: connected');
    // Back within the grace: the desktop this page held is taken back with its lease.
    if (t.hold && t.hold.lease) send({ type: 'resume', lease: t.hold.lease });
    else if (t.hold) {
      // The take had no answer yet when the socket dropped: it is gone with that socket.
      t.hold = null;
      showMessage('The control connection dropped before the desktop was yours: take it again.');
      render();
    }
  });
  onJsonMessage(ws, () => t.socket === ws, receive);
  ws.addEventListener('close', () => {
    if (t.socket !== ws) return;
    t.socket = undefined;
    t.state = null;
    const held = t.hold && t.hold.lease ? ' (the desktop stays yours for a short grace)' : '';
    setConnection('disconnected', `control: reconnecting in ${Math.round(t.retryMs / 1000)} s${held}`);
    t.retryTimer = setTimeout(connect, t.retryMs);
    t.retryMs = Math.min(t.retryMs * 2, MAX_CONTROL_RETRY_MS);
    render();
  });
}

function send(/** @type {Record<string, unknown>} */ message) {
  if (!t.socket || t.socket.readyState !== WebSocket.OPEN) {
    showMessage('The control connection is not open; try again when it says connected.');
    return false;
  }
  t.socket.send(JSON.stringify(message));
  return true;
}

function showMessage(/** @type {string} */ text) {
  ui.message.textContent = text || '';
  ui.message.hidden = !text;
}

function receive(/** @type {Received} */ message) {
  switch (message && message.type) {
    case 'state':
      t.state = message;
      onState();
      break;
    case 'granted':
      onGranted(message);
      break;
    case 'refused':
      if (t.hold && t.hold.desktop === message.desktop && !t.hold.lease) t.hold = null;
      showMessage(`Desktop ${str(message.desktop)} was not given: ${str(message.reason)}`);
      break;
    case 'ended':
      onEnded(message);
      break;
    case 'error':
      if (t.hold) t.hold.returning = false; // a hand-back it did not take can be sent again
      showMessage(`The daemon did not understand this page: ${str(message.message)}`);
      break;
    default:
      return;
  }
  render();
}

function desktopsOf(/** @type {Received | null} */ state) {
  return state && Array.isArray(state.desktops)
    ? /** @type {Received[]} */ (state.desktops.slice(0, MAX_DESKTOPS))
    : [];
}

function findDesktop(/** @type {string | undefined} */ id) {
  return desktopsOf(t.state).find((d) => d && d.id === id);
}

/** The holder of a desktop is this page: its control connection, or (in the grace) the lease it holds. */
function heldHere(/** @type {Received | undefined} */ desktop) {
  if (!desktop || !desktop.holder || !t.hold || t.hold.desktop !== desktop.id) return false;
  return desktop.holder.controller === (t.state && t.state.you) || Boolean(t.hold.lease);
}

function onState() {
  const hold = t.hold;
  if (!hold) return;
  const desktop = findDesktop(hold.desktop);
  if (desktop && desktop.holder && desktop.holder.controller === (t.state && t.state.you)) {
    if (typeof desktop.holder.expires_at === 'number') hold.expiresAt = desktop.holder.expires_at;
  }
}

function onGranted(/** @type {Received} */ message) {
  if (typeof message.lease !== 'string' || typeof message.desktop !== 'string') return;
  const sameView = t.view && t.view.mode === 'control' && t.view.desktop === message.desktop && !t.view.closed;
  const sameLease = t.hold && t.hold.lease === message.lease;
  t.hold = {
    desktop: message.desktop,
    lease: message.lease,
    expiresAt: typeof message.expires_at === 'number' ? message.expires_at : 0,
    returning: false,
  };
  sessionStorage.setItem(LEASE_KEY, JSON.stringify({ desktop: message.desktop, lease: message.lease }));
  ui.ended.hidden = true;
  showMessage('');
  // A resume answered: the view still open keeps going.
  if (!(sameView && sameLease)) void openView(message.desktop, 'control');
}

const ENDED_TEXT = /** @type {Record<string, string>} */ ({
  returned: 'You handed the desktop back; the agent continues.',
  cancelled: 'You gave up the take before the desktop was yours; the agent went on.',
  expired: 'Your time ran out: the desktop went back to the agent.',
  disconnected: 'This page was away longer than the grace: the desktop went back to the agent.',
  desktop_gone: 'The desktop is gone (its session ended).',
  shutdown: 'The daemon is shutting down.',
});

function onEnded(/** @type {Received} */ message) {
  // A resume the daemon could not honour names no desktop: the lease this page kept is gone either way.
  if (!t.hold || (message.desktop !== null && t.hold.desktop !== message.desktop)) return;
  t.hold = null;
  sessionStorage.removeItem(LEASE_KEY);
  if (t.view && t.view.mode === 'control') closeView();
  const why = ENDED_TEXT[message.outcome] || 'Your control of the desktop ended.';
  // The daemon's own words only where the page has none of its own (they say the same).
  const detail = ENDED_TEXT[message.outcome] ? '' : str(message.message);
  ui.ended.textContent = `Desktop ${str(message.desktop)}: ${why}${detail ? ` (${detail})` : ''}`;
  ui.ended.dataset.outcome = str(message.outcome);
  ui.ended.hidden = false;
  ui.note.value = '';
  ui.pasteText.value = '';
}

function readKeptLease() {
  try {
    const kept = JSON.parse(sessionStorage.getItem(LEASE_KEY) || 'null');
    if (kept && typeof kept.desktop === 'string' && typeof kept.lease === 'string') return kept;
  } catch {
    // fall through
  }
  sessionStorage.removeItem(LEASE_KEY);
  return null;
}

// ---- what the operator does

function operatorName() {
  const name = ui.name.value.trim();
  if (!name || name.length > MAX_OPERATOR) {
    showMessage('Type your name first (1 to 64 characters): the agent and the log are told who took the desktop.');
    ui.name.focus();
    return null;
  }
  return name;
}

ui.name.addEventListener('input', () => localStorage.setItem(OPERATOR_KEY, ui.name.value.trim()));

function take(/** @type {string} */ desktopId) {
  if (t.hold) return;
  const operator = operatorName();
  if (!operator) return;
  localStorage.setItem(OPERATOR_KEY, operator);
  if (t.view) closeView();
  const sent = send({ type: 'take', desktop: desktopId, operator, record_screen: ui.record.checked });
  if (!sent) return;
  t.hold = { desktop: desktopId, lease: null, expiresAt: 0, returning: false };
  ui.ended.hidden = true;
  showMessage('');
  render();
}

function watch(/** @type {string} */ desktopId) {
  if (t.hold) return;
  void openView(desktopId, 'watch');
}

ui.watchStop.addEventListener('click', () => {
  closeView();
  render();
});

// The hand-back form is under the desktop: this brings it into view.
byId('handback-jump').addEventListener('click', () => {
  ui.handback.scrollIntoView({ block: 'center' });
  ui.note.focus();
});

// A take still waiting for the agent's batch can be given up (the agent never hears of it).
byId('cancel-take').addEventListener('click', () => {
  if (t.hold && !t.hold.lease) send({ type: 'return', desktop: t.hold.desktop, outcome: 'unresolved' });
});

ui.extend.addEventListener('click', () => {
  if (t.hold && t.hold.lease) send({ type: 'extend', desktop: t.hold.desktop });
});

ui.handback.addEventListener('submit', (event) => {
  event.preventDefault();
  const hold = t.hold;
  if (!hold || !hold.lease || hold.returning) return;
  const outcome = /** @type {HTMLInputElement} */ (byId('handback-unresolved')).checked ? 'unresolved' : 'resolved';
  const note = ui.note.value.trim().slice(0, MAX_NOTE);
  /** @type {Record<string, string>} */
  const message = { type: 'return', desktop: hold.desktop, outcome };
  if (note) message.note = note;
  if (send(message)) hold.returning = true;
  render();
});

/** RFB's plain ClientCutText carries Latin-1 only (noVNC would cut other characters to a byte); no control characters. */
const NOT_LATIN1 = /[^\t\n\r\u0020-\u00ff]/u;

ui.pasteForm.addEventListener('submit', (event) => {
  event.preventDefault();
  const rfb = t.view && t.view.mode === 'control' && t.view.connected ? t.view.rfb : null;
  const text = ui.pasteText.value;
  ui.pasteHint.hidden = false;
  if (!rfb) {
    ui.pasteHint.textContent = 'The desktop is not connected yet.';
    return;
  }
  if (!text) {
    ui.pasteHint.textContent = 'Type or paste the text to send first.';
    return;
  }
  if (NOT_LATIN1.test(text)) {
    ui.pasteHint.textContent =
      'Only Latin-1 characters (Western European letters) can go through the desktop’s clipboard; ' +
      'type the other characters on the desktop instead.';
    return;
  }
  rfb.clipboardPasteFrom(text);
  ui.pasteHint.textContent = 'Sent to the desktop’s clipboard: click where it goes on the desktop and press Ctrl+V.';
});

// Keys on the desktop view belong to the desktop: none reaches a handler of this page.
for (const type of ['keydown', 'keyup', 'keypress']) {
  ui.screen.addEventListener(type, (event) => event.stopPropagation());
}

// ---- the desktop view (noVNC)

function loadRfb() {
  t.rfbModule ??= import(RFB_MODULE).then((module) => module.default);
  t.rfbModule.catch(() => (t.rfbModule = undefined));
  return t.rfbModule;
}

function setVncStatus(/** @type {string} */ text) {
  ui.vncStatus.textContent = text;
}

async function openView(/** @type {string} */ desktopId, /** @type {'control' | 'watch'} */ mode) {
  closeView();
  /** @type {import('./takeover-state.js').View} */
  const view = { desktop: desktopId, mode, rfb: null, closed: false, connected: false, retryMs: 1000, timer: 0 };
  t.view = view;
  ui.live.hidden = false;
  setVncStatus('loading the desktop view…');
  render();
  let RFB;
  try {
    RFB = await loadRfb();
  } catch {
    if (t.view !== view) return;
    t.novnc = false;
    setVncStatus('noVNC is not installed (Debian package novnc).');
    render();
    return;
  }
  if (t.view !== view) return;
  startRfb(view, RFB);
}

/**
 * @param {import('./takeover-state.js').View} view
 * @param {typeof import('./rfb.js').default} RFB
 */
function startRfb(view, RFB) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token || view.closed) return;
  const lease = view.mode === 'control' && t.hold && t.hold.desktop === view.desktop ? t.hold.lease : null;
  if (view.mode === 'control' && !lease) return;
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const url = `${scheme}//${location.host}${VNC_PATH}?desktop=${encodeURIComponent(view.desktop)}`;
  const protocols = [VNC_SUBPROTOCOL, TOKEN_PREFIX + token, ...(lease ? [LEASE_PREFIX + lease] : [])];
  ui.screen.replaceChildren();
  let rfb;
  try {
    rfb = new RFB(ui.screen, url, { wsProtocols: protocols });
  } catch (/** @type {any} */ err) {
    setVncStatus(`The desktop view could not start: ${String(err && err.message)}`);
    return;
  }
  view.rfb = rfb;
  rfb.viewOnly = view.mode !== 'control';
  rfb.scaleViewport = true;
  rfb.focusOnClick = true;
  setVncStatus('connecting to the desktop…');
  rfb.addEventListener('connect', () => {
    if (view.closed) return;
    view.connected = true;
    view.retryMs = 1000;
    setVncStatus(
      view.mode === 'control'
        ? 'Connected. Click the desktop to type on it; your keyboard layout is used.'
        : 'Connected (view only).',
    );
    if (view.mode === 'control' && !view.focused) {
      view.focused = true;
      rfb.focus();
    }
    render();
  });
  rfb.addEventListener('disconnect', () => {
    view.connected = false;
    if (view.closed || t.view !== view) return;
    if (view.mode === 'watch') {
      // The daemon closes a watcher's view when the desktop is gone (or it fell behind).
      closeView();
      setVncStatus('');
      showMessage(`The live view of desktop ${view.desktop} closed (it is gone, or this page fell behind).`);
      render();
      return;
    }
    // Still ours: the view comes back (the daemon says `ended` when it is not ours any more).
    setVncStatus(`The desktop view closed; reconnecting in ${Math.round(view.retryMs / 1000)} s…`);
    view.timer = setTimeout(() => startRfb(view, RFB), view.retryMs);
    view.retryMs = Math.min(view.retryMs * 2, MAX_VNC_RETRY_MS);
    render();
  });
  rfb.addEventListener('securityfailure', (event) => {
    setVncStatus(`The desktop refused the view: ${str(event.detail && event.detail.reason)}`);
  });
}

function closeView() {
  const view = t.view;
  if (!view) return;
  view.closed = true;
  clearTimeout(view.timer);
  t.view = null;
  if (view.rfb) {
    try {
      view.rfb.disconnect();
    } catch {
      // already disconnected
    }
  }
  ui.screen.replaceChildren();
  setVncStatus('');
  ui.pasteHint.hidden = true;
}

// ---- rendering

function holderName(/** @type {Received} */ holder) {
  return cut(str(holder.operator) || 'someone', MAX_OPERATOR);
}

/** What a desktop's holder state reads, for everyone (`expires in` is kept fresh by tick()). */
function holderText(/** @type {Received} */ desktop) {
  const holder = desktop.holder;
  if (!holder) return 'free';
  const mine = heldHere(desktop);
  const who = mine ? 'you' : holderName(holder);
  if (holder.state === 'waiting') return `taken by ${who}, waiting for the agent's batch to finish`;
  if (holder.state === 'grace') return `held by ${who}, reconnecting (grace)`;
  const left = typeof holder.expires_at === 'number' ? `, expires in ${mmss(holder.expires_at - now())}` : '';
  return `held by ${who}${left}`;
}

/** Sets a take button's label and whether it can be pressed. */
function setTakeButton(/** @type {HTMLButtonElement} */ button, /** @type {Received} */ desktop) {
  const holder = desktop.holder;
  button.dataset.desktop = desktop.id;
  if (heldHere(desktop) || (t.hold && t.hold.desktop === desktop.id)) {
    button.textContent = 'Yours';
    button.disabled = true;
  } else if (holder) {
    button.textContent = `held by ${holderName(holder)}`;
    button.disabled = true;
  } else {
    button.textContent = 'Take control';
    // One desktop at a time per page; none without noVNC or the control socket.
    button.disabled = Boolean(t.hold) || t.novnc === false || !t.socket || t.socket.readyState !== WebSocket.OPEN;
  }
}

/** Any desktop can be watched live, held or not (its x11vnc runs while someone watches). */
function canWatch(/** @type {Received} */ desktop) {
  return !heldHere(desktop) && !t.hold && t.novnc !== false && !(t.view && t.view.desktop === desktop.id);
}

function desktopNode(/** @type {Received} */ desktop) {
  let node = t.desktopNodes.get(desktop.id);
  if (node) return node;
  node = el('div', 'desktop');
  node.dataset.desktop = desktop.id;
  const safe = SAFE_ID.test(desktop.id);
  const title = el('span', 'desktop-id', `desktop ${desktop.id}`);
  const state = el('span', 'holder-state');
  if (safe) state.id = `holder-${desktop.id}`;
  const sessions = el('span', 'desktop-sessions');
  const takeButton = el('button', 'take-button', 'Take control');
  takeButton.type = 'button';
  if (safe) takeButton.id = `take-${desktop.id}`;
  takeButton.addEventListener('click', () => take(desktop.id));
  const watchButton = el('button', 'watch-button', 'Watch live');
  watchButton.type = 'button';
  watchButton.dataset.desktop = desktop.id;
  if (safe) watchButton.id = `watch-${desktop.id}`;
  watchButton.addEventListener('click', () => watch(desktop.id));
  node.append(title, state, sessions, takeButton, watchButton);
  t.desktopNodes.set(desktop.id, node);
  return node;
}

function renderDesktops() {
  const desktops = desktopsOf(t.state).filter((d) => d && typeof d.id === 'string');
  if (!t.state) {
    t.desktopNodes.clear();
    ui.desktops.replaceChildren(el('p', 'empty', 'Waiting for the control connection…'));
    return;
  }
  if (desktops.length === 0) {
    t.desktopNodes.clear();
    ui.desktops.replaceChildren(el('p', 'empty', 'No desktops yet.'));
    return;
  }
  const seen = new Set();
  const nodes = desktops.map((desktop) => {
    seen.add(desktop.id);
    const node = desktopNode(desktop);
    node.dataset.holder = desktop.holder ? str(desktop.holder.state) : 'free';
    node.dataset.mine = String(heldHere(desktop));
    part(node, '.holder-state').textContent = holderText(desktop);
    const sessions = Array.isArray(desktop.sessions) ? desktop.sessions.filter((s) => typeof s === 'string') : [];
    part(node, '.desktop-sessions').textContent = sessions.length
      ? `sessions: ${sessions.slice(0, 8).join(', ')}${sessions.length > 8 ? ` (+${sessions.length - 8})` : ''}`
      : 'no session';
    setTakeButton(/** @type {HTMLButtonElement} */ (part(node, '.take-button')), desktop);
    const watchButton = /** @type {HTMLButtonElement} */ (part(node, '.watch-button'));
    watchButton.disabled = !canWatch(desktop);
    watchButton.hidden = heldHere(desktop);
    return node;
  });
  for (const id of [...t.desktopNodes.keys()]) if (!seen.has(id)) t.desktopNodes.delete(id);
  // Re-appending nodes already in place keeps them (and a press on their buttons) as they are.
  const current = [...ui.desktops.children];
  if (current.length !== nodes.length || current.some((n, i) => n !== nodes[i])) ui.desktops.replaceChildren(...nodes);
}

function helpRequests() {
  const out = [];
  for (const desktop of desktopsOf(t.state)) {
    if (!desktop || !Array.isArray(desktop.help)) continue;
    for (const request of desktop.help) {
      if (request && typeof request.request_id === 'string') out.push({ desktop, request });
      if (out.length >= MAX_HELP) return out;
    }
  }
  return out;
}

function helpNode(/** @type {Received} */ desktop, /** @type {Received} */ request) {
  const key = `${str(request.session)}\n${request.request_id}`;
  let node = t.helpNodes.get(key);
  if (!node) {
    node = el('li', 'help-request');
    node.dataset.session = str(request.session);
    node.dataset.request = request.request_id;
    node.dataset.desktop = desktop.id;
    const head = el('div', 'help-head');
    head.append(
      el('span', 'help-session', `session ${str(request.session)} on desktop ${desktop.id}`),
      el('time', 'help-ago'),
    );
    const reason = el('p', 'help-reason', cut(str(request.reason), MAX_REASON_CHARS));
    const button = el('button', 'help-take take-button', 'Take control');
    button.type = 'button';
    if (SAFE_ID.test(request.request_id)) button.id = `help-take-${request.request_id}`;
    button.addEventListener('click', () => take(desktop.id));
    node.append(head, reason, button);
    t.helpNodes.set(key, node);
  }
  part(node, '.help-ago').textContent = typeof request.at === 'number' ? ago(request.at) : '';
  part(node, '.help-ago').dataset.at = String(request.at);
  setTakeButton(/** @type {HTMLButtonElement} */ (part(node, '.help-take')), desktop);
  return { key, node };
}

function renderBanner() {
  const requests = helpRequests();
  ui.banner.hidden = requests.length === 0;
  const keys = new Set();
  const nodes = requests.map(({ desktop, request }) => {
    const { key, node } = helpNode(desktop, request);
    keys.add(key);
    return node;
  });
  for (const key of [...t.helpNodes.keys()]) if (!keys.has(key)) t.helpNodes.delete(key);
  const current = [...ui.requests.children];
  if (current.length !== nodes.length || current.some((n, i) => n !== nodes[i])) ui.requests.replaceChildren(...nodes);
}

function renderLive() {
  const hold = t.hold;
  const view = t.view;
  const waiting = Boolean(hold && !hold.lease);
  const controlling = Boolean(hold && hold.lease && view && view.mode === 'control');
  const watching = Boolean(view && view.mode === 'watch');
  const returning = Boolean(hold && hold.returning);
  ui.live.hidden = !(waiting || controlling || watching);
  ui.live.dataset.mode = controlling ? 'control' : watching ? 'watch' : waiting ? 'waiting' : 'none';
  ui.waitingBar.hidden = !waiting;
  if (waiting && hold) {
    const desktop = findDesktop(hold.desktop);
    ui.waitingText.textContent =
      desktop && desktop.holder && heldHere(desktop)
        ? `Desktop ${hold.desktop} is yours as soon as the agent's running batch finishes; the agent starts no new one.`
        : `Asking for desktop ${hold.desktop}…`;
  }
  ui.controlBar.hidden = !controlling;
  ui.tools.hidden = !controlling;
  ui.handbackButton.disabled = !controlling || returning;
  ui.handbackButton.textContent = controlling && returning ? 'Handing back…' : 'Hand back';
  ui.extend.disabled = !controlling || returning;
  ui.watchBar.hidden = !watching;
  if (watching && view) {
    const desktop = findDesktop(view.desktop);
    const who = desktop && desktop.holder ? ` — held by ${holderName(desktop.holder)}` : '';
    ui.watchText.textContent = `Watching desktop ${view.desktop} live (view only)${who}`;
  }
  tick();
}

/** Refreshes what changes with the clock: the countdown, each holder's `expires in`, each request's age. */
function tick() {
  if (!t.enabled) return;
  const hold = t.hold;
  if (hold && hold.lease && hold.expiresAt) {
    const left = hold.expiresAt - now();
    ui.countdown.textContent = `expires in ${mmss(left)}`;
    ui.countdown.dataset.low = String(left < 60_000);
  } else {
    ui.countdown.textContent = '';
  }
  for (const desktop of desktopsOf(t.state)) {
    const node = desktop && t.desktopNodes.get(desktop.id);
    if (node) part(node, '.holder-state').textContent = holderText(desktop);
  }
  const marks = byId('sessions') ? parts(byId('sessions'), '.session-takeover') : [];
  for (const mark of marks) {
    const desktop = findDesktop(mark.dataset.desktop);
    if (desktop) part(mark, '.holder-state').textContent = `desktop ${desktop.id}: ${holderText(desktop)}`;
  }
  for (const time of parts(ui.requests, '.help-ago')) {
    const at = Number(time.dataset.at);
    if (Number.isFinite(at)) time.textContent = ago(at);
  }
}

function render() {
  if (!t.enabled) return;
  ui.novncMissing.hidden = t.novnc !== false;
  renderBanner();
  renderDesktops();
  renderLive();
  decorateSessions();
}

/**
 * Marks each session in the timeline (app.js renders `#sessions`) with its desktop's holder state,
 * and a Take control button. Called after every render of the timeline and of this page's state.
 */
export function decorateSessions() {
  const list = byId('sessions');
  if (!list) return;
  for (const old of list.querySelectorAll('.session-takeover')) old.remove();
  if (!t.enabled || !t.state) return;
  const desktopOfSession = new Map();
  for (const desktop of desktopsOf(t.state)) {
    if (!desktop || !Array.isArray(desktop.sessions)) continue;
    for (const session of desktop.sessions) desktopOfSession.set(session, desktop);
  }
  for (const article of parts(list, 'article.session')) {
    const desktop = desktopOfSession.get(article.dataset.session);
    if (!desktop) continue;
    const mark = el('div', 'session-takeover');
    mark.dataset.desktop = desktop.id;
    mark.append(el('span', 'holder-state', `desktop ${desktop.id}: ${holderText(desktop)}`));
    const asks =
      Array.isArray(desktop.help) &&
      desktop.help.some((/** @type {any} */ r) => r && r.session === article.dataset.session);
    if (asks) mark.append(el('span', 'asks-help', 'asks for help'));
    const button = el('button', 'take-button', 'Take control');
    button.type = 'button';
    setTakeButton(button, desktop);
    button.addEventListener('click', () => take(desktop.id));
    mark.append(button);
    const header = article.querySelector('header');
    if (header) header.after(mark);
    else article.prepend(mark);
  }
}
