/**
 * The soak's faults and probes (bench/soak.ts), sent on a session of their own
 * outside the load harness, each batch checked for exactly one result per
 * call: SIGKILL of the desktop worker during a `hold_key` and of Chromium
 * during a browser `wait`, each followed by polling until the resource works
 * again; an attack round on containment (docs/SECURITY.md); a burst of
 * malformed frames ending with an oversized one (1009); and the probe of the
 * result cache's bound at the end. What they see goes to the record
 * (bench/soak-record.ts).
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { DEFAULT_CONFIG } from '../src/base/config.ts';
import type { BatchResult, ToolUse, Welcome } from '../src/base/protocol.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { childPids, killAll } from '../testkit/faults.ts';
import { LoadClient, nextCoordinate } from '../testkit/load.ts';
import type { Victim, WebServer } from '../testkit/web.ts';
import {
  extra,
  problem,
  RECOVERY_MAX_MS,
  RESULT_CACHE,
  RETRYABLE_TYPES,
  TOKEN,
  type Fault,
  type FaultKind,
} from './soak-record.ts';

// The fault session: batches sent outside the harness, each checked for exactly one result per call.

async function faultBatch(
  client: LoadClient,
  batchId: string,
  toolUses: ToolUse[],
  onStarted?: { index: number; run: () => Promise<void> },
  allow: readonly string[] = RETRYABLE_TYPES,
): Promise<BatchResult | undefined> {
  extra.batches++;
  extra.calls += toolUses.length;
  client.send({ type: 'batch', batch_id: batchId, tool_uses: toolUses });
  if (onStarted) {
    // The call starts, or the batch ends without it (an earlier call failed, and it was not executed).
    const started = await client
      .until(
        () => {
          const events = client.events.get(batchId) ?? [];
          const mine = events.find((e) => e.event.index === onStarted.index);
          if (mine) return mine.event.phase === 'started';
          return client.results.has(batchId) ? false : undefined;
        },
        180_000,
        `${batchId} call ${onStarted.index} to start`,
      )
      .catch(() => false);
    if (started) await onStarted.run();
  }
  let r: BatchResult;
  try {
    r = (await client.until(() => client.results.get(batchId)?.[0], 180_000, `batch_result ${batchId}`)).result;
  } catch (err) {
    extra.lost += toolUses.length;
    problem(`fault session ${batchId}: ${String(err)}`);
    return undefined;
  }
  try {
    assertApiValid(toolUses, r);
    extra.results += toolUses.length;
  } catch (err) {
    extra.crossed++;
    problem(`fault session ${batchId}: ${String(err).slice(0, 300)}`);
  }
  for (const f of r.failures) {
    if (!allow.includes(f.error.type)) problem(`fault session ${batchId}: ${f.name} failed with ${f.error.type}`);
  }
  return r;
}

const text = (r: BatchResult, i: number): string =>
  (r.tool_results[i]?.content ?? []).map((b) => (b.type === 'text' ? b.text : '')).join('\n');

let faultSeq = 0;
const tu = (toolset: string, name: string, input: Record<string, unknown> = {}): ToolUse => ({
  type: 'tool_use',
  id: `toolu_fault_${faultSeq++}`,
  name,
  toolset_name: toolset,
  input,
});

/** Polls with a fresh batch until `works` says the resource is back; returns ms since `since`, or undefined. */
async function recover(
  client: LoadClient,
  since: number,
  make: () => { toolUses: ToolUse[]; works: (r: BatchResult) => boolean },
): Promise<number | undefined> {
  while (performance.now() - since < RECOVERY_MAX_MS) {
    const { toolUses, works } = make();
    const r = await faultBatch(client, `recover-${faultSeq++}`, toolUses);
    if (r && works(r)) return Math.round(performance.now() - since);
    await delay(500);
  }
  return undefined;
}

/**
 * Sends the batch `make()` builds and SIGKILLs `pids()` 300 ms into its call `index`. When that
 * call never starts (an earlier call of the batch failed: a slow machine), tries again (3 times).
 * The pids are direct children of the daemon, read from /proc/PID/task/TID/children (fast even on
 * a loaded machine, where walking all of /proc can outlast the call).
 */
