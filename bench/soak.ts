/**
 * `npm run soak` (issue 4, promise 4 "Load holds", the long run; outside CI).
 *
 * Starts the daemon as its own process (`node bin/deskbatch.js serve`) on an
 * Xvfb of its own, with headless Chromium, and for SOAK_MINUTES (default 5)
 * keeps SOAK_SESSIONS (default 32) sessions busy through the load harness
 * (testkit/load.ts): computer, browser and mixed batches, malformed
 * inputs, replays, dropped-and-resumed connections, and session churn (a
 * quarter of the slots close their session every few rounds and open a new
 * one). Periodically it injects faults through the daemon's own processes:
 * SIGKILL of the desktop worker in the middle of a `hold_key`, SIGKILL of
 * Chromium in the middle of a browser `wait`, and a burst of malformed frames
 * (ending with an oversized one, which closes that socket with 1009). After a
 * fault, recovery is polled, never assumed for the very next batch (a circuit
 * breaker may hold the resource for a cool-down).
 *
 * Every 5 s it samples the daemon's RSS and open file descriptors, the RSS of
 * its children, and the screenshots directory. The directory is seeded, as an
 * earlier run would have left it, close to the retention bounds (2,000 files,
 * 1 GiB: sparse files, no disk used), so retention has to work during the run.
 * At the end a probe session runs 300 batches and checks that the result cache
 * kept exactly the newest 256 (its bound): the 256th-newest is still replayed,
 * the 257th-newest runs again.
 *
 * Prints a summary table and writes soak-results.json in the cwd. Exit code 1
 * when a result was lost, duplicated or crossed; a failure was not one the
 * faults explain; a resource did not recover; the daemon's RSS grew more than
 * 30% from the first to the last third of the run (after warm-up), or rose
 * steadily (a least-squares trend of more than 10% with r² ≥ 0.5); its open
 * fds grew (median, more than 8); the screenshots directory went past its
 * bounds; the result cache kept more than its bound; or the daemon died or
 * did not shut down cleanly.
 *
 * SOAK_MINUTES=0.5 is a quick check. Other knobs: SOAK_SESSIONS,
 * SOAK_FAULT_EVERY_S, SOAK_SEED_SCREENSHOTS=0 (do not seed the directory),
 * SOAK_KEEP=1 (keep the temp folder with the daemon's log).
 *
 * This file runs it: the temp folder, the daemon, the load, the fault loop,
 * the shutdown. Its settings and record are bench/soak-record.ts, the faults
 * and the cache probe bench/soak-faults.ts, the figures and verdicts
 * bench/soak-report.ts.
 */
import { mkdir, mkdtemp, open, readFile, rm, utimes } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import type { ErrorInfo } from '../src/base/protocol.ts';
import { startDaemonProcess, type DaemonProcess } from '../testkit/daemon-process.ts';
import { startTestDisplay } from '../testkit/display.ts';
import { descendants, killAll } from '../testkit/faults.ts';
import { LoadClient, runLoad, startMarkerServer, type LoadStats } from '../testkit/load.ts';
import { startVictim, startWebServer } from '../testkit/web.ts';
import { attackRound, browserFault, cacheProbe, desktopFault, malformedBurst } from './soak-faults.ts';
import {
  batchLog,
  CALL_TIMEOUT_MS,
  CHURN_ROUNDS,
  CHURN_SLOTS,
  DURATION_MS,
  elapsed,
  FAULT_EVERY_MS,
  faults,
  MINUTES,
  mb,
  noRecovery,
  problem,
  RETENTION,
  RETRYABLE_TYPES,
  sample,
  SAMPLE_EVERY_MS,
  samples,
  say,
  SESSIONS,
  t0,
  TOKEN,
  WARMUP_MS,
  type FaultKind,
} from './soak-record.ts';
import { verdict } from './soak-report.ts';

// ---------------------------------------------------------------------------------------------
// The daemon process

/** The soak's daemon: its own process, with the load's call limit; every line to daemon.log in the temp folder. */
function startSoakDaemon(
  dir: string,
  display: string,
  shots: string,
  downloads: string,
  allowed: string[],
): Promise<DaemonProcess> {
  const args = ['--port', '0'];
  for (const origin of allowed) args.push('--allow-private', new URL(origin).host);
  args.push('--browser', 'headless');
  args.push('--call-timeout-ms', String(CALL_TIMEOUT_MS));
  args.push('--screenshots-dir', shots, '--downloads-dir', downloads, '--log-level', 'info');
  return startDaemonProcess({ display, token: TOKEN, args, logFile: join(dir, 'daemon.log') });
}

// ---------------------------------------------------------------------------------------------
// Seeding the screenshots directory as an earlier run would have left it

