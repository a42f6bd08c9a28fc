/**
 * Prometheus metrics (docs/OPERATIONS.md): counters and histograms fed by the
 * ActivityHub, gauges read from the server at scrape time, and Node's process
 * metrics, all on a registry of this daemon's own (never prom-client's global
 * one: one process may hold several daemons).
 *
 * Label values are bounded: toolset and member names come from clients, so
 * only names the daemon defines are used, anything else reads "unknown";
 * error types outside the daemon's own read "other".
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics, exponentialBuckets } from 'prom-client';
import type { Activity, ActivityHub } from '../base/activity.ts';
import type { BatchResult, ToolEvent } from '../base/protocol.ts';
import { PROTOCOL_VERSION } from '../base/protocol.ts';
import type { HttpRoute, ServerStatus } from '../server/server.ts';
import type { FileStoreEvent } from '../server/session-files.ts';
import type { Toolset } from '../toolset-api/types.ts';
import { DESKTOP_STATES, type Desktops, type PoolEvent } from '../desktop-pool/pool.ts';
import { treePssBytes } from './memory.ts';
import { DESKBATCH_VERSION } from '../base/version.ts';

/** Error types the daemon, its drivers and toolsets raise (docs/PROTOCOL.md "Results"); others read "other". */
export const KNOWN_ERROR_TYPES: ReadonlySet<string> = new Set([
  'ToolInputError',
  'ToolRefusedError',
  'TabStateError',
  'TimeoutError',
  'DisplayUnavailableError',
  'DriverCrashedError',
  'CancelledError',
  'BrowserUnavailableError',
  'BrowserCrashedError',
  'ContractViolationError',
  'NavigationError',
  'Error',
]);

/** Call latencies: 1 ms to 60 s (a `wait` or `hold_key` may run for most of a minute). */
export const CALL_DURATION_BUCKETS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
] as const;
/** Batches: up to 100 calls each, so up to a few minutes. */
export const BATCH_DURATION_BUCKETS = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
] as const;
/** Base64 image sizes: 1 KiB to 16 MiB, doubling. */
export const IMAGE_SIZE_BUCKETS = exponentialBuckets(1024, 2, 15);

const UNKNOWN = 'unknown';
/** The `toolset` label of the plain tool's calls (the older `computer` tool: no toolset_name). */
const PLAIN_TOOL_LABEL = 'computer_legacy';

export interface MetricsDeps {
  activity: ActivityHub;
  /** The toolsets the daemon serves (Executor.served): the only toolset and member names used as labels. */
  served: ReadonlyMap<string, Toolset>;
  /** The name a served plain tool's calls carry (Executor.plainTool: the older `computer` tool), if any. */
  plainToolName?: string;
  /** Read at scrape time. */
  status: () => ServerStatus;
  /** deskbatch's version, for deskbatch_build_info; default: package.json's. */
  version?: string;
  /** The desktops, read at scrape time. */
  desktops?: Pick<Desktops, 'capacity' | 'list'>;
  /** The recordings on disk (docs/RECORDING.md), read at scrape time; absent when recording is off. */
  recordings?: () => { recordings: number; live: number; bytes: number };
  /** Each desktop's sandbox mode (docs/SECURITY.md "A sandbox per desktop"), read at scrape time. */
  sandbox?: () => 'uid' | 'userns' | 'off';
  /** The sessions' staged files held now (src/server/session-files.ts), read at scrape time. */
  files?: () => { bytes: number; files: number };
  /** The desktops' live views and the scoped links (docs/VIEWER.md "Links"), read at scrape time. */
  live?: () => LiveCounts;
}

/** What liveMetrics reads: watchers and x11vnc's now, and the links' counts (src/server/links.ts LinkCounts). */
export interface LiveCounts {
  watchers: number;
  vncServers: number;
  linkSockets: number;
  links: {
    live: number;
    created: { view: number; control: number };
    ended: Record<string, number>;
    refused: number;
  };
}

