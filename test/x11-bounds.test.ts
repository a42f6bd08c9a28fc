/**
 * The daemon speaks X (src/desktop-driver/x11.ts) to servers it must not
 * trust: a desktop's sandbox owns its X socket, and a program there could put
 * a server of its own on it. A reply that announces more than any we ask for
 * closes the connection instead of being buffered without bound.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { placeDisplaySocket } from '../src/desktop-driver/display.ts';
import { XConnection } from '../src/desktop-driver/x11.ts';
import { within } from '../testkit/wait.ts';

/** A successful connection setup: no vendor string, no pixmap formats, one screen whose root is 0x100. */
function setupReply(): Buffer {
  const b = Buffer.alloc(80);
  b[0] = 1; // success
  b.writeUInt16LE(11, 2);
  b.writeUInt16LE((b.length - 8) / 4, 6);
  b.writeUInt32LE(0x0400000, 12); // resource id base
  b.writeUInt32LE(0x01fffff, 16); // resource id mask
  b[28] = 1; // screens
  b[34] = 8; // min keycode
  b[35] = 255; // max keycode
  b.writeUInt32LE(0x100, 40); // the screen's root
  return b;
}

let dir: string;
let server: Server;
let display: string;
let streamed = 0;
const sockets = new Set<Socket>();

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'deskbatch-x11-'));
  // Answers the setup, then every request with a reply announcing 32 MiB, and streams its body.
  server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    let setupDone = false;
    socket.on('data', () => {
      if (!setupDone) {
        setupDone = true;
        socket.write(setupReply());
        return;
      }
      const head = Buffer.alloc(32);
      head[0] = 1; // reply
      head.writeUInt16LE(1, 2);
      head.writeUInt32LE((32 * 1024 * 1024) / 4, 4);
      socket.write(head);
      const chunk = Buffer.alloc(256 * 1024);
      const pump = (): void => {
        while (!socket.destroyed && streamed < 64 * 1024 * 1024) {
          streamed += chunk.length;
          if (!socket.write(chunk)) return void socket.once('drain', pump);
        }
      };
      pump();
    });
  });
  const path = join(dir, 'X0');
  await new Promise<void>((resolve) => server.listen(path, resolve));
  display = ':990';
  placeDisplaySocket('990', path);
});

after(async () => {
  for (const s of sockets) s.destroy();
  await new Promise((resolve) => server.close(resolve));
  await rm(dir, { recursive: true, force: true });
});

test('a reply announcing more than any we ask for closes the connection; nothing waits for it', async () => {
  const conn = await within(XConnection.open(display, '/dev/null', 5_000), 'the fake X server to complete the setup');
  await assert.rejects(
    within(conn.queryPointer(), 'the query to fail', 10_000),
    /X connection closed/,
    'the query fails instead of waiting for 32 MiB',
  );
  assert.equal(conn.closed, true);
  assert.ok(streamed < 32 * 1024 * 1024, `read no further than the announcement: the server got ${streamed} B out`);
});
