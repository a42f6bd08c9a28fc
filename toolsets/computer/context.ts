/**
 * The computer toolset's per-call context and the input pieces its members
 * share: coordinates in screenshot pixels, modifier chords, and the mapping to
 * display pixels with the bounds check (docs/TOOLSETS.md B3: never clamp).
 */
import { z } from 'zod';
import type { DesktopDriver } from '../../src/desktop-driver/driver.ts';
import type { Point } from '../../src/base/geometry.ts';
import { parseModifierKeys } from '../../src/desktop-driver/keys.ts';
import { DisplayUnavailableError, ToolInputError } from '../../src/base/errors.ts';
import { fitSize, isInside, toDisplay, type Geometry } from '../../src/base/geometry.ts';
import type { CallContext, Member, ScreenshotSettings } from '../../src/toolset-api/types.ts';

export interface ComputerDeps {
  screenshots: ScreenshotSettings;
  /** Longest `type` text accepted, in UTF-16 code units. */
  maxTypeTextLength: number;
}

export interface ComputerContext extends CallContext, ComputerDeps {
  /** The session's desktop's driver. */
  driver: DesktopDriver;
  /** The display and screenshot sizes now. */
  geometry(): Promise<Geometry>;
  /** Maps a model coordinate to display pixels, refusing one outside the screenshot. */
  toDisplayPoint(coordinate: readonly number[], field: string): Promise<Point>;
  /** Parses `text` on clicks and scroll: modifiers held for that action only. */
  modifiers(text: string | null | undefined): string[];
}

export function createComputerContext(deps: ComputerDeps, call: CallContext): ComputerContext {
  if (!call.desktop) throw new DisplayUnavailableError('this session has no desktop');
  const driver = call.desktop.driver;
  const geometry = async (): Promise<Geometry> => {
    const display = await driver.displaySize(call.signal);
    return { display, screenshot: fitSize(display, deps.screenshots.limits) };
  };
  return {
    ...call,
    ...deps,
    driver,
    geometry,
    async toDisplayPoint(coordinate, field) {
      const g = await geometry();
      const [x, y] = coordinate as [number, number];
      if (!isInside({ x, y }, g.screenshot)) {
        throw new ToolInputError(
          `${field} [${x}, ${y}] is outside the screenshot: x must be 0–${g.screenshot.width - 1} and y 0–${g.screenshot.height - 1}.`,
        );
      }
      return toDisplay({ x, y }, g);
    },
    modifiers: (text) => (text ? parseModifierKeys(text) : []),
  };
}

/** Type helper: a member literal checked against the computer context, keeping its literal name. */
export function computerMember<const N extends string, S extends z.ZodType>(
  member: Member<S, ComputerContext> & { name: N },
): Member<S, ComputerContext> & { name: N } {
  return member;
}

/** `[x, y]` in screenshot pixels. The API types it `Array<number>`; we require two finite numbers. */
export const coordinate = (what: string) =>
  z
    .array(z.number())
    .length(2, 'must be [x, y]: two numbers, in screenshot pixels')
    .describe(`${what}: [x, y] in screenshot pixels, origin at the top-left.`);

/** Modifier keys held during this action only. */
export const modifierText = z
  .string()
  .max(100)
  .nullish()
  .describe('Modifier keys to hold during this action only: shift, ctrl, alt, super, or a chord such as ctrl+shift.');
