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
            if (changed() === from) report(line);
          };
          channel.port2.postMessage(0);
        });
      },
      { capture: true, passive: true },
    );
  }
}
