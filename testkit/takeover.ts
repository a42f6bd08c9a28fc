/**
 * The viewer's takeover control socket (docs/VIEWER.md "Takeover") from a
 * test: a real ws client that offers the page's subprotocols, records every
 * message, and waits for the one a test expects.
 */
import WebSocket from 'ws';
import { DEFAULT_CONFIG, type TakeoverSettings } from '../src/base/config.ts';
import { TEST_TOKEN } from './daemon.ts';

/** The daemon's `takeover` settings with takeover on (`--allow-takeover`), the rest as given or the defaults. */
export function takeoverOn(novncDir?: string, more: Partial<TakeoverSettings> = {}): TakeoverSettings {
  return { ...DEFAULT_CONFIG.takeover, enabled: true, ...(novncDir ? { novncDir } : {}), ...more };
}

export const CONTROL_PROTOCOLS = ['deskbatch.control.v1', `deskbatch.token.${TEST_TOKEN}`];

export interface ControlMessage {
  type: string;
  [key: string]: unknown;
}

export interface DesktopState {
  id: string;
  sessions: string[];
  holder: null | {
    controller: string | null;
    operator: string;
    since: number;
    expires_at: number;
    state: 'waiting' | 'active' | 'grace';
    waiting_for: string | null;
  };
  help: Array<{ session: string; request_id: string; reason: string; at: number }>;
}

export class ControlClient {
  readonly messages: ControlMessage[] = [];
  private waiters: Array<() => void> = [];

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => {
      this.messages.push(JSON.parse(String(data)) as ControlMessage);
      for (const w of this.waiters.splice(0)) w();
    });
    ws.on('close', () => {
      for (const w of this.waiters.splice(0)) w();
    });
  }

  /** Opens the control socket of the daemon at `wsUrl` (its /v1 URL): resolves once open, rejects with the HTTP status. */
  static open(v1Url: string, headers: Record<string, string> = {}): Promise<ControlClient> {
    const url = v1Url.replace(/\/v1$/, '/viewer/control');
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, CONTROL_PROTOCOLS, { headers });
      ws.once('open', () => resolve(new ControlClient(ws)));
      ws.once('unexpected-response', (_req, res) => {
        res.resume();
        reject(new Error(`control handshake refused: ${res.statusCode}`));
      });
      ws.once('error', reject);
    });
  }

  send(message: object): void {
    this.ws.send(JSON.stringify(message));
  }

  /** The first message (from `from` on) that `match` accepts; fails naming `what` after `timeoutMs`. */
  async next(
    what: string,
    match: (m: ControlMessage) => boolean,
    timeoutMs = 30_000,
    from = 0,
  ): Promise<ControlMessage> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.messages.slice(from).find(match);
      if (found) return found;
      if (this.ws.readyState !== WebSocket.OPEN) throw new Error(`control socket closed while waiting for ${what}`);
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new Error(
          `timed out after ${timeoutMs} ms waiting for ${what}; seen: ${JSON.stringify(this.messages.slice(-3))}`,
        );
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** Desktop `id` as the latest `state` shows it, once that passes `check` (an older state never counts). */
  async desktop(
    what: string,
    id: string,
    check: (d: DesktopState) => boolean,
    timeoutMs = 30_000,
  ): Promise<DesktopState> {
    const latest = (): DesktopState | undefined => {
      const state = this.messages.findLast((m) => m.type === 'state');
      const d = (state?.desktops as DesktopState[] | undefined)?.find((x) => x.id === id);
      return d && check(d) ? d : undefined;
    };
    await this.next(what, () => latest() !== undefined, timeoutMs);
    return latest()!;
  }

  close(): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return Promise.resolve();
    return new Promise((resolve) => {
      this.ws.once('close', () => resolve());
      this.ws.close();
    });
  }
}
