/**
 * The pages of the takeover section (bench/takeover.ts): the agent's page on
 * the desktop, which flips between black and white on every input, and the
 * script installed in the viewer page, which times a take and each input's
 * way to the screen (its socket messages, noVNC's draw, the frame that shows
 * it). Text only: served by the section, evaluated in the pages.
 */

/** The desktop the agent works on, and the noVNC canvas showing it in the viewer. */
export const DESKTOP = { width: 1280, height: 800 };
/** Black is 0, white 765 (R + G + B): a change of more than this is a flip. */
export const FLIP_THRESHOLD = 300;

/**
 * The agent's page. Every mousedown and keydown (but `p` and `t`) flips the
 * whole window between black and white. `t` shows or hides a page of text
 * (monospace, 160 px from the left, not selectable) that inverts with the
 * rest; `?text=1` starts with it. `p` starts or stops flipping on every frame.
 */
export const FLIP_PAGE = `<!doctype html><html><head><title>flip</title><style>
html { background: #000; color: #fff; height: 100%; }
html.w { background: #fff; color: #000; }
body { margin: 0; height: 100%; }
#text { display: none; position: fixed; left: 160px; top: 0; right: 0; bottom: 0; overflow: hidden;
  font: 13px/16px monospace; white-space: pre-wrap; word-break: break-all; user-select: none; }
#text b { color: #c33; } html.w #text b { color: #3cc; }
html.text #text { display: block; }
</style></head><body><div id="text"></div><script>
const root = document.documentElement;
const words = ['takeover', 'desktop', 'latency', 'photon', 'frame', 'x11vnc', 'noVNC', 'canvas', 'pointer', 'key'];
const text = document.getElementById('text');
let seed = 1;
for (let i = 0; i < 3000; i++) {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff;
  const word = words[seed % words.length];
  if (seed % 11 === 0) text.append(Object.assign(document.createElement('b'), { textContent: word }));
  else text.append(word);
  text.append(seed % 13 === 0 ? '\\n' : ' ');
}
if (location.search.includes('text=1')) root.classList.add('text');
let animating = false;
const flip = () => root.classList.toggle('w');
const loop = () => {
  if (!animating) return;
  flip();
  requestAnimationFrame(loop);
};
addEventListener('mousedown', flip, true);
addEventListener('keydown', (e) => {
  if (e.repeat) return;
  if (e.key === 'p') {
    animating = !animating;
    if (animating) requestAnimationFrame(loop);
  } else if (e.key === 't') {
    root.classList.toggle('text');
  } else {
    flip();
  }
}, true);
</script></body></html>`;

/**
 * Installed in the viewer page (a string: the page's CSP allows no eval, and
 * Playwright evaluates a string expression without one). `window.__takeTimer`
 * times a take; `window.__lat` arms one input-to-photon trial, counts the
 * updates noVNC draws over a window, and decodes a JPEG.
 *
 * A trial stamps three times in the page's clock: the input (a capture-phase
 * listener on the document: event.timeStamp), when noVNC drew the flip on its
 * canvas (its drawImage onto the visible canvas, one per update, wrapped for
 * the trial: the canvas is read right after each call), and the
 * first animation frame that shows it (requestAnimationFrame, the canvas
 * read each frame; the time is performance.now() in the callback, when the
 * renderer builds that frame: rAF's own timestamp is the frame's begin time,
 * which can be earlier than a draw that still made it into the frame). And
 * each message of noVNC's socket meanwhile (its setter of onmessage wrapped
 * before noVNC opens it): when its event ran, its size, and how long noVNC's
 * handler took with it (parsing and decoding, on the page's main thread).
 */
