/**
 * Key names as the model writes them (xdotool / X keysym style, the way
 * Claude's computer tool uses them) → DriverKeys (nut-js `Key` enum member
 * names), plus the keyboard facts the desktop worker needs: the X keysym each
 * DriverKey produces, and the US-layout shift map used to type ASCII text.
 *
 * Pure module: no nut-js, no X. Imported by the toolsets (parsing) and by the
 * worker child (keysym table, shift map, text validation).
 */
import { ToolInputError } from '../base/errors.ts';
import type { DriverKey } from './driver.ts';
import { KEYSYM_PUNCTUATION } from '../base/keysym-names.ts';

/** One key press: a DriverKey, with Shift when the character needs it. */
export interface Stroke {
  key: DriverKey;
  shift: boolean;
}

/**
 * X keysym of every DriverKey this module can produce. Checked with xev on
 * Xvfb against what nut-js/libnut sends (docs/MEASURED.md): note
 * `Return` is XK_Return but `Enter` is XK_KP_Enter (the keypad key), and
 * libnut's "meta"/"win" both send Super_L.
 */
export const KEYSYMS: Readonly<Record<DriverKey, number>> = (() => {
  const t: Record<DriverKey, number> = {
    Return: 0xff0d,
    Enter: 0xff8d,
    Tab: 0xff09,
    Escape: 0xff1b,
    Space: 0x20,
    Backspace: 0xff08,
    Delete: 0xffff,
    Insert: 0xff63,
    Home: 0xff50,
    End: 0xff57,
    PageUp: 0xff55,
    PageDown: 0xff56,
    Left: 0xff51,
    Up: 0xff52,
    Right: 0xff53,
    Down: 0xff54,
    Print: 0xff61,
    ScrollLock: 0xff14,
    Pause: 0xff13,
    Menu: 0xff67,
    CapsLock: 0xffe5,
    NumLock: 0xff7f,
    LeftShift: 0xffe1,
    RightShift: 0xffe2,
    LeftControl: 0xffe3,
    RightControl: 0xffe4,
    LeftAlt: 0xffe9,
    RightAlt: 0xffea,
    LeftSuper: 0xffeb,
    RightSuper: 0xffec,
    Add: 0xffab,
    Subtract: 0xffad,
    Multiply: 0xffaa,
    Divide: 0xffaf,
    Decimal: 0xffae,
    NumPadEqual: 0xffbd,
    Grave: 0x60,
    Minus: 0x2d,
    Equal: 0x3d,
    LeftBracket: 0x5b,
    RightBracket: 0x5d,
    Backslash: 0x5c,
    Semicolon: 0x3b,
    Quote: 0x27,
    Comma: 0x2c,
    Period: 0x2e,
    Slash: 0x2f,
    AudioMute: 0x1008ff12,
    AudioVolDown: 0x1008ff11,
    AudioVolUp: 0x1008ff13,
    AudioPlay: 0x1008ff14,
    AudioStop: 0x1008ff15,
    AudioPause: 0x1008ff31,
    AudioPrev: 0x1008ff16,
    AudioNext: 0x1008ff17,
    AudioRewind: 0x1008ff3e,
    AudioForward: 0x1008ff97,
    AudioRepeat: 0x1008ff98,
    AudioRandom: 0x1008ff99,
  };
  for (let i = 1; i <= 24; i++) t[`F${i}`] = 0xffbe + i - 1;
  for (let i = 0; i <= 9; i++) {
    t[`Num${i}`] = 0x30 + i;
    t[`NumPad${i}`] = 0xffb0 + i;
  }
  for (let c = 0; c < 26; c++) t[String.fromCharCode(65 + c)] = 0x61 + c; // libnut sends lowercase keysyms
  return t;
})();

/** Modifier DriverKeys: what clicks, scrolls and drags may hold. */
export const MODIFIER_KEYS: ReadonlySet<DriverKey> = new Set([
  'LeftShift',
  'RightShift',
  'LeftControl',
  'RightControl',
  'LeftAlt',
  'RightAlt',
  'LeftSuper',
  'RightSuper',
]);

