/**
 * The in-page script of the browser driver (src/browser/frame-worlds.ts reads this
 * file's text once and evaluates `(pageScript)(request)` in an isolated world
 * of one frame: the page's main frame, or an iframe's). It is plain JavaScript, read as text rather than
 * imported: tsx (esbuild keepNames) would inject `__name(...)` calls into a
 * function's compiled source, which do not exist in the page. So the file must
 * hold this one function and nothing after it.
 *
 * Every request carries `floor` and `limit`: new refs are numbered within
 * [floor, limit), the block the driver reserved for this evaluation, and
 * `framesMax`, the most frames one answer lists.
 *
 * Requests:
 * - `{op: 'read', floor, filter, depth, ref, budget, clip, everywhere}` →
 *   `{lines, truncated, offscreen, deeper, next, frames, framesMore}` or `{error}`;
 * - `{op: 'find', floor, tokens, soft, roles, phrase, max}` → `{lines, scores, total, next, frames, framesMore}`;
 * - `{op: 'text'}` → `{main, rest, frames, framesMore, next}`;
 * - `{op: 'element', floor, ref}` → the element itself (read by reference, not by value), or a problem;
 * - `{op: 'lift', floor, ref, x, y}` → the point (x, y) of the document inside the iframe `ref`, in this
 *   frame's viewport, after scrolling the iframe into view if the point was not on it; or `{error}`
 *   ('turned': the frame is rotated or skewed; 'covered': something else is drawn over that point);
 * - `{op: 'mark', floor, ref, token}` → 'ok' after setting `data-deskbatch-ref=token` on the element, or a problem;
 * - `{op: 'unmark', token}` → removes that attribute;
 * - `{op: 'center', floor, ref}` → `{x, y}` or `{error}`.
 * - `{op: 'field', floor, ref}` → `{tag, type, contentEditable, disabled, readOnly}` or `{error}` (form_input);
 * - `{op: 'check', floor, ref, want}` → `{checked}` after clicking a checkbox or radio button whose state is not `want`;
 * - `{op: 'select', floor, ref, wanted}` → `{ok: true}`, `{ok: false, options, total}` or `{ok: false, disabled}`.
 * `error` is one of 'navigated', 'unknown', 'removed', 'nobox'.
 *
 * Frames: this script sees one document. Where the document holds an iframe
 * whose content would be shown, `read`, `find` and `text` list it in `frames`
 * (its ref here and, for `read`, where its lines go and what part of it is in
 * view, in the iframe's own viewport coordinates: `clip`); the driver reads
 * that frame with this script in the frame's own isolated world and puts the
 * lines there. `clip` limits "in the viewport" to the part of a frame that is
 * visible in the top-level viewport; `everywhere` lists elements wherever they
 * are (a frame inside a `filter: "all"` or `ref` read).
 */
