/**
 * A real DNS server for tests, on 127.0.0.1 and a free high port: Debian's
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
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { Resolver } from 'node:dns/promises';
import { createSocket } from 'node:dgram';
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
  const port = await freeUdpPort();
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

/** A UDP port free now on 127.0.0.1 (dnsmasq also binds TCP on it; a clash fails its start loudly). */
async function freeUdpPort(): Promise<number> {
  const socket = createSocket('udp4');
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  const { port } = socket.address();
  await new Promise<void>((resolve) => socket.close(() => resolve()));
  return port;
}
