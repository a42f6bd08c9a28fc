/*
 * What the viewer's two pages share (docs/VIEWER.md): the token's place in
 * sessionStorage, the login form, making elements whose text goes in
 * through textContent only, and a failure's block. An ES module, served as a
 * static file like them.
 */
/* global document, sessionStorage */

/** Both pages keep the token under this key: one login serves both in a tab. */
export const TOKEN_KEY = 'deskbatch.viewer.token';

/**
 * The page's element with this id: one its page has (a script names only those of its own page; the
 * caller says which kind of element it is where it needs more than an HTMLElement).
 * @param {string} id
 */
export const byId = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/**
 * The element in `root` that `selector` names: one the page put there itself, so it is there.
 * @param {ParentNode} root
 * @param {string} selector
 */
export const part = (root, selector) => /** @type {HTMLElement} */ (root.querySelector(selector));

/**
 * The elements in `root` that `selector` names (the page's own: HTML elements).
 * @param {ParentNode} root
 * @param {string} selector
 */
export const parts = (root, selector) => /** @type {NodeListOf<HTMLElement>} */ (root.querySelectorAll(selector));

/**
 * Creates an element; text goes in through textContent only.
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {string | null} [className]
 * @param {unknown} [text] anything; shown as `String(text)`, nothing for undefined or null
 * @returns {HTMLElementTagNameMap[K]}
 */
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

/**
 * The login form's elements, which both pages have (page.html, replay.html).
 * @typedef {{ login: HTMLElement, token: HTMLInputElement, loginMessage: HTMLElement, forget: HTMLElement }} LoginForm
 */

/**
 * A badge: `text` (or the outcome itself), styled by its outcome (app.css).
 * @param {string} outcome
 * @param {string} [text]
 */
export function badge(outcome, text) {
  const node = el('span', 'badge', text || outcome);
  node.dataset.outcome = outcome;
  return node;
}

/**
 * Shows the login form (`ui.login`, `ui.token`, `ui.loginMessage`), with `message` above it.
 * @param {LoginForm} ui
 * @param {string} message
 */
export function showLoginForm(ui, message) {
  ui.login.hidden = false;
  ui.forget.hidden = true;
  ui.loginMessage.textContent = message || '';
  ui.token.value = '';
  ui.token.focus();
}

/**
 * A token typed into the form goes to sessionStorage (the field is cleared at once); then `next()`.
 * @param {LoginForm} ui
 * @param {() => void} next
 */
export function onLogin(ui, next) {
  ui.login.addEventListener('submit', (event) => {
    event.preventDefault();
    const token = ui.token.value.trim();
    ui.token.value = '';
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    ui.login.hidden = true;
    next();
  });
}

/**
 * Calls `receive` with each JSON text frame of `ws`, while `current()` says this socket is still the page's.
 * @param {WebSocket} ws
 * @param {() => boolean} current
 * @param {(message: any) => void} receive gets what the daemon sent, parsed but not checked
 */
export function onJsonMessage(ws, current, receive) {
  ws.addEventListener('message', (event) => {
    if (!current() || typeof event.data !== 'string') return;
    let message;
    try {
      message = JSON.parse(event.data);
    } catch {
      return;
    }
    receive(message);
  });
}

/**
 * `text` as a string, at most `max` characters of it, saying how many more there were.
 * @param {unknown} text
 * @param {number} max
 */
export function cut(text, max) {
  const s = String(text);
  return s.length <= max ? s : `${s.slice(0, max)}… (${s.length - max} more characters)`;
}

/** The fields of a failure (ErrorInfo) shown as flags of their own; any other field is listed by name. */
const ERROR_FLAGS = ['type', 'message', 'timed_out', 'retryable', 'repeated', 'attempts', 'retry_after_ms'];

/**
 * A failed call's block (docs/VIEWER.md "Failures, expanded"): its type, its whole message and its flags.
 * `messageChars` and `fieldChars` bound the message and each other field's text: unbounded by default (the
 * live page shows what the feed sent, which the feed bounds); the replay page bounds what it read.
 * @param {Record<string, any>} error the daemon's ErrorInfo, as received (src/base/protocol.ts)
 * @param {{ messageChars?: number, fieldChars?: number }} [bounds]
 */
export function renderError(error, { messageChars = Infinity, fieldChars = Infinity } = {}) {
  const node = el('div', 'error');
  node.append(el('div', 'error-type', error.type), el('pre', 'error-message', cut(error.message ?? '', messageChars)));
  const flags = [`timed out: ${error.timed_out ? 'yes' : 'no'}`, `retryable: ${error.retryable ? 'yes' : 'no'}`];
  if (error.repeated) flags.push(`failed the same way ${error.repeated} times in a row`);
  if (error.attempts) flags.push(`${error.attempts} attempts`);
  if (error.retry_after_ms !== undefined) flags.push(`retry after ${error.retry_after_ms} ms`);
  for (const [key, value] of Object.entries(error)) {
    if (ERROR_FLAGS.includes(key)) continue;
    flags.push(`${key}: ${cut(typeof value === 'string' ? value : JSON.stringify(value), fieldChars)}`);
  }
  node.append(el('div', 'error-flags', flags.join(' · ')));
  return node;
}
