/*
 * What the viewer's two pages share (docs/VIEWER.md): the token's place in
 * sessionStorage, the login form, and making elements whose text goes in
 * through textContent only. An ES module, served as a static file like them.
 */
/* global document, sessionStorage */

/** Both pages keep the token under this key: one login serves both in a tab. */
export const TOKEN_KEY = 'deskbatch.viewer.token';

/** The page's element with this id. */
export const byId = (id) => document.getElementById(id);

/** Creates an element; text goes in through textContent only. */
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

/** Shows the login form (`ui.login`, `ui.token`, `ui.loginMessage`), with `message` above it. */
export function showLoginForm(ui, message) {
  ui.login.hidden = false;
  ui.forget.hidden = true;
  ui.loginMessage.textContent = message || '';
  ui.token.value = '';
  ui.token.focus();
}

/** A token typed into the form goes to sessionStorage (the field is cleared at once); then `next()`. */
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

/** Calls `receive` with each JSON text frame of `ws`, while `current()` says this socket is still the page's. */
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
