/**
 * A whole desktop for end-to-end tests: a fresh Xvfb with openbox, the event
 * recorder page in kiosk Chromium (page pixel = display pixel), and a daemon
 * driving that display. `close()` stops everything, each by its own handle.
 */
import type { Page } from 'playwright';
import { launchKioskChromium, type KioskChromium } from './chromium.ts';
import { startTestDaemon, type TestClient, type TestDaemon } from './daemon.ts';
import { startTestDisplay, type VirtualDisplay } from './display.ts';
import {
  readEvents,
  resetEvents,
  startEventPageServer,
  type EventPageServer,
  type RecordedEvent,
} from './event-page.ts';

export interface TestDesktop {
  display: VirtualDisplay;
  page: Page;
  daemon: TestDaemon;
  client: TestClient;
  events(): Promise<RecordedEvent[]>;
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
    const client = await daemon.connect();
    return {
      display,
      page: browser.page,
      daemon,
      client,
      events: () => readEvents(browser.page),
      reset: () => resetEvents(browser.page),
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