async function killDuring(
  kind: FaultKind,
  client: LoadClient,
  index: number,
  make: () => ToolUse[],
  pids: () => Promise<number[]>,
  hitTypes: readonly string[],
): Promise<Fault> {
  const fault: Fault = { kind, at: 0, count: 0, hit: false };
  for (let attempt = 1; attempt <= 3; attempt++) {
    const toolUses = make();
    const batchId = `fault-${faultSeq++}`;
    const r = await faultBatch(client, batchId, toolUses, {
      index,
      run: async () => {
        await delay(300);
        fault.count = killAll(await pids());
        fault.at = performance.now();
      },
    });
    if (!fault.at) {
      fault.note = `${toolUses[index]!.name} did not start (${r?.failures[0]?.error.type ?? 'no result'}), ${attempt} time(s)`;
      await delay(2_000);
      continue;
    }
    const type = r?.failures.find((f) => f.index === index)?.error.type;
    fault.hit = type !== undefined && hitTypes.includes(type);
    // Did the kill land while the call still ran? Its end event (succeeded/failed) came after the kill.
    const ended = client.events
      .get(batchId)
      ?.find((e) => e.event.index === index && e.event.phase !== 'started' && e.event.phase !== 'not_executed');
    const landed = ended !== undefined && ended.at > fault.at;
    if (!fault.hit) {
      fault.note = `${toolUses[index]!.name} ended with ${type ?? 'success'}, ${landed ? 'although the kill landed during it' : 'the kill came after it ended'}`;
      if (landed && fault.count > 0) {
        problem(
          `${kind} killed during ${toolUses[index]!.name} (${batchId}), yet the call ended with ${type ?? 'success'}`,
        );
      }
    }
    return fault;
  }
  fault.at = performance.now();
  return fault;
}

export async function desktopFault(client: LoadClient, welcome: Welcome, daemonPid: number): Promise<Fault> {
  const size = welcome.screenshot ?? { width: 1280, height: 800 };
  const fault = await killDuring(
    'desktop_worker',
    client,
    1,
    () => [
      tu('computer', 'mouse_move', { coordinate: nextCoordinate(size) }),
      tu('computer', 'hold_key', { text: 'shift', duration: 5 }),
      tu('computer', 'cursor_position'),
    ],
    () => childPids(/src\/desktop-driver\/worker\.(ts|js)/, daemonPid),
    ['DriverCrashedError', 'DisplayUnavailableError'],
  );
  fault.recoveredMs = await recover(client, fault.at, () => {
    const c = nextCoordinate(size);
    return {
      toolUses: [tu('computer', 'mouse_move', { coordinate: c }), tu('computer', 'cursor_position')],
      works: (res) => res.failures.length === 0 && text(res, 1) === `X=${c[0]},Y=${c[1]}`,
    };
  });
  return fault;
}

export async function browserFault(client: LoadClient, origin: string, daemonPid: number): Promise<Fault> {
  const fault = await killDuring(
    'browser',
    client,
    1,
    () => [
      tu('browser', 'navigate', { url: `${origin}/s/fault/${faultSeq++}` }),
      tu('browser', 'wait', { duration: 5 }),
      tu('browser', 'get_page_text'),
    ],
    () => childPids(/^\S*\/chromium\s/, daemonPid),
    ['BrowserCrashedError'],
  );
  fault.recoveredMs = await recover(client, fault.at, () => {
    const m = faultSeq++;
    return {
      toolUses: [tu('browser', 'navigate', { url: `${origin}/s/fault/${m}` }), tu('browser', 'get_page_text')],
      works: (res) => res.failures.length === 0 && text(res, 1).includes(`marker fault round ${m}`),
    };
  });
  return fault;
}

/** The attack round's sites: a page of the soak's own (allowed), and a private address that must never be reached. */
interface AttackSites {
  site: WebServer;
  victim: Victim;
}

/**
 * Containment under load (docs/SECURITY.md): the browser tries the daemon's own port, cloud metadata
 * in IPv6 form, a name for loopback and a private address, by navigate and from a page (fetch, image,
 * iframe, WebSocket, redirect). Each navigate must be refused, and the private server must hear nothing.
 */
