/**
 * Placing a new session on a pod of a fleet (DeskbatchClient.connectFleet), as
 * docs/DEPLOY.md "Leasing desktops to agents" describes, from DNS alone: no
 * Kubernetes API access. The fleet (deploy/k8s) has two headless Services over
 * the same pods, and Kubernetes' DNS gives each named port an SRV record per
 * pod, `_<port name>._tcp.<service>.<namespace>.svc.<zone>`:
 *
 * - `desks` (every pod, ready or not): its SRV targets are the pods' own names,
 *   `desk-1.desks.<namespace>.svc.<zone>`, which is how a session gets back to
 *   its pod;
 * - `desks-free` (only the Ready pods: a free desktop, not terminating): its
 *   targets carry no pod name (a pod's hostname is published only under its
 *   StatefulSet's own Service), so its records are matched to `desks`' by
 *   address and port.
 *
 * The placement: the pods in both, lowest ordinal first (a scale-down removes
 * the highest, which then is the emptiest); each is asked `/readyz` (a fresher
 * answer than the records, and the pod's `instance` for its token), then
 * connected to with `when_busy: 'refuse'`; a `no_desktop` passes to the next.
 * When none has room, the session waits (`when_busy: 'wait'`) on the pod with
 * the fewest `desktops.waiting` (less its `desktops.free`: a desktop still
 * starting refuses `refuse` but is counted free, and serves the queue first)
 * among those that are full or refused: never on a pod that
 * has room but is not in `desks-free`, which is draining (or came back moments
 * ago; the next look finds it there). The session is then pinned to its pod
 * (link.ts LinkTarget): every reconnect resolves the pod's own name again, and
 * a name that no longer resolves means the pod, and the session, are gone.
 *
 * Per-pod tokens (docs/DEPLOY.md "Per-pod tokens"): base64url(HMAC-SHA256(fleet
 * key, "<pod name>/<pod uid>")). The uid is not in DNS; the daemon says it in
 * /readyz as its `instance` (`deskbatch serve --instance`, which deploy/k8s
 * sets to `$(POD_NAME)/$(POD_UID)`), and the name part must be the pod's own,
 * from DNS, so no pod can have the client derive another pod's token.
 */
import { createHmac } from 'node:crypto';
import { Resolver } from 'node:dns/promises';
import { request as httpRequest } from 'node:http';
import { isIP } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { PROTOCOL_PATH } from '../base/protocol.ts';
import { ConnectError, HandshakeRefusedError } from './errors.ts';
import type { ConnectOptions, LinkTarget } from './link.ts';
import { readBounded } from './session-http.ts';

/** One pod of the fleet, as DNS and its /readyz tell it. */
export interface FleetPod {
  /** The pod's name: the first label of its own DNS name (`desk-1`). */
  name: string;
  /** Its own DNS name, an SRV target of the `desks` Service (`desk-1.desks.deskbatch.svc.cluster.local`). */
  host: string;
  /** The address `host` resolved to when the pod was picked (resolved again on every reconnect), and its port. */
  address: string;
  port: number;
  /** What its /readyz says it is (`desk-1/<pod uid>`: the daemon's `--instance`), when it says. */
  instance?: string;
}

/** Where connectFleet placed a session (DeskbatchClient.placement). */
export interface FleetPlacement {
  pod: FleetPod;
  /** No pod had room: the session waited in this pod's queue for a desktop. */
  waited: boolean;
  /** The pods looked at before it, in order, and why each did not take the session. */
  passed: { pod: string; why: string }[];
}

/** DeskbatchClient.connectFleet's options: the fleet's, and connect()'s (each pod's token is the fleet's to say). */
export interface FleetOptions extends Omit<ConnectOptions, 'token'> {
  /**
   * The fleet key (the Secret `deskbatch-fleet-key`): each pod's token is derived from it and the `instance`
   * the pod's /readyz says (docs/DEPLOY.md "Per-pod tokens"). Give this or `token`.
   */
  fleetKey?: string;
  /** Or the token: one for every pod, or a function that gives a pod's (from a vault, a router of your own). */
  token?: string | ((pod: FleetPod) => string | Promise<string>);
  /** The headless Services' names, default `desks.<domain>` and `desks-free.<domain>` (deploy/k8s/service.yaml). */
  services?: { pods?: string; free?: string };
  /** The Services' port name, whose SRV records are read (default `ws`). */
  portName?: string;
  /** DNS servers to ask (`127.0.0.1:5353`, `[::1]:53`); default the system's. */
  dnsServers?: string[];
  /**
   * How long looking for a pod may take when every pod with room is draining or unreachable (default 60,000 ms);
   * a session queued on a pod waits as `desktop` and `handshakeTimeoutMs` say.
   */
  placementTimeoutMs?: number;
}

