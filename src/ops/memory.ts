/**
 * Memory of process trees, as a container's memory cgroup charges it: PSS
 * (`/proc/PID/smaps_rollup`), where a page shared by N processes counts 1/N
 * to each, so Chromium's many processes are not counted many times over as
 * summed RSS would be. Linux only; elsewhere the answer is 0.
 */
import { readdir, readFile } from 'node:fs/promises';

/** pid → parent pid of every process now. */
async function parents(): Promise<Map<number, number>> {
  const map = new Map<number, number>();
  const entries = await readdir('/proc').catch(() => [] as string[]);
  await Promise.all(
    entries
      .filter((e) => /^\d+$/.test(e))
      .map(async (e) => {
        const stat = await readFile(`/proc/${e}/stat`, 'utf8').catch(() => '');
        // The command name (field 2) may hold spaces and parentheses: read after its last ')'.
        const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        const ppid = Number(fields[1]);
        if (Number.isInteger(ppid)) map.set(Number(e), ppid);
      }),
  );
  return map;
}

/** The processes of the trees rooted at `roots` (the roots and all their descendants). */
export async function processTree(roots: readonly number[]): Promise<number[]> {
  const byParent = new Map<number, number[]>();
  for (const [pid, ppid] of await parents()) {
    const list = byParent.get(ppid) ?? [];
    list.push(pid);
    byParent.set(ppid, list);
  }
  const seen = new Set<number>();
  const todo = [...roots];
  while (todo.length) {
    const pid = todo.pop()!;
    if (seen.has(pid)) continue;
    seen.add(pid);
    todo.push(...(byParent.get(pid) ?? []));
  }
  return [...seen];
}

/** PSS of one process in bytes; 0 when it is gone or unreadable. */
export async function pssBytes(pid: number): Promise<number> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
  const m = /^Pss:\s+(\d+) kB/m.exec(text);
  return m ? Number(m[1]) * 1024 : 0;
}

/** PSS of the trees rooted at `roots`, in bytes. */
export async function treePssBytes(roots: readonly number[]): Promise<number> {
  const pids = await processTree(roots);
  const sizes = await Promise.all(pids.map(pssBytes));
  return sizes.reduce((a, b) => a + b, 0);
}
