/**
 * A session's open tabs: their ids (`tab-1`, `tab-2`, …, never reused within
 * the session), which one is active, the inventory `browser_state` lists, and
 * what each tab logged (console, network) since the model last read it.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { ConsoleMessage, Page, Request } from 'playwright';
import { oneLine } from '../base/text.ts';

/** browser_state lists at most this many tabs (docs/TOOLSETS.md E). */
export const TABS_MAX = 100;
/** How long the inventory waits for one tab's title. */
const TITLE_WAIT_MS = 500;
/** Console messages and requests kept per tab between reads (oldest dropped first). */
const LOG_RING_MAX = 500;
/** Longest console line kept, in UTF-16 code units. */
const CONSOLE_LINE_MAX = 1_000;

export interface TabEntry {
  tab_id: string;
  title: string;
  url: string;
  active?: boolean;
}

/** What a tab logged since the model last read it (read_console, read_network). */
export class TabLog {
  private readonly console: string[] = [];
  private readonly network: Request[] = [];

  constructor(page: Page) {
    page.on('console', (message) => push(this.console, consoleLine(message)));
    page.on('requestfinished', (request) => push(this.network, request));
    page.on('requestfailed', (request) => push(this.network, request));
  }

  /** Console lines since the last read, oldest first; reading empties the buffer. */
  drainConsole(): string[] {
    return this.console.splice(0);
  }

  /** Requests that finished or failed since the last read, oldest first; reading empties the buffer. */
  drainNetwork(): Request[] {
    return this.network.splice(0);
  }
}

interface Tab {
  page: Page;
  log: TabLog;
}

export class Tabs {
  private readonly open = new Map<string, Tab>();
  private readonly ids = new WeakMap<Page, string>();
  private nextTab = 1;
  private activeId: string | undefined;
  /** Tabs close_tab is closing. */
  private readonly closingOnRequest = new Set<string>();
  /** Tabs that closed since the last successful result without close_tab asking (see closed). */
  goneUnasked = 0;

  get size(): number {
    return this.open.size;
  }

  get active(): string | undefined {
    return this.activeId;
  }

  /** Makes `id` the active tab (switch_tab, new_tab). */
  activate(id: string): void {
    this.activeId = id;
  }

  page(id: string): Page | undefined {
    return this.open.get(id)?.page;
  }

  log(id: string): TabLog | undefined {
    return this.open.get(id)?.log;
  }

  /** The id of a page already listed. */
  idOf(page: Page): string | undefined {
    return this.ids.get(page);
  }

  /**
   * Lists a new page under the next id, as the active tab (a tab the page
   * opened comes to the front, as for a person), and starts keeping its log.
   */
  add(page: Page): string {
    const id = `tab-${this.nextTab++}`;
    const tab: Tab = { page, log: new TabLog(page) };
    this.ids.set(page, id);
    this.open.set(id, tab);
    this.activeId = id;
    return id;
  }

  /** close_tab is closing `id`: its close is not news to the model. */
  closingAsked(id: string): void {
    this.closingOnRequest.add(id);
  }

  /**
   * A page closed. Not closed by close_tab: the page closed itself, or the
   * browser died (Playwright closes every page first, then reports the
   * disconnect); counted until a result shows the model the tabs there are.
   */
  closed(id: string): void {
    if (!this.closingOnRequest.delete(id) && this.open.has(id)) this.goneUnasked++;
    this.forget(id);
  }

  forget(id: string): void {
    if (!this.open.delete(id)) return;
    if (this.activeId === id) this.activeId = [...this.open.keys()].at(-1);
  }

  /** Forgets every tab (their context is gone); ids are not reused. */
  clear(): void {
    this.open.clear();
    this.activeId = undefined;
  }

  async inventory(): Promise<TabEntry[]> {
    const titles = new Map<string, string>();
    for (const [tab_id, { page }] of [...this.open]) {
      // A page stuck in a script must not block every call of the session: its title is then ''.
      titles.set(tab_id, await Promise.race([page.title().catch(() => ''), sleep(TITLE_WAIT_MS).then(() => '')]));
    }
    // Tabs may open or close while titles are read: list the tabs open now, and the active one now
    // (a tab that closed meanwhile moved the active mark; listing it would leave no tab active).
    if (this.activeId === undefined || !this.open.has(this.activeId)) this.activeId = [...this.open.keys()].at(-1);
    return [...this.open].map(([tab_id, { page }]) => ({
      tab_id,
      title: titles.get(tab_id) ?? '',
      url: page.url(),
      ...(tab_id === this.activeId ? { active: true } : {}),
    }));
  }
}

function push<T>(ring: T[], item: T): void {
  ring.push(item);
  if (ring.length > LOG_RING_MAX) ring.splice(0, ring.length - LOG_RING_MAX);
}

function consoleLine(message: ConsoleMessage): string {
  return `[${message.type()}] ${oneLine(message.text())}`.slice(0, CONSOLE_LINE_MAX);
}