/**
 * An earlier run's files, oldest first: 1,000 small ones, then 990 large (sparse) ones, 512 KiB under
 * the byte bound and 10 files under the count bound. New screenshots then push the directory over
 * the count bound (the small files go), and soon over the byte bound too (each new file weighs more
 * than the small one it displaces), so both bounds are enforced during the run.
 */
async function seedScreenshots(shots: string): Promise<{ files: number; bytes: number }> {
  if (process.env.SOAK_SEED_SCREENSHOTS === '0') return { files: 0, bytes: 0 };
  const dir = join(shots, 's_earlier_run');
  await mkdir(dir, { recursive: true });
  const small = 1_000;
  const smallBytes = 1024;
  const large = RETENTION.maxFiles - 10 - small;
  const largeBytes = Math.floor((RETENTION.maxBytes - 512 * 1024 - small * smallBytes) / large);
  const old = Date.now() - 24 * 3_600_000;
  let bytes = 0;
  for (let i = 0; i < small + large; i++) {
    const path = join(dir, `b${i}_toolu_${i}_0.png`);
    const size = i < small ? smallBytes : largeBytes;
    const fh = await open(path, 'w', 0o600);
    await fh.truncate(size); // sparse: no disk used
    await fh.close();
    await utimes(path, new Date(old), new Date(old + i * 1000));
    bytes += size;
  }
  return { files: small + large, bytes };
}

