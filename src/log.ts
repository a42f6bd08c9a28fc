/**
 * Structured logs: one JSON object per line on stderr, with the session,
 * batch and tool_use ids as fields. Nothing here ever receives the token.
 */
export const LOG_LEVELS = ['debug', 'info', 'warn', 'error', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  child(fields: LogFields): Logger;
}

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export function createLogger(
  level: LogLevel = 'info',
  write: (line: string) => void = (line) => process.stderr.write(line),
  bound: LogFields = {},
): Logger {
  const at =
    (lvl: Exclude<LogLevel, 'silent'>) =>
    (msg: string, fields?: LogFields): void => {
      if (RANK[lvl] < RANK[level]) return;
      write(`${JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, ...bound, ...fields })}\n`);
    };
  return {
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    child: (fields) => createLogger(level, write, { ...bound, ...fields }),
  };
}

/** A logger that drops everything (tests, embedding). */
export const silentLogger: Logger = createLogger('silent');
