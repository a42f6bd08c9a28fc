/**
 * Structured logs on stderr: one record per line, with the session, batch and
 * tool_use ids as fields. Two formats: `json` (one JSON object per line, for
 * machines) and `pretty` (one human line per record).
 *
 * Redaction happens here, for every record: a field named like a credential
 * (token, authorization, cookie, password, api_key, in any case, at any depth)
 * is written as "[redacted]", and every occurrence of a configured secret (the
 * daemon's token) in any string, the message included, is replaced too.
 *
 * Why not pino (measured for issue 13 on a loaded 2-core machine, a batch
 * record with a bound session, best of 7): this logger costs 30 µs a line,
 * pino 7 µs bare and 17-21 µs with these redaction rules; a batch writes a few
 * lines, so either is noise. pino's `redact` takes exact paths in exact case
 * (these rules match any depth and any case), its records put `level` and a
 * child's fields before `time` and `msg` (docs/OPERATIONS.md documents
 * `time`, `level`, `msg` first), and pino-pretty has its own layout, not the
 * documented `key=value` line. Its asynchronous destination (sonic-boom) was
 * tried for a stderr nobody reads, where a synchronous write stalls the event
 * loop for as long as the reader is away: with a bound it stalled 25 ms at
 * most, but its flushSync at exit retries any error but EAGAIN for ever, so a
 * daemon whose stderr reader had gone (a pipe to a closed `tee`) never exited.
 * Writes stay synchronous until a bounded writer that gives up at exit exists.
 */
export const LOG_LEVELS = ['debug', 'info', 'warn', 'error', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export const LOG_FORMATS = ['json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  child(fields: LogFields): Logger;
}

export interface LoggerOptions {
  /** Default `json`. */
  format?: LogFormat;
  /** Strings never written: each occurrence in any string of a record becomes "[redacted]". */
  secrets?: readonly string[];
}

export const REDACTED = '[redacted]';

/** Field names (lower case, without `-` and `_`) whose values are never written. */
const SECRET_KEYS = new Set([
  'token',
  'accesstoken',
  'refreshtoken',
  'authorization',
  'proxyauthorization',
  'cookie',
  'setcookie',
  'password',
  'passwd',
  'secret',
  'apikey',
  'xapikey',
]);

/** Whether a field of this name holds a credential. */
export function isSecretKey(key: string): boolean {
  return SECRET_KEYS.has(key.toLowerCase().replace(/[-_]/g, ''));
}

/** Deeper structures are cut: a log record is not a dump. */
const MAX_LOGGED_DEPTH = 8;

/**
 * A copy of `value` fit for a log line: credential fields redacted, secrets
 * replaced in strings, errors as their text, cycles and depth bounded.
 */
export function redact(
  value: unknown,
  secrets: readonly string[] = [],
  depth = 0,
  seen = new WeakSet<object>(),
): unknown {
  if (typeof value === 'string') return scrub(value, secrets);
  if (typeof value === 'bigint') return value.toString();
  if (typeof value !== 'object' || value === null) return value;
  if (value instanceof Error) return scrub(String(value), secrets);
  if (seen.has(value)) return '[circular]';
  if (depth >= MAX_LOGGED_DEPTH) return '[too deep]';
  seen.add(value);
  try {
    if (Array.isArray(value)) return value.map((v) => redact(v, secrets, depth + 1, seen));
    const proto = Object.getPrototypeOf(value) as unknown;
    if (proto !== Object.prototype && proto !== null) {
      // Dates, URLs, Buffers…: as JSON would write them, then scrubbed.
      const json = JSON.stringify(value) as string | undefined;
      return json === undefined ? undefined : redact(JSON.parse(json), secrets, depth + 1, seen);
    }
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value))
      out[k] = isSecretKey(k) ? REDACTED : redact(v, secrets, depth + 1, seen);
    return out;
  } finally {
    seen.delete(value);
  }
}

function scrub(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) if (s && out.includes(s)) out = out.split(s).join(REDACTED);
  return out;
}

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

/** A field value on a pretty line: bare when it is a simple word, JSON otherwise (so one record stays one line). */
function prettyValue(v: unknown): string {
  if (typeof v === 'string') return /^[\w.:/@+,=[\]()-]*$/.test(v) && v !== '' ? v : JSON.stringify(v);
  if (Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === 'string' && /^[\w.:/@+()-]+$/.test(x)))
    return v.join(',');
  return JSON.stringify(v) ?? String(v);
}

function two(n: number): string {
  return String(n).padStart(2, '0');
}

/** `12:00:01 info  batch b1: 3 calls, 0 failed, 41 ms  session=s_abc batch=b1 …` (local time). */
export function formatPretty(at: Date, level: string, msg: string, fields: LogFields): string {
  const time = `${two(at.getHours())}:${two(at.getMinutes())}:${two(at.getSeconds())}`;
  // Control characters (a newline in a client's name) would split the record.
  const text = msg.replace(/[\p{Cc}\u2028\u2029]/gu, (c) => JSON.stringify(c).slice(1, -1));
  const pairs = Object.entries(fields)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k}=${prettyValue(v)}`);
  return `${time} ${level.padEnd(5)} ${text}${pairs.length ? `  ${pairs.join(' ')}` : ''}`;
}

export function createLogger(
  level: LogLevel = 'info',
  write: (line: string) => void = (line) => process.stderr.write(line),
  bound: LogFields = {},
  options: LoggerOptions = {},
): Logger {
  const format = options.format ?? 'json';
  const secrets = (options.secrets ?? []).filter((s) => s.length > 0);
  const at =
    (lvl: Exclude<LogLevel, 'silent'>) =>
    (msg: string, fields?: LogFields): void => {
      if (RANK[lvl] < RANK[level]) return;
      const now = new Date();
      const clean = redact({ ...bound, ...fields }, secrets) as LogFields;
      const text = scrub(String(msg), secrets);
      let line =
        format === 'pretty'
          ? formatPretty(now, lvl, text, clean)
          : JSON.stringify({ time: now.toISOString(), level: lvl, msg: text, ...clean });
      // Belt and braces: whatever slipped through a structure (a toJSON method), the line is scrubbed too.
      line = scrub(line, secrets);
      write(`${line}\n`);
    };
  return {
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    child: (fields) => createLogger(level, write, { ...bound, ...fields }, options),
  };
}

/** A logger that drops everything (tests, embedding). */
export const silentLogger: Logger = createLogger('silent');
