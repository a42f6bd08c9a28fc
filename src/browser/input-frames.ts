/**
 * The browser's own word that it has drawn its answer to pointer input
 * (docs/PERFORMANCE.md, "The settle step"). The desktop's settle step waits,
 * after input, for the app under the pointer to react; without word from the
 * app it waits out a reaction window (`SettleOptions.reactionMs`). Where that
 * app is this daemon's own headful Chromium, each tab tells instead: the
 * in-page script (page-script/input-frames.js), installed in an isolated world
 * of every frame before the page's scripts, reports each trusted pointermove
 * and mouseup event once the animation frame after it has been committed, if
 * the page changed nothing of its document for it (when it did, its pixels are
 * on their way: no report, and the reaction window is waited for them), and
 * whether an animation is running where it shows (its pixels are still to
 * come), through a CDP binding only that world sees. `drawnAfter` answers
 * whether, and when, a report for a given input came, and what it said.
 *
 * Why a page event, not the CDP pipe: the input reaches Chromium through the X
 * server, a channel of its own, so no CDP command can be ordered after it; a
 * report names the event it follows, whatever the order the two channels
 * deliver in. A page that stops the event before our listener, an
 * out-of-process iframe (its own target, not watched here), the browser's own
 * tab strip, or another program's window send no report: the settle step then
 * waits its reaction window, as before.
 */
import { readFileSync } from 'node:fs';
import type { CDPSession } from 'playwright';
import type { Drawn, InputMark } from '../base/image.ts';

/** The isolated world the watcher runs in, and the binding it reports through (seen in that world only). */
const WORLD = 'deskbatch-input-frames';
const BINDING = 'deskbatchInputFrame';
const SOURCE = `(${readFileSync(new URL('./page-script/input-frames.js', import.meta.url), 'utf8').trim()})(globalThis.${BINDING})`;
/** A report: `type detail eventTime startsIn endsIn`, as page-script/input-frames.js sends it (-1: none). */
const REPORT = /^(pointermove|mouseup) (\d{1,3}) (\d{1,16}) (-1|\d{1,4}) (-1|\d{1,4})$/;

interface Heard {
  detail: number;
  eventAt: number;
  /** When the report arrived (performance.now()), and whether an animation was running. */
  drawn: Drawn;
}

interface Waiter {
  mark: InputMark;
  done: (drawn: Drawn | undefined) => void;
}

const matches = (mark: InputMark, heard: Heard | undefined): heard is Heard =>
  heard !== undefined && heard.detail >= mark.detail && heard.eventAt >= mark.sentAt;

/** The reports of every tab of one browser: one per desktop, whose display that browser draws on. */
export class InputFrames {
  private readonly last = new Map<InputMark['event'], Heard>();
  private readonly waiters = new Set<Waiter>();

  /**
   * Installs the watcher in a tab (its frames now and every document after)
   * and listens to it on `cdp`, the tab's own CDP session. The binding's calls
   * are events of the Runtime domain, which this enables on that session.
   */
  async attach(cdp: CDPSession): Promise<void> {
    cdp.on('Runtime.bindingCalled', (event) => {
      if (event.name === BINDING) this.heard(event.payload);
    });
    await cdp.send('Runtime.enable');
    await cdp.send('Runtime.addBinding', { name: BINDING, executionContextName: WORLD });
    await cdp.send('Page.addScriptToEvaluateOnNewDocument', { source: SOURCE, worldName: WORLD, runImmediately: true });
  }

  /**
   * The report of `mark`'s event: at once if it came already, else when it
   * comes, or undefined after `timeoutMs`.
   */
  drawnAfter(mark: InputMark, timeoutMs: number): Promise<Drawn | undefined> {
    const heard = this.last.get(mark.event);
    if (matches(mark, heard)) return Promise.resolve(heard.drawn);
    if (timeoutMs <= 0) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const waiter: Waiter = {
        mark,
        done: (drawn) => {
          clearTimeout(timer);
          this.waiters.delete(waiter);
          resolve(drawn);
        },
      };
      const timer = setTimeout(() => waiter.done(undefined), timeoutMs);
      this.waiters.add(waiter);
    });
  }

  private heard(payload: string): void {
    const m = REPORT.exec(payload);
    if (!m) return;
    const event = m[1] as InputMark['event'];
    const [startsIn, endsIn] = [m[4]!, m[5]!];
    const moving = { startsInMs: Number(startsIn), ...(endsIn !== '-1' ? { endsInMs: Number(endsIn) } : {}) };
    const drawn: Drawn = { at: performance.now(), ...(startsIn !== '-1' ? { moving } : {}) };
    const heard: Heard = { detail: Number(m[2]), eventAt: Number(m[3]), drawn };
    this.last.set(event, heard);
    for (const w of this.waiters) if (w.mark.event === event && matches(w.mark, heard)) w.done(drawn);
  }
}
