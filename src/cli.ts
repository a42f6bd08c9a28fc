/**
 * `deskbatch serve`: reads flags and the environment, starts an Xvfb of its
 * own when there is no DISPLAY, runs the daemon, and shuts down gracefully on
 * SIGINT/SIGTERM within a hard deadline. `deskbatch mcp` starts the same
 * daemon and serves one MCP session on stdin and stdout (docs/MCP.md).
 */
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  ConfigError,
  DEFAULT_CONFIG,
  resolveConfig,
  type BrowserMode,
  type DaemonConfig,
  type RecordingSettings,
} from './base/config.ts';
import { startDaemon, type Daemon } from './daemon.ts';
import {
  BROWSER_MEMBERS,
  BROWSER_OPTIONAL_MEMBERS,
  BROWSER_TOOLSET_NAME,
  BROWSER_TOOLSET_TYPE,
} from '../toolsets/browser/index.ts';
import { COMPUTER_MEMBERS, COMPUTER_TOOLSET_NAME, COMPUTER_TOOLSET_TYPE } from '../toolsets/computer/index.ts';
import { serveRemoteStdio, type ToolsetTable } from './mcp/index.ts';
import type { ImageFormat } from './base/image.ts';
import { startVirtualDisplay, type VirtualDisplay } from './desktop-driver/xvfb.ts';
import { FRAMEBUFFER_ENV } from './desktop-driver/worker-protocol.ts';
import { LOG_FORMATS, LOG_LEVELS, createLogger, type LogFormat, type LogLevel, type Logger } from './base/log.ts';
import { runAttached } from './base/child-process.ts';
import { PACKAGE_ROOT } from './base/package-root.ts';

