/**
 * Every daemon option, with its unit and default, in one place (after ws's
 * WebSocketServer): defaults live in one object literal and are spread under
 * the caller's; impossible combinations are refused with an exact message.
 */
import { availableParallelism, totalmem } from 'node:os';
import { isIP } from 'node:net';
import type { ImageFormat, SettleOptions } from './image.ts';
import type { ScreenshotLimits } from './geometry.ts';
import type { LogLevel } from './log.ts';
import type { BreakerSettings, RetrySettings } from './resilience.ts';

export type BrowserMode = 'headless' | 'headful' | 'off';

export interface DaemonConfig {
  /** Address to bind. Anything but loopback requires a configured token. */
  host: string;
  /** TCP port; 0 picks a free one. */
  port: number;
  /** Bearer token clients must present. Required. */
  token: string;
  /** Whether the token came from the operator (DESKBATCH_TOKEN) rather than being generated. */
  tokenConfigured: boolean;
  /** Exact origins (scheme://host[:port]) allowed to connect; empty refuses every browser page. */
  allowOrigins: string[];
  /** Exact origins allowed to frame the live page `/viewer/live` (`--embed-origin`); empty: no framing. */
  embedOrigins: string[];
  /**
   * Host names the HTTP routes answer to besides IP literals and `localhost` (lower-case, no port):
   * a request naming any other Host gets 421, so a DNS-rebound page cannot read them.
   */
  allowHostHeaders: string[];
  /**
   * What this daemon is called in its fleet, said in every `/readyz` answer (docs/OPERATIONS.md): on
   * Kubernetes `<pod name>/<pod uid>`, the string its per-pod token is derived from (docs/DEPLOY.md
   * "Per-pod tokens"), so a client that holds the fleet key can derive the token (connectFleet). Not a secret.
   */
  instance?: string;
  /** X display to drive, e.g. `:99`. Undefined: no display (computer calls fail until one is set). */
  display: string | undefined;
  /**
   * The file an Xvfb started with `-fbdir` keeps `display`'s screen in
   * (XWD, depth 24): screenshots then read it instead of asking the X
   * server for the pixels (docs/PERFORMANCE.md). The daemon's own Xvfb sets
   * it; for an operator's Xvfb, `DESKBATCH_FRAMEBUFFER`. Unset: libnut grabs.
   */
  displayFramebuffer?: string;
  /** Where sessions' desktops come from (src/desktop-pool/pool.ts, docs/PROTOCOL.md "Desktops"). */
  desktops: DesktopSettings;
  /** 'cookie': the display is the daemon's own Xvfb, which admits only holders of its cookie; 'external': the operator's. */
  displayAuth: 'cookie' | 'external';
  browser: BrowserMode;
  /** The browser toolset's own settings. */
  browserSettings: {
    /** Optional browser members switched on (the daemon checks the names against the toolset). */
    enable: string[];
    /** URL policy for navigate: when allowHosts is non-empty only those hosts (and subdomains). */
    allowHosts: string[];
    denyHosts: string[];
    /**
     * Let the browser reach loopback, private, link-local and other non-public
     * addresses (src/browser/egress.ts); off by default.
     */
    allowPrivateNetworks: boolean;
    /** Non-public destinations the browser may reach all the same: `host`, `host:port` or `address/prefix`. */
    privateAllow: string[];
    /** Folders file_upload may read from. */
    uploadRoots: string[];
    /** Where downloads are saved, one folder per session; a session's folder is removed when it ends. */
    downloadsDir: string;
    /** Downloads one session may start; later ones are cancelled before they are saved. 0 refuses every download. */
    maxDownloads: number;
    /** Bytes one session's saved downloads may hold; a download that would pass it is cancelled (or deleted). */
    maxDownloadBytes: number;
    /**
     * Whether `download_completed` carries the saved file's host path. Off by default: the API contract
     * includes it only when another tool of the agent can read that path.
     */
    exposeDownloadPaths: boolean;
    viewport: { width: number; height: number };
    /** Debian's chromium; never a downloaded browser. */
    executablePath: string;
    launchTimeoutMs: number;
    /**
     * A shared desktop launches its browser when the daemon starts, so the
     * first browser call does not wait for the launch (pooled desktops start
     * theirs when they are built). Off: the first browser call launches it.
     */
    launchAtStart: boolean;
  };
  screenshotsDir: string;
  screenshot: {
    format: ImageFormat;
    /** 1–100, for jpeg and webp. */
    quality: number;
    limits: ScreenshotLimits;
    /** Largest base64 payload per image, in bytes. */
    maxBase64Bytes: number;
    /** Desktop captures after input wait for a stable frame (docs/PERFORMANCE.md); afterInputMs 0 turns it off. */
    settle: SettleOptions;
  };
  retention: { maxFiles: number; maxBytes: number };
  /** Session recordings (docs/RECORDING.md). */
  recording: RecordingSettings;
  /** Documents a harness stages for its session (docs/PROTOCOL.md "Staged documents"). */
  documents: DocumentSettings;
  /** The clipboard a harness sets and reads on its session's desktop (docs/PROTOCOL.md "Clipboard"). */
  clipboard: ClipboardSettings;
  /** Named browser profiles a harness keeps between sessions (docs/PROTOCOL.md "Profiles"). */
  profiles: ProfileSettings;
  /** Human takeover from the viewer (docs/VIEWER.md "Takeover"). */
  takeover: TakeoverSettings;
  /** The harness's CDP door to its session's browser (docs/PROTOCOL.md "CDP for the harness"). */
  cdp: CdpSettings;
  /** MCP over Streamable HTTP at /mcp (docs/MCP.md). */
  mcp: McpSettings;
  /**
   * Each desktop's sandbox (docs/SECURITY.md "A sandbox per desktop"):
   * `auto` picks `uid` as root and `userns` otherwise, and the daemon refuses
   * to start when the host cannot give it; `off` runs desktops unsandboxed.
   */
  sandbox: {
    mode: 'auto' | 'off';
    /** `uid` mode: the uids (and gids) desktops get, one each. */
    uids: { first: number; count: number };
  };
  limits: {
    /** Largest WebSocket frame, in bytes; a larger one closes the socket with 1009. */
    maxPayloadBytes: number;
    maxToolUsesPerBatch: number;
    /** Batches waiting behind the running one, per session. */
    maxQueuedBatches: number;
    maxSessions: number;
    /** Longest `type` text, in UTF-16 code units. */
    maxTypeTextLength: number;
    /** Handshakes per remote address (IPv6: per /64): a burst, then this many per second. Refused with HTTP 429. */
    handshakeBurst: number;
    handshakesPerSecond: number;
    /** Handshakes from all addresses together: a burst, then this many per second (many addresses cannot flood). */
    globalHandshakeBurst: number;
    globalHandshakesPerSecond: number;
    /** Messages per connection: a burst, then this many per second; beyond, `rate_limited` errors. */
    messageBurst: number;
    messagesPerSecond: number;
    /**
     * Bytes a connection may have waiting to be sent (`ws.bufferedAmount`) before another frame: beyond
     * it the client is not reading, and the socket is closed with 4008 (CLOSE_SEND_BUFFER_FULL).
     */
    maxBufferedBytes: number;
    /** Time budget of one batch, in ms, from when it gets the desktop: then the rest is cancelled. */
    maxBatchMs: number;
  };
  /** Base time limit of one call, in ms; `wait` and `hold_key` add their duration. */
  callTimeoutMs: number;
  /** Operator opt-in: the model also reads the messages of thrown errors. */
  exposeErrorMessages: boolean;
  /** Computer members switched off. */
  disabledMembers: string[];
  /** Server ping interval, in ms; a peer that misses a pong by the next ping is dropped. */
  heartbeatMs: number;
  /** How long a session outlives its connection, for resume, in ms. */
  sessionGraceMs: number;
  /**
   * Stored batch results per session, for replay: how many, how many bytes in all, and how long each is kept (ms);
   * and how many bytes over every session together (`maxTotalBytes`), beyond which the oldest stored go first.
   */
  resultCache: { maxEntries: number; maxBytes: number; ttlMs: number; maxTotalBytes: number };
  /** Hard deadline for a graceful shutdown, in ms. */
  shutdownDeadlineMs: number;
  /**
   * Circuit breakers around starting the desktop worker and the browser, and
   * automatic retries of members that change nothing (src/base/resilience.ts).
   */
  resilience: { breaker: BreakerSettings; retry: RetrySettings };
  logLevel: LogLevel;
}