async function main(): Promise<number> {
  const dir = await mkdtemp(join(tmpdir(), 'deskbatch-soak-'));
  const shots = join(dir, 'screenshots');
  const downloads = join(dir, 'downloads');
  await mkdir(shots, { recursive: true });
  say(
    `soak: ${MINUTES} min, ${SESSIONS} sessions (${CHURN_SLOTS} churning every ${CHURN_ROUNDS} rounds), a fault every ${FAULT_EVERY_MS / 1000} s; temp ${dir}`,
  );
  const seeded = await seedScreenshots(shots);
  if (seeded.files) say(`seeded the screenshots dir with ${seeded.files} files, ${mb(seeded.bytes)} (sparse)`);

  const display = await startTestDisplay({ width: 1280, height: 800 });
  const web = await startMarkerServer();
  const attackSite = await startWebServer();
  const victim = await startVictim();
  const abort = new AbortController();
  const onSignal = (): void => {
    say('interrupted: stopping');
    abort.abort();
  };
  process.once('SIGINT', onSignal);
  let daemon: DaemonProcess | undefined;
  let stats: LoadStats | undefined;
  let cache: { ok: boolean; detail: string } = { ok: false, detail: 'not run' };
  let shutdown = { code: null as number | null, signal: null as NodeJS.Signals | null, ms: 0, clean: false };
  let diedEarly = false;
  let pidsSeen = new Set<number>();
  try {
    // The load's pages and the attack round's own page are reached through the operator's opt-in for
    // exactly their addresses; the victim's is not in it.
    daemon = await startSoakDaemon(dir, display.display, shots, downloads, [web.origin, attackSite.origin]);
    const d = daemon;
    say(`daemon pid ${d.pid} at ${d.url}`);
    let stopping = false;
    void d.exited.then((e) => {
      if (!abort.signal.aborted && !stopping) {
        diedEarly = true;
        problem(`the daemon exited during the run (${e.code ?? e.signal})`);
        abort.abort();
      }
    });

    // Samples
    const sampler = setInterval(() => {
      void sample(d, shots).then(async (s) => {
        if (!s) return;
        for (const p of await descendants(d.pid)) pidsSeen.add(p.pid);
      });
    }, SAMPLE_EVERY_MS);

    // The fault session
    const faultClient = await LoadClient.open(d.url, TOKEN);
    const faultHello = await faultClient.hello();
    if (faultHello.type !== 'welcome') throw new Error(`fault session refused: ${faultHello.code}`);
    const faultLoop = (async () => {
      const kinds: FaultKind[] = ['desktop_worker', 'attack', 'browser', 'malformed_burst'];
      let i = 0;
      await delay(Math.min(WARMUP_MS, FAULT_EVERY_MS), undefined, { signal: abort.signal }).catch(() => undefined);
      while (!abort.signal.aborted && elapsed() < DURATION_MS - 10_000) {
        const kind = kinds[i++ % kinds.length]!;
        try {
          const f =
            kind === 'desktop_worker'
              ? await desktopFault(faultClient, faultHello, d.pid)
              : kind === 'browser'
                ? await browserFault(faultClient, web.origin, d.pid)
                : kind === 'attack'
                  ? await attackRound(faultClient, { site: attackSite, victim }, Number(new URL(d.url).port))
                  : await malformedBurst(d.url);
          f.at -= t0;
          faults.push(f);
          say(
            `fault ${f.kind}: ${f.count} ${f.kind === 'malformed_burst' ? 'frames' : f.kind === 'attack' ? 'attacks tried' : 'process(es) killed'}, ` +
              `hit ${f.hit}, recovered ${f.recoveredMs === undefined ? (noRecovery(f) ? 'n/a' : 'NO') : `${f.recoveredMs} ms`}` +
              (f.note ? ` (${f.note})` : ''),
          );
        } catch (err) {
          problem(`fault ${kind}: ${String(err)}`);
        }
        await delay(FAULT_EVERY_MS, undefined, { signal: abort.signal }).catch(() => undefined);
      }
    })();

    // Progress
    const progress = setInterval(() => {
      const s = samples.at(-1);
      say(
        `batches ${batchLog.length}` +
          (s
            ? `, rss ${mb(s.rssBytes)}, fds ${s.fds}, children PSS ${mb(s.childrenPssBytes)}, shots ${s.shotFiles} files ${mb(s.shotBytes)}`
            : ''),
      );
    }, 30_000);

    // The load
    stats = await runLoad({
      url: d.url,
      token: TOKEN,
      webOrigin: web.origin,
      sessions: SESSIONS,
      rounds: (slot) => (slot < CHURN_SLOTS ? CHURN_ROUNDS : Infinity),
      durationMs: DURATION_MS,
      label: 'S',
      rampUpMs: 15_000,
      browserConcurrency: 8,
      browserRetries: 1,
      screenshotEvery: 7,
      browserScreenshotEvery: 13,
      malformedEvery: 4,
      replayEvery: 5,
      dropResumeEvery: 3,
      expectFailure: (e: ErrorInfo) => e.retryable && RETRYABLE_TYPES.includes(e.type),
      batchTimeoutMs: 180_000,
      signal: abort.signal,
      onBatch: (record) => batchLog.push({ at: elapsed(), record }),
    });
    clearInterval(progress);
    await faultLoop;
    say(`load done: ${stats.batches} batches`);

    // Recovery as the load's own sessions saw it: after each kill, once batches of that toolset
    // ran again, one of them succeeded.
    for (const f of faults) {
      if (noRecovery(f)) continue;
      const key = f.kind === 'browser' ? 'browserOk' : 'computerOk';
      const kinds = f.kind === 'browser' ? ['browser', 'mixed'] : ['computer', 'mixed', 'resumed'];
      const later = batchLog.filter((b) => b.record.sentAt - t0 > f.at && kinds.includes(b.record.kind));
      if (later.length > 0 && !later.some((b) => b.record[key])) {
        problem(`after the ${f.kind} fault at ${Math.round(f.at / 1000)} s, no load batch of it succeeded again`);
      }
    }

    if (!diedEarly) {
      cache = await cacheProbe(d.url).catch((err: unknown) => ({ ok: false, detail: String(err) }));
      say(`result cache probe: ${cache.detail}`);
      await delay(2_000);
      await sample(d, shots);
    }
    clearInterval(sampler);
    faultClient.close();

    // Shut down
    stopping = true;
    const t = performance.now();
    const e = await d.stop(30_000);
    if (e.killed) problem('the daemon did not exit within 30 s of SIGTERM');
    shutdown = { code: e.code, signal: e.signal, ms: Math.round(performance.now() - t), clean: e.code === 0 };
    for (const p of await descendants(d.pid)) pidsSeen.add(p.pid);
  } finally {
    process.off('SIGINT', onSignal);
    // Anything the daemon started that outlived it (only its own descendants, by pid).
    if (daemon && !daemon.hasExited()) killAll([daemon.pid]);
    const leftovers = [...pidsSeen].filter((pid) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    });
    if (leftovers.length) {
      const cmds = await Promise.all(leftovers.map((pid) => readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')));
      // Only processes whose command line is still one the daemon started (the pid was not reused).
      const ours = leftovers.filter((_, i) => /chromium|worker\.(ts|js)|deskbatch/.test(cmds[i] ?? ''));
      if (ours.length) problem(`${ours.length} processes of the daemon outlived it: ${ours.join(', ')}`);
      killAll(ours);
    }
    await web.close();
    await attackSite.close();
    await victim.close();
    await display.stop();
    pidsSeen = new Set();
  }

  const passed = await verdict({ stats: stats!, cache, shutdown, diedEarly, seeded, daemon });
  if (passed && !process.env.SOAK_KEEP) await rm(dir, { recursive: true, force: true });
  else say(`kept ${dir} (daemon.log)`);
  return passed ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
