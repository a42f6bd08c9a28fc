/**
 * Reading a page for the model: an accessibility-tree text (`read_page`),
 * element search (`find`), the visible text (`get_page_text`), and the
 * element references (`[ref_N]`) that later calls target.
 *
 * The work runs in the page, in one script (PAGE_SCRIPT) evaluated per call,
 * in an isolated world of the page's main frame (CDP
 * `Page.createIsolatedWorld`): it sees the same DOM, but not the page's
 * JavaScript, and the page cannot see or change it. There it keeps a registry
 * (a non-enumerable property of that world's `window`, made once per
 * document): ref number → WeakRef(element) and element → number. So an
 * element keeps its ref across calls, and a navigation (a new document, with
 * a new world) starts an empty registry, which makes every older ref stale.
 * (Before, the registry lived in the page's own world: a hostile page could
 * set its counter past the ref pattern and break refs for every session.)
 *
 * Ref numbers come from one counter for the whole process (`highestRef`):
 * each call passes the next free number as a floor and the registry never
 * issues below it. A number therefore names at most one element ever, so a
 * ref from an earlier document or another tab can never resolve to some other
 * element: it is refused. The counter only moves by as many refs as a call can
 * have issued, whatever a page does.
 *
 * The script is a plain JavaScript string, not a TypeScript function passed to
 * `page.evaluate`: the project has no DOM types, and tsx (esbuild keepNames)
 * would inject `__name(...)` calls into a function's source that do not exist
 * in the page.
 *
 * Page text, names and titles are untrusted: every name is folded to one line,
 * stripped of control characters, quoted with `"` and `\` escaped, and bounded.
 */
import { randomUUID } from 'node:crypto';
import type { CDPSession, ElementHandle, Page } from 'playwright';
import { ToolInputError } from '../errors.ts';
import { echo } from '../text.ts';

/** Longest text a reading member returns, note included (docs/TOOLSETS.md C2, E). */
export const READ_OUTPUT_MAX = 50_000;
/** `read_page` depth when none is given. */
export const DEFAULT_DEPTH = 15;
/** Most matches `find` returns. */
export const FIND_MAX = 20;
/** Longest accessible name or value shown on a line. */
const NAME_MAX = 150;

export type ReadFilter = 'all' | 'interactive';

export interface ReadPageOptions {
  filter?: ReadFilter | null;
  depth?: number | null;
  ref?: string | null;
}

/** Highest ref number issued by any page of this process (see the header). */
let highestRef = 0;

const TRUNCATED_NOTE = `[output truncated at ${READ_OUTPUT_MAX} characters; use ref or filter to read less]`;
const TEXT_TRUNCATED_NOTE = `[text truncated at ${READ_OUTPUT_MAX} characters]`;
const REF_PATTERN = /^\[?ref_([1-9][0-9]{0,9})\]?$/;

/**
 * The in-page script: `(req) => result`. Requests:
 * - `{op: 'read', floor, filter, depth, ref, budget}` → `{lines, truncated, offscreen, deeper, next}` or `{error}`;
 * - `{op: 'find', floor, tokens, soft, roles, phrase, max}` → `{lines, total, next}`;
 * - `{op: 'text', budget}` → `{main, rest, truncated}`;
 * - `{op: 'mark', floor, ref, token}` → 'ok' after setting `data-deskbatch-ref=token` on the element, or a problem;
 * - `{op: 'unmark', token}` → removes that attribute;
 * - `{op: 'center', floor, ref}` → `{x, y}` or `{error}`.
 * `error` is one of 'navigated', 'unknown', 'removed', 'nobox'.
 */
