/**
 * The worker's operations: one entry per name of WorkerOps
 * (worker-protocol.ts), each with the check of its arguments as they arrive
 * and what it does. The table is a mapped type over the protocol, so an
 * operation missing here, or one whose arguments or result differ from the
 * protocol's, does not compile.
 *
 * The checks use the limits of driver.ts, the same constants the computer
 * toolset's schemas use: a call the toolset accepts is never refused here.
 */
import {
  CAPTURE_SIDE_MAX,
  CLICK_COUNT_MAX,
  HOLD_MAX_MS,
  COMPUTER_KEY_REPEAT_MAX,
  COMPUTER_SCROLL_AMOUNT_MAX,
  integerIn,
  pixelPoint,
  type CaptureOptions,
  type DriverKey,
  type MouseButton,
  type ScrollDirection,
} from '../driver.ts';
import type { Point, Rect } from '../../base/geometry.ts';
import type { ImageFormat, Moving, SettleOptions } from '../../base/image.ts';
import { WHEEL_BUTTONS } from '../pointer.ts';
import type { OpArgs, OpName, OpResult, WorkerOps } from '../worker-protocol.ts';
import { capture } from './capture.ts';
import { WorkerInputError, sleep, throwIfCancelled, type OpContext } from './context.ts';
import { devices, displaySize, pointerOf, releaseAll, type Devices } from './devices.ts';
import { holdKeys, pressKeys, typeText, withModifiers } from './typing.ts';

const DRAG_STEP_MS = 8;

interface Operation<N extends OpName> {
  /** Checks the arguments as they arrived: another process sent them. Throws WorkerInputError. */
  parse(args: Record<string, unknown>): OpArgs<N>;
  /** Pointer or keyboard input: a capture soon after it waits for the screen to settle. */
  input?: true;
  run(d: Devices, args: OpArgs<N>, ctx: OpContext): Promise<OpResult<N>>;
}

type Operations = { [N in OpName]: Operation<N> };

/** When the last input op (pointer or keyboard) ended, for the settle step of a capture. */
let lastInputAt = -Infinity;

const OPERATIONS: Operations = {
  displaySize: {
    parse: () => ({}),
    run: (d) => displaySize(d),
  },
  cursorPosition: {
    parse: () => ({}),
    run: (d) => pointerOf(d).position(),
  },
  moveMouse: {
    parse: (a) => ({ to: point(a.to, 'to') }),
    input: true,
    run: (d, a) => pointerOf(d).move(a.to),
  },
  click: {
    parse: (a) => ({
      button: button(a.button),
      count: intIn('count', a.count, 1, CLICK_COUNT_MAX),
      modifiers: keyNames('modifiers', a.modifiers ?? []),
      ...(a.at !== undefined ? { at: point(a.at, 'at') } : {}),
    }),
    input: true,
    run: click,
  },
  mouseDown: {
    parse: (a) => ({ button: button(a.button) }),
    input: true,
    run: (d, a) => pointerOf(d).button(a.button, true),
  },
  mouseUp: {
    parse: (a) => ({ button: button(a.button) }),
    input: true,
    run: (d, a) => pointerOf(d).button(a.button, false),
  },
  drag: {
    parse: (a) => ({
      from: point(a.from, 'from'),
      to: point(a.to, 'to'),
      modifiers: keyNames('modifiers', a.modifiers ?? []),
    }),
    input: true,
    run: drag,
  },
  scroll: {
    parse: (a) => ({
      amount: intIn('amount', a.amount, 1, COMPUTER_SCROLL_AMOUNT_MAX),
      direction: scrollDirection(a.direction),
      modifiers: keyNames('modifiers', a.modifiers ?? []),
    }),
    input: true,
    run: (d, a, ctx) => {
      const pointer = pointerOf(d);
      // X wheel buttons 4-7; 'right' (button 7) gives deltaX > 0 in Chromium.
      return withModifiers(d, a.modifiers, ctx, () => pointer.wheel(a.direction, a.amount));
    },
  },
  pressKeys: {
    parse: (a) => ({
      repeat: intIn('repeat', a.repeat, 1, COMPUTER_KEY_REPEAT_MAX),
      chord: chord(a.chord, 'no key to press'),
    }),
    input: true,
    run: (d, a, ctx) => pressKeys(d, a.chord, a.repeat, ctx),
  },
  holdKeys: {
    parse: (a) => ({
      // A number, not only whole ms: hold_key takes seconds with fractions.
      durationMs: numberIn('durationMs', a.durationMs, 0, HOLD_MAX_MS),
      chord: chord(a.chord, 'no key to hold'),
    }),
    input: true,
    run: (d, a, ctx) => holdKeys(d, a.chord, a.durationMs, ctx),
  },
  typeText: {
    parse: (a) => {
      if (typeof a.text !== 'string') throw new WorkerInputError('text must be a string');
      return { text: a.text };
    },
    input: true,
    run: (d, a, ctx) => typeText(d, a.text, ctx),
  },
  capture: {
    parse: (a) => ({
      options: captureOptions(a.options),
      ...(a.inputAgoMs !== undefined ? { inputAgoMs: numberIn('inputAgoMs', a.inputAgoMs, 0, Number.MAX_VALUE) } : {}),
      ...(a.drawnAgoMs !== undefined ? { drawnAgoMs: numberIn('drawnAgoMs', a.drawnAgoMs, 0, Number.MAX_VALUE) } : {}),
      ...(a.moving !== undefined ? { moving: movingIn(a.moving) } : {}),
    }),
    // The later of our own last input and the daemon's (its pointer input: worker-driver.ts); the app's
    // word that it drew counts only for the daemon's input, and only when ours was not later.
    run: (d, a, ctx) => {
      const now = performance.now();
      const theirs = a.inputAgoMs === undefined ? -Infinity : now - a.inputAgoMs;
      const drawn =
        a.drawnAgoMs !== undefined && theirs >= lastInputAt
          ? { at: now - a.drawnAgoMs, ...(a.moving ? { moving: a.moving } : {}) }
          : undefined;
      return capture(d, a.options, Math.max(lastInputAt, theirs), ctx, drawn);
    },
  },
  releaseAll: {
    parse: () => ({}),
    run: (d) => releaseAll(d),
  },
};

