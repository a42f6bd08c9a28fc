/**
 * Where the browser may connect: every request Chromium makes (navigations,
 * subresources, fetch and XHR, WebSockets, each redirect hop, every frame)
 * goes through this filtering forward proxy (Chromium runs with
 * `--proxy-server` pointing here, loopback included), which decides on the
 * address the name resolves to, not on the name.
 *
 * By default it refuses every address that is not on the public internet:
 * loopback, link-local (cloud metadata at 169.254.169.254), private, CGNAT,
 * multicast, unspecified and reserved ranges, in IPv4 and IPv6, and IPv4
 * inside IPv6 (`::ffff:169.254.169.254`, NAT64, 6to4). The daemon's own port
 * is refused on any of this machine's addresses, always. The operator opts
 * back in with `allowPrivateNetworks` (everything), `privateAllow` entries
 * (`host`, `host:port` or `address/prefix`), or a host in the URL policy's
 * allowlist. The proxy connects to the address it checked, so a name that
 * resolves differently a moment later (DNS rebinding) cannot switch it.
 *
 * A refused CONNECT (https, wss, and ws) gets `403`; a refused plain http
 * request gets a short `403` page that names the host the page asked for and
 * nothing of ours.
 */
import { lookup } from 'node:dns/promises';
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { BlockList, connect, isIP, type AddressInfo, type Server, type Socket } from 'node:net';
import { networkInterfaces } from 'node:os';
import type { Duplex } from 'node:stream';
import type { Logger } from '../base/log.ts';

export interface EgressPolicy {
  /** Reach private, loopback and link-local addresses too (the daemon's own port stays refused). */
  allowPrivateNetworks: boolean;
  /** Private destinations that are allowed: `host`, `host:port`, `[v6]:port`, or `address/prefix`. */
  privateAllow: readonly string[];
  /** Host names the operator allowlisted for navigation: listing one opts it back in, wherever it points. */
  allowHosts: readonly string[];
  /** The daemon's own ports (its listener, this proxy): never reachable from the browser on this machine's addresses. */
  ownPorts: () => readonly (number | undefined)[];
}

export interface EgressDecision {
  allowed: boolean;
  /** The address to connect to (the one that was checked). */
  address?: string;
  /** Why it was refused: a fixed phrase, for logs and metrics. */
  reason?: 'private_address' | 'daemon_port' | 'unresolved' | 'bad_target';
}

/** Ranges that are not the public internet (IANA special-purpose registries, RFC 6890 and later). */
const NOT_PUBLIC_V4: [string, number][] = [
  ['0.0.0.0', 8], // "this network", unspecified
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // CGNAT
  ['127.0.0.0', 8],
  ['169.254.0.0', 16], // link-local, cloud metadata
  ['172.16.0.0', 12],
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation
  ['192.88.99.0', 24], // 6to4 relay anycast
  ['192.168.0.0', 16],
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
];
const NOT_PUBLIC_V6: [string, number][] = [
  ['::', 128], // unspecified
  ['::1', 128], // loopback
  ['::', 96], // IPv4-compatible (deprecated)
  ['100::', 64], // discard
  ['2001:db8::', 32], // documentation
  ['fc00::', 7], // unique local
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated)
  ['ff00::', 8], // multicast
];

function notPublicList(): BlockList {
  const list = new BlockList();
  for (const [net, prefix] of NOT_PUBLIC_V4) list.addSubnet(net, prefix, 'ipv4');
  for (const [net, prefix] of NOT_PUBLIC_V6) list.addSubnet(net, prefix, 'ipv6');
  return list;
}
const NOT_PUBLIC = notPublicList();

/** The eight 16-bit groups of an IPv6 address (with an embedded dotted IPv4 tail), or undefined. */
function ipv6Groups(address: string): number[] | undefined {
  let text = address.toLowerCase();
  const zone = text.indexOf('%');
  if (zone >= 0) text = text.slice(0, zone);
  const tail = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (tail) {
    const o = tail[1]!.split('.').map(Number);
    if (o.some((n) => n > 255)) return undefined;
    text = `${text.slice(0, tail.index)}${((o[0]! << 8) | o[1]!).toString(16)}:${((o[2]! << 8) | o[3]!).toString(16)}`;
  }
  const [head, rest] = text.split('::');
  if (text.split('::').length > 2) return undefined;
  const left = head ? head.split(':') : [];
  const right = rest !== undefined && rest !== '' ? rest.split(':') : [];
  const missing = 8 - left.length - right.length;
  if (rest === undefined ? missing !== 0 : missing < 1) return undefined;
  const groups = [...left, ...Array<string>(rest === undefined ? 0 : missing).fill('0'), ...right].map((g) =>
    /^[0-9a-f]{1,4}$/.test(g) ? parseInt(g, 16) : NaN,
  );
  return groups.some(Number.isNaN) ? undefined : groups;
}