/** Watchers, x11vnc's, links live, made, ended by reason, and credentials refused: all read at scrape time. */
function liveMetrics(registers: Registers, read: () => LiveCounts): void {
  const gauge = (name: string, help: string, value: (c: LiveCounts) => number): void =>
    void new Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(value(read()));
      },
    });
  gauge('deskbatch_live_watchers', 'Viewers watching a desktop live (read-only VNC) now.', (c) => c.watchers);
  gauge(
    'deskbatch_live_vnc_servers',
    'Desktops whose x11vnc runs now (watched, or held by a person).',
    (c) => c.vncServers,
  );
  gauge('deskbatch_links', 'Scoped viewer links honoured now.', (c) => c.links.live);
  gauge('deskbatch_link_sockets', 'Viewer sockets open through a link now.', (c) => c.linkSockets);
  new Counter({
    name: 'deskbatch_link_refusals_total',
    help: 'Presented credentials that were neither the token nor a live link (a wrong token counts too).',
    registers,
    collect() {
      this.reset();
      this.inc(read().links.refused);
    },
  });
  new Counter({
    name: 'deskbatch_links_created_total',
    help: 'Scoped viewer links made, by mode (view, control).',
    labelNames: ['mode'],
    registers,
    collect() {
      const { created } = read().links;
      this.reset();
      this.inc({ mode: 'view' }, created.view);
      this.inc({ mode: 'control' }, created.control);
    },
  });
  new Counter({
    name: 'deskbatch_links_ended_total',
    help: 'Scoped viewer links ended, by reason (expired, revoked, session_ended, shutdown).',
    labelNames: ['reason'],
    registers,
    collect() {
      const { ended } = read().links;
      this.reset();
      for (const [reason, n] of Object.entries(ended)) this.inc({ reason }, n);
    },
  });
}

export interface Metrics {
  registry: Registry;
  /** `GET /metrics`, behind the bearer token. */
  route: HttpRoute;
  /** What the desktop pool reports (lease waits, starts, teardowns). */
  desktopEvent(event: PoolEvent): void;
  /** Bytes a recording wrote, by artifact (src/recording/recorder.ts). */
  recordingBytes(
    artifact: 'trajectory' | 'images' | 'video' | 'trace' | 'documents' | 'downloads',
    bytes: number,
  ): void;
  /** A recording removed by retention, or not kept at its session's end. */
  recordingRemoved(reason: 'count' | 'bytes' | 'age' | 'not_kept'): void;
  /** What the sessions' file store reports: a file stored, one read into a page, a refusal. */
  fileEvent(event: FileStoreEvent): void;
  /** Stops observing the activity stream and empties the registry. */
  close(): void;
}

/** Lease waits and desktop starts and teardowns: from a warm lease (under a millisecond) to minutes in the queue. */
export const DESKTOP_SECONDS_BUCKETS = [
  0.001, 0.005, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
] as const;
/** How long a per-desktop memory reading is reused: reading /proc for every process costs a few ms. */
const DESKTOP_MEMORY_CACHE_MS = 10_000;

/** Outcome label of a batch: any failure makes it failed; else a cancel makes it cancelled. */
export function batchOutcome(result: BatchResult): 'ok' | 'failed' | 'cancelled' {
  if (result.failures.length > 0) return 'failed';
  return result.cancelled ? 'cancelled' : 'ok';
}

let processMetrics: Registry | undefined;

/**
 * Node's process metrics (`process_*`, `nodejs_*`), collected once per process: they describe the
 * process, not a daemon, and each collector starts an event-loop monitor and a GC observer that a
 * registry's clear() does not stop, so one per daemon would pile up where a process starts many
 * (tests, embedding).
 */
function processRegistry(): Registry {
  if (!processMetrics) {
    processMetrics = new Registry();
    collectDefaultMetrics({ register: processMetrics });
  }
  return processMetrics;
}

type Registers = Registry[];

/**
 * Bounded labels: a toolset or member name only if the daemon serves it, an
 * error type only if the daemon raises it. A tool_use without toolset_name
 * reads "computer_legacy" when it is the served plain tool (the older
 * `computer` tool), else "none" (a plain tool, refused).
 */
function boundedLabels(served: MetricsDeps['served'], plain: string | undefined) {
  const toolset = (name: string | null | undefined, member?: string): string =>
    name === null || name === undefined
      ? plain !== undefined && member === plain
        ? PLAIN_TOOL_LABEL
        : 'none'
      : served.has(name)
        ? name
        : UNKNOWN;
  const member = (toolsetLabel: string, name: string): string => {
    if (toolsetLabel === PLAIN_TOOL_LABEL && plain !== undefined) return plain;
    const t = served.get(toolsetLabel);
    return t && (t.members.has(name) || t.allMemberNames.includes(name)) ? name : UNKNOWN;
  };
  const error = (type: string | undefined): string =>
    type !== undefined && KNOWN_ERROR_TYPES.has(type) ? type : 'other';
  return { toolset, member, error };
}

