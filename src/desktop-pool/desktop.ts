/**
 * A desktop: one X display with its window manager, the desktop worker that
 * drives it, the browser that runs on it, and the lane that keeps its input
 * one batch at a time. Calls reach their session's desktop through
 * `CallContext.desktop` (src/toolset-api/types.ts); where desktops come from is
 * src/desktop-pool/pool.ts (one per session) or a single shared one (`DISPLAY`
 * given).
 */
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { BrowserManager } from '../browser/manager.ts';
import { DesktopClipboard } from '../desktop-driver/clipboard.ts';
// What the server's clipboard routes need of a desktop's clipboard: it reaches desktops through this layer only.
export { ClipboardUnavailable, type ClipboardType } from '../desktop-driver/clipboard.ts';
import type { DesktopDriver } from '../desktop-driver/driver.ts';
import type { WorkerDesktopDriver } from '../desktop-driver/worker-driver.ts';
import { FRAMEBUFFER_ENV } from '../desktop-driver/worker-protocol.ts';
import { startVirtualDisplay, type VirtualDisplay } from '../desktop-driver/xvfb.ts';
import type { Hold } from './hold.ts';
import type { Lane } from './lane.ts';
import type { Size } from '../base/geometry.ts';
import type { Logger } from '../base/log.ts';
import { ownedTempFolder } from '../base/temp-folder.ts';
import type { Server } from 'node:net';
import type { Confinement } from '../base/child-process.ts';
import { DesktopSandbox, type IdAllocator, type SandboxMode } from './sandbox.ts';

/** What a call acts on: its session's desktop. */
export interface DesktopResources {
  /** `shared`, or `d<N>` for a pooled desktop (N counts every desktop this daemon built). */
  readonly id: string;
  readonly driver: DesktopDriver;
  /** Undefined when the daemon serves no browser. */
  readonly browser: BrowserManager | undefined;
  /** Batches that touch the display run one at a time on it, first come first served. */
  readonly lane: Lane;
  /** A person's hold (docs/VIEWER.md "Takeover"): while someone controls the desktop, its batches wait. */
  readonly hold?: Hold;
  /**
   * Its X display and the cookie file that admits a client there, when known
   * (a recording's video, a takeover's VNC server), and the desktop's sandbox
   * those programs then run in.
   */
  readonly screen?: { display: string; xauthority?: string; within?: ScreenSandbox };
  /**
   * Its clipboard as the harness sets and reads it (docs/PROTOCOL.md "Clipboard"): a pooled desktop's
   * own; undefined for the shared desktop, whose clipboard is the operator's display's, every session's.
   */
  readonly clipboard?: DesktopClipboard;
}

/** A desktop's sandbox as the programs that watch its screen need it: to run in it, and a folder of theirs there. */
export interface ScreenSandbox extends Confinement {
  /** A new folder (0700, the desktop's) in the sandbox's own, at the same path on both sides. */
  privateFolder(kind: string): Promise<string>;
}

/** The processes of a desktop the daemon started itself, and what it must remove when the desktop goes. */
export interface DesktopParts {
  driver: WorkerDesktopDriver;
  browser: BrowserManager | undefined;
  display: VirtualDisplay;
  /** Its CLIPBOARD selection as the harness sets it (the xclip serving it, stopped with the desktop). */
  clipboard: DesktopClipboard;
  /** The desktop's own HOME (Chromium's and the worker's), removed with it. */
  home: string;
  /** Its browser downloads folder, removed with it. */
  downloads: string;
  /** Its sandbox (stopped last), and the uid it was given back to the allocator. */
  sandbox?: DesktopSandbox;
  sandboxIds?: IdAllocator;
  /** The egress proxy's listener on the sandbox's loopback (closed with it). */
  egress?: Server;
}

/** Builds a worker driver and a browser manager for one display; the daemon knows their settings. */
export type PartsFactory = (spec: {
  id: string;
  display: string;
  env: Readonly<Record<string, string>>;
  downloadsDir: string;
  /** The desktop's sandbox, and the egress proxy's listener inside it, when desktops are sandboxed. */
  sandbox?: {
    box: DesktopSandbox;
    egress?: { server: Server; port: number };
    /** Shared mode: only the browser runs in it; the worker drives the operator's display from outside. */
    browserOnly?: boolean;
  };
}) => { driver: WorkerDesktopDriver; browser: BrowserManager | undefined };

