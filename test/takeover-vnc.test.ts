/**
 * Human takeover's VNC side (src/takeover/vnc-server.ts, vnc-bridge.ts) with
 * a real Xvfb, a real x11vnc and real WebSockets: a ws server on 127.0.0.1
 * whose connections go through bridgeVnc, and a minimal RFB client
 * (testkit/rfb-client.ts) speaking to it as noVNC does. What a viewer does is
 * checked in X itself (the pointer's position and buttons, the modifier
 * state, the clipboard), never on the bridge's word; the bridge's tally is
 * checked beside it. The parser of the viewer's stream, on its own:
 * takeover-rfb-stream.test.ts; x11vnc outliving no owner, and failing to
 * start: takeover-vnc-server.test.ts.
 *
 * Run: node --import tsx --test --test-concurrency=1 test/takeover-vnc.test.ts
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, lstatSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { WebSocketServer, type WebSocket } from 'ws';
import { KeymapWatch } from '../src/desktop-driver/keymap-watch.ts';
import { XConnection } from '../src/desktop-driver/x11.ts';
import { MAX_CUT_TEXT_BYTES } from '../src/takeover/rfb-stream.ts';
import { bridgeVnc, type InputTally, type VncBridge, type KeymapGuard } from '../src/takeover/vnc-bridge.ts';
import { startVncServer, type VncServer } from '../src/takeover/vnc-server.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { isRunning } from '../testkit/recording.ts';
import { RfbTestClient } from '../testkit/rfb-client.ts';
import { HEIGHT, WIDTH, log, privateDir, sharedMemoryOf } from '../testkit/vnc.ts';
import { until, within } from '../testkit/wait.ts';

const SHIFT_L = 0xffe1;
const CONTROL_L = 0xffe3;
const X_SHIFT_MASK = 0x01;
const X_BUTTON1_MASK = 0x100;
/** The event a selection's owner answers a read with, and the predefined atom STRING. */
const X_SELECTION_NOTIFY = 31;
const XA_STRING = 31;

// ---------------------------------------------------------------------------------------------

/** The inodes of the sockets `pid` holds open. */
function socketInodes(pid: number): Set<string> {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(m[1]!);
    } catch {
      // closed meanwhile
    }
  }
  return inodes;
}

/** Inodes of the sockets listed in /proc/net/<table> (tcp, tcp6, udp, udp6: column 10). */
function netInodes(table: string): Set<string> {
  const lines = readFileSync(`/proc/net/${table}`, 'utf8').trim().split('\n').slice(1);
  return new Set(lines.map((l) => l.trim().split(/\s+/)[9]!));
}

/** A read of a selection: its text, or why it could not be read (xclip's stderr, or a time-out). */
type SelectionRead = { text: string } | { error: string };

/** One `xclip -o` of `selection` as STRING. */
function xclip(display: VirtualDisplay, selection: string): Promise<SelectionRead> {
  return new Promise((resolve) => {
    execFile(
      'xclip',
      ['-o', '-selection', selection, '-t', 'STRING'],
      { env: { ...process.env, ...display.env }, encoding: 'latin1', timeout: 5_000 },
      (err, stdout, stderr) =>
        resolve(err ? { error: stderr.trim() || (err.killed ? 'no answer in 5 s' : err.message) } : { text: stdout }),
    );
  });
}

/**
 * What `selection` holds, read again until a read gets an answer: x11vnc
 * answers selection requests from its main loop, between its other work,
 * and on a busy machine (CI) a read once went unanswered until xclip's own
 * 5 s ran out. The first answer is what the caller asserts on.
 */
async function selectionText(display: VirtualDisplay, selection: string): Promise<string> {
  let last: SelectionRead = { error: 'not read yet' };
  const read = await until(
    `an answer to a read of ${selection}`,
    async () => {
      last = await xclip(display, selection);
      return 'text' in last && last;
    },
    { timeoutMs: 30_000, seen: () => last },
  );
  return read.text;
}

