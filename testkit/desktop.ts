/**
 * A whole desktop for end-to-end tests: a fresh Xvfb with openbox, the event
 * recorder page in kiosk Chromium (page pixel = display pixel), and a daemon
 * driving that display. `close()` stops everything, each by its own handle.
 *
 * After a batch, `drain()` returns everything the page recorded once every
 * input event sent so far has reached it (an input fence, input-fence.ts),
 * and `waitFor()` waits for a condition on the record with a deadline.
 */
import assert from 'node:assert/strict';
import type { Page } from 'playwright';
import type { BatchResult, ImageBlock, ToolEvent, ToolUse } from '../src/base/protocol.ts';
import { assertApiValid, type ApiRulesOptions } from './api-rules.ts';
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
  type RecordedMouseEvent,
  type RecordedWheel,
} from './event-page.ts';
import { isWheelMarker } from './input-fence.ts';

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
    const daemon = await startTestDaemon({
      display: display.display,
      // Screenshots read the framebuffer, as with the daemon's own Xvfb (test/desktop-capture.test.ts covers libnut's grab).
      displayFramebuffer: display.framebuffer,
      ...daemonOverrides,
    });
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

// ---------------------------------------------------------------------------
// What the computer and older-tool tests (test/computer.test.ts,
// test/computer-legacy.test.ts) both do with a desktop and its record.

/** The text the computer toolset gives a call after an earlier one of the turn failed (its `not_executed_text`). */
export const COMPUTER_NOT_EXECUTED = 'Not executed: an earlier computer action in this turn failed.';

/** Runs a batch on the desktop's client; the result must be one the Messages API accepts (`assertApiValid`). */
export async function runBatch(
  d: TestDesktop,
  toolUses: ToolUse[],
  batchId = `b${Math.random().toString(36).slice(2)}`,
  apiRules: ApiRulesOptions = {},
): Promise<{ result: BatchResult; events: ToolEvent[] }> {
  const { result, events } = await d.client.batch(batchId, toolUses);
  return { result: assertApiValid(toolUses, result, apiRules), events };
}

/** The text of each result's first block (undefined when it is not text). */
export function texts(result: BatchResult): (string | undefined)[] {
  return result.tool_results.map((r) => (r.content[0]?.type === 'text' ? r.content[0].text : undefined));
}

/** The recorded mouse events of one type. */
export function mouseEvents(events: RecordedEvent[], type: RecordedMouseEvent['type']): RecordedMouseEvent[] {
  return events.filter((e): e is RecordedMouseEvent => e.type === type);
}

/** Where the recorded mouse events of one type happened, in page pixels. */
export function mousePoints(events: RecordedEvent[], type: RecordedMouseEvent['type']): [number, number][] {
  return mouseEvents(events, type).map((e) => [e.clientX, e.clientY]);
}

/** The wheel events that reached the page since the last drain, without the fence's own markers. */
export async function drainWheels(d: TestDesktop): Promise<RecordedWheel[]> {
  return (await d.drainWheel()).filter((e): e is RecordedWheel => e.type === 'wheel' && !isWheelMarker(e));
}

/** The first block of the first result, which must be an image. */
export function firstImage(result: BatchResult): ImageBlock {
  const block = result.tool_results[0]!.content[0]!;
  assert.ok(block.type === 'image', `the first block is an image, not ${block.type}`);
  return block;
}
