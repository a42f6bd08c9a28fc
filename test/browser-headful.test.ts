/**
 * The default mode: Chromium headful on the daemon's own display, so the
 * computer toolset's screenshots see what the browser shows.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import sharp from 'sharp';
import { assertApiValid } from './helpers/api-rules.ts';
import { computerUse, startTestDaemon, type TestDaemon } from './helpers/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from './helpers/display.ts';
import { browserUse, startWebServer, type WebServer } from './helpers/web.ts';

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

test('a page opened by the browser toolset shows in a computer screenshot', async () => {
  const client = await daemon.connect();
  const uses = [
    browserUse('navigate', { url: `${web.origin}/green` }),
    computerUse('wait', { duration: 1 }),
    computerUse('screenshot'),
  ];
  const { result } = await client.batch('headful', uses);
  assertApiValid(uses, result);
  assert.equal(result.failures.length, 0, JSON.stringify(result.failures));
  const image = result.tool_results[2]!.content[0]!;
  assert.ok(image.type === 'image');
  const { data, info } = await sharp(Buffer.from(image.source.data, 'base64'))
    .removeAlpha()
    .raw()
    .toBuffer({ resolveWithObject: true });
  let green = 0;
  for (let i = 0; i < data.length; i += info.channels) {
    if (Math.abs(data[i]! - 10) < 8 && Math.abs(data[i + 1]! - 200) < 8 && Math.abs(data[i + 2]! - 30) < 8) green++;
  }
  const share = green / (info.width * info.height);
  assert.ok(share > 0.2, `the page covers ${(share * 100).toFixed(1)}% of the desktop screenshot`);
});
