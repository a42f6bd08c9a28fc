/**
 * Key-name parsing (src/desktop-driver/keys.ts), pure: parseChord,
 * parseModifierKeys, KEY_NAMES_HELP, KEYSYMS and checkTypeable, with no
 * display. What the parsed keys do on a real X server is in
 * desktop-keyboard.test.ts.
 *
 * Run: node --import tsx --test test/desktop-keys.test.ts
 */
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { Key } from '@nut-tree-fork/shared';
import { parseChord, parseModifierKeys, KEY_NAMES_HELP, KEYSYMS, checkTypeable } from '../src/desktop-driver/keys.ts';
import { ToolInputError } from '../src/base/errors.ts';
import { failsWith } from '../testkit/errors.ts';

describe('parseChord', () => {
  test('Return is Return, never the keypad Enter', () => {
    assert.deepEqual(parseChord('Return'), ['Return']);
    assert.deepEqual(parseChord('enter'), ['Return']);
    assert.deepEqual(parseChord('KP_Enter'), ['Enter']);
  });

  test('names are case-insensitive', () => {
    for (const s of ['return', 'RETURN', 'ReTuRn']) assert.deepEqual(parseChord(s), ['Return']);
    assert.deepEqual(parseChord('CTRL+Shift+escape'), ['LeftControl', 'LeftShift', 'Escape']);
    assert.deepEqual(parseChord('backspace'), parseChord('BackSpace'));
  });

  test('chords and common names', () => {
    assert.deepEqual(parseChord('ctrl+shift+Escape'), ['LeftControl', 'LeftShift', 'Escape']);
    assert.deepEqual(parseChord('alt+Tab'), ['LeftAlt', 'Tab']);
    assert.deepEqual(parseChord('ctrl+s'), ['LeftControl', 'S']);
    assert.deepEqual(parseChord('control_l+c'), ['LeftControl', 'C']);
    for (const s of ['Page_Up', 'pageup', 'pgup', 'Prior']) assert.deepEqual(parseChord(s), ['PageUp']);
    for (const s of ['Page_Down', 'pagedown', 'Next']) assert.deepEqual(parseChord(s), ['PageDown']);
    for (const s of ['Escape', 'esc']) assert.deepEqual(parseChord(s), ['Escape']);
    for (const s of ['Delete', 'del']) assert.deepEqual(parseChord(s), ['Delete']);
    for (const s of ['super', 'cmd', 'meta', 'win', 'Super_L']) assert.deepEqual(parseChord(s), ['LeftSuper']);
    assert.deepEqual(parseChord('F1'), ['F1']);
    assert.deepEqual(parseChord('f24'), ['F24']);
    assert.deepEqual(parseChord('KP_0'), ['NumPad0']);
    assert.deepEqual(parseChord('space'), ['Space']);
    assert.deepEqual(parseChord(' '), ['Space']);
    assert.deepEqual(parseChord('Up'), ['Up']);
    assert.deepEqual(parseChord('XF86AudioMute'), ['AudioMute']);
    assert.deepEqual(parseChord('Caps_Lock'), ['CapsLock']);
    assert.deepEqual(parseChord('ctrl + s'), ['LeftControl', 'S']);
  });

  test('punctuation: names and single characters', () => {
    assert.deepEqual(parseChord('ctrl+-'), ['LeftControl', 'Minus']);
    assert.deepEqual(parseChord('ctrl+='), ['LeftControl', 'Equal']);
    assert.deepEqual(parseChord('ctrl+minus'), ['LeftControl', 'Minus']);
    assert.deepEqual(parseChord('bracketleft'), ['LeftBracket']);
    assert.deepEqual(parseChord('grave'), ['Grave']);
    assert.deepEqual(parseChord('apostrophe'), ['Quote']);
  });

  test('shifted characters add Shift once', () => {
    assert.deepEqual(parseChord('A'), ['LeftShift', 'A']);
    assert.deepEqual(parseChord('a'), ['A']);
    assert.deepEqual(parseChord('!'), ['LeftShift', 'Num1']);
    assert.deepEqual(parseChord('ctrl+?'), ['LeftControl', 'LeftShift', 'Slash']);
    assert.deepEqual(parseChord('shift+A'), ['LeftShift', 'A']);
    assert.deepEqual(parseChord('ctrl+shift+?'), ['LeftControl', 'LeftShift', 'Slash']);
    assert.deepEqual(parseChord('plus'), ['LeftShift', 'Equal']);
    assert.deepEqual(parseChord('ctrl+plus'), ['LeftControl', 'LeftShift', 'Equal']);
    assert.deepEqual(parseChord('+'), ['LeftShift', 'Equal']);
    assert.deepEqual(parseChord('ctrl++'), ['LeftControl', 'LeftShift', 'Equal']);
  });

  test('every DriverKey produced is a nut-js Key member with a keysym', () => {
    const names = [
      'Return',
      'KP_Enter',
      'ctrl',
      'alt_r',
      'super_r',
      'shift_r',
      'Menu',
      'Print',
      'Insert',
      'Pause',
      'Num_Lock',
    ];
    for (let i = 1; i <= 24; i++) names.push(`F${i}`);
    for (let i = 0; i <= 9; i++) names.push(`KP_${i}`, String(i));
    for (const c of 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ`~!@#$%^&*()-_=[]{}\\|;:\'",<.>/?')
      names.push(c);
    for (const n of ['XF86AudioRaiseVolume', 'XF86AudioLowerVolume', 'XF86AudioPlay', 'XF86AudioNext', 'KP_Add'])
      names.push(n);
    for (const name of names) {
      for (const k of parseChord(name)) {
        assert.equal(
          typeof (Key as unknown as Record<string, number>)[k],
          'number',
          `${name} → ${k} is not a nut-js Key`,
        );
        assert.ok(KEYSYMS[k], `${k} has no keysym`);
      }
    }
  });

  test('unknown names and empty parts throw ToolInputError with a useful message', () => {
    for (const bad of ['ctrl+', '', '+ctrl', 'ctrl++shift', 'foo', 'ctrl+foo', 'é', 'ctrl+a b']) {
      assert.throws(
        () => parseChord(bad),
        (err: unknown) => {
          assert.ok(err instanceof ToolInputError, `${bad}: ${String(err)}`);
          assert.ok(!/[\\/](src|work|tmp|home)[\\/]/.test(err.message), err.message);
          assert.ok(err.message.length < 400, err.message);
          return true;
        },
      );
    }
    assert.throws(
      () => parseChord('ctrl+foo'),
      failsWith(
        ToolInputError,
        'Unknown key "foo" in "ctrl+foo". Valid keys: e.g. "Return", "ctrl+s", "ctrl+shift+Escape", "alt+Tab", "Page_Down", "F5", "a", "!".',
      ),
    );
    assert.throws(
      () => parseChord('Retrun'),
      failsWith(
        ToolInputError,
        'Unknown key "Retrun". Did you mean "return"? Valid keys: e.g. "Return", "ctrl+s", "ctrl+shift+Escape", "alt+Tab", "Page_Down", "F5", "a", "!".',
      ),
    );
    assert.throws(
      () => parseChord('ctrl+'),
      failsWith(
        ToolInputError,
        'Empty key name in "ctrl+". Join key names with "+", e.g. "Return", "ctrl+s", "ctrl+shift+Escape", "alt+Tab", "Page_Down", "F5", "a", "!"; write a literal + as "plus".',
      ),
    );
  });

  test('parseModifierKeys accepts only modifiers', () => {
    assert.deepEqual(parseModifierKeys('shift'), ['LeftShift']);
    assert.deepEqual(parseModifierKeys('ctrl+shift'), ['LeftControl', 'LeftShift']);
    assert.deepEqual(parseModifierKeys('Alt+Super'), ['LeftAlt', 'LeftSuper']);
    assert.deepEqual(parseModifierKeys(''), []);
    assert.throws(
      () => parseModifierKeys('a'),
      failsWith(
        ToolInputError,
        '"a" is not a modifier. Only shift, ctrl, alt and super can be held here, e.g. "shift" or "ctrl+shift".',
      ),
    );
    assert.throws(
      () => parseModifierKeys('shift+Return'),
      failsWith(
        ToolInputError,
        '"Return" is not a modifier. Only shift, ctrl, alt and super can be held here, e.g. "shift" or "ctrl+shift".',
      ),
    );
    assert.throws(
      () => parseModifierKeys('A'),
      failsWith(
        ToolInputError,
        '"A" is not a modifier. Only shift, ctrl, alt and super can be held here, e.g. "shift" or "ctrl+shift".',
      ),
    );
    assert.throws(
      () => parseModifierKeys('shfit'),
      failsWith(
        ToolInputError,
        'Unknown key "shfit". Did you mean "shift"? Valid modifiers: shift, ctrl, alt, super, joined by "+".',
      ),
    );
  });

  test('KEY_NAMES_HELP lists the main names', () => {
    for (const n of ['Return', 'ctrl', 'Page_Down', 'F1', 'plus']) assert.ok(KEY_NAMES_HELP.includes(n), n);
  });

  test('checkTypeable allows \\n and \\t, refuses other control characters', () => {
    checkTypeable('a\nb\tc é 你好 😀');
    const rest =
      'Text may contain printable characters, \\n (Return) and \\t (Tab); send other keys with the key action.';
    const cases: [string, string][] = [
      ['a\rb', `Cannot type carriage return (\\r); use \\n for a new line at position 1. ${rest}`],
      ['\u0007', `Cannot type control character U+0007 at position 0. ${rest}`],
      ['x\u007f', `Cannot type control character U+007F at position 1. ${rest}`],
      ['\u0085', `Cannot type control character U+0085 at position 0. ${rest}`],
      ['\ud800', `Cannot type unpaired surrogate U+D800 at position 0. ${rest}`],
    ];
    for (const [bad, message] of cases) {
      assert.throws(() => checkTypeable(bad), failsWith(ToolInputError, message), JSON.stringify(bad));
    }
  });
});
