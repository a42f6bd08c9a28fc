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
 * - **VNC only while used**: x11vnc runs on the desktop's display while a
 *   person holds it or someone watches it live (a share: started by the
 *   first, stopped when the last leaves), on a unix socket in a private
 *   folder; the viewer reaches it through the daemon's port with the token
 *   or a link of the desktop's session (and, to send input, the lease),
 *   never directly. A watcher's input is dropped; its pointer is drawn into
 *   its picture (vnc-bridge.ts), as the agent's pointer has no cursor of its own.
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
import type { Grant, LinkGrant } from '../server/auth.ts';
import type { SocketRefusal, SocketRoute } from '../server/server.ts';
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
  /** Opened with a link: it sees its session's desktop alone, and may take it only with a control link. */
  scope: LinkGrant | undefined;
}

/** x11vnc on one desktop, while anyone uses it: the holder's takeover, and each watcher. */
interface Share {
  desktop: DesktopResources;
  users: number;
  vnc: VncServer | undefined;
  dir: string | undefined;
  starting: Promise<VncServer> | undefined;
  watchers: Set<VncBridge>;
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
  /** The desktop's share this takeover holds one use of, once its VNC server is up. */
  share: Share | undefined;
  /** The desktop's keymap, for the holder's keys it lacks; undefined without RECORD or if it could not be read. */
  keymap: KeymapWatch | undefined;
  /** The holder's VNC bridges, the closed ones included (their counts). */
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
  /** x11vnc per desktop, while in use. */
  private readonly shares = new Map<string, Share>();
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

  /**
   * The VNC socket (a live view of any desktop, and the holder's input), and with takeover on the control
   * socket, for the server's `sockets`. Both open to a link of a session on the desktop too.
   */
  sockets(): SocketRoute[] {
    const vnc: SocketRoute = {
      path: VNC_PATH,
      subprotocol: VNC_SUBPROTOCOL,
      sameOrigin: true,
      links: true,
      check: (req, _path, grant) => this.checkVnc(req, grant),
      handle: (ws, req, grant) => this.attachVnc(ws, req, grant),
    };
    if (!this.deps.settings.enabled) return [vnc];
    return [
      {
        path: CONTROL_PATH,
        subprotocol: CONTROL_SUBPROTOCOL,
        sameOrigin: true,
        links: true,
        handle: (ws, req, grant) => this.attachController(ws, req, grant),
      },
      vnc,
    ];
  }