export const VIEWER_SCRIPT = `(() => {
  if (window.__lat) return true;
  // Each message of noVNC's socket while a trial runs: when its event ran, its size, how long noVNC took with it.
  const messages = [];
  let recording = false;
  const onmessage = Object.getOwnPropertyDescriptor(WebSocket.prototype, 'onmessage');
  Object.defineProperty(WebSocket.prototype, 'onmessage', {
    configurable: true,
    enumerable: onmessage.enumerable,
    get() { return onmessage.get.call(this); },
    set(handler) {
      if (typeof handler !== 'function' || !this.url.includes('/viewer/vnc')) return onmessage.set.call(this, handler);
      onmessage.set.call(this, function (event) {
        if (!recording) return handler.call(this, event);
        const t = performance.now();
        try {
          return handler.call(this, event);
        } finally {
          messages.push({ t, bytes: event.data.byteLength || 0, ms: performance.now() - t });
        }
      });
    },
  });
  const status = document.getElementById('vnc-status');
  let clicked = null;
  let connected = null;
  document.addEventListener('click', (e) => {
    if (e.target instanceof Element && e.target.closest('.take-button')) {
      clicked = e.timeStamp;
      connected = null;
    }
  }, true);
  new MutationObserver(() => {
    if (clicked !== null && connected === null && /^Connected/.test(status.textContent || '')) connected = performance.now();
  }).observe(status, { childList: true, characterData: true, subtree: true });
  window.__takeTimer = {
    reset() { clicked = null; connected = null; },
    ms() { return clicked !== null && connected !== null ? connected - clicked : null; },
  };

  const canvas = () => {
    const c = document.querySelector('#vnc-screen canvas');
    if (!c) throw new Error('no noVNC canvas in #vnc-screen');
    return c;
  };
  const reader = (x, y) => {
    const ctx = canvas().getContext('2d');
    return () => {
      const d = ctx.getImageData(x, y, 1, 1).data;
      return d[0] + d[1] + d[2];
    };
  };
  let trial = null;
  window.__lat = {
    size() { const c = canvas(); return { width: c.width, height: c.height }; },
    pixel(x, y) { return reader(x, y)(); },
    /** Distinct colours in a w x h square at x, y: 1 on a plain page, many on the text page. */
    colours(x, y, w, h) {
      const d = canvas().getContext('2d').getImageData(x, y, w, h).data;
      const seen = new Set();
      for (let i = 0; i < d.length; i += 4) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      return seen.size;
    },
    arm(kind, x, y, timeoutMs) {
      const ctx = canvas().getContext('2d');
      const read = reader(x, y);
      const base = read();
      const flipped = () => Math.abs(read() - base) > ${FLIP_THRESHOLD};
      let input = null;
      let drawn = null;
      let stopped = false;
      let timer = 0;
      const onInput = (e) => { if (input === null) input = e.timeStamp; };
      const draw = ctx.drawImage;
      ctx.drawImage = function (...args) {
        draw.apply(this, args);
        if (input !== null && drawn === null && flipped()) drawn = performance.now();
      };
      messages.length = 0;
      recording = true;
      const stop = () => {
        recording = false;
        stopped = true;
        clearTimeout(timer);
        document.removeEventListener(kind, onInput, true);
        delete ctx.drawImage;
      };
      const done = new Promise((resolve, reject) => {
        timer = setTimeout(() => {
          stop();
          reject(new Error(input === null
            ? 'the viewer page saw no ' + kind + ' within ' + timeoutMs + ' ms'
            : 'the noVNC canvas at (' + x + ', ' + y + ') did not flip within ' + timeoutMs + ' ms of the ' + kind +
              ' (it reads ' + read() + ', it read ' + base + ')'));
        }, timeoutMs);
        const frame = () => {
          if (stopped) return;
          if (input === null || !flipped()) return void requestAnimationFrame(frame);
          const at = performance.now();
          stop();
          if (drawn === null) reject(new Error('the canvas flipped, but not in a drawImage of noVNC onto it'));
          else resolve({ input, drawn, frame: at, messages: messages.slice() });
        };
        requestAnimationFrame(frame);
      });
      done.catch(() => undefined);
      document.addEventListener(kind, onInput, true);
      trial = done;
      return base;
    },
    wait() { return trial; },
    /** How many updates noVNC drew on its canvas (its drawImage calls) over ms: no work added to the page. */
    draws(ms) {
      const ctx = canvas().getContext('2d');
      const draw = ctx.drawImage;
      let n = 0;
      ctx.drawImage = function (...args) {
        n++;
        return draw.apply(this, args);
      };
      return new Promise((resolve) => setTimeout(() => {
        delete ctx.drawImage;
        resolve(n);
      }, ms));
    },
    /** Times decoding window.__jpeg (base64) and drawing it, n times, as a frame stream's client would. */
    async decode(n) {
      const bytes = Uint8Array.from(atob(window.__jpeg), (c) => c.charCodeAt(0));
      const out = document.createElement('canvas');
      out.width = ${DESKTOP.width};
      out.height = ${DESKTOP.height};
      const ctx = out.getContext('2d');
      const times = [];
      for (let i = 0; i < n; i++) {
        const t0 = performance.now();
        const bitmap = await createImageBitmap(new Blob([bytes], { type: 'image/jpeg' }));
        ctx.drawImage(bitmap, 0, 0);
        ctx.getImageData(0, 0, 1, 1);
        times.push(performance.now() - t0);
        bitmap.close();
      }
      return times;
    },
  };
  return true;
})()`;
