/*
 * One session's live page (docs/VIEWER.md "Links"): its desktop through noVNC, view only, and its calls
 * from the feed; with a control link (and takeover on), a Take control and a Hand back button.
 *
 * The credential: a link from the fragment `#link=…` (browsers never send a fragment; it is moved into
 * sessionStorage and out of the address bar), or the operator's token (sessionStorage, as the other pages
 * keep it) with `?session=<id>`. It is offered as the `deskbatch.token.` subprotocol, as the token is: the
 * daemon tells them apart, and a link opens this session's sockets and nothing else.
 *
 * Everything shown may hold model input: it goes in through textContent only.
 */
/* global location, history, sessionStorage, WebSocket */
import { byId, el, onJsonMessage, TOKEN_KEY } from './common.js';

const LINK_KEY = 'deskbatch.viewer.link';
const TOKEN_PREFIX = 'deskbatch.token.';
const LEASE_PREFIX = 'deskbatch.lease.';
const RFB_MODULE = '/viewer/novnc/core/rfb.js';
const MAX_CALLS = 100;
/** The daemon closes a link's sockets with this when the link ends (src/server/links.ts). */
const CLOSE_LINK_ENDED = 4401;

const ui = {
  state: byId('state'),
  session: byId('session'),
  expires: byId('expires'),
  problem: byId('problem'),
  controls: byId('controls'),
  take: /** @type {HTMLButtonElement} */ (byId('take')),
  handback: /** @type {HTMLButtonElement} */ (byId('handback')),
  controlText: byId('control-text'),
  vncStatus: byId('vnc-status'),
  screen: byId('vnc-screen'),
  calls: byId('calls'),
};

const page = {
  credential: '',
  session: '',
  /** @type {Map<string, Record<string, any>>} call entries by id, oldest first */
  calls: new Map(),
  /** @type {WebSocket | undefined} */
  control: undefined,
  /** @type {string | null} the lease while this page holds the desktop */
  lease: null,
  /** @type {string | null} */
  desktop: null,
  /** @type {import('./rfb.js').default | null} */
  rfb: null,
  ended: false,
};

function setState(/** @type {string} */ state, /** @type {string} */ text) {
  ui.state.dataset.state = state;
  ui.state.textContent = text;
}

/** The link or token stops working: everything is closed and the page says so. */
function end(/** @type {string} */ text) {
  if (page.ended) return;
  page.ended = true;
  setState('ended', 'ended');
  ui.problem.textContent = text;
  ui.problem.hidden = false;
  ui.controls.hidden = true;
  if (page.control) page.control.close(1000);
  if (page.rfb) page.rfb.disconnect();
  ui.screen.replaceChildren();
  ui.vncStatus.textContent = '';
}

function credential() {
  const match = /(?:^#|&)link=([A-Za-z0-9._-]{1,512})/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(LINK_KEY, match[1]);
    history.replaceState(null, '', location.pathname + location.search);
  }
  return sessionStorage.getItem(LINK_KEY) || sessionStorage.getItem(TOKEN_KEY) || '';
}

function socketUrl(/** @type {string} */ path) {
  return `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}${path}`;
}

// ---- the feed: this session's calls

function connectFeed() {
  const ws = new WebSocket(socketUrl('/viewer/feed'), ['deskbatch.viewer.v1', TOKEN_PREFIX + page.credential]);
  let opened = false;
  ws.addEventListener('open', () => (opened = true));
  onJsonMessage(ws, () => !page.ended, receive);
  ws.addEventListener('close', (event) => {
    if (!opened) return end('This link is not valid, has expired or was revoked.');
    end(event.code === CLOSE_LINK_ENDED ? 'This link has ended.' : 'The connection to the daemon closed.');
  });
}

function receive(/** @type {Record<string, any>} */ message) {
  if (message.type === 'snapshot') {
    const wanted =
      typeof message.scope === 'string' ? message.scope : new URLSearchParams(location.search).get('session');
    if (!wanted) return end('No session: open this page with a link, or with ?session=<id>.');
    page.session = wanted;
    ui.session.textContent = `session ${wanted}`;
    setState('live', 'live');
    for (const e of message.entries || []) keep(e);
    renderCalls();
    if (message.takeover === true) connectControl();
    void openView();
  } else if (message.type === 'entries') {
    for (const e of message.entries || []) keep(e);
    renderCalls();
  } else if (message.type === 'session' && message.session && message.session.id === page.session) {
    if (message.session.closed_at) end('The session has ended.');
  }
}

