/**
 * The page's word that it has drawn after pointer input (src/browser/input-frames.ts
 * reads this file's text and installs it, with CDP `Page.addScriptToEvaluateOnNewDocument`,
 * in an isolated world of every frame of a tab, before the page's own scripts run).
 *
 * For each trusted `pointermove` and `mouseup` event this frame dispatches,
 * it waits for the next animation frame and then one task more (a message to
 * itself: by then the frame that holds the event handlers' changes has been
 * committed) and calls the binding `report`, which only that world sees, with
 * `type detail eventTime`: the event's type, its `detail` (the click count of a
 * mouseup) and `Date.now()` when it was dispatched. Listening in the capture phase
 * on `window` sees the event before the page's own handlers on the target; a page
 * that stops it earlier, on `window` itself, only makes the daemon wait its usual
 * reaction window. Nothing is shown to the page: the world is not the page's.
 *
 * The word means "drawn, and nothing of the document changed": when the document
 * changed (a MutationObserver in the same world counts every change) between the
 * input's first event (a move's `pointermove`, a click's `pointerdown`) and the
 * report, no word is given, since the page's pixels are on their way, and the
 * daemon waits for them as it does with no word (docs/PERFORMANCE.md, "The settle step").
 * The word also says whether an animation is running on the page, on an element
 * that is shown and in the viewport (a CSS animation or transition a `:hover`
 * started, say, which changes no document): its pixels are still to come, and
 * the daemon waits for them. `type detail eventTime startsIn endsIn`: -1 -1
 * when none runs; else in how many ms the soonest one starts to change (0: it
 * does already; one later than MOVING_SOON_MS is not counted), and in how many
 * the last of them with an end ends (-1: none has one within MOVING_END_MS).
 *
 * `report` is handed over as this function's argument; the file must hold this
 * one function and nothing after it (see page-script.js).
 */
/* exported inputFrames */
function inputFrames(report) {
  let changes = 0;
  const observer = new window.MutationObserver((records) => {
    changes += records.length;
  });
  observer.observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
  /** Every change so far, those not yet handed to the callback too. */
  const changed = () => (changes += observer.takeRecords().length);
  const MOVING_SOON_MS = 500;
  const MOVING_END_MS = 2000;
  /** `startsIn endsIn` of the animations on shown elements in the viewport (see above). */
  const moving = () => {
    let soonest = -1;
    let last = -1;
    for (const animation of document.getAnimations()) {
      const effect = animation.effect;
      if (animation.playState !== 'running' || !(effect instanceof window.KeyframeEffect)) continue;
      const target = effect.target;
      if (!target || !target.checkVisibility({ visibilityProperty: true })) continue;
      const box = target.getBoundingClientRect();
      if (box.right <= 0 || box.bottom <= 0 || box.left >= window.innerWidth || box.top >= window.innerHeight) continue;
      const timing = effect.getComputedTiming();
      const now = Number(timing.localTime ?? 0);
      const delay = Math.max(0, Number(timing.delay ?? 0) - now);
      if (delay > MOVING_SOON_MS) continue;
      if (soonest < 0 || delay < soonest) soonest = Math.ceil(delay);
      const end = Number(timing.endTime ?? Infinity) - now;
      if (end <= MOVING_END_MS && end > last) last = Math.ceil(end);
    }
    return `${soonest} ${soonest < 0 ? -1 : last}`;
  };
  let pressedAt = -1;
  window.addEventListener(
    'pointerdown',
    (event) => {
      if (event.isTrusted) pressedAt = changed();
    },
    { capture: true, passive: true },
  );
  for (const type of ['pointermove', 'mouseup']) {
    window.addEventListener(
      type,
      (event) => {
        if (!event.isTrusted) return;
        const from = type === 'mouseup' ? pressedAt : changed();
        // Both are UIEvents: a mouseup's detail is its click count.
        const line = `${type} ${/** @type {UIEvent} */ (event).detail || 0} ${Date.now()}`;
        window.requestAnimationFrame(() => {
          const channel = new window.MessageChannel();
          channel.port1.onmessage = () => {
            if (changed() === from) report(`${line} ${moving()}`);
          };
          channel.port2.postMessage(0);
        });
      },
      { capture: true, passive: true },
    );
  }
}
