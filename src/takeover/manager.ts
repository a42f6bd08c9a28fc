/**
 * Human takeover (docs/VIEWER.md "Takeover", docs/PROTOCOL.md "Takeover"): an
 * operator in the viewer takes a session's desktop from the agent, acts on it
 * through VNC, and hands it back with an outcome and a note for the agent.
 *
 * - **One holder per desktop**: a lease with an owner (the name the person
 *   gave, their control socket) and an expiry. A second take is refused
 *   while one holds; other viewers may watch the VNC stream, read-only.
 * - **The agent waits**: a take asks the desktop's hold
 *   (src/desktop-pool/hold.ts); it begins once the agent's running batch has
 *   finished, and from then on none of the desktop's batches runs until the
 *   person hands back, the lease expires, or the holder's viewer stays away
 *   longer than the grace period.
 * - **VNC only while held**: x11vnc runs on the desktop's display for the
 *   takeover alone, on a unix socket in a private folder; the viewer reaches
 *   it through the daemon's port with the token (and, to send input, the
 *   lease), never directly.
 * - **Counts, never text**: the agent, the log and the recording learn that
 *   a person clicked N times and typed N characters; what was typed never
 *   leaves the VNC bridge (src/takeover/vnc-bridge.ts).
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import type { WebSocket } from 'ws';
import { z } from 'zod';
import type { Activity, ActivityHub } from '../base/activity.ts';
import type { TakeoverSettings } from '../base/config.ts';
import { KeymapWatch } from '../desktop-driver/keymap-watch.ts';
import type { DesktopResources } from '../desktop-pool/desktop.ts';
import type { HoldTicket } from '../desktop-pool/hold.ts';
import type { Logger } from '../base/log.ts';
import { personText, type TakeoverMessage, type TakeoverOutcome } from '../base/protocol.ts';
import type { SocketRoute } from '../server/server.ts';
import type { TakeoverPort } from '../server/takeover-port.ts';
import { ownedTempFolder } from '../base/temp-folder.ts';
import { bridgeVnc, type InputTally, type VncBridge } from './vnc-bridge.ts';
import { startVncServer, type VncServer } from './vnc-server.ts';

export const CONTROL_PATH = '/viewer/control';
export const CONTROL_SUBPROTOCOL = 'deskbatch.control.v1';
export const VNC_PATH = '/viewer/vnc';
export const VNC_SUBPROTOCOL = 'deskbatch.vnc.v1';
/** The holder's VNC socket also offers `deskbatch.lease.<lease>`: its input reaches the desktop. */
export const LEASE_SUBPROTOCOL_PREFIX = 'deskbatch.lease.';

/** Close codes the page understands. */
export const CLOSE_NOT_HELD = 4404;
export const CLOSE_TOO_MANY = 1013;
export const CLOSE_POLICY = 1008;

/** Control sockets open at once (the feed's bound), and VNC watchers per desktop. */
const MAX_CONTROLLERS = 8;
const MAX_WATCHERS = 4;
const PING_MS = 30_000;
/** What a refusing client is told to wait at most before it tries again (it also hears `ended`). */
const MAX_HELD_RETRY_MS = 10_000;
const MIN_HELD_RETRY_MS = 250;
/** The note a person leaves for the agent. */
export const MAX_NOTE_CHARS = 1_000;

const ViewerMessageSchema = z.discriminatedUnion('type', [
  z.strictObject({
    type: z.literal('take'),
    desktop: z.string().min(1).max(64),
    operator: z
      .string()
      .trim()
      .min(1)
      .max(64)
      .regex(/^[^\p{Cc}\u2028\u2029]*$/u, 'no control characters'),
    record_screen: z.boolean().optional(),
  }),
  z.strictObject({ type: z.literal('extend'), desktop: z.string().min(1).max(64) }),
  z.strictObject({
    type: z.literal('return'),
    desktop: z.string().min(1).max(64),
    outcome: z.enum(['resolved', 'unresolved']),
    note: z.union([personText(MAX_NOTE_CHARS), z.literal('')]).optional(),
  }),
  z.strictObject({ type: z.literal('resume'), lease: z.string().min(1).max(128) }),
]);
type ViewerMessage = z.output<typeof ViewerMessageSchema>;

/** How a takeover ended, for its holder's page. */
type EndReason = 'returned' | 'cancelled' | 'expired' | 'disconnected' | 'desktop_gone' | 'shutdown';

interface Controller {
  id: string;
  ws: WebSocket;
  remote: string;
  alive: boolean;
}

