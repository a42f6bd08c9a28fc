/**
 * The viewer's replay page (docs/VIEWER.md "Replay"): a real daemon on a real
 * Xvfb records a session; a second daemon on the same recordings folder
 * serves it; the page runs in Debian's Chromium (kiosk, on that display),
 * lists the recordings and plays the session back through the token-guarded
 * routes, showing images through blob: URLs.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright';
import sharp from 'sharp';
import type { BatchResult } from '../src/base/protocol.ts';
import { launchKioskChromium, type KioskChromium } from '../testkit/chromium.ts';
import { TEST_TOKEN, computerUse as use, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { until } from '../testkit/wait.ts';

const ARTIFACTS = fileURLToPath(new URL('../test-artifacts/', import.meta.url));
const TOKEN_KEY = 'deskbatch.viewer.token';
const SYNTHETIC = 's_synthetic_crashed';
const SYNTHETIC_BATCHES = 250;
const WITH_VIDEO = 's_with_video';

/** Runs an expression in the page (the project's types have no DOM, so expressions are strings). */
const inPage = <T>(page: Page, expression: string): Promise<T> => page.evaluate(expression) as Promise<T>;

interface Line {
  type: string;
  at: number;
  [k: string]: unknown;
}

interface ShownCall {
  name: string;
  id: string;
  outcome: string;
  type: string | null;
  message: string | null;
  flags: string | null;
  duration: string | null;
}

interface Shot {
  src: string;
  path: string | undefined;
  width: number;
  height: number;
  caption: string;
  complete: boolean;
}

interface VideoState {
  selected: string | null;
  time: number;
  duration: number;
  ready: number;
  paused: boolean;
  src: string;
  width: number;
  height: number;
  chapter: string;
}

/** The page's video element, the selected call and the chapter shown. */
const videoState = (page: Page): Promise<VideoState> =>
  inPage<VideoState>(
    page,
    `(() => { const v = document.getElementById('video'); return {
      selected: document.querySelector('li.call[aria-current="true"]')?.dataset.toolUseId ?? null,
      time: v.currentTime, duration: v.duration, ready: v.readyState, paused: v.paused, src: v.src,
      width: v.videoWidth, height: v.videoHeight, chapter: document.getElementById('chapter').textContent }; })()`,
  );

/** The start, in seconds, of the WebVTT cue titled `… · <toolUseId>`. */
function cueStart(vtt: string, toolUseId: string): number {
  const m = new RegExp(`(\\d+):(\\d\\d):(\\d\\d\\.\\d{3}) --> [^\\n]+\\n[^\\n]* · ${toolUseId}\\n`).exec(vtt);
  assert.ok(m, `a cue for ${toolUseId} in ${vtt}`);
  return Number(m[1]) * 3600 + Number(m[2]) * 60 + Number(m[3]);
}

/** Console errors (a CSP violation is one) and page errors, collected for a final check. */
function watchProblems(page: Page): string[] {
  const problems: string[] = [];
  page.on('console', (m) => m.type() === 'error' && problems.push(`console: ${m.text()}`));
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  return problems;
}

/** A trajectory as a daemon killed mid-session leaves it: many batches, no session_closed, a last line cut short. */
function syntheticTrajectory(startedAt: number): string {
  const lines: object[] = [
    {
      type: 'recording',
      at: startedAt,
      format: 'deskbatch.trajectory',
      version: 1,
      session_id: SYNTHETIC,
      desktop: { id: null },
      redaction: { typed: false, passwords: false },
      daemon: { version: '0.1.0', protocol: 1 },
    },
  ];
  for (let i = 0; i < SYNTHETIC_BATCHES; i++) {
    const at = startedAt + i * 10;
    const batch_id = `syn-${i}`;
    const tool_use_id = `toolu_syn_${i}`;
    lines.push(
      {
        type: 'batch_started',
        at,
        batch_id,
        tool_uses: [
          { type: 'tool_use', id: tool_use_id, name: 'cursor_position', toolset_name: 'computer', input: {} },
        ],
      },
      {
        type: 'tool_event',
        at: at + 1,
        event: { batch_id, index: 0, tool_use_id, toolset_name: 'computer', name: 'cursor_position', phase: 'started' },
      },
      {
        type: 'tool_event',
        at: at + 2,
        event: {
          batch_id,
          index: 0,
          tool_use_id,
          toolset_name: 'computer',
          name: 'cursor_position',
          phase: 'succeeded',
          duration_ms: 1,
        },
      },
      {
        type: 'batch_finished',
        at: at + 3,
        result: {
          batch_id,
          tool_results: [
            {
              type: 'tool_result',
              tool_use_id,
              toolset_name: 'computer',
              content: [{ type: 'text', text: 'X=1,Y=1' }],
            },
          ],
          failures: [],
          halted: {},
          cancelled: false,
          replayed: false,
          duration_ms: 3,
          screenshots: [],
        },
      },
    );
  }
  return `${lines.map((l) => JSON.stringify(l)).join('\n')}\n{"type":"batch_started","at":${startedAt + 99_999},"batch_id":"syn-cu`;
}