export function isOpName(op: unknown): op is OpName {
  return typeof op === 'string' && Object.hasOwn(OPERATIONS, op);
}

/** Runs operation `name` with the arguments as they arrived; bad ones throw WorkerInputError. */
export async function runOperation<N extends OpName>(name: N, args: unknown, ctx: OpContext): Promise<OpResult<N>> {
  const op: Operation<N> = OPERATIONS[name];
  try {
    const d = await devices();
    const raw = args ?? {};
    if (!isRecord(raw)) throw new WorkerInputError(`${name}: the arguments must be an object`);
    return await op.run(d, op.parse(raw), ctx);
  } finally {
    if (op.input) lastInputAt = performance.now();
  }
}

// ---------------------------------------------------------------------------
// Pointer operations

async function click(d: Devices, args: WorkerOps['click']['args'], ctx: OpContext): Promise<void> {
  const pointer = pointerOf(d);
  // Moving first in the same op saves a round trip to this process per click.
  if (args.at) await pointer.move(args.at);
  await withModifiers(d, args.modifiers, ctx, () => pointer.click(args.button, args.count));
}

async function drag(d: Devices, args: WorkerOps['drag']['args'], ctx: OpContext): Promise<void> {
  const { from, to } = args;
  await withModifiers(d, args.modifiers, ctx, async () => {
    const pointer = pointerOf(d);
    await pointer.move(from);
    await pointer.button('left', true);
    try {
      // Intermediate motion with small pauses: toolkits start a drag only after
      // seeing the pointer move past a threshold while the button is down.
      const dist = Math.hypot(to.x - from.x, to.y - from.y);
      const steps = Math.min(40, Math.max(5, Math.ceil(dist / 25)));
      await sleep(DRAG_STEP_MS, ctx);
      for (let i = 1; i <= steps; i++) {
        throwIfCancelled(ctx);
        const t = i / steps;
        await pointer.move({
          x: Math.round(from.x + (to.x - from.x) * t),
          y: Math.round(from.y + (to.y - from.y) * t),
        });
        await sleep(DRAG_STEP_MS, ctx);
      }
    } finally {
      await pointer.button('left', false);
    }
  });
}

// ---------------------------------------------------------------------------
// Argument checks

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function button(b: unknown): MouseButton {
  if (b === 'left' || b === 'right' || b === 'middle') return b;
  throw new WorkerInputError(`unknown mouse button ${JSON.stringify(b)}; use left, right or middle`);
}