export interface RecordingSettings {
  /** `all`: every session is recorded; `on_request`: those whose hello asks (`record: true`); `off`. */
  mode: 'off' | 'all' | 'on_request';
  /** Where recordings are written, one folder per session. */
  dir: string;
  /** `failures`: a session's recording is deleted when it ends unless a batch failed or was cancelled. */
  keep: 'all' | 'failures';
  /** A video of the desktop (ffmpeg), from the session's first computer call. */
  video: boolean;
  videoFps: number;
  /** A Playwright trace of the session's browser context. */
  trace: boolean;
  /** Whether the trace keeps every network body; off: only stylesheets, fonts and images (docs/RECORDING.md). */
  networkBodies: boolean;
  /** Whether the trace holds the browser's screencast too (60–110 ms a browser call here; docs/RECORDING.md "Cost"). */
  traceScreenshots: boolean;
  /** `typed`: typed text is stored as `[N characters]`; `passwords`: only text typed into a password field. */
  redact: { typed: boolean; passwords: boolean };
  /** Whether a staged document's content is copied into the recording (its line, name, size and sha256, always is). */
  documents: boolean;
  /** Whether a kept download's content is copied into the recording (its line, name, size and sha256, always is). */
  downloads: boolean;
  /** Finished recordings kept at most: how many, how many bytes in all (live ones count too), how old (ms). */
  retention: { maxSessions: number; maxBytes: number; maxAgeMs: number };
}

