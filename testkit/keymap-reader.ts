/**
 * A separate X client process for test/keymap-reads.test.ts: connects to
 * $DISPLAY, prints `ready <resource id base>`, then reads the keymap
 * (GetKeyboardMapping) once for every `read` line on stdin and prints `read`.
 * Exits when stdin closes.
 */
import { createInterface } from 'node:readline';
import { XConnection } from '../src/desktop-driver/x11.ts';

const conn = await XConnection.open(process.env.DISPLAY ?? '');
process.stdout.write(`ready ${conn.resourceIdBase}\n`);
for await (const line of createInterface({ input: process.stdin })) {
  if (line !== 'read') continue;
  await conn.getKeyboardMapping();
  process.stdout.write('read\n');
}
conn.close();