/** Batches and member calls: counts, durations, failures by error type, and the images returned. */
function callMetrics(registers: Registers, labels: ReturnType<typeof boundedLabels>, plain: string | undefined) {
  const batches = new Counter({
    name: 'deskbatch_batches_total',
    help: 'Batches run to their batch_result, by outcome: ok, failed (any call failed), cancelled.',
    labelNames: ['outcome'],
    registers,
  });
  const replays = new Counter({
    name: 'deskbatch_batch_replays_total',
    help: 'Resent batches answered from the stored result (nothing ran again).',
    registers,
  });
  const batchDuration = new Histogram({
    name: 'deskbatch_batch_duration_seconds',
    help: 'Time from the start of a batch to its batch_result, by outcome.',
    labelNames: ['outcome'],
    buckets: [...BATCH_DURATION_BUCKETS],
    registers,
  });
  const calls = new Counter({
    name: 'deskbatch_calls_total',
    help: 'Member calls answered, by toolset, member and outcome (succeeded, failed, not_executed, cancelled).',
    labelNames: ['toolset', 'member', 'outcome'],
    registers,
  });
  const callDuration = new Histogram({
    name: 'deskbatch_call_duration_seconds',
    help: 'Run time of member calls that succeeded or failed, by toolset and member.',
    labelNames: ['toolset', 'member'],
    buckets: [...CALL_DURATION_BUCKETS],
    registers,
  });
  const failures = new Counter({
    name: 'deskbatch_call_failures_total',
    help: 'Failed member calls, by toolset and error type (the daemon’s own types; anything else is "other").',
    labelNames: ['toolset', 'error_type'],
    registers,
  });
  const imageBytes = new Counter({
    name: 'deskbatch_screenshot_bytes_total',
    help: 'Base64 bytes of image blocks returned in batch results (screenshots and zooms), by toolset and media type.',
    labelNames: ['toolset', 'media_type'],
    registers,
  });
  const imageSize = new Histogram({
    name: 'deskbatch_screenshot_size_bytes',
    help: 'Base64 size of each image block returned, by toolset and media type.',
    labelNames: ['toolset', 'media_type'],
    buckets: IMAGE_SIZE_BUCKETS,
    registers,
  });
  return {
    toolEvent(event: ToolEvent): void {
      if (event.phase === 'started') return;
      const toolset = labels.toolset(event.toolset_name, event.name);
      const member = labels.member(toolset, event.name);
      calls.inc({ toolset, member, outcome: event.phase });
      if ((event.phase === 'succeeded' || event.phase === 'failed') && event.duration_ms !== undefined) {
        callDuration.observe({ toolset, member }, event.duration_ms / 1000);
      }
      if (event.phase === 'failed') failures.inc({ toolset, error_type: labels.error(event.error?.type) });
    },
    batchFinished(result: BatchResult): void {
      const outcome = batchOutcome(result);
      batches.inc({ outcome });
      batchDuration.observe({ outcome }, result.duration_ms / 1000);
      for (const r of result.tool_results) {
        for (const block of r.content) {
          if (block.type !== 'image') continue;
          // Only member results and the older computer tool's (no toolset_name) can hold images.
          const toolset = labels.toolset(r.toolset_name, plain);
          const imageLabels = { toolset, media_type: block.source.media_type };
          imageBytes.inc(imageLabels, block.source.data.length);
          imageSize.observe(imageLabels, block.source.data.length);
        }
      }
    },
    batchReplayed(): void {
      replays.inc();
    },
  };
}

/** Gauges read from the server at scrape time. */
function serverGauges(registers: Registers, status: () => ServerStatus): void {
  const gauge = (name: string, help: string, read: (s: ServerStatus) => number): void => {
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(read(status()));
      },
    });
  };
  gauge('deskbatch_sessions', 'Sessions held now, attached or within their resume grace period.', (s) => s.sessions);
  gauge('deskbatch_connections', 'Open protocol WebSocket connections.', (s) => s.connections);
  gauge(
    'deskbatch_active_batches',
    'Batches queued or running, over every session (queue depth).',
    (s) => s.activeBatches,
  );
  gauge('deskbatch_accepting', '1 while the daemon accepts sessions and batches, 0 once shutdown began.', (s) =>
    s.accepting ? 1 : 0,
  );
}