/** IPv4 addresses carried inside an IPv6 one: mapped, compatible, NAT64 (64:ff9b::/96) and 6to4 (2002::/16). */
function embeddedIpv4(address: string): string[] {
  const g = ipv6Groups(address);
  if (!g) return [];
  const v4 = (hi: number, lo: number): string => `${hi >> 8}.${hi & 0xff}.${lo >> 8}.${lo & 0xff}`;
  const out: string[] = [];
  const zeros = (from: number, to: number): boolean => g.slice(from, to).every((x) => x === 0);
  if (zeros(0, 5) && (g[5] === 0xffff || g[5] === 0)) out.push(v4(g[6]!, g[7]!));
  if (g[0] === 0x64 && g[1] === 0xff9b && zeros(2, 6)) out.push(v4(g[6]!, g[7]!));
  if (g[0] === 0x2002) out.push(v4(g[1]!, g[2]!));
  return out;
}

/** Whether `address` (an IP literal) is outside the public internet, IPv4 inside IPv6 included. */
export function isNonPublicAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return NOT_PUBLIC.check(address, 'ipv4');
  if (family !== 6) return true; // not an address: refuse
  if (NOT_PUBLIC.check(address, 'ipv6')) return true;
  return embeddedIpv4(address).some((v4) => NOT_PUBLIC.check(v4, 'ipv4'));
}

/** This machine's own addresses (any interface), plus the unspecified ones. */
function ownAddresses(): Set<string> {
  const set = new Set<string>(['0.0.0.0', '::']);
  for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) set.add(a.address);
  return set;
}

interface PrivateRule {
  host?: string;
  port?: number;
  subnet?: BlockList;
}

/** Parses a `privateAllow` entry; throws with the entry in the message for a malformed one. */
export function parsePrivateAllow(entry: string): PrivateRule {
  const text = entry.trim().toLowerCase();
  const cidr = /^([^/]+)\/(\d{1,3})$/.exec(text);
  if (cidr) {
    const family = isIP(cidr[1]!);
    const prefix = Number(cidr[2]);
    if (!family || prefix > (family === 4 ? 32 : 128)) throw new Error(`not an address/prefix: ${entry}`);
    const subnet = new BlockList();
    subnet.addSubnet(cidr[1]!, prefix, family === 4 ? 'ipv4' : 'ipv6');
    return { subnet };
  }
  const bracketed = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(text);
  const plain = /^([^:[\]]+)(?::(\d{1,5}))?$/.exec(text);
  const m = bracketed ?? plain;
  if (!m) {
    if (isIP(text) === 6) return { host: text };
    throw new Error(`not a host, host:port or address/prefix: ${entry}`);
  }
  const port = m[2] === undefined ? undefined : Number(m[2]);
  if (port !== undefined && (port < 1 || port > 65535)) throw new Error(`port out of range: ${entry}`);
  return { host: m[1]!.replace(/\.+$/, ''), ...(port !== undefined ? { port } : {}) };
}

function hostListed(host: string, rules: readonly string[]): boolean {
  return rules.some((rule) => {
    const r = rule.toLowerCase().replace(/^\*?\./, '');
    return host === r || host.endsWith(`.${r}`);
  });
}

/** The egress policy as a function: resolves `host` and decides on the address it resolves to. */
export class EgressFilter {
  private readonly rules: PrivateRule[];

  constructor(
    private readonly policy: EgressPolicy,
    private readonly resolve: (host: string) => Promise<string[]> = async (host) =>
      (await lookup(host, { all: true, verbatim: true })).map((a) => a.address),
  ) {
    this.rules = policy.privateAllow.map(parsePrivateAllow);
  }

  async decide(rawHost: string, port: number): Promise<EgressDecision> {
    const host = rawHost
      .replace(/^\[|\]$/g, '')
      .toLowerCase()
      .replace(/\.+$/, '');
    if (!host || host.length > 253 || !Number.isInteger(port) || port < 1 || port > 65535) {
      return { allowed: false, reason: 'bad_target' };
    }
    let addresses: string[];
    try {
      addresses = isIP(host) ? [host] : await this.resolve(host);
    } catch {
      return { allowed: false, reason: 'unresolved' };
    }
    if (addresses.length === 0) return { allowed: false, reason: 'unresolved' };
    if (this.policy.ownPorts().includes(port)) {
      const mine = ownAddresses();
      if (addresses.some((a) => mine.has(a) || isLoopbackAddress(a))) return { allowed: false, reason: 'daemon_port' };
    }
    const optedIn = this.policy.allowPrivateNetworks || hostListed(host, this.policy.allowHosts);
    // Every address the name has must pass: a name may not pair a public address with a private one.
    for (const address of addresses) {
      if (!isNonPublicAddress(address) || optedIn) continue;
      if (this.rules.some((r) => ruleMatches(r, host, address, port))) continue;
      return { allowed: false, reason: 'private_address' };
    }
    return { allowed: true, address: addresses[0]! };
  }
}

