/**
 * The batch rules, on the real Executor with two test toolsets plugged in
 * (toolsets are the executor's input; their members record what ran).
 * Property-based: random batches of good, bad, failing, unknown and plain
 * calls across both toolsets keep every rule.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { z } from 'zod';
import { Executor } from '../src/executor/executor.ts';
import { FALLBACK_NOT_EXECUTED_TEXT } from '../src/toolset-api/text.ts';
import { Lane } from '../src/desktop-pool/lane.ts';
import { silentLogger } from '../src/base/log.ts';
import type { ToolEvent, ToolUse } from '../src/base/protocol.ts';
import { bindMember, type CallContext, type Member, type Toolset } from '../src/toolset-api/types.ts';
import { assertApiValid } from '../testkit/api-rules.ts';

/** A thrown error whose message carries what must never reach the model. */
class LeakyDriverError extends Error {
  override name = 'LeakyDriverError';
}
/** The contract's exact halt text for the computer toolset (docs/TOOLSETS.md A5). */
const COMPUTER_NOT_EXECUTED_TEXT = 'Not executed: an earlier computer action in this turn failed.';
const SECRET = 'password=hunter2 at /home/op/.ssh/id_rsa on db.internal';

function testToolset(name: string, notExecutedText: string, effects: string[]): Toolset {
  const ctx = (call: CallContext): CallContext => call;
  const members: Member<z.ZodType, CallContext>[] = [
    {
      name: 'ok',
      summary: 'records its tag',
      kind: 'ack',
      effect: 'write',
      input: z.object({ tag: z.string() }),
      ack: (i: { tag: string }) => `done ${i.tag}`,
      handle: async (i: { tag: string }) => void effects.push(i.tag),
    } as Member<z.ZodType, CallContext>,
    {
      name: 'fail',
      summary: 'throws',
      kind: 'ack',
      effect: 'write',
      input: z.object({ tag: z.string() }),
      ack: () => 'never',
      handle: async (i: { tag: string }) => {
        effects.push(`fail:${i.tag}`);
        throw new LeakyDriverError(SECRET);
      },
    } as Member<z.ZodType, CallContext>,
    {
      name: 'slow',
      summary: 'waits for its signal',
      kind: 'text',
      effect: 'read',
      input: z.object({ ms: z.number() }),
      extraTimeMs: () => 0,
      handle: async (i: { ms: number }, c: CallContext) => {
        await sleep(i.ms, undefined, { signal: c.signal });
        return '';
      },
    } as Member<z.ZodType, CallContext>,
    {
      name: 'off',
      summary: 'disabled below',
      kind: 'text',
      effect: 'read',
      input: z.object({}),
      handle: async () => 'x',
    } as Member<z.ZodType, CallContext>,
  ];
  return {
    type: `${name}_toolset_test`,
    name,
    notExecutedText,
    cancelledText: `Cancelled (${name}).`,
    usesDesktop: true,
    allowedBlocks: ['text', 'image'],
    allMemberNames: members.map((m) => m.name),
    optionalMemberNames: ['slow'],
    members: new Map(members.filter((m) => m.name !== 'off').map((m) => [m.name, bindMember(m, ctx)])),
    disabledMemberNames: new Set(['off']),
  };
}

function setup(options: { exposeErrorMessages?: boolean; callTimeoutMs?: number } = {}) {
  const effects: string[] = [];
  const executor = new Executor({
    toolsets: [
      testToolset('computer', COMPUTER_NOT_EXECUTED_TEXT, effects),
      testToolset('browser', 'Not executed: an earlier action in this turn failed.', effects),
    ],
    callTimeoutMs: options.callTimeoutMs ?? 5_000,
    exposeErrorMessages: options.exposeErrorMessages ?? false,
    images: { limits: { maxSidePx: 2000, maxVisualTokens: 4784 }, maxBase64Bytes: 10 * 1024 * 1024 },
    lane: new Lane(),
    log: silentLogger,
  });
  const run = async (
    toolUses: ToolUse[],
    signal = new AbortController().signal,
    onEvent: (e: ToolEvent) => void = () => undefined,
  ) => {
    const events: ToolEvent[] = [];
    const emit = (e: ToolEvent): void => {
      events.push(e);
      onEvent(e);
    };
    const raw = await executor.run({ sessionId: 's', batchId: 'b', toolUses, signal, emit });
    return { result: assertApiValid(toolUses, raw), events };
  };
  return { effects, run, executor };
}