function scrollDirection(v: unknown): ScrollDirection {
  if (typeof v === 'string' && Object.hasOwn(WHEEL_BUTTONS, v)) return v as ScrollDirection;
  throw new WorkerInputError(`unknown scroll direction ${JSON.stringify(v)}`);
}

/** The worker's refusal of an argument: the parent rebuilds it as ToolInputError. */
const badInput = (message: string): Error => new WorkerInputError(message);
const intIn = (name: string, v: unknown, min: number, max: number): number => integerIn(name, v, min, max, badInput);

function numberIn(name: string, v: unknown, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) {
    throw new WorkerInputError(`${name} must be a number from ${min} to ${max}, got ${JSON.stringify(v)}`);
  }
  return v;
}

const point = (v: unknown, name: string): Point => pixelPoint(v, name, badInput);

/** A list of DriverKey names; whether libnut knows each is checked when pressing (unknown DriverKey). */
function keyNames(name: string, v: unknown): DriverKey[] {
  if (!Array.isArray(v) || !v.every((k) => typeof k === 'string')) {
    throw new WorkerInputError(`${name} must be a list of key names`);
  }
  return v;
}

function chord(v: unknown, whenEmpty: string): DriverKey[] {
  if (!Array.isArray(v) || v.length === 0) throw new WorkerInputError(whenEmpty);
  return keyNames('chord', v);
}

const FORMATS: readonly ImageFormat[] = ['png', 'jpeg', 'webp'];

function captureOptions(v: unknown): CaptureOptions {
  if (!isRecord(v)) throw new WorkerInputError('capture options must be an object');
  const out = isRecord(v.output) ? v.output : {};
  const output = {
    width: intIn('output.width', out.width, 1, CAPTURE_SIDE_MAX),
    height: intIn('output.height', out.height, 1, CAPTURE_SIDE_MAX),
  };
  const format = FORMATS.find((f) => f === v.format);
  if (!format) throw new WorkerInputError(`unknown image format ${JSON.stringify(v.format)}`);
  // Any number: encoding clamps it to 1–100, and takes 0 (or NaN) as 80.
  if (v.quality !== undefined && typeof v.quality !== 'number') {
    throw new WorkerInputError(`quality must be a number, got ${JSON.stringify(v.quality)}`);
  }
  const quality = v.quality ?? 80;
  const options: CaptureOptions = { output, format, quality };
  // null counts as absent, as it always did: the whole display, no settling.
  if (v.region !== undefined && v.region !== null) options.region = rect(v.region);
  if (v.settle !== undefined && v.settle !== null) options.settle = settleOptions(v.settle);
  return options;
}

/** When the animations the app's word told of start and end, after the word (Drawn). */
function movingIn(v: unknown): Moving {
  const { startsInMs, endsInMs } = isRecord(v) ? v : {};
  return {
    startsInMs: numberIn('moving.startsInMs', startsInMs, 0, 10_000),
    ...(endsInMs !== undefined ? { endsInMs: numberIn('moving.endsInMs', endsInMs, 0, 10_000) } : {}),
  };
}

/** Numbers; whether they are whole and on the display is checked when capturing. */
function rect(v: unknown): Rect {
  const { x, y, width, height } = isRecord(v) ? v : {};
  if (typeof x === 'number' && typeof y === 'number' && typeof width === 'number' && typeof height === 'number') {
    return { x, y, width, height };
  }
  throw new WorkerInputError(`capture region ${JSON.stringify(v)} must have numeric x, y, width and height`);
}

/** Finite and not negative; the configuration bounds them further. */
function settleOptions(v: unknown): SettleOptions {
  const { afterInputMs, quietMs, reactionMs, drawnMs, intervalMs, maxMs } = isRecord(v) ? v : {};
  return {
    afterInputMs: milliseconds('settle.afterInputMs', afterInputMs),
    quietMs: milliseconds('settle.quietMs', quietMs),
    reactionMs: milliseconds('settle.reactionMs', reactionMs),
    drawnMs: milliseconds('settle.drawnMs', drawnMs),
    intervalMs: milliseconds('settle.intervalMs', intervalMs),
    maxMs: milliseconds('settle.maxMs', maxMs),
  };
}

function milliseconds(name: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
    throw new WorkerInputError(`${name} must be a number of milliseconds, 0 or more, got ${JSON.stringify(v)}`);
  }
  return v;
}