const PAGE_SCRIPT = String.raw`(req) => {
  const KEY = '__deskbatchRefs';
  let reg = window[KEY];
  if (!reg || typeof reg.next !== 'number' || !(reg.refs instanceof Map)) {
    reg = { first: req.floor, next: req.floor, refs: new Map(), ids: new WeakMap() };
    try {
      Object.defineProperty(window, KEY, { value: reg, enumerable: false, configurable: false, writable: false });
    } catch {
      // The page took the name: refs from this call will not resolve later, which fails safe.
    }
  }
  if (reg.next < req.floor) reg.next = req.floor;

  const refOf = (el) => {
    let n = reg.ids.get(el);
    if (n === undefined) {
      n = reg.next++;
      reg.ids.set(el, n);
      reg.refs.set(n, new WeakRef(el));
    }
    return 'ref_' + n;
  };
  const resolve = (n) => {
    const el = reg.refs.get(n)?.deref();
    if (el && el.isConnected) return el;
    if (reg.refs.has(n)) return 'removed';
    return n < reg.first ? 'navigated' : 'unknown';
  };

  // --- roles -------------------------------------------------------------
  const INPUT_ROLES = {
    button: 'button', submit: 'button', reset: 'button', image: 'button', file: 'button',
    checkbox: 'checkbox', radio: 'radio', range: 'slider', number: 'spinbutton', search: 'searchbox',
  };
  const TAG_ROLES = {
    ARTICLE: 'article', ASIDE: 'complementary', BUTTON: 'button', DATALIST: 'listbox', DIALOG: 'dialog',
    FIELDSET: 'group', FIGURE: 'figure', FOOTER: 'contentinfo', FORM: 'form', HEADER: 'banner', HR: 'separator',
    LI: 'listitem', MAIN: 'main', MENU: 'list', NAV: 'navigation', OL: 'list', UL: 'list', OPTGROUP: 'group',
    OPTION: 'option', OUTPUT: 'status', P: 'paragraph', PROGRESS: 'progressbar', METER: 'meter',
    TABLE: 'table', TD: 'cell', TH: 'columnheader', TR: 'row', TEXTAREA: 'textbox', CAPTION: 'caption',
    BLOCKQUOTE: 'blockquote', DT: 'term', DD: 'definition', SUMMARY: 'button', IFRAME: 'iframe',
    H1: 'heading', H2: 'heading', H3: 'heading', H4: 'heading', H5: 'heading', H6: 'heading',
    LEGEND: 'legend', LABEL: 'label', VIDEO: 'video', AUDIO: 'audio',
  };
  const INTERACTIVE = new Set(['button', 'link', 'textbox', 'searchbox', 'checkbox', 'radio', 'combobox',
    'listbox', 'option', 'menuitem', 'menuitemcheckbox', 'menuitemradio', 'switch', 'slider', 'spinbutton',
    'tab', 'treeitem']);
  // Roles whose name is their text content (ARIA "name from content", plus text blocks for reading).
  const FROM_CONTENT = new Set(['button', 'link', 'heading', 'cell', 'columnheader', 'rowheader', 'gridcell',
    'option', 'menuitem', 'menuitemcheckbox', 'menuitemradio', 'tab', 'treeitem', 'tooltip', 'paragraph',
    'listitem', 'caption', 'legend', 'term', 'definition', 'label', 'switch', 'checkbox', 'radio', 'generic',
    'blockquote', 'status']);
  // Roles under which a plain text element is not listed: its text is already the role's name or value.
  const coversText = (role) => FROM_CONTENT.has(role) || role === 'textbox' || role === 'searchbox';
  const SKIP_TAGS = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'META', 'LINK', 'TITLE', 'BASE']);

  const roleOf = (el) => {
    const explicit = (el.getAttribute('role') || '').trim().split(/\s+/)[0].toLowerCase();
    if (explicit && explicit !== 'none' && explicit !== 'presentation' && explicit !== 'generic') return explicit;
    if (explicit) return null;
    const tag = el.tagName;
    if (tag === 'A' || tag === 'AREA') return el.hasAttribute('href') ? 'link' : null;
    if (tag === 'INPUT') {
      const type = (el.getAttribute('type') || 'text').toLowerCase();
      if (INPUT_ROLES[type]) return INPUT_ROLES[type];
      return el.hasAttribute('list') ? 'combobox' : 'textbox';
    }
    if (tag === 'SELECT') return el.multiple || el.size > 1 ? 'listbox' : 'combobox';
    if (tag === 'IMG') return el.getAttribute('alt') === '' ? null : 'img';
    if (tag === 'SECTION') return el.hasAttribute('aria-label') || el.hasAttribute('aria-labelledby') ? 'region' : null;
    if (el.isContentEditable && (el.parentElement === null || !el.parentElement.isContentEditable)) return 'textbox';
    if (tag === 'svg' || tag === 'SVG') return el.querySelector(':scope > title') ? 'img' : null;
    return TAG_ROLES[tag] || null;
  };
  const isInteractive = (el, role) => {
    if (role && INTERACTIVE.has(role)) return true;
    const tabindex = el.getAttribute('tabindex');
    if (tabindex !== null && Number(tabindex) >= 0) return true;
    return el.hasAttribute('onclick');
  };

  // --- names -------------------------------------------------------------
  const fold = (s) => s.replace(/[\s\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g, ' ').trim();
  const bound = (s, max) => (s.length > max ? s.slice(0, max - 1) + '…' : s);
  const CONTENT_MAX = 400;
  const hiddenEl = (el) =>
    el.getAttribute('aria-hidden') === 'true' || SKIP_TAGS.has(el.tagName) || (el.tagName === 'INPUT' && el.type === 'hidden');
  // Visible text under a node, without form controls' contents, stopping after CONTENT_MAX characters.
  const contentText = (root) => {
    let out = '';
    const walk = (node) => {
      for (let c = node.firstChild; c && out.length < CONTENT_MAX; c = c.nextSibling) {
        if (c.nodeType === 3) out += c.data;
        else if (c.nodeType === 1) {
          if (hiddenEl(c) || c.tagName === 'SELECT' || c.tagName === 'TEXTAREA' || c.tagName === 'INPUT') continue;
          const st = getComputedStyle(c);
          if (st.display === 'none') continue;
          if (c.tagName === 'IMG') out += ' ' + (c.getAttribute('alt') || '') + ' ';
          else if (c.tagName === 'BR') out += ' ';
          else {
            const block = st.display !== 'inline' && st.display !== 'contents';
            if (block) out += ' ';
            walk(c.shadowRoot || c);
            if (block) out += ' ';
          }
        }
      }
    };
    walk(root.shadowRoot || root);
    return fold(out);
  };
  const byIds = (ids) =>
    ids.split(/\s+/).map((id) => document.getElementById(id)).filter(Boolean).map((e) => contentText(e)).join(' ');
  const labelText = (el) => (el.labels ? Array.from(el.labels).map((l) => contentText(l)).join(' ') : '');
  const nameOf = (el, role) => {
    const labelledby = el.getAttribute('aria-labelledby');
    if (labelledby) {
      const t = fold(byIds(labelledby));
      if (t) return t;
    }
    const aria = fold(el.getAttribute('aria-label') || '');
    if (aria) return aria;
    const tag = el.tagName;
    if (tag === 'INPUT' || tag === 'SELECT' || tag === 'TEXTAREA' || tag === 'METER' || tag === 'PROGRESS' || tag === 'OUTPUT') {
      const t = fold(labelText(el));
      if (t) return t;
      const type = (el.type || '').toLowerCase();
      if (tag === 'INPUT' && (type === 'button' || type === 'submit' || type === 'reset')) {
        return fold(el.value || '') || (type === 'submit' ? 'Submit' : type === 'reset' ? 'Reset' : '');
      }
      if (tag === 'INPUT' && type === 'image') return fold(el.alt || el.title || 'Submit');
    }
    if (tag === 'IMG' || tag === 'AREA') {
      const alt = fold(el.getAttribute('alt') || '');
      if (alt) return alt;
    }
    if (tag === 'FIELDSET') {
      const legend = el.querySelector(':scope > legend');
      if (legend) return contentText(legend);
    }
    if (tag === 'TABLE') {
      const caption = el.querySelector(':scope > caption');
      if (caption) return contentText(caption);
    }
    if (tag === 'FIGURE') {
      const cap = el.querySelector(':scope > figcaption');
      if (cap) return contentText(cap);
    }
    if (tag === 'svg' || tag === 'SVG') {
      const title = el.querySelector(':scope > title');
      if (title) return fold(title.textContent || '');
    }
    if (FROM_CONTENT.has(role) && tag !== 'INPUT') {
      const t = contentText(el);
      if (t) return t;
    }
    return fold(el.getAttribute('title') || el.getAttribute('placeholder') || '');
  };
  const hasOwnText = (el) => {
    for (let c = el.firstChild; c; c = c.nextSibling) if (c.nodeType === 3 && /\S/.test(c.data)) return true;
    return false;
  };
  const quote = (s) => '"' + bound(s, ${NAME_MAX}).replace(/[\\"]/g, (m) => '\\' + m) + '"';

  // --- state -------------------------------------------------------------
  const vw = window.innerWidth, vh = window.innerHeight;
  const inViewport = (r) => r.right > 0 && r.bottom > 0 && r.left < vw && r.top < vh;
  const stateOf = (el, role, rect) => {
    const s = [];
    const tag = el.tagName;
    const type = tag === 'INPUT' ? (el.type || 'text').toLowerCase() : '';
    if (type && type !== 'text' && type !== 'checkbox' && type !== 'radio' && type !== 'submit' && type !== 'button') s.push('type=' + type);
    if (type === 'password') {
      if (el.value) s.push('value=(hidden, ' + el.value.length + ' characters)');
    } else if (tag === 'SELECT') {
      const chosen = Array.from(el.selectedOptions).map((o) => fold(o.label || o.text));
      if (chosen.length) s.push('value=' + quote(chosen.join(', ')));
    } else if (type === 'file') {
      if (el.files && el.files.length) s.push('files=' + quote(Array.from(el.files).map((f) => f.name).join(', ')));
    } else if ((tag === 'INPUT' && type !== 'checkbox' && type !== 'radio' && role !== 'button') || tag === 'TEXTAREA') {
      if (el.value) s.push('value=' + quote(fold(el.value)));
    } else if (el.isContentEditable && role === 'textbox') {
      const t = contentText(el);
      if (t) s.push('value=' + quote(t));
    } else if (role === 'slider' || role === 'spinbutton' || role === 'progressbar' || role === 'meter') {
      const v = el.getAttribute('aria-valuetext') || el.getAttribute('aria-valuenow') || el.value;
      if (v !== null && v !== undefined && v !== '') s.push('value=' + quote(fold(String(v))));
    }
    if (type === 'checkbox' || type === 'radio') s.push(el.indeterminate ? 'mixed' : el.checked ? 'checked' : 'unchecked');
    else if (role === 'checkbox' || role === 'radio' || role === 'switch' || role === 'menuitemcheckbox' || role === 'menuitemradio') {
      const c = el.getAttribute('aria-checked');
      s.push(c === 'true' ? 'checked' : c === 'mixed' ? 'mixed' : 'unchecked');
    }
    if (tag === 'OPTION' ? el.selected : el.getAttribute('aria-selected') === 'true') s.push('selected');
    if (el.getAttribute('aria-pressed') === 'true') s.push('pressed');
    const expanded = el.getAttribute('aria-expanded');
    if (expanded === 'true') s.push('expanded');
    else if (expanded === 'false') s.push('collapsed');
    if (tag === 'SUMMARY' && el.parentElement && el.parentElement.tagName === 'DETAILS') s.push(el.parentElement.open ? 'expanded' : 'collapsed');
    if (role === 'heading') s.push('level=' + (el.getAttribute('aria-level') || tag.slice(1) || '2'));
    if (el.matches(':disabled') || el.getAttribute('aria-disabled') === 'true') s.push('disabled');
    if (el.required || el.getAttribute('aria-required') === 'true') s.push('required');
    if (el.getAttribute('aria-invalid') === 'true') s.push('invalid');
    if (document.activeElement === el) s.push('focused');
    if (role === 'link' && el.href) s.push('href=' + quote(fold(String(el.href))));
    if (!inViewport(rect)) s.push('offscreen');
    return s.length ? ' ' + s.join(' ') : '';
  };

  // --- the walk ------------------------------------------------------------
  const childrenOf = (el) => {
    if (el.shadowRoot) return Array.from(el.shadowRoot.children);
    if (el.tagName === 'SLOT') {
      const assigned = el.assignedElements();
      if (assigned.length) return assigned;
    }
    return Array.from(el.children);
  };
  // What one element is, for the walk: undefined = skip it and its subtree (not rendered).
  const describe = (el, underContent) => {
    if (hiddenEl(el)) return undefined;
    const st = getComputedStyle(el);
    if (st.display === 'none') return undefined;
    // An option of a closed select has no box of its own: it is where its select is.
    const inSelect = el.tagName === 'OPTION' || el.tagName === 'OPTGROUP';
    // Content skipped by the browser (a closed details, content-visibility: hidden) is not shown.
    // checkVisibility is false for display: contents too, whose children are still shown.
    if (!inSelect && st.display !== 'contents' && el.checkVisibility && !el.checkVisibility()) return undefined;
    const select = inSelect ? el.closest('select') : null;
    const rect = (select || el).getBoundingClientRect();
    const role = roleOf(el);
    const interactive = isInteractive(el, role);
    const ownText = !role && !underContent && hasOwnText(el);
    const shown = (inSelect || (st.visibility === 'visible' && rect.width * rect.height > 0)) &&
      (role !== null || interactive || ownText);
    return { rect, role, interactive, shown, inSelect };
  };
  const line = (el, d, info) => {
    const role = info.role || 'generic';
    const name = nameOf(el, role);
    return '  '.repeat(d) + role + (name ? ' ' + quote(name) : '') + ' [' + refOf(el) + ']' + stateOf(el, role, info.rect);
  };

  if (req.op === 'read') {
    const lines = [];
    let used = 0, truncated = false, offscreen = false, deeper = false;
    const emit = (text) => {
      if (used + text.length + 1 > req.budget) { truncated = true; return false; }
      lines.push(text);
      used += text.length + 1;
      return true;
    };
    // Whether an element passes the filter: interactive only, and in the viewport unless 'all' or a ref subtree.
    const passes = (info) => {
      if (!info.shown) return false;
      if (req.filter === 'interactive' && !info.interactive) return false;
      if (req.filter !== 'all' && !req.ref && !inViewport(info.rect)) {
        offscreen = true;
        return false;
      }
      return true;
    };
    const walk = (el, d, underContent) => {
      for (const child of childrenOf(el)) {
        if (truncated) return;
        const info = describe(child, underContent);
        if (!info) continue;
        let childDepth = d;
        if (passes(info)) {
          if (d >= req.depth) { deeper = true; continue; }
          if (!emit(line(child, d, info))) return;
          childDepth = d + 1;
        }
        walk(child, childDepth, underContent || (info.shown && coversText(info.role || 'generic')));
      }
    };
    let root = document.body || document.documentElement;
    if (req.ref !== null) {
      const found = resolve(req.ref);
      if (typeof found === 'string') return { error: found };
      root = found;
      const info = describe(root, false) || { rect: root.getBoundingClientRect(), role: roleOf(root), interactive: false, shown: true };
      emit(line(root, 0, info));
      walk(root, 1, false);
    } else if (root) {
      walk(root, 0, false);
    }
    return { lines, truncated, offscreen, deeper, next: reg.next };
  }

  if (req.op === 'find') {
    const matches = [];
    const words = (s) => s.toLowerCase().split(/[^\p{L}\p{N}]+/u).filter(Boolean);
    const stem = (w) => (w.length > 3 && w.endsWith('s') ? w.slice(0, -1) : w);
    // How well a token matches a field's words: 1 for a whole word, 0.6 inside a word (3+ characters).
    const tokenIn = (token, fieldWords) => {
      let best = 0;
      for (const w of fieldWords) {
        if (w === token || stem(w) === stem(token)) return 1;
        if (token.length >= 3 && w.includes(token)) best = 0.6;
      }
      return best;
    };
    const walk = (el, underContent) => {
      for (const child of childrenOf(el)) {
        const info = describe(child, underContent);
        if (!info) continue;
        if (info.shown && !info.inSelect) {
          const role = info.role || 'generic';
          const name = nameOf(child, role);
          const nameWords = words(name);
          const fields = [
            [nameWords, 3],
            [words([labelText(child), child.getAttribute('placeholder') || '', child.getAttribute('title') || '',
              child.getAttribute('alt') || '', child.getAttribute('aria-description') || ''].join(' ')), 2],
            [words(typeof child.value === 'string' && child.type !== 'password' ? child.value : ''), 1.5],
            [words([child.id, child.getAttribute('name') || '', child.tagName === 'INPUT' ? child.type : ''].join(' ')), 1],
          ];
          let score = 0, matched = 0, inName = 0;
          for (const t of req.tokens) {
            let best = 0;
            for (const [fw, weight] of fields) best = Math.max(best, tokenIn(t, fw) * weight);
            if (best > 0) matched++;
            if (tokenIn(t, nameWords) > 0) inName++;
            score += best;
          }
          for (const t of req.soft) for (const [fw] of fields) if (tokenIn(t, fw) > 0) { score += 0.5; break; }
          const roleHit = req.roles.includes(role);
          const relevant = req.tokens.length ? matched > 0 : roleHit;
          if (relevant) {
            if (req.tokens.length) score += 3 * (matched / req.tokens.length);
            if (roleHit) score += 4;
            if (req.phrase && fold(name).toLowerCase().includes(req.phrase)) score += 2;
            // A name that is mostly the query beats a long text that merely contains it.
            if (nameWords.length) score += 1.5 * (inName / nameWords.length);
            if (info.interactive) score += 0.5;
            matches.push({ el: child, info, score, order: matches.length });
          }
        }
        walk(child, underContent || (info.shown && coversText(info.role || 'generic')));
      }
    };
    if (document.body) walk(document.body, false);
    matches.sort((a, b) => b.score - a.score || a.order - b.order);
    const lines = matches.slice(0, req.max).map((m) => line(m.el, 0, m.info));
    return { lines, total: matches.length, next: reg.next };
  }

  if (req.op === 'text') {
    // Main content first: the outermost main/article/[role=main] elements, then the rest of the body.
    const body = document.body;
    if (!body) return { main: '', rest: '', truncated: false };
    const mains = Array.from(body.querySelectorAll('main, article, [role=main]'))
      .filter((e, _i, all) => !all.some((o) => o !== e && o.contains(e)));
    const clean = (s) => s.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029]/g, ' ')
      .replace(/[ \t\f\r\u00a0]+/g, ' ').replace(/ ?\n[\n ]*/g, '\n').trim();
    const display = (el) => getComputedStyle(el).display;
    // innerText of an element that is not rendered would be its raw textContent, so those are skipped.
    const textOf = (el) => (display(el) === 'none' ? '' : el.innerText || '');
    const mainText = mains.map((e) => clean(textOf(e))).filter(Boolean).join('\n\n');
    const rest = [];
    const walk = (el) => {
      for (let c = el.firstChild; c; c = c.nextSibling) {
        if (c.nodeType === 3) {
          if (/\S/.test(c.data)) rest.push(c.data);
        } else if (c.nodeType === 1 && !SKIP_TAGS.has(c.tagName)) {
          if (mains.includes(c)) continue;
          if (mains.some((m) => c.contains(m)) || display(c) === 'contents') walk(c);
          else rest.push(textOf(c));
        }
      }
    };
    walk(body);
    return { main: mainText, rest: clean(rest.map(clean).filter(Boolean).join('\n')) };
  }

  if (req.op === 'unmark') {
    for (const el of document.querySelectorAll('[data-deskbatch-ref]')) {
      if (el.getAttribute('data-deskbatch-ref') === req.token) el.removeAttribute('data-deskbatch-ref');
    }
    return 'ok';
  }
  if (req.op === 'mark' || req.op === 'center') {
    const el = resolve(req.ref);
    if (typeof el === 'string') return req.op === 'mark' ? el : { error: el };
    if (req.op === 'mark') {
      el.setAttribute('data-deskbatch-ref', req.token);
      return 'ok';
    }
    // The centre of the element's first visible box, scrolled into view if it is not in the viewport.
    const boxes = () => Array.from(el.getClientRects()).filter((r) => r.width > 0 && r.height > 0);
    if (!boxes().length) return { error: 'nobox' };
    // A box's part inside the viewport, or null.
    const visible = (r) => {
      const left = Math.max(r.left, 0), top = Math.max(r.top, 0);
      const right = Math.min(r.right, window.innerWidth), bottom = Math.min(r.bottom, window.innerHeight);
      return right - left >= 1 && bottom - top >= 1 ? { left, top, right, bottom } : null;
    };
    let parts = boxes().map(visible).filter(Boolean);
    if (!parts.length) {
      el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
      parts = boxes().map(visible).filter(Boolean);
    }
    if (!parts.length) return { error: 'nobox' };
    // The centre of the first visible box, unless something else is hit there (an overlay, or the gap of a
    // wrapped inline box): then the first of the other boxes' centres, or points around them, that hits it.
    const hits = (p) => {
      const at = document.elementFromPoint(p.x, p.y);
      return at !== null && (at === el || el.contains(at) || (el.shadowRoot !== null && el.shadowRoot.contains(at)));
    };
    const at = (b, fx, fy) => ({ x: b.left + (b.right - b.left) * fx, y: b.top + (b.bottom - b.top) * fy });
    const candidates = parts.map((b) => at(b, 0.5, 0.5));
    for (const b of parts) for (const [fx, fy] of [[0.75, 0.5], [0.25, 0.5], [0.5, 0.25], [0.5, 0.75], [0.9, 0.5], [0.1, 0.5]]) candidates.push(at(b, fx, fy));
    const p = candidates.find(hits) || candidates[0];
    return { x: p.x, y: p.y };
  }
  return undefined;
}`;

