/**
 * The shell-out path of the reference computer-use demo, on the same display:
 * one program run per action.
 *
 * - click: `xdotool mousemove X Y click 1`;
 * - screenshot: `scrot -o FILE`, then `convert FILE -resize WxH! OUT`, then
 *   read OUT and base64 it.
 *
 * Each program is run with child_process.execFile (an argument array, never
 * a shell string) with DISPLAY set. The demo runs its commands through a
 * shell, which costs one more process start each: these figures are, if
 * anything, a little faster than the demo itself.
 *
 * The programs are taken from /usr/bin, where Debian's packages put them
 * (scripts/bench-packages.txt): an earlier directory on PATH may hold a
 * wrapper that is not the program measured. A missing program makes its
 * figures "n/a (install with npm run setup:bench)" instead of a crash.
 */
import { execFile } from 'node:child_process';
import { access, constants, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
export const INSTALL_HINT = 'n/a (install with npm run setup:bench)';
const TOOLS = { xdotool: '/usr/bin/xdotool', scrot: '/usr/bin/scrot', convert: '/usr/bin/convert' } as const;
type Tool = keyof typeof TOOLS;

async function missing(names: readonly Tool[]): Promise<string[]> {
  const absent: string[] = [];
  for (const n of names) {
    const ok = await access(TOOLS[n], constants.X_OK).then(
      () => true,
      () => false,
    );
    if (!ok) absent.push(n);
  }
  return absent;
}

export class ShellOut {
  private constructor(
    private readonly env: NodeJS.ProcessEnv,
    private readonly dir: string,
    /** Why the click path cannot run here, or undefined. */
    readonly clickUnavailable: string | undefined,
    /** Why the screenshot path cannot run here, or undefined. */
    readonly screenshotUnavailable: string | undefined,
  ) {}

  static async open(display: string): Promise<ShellOut> {
    const why = (absent: string[]): string | undefined =>
      absent.length ? `${INSTALL_HINT}; missing ${absent.join(', ')}` : undefined;
    const dir = await mkdtemp(join(tmpdir(), 'deskbatch-bench-shell-'));
    return new ShellOut(
      { ...process.env, DISPLAY: display },
      dir,
      why(await missing(['xdotool'])),
      why(await missing(['scrot', 'convert'])),
    );
  }

  /** `xdotool mousemove X Y click [extra...] 1`. */
  async click(x: number, y: number, extra: readonly string[] = []): Promise<void> {
    await run(TOOLS.xdotool, ['mousemove', String(x), String(y), 'click', ...extra, '1'], { env: this.env });
  }

  /** scrot, convert -resize to the output size, read, base64; returns the image's bytes. */
  async screenshot(output: { width: number; height: number }): Promise<number> {
    const shot = join(this.dir, 'shot.png');
    const scaled = join(this.dir, 'scaled.png');
    await run(TOOLS.scrot, ['-o', shot], { env: this.env });
    await run(TOOLS.convert, [shot, '-resize', `${output.width}x${output.height}!`, scaled], { env: this.env });
    const data = await readFile(scaled);
    if (data.toString('base64').length === 0) throw new Error('empty screenshot');
    return data.length;
  }

  close(): Promise<void> {
    return rm(this.dir, { recursive: true, force: true });
  }
}
