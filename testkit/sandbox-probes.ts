/**
 * Probes run as a compromised renderer of one desktop would run them: with
 * the credentials and namespaces of that desktop's Chromium, entered from
 * outside (`nsenter` into the browser process's namespaces, `setpriv` to its
 * uid), never through a door in the product. Each probe says whether it got
 * through and, if not, the error it met.
 */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

export type Probe =
  | { kind: 'read'; path: string }
  | { kind: 'list'; path: string }
  | { kind: 'write'; path: string }
  | { kind: 'connect'; host: string; port: number }
  | { kind: 'connect-unix'; path: string }
  | { kind: 'signal'; pid: number }
  /** An HTTP GET of `url` through the proxy at `proxy` (host:port), as Chromium sends it. */
  | { kind: 'proxy-get'; proxy: string; url: string };

export interface ProbeResult {
  ok: boolean;
  /** The error code (ENOENT, EACCES, ECONNREFUSED…) when it failed. */
  error?: string;
}

/** The probes' runner: plain Node.js, run inside with `node -e`; it prints one JSON array. */
const RUNNER = `
const fs = require('node:fs'), net = require('node:net');
const probes = JSON.parse(process.argv[1]);
const once = (p) => new Promise((resolve) => {
  const fail = (e) => resolve({ ok: false, error: (e && (e.code || e.message)) || String(e) });
  try {
    if (p.kind === 'read') { fs.readFileSync(p.path); return resolve({ ok: true }); }
    if (p.kind === 'list') { fs.readdirSync(p.path); return resolve({ ok: true }); }
    if (p.kind === 'write') { fs.writeFileSync(p.path, 'probe'); return resolve({ ok: true }); }
    if (p.kind === 'signal') { process.kill(p.pid, 0); return resolve({ ok: true }); }
    if (p.kind === 'connect' || p.kind === 'connect-unix' || p.kind === 'proxy-get') {
      const [host, port] = p.kind === 'proxy-get' ? p.proxy.split(':') : [p.host, p.port];
      const s = p.kind === 'connect-unix' ? net.connect(p.path) : net.connect(Number(port), host);
      const t = setTimeout(() => { s.destroy(); fail({ code: 'ETIMEDOUT' }); }, 3000);
      s.on('error', (e) => { clearTimeout(t); fail(e); });
      s.on('connect', () => {
        if (p.kind !== 'proxy-get') { clearTimeout(t); s.destroy(); return resolve({ ok: true }); }
        s.write('GET ' + p.url + ' HTTP/1.1\\r\\nHost: ' + new URL(p.url).host + '\\r\\nConnection: close\\r\\n\\r\\n');
        let text = '';
        s.on('data', (d) => (text += d));
        s.on('end', () => { clearTimeout(t); const ok = / 200 /.test(text.split('\\r\\n')[0]);
          resolve(ok ? { ok } : { ok, error: text.split('\\r\\n')[0] }); });
      });
      return;
    }
    fail('unknown probe');
  } catch (e) { fail(e); }
});
(async () => { const out = []; for (const p of probes) out.push(await once(p)); process.stdout.write(JSON.stringify(out)); })();
`;

/** The identity of a process as the host sees it: its uid, and whether it lives in a user namespace of its own. */
export function identityOf(pid: number): { uid: number; ownUserNamespace: boolean } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const uid = Number(/^Uid:\s+(\d+)/m.exec(status)![1]);
  return { uid, ownUserNamespace: readlinkSync(`/proc/${pid}/ns/user`) !== readlinkSync('/proc/self/ns/user') };
}

/**
 * The command line that runs `command args` in the namespaces of process
 * `pid`, as its uid: a user namespace is entered as its owner (the uid
 * outside), which keeps its uid inside; else the namespaces are entered as
 * root, then the uid is dropped to the process's.
 */
export function inNamespacesOf(pid: number, command: string, args: readonly string[]): [string, string[]] {
  const { uid, ownUserNamespace } = identityOf(pid);
  const enter = ownUserNamespace
    ? ['-t', String(pid), '-U', '--preserve-credentials', '-m', '-p', '-n', '-i', '-u', '-r', '-w']
    : ['-t', String(pid), '-m', '-p', '-n', '-i', '-u', '-r', '-w'];
  const drop = ['--reuid', String(uid), '--regid', String(uid), '--clear-groups'];
  return ownUserNamespace
    ? ['setpriv', [...drop, '--', 'nsenter', ...enter, '--', command, ...args]]
    : ['nsenter', [...enter, '--', 'setpriv', ...drop, '--', command, ...args]];
}

/** Runs `probes` inside the namespaces of process `pid`, as its uid. */
export function runProbes(pid: number, probes: Probe[]): Promise<ProbeResult[]> {
  const [command, args] = inNamespacesOf(pid, process.execPath, ['-e', RUNNER, JSON.stringify(probes)]);
  return new Promise((resolve, reject) => {
    execFile(command, args, { encoding: 'utf8', timeout: 30_000, env: {} }, (err, stdout, stderr) => {
      if (err && !stdout) reject(new Error(`the probes did not run: ${stderr || err.message}`));
      else resolve(JSON.parse(stdout) as ProbeResult[]);
    });
  });
}

/** Chromium browser processes (not its helpers) whose HOME is under `homePrefix`'s folders, with their environment. */
export function chromiumBrowsers(
  match: (env: Record<string, string>) => boolean,
): { pid: number; env: Record<string, string> }[] {
  const found: { pid: number; env: Record<string, string> }[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const argv = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
      if (!argv[0]?.endsWith('/chromium') || argv.some((a) => a.startsWith('--type='))) continue;
      const env = Object.fromEntries(
        readFileSync(`/proc/${name}/environ`, 'utf8')
          .split('\0')
          .filter(Boolean)
          .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
      );
      if (match(env)) found.push({ pid: Number(name), env });
    } catch {
      // gone meanwhile
    }
  }
  return found;
}