const USAGE = `Usage: deskbatch serve [options]
       deskbatch setup [PACKAGE_LIST...]
                                 installs the Debian packages the daemon needs (apt, as root or
                                 through sudo) and Chromium's policy: scripts/setup.sh
       deskbatch mcp [options]   MCP over stdin/stdout for a local MCP host; serve's options,
                                 --port 0 by default (docs/MCP.md)
       deskbatch mcp --connect ws://HOST:PORT/v1
                                 the same, on a session of a daemon that runs elsewhere; its token
                                 in DESKBATCH_TOKEN or DESKBATCH_TOKEN_FILE
       deskbatch replay FILE --url URL [--token T] [--json] [--image-tolerance N]  (replay --help)

Options:
  --host HOST              address to bind (default ${DEFAULT_CONFIG.host}; others need DESKBATCH_TOKEN)
  --port PORT              TCP port (default ${DEFAULT_CONFIG.port}; 0 picks a free one)
  --browser MODE           headless | headful | off (default ${DEFAULT_CONFIG.browser})
  --screenshots-dir DIR    where returned images are also written (default ${DEFAULT_CONFIG.screenshotsDir})
  --allow-origin ORIGIN    browser origin allowed to connect; repeatable (default: none)
  --embed-origin ORIGIN    origin whose pages may frame the live page /viewer/live (a link's
                           view, docs/VIEWER.md "Links"); repeatable (default: none, no framing)
  --allow-host-header NAME a host name the HTTP routes answer to besides IP addresses
                           and localhost (others get 421); repeatable (default: none)
  --instance NAME          what this daemon is called in its fleet, said in /readyz: on Kubernetes
                           <pod name>/<pod uid>, from which its token is derived (docs/DEPLOY.md)
  --screenshot-format FMT  png | jpeg | webp (default ${DEFAULT_CONFIG.screenshot.format})
  --screenshot-quality Q   1-100 for jpeg and webp (default ${DEFAULT_CONFIG.screenshot.quality})
  --screenshot-max-side PX longest screenshot side, at most 2000 recommended (default ${DEFAULT_CONFIG.screenshot.limits.maxSidePx})
  --max-image-bytes B      base64 bytes one image may take (default ${DEFAULT_CONFIG.screenshot.maxBase64Bytes}, the
                           Claude API's 10 MB; 5000000 for Amazon Bedrock and Google Cloud Vertex AI)
  --display-size WxH       display size of the desktops started when DISPLAY is unset (default 1280x800)
  --display-sizes LIST     sizes a session may ask for in hello.desktop.display, comma-separated,
                           e.g. 1280x800,1024x768 (default: --display-size only); the first is the default
  --desktops MAX           desktops at most, one per session, when DISPLAY is unset (default for this
                           machine: ${DEFAULT_CONFIG.desktops.max}, from its cores and memory)
  --warm N                 desktops kept started and idle, so a new session gets one at once (default ${DEFAULT_CONFIG.desktops.warm})
  --desktop-queue N        new sessions that may wait for a desktop when all are in use (default ${DEFAULT_CONFIG.desktops.maxWaiting})
  --desktop-wait-ms MS     how long a new session may wait for one (default ${DEFAULT_CONFIG.desktops.maxWaitMs})
  --shared-desktop         with DISPLAY unset: start one desktop that every session shares (as with DISPLAY)
  --resume-window-ms MS    how long a session and its desktop outlive a dropped connection, for resume
                           (default ${DEFAULT_CONFIG.sessionGraceMs})
  --call-timeout-ms MS     time limit of one call (default ${DEFAULT_CONFIG.callTimeoutMs})
  --max-batch-ms MS        time budget of one batch, from when it gets the desktop; then
                           the rest is cancelled (default ${DEFAULT_CONFIG.limits.maxBatchMs})
  --expose-error-messages  let the model read thrown errors' messages, not only their type
  --disable MEMBER         switch a member off (in both toolsets); repeatable
  --browser-enable MEMBER  switch on an optional browser member: ${BROWSER_OPTIONAL_MEMBERS.slice(0, 2).join(', ')},
                           ${BROWSER_OPTIONAL_MEMBERS.slice(2).join(', ')}; repeatable
  --allow-host HOST        navigate only to these hosts and their subdomains; repeatable
  --deny-host HOST         never navigate to these hosts or their subdomains; repeatable
  --allow-private-networks let the browser reach loopback, private and link-local
                           addresses (default: refused, whatever the URL's name)
  --allow-private DEST     one such destination all the same: HOST, HOST:PORT or
                           ADDRESS/PREFIX; repeatable
  --upload-root DIR        folder file_upload may read from; repeatable (default: none)
  --downloads-dir DIR      where browser downloads are saved, one folder per session,
                           removed when the session ends (default downloads)
  --max-downloads N        downloads one session may start (default ${DEFAULT_CONFIG.browserSettings.maxDownloads}; 0 refuses all)
  --max-download-bytes B   bytes one session's downloads may hold (default ${DEFAULT_CONFIG.browserSettings.maxDownloadBytes},
                           ${DEFAULT_CONFIG.browserSettings.maxDownloadBytes / 1024 ** 2} MiB)
  --documents-dir DIR      where staged documents (and the downloads kept for harnesses) are kept,
                           in a private folder of the daemon's (default: the system's temporary folder)
  --max-documents N        documents one session may stage (default ${DEFAULT_CONFIG.documents.maxPerSession})
  --max-document-bytes B   bytes of one staged document (default ${DEFAULT_CONFIG.documents.maxFileBytes}, at most 50 MiB)
  --max-session-document-bytes B
                           bytes one session's staged documents may hold (default ${DEFAULT_CONFIG.documents.maxSessionBytes})
  --max-staged-bytes B     bytes every session's staged documents and kept downloads may hold together
                           (default ${DEFAULT_CONFIG.documents.maxTotalBytes}, 512 MiB)
  --max-clipboard-text-bytes B
                           bytes of text a harness may set on or read from its desktop's clipboard
                           (default ${DEFAULT_CONFIG.clipboard.maxTextBytes}, 1 MiB; at most 64 MiB)
  --max-clipboard-image-bytes B
                           bytes of a PNG image on the clipboard (default ${DEFAULT_CONFIG.clipboard.maxImageBytes}, 10 MiB)
  --profile-key FILE       the key that seals named browser profiles at rest (AES-256-GCM): a file of
                           32 bytes, 64 hex characters or base64, mode 0600 (e.g. openssl rand -out FILE 32);
                           without it profiles are off (docs/PROTOCOL.md "Profiles")
  --profiles-dir DIR       where profiles are kept, one sealed file each (default ${DEFAULT_CONFIG.profiles.dir})
  --max-profiles N         profiles kept at most (default ${DEFAULT_CONFIG.profiles.maxProfiles})
  --max-profile-bytes B    bytes of one profile's state as JSON (default ${DEFAULT_CONFIG.profiles.maxProfileBytes}, 8 MiB; at most 64 MiB)
  --profile-max-age AGE    remove a profile neither saved nor used for this long: 30d, 12h, 90m, 45s
                           (default ${DEFAULT_CONFIG.profiles.maxAgeMs / 86_400_000}d)
  --expose-download-paths  show the model where downloads were saved; only for an agent
                           with another tool that can read that path (default: hidden)
  --record                 record every session: its batches, a video of its desktop, its
                           browser's Playwright trace (docs/RECORDING.md)
  --record-on-request      record the sessions whose hello asks ("record": true)
  --recordings-dir DIR     where recordings are written (default ${DEFAULT_CONFIG.recording.dir})
  --record-keep WHICH      all | failures: keep only recordings with a failed or cancelled
                           batch (default ${DEFAULT_CONFIG.recording.keep})
  --record-video on|off    the desktop video (default on, when ffmpeg is installed)
  --record-video-fps N     its frames per second, 1-30 (default ${DEFAULT_CONFIG.recording.videoFps})
  --record-trace on|off    the browser's Playwright trace (default on)
  --record-network-bodies  the trace keeps every network body (default: stylesheets,
                           fonts and images only)
  --record-trace-screenshots
                           the trace keeps the browser's screencast too (slower calls)
  --record-documents       copy each staged document's content into the recording (default:
                           a line with its name, size and sha256 only)
  --record-downloads       copy each download kept for the harness into the recording (default:
                           a line with its name, size and sha256 only)
  --record-redact WHAT     typed | passwords | typed,passwords: store typed text as
                           "[N characters]" (passwords: only text typed into password fields)
  --record-max-sessions N  recordings kept at most (default ${DEFAULT_CONFIG.recording.retention.maxSessions})
  --record-max-bytes B     bytes all recordings may hold (default ${DEFAULT_CONFIG.recording.retention.maxBytes}, 2 GiB)
  --record-max-age-ms MS   age after which a recording is removed (default ${DEFAULT_CONFIG.recording.retention.maxAgeMs}, 7 days)
  --log-level LEVEL        debug | info | warn | error (default ${DEFAULT_CONFIG.logLevel})
  --allow-takeover         let an operator take a session's desktop from the viewer and hand
                           it back (docs/VIEWER.md "Takeover"); agents may then ask for a person
  --takeover-lease-ms MS   how long a person holds a desktop unless they extend it
                           (default ${DEFAULT_CONFIG.takeover.leaseMs}, 10 minutes)
  --takeover-grace-ms MS   how long a holder's viewer may be gone before control goes back
                           to the agent (default ${DEFAULT_CONFIG.takeover.graceMs})
  --allow-cdp              let a harness drive its session's own browser over CDP at
                           ws://HOST:PORT/v1/sessions/<session_id>/cdp (Playwright's connectOverCDP,
                           with the token): pool desktops with a sandbox only
                           (docs/PROTOCOL.md "CDP for the harness", docs/SECURITY.md)
  --sandbox MODE           auto | off (default auto): each desktop in a sandbox of its own, as
                           a uid of its own (root) or in user namespaces (not root); the daemon
                           refuses to start where that is impossible unless this is off
                           (docs/SECURITY.md "A sandbox per desktop")
  --sandbox-uids FIRST-LAST
                           the uids desktops get as root, one each (default
                           ${DEFAULT_CONFIG.sandbox.uids.first}-${DEFAULT_CONFIG.sandbox.uids.first + DEFAULT_CONFIG.sandbox.uids.count - 1})
  --mcp-idle-ms MS         how long an MCP session over HTTP (/mcp) may have no request open
                           before it ends with its desktop (default ${DEFAULT_CONFIG.mcp.idleMs}, 10 minutes)
  --log-format FORMAT      json | pretty (default: pretty when stderr is a terminal, else json)

Environment:
  DESKBATCH_TOKEN   bearer token clients present, at least 32 characters; when unset
                    (and no DESKBATCH_TOKEN_FILE), one is generated and written to
                    ~/.deskbatch/token (mode 0600)
  DESKBATCH_TOKEN_FILE
                    a file holding the token instead (read once, at start; surrounding
                    whitespace ignored), e.g. one written per pod (docs/DEPLOY.md)
  DISPLAY           X display every session shares; when unset, deskbatch starts a desktop
                    of its own (Xvfb, openbox, Chromium) for each session, up to --desktops
`;

