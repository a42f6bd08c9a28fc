/**
 * Browser figures through the daemon (Debian's Chromium, headless, driven by
 * Playwright inside the daemon), on a local page served on 127.0.0.1:
 *
 * - launch: the first `navigate` a fresh daemon runs (Chromium start, the
 *   session's context, the page load); one sample per daemon started;
 * - a new session's first `navigate` on a warm browser (context + tab + load);
 * - `navigate`, `left_click` (coordinate target) and `screenshot` (the
 *   daemon's format, the 1280x800 viewport) as one-call batches.
 */
import type { ToolUse } from '../src/protocol.ts';
import { startWebServer, type WebServer } from '../test/helpers/web.ts';
import { imageBytes, nextId, toolUse } from './client.ts';
import type { DaemonProcess } from './daemon-process.ts';
import { figure, ITERATIONS, mean, timeLoop, type Figure } from './stats.ts';

const PAGE = '<!doctype html><title>bench</title><button id="b" style="width:400px;height:200px">click me</button>';

export async function withWebPage<T>(fn: (url: string) => Promise<T>): Promise<T> {
  const web: WebServer = await startWebServer();
  try {
    web.route('/', PAGE);
    return await fn(`${web.origin}/`);
  } finally {
    await web.close();
  }
}

const browser = (name: string, input: Record<string, unknown> = {}): ToolUse => toolUse('browser', name, input);

/** Milliseconds of the first browser call of a fresh daemon: Chromium's launch, a context, a page load. */
export async function launchSample(daemon: DaemonProcess, url: string): Promise<number> {
  const client = await daemon.connect();
  try {
    return (await client.batch(nextId('launch'), [browser('navigate', { url })])).ms;
  } finally {
    client.close();
  }
}

export function launchFigure(samples: readonly number[]): Figure {
  return figure('browser.launch', 'browser: launch + first navigate (fresh daemon)', samples, {
    note: 'one sample per daemon started with a browser (PNG and JPEG, 1280x800)',
  });
}

/** Per-call browser figures on a daemon whose browser is already running. */
export async function browserFigures(daemon: DaemonProcess, url: string): Promise<Figure[]> {
  const sessions = 3;
  // Half the usual iterations (at least 10): browser calls are slow, and the run must stay under three minutes.
  const iterations = Math.max(10, Math.round(ITERATIONS / 2));
  const newSession = await timeLoop(
    async () => {
      const client = await daemon.connect();
      try {
        return (await client.batch(nextId('b'), [browser('navigate', { url })])).ms;
      } finally {
        client.close();
      }
    },
    sessions,
    1,
  );
  const client = await daemon.connect();
  try {
    await client.batch(nextId('b'), [browser('navigate', { url })]);
    const perCall = async (id: string, name: string, make: () => ToolUse[]): Promise<Figure> => {
      const sent: number[] = [];
      let image = 0;
      const times = await timeLoop(async () => {
        await client.paceFor(1);
        const reply = await client.batch(nextId('b'), make());
        sent.push(reply.bytes);
        image = imageBytes(reply.message);
        return reply.ms;
      }, iterations);
      return figure(id, name, times, { sent_bytes: mean(sent), ...(image ? { image_bytes: image } : {}) });
    };
    return [
      figure('browser.session', 'browser: new session, first navigate (warm browser)', newSession),
      await perCall('browser.navigate', 'browser: navigate (local page)', () => [browser('navigate', { url })]),
      await perCall('browser.click', 'browser: left_click (coordinate)', () => [
        browser('left_click', { target: { type: 'coordinate', x: 100, y: 100 } }),
      ]),
      await perCall('browser.screenshot', 'browser: screenshot png 1280x800 viewport', () => [browser('screenshot')]),
    ];
  } finally {
    client.close();
  }
}
