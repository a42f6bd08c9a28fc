/**
 * Dialogs a page opens (alert, confirm, prompt, beforeunload) are answered at
 * once, so a call never hangs on one; the model is told what happened.
 */
import type { Dialog } from 'playwright';
import { cutPoints, oneLine } from '../base/text.ts';
import type { Notices } from './notices.ts';

/** Longest dialog message quoted in a notice: the SDK's cap (docs/TOOLSETS.md D2). */
const DIALOG_MESSAGE_MAX = 200;

export async function answerDialog(dialog: Dialog, notices: Notices): Promise<void> {
  const kind = dialog.type().slice(0, 20);
  const article = /^[aeiou]/i.test(kind) ? 'An' : 'A';
  const what = `${article} ${kind} dialog${quotedMessage(dialog.message())}`;
  // Leaving a page must not hang a navigation: beforeunload is accepted, every other dialog dismissed.
  if (kind === 'beforeunload') {
    notices.add(`${what} was accepted, so the page could be left.`);
    await dialog.accept().catch(() => undefined);
  } else {
    notices.add(`${what} was dismissed.`);
    await dialog.dismiss().catch(() => undefined);
  }
}

/**
 * The page's message as the SDK's runner quotes it: one line, at most 200
 * code points (then `…`), in JSON quotes so that a quote in it cannot end the
 * quotation; nothing for an empty message.
 */
function quotedMessage(raw: string): string {
  const message = oneLine(raw);
  if (!message) return '';
  const shown = cutPoints(message, DIALOG_MESSAGE_MAX);
  return ` ${JSON.stringify(shown === message ? shown : `${shown}…`)}`;
}