export async function attackRound(client: LoadClient, sites: AttackSites, daemonPort: number): Promise<Fault> {
  const fault: Fault = { kind: 'attack', at: performance.now(), count: 0, hit: true };
  const v = sites.victim;
  const urls = [
    `http://127.0.0.1:${daemonPort}/readyz`,
    `http://localhost:${daemonPort}/metrics`,
    'http://[::ffff:169.254.169.254]/latest/meta-data/',
    `${v.origin}/navigate`,
    `http://localhost:${v.port}/by-name`,
  ];
  const m = faultSeq;
  const nav = await faultBatch(
    client,
    `attack-nav-${m}`,
    urls.map((url) => tu('browser', 'navigate', { url })),
    undefined,
    ['ToolRefusedError', ...RETRYABLE_TYPES],
  );
  fault.count += urls.length;
  // A refusal halts the browser toolset: only the first navigate runs; send each alone to try them all.
  for (const [i, url] of urls.entries()) {
    const r =
      i === 0
        ? nav
        : await faultBatch(client, `attack-nav-${m}-${i}`, [tu('browser', 'navigate', { url })], undefined, [
            'ToolRefusedError',
            ...RETRYABLE_TYPES,
          ]);
    const type = r?.failures[0]?.error.type;
    if (type !== 'ToolRefusedError' && !(type && RETRYABLE_TYPES.includes(type))) {
      fault.hit = false;
      problem(`attack: navigate to ${url} was not refused (${type ?? 'it succeeded'})`);
    }
  }
  sites.site.route(
    `/attack/${m}`,
    `<title>attack</title><img src="${v.origin}/img"><iframe src="${v.origin}/frame"></iframe><script>
      Promise.all([
        fetch('${v.origin}/fetch', { mode: 'no-cors' }).catch(() => 0),
        fetch('/redirect/${m}', { mode: 'no-cors' }).catch(() => 0),
        new Promise((r) => { const ws = new WebSocket('ws://127.0.0.1:${v.port}/ws'); ws.onopen = ws.onerror = r; }),
      ]).then(() => fetch('/done/${m}', { method: 'POST' }));
    </script>`,
  );
  sites.site.route(`/redirect/${m}`, { status: 302, headers: { location: `${v.origin}/redirected` }, body: '' });
  await faultBatch(client, `attack-page-${m}`, [
    tu('browser', 'navigate', { url: `${sites.site.origin}/attack/${m}` }),
  ]);
  fault.count += 5;
  const done = await client
    .until(
      () => (sites.site.requests.some((r) => r.path === `/done/${m}`) ? true : undefined),
      60_000,
      'the attack page',
    )
    .catch(() => false);
  if (!done) problem('attack: the attack page never reported its attempts');
  if (v.hits.length) {
    fault.hit = false;
    problem(`attack: the private server was reached: ${v.hits.slice(0, 5).join(', ')}`);
  }
  return fault;
}