interface HelpRequest {
  session: string;
  request_id: string;
  reason: string;
  at: number;
}

interface Takeover {
  desktop: DesktopResources;
  lease: string;
  operator: string;
  recordScreen: boolean;
  /** The holder's control socket; undefined while in grace. */
  controller: Controller | undefined;
  state: 'waiting' | 'active' | 'grace';
  since: number;
  startedAt: number | undefined;
  expiresAt: number;
  ticket: HoldTicket;
  vnc: VncServer | undefined;
  vncDir: string | undefined;
  /** The desktop's keymap, for the holder's keys it lacks; undefined without RECORD or if it could not be read. */
  keymap: KeymapWatch | undefined;
  /** Every VNC bridge of this takeover, the holder's first ones included after they closed (their counts). */
  bridges: Array<{ bridge: VncBridge; control: boolean; open: boolean }>;
  /** The sessions told `started`, each with the help request it answers. */
  told: Map<string, string | undefined>;
  expiry: NodeJS.Timeout | undefined;
  grace: NodeJS.Timeout | undefined;
  ended: boolean;
}

export interface TakeoverDeps {
  settings: TakeoverSettings;
  activity: ActivityHub;
  log: Logger;
  /** The desktop a session acts on, while it holds one. */
  desktopOf: (sessionId: string) => DesktopResources | undefined;
  /** Sends a `takeover` frame to a session's agent (if attached and it asked for them). */
  notify: (sessionId: string, message: TakeoverMessage) => void;
}

export class TakeoverManager implements TakeoverPort {
  private readonly controllers = new Set<Controller>();
  /** Desktops with sessions now, by id, and their sessions. */
  private readonly desktops = new Map<string, { desktop: DesktopResources; sessions: Set<string> }>();
  private readonly takeovers = new Map<string, Takeover>();
  /** Open help requests, by session (one each: a new request replaces the last). */
  private readonly help = new Map<string, HelpRequest>();
  private helpCount = 0;
  private controllerCount = 0;
  private pingTimer: NodeJS.Timeout | undefined;
  private unsubscribe: (() => void) | undefined;
  private closed = false;

  constructor(private readonly deps: TakeoverDeps) {
    this.unsubscribe = deps.activity.subscribe((a) => this.observe(a));
  }

  /** The control socket and the VNC socket, for the server's `sockets`. */
  sockets(): SocketRoute[] {
    return [
      {
        path: CONTROL_PATH,
        subprotocol: CONTROL_SUBPROTOCOL,
        sameOrigin: true,
        handle: (ws, req) => this.attachController(ws, req),
      },
      {
        path: VNC_PATH,
        subprotocol: VNC_SUBPROTOCOL,
        sameOrigin: true,
        handle: (ws, req) => this.attachVnc(ws, req),
      },
    ];
  }

  // ---- TakeoverPort (the server asks)

  heldRetryMs(desktop: DesktopResources): number | undefined {
    const t = this.takeovers.get(desktop.id);
    if (!t || t.ended || t.desktop !== desktop) return undefined;
    return Math.max(MIN_HELD_RETRY_MS, Math.min(MAX_HELD_RETRY_MS, t.expiresAt - Date.now()));
  }

  current(desktop: DesktopResources): TakeoverMessage | undefined {
    const t = this.takeovers.get(desktop.id);
    if (!t || t.ended || t.desktop !== desktop || t.state === 'waiting') return undefined;
    return { type: 'takeover', event: 'started', operator: t.operator };
  }

  requestHelp(sessionId: string, desktop: DesktopResources, reason: string): TakeoverMessage {
    const request: HelpRequest = { session: sessionId, request_id: `h${++this.helpCount}`, reason, at: Date.now() };
    this.help.set(sessionId, request);
    this.track(sessionId, desktop);
    this.deps.activity.publish({ type: 'help_requested', ...request });
    this.deps.log.warn('an agent asks for a person', { session: sessionId, desktop: desktop.id, reason });
    this.broadcast();
    return { type: 'takeover', event: 'help_requested', request_id: request.request_id };
  }

  // ---- what the daemon does

  private observe(a: Activity): void {
    if (a.type === 'session_opened') {
      const desktop = this.deps.desktopOf(a.session);
      if (desktop) this.track(a.session, desktop);
      this.broadcast();
    } else if (a.type === 'session_closed') {
      this.help.delete(a.session);
      for (const [id, entry] of this.desktops) {
        if (!entry.sessions.delete(a.session) || entry.sessions.size > 0) continue;
        this.desktops.delete(id);
        // A pooled desktop goes with its session: nobody is left to hand it back to.
        const t = this.takeovers.get(id);
        if (t) void this.end(t, 'desktop_gone', 'ended');
      }
      this.broadcast();
    }
  }

