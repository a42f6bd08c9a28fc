/**
 * The mixed driver: both toolsets in one batch, so it holds the desktop lane for the whole
 * batch, browser calls included; `cursor_position` must still read this batch's coordinate.
 */
import type { Planned } from './run.ts';
import { nextCoordinate, Plan } from './plan.ts';

export function planMixed(tag: string, n: number, size: { width: number; height: number }): Planned {
  const p = new Plan(tag, n);
  const coordinate = nextCoordinate(size);
  // A cheap browser call keeps the lane moving (reading a page under 32 sessions takes seconds on two cores).
  p.computer('mouse_move', { coordinate }, { kind: 'ack' });
  p.browser('list_tabs', {}, { kind: 'tabs', tag, atLeast: 0 });
  p.computer('cursor_position', {}, { kind: 'cursor', coordinate, moveIndex: 0 });
  return p.done('mixed');
}