/** US layout: the unshifted and shifted characters of each character key. */
const US_KEYS: ReadonlyArray<[DriverKey, string, string]> = [
  ['Grave', '`', '~'],
  ['Num1', '1', '!'],
  ['Num2', '2', '@'],
  ['Num3', '3', '#'],
  ['Num4', '4', '$'],
  ['Num5', '5', '%'],
  ['Num6', '6', '^'],
  ['Num7', '7', '&'],
  ['Num8', '8', '*'],
  ['Num9', '9', '('],
  ['Num0', '0', ')'],
  ['Minus', '-', '_'],
  ['Equal', '=', '+'],
  ['LeftBracket', '[', '{'],
  ['RightBracket', ']', '}'],
  ['Backslash', '\\', '|'],
  ['Semicolon', ';', ':'],
  ['Quote', "'", '"'],
  ['Comma', ',', '<'],
  ['Period', '.', '>'],
  ['Slash', '/', '?'],
  ['Space', ' ', ' '],
];

const US_SHIFT_MAP: ReadonlyMap<string, Stroke> = (() => {
  const m = new Map<string, Stroke>();
  for (const [key, plain, shifted] of US_KEYS) {
    m.set(plain, { key, shift: false });
    if (shifted !== plain) m.set(shifted, { key, shift: true });
  }
  for (let c = 0; c < 26; c++) {
    const key = String.fromCharCode(65 + c);
    m.set(key.toLowerCase(), { key, shift: false });
    m.set(key, { key, shift: true });
  }
  return m;
})();

/**
 * How to type one printable ASCII character (0x20–0x7e) on a US layout: the
 * base key plus Shift when needed. nut-js `keyboard.type` gets the shifted
 * half of this wrong on X11 (docs/MEASURED.md), so the worker presses Shift itself.
 */
export function usStroke(char: string): Stroke | undefined {
  return US_SHIFT_MAP.get(char);
}

/** The X keysym that produces a character: Latin-1 keysyms equal the code point, others are 0x01000000 + code point. */
export function charKeysym(codePoint: number): number {
  if ((codePoint >= 0x20 && codePoint <= 0x7e) || (codePoint >= 0xa0 && codePoint <= 0xff)) return codePoint;
  return 0x01000000 + codePoint;
}

/**
 * Checks that `text` can be typed exactly: printable characters, `\n` and
 * `\t`. Throws ToolInputError naming the first offending character, so the
 * worker can refuse before typing anything.
 */
export function checkTypeable(text: string): void {
  let index = 0;
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    let bad: string | undefined;
    if (cp === 0x0d) bad = 'carriage return (\\r); use \\n for a new line';
    else if (cp === 0x0a || cp === 0x09) bad = undefined;
    else if (cp < 0x20 || cp === 0x7f || (cp >= 0x80 && cp <= 0x9f)) bad = `control character U+${hex4(cp)}`;
    else if (cp >= 0xd800 && cp <= 0xdfff) bad = `unpaired surrogate U+${hex4(cp)}`;
    if (bad !== undefined) {
      throw new ToolInputError(
        `Cannot type ${bad} at position ${index}. Text may contain printable characters, \\n (Return) and \\t (Tab); send other keys with the key action.`,
      );
    }
    index++;
  }
}

function hex4(cp: number): string {
  return cp.toString(16).toUpperCase().padStart(4, '0');
}

// ---------------------------------------------------------------------------
// Key-name parsing