/** `hh:mm:ss.ttt`, as WebVTT cue timings are written. */
const vttTime = (ms: number): string => new Date(ms).toISOString().slice(11, 23);

/**
 * A recording with a video in the layout docs/RECORDING.md gives: `video.mp4` (H.264 in fragmented MP4, made
 * here by ffmpeg from its test pattern, 10 s at 5 frames a second), `video.vtt` (one cue per call, titled
 * `member · tool_use_id`, with `&` escaped as WebVTT writes it), the trajectory's `video` line naming time zero,
 * and a trace file. Four calls, one every 2 s from 1 s on, each 0.5 s long.
 */
async function writeVideoRecording(folder: string, startedAt: number): Promise<void> {
  await mkdir(join(folder, 'images'), { recursive: true, mode: 0o700 });
  execFileSync('ffmpeg', [
    ...['-loglevel', 'error', '-nostdin', '-y', '-f', 'lavfi', '-i', 'testsrc=size=640x400:rate=5', '-t', '10'],
    ...['-c:v', 'libx264', '-pix_fmt', 'yuv420p', '-g', '5'],
    ...['-movflags', 'frag_keyframe+empty_moov+default_base_moof', join(folder, 'video.mp4')],
  ]);
  const lines: object[] = [
    {
      type: 'recording',
      at: startedAt,
      format: 'deskbatch.trajectory',
      version: 1,
      session_id: WITH_VIDEO,
      desktop: { id: 'desktop-1' },
      redaction: { typed: false, passwords: false },
      daemon: { version: '0.1.0', protocol: 1 },
    },
    { type: 'video', at: startedAt + 50, path: 'video.mp4', chapters: 'video.vtt', started_at: startedAt },
  ];
  let vtt = 'WEBVTT\n\n';
  for (let i = 0; i < 4; i++) {
    const batch_id = `v${i}`;
    const tool_use_id = `toolu_v${i}`;
    const at = startedAt + 1000 + i * 2000;
    const event = { batch_id, index: 0, tool_use_id, toolset_name: 'computer', name: 'mouse_move' };
    lines.push(
      {
        type: 'batch_started',
        at,
        batch_id,
        tool_uses: [{ type: 'tool_use', id: tool_use_id, name: 'mouse_move', input: { coordinate: [i, i] } }],
      },
      { type: 'tool_event', at, event: { ...event, phase: 'started' } },
      { type: 'tool_event', at: at + 500, event: { ...event, phase: 'succeeded', duration_ms: 500 } },
      {
        type: 'batch_finished',
        at: at + 500,
        result: {
          batch_id,
          tool_results: [
            { type: 'tool_result', tool_use_id, toolset_name: 'computer', content: [{ type: 'text', text: 'moved' }] },
          ],
          failures: [],
          halted: {},
          cancelled: false,
          replayed: false,
          duration_ms: 500,
          screenshots: [],
        },
      },
    );
    vtt += `${vttTime(at - startedAt)} --> ${vttTime(at + 500 - startedAt)}\nmouse_move &amp; co · ${tool_use_id}\n\n`;
  }
  lines.push({ type: 'session_closed', at: startedAt + 10_000, reason: 'expired' });
  await writeFile(join(folder, 'trajectory.jsonl'), `${lines.map((l) => JSON.stringify(l)).join('\n')}\n`);
  await writeFile(join(folder, 'video.vtt'), vtt);
  // An empty zip stands for the trace: the page only links it.
  await writeFile(join(folder, 'trace.zip'), Buffer.concat([Buffer.from('PK\x05\x06', 'latin1'), Buffer.alloc(18)]));
}

