/**
 * Key names as the model writes them for the browser toolset's `key`,
 * `hold_key` and `modifiers` fields → Playwright `page.keyboard` key strings
 * (docs/TOOLSETS.md C3: a key, a `+` chord, or a space-separated sequence).
 *
 * The model mixes xdotool names ("Return", "BackSpace", "Page_Down") with DOM
 * names ("Enter", "ArrowUp", "PageDown"); both are accepted, case-insensitively.
 * Pure module: no Playwright import, so it is cheap to test.
 */
import { ToolInputError } from '../base/errors.ts';
import { KEYSYM_PUNCTUATION } from '../base/keysym-names.ts';

export type Modifier = 'Alt' | 'Control' | 'Meta' | 'Shift';

const MODIFIERS: ReadonlyMap<string, Modifier> = new Map<string, Modifier>([
  ['ctrl', 'Control'],
  ['control', 'Control'],
  ['shift', 'Shift'],
  ['alt', 'Alt'],
  ['option', 'Alt'],
  ['cmd', 'Meta'],
  ['command', 'Meta'],
  ['meta', 'Meta'],
  ['super', 'Meta'],
  ['win', 'Meta'],
  ['windows', 'Meta'],
]);

/** Lower-cased key names (other than single characters and modifiers) → Playwright key names. */
const NAMES: ReadonlyMap<string, string> = (() => {
  const m = new Map<string, string>();
  const add = (key: string, ...names: string[]): void => {
    for (const n of [key.toLowerCase(), ...names]) m.set(n, key);
  };
  add('Enter', 'return', 'ret', 'kp_enter');
  add('Tab');
  add('Escape', 'esc');
  add('Backspace', 'back_space');
  add('Delete', 'del');
  add('Insert', 'ins');
  add('Home');
  add('End');
  add('PageUp', 'page_up', 'pgup', 'prior');
  add('PageDown', 'page_down', 'pgdn', 'next');
  add('ArrowUp', 'up', 'arrow_up');
  add('ArrowDown', 'down', 'arrow_down');
  add('ArrowLeft', 'left', 'arrow_left');
  add('ArrowRight', 'right', 'arrow_right');
  add('Space', 'spacebar');
  add('CapsLock', 'caps_lock');
  add('NumLock', 'num_lock');
  add('ScrollLock', 'scroll_lock');
  add('Pause');
  add('PrintScreen', 'print', 'print_screen');
  add('ContextMenu', 'menu');
  for (let i = 1; i <= 12; i++) add(`F${i}`);
  // X keysym names of punctuation (the model uses them after xdotool): Playwright takes the character itself.
  for (const [name, ch] of KEYSYM_PUNCTUATION) m.set(name, ch);
  return m;
})();

const EXAMPLES =
  'e.g. "Enter", "Tab", "Escape", "Backspace", "ArrowUp", "PageDown", "F5", "a", "ctrl+a", "ctrl+shift+Tab"';

/**
 * Parses one key or `+` chord ("ctrl+shift+t", "Return", "A", "ctrl++") into
 * Playwright key names, in press order; the last one is the key, the others
 * are held while it is pressed. Throws ToolInputError for an unknown name.
 */
export function parseChord(text: string): string[] {
  let src = text;
  // A chord may end in a literal plus: "+" alone, or "ctrl++".
  if (src === '+') src = 'plus';
  else if (src.endsWith('++')) src = `${src.slice(0, -2)}+plus`;
  const keys: string[] = [];
  for (const raw of src.split('+')) {
    const part = raw.trim();
    if (part === '') {
      throw new ToolInputError(
        `Empty key name in ${JSON.stringify(text)}. Join key names with "+", ${EXAMPLES}; write a literal + as "plus".`,
      );
    }
    const key = keyName(part);
    if (key === undefined) throw unknownKey(part, text, false);
    if (!keys.includes(key)) keys.push(key);
  }
  // With a modifier held, a letter names the key, not the character: "ctrl+A" is Control+a (Shift is its own part).
  const last = keys.length - 1;
  if (last > 0 && /^[A-Z]$/.test(keys[last]!)) keys[last] = keys[last]!.toLowerCase();
  return keys;
}

/**
 * Parses the `key` member's text: space-separated chords pressed one after
 * another ("Backspace Backspace", "ctrl+a Delete"), each as its keys in press
 * order. A text of only spaces is the space key.
 */
export function parseKeyChords(text: string): string[][] {
  if (text.trim() === '') {
    if (text.length > 0) return [['Space']];
    throw new ToolInputError(`No key given. Name a key, chord or sequence, ${EXAMPLES}.`);
  }
  return text.trim().split(/\s+/).map(parseChord);
}

/** Like parseKeyChords, each chord as one Playwright chord string such as "Control+Shift+T". */
export function parseKeySequence(text: string): string[] {
  return parseKeyChords(text).map((chord) => chord.join('+'));
}

/**
 * Parses a `modifiers` field ("shift", "ctrl+shift", "cmd+alt"): every part
 * must be a modifier. Blank means none.
 */
export function parsePlaywrightModifiers(text: string | null | undefined): Modifier[] {
  if (!text || text.trim() === '') return [];
  const result: Modifier[] = [];
  for (const raw of text.split('+')) {
    const part = raw.trim();
    const modifier = MODIFIERS.get(part.toLowerCase());
    if (modifier === undefined) throw unknownKey(part, text, true);
    if (!result.includes(modifier)) result.push(modifier);
  }
  return result;
}

function keyName(part: string): string | undefined {
  const lower = part.toLowerCase();
  const modifier = MODIFIERS.get(lower);
  if (modifier) return modifier;
  // Single printable ASCII characters are keys of the US layout Playwright uses; their case matters ("A" types A).
  if (part.length === 1) return /^[!-~]$/.test(part) ? part : undefined;
  return NAMES.get(lower) ?? (/^(?:digit|key)[0-9a-z]$/.test(lower) ? lower.at(-1) : undefined);
}

function unknownKey(part: string, text: string, modifiersOnly: boolean): ToolInputError {
  const shown = JSON.stringify(part.slice(0, 40));
  const where = part === text.trim() ? '' : ` in ${JSON.stringify(text.slice(0, 100))}`;
  if (modifiersOnly) {
    return new ToolInputError(
      `${shown}${where} is not a modifier. Modifiers are ctrl, shift, alt and cmd (also control, option, meta, super, win), joined by "+", e.g. "shift" or "ctrl+shift".`,
    );
  }
  // A non-ASCII character or a word is text, not a key name.
  const typeHint = /[^ -~]/.test(part) ? ' To enter text, use the type action.' : '';
  return new ToolInputError(
    `Unknown key ${shown}${where}. Valid keys: ${EXAMPLES}; separate keys pressed one after another with spaces.${typeHint}`,
  );
}