const use = (id: string, toolset: string | null, name: string, input: unknown): ToolUse => ({
  type: 'tool_use',
  id,
  name,
  toolset_name: toolset,
  input,
});

describe('executor', () => {
  test('random batches keep every rule', async () => {
    const kinds = ['ok', 'fail', 'bad', 'unknown', 'plain', 'stranger', 'off', 'bare'] as const;
    const call = fc.record({ toolset: fc.constantFrom('computer', 'browser'), kind: fc.constantFrom(...kinds) });
    await fc.assert(
      fc.asyncProperty(fc.array(call, { minLength: 1, maxLength: 12 }), async (calls) => {
        const { effects, run } = setup();
        const toolUses = calls.map((c, i) => {
          const id = `toolu_${i}`;
          switch (c.kind) {
            case 'ok':
            case 'fail':
              return use(id, c.toolset, c.kind, { tag: `${c.toolset}${i}` });
            case 'bad':
              return use(id, c.toolset, 'ok', { tag: 42 });
            case 'unknown':
              return use(id, c.toolset, 'teleport', {});
            case 'off':
              return use(id, c.toolset, 'off', {});
            case 'plain':
              return use(id, null, 'ok', { tag: 'plain' });
            case 'stranger':
              return use(id, 'stranger', 'ok', { tag: 'x' });
            case 'bare':
              return use(id, null, c.toolset, { actions: [] });
          }
        });
        const { result, events } = await run(toolUses);

        // Model the rules independently and compare.
        const halted = new Set<string>();
        const expectedEffects: string[] = [];
        calls.forEach((c, i) => {
          // A toolset not served here never halts; a malformed call of a served one is answered as one even once halted.
          const family = c.kind === 'plain' || c.kind === 'stranger' ? null : c.toolset;
          const r = result.tool_results[i]!;
          const text = r.content[0]?.type === 'text' ? r.content[0].text : '';
          if (family && halted.has(family) && c.kind !== 'bare') {
            assert.equal(r.is_error, true);
            const expected =
              family === 'computer'
                ? COMPUTER_NOT_EXECUTED_TEXT
                : family === 'browser'
                  ? 'Not executed: an earlier action in this turn failed.'
                  : FALLBACK_NOT_EXECUTED_TEXT;
            assert.equal(text, expected, `call ${i} gets its toolset's exact halt text`);
            assert.equal(
              events
                .filter((e) => e.index === i)
                .map((e) => e.phase)
                .join(),
              'not_executed',
            );
            return;
          }
          assert.deepEqual(
            events.filter((e) => e.index === i).map((e) => e.phase),
            ['started', c.kind === 'ok' ? 'succeeded' : 'failed'],
          );
          if (c.kind === 'ok') {
            assert.equal(r.is_error, undefined);
            assert.equal(text, `done ${c.toolset}${i}`);
            expectedEffects.push(`${c.toolset}${i}`);
            return;
          }
          assert.equal(r.is_error, true);
          if (c.kind === 'fail') {
            expectedEffects.push(`fail:${c.toolset}${i}`);
            assert.equal(text, "Tool 'fail' failed with LeakyDriverError.");
          }
          if (c.kind === 'bad') assert.match(text, /^invalid input for \w+ member 'ok': tag: expected string/);
          if (c.kind === 'unknown') assert.equal(text, `Error: unknown ${c.toolset} toolset member 'teleport'`);
          if (c.kind === 'off') assert.match(text, /^The 'off' action is not permitted/);
          if (c.kind === 'plain') assert.equal(text, "Error: Tool 'ok' not found");
          if (c.kind === 'stranger') assert.equal(text, "Error: Toolset 'stranger' member 'ok' not found");
          if (c.kind === 'bare') {
            assert.equal(
              text,
              `Error: the '${c.toolset}' toolset could not run this call: the 'actions' list is empty; nothing in the batch was executed`,
            );
          }
          if (family) halted.add(family);
        });
        assert.deepEqual(
          effects,
          expectedEffects,
          'nothing ran after its toolset failed, everything else ran in order',
        );
        assert.equal(
          result.failures.length,
          result.tool_results.filter((r) => r.is_error).length - notExecuted(events),
        );
        for (const f of result.failures) assert.equal(f.error.message.length > 0, true);
      }),
      { numRuns: 200 },
    );
  });

  test('the model reads the error type; the caller gets the whole error', async () => {
    const { run } = setup();
    const { result, events } = await run([use('a', 'computer', 'fail', { tag: 't' })]);
    const text = result.tool_results[0]!.content[0];
    assert.deepEqual(text, { type: 'text', text: "Tool 'fail' failed with LeakyDriverError." });
    assert.ok(!JSON.stringify(result.tool_results).includes('hunter2'));
    assert.deepEqual(result.failures[0]!.error, {
      type: 'LeakyDriverError',
      message: SECRET,
      timed_out: false,
      retryable: false,
    });
    assert.deepEqual(events.find((e) => e.phase === 'failed')?.error, result.failures[0]!.error);
    assert.deepEqual(result.halted, { computer: 0 });
  });

  test('the operator may opt in to messages', async () => {
    const { run } = setup({ exposeErrorMessages: true });
    const { result } = await run([use('a', 'computer', 'fail', { tag: 't' })]);
    assert.deepEqual(result.tool_results[0]!.content[0], {
      type: 'text',
      text: `Tool 'fail' failed with LeakyDriverError: ${SECRET}`,
    });
  });

  test('a timeout states the configured limit and halts the toolset', async () => {
    const { run } = setup({ callTimeoutMs: 50 });
    const { result, events } = await run([
      use('a', 'computer', 'slow', { ms: 10_000 }),
      use('b', 'computer', 'ok', { tag: 'never' }),
    ]);
    assert.deepEqual(result.tool_results[0]!.content[0], { type: 'text', text: "Tool 'slow' timed out after 50 ms." });
    assert.equal(result.failures[0]!.error.timed_out, true);
    assert.equal(result.failures[0]!.error.retryable, true);
    assert.equal(events.at(-1)?.phase, 'not_executed');
  });

  test('cancel is not a failure: the running and later calls get the cancelled text', async () => {
    const { effects, run } = setup();
    const controller = new AbortController();
    const { result, events } = await run(
      [
        use('a', 'computer', 'ok', { tag: 'first' }),
        use('b', 'computer', 'slow', { ms: 10_000 }),
        use('c', 'browser', 'ok', { tag: 'after' }),
      ],
      controller.signal,
      // Cancel once the slow call has started (and, a turn of the event loop later, is waiting in its handler).
      (e) => {
        if (e.tool_use_id === 'b' && e.phase === 'started') setImmediate(() => controller.abort());
      },
    );
    assert.equal(result.cancelled, true);
    assert.deepEqual(result.failures, []);
    assert.deepEqual(effects, ['first']);
    assert.deepEqual(result.tool_results[1]!.content[0], { type: 'text', text: 'Cancelled (computer).' });
    assert.deepEqual(result.tool_results[2]!.content[0], { type: 'text', text: 'Cancelled (browser).' });
    assert.deepEqual(
      events.map((e) => e.phase),
      ['started', 'succeeded', 'started', 'cancelled', 'cancelled'],
    );
    assert.ok(!events.some((e) => e.phase === 'failed'));
  });

  test("a call without toolset_name is answered without one, with the SDK runner's text, and halts nothing", async () => {
    const { run } = setup();
    const { result } = await run([use('a', null, 'left_click', {}), use('b', 'computer', 'ok', { tag: 't' })]);
    assert.equal(result.tool_results[0]!.toolset_name, undefined);
    assert.deepEqual(result.tool_results[0]!.content, [{ type: 'text', text: "Error: Tool 'left_click' not found" }]);
    assert.equal(result.tool_results[1]!.is_error, undefined);
  });

  test("a toolset this daemon does not serve: the SDK runner's text on each call, toolset_name echoed, nothing halted", async () => {
    const { run } = setup();
    const { result, events } = await run([
      use('a', 'shell', 'run', {}),
      use('b', 'shell', 'run', {}),
      use('c', 'computer', 'ok', { tag: 't' }),
    ]);
    for (const r of result.tool_results.slice(0, 2)) {
      assert.equal(r.toolset_name, 'shell');
      assert.equal(r.is_error, true);
      assert.deepEqual(r.content, [{ type: 'text', text: "Error: Toolset 'shell' member 'run' not found" }]);
    }
    assert.equal(result.tool_results[2]!.is_error, undefined);
    assert.equal(result.failures.length, 2, 'the operator still sees both');
    assert.deepEqual(result.halted, {});
    assert.ok(!events.some((e) => e.phase === 'not_executed'));
  });

  test("a call named after a served toolset, without toolset_name: the SDK runner's malformed-call text, and that toolset halts", async () => {
    const { effects, run } = setup();
    const { result } = await run([
      use('a', 'computer', 'fail', {}),
      use('b', null, 'computer', { actions: [{ action: 'left_click' }, 'not an action'] }),
      use('c', null, 'browser', { actions: 'click it' }),
      use('d', 'browser', 'ok', { tag: 'never' }),
      use('e', null, 'browser', { action: 'nav\u202eigate' }),
    ]);
    const text = (i: number): string => (result.tool_results[i]!.content[0] as { text: string }).text;
    // Answered as a malformed call even though its toolset had already halted.
    assert.equal(
      text(1),
      "Error: the 'computer' toolset could not run this call: action 1 must be an object with a string 'action' field; nothing in the batch was executed",
    );
    assert.equal(
      text(2),
      "Error: the 'browser' toolset could not run this call: 'actions' is text, not a list of actions; nothing in the batch was executed",
    );
    assert.equal(text(3), 'Not executed: an earlier action in this turn failed.');
    assert.equal(
      text(4),
      "Error: the 'browser' toolset could not run this call: the call has no 'actions' list (action: 'nav igate'); nothing in the batch was executed",
      'the name is folded as the SDK folds it: a bidi control becomes a space',
    );
    for (const i of [1, 2, 4]) assert.equal(result.tool_results[i]!.toolset_name, undefined);
    assert.deepEqual(result.halted, { computer: 0, browser: 2 });
    assert.deepEqual(effects, []);
  });

  test("an agent's tools[] offers a toolset only when listed; its configs switch members off, and optional ones on", () => {
    const { executor } = setup();
    const offer = executor.agentOffer([
      {
        type: 'computer_toolset_test',
        configs: { ok: { enabled: false }, fail: null, constructor: { enabled: true } },
      },
    ]);
    assert.equal(offer.get('browser'), 'none');
    assert.deepEqual(
      offer.get('computer'),
      new Set(['ok', 'slow']),
      'ok switched off; slow is optional and not switched on',
    );
    const on = executor.agentOffer([{ type: 'computer_toolset_test', configs: { slow: { enabled: true } } }]);
    assert.deepEqual(on.get('computer'), new Set());
  });

  test('toolset names that are object keys (constructor, __proto__) are not mistaken for served or halted ones', async () => {
    const { run } = setup();
    const { result, events } = await run([
      use('a', 'constructor', 'ok', { tag: 't' }),
      use('b', '__proto__', 'ok', { tag: 't' }),
      use('c', 'toString', 'ok', { tag: 't' }),
      use('d', 'constructor', 'ok', { tag: 't' }),
    ]);
    assert.equal(result.failures.length, 4);
    assert.ok(!events.some((e) => e.phase === 'not_executed'));
    assert.deepEqual(
      result.tool_results.map((r) => (r.content[0] as { text: string }).text),
      ['constructor', '__proto__', 'toString', 'constructor'].map((t) => `Error: Toolset '${t}' member 'ok' not found`),
    );
    assert.deepEqual(result.halted, {});
  });

  test('lone surrogates and long texts are made safe at the boundary', async () => {
    const { run } = setup({ exposeErrorMessages: true });
    const { result } = await run([use('a', 'computer', 'ok', { tag: 'x\ud800y' })]);
    assert.equal((result.tool_results[0]!.content[0] as { text: string }).text, 'done x\ufffdy');
  });
});

function notExecuted(events: ToolEvent[]): number {
  return events.filter((e) => e.phase === 'not_executed').length;
}