describe('replay page in Chromium, playing back a recorded session', () => {
  let display: VirtualDisplay;
  let dir: string;
  let d: TestDaemon;
  let kiosk: KioskChromium;
  let base: string;
  let session = '';
  /** A session recorded with the desktop video on. */
  let videoSession = '';
  let results: BatchResult[] = [];
  let lines: Line[] = [];

  before(async () => {
    // The video tests need Debian's ffmpeg, which setup installs (scripts/system-packages.txt): without it
    // they fail here, naming it, instead of passing as skipped.
    const ffmpeg = spawnSync('ffmpeg', ['-version'], { stdio: 'ignore' });
    assert.equal(
      ffmpeg.status,
      0,
      `ffmpeg (Debian package ffmpeg, which npm run setup installs) does not run: ${ffmpeg.error?.message ?? `exit ${ffmpeg.status}`}`,
    );
    display = await startTestDisplay({ width: 1280, height: 800 });
    dir = await mkdtemp(join(tmpdir(), 'deskbatch-replay-'));
    const recording = { mode: 'all', dir, video: false, trace: false } as const;
    const options = { display: display.display, displayFramebuffer: display.framebuffer, browser: 'off', recording };
    // The first daemon records a session and ends it. It redacts text typed into password fields, so each
    // batch's lines are written when the batch ends (docs/RECORDING.md "When it is written").
    const first = await startTestDaemon({
      ...options,
      recording: { ...recording, redact: { typed: false, passwords: true } },
    } as Parameters<typeof startTestDaemon>[0]);
    try {
      const c = await first.connect();
      const welcome = await c.hello(undefined, { record: true, tools: [{ type: 'computer_toolset_20260801' }] });
      assert.equal(welcome.recording, true);
      session = welcome.session_id;
      const b1 = await c.batch('b1', [
        use('screenshot', {}, 'toolu_shot1'),
        use('mouse_move', { coordinate: [10, 10] }, 'toolu_move1'),
      ]);
      // A click outside the screen fails and halts the toolset; the screenshot after it does not run.
      const b2 = await c.batch('b2', [
        use('left_click', { coordinate: [99_999, 5] }, 'toolu_bad1'),
        use('screenshot', {}, 'toolu_skip1'),
      ]);
      const b3 = await c.batch('b3', [
        use('mouse_move', { coordinate: [40, 40] }, 'toolu_move2'),
        use('screenshot', {}, 'toolu_shot2'),
      ]);
      results = [b1.result, b2.result, b3.result];
      assert.equal(b2.result.failures.length, 1);
    } finally {
      await first.close();
    }
    // A later session, recorded with the desktop video (the recorder's own, src/recording/video.ts): the waits
    // give the calls chapters of their own, a second long, once the video runs.
    const recorder = await startTestDaemon({
      ...options,
      recording: { ...recording, video: true },
    } as Parameters<typeof startTestDaemon>[0]);
    try {
      const c = await recorder.connect();
      const welcome = await c.hello(undefined, { record: true, tools: [{ type: 'computer_toolset_20260801' }] });
      videoSession = welcome.session_id;
      const { result } = await c.batch('rv1', [
        use('screenshot', {}, 'toolu_r_shot'),
        use('wait', { duration: 1 }, 'toolu_r_wait1'),
        use('mouse_move', { coordinate: [640, 400] }, 'toolu_r_move'),
        use('wait', { duration: 1 }, 'toolu_r_wait2'),
        use('screenshot', {}, 'toolu_r_shot2'),
      ]);
      assert.deepEqual(result.failures, []);
    } finally {
      await recorder.close();
    }
    lines = (await readFile(join(dir, session, 'trajectory.jsonl'), 'utf8'))
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as Line);
    // A recording an earlier daemon left behind when it was killed: long, unclosed, its last line cut.
    await mkdir(join(dir, SYNTHETIC, 'images'), { recursive: true, mode: 0o700 });
    await writeFile(join(dir, SYNTHETIC, 'trajectory.jsonl'), syntheticTrajectory(Date.now() - 3_600_000), {
      mode: 0o600,
    });
    await writeVideoRecording(join(dir, WITH_VIDEO), Date.now() - 7_200_000);
    // The second daemon, on the same folder, lists and serves them all.
    d = await startTestDaemon(options as Parameters<typeof startTestDaemon>[0]);
    base = `http://127.0.0.1:${d.daemon.address.port}`;
    kiosk = await launchKioskChromium({ display: display.display, width: 1280, height: 800, url: 'about:blank' });
  });

  after(async () => {
    await kiosk?.close();
    await d?.close();
    await display?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** The image files the session's batches returned, by tool_use id. */
  const imagePaths = (): Map<string, { path: string; width: number; height: number }> => {
    const out = new Map<string, { path: string; width: number; height: number }>();
    for (const l of lines.filter((x) => x.type === 'batch_finished')) {
      for (const tr of (l.result as BatchResult).tool_results) {
        for (const block of tr.content as unknown as { type: string; path: string; width: number; height: number }[]) {
          if (block.type === 'image_file') out.set(tr.tool_use_id, block);
        }
      }
    }
    return out;
  };

  const shot = (page: Page): Promise<Shot> =>
    inPage<Shot>(
      page,
      `(() => { const i = document.getElementById('shot'); return { src: i.src, path: i.dataset.path,
        width: i.naturalWidth, height: i.naturalHeight, complete: i.complete && !i.hidden,
        caption: document.getElementById('shot-caption').textContent }; })()`,
    );

  /** Waits until the page shows the image file `path`, loaded (polled with evaluate: the page's CSP forbids eval). */
  const waitForImage = (page: Page, path: string): Promise<Shot> =>
    until(`the page to show ${path}`, async () => {
      const s = await shot(page);
      return s.complete && s.path === path && s.width > 0 ? s : undefined;
    });

  const selectedId = (page: Page): Promise<string | null> =>
    inPage(page, `document.querySelector('li.call[aria-current="true"]')?.dataset.toolUseId ?? null`);

  test('lists the recordings newest first with their counts, and plays the session back', async () => {
    const page = kiosk.page;
    const problems = watchProblems(page);
    const urls: string[] = [];
    page.on('request', (r) => urls.push(r.url()));
    try {
      await page.goto(`${base}/viewer/replay#token=${TEST_TOKEN}`);
      await page.waitForSelector(`tr.recording[data-id="${session}"]`);
      // The token left the address bar; it is only in this tab's sessionStorage.
      assert.equal(page.url(), `${base}/viewer/replay`);
      assert.equal(await inPage(page, `sessionStorage.getItem('${TOKEN_KEY}')`), TEST_TOKEN);

      const rows = await inPage<Record<string, string>[]>(
        page,
        `[...document.querySelectorAll('tr.recording')].map((tr) => ({ id: tr.dataset.id,
          ...Object.fromEntries([...tr.cells].map((td) => [td.className.split(' ').pop(), td.textContent])) }))`,
      );
      assert.deepEqual(
        rows.map((r) => r.id),
        [videoSession, session, SYNTHETIC, WITH_VIDEO],
        'newest first',
      );
      const row = rows.find((r) => r.id === session)!;
      assert.equal(row.batches, '3');
      assert.equal(row.calls, '6');
      assert.equal(row.failures, '1');
      assert.equal(row['rec-state'], 'finished');
      assert.match(row.duration ?? '', /^\d+(\.\d)? (ms|s)$/);
      assert.match(row.size ?? '', /^\d+(\.\d)? (B|KiB|MiB)$/);
      assert.match(row.started ?? '', /\d/);
      assert.equal(row['session-id'], session);
      const crashed = rows.find((r) => r.id === SYNTHETIC)!;
      assert.equal(crashed['rec-state'], 'ended without a close (daemon stopped)');
      assert.equal(crashed.batches, String(SYNTHETIC_BATCHES));
      assert.equal(crashed.duration, 'unknown');

      // Open the session: its calls in order, with their outcomes and the failure's whole error.
      await page.click(`tr.recording[data-id="${session}"]`);
      await page.waitForSelector('section.batch[data-batch-id="b3"] li.call[data-tool-use-id="toolu_shot2"]');
      assert.equal(page.url(), `${base}/viewer/replay#recording=${session}`);
      const calls = await inPage<ShownCall[]>(
        page,
        `[...document.querySelectorAll('#batches li.call')].map((li) => ({
          name: li.querySelector('.call-name').textContent,
          id: li.dataset.toolUseId,
          outcome: li.querySelector('.badge').textContent,
          type: li.querySelector('.error-type')?.textContent ?? null,
          message: li.querySelector('.error-message')?.textContent ?? null,
          flags: li.querySelector('.error-flags')?.textContent ?? null,
          duration: li.querySelector('.duration')?.textContent ?? null,
        }))`,
      );
      assert.deepEqual(
        calls.map((c) => [c.name, c.id, c.outcome]),
        [
          ['screenshot', 'toolu_shot1', 'succeeded'],
          ['mouse_move', 'toolu_move1', 'succeeded'],
          ['left_click', 'toolu_bad1', 'failed'],
          ['screenshot', 'toolu_skip1', 'not_executed'],
          ['mouse_move', 'toolu_move2', 'succeeded'],
          ['screenshot', 'toolu_shot2', 'succeeded'],
        ],
      );
      // Each call's events are on it: its duration.
      const executed = calls.filter((c) => c.outcome !== 'not_executed');
      assert.ok(
        executed.every((c) => /^\d+ ms$|^\d+\.\d s$/.test(c.duration ?? '')),
        JSON.stringify(calls.map((c) => c.duration)),
      );
      const failure = results[1]!.failures[0]!.error;
      assert.equal(calls[2]!.type, failure.type);
      assert.equal(calls[2]!.message, failure.message, 'the whole message');
      assert.ok(failure.message.length > 0);
      assert.ok(calls[2]!.flags?.includes(`timed out: ${failure.timed_out ? 'yes' : 'no'}`), calls[2]!.flags ?? '');
      assert.ok(calls[2]!.flags?.includes(`retryable: ${failure.retryable ? 'yes' : 'no'}`), calls[2]!.flags ?? '');
      const halted = Object.keys(results[1]!.halted);
      assert.ok(halted.length > 0, 'the failure halted a toolset');
      const haltedText = await page.textContent('section.batch[data-batch-id="b2"] .halted');
      assert.ok(haltedText?.includes(`halted: ${halted[0]}`), haltedText ?? '');

      // The first call is selected: the screenshot, shown from a blob: URL, the recorded image's size.
      const images = imagePaths();
      const shot1 = images.get('toolu_shot1')!;
      const shot2 = images.get('toolu_shot2')!;
      const onDisk = await sharp(join(dir, session, shot1.path)).metadata();
      await waitForImage(page, shot1.path);
      assert.equal(await selectedId(page), 'toolu_shot1');
      let s = await shot(page);
      assert.match(s.src, /^blob:http:\/\/127\.0\.0\.1:\d+\//);
      assert.deepEqual([s.width, s.height], [onDisk.width, onDisk.height]);
      assert.deepEqual([s.width, s.height], [shot1.width, shot1.height]);
      const firstBlob = s.src;

      // A call that returned no image shows the latest one returned before it.
      await page.click('li.call[data-tool-use-id="toolu_bad1"]');
      assert.equal(await selectedId(page), 'toolu_bad1');
      s = await shot(page);
      assert.equal(s.path, shot1.path);
      assert.ok(s.caption.includes('returned 2 calls earlier'), s.caption);
      assert.ok(s.caption.includes('toolu_shot1'), s.caption);
      // Arrow keys and the buttons step through the calls.
      await page.keyboard.press('ArrowDown');
      assert.equal(await selectedId(page), 'toolu_skip1');
      await page.click('#next');
      assert.equal(await selectedId(page), 'toolu_move2');
      assert.equal((await shot(page)).path, shot1.path);
      await page.keyboard.press('ArrowRight');
      assert.equal(await selectedId(page), 'toolu_shot2');
      await waitForImage(page, shot2.path);
      s = await shot(page);
      assert.match(s.src, /^blob:/);
      assert.notEqual(s.src, firstBlob);
      assert.deepEqual([s.width, s.height], [shot2.width, shot2.height]);
      assert.equal(await inPage(page, `document.getElementById('next').disabled`), true, 'the last call');
      for (let i = 0; i < 5; i++) await page.keyboard.press('ArrowUp');
      assert.equal(await selectedId(page), 'toolu_shot1');
      await waitForImage(page, shot1.path);
      assert.equal(await inPage(page, `document.getElementById('prev').disabled`), true, 'the first call');

      // Downloads: the trajectory (the bytes on disk); no video and no trace were recorded, and the page says so.
      const links = await inPage<string[]>(
        page,
        `[...document.querySelectorAll('a.download')].map((a) => a.dataset.file)`,
      );
      assert.deepEqual(links, ['trajectory.jsonl']);
      const absent = await page.textContent('#downloads');
      assert.ok(absent?.includes('No video in this recording'), absent ?? '');
      assert.ok(absent?.includes('No browser trace in this recording'), absent ?? '');
      const [download] = await Promise.all([
        page.waitForEvent('download', { timeout: 10_000 }),
        page.click('a.download[data-file="trajectory.jsonl"]'),
      ]);
      assert.equal(download.suggestedFilename(), `${session}-trajectory.jsonl`);
      const saved = await download.path();
      assert.deepEqual(await readFile(saved), await readFile(join(dir, session, 'trajectory.jsonl')));

      // The session's facts and the selected call's details.
      const info = await page.textContent('#session-info');
      assert.ok(info?.includes(session) && info.includes('shutdown'), info ?? '');
      await page.click('li.call[data-tool-use-id="toolu_bad1"]');
      await page.click('li.call[data-tool-use-id="toolu_shot1"]');
      await waitForImage(page, shot1.path);
      await mkdir(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: `${ARTIFACTS}viewer-replay.png` });

      assert.deepEqual(problems, [], 'no CSP violation, no script error');
      assert.ok(
        urls.every((u) => !u.includes(TEST_TOKEN)),
        `the token is in no URL the page requested: ${urls.join(' ')}`,
      );
      assert.ok(urls.includes(`${base}/recordings/${session}/${shot1.path}`), urls.join(' '));
    } finally {
      page.removeAllListeners();
    }
  });

  test('a long trajectory is shown 100 batches at a time; a line cut by a crash is left out', async () => {
    const page = await kiosk.context.newPage();
    const problems = watchProblems(page);
    try {
      await page.goto(`${base}/viewer/replay#token=${TEST_TOKEN}&recording=${SYNTHETIC}`);
      await page.waitForSelector('section.batch[data-batch-id="syn-0"]');
      const count = (): Promise<number> => inPage(page, `document.querySelectorAll('#batches section.batch').length`);
      assert.equal(await count(), 100);
      assert.equal(await page.textContent('#more-batches'), 'Show 100 more batches (150 not shown)');
      await page.click('#more-batches');
      assert.equal(await count(), 200);
      assert.equal(await selectedId(page), 'toolu_syn_0', 'the first call is selected');
      // Stepping past what is shown shows more.
      await page.click('li.call[data-tool-use-id="toolu_syn_199"]');
      await page.keyboard.press('ArrowDown');
      assert.equal(await selectedId(page), 'toolu_syn_200');
      assert.equal(await count(), SYNTHETIC_BATCHES);
      assert.equal(await page.isVisible('#more-batches'), false);
      const note = await page.textContent('#trajectory-note');
      assert.ok(note?.includes(`${SYNTHETIC_BATCHES} batches`), note ?? '');
      assert.ok(note?.includes('the last line was cut'), note ?? '');
      assert.equal(await inPage(page, `document.getElementById('trajectory-note').dataset.lastLineCut`), 'true');
      const info = await page.textContent('#session-info');
      assert.ok(info?.includes('no close recorded'), info ?? '');
      assert.equal(
        await page.textContent('#shot-caption'),
        'No image was returned at or before this call.',
        'no image in this recording',
      );
      assert.deepEqual(problems, []);
    } finally {
      await page.close();
    }
  });

  test('a recorded desktop video: selecting a call seeks the video to its chapter; playing it moves the selection', async () => {
    const folder = join(dir, videoSession);
    const trajectory = await readFile(join(folder, 'trajectory.jsonl'), 'utf8');
    assert.match(trajectory, /"type":"video"/, 'the recorder recorded a video (ffmpeg with x11grab and libx264)');
    const vtt = await readFile(join(folder, 'video.vtt'), 'utf8');
    const page = await kiosk.context.newPage();
    const problems = watchProblems(page);
    try {
      await page.goto(`${base}/viewer/replay#token=${TEST_TOKEN}&recording=${videoSession}`);
      let v = await until(
        'the recorded video to load',
        async () => {
          const now = await videoState(page);
          return now.ready >= 1 && now.width > 0 ? now : undefined;
        },
        { timeoutMs: 20_000, seen: () => page.textContent('#video-note') },
      );
      assert.match(v.src, /^blob:http:\/\/127\.0\.0\.1:\d+\//);
      assert.deepEqual([v.width, v.height], [1280, 800], 'the desktop, at its size');
      // The mouse_move call: the video stands at its chapter's start.
      const move = cueStart(vtt, 'toolu_r_move');
      assert.ok(move > 0, `the call ran after the video started (cue at ${move} s)`);
      await page.click('li.call[data-tool-use-id="toolu_r_move"]');
      v = await until('the video to stand at toolu_r_move', async () => {
        const now = await videoState(page);
        return Math.abs(now.time - move) < 0.01 ? now : undefined;
      });
      assert.equal(v.selected, 'toolu_r_move');
      assert.ok(v.chapter.startsWith('chapter: mouse_move · toolu_r_move ('), v.chapter);
      // Played from there, it reaches the next call's chapter; the selection follows.
      await inPage(page, `document.getElementById('video').play()`);
      v = await until(
        'the playing video to move the selection to toolu_r_wait2',
        async () => {
          const now = await videoState(page);
          return now.selected === 'toolu_r_wait2' ? now : undefined;
        },
        { timeoutMs: 15_000, seen: () => videoState(page) },
      );
      assert.ok(v.time >= cueStart(vtt, 'toolu_r_wait2') - 0.001, `at ${v.time}`);
      assert.ok(v.chapter.includes('toolu_r_wait2'), v.chapter);
      await inPage(page, `document.getElementById('video').pause()`);
      const links = await inPage<string[]>(
        page,
        `[...document.querySelectorAll('a.download')].map((a) => a.dataset.file)`,
      );
      assert.deepEqual(links, ['trajectory.jsonl', 'video.mp4', 'video.vtt']);
      await page.screenshot({ path: `${ARTIFACTS}viewer-replay-recorded-video.png` });
      assert.deepEqual(problems, [], 'no CSP violation (media-src blob:), no script error');
    } finally {
      await page.close();
    }
  });

  test('an ffmpeg-made video in the recording layout: chapters unescaped, scrubbing and playing move the selection, the trace link', async () => {
    const page = await kiosk.context.newPage();
    const problems = watchProblems(page);
    const video = (): Promise<VideoState> => videoState(page);
    try {
      await page.goto(`${base}/viewer/replay#token=${TEST_TOKEN}&recording=${WITH_VIDEO}`);
      // The first call is selected and the video, once loaded, stands at its chapter (1 s in).
      let v = await until('the video to load and stand at the first call', async () => {
        const now = await video();
        return now.ready >= 1 && now.selected === 'toolu_v0' && Math.abs(now.time - 1) < 0.01 ? now : undefined;
      });
      assert.match(v.src, /^blob:http:\/\/127\.0\.0\.1:\d+\//);
      assert.ok(Math.abs(v.duration - 10) < 0.5, `duration ${v.duration}`);
      assert.equal(v.chapter, 'chapter: mouse_move & co · toolu_v0 (1.0–1.5 s)', 'unescaped, shown as text');
      // Selecting a call seeks the video to that call.
      await page.click('li.call[data-tool-use-id="toolu_v2"]');
      v = await video();
      assert.equal(v.selected, 'toolu_v2');
      assert.ok(Math.abs(v.time - 5) < 0.01, `seeked to ${v.time}`);
      assert.ok(v.chapter.includes('toolu_v2'), v.chapter);
      // Scrubbing the video (its own controls set currentTime the same way) selects the call on screen then.
      await inPage(page, `document.getElementById('video').currentTime = 3.2`);
      await until('the selection to follow the scrubbed video to toolu_v1', async () => {
        const now = await video();
        return now.selected === 'toolu_v1' && now.chapter.includes('toolu_v1');
      });
      // Playing from toolu_v2 (5 s) reaches toolu_v3's chapter (7 s): the selection follows.
      await page.click('li.call[data-tool-use-id="toolu_v2"]');
      await inPage(page, `document.getElementById('video').play()`);
      v = await until(
        'the playing video to move the selection to toolu_v3',
        async () => {
          const now = await video();
          return now.selected === 'toolu_v3' ? now : undefined;
        },
        { timeoutMs: 15_000, seen: video },
      );
      assert.ok(v.time >= 7, `at ${v.time}`);
      assert.equal(v.paused, false);
      await inPage(page, `document.getElementById('video').pause()`);
      // Downloads: the video, its chapters, the trace with how to open it.
      const links = await inPage<{ file: string; text: string }[]>(
        page,
        `[...document.querySelectorAll('a.download')].map((a) => ({ file: a.dataset.file,
            text: a.parentElement.textContent }))`,
      );
      assert.deepEqual(
        links.map((l) => l.file),
        ['trajectory.jsonl', 'video.mp4', 'video.vtt', 'trace.zip'],
      );
      assert.ok(links[3]!.text.includes('open with npx playwright show-trace trace.zip'), links[3]!.text);
      await page.screenshot({ path: `${ARTIFACTS}viewer-replay-video.png` });
      assert.deepEqual(problems, [], 'no CSP violation (media-src blob:), no script error');
    } finally {
      await page.close();
    }
  });

  test('without the token nothing is listed and the routes say 401; a wrong token is refused', async () => {
    for (const path of [
      '/recordings',
      `/recordings/${session}/trajectory.jsonl`,
      `/recordings/${session}/${imagePaths().get('toolu_shot1')!.path}`,
    ]) {
      const res = await fetch(`${base}${path}`);
      assert.equal(res.status, 401, path);
      await res.arrayBuffer();
    }
    const page = await kiosk.context.newPage();
    const problems = watchProblems(page);
    try {
      await page.goto(`${base}/viewer/replay`);
      await page.waitForSelector('#state[data-state="no-token"]');
      assert.equal(await page.isVisible('#list'), false, 'no list without a token');
      assert.equal(await inPage(page, `document.querySelectorAll('tr.recording').length`), 0);
      assert.equal(await inPage(page, `document.getElementById('token').type`), 'password');
      await page.fill('#token', 'wrong-token-0123456789abcdef0123');
      await page.click('#login button[type="submit"]');
      await page.waitForSelector('#login-message:has-text("The daemon refused that token.")');
      assert.equal(await inPage(page, `sessionStorage.getItem('${TOKEN_KEY}')`), null, 'a refused token is forgotten');
      assert.equal(await page.isVisible('#list'), false);
      await page.fill('#token', TEST_TOKEN);
      await page.click('#login button[type="submit"]');
      await page.waitForSelector(`tr.recording[data-id="${session}"]`);
      assert.equal(await inPage(page, `document.getElementById('token').value`), '');
      await page.click('#forget');
      await page.waitForSelector('#state[data-state="no-token"]');
      assert.equal(await inPage(page, `document.querySelectorAll('tr.recording').length`), 0);
      assert.equal(await inPage(page, `sessionStorage.getItem('${TOKEN_KEY}')`), null);
      // The 401s the page received are console errors of the browser's own; nothing else went wrong.
      assert.deepEqual(
        problems.filter((p) => !p.includes('401')),
        [],
      );
    } finally {
      await page.close();
    }
  });
});