/* exported pageScript */
function pageScript(req) {
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
  // Every number issued anywhere so far is below this evaluation's floor (the driver's counter never
  // gives back a number once issued), so the registry starts each evaluation there, whatever it issued
  // before: keeping a higher `next` from an older block could leave it no room in this one.
  reg.next = req.floor;

  // An element's ref number, issued within [floor, limit): the numbers the driver reserved for this
  // evaluation (null once they are used up, which a read treats as the end of its budget).
  const numberOf = (el) => {
    let n = reg.ids.get(el);
    if (n === undefined) {
      if (reg.next >= req.limit) return null;
      n = reg.next++;
      reg.ids.set(el, n);
      reg.refs.set(n, new WeakRef(el));
    }
    return n;
  };
  const refOf = (el) => {
    const n = numberOf(el);
    return n === null ? null : 'ref_' + n;
  };
  const resolve = (n) => {
    const el = reg.refs.get(n)?.deref();
    if (el && el.isConnected) return el;
    if (reg.refs.has(n)) return 'removed';
    return n < reg.first ? 'navigated' : 'unknown';
  };

  // --- roles -------------------------------------------------------------
  const INPUT_ROLES = {
    button: 'button',
    submit: 'button',
    reset: 'button',
    image: 'button',
    file: 'button',
    checkbox: 'checkbox',
    radio: 'radio',
    range: 'slider',
    number: 'spinbutton',
    search: 'searchbox',
  };
  const TAG_ROLES = {
    ARTICLE: 'article',
    ASIDE: 'complementary',
    BUTTON: 'button',
    DATALIST: 'listbox',
    DIALOG: 'dialog',
    FIELDSET: 'group',
    FIGURE: 'figure',
    FOOTER: 'contentinfo',
    FORM: 'form',
    HEADER: 'banner',
    HR: 'separator',
    LI: 'listitem',
    MAIN: 'main',
    MENU: 'list',
    NAV: 'navigation',
    OL: 'list',
    UL: 'list',
    OPTGROUP: 'group',
    OPTION: 'option',
    OUTPUT: 'status',
    P: 'paragraph',
    PROGRESS: 'progressbar',
    METER: 'meter',
    TABLE: 'table',
    TD: 'cell',
    TH: 'columnheader',
    TR: 'row',
    TEXTAREA: 'textbox',
    CAPTION: 'caption',
    BLOCKQUOTE: 'blockquote',
    DT: 'term',
    DD: 'definition',
    SUMMARY: 'button',
    IFRAME: 'iframe',
    H1: 'heading',
    H2: 'heading',
    H3: 'heading',
    H4: 'heading',
    H5: 'heading',
    H6: 'heading',
    LEGEND: 'legend',
    LABEL: 'label',
    VIDEO: 'video',
    AUDIO: 'audio',
  };
  const INTERACTIVE = new Set([
    'button',
    'link',
    'textbox',
    'searchbox',
    'checkbox',
    'radio',
    'combobox',
    'listbox',
    'option',
    'menuitem',
    'menuitemcheckbox',
    'menuitemradio',
    'switch',
    'slider',
    'spinbutton',
    'tab',
    'treeitem',
  ]);
  // Roles whose name is their text content (ARIA "name from content", plus text blocks for reading).
  const FROM_CONTENT = new Set([
    'button',
    'link',
    'heading',
    'cell',
    'columnheader',
    'rowheader',
    'gridcell',
    'option',
    'menuitem',
    'menuitemcheckbox',
    'menuitemradio',
    'tab',
    'treeitem',
    'tooltip',
    'paragraph',
    'listitem',
    'caption',
    'legend',
    'term',
    'definition',
    'label',
    'switch',
    'checkbox',
    'radio',
    'generic',
    'blockquote',
    'status',
  ]);
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
  // eslint-disable-next-line no-control-regex -- control characters are what it folds away
  const fold = (s) => s.replace(/[\s\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g, ' ').trim();
  const bound = (s, max) => (s.length > max ? s.slice(0, max - 1) + '…' : s);
  const CONTENT_MAX = 400;
  // Longest accessible name or value shown on a line.
  const NAME_MAX = 150;
  const hiddenEl = (el) =>
    el.getAttribute('aria-hidden') === 'true' ||
    SKIP_TAGS.has(el.tagName) ||
    (el.tagName === 'INPUT' && el.type === 'hidden');
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
    ids
      .split(/\s+/)
      .map((id) => document.getElementById(id))
      .filter(Boolean)
      .map((e) => contentText(e))
      .join(' ');
  const labelText = (el) =>
    el.labels
      ? Array.from(el.labels)
          .map((l) => contentText(l))
          .join(' ')
      : '';
  const nameOf = (el, role) => {
    const labelledby = el.getAttribute('aria-labelledby');
    if (labelledby) {
      const t = fold(byIds(labelledby));
      if (t) return t;
    }
    const aria = fold(el.getAttribute('aria-label') || '');
    if (aria) return aria;
    const tag = el.tagName;
    if (
      tag === 'INPUT' ||
      tag === 'SELECT' ||
      tag === 'TEXTAREA' ||
      tag === 'METER' ||
      tag === 'PROGRESS' ||
      tag === 'OUTPUT'
    ) {
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
  const quote = (s) => '"' + bound(s, NAME_MAX).replace(/[\\"]/g, (m) => '\\' + m) + '"';

  // --- state -------------------------------------------------------------
  // The part of this document's viewport that is shown: all of it, or (in a frame) the part of the
  // frame that is visible in the top-level viewport.
  const clip = req.clip || null;
  const view = {
    left: Math.max(0, clip ? clip.left : 0),
    top: Math.max(0, clip ? clip.top : 0),
    right: Math.min(window.innerWidth, clip ? clip.right : Infinity),
    bottom: Math.min(window.innerHeight, clip ? clip.bottom : Infinity),
  };
  const inViewport = (r) => r.right > view.left && r.bottom > view.top && r.left < view.right && r.top < view.bottom;
  const stateOf = (el, role, rect) => {
    const s = [];
    const tag = el.tagName;
    const type = tag === 'INPUT' ? (el.type || 'text').toLowerCase() : '';
    if (type && type !== 'text' && type !== 'checkbox' && type !== 'radio' && type !== 'submit' && type !== 'button')
      s.push('type=' + type);
    if (type === 'password') {
      if (el.value) s.push('value=(hidden, ' + el.value.length + ' characters)');
    } else if (tag === 'SELECT') {
      const chosen = Array.from(el.selectedOptions).map((o) => fold(o.label || o.text));
      if (chosen.length) s.push('value=' + quote(chosen.join(', ')));
    } else if (type === 'file') {
      if (el.files && el.files.length)
        s.push(
          'files=' +
            quote(
              Array.from(el.files)
                .map((f) => f.name)
                .join(', '),
            ),
        );
    } else if (
      (tag === 'INPUT' && type !== 'checkbox' && type !== 'radio' && role !== 'button') ||
      tag === 'TEXTAREA'
    ) {
      if (el.value) s.push('value=' + quote(fold(el.value)));
    } else if (el.isContentEditable && role === 'textbox') {
      const t = contentText(el);
      if (t) s.push('value=' + quote(t));
    } else if (role === 'slider' || role === 'spinbutton' || role === 'progressbar' || role === 'meter') {
      const v = el.getAttribute('aria-valuetext') || el.getAttribute('aria-valuenow') || el.value;
      if (v !== null && v !== undefined && v !== '') s.push('value=' + quote(fold(String(v))));
    }
    if (type === 'checkbox' || type === 'radio')
      s.push(el.indeterminate ? 'mixed' : el.checked ? 'checked' : 'unchecked');
    else if (
      role === 'checkbox' ||
      role === 'radio' ||
      role === 'switch' ||
      role === 'menuitemcheckbox' ||
      role === 'menuitemradio'
    ) {
      const c = el.getAttribute('aria-checked');
      s.push(c === 'true' ? 'checked' : c === 'mixed' ? 'mixed' : 'unchecked');
    }
    if (tag === 'OPTION' ? el.selected : el.getAttribute('aria-selected') === 'true') s.push('selected');
    if (el.getAttribute('aria-pressed') === 'true') s.push('pressed');
    const expanded = el.getAttribute('aria-expanded');
    if (expanded === 'true') s.push('expanded');
    else if (expanded === 'false') s.push('collapsed');
    if (tag === 'SUMMARY' && el.parentElement && el.parentElement.tagName === 'DETAILS')
      s.push(el.parentElement.open ? 'expanded' : 'collapsed');
    if (role === 'heading') s.push('level=' + (el.getAttribute('aria-level') || tag.slice(1) || '2'));
    if (el.matches(':disabled') || el.getAttribute('aria-disabled') === 'true') s.push('disabled');
    if (el.required || el.getAttribute('aria-required') === 'true') s.push('required');
    if (el.getAttribute('aria-invalid') === 'true') s.push('invalid');
    if (document.activeElement === el) s.push('focused');
    if (role === 'link' && el.href) s.push('href=' + quote(fold(String(el.href))));
    if (!inViewport(rect)) s.push('offscreen');
    return s.length ? ' ' + s.join(' ') : '';
  };

  // --- frames --------------------------------------------------------------
  const isFrame = (el) => el.tagName === 'IFRAME' || el.tagName === 'FRAME';
  // The box a frame's document is drawn in (the element's content box), in this viewport's coordinates,
  // and its scale (a CSS transform or zoom): a frame's CSS pixel is sx by sy of this viewport's.
  const contentBox = (el) => {
    const r = el.getBoundingClientRect();
    const sx = el.offsetWidth ? r.width / el.offsetWidth : 1,
      sy = el.offsetHeight ? r.height / el.offsetHeight : 1;
    const st = getComputedStyle(el);
    const pl = parseFloat(st.paddingLeft) || 0,
      pt = parseFloat(st.paddingTop) || 0;
    const left = r.left + (el.clientLeft + pl) * sx,
      top = r.top + (el.clientTop + pt) * sy;
    const right = left + (el.clientWidth - pl - (parseFloat(st.paddingRight) || 0)) * sx;
    const bottom = top + (el.clientHeight - pt - (parseFloat(st.paddingBottom) || 0)) * sy;
    return { left, top, right, bottom, sx, sy };
  };
  // Whether the element or an ancestor is rotated or skewed: its box is then not a scaled rectangle.
  const turned = (el) => {
    for (let a = el; a; a = a.parentElement || a.getRootNode().host || null) {
      const st = getComputedStyle(a);
      if (st.rotate && st.rotate !== 'none') return true;
      if (st.transform && st.transform !== 'none') {
        const m = new DOMMatrixReadOnly(st.transform);
        if (m.b !== 0 || m.c !== 0 || !m.is2D) return true;
      }
    }
    return false;
  };
  // Frames a call lists, at most req.framesMax; the rest are counted (the driver says how many).
  let framesMore = 0;
  const roomForFrame = (list) => {
    if (list.length < req.framesMax) return true;
    framesMore++;
    return false;
  };
  // A frame to read: its ref, and the part of it in view, in the frame's own coordinates (empty: none).
  const frameEntry = (el) => {
    const box = contentBox(el);
    const left = Math.max(box.left, view.left),
      top = Math.max(box.top, view.top);
    const right = Math.min(box.right, view.right),
      bottom = Math.min(box.bottom, view.bottom);
    const seen = right > left && bottom > top;
    const clip = seen
      ? {
          left: (left - box.left) / box.sx,
          top: (top - box.top) / box.sy,
          right: (right - box.left) / box.sx,
          bottom: (bottom - box.top) / box.sy,
        }
      : { left: 0, top: 0, right: 0, bottom: 0 };
    return { ref: numberOf(el), clip, seen };
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
    const shown =
      (inSelect || (st.visibility === 'visible' && rect.width * rect.height > 0)) &&
      (role !== null || interactive || ownText);
    return { rect, role, interactive, shown, inSelect };
  };
  // One element's line, or null when this evaluation's ref numbers are used up.
  const line = (el, d, info) => {
    const role = info.role || 'generic';
    const name = nameOf(el, role);
    const ref = refOf(el);
    if (ref === null) return null;
    return '  '.repeat(d) + role + (name ? ' ' + quote(name) : '') + ' [' + ref + ']' + stateOf(el, role, info.rect);
  };

  if (req.op === 'read') {
    const lines = [];
    // Frames whose lines go in at `at`, indented `depth` levels.
    const frames = [];
    const everywhere = req.filter === 'all' || req.ref !== null || req.everywhere === true;
    let used = 0,
      truncated = false,
      offscreen = false,
      deeper = false;
    const emit = (text) => {
      if (text === null || used + text.length + 1 > req.budget) {
        truncated = true;
        return false;
      }
      lines.push(text);
      used += text.length + 1;
      return true;
    };
    // Whether an element passes the filter: interactive only, and in the viewport unless 'all' or a ref subtree.
    const passes = (info) => {
      if (!info.shown) return false;
      if (req.filter === 'interactive' && !info.interactive) return false;
      if (!everywhere && !inViewport(info.rect)) {
        offscreen = true;
        return false;
      }
      return true;
    };
    // A frame in view (or anywhere, when everything is listed) is read into its place, if depth allows.
    const addFrame = (el, d) => {
      if (d >= req.depth) {
        deeper = true;
        return;
      }
      const { ref, clip, seen } = frameEntry(el);
      if ((everywhere || seen) && ref !== null && roomForFrame(frames))
        frames.push({ ref, clip, at: lines.length, depth: d });
    };
    const walk = (el, d, underContent) => {
      for (const child of childrenOf(el)) {
        if (truncated) return;
        const info = describe(child, underContent);
        if (!info) continue;
        let childDepth = d;
        if (passes(info)) {
          if (d >= req.depth) {
            deeper = true;
            continue;
          }
          if (!emit(line(child, d, info))) return;
          childDepth = d + 1;
        }
        if (isFrame(child) && info.shown) addFrame(child, childDepth);
        walk(child, childDepth, underContent || (info.shown && coversText(info.role || 'generic')));
      }
    };
    let root = document.body || document.documentElement;
    if (req.ref !== null) {
      const found = resolve(req.ref);
      if (typeof found === 'string') return { error: found };
      root = found;
      const info = describe(root, false) || {
        rect: root.getBoundingClientRect(),
        role: roleOf(root),
        interactive: false,
        shown: true,
      };
      emit(line(root, 0, info));
      if (isFrame(root)) addFrame(root, 1);
      walk(root, 1, false);
    } else if (root) {
      walk(root, 0, false);
    }
    return { lines, truncated, offscreen, deeper, next: reg.next, frames, framesMore };
  }

  if (req.op === 'find') {
    const matches = [];
    const frames = [];
    const words = (s) =>
      s
        .toLowerCase()
        .split(/[^\p{L}\p{N}]+/u)
        .filter(Boolean);
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
            [
              words(
                [
                  labelText(child),
                  child.getAttribute('placeholder') || '',
                  child.getAttribute('title') || '',
                  child.getAttribute('alt') || '',
                  child.getAttribute('aria-description') || '',
                ].join(' '),
              ),
              2,
            ],
            [words(typeof child.value === 'string' && child.type !== 'password' ? child.value : ''), 1.5],
            [
              words(
                [child.id, child.getAttribute('name') || '', child.tagName === 'INPUT' ? child.type : ''].join(' '),
              ),
              1,
            ],
          ];
          let score = 0,
            matched = 0,
            inName = 0;
          for (const t of req.tokens) {
            let best = 0;
            for (const [fw, weight] of fields) best = Math.max(best, tokenIn(t, fw) * weight);
            if (best > 0) matched++;
            if (tokenIn(t, nameWords) > 0) inName++;
            score += best;
          }
          for (const t of req.soft)
            for (const [fw] of fields)
              if (tokenIn(t, fw) > 0) {
                score += 0.5;
                break;
              }
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
        if (isFrame(child) && info.shown && roomForFrame(frames)) {
          const ref = numberOf(child);
          if (ref !== null) frames.push({ ref });
        }
        walk(child, underContent || (info.shown && coversText(info.role || 'generic')));
      }
    };
    if (document.body) walk(document.body, false);
    matches.sort((a, b) => b.score - a.score || a.order - b.order);
    const best = matches.slice(0, req.max);
    const lines = best.map((m) => line(m.el, 0, m.info)).filter((l) => l !== null);
    return { lines, scores: best.map((m) => m.score), total: matches.length, next: reg.next, frames, framesMore };
  }

  if (req.op === 'text') {
    // Main content first: the outermost main/article/[role=main] elements, then the rest of the body.
    const body = document.body;
    if (!body) return { main: '', rest: '', frames: [] };
    const mains = Array.from(body.querySelectorAll('main, article, [role=main]')).filter(
      (e, _i, all) => !all.some((o) => o !== e && o.contains(e)),
    );
    const clean = (s) =>
      s
        // eslint-disable-next-line no-control-regex -- control characters are what it removes
        .replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029]/g, ' ')
        .replace(/[ \t\f\r\u00a0]+/g, ' ')
        .replace(/ ?\n[\n ]*/g, '\n')
        .trim();
    const display = (el) => getComputedStyle(el).display;
    // innerText of an element that is not rendered would be its raw textContent, so those are skipped.
    const textOf = (el) => (display(el) === 'none' ? '' : el.innerText || '');
    const mainText = mains
      .map((e) => clean(textOf(e)))
      .filter(Boolean)
      .join('\n\n');
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
    // Frames that are drawn, in document order; a frame inside the main content counts as main content.
    const frames = [];
    for (const el of body.querySelectorAll('iframe, frame')) {
      const r = el.getBoundingClientRect();
      const drawn = r.width * r.height > 0 && (!el.checkVisibility || el.checkVisibility({ visibilityProperty: true }));
      if (!drawn || !roomForFrame(frames)) continue;
      const ref = numberOf(el);
      if (ref !== null) frames.push({ ref, main: mains.some((m) => m.contains(el)) });
    }
    return {
      main: mainText,
      rest: clean(rest.map(clean).filter(Boolean).join('\n')),
      frames,
      framesMore,
      next: reg.next,
    };
  }

  if (req.op === 'unmark') {
    for (const el of document.querySelectorAll('[data-deskbatch-ref]')) {
      if (el.getAttribute('data-deskbatch-ref') === req.token) el.removeAttribute('data-deskbatch-ref');
    }
    return 'ok';
  }
  if (req.op === 'element') return resolve(req.ref);
  if (req.op === 'lift') {
    const el = resolve(req.ref);
    if (typeof el === 'string') return { error: el };
    if (!isFrame(el)) return { error: 'unknown' };
    if (turned(el)) return { error: 'turned' };
    const point = () => {
      const box = contentBox(el);
      return { x: box.left + req.x * box.sx, y: box.top + req.y * box.sy };
    };
    const shown = (p) => p.x >= 0 && p.y >= 0 && p.x < window.innerWidth && p.y < window.innerHeight;
    // On the frame itself, not on something over it (a banner) or beside it (clipped by a scrolled panel).
    const hits = (p) => shown(p) && document.elementFromPoint(p.x, p.y) === el;
    let p = point();
    if (!hits(p)) {
      // Bring the frame into view (any scrolled container too), then the point itself if the frame is larger.
      el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
      p = point();
      if (!shown(p)) {
        const dx = p.x < 0 ? p.x - 8 : p.x >= window.innerWidth ? p.x - window.innerWidth + 8 : 0;
        const dy = p.y < 0 ? p.y - 8 : p.y >= window.innerHeight ? p.y - window.innerHeight + 8 : 0;
        window.scrollBy({ left: dx, top: dy, behavior: 'instant' });
        p = point();
      }
    }
    if (!shown(p)) return { error: 'nobox' };
    return hits(p) ? p : { error: 'covered' };
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
      const left = Math.max(r.left, 0),
        top = Math.max(r.top, 0);
      const right = Math.min(r.right, window.innerWidth),
        bottom = Math.min(r.bottom, window.innerHeight);
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
    for (const b of parts)
      for (const [fx, fy] of [
        [0.75, 0.5],
        [0.25, 0.5],
        [0.5, 0.25],
        [0.5, 0.75],
        [0.9, 0.5],
        [0.1, 0.5],
      ])
        candidates.push(at(b, fx, fy));
    const p = candidates.find(hits) || candidates[0];
    return { x: p.x, y: p.y };
  }
  // --- form fields (form_input) --------------------------------------------
  if (req.op === 'field' || req.op === 'check' || req.op === 'select') {
    const el = resolve(req.ref);
    if (typeof el === 'string') return { error: el };
    if (req.op === 'field') {
      // What form_input needs to know about the element before choosing how to set it.
      const tag = el.tagName.toLowerCase();
      return {
        tag,
        type: tag === 'input' ? (el.type ?? '').toLowerCase() : '',
        contentEditable: el.isContentEditable === true,
        // :disabled also covers a field inside a disabled fieldset.
        disabled: el.matches(':disabled'),
        readOnly: el.readOnly === true,
      };
    }
    if (req.op === 'check') {
      // A DOM click rather than a pointer one, so a visually hidden or restyled box works too;
      // the page's click, input and change handlers run as for a person's click.
      if (el.checked !== req.want) el.click();
      return { checked: el.checked };
    }
    // Selects the option whose value, else whose visible text, equals req.wanted (then case-insensitively).
    const wanted = req.wanted;
    const options = Array.from(el.options).map((o) => ({ o, text: o.text.replace(/\s+/g, ' ').trim() }));
    const lower = wanted.trim().toLowerCase();
    const match =
      options.find((x) => x.o.value === wanted) ??
      options.find((x) => x.text === wanted.trim()) ??
      options.find((x) => x.o.value.toLowerCase() === lower || x.text.toLowerCase() === lower);
    if (!match) return { ok: false, options: options.slice(0, 20).map((x) => x.text), total: options.length };
    const found = match.o;
    if (found.disabled) return { ok: false, disabled: match.text };
    if (!found.selected || el.multiple) {
      if (el.multiple) for (const x of options) x.o.selected = x.o === found;
      else el.selectedIndex = found.index;
      el.dispatchEvent(new Event('input', { bubbles: true }));
      el.dispatchEvent(new Event('change', { bubbles: true }));
    }
    return { ok: true };
  }
  return undefined;
}
