/**
 * What a run was measured on: the machine, its load average at the start and
 * the end, and the commit (with any uncommitted change to the daemon's code).
 */
import { execFile } from 'node:child_process';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { round2 } from './stats.ts';

const execFileAsync = promisify(execFile);

export interface MachineInfo {
  date: string;
  node: string;
  platform: string;
  cpus: number;
  cpu_model: string;
  total_mem_mib: number;
  loadavg_start: number[];
  loadavg_end: number[];
}

/** Which code was measured: the commit, and the files of src/, toolsets/ and bin/ that differ from it. */
export async function sourceState(): Promise<{ commit: string; uncommitted: string[] } | null> {
  const git = (args: string[]): Promise<string> =>
    execFileAsync('git', args, { cwd: fileURLToPath(new URL('..', import.meta.url)) }).then((r) => r.stdout.trim());
  try {
    const commit = await git(['rev-parse', '--short', 'HEAD']);
    const status = await git(['status', '--porcelain', '--', 'src', 'toolsets', 'bin']);
    return { commit, uncommitted: status ? status.split('\n').map((l) => l.slice(3)) : [] };
  } catch {
    return null;
  }
}

export function machine(load: number[]): MachineInfo {
  const cpus = os.cpus();
  return {
    date: new Date().toISOString(),
    node: process.version,
    platform: `${os.platform()} ${os.release()}`,
    cpus: cpus.length,
    cpu_model: cpus[0]?.model ?? 'unknown',
    total_mem_mib: Math.round(os.totalmem() / 1024 / 1024),
    loadavg_start: load.map(round2),
    loadavg_end: os.loadavg().map(round2),
  };
}