function keep(/** @type {Record<string, any>} */ entry) {
  if (!entry || entry.kind !== 'call' || entry.session !== page.session) return;
  page.calls.delete(entry.id);
  page.calls.set(entry.id, entry);
  while (page.calls.size > MAX_CALLS) page.calls.delete(/** @type {string} */ (page.calls.keys().next().value));
}

function renderCalls() {
  const items = [...page.calls.values()].map((c) => {
    const item = el('li', 'live-call', `${String(c.name)} — ${String(c.phase)}`);
    item.dataset.phase = String(c.phase);
    return item;
  });
  ui.calls.replaceChildren(...items);
}

// ---- the desktop (noVNC)

async function openView() {
  if (page.ended) return;
  let RFB;
  try {
    RFB = (await import(RFB_MODULE)).default;
  } catch {
    ui.vncStatus.textContent = 'noVNC is not installed (Debian package novnc): no live view.';
    return;
  }
  if (page.rfb) page.rfb.disconnect();
  const url = socketUrl(`/viewer/vnc?session=${encodeURIComponent(page.session)}`);
  const protocols = [
    'deskbatch.vnc.v1',
    TOKEN_PREFIX + page.credential,
    ...(page.lease ? [LEASE_PREFIX + page.lease] : []),
  ];
  ui.screen.replaceChildren();
  const rfb = new RFB(ui.screen, url, { wsProtocols: protocols });
  page.rfb = rfb;
  rfb.viewOnly = !page.lease;
  rfb.scaleViewport = true;
  rfb.focusOnClick = Boolean(page.lease);
  ui.vncStatus.textContent = 'connecting to the desktop…';
  rfb.addEventListener('connect', () => {
    if (page.rfb !== rfb) return;
    ui.screen.dataset.connected = 'true';
    ui.vncStatus.textContent = page.lease ? 'Connected: you control the desktop.' : 'Connected (view only).';
  });
  rfb.addEventListener('disconnect', () => {
    if (page.rfb !== rfb) return;
    ui.screen.dataset.connected = 'false';
    if (!page.ended) ui.vncStatus.textContent = 'The live view closed.';
  });
}

// ---- a control link: take and hand back

function connectControl() {
  const ws = new WebSocket(socketUrl('/viewer/control'), ['deskbatch.control.v1', TOKEN_PREFIX + page.credential]);
  page.control = ws;
  ws.addEventListener('open', () => {
    ui.controls.hidden = false;
  });
  onJsonMessage(
    ws,
    () => page.control === ws,
    (m) => {
      if (m.type === 'state') {
        const desktop = Array.isArray(m.desktops) ? m.desktops[0] : undefined;
        page.desktop = desktop && typeof desktop.id === 'string' ? desktop.id : null;
        if (m.link && typeof m.link.expires_at === 'number') {
          ui.expires.textContent = `link until ${new Date(m.link.expires_at).toLocaleTimeString()}`;
        }
        const held = Boolean(desktop && desktop.holder);
        ui.take.disabled = held || !page.desktop;
        ui.controlText.textContent = page.lease
          ? 'You control the desktop; the agent waits.'
          : held
            ? 'Someone holds it.'
            : '';
      } else if (m.type === 'granted' && typeof m.lease === 'string') {
        page.lease = m.lease;
        ui.take.hidden = true;
        ui.handback.hidden = false;
        ui.controlText.textContent = 'You control the desktop; the agent waits.';
        void openView();
      } else if (m.type === 'ended' || m.type === 'refused') {
        const had = page.lease;
        page.lease = null;
        ui.take.hidden = false;
        ui.handback.hidden = true;
        ui.controlText.textContent = String(m.reason || m.message || '');
        if (had) void openView();
      }
    },
  );
}

ui.take.addEventListener('click', () => {
  if (!page.control || !page.desktop) return;
  page.control.send(JSON.stringify({ type: 'take', desktop: page.desktop, operator: 'guest' }));
});

ui.handback.addEventListener('click', () => {
  if (!page.control || !page.desktop) return;
  page.control.send(JSON.stringify({ type: 'return', desktop: page.desktop, outcome: 'resolved' }));
});

// Keys on the desktop view belong to the desktop.
for (const type of ['keydown', 'keyup', 'keypress']) ui.screen.addEventListener(type, (e) => e.stopPropagation());

page.credential = credential();
if (!page.credential) end('Open this page with a link (…/viewer/live#link=…).');
else connectFeed();