/** The desktops: their states and memory, read at scrape time, and what the pool reports (lease waits, starts, teardowns, faults). */
function desktopMetrics(registers: Registers, desktops: MetricsDeps['desktops']): (event: PoolEvent) => void {
  if (desktops) {
    new Gauge({
      name: 'deskbatch_desktops',
      help: 'Desktops by state: starting, warm (idle, ready), leased, recycling (being torn down), broken.',
      labelNames: ['state'],
      registers,
      collect() {
        const { states } = desktops.capacity();
        for (const state of DESKTOP_STATES) this.set({ state }, states[state]);
      },
    });
    new Gauge({
      name: 'deskbatch_desktops_max',
      help: 'Desktops this daemon may hold at once (--desktops; 1 when the display is shared).',
      registers,
      collect() {
        this.set(desktops.capacity().max);
      },
    });
    new Gauge({
      name: 'deskbatch_desktop_waiting_sessions',
      help: 'New sessions queued for a desktop.',
      registers,
      collect() {
        this.set(desktops.capacity().waiting);
      },
    });
    let memory: { at: number; values: Map<string, number> } | undefined;
    new Gauge({
      name: 'deskbatch_desktop_memory_bytes',
      help: "Memory of each desktop's processes (Xvfb, openbox, worker, browser), PSS: shared pages counted once.",
      labelNames: ['desktop'],
      registers,
      async collect() {
        if (!memory || performance.now() - memory.at > DESKTOP_MEMORY_CACHE_MS) {
          const values = new Map<string, number>();
          for (const d of desktops.list()) {
            const pids = Object.values(d.processes).filter((p): p is number => p !== undefined);
            if (pids.length) values.set(d.id, await treePssBytes(pids));
          }
          memory = { at: performance.now(), values };
        }
        this.reset();
        for (const [desktop, bytes] of memory.values) this.set({ desktop }, bytes);
      },
    });
  }
  const seconds = (name: string, help: string): Histogram =>
    new Histogram({ name, help, buckets: [...DESKTOP_SECONDS_BUCKETS], registers });
  const leaseWait = seconds(
    'deskbatch_desktop_lease_wait_seconds',
    'Time a new session waited for its desktop (a warm one: at once; else a start, or the queue).',
  );
  const desktopStart = seconds(
    'deskbatch_desktop_start_seconds',
    'Time to start a desktop: Xvfb, openbox, the worker and the browser, ready for a session.',
  );
  const desktopRecycle = seconds(
    'deskbatch_desktop_recycle_seconds',
    "Time to tear down a session's desktop (every process ended, its folders removed); a fresh one then starts.",
  );
  const desktopFaults = new Counter({
    name: 'deskbatch_desktop_faults_total',
    help: 'Desktop starts that failed, and leased desktops rebuilt after their display died.',
    labelNames: ['kind'],
    registers,
  });
  return (event) => {
    switch (event.kind) {
      case 'leased':
        return leaseWait.observe(event.waitedMs / 1000);
      case 'started':
        return desktopStart.observe(event.ms / 1000);
      case 'recycled':
        return desktopRecycle.observe(event.ms / 1000);
      case 'start_failed':
      case 'rebuilt':
        return desktopFaults.inc({ kind: event.kind });
    }
  };
}

/** Help requests and takeovers (docs/VIEWER.md "Takeover"), from the activity stream. */
function takeoverMetrics(registers: Registers): (a: Activity) => void {
  const helpRequests = new Counter({
    name: 'deskbatch_help_requests_total',
    help: 'Times an agent asked for a person (`help`, docs/PROTOCOL.md "Takeover").',
    registers,
  });
  const takeovers = new Counter({
    name: 'deskbatch_takeovers_total',
    help: 'Takeovers that ended, by outcome: resolved, unresolved, expired, disconnected, ended.',
    labelNames: ['outcome'],
    registers,
  });
  let held = 0;
  new Gauge({
    name: 'deskbatch_desktops_held',
    help: 'Desktops a person holds now (their agents wait).',
    registers,
    collect() {
      this.set(held);
    },
  });
  const takeoverDuration = new Histogram({
    name: 'deskbatch_takeover_duration_seconds',
    help: 'How long a person held a desktop.',
    buckets: [10, 30, 60, 120, 300, 600, 1800],
    registers,
  });
  return (a) => {
    if (a.type === 'help_requested') helpRequests.inc();
    else if (a.type === 'takeover_started') held++;
    else if (a.type === 'takeover_ended') {
      held = Math.max(0, held - 1);
      takeovers.inc({ outcome: a.outcome });
      takeoverDuration.observe(a.activity.duration_ms / 1000);
    }
  };
}

