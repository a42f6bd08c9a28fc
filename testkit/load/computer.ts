/**
 * The computer driver: a move to a coordinate no other batch uses, then `cursor_position`,
 * which must read that very coordinate (the batch holds the desktop lane throughout); now and
 * then a screenshot or a zoom, whose file must be in this session's folder.
 */
import type { LoadOptions, Planned } from './run.ts';
import { everyNth, nextCoordinate, Plan } from './plan.ts';

export function planComputer(
  opts: LoadOptions,
  tag: string,
  n: number,
  size: { width: number; height: number },
): Planned {
  const p = new Plan(tag, n);
  const coordinate = nextCoordinate(size);
  p.computer('mouse_move', { coordinate }, { kind: 'ack' });
  p.computer('cursor_position', {}, { kind: 'cursor', coordinate, moveIndex: 0 });
  if (everyNth(n, opts.screenshotEvery)) p.computer('screenshot', {}, { kind: 'image' });
  if (n % 5 === 2) p.computer('zoom', { region: [0, 0, 200, 100] }, { kind: 'image' });
  return p.done('computer');
}