export interface DocumentSettings {
  /**
   * The folder the daemon's private folder of staged files is made in (`deskbatch-files-p<pid>-…`, 0700);
   * unset: the system's temporary folder. A deployment whose /tmp is small or memory-backed points it at a disk.
   */
  dir?: string;
  /** Files one session may hold. */
  maxPerSession: number;
  /** Bytes of one file: at most 50 MiB, as a page is handed a file whole. */
  maxFileBytes: number;
  /** Bytes one session's files may hold in all. */
  maxSessionBytes: number;
  /** Bytes every session's files may hold together. */
  maxTotalBytes: number;
}

export interface ClipboardSettings {
  /** Bytes of text a harness may put on the clipboard, and read back. */
  maxTextBytes: number;
  /** Bytes of a PNG image a harness may put on the clipboard, and read back. */
  maxImageBytes: number;
}

export interface ProfileSettings {
  /**
   * The operator's key file (`--profile-key`): 32 bytes raw, 64 hex characters or base64, mode 0600 or
   * stricter (src/profiles/sealed.ts). Unset: profiles are off, and their routes answer `profiles_off`.
   */
  keyFile?: string;
  /** The folder the sealed profiles are kept in (0700, one file each, 0600). */
  dir: string;
  /** Profiles the store may hold. */
  maxProfiles: number;
  /** Bytes of one profile's state as JSON; at most MAX_PROFILE_BYTES. */
  maxProfileBytes: number;
  /** A profile neither saved nor leased for this long is removed (ms). */
  maxAgeMs: number;
}

/** The most `--max-profile-bytes` may be raised to: a profile is held in memory whole, a few times over. */
export const MAX_PROFILE_BYTES = 64 * 1024 ** 2;
/** The longest `--profile-max-age`: ten years. */
export const MAX_PROFILE_AGE_MS = 3650 * 24 * 3_600_000;

/** The most the clipboard bounds may be raised to: a set or read is held in memory whole. */
export const MAX_CLIPBOARD_BYTES = 64 * 1024 ** 2;

/** The most one staged file may hold: `file_upload` hands the page a file's bytes whole. */
export const MAX_STAGED_FILE_BYTES = 50 * 1024 ** 2;

export interface TakeoverSettings {
  /** Whether an operator may take a session's desktop from the viewer (`--allow-takeover`); off by default. */
  enabled: boolean;
  /** How long a person holds the desktop before it goes back to the agent, unless extended (ms). */
  leaseMs: number;
  /** How long a holder whose viewer went away has to come back before control goes back to the agent (ms). */
  graceMs: number;
  /** Where the viewer's noVNC files are (Debian's package `novnc`). */
  novncDir: string;
}

export interface CdpSettings {
  /**
   * Whether a harness may drive its session's browser over CDP (`--allow-cdp`); off by default. Only a
   * sandboxed pool desktop's browser is offered (docs/SECURITY.md "CDP for the harness").
   */
  enabled: boolean;
  /** Largest frame either side may send through the door, in bytes: a full-page screenshot can be tens of MiB. */
  maxFrameBytes: number;
  /**
   * Bytes that may wait for the harness to read them (its socket's `bufferedAmount`), or to reach the browser
   * (those sent before its side opened included); past it both sides are closed with 4008.
   */
  maxBufferedBytes: number;
  /** CDP connections one session may hold at once. */
  maxPerSession: number;
}