/** Generated tokens: 32 random bytes, base64url (token characters only, fit for a subprotocol). */
async function loadOrCreateToken(path: string): Promise<string> {
  const existing = await stat(path).catch(() => undefined);
  if (existing && (existing.mode & 0o077) === 0) {
    const token = (await readFile(path, 'utf8')).trim();
    if (/^[A-Za-z0-9_-]{32,}$/.test(token)) return token;
  }
  const token = randomBytes(32).toString('base64url');
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  await writeFile(path, `${token}\n`, { mode: 0o600 });
  await chmod(path, 0o600);
  return token;
}

function parseSize(value: string, flag = '--display-size'): { width: number; height: number } {
  const m = /^(\d{2,5})x(\d{2,5})$/.exec(value);
  if (!m) throw new ConfigError(`${flag} must look like 1280x800, got ${value}`);
  return { width: Number(m[1]), height: Number(m[2]) };
}

/** `--display-size` first, then `--display-sizes` (the first of those is the default when the other is absent). */
function parseSizes(one: string | undefined, list: string | undefined): { width: number; height: number }[] {
  const sizes = (list ?? '')
    .split(',')
    .filter((v) => v.trim())
    .map((v) => parseSize(v.trim(), '--display-sizes'));
  const first = one !== undefined ? parseSize(one) : (sizes[0] ?? { width: 1280, height: 800 });
  return [first, ...sizes.filter((s) => s.width !== first.width || s.height !== first.height)];
}