/** base64url(HMAC-SHA256(fleetKey, instance)), `instance` being `<pod name>/<pod uid>`: a pod's token (docs/DEPLOY.md). */
export function podToken(fleetKey: string, instance: string): string {
  return createHmac('sha256', checkedKey(fleetKey)).update(instance).digest('base64url');
}

/** The key as the init container reads it: surrounding whitespace removed, at least 32 characters. */
function checkedKey(fleetKey: string): string {
  const key = fleetKey.trim();
  if (key.length < MIN_FLEET_KEY_LENGTH) {
    throw new TypeError(`the fleet key must hold at least ${MIN_FLEET_KEY_LENGTH} characters`);
  }
  return key;
}

/**
 * deploy/k8s's names, the defaults: the per-pod Service, the Service of pods with room, and their port's
 * name (test/deploy-k8s.test.ts holds the manifests to them).
 */
export const FLEET_NAMES = { pods: 'desks', free: 'desks-free', portName: 'ws' } as const;

/** What deploy/k8s's init container requires of the key. */
const MIN_FLEET_KEY_LENGTH = 32;
const DNS_TIMEOUT_MS = 2_000;
const DNS_TRIES = 2;
const READYZ_TIMEOUT_MS = 3_000;
const READYZ_MAX_BYTES = 64 * 1024;
const DEFAULT_PLACEMENT_TIMEOUT_MS = 60_000;
/** Between two looks at the fleet when no pod could take the session (Ready pods join `desks-free` within ~5 s). */
const LOOK_AGAIN_MS = [500, 1_000, 2_000, 5_000];

/** Refusals of a new session that another pod may not give (a wrong token, path or hello is not among them). */
const PASS_ON: readonly string[] = ['too_many_sessions', 'shutting_down'];

/** What a client reads of /readyz (docs/OPERATIONS.md); anything else in it is ignored. */
const ReadyzSchema = z.object({
  status: z.enum(['ready', 'not_ready']),
  reason: z.string().max(100).optional(),
  instance: z.string().max(253).optional(),
  desktops: z.object({ free: z.number().int().min(0), waiting: z.number().int().min(0) }),
});
type Readyz = z.infer<typeof ReadyzSchema>;

/**
 * Places a session (see the file's comment) and returns what `open` made of it: `open` connects to `url`
 * with `options` (the pod's token, `when_busy`) and pins the client to `target`; it rejects as
 * DeskbatchClient.connect does.
 */
