/**
 * A real DNS server for tests, on 127.0.0.1 and a free port (freeLocalPort): Debian's
 * dnsmasq (scripts/test-packages.txt) in the foreground, with no system
 * configuration (no resolv.conf, no /etc/hosts, no upstream server), answering
 * only the records a test gives it, authoritatively for `domain` (a name it
 * was not given is NXDOMAIN, as a Kubernetes cluster's DNS says of a pod that
 * is gone). SRV and A records, as a headless Service's (docs/DEPLOY.md).
 *
 * It is started like every program (src/base/child-process.ts startChild:
 * tied to our life, an argument array, never a shell), ready once it answers
 * a query, and ended by its PID (stopChild). `set` changes the records by
 * restarting it on the same port.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { Resolver } from 'node:dns/promises';
import { createSocket } from 'node:dgram';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { OutputLines, StartError, startChild, stopChild, type ChildProcess } from '../src/base/child-process.ts';

const DNSMASQ = '/usr/sbin/dnsmasq';
const START_TIMEOUT_MS = 10_000;

export class DnsServerError extends StartError {}

export interface DnsRecords {
  /** `_ws._tcp.desks.<domain>` → `desk-0.desks.<domain>` port 8765 (priority and weight 0). */
  srv: { name: string; target: string; port: number }[];
  /** A records. */
  hosts: { name: string; address: string }[];
}

export interface TestDnsServer {
  /** `127.0.0.1:PORT`, for a Resolver's setServers. */
  server: string;
  /** The running dnsmasq's PID. */
  pid(): number;
  /** Restarts it (by PID) with these records instead, on the same port. */
  set(records: DnsRecords): Promise<void>;
  stop(): Promise<void>;
}

export async function startDnsServer(domain: string, records: DnsRecords): Promise<TestDnsServer> {
  const dir = await mkdtemp(join(tmpdir(), 'deskbatch-dns-'));
  const conf = join(dir, 'dnsmasq.conf');
  const port = await freeLocalPort();
  let child: ChildProcess | undefined;

  const start = async (r: DnsRecords): Promise<void> => {
    await writeFile(conf, confText(domain, r));
    const output = new OutputLines();
    const started = await startChild({
      name: 'dnsmasq',
      command: DNSMASQ,
      args: [
        '--keep-in-foreground',
        '--no-resolv',
        '--no-hosts',
        `--conf-file=${conf}`,
        '--listen-address=127.0.0.1',
        '--bind-interfaces',
        `--port=${port}`,
        '--log-facility=-',
        '--pid-file=',
      ],
      spawn: { stdio: ['ignore', 'pipe', 'pipe'] },
      error: DnsServerError,
      notInstalled: `${DNSMASQ} not found: bash scripts/setup.sh installs dnsmasq`,
      timeoutMs: START_TIMEOUT_MS,
      ready: async (c, signal) => {
        output.read(c.stdout).read(c.stderr);
        await answering(`127.0.0.1:${port}`, domain, signal);
      },
      exitedBefore: 'before answering',
      notReady: 'did not answer a query',
      tail: () => output.quoted(),
    });
    child = started.child;
  };
  const stopIt = async (): Promise<void> => {
    if (child) await stopChild(child);
    child = undefined;
  };

  await start(records);
  return {
    server: `127.0.0.1:${port}`,
    pid: () => child?.pid ?? -1,
    async set(r) {
      await stopIt();
      await start(r);
    },
    async stop() {
      await stopIt();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

function confText(domain: string, r: DnsRecords): string {
  return [
    `local=/${domain}/`,
    ...r.hosts.map((h) => `host-record=${h.name},${h.address}`),
    ...r.srv.map((s) => `srv-host=${s.name},${s.target},${s.port},0,0`),
    '',
  ].join('\n');
}

/** Resolves once the server answers (any answer: NXDOMAIN is one); polls until `signal` aborts. */
async function answering(server: string, domain: string, signal: AbortSignal): Promise<void> {
  const resolver = new Resolver({ timeout: 200, tries: 1 });
  resolver.setServers([server]);
  while (!signal.aborted) {
    try {
      await resolver.resolve4(`probe.${domain}`);
      return;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOTFOUND' || code === 'ENODATA') return;
    }
    await delay(50);
  }
}

/**
 * A port free now on 127.0.0.1 for UDP and TCP both (dnsmasq binds the two), below the kernel's
 * ephemeral range: the ports that connections and port-0 listeners get come from that range, and
 * one of the many a test run opens took the TCP side of a port picked from it (a fresh-clone CI
 * run: "failed to create listening socket … Address already in use"), at a start or at a restart
 * by `set` on the same port. Below it only a program asking for that very port can take it.
 */
async function freeLocalPort(): Promise<number> {
  const ephemeralFrom = Number(
    (await readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').catch(() => '32768')).trim().split(/\s+/)[0],
  );
  const low = 20_000;
  const high = Math.max(low + 1_000, ephemeralFrom) - 1;
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = low + Math.floor(Math.random() * (high - low + 1));
    if ((await bindsUdp(port)) && (await bindsTcp(port))) return port;
  }
  throw new Error(`no free port for dnsmasq between ${low} and ${high} on 127.0.0.1`);
}

function bindsUdp(port: number): Promise<boolean> {
  const socket = createSocket('udp4');
  return new Promise((resolve) => {
    socket.once('error', () => resolve(false));
    socket.bind(port, '127.0.0.1', () => socket.close(() => resolve(true)));
  });
}

function bindsTcp(port: number): Promise<boolean> {
  const server = createServer();
  return new Promise((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}
