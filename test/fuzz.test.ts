/**
 * Hostile input (issue 4, promise 3), a short run for every CI: fast-check
 * throws malformed frames at the protocol and random inputs at every member.
 * Each gets a clear `error` or an `is_error` result, every batch still gets
 * one result per tool_use, and the connection stays usable. The browser may
 * only reach 127.0.0.1 here.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import fc from 'fast-check';
import type { BatchResult, ErrorMessage, ServerMessage } from '../src/base/protocol.ts';
import { BROWSER_MEMBER_NAMES } from '../toolsets/browser/index.ts';
import { COMPUTER_MEMBERS } from '../toolsets/computer/index.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { startTestDaemon, type TestClient, type TestDaemon } from '../testkit/daemon.ts';

const RUNS = Number(process.env.FUZZ_RUNS ?? 60);
/** What the daemon's heap may keep after the whole run, beyond its bounded caches. */
const HEAP_GROWTH_MAX_BYTES = 64 * 1024 * 1024;

/** The heap in use after a full garbage collection (this process holds the daemon). */
function heapAfterGc(): number {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

describe('fuzz', () => {
  let d: TestDaemon;
  let c: TestClient;
  let heapAtStart = 0;
  before(async () => {
    d = await startTestDaemon({
      display: undefined,
      browser: 'headless',
      limits: { messageBurst: 100_000, messagesPerSecond: 100_000 },
      browserSettings: {
        enable: ['javascript_exec', 'read_console', 'read_network', 'file_upload'],
        allowHosts: ['127.0.0.1'],
      },
    });
    c = await d.connect();
    await c.hello();
    heapAtStart = heapAfterGc();
  });
  after(() => d?.close());

  /** Sends a ping and waits for its pong: the connection is still usable. */
  async function stillUsable(): Promise<void> {
    c.send({ type: 'ping' });
    await c.next((m): m is Extract<ServerMessage, { type: 'pong' }> => m.type === 'pong', 10_000);
  }

  test('malformed frames get a clear error and leave the connection usable', async () => {
    const nested = fc.integer({ min: 1, max: 5_000 }).map((depth) => '['.repeat(depth) + ']'.repeat(depth));
    const frame = fc.oneof(
      fc.string({ maxLength: 200 }),
      fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)),
      nested,
      fc
        .record(
          {
            type: fc.constantFrom('hello', 'batch', 'cancel', 'ping', 'nope'),
            batch_id: fc.oneof(fc.string({ maxLength: 140 }), fc.integer()),
            tool_uses: fc.anything({ maxDepth: 3 }),
            extra: fc.anything({ maxDepth: 2 }),
          },
          { requiredKeys: ['type'] },
        )
        .map((v) => JSON.stringify(v)),
      fc.string({ unit: 'binary', maxLength: 50 }),
      // Lone surrogates (invalid UTF-16) inside an otherwise good batch.
      fc
        .constantFrom('\ud800', '\udfff', 'a\ud83d', '\ude00b')
        .map((bad) => JSON.stringify({ type: 'batch', batch_id: bad, tool_uses: [computerCall({ text: bad })] })),
      // Huge values, and more tool_uses than a batch may hold, all within the frame limit.
      fc
        .integer({ min: 1, max: 900_000 })
        .map((n) =>
          JSON.stringify({ type: 'batch', batch_id: 'big', tool_uses: [computerCall({ text: 'x'.repeat(n) })] }),
        ),
      fc
        .integer({ min: 101, max: 2_000 })
        .map((n) =>
          JSON.stringify({ type: 'batch', batch_id: 'many', tool_uses: Array.from({ length: n }, computerCall) }),
        ),
    );
    let sent = 0;
    await fc.assert(
      fc.asyncProperty(frame, async (text) => {
        const before = c.messages.length;
        c.send(text);
        sent++;
        await stillUsable();
        for (const m of c.messages.slice(before)) {
          if (m.type === 'error') assert.ok((m as ErrorMessage).message.length > 0);
        }
        c.messages.length = 0;
      }),
      { numRuns: RUNS },
    );
    c.ws.send(Buffer.from([0xff, 0xfe, 0x00]), { binary: true });
    await stillUsable();
    assert.ok(sent >= RUNS);
  });

  function computerCall(input: unknown = {}, i = 0): object {
    return { type: 'tool_use', id: `toolu_x${i}`, name: 'type', toolset_name: 'computer', input };
  }

  const computerNames = COMPUTER_MEMBERS.map((m) => m.name).filter((n) => n !== 'wait' && n !== 'hold_key');
  const browserNames = BROWSER_MEMBER_NAMES.filter((n) => n !== 'wait' && n !== 'hold_key');

  for (const [toolset, names] of [
    ['computer', computerNames],
    ['browser', browserNames],
  ] as const) {
    test(`random inputs to every ${toolset} member: one valid result each, never a crash`, async () => {
      let n = 0;
      const input = fc.oneof(
        fc.anything({ maxDepth: 3 }),
        fc.dictionary(
          fc.constantFrom(
            'coordinate',
            'text',
            'url',
            'target',
            'region',
            'tab_id',
            'ref',
            'query',
            'value',
            'duration',
          ),
          fc.oneof(
            fc.jsonValue({ maxDepth: 2 }),
            fc.tuple(fc.integer({ min: -5000, max: 5000 }), fc.integer({ min: -5000, max: 5000 })),
            fc.record({
              type: fc.constantFrom('coordinate', 'ref'),
              x: fc.integer(),
              y: fc.integer(),
              ref: fc.string(),
            }),
          ),
        ),
      );
      await fc.assert(
        fc.asyncProperty(fc.constantFrom(...names), input, async (name, raw) => {
          const uses = [
            { type: 'tool_use' as const, id: `toolu_f${n}`, name, toolset_name: toolset, input: raw },
            {
              type: 'tool_use' as const,
              id: `toolu_g${n}`,
              name: 'wait',
              toolset_name: toolset,
              input: { duration: 0 },
            },
          ];
          const { result } = await c.batch(`fuzz-${toolset}-${n++}`, uses);
          const checked: BatchResult = assertApiValid(uses, result);
          if (checked.tool_results[0]!.is_error) {
            assert.equal(checked.failures[0]?.tool_use_id, uses[0]!.id);
          }
        }),
        { numRuns: RUNS },
      );
      await stillUsable();
    });
  }

  test('while one client sends garbage, another session works; memory stays bounded', async () => {
    const good = await d.connect();
    await good.hello();
    let goodBatches = 0;
    const hostile = (async () => {
      for (let i = 0; i < RUNS; i++) {
        c.send('{"type":"batch","tool_uses":' + '['.repeat(3_000));
        c.send(
          JSON.stringify({ type: 'batch', batch_id: `h${i}`, tool_uses: [computerCall({ text: 'x' })], extra: i }),
        );
        await stillUsable();
        c.messages.length = 0;
      }
    })();
    const worker = (async () => {
      for (let i = 0; i < 10; i++) {
        const uses = [
          { type: 'tool_use' as const, id: `toolu_ok${i}`, name: 'list_tabs', toolset_name: 'browser', input: {} },
        ];
        const { result } = await good.batch(`good-${i}`, uses);
        assertApiValid(uses, result);
        assert.equal(result.failures.length, 0, JSON.stringify(result.failures));
        goodBatches++;
      }
    })();
    await Promise.all([hostile, worker]);
    assert.equal(goodBatches, 10);
    const growth = heapAfterGc() - heapAtStart;
    console.log(`# heap growth over the fuzz run: ${(growth / 1024 / 1024).toFixed(1)} MiB`);
    assert.ok(growth < HEAP_GROWTH_MAX_BYTES, `heap grew ${growth} bytes`);
  });
});
