/**
 * Pieces of the per-call path, timed alone in the bench process, so the
 * per-call overhead can be read as a sum of parts (none of this changes or
 * wraps src/; each piece is rebuilt here from the same calls):
 *
 * - the display checks of the desktop driver (src/desktop-driver/worker-driver.ts):
 *   a stat of the X socket (before each worker call, and in displaySize) and
 *   a connect to it (before starting a worker; before commit 079c334, before
 *   every worker call);
 * - one IPC round trip to a forked Node child with `serialization: 'advanced'`
 *   (how the daemon talks to its desktop worker), with a small op, and with an
 *   image-sized Buffer coming back;
 * - validating a one-call batch message with the protocol's zod schema.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { displaySocketPath, isDisplayReachable } from '../src/desktop-driver/display.ts';
import { ClientMessageSchema } from '../src/base/protocol.ts';
import { figure, timeLoop, type Figure } from './stats.ts';

const ECHO_CHILD = fileURLToPath(new URL('./echo-child.ts', import.meta.url));
const TSX = import.meta.resolve('tsx');

async function probeFigures(display: string, tag: string): Promise<Figure[]> {
  const path = displaySocketPath(display);
  if (!path) throw new Error(`not a local display: ${display}`);
  const stats = await timeLoop(async () => {
    await stat(path, { bigint: true });
  });
  const connects = await timeLoop(async () => {
    if (!(await isDisplayReachable(display))) throw new Error(`${display} is not reachable`);
  });
  return [
    figure(`anatomy.stat.${tag}`, `  part: stat of the X socket (before each worker call) ${tag}`, stats),
    figure(`anatomy.connect.${tag}`, `  part: connect probe of the X socket ${tag}`, connects),
  ];
}

function startEcho(): Promise<ChildProcess> {
  const child = fork(ECHO_CHILD, [], { execArgv: ['--import', TSX], serialization: 'advanced' });
  return new Promise((resolve, reject) => {
    child.once('message', () => resolve(child));
    child.once('error', reject);
  });
}

function roundTrip(child: ChildProcess, replyBytes: number): Promise<void> {
  return new Promise((resolve) => {
    child.once('message', () => resolve());
    child.send({ id: 1, op: 'echo', args: { replyBytes } });
  });
}

async function ipcFigures(imageBytes: number, tag: string): Promise<Figure[]> {
  const child = await startEcho();
  try {
    const small = await timeLoop(() => roundTrip(child, 0));
    const image = await timeLoop(() => roundTrip(child, imageBytes));
    return [
      figure(`anatomy.ipc.${tag}`, `  part: IPC round trip to a child, small op`, small),
      figure(`anatomy.ipc-image.${tag}`, `  part: IPC round trip, ${imageBytes} B Buffer back ${tag}`, image),
    ];
  } finally {
    child.kill('SIGTERM');
  }
}

async function zodFigure(): Promise<Figure> {
  const text = JSON.stringify({
    type: 'batch',
    batch_id: 'b-anatomy',
    tool_uses: [
      { type: 'tool_use', id: 'toolu_anatomy', name: 'cursor_position', toolset_name: 'computer', input: {} },
    ],
  });
  const times = await timeLoop(async () => {
    ClientMessageSchema.parse(JSON.parse(text));
  });
  return figure('anatomy.zod', '  part: JSON.parse + zod parse of a one-call batch', times);
}

export async function anatomyFigures(display: string, tag: string, pngBytes: number): Promise<Figure[]> {
  return [...(await probeFigures(display, tag)), ...(await ipcFigures(pngBytes, tag)), await zodFigure()];
}
