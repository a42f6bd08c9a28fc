/**
 * What crosses the IPC channel between WorkerDesktopDriver (worker-driver.ts)
 * and the desktop worker (worker.ts), written once for both sides.
 *
 * `WorkerOps` is the table of operations: name → arguments → result. The
 * driver's `call` is generic over it, so a call with the wrong arguments or a
 * misread result does not compile; the worker implements it as an exhaustive
 * table (worker/operations.ts), so an operation left out does not compile
 * either. The worker still checks every argument at run time, against the
 * limits in driver.ts: it is another process, and a message is only bytes.
 *
 * Messages (serialization 'advanced': Buffers cross as bytes):
 * - parent → child: `{ id, op, args }`, one op at a time; `{ op: 'cancel', id }`
 *   ends op `id` early (a hold, a long typing run, a drag); `{ op: 'shutdown', id }`
 *   releases everything, answers and exits.
 * - child → parent: `{ type: 'ready' }` once listening, then per op
 *   `{ id, ok: true, result }` or `{ id, ok: false, error: { name, message } }`,
 *   and `{ type: 'log', level, msg, fields }` at any time.
 */
import type { CaptureOptions, DriverKey, MouseButton, ScrollDirection } from './driver.ts';
import type { Point, Size } from '../base/geometry.ts';
import type { CapturedImage, Moving } from '../base/image.ts';

/**
 * The worker's environment variable naming the file an Xvfb started with
 * `-fbdir` keeps its screen in (src/desktop-driver/xvfb.ts `VirtualDisplay.framebuffer`);
 * empty or unset: screenshots grab through libnut.
 */
export const FRAMEBUFFER_ENV = 'DESKBATCH_FRAMEBUFFER';

/** A captured image as it arrives: with 'advanced' serialization a Buffer comes back as a plain Uint8Array. */
export type WireImage = Omit<CapturedImage, 'data'> & { data: Uint8Array };

/** The operations, by name: their arguments and their result (`void` answers `null`). */
export interface WorkerOps {
  displaySize: { args: Record<string, never>; result: Size };
  cursorPosition: { args: Record<string, never>; result: Point };
  moveMouse: { args: { to: Point }; result: void };
  /** `at`: move there first, in the same op (one round trip per click instead of two). */
  click: { args: { button: MouseButton; count: number; modifiers: DriverKey[]; at?: Point }; result: void };
  mouseDown: { args: { button: MouseButton }; result: void };
  mouseUp: { args: { button: MouseButton }; result: void };
  drag: { args: { from: Point; to: Point; modifiers: DriverKey[] }; result: void };
  scroll: { args: { direction: ScrollDirection; amount: number; modifiers: DriverKey[] }; result: void };
  pressKeys: { args: { chord: DriverKey[]; repeat: number }; result: void };
  holdKeys: { args: { chord: DriverKey[]; durationMs: number }; result: void };
  typeText: { args: { text: string }; result: void };
  /**
   * `inputAgoMs`: how long before the op was sent the daemon's own pointer input
   * ended (worker-driver.ts), for the settle step, beside the worker's own input;
   * `drawnAgoMs`: how long before it the app under the pointer said it drew its
   * answer to that input (SettleOptions.drawnMs); `moving`: it said animations
   * were running, and when, after its word, they start and end (Drawn).
   */
  capture: {
    args: { options: CaptureOptions; inputAgoMs?: number; drawnAgoMs?: number; moving?: Moving };
    result: WireImage;
  };
  releaseAll: { args: Record<string, never>; result: void };
}

export type OpName = keyof WorkerOps;
export type OpArgs<N extends OpName> = WorkerOps[N]['args'];
export type OpResult<N extends OpName> = WorkerOps[N]['result'];

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

/** One operation to run. */
export interface OpRequest<N extends OpName = OpName> {
  id: number;
  op: N;
  args: OpArgs<N>;
}
/** Ends op `id` early, or (shutdown) ends the worker, answering `id` first. */
export interface ControlRequest {
  op: 'cancel' | 'shutdown';
  id: number;
}
export type ParentMessage = OpRequest | ControlRequest;

/** How an error crosses: its class name (ToolInputError and CancelledError are rebuilt as such) and message. */
export interface WireError {
  name: string;
  message: string;
}
export type OpReply = { id: number; ok: true; result: unknown } | { id: number; ok: false; error: WireError };
export type WorkerNotice = { type: 'ready' } | { type: 'log'; level: LogLevel; msg: string; fields?: object };
export type ChildMessage = OpReply | WorkerNotice;