export interface McpSettings {
  /**
   * How long an MCP session over HTTP may go with no request open (its client's GET stream included) before it
   * ends with its deskbatch session and desktop, in ms (`--mcp-idle-ms`).
   */
  idleMs: number;
}

/** The most cdp.maxFrameBytes may be raised to: a frame is held in memory whole. */
export const MAX_CDP_FRAME_BYTES = 1024 ** 3;

export interface DesktopSettings {
  /**
   * 'pool': each session leases a desktop of its own (own Xvfb, window manager, worker, browser, HOME),
   * destroyed and replaced after it; 'shared': every session acts on `display`, one batch at a time.
   */
  mode: 'pool' | 'shared';
  /** Desktops the pool holds at most. */
  max: number;
  /** Desktops kept started and idle, so a new session gets one at once. */
  warm: number;
  /** Display sizes a session may ask for (`hello.desktop.display`); the first is the default. */
  sizes: { width: number; height: number }[];
  /** Sessions that may queue for a desktop; more are refused (`no_desktop`). */
  maxWaiting: number;
  /** How long a session may queue for a desktop before it is refused, in ms. */
  maxWaitMs: number;
}

/** What one desktop costs in memory, for the default cap: measured about 363 MiB PSS (docs/PERFORMANCE.md), plus headroom for real pages. */
const DESKTOP_BUDGET_BYTES = 512 * 1024 ** 2;
/** Left to the daemon itself and the system. */
const HOST_RESERVE_BYTES = 1024 ** 3;

/** The memory this process may use: the container's limit (cgroup) when one is set, else the machine's. */
function memoryLimit(): number {
  const limit = process.constrainedMemory?.() ?? 0;
  return limit > 0 && limit < totalmem() ? limit : totalmem();
}

/**
 * The default `--desktops`: what the memory holds at DESKTOP_BUDGET_BYTES
 * each, and at most two per core (an agent acting flat out keeps about half
 * a core busy with input and screenshots); at least one.
 */
export function defaultDesktopCap(cores = availableParallelism(), memoryBytes = memoryLimit()): number {
  const byMemory = Math.floor((memoryBytes - HOST_RESERVE_BYTES) / DESKTOP_BUDGET_BYTES);
  return Math.max(1, Math.min(byMemory, 2 * cores));
}

/** The largest display side a session or the operator may ask for. */
export const MAX_DISPLAY_SIDE_PX = 4096;

/**
 * The API's limit per image: 10 MB, decimal (10 MiB would pass our check and
 * fail the request). Held for the base64 text, which is longer than the bytes it encodes.
 */
export const API_IMAGE_MAX_BYTES = 10_000_000;
/** Above this many pixels per side, a request holding more than 20 images fails (the API's rule). */
export const MANY_IMAGES_MAX_SIDE_PX = 2000;

