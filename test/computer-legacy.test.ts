/**
 * The older computer tools (`computer_20250124`, `computer_20251124`) on the
 * same daemon: a `tool_use` named `computer` with no `toolset_name` and an
 * `action`. A real daemon drives a real Xvfb, the event recorder page reports
 * what arrived, and every batch_result is checked against the API's rules
 * with `computer` as a client tool (text and images, never a toolset_name).
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import type {
  BetaToolComputerUse20250124,
  BetaToolComputerUse20251124,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import type { BatchResult, ToolEvent, ToolUse, Welcome } from '../src/base/protocol.ts';
import {
  LEGACY_ACTIONS,
  LEGACY_COMPUTER_FAMILY,
  LegacyInputSchema,
  toMemberCalls,
} from '../toolsets/computer-legacy/index.ts';
import { FALLBACK_CANCELLED_TEXT, FALLBACK_NOT_EXECUTED_TEXT } from '../src/toolset-api/text.ts';
import { COMPUTER_MEMBERS } from '../toolsets/computer/index.ts';
import { assertApiValid, imageSize } from '../testkit/api-rules.ts';
import { computerUse, startTestDaemon, type TestClient } from '../testkit/daemon.ts';
import {
  COMPUTER_NOT_EXECUTED,
  drainWheels,
  firstImage,
  mouseEvents as mouse,
  mousePoints,
  runBatch,
  startTestDesktop,
  texts,
  type TestDesktop,
} from '../testkit/desktop.ts';
import type { RecordedKey } from '../testkit/event-page.ts';

let counter = 0;
/** A tool_use of the older tool as the API sends it: no toolset_name (undefined is left out of the JSON). */
function legacy(action: string, fields: Record<string, unknown> = {}): ToolUse {
  const id = `toolu_legacy${counter++}`;
  return { type: 'tool_use', id, name: 'computer', toolset_name: undefined, input: { action, ...fields } };
}

/** A batch of the older tool; its results must be ones the API accepts for the client tool `computer`. */
const run = (d: TestDesktop, toolUses: ToolUse[], batchId?: string) =>
  runBatch(d, toolUses, batchId, { clientTools: ['computer'] });

/** `hello` asking for the older tools' `tools[]` entries. */
async function legacyHello(client: TestClient): Promise<Welcome> {
  client.send({ type: 'hello', legacy_tools: true });
  return client.next((m): m is Welcome => m.type === 'welcome');
}

function assertNoToolsetName(result: BatchResult, toolUses: ToolUse[]): void {
  toolUses.forEach((tu, i) => {
    if (tu.toolset_name) return;
    assert.ok(!('toolset_name' in result.tool_results[i]!), `result ${i} carries no toolset_name`);
  });
}