/** Recordings: bytes written and removals as they happen, and what is on disk at scrape time. */
/** The harness's CDP door (docs/PROTOCOL.md "CDP for the harness"), from its `cdp_attached`/`cdp_detached` activity. */
function cdpMetrics(registers: Registers): (a: Activity) => void {
  const attaches = new Counter({
    name: 'deskbatch_cdp_attaches_total',
    help: "Times a harness attached to its session's browser over CDP (--allow-cdp).",
    registers,
  });
  let open = 0;
  new Gauge({
    name: 'deskbatch_cdp_connections',
    help: "Harnesses' CDP connections open now.",
    registers,
    collect() {
      this.set(open);
    },
  });
  const bytes = new Counter({
    name: 'deskbatch_cdp_bytes_total',
    help: 'Bytes of CDP messages relayed, from the harness to the browser (in) and back (out); counted as a connection ends.',
    labelNames: ['direction'],
    registers,
  });
  return (a) => {
    if (a.type === 'cdp_attached') {
      attaches.inc();
      open++;
    } else if (a.type === 'cdp_detached') {
      open = Math.max(0, open - 1);
      bytes.inc({ direction: 'in' }, a.detach.bytes_in);
      bytes.inc({ direction: 'out' }, a.detach.bytes_out);
    }
  };
}

function recordingMetrics(
  registers: Registers,
  recordings: MetricsDeps['recordings'],
): Pick<Metrics, 'recordingBytes' | 'recordingRemoved'> {
  const bytesWritten = new Counter({
    name: 'deskbatch_recording_bytes_written_total',
    help: 'Bytes written into session recordings, by artifact: trajectory, images, video, trace, documents.',
    labelNames: ['artifact'],
    registers,
  });
  const removed = new Counter({
    name: 'deskbatch_recordings_removed_total',
    help: 'Recordings removed: by retention (count, bytes, age), or not kept at their session end (not_kept).',
    labelNames: ['reason'],
    registers,
  });
  if (recordings) {
    new Gauge({
      name: 'deskbatch_recordings',
      help: 'Recordings on disk: live (their session runs) and finished.',
      labelNames: ['state'],
      registers,
      collect() {
        const u = recordings();
        this.set({ state: 'live' }, u.live);
        this.set({ state: 'finished' }, u.recordings - u.live);
      },
    });
    new Gauge({
      name: 'deskbatch_recordings_bytes',
      help: 'Bytes all recordings hold (the retention budget, --record-max-bytes, bounds it).',
      registers,
      collect() {
        this.set(recordings().bytes);
      },
    });
  }
  return {
    recordingBytes: (artifact, bytes) => void bytesWritten.inc({ artifact }, bytes),
    recordingRemoved: (reason) => void removed.inc({ reason }),
  };
}

/**
 * Staged files: bytes in (stored) and out (handed to a page), refusals by reason, and what is held at scrape
 * time (documents and kept downloads together); kept downloads' bytes in and out, and those not kept, apart.
 */
