/**
 * What the call that runs now set off, so that it lands in the call's own
 * result: the tabs it opened (`tab_opened`), popups Chromium announced that
 * Playwright has not turned into pages yet, and navigations, which the call
 * waits for until their document is parsed (as a person would wait), so the
 * next call in the batch sees the new page.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Page, Request } from 'playwright';

/**
 * How long a call's end waits for a popup the call opened to reach Playwright
 * (measured 60–800 ms after the click returned on a loaded VM).
 */
const POPUP_WAIT_MS = 1_500;
/** After an action: how long the round trip to the page may take (a page stuck in a script answers late). */
const NAVIGATION_START_WAIT_MS = 200;
/** How long a call waits for a navigation it set off to reach DOMContentLoaded. */
const NAVIGATION_WAIT_MS = 5_000;

/**
 * How actions' settling ended (CallWatch.actionSettled), counted over a
 * browser's sessions: a navigation the action asked for (waited for), the
 * round trip back with none asked for, the round trip's cap reached (a page
 * busy in a script), or a tab with no CDP session to ask (not watched yet,
 * or closed). Tests read it: an action that navigates nowhere ends on the
 * round trip, never on a timer.
 */
export interface SettleCounts {
  navigation: number;
  roundTrip: number;
  capped: number;
  unwatched: number;
}

export class CallWatch {
  /** The call that runs now: a call that timed out and finished later must not end it. */
  private token: object = {};
  private inCall = false;
  /** Browser deaths counted when the call began: a death during the call fails it with BrowserCrashedError. */
  private deathsAtBegin = 0;
  /** Tabs opened since the current call began. */
  private opened: string[] = [];
  /** Tabs opened between calls (a page's timer, a popup late for its call): news for the next call's result. */
  private openedBetween: string[] = [];
  /** Navigations set off during the current call, each settling at DOMContentLoaded, failure or timeout. */
  private navigations: Promise<void>[] = [];
  /**
   * Popups Chromium announced (Page.windowOpen, sent before the click that
   * opens one returns) that Playwright has not yet turned into a Page: its
   * 'page' event can come several hundred ms after the call returned.
   */
  private popupsPending = 0;
  constructor(private readonly settles: SettleCounts) {}

  /** Set while the session opens a tab itself (new_tab), so the tab is not taken for a popup. */
  openingTab = false;
  /** The tab a `new_tab` call opened: the only `tab_opened` its result may carry (the API's rule). */
  newTab: string | undefined;

  /** Starts a call, with the browser deaths counted so far; the token lets a call that finishes late be ignored. */
  begin(deaths: number): object {
    const token = {};
    this.token = token;
    this.inCall = true;
    this.deathsAtBegin = deaths;
    this.opened = this.openedBetween;
    this.openedBetween = [];
    this.navigations = [];
    this.newTab = undefined;
    return token;
  }

  /** The token of the call that runs now (see begin). */
  get currentToken(): object {
    return this.token;
  }

  /** Whether `token` is the call that runs now. */
  current(token: object): boolean {
    return token === this.token;
  }

  /** Ends the call: the tabs it opened (and which one new_tab opened), and the deaths counted when it began. */
  end(): { opened: string[]; newTab: string | undefined; deathsAtBegin: number } {
    this.inCall = false;
    const { opened, newTab } = this;
    this.opened = [];
    this.newTab = undefined;
    return { opened, newTab, deathsAtBegin: this.deathsAtBegin };
  }

  /** The session's tabs died with their context: no popup of theirs will arrive. */
  contextLost(): void {
    this.popupsPending = 0;
    this.openedBetween = []; // those tabs died with the context
    this.openingTab = false; // a newPage() the old browser left pending never settles
  }

  /** Chromium decided to open a popup. */
  popupAnnounced(): void {
    this.popupsPending++;
  }

  /** A tab was listed: opened during the call, and maybe a popup that was announced. */
  tabOpened(id: string): void {
    (this.inCall ? this.opened : this.openedBetween).push(id);
    if (!this.openingTab && this.popupsPending > 0) this.popupsPending--;
  }

  /**
   * A navigation this call set off (a link click, Enter in a form) is waited
   * for until its new document is parsed, so the next call in the batch (a
   * screenshot, read_page) sees the new page, as a person would wait.
   */
  onRequest(page: Page, request: Request): void {
    if (request.isNavigationRequest() && request.frame() === page.mainFrame()) this.awaitDocument(page, request);
  }

  /** Waits (within this call) until `page` parses a new document, its navigation fails, or NAVIGATION_WAIT_MS pass. */
  awaitDocument(page: Page, request?: Request): void {
    if (!this.inCall) return;
    this.navigations.push(
      new Promise<void>((resolve) => {
        const done = (): void => {
          clearTimeout(timer);
          page.off('domcontentloaded', done);
          page.off('requestfailed', failed);
          page.off('close', done);
          resolve();
        };
        const failed = (r: Request): void => {
          if (!request || r === request) done();
        };
        const timer = setTimeout(done, NAVIGATION_WAIT_MS);
        page.on('domcontentloaded', done);
        page.on('requestfailed', failed);
        page.on('close', done);
      }),
    );
  }

  /**
   * After an action (a click, a key): whether it asked for a navigation.
   * Chromium says so itself, in `Page.frameRequestedNavigation` on the tab's
   * CDP session (session.ts `watchPopups`), which then makes the call wait
   * for the new document (`awaitDocument`). The event is sent by the renderer
   * while it handles the input (a link, a script setting `location` in a
   * click handler), or in the task right after it (a form's submission is
   * a task of its own): so it may still be on its way when the action
   * returns. `roundTrip` is one command on that same CDP session, handled by
   * the renderer after the input: its answer comes after any event the
   * renderer sent before, so once it is back, a navigation the action asked
   * for has been seen, and an action that asked for none returns at once.
   * (The request event alone comes too late: 3 of 8 link clicks reported
   * the old URL when only requests were watched. The round trip used to go
   * through Playwright's own session, which nothing orders with this one's
   * events, and a fixed 30 ms grace followed it.)
   */
  async actionSettled(roundTrip: (() => Promise<unknown>) | undefined, acted: boolean): Promise<void> {
    if (!acted) return;
    let capped = false;
    if (this.navigations.length === 0 && roundTrip) {
      let timer: NodeJS.Timeout | undefined;
      capped = await Promise.race([
        roundTrip().then(
          () => false,
          () => false,
        ),
        new Promise<boolean>((resolve) => (timer = setTimeout(resolve, NAVIGATION_START_WAIT_MS, true))),
      ]);
      clearTimeout(timer);
    }
    this.settles[
      this.navigations.length !== 0 ? 'navigation' : capped ? 'capped' : roundTrip ? 'roundTrip' : 'unwatched'
    ]++;
  }

  /**
   * Waits for a popup that Chromium created but Playwright has not announced
   * yet (its 'page' event can come a little after a click returns).
   */
  async popupsSettled(connected: () => boolean): Promise<void> {
    const deadline = performance.now() + POPUP_WAIT_MS;
    while (this.popupsPending > 0 && performance.now() < deadline && connected()) await sleep(20);
    // A popup later than that is listed, with its tab_opened, on the next call's result (openedBetween).
    this.popupsPending = 0;
  }

  /** Waits for the navigations this call set off. */
  async navigationsSettled(): Promise<void> {
    await Promise.all(this.navigations);
    this.navigations = [];
  }
}