/** `on` | `off` flags; undefined when not given. */
function onOff(name: string, v: string | undefined): boolean | undefined {
  if (v === undefined) return undefined;
  if (v !== 'on' && v !== 'off') throw new ConfigError(`--${name} must be on or off, got ${JSON.stringify(v)}`);
  return v === 'on';
}

/** Only plain decimal integers: Number('') would be 0, a silent port 0. */
const num = (v: string | undefined): number | undefined =>
  v === undefined ? undefined : /^\d+$/.test(v) ? Number(v) : NaN;

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A duration such as `30d`, `12h`, `90m`, `45s` or `500ms`, in ms; undefined when not given. */
export function parseDuration(flag: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const m = /^(\d{1,9})(ms|s|m|h|d)$/.exec(v.trim());
  if (!m) throw new ConfigError(`${flag} takes a duration such as 30d, 12h, 90m or 45s, got ${JSON.stringify(v)}`);
  return Number(m[1]) * DURATION_UNITS[m[2]!]!;
}

/** `--sandbox-uids FIRST-LAST` as a range; undefined when not given. */
function idRange(v: string | undefined): { first: number; count: number } | undefined {
  if (v === undefined) return undefined;
  const m = /^(\d{1,10})-(\d{1,10})$/.exec(v);
  if (!m || Number(m[2]) < Number(m[1]))
    throw new ConfigError(`--sandbox-uids must be FIRST-LAST, got ${JSON.stringify(v)}`);
  return { first: Number(m[1]), count: Number(m[2]) - Number(m[1]) + 1 };
}

/** The `--record*` flags as `recording` settings (docs/RECORDING.md). */
function recordingOptions(values: Record<string, string | boolean | string[] | undefined>): Partial<
  Omit<RecordingSettings, 'retention' | 'redact'>
> & {
  retention: Partial<RecordingSettings['retention']>;
  redact?: RecordingSettings['redact'];
} {
  const str = (k: string): string | undefined => values[k] as string | undefined;
  if (values.record && values['record-on-request'])
    throw new ConfigError('give --record or --record-on-request, not both');
  const redact = str('record-redact');
  const what = redact?.split(',').map((w) => w.trim());
  if (what?.some((w) => w !== 'typed' && w !== 'passwords')) {
    throw new ConfigError(`--record-redact takes typed, passwords or both, got ${JSON.stringify(redact)}`);
  }
  return {
    ...(values.record ? { mode: 'all' as const } : values['record-on-request'] ? { mode: 'on_request' as const } : {}),
    dir: str('recordings-dir'),
    keep: str('record-keep') as RecordingSettings['keep'] | undefined,
    video: onOff('record-video', str('record-video')),
    videoFps: num(str('record-video-fps')),
    trace: onOff('record-trace', str('record-trace')),
    networkBodies: values['record-network-bodies'] as boolean | undefined,
    documents: values['record-documents'] as boolean | undefined,
    downloads: values['record-downloads'] as boolean | undefined,
    traceScreenshots: values['record-trace-screenshots'] as boolean | undefined,
    ...(what ? { redact: { typed: what.includes('typed'), passwords: what.includes('passwords') } } : {}),
    retention: {
      maxSessions: num(str('record-max-sessions')),
      maxBytes: num(str('record-max-bytes')),
      maxAgeMs: num(str('record-max-age-ms')),
    },
  };
}

