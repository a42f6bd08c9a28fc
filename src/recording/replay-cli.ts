/**
 * `deskbatch replay FILE --url URL`: replays a recorded trajectory on a
 * daemon and prints how its answers differ from the recording (one line per
 * difference and a summary line, or the whole report as JSON). Exits 0 when
 * nothing differs, 1 when something does, 2 when the replay could not be
 * done (a usage error, an unreadable or newer trajectory, no session).
 */
import { parseArgs } from 'node:util';
import { DEFAULT_IMAGE_TOLERANCE, type ReplayDifference, type ReplayReport } from './replay-compare.ts';
import { ReplayError, replayTrajectory } from './replay.ts';

export const REPLAY_USAGE = `Usage: deskbatch replay FILE --url URL [--token T] [--json] [--image-tolerance N]

Sends the batches of a recorded session (FILE: a recording's trajectory.jsonl)
to the daemon at URL, in one new session, and compares each answer with the
recorded one: texts, browser states, images (alike within the tolerance),
failures' types, halts and cancels. Times are never compared.

Options:
  --url URL              the daemon, ws://host:port/v1
  --token T              its token (default: the DESKBATCH_TOKEN environment variable)
  --json                 print the whole report as JSON
  --image-tolerance N    largest mean difference, 0-255, of two images' grayscale
                         thumbnails that still counts as the same picture (default ${DEFAULT_IMAGE_TOLERANCE})
  --timeout-ms MS        cancel a batch that runs longer than this (default 11 minutes)

Exit status: 0 no differences, 1 differences, 2 usage error or no replay.
`;

function usageError(message: string): void {
  process.stderr.write(`deskbatch replay: ${message}\n\n${REPLAY_USAGE}`);
  process.exitCode = 2;
}

export async function replay(argv: string[]): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        url: { type: 'string' },
        token: { type: 'string' },
        json: { type: 'boolean', default: false },
        'image-tolerance': { type: 'string' },
        'timeout-ms': { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (err) {
    return usageError((err as Error).message);
  }
  const { values, positionals } = parsed;
  if (values.help) {
    process.stdout.write(REPLAY_USAGE);
    return;
  }
  if (positionals.length !== 1) return usageError('give exactly one trajectory file');
  if (!values.url) return usageError('--url is required');
  if (!/^wss?:\/\//.test(values.url)) return usageError(`--url must be a ws:// or wss:// URL, got ${values.url}`);
  const token = values.token ?? process.env.DESKBATCH_TOKEN;
  if (!token) return usageError('no token: give --token or set DESKBATCH_TOKEN');
  const tolerance = values['image-tolerance'] === undefined ? undefined : Number(values['image-tolerance']);
  if (tolerance !== undefined && !(tolerance >= 0 && tolerance <= 255)) {
    return usageError(`--image-tolerance must be a number 0-255, got ${values['image-tolerance']}`);
  }
  const timeoutMs = values['timeout-ms'] === undefined ? undefined : Number(values['timeout-ms']);
  if (timeoutMs !== undefined && !(Number.isInteger(timeoutMs) && timeoutMs > 0)) {
    return usageError(`--timeout-ms must be a whole number of milliseconds, got ${values['timeout-ms']}`);
  }

  const stop = new AbortController();
  const onSignal = (): void => stop.abort(new ReplayError('interrupted'));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let report: ReplayReport;
  try {
    report = await replayTrajectory({
      file: positionals[0]!,
      url: values.url,
      token,
      signal: stop.signal,
      ...(tolerance !== undefined ? { imageTolerance: tolerance } : {}),
      ...(timeoutMs !== undefined ? { timeoutMs } : {}),
    });
  } catch (err) {
    process.stderr.write(`deskbatch replay: ${(err as Error).message}\n`);
    process.exitCode = 2;
    return;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  process.stdout.write(values.json ? `${JSON.stringify(report, null, 2)}\n` : formatReport(report));
  process.exitCode = report.differences.length > 0 ? 1 : 0;
}

/** The report for a person: a line per difference, not comparable batch and warning, then a summary line. */
export function formatReport(report: ReplayReport): string {
  const lines: string[] = [];
  for (const d of report.differences) lines.push(formatDifference(d));
  for (const n of report.notComparable) lines.push(`not comparable: batch ${n.batch_id}: ${n.reason}`);
  for (const w of report.warnings) lines.push(`warning: ${w}`);
  const worst = report.images.reduce((m, i) => Math.max(m, i.difference ?? 0), 0);
  const images =
    report.images.length > 0
      ? `, ${report.images.length} image${report.images.length === 1 ? '' : 's'} (largest difference ${worst}, tolerance ${report.image_tolerance})`
      : '';
  const plural = (n: number, one: string, many: string): string => `${n} ${n === 1 ? one : many}`;
  lines.push(
    `${report.differences.length === 0 ? 'same' : 'different'}: ${plural(report.batches, 'batch', 'batches')} replayed` +
      `${report.replayed_session_id ? ` in session ${report.replayed_session_id}` : ''}, ${report.compared} compared, ` +
      `${plural(report.differences.length, 'difference', 'differences')}, ${report.notComparable.length} not comparable${images}`,
  );
  return `${lines.join('\n')}\n`;
}

function formatDifference(d: ReplayDifference): string {
  const where = `batch ${d.batch_id}${d.index !== undefined ? ` #${d.index}` : ''}${d.tool_use_id ? ` ${d.tool_use_id}` : ''}`;
  const show = (v: unknown): string => (typeof v === 'string' ? JSON.stringify(v) : JSON.stringify(v ?? null));
  return `${where}: ${d.what}: recorded ${show(d.recorded)}, replayed ${show(d.replayed)}`;
}
