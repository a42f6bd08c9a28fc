/**
 * deskbatch/daemon: the daemon, started from a program of your own instead of
 * `deskbatch serve` (src/cli.ts), which starts it the same way.
 *
 *   import { createLogger, resolveConfig, startDaemon } from 'deskbatch/daemon';
 *   const daemon = await startDaemon(
 *     resolveConfig({ token, tokenConfigured: true, port: 0, desktops: { mode: 'pool' } }),
 *     createLogger('info'),
 *   );
 *   console.log(daemon.url); // ws://127.0.0.1:PORT/v1
 *   await daemon.close();
 *
 * `desktops.mode: 'pool'` gives each session a desktop of its own (Xvfb, openbox, Chromium), as
 * `deskbatch serve` does with no DISPLAY; the default, 'shared', drives the display `display` names.
 * Every setting and its default is `DaemonConfig` (src/base/config.ts); the Debian packages it needs
 * are installed by `deskbatch setup`.
 *
 * What a program gets back is `RunningDaemon`, the daemon's public face: its parts (`Daemon` in
 * src/daemon.ts) are this repository's to change, and their declarations stay out of the package's.
 */
import type { AddressInfo } from 'node:net';
import type { DaemonConfig, resolveConfig } from './base/config.ts';
import type { Logger } from './base/log.ts';
import { startDaemon as start } from './daemon.ts';

export {
  ConfigError,
  DEFAULT_CONFIG,
  resolveConfig,
  type BrowserMode,
  type DaemonConfig,
  type DesktopSettings,
} from './base/config.ts';
export { createLogger, type LogFormat, type LogLevel, type Logger, type LoggerOptions } from './base/log.ts';

/** What `resolveConfig` takes: any part of `DaemonConfig` (the rest are its defaults), and the token. */
export type DaemonOptions = Parameters<typeof resolveConfig>[0];

/** A daemon that listens. */
export interface RunningDaemon {
  /** The ws:// URL clients connect to: `ws://HOST:PORT/v1`. */
  readonly url: string;
  /** Where it listens (the port, when `port` was 0). */
  readonly address: AddressInfo;
  /** Graceful shutdown within `config.shutdownDeadlineMs`: running batches are answered. Idempotent. */
  close(): Promise<void>;
}

/**
 * Starts a daemon: it listens once this resolves. It rejects with a `ConfigError` for settings it
 * refuses (nothing is left running then).
 */
export const startDaemon: (config: DaemonConfig, log: Logger) => Promise<RunningDaemon> = start;