describe('the mapping of every action (no desktop)', () => {
  test('each action maps to the toolset member of its name, with the input converted', () => {
    const cases: [Record<string, unknown>, { member: string; input: Record<string, unknown> }[]][] = [
      [{ action: 'key', text: 'ctrl+s' }, [{ member: 'key', input: { text: 'ctrl+s' } }]],
      [
        { action: 'hold_key', text: 'shift', duration: 1.5 },
        [{ member: 'hold_key', input: { text: 'shift', duration: 1.5 } }],
      ],
      [{ action: 'type', text: 'hi' }, [{ member: 'type', input: { text: 'hi' } }]],
      [{ action: 'cursor_position' }, [{ member: 'cursor_position', input: {} }]],
      [{ action: 'mouse_move', coordinate: [1, 2] }, [{ member: 'mouse_move', input: { coordinate: [1, 2] } }]],
      [{ action: 'left_mouse_down' }, [{ member: 'left_mouse_down', input: {} }]],
      [
        { action: 'left_mouse_up', coordinate: [3, 4] },
        [
          { member: 'mouse_move', input: { coordinate: [3, 4] } },
          { member: 'left_mouse_up', input: {} },
        ],
      ],
      [
        { action: 'left_click', coordinate: [5, 6], text: 'shift' },
        [{ member: 'left_click', input: { coordinate: [5, 6], text: 'shift' } }],
      ],
      [{ action: 'right_click', key: 'ctrl' }, [{ member: 'right_click', input: { text: 'ctrl' } }]],
      [{ action: 'middle_click', coordinate: null }, [{ member: 'middle_click', input: {} }]],
      [{ action: 'double_click', coordinate: [7, 8] }, [{ member: 'double_click', input: { coordinate: [7, 8] } }]],
      [{ action: 'triple_click', text: 'alt', key: 'ctrl' }, [{ member: 'triple_click', input: { text: 'alt' } }]],
      [
        { action: 'left_click_drag', start_coordinate: [1, 1], coordinate: [9, 9] },
        [{ member: 'left_click_drag', input: { start_coordinate: [1, 1], coordinate: [9, 9] } }],
      ],
      [
        { action: 'scroll', scroll_direction: 'up', scroll_amount: 3, coordinate: [2, 2], text: 'shift' },
        [
          {
            member: 'scroll',
            input: { scroll_direction: 'up', scroll_amount: 3, coordinate: [2, 2], text: 'shift' },
          },
        ],
      ],
      [{ action: 'wait', duration: 2 }, [{ member: 'wait', input: { duration: 2 } }]],
      [{ action: 'screenshot' }, [{ member: 'screenshot', input: {} }]],
      [{ action: 'zoom', region: [0, 0, 10, 10] }, [{ member: 'zoom', input: { region: [0, 0, 10, 10] } }]],
    ];
    const seen = new Set<string>();
    for (const [input, expected] of cases) {
      assert.deepEqual(toMemberCalls(LegacyInputSchema.parse(input)), expected, JSON.stringify(input));
      seen.add(input.action as string);
    }
    assert.deepEqual([...seen].sort(), [...LEGACY_ACTIONS].sort(), 'every action is covered');
    const members: readonly string[] = COMPUTER_MEMBERS.map((m) => m.name);
    for (const a of LEGACY_ACTIONS) assert.ok(members.includes(a), `${a} is a computer toolset member`);
  });

  test('the texts for skipped and cancelled calls are the SDK fallback texts, word for word', () => {
    assert.equal(FALLBACK_NOT_EXECUTED_TEXT, 'Not executed: an earlier action in this turn failed.');
    assert.equal(FALLBACK_CANCELLED_TEXT, 'Not completed: this turn was cancelled before this action finished.');
  });
});