export async function placeSession<T>(
  domain: string,
  options: FleetOptions,
  open: (url: string, options: ConnectOptions, target: LinkTarget) => Promise<T>,
): Promise<{ value: T; placement: FleetPlacement }> {
  const { fleetKey, token, services, portName, dnsServers, placementTimeoutMs, ...connect } = options;
  if ((fleetKey === undefined) === (token === undefined)) {
    throw new TypeError('connectFleet needs either fleetKey or token');
  }
  if (fleetKey !== undefined) checkedKey(fleetKey); // before any lookup
  const port = portName ?? FLEET_NAMES.portName;
  const podsName = `_${port}._tcp.${services?.pods ?? `${FLEET_NAMES.pods}.${domain}`}`;
  const freeName = `_${port}._tcp.${services?.free ?? `${FLEET_NAMES.free}.${domain}`}`;
  const dns = new FleetDns(dnsServers);
  const signal = connect.signal;
  const deadline = Date.now() + (placementTimeoutMs ?? DEFAULT_PLACEMENT_TIMEOUT_MS);
  const whenBusy = connect.desktop?.whenBusy ?? 'wait';

  const tokenFor = async (pod: FleetPod): Promise<string> => {
    if (typeof token === 'string') return token;
    if (token) return token(pod);
    if (pod.instance === undefined) {
      throw new ConnectError(
        `pod ${pod.name}'s /readyz does not say its instance, so no token can be derived from the fleet key: ` +
          'start its daemon with --instance <pod name>/<pod uid> (deploy/k8s does), or give connectFleet a token',
      );
    }
    return podToken(fleetKey!, pod.instance);
  };
  const attempt = async (pod: FleetPod, busy: 'refuse' | 'wait'): Promise<T> =>
    open(
      wsUrl(pod.address, pod.port),
      { ...connect, token: await tokenFor(pod), desktop: { ...connect.desktop, whenBusy: busy } },
      pinnedTarget(dns, pod),
    );

  for (let look = 0; ; look++) {
    signal?.throwIfAborted();
    const passed: FleetPlacement['passed'] = [];
    const [pods, free] = await Promise.all([dns.pods(podsName), dns.endpoints(freeName)]);
    if (pods.length === 0) throw new ConnectError(`the fleet has no pod: ${podsName} has no SRV record`);

    // 1. The pods with room, lowest ordinal first, each asked to refuse rather than queue.
    let connected = 0;
    let refusal: HandshakeRefusedError | undefined;
    let retryAfterMs: number | undefined;
    for (const listed of pods.filter((p) => free.has(endpointKey(p)))) {
      const ready = await readiness(listed, signal);
      const pod = ready ? named(listed, ready) : listed;
      const why = !ready
        ? 'no answer from /readyz'
        : ready.status !== 'ready'
          ? (ready.reason ?? 'not ready')
          : misnamed(pod);
      if (why !== undefined) {
        passed.push({ pod: pod.name, why });
        continue;
      }
      connected++;
      try {
        return { value: await attempt(pod, 'refuse'), placement: { pod, waited: false, passed } };
      } catch (err) {
        signal?.throwIfAborted();
        if (err instanceof ConnectError && err.code === 'no_desktop') {
          retryAfterMs = Math.min(retryAfterMs ?? Infinity, err.retryAfterMs ?? Infinity);
          passed.push({ pod: pod.name, why: 'no_desktop' });
        } else if (err instanceof HandshakeRefusedError && err.status === 401) {
          refusal = err;
          passed.push({ pod: pod.name, why: 'token refused (401)' });
        } else if (
          (err instanceof ConnectError && (err.code === undefined || PASS_ON.includes(err.code))) ||
          (err instanceof HandshakeRefusedError && !err.permanent)
        ) {
          // Full, stopping, or unreachable.
          passed.push({ pod: pod.name, why: err instanceof ConnectError && err.code ? err.code : err.message });
        } else {
          throw err;
        }
      }
    }
    // Every pod connected to refused the token: a wrong key (or derivation), not a busy fleet.
    if (refusal && passed.filter((p) => p.why === 'token refused (401)').length === connected) throw refusal;
    if (whenBusy === 'refuse') {
      throw new ConnectError(
        `no pod of the fleet has a free desktop (${describe(passed)})`,
        'no_desktop',
        retryAfterMs !== undefined && Number.isFinite(retryAfterMs) ? { retryAfterMs } : {},
      );
    }

    // 2. None had room: wait on the pod with the fewest sessions waiting, less the desktops it counts as free
    // (a desktop still starting refuses `refuse` but serves the queue first), lowest ordinal on a tie.
    const loads = await Promise.all(pods.map(async (p) => ({ listed: p, ready: await readiness(p, signal) })));
    const full = loads
      .flatMap(({ listed, ready }) => {
        if (!ready) return [];
        const pod = named(listed, ready);
        const busy = ready.reason === 'no_free_desktop' || (ready.status === 'ready' && free.has(endpointKey(pod)));
        const ahead = ready.desktops.waiting - ready.desktops.free;
        return busy && misnamed(pod) === undefined ? [{ pod, ahead }] : [];
      })
      .sort((a, b) => a.ahead - b.ahead || byOrdinal(a.pod, b.pod));
    const least = full[0];
    if (least) return { value: await attempt(least.pod, 'wait'), placement: { pod: least.pod, waited: true, passed } };

    // 3. Nothing to wait on (pods with room that are draining, or unreachable): look again shortly.
    if (Date.now() >= deadline) {
      throw new ConnectError(`no pod of the fleet could take the session (${describe(passed)})`, 'no_desktop');
    }
    await sleep(LOOK_AGAIN_MS[Math.min(look, LOOK_AGAIN_MS.length - 1)]!, undefined, signal ? { signal } : {});
  }
}

/** Reconnects of a session placed on `pod`: its own name, resolved anew; gone when the name is. */
function pinnedTarget(dns: FleetDns, pod: FleetPod): LinkTarget {
  return {
    async next() {
      const address = await dns.address(pod.host);
      if (address === undefined) return { gone: `its pod ${pod.name} is gone: ${pod.host} no longer resolves` };
      return { url: wsUrl(address, pod.port) };
    },
  };
}

/** The pod with the instance its /readyz said. */
function named(pod: FleetPod, ready: Readyz): FleetPod {
  return ready.instance === undefined ? pod : { ...pod, instance: ready.instance };
}

/** Why a pod cannot be trusted with its token: its /readyz names another pod (the address moved on). */
function misnamed(pod: FleetPod): string | undefined {
  if (pod.instance === undefined || pod.instance.startsWith(`${pod.name}/`)) return undefined;
  return `its /readyz names another pod (${pod.instance})`;
}