/** The expression that runs PAGE_SCRIPT with one request. */
function script(request: Record<string, unknown>): string {
  return `(${PAGE_SCRIPT})(${JSON.stringify({ ...request, floor: highestRef + 1 })})`;
}

/** The name of the isolated world the page script runs in. */
const WORLD_NAME = 'deskbatch';

/** A page's CDP session, and its isolated world's execution context for the current document. */
interface World {
  cdp: CDPSession;
  contextId: number | undefined;
}
const worlds = new WeakMap<Page, Promise<World>>();

function worldOf(page: Page): Promise<World> {
  let world = worlds.get(page);
  if (!world) {
    world = page
      .context()
      .newCDPSession(page)
      .then((cdp): World => ({ cdp, contextId: undefined }));
    worlds.set(page, world);
    world.catch(() => worlds.delete(page));
  }
  return world;
}

const GONE_CONTEXT =
  /Cannot find context|context with specified id|Execution context was destroyed|Inspected target navigated/i;

/** Evaluates `expression` in the page's isolated world (made for the document on first use), returning its value. */
async function evaluateIsolated(page: Page, expression: string): Promise<unknown> {
  const world = await worldOf(page);
  for (let attempt = 1; ; attempt++) {
    try {
      if (world.contextId === undefined) {
        const { frameTree } = (await world.cdp.send('Page.getFrameTree')) as { frameTree: { frame: { id: string } } };
        const made = (await world.cdp.send('Page.createIsolatedWorld', {
          frameId: frameTree.frame.id,
          worldName: WORLD_NAME,
        })) as { executionContextId: number };
        world.contextId = made.executionContextId;
      }
      const res = (await world.cdp.send('Runtime.evaluate', {
        expression,
        contextId: world.contextId,
        returnByValue: true,
      })) as { result: { value?: unknown }; exceptionDetails?: { text: string; exception?: { description?: string } } };
      if (res.exceptionDetails) {
        throw new Error(res.exceptionDetails.exception?.description ?? res.exceptionDetails.text);
      }
      return res.result.value;
    } catch (err) {
      // The document changed (and its world with it): make a world for the new one.
      if (attempt >= 3 || !GONE_CONTEXT.test(String(err))) throw err;
      world.contextId = undefined;
    }
  }
}