  private track(sessionId: string, desktop: DesktopResources): void {
    const entry = this.desktops.get(desktop.id);
    if (entry && entry.desktop === desktop) entry.sessions.add(sessionId);
    else this.desktops.set(desktop.id, { desktop, sessions: new Set([sessionId]) });
  }

  private attachController(ws: WebSocket, req: IncomingMessage): void {
    const remote = req.socket.remoteAddress ?? '';
    if (this.closed || this.controllers.size >= MAX_CONTROLLERS) {
      ws.close(CLOSE_TOO_MANY, 'too many viewers');
      return;
    }
    const c: Controller = { id: `c${++this.controllerCount}`, ws, remote, alive: true };
    this.controllers.add(c);
    this.deps.log.info('takeover control connected', { controller: c.id, remote });
    ws.on('pong', () => (c.alive = true));
    ws.on('error', () => undefined);
    ws.on('message', (data, isBinary) => {
      let parsed: ViewerMessage;
      try {
        if (isBinary) throw new Error('binary frame');
        const result = ViewerMessageSchema.safeParse(JSON.parse(String(data)));
        if (!result.success) throw new Error(result.error.issues.map((i) => i.message).join('; '));
        parsed = result.data;
      } catch (err) {
        this.send(c, { type: 'error', message: `not understood: ${(err as Error).message}`.slice(0, 300) });
        return;
      }
      this.onMessage(c, parsed);
    });
    ws.once('close', () => this.detachController(c));
    this.sendState(c);
    this.pingTimer ??= setInterval(() => this.ping(), PING_MS).unref();
  }

  private detachController(c: Controller): void {
    if (!this.controllers.delete(c)) return;
    this.deps.log.info('takeover control disconnected', { controller: c.id });
    for (const t of this.takeovers.values()) {
      if (t.controller !== c || t.ended) continue;
      t.controller = undefined;
      if (t.state === 'waiting') {
        // The person left before the desktop was theirs: nothing to hand back, the agent goes on.
        void this.end(t, 'disconnected', 'disconnected');
        continue;
      }
      t.state = 'grace';
      this.deps.log.warn('the holder of a desktop went away; it goes back to the agent unless they return', {
        desktop: t.desktop.id,
        grace_ms: this.deps.settings.graceMs,
      });
      t.grace = setTimeout(() => void this.end(t, 'disconnected', 'disconnected'), this.deps.settings.graceMs);
      t.grace.unref();
    }
    this.broadcast();
  }

  private onMessage(c: Controller, m: ViewerMessage): void {
    switch (m.type) {
      case 'take':
        return void this.take(c, m.desktop, m.operator, m.record_screen ?? false);
      case 'extend': {
        const t = this.heldBy(c, m.desktop);
        if (!t) return this.send(c, { type: 'error', message: `you do not hold desktop ${m.desktop}` });
        this.arm(t);
        this.send(c, { type: 'granted', desktop: t.desktop.id, lease: t.lease, expires_at: t.expiresAt });
        return this.broadcast();
      }
      case 'return': {
        const waiting = this.takeovers.get(m.desktop);
        if (waiting && !waiting.ended && waiting.controller === c && waiting.state === 'waiting') {
          // Given up before the desktop was the person's: the agent was never told, and goes on.
          return void this.end(waiting, 'cancelled', 'unresolved');
        }
        const t = this.heldBy(c, m.desktop);
        if (!t) return this.send(c, { type: 'error', message: `you do not hold desktop ${m.desktop}` });
        return void this.end(t, 'returned', m.outcome, m.note || undefined);
      }
      case 'resume': {
        const t = [...this.takeovers.values()].find((x) => x.lease === m.lease && !x.ended);
        if (!t) {
          return this.send(c, {
            type: 'ended',
            desktop: null,
            outcome: 'disconnected',
            message: 'that lease has ended',
          });
        }
        clearTimeout(t.grace);
        t.grace = undefined;
        t.controller = c;
        if (t.state === 'grace') t.state = 'active';
        this.deps.log.info('the holder of a desktop came back', { desktop: t.desktop.id, controller: c.id });
        this.send(c, { type: 'granted', desktop: t.desktop.id, lease: t.lease, expires_at: t.expiresAt });
        return this.broadcast();
      }
    }
  }