function isLoopbackAddress(address: string): boolean {
  if (isIP(address) === 4) return address.startsWith('127.');
  return address === '::1' || embeddedIpv4(address).some((v4) => v4.startsWith('127.'));
}

function ruleMatches(rule: PrivateRule, host: string, address: string, port: number): boolean {
  if (rule.subnet) return rule.subnet.check(address, isIP(address) === 4 ? 'ipv4' : 'ipv6');
  if (rule.port !== undefined && rule.port !== port) return false;
  return rule.host === host || rule.host === address;
}

export interface EgressProxy {
  /** `http://127.0.0.1:<port>`, for Chromium's `--proxy-server`. */
  url: string;
  port: number;
  /** Requests refused since start, by reason. */
  readonly refused: Record<string, number>;
  /**
   * Serves the connections of another listening socket too: a desktop
   * sandbox's, on its own loopback (src/desktop-pool/sandbox.ts), where its
   * Chromium's `--proxy-server` points.
   */
  adopt(listener: Server): void;
  close(): Promise<void>;
}

/** HTTP/1.1 hop-by-hop headers a proxy must not forward (RFC 9110 §7.6.1), plus the proxy's own. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** Starts the proxy on 127.0.0.1, port 0. */
export async function startEgressProxy(filter: EgressFilter, log: Logger): Promise<EgressProxy> {
  const refused: Record<string, number> = {};
  const sockets = new Set<Socket | Duplex>();
  const track = (s: Socket | Duplex): void => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  };
  const refuse = (what: string, reason: string): void => {
    refused[reason] = (refused[reason] ?? 0) + 1;
    log.info('browser request refused', { target: what.slice(0, 300), reason });
  };
  // Every request let through, at debug level: with the refusals, what the browser reached
  // (test/browser-quiet.test.ts reads both to show an idle browser reaches nothing).
  const allow = (what: string): void => log.debug('browser request allowed', { target: what.slice(0, 300) });

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    void forward(req, res);
  });

  async function forward(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let url: URL;
    try {
      url = new URL(req.url ?? '');
      if (url.protocol !== 'http:') throw new Error('not http');
    } catch {
      res.writeHead(400, { 'content-type': 'text/plain; charset=utf-8', connection: 'close' }).end('Bad request\n');
      return;
    }
    const port = url.port ? Number(url.port) : 80;
    const decision = await filter.decide(url.hostname, port);
    if (!decision.allowed) {
      refuse(`${url.hostname}:${port}`, decision.reason!);
      res
        .writeHead(403, { 'content-type': 'text/plain; charset=utf-8', connection: 'close' })
        .end(`This browser may not connect to ${url.hostname.slice(0, 253)}: it is not on the public internet.\n`);
      return;
    }
    allow(`${url.hostname}:${port}`);
    const headers: Record<string, string | string[]> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = value;
    }
    const upstream = httpRequest({
      host: decision.address,
      port,
      method: req.method,
      path: `${url.pathname}${url.search}`,
      headers,
      setHost: false,
    });
    upstream.on('response', (up) => {
      const out: Record<string, string | string[]> = {};
      for (const [name, value] of Object.entries(up.headers)) {
        if (value !== undefined && !HOP_BY_HOP.has(name)) out[name] = value;
      }
      res.writeHead(up.statusCode ?? 502, up.statusMessage, out);
      up.pipe(res);
    });
    upstream.on('error', () => {
      if (!res.headersSent) res.writeHead(502, { connection: 'close' });
      res.end();
    });
    req.pipe(upstream);
  }

  server.on('connect', (req: IncomingMessage, client: Duplex, head: Buffer) => {
    track(client);
    client.on('error', () => client.destroy());
    const target = req.url ?? '';
    const m = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(target);
    void (async () => {
      const decision = m ? await filter.decide(m[1]!, Number(m[2])) : { allowed: false, reason: 'bad_target' as const };
      if (!decision.allowed) {
        refuse(target, decision.reason!);
        client.end('HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
        return;
      }
      allow(target);
      const upstream = connect(Number(m![2]), decision.address!);
      track(upstream);
      upstream.once('connect', () => {
        client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        if (head.length) upstream.write(head);
        upstream.pipe(client);
        client.pipe(upstream);
      });
      upstream.on('error', () => {
        if (!client.destroyed) client.end('HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
        upstream.destroy();
      });
      client.once('close', () => upstream.destroy());
    })();
  });
  // Chromium tunnels WebSockets with CONNECT; an Upgrade through the plain proxy path is not forwarded.
  server.on('upgrade', (_req: IncomingMessage, socket: Duplex) => {
    socket.end('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
  });
  server.on('connection', track);
  server.on('clientError', (_err, socket) => socket.destroy());

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  let closing: Promise<void> | undefined;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    refused,
    adopt: (listener) => listener.on('connection', (socket: Socket) => server.emit('connection', socket)),
    close: () =>
      (closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      })),
  };
}