/** Runs a request in the page; a call that races a navigation is retried once on the new document. */
async function inPage<T>(page: Page, request: Record<string, unknown>): Promise<T> {
  try {
    return (await evaluateIsolated(page, script(request))) as T;
  } catch (err) {
    if (!/Execution context was destroyed|navigat/i.test(String(err))) throw err;
    await page.waitForLoadState('domcontentloaded').catch(() => undefined);
    return (await evaluateIsolated(page, script(request))) as T;
  }
}

/** Most refs one call can issue: one per element a page can have within the output budget, with room to spare. */
const REFS_PER_CALL_MAX = 1_000_000;

/** Records the refs a call issued (no more than one call can issue), so no later page issues the same numbers. */
function issued(next: number): void {
  const floor = highestRef + 1;
  if (!Number.isInteger(next) || next < floor) return;
  highestRef = Math.min(next, floor + REFS_PER_CALL_MAX) - 1;
}

/** `ref_7` (or `[ref_7]`) → 7; anything else is refused with the allowed form. */
function refNumber(ref: string): number {
  const m = REF_PATTERN.exec(ref.trim());
  if (!m) {
    throw new ToolInputError(
      `"${echo(ref)}" is not an element reference: use a ref such as ref_7 from read_page or find.`,
    );
  }
  return Number(m[1]);
}