  private heldBy(c: Controller, desktopId: string): Takeover | undefined {
    const t = this.takeovers.get(desktopId);
    return t && !t.ended && t.controller === c && t.state !== 'waiting' ? t : undefined;
  }

  private async take(c: Controller, desktopId: string, operator: string, recordScreen: boolean): Promise<void> {
    const refuse = (reason: string): void => this.send(c, { type: 'refused', desktop: desktopId, reason });
    const entry = this.desktops.get(desktopId);
    if (!entry) return refuse('no session uses that desktop now');
    const held = this.takeovers.get(desktopId);
    if (held) return refuse(`${held.operator} holds it`);
    const { desktop } = entry;
    if (!desktop.hold || !desktop.screen) return refuse('this desktop cannot be taken over');
    const ticket = desktop.hold.take();
    if (!ticket) return refuse('someone else holds it');
    const t: Takeover = {
      desktop,
      lease: randomBytes(32).toString('base64url'),
      operator,
      recordScreen,
      controller: c,
      state: 'waiting',
      since: Date.now(),
      startedAt: undefined,
      expiresAt: Date.now() + this.deps.settings.leaseMs,
      ticket,
      vnc: undefined,
      vncDir: undefined,
      keymap: undefined,
      bridges: [],
      told: new Map(),
      expiry: undefined,
      grace: undefined,
      ended: false,
    };
    this.takeovers.set(desktopId, t);
    this.deps.log.info("a person asks for a desktop; waiting for the agent's running batch", {
      desktop: desktopId,
      operator,
      running: desktop.hold.running,
    });
    this.broadcast();
    await ticket.ready;
    if (t.ended) return;
    try {
      const screen = desktop.screen;
      // A sandboxed desktop's VNC server runs in its sandbox, its socket in a folder of the sandbox's own.
      t.vncDir = screen?.within ? await screen.within.privateFolder('vnc') : await ownedTempFolder('vnc');
      const log = this.deps.log.child({ component: 'vnc', desktop: desktopId });
      t.vnc = await startVncServer({
        display: screen.display,
        ...(screen.xauthority ? { xauthority: screen.xauthority } : {}),
        ...(screen.within ? { within: screen.within } : {}),
        dir: t.vncDir,
        log,
      });
      t.keymap = await KeymapWatch.open(screen.display, screen.xauthority, log).catch((err: unknown) => {
        this.deps.log.warn("could not watch the desktop's keymap: a key it lacks may be lost on its first press", {
          desktop: desktopId,
          error: String(err),
        });
        return undefined;
      });
    } catch (err) {
      this.deps.log.error('could not start the VNC server for a takeover', { desktop: desktopId, error: String(err) });
      await this.end(t, 'desktop_gone', 'ended');
      return refuse('the VNC server did not start (is the Debian package x11vnc installed?)');
    }
    if (t.ended) return void (await this.cleanup(t));
    // x11vnc going away ends the takeover: the person can no longer act.
    void t.vnc.exited.then(() => {
      if (!t.ended) void this.end(t, 'desktop_gone', 'ended');
    });
    t.state = t.controller ? 'active' : 'grace';
    t.startedAt = Date.now();
    this.arm(t);
    const sessions = this.sessionsOf(desktopId);
    for (const s of sessions) {
      const request = this.help.get(s)?.request_id;
      t.told.set(s, request);
      this.deps.notify(s, {
        type: 'takeover',
        event: 'started',
        operator,
        ...(request ? { request_id: request } : {}),
      });
    }
    this.deps.activity.publish({
      type: 'takeover_started',
      desktop: desktopId,
      sessions,
      operator,
      record_screen: recordScreen,
      at: t.startedAt,
    });
    this.logEach(sessions, 'takeover started: a person controls the desktop; its batches wait', {
      desktop: desktopId,
      operator,
      remote: c.remote,
      record_screen: recordScreen,
      waited_ms: t.startedAt - t.since,
    });
    if (t.controller)
      this.send(t.controller, { type: 'granted', desktop: desktopId, lease: t.lease, expires_at: t.expiresAt });
    this.broadcast();
  }

  /** (Re)starts the lease's clock. */
  private arm(t: Takeover): void {
    t.expiresAt = Date.now() + this.deps.settings.leaseMs;
    clearTimeout(t.expiry);
    t.expiry = setTimeout(() => void this.end(t, 'expired', 'expired'), this.deps.settings.leaseMs);
    t.expiry.unref();
  }

