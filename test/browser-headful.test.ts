/**
 * The default mode: Chromium headful on the daemon's own display, so the
 * computer toolset's screenshots see what the browser shows.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import sharp from 'sharp';
import { assertApiValid } from '../testkit/api-rules.ts';
import { computerUse, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { until } from '../testkit/wait.ts';
import { browserUse, startWebServer, type WebServer } from '../testkit/web.ts';

let display: VirtualDisplay;
let web: WebServer;
let daemon: TestDaemon;

before(async () => {
  display = await startTestDisplay({ width: 1280, height: 800 });
  web = await startWebServer();
  web.route('/green', '<title>green</title><body style="margin:0;background:rgb(10,200,30)"></body>');
  daemon = await startTestDaemon({ display: display.display, browser: 'headful' });
});
after(async () => {
  await daemon?.close();
  await web?.close();
  await display?.stop();
});

/** The share of a screenshot's pixels in the page's green. */
async function greenShare(data: string): Promise<number> {
  const { data: px, info } = await sharp(Buffer.from(data, 'base64'))
    .removeAlpha()
    .raw()
    .toBuffer({ resolveWithObject: true });
  let green = 0;
  for (let i = 0; i < px.length; i += info.channels) {
    if (Math.abs(px[i]! - 10) < 8 && Math.abs(px[i + 1]! - 200) < 8 && Math.abs(px[i + 2]! - 30) < 8) green++;
  }
  return green / (info.width * info.height);
}

test('a page opened by the browser toolset shows in a computer screenshot', async () => {
  const client = await daemon.connect();
  const open = [browserUse('navigate', { url: `${web.origin}/green` })];
  const opened = await client.batch('open', open);
  assertApiValid(open, opened.result);
  assert.equal(opened.result.failures.length, 0, JSON.stringify(opened.result.failures));
  // Chromium paints the loaded page on the display a moment later: screenshots are taken until it shows.
  let share = 0;
  let n = 0;
  await until(
    'the page to cover a fifth of the desktop screenshot',
    async () => {
      const shot = [computerUse('screenshot')];
      const { result } = await client.batch(`shot-${n++}`, shot);
      assertApiValid(shot, result);
      assert.equal(result.failures.length, 0, JSON.stringify(result.failures));
      const image = result.tool_results[0]!.content[0]!;
      assert.ok(image.type === 'image');
      share = await greenShare(image.source.data);
      return share > 0.2;
    },
    {
      seen: () => `the page covered ${(share * 100).toFixed(1)}% of screenshot ${n}`,
      intervalMs: 100,
      timeoutMs: 30_000,
    },
  );
});