/** `deskbatch serve`'s flags (USAGE says what each does). */
const SERVE_OPTIONS = {
  host: { type: 'string' },
  port: { type: 'string' },
  browser: { type: 'string' },
  'screenshots-dir': { type: 'string' },
  'allow-origin': { type: 'string', multiple: true },
  'embed-origin': { type: 'string', multiple: true },
  'allow-host-header': { type: 'string', multiple: true },
  instance: { type: 'string' },
  'screenshot-format': { type: 'string' },
  'screenshot-quality': { type: 'string' },
  'screenshot-max-side': { type: 'string' },
  'max-image-bytes': { type: 'string' },
  'display-size': { type: 'string' },
  'display-sizes': { type: 'string' },
  desktops: { type: 'string' },
  warm: { type: 'string' },
  'desktop-queue': { type: 'string' },
  'desktop-wait-ms': { type: 'string' },
  'shared-desktop': { type: 'boolean' },
  'resume-window-ms': { type: 'string' },
  'call-timeout-ms': { type: 'string' },
  'max-batch-ms': { type: 'string' },
  'expose-error-messages': { type: 'boolean' },
  disable: { type: 'string', multiple: true },
  'browser-enable': { type: 'string', multiple: true },
  'allow-host': { type: 'string', multiple: true },
  'deny-host': { type: 'string', multiple: true },
  'allow-private-networks': { type: 'boolean' },
  'allow-private': { type: 'string', multiple: true },
  'upload-root': { type: 'string', multiple: true },
  'downloads-dir': { type: 'string' },
  'max-downloads': { type: 'string' },
  'max-download-bytes': { type: 'string' },
  'expose-download-paths': { type: 'boolean' },
  'documents-dir': { type: 'string' },
  'max-documents': { type: 'string' },
  'max-document-bytes': { type: 'string' },
  'max-session-document-bytes': { type: 'string' },
  'max-staged-bytes': { type: 'string' },
  'record-documents': { type: 'boolean' },
  'max-clipboard-text-bytes': { type: 'string' },
  'max-clipboard-image-bytes': { type: 'string' },
  'profile-key': { type: 'string' },
  'profiles-dir': { type: 'string' },
  'max-profiles': { type: 'string' },
  'max-profile-bytes': { type: 'string' },
  'profile-max-age': { type: 'string' },
  'record-downloads': { type: 'boolean' },
  record: { type: 'boolean' },
  'record-on-request': { type: 'boolean' },
  'recordings-dir': { type: 'string' },
  'record-keep': { type: 'string' },
  'record-video': { type: 'string' },
  'record-video-fps': { type: 'string' },
  'record-trace': { type: 'string' },
  'record-network-bodies': { type: 'boolean' },
  'record-trace-screenshots': { type: 'boolean' },
  'record-redact': { type: 'string' },
  'record-max-sessions': { type: 'string' },
  'record-max-bytes': { type: 'string' },
  'record-max-age-ms': { type: 'string' },
  'allow-takeover': { type: 'boolean' },
  'allow-cdp': { type: 'boolean' },
  sandbox: { type: 'string' },
  'sandbox-uids': { type: 'string' },
  'takeover-lease-ms': { type: 'string' },
  'takeover-grace-ms': { type: 'string' },
  'log-level': { type: 'string' },
  'log-format': { type: 'string' },
  'mcp-idle-ms': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** `deskbatch mcp`'s flags: serve's, and `--connect`. */
const MCP_OPTIONS = { ...SERVE_OPTIONS, connect: { type: 'string' } } as const;

/** The member tables (toolsets/) MCP's tools are made from when they come from another daemon (`--connect`). */
const MEMBER_TABLES: readonly ToolsetTable[] = [
  { name: COMPUTER_TOOLSET_NAME, type: COMPUTER_TOOLSET_TYPE, members: COMPUTER_MEMBERS },
  { name: BROWSER_TOOLSET_NAME, type: BROWSER_TOOLSET_TYPE, members: BROWSER_MEMBERS },
];

type ServeValues = ReturnType<
  typeof parseArgs<{ args: string[]; strict: true; options: typeof SERVE_OPTIONS }>
>['values'];

/** What `--log-level` and `--log-format` ask for, checked before anything else is done. */
function logSettings(values: ServeValues): { level: LogLevel; format: LogFormat } {
  const level = (values['log-level'] ?? DEFAULT_CONFIG.logLevel) as LogLevel;
  if (!LOG_LEVELS.includes(level)) throw new ConfigError(`--log-level must be one of ${LOG_LEVELS.join(', ')}`);
  const format = (values['log-format'] ?? (process.stderr.isTTY ? 'pretty' : 'json')) as LogFormat;
  if (!LOG_FORMATS.includes(format)) throw new ConfigError(`--log-format must be one of ${LOG_FORMATS.join(', ')}`);
  return { level, format };
}

interface TokenSource {
  token: string;
  /** Whether the operator gave it (DESKBATCH_TOKEN or DESKBATCH_TOKEN_FILE), rather than the file generated once. */
  configured: boolean;
  /** Where it came from, for the start-up line (never the token itself). */
  from: string;
}

/**
 * The token: DESKBATCH_TOKEN, the file DESKBATCH_TOKEN_FILE names, or one
 * generated once into ~/.deskbatch/token. Both variables leave the
 * environment first: children (Xvfb, openbox, the desktop worker, anything
 * started on the desktop) must never see the token.
 */
async function readToken(): Promise<TokenSource> {
  const tokenFile = process.env.DESKBATCH_TOKEN_FILE?.trim() || undefined;
  let envToken = process.env.DESKBATCH_TOKEN?.trim();
  delete process.env.DESKBATCH_TOKEN;
  delete process.env.DESKBATCH_TOKEN_FILE;
  if (envToken && tokenFile) throw new ConfigError('set DESKBATCH_TOKEN or DESKBATCH_TOKEN_FILE, not both');
  if (tokenFile) {
    envToken = (
      await readFile(tokenFile, 'utf8').catch((err: NodeJS.ErrnoException) => {
        throw new ConfigError(`DESKBATCH_TOKEN_FILE ${tokenFile}: cannot read it (${err.code ?? err.message})`);
      })
    ).trim();
    if (!envToken) throw new ConfigError(`DESKBATCH_TOKEN_FILE ${tokenFile} is empty`);
    return { token: envToken, configured: true, from: `from DESKBATCH_TOKEN_FILE ${tokenFile}` };
  }
  if (envToken) return { token: envToken, configured: true, from: 'from DESKBATCH_TOKEN' };
  const tokenPath = join(homedir(), '.deskbatch', 'token');
  return { token: await loadOrCreateToken(tokenPath), configured: false, from: `in ${tokenPath} (mode 0600)` };
}

/** The daemon's configuration from the flags, the token and the environment's DISPLAY. */
function configFrom(
  values: ServeValues,
  token: TokenSource,
  display: string | undefined,
  pooled: boolean,
  sizes: { width: number; height: number }[],
): DaemonConfig {
  return resolveConfig({
    desktops: {
      mode: pooled ? 'pool' : 'shared',
      max: num(values.desktops),
      warm: num(values.warm),
      sizes,
      maxWaiting: num(values['desktop-queue']),
      maxWaitMs: num(values['desktop-wait-ms']),
    },
    sessionGraceMs: num(values['resume-window-ms']),
    host: values.host,
    port: num(values.port),
    browser: values.browser as BrowserMode | undefined,
    screenshotsDir: values['screenshots-dir'],
    allowOrigins: values['allow-origin'],
    embedOrigins: values['embed-origin'],
    allowHostHeaders: values['allow-host-header'],
    instance: values.instance,
    screenshot: {
      format: values['screenshot-format'] as ImageFormat | undefined,
      quality: num(values['screenshot-quality']),
      limits: { maxSidePx: num(values['screenshot-max-side']) },
      maxBase64Bytes: num(values['max-image-bytes']),
    },
    callTimeoutMs: num(values['call-timeout-ms']),
    limits: { maxBatchMs: num(values['max-batch-ms']) },
    exposeErrorMessages: values['expose-error-messages'],
    disabledMembers: values.disable,
    browserSettings: {
      enable: values['browser-enable'],
      allowHosts: values['allow-host'],
      denyHosts: values['deny-host'],
      allowPrivateNetworks: values['allow-private-networks'],
      privateAllow: values['allow-private'],
      uploadRoots: values['upload-root'],
      downloadsDir: values['downloads-dir'],
      maxDownloads: num(values['max-downloads']),
      maxDownloadBytes: num(values['max-download-bytes']),
      exposeDownloadPaths: values['expose-download-paths'],
    },
    recording: recordingOptions(values),
    documents: {
      dir: values['documents-dir'],
      maxPerSession: num(values['max-documents']),
      maxFileBytes: num(values['max-document-bytes']),
      maxSessionBytes: num(values['max-session-document-bytes']),
      maxTotalBytes: num(values['max-staged-bytes']),
    },
    clipboard: {
      maxTextBytes: num(values['max-clipboard-text-bytes']),
      maxImageBytes: num(values['max-clipboard-image-bytes']),
    },
    profiles: {
      keyFile: values['profile-key'],
      dir: values['profiles-dir'],
      maxProfiles: num(values['max-profiles']),
      maxProfileBytes: num(values['max-profile-bytes']),
      maxAgeMs: parseDuration('--profile-max-age', values['profile-max-age']),
    },
    takeover: {
      enabled: values['allow-takeover'],
      leaseMs: num(values['takeover-lease-ms']),
      graceMs: num(values['takeover-grace-ms']),
    },
    cdp: { enabled: values['allow-cdp'] },
    mcp: { idleMs: num(values['mcp-idle-ms']) },
    sandbox: {
      mode: values.sandbox as 'auto' | 'off' | undefined,
      uids: idRange(values['sandbox-uids']),
    },
    logLevel: values['log-level'] as LogLevel | undefined,
    token: token.token,
    tokenConfigured: token.configured,
    display,
    // An operator's own Xvfb started with -fbdir: its screen file (README.md, docs/PERFORMANCE.md "Grabbing the screen").
    ...(display && process.env[FRAMEBUFFER_ENV] ? { displayFramebuffer: process.env[FRAMEBUFFER_ENV] } : {}),
  });
}

/**
 * SIGINT and SIGTERM shut the daemon (and the display it started) down, within a hard deadline; so does the
 * function returned, which `deskbatch mcp` calls when its MCP session ends.
 */
function stopOnSignals(
  daemon: Daemon,
  xvfb: VirtualDisplay | undefined,
  config: DaemonConfig,
  log: Logger,
): (why: string, exitCode?: number) => void {
  let stopping = false;
  const stop = (why: string, exitCode = 0): void => {
    if (stopping) return;
    stopping = true;
    log.info(`${why}: shutting down`);
    // The hard deadline: whatever still runs after it is abandoned.
    setTimeout(() => {
      log.error('shutdown deadline passed; exiting');
      process.exit(1);
    }, config.shutdownDeadlineMs + 2_000).unref();
    void (async () => {
      await daemon.close();
      await xvfb?.stop();
      process.exit(exitCode);
    })();
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
  return stop;
}

/** A daemon started from `serve`'s flags, with what stops it. */
interface Started {
  daemon: Daemon;
  log: Logger;
  stop: (why: string, exitCode?: number) => void;
}

/**
 * Starts the daemon from `serve`'s flags (`defaults` fill flags left out), with an Xvfb of its own in
 * shared mode when there is no DISPLAY, and stops it on SIGINT and SIGTERM.
 */
async function start(values: ServeValues, defaults: Partial<ServeValues> = {}): Promise<Started> {
  values = { ...defaults, ...Object.fromEntries(Object.entries(values).filter(([, v]) => v !== undefined)) };
  const logging = logSettings(values);
  const token = await readToken();
  // The logger knows the token only to keep it out of every line (src/base/log.ts).
  const log = createLogger(logging.level, undefined, {}, { format: logging.format, secrets: [token.token] });
  let display = process.env.DISPLAY || undefined;
  let xvfb: VirtualDisplay | undefined;
  const sizes = parseSizes(values['display-size'], values['display-sizes']);
  const pooled = !display && !values['shared-desktop'];
  const config = configFrom(values, token, display, pooled, sizes);
  if (pooled) {
    // Each desktop has its own display and X cookie (src/desktop-pool/desktop.ts).
    config.displayAuth = 'cookie';
  } else if (!display) {
    xvfb = await startVirtualDisplay({ ...sizes[0]!, windowManager: true, log: (l, m, f) => log[l](m, f) });
    display = xvfb.display;
    config.display = display;
    config.displayAuth = 'cookie';
    config.displayFramebuffer = xvfb.framebuffer;
    // Its X server admits only clients with its cookie: our worker, openbox and the browser inherit it.
    process.env.DISPLAY = display;
    process.env.XAUTHORITY = xvfb.xauthority;
  }

  const daemon = await startDaemon(config, log);
  log.info(`deskbatch listening on ${daemon.url}`, {
    ...(pooled ? { desktops: 'pool' } : { display }),
    pid: process.pid,
  });
  log.info(`token: ${token.from}`);
  return { daemon, log, stop: stopOnSignals(daemon, xvfb, config, log) };
}

async function serve(argv: string[]): Promise<void> {
  const { values } = parseArgs({ args: argv, strict: true, options: SERVE_OPTIONS });
  if (values.help) {
    process.stdout.write(USAGE);
    return;
  }
  await start(values);
}

/**
 * `deskbatch mcp`: the daemon as `serve` starts it, and one MCP session on stdin and stdout, bound to a session
 * of its own (docs/MCP.md "Over stdio"). stdout carries MCP frames only; the log goes to stderr. An MCP host
 * starts it in a folder of its choosing, so what it writes goes under ~/.deskbatch unless a flag says where;
 * it takes a free port unless --port says which. The MCP session's end (stdin closed) stops the daemon.
 */
async function mcp(argv: string[]): Promise<void> {
  const { values } = parseArgs({ args: argv, strict: true, options: MCP_OPTIONS });
  if (values.help) {
    process.stdout.write(USAGE);
    return;
  }
  const { connect, ...serveValues } = values;
  if (connect !== undefined) return mcpConnect(connect, serveValues);
  const home = join(homedir(), '.deskbatch');
  // One session is all it serves: one desktop at most, started for it (none kept warm for a next one).
  const { daemon, log, stop } = await start(serveValues, {
    port: '0',
    desktops: '1',
    warm: '0',
    'screenshots-dir': join(home, 'screenshots'),
    'downloads-dir': join(home, 'downloads'),
  });
  try {
    const session = await daemon.mcp.serveStdio();
    await session.ended;
    stop('the MCP session ended');
  } catch (err) {
    log.error('MCP over stdio could not start', { error: err instanceof Error ? err.message : String(err) });
    stop('no MCP session', 1);
  }
}

/**
 * `deskbatch mcp --connect ws://HOST:PORT/v1`: no daemon here; the MCP session on stdin and stdout is bound to a
 * session of the daemon at that URL, whose operator chose its options (only the log's may be given here). Its
 * token must be given (DESKBATCH_TOKEN or DESKBATCH_TOKEN_FILE): none is made up for another daemon.
 */
async function mcpConnect(url: string, values: ServeValues): Promise<void> {
  const daemonFlags = Object.keys(values).filter((k) => k !== 'log-level' && k !== 'log-format');
  if (daemonFlags.length) {
    const flags = daemonFlags.map((f) => `--${f}`).join(', ');
    throw new ConfigError(`--connect takes no daemon options (that daemon's operator sets them): ${flags}`);
  }
  if (!/^wss?:\/\/[^/]+\/v1$/.test(url))
    throw new ConfigError(`--connect takes ws://HOST:PORT/v1, got ${JSON.stringify(url)}`);
  if (!process.env.DESKBATCH_TOKEN?.trim() && !process.env.DESKBATCH_TOKEN_FILE?.trim()) {
    throw new ConfigError("--connect needs that daemon's token in DESKBATCH_TOKEN or DESKBATCH_TOKEN_FILE");
  }
  const logging = logSettings(values);
  const token = await readToken();
  const log = createLogger(logging.level, undefined, {}, { format: logging.format, secrets: [token.token] });
  let session: Awaited<ReturnType<typeof serveRemoteStdio>>;
  try {
    session = await serveRemoteStdio({ url, token: token.token, tables: MEMBER_TABLES, log });
  } catch (err) {
    log.error('MCP over stdio could not start', { url, error: err instanceof Error ? err.message : String(err) });
    process.exit(1);
  }
  const stop = (why: string): void => {
    log.info(`${why}: closing`);
    void session.end().then(() => process.exit(0));
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
  await session.ended;
  log.info('the MCP session ended');
  process.exit(0);
}

/**
 * `deskbatch setup`: scripts/setup.sh of this package, as `npm start` runs it in a checkout; in an
 * installed package (node_modules/deskbatch) it installs the Debian packages and Chromium's policy,
 * and leaves node_modules to npm. Its exit status becomes ours.
 */
async function setup(args: string[]): Promise<void> {
  const run = await runAttached('bash', [join(PACKAGE_ROOT, 'scripts', 'setup.sh'), ...args]);
  if (run.error) process.stderr.write(`deskbatch: cannot run bash: ${run.error.code ?? run.error.message}\n`);
  process.exitCode = run.code ?? 1;
}

export async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  try {
    if (command === 'serve') return await serve(rest);
    if (command === 'setup') return await setup(rest);
    if (command === 'mcp') return await mcp(rest);
    if (command === 'replay') return await (await import('./recording/replay-cli.ts')).replay(rest);
    if (command === undefined || command === 'help' || command === '--help' || command === '-h') {
      process.stdout.write(USAGE);
      return;
    }
    process.stderr.write(`deskbatch: unknown command ${JSON.stringify(command)}\n\n${USAGE}`);
    process.exitCode = 2;
  } catch (err) {
    if (err instanceof ConfigError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      process.stderr.write(`deskbatch: ${(err as Error).message}\n`);
      process.exitCode = 2;
      return;
    }
    throw err;
  }
}
