/**
 * Setting a form field's value (`form_input`, docs/TOOLSETS.md C3): what the
 * element is decides how, and a value that does not fit it is refused with a
 * message naming the ref. The DOM work runs in the page script
 * (page-script/page-script.js, ops `field`, `check`, `select`); text goes in
 * through Playwright's `fill`, which sends real input events.
 */
import type { Page } from 'playwright';
import { ToolInputError } from '../base/errors.ts';
import { echo } from '../base/text.ts';
import { onRef, refElement } from './frame-worlds.ts';

export type FormValue = string | number | boolean;

/** Longest a form_input action waits for its element to be editable. */
const FORM_ACTION_TIMEOUT_MS = 5_000;

/** What form_input needs to know about the element before choosing how to set it. */
interface FieldInfo {
  tag: string;
  /** `type` of an <input>, lower case; '' otherwise. */
  type: string;
  contentEditable: boolean;
  disabled: boolean;
  readOnly: boolean;
}

type SelectResult =
  | { ok: true }
  | { ok: false; disabled: string }
  | { ok: false; options: string[]; total: number; disabled?: undefined };

/** Input types whose value is not text the model can set. */
const NOT_SETTABLE: Readonly<Record<string, string>> = {
  file: 'is a file input; use file_upload',
  button: 'is a button; click it instead',
  submit: 'is a submit button; click it instead',
  reset: 'is a reset button; click it instead',
  image: 'is an image button; click it instead',
  hidden: 'is a hidden input, which cannot be set',
};

function valueKind(value: FormValue): string {
  return typeof value === 'boolean' ? 'a boolean' : typeof value === 'number' ? 'a number' : 'a string';
}

/** Sets the value of the form field `ref` names: text, an option of a select, or a checkbox's or radio button's state. */
export async function setFormValue(page: Page, ref: string, value: FormValue, onSecret?: () => void): Promise<void> {
  const shown = echo(ref);
  const info = await onRef<FieldInfo>(page, ref, { op: 'field' });
  if (info.tag === 'input' && info.type === 'password') onSecret?.();
  const refuse = (why: string) => new ToolInputError(`${shown} ${why}.`);
  if (info.disabled) throw refuse('is disabled, so its value cannot be set');

  if (info.tag === 'select') {
    if (typeof value === 'boolean') throw refuse("is a select; give an option's value or visible text, not a boolean");
    return selectOption(page, ref, String(value));
  }
  if (info.tag === 'input' && (info.type === 'checkbox' || info.type === 'radio')) {
    if (typeof value !== 'boolean') throw refuse(`is a ${info.type}; give true or false, not ${valueKind(value)}`);
    if (info.type === 'radio' && !value)
      throw refuse('is a radio button; unset it by setting another option of its group to true');
    const { checked } = await onRef<{ checked: boolean }>(page, ref, { op: 'check', want: value });
    if (checked !== value) throw refuse(`did not change: the page kept it ${checked ? 'checked' : 'unchecked'}`);
    return;
  }
  const isText =
    info.tag === 'textarea' || (info.tag === 'input' && !(info.type in NOT_SETTABLE)) || info.contentEditable;
  if (!isText) {
    if (info.tag === 'input') throw refuse(NOT_SETTABLE[info.type]!);
    if (info.tag === 'button') throw refuse('is a button; click it instead');
    throw refuse(
      `is a <${info.tag}>, not a form field; form_input sets inputs, textareas, selects, checkboxes and radio buttons`,
    );
  }
  if (typeof value === 'boolean')
    throw refuse(`is a text field${info.type ? ` (type ${info.type})` : ''}; give a string or number, not a boolean`);
  if (info.readOnly) throw refuse('is read-only, so its value cannot be set');
  const text = String(value);
  if (info.type === 'number' && text.trim() !== '' && !Number.isFinite(Number(text))) {
    throw refuse(`is a number field; ${JSON.stringify(echo(text))} is not a number`);
  }
  const el = await refElement(page, ref);
  try {
    // fill focuses the field, selects what is there and inserts the text: real input events, so frameworks see the change.
    await el.fill(text, { timeout: FORM_ACTION_TIMEOUT_MS });
  } finally {
    await el.dispose().catch(() => undefined);
  }
}

/** Selects the option whose value, else whose visible text, equals `wanted` (then case-insensitively). */
async function selectOption(page: Page, ref: string, wanted: string): Promise<void> {
  const result = await onRef<SelectResult>(page, ref, { op: 'select', wanted });
  if (result.ok) return;
  const shown = echo(ref);
  if (result.disabled !== undefined)
    throw new ToolInputError(`The option ${JSON.stringify(echo(result.disabled))} of ${shown} is disabled.`);
  const list = result.options.map((o) => JSON.stringify(echo(o))).join(', ');
  const more = result.total > result.options.length ? `, and ${result.total - result.options.length} more` : '';
  throw new ToolInputError(
    `${shown} has no option with the value or text ${JSON.stringify(echo(wanted))}. Options: ${list || '(none)'}${more}.`,
  );
}

/**
 * Evaluated in each frame (a string: the daemon's TypeScript has no DOM types). Not `document.hasFocus()`:
 * a headless page need not have the window's focus. So a frame whose own focused element is a password field
 * counts even while the focus is in another frame: redaction errs on the side of hiding.
 */
const FOCUSED_PASSWORD = `(() => {
  let el = document.activeElement;
  while (el && el.shadowRoot && el.shadowRoot.activeElement) el = el.shadowRoot.activeElement;
  return el instanceof HTMLInputElement && el.type === 'password';
})()`;

/**
 * Whether the focused element, in any frame of the page, is a field the page marks as a password
 * (`<input type=password>`), looking into open shadow roots. Asked only when a recording redacts such
 * fields (docs/RECORDING.md "Privacy"); a frame that cannot answer counts as no. It runs in the page's
 * own world: a page that lies to it can only leave its own password unredacted.
 */
export async function focusedIsPassword(page: Page): Promise<boolean> {
  const answers = await Promise.all(
    page.frames().map((frame) => frame.evaluate<boolean>(FOCUSED_PASSWORD).catch(() => false)),
  );
  return answers.includes(true);
}