/** Malformed frames on a fresh connection, each expecting its error code; then an oversized frame (1009). */
export async function malformedBurst(url: string): Promise<Fault> {
  const fault: Fault = { kind: 'malformed_burst', at: performance.now(), count: 0, hit: true };
  const c = await LoadClient.open(url, TOKEN);
  const bad = tu('computer', 'screenshot');
  const frames: [string | Buffer, string][] = [
    ['not json at all', 'invalid_json'],
    ['{"type":"batch"', 'invalid_json'],
    [Buffer.from([0, 1, 2, 3]), 'binary_frame'],
    ['[]', 'invalid_message'],
    ['"hello"', 'invalid_message'],
    ['{"type":"teleport"}', 'invalid_message'],
    [JSON.stringify({ type: 'ping', extra: true }), 'invalid_message'],
    [JSON.stringify({ type: 'batch', batch_id: 'x'.repeat(129), tool_uses: [bad] }), 'invalid_message'],
    [JSON.stringify({ type: 'batch', batch_id: 'empty', tool_uses: [] }), 'invalid_message'],
    [JSON.stringify({ type: 'batch', batch_id: 'dup', tool_uses: [bad, bad] }), 'duplicate_tool_use_id'],
    [
      JSON.stringify({
        type: 'batch',
        batch_id: 'big',
        tool_uses: Array.from({ length: 101 }, () => tu('computer', 'wait')),
      }),
      'batch_too_large',
    ],
    [JSON.stringify({ type: 'cancel', batch_id: 'never-sent' }), 'unknown_batch'],
    [JSON.stringify({ type: 'hello', resume_session_id: 's_nonexistent' }), 'session_not_found'],
    ['['.repeat(4000) + ']'.repeat(4000), 'invalid_message'],
    [JSON.stringify({ type: 'batch', batch_id: 'b', tool_uses: [{ ...bad, id: 'bad id' }] }), 'invalid_message'],
  ];
  for (const [frame, code] of frames) {
    fault.count++;
    extra.malformedSent++;
    if (Buffer.isBuffer(frame)) c.ws.send(frame, { binary: true });
    else c.send(frame);
    const e = await c.nextError(30_000).catch((err: unknown) => err);
    if (e && typeof e === 'object' && 'code' in e && e.code === code) extra.malformedAnswered++;
    else problem(`malformed burst: ${String(frame).slice(0, 40)}: got ${JSON.stringify(e)}, want ${code}`);
  }
  // The connection is still usable after all of that.
  await c.flush().catch((err: unknown) => problem(`malformed burst: no pong afterwards: ${String(err)}`));
  // A frame over the 1 MiB limit closes the socket with 1009; the daemon carries on.
  fault.count++;
  extra.malformedSent++;
  c.send('x'.repeat(DEFAULT_CONFIG.limits.maxPayloadBytes + 1));
  await c.until(() => c.closedWith, 30_000, 'close').catch(() => undefined);
  const closed = c.closedWith;
  if (closed?.code === 1009) extra.malformedAnswered++;
  else problem(`oversized frame: closed with ${JSON.stringify(closed)}, want 1009`);
  c.terminate();
  return fault;
}

/**
 * The result cache's bound, from outside: 300 cheap batches (an unknown toolset: answered at once,
 * no lane, no browser), then resends. The newest 256 are replayed; the 257th-newest runs again.
 */
export async function cacheProbe(url: string): Promise<{ ok: boolean; detail: string }> {
  // The load's sessions have just ended; some may hold their places for a resume a while longer.
  const opened = await LoadClient.openWhenFree(url, TOKEN);
  if (!opened || 'problem' in opened) return { ok: false, detail: opened?.problem ?? 'no session' };
  const c = opened.client;
  try {
    const N = RESULT_CACHE.maxEntries + 44;
    const uses: ToolUse[][] = [];
    for (let i = 0; i < N; i++) {
      uses.push([tu('soakprobe', 'noop', { i })]);
      const r = await faultBatch(c, `p-${i}`, uses[i]!, undefined, ['ToolRefusedError']);
      if (!r || r.replayed) return { ok: false, detail: `p-${i}: ${r ? 'replayed' : 'no result'}` };
      await delay(25); // under the 50 messages per second limit
    }
    const resend = async (i: number): Promise<boolean | undefined> => {
      const before = c.results.get(`p-${i}`)?.length ?? 0;
      c.send({ type: 'batch', batch_id: `p-${i}`, tool_uses: uses[i] });
      const got = await c
        .until(() => c.results.get(`p-${i}`)?.[before], 60_000, `resend p-${i}`)
        .catch(() => undefined);
      return got?.result.replayed;
    };
    const newest = await resend(N - 1);
    const oldestKept = await resend(N - RESULT_CACHE.maxEntries);
    const firstDropped = await resend(N - RESULT_CACHE.maxEntries - 1);
    const ok = newest === true && oldestKept === true && firstDropped === false;
    return {
      ok,
      detail:
        `${N} batches; replayed: newest ${newest}, ${RESULT_CACHE.maxEntries}th-newest ${oldestKept}, ` +
        `${RESULT_CACHE.maxEntries + 1}th-newest ${firstDropped} (want true, true, false)`,
    };
  } finally {
    c.close();
  }
}
