/** Fairness of the desktop lane, measured at the clients (see `FIFO_OVERTAKE_BOUND`). */

export interface LaneRecord {
  session: string;
  /** When the client sent the batch. */
  sentAt: number;
  /** When its batch_result arrived. */
  doneAt: number;
}

/**
 * The most lane batches any one other session may see completed while one lane
 * batch of ours is outstanding, in a FIFO lane, when every session keeps at
 * most one batch outstanding (each sends its next only after the previous
 * result). Measured at the client, between our send and our result, another
 * session B can complete at most:
 *  1. one batch that finished before ours reached the lane but whose result
 *     arrived after we sent;
 *  2. one batch already in the lane queue ahead of ours (B has at most one
 *     outstanding, and FIFO serves it before us);
 *  3. one batch B sent after that, queued behind ours, whose result reached the
 *     client just before ours (two sockets: arrival order between them is free).
 * A fourth means B's batch entered the lane after ours and was still served
 * before ours: an overtaking, which FIFO forbids. A LIFO lane, or one that lets
 * the session that just finished go again, makes a waiting batch watch other
 * sessions go round many times (or forever: starvation), and fails this check;
 * see the simulation in test/load.test.ts.
 */
export const FIFO_OVERTAKE_BOUND = 3;

export interface OvertakeReport {
  /** The most batches of one other session completed while one batch waited. */
  max: number;
  /** Lane batches that saw more than FIFO_OVERTAKE_BOUND batches of one other session complete. */
  violations: number;
  worst?: { session: string; other: string; count: number };
}

export function laneOvertakes(records: readonly LaneRecord[], bound = FIFO_OVERTAKE_BOUND): OvertakeReport {
  const bySession = new Map<string, number[]>();
  for (const r of records) bySession.set(r.session, [...(bySession.get(r.session) ?? []), r.doneAt]);
  for (const list of bySession.values()) list.sort((a, b) => a - b);
  // Number of values in the sorted list strictly inside (lo, hi).
  const countInside = (list: number[], lo: number, hi: number): number => {
    const firstAbove = (x: number): number => {
      let a = 0;
      let b = list.length;
      while (a < b) {
        const mid = (a + b) >> 1;
        if (list[mid]! <= x) a = mid + 1;
        else b = mid;
      }
      return a;
    };
    let lastBelow = firstAbove(hi);
    while (lastBelow > 0 && list[lastBelow - 1]! >= hi) lastBelow--;
    return Math.max(0, lastBelow - firstAbove(lo));
  };
  const report: OvertakeReport = { max: 0, violations: 0 };
  for (const r of records) {
    let worstHere = 0;
    for (const [other, list] of bySession) {
      if (other === r.session) continue;
      const n = countInside(list, r.sentAt, r.doneAt);
      if (n > worstHere) worstHere = n;
      if (n > report.max) {
        report.max = n;
        report.worst = { session: r.session, other, count: n };
      }
    }
    if (worstHere > bound) report.violations++;
  }
  return report;
}
