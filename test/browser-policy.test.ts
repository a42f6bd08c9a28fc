/**
 * Chromium's managed policy (scripts/chromium-policy.json, src/browser/policy.ts)
 * does its work silently: a key Chromium does not know is ignored without a
 * word, so a misspelt or retired name leaves a door open while the file looks
 * right. Two kinds of test here:
 *
 * - The names: Chromium's own chrome://policy page, reading our file, says of
 *   every key that it is a policy it knows and applies.
 * - The effects, for a policy no other test proves: WebRTC reaches no address
 *   the egress proxy would refuse (`WebRtcIPHandling`). The URL blocklist and
 *   the file dialogs are proven in test/containment.test.ts.
 *
 * `npm run attack` runs this file with test/containment.test.ts.
 */
import assert from 'node:assert/strict';
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { chromium, type Browser } from 'playwright';
import { browserPolicyState, MANAGED_POLICY_DIR, POLICY_SOURCE } from '../src/browser/policy.ts';
import type { BatchResult } from '../src/base/protocol.ts';
import { CHROMIUM_PATH } from '../testkit/chromium.ts';
import type { TestClient, TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { until } from '../testkit/wait.ts';
import { browserUse, startContainedDaemon, startWebServer, type WebServer } from '../testkit/web.ts';

const texts = (r: BatchResult): string[] =>
  r.tool_results.flatMap((t) => t.content.flatMap((b) => (b.type === 'text' ? [b.text] : [])));

// ---------------------------------------------------------------- the names, in Chromium's own words

/** One row of chrome://policy: a policy that is set, and what Chromium says of it. */
interface PolicyRow {
  name: string;
  /** "OK", "Deprecated", "Error", "Ignored", … */
  status: string;
  errors: string;
  warnings: string;
}

/**
 * Reads chrome://policy's rows, which live in the shadow roots of its web
 * components. A string, not a function: tsx would add helper calls to a
 * function's text that the page does not have.
 */
const READ_POLICY_ROWS = `(() => {
  const rows = [];
  const walk = (root) => {
    for (const e of root.querySelectorAll('*')) {
      if (e.localName === 'policy-row') rows.push(e);
      if (e.shadowRoot) walk(e.shadowRoot);
    }
  };
  walk(document);
  const text = (root, selector) => root.querySelector(selector)?.textContent?.trim() ?? '';
  return rows.map((row) => {
    const r = row.shadowRoot ?? row;
    return {
      name: text(r, '#name'),
      status: text(r, '.policy.row .messages'),
      errors: text(r, '.errors.row .value'),
      warnings: text(r, '.warnings.row .value'),
    };
  });
})()`;

/**
 * Starts Chromium in a user and mount namespace of its own, where a folder
 * holding only `policy` is bound over the managed-policy folder: it reads
 * that policy and no other. The host's folder is never touched, and nothing
 * else sees the bound one. The paths reach the launcher through its
 * environment and sh's positional parameters, never through a script's text.
 */
const LAUNCHER = `#!/bin/sh
exec unshare --user --map-root-user --mount -- \\
  sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$0" "$@"' \\
  "$CHECK_CHROMIUM" "$CHECK_POLICY_DIR" "$CHECK_MANAGED_DIR" "$@"
`;

async function withPolicy<T>(
  policy: Record<string, unknown>,
  display: string | undefined,
  use: (browser: Browser) => Promise<T>,
  args: string[] = [],
): Promise<T> {
  assert.ok(
    existsSync(MANAGED_POLICY_DIR),
    `${MANAGED_POLICY_DIR} exists, to bind a policy over (npm test runs setup as root, which makes it)`,
  );
  const dir = await mkdtemp(join(tmpdir(), 'deskbatch-policy-check-'));
  try {
    const managed = join(dir, 'managed');
    await mkdir(managed);
    await writeFile(join(managed, 'checked.json'), JSON.stringify(policy));
    const launcher = join(dir, 'chromium-in-namespace');
    await writeFile(launcher, LAUNCHER, { mode: 0o755 });
    // --no-sandbox: Chromium runs as root inside its user namespace; it opens only the tests' pages.
    const browser = await chromium.launch({
      executablePath: launcher,
      args: ['--no-sandbox', ...args],
      headless: display === undefined,
      timeout: 60_000,
      env: {
        ...process.env,
        ...(display ? { DISPLAY: display } : {}),
        CHECK_CHROMIUM: CHROMIUM_PATH,
        CHECK_POLICY_DIR: managed,
        CHECK_MANAGED_DIR: MANAGED_POLICY_DIR,
      },
    });
    try {
      return await use(browser);
    } finally {
      await browser.close();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** What Chromium says of each policy in `policy`, read from its chrome://policy page (our file blocks that page: one allowlist entry opens it). */
function chromiumReadsPolicy(policy: Record<string, unknown>): Promise<PolicyRow[]> {
  return withPolicy({ ...policy, URLAllowlist: ['chrome://policy'] }, undefined, async (browser) => {
    const page = await browser.newPage();
    await page.goto('chrome://policy');
    await page.locator('policy-row').first().waitFor({ timeout: 30_000 });
    return (await page.evaluate(READ_POLICY_ROWS)) as PolicyRow[];
  });
}

describe("Chromium's managed policy: every key is a policy this Chromium knows", () => {
  test('chrome://policy reads our file and says OK of every key (a misspelt or retired name fails here)', async () => {
    const ours = JSON.parse(await readFile(POLICY_SOURCE, 'utf8')) as Record<string, unknown>;
    const rows = await chromiumReadsPolicy(ours);
    const said = new Map(rows.map((r) => [r.name, r]));
    assert.ok(said.size > 300, `chrome://policy listed ${said.size} policies: the page was not read`);
    const wrong = Object.keys(ours).flatMap((key) => {
      const row = said.get(key);
      // "Deprecated" policies are still applied; Chromium retires them later (then "Unknown policy.").
      if (row && (row.status === 'OK' || row.status === 'Deprecated') && !row.errors) return [];
      return [`${key}: ${row ? `${row.status} ${row.errors} ${row.warnings}`.trim() : 'not listed'}`];
    });
    assert.deepEqual(wrong, [], 'keys of scripts/chromium-policy.json that this Chromium does not apply');
    // The check itself: a name Chromium does not know is reported as such.
    const misspelt = await chromiumReadsPolicy({ WebRtcIPHandlingPolicy: 'disable_non_proxied_udp' });
    assert.match(misspelt.find((r) => r.name === 'WebRtcIPHandlingPolicy')?.errors ?? '', /Unknown policy/);
  });
});

// ---------------------------------------------------------------- what the keys shut, seen in a page

/**
 * A page API that would put a prompt or a chooser in front of whoever drives
 * the headful browser (the model clicks "Allow" as easily as a person), and
 * the policy keys that refuse it at once instead. `refused` is what the page
 * sees then.
 */
interface Probe {
  /** The keys that refuse it: each one alone does, and without all of them the call is not refused. */
  keys: string[];
  call: string;
  refused: RegExp;
}

const PROBES: Probe[] = [
  {
    keys: ['AudioCaptureAllowed'],
    call: 'navigator.mediaDevices.getUserMedia({ audio: true })',
    refused: /^NotAllowedError: Permission denied/,
  },
  {
    keys: ['VideoCaptureAllowed'],
    call: 'navigator.mediaDevices.getUserMedia({ video: true })',
    refused: /^NotAllowedError: Permission denied/,
  },
  {
    keys: ['ScreenCaptureAllowed'],
    call: 'navigator.mediaDevices.getDisplayMedia({ video: true })',
    refused: /^NotAllowedError: Permission denied/,
  },
  { keys: ['DefaultFileSystemReadGuardSetting'], call: 'showOpenFilePicker()', refused: /^NotAllowedError: / },
  // A Save picker needs read and write access: either guard refuses it.
  {
    keys: ['DefaultFileSystemWriteGuardSetting', 'DefaultFileSystemReadGuardSetting'],
    call: 'showSaveFilePicker()',
    refused: /^NotAllowedError: /,
  },
  {
    keys: ['DefaultWebUsbGuardSetting'],
    call: 'navigator.usb.requestDevice({ filters: [] })',
    refused: /^NotFoundError: /,
  },
  { keys: ['DefaultSerialGuardSetting'], call: 'navigator.serial.requestPort()', refused: /^NotFoundError: / },
  // WebHID answers a blocked request with no device rather than an error.
  {
    keys: ['DefaultWebHidGuardSetting'],
    call: 'navigator.hid.requestDevice({ filters: [] })',
    refused: /^resolved: 0$/,
  },
];

/**
 * The probe page: `run(call)` arms the button; the test's click (a user
 * gesture, which these APIs need) makes the call, and the page reports how it
 * settled, or "pending" while a prompt or chooser waits for someone.
 */
const PROBE_PAGE = `<title>probe</title><button id="go" style="width: 300px; height: 100px">go</button><script>
  window.run = (call, pendingMs) => new Promise((resolve) => {
    document.getElementById('go').onclick = () => {
      new Promise((ok) => ok((0, eval)(call))).then(
        (v) => resolve('resolved: ' + (Array.isArray(v) ? v.length : typeof v)),
        (e) => resolve(e.name + ': ' + e.message),
      );
      setTimeout(() => resolve('pending'), pendingMs);
    };
  });
</script>`;

/** How each probe settles in a headful Chromium whose managed policy is `policy` alone; a new page each. */
function probe(
  policy: Record<string, unknown>,
  probes: Probe[],
  display: string,
  url: string,
  pendingMs: number,
): Promise<string[]> {
  return withPolicy(
    policy,
    display,
    async (browser) => {
      const outcomes: string[] = [];
      for (const p of probes) {
        const context = await browser.newContext();
        const page = await context.newPage();
        await page.goto(url);
        const outcome = page.evaluate(([call, ms]) => (globalThis as unknown as ProbeWindow).run(call, ms), [
          p.call,
          pendingMs,
        ] as const);
        await page.click('#go');
        outcomes.push(await outcome);
        await context.close();
      }
      return outcomes;
    },
    // A camera and a microphone to ask for: without them the calls fail for want of a device.
    ['--use-fake-device-for-media-stream'],
  );
}

interface ProbeWindow {
  run(call: string, pendingMs: number): Promise<string>;
}

describe("Chromium's managed policy: what each key shuts, seen in a page", () => {
  let display: VirtualDisplay;
  let web: WebServer;
  before(async () => {
    display = await startTestDisplay({ width: 1024, height: 768 });
    web = await startWebServer();
    web.route('/probe', PROBE_PAGE);
  });
  after(async () => {
    await web?.close();
    await display?.stop();
  });

  test('microphone, camera, screen, file pickers, USB, serial and HID: refused at once; without the key, a prompt waits', async () => {
    const ours = JSON.parse(await readFile(POLICY_SOURCE, 'utf8')) as Record<string, unknown>;
    const url = `${web.origin}/probe`;
    // With our file, each call is refused at once (the long wait is only for a busy machine).
    const withOurs = await probe(ours, PROBES, display.display, url, 20_000);
    assert.deepEqual(
      PROBES.flatMap((p, i) => (p.refused.test(withOurs[i]!) ? [] : [`${p.keys}: ${p.call} -> ${withOurs[i]}`])),
      [],
      'calls our policy let through',
    );
    // Without its keys (every other key kept), the same call is not refused: a prompt or chooser
    // waits, or another part says no. With one of its keys alone, it is refused again. So each key
    // is what refuses its call, and the probe can fail.
    const without = (keys: string[]): Record<string, unknown> =>
      Object.fromEntries(Object.entries(ours).filter(([key]) => !keys.includes(key)));
    const seen = PROBES.map((p, i) => `${p.call}: ${withOurs[i]}`);
    for (const p of PROBES) {
      const [open] = await probe(without(p.keys), [p], display.display, url, 1_500);
      seen.push(`${p.call} without ${p.keys}: ${open}`);
      assert.doesNotMatch(open!, p.refused, `${p.call} is refused without ${p.keys} too: the probe proves nothing`);
      if (p.keys.length < 2) continue;
      for (const key of p.keys) {
        const [alone] = await probe(without(p.keys.filter((k) => k !== key)), [p], display.display, url, 20_000);
        assert.match(alone!, p.refused, `${key} alone refuses ${p.call}`);
      }
    }
    console.log(`# policy probes:\n${seen.join('\n')}`);
  });
});

// ---------------------------------------------------------------- WebRTC goes through the proxy, or nowhere

/** A UDP or TCP listener on a loopback address the daemon does not allow, counting what reaches it. */
interface Listener {
  what: string;
  address: string;
  port: number;
  /** UDP datagrams received, or TCP connections accepted. */
  hits: number;
  close(): Promise<void>;
}

async function udpListener(what: string, address: string): Promise<Listener> {
  const socket: UdpSocket = createSocket('udp4');
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(0, address, resolve);
  });
  const listener: Listener = {
    what,
    address,
    port: socket.address().port,
    hits: 0,
    close: () => new Promise((resolve) => socket.close(() => resolve())),
  };
  socket.on('message', () => listener.hits++);
  return listener;
}

async function tcpListener(what: string, address: string): Promise<Listener> {
  const server: Server = createServer((socket) => {
    listener.hits++;
    socket.destroy();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, address, resolve);
  });
  const listener: Listener = {
    what,
    address,
    port: (server.address() as AddressInfo).port,
    hits: 0,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
  return listener;
}

describe('WebRTC reaches no address the egress proxy would refuse (policy WebRtcIPHandling)', () => {
  let web: WebServer;
  let d: TestDaemon;
  let c: TestClient;
  const listeners: Listener[] = [];
  before(async () => {
    const state = await browserPolicyState();
    assert.ok(state.enforced, `Chromium's managed policy is installed (npm test runs setup as root): ${state.missing}`);
    web = await startWebServer();
    listeners.push(
      await udpListener('STUN', '127.0.0.1'),
      await udpListener('STUN', '127.0.0.2'),
      await udpListener('TURN over UDP', '127.0.0.1'),
      await tcpListener('TURN over TCP', '127.0.0.2'),
      await tcpListener('TURN over TLS', '127.0.0.1'),
    );
    // Only the page's own host and port are allowed, as an operator serving one local site would.
    // The policy alone: in a desktop's sandbox (the default) the browser's network has no interface
    // but loopback, and WebRTC gathers nothing at all, which would hide what the policy does.
    d = await startContainedDaemon(web, 'off');
    c = await d.connect();
  });
  after(async () => {
    await d?.close();
    await web?.close();
    await Promise.all(listeners.map((l) => l.close()));
  });

  test('STUN and TURN (UDP, TCP, TLS) servers on loopback see not one packet or connection', async () => {
    const [stun1, stun2, turnUdp, turnTcp, turnTls] = listeners as [Listener, Listener, Listener, Listener, Listener];
    const turn = { username: 'user', credential: 'secret' };
    const configs = [
      { iceServers: [{ urls: [`stun:${stun1.address}:${stun1.port}`, `stun:${stun2.address}:${stun2.port}`] }] },
      {
        iceTransportPolicy: 'relay',
        iceServers: [
          { urls: `turn:${turnUdp.address}:${turnUdp.port}?transport=udp`, ...turn },
          { urls: `turn:${turnTcp.address}:${turnTcp.port}?transport=tcp`, ...turn },
          { urls: `turns:${turnTls.address}:${turnTls.port}?transport=tcp`, ...turn },
        ],
      },
    ];
    // Each peer connection opens a data channel and makes an offer, which starts gathering; the
    // page reports once gathering is complete (or after 8 s), and shows it in its text.
    web.route(
      '/webrtc',
      `<title>webrtc</title><p id="out">running</p><script>
        const gather = (config) => new Promise((resolve) => {
          const pc = new RTCPeerConnection(config);
          const candidates = [];
          const done = () => resolve({ state: pc.iceGatheringState, candidates });
          pc.onicecandidate = (e) => e.candidate ? candidates.push(e.candidate.type + '/' + e.candidate.protocol) : done();
          pc.createDataChannel('probe');
          pc.createOffer().then((offer) => pc.setLocalDescription(offer));
          setTimeout(done, 8000);
        });
        Promise.all(${JSON.stringify(configs)}.map(gather)).then((outcomes) => {
          const summary = JSON.stringify(outcomes);
          document.getElementById('out').textContent = 'webrtc ran: ' + summary;
          return fetch('/done', { method: 'POST', body: summary });
        });
      </script>`,
    );
    const nav = await c.batch('webrtc', [browserUse('navigate', { url: `${web.origin}/webrtc` })]);
    assert.deepEqual(nav.result.failures, []);
    const done = await until(
      'the WebRTC page to report its gathering',
      () => web.requests.find((r) => r.path === '/done'),
      { timeoutMs: 30_000 },
    );
    const read = await c.batch('read', [browserUse('get_page_text')]);
    assert.match(texts(read.result).join('\n'), /webrtc ran: /, 'the page ran its peer connections');
    const counts = listeners.map((l) => `${l.what} ${l.address}:${l.port}: ${l.hits}`);
    // TCP goes to the egress proxy, which refuses these addresses: its log names each TURN server's
    // port (the daemon writes its log as it goes, so the lines are waited for).
    const refused = async (): Promise<string[]> =>
      (await readFile(d.logFile, 'utf8')).split('\n').filter((line) => line.includes('browser request refused'));
    const refusals = await until(
      'the egress proxy to refuse the TURN servers over TCP and TLS',
      async () => {
        const lines = await refused();
        return [turnTcp, turnTls].every((l) => lines.some((line) => line.includes(`:${l.port}`))) && lines;
      },
      { seen: refused },
    );
    console.log(
      `# webrtc: page saw ${done.body}; listeners: ${counts.join(', ')}; proxy refusals: ${refusals.filter((line) => listeners.some((l) => line.includes(`:${l.port}`))).length}`,
    );
    assert.deepEqual(
      listeners.filter((l) => l.hits > 0).map((l) => `${l.what} ${l.address}:${l.port}: ${l.hits}`),
      [],
      `nothing reached a listener (page: ${done.body})`,
    );
  });
});