type RefProblem = 'navigated' | 'unknown' | 'removed' | 'nobox';

/** The message for a ref that no longer (or never) names an element on this page. */
function refError(n: number, problem: RefProblem): ToolInputError {
  const again = 'Call read_page or find again to get current references.';
  switch (problem) {
    case 'navigated':
      return new ToolInputError(
        `ref_${n} is stale: it was given for an earlier page (the tab has navigated since) or for another tab. ${again}`,
      );
    case 'removed':
      return new ToolInputError(`ref_${n} is stale: its element has been removed from the page. ${again}`);
    case 'unknown':
      return new ToolInputError(`ref_${n} is not a reference on this page (it may belong to another tab). ${again}`);
    case 'nobox':
      return new ToolInputError(
        `ref_${n} names an element that is not displayed (it has no box on the page), so it cannot be pointed at.`,
      );
  }
}

/** Joins lines under the output cap, adding `note` when anything was cut. */
function capped(lines: string[], truncated: boolean, note: string, notes: string[] = []): string {
  const tail = [...notes, ...(truncated ? [note] : [])];
  let text = [...lines, ...tail].join('\n');
  if (text.length > READ_OUTPUT_MAX) {
    // The page side already keeps within the budget; this is the final guarantee.
    const room = READ_OUTPUT_MAX - note.length - 1;
    text = `${text.slice(0, room)}\n${note}`;
  }
  return text;
}