/** Lower-cased multi-character names → strokes. Single characters go through the US shift map. */
const NAMES: ReadonlyMap<string, Stroke> = (() => {
  const m = new Map<string, Stroke>();
  const add = (key: DriverKey, shift: boolean, ...names: string[]): void => {
    for (const n of names) m.set(n, { key, shift });
  };
  // Return is the main Enter key; Key.Enter in nut-js is the keypad Enter (docs/MEASURED.md).
  add('Return', false, 'return', 'enter', 'ret');
  add('Enter', false, 'kp_enter');
  add('Tab', false, 'tab');
  add('Tab', true, 'iso_left_tab');
  add('Escape', false, 'escape', 'esc');
  add('Space', false, 'space', 'spacebar');
  add('Backspace', false, 'backspace', 'back_space');
  add('Delete', false, 'delete', 'del');
  add('Insert', false, 'insert', 'ins');
  add('Home', false, 'home');
  add('End', false, 'end');
  add('PageUp', false, 'page_up', 'pageup', 'pgup', 'prior');
  add('PageDown', false, 'page_down', 'pagedown', 'pgdn', 'next');
  add('Up', false, 'up', 'arrowup', 'arrow_up');
  add('Down', false, 'down', 'arrowdown', 'arrow_down');
  add('Left', false, 'left', 'arrowleft', 'arrow_left');
  add('Right', false, 'right', 'arrowright', 'arrow_right');
  add('Print', false, 'print', 'printscreen', 'print_screen');
  add('Menu', false, 'menu', 'contextmenu');
  add('Pause', false, 'pause');
  add('CapsLock', false, 'caps_lock', 'capslock');
  add('NumLock', false, 'num_lock', 'numlock');
  add('ScrollLock', false, 'scroll_lock', 'scrolllock');
  // Modifiers.
  add('LeftControl', false, 'ctrl', 'control', 'ctrl_l', 'control_l');
  add('RightControl', false, 'ctrl_r', 'control_r');
  add('LeftShift', false, 'shift', 'shift_l');
  add('RightShift', false, 'shift_r');
  add('LeftAlt', false, 'alt', 'alt_l', 'option');
  add('RightAlt', false, 'alt_r');
  add('LeftSuper', false, 'super', 'super_l', 'cmd', 'command', 'meta', 'meta_l', 'win', 'windows');
  add('RightSuper', false, 'super_r', 'meta_r', 'win_r');
  // Keypad.
  for (let i = 0; i <= 9; i++) add(`NumPad${i}`, false, `kp_${i}`);
  add('Add', false, 'kp_add', 'kp_plus');
  add('Subtract', false, 'kp_subtract', 'kp_minus');
  add('Multiply', false, 'kp_multiply');
  add('Divide', false, 'kp_divide');
  add('Decimal', false, 'kp_decimal');
  add('NumPadEqual', false, 'kp_equal');
  for (let i = 1; i <= 24; i++) add(`F${i}`, false, `f${i}`);
  // X keysym names of punctuation (xdotool accepts these).
  for (const [name, ch] of KEYSYM_PUNCTUATION) m.set(name, US_SHIFT_MAP.get(ch)!);
  // Media keys (XF86 keysym names, and short forms).
  const media: Array<[DriverKey, string]> = [
    ['AudioMute', 'mute'],
    ['AudioVolDown', 'lowervolume'],
    ['AudioVolUp', 'raisevolume'],
    ['AudioPlay', 'play'],
    ['AudioStop', 'stop'],
    ['AudioPause', 'pause'],
    ['AudioPrev', 'prev'],
    ['AudioNext', 'next'],
    ['AudioRewind', 'rewind'],
    ['AudioForward', 'forward'],
    ['AudioRepeat', 'repeat'],
    ['AudioRandom', 'randomplay'],
  ];
  for (const [key, n] of media) add(key, false, `xf86audio${n}`, `audio_${n}`);
  add('AudioVolDown', false, 'volume_down', 'volumedown', 'audio_vol_down');
  add('AudioVolUp', false, 'volume_up', 'volumeup', 'audio_vol_up');
  add('AudioMute', false, 'volume_mute', 'volumemute');
  return m;
})();

/** Brief list of accepted key names, for tool descriptions and error messages. */
export const KEY_NAMES_HELP =
  'Keys are xdotool/X keysym names, case-insensitive, joined by "+" for a chord (e.g. "ctrl+s", "ctrl+shift+Escape", "alt+Tab"). ' +
  'Names: Return (or enter), Tab, Escape (esc), BackSpace, Delete, Insert, space, Up, Down, Left, Right, Home, End, Page_Up, Page_Down, F1–F24, ' +
  'letters a–z, digits 0–9, any single printable character (A, !, ?, -, =), punctuation names (minus, plus, equal, comma, period, slash, ' +
  'backslash, semicolon, apostrophe, grave, bracketleft, bracketright), KP_0–KP_9, KP_Enter, KP_Add, Print, Menu, Caps_Lock, ' +
  'XF86AudioMute/RaiseVolume/LowerVolume/Play/Next/Prev; modifiers ctrl, shift, alt, super (cmd, win, meta). Write a literal "+" as plus.';