function fileMetrics(registers: Registers, held: MetricsDeps['files']): (event: FileStoreEvent) => void {
  const bytes = new Counter({
    name: 'deskbatch_staged_bytes_total',
    help: 'Bytes of files staged by harnesses: in (stored), out (handed to a page by file_upload).',
    labelNames: ['direction'],
    registers,
  });
  const files = new Counter({
    name: 'deskbatch_staged_files_total',
    help: 'Files staged by harnesses, by kind (document).',
    labelNames: ['kind'],
    registers,
  });
  const refused = new Counter({
    name: 'deskbatch_staged_files_refused_total',
    help: 'Files refused when staged, by reason (the bound, or bad_name, empty, ...).',
    labelNames: ['reason'],
    registers,
  });
  const downloadBytes = new Counter({
    name: 'deskbatch_download_bytes_total',
    help: "Bytes of pages' downloads kept for harnesses: in (kept when completed), out (fetched by a harness).",
    labelNames: ['direction'],
    registers,
  });
  const downloadsNotKept = new Counter({
    name: 'deskbatch_downloads_not_kept_total',
    help: 'Completed downloads the daemon did not keep for the harness, by reason (the bound that refused it).',
    labelNames: ['reason'],
    registers,
  });
  if (held) {
    new Gauge({
      name: 'deskbatch_staged_bytes',
      help: "Bytes the sessions' staged files and kept downloads hold now (bounded by --max-staged-bytes).",
      registers,
      collect() {
        this.set(held().bytes);
      },
    });
  }
  return (event) => {
    if (event.fileKind === 'download') {
      if (event.kind === 'refused') downloadsNotKept.inc({ reason: event.code });
      else downloadBytes.inc({ direction: event.kind === 'stored' ? 'in' : 'out' }, event.bytes);
    } else if (event.kind === 'stored') {
      bytes.inc({ direction: 'in' }, event.bytes);
      files.inc({ kind: event.fileKind });
    } else if (event.kind === 'read') bytes.inc({ direction: 'out' }, event.bytes);
    else refused.inc({ reason: event.code });
  };
}

export function createMetrics(deps: MetricsDeps): Metrics {
  const registry = new Registry();
  const registers = [registry];
  new Gauge({
    name: 'deskbatch_build_info',
    help: 'Always 1; the labels name the running deskbatch version and protocol.',
    labelNames: ['version', 'protocol', 'node_version'],
    registers,
  }).set({ version: deps.version ?? DESKBATCH_VERSION, protocol: PROTOCOL_VERSION, node_version: process.version }, 1);
  const errors = new Counter({
    name: 'deskbatch_metrics_errors_total',
    help: 'Activity events the metrics could not count (a bug in deskbatch; the event is skipped).',
    registers,
  });
  const calls = callMetrics(registers, boundedLabels(deps.served, deps.plainToolName), deps.plainToolName);
  serverGauges(registers, deps.status);
  const sandbox = deps.sandbox;
  if (sandbox) {
    new Gauge({
      name: 'deskbatch_desktop_sandbox',
      help: "1 for the mode each desktop's sandbox runs in: uid (a uid of its own), userns (user namespaces), off.",
      labelNames: ['mode'],
      registers,
      collect() {
        const mode = sandbox();
        for (const m of ['uid', 'userns', 'off'] as const) this.set({ mode: m }, m === mode ? 1 : 0);
      },
    });
  }
  const desktopEvent = desktopMetrics(registers, deps.desktops);
  const takeover = takeoverMetrics(registers);
  const recording = recordingMetrics(registers, deps.recordings);
  const fileEvent = fileMetrics(registers, deps.files);
  if (deps.live) liveMetrics(registers, deps.live);
  const cdp = cdpMetrics(registers);
  const clipboardBytes = new Counter({
    name: 'deskbatch_clipboard_bytes_total',
    help: "Bytes harnesses put on their desktops' clipboards (in) and read from them (out).",
    labelNames: ['direction'],
    registers,
  });

  const observe = (a: Activity): void => {
    if (a.type === 'tool_event') calls.toolEvent(a.event);
    else if (a.type === 'clipboard') clipboardBytes.inc({ direction: a.op === 'set' ? 'in' : 'out' }, a.clipboard.size);
    else if (a.type === 'batch_finished') calls.batchFinished(a.result);
    else if (a.type === 'batch_replayed') calls.batchReplayed();
    else if (a.type === 'cdp_attached' || a.type === 'cdp_detached') cdp(a);
    else takeover(a);
  };
  // A throwing observer is unsubscribed by the hub for good; one odd event must not end the metrics.
  const unsubscribe = deps.activity.subscribe((a: Activity) => {
    try {
      observe(a);
    } catch {
      errors.inc();
    }
  });

  return {
    registry,
    route: {
      method: 'GET',
      path: '/metrics',
      auth: 'token',
      async handle(_req, res) {
        const body = `${await registry.metrics()}\n${await processRegistry().metrics()}`;
        res.writeHead(200, { 'content-type': registry.contentType, 'cache-control': 'no-store' }).end(body);
      },
    },
    desktopEvent,
    ...recording,
    fileEvent,
    close() {
      unsubscribe();
      registry.clear();
    },
  };
}
