/**
 * The client half of scripts/image-test.sh's smoke test. It runs inside the
 * built image's file system, with the image's own node and the client library
 * the image carries (dist/src/client), as the image's user. It:
 *
 *   1. waits for the daemon's /readyz to answer 200, until a deadline;
 *   2. serves a tiny page on 127.0.0.1 (the daemon was started with
 *      `--allow-private 127.0.0.1:PAGE_PORT`, since its browser reaches no
 *      loopback address otherwise);
 *   3. connects with DESKBATCH_TOKEN, reads `welcome`, and runs one batch:
 *      a browser `navigate` to that page, then a computer `screenshot`;
 *   4. checks that every tool_use got a result, none an error, and that the
 *      screenshot is a PNG image.
 *
 * Usage: node dist/scripts/image-smoke.js DAEMON_PORT PAGE_PORT [DEADLINE_MS]
 * (compiled by scripts/build.js: the image has no loader; from a checkout,
 * `node --import tsx scripts/image-smoke.ts …` runs it too)
 *
 * Every check is printed as one line, `PASS text` or `FAIL text`, which the
 * shell script collects; the exit status is 0 only when all passed.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DeskbatchClient } from '../src/client/index.ts';

const [daemonPort, pagePort, deadlineArg] = process.argv.slice(2).map(Number);
if (!daemonPort || !pagePort) {
  console.error('usage: image-smoke.ts DAEMON_PORT PAGE_PORT [DEADLINE_MS]');
  process.exit(2);
}
const token = process.env.DESKBATCH_TOKEN;
if (!token) {
  console.error('image-smoke: DESKBATCH_TOKEN is not set');
  process.exit(2);
}
const deadlineMs = deadlineArg || 90_000;
const base = `http://127.0.0.1:${daemonPort}`;
const TITLE = 'deskbatch image smoke test';

let failed = false;
function report(ok: boolean, text: string): void {
  if (!ok) failed = true;
  console.log(`${ok ? 'PASS' : 'FAIL'} ${text}`);
}

/** GET /readyz until it answers 200 or the deadline passes; the last answer either way. */
async function waitReady(): Promise<{ ok: boolean; ms: number; last: string }> {
  const start = Date.now();
  let last = 'no answer yet';
  while (Date.now() - start < deadlineMs) {
    try {
      const res = await fetch(`${base}/readyz`, { signal: AbortSignal.timeout(5_000) });
      last = `${res.status} ${(await res.text()).slice(0, 400)}`;
      if (res.status === 200) return { ok: true, ms: Date.now() - start, last };
    } catch (err) {
      last = `no answer (${(err as Error).cause ?? (err as Error).message})`;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  return { ok: false, ms: Date.now() - start, last };
}

const ready = await waitReady();
report(
  ready.ok,
  ready.ok
    ? `/readyz answered 200 after ${ready.ms} ms: ${ready.last.slice(4)}`
    : `/readyz did not answer 200 within ${deadlineMs} ms; last answer: ${ready.last}`,
);
if (!ready.ok) process.exit(1);

const page = createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
  res.end(`<!doctype html><title>${TITLE}</title><h1 style="font: 48px sans-serif">${TITLE}</h1>`);
});
await new Promise<void>((resolve, reject) => {
  page.once('error', reject);
  page.listen(pagePort, '127.0.0.1', resolve);
});
const pageUrl = `http://127.0.0.1:${(page.address() as AddressInfo).port}/`;

let client: DeskbatchClient | undefined;
try {
  const connecting = Date.now();
  client = await DeskbatchClient.connect(`ws://127.0.0.1:${daemonPort}/v1`, {
    token,
    clientName: 'image-smoke',
    reconnect: false,
    // hello.desktop (docs/PROTOCOL.md "Desktops") asks for welcome.desktop; a daemon without a pool ignores it.
    desktop: {},
    // In a pool, welcome waits for the session's desktop, which may still be starting.
    handshakeTimeoutMs: 60_000,
  });
  const welcome = client.welcome as typeof client.welcome & { desktop?: unknown };
  report(
    true,
    `hello answered by welcome after ${Date.now() - connecting} ms: session ${welcome.session_id}, toolsets ${client.toolsetNames.join(', ')}, display ${JSON.stringify(welcome.display)}`,
  );
  console.log(`INFO welcome.desktop ${welcome.desktop === undefined ? 'absent' : JSON.stringify(welcome.desktop)}`);

  const uses = [
    { type: 'tool_use', id: 'toolu_smoke_nav', name: 'navigate', toolset_name: 'browser', input: { url: pageUrl } },
    { type: 'tool_use', id: 'toolu_smoke_shot', name: 'screenshot', toolset_name: 'computer', input: {} },
  ] as const;
  const started = Date.now();
  const { toolResults, result } = await client.runBatch(uses);
  const ms = Date.now() - started;
  const byId = new Map(toolResults.map((r) => [r.tool_use_id, r]));
  const missing = uses.filter((u) => !byId.has(u.id)).map((u) => u.id);
  const errors = toolResults.filter((r) => r.is_error).map((r) => `${r.tool_use_id}: ${JSON.stringify(r.content)}`);
  report(
    missing.length === 0 && errors.length === 0 && !result.cancelled,
    `batch (browser navigate, computer screenshot) answered in ${ms} ms: ${toolResults.length} results` +
      (missing.length ? `; missing ${missing.join(', ')}` : '') +
      (errors.length ? `; errors ${errors.join('; ').slice(0, 600)}` : '') +
      (result.cancelled ? '; cancelled' : ''),
  );
  const navText = byId
    .get('toolu_smoke_nav')
    ?.content.map((b) => (b.type === 'text' ? b.text : b.type))
    .join(' ');
  report(
    navText?.includes(TITLE) ?? false,
    `navigate opened the local page (its result names the title): ${navText?.slice(0, 160)}`,
  );
  const image = byId.get('toolu_smoke_shot')?.content.find((b) => b.type === 'image');
  const png = image ? Buffer.from(image.source.data, 'base64') : Buffer.alloc(0);
  const isPng = png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
  const size = isPng ? `${png.readUInt32BE(16)}x${png.readUInt32BE(20)}` : 'none';
  report(
    image?.source.media_type === 'image/png' && isPng,
    `the screenshot is an image: ${image?.source.media_type ?? 'no image block'}, ${png.length} bytes, ${size}`,
  );
  const files = result.screenshots.map((s) => s.path);
  console.log(`INFO screenshot files ${JSON.stringify(files)}`);
  // Now that the browser has started, /readyz says whether Chromium got its renderer sandbox.
  const after = await fetch(`${base}/readyz`);
  console.log(`INFO /readyz after the batch: ${after.status} ${(await after.text()).slice(0, 400)}`);
} catch (err) {
  report(false, `the session failed: ${(err as Error).name}: ${(err as Error).message}`);
} finally {
  await client?.close();
  await new Promise((r) => page.close(r));
}
process.exit(failed ? 1 : 0);
