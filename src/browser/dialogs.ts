/**
 * Dialogs a page opens (alert, confirm, prompt, beforeunload) are answered at
 * once, so a call never hangs on one; the model is told what happened.
 */
import type { Dialog } from 'playwright';
import { oneLine } from '../text.ts';
import type { Notices } from './notices.ts';

/** Longest dialog message quoted in a notice: the SDK's cap (docs/TOOLSETS.md D2). */
const DIALOG_MESSAGE_MAX = 200;

export async function answerDialog(dialog: Dialog, notices: Notices): Promise<void> {
  const kind = dialog.type().slice(0, 20);
  const message = oneLine(dialog.message()).slice(0, DIALOG_MESSAGE_MAX);
  const article = /^[aeiou]/i.test(kind) ? 'An' : 'A';
  // Leaving a page must not hang a navigation: beforeunload is accepted, every other dialog dismissed.
  if (kind === 'beforeunload') {
    notices.add(`${article} ${kind} dialog "${message}" was accepted, so the page could be left.`);
    await dialog.accept().catch(() => undefined);
  } else {
    notices.add(`${article} ${kind} dialog "${message}" was dismissed.`);
    await dialog.dismiss().catch(() => undefined);
  }
}
