/**
 * Reading what a recording wrote (docs/RECORDING.md), for the recording tests:
 * the video through ffprobe, its WebVTT chapters, the browser's trace.zip, and
 * whether a process (ffmpeg) still runs.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { ZipReader } from '../src/browser/zip.ts';

export interface Probe {
  streams: { width: number; height: number; nb_read_frames: string }[];
  format: { duration: string };
}

/** `ffprobe`, decoding every frame. */
export function probe(path: string): Promise<Probe> {
  return new Promise((resolve, reject) => {
    execFile(
      'ffprobe',
      [
        '-v',
        'error',
        '-count_frames',
        '-show_entries',
        'stream=nb_read_frames,width,height',
        '-show_entries',
        'format=duration',
        '-of',
        'json',
        `file:${path}`,
      ],
      { timeout: 60_000 },
      (err, stdout, stderr) =>
        err ? reject(new Error(`ffprobe ${path}: ${stderr || err.message}`)) : resolve(JSON.parse(stdout) as Probe),
    );
  });
}

/** How many movie fragments (`moof` boxes) the file holds so far. */
export function fragments(path: string): number {
  let data: Buffer;
  try {
    data = readFileSync(path);
  } catch {
    return 0;
  }
  let count = 0;
  for (let off = 0; off + 8 <= data.length;) {
    const size = data.readUInt32BE(off);
    if (data.toString('latin1', off + 4, off + 8) === 'moof') count++;
    if (size < 8) break;
    off += size;
  }
  return count;
}

export interface Cue {
  start: number;
  end: number;
  text: string;
}

/** A WebVTT file's cues; throws when the file is not what video.ts writes. */
export function parseVtt(text: string): Cue[] {
  assert.ok(text.startsWith('WEBVTT\n\n'), 'the chapters file starts with WEBVTT and a blank line');
  const ms = (t: string): number => {
    const m = /^(\d{2,}):(\d{2}):(\d{2})\.(\d{3})$/.exec(t);
    assert.ok(m, `a cue time: ${t}`);
    return ((Number(m[1]) * 60 + Number(m[2])) * 60 + Number(m[3])) * 1000 + Number(m[4]);
  };
  const blocks = text
    .slice('WEBVTT\n\n'.length)
    .split('\n\n')
    .filter((b) => b !== '');
  assert.ok(text.endsWith('\n\n'), 'every cue ends with a blank line');
  return blocks.map((block) => {
    const lines = block.split('\n');
    assert.equal(lines.length, 2, `a cue is a timing line and one text line: ${JSON.stringify(block)}`);
    const m = /^(\S+) --> (\S+)$/.exec(lines[0]!);
    assert.ok(m, `a timing line: ${lines[0]}`);
    return { start: ms(m[1]!), end: ms(m[2]!), text: lines[1]! };
  });
}

/**
 * The ffmpeg process `parent` started (a recording's video), if one runs: its
 * child, or its grandchild when it runs in a desktop's sandbox (nsenter in
 * between).
 */
export async function ffmpegOf(parent: number): Promise<number | undefined> {
  const stat = async (pid: number | string): Promise<{ comm?: string; ppid: number }> => {
    const text = await readFile(`/proc/${pid}/stat`, 'latin1').catch(() => '');
    return { comm: /\(([^)]*)\)/.exec(text)?.[1], ppid: Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[1]) };
  };
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const { comm, ppid } = await stat(name);
    if (comm !== 'ffmpeg') continue;
    if (ppid === parent || (await stat(ppid)).ppid === parent) return Number(name);
  }
  return undefined;
}

/** Pids of running processes whose command line mentions `needle`. */
export function processesMentioning(needle: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${name}/cmdline`, 'latin1');
      if (cmdline.includes(needle) && !isZombie(Number(name))) pids.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/** A process that exited but was not reaped yet (its parent died, and the reaper is slow). */
export function isZombie(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  return !isZombie(pid);
}

export interface TraceEvent {
  type: string;
  callId?: string;
  parentId?: string;
  title?: string;
  startTime?: number;
  class?: string;
  method?: string;
  params?: Record<string, unknown>;
  snapshot?: {
    request?: { url: string; postData?: Record<string, unknown> };
    response?: { content?: { mimeType?: string; _file?: string } };
  };
}

export interface OpenedTrace {
  entries: Map<string, Buffer>;
  trace: TraceEvent[];
  network: TraceEvent[];
}

export async function openTrace(path: string): Promise<OpenedTrace> {
  const zip = await ZipReader.open(path);
  try {
    const entries = new Map<string, Buffer>();
    for (const e of zip.entries) entries.set(e.name, await zip.read(e));
    const jsonl = (name: string): TraceEvent[] =>
      (entries.get(name)?.toString('utf8') ?? '')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as TraceEvent);
    return { entries, trace: jsonl('trace.trace'), network: jsonl('trace.network') };
  } finally {
    await zip.close();
  }
}

/** The named steps (tracing groups) of a trace, in order, with whether each ended. */
export function steps(t: OpenedTrace): { title: string; callId: string; ended: boolean }[] {
  const ended = new Set(t.trace.filter((e) => e.type === 'after').map((e) => e.callId));
  return t.trace
    .filter((e) => e.type === 'before' && e.method === 'tracingGroup')
    .map((e) => ({ title: e.title!, callId: e.callId!, ended: ended.has(e.callId) }));
}
