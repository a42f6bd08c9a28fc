/**
 * Virtual displays for tests: each test file gets its own Xvfb (+ openbox),
 * whatever `DISPLAY` the test runner has, so tests never share pointer,
 * focus or clipboard state.
 *
 *   const d = await startTestDisplay({ width: 1024, height: 768 });
 *   after(() => d.stop());
 *
 * or, scoped:
 *
 *   await withDisplay({ width: 1024, height: 768 }, async (d) => { ... });
 */
import { startVirtualDisplay, type VirtualDisplay } from '../../src/desktop/xvfb.ts';

export { displaySize, startVirtualDisplay, type VirtualDisplay } from '../../src/desktop/xvfb.ts';

export interface TestDisplayOptions {
  width: number;
  height: number;
  /** Start openbox; default true. */
  windowManager?: boolean;
}

/** Warnings and errors from the display go to stderr, so a display that dies mid-test shows in the output. */
function testLog(level: 'debug' | 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>): void {
  if (level === 'warn' || level === 'error') console.error(`[display] ${level}: ${msg}`, fields ?? '');
}

export function startTestDisplay(options: TestDisplayOptions): Promise<VirtualDisplay> {
  return startVirtualDisplay({ ...options, log: testLog });
}

/** Runs `fn` with a fresh display, and stops the display afterwards whatever happens. */
export async function withDisplay<T>(
  options: TestDisplayOptions,
  fn: (display: VirtualDisplay) => Promise<T>,
): Promise<T> {
  const display = await startTestDisplay(options);
  try {
    return await fn(display);
  } finally {
    await display.stop();
  }
}