interface ReadResult {
  lines: string[];
  truncated: boolean;
  offscreen: boolean;
  deeper: boolean;
  next: number;
}

/** The accessibility-tree text of the page (or of one element's subtree), one element per line. */
export async function readPage(page: Page, options: ReadPageOptions): Promise<string> {
  const depth = options.depth ?? DEFAULT_DEPTH;
  if (!Number.isInteger(depth) || depth < 1) {
    throw new ToolInputError(`depth must be a whole number of at least 1 (default ${DEFAULT_DEPTH}).`);
  }
  const filter = options.filter ?? null;
  const ref = options.ref != null ? refNumber(options.ref) : null;
  // Room for the notes that may follow the lines.
  const budget = READ_OUTPUT_MAX - 400;
  const res = await inPage<ReadResult | { error: RefProblem }>(page, { op: 'read', filter, depth, ref, budget });
  if ('error' in res) throw refError(ref ?? 0, res.error);
  issued(res.next);
  if (!res.lines.length) {
    if (filter === 'interactive') return 'No interactive elements are visible in the viewport.';
    if (filter === 'all') return 'The page has no visible elements.';
    return 'No elements are visible in the viewport. Use filter "all" to include elements outside the viewport.';
  }
  const notes: string[] = [];
  if (res.deeper) notes.push(`[elements deeper than depth ${depth} are not shown; read a subtree with ref]`);
  if (res.offscreen) notes.push('[elements outside the viewport are not shown; use filter "all" or scroll]');
  return capped(res.lines, res.truncated, TRUNCATED_NOTE, notes);
}