function describe(passed: FleetPlacement['passed']): string {
  return passed.length ? passed.map((p) => `${p.pod}: ${p.why}`).join('; ') : 'no pod is listed with room';
}

function endpointKey(pod: { address: string; port: number }): string {
  return `${pod.address} ${pod.port}`;
}

function ordinal(pod: FleetPod): number {
  const m = /-(\d+)$/.exec(pod.name);
  return m ? Number(m[1]) : Number.MAX_SAFE_INTEGER;
}

function byOrdinal(a: FleetPod, b: FleetPod): number {
  return ordinal(a) - ordinal(b) || a.name.localeCompare(b.name);
}

function hostPort(address: string, port: number): string {
  return `${isIP(address) === 6 ? `[${address}]` : address}:${port}`;
}

function wsUrl(address: string, port: number): string {
  return `ws://${hostPort(address, port)}${PROTOCOL_PATH}`;
}

/** A pod's /readyz, by its address (its name would be answered 421); undefined when it gives no valid answer. */
async function readiness(pod: FleetPod, signal: AbortSignal | undefined): Promise<Readyz | undefined> {
  const url = `http://${hostPort(pod.address, pod.port)}/readyz`;
  const timeout = AbortSignal.timeout(READYZ_TIMEOUT_MS);
  try {
    const body = await new Promise<Buffer>((resolve, reject) => {
      const req = httpRequest(url, { signal: signal ? AbortSignal.any([signal, timeout]) : timeout });
      req.on('response', (res) => readBounded(res, READYZ_MAX_BYTES).then(resolve, reject));
      req.on('error', reject);
      req.end();
    });
    const parsed = ReadyzSchema.safeParse(JSON.parse(body.toString('utf8')));
    return parsed.success ? parsed.data : undefined;
  } catch {
    signal?.throwIfAborted();
    return undefined;
  }
}

/** The fleet's DNS: SRV records and addresses, through a Resolver of its own (servers settable). */
class FleetDns {
  private readonly resolver = new Resolver({ timeout: DNS_TIMEOUT_MS, tries: DNS_TRIES });

  constructor(servers: string[] | undefined) {
    if (servers) this.resolver.setServers(servers);
  }

  /** The pods an SRV name lists, each with its address, lowest ordinal first. */
  async pods(srvName: string): Promise<FleetPod[]> {
    const records = await this.srv(srvName);
    const pods = await Promise.all(
      records.map(async (r): Promise<FleetPod | undefined> => {
        const host = r.name.replace(/\.$/, '').toLowerCase();
        const address = await this.address(host).catch(() => undefined);
        const name = host.split('.')[0];
        return address === undefined || !name ? undefined : { name, host, address, port: r.port };
      }),
    );
    return pods.filter((p): p is FleetPod => p !== undefined).sort(byOrdinal);
  }

  /** The `address port` of every endpoint an SRV name lists. */
  async endpoints(srvName: string): Promise<Set<string>> {
    const records = await this.srv(srvName);
    const keys = await Promise.all(
      records.map(async (r) => {
        const address = await this.address(r.name.replace(/\.$/, '')).catch(() => undefined);
        return address === undefined ? undefined : endpointKey({ address, port: r.port });
      }),
    );
    return new Set(keys.filter((k): k is string => k !== undefined));
  }

  /** SRV records; none when the name does not exist or has none (a Service without endpoints). */
  private async srv(name: string): Promise<{ name: string; port: number }[]> {
    try {
      return await this.resolver.resolveSrv(name);
    } catch (err) {
      if (isNoSuchName(err)) return [];
      throw new ConnectError(`cannot read ${name} from DNS: ${(err as Error).message}`, undefined, { cause: err });
    }
  }

  /** A name's address (IPv4 first); undefined when the name does not exist or has none. Throws on a DNS failure. */
  async address(host: string): Promise<string | undefined> {
    for (const resolve of [(h: string) => this.resolver.resolve4(h), (h: string) => this.resolver.resolve6(h)]) {
      try {
        const [first] = await resolve(host);
        if (first !== undefined) return first;
      } catch (err) {
        if (!isNoSuchName(err)) throw err;
        if ((err as NodeJS.ErrnoException).code === 'ENOTFOUND') return undefined;
      }
    }
    return undefined;
  }
}

/** NXDOMAIN (ENOTFOUND) or no record of that type (ENODATA): an answer, not a failure. */
function isNoSuchName(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ENOTFOUND' || code === 'ENODATA';
}
