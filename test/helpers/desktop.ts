/**
 * A whole desktop for end-to-end tests: a fresh Xvfb with openbox, the event
 * recorder page in kiosk Chromium (page pixel = display pixel), and a daemon
 * driving that display. `close()` stops everything, each by its own handle.
 *
 * After a batch, `drain()` returns everything the page recorded once every
 * input event sent so far has reached it (an input fence, input-fence.ts),
 * and `waitFor()` waits for a condition on the record with a deadline.
 */
import type { Page } from 'playwright';
import { launchKioskChromium, type KioskChromium } from './chromium.ts';
import { startTestDaemon, type TestClient, type TestDaemon } from './daemon.ts';
import { startTestDisplay, type VirtualDisplay } from './display.ts';
import { InputFence } from './input-fence.ts';
import {
  readEvents,
  resetEvents,
  startEventPageServer,
  waitForEvents,
  type EventPageServer,
  type RecordedEvent,
} from './event-page.ts';

export interface TestDesktop {
  display: VirtualDisplay;
  page: Page;
  daemon: TestDaemon;
  client: TestClient;
  events(): Promise<RecordedEvent[]>;
  /** The page's record once every input event sent before the call has reached it. Moves the pointer to the bottom-left corner. */
  drain(): Promise<RecordedEvent[]>;
  /**
   * The same for wheel events, which Chromium queues apart: a Ctrl+wheel marker
   * where the pointer is; leave its events out with `isWheelMarker`.
   */
  drainWheel(): Promise<RecordedEvent[]>;
  /** Waits until `done(events)` holds, or fails after `timeoutMs` naming `what` and showing the record. */
  waitFor(what: string, done: (events: RecordedEvent[]) => boolean, timeoutMs?: number): Promise<RecordedEvent[]>;
  reset(): Promise<void>;
  close(): Promise<void>;
}

export async function startTestDesktop(
  size: { width: number; height: number },
  daemonOverrides: Parameters<typeof startTestDaemon>[0] = {},
): Promise<TestDesktop> {
  const opened: { close(): Promise<void> | void }[] = [];
  const close = async (): Promise<void> => {
    for (const thing of opened.reverse()) await thing.close();
  };
  try {
    const display = await startTestDisplay(size);
    opened.push({ close: () => display.stop() });
    const server: EventPageServer = await startEventPageServer();
    opened.push(server);
    const browser: KioskChromium = await launchKioskChromium({ display: display.display, ...size, url: server.url });
    opened.push(browser);
    const daemon = await startTestDaemon({ display: display.display, ...daemonOverrides });
    opened.push(daemon);
    const fence = await InputFence.open(display.display, size.height);
    opened.push({ close: () => fence.close() });
    const client = await daemon.connect();
    const page = browser.page;
    return {
      display,
      page,
      daemon,
      client,
      events: () => readEvents(page),
      drain: async () => {
        await fence.pass(page);
        return readEvents(page);
      },
      drainWheel: async () => {
        await fence.passWheel(page);
        return readEvents(page);
      },
      waitFor: (what, done, timeoutMs) => waitForEvents(page, what, done, timeoutMs),
      reset: () => resetEvents(page),
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