describe('older computer tools on 1280x800', () => {
  let d: TestDesktop;
  before(async () => (d = await startTestDesktop({ width: 1280, height: 800 })));
  after(() => d?.close());
  beforeEach(() => d.reset());

  test('welcome carries the tools[] entries when hello asks, sized in screenshot pixels', async () => {
    assert.equal((await d.client.hello()).legacy_tools, undefined, 'a v1 welcome, unless asked');
    const w = await legacyHello(d.client);
    assert.ok(w.legacy_tools, 'legacy_tools is in welcome');
    // The SDK's own types accept the entries as they are.
    const older: BetaToolComputerUse20250124 = w.legacy_tools.computer_20250124;
    const newer: BetaToolComputerUse20251124 = w.legacy_tools.computer_20251124;
    assert.deepEqual(older, {
      type: 'computer_20250124',
      name: 'computer',
      display_width_px: 1280,
      display_height_px: 800,
    });
    assert.deepEqual(newer, {
      type: 'computer_20251124',
      name: 'computer',
      display_width_px: 1280,
      display_height_px: 800,
      enable_zoom: true,
    });
  });

  test('mouse_move then cursor_position: the legacy text format, no toolset_name', async () => {
    const uses = [legacy('mouse_move', { coordinate: [700, 650] }), legacy('cursor_position')];
    const { result, events } = await run(d, uses);
    assert.deepEqual(texts(result), ['Moved the mouse.', 'X=700,Y=650']);
    assertNoToolsetName(result, uses);
    assert.deepEqual(
      events.map((e) => [e.phase, e.toolset_name, e.name]),
      [
        ['started', null, 'computer'],
        ['succeeded', null, 'computer'],
        ['started', null, 'computer'],
        ['succeeded', null, 'computer'],
      ],
    );
    assert.deepEqual(result.halted, {});
    await d.waitFor('a move to 700,650', (ev) =>
      ev.some((e) => e.type === 'mousemove' && e.clientX === 700 && e.clientY === 650),
    );
  });

  test('clicks land with the right buttons; modifiers in text (or key) are held for that click only', async () => {
    const uses = [
      legacy('left_click', { coordinate: [300, 600], text: 'shift' }),
      legacy('left_click', { coordinate: [310, 600], key: 'ctrl' }),
      legacy('right_click', { coordinate: [320, 610] }),
      legacy('middle_click', { coordinate: [330, 620] }),
      legacy('left_click'),
    ];
    const { result } = await run(d, uses);
    assert.deepEqual(texts(result), ['Clicked.', 'Clicked.', 'Right-clicked.', 'Middle-clicked.', 'Clicked.']);
    assertNoToolsetName(result, uses);
    const downs = mouse(await d.drain(), 'mousedown');
    assert.deepEqual(
      downs.map((e) => [e.button, e.clientX, e.clientY, e.shiftKey, e.ctrlKey]),
      [
        [0, 300, 600, true, false],
        [0, 310, 600, false, true],
        [2, 320, 610, false, false],
        [1, 330, 620, false, false],
        [0, 330, 620, false, false],
      ],
    );
  });

  test('double_click and triple_click have the right click counts', async () => {
    await run(d, [legacy('double_click', { coordinate: [500, 700] })]);
    assert.deepEqual(
      mouse(await d.drain(), 'click').map((e) => e.detail),
      [1, 2],
    );
    await d.reset();
    // Far from the last click, so it starts a new click sequence however soon it comes.
    await run(d, [legacy('triple_click', { coordinate: [900, 650] })]);
    assert.deepEqual(
      mouse(await d.drain(), 'click').map((e) => e.detail),
      [1, 2, 3],
    );
  });

  test('type, key and hold_key reach the focused field', async () => {
    const uses = [
      legacy('left_click', { coordinate: [200, 200] }),
      legacy('type', { text: 'abc def' }),
      legacy('key', { text: 'BackSpace' }),
      legacy('key', { text: 'Return' }),
      legacy('hold_key', { text: 'shift', duration: 0.2 }),
      legacy('type', { text: 'x' }),
    ];
    const { result } = await run(d, uses);
    assert.deepEqual(texts(result), [
      'Clicked.',
      'Typed.',
      'Pressed BackSpace.',
      'Pressed Return.',
      'Held shift for 0.2s.',
      'Typed.',
    ]);
    const ev = await d.drain();
    assert.equal(await d.page.inputValue('#t'), 'abc de\nx');
    const shift = ev.filter((e): e is RecordedKey => (e.type === 'keydown' || e.type === 'keyup') && e.key === 'Shift');
    assert.deepEqual(
      shift.filter((e) => !e.repeat).map((e) => e.type),
      ['keydown', 'keyup'],
    );
  });

  test('scroll at a coordinate, with a modifier held for that scroll', async () => {
    const uses = [
      legacy('scroll', { coordinate: [960, 200], scroll_direction: 'down', scroll_amount: 2, text: 'shift' }),
    ];
    const { result } = await run(d, uses);
    assert.deepEqual(texts(result), ['Scrolled down.']);
    const wheels = await drainWheels(d);
    assert.ok(wheels.length > 0, 'a wheel event arrived');
    for (const w of wheels) {
      assert.deepEqual([w.clientX, w.clientY, w.shiftKey], [960, 200, true]);
      // Shift+wheel scrolls sideways in Chromium; either way it moved, and the right way.
      assert.ok(w.deltaY > 0 || w.deltaX > 0, `down: ${w.deltaX},${w.deltaY}`);
    }
  });

  test('left_click_drag, and left_mouse_down / up with a coordinate', async () => {
    const drag = [legacy('left_click_drag', { start_coordinate: [100, 500], coordinate: [600, 700] })];
    assert.deepEqual(texts((await run(d, drag)).result), ['Dragged.']);
    let ev = await d.drain();
    assert.deepEqual(mousePoints(ev, 'mousedown'), [[100, 500]]);
    assert.deepEqual(mousePoints(ev, 'mouseup'), [[600, 700]]);
    await d.reset();
    const { result } = await run(d, [
      legacy('left_mouse_down', { coordinate: [150, 450] }),
      legacy('left_mouse_up', { coordinate: [400, 550] }),
    ]);
    assert.deepEqual(texts(result), ['Left mouse button pressed.', 'Left mouse button released.']);
    ev = await d.drain();
    assert.deepEqual(mousePoints(ev, 'mousedown'), [[150, 450]]);
    assert.deepEqual(mousePoints(ev, 'mouseup'), [[400, 550]]);
  });

  test('wait acknowledges in text; no screenshot is added to any action', async () => {
    const uses = [legacy('wait', { duration: 0.1 }), legacy('mouse_move', { coordinate: [10, 10] })];
    const { result } = await run(d, uses);
    assert.deepEqual(texts(result), ['Waited 0.1s.', 'Moved the mouse.']);
    for (const r of result.tool_results) assert.deepEqual(r.content.length, 1);
    assert.deepEqual(result.screenshots, []);
  });

  test('screenshot returns one image of the screenshot size, and is stored', async () => {
    const uses = [legacy('screenshot')];
    const { result } = await run(d, uses, 'legacy-shot');
    const r = result.tool_results[0]!;
    assert.equal(r.is_error, undefined);
    assert.equal(r.content.length, 1);
    const block = r.content[0]!;
    assert.ok(block.type === 'image');
    assert.equal(block.source.media_type, 'image/png');
    assert.deepEqual(imageSize(Buffer.from(block.source.data, 'base64')), { width: 1280, height: 800 });
    assertNoToolsetName(result, uses);
    assert.equal(result.screenshots.length, 1);
    assert.equal(result.screenshots[0]!.tool_use_id, uses[0]!.id);
  });

  test('zoom (computer_20251124) returns the region fitted to the screenshot size', async () => {
    const { result } = await run(d, [legacy('zoom', { region: [100, 500, 420, 700] })]);
    const block = firstImage(result);
    assert.deepEqual(imageSize(Buffer.from(block.source.data, 'base64')), { width: 1280, height: 800 });
  });

  test('a bad action fails with a clear text; the later legacy calls are not executed', async () => {
    const uses = [
      legacy('teleport', { coordinate: [10, 10] }),
      legacy('left_click', { coordinate: [640, 600] }),
      legacy('screenshot'),
    ];
    const { result, events } = await run(d, uses);
    assert.deepEqual(texts(result), [
      "invalid input for the computer tool: action: 'teleport' is not an action of this tool; the actions are: " +
        `${LEGACY_ACTIONS.join(', ')}.`,
      FALLBACK_NOT_EXECUTED_TEXT,
      FALLBACK_NOT_EXECUTED_TEXT,
    ]);
    assert.ok(result.tool_results.every((r) => r.is_error === true));
    assertNoToolsetName(result, uses);
    assert.deepEqual(result.halted, { [LEGACY_COMPUTER_FAMILY]: 0 });
    assert.equal(result.failures.length, 1);
    assert.equal(result.failures[0]!.error.type, 'ToolInputError');
    assert.deepEqual(
      events.map((e) => e.phase),
      ['started', 'failed', 'not_executed', 'not_executed'],
    );
    assert.equal(mouse(await d.drain(), 'mousedown').length, 0, 'nothing was clicked');
  });

  test('bad fields name the action and the field; a coordinate outside the screenshot changes nothing', async () => {
    const cases: [ToolUse, string][] = [
      [legacy('type', {}), "invalid input for the computer tool's 'type' action: text: required (string)"],
      [
        legacy('scroll', { scroll_direction: 'down', scroll_amount: 0 }),
        "invalid input for the computer tool's 'scroll' action: scroll_amount: Too small: expected number to be >=1",
      ],
      [
        {
          type: 'tool_use',
          id: 'toolu_legacy_noaction',
          name: 'computer',
          toolset_name: undefined,
          input: { coordinate: [1, 1] },
        },
        // Not a call of this tool (no action): the computer toolset's malformed call, as the SDK runner answers it.
        "Error: the 'computer' toolset could not run this call: the call has no 'actions' list; nothing in the batch was executed",
      ],
      [
        legacy('left_click', { coordinate: [1280, 10] }),
        'coordinate [1280, 10] is outside the screenshot: x must be 0–1279 and y 0–799.',
      ],
      [
        legacy('left_mouse_down', { coordinate: [10, 800] }),
        'coordinate [10, 800] is outside the screenshot: x must be 0–1279 and y 0–799.',
      ],
    ];
    for (const [use, text] of cases) {
      const { result } = await run(d, [use]);
      assert.equal(result.tool_results[0]!.is_error, true);
      assert.equal(texts(result)[0], text);
    }
    const ev = await d.drain();
    assert.equal(mouse(ev, 'mousedown').length, 0, 'nothing was pressed');
  });

  test('a mixed batch: the legacy tool and the toolset halt separately; plain calls keep their refusal', async () => {
    const uses: ToolUse[] = [
      legacy('mouse_move', { coordinate: [100, 450] }),
      computerUse('left_click', { coordinate: [5000, 10] }), // fails: halts the toolset only
      legacy('left_click', { coordinate: [110, 450] }), // still runs
      computerUse('left_click', { coordinate: [120, 450] }), // not executed (toolset text)
      { type: 'tool_use', id: 'toolu_plain_bash', name: 'bash', toolset_name: undefined, input: { command: 'ls' } },
      legacy('key', { text: 'no_such_key_name' }), // fails: halts the legacy tool
      legacy('left_click', { coordinate: [130, 450] }), // not executed (legacy text)
      computerUse('cursor_position'), // not executed (toolset text)
    ];
    const { result, events } = await run(d, uses);
    const t = texts(result);
    assert.equal(t[0], 'Moved the mouse.');
    assert.match(t[1]!, /^coordinate \[5000, 10\] is outside the screenshot/);
    assert.equal(t[2], 'Clicked.');
    assert.equal(t[3], COMPUTER_NOT_EXECUTED);
    assert.equal(t[4], "Error: Tool 'bash' not found");
    assert.equal(result.tool_results[5]!.is_error, true);
    assert.equal(t[6], FALLBACK_NOT_EXECUTED_TEXT);
    assert.equal(t[7], COMPUTER_NOT_EXECUTED);
    assert.deepEqual(
      result.tool_results.map((r) => r.is_error === true),
      [false, true, false, true, true, true, true, true],
    );
    assert.deepEqual(
      result.tool_results.map((r) => r.toolset_name),
      [undefined, 'computer', undefined, 'computer', undefined, undefined, undefined, 'computer'],
    );
    assert.deepEqual(result.halted, { computer: 1, [LEGACY_COMPUTER_FAMILY]: 5 });
    assert.deepEqual(
      events.filter((e: ToolEvent) => e.phase !== 'started').map((e) => [e.index, e.phase]),
      [
        [0, 'succeeded'],
        [1, 'failed'],
        [2, 'succeeded'],
        [3, 'not_executed'],
        [4, 'failed'],
        [5, 'failed'],
        [6, 'not_executed'],
        [7, 'not_executed'],
      ],
    );
    assert.deepEqual(mousePoints(await d.drain(), 'mousedown'), [[110, 450]], 'only the legacy click ran');
  });

  test('cancel answers the running and the later legacy calls with the cancelled text', async () => {
    const uses = [legacy('wait', { duration: 60 }), legacy('left_click', { coordinate: [640, 600] })];
    d.client.send({ type: 'batch', batch_id: 'legacy-cancel', tool_uses: uses });
    await d.client.next(
      (m): m is ToolEvent => m.type === 'tool_event' && m.batch_id === 'legacy-cancel' && m.phase === 'started',
    );
    d.client.send({ type: 'cancel', batch_id: 'legacy-cancel' });
    const { result } = await d.client.batch('legacy-cancel', uses);
    assertApiValid(uses, result, { clientTools: ['computer'] });
    assert.equal(result.cancelled, true);
    assert.deepEqual(texts(result), [FALLBACK_CANCELLED_TEXT, FALLBACK_CANCELLED_TEXT]);
    assert.deepEqual(result.failures, []);
    assert.equal(mouse(await d.drain(), 'mousedown').length, 0);
  });

  test('a member the operator disabled: the action is refused and zoom is not offered', async () => {
    const other = await startTestDaemon({ display: d.display.display, disabledMembers: ['zoom'] });
    try {
      const c = await other.connect();
      const w = await legacyHello(c);
      assert.deepEqual(w.legacy_tools?.computer_20251124, {
        type: 'computer_20251124',
        name: 'computer',
        display_width_px: 1280,
        display_height_px: 800,
      });
      const uses = [legacy('zoom', { region: [0, 0, 10, 10] }), legacy('screenshot')];
      const { result } = await c.batch('disabled', uses);
      assertApiValid(uses, result, { clientTools: ['computer'] });
      assert.deepEqual(texts(result), [
        "The 'zoom' action is not permitted by this application's permissions and cannot be used in this session.",
        FALLBACK_NOT_EXECUTED_TEXT,
      ]);
      assert.equal(result.failures[0]!.error.type, 'ToolRefusedError');
    } finally {
      await other.close();
    }
  });
});

describe('older computer tools on 2560x1440 (screenshots scaled to 2000x1125)', () => {
  let d: TestDesktop;
  before(async () => (d = await startTestDesktop({ width: 2560, height: 1440 })));
  after(() => d?.close());
  beforeEach(() => d.reset());

  test('the entry declares the screenshot size, and coordinates round-trip in it', async () => {
    const w = await legacyHello(d.client);
    assert.equal(w.legacy_tools?.computer_20250124.display_width_px, 2000);
    assert.equal(w.legacy_tools?.computer_20250124.display_height_px, 1125);
    const { result } = await run(d, [
      legacy('mouse_move', { coordinate: [1234, 567] }),
      legacy('cursor_position'),
      legacy('screenshot'),
    ]);
    assert.equal(texts(result)[1], 'X=1234,Y=567');
    const shot = result.tool_results[2]!.content[0]!;
    assert.ok(shot.type === 'image');
    assert.deepEqual(imageSize(Buffer.from(shot.source.data, 'base64')), { width: 2000, height: 1125 });
  });
});