/** Words that say what kind of element is wanted, and the roles they mean. Longer phrases first. */
const ROLE_WORDS: [string, string[]][] = [
  ['search box', ['searchbox', 'textbox', 'combobox']],
  ['search bar', ['searchbox', 'textbox', 'combobox']],
  ['search field', ['searchbox', 'textbox', 'combobox']],
  ['text box', ['textbox', 'searchbox', 'combobox']],
  ['text field', ['textbox', 'searchbox', 'combobox']],
  ['text area', ['textbox']],
  ['input field', ['textbox', 'searchbox', 'combobox', 'spinbutton']],
  ['check box', ['checkbox', 'switch']],
  ['tick box', ['checkbox', 'switch']],
  ['radio button', ['radio']],
  ['drop down', ['combobox', 'listbox']],
  ['combo box', ['combobox']],
  ['menu item', ['menuitem', 'menuitemcheckbox', 'menuitemradio']],
  ['button', ['button']],
  ['btn', ['button']],
  ['link', ['link']],
  ['hyperlink', ['link']],
  ['searchbox', ['searchbox', 'textbox', 'combobox']],
  ['textbox', ['textbox', 'searchbox', 'combobox']],
  ['textarea', ['textbox']],
  ['input', ['textbox', 'searchbox', 'combobox', 'spinbutton']],
  ['field', ['textbox', 'searchbox', 'combobox', 'spinbutton']],
  ['checkbox', ['checkbox', 'switch']],
  ['radio', ['radio']],
  ['dropdown', ['combobox', 'listbox']],
  ['select', ['combobox', 'listbox']],
  ['combobox', ['combobox']],
  ['heading', ['heading']],
  ['headline', ['heading']],
  ['image', ['img']],
  ['picture', ['img']],
  ['photo', ['img']],
  ['icon', ['img']],
  ['logo', ['img']],
  ['tab', ['tab']],
  ['slider', ['slider']],
  ['switch', ['switch', 'checkbox']],
  ['toggle', ['switch', 'checkbox']],
  ['option', ['option']],
  ['table', ['table']],
  ['list', ['list']],
  ['form', ['form']],
  ['dialog', ['dialog']],
  ['modal', ['dialog']],
  ['navigation', ['navigation']],
  ['nav', ['navigation']],
  ['navbar', ['navigation']],
  ['paragraph', ['paragraph']],
];
/** Words too common to say which element is meant. */
const STOP_WORDS = new Set(
  'a an the to of for on in at with and or that this which where is are it its my me i element elements thing field called named labeled labelled saying says text'.split(
    ' ',
  ),
);