  /** Watchers connected now, over every desktop, and desktops whose x11vnc runs (for /metrics). */
  get live(): { watchers: number; servers: number } {
    let watchers = 0;
    let servers = 0;
    for (const s of this.shares.values()) {
      watchers += s.watchers.size;
      if (s.vnc) servers++;
    }
    return { watchers, servers };
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
        for (const w of this.shares.get(id)?.watchers ?? []) w.close();
      }
      this.broadcast();
    }
  }

  private track(sessionId: string, desktop: DesktopResources): void {
    const entry = this.desktops.get(desktop.id);
    if (entry && entry.desktop === desktop) entry.sessions.add(sessionId);
    else this.desktops.set(desktop.id, { desktop, sessions: new Set([sessionId]) });
  }

  private attachController(ws: WebSocket, req: IncomingMessage, grant: Grant): void {
    const remote = req.socket.remoteAddress ?? '';
    if (this.closed || this.controllers.size >= MAX_CONTROLLERS) {
      ws.close(CLOSE_TOO_MANY, 'too many viewers');
      return;
    }
    const c: Controller = {
      id: `c${++this.controllerCount}`,
      ws,
      remote,
      alive: true,
      scope: grant.kind === 'link' ? grant.link : undefined,
    };
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
        const t = [...this.takeovers.values()].find(
          (x) => x.lease === m.lease && !x.ended && this.inScope(c, x.desktop.id),
        );
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
    const entry = this.inScope(c, desktopId) ? this.desktops.get(desktopId) : undefined;
    if (!entry) return refuse('no session uses that desktop now');
    if (c.scope && !c.scope.control) return refuse('this link may watch, not take control');
    // Who took it through a link is said so, by the link's short id (the name is the person's own word).
    if (c.scope) operator = `${operator.slice(0, 40)} (link ${c.scope.id})`;
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
      share: undefined,
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
      const log = this.deps.log.child({ component: 'vnc', desktop: desktopId });
      const share = this.shareOf(desktop);
      t.share = share;
      t.vnc = await this.acquire(share);
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
    t.vnc = undefined;
    t.keymap?.close();
    t.keymap = undefined;
    const share = t.share;
    t.share = undefined;
    if (share) await this.release(share);
  }

  // ---- x11vnc shared by the holder and the watchers

  private shareOf(desktop: DesktopResources): Share {
    let share = this.shares.get(desktop.id);
    if (!share || share.desktop !== desktop) {
      share = { desktop, users: 0, vnc: undefined, dir: undefined, starting: undefined, watchers: new Set() };
      this.shares.set(desktop.id, share);
    }
    return share;
  }

  /** One more use of the desktop's x11vnc: started by the first. Rejects (the use given back) if it cannot start. */
  private async acquire(share: Share): Promise<VncServer> {
    share.users++;
    try {
      if (share.vnc) return share.vnc;
      share.starting ??= this.startShare(share).finally(() => (share.starting = undefined));
      return await share.starting;
    } catch (err) {
      await this.release(share);
      throw err;
    }
  }

  private async startShare(share: Share): Promise<VncServer> {
    const screen = share.desktop.screen!;
    // A sandboxed desktop's VNC server runs in its sandbox, its socket in a folder of the sandbox's own.
    const dir = screen.within ? await screen.within.privateFolder('vnc') : await ownedTempFolder('vnc');
    share.dir = dir;
    const vnc = await startVncServer({
      display: screen.display,
      ...(screen.xauthority ? { xauthority: screen.xauthority } : {}),
      ...(screen.within ? { within: screen.within } : {}),
      dir,
      log: this.deps.log.child({ component: 'vnc', desktop: share.desktop.id }),
    });
    share.vnc = vnc;
    // x11vnc going away: its watchers are closed (their pages reconnect), the next use starts another.
    void vnc.exited.then(() => {
      if (share.vnc !== vnc) return;
      share.vnc = undefined;
      for (const w of share.watchers) w.close();
    });
    return vnc;
  }

  /** One use less: the last stops x11vnc and removes its folder. */
  private async release(share: Share): Promise<void> {
    share.users--;
    if (share.users > 0) return;
    if (this.shares.get(share.desktop.id) === share) this.shares.delete(share.desktop.id);
    await share.starting?.catch(() => undefined);
    for (const w of share.watchers) w.close();
    const { vnc, dir } = share;
    share.vnc = undefined;
    share.dir = undefined;
    await vnc?.stop().catch(() => undefined);
    if (dir) await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }

  /** Whether a controller may see this desktop: any with the token, a link's only its session's. */
  private inScope(c: Controller, desktopId: string): boolean {
    return !c.scope || (this.desktops.get(desktopId)?.sessions.has(c.scope.session) ?? false);
  }

  /** The desktop a VNC socket names (`?desktop=` or `?session=`), within a link's session. */
  private vncTarget(req: IncomingMessage, grant: Grant): DesktopResources | undefined {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const session = url.searchParams.get('session');
    const desktop = session
      ? this.deps.desktopOf(session)
      : this.desktops.get(url.searchParams.get('desktop') ?? '')?.desktop;
    if (!desktop || !desktop.screen) return undefined;
    const entry = this.desktops.get(desktop.id);
    if (!entry || entry.desktop !== desktop) return undefined;
    if (grant.kind === 'link' && !entry.sessions.has(grant.link.session)) return undefined;
    return desktop;
  }

  private checkVnc(req: IncomingMessage, grant: Grant): SocketRefusal | undefined {
    if (this.closed) return { status: 503, error: 'shutting_down', message: 'the daemon is shutting down' };
    if (!this.vncTarget(req, grant)) {
      return { status: 404, error: 'desktop_not_found', message: 'no live desktop by that name for you to watch' };
    }
    return undefined;
  }

  private attachVnc(ws: WebSocket, req: IncomingMessage, grant: Grant): void {
    ws.on('error', () => undefined);
    const desktop = this.vncTarget(req, grant);
    if (!desktop) {
      ws.close(CLOSE_NOT_HELD, 'that desktop is gone');
      return;
    }
    const offered = String(req.headers['sec-websocket-protocol'] ?? '')
      .split(',')
      .map((p) => p.trim());
    const lease = offered.find((p) => p.startsWith(LEASE_SUBPROTOCOL_PREFIX))?.slice(LEASE_SUBPROTOCOL_PREFIX.length);
    if (lease !== undefined) return this.attachHolder(ws, req, desktop, lease, grant);
    const share = this.shareOf(desktop);
    if (share.watchers.size >= MAX_WATCHERS) {
      ws.close(CLOSE_TOO_MANY, 'too many watchers');
      return;
    }
    void this.attachWatcher(ws, req, share, grant);
  }

  private attachHolder(ws: WebSocket, req: IncomingMessage, desktop: DesktopResources, lease: string, grant: Grant) {
    const t = this.takeovers.get(desktop.id);
    const held = t && !t.ended && t.vnc && t.state !== 'waiting' ? t : undefined;
    if (!held || lease !== held.lease || (grant.kind === 'link' && !grant.link.control)) {
      ws.close(CLOSE_POLICY, 'that lease does not hold this desktop');
      return;
    }
    const bridge = bridgeVnc(ws, held.vnc!, {
      control: true,
      ...(held.keymap ? { keymap: held.keymap } : {}),
      log: this.deps.log.child({ component: 'vnc', desktop: desktop.id }),
    });
    const entry = { bridge, control: true, open: true };
    held.bridges.push(entry);
    void bridge.closed.then(() => (entry.open = false));
    this.deps.log.info('the holder connected to the desktop', {
      desktop: desktop.id,
      remote: req.socket.remoteAddress,
    });
  }

  private async attachWatcher(ws: WebSocket, req: IncomingMessage, share: Share, grant: Grant): Promise<void> {
    let vnc: VncServer;
    try {
      vnc = await this.acquire(share);
    } catch (err) {
      this.deps.log.warn('could not start the VNC server for a live view', {
        desktop: share.desktop.id,
        error: String(err),
      });
      ws.close(CLOSE_TOO_MANY, 'the live view could not start');
      return;
    }
    if (ws.readyState !== ws.OPEN || this.closed) {
      ws.close(1001, 'gone');
      return void (await this.release(share));
    }
    const bridge = bridgeVnc(ws, vnc, {
      control: false,
      log: this.deps.log.child({ component: 'vnc', desktop: share.desktop.id }),
    });
    share.watchers.add(bridge);
    void bridge.closed.then(() => {
      share.watchers.delete(bridge);
      void this.release(share);
    });
    this.deps.log.info('a viewer watches a desktop live', {
      desktop: share.desktop.id,
      remote: req.socket.remoteAddress,
      watchers: share.watchers.size,
      ...(grant.kind === 'link' ? { link: grant.link.id } : {}),
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
    const scope = c.scope;
    // A link's page sees its session's desktop alone, and of its sessions and help requests only its own.
    const desktops = scope
      ? (picture.desktops as Array<{ id: string; sessions: string[]; help: HelpRequest[] }>)
          .filter((d) => d.sessions.includes(scope.session))
          .map((d) => ({
            ...d,
            sessions: [scope.session],
            help: d.help.filter((h) => h.session === scope.session),
          }))
      : picture.desktops;
    this.send(c, {
      ...picture,
      desktops,
      you: c.id,
      ...(scope ? { link: { control: scope.control, expires_at: scope.expiresAt } } : {}),
    });
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
    // The live views: each bridge's close gives its use back, the last one stops x11vnc.
    await Promise.all(
      [...this.shares.values()].map(async (s) => {
        const closed = [...s.watchers].map(async (w) => {
          w.close();
          await w.closed;
        });
        await Promise.all(closed);
      }),
    );
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