const EXAMPLES = 'e.g. "Return", "ctrl+s", "ctrl+shift+Escape", "alt+Tab", "Page_Down", "F5", "a", "!"';

/**
 * Parses a key or chord as the model writes it ("ctrl+shift+t", "Return",
 * "A", "ctrl+?") into DriverKeys, in press order. A character that needs
 * Shift on a US layout ("A", "!", "ctrl+?") gets LeftShift added before it,
 * once. Throws ToolInputError for unknown names and empty parts.
 */
export function parseChord(text: string): DriverKey[] {
  return parse(text, false);
}

/**
 * Like parseChord, but every key must be a modifier (shift, ctrl, alt,
 * super): for clicks, scrolls and drags that hold modifiers. An empty or
 * blank string means no modifiers.
 */
export function parseModifierKeys(text: string): DriverKey[] {
  if (text.trim() === '') return [];
  return parse(text, true);
}

function parse(text: string, modifiersOnly: boolean): DriverKey[] {
  let src = text;
  // A chord may end in a literal plus: "+" alone, or "ctrl++".
  if (src === '+') src = 'plus';
  else if (src.endsWith('++')) src = `${src.slice(0, -2)}+plus`;
  if (src.trim() === '' && src.length > 0 && !modifiersOnly) src = 'space'; // key " "
  const parts = src.split('+');
  const keys: DriverKey[] = [];
  const push = (k: DriverKey): void => {
    if (!keys.includes(k)) keys.push(k);
  };
  for (const raw of parts) {
    const part = raw.trim();
    if (part === '') {
      throw new ToolInputError(
        `Empty key name in ${JSON.stringify(text)}. Join key names with "+", ${EXAMPLES}; write a literal + as "plus".`,
      );
    }
    const stroke = part.length === 1 ? usStroke(part) : NAMES.get(part.toLowerCase());
    if (!stroke) throw unknownKey(part, text, modifiersOnly);
    if (modifiersOnly && (stroke.shift || !MODIFIER_KEYS.has(stroke.key))) {
      throw new ToolInputError(
        `${JSON.stringify(part)} is not a modifier. Only shift, ctrl, alt and super can be held here, e.g. "shift" or "ctrl+shift".`,
      );
    }
    if (stroke.shift) push('LeftShift');
    push(stroke.key);
  }
  return keys;
}

function unknownKey(part: string, text: string, modifiersOnly: boolean): ToolInputError {
  const hint = suggest(part.toLowerCase(), modifiersOnly);
  const where = part === text.trim() ? '' : ` in ${JSON.stringify(text)}`;
  const valid = modifiersOnly ? 'Valid modifiers: shift, ctrl, alt, super, joined by "+"' : `Valid keys: ${EXAMPLES}`;
  // A lone non-ASCII character (or a word) is text, not a key name.
  const typeHint =
    !modifiersOnly && (/[^ -~]/.test(part) || /\s/.test(part)) ? ' To enter text, use the type action.' : '';
  return new ToolInputError(
    `Unknown key ${JSON.stringify(part)}${where}.${hint ? ` Did you mean "${hint}"?` : ''} ${valid}.${typeHint}`,
  );
}

/** The closest known name within edit distance 2 (and under half the name's length), if any. */
function suggest(name: string, modifiersOnly: boolean): string | undefined {
  let best: string | undefined;
  let bestDist = 3;
  for (const [candidate, stroke] of NAMES) {
    if (modifiersOnly && !MODIFIER_KEYS.has(stroke.key)) continue;
    if (Math.abs(candidate.length - name.length) >= bestDist) continue;
    const d = editDistance(name, candidate);
    if (d < bestDist && d * 2 < name.length) {
      bestDist = d;
      best = candidate;
    }
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length]!;
}
