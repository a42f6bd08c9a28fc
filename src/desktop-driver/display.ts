import { connect } from 'node:net';

/**
 * A local X display name as the daemon passes it on a child's command line
 * (ffmpeg's x11grab, x11vnc): `:N` or `:N.S`, checked before it goes into an
 * argv, so no name is read as an option.
 */
export const LOCAL_DISPLAY_NAME = /^:\d{1,5}(\.\d{1,3})?$/;

/** How long a reachability probe of the X socket may take. */
const X_SOCKET_PROBE_TIMEOUT_MS = 500;

/**
 * Sockets of displays that are not in the host's /tmp/.X11-unix, by display
 * number: a sandboxed desktop's Xvfb listens in its sandbox's own folder
 * (src/desktop-driver/xvfb.ts), and nothing of it is published where other
 * X servers, which do not all honour each other's lock files before they
 * touch a socket path, could replace it.
 */
const placedSockets = new Map<string, string>();

/** Says where display `number`'s socket is (undefined: back to /tmp/.X11-unix). */
export function placeDisplaySocket(number: string, path: string | undefined): void {
  if (path) placedSockets.set(number, path);
  else placedSockets.delete(number);
}

/**
 * The number of a local X display name (`:0`, `:99.0`, `unix:5`), as a
 * string; undefined for a TCP display (`host:0`), which deskbatch does not
 * reach: Xvfb runs with `-nolisten tcp` (docs/MEASURED.md).
 */
export function displayNumber(display: string): string | undefined {
  return /^(?:unix)?:(\d+)(?:\.\d+)?$/.exec(display)?.[1];
}

/** The local socket path of an X display name; undefined for a TCP display (`displayNumber`). */
export function displaySocketPath(display: string): string | undefined {
  const n = displayNumber(display);
  return n === undefined ? undefined : (placedSockets.get(n) ?? `/tmp/.X11-unix/X${n}`);
}

/**
 * Whether an X server answers on `display`. Connecting to its socket is cheap
 * and cannot crash us, unlike a first nut-js call on a dead display (segfault).
 */
export function isDisplayReachable(display: string | undefined): Promise<boolean> {
  const path = display ? displaySocketPath(display) : undefined;
  if (!path) return Promise.resolve(false);
  return new Promise((resolve) => {
    const socket = connect(path);
    const done = (ok: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), X_SOCKET_PROBE_TIMEOUT_MS);
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}