/** How the pool's desktops are sandboxed (src/desktop-pool/sandbox.ts); absent: `--sandbox off`. */
export interface SandboxSettings {
  mode: Exclude<SandboxMode, 'off'>;
  /** `uid` mode: where each desktop's uid comes from. */
  ids: IdAllocator;
}

export interface BuildOptions {
  id: string;
  size: Size;
  /** Root of the desktops' downloads folders: each desktop gets `<root>/<id>`. */
  downloadsRoot: string;
  makeParts: PartsFactory;
  /** Start the worker and launch the browser now, so the first calls do not wait for them. */
  warm: boolean;
  sandbox?: SandboxSettings;
  /** Whether the browser runs (its egress listener is then made in the sandbox). */
  browser: boolean;
  log: Logger;
}

/**
 * Starts a desktop of its own: Xvfb (own display number and X cookie),
 * openbox, the worker, and (when `warm`) the browser, with a HOME of its own.
 * On failure everything started is stopped again before it throws.
 */
export async function buildDesktop(options: BuildOptions): Promise<DesktopParts> {
  const { id, size, log } = options;
  const downloads = join(options.downloadsRoot, id);
  const settings = options.sandbox;
  let home: string | undefined;
  let display: VirtualDisplay | undefined;
  let made: ReturnType<PartsFactory> | undefined;
  let sandbox: DesktopSandbox | undefined;
  let uid: number | undefined;
  let egress: { server: Server; port: number } | undefined;
  try {
    if (settings) {
      uid = settings.mode === 'uid' ? settings.ids.take() : undefined;
      const t0 = performance.now();
      sandbox = await DesktopSandbox.start({
        id,
        mode: settings.mode,
        ...(uid !== undefined ? { uid } : {}),
        framebufferBytes: size.width * size.height * 4,
      });
      log.debug('sandbox ready', {
        desktop: id,
        mode: settings.mode,
        uid: sandbox.uid,
        ms: Math.round(performance.now() - t0),
      });
    }
    home = sandbox ? sandbox.folders.home : await ownedTempFolder(`${id}-home`);
    display = await startVirtualDisplay({
      ...size,
      windowManager: true,
      ...(sandbox ? { sandbox } : {}),
      log: (level, msg, fields) => log[level](msg, { desktop: id, ...fields }),
    });
    if (sandbox && options.browser) egress = await sandbox.proxyListener();
    made = options.makeParts({
      id,
      display: display.display,
      env: {
        XAUTHORITY: display.xauthority,
        // Always set, also when empty: a value in the daemon's own environment names another display's screen.
        [FRAMEBUFFER_ENV]: display.framebuffer ?? '',
        HOME: home,
        XDG_CONFIG_HOME: join(home, '.config'),
      },
      downloadsDir: downloads,
      ...(sandbox ? { sandbox: { box: sandbox, ...(egress ? { egress } : {}) } } : {}),
    });
    if (options.warm) {
      await made.driver.displaySize();
      await made.browser?.browserNow();
    }
    const clipboard = new DesktopClipboard({
      display: display.display,
      xauthority: display.xauthority,
      ...(sandbox ? { within: sandbox } : {}),
    });
    return {
      ...made,
      display,
      clipboard,
      home,
      downloads,
      ...(sandbox ? { sandbox } : {}),
      ...(settings && uid !== undefined ? { sandboxIds: settings.ids } : {}),
      ...(egress ? { egress: egress.server } : {}),
    };
  } catch (err) {
    await destroyParts({
      driver: made?.driver,
      browser: made?.browser,
      display,
      ...(home ? { home } : {}),
      downloads,
      ...(sandbox ? { sandbox } : {}),
      ...(egress ? { egress: egress.server } : {}),
    });
    if (uid !== undefined) settings?.ids.give(uid);
    throw err;
  }
}

/** Ends every process of a desktop and removes its folders. Never throws. */
export async function destroyParts(parts: Partial<DesktopParts>): Promise<void> {
  await parts.clipboard?.close();
  await parts.browser?.close().catch(() => undefined);
  await parts.driver?.close().catch(() => undefined);
  await parts.display?.stop().catch(() => undefined);
  parts.egress?.close();
  await parts.sandbox?.stop().catch(() => undefined);
  if (parts.sandbox && parts.sandboxIds && parts.sandbox.mode === 'uid') parts.sandboxIds.give(parts.sandbox.uid);
  for (const dir of [parts.home, parts.downloads]) {
    if (dir) await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }
}