export interface ParsedQuery {
  /** Words that must match an element's text (at least one of them). */
  tokens: string[];
  /** Role words: they add a little when an element's text holds them too. */
  soft: string[];
  /** Roles the query asks for. */
  roles: string[];
  /** The content words as one phrase (for a bonus when a name holds them in order). */
  phrase: string;
}

/** Splits a plain-language description into content words and the roles it names. */
export function parseQuery(query: string): ParsedQuery {
  let rest = ` ${query
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter(Boolean)
    .join(' ')} `;
  const roles = new Set<string>();
  const soft: string[] = [];
  for (const [words, meant] of ROLE_WORDS) {
    for (const form of [words, `${words}s`, `${words}es`]) {
      if (!rest.includes(` ${form} `)) continue;
      meant.forEach((r) => roles.add(r));
      soft.push(...words.split(' '));
      // "search box" keeps "search" as a content word: it says which box.
      const kept = words.startsWith('search ') ? ' search ' : ' ';
      rest = rest.replaceAll(` ${form} `, kept);
    }
  }
  const tokens = [...new Set(rest.split(' ').filter((w) => w && !STOP_WORDS.has(w)))];
  return { tokens, soft: [...new Set(soft)], roles: [...roles], phrase: tokens.length > 1 ? tokens.join(' ') : '' };
}

/** Up to FIND_MAX elements matching a plain-language description, best first, in read_page's line format. */
export async function findElements(page: Page, query: string): Promise<string> {
  const parsed = parseQuery(query);
  const shown = echo(query);
  if (!parsed.tokens.length && !parsed.roles.length) {
    throw new ToolInputError(
      `The query "${shown}" has no words to match: describe the element, e.g. "search box" or "add to cart button".`,
    );
  }
  const res = await inPage<{ lines: string[]; total: number; next: number }>(page, {
    op: 'find',
    ...parsed,
    max: FIND_MAX,
  });
  issued(res.next);
  if (!res.lines.length) {
    return `No element on the page matched "${shown}". Try other words, or call read_page to see the page.`;
  }
  const head =
    res.total > res.lines.length
      ? `${res.total} elements matched "${shown}"; the best ${res.lines.length} are shown, best first:`
      : `${res.total} element${res.total === 1 ? '' : 's'} matched "${shown}", best first:`;
  return capped([head, ...res.lines], false, TRUNCATED_NOTE);
}

/** The page's visible text, main content (main, article, [role=main]) first. */
export async function pageText(page: Page): Promise<string> {
  const res = await inPage<{ main: string; rest: string }>(page, { op: 'text' });
  const parts = [res.main, res.rest].filter(Boolean);
  if (!parts.length) return 'The page has no visible text.';
  const text = parts.join('\n\n');
  if (text.length <= READ_OUTPUT_MAX) return text;
  return `${text.slice(0, READ_OUTPUT_MAX - TEXT_TRUNCATED_NOTE.length - 1)}\n${TEXT_TRUNCATED_NOTE}`;
}

/**
 * The element a ref names on this page; a malformed, unknown or stale ref is
 * refused, never replaced. The isolated world marks the element with a random
 * token for the moment it takes Playwright to find it (Playwright's handles
 * live in the page's own world): the page cannot guess the token, though it
 * could move the mark on its own elements meanwhile, which misdirects nothing
 * outside that page.
 */
// `ElementHandle` is Playwright's `ElementHandle<Node>`: this project has no DOM lib, so `Element` cannot be named.
export async function refElement(page: Page, ref: string): Promise<ElementHandle> {
  const n = refNumber(ref);
  const token = randomUUID();
  const marked = await inPage<'ok' | RefProblem>(page, { op: 'mark', ref: n, token });
  if (marked !== 'ok') throw refError(n, marked);
  try {
    const handle = await page.$(`[data-deskbatch-ref="${token}"]`);
    if (!handle) throw refError(n, 'removed');
    return handle;
  } finally {
    await inPage(page, { op: 'unmark', token }).catch(() => undefined);
  }
}

/** Scrolls the ref's element into view if needed; the centre of its visible box, in viewport CSS pixels. */
export async function refCenter(page: Page, ref: string): Promise<{ x: number; y: number }> {
  const n = refNumber(ref);
  const res = await inPage<{ x: number; y: number } | { error: RefProblem }>(page, { op: 'center', ref: n });
  if ('error' in res) throw refError(n, res.error);
  return res;
}