/** `xdotool getmouselocation`: where X has the pointer. */
function mouseLocation(display: VirtualDisplay): Promise<{ x: number; y: number }> {
  return new Promise((resolve, reject) => {
    execFile(
      'xdotool',
      ['getmouselocation', '--shell'],
      { env: { ...process.env, ...display.env }, encoding: 'utf8', timeout: 5_000 },
      (err, stdout) => {
        if (err) return reject(err);
        const v = Object.fromEntries(
          stdout
            .trim()
            .split('\n')
            .map((l) => l.split('=')),
        );
        resolve({ x: Number(v.X), y: Number(v.Y) });
      },
    );
  });
}

interface Bridged {
  ws: WebSocket;
  bridge: VncBridge;
  control: boolean;
  inputs: InputTally[];
}

/** A ws server on 127.0.0.1 whose connections are bridged to `server`: `?control=1` for control, else a watcher. */
async function bridgeServer(
  server: () => VncServer,
  keymap: () => KeymapGuard | undefined = () => undefined,
): Promise<{ url: string; bridged: Bridged[]; close(): void }> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
  await new Promise<void>((resolve) => wss.once('listening', resolve));
  const bridged: Bridged[] = [];
  wss.on('connection', (ws, req) => {
    const control = new URL(req.url ?? '/', 'http://x').searchParams.get('control') === '1';
    const inputs: InputTally[] = [];
    const guard = keymap();
    const bridge = bridgeVnc(ws, server(), {
      control,
      log,
      onInput: (t) => void inputs.push(t),
      ...(guard ? { keymap: guard } : {}),
    });
    bridged.push({ ws, bridge, control, inputs });
  });
  const { port } = wss.address() as AddressInfo;
  return {
    url: `ws://127.0.0.1:${port}/`,
    bridged,
    close: () => {
      for (const c of wss.clients) c.terminate();
      wss.close();
    },
  };
}