  private sessionsOf(desktopId: string): string[] {
    return [...(this.desktops.get(desktopId)?.sessions ?? [])];
  }

  /** Hands the desktop back to the agent: VNC closed, the hold released, everyone told. Idempotent. */
  private async end(t: Takeover, reason: EndReason, outcome: TakeoverOutcome, note?: string): Promise<void> {
    if (t.ended) return;
    t.ended = true;
    clearTimeout(t.expiry);
    clearTimeout(t.grace);
    const id = t.desktop.id;
    if (this.takeovers.get(id) === t) this.takeovers.delete(id);
    const tally = this.tally(t);
    await this.cleanup(t);
    // Only now: the person can act no more, so the agent's waiting batches may run.
    t.ticket.release();
    const holder = t.controller;
    if (holder) this.send(holder, { type: 'ended', desktop: id, outcome: reason, message: endMessage(reason) });
    if (t.startedAt === undefined) {
      // It never began (the person left, or VNC did not start): the agent was never told, nothing to report.
      this.deps.log.info('a takeover ended before it began', { desktop: id, reason });
      return this.broadcast();
    }
    const durationMs = Date.now() - t.startedAt;
    const activity = {
      duration_ms: durationMs,
      clicks: tally.clicks,
      typed_characters: tally.characters,
      keys: tally.keys,
      pasted_characters: tally.pasted,
    };
    const summary = summarize(outcome, activity);
    for (const [s, askedBefore] of t.told) {
      // The request this takeover answers: the one open now (asked during it, or before it), else none.
      const request = this.help.get(s)?.request_id ?? askedBefore;
      this.help.delete(s);
      this.deps.notify(s, {
        type: 'takeover',
        event: 'ended',
        operator: t.operator,
        outcome,
        ...(note ? { note } : {}),
        summary,
        activity,
        ...(request ? { request_id: request } : {}),
      });
    }
    const sessions = [...t.told.keys()];
    this.deps.activity.publish({
      type: 'takeover_ended',
      desktop: id,
      sessions,
      operator: t.operator,
      outcome,
      ...(note ? { note } : {}),
      activity,
      at: Date.now(),
    });
    this.logEach(sessions, "takeover ended: the desktop is the agent's again", {
      desktop: id,
      operator: t.operator,
      outcome,
      ...activity,
      ...(note ? { note } : {}),
    });
    this.broadcast();
  }

  /** One line per session on the desktop (a session's log is the lines with its `session` field), or one for none. */
  private logEach(sessions: readonly string[], message: string, fields: Record<string, unknown>): void {
    if (sessions.length === 0) return this.deps.log.info(message, fields);
    for (const session of sessions) this.deps.log.info(message, { session, ...fields });
  }

  private tally(t: Takeover): InputTally {
    const sum: InputTally = { keys: 0, characters: 0, clicks: 0, wheel: 0, pasted: 0, moves: 0 };
    for (const { bridge, control } of t.bridges) {
      if (!control) continue;
      for (const k of Object.keys(sum) as Array<keyof InputTally>) sum[k] += bridge.tally[k];
    }
    return sum;
  }

  private async cleanup(t: Takeover): Promise<void> {
    for (const { bridge } of t.bridges) bridge.close();
    await t.vnc?.stop().catch(() => undefined);
    t.vnc = undefined;
    t.keymap?.close();
    t.keymap = undefined;
    if (t.vncDir) await rm(t.vncDir, { recursive: true, force: true }).catch(() => undefined);
    t.vncDir = undefined;
  }

  private attachVnc(ws: WebSocket, req: IncomingMessage): void {
    ws.on('error', () => undefined);
    const url = new URL(req.url ?? '/', 'http://localhost');
    const t = this.takeovers.get(url.searchParams.get('desktop') ?? '');
    if (!t || t.ended || !t.vnc || t.state === 'waiting') {
      ws.close(CLOSE_NOT_HELD, 'nobody holds that desktop');
      return;
    }
    const offered = String(req.headers['sec-websocket-protocol'] ?? '')
      .split(',')
      .map((p) => p.trim());
    const lease = offered.find((p) => p.startsWith(LEASE_SUBPROTOCOL_PREFIX))?.slice(LEASE_SUBPROTOCOL_PREFIX.length);
    const control = lease !== undefined && lease === t.lease;
    if (lease !== undefined && !control) {
      ws.close(CLOSE_POLICY, 'that lease does not hold this desktop');
      return;
    }
    if (!control && t.bridges.filter((b) => !b.control && b.open).length >= MAX_WATCHERS) {
      ws.close(CLOSE_TOO_MANY, 'too many watchers');
      return;
    }
    const bridge = bridgeVnc(ws, t.vnc, {
      control,
      ...(control && t.keymap ? { keymap: t.keymap } : {}),
      log: this.deps.log.child({ component: 'vnc', desktop: t.desktop.id }),
    });
    const entry = { bridge, control, open: true };
    t.bridges.push(entry);
    void bridge.closed.then(() => {
      entry.open = false;
      // A watcher's bridge counts nothing: forget it, so watchers that come and go do not pile up.
      if (!control) t.bridges.splice(t.bridges.indexOf(entry), 1);
    });
    this.deps.log.info(control ? 'the holder connected to the desktop' : 'a viewer watches a takeover', {
      desktop: t.desktop.id,
      remote: req.socket.remoteAddress,
    });
  }