export const DEFAULT_CONFIG: Omit<DaemonConfig, 'token' | 'tokenConfigured' | 'display'> = {
  desktops: {
    mode: 'shared',
    max: defaultDesktopCap(),
    warm: 1,
    sizes: [{ width: 1280, height: 800 }],
    maxWaiting: 64,
    maxWaitMs: 120_000,
  },
  host: '127.0.0.1',
  port: 8765,
  allowOrigins: [],
  embedOrigins: [],
  allowHostHeaders: [],
  displayAuth: 'external',
  browser: 'headful',
  browserSettings: {
    enable: [],
    allowHosts: [],
    denyHosts: [],
    allowPrivateNetworks: false,
    privateAllow: [],
    uploadRoots: [],
    downloadsDir: 'downloads',
    // Generous for an agent's task, small enough that a page looping downloads cannot fill a disk.
    maxDownloads: 50,
    maxDownloadBytes: 500 * 1024 * 1024,
    exposeDownloadPaths: false,
    viewport: { width: 1280, height: 800 },
    executablePath: '/usr/bin/chromium',
    launchTimeoutMs: 30_000,
    launchAtStart: true,
  },
  screenshotsDir: 'screenshots',
  screenshot: {
    format: 'png',
    quality: 80,
    // 2000 px per side keeps a request with more than 20 images valid; 4784 is the visual-token limit.
    limits: { maxSidePx: 2000, maxVisualTokens: 4784 },
    maxBase64Bytes: API_IMAGE_MAX_BYTES,
    settle: { afterInputMs: 1_000, quietMs: 32, reactionMs: 50, drawnMs: 32, intervalMs: 50, maxMs: 1_000 },
  },
  retention: { maxFiles: 2_000, maxBytes: 1024 * 1024 * 1024 },
  recording: {
    mode: 'off',
    dir: 'recordings',
    keep: 'all',
    video: true,
    videoFps: 5,
    trace: true,
    networkBodies: false,
    traceScreenshots: false,
    redact: { typed: false, passwords: false },
    documents: false,
    downloads: false,
    retention: { maxSessions: 200, maxBytes: 2 * 1024 ** 3, maxAgeMs: 7 * 24 * 3_600_000 },
  },
  documents: {
    maxPerSession: 32,
    maxFileBytes: MAX_STAGED_FILE_BYTES,
    maxSessionBytes: 200 * 1024 ** 2,
    // Half the 1 GiB /tmp the compose file gives the container (deploy/compose.yaml), shared with the desktops.
    maxTotalBytes: 512 * 1024 ** 2,
  },
  clipboard: { maxTextBytes: 1024 ** 2, maxImageBytes: 10 * 1024 ** 2 },
  profiles: { dir: 'profiles', maxProfiles: 100, maxProfileBytes: 8 * 1024 ** 2, maxAgeMs: 30 * 24 * 3_600_000 },
  takeover: { enabled: false, leaseMs: 10 * 60_000, graceMs: 15_000, novncDir: '/usr/share/novnc' },
  cdp: { enabled: false, maxFrameBytes: 256 * 1024 ** 2, maxBufferedBytes: 64 * 1024 ** 2, maxPerSession: 4 },
  mcp: { idleMs: 10 * 60_000 },
  sandbox: { mode: 'auto', uids: { first: 2_000_000_000, count: 1000 } },
  limits: {
    maxPayloadBytes: 1024 * 1024,
    maxToolUsesPerBatch: 100,
    maxQueuedBatches: 8,
    maxSessions: 64,
    maxTypeTextLength: 20_000,
    handshakeBurst: 100,
    handshakesPerSecond: 10,
    globalHandshakeBurst: 500,
    globalHandshakesPerSecond: 50,
    messageBurst: 200,
    messagesPerSecond: 50,
    // Twice the Messages API's 32 MB request limit: a result a client could forward never trips it.
    maxBufferedBytes: 64 * 1024 * 1024,
    maxBatchMs: 10 * 60_000,
  },
  callTimeoutMs: 30_000,
  exposeErrorMessages: false,
  disabledMembers: [],
  heartbeatMs: 30_000,
  sessionGraceMs: 120_000,
  resultCache: { maxEntries: 256, maxBytes: 32 * 1024 * 1024, ttlMs: 30 * 60_000, maxTotalBytes: 256 * 1024 * 1024 },
  shutdownDeadlineMs: 10_000,
  resilience: {
    breaker: { failures: 3, coolDownMs: 5_000 },
    retry: { attempts: 2, initialDelayMs: 100 },
  },
  logLevel: 'info',
};

/** Shortest configured token: 32 characters (`openssl rand -hex 32` gives 64; generated tokens are 43). */
export const MIN_TOKEN_LENGTH = 32;

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  readonly code = 'ERR_CONFIG';
}

/**
 * What the operator is told at start about a configuration that works but
 * can fail requests later, one line each.
 */
export function configWarnings(config: DaemonConfig): string[] {
  const warnings: string[] = [];
  const side = config.screenshot.limits.maxSidePx;
  if (side > MANY_IMAGES_MAX_SIDE_PX) {
    warnings.push(
      `screenshots may be up to ${side} px per side: the API refuses a request holding more than 20 images larger than ` +
        `${MANY_IMAGES_MAX_SIDE_PX} px per side, and deskbatch cannot count the images in an agent's conversation`,
    );
  }
  return warnings;
}

export function isLoopback(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return host === '::1' || host === '[::1]';
}

/** Normalises an origin the way browsers send it: `scheme://host[:port]`, lower-case, no path. */
export function normalizeOrigin(origin: string, flag = '--allow-origin'): string {
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    throw new ConfigError(`${flag} ${JSON.stringify(origin)} is not a URL origin such as https://viewer.example`);
  }
  if (url.origin === 'null') throw new ConfigError(`${flag} ${JSON.stringify(origin)} has no origin`);
  if (flag === '--embed-origin' && !['http:', 'https:'].includes(url.protocol)) {
    throw new ConfigError(`${flag} ${JSON.stringify(origin)} is not an http or https origin`);
  }
  return url.origin;
}

/** `--instance`: printable, bounded, and nothing a JSON answer or a log line would have to escape. */
const INSTANCE_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,252}$/;