describe('x11vnc on a display, and the bridge', () => {
  let display: VirtualDisplay;
  let dir: string;
  let server: VncServer;
  let x: XConnection;
  let web: Awaited<ReturnType<typeof bridgeServer>>;
  /** The keymap guard the next bridge gets (none: x11vnc binds and presses a missing keysym at once). */
  let keymap: KeymapGuard | undefined;
  const clients: RfbTestClient[] = [];
  const keymapHas = async (keysym: number): Promise<boolean> => (await x.getKeyboardMapping()).keysyms.includes(keysym);
  const open = async (control: boolean): Promise<{ c: RfbTestClient; b: Bridged }> => {
    const before = web.bridged.length;
    const c = await RfbTestClient.open(`${web.url}?control=${control ? 1 : 0}`);
    clients.push(c);
    return { c, b: web.bridged[before]! };
  };

  before(async () => {
    display = await startTestDisplay({ width: WIDTH, height: HEIGHT });
    dir = privateDir();
    server = await startVncServer({ display: display.display, xauthority: display.xauthority, dir, log });
    web = await bridgeServer(
      () => server,
      () => keymap,
    );
    // As the desktop worker does (src/desktop-driver/worker/screen.ts): the X cursor hidden, for as long as this connection lives.
    x = await XConnection.open(display.display, display.xauthority);
    const xfixes = await x.extension('XFIXES');
    assert.ok(xfixes, 'the display has XFIXES');
    await x.extensionVersion(xfixes.major, 4, 0);
    x.hideCursor(xfixes.major);
    await x.sync();
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    web?.close();
    x?.close();
    await server?.stop();
    await display?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('x11vnc listens on its unix socket in the private folder, and on no TCP or UDP port', () => {
    assert.equal(server.socketPath, join(dir, 'vnc.sock'));
    assert.ok(lstatSync(server.socketPath).isSocket());
    const mine = socketInodes(server.pid);
    assert.ok(mine.size > 0, 'x11vnc holds sockets');
    for (const table of ['tcp', 'tcp6', 'udp', 'udp6']) {
      const shared = [...netInodes(table)].filter((inode) => mine.has(inode));
      assert.deepEqual(shared, [], `x11vnc has no ${table} socket`);
    }
    const unix = readFileSync('/proc/net/unix', 'utf8');
    assert.ok(unix.includes(server.socketPath), 'the unix socket is listed');
  });

  test("a viewer gets the display's size, a whole frame, and the pointer's shape though X hides the cursor", async () => {
    // A watcher asks for the pointer's shape and is not sent one: x11vnc draws the pointer into its picture.
    const watcher = (await open(false)).c;
    const watched = await watcher.update({ incremental: false });
    assert.ok(!watched.rects.some((r) => r.encoding === -239), 'no Cursor pseudo-rectangle for a watcher');
    await watcher.close();
    const { c } = await open(true);
    assert.equal(c.serverInit.width, WIDTH);
    assert.equal(c.serverInit.height, HEIGHT);
    assert.equal(c.serverInit.bitsPerPixel, 32);
    const update = await c.update({ incremental: false });
    const raw = update.rects.filter((r) => r.encoding === 0);
    assert.equal(
      raw.reduce((n, r) => n + r.width * r.height, 0),
      WIDTH * HEIGHT,
      'raw rectangles cover the screen',
    );
    const cursor = update.rects.find((r) => r.encoding === -239);
    assert.ok(cursor, `a Cursor pseudo-rectangle came: ${JSON.stringify(update.rects.map((r) => r.encoding))}`);
    assert.ok(cursor.width > 0 && cursor.height > 0 && (cursor.maskBits ?? 0) > 0, 'the cursor has visible pixels');
  });

  test("a person in control moves and clicks the pointer in X; a watcher's pointer never reaches X", async () => {
    const { c, b } = await open(true);
    c.pointer(123, 45);
    await until('X to have the pointer at (123, 45)', async () => {
      const at = await mouseLocation(display);
      return at.x === 123 && at.y === 45;
    });
    c.pointer(123, 45, 1);
    await until('button 1 down in X', async () => ((await x.queryPointer()).mask & X_BUTTON1_MASK) !== 0);
    c.pointer(123, 45, 0);
    c.pointer(123, 45, 8); // wheel up
    c.pointer(123, 45, 0);
    await until('button 1 up in X', async () => ((await x.queryPointer()).mask & X_BUTTON1_MASK) === 0);
    await c.update({ incremental: true });
    assert.deepEqual({ ...b.bridge.tally }, { keys: 0, characters: 0, clicks: 1, wheel: 1, pasted: 0, moves: 5 });
    assert.deepEqual(b.inputs.at(-1), b.bridge.tally, 'onInput had the latest counts');

    const w = await open(false);
    w.c.pointer(600, 500, 1);
    // x11vnc answers a client's messages in order: once this update is in, a forwarded move would have been made.
    await w.c.update({ incremental: true });
    assert.deepEqual(await mouseLocation(display), { x: 123, y: 45 }, "the watcher's move did not reach X");
    assert.equal((await x.queryPointer()).mask & X_BUTTON1_MASK, 0, "the watcher's button did not reach X");
    assert.equal(w.b.bridge.tally.moves, 0);
    assert.equal(w.b.inputs.length, 0);
  });

  test('keys reach X and are counted: characters, not modifiers, function keys or shortcuts', async () => {
    const { c, b } = await open(true);
    const tap = (keysym: number): void => {
      c.key(keysym, true);
      c.key(keysym, false);
    };
    c.key(SHIFT_L, true);
    await until('Shift down in X', async () => ((await x.queryPointer()).mask & X_SHIFT_MASK) !== 0);
    tap(0x41); // A
    c.key(SHIFT_L, false);
    await until('Shift up in X', async () => ((await x.queryPointer()).mask & X_SHIFT_MASK) === 0);
    c.key(CONTROL_L, true);
    tap(0x63); // Ctrl+c: a shortcut, not a character
    c.key(CONTROL_L, false);
    tap(0xe9); // é
    tap(0x6d6); // Cyrillic zhe, the keysym noVNC sends for ж
    tap(0xffbe); // F1
    await c.update({ incremental: true });
    assert.deepEqual({ ...b.bridge.tally }, { keys: 7, characters: 3, clicks: 0, wheel: 0, pasted: 0, moves: 0 });

    const w = await open(false);
    w.c.key(SHIFT_L, true);
    await w.c.update({ incremental: true });
    assert.equal((await x.queryPointer()).mask & X_SHIFT_MASK, 0, "the watcher's Shift did not reach X");
    assert.equal(w.b.bridge.tally.keys, 0);
    w.c.key(SHIFT_L, false);
  });

  test("pasted text reaches X's clipboard and primary selection, counted by its length; a watcher's does not", async () => {
    const { c, b } = await open(true);
    const text = 'pasted h\u00e9llo';
    c.cutText(text);
    // x11vnc sets the two selections one after the other: wait for both (a busy machine shows the gap).
    const both = async (): Promise<SelectionRead[]> => [
      await xclip(display, 'clipboard'),
      await xclip(display, 'primary'),
    ];
    const holdsText = (r: SelectionRead): boolean => 'text' in r && r.text === text;
    await until('CLIPBOARD and PRIMARY to hold the pasted text', async () => (await both()).every(holdsText), {
      timeoutMs: 30_000,
      seen: both,
    });
    assert.equal(b.bridge.tally.pasted, text.length);

    const w = await open(false);
    w.c.cutText('from a watcher');
    await w.c.update({ incremental: true });
    assert.equal(await selectionText(display, 'clipboard'), text, "the watcher's text did not reach X");
    assert.equal(w.b.bridge.tally.pasted, 0);
  });

  test('a client that asks for the pasted text and is gone before the answer: x11vnc ignores it and serves on', async () => {
    const { c } = await open(true);
    const text = 'owned by x11vnc';
    c.cutText(text);
    await until('CLIPBOARD to hold the pasted text', async () => {
      const read = await xclip(display, 'clipboard');
      return 'text' in read && read.text === text;
    });
    // x11vnc makes sure a reader's window still exists at most every 0.2 s: after 0.3 s without a read
    // it does for the next one, not for one it answers right after. So two reads in one go: one whose
    // window stays, one whose window is destroyed before x11vnc can answer. The error of answering
    // the second came back after x11vnc stopped ignoring errors: fatal before X11VNC_SENDEVENT_SYNC,
    // and x11vnc hung. (The clock is the condition here: x11vnc's own 0.2 s.)
    await new Promise((resolve) => setTimeout(resolve, 300));
    const reader = await XConnection.open(display.display, display.xauthority);
    try {
      let answered = false;
      reader.onEvent = (event) => {
        if ((event[0]! & 0x7f) === X_SELECTION_NOTIFY) answered = true;
      };
      const [clipboard, property] = await Promise.all([
        reader.internAtom('CLIPBOARD'),
        reader.internAtom('DESKBATCH_TEST_READ'),
      ]);
      const [stays, goes] = [reader.newId(), reader.newId()];
      reader.createInputOnlyWindow(stays);
      reader.createInputOnlyWindow(goes);
      reader.convertSelection(stays, clipboard, XA_STRING, property);
      reader.convertSelection(goes, clipboard, XA_STRING, property);
      reader.destroyWindow(goes);
      await reader.sync();
      await until('x11vnc to answer the read whose window stayed', () => answered);
      // A busy X server answers late: held for x11vnc's next turn (it answers the second read then),
      // so the error of that answer comes back only after x11vnc has put its usual handler back.
      await reader.whileServerGrabbed(() => {
        for (const end = performance.now() + 300; performance.now() < end;);
      });
    } finally {
      reader.close();
    }
    await open(true); // greeted (ServerInit), so x11vnc serves on
    assert.equal(await selectionText(display, 'clipboard'), text);
    assert.equal(isRunning(server.pid), true);
  });

  test('a key the desktop lacks: x11vnc binds it on a release sent first; its press and the keys after it wait for the binding to be read', async () => {
    const THORN = 0xfe;
    assert.equal(await keymapHas(THORN), false, 'the premise: the US keymap has no þ');
    let bound = false;
    let settle!: () => void;
    const asked: [number, number][] = [];
    keymap = {
      lacks: (keysym) => keysym === THORN && !bound,
      mark: () => 41,
      settled: (mark, keysym) => {
        asked.push([mark, keysym]);
        return new Promise<void>((resolve) => {
          settle = () => {
            bound = true;
            resolve();
          };
        });
      },
    };
    try {
      const { c, b } = await open(true);
      c.key(THORN, true);
      c.key(THORN, false);
      c.key(SHIFT_L, true);
      // x11vnc answers the release by binding þ: the bridge sent it, then held the rest.
      await until('x11vnc to bind þ to a spare keycode', () => keymapHas(THORN));
      assert.deepEqual(asked, [[41, THORN]]);
      assert.equal((await x.queryPointer()).mask & X_SHIFT_MASK, 0, 'Shift, behind the held press, has not reached X');
      settle();
      await until(
        'Shift, after the press, to reach X',
        async () => ((await x.queryPointer()).mask & X_SHIFT_MASK) !== 0,
      );
      c.key(SHIFT_L, false);
      // Known from now on: its next press goes straight through.
      c.key(THORN, true);
      c.key(THORN, false);
      await c.update({ incremental: true });
      assert.equal(asked.length, 1, 'a keysym is bound once');
      assert.deepEqual({ ...b.bridge.tally }, { keys: 3, characters: 2, clicks: 0, wheel: 0, pasted: 0, moves: 0 });
    } finally {
      keymap = undefined;
    }
  });

  test("KeymapWatch: knows the desktop's keymap and what x11vnc binds; with no window to type into, a binding waits for nobody", async () => {
    const AOGONEK = 0x1a1;
    const watch = await KeymapWatch.open(display.display, display.xauthority, log);
    assert.ok(watch, 'Xvfb has RECORD');
    try {
      assert.equal(watch.lacks(0x61), false, 'a');
      assert.equal(watch.lacks(0xffe1), false, 'Shift_L');
      assert.equal(watch.lacks(AOGONEK), true, 'ą');
      keymap = watch;
      const { c } = await open(true);
      c.key(AOGONEK, true);
      c.key(AOGONEK, false);
      await c.update({ incremental: true });
      assert.ok(await keymapHas(AOGONEK), 'x11vnc bound ą');
      assert.equal(watch.lacks(AOGONEK), false, 'and the watch knows it');
    } finally {
      keymap = undefined;
      watch.close();
    }
  });

  test('a viewer that vanishes with a button and Shift down lets go of them in X', async () => {
    const { c, b } = await open(true);
    c.pointer(200, 100, 1);
    c.key(SHIFT_L, true);
    await until('button 1 and Shift down in X', async () => {
      const mask = (await x.queryPointer()).mask;
      return (mask & X_BUTTON1_MASK) !== 0 && (mask & X_SHIFT_MASK) !== 0;
    });
    c.ws.terminate();
    await within(b.bridge.closed, 'the bridge to close');
    await until('button 1 and Shift up in X', async () => ((await x.queryPointer()).mask & 0x1ff) === 0, {
      seen: async () => (await x.queryPointer()).mask,
    });
  });

  test('a viewer breaking the protocol is closed (unknown message, text frame, cut text over 1 MiB); x11vnc serves on', async () => {
    const cases: [string, (c: RfbTestClient) => void, number][] = [
      ['an unknown message', (c) => c.send([9, 0, 0, 0]), 1002],
      ['a text frame', (c) => c.ws.send('hello'), 1003],
      ['a cut text over 1 MiB', (c) => c.send(RfbTestClient.cutTextBytes('x'.repeat(MAX_CUT_TEXT_BYTES + 1))), 1009],
    ];
    for (const [what, send, code] of cases) {
      const { c, b } = await open(true);
      send(c);
      await within(c.closed, `the bridge to close on ${what}`);
      assert.equal(c.closeCode, code, what);
      await within(b.bridge.closed, `bridge.closed on ${what}`);
      assert.equal(b.bridge.tally.pasted, 0, `nothing of ${what} was forwarded`);
    }
    const { c } = await open(true);
    await c.update({ incremental: true });
  });

  test('bounded: a watcher that stops reading is dropped (1013), so x11vnc never blocks on it', async () => {
    const { c, b } = await open(false);
    await c.update({ incremental: false });
    c.ws.pause(); // the client stops reading its TCP socket
    let asked = 0;
    const ask = setInterval(() => {
      c.send(RfbTestClient.updateRequestBytes(false, WIDTH, HEIGHT));
      asked++;
    }, 20);
    try {
      await within(b.bridge.closed, 'the slow watcher dropped', 30_000);
    } finally {
      clearInterval(ask);
      c.ws.resume();
    }
    await within(c.closed, 'the watcher connection ended');
    // 1013 when the close frame got through; a client that read nothing may see only the connection drop (1006).
    assert.ok(c.closeCode === 1013 || c.closeCode === 1006, `close ${c.closeCode} after ${asked} requests`);
  });

  test("bounded: the holder's viewer that stops reading holds the bridge near its 16 MiB mark, then gets every byte", async () => {
    const { c, b } = await open(true);
    await c.update({ incremental: false });
    c.ws.pause(); // the client stops reading its TCP socket
    let peak = 0;
    let asked = 0;
    // A whole frame (3 MiB) asked for every 20 ms, none read: the kernel's buffers fill, then the bridge's.
    const ask = setInterval(() => {
      peak = Math.max(peak, b.ws.bufferedAmount);
      c.send(RfbTestClient.updateRequestBytes(false, WIDTH, HEIGHT));
      asked++;
    }, 20);
    try {
      await until('the bridge to hold over 12 MiB for the viewer', () => b.ws.bufferedAmount > 12 * 1024 * 1024, {
        timeoutMs: 20_000,
        seen: () => ({ buffered: b.ws.bufferedAmount, asked }),
      });
      // Held at the mark for a while: x11vnc is not read, so the bridge buffers no more.
      const stop = asked + 25;
      await until('25 more requests', () => asked >= stop);
    } finally {
      clearInterval(ask);
      c.ws.resume();
    }
    peak = Math.max(peak, b.ws.bufferedAmount);
    // Over the mark by at most what one read of the unix socket brings.
    assert.ok(peak <= 16 * 1024 * 1024 + 256 * 1024, `peak ${peak} bytes buffered`);
    assert.ok(peak > 12 * 1024 * 1024, `peak ${peak} bytes buffered`);
    // Every update x11vnc sent arrives whole once the viewer reads again (the parser would throw on a torn one).
    const seen = c.updates.length;
    await c.wait('the updates held back', () => b.ws.bufferedAmount === 0 && c.updates.length > seen, 30_000);
    await c.update({ incremental: false });
  });

  test('a killed x11vnc closes the viewers, resolves exited and leaves no socket or shared memory behind', async () => {
    const dir2 = privateDir();
    const server2 = await startVncServer({ display: display.display, xauthority: display.xauthority, dir: dir2, log });
    const web2 = await bridgeServer(() => server2);
    try {
      const c = await RfbTestClient.open(`${web2.url}?control=1`);
      await c.update({ incremental: false });
      await until('x11vnc to have shared memory for its screen reads', () => sharedMemoryOf(server2.pid).length > 0);
      process.kill(server2.pid, 'SIGKILL');
      await within(c.closed, "the viewer's WebSocket to close");
      assert.equal(c.closeCode, 1001);
      await within(web2.bridged[0]!.bridge.closed, 'bridge.closed');
      await within(server2.exited, 'exited');
      assert.ok(!existsSync(server2.socketPath), 'the socket file is removed');
      assert.deepEqual(sharedMemoryOf(server2.pid), [], 'its shared memory is removed');
      await server2.stop();
    } finally {
      web2.close();
      await server2.stop();
      rmSync(dir2, { recursive: true, force: true });
    }
  });

  test('stop() ends x11vnc and its viewers, lets go of held keys and removes the socket; it is idempotent', async () => {
    const dir2 = privateDir();
    const server2 = await startVncServer({ display: display.display, xauthority: display.xauthority, dir: dir2, log });
    const web2 = await bridgeServer(() => server2);
    try {
      const c = await RfbTestClient.open(`${web2.url}?control=1`);
      assert.ok(isRunning(server2.pid));
      // A person still holding Shift when the server stops: x11vnc lets go of it as it exits.
      c.key(SHIFT_L, true);
      await until('Shift down in X', async () => ((await x.queryPointer()).mask & X_SHIFT_MASK) !== 0);
      const stopping = server2.stop();
      assert.equal(server2.stop(), stopping, 'stop() is idempotent');
      await stopping;
      assert.ok(!isRunning(server2.pid), 'x11vnc is gone');
      assert.ok(!existsSync(server2.socketPath), 'its socket is gone');
      assert.deepEqual(sharedMemoryOf(server2.pid), [], 'its shared memory is gone');
      assert.equal((await x.queryPointer()).mask & X_SHIFT_MASK, 0, 'Shift is up in X');
      await within(c.closed, "the viewer's WebSocket to close");
      await within(server2.exited, 'exited');
      const bridge = web2.bridged[0]!.bridge;
      bridge.close();
      bridge.close();
      await within(bridge.closed, 'bridge.closed');
    } finally {
      web2.close();
      rmSync(dir2, { recursive: true, force: true });
    }
  });
});
