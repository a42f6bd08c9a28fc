/**
 * DeskbatchClient.connectFleet (src/client/fleet.ts) against a fleet made of
 * real parts on loopback: three real pool daemons (`--desktops 1`, no browser:
 * computer calls only), each a "pod" `desk-N` with its own port (a TCP proxy
 * the test can cut, testkit/tcp-proxy.ts), its own `--instance desk-N/<uid>`
 * and its own token; and a real DNS server (dnsmasq, testkit/dns-server.ts)
 * answering SRV and A records as Kubernetes' DNS does for the two headless
 * Services of deploy/k8s: `desks` names every pod, `desks-free` lists only the
 * pods with a free desktop (its targets carry no pod name, only addresses).
 * The client's resolver asks that server. Changing who is in `desks-free`
 * (what a kubelet's readiness probe does) is a restart of the DNS server.
 *
 * Each pod's token is derived here as docs/DEPLOY.md "Per-pod tokens" writes
 * it, with `openssl dgst -hmac` (not the client's code), from a fleet key and
 * the pod's name and uid. Each scenario prints its placement table
 * (session → pod).
 */
import assert from 'node:assert/strict';
import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  ConnectError,
  DeskbatchClient,
  HandshakeRefusedError,
  SessionLostError,
  type FleetOptions,
  type ToolEvent,
} from '../src/client/index.ts';
import { runToolBytes } from '../src/base/child-process.ts';
import { resolveConfig } from '../src/base/config.ts';
import { computerUse, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { startDnsServer, type DnsRecords, type TestDnsServer } from '../testkit/dns-server.ts';
import { PYTHON, runPython } from '../testkit/python.ts';
import { startProxy, type Proxy } from '../testkit/tcp-proxy.ts';
import { nextEvent, until, within } from '../testkit/wait.ts';

const DOMAIN = 'deskbatch.svc.cluster.local';
const SIZE = { width: 1024, height: 768 };
/** A desktop (Xvfb, openbox, its worker) starts or is rebuilt: slow on a loaded 2-core machine. */
const START_MS = 60_000;
/**
 * How long a session and its desktop outlive a dropped connection: long enough for a reconnect on a busy
 * machine, short enough that a closed session's desktop is freed soon (there is no "end session" message).
 */
const RESUME_WINDOW_MS = 5_000;
/** Fast reconnects; attempts are plenty so a slow machine never runs out. */
const FAST = { maxAttempts: 200, initialDelayMs: 20, maxDelayMs: 100 };

interface Pod {
  name: string;
  uid: string;
  token: string;
  daemon: TestDaemon;
  /** The pod's address: what its DNS records name. */
  proxy: Proxy;
}

/** docs/DEPLOY.md's derivation, by openssl: base64url(HMAC-SHA256(key, "<pod name>/<pod uid>")). */
async function opensslToken(dir: string, key: string, name: string, uid: string): Promise<string> {
  const file = join(dir, `${name}.txt`);
  await writeFile(file, `${name}/${uid}`);
  const run = await runToolBytes('openssl', ['dgst', '-sha256', '-hmac', key, '-binary', file], {
    timeoutMs: 10_000,
    maxBytes: 64,
  });
  if (run.error || run.stdout.length !== 32) throw new Error(`openssl: ${run.error?.message ?? run.stderr}`);
  return run.stdout.toString('base64url');
}

function records(pods: readonly Pod[], free: readonly Pod[]): DnsRecords {
  // Listed highest ordinal first: the client must order them itself.
  const down = [...pods].reverse();
  return {
    srv: [
      ...down.map((p) => ({
        name: `_ws._tcp.desks.${DOMAIN}`,
        target: `${p.name}.desks.${DOMAIN}`,
        port: p.proxy.port,
      })),
      // A desks-free endpoint has no hostname (the pods' subdomain is `desks`): Kubernetes names it by address.
      ...[...free].reverse().map((p) => ({
        name: `_ws._tcp.desks-free.${DOMAIN}`,
        target: `127-0-0-1.desks-free.${DOMAIN}`,
        port: p.proxy.port,
      })),
    ],
    hosts: [
      ...pods.map((p) => ({ name: `${p.name}.desks.${DOMAIN}`, address: '127.0.0.1' })),
      { name: `127-0-0-1.desks-free.${DOMAIN}`, address: '127.0.0.1' },
    ],
  };
}

async function readyz(pod: Pod): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`http://127.0.0.1:${pod.proxy.port}/readyz`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** The pod's one desktop started, idle and unleased: a new session gets it at once. */
async function warm(pod: Pod): Promise<void> {
  const desktops = pod.daemon.daemon.desktops;
  await until(
    `${pod.name}'s desktop to be warm`,
    () => desktops.capacity().states.warm === 1 && desktops.capacity().leased === 0,
    { timeoutMs: START_MS, seen: () => desktops.capacity() },
  );
}

const desktopsOf = async (pod: Pod): Promise<Record<string, number>> =>
  (await readyz(pod)).body.desktops as Record<string, number>;

/** The placement table the closing note quotes: session → pod, how, and the pods passed on the way. */
function printTable(scenario: string, rows: { session: string; client?: DeskbatchClient; outcome?: string }[]): void {
  const lines = rows.map(({ session, client, outcome }) => {
    const p = client?.placement;
    const pod = p?.pod.name ?? '-';
    const how = outcome ?? (p?.waited ? 'waited' : 'placed');
    const passed = p?.passed.length ? p.passed.map((x) => `${x.pod}: ${x.why}`).join('; ') : '';
    return `  ${session.padEnd(4)} ${pod.padEnd(7)} ${how.padEnd(44)} ${passed}`;
  });
  console.log(
    [`placement: ${scenario}`, `  ${'sess'.padEnd(4)} ${'pod'.padEnd(7)} ${'how'.padEnd(44)} passed`, ...lines].join(
      '\n',
    ),
  );
}

describe('connectFleet: three pods of one desktop each, found through DNS', () => {
  const key = randomBytes(32).toString('hex');
  const pods: Pod[] = [];
  const stopped = new Set<Pod>();
  let dns: TestDnsServer;
  let dir: string;

  const fleet = (options: Partial<FleetOptions> = {}): Promise<DeskbatchClient> =>
    DeskbatchClient.connectFleet(DOMAIN, {
      fleetKey: key,
      dnsServers: [dns.server],
      clientName: 'fleet-tests/1',
      reconnect: FAST,
      handshakeTimeoutMs: START_MS, // a queued session hears desktop_wait; a desktop's start takes a while
      ...options,
    });
  const pod = (name: string): Pod => pods.find((p) => p.name === name)!;
  const cursor = async (client: DeskbatchClient): Promise<void> => {
    const { toolResults } = await client.runBatch([computerUse('cursor_position')]);
    assert.equal(toolResults[0]!.is_error, undefined, JSON.stringify(toolResults[0]));
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'deskbatch-fleet-'));
    for (let i = 0; i < 3; i++) {
      const name = `desk-${i}`;
      const uid = randomUUID();
      const token = await opensslToken(dir, key, name, uid);
      const daemon = await startTestDaemon({
        token,
        instance: `${name}/${uid}`,
        browser: 'off',
        desktops: { mode: 'pool', max: 1, warm: 1, sizes: [SIZE] },
        sessionGraceMs: RESUME_WINDOW_MS,
      });
      pods.push({ name, uid, token, daemon, proxy: await startProxy(daemon.url) });
    }
    dns = await startDnsServer('cluster.local', records(pods, pods));
    for (const p of pods) await warm(p);
  });
  after(async () => {
    await dns?.stop();
    for (const p of pods) {
      await p.proxy.close();
      if (!stopped.has(p)) await p.daemon.close();
    }
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('per-pod tokens: derived from the fleet key and the instance /readyz says; a wrong derivation is refused', async () => {
    const ready = await readyz(pod('desk-1'));
    assert.equal(ready.body.instance, `desk-1/${pod('desk-1').uid}`, 'the pod says its instance');
    for (const bad of ['desk-1/x y', 'desk-1\n{"status":"ready"}', '']) {
      assert.throws(
        () => resolveConfig({ token: pod('desk-1').token, tokenConfigured: true, instance: bad }),
        /--instance/,
      );
    }
    // The client's own derivation (podToken) gives what openssl gave each daemon: the fleet key opens desk-0.
    const right = await fleet();
    assert.equal(right.placement?.pod.name, 'desk-0');
    assert.equal(right.placement?.pod.instance, `desk-0/${pod('desk-0').uid}`);
    await cursor(right);
    const refusedKey = await fleet({ fleetKey: randomBytes(32).toString('hex') }).catch((e: unknown) => e);
    assert.ok(refusedKey instanceof HandshakeRefusedError && refusedKey.status === 401, String(refusedKey));
    // A token from the pod's name alone (no uid) would open every future pod of that name: refused.
    const nameOnly = (p: { name: string }): string => createHmac('sha256', key).update(p.name).digest('base64url');
    const refusedName = await fleet({ fleetKey: undefined, token: nameOnly }).catch((e: unknown) => e);
    assert.ok(refusedName instanceof HandshakeRefusedError && refusedName.status === 401, String(refusedName));
    // A token function that knows each pod's token (a vault, the operator's router) is the other way in.
    const byFunction = await fleet({ fleetKey: undefined, token: (p) => pod(p.name).token });
    assert.equal(byFunction.placement?.pod.name, 'desk-1', 'desk-0 is taken: the next ordinal');
    await cursor(byFunction);
    printTable('per-pod tokens', [
      { session: 'k1', client: right, outcome: 'placed (fleet key)' },
      { session: 'k2', outcome: 'refused 401 by every pod (another key)' },
      { session: 'k3', outcome: 'refused 401 by every pod (name-only HMAC)' },
      { session: 'k4', client: byFunction, outcome: 'placed (token function)' },
    ]);
    await Promise.all([right.close(), byFunction.close()]);
    for (const p of pods) await warm(p);
  });

  test('four sessions: three on three pods, lowest ordinal first; the fourth waits and gets the first desktop freed', async () => {
    const s1 = await fleet();
    const s2 = await fleet();
    const s3 = await fleet();
    assert.deepEqual(
      [s1, s2, s3].map((c) => c.placement?.pod.name),
      ['desk-0', 'desk-1', 'desk-2'],
    );
    assert.deepEqual(s2.placement?.passed, [{ pod: 'desk-0', why: 'no_free_desktop' }]);
    for (const c of [s1, s2, s3]) await cursor(c);
    // Every pod is full (their DNS records still list them, as a readiness probe would for up to 5 s).
    const places4: number[] = [];
    const p4 = fleet({ onDesktopWait: (w) => places4.push(w.position) });
    await until('the fourth session to be queued', () => places4.length > 0, { timeoutMs: START_MS });
    assert.equal((await desktopsOf(pod('desk-0'))).waiting, 1, 'it waits on the lowest ordinal of the equally loaded');
    // A fifth goes to the pod with the fewest waiting: not desk-0 any more.
    const places5: number[] = [];
    const p5 = fleet({ onDesktopWait: (w) => places5.push(w.position) });
    await until('the fifth session to be queued', () => places5.length > 0, { timeoutMs: START_MS });
    assert.equal((await desktopsOf(pod('desk-1'))).waiting, 1, 'the fifth waits on desk-1');
    let fifthDone = false;
    void p5.then(() => (fifthDone = true)).catch(() => undefined);

    await s1.close(); // desk-0's desktop is freed after the resume window, rebuilt, and leased to the fourth
    const s4 = await within(p4, 'the fourth session to get the freed desktop', START_MS);
    assert.equal(s4.placement?.pod.name, 'desk-0');
    assert.equal(s4.placement?.waited, true);
    assert.equal(fifthDone, false, 'the fifth still waits: its pod freed nothing');
    await cursor(s4);
    await s2.close();
    const s5 = await within(p5, 'the fifth session to get the next freed desktop', START_MS);
    assert.equal(s5.placement?.pod.name, 'desk-1');
    await cursor(s5);
    printTable('four sessions (and a fifth) on three pods of one desktop', [
      { session: 's1', client: s1 },
      { session: 's2', client: s2 },
      { session: 's3', client: s3 },
      { session: 's4', client: s4, outcome: 'waited (fewest waiting: all 0, lowest)' },
      { session: 's5', client: s5, outcome: 'waited (desk-0 had 1 waiting)' },
    ]);
    await Promise.all([s3.close(), s4.close(), s5.close()]);
    for (const p of pods) await warm(p);
  });

  test('the Python client (connect_fleet): pytest clients/python/tests/fleet_scenario.py against this fleet', async (t) => {
    // pytest asks the fleet's "control plane" (what a kubelet and the endpoints controller do) through this
    // loopback server: /dns sets who is in desks and desks-free, /cut drops a pod's connections.
    const control = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://127.0.0.1');
      const names = (key: string): Pod[] => (url.searchParams.get(key) ?? '').split(',').filter(Boolean).map(pod);
      const act = async (): Promise<void> => {
        if (url.pathname === '/dns') await dns.set(records(names('pods'), names('free')));
        else if (url.pathname === '/cut') for (const p of names('pods')) p.proxy.cut();
        else throw new Error(`no such control: ${url.pathname}`);
      };
      act().then(
        () => res.end('ok'),
        (err: unknown) => res.writeHead(500).end(String(err)),
      );
    });
    await new Promise<void>((resolve) => control.listen(0, '127.0.0.1', resolve));
    try {
      const run = await runPython(
        ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'clients/python/tests/fleet_scenario.py'],
        {
          env: {
            DESKBATCH_FLEET_DOMAIN: DOMAIN,
            DESKBATCH_FLEET_DNS: dns.server,
            DESKBATCH_FLEET_KEY: key,
            DESKBATCH_FLEET_PODS: JSON.stringify(
              pods.map((p) => ({ name: p.name, uid: p.uid, token: p.token, port: p.proxy.port })),
            ),
            DESKBATCH_FLEET_CONTROL: `http://127.0.0.1:${(control.address() as AddressInfo).port}`,
          },
          timeoutMs: 5 * START_MS,
        },
      );
      const report = `${PYTHON} -m pytest exited ${run.code ?? run.signal}\n${run.stdout}\n${run.stderr}`;
      assert.equal(run.code, 0, report);
      const summary = run.stdout.trimEnd().split('\n').at(-1) ?? '';
      assert.match(summary, /^(\d+) passed in [\d.]+s/, report);
      assert.ok(Number(/^(\d+)/.exec(summary)![1]) > 0, summary);
      t.diagnostic(`pytest: ${summary} (${Math.round(run.ms)} ms with the interpreter's start)`);
    } finally {
      await new Promise<void>((resolve) => control.close(() => resolve()));
      await dns.set(records(pods, pods));
    }
    for (const p of pods) await warm(p);
  });

  describe('a draining pod, a dropped connection, a pod gone for good', () => {
    let a: DeskbatchClient;
    let b: DeskbatchClient;

    test('a pod out of desks-free (draining) gets no new session, though its /readyz says it has room', async () => {
      await dns.set(records(pods, [pod('desk-1'), pod('desk-2')]));
      const draining = await readyz(pod('desk-0'));
      assert.equal(draining.status, 200);
      assert.equal((draining.body.desktops as Record<string, number>).free, 1);
      a = await fleet();
      b = await fleet();
      assert.deepEqual([a.placement?.pod.name, b.placement?.pod.name], ['desk-1', 'desk-2']);
      const refused = await fleet({ desktop: { whenBusy: 'refuse' } }).catch((e: unknown) => e);
      assert.ok(refused instanceof ConnectError && refused.code === 'no_desktop', String(refused));
      // One that waits queues on a full pod, never on the draining one with room.
      const stop = new AbortController();
      let queued = false;
      const d = fleet({ signal: stop.signal, onDesktopWait: () => (queued = true) }).catch((e: unknown) => e);
      await until('the waiting session to be queued', () => queued, { timeoutMs: START_MS });
      assert.equal((await desktopsOf(pod('desk-1'))).waiting, 1, 'it waits on desk-1');
      assert.deepEqual(await desktopsOf(pod('desk-0')), { mode: 'pool', max: 1, free: 1, leased: 0, waiting: 0 });
      stop.abort();
      await within(d, 'the waiting session to give up');
      await until('desk-1 to count no waiting session', async () => (await desktopsOf(pod('desk-1'))).waiting === 0);
      printTable('desk-0 draining (out of desks-free, /readyz 200 free 1)', [
        { session: 'a', client: a },
        { session: 'b', client: b },
        { session: 'c', outcome: "refused no_desktop (when_busy 'refuse')" },
        { session: 'd', outcome: 'queued on desk-1 (full, 0 waiting), then aborted' },
      ]);
    });

    test('a dropped connection resumes on its own pod, through its own name; the resent batch is answered from the store', async () => {
      // Every pod is full or draining: desks-free lists none. The reconnect goes by the pod's own name.
      await dns.set(records(pods, []));
      const session = a.sessionId;
      const accepted = pod('desk-1').proxy.accepted();
      const started = new Map<string, number>();
      const count = (e: ToolEvent): void => {
        if (e.phase === 'started') started.set(e.tool_use_id, (started.get(e.tool_use_id) ?? 0) + 1);
      };
      a.on('tool_event', count);
      const reconnected = nextEvent(a, 'reconnect');
      const uses = [computerUse('mouse_move', { coordinate: [100, 120] }), computerUse('wait', { duration: 2 })];
      let cut = false;
      const { toolResults, result } = await a.runBatch(uses, {
        onToolEvent: (e) => {
          if (e.name === 'wait' && e.phase === 'started' && !cut) {
            cut = true;
            pod('desk-1').proxy.cut();
          }
        },
      });
      const [welcome] = await within(reconnected, "the client's reconnect event");
      assert.equal(welcome.session_id, session, 'the same session, resumed');
      assert.equal(result.replayed, true, 'answered from the stored result');
      assert.equal(toolResults[0]!.is_error, undefined, JSON.stringify(toolResults[0]));
      assert.equal(started.get(uses[0]!.id), 1, 'mouse_move ran once');
      assert.ok(pod('desk-1').proxy.accepted() > accepted, 'the client connected to desk-1 again');
      assert.equal(a.placement?.pod.name, 'desk-1');
      const pos = await a.runBatch([computerUse('cursor_position')]);
      assert.match(JSON.stringify(pos.toolResults[0]), /100.*120/, 'the desktop is the one the mouse moved on');
      a.off('tool_event', count);
      printTable('a dropped connection', [{ session: 'a', client: a, outcome: 'placed; dropped; resumed on desk-1' }]);
    });

    test('a pod gone for good (its names removed, its daemon stopped) gives SessionLostError', async () => {
      const gone = pod('desk-2');
      const others = { 'desk-0': await desktopsOf(pod('desk-0')), 'desk-1': await desktopsOf(pod('desk-1')) };
      const closed = nextEvent(b, 'close');
      const lost = b.runBatch([computerUse('wait', { duration: 30 })], {
        onToolEvent: (e) => {
          if (e.phase !== 'started') return;
          // The node fails: the pod's DNS names go, its address answers no more; then its daemon is stopped.
          void dns
            .set(
              records(
                pods.filter((p) => p !== gone),
                [],
              ),
            )
            .then(() => gone.proxy.close());
        },
      });
      const err = await within(
        lost.then(
          () => undefined,
          (e: unknown) => e,
        ),
        'the batch in flight to fail',
        START_MS,
      );
      assert.ok(err instanceof SessionLostError, String(err));
      assert.equal(err.sent, true);
      assert.match(err.message, /desk-2 is gone/);
      await within(closed, 'the client to close');
      stopped.add(gone);
      await gone.daemon.close();
      const later = await b.runBatch([computerUse('cursor_position')]).catch((e: unknown) => e);
      assert.ok(later instanceof SessionLostError && later.sent === false, String(later));
      // It started no session anywhere else.
      assert.deepEqual(
        { 'desk-0': await desktopsOf(pod('desk-0')), 'desk-1': await desktopsOf(pod('desk-1')) },
        others,
      );
      printTable('desk-2 gone for good', [{ session: 'b', client: b, outcome: 'placed; pod gone: SessionLostError' }]);
      await a.close();
    });
  });
});
