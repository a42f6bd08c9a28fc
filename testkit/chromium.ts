/**
 * Launches Debian's chromium (through Playwright) full screen on an X display,
 * so that page CSS pixel (x, y) is screen pixel (x, y): tests can drive the
 * real mouse at a page element's coordinates and read back what the page saw
 * (testkit/event-page.ts).
 *
 * How the mapping is made exact:
 * - `--kiosk` (no toolbar, no frame, full screen), `--window-position=0,0`
 *   and `--window-size` equal to the screen;
 * - a persistent context (temporary profile, deleted on close): kiosk mode
 *   only applies to the startup window, and `chromium.launch()` starts with
 *   `--no-startup-window`, so its pages got a normal window with a toolbar
 *   (page y = screen y + 91 at 1024x768). Later pages of the same context open
 *   full screen too;
 * - `--force-device-scale-factor=1`, so devicePixelRatio is 1;
 * - Playwright's `--enable-automation` is dropped: it adds an infobar
 *   ("controlled by automated test software") that would push the page down;
 * - the context has `viewport: null`: Playwright otherwise emulates a
 *   1280x720 viewport whatever the window size.
 * The launch then waits until the page reports screenX/Y 0 and an inner size
 * equal to the screen, and fails with the last geometry seen if it never does.
 *
 * Needs a window manager on the display (startVirtualDisplay's default): with
 * none, chromium sizes its full-screen window 1 px short in each direction
 * (1023x767 on a 1024x768 screen).
 */
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright';
import { newLogDir } from './artifacts.ts';

/** Debian's chromium (package `chromium`). Playwright never downloads a browser here. */
export const CHROMIUM_PATH = '/usr/bin/chromium';

/** How long to wait for the window to cover the screen after the page loaded. */
const GEOMETRY_TIMEOUT_MS = 10_000;
const GEOMETRY_POLL_MS = 50;
const LAUNCH_TIMEOUT_MS = 30_000;

export interface KioskChromiumOptions {
  /** X display to show the window on, e.g. `:3`. */
  display: string;
  /** Screen size of that display. */
  width: number;
  height: number;
  /** Page to open. */
  url: string;
  /** Extra chromium switches. */
  args?: string[];
}

export interface KioskChromium {
  browser: Browser;
  /** The browser's only context (persistent, so `browser.newContext()` windows are not in kiosk mode). */
  context: BrowserContext;
  /** The kiosk window's page, showing `url`. */
  page: Page;
  /** Closes the browser and deletes its temporary profile. Idempotent. */
  close(): Promise<void>;
}

/** The page's view of its window, as checked by launchKioskChromium. */
export interface PageGeometry {
  screenX: number;
  screenY: number;
  innerWidth: number;
  innerHeight: number;
  outerWidth: number;
  outerHeight: number;
  devicePixelRatio: number;
}

export function pageGeometry(page: Page): Promise<PageGeometry> {
  return page.evaluate(`({
    screenX: window.screenX, screenY: window.screenY,
    innerWidth: window.innerWidth, innerHeight: window.innerHeight,
    outerWidth: window.outerWidth, outerHeight: window.outerHeight,
    devicePixelRatio: window.devicePixelRatio,
  })`) as Promise<PageGeometry>;
}

function coversScreen(g: PageGeometry, width: number, height: number): boolean {
  return (
    g.screenX === 0 && g.screenY === 0 && g.innerWidth === width && g.innerHeight === height && g.devicePixelRatio === 1
  );
}

/**
 * The kiosk window's own tab. Chromium may start with more pages than the one
 * Playwright asked for (measured, about one launch in twenty under load: two
 * `chrome-error://` pages of 1x1 and 154x44, for start pages the managed
 * policy blocks, listed in any order), so `pages()[0]` was at times one of
 * those and never covered the screen. The tab is the one not showing an error
 * page; the others are left alone (background tabs of the kiosk window).
 */
async function kioskPage(context: BrowserContext): Promise<Page> {
  const isError = (p: Page): boolean => p.url().startsWith('chrome-error:');
  // The error pages are left open: closing one could wait for ever (a run of helpers.test.ts stalled in it).
  return context.pages().find((p) => !isError(p)) ?? (await context.newPage());
}

export async function launchKioskChromium(options: KioskChromiumOptions): Promise<KioskChromium> {
  const { display, width, height, url } = options;
  const context = await chromium.launchPersistentContext('', {
    executablePath: CHROMIUM_PATH,
    headless: false,
    timeout: LAUNCH_TIMEOUT_MS,
    viewport: null,
    ignoreDefaultArgs: ['--enable-automation'],
    args: [
      '--kiosk',
      '--no-first-run',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--force-device-scale-factor=1',
      // Chromium's own log, in the test file's log folder (testkit/artifacts.ts).
      '--enable-logging',
      `--log-file=${join(newLogDir('chromium'), 'chromium.log')}`,
      '--window-position=0,0',
      `--window-size=${width},${height}`,
      ...(options.args ?? []),
    ],
    env: { ...process.env, DISPLAY: display },
  });
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => (closing ??= context.close().catch(() => {}));
  try {
    const browser = context.browser();
    if (!browser) throw new Error('Playwright returned no Browser for the chromium persistent context');
    const page = await kioskPage(context);
    await page.goto(url);
    const deadline = Date.now() + GEOMETRY_TIMEOUT_MS;
    let geometry = await pageGeometry(page);
    while (!coversScreen(geometry, width, height)) {
      if (Date.now() > deadline) {
        throw new Error(
          `chromium on ${display} did not cover the ${width}x${height} screen within ${GEOMETRY_TIMEOUT_MS} ms: ` +
            JSON.stringify(geometry),
        );
      }
      await new Promise((resolve) => setTimeout(resolve, GEOMETRY_POLL_MS));
      geometry = await pageGeometry(page);
    }
    return { browser, context, page, close };
  } catch (err) {
    await close();
    throw err;
  }
}