  // ---- the viewers' picture

  /** The `state` every viewer gets (each with its own `you`), built once per change. */
  private picture(): { type: 'state'; lease_ms: number; grace_ms: number; desktops: object[] } {
    const desktops = [...this.desktops.entries()].map(([id, { sessions }]) => {
      const t = this.takeovers.get(id);
      return {
        id,
        sessions: [...sessions],
        holder: t
          ? {
              controller: t.controller?.id ?? null,
              operator: t.operator,
              since: t.since,
              expires_at: t.expiresAt,
              state: t.state,
              waiting_for: t.state === 'waiting' && t.desktop.hold!.running > 0 ? 'a batch' : null,
            }
          : null,
        help: [...sessions].flatMap((s) => {
          const h = this.help.get(s);
          return h ? [h] : [];
        }),
      };
    });
    return { type: 'state', lease_ms: this.deps.settings.leaseMs, grace_ms: this.deps.settings.graceMs, desktops };
  }

  private sendState(c: Controller, picture = this.picture()): void {
    this.send(c, { ...picture, you: c.id });
  }

  private broadcast(): void {
    if (this.controllers.size === 0) return;
    const picture = this.picture();
    for (const c of this.controllers) this.sendState(c, picture);
  }

  private send(c: Controller, message: object): void {
    if (c.ws.readyState === c.ws.OPEN) c.ws.send(JSON.stringify(message));
  }

  private ping(): void {
    for (const c of this.controllers) {
      if (!c.alive) {
        c.ws.terminate();
        continue;
      }
      c.alive = false;
      c.ws.ping();
    }
  }

  /** Ends every takeover (the agent is told `ended`) and closes the viewers' sockets. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.unsubscribe?.();
    clearInterval(this.pingTimer);
    await Promise.all([...this.takeovers.values()].map((t) => this.end(t, 'shutdown', 'ended')));
    for (const c of this.controllers) c.ws.close(1001, 'the daemon is shutting down');
  }
}

function endMessage(reason: EndReason): string {
  switch (reason) {
    case 'returned':
      return 'You handed the desktop back to the agent.';
    case 'cancelled':
      return 'You gave up the take before the desktop was yours; the agent went on.';
    case 'expired':
      return 'Your lease expired; the desktop went back to the agent.';
    case 'disconnected':
      return 'Your viewer was away longer than the grace period; the desktop went back to the agent.';
    case 'desktop_gone':
      return 'The desktop went away (its session ended, or its VNC server stopped).';
    case 'shutdown':
      return 'The daemon is shutting down.';
  }
}

/** A sentence the agent can hand its model as it is: what happened, as counts, never what was typed. */
export function summarize(outcome: TakeoverOutcome, a: NonNullable<TakeoverMessage['activity']>): string {
  const seconds = Math.max(1, Math.round(a.duration_ms / 1000));
  const how: Record<TakeoverOutcome, string> = {
    resolved: 'handed it back and says the task is done',
    unresolved: 'handed it back without solving it',
    expired: 'did not hand it back in time; control returned when the lease expired',
    disconnected: 'left without handing it back; control returned after their viewer disconnected',
    ended: 'lost it when the desktop or the daemon stopped',
  };
  const plural = (n: number, one: string): string => `${n} ${one}${n === 1 ? '' : 's'}`;
  const did = [
    plural(a.clicks, 'click'),
    `typed ${plural(a.typed_characters, 'character')}`,
    ...(a.pasted_characters ? [`pasted ${plural(a.pasted_characters, 'character')}`] : []),
  ].join(', ');
  return `A person controlled the desktop for ${seconds} s (${did}) and ${how[outcome]}. The screen may have changed: take a screenshot before acting.`;
}