/** A host name for `--allow-host-header`: lower-case letters, digits, dots and hyphens, no port, no trailing dot. */
export function normalizeHostName(name: string): string {
  const host = name.trim().toLowerCase();
  if (!/^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*$/.test(host) || host.length > 253) {
    throw new ConfigError(
      `--allow-host-header ${JSON.stringify(name)} is not a host name such as desk-3.desks.example (no scheme, no port)`,
    );
  }
  return host;
}

type DeepPartial<T> = {
  [K in keyof T]?: T[K] extends object ? (T[K] extends unknown[] ? T[K] : DeepPartial<T[K]>) : T[K];
};

/** Merges `over` onto `base`: plain objects recursively, arrays and scalars replaced, `undefined` ignored. */
function merge<T>(base: T, over: unknown): T {
  if (over === undefined) return base;
  if (!isPlainObject(base) || !isPlainObject(over)) return over as T;
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(over)) out[k] = merge(out[k], v);
  return out as T;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Merges options over the defaults and refuses impossible combinations. */
export function resolveConfig(
  options: DeepPartial<DaemonConfig> & { token: string; tokenConfigured: boolean },
): DaemonConfig {
  const merged = merge({ ...DEFAULT_CONFIG, display: undefined } as DaemonConfig, options);
  const config: DaemonConfig = {
    ...merged,
    allowOrigins: merged.allowOrigins.map((o) => normalizeOrigin(o)),
    embedOrigins: merged.embedOrigins.map((o) => normalizeOrigin(o, '--embed-origin')),
    allowHostHeaders: merged.allowHostHeaders.map(normalizeHostName),
  };

  if (!isLoopback(config.host) && !config.tokenConfigured) {
    throw new ConfigError(
      `refusing to bind ${config.host} without a configured token: set DESKBATCH_TOKEN, or bind 127.0.0.1`,
    );
  }
  if (config.token.length < MIN_TOKEN_LENGTH) {
    throw new ConfigError(`the token must be at least ${MIN_TOKEN_LENGTH} characters`);
  }
  if (!/^[A-Za-z0-9._~-]+$/.test(config.token)) {
    // It travels in a Sec-WebSocket-Protocol value, which allows only token characters.
    throw new ConfigError('the token may hold only letters, digits and . _ ~ -');
  }
  if (config.instance !== undefined && !INSTANCE_PATTERN.test(config.instance)) {
    throw new ConfigError(
      `--instance ${JSON.stringify(config.instance)} must be 1-253 of letters, digits and . _ : / - such as desk-1/<pod uid>`,
    );
  }
  if (!Number.isInteger(config.port) || config.port < 0 || config.port > 65535) {
    throw new ConfigError(`--port must be 0–65535, got ${config.port}`);
  }
  if (!['headless', 'headful', 'off'].includes(config.browser)) {
    throw new ConfigError(`--browser must be headless, headful or off, got ${String(config.browser)}`);
  }
  if (config.sandbox.mode !== 'auto' && config.sandbox.mode !== 'off') {
    throw new ConfigError(`--sandbox must be auto or off, got ${String(config.sandbox.mode)}`);
  }
  const { first, count } = config.sandbox.uids;
  if (
    !Number.isInteger(first) ||
    !Number.isInteger(count) ||
    first < 1000 ||
    count < 1 ||
    first + count > 2 ** 32 - 2
  ) {
    throw new ConfigError(
      `--sandbox-uids must be FIRST-LAST with 1000 <= FIRST <= LAST < 4294967294, got ${first}+${count}`,
    );
  }
  const positive: [string, number][] = [
    ['callTimeoutMs', config.callTimeoutMs],
    ['heartbeatMs', config.heartbeatMs],
    ['sessionGraceMs', config.sessionGraceMs],
    ['shutdownDeadlineMs', config.shutdownDeadlineMs],
    ['screenshot.limits.maxSidePx', config.screenshot.limits.maxSidePx],
    ['screenshot.limits.maxVisualTokens', config.screenshot.limits.maxVisualTokens],
    ['screenshot.maxBase64Bytes', config.screenshot.maxBase64Bytes],
    ...Object.entries(config.limits).map(([k, v]): [string, number] => [`limits.${k}`, v]),
    ...Object.entries(config.retention).map(([k, v]): [string, number] => [`retention.${k}`, v]),
    ...Object.entries(config.recording.retention).map(([k, v]): [string, number] => [`recording.retention.${k}`, v]),
    ...Object.entries(config.resultCache).map(([k, v]): [string, number] => [`resultCache.${k}`, v]),
    ...(['maxPerSession', 'maxFileBytes', 'maxSessionBytes', 'maxTotalBytes'] as const).map((k): [string, number] => [
      `documents.${k}`,
      config.documents[k],
    ]),
    ['clipboard.maxTextBytes', config.clipboard.maxTextBytes],
    ['mcp.idleMs', config.mcp.idleMs],
    ['clipboard.maxImageBytes', config.clipboard.maxImageBytes],
    ['--max-profiles', config.profiles.maxProfiles],
    ['--max-profile-bytes', config.profiles.maxProfileBytes],
    ['--profile-max-age', config.profiles.maxAgeMs],
    ['takeover.leaseMs', config.takeover.leaseMs],
    ['takeover.graceMs', config.takeover.graceMs],
    ['cdp.maxFrameBytes', config.cdp.maxFrameBytes],
    ['cdp.maxBufferedBytes', config.cdp.maxBufferedBytes],
    ['cdp.maxPerSession', config.cdp.maxPerSession],
    ['resilience.breaker.failures', config.resilience.breaker.failures],
    ['resilience.breaker.coolDownMs', config.resilience.breaker.coolDownMs],
    ['resilience.retry.initialDelayMs', config.resilience.retry.initialDelayMs],
  ];
  for (const [name, value] of positive) {
    if (!Number.isInteger(value) || value <= 0)
      throw new ConfigError(`${name} must be a positive integer, got ${value}`);
  }
  // Node fires a timer longer than 2^31-1 ms after 1 ms; keep every timer well inside that.
  const timers: [string, number, number][] = [
    ['callTimeoutMs', config.callTimeoutMs, HOUR_MS],
    ['heartbeatMs', config.heartbeatMs, HOUR_MS],
    ['sessionGraceMs', config.sessionGraceMs, DAY_MS],
    ['mcp.idleMs', config.mcp.idleMs, DAY_MS],
    ['shutdownDeadlineMs', config.shutdownDeadlineMs, 10 * 60_000],
    ['resultCache.ttlMs', config.resultCache.ttlMs, DAY_MS],
    ['limits.maxBatchMs', config.limits.maxBatchMs, DAY_MS],
    ['resilience.breaker.coolDownMs', config.resilience.breaker.coolDownMs, HOUR_MS],
    ['resilience.retry.initialDelayMs', config.resilience.retry.initialDelayMs, 60_000],
  ];
  for (const [name, value, max] of timers) {
    if (value > max) throw new ConfigError(`${name} must be at most ${max} ms, got ${value}`);
  }
  if (config.resultCache.maxTotalBytes < config.resultCache.maxBytes) {
    throw new ConfigError(
      `resultCache.maxTotalBytes (${config.resultCache.maxTotalBytes}) must be at least resultCache.maxBytes (${config.resultCache.maxBytes})`,
    );
  }
  if (config.documents.maxFileBytes > MAX_STAGED_FILE_BYTES) {
    throw new ConfigError(
      `--max-document-bytes must be at most ${MAX_STAGED_FILE_BYTES} (a page is handed a file whole), got ${config.documents.maxFileBytes}`,
    );
  }
  for (const [flag, value] of [
    ['--max-clipboard-text-bytes', config.clipboard.maxTextBytes],
    ['--max-clipboard-image-bytes', config.clipboard.maxImageBytes],
  ] as const) {
    if (value > MAX_CLIPBOARD_BYTES) {
      throw new ConfigError(`${flag} must be at most ${MAX_CLIPBOARD_BYTES} (a clipboard is held whole), got ${value}`);
    }
  }
  if (config.profiles.maxProfileBytes > MAX_PROFILE_BYTES) {
    throw new ConfigError(
      `--max-profile-bytes must be at most ${MAX_PROFILE_BYTES} (a profile is held in memory whole), got ${config.profiles.maxProfileBytes}`,
    );
  }
  if (config.profiles.maxProfiles > 100_000) {
    throw new ConfigError(`--max-profiles must be at most 100000, got ${config.profiles.maxProfiles}`);
  }
  if (config.profiles.maxAgeMs > MAX_PROFILE_AGE_MS) {
    throw new ConfigError(`--profile-max-age must be at most 3650d, got ${config.profiles.maxAgeMs} ms`);
  }
  if (config.profiles.keyFile === '' || !config.profiles.dir) {
    throw new ConfigError('--profile-key and --profiles-dir take a path, not an empty string');
  }
  if (config.cdp.maxFrameBytes > MAX_CDP_FRAME_BYTES) {
    throw new ConfigError(
      `cdp.maxFrameBytes must be at most ${MAX_CDP_FRAME_BYTES} (a frame is held whole), got ${config.cdp.maxFrameBytes}`,
    );
  }
  const settle = config.screenshot.settle;
  for (const [k, v] of Object.entries(settle)) {
    if (!Number.isInteger(v) || v < 0 || v > 10_000) {
      throw new ConfigError(`screenshot.settle.${k} must be 0–10000 ms, got ${String(v)}`);
    }
  }
  if (settle.afterInputMs > 0 && settle.intervalMs < 1) {
    throw new ConfigError('screenshot.settle.intervalMs must be at least 1 ms');
  }
  const { attempts } = config.resilience.retry;
  if (!Number.isInteger(attempts) || attempts < 0 || attempts > 5) {
    throw new ConfigError(`resilience.retry.attempts must be 0–5, got ${attempts}`);
  }
  const d = config.desktops;
  if (d.mode !== 'pool' && d.mode !== 'shared') throw new ConfigError(`desktops.mode must be pool or shared`);
  for (const [name, value] of [
    ['--desktops', d.max],
    ['desktops.maxWaiting', d.maxWaiting],
    ['desktops.maxWaitMs', d.maxWaitMs],
  ] as const) {
    if (!Number.isSafeInteger(value) || value < 1)
      throw new ConfigError(`${name} must be a positive integer, got ${value}`);
  }
  if (d.max > 256) throw new ConfigError(`--desktops must be at most 256, got ${d.max}`);
  if (d.maxWaitMs > DAY_MS) throw new ConfigError(`desktops.maxWaitMs must be at most ${DAY_MS} ms`);
  if (!Number.isSafeInteger(d.warm) || d.warm < 0 || d.warm > d.max) {
    throw new ConfigError(`--warm must be 0–${d.max} (--desktops), got ${d.warm}`);
  }
  if (!d.sizes.length) throw new ConfigError('--display-sizes needs at least one size');
  for (const size of d.sizes) {
    const ok = (n: number): boolean => Number.isInteger(n) && n >= 64 && n <= MAX_DISPLAY_SIDE_PX;
    if (!ok(size.width) || !ok(size.height)) {
      throw new ConfigError(
        `display sizes must be 64–${MAX_DISPLAY_SIDE_PX} px per side, got ${size.width}x${size.height}`,
      );
    }
  }
  const downloadCaps: [string, number][] = [
    ['--max-downloads', config.browserSettings.maxDownloads],
    ['--max-download-bytes', config.browserSettings.maxDownloadBytes],
  ];
  for (const [name, value] of downloadCaps) {
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new ConfigError(`${name} must be a whole number, 0 or more, got ${value}`);
    }
  }
  const rec = config.recording;
  if (!['off', 'all', 'on_request'].includes(rec.mode)) {
    throw new ConfigError(`recording.mode must be off, all or on_request, got ${String(rec.mode)}`);
  }
  if (!['all', 'failures'].includes(rec.keep)) {
    throw new ConfigError(`--record-keep must be all or failures, got ${String(rec.keep)}`);
  }
  if (!Number.isInteger(rec.videoFps) || rec.videoFps < 1 || rec.videoFps > 30) {
    throw new ConfigError(`--record-video-fps must be 1–30, got ${rec.videoFps}`);
  }
  const q = config.screenshot.quality;
  if (!Number.isInteger(q) || q < 1 || q > 100) throw new ConfigError(`screenshot quality must be 1–100, got ${q}`);
  if (!['png', 'jpeg', 'webp'].includes(config.screenshot.format)) {
    throw new ConfigError(`screenshot format must be png, jpeg or webp, got ${String(config.screenshot.format)}`);
  }
  const l = config.screenshot.limits;
  if (l.maxSidePx > 2576 || l.maxVisualTokens > 4784) {
    throw new ConfigError('screenshot limits may only be made smaller than 2576 px per side and 4784 visual tokens');
  }
  const b64 = config.screenshot.maxBase64Bytes;
  if (!Number.isSafeInteger(b64) || b64 < 1 || b64 > API_IMAGE_MAX_BYTES) {
    throw new ConfigError(
      `screenshot.maxBase64Bytes must be 1–${API_IMAGE_MAX_BYTES} (the API's 10 MB per image), got ${b64}`,
    );
  }
  return config;
}
