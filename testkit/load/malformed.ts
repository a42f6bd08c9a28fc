/**
 * The malformed driver: one malformed input (a frame the protocol refuses, or a call the
 * toolset refuses), answered exactly, on a connection that must stay usable after it.
 */
import type { ToolUse, Welcome } from '../../src/base/protocol.ts';
import { REPEAT_ADVICE, REPEAT_THRESHOLD } from '../../src/executor/repeats.ts';
import { COMPUTER_NOT_EXECUTED } from '../desktop.ts';
import { runBatch } from './batch.ts';
import type { LoadClient } from './client.ts';
import type { Expectation, LoadRun } from './run.ts';

export const MALFORMED_KINDS = [
  'not_json',
  'wrong_type_input',
  'unknown_field',
  'unknown_member',
  'bad_batch_id',
  'binary_frame',
] as const;
export type MalformedKind = (typeof MALFORMED_KINDS)[number];

/** One malformed input; returns whether it got its right answer. The connection must stay usable after it. */
export async function malformed(
  run: LoadRun,
  tag: string,
  client: LoadClient,
  welcome: Welcome,
  n: number,
  which: MalformedKind,
  failedBefore: Map<MalformedKind, number>,
): Promise<boolean> {
  const { stats, problem, expectFailure, wrongResults } = run;
  stats.malformedSent++;
  stats.malformedByKind[which] = (stats.malformedByKind[which] ?? 0) + 1;
  const expectError = async (payload: string | Buffer, code: string): Promise<boolean> => {
    if (Buffer.isBuffer(payload)) client.ws.send(payload, { binary: true });
    else client.send(payload);
    try {
      const e = await client.nextError(30_000);
      if (e.code === code) return true;
      problem(`${tag} malformed ${which}: got error ${e.code}, want ${code}`);
    } catch (err) {
      problem(`${tag} malformed ${which}: ${String(err)}`);
    }
    return false;
  };
  const base = `toolu_${tag}_m${n}`;
  switch (which) {
    case 'not_json':
      return expectError('{"type": "batch", "batch_id": ', 'invalid_json');
    case 'unknown_field':
      return expectError(JSON.stringify({ type: 'ping', extra: n }), 'invalid_message');
    case 'bad_batch_id':
      return expectError(
        JSON.stringify({
          type: 'batch',
          batch_id: `bad id ${n}!`,
          tool_uses: [{ type: 'tool_use', id: `${base}_0`, name: 'screenshot', toolset_name: 'computer', input: {} }],
        }),
        'invalid_message',
      );
    case 'binary_frame':
      return expectError(Buffer.from([0xde, 0xad, 0xbe, 0xef]), 'binary_frame');
    case 'wrong_type_input':
    case 'unknown_member': {
      // The same failing call again in this session: from the third time on, loop detection
      // (src/executor/repeats.ts) adds its advice, with the count.
      const times = (failedBefore.get(which) ?? 0) + 1;
      failedBefore.set(which, times);
      const advice = times >= REPEAT_THRESHOLD ? `\n\n${REPEAT_ADVICE(times)}` : '';
      const exactly = (head: string, rest = ''): RegExp =>
        new RegExp(`^${escapeRegExp(head)}${rest}${escapeRegExp(advice)}$`, 's');
      const toolUses: ToolUse[] =
        which === 'wrong_type_input'
          ? [
              {
                type: 'tool_use',
                id: `${base}_0`,
                name: 'mouse_move',
                toolset_name: 'computer',
                input: { coordinate: 'x' },
              },
              { type: 'tool_use', id: `${base}_1`, name: 'cursor_position', toolset_name: 'computer', input: {} },
            ]
          : [
              { type: 'tool_use', id: `${base}_0`, name: 'teleport', toolset_name: 'computer', input: {} },
              { type: 'tool_use', id: `${base}_1`, name: 'list_tabs', toolset_name: 'browser', input: {} },
            ];
      const expect: Expectation[] =
        which === 'wrong_type_input'
          ? [
              {
                kind: 'error',
                type: 'ToolInputError',
                text: exactly("invalid input for computer member 'mouse_move'", '[^\\n]*'),
              },
              { kind: 'not_executed', text: COMPUTER_NOT_EXECUTED },
            ]
          : [
              {
                kind: 'error',
                type: 'ToolRefusedError',
                text: exactly("Error: unknown computer toolset member 'teleport'"),
              },
              // The browser is not halted by a computer failure: list_tabs runs (and shows only our tabs).
              { kind: 'tabs', tag, atLeast: 0 },
            ];
      const r = await runBatch(run, tag, client, welcome, `${tag}-m${n}`, { kind: 'malformed', toolUses, expect });
      if (r && which === 'unknown_member' && r.tool_results[1]?.is_error) {
        const f = r.failures.find((x) => x.index === 1);
        if (!f || !expectFailure(f.error)) problem(`${tag} ${tag}-m${n}: list_tabs was halted by a computer error`);
      }
      // This batch's own count: the global one also moves with other sessions' batches while this one runs
      // (which made the soak report answered malformed inputs as unanswered).
      return r !== undefined && wrongResults.get(r) === 0;
    }
  }
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
