/** What the batch drivers share: which kind a round runs, unique coordinates, and a plan under construction. */
import type { ToolUse } from '../../src/base/protocol.ts';
import type { BatchKind, BatchMix, Expectation, Planned } from './run.ts';

/**
 * The batch kinds of a session, by round: computer, browser and mixed in turn, each
 * session starting at a different point of the cycle, so that all kinds run at once.
 */
export function kindOf(
  round: number,
  slot: number,
  kinds: readonly BatchMix[] = ['computer', 'browser', 'mixed'],
): BatchMix {
  return kinds[(round + slot) % kinds.length]!;
}

/** Globally unique mouse coordinates: consecutive batches (of any session, any run in this process) get different ones. */
let coordinateCounter = 0;
export function nextCoordinate(size: { width: number; height: number }): [number, number] {
  const w = size.width - 20;
  const h = size.height - 20;
  const c = coordinateCounter++;
  return [10 + (c % w), 10 + (Math.floor(c / w) % h)];
}

/** Batch `n` of session `tag` being planned: its calls (ids `toolu_<tag>_<n>_<i>`) and what each must show. */
export class Plan {
  private i = 0;
  readonly toolUses: ToolUse[] = [];
  readonly expect: Expectation[] = [];

  constructor(
    private readonly tag: string,
    private readonly n: number,
  ) {}

  computer(name: string, input: Record<string, unknown>, e: Expectation): void {
    this.add('computer', name, input, e);
  }

  browser(name: string, input: Record<string, unknown>, e: Expectation): void {
    this.add('browser', name, input, e);
  }

  done(kind: BatchKind): Planned {
    return { kind, toolUses: this.toolUses, expect: this.expect };
  }

  private add(toolset: 'computer' | 'browser', name: string, input: Record<string, unknown>, e: Expectation): void {
    this.toolUses.push({
      type: 'tool_use',
      id: `toolu_${this.tag}_${this.n}_${this.i++}`,
      name,
      toolset_name: toolset,
      input,
    });
    this.expect.push(e);
  }
}

/** Whether batch `n` is one of every `k`-th (never when k is 0 or unset). */
export const everyNth = (n: number, k: number | undefined): boolean => (k ? n % k === k - 1 : false);
