/**
 * Human takeover's VNC side (src/takeover/vnc-server.ts, vnc-bridge.ts,
 * rfb-stream.ts) with a real Xvfb, a real
 * x11vnc and real WebSockets: a ws server on 127.0.0.1 whose connections go
 * through bridgeVnc, and a minimal RFB client (testkit/rfb-client.ts)
 * speaking to it as noVNC does. What a viewer does is checked in X itself
 * (the pointer's position and buttons, the modifier state, the clipboard),
 * never on the bridge's word; the bridge's tally is checked beside it.
 * The parser of the viewer's stream is tested on its own, split at every
 * offset.
 *
 * Run: node --import tsx --test --test-concurrency=1 test/takeover-vnc.test.ts
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
} from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { WebSocketServer, type WebSocket } from 'ws';
import { KeymapWatch } from '../src/desktop-driver/keymap-watch.ts';
import { XConnection } from '../src/desktop-driver/x11.ts';
import { createLogger, type Logger } from '../src/base/log.ts';
import { MAX_CUT_TEXT_BYTES, RfbClientStream, RfbProtocolError, type RfbSegment } from '../src/takeover/rfb-stream.ts';
import {
  bridgeVnc,
  isCharacterKeysym,
  type InputTally,
  type VncBridge,
  type KeymapGuard,
} from '../src/takeover/vnc-bridge.ts';
import { VncError, startVncServer, type VncServer } from '../src/takeover/vnc-server.ts';
import { startTestDisplay, type VirtualDisplay } from '../testkit/display.ts';
import { isRunning, processesMentioning } from '../testkit/recording.ts';
import { RfbTestClient } from '../testkit/rfb-client.ts';
import { until, within } from '../testkit/wait.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const CHILD = fileURLToPath(new URL('./fixtures/vnc-child.ts', import.meta.url));
const WIDTH = 1024;
const HEIGHT = 768;
const SHIFT_L = 0xffe1;
const CONTROL_L = 0xffe3;
const X_SHIFT_MASK = 0x01;
const X_BUTTON1_MASK = 0x100;

/** Warnings and errors reach the test output; x11vnc's own lines (debug) do not. */
const log: Logger = createLogger(
  (process.env.VNC_LOG as 'warn') ?? 'warn',
  (line) => process.stderr.write(`[vnc] ${line}`),
  {},
  { format: 'pretty' },
);

function privateDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'deskbatch-vnc-test-'));
  chmodSync(dir, 0o700);
  return dir;
}

// ---------------------------------------------------------------------------------------------

/** A session as noVNC 1.3 sends it (core/rfb.js, RFB.messages), every message type the bridge knows. */
function noVncSession(): { name: string; bytes: Buffer }[] {
  const u16 = (n: number): number[] => [n >> 8, n & 0xff];
  const u32 = (n: number): number[] => [(n >>> 24) & 0xff, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff];
  const encodings = [
    7, -260, 5, 16, 2, 0, -256, -247, -223, -224, -258, -308, -309, -312, -313, -307, 0xc0a1e5ce, 0x574d5664, -239,
  ];
  const extendedCaps = [...u32(0x1f00_0001), ...u32(0)];
  return [
    { name: 'version', bytes: Buffer.from('RFB 003.008\n', 'latin1') },
    { name: 'security', bytes: Buffer.from([1]) },
    { name: 'client-init', bytes: Buffer.from([1]) },
    {
      name: 'set-pixel-format',
      bytes: Buffer.from([0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 0, 8, 16, 0, 0, 0]),
    },
    { name: 'set-encodings', bytes: Buffer.from([2, 0, ...u16(encodings.length), ...encodings.flatMap(u32)]) },
    { name: 'update-request', bytes: Buffer.from([3, 0, 0, 0, 0, 0, ...u16(1024), ...u16(768)]) },
    { name: 'key', bytes: Buffer.from([4, 1, 0, 0, ...u32(0x61)]) },
    { name: 'key', bytes: Buffer.from([4, 0, 0, 0, ...u32(0x61)]) },
    { name: 'pointer', bytes: Buffer.from([5, 1, ...u16(300), ...u16(200)]) },
    { name: 'cut-text', bytes: Buffer.from([6, 0, 0, 0, ...u32(5), ...Buffer.from('hello')]) },
    // Extended Clipboard: a negative length (two's complement of 8), then flags and sizes.
    { name: 'cut-text', bytes: Buffer.from([6, 0, 0, 0, ...u32(0x1_0000_0000 - 8), ...extendedCaps]) },
    { name: 'continuous-updates', bytes: Buffer.from([150, 1, 0, 0, 0, 0, ...u16(1024), ...u16(768)]) },
    { name: 'fence', bytes: Buffer.from([248, 0, 0, 0, ...u32(0x8000_0003), 3, 0x61, 0x62, 0x63]) },
    { name: 'xvp', bytes: Buffer.from([250, 0, 1, 2]) },
    {
      name: 'desktop-size',
      bytes: Buffer.from([
        251,
        0,
        ...u16(800),
        ...u16(600),
        1,
        0,
        ...u32(0),
        0,
        0,
        0,
        0,
        ...u16(800),
        ...u16(600),
        ...u32(0),
      ]),
    },
    { name: 'qemu-key', bytes: Buffer.from([255, 0, ...u16(1), ...u32(0x61), ...u32(0x1e)]) },
  ];
}

/** Every segment `chunks` parse into, as plain values. */
function parseAll(chunks: Buffer[]): { hex: string; message: RfbSegment['message'] }[] {
  const stream = new RfbClientStream();
  return chunks.flatMap((c) => stream.push(c)).map((s) => ({ hex: s.bytes.toString('hex'), message: s.message }));
}

function throwsProtocol(chunks: Buffer[], wsCode: number, pattern: RegExp): void {
  const stream = new RfbClientStream();
  assert.throws(
    () => chunks.forEach((c) => stream.push(c)),
    (err: unknown) => err instanceof RfbProtocolError && err.wsCode === wsCode && pattern.test(err.message),
  );
  assert.throws(() => stream.push(Buffer.alloc(0)), RfbProtocolError, 'a failed stream stays failed');
}

describe("the viewer's RFB stream (RfbClientStream)", () => {
  const session = noVncSession();
  const whole = Buffer.concat(session.map((m) => m.bytes));
  const expected = parseAll([whole]);

  test('parses every message noVNC sends, each exactly as sent', () => {
    assert.deepEqual(
      expected.map((s) => s.message.type),
      session.map((m) => m.name),
    );
    assert.deepEqual(
      expected.map((s) => s.hex),
      session.map((m) => m.bytes.toString('hex')),
    );
    const m = expected.map((s) => s.message);
    assert.deepEqual(m[6], { type: 'key', down: true, keysym: 0x61 });
    assert.deepEqual(m[7], { type: 'key', down: false, keysym: 0x61 });
    assert.deepEqual(m[8], { type: 'pointer', mask: 1, x: 300, y: 200 });
    assert.deepEqual(m[9], { type: 'cut-text', length: 5, extended: false });
    assert.deepEqual(m[10], { type: 'cut-text', length: 8, extended: true });
    assert.deepEqual(m[15], { type: 'qemu-key', down: true, keysym: 0x61 });
  });

  test('a message split across chunks at any offset, or a byte at a time, parses the same', () => {
    for (let i = 0; i <= whole.length; i++) {
      assert.deepEqual(parseAll([whole.subarray(0, i), whole.subarray(i)]), expected, `split at ${i}`);
    }
    for (let i = 0; i < whole.length; i += 7) {
      for (let j = i; j <= whole.length; j += 5) {
        const parts = [whole.subarray(0, i), whole.subarray(i, j), whole.subarray(j)];
        assert.deepEqual(parseAll(parts), expected, `split at ${i} and ${j}`);
      }
    }
    assert.deepEqual(parseAll([...whole].map((b) => Buffer.from([b]))), expected, 'a byte at a time');
  });

  test("a chunk's bytes are not kept by reference once parsed: the caller may reuse its buffer", () => {
    const stream = new RfbClientStream();
    const chunk = Buffer.from(whole.subarray(0, 20)); // the handshake and 6 bytes of SetPixelFormat
    stream.push(chunk);
    chunk.fill(0xee);
    const out = stream.push(whole.subarray(20, 40));
    assert.equal(out[0]!.bytes.toString('hex'), session[3]!.bytes.toString('hex'));
  });

  test('ClientInit always asks for a shared session', () => {
    const out = parseAll([Buffer.from('RFB 003.008\n\x01\x00', 'latin1')]);
    assert.equal(out[2]!.message.type, 'client-init');
    assert.equal(out[2]!.hex, '01');
  });

  test('cut text up to 1 MiB passes; longer closes as soon as its header is in', () => {
    const head = Buffer.concat(session.slice(0, 3).map((m) => m.bytes));
    const cut = (n: number): Buffer => {
      const b = Buffer.alloc(8 + n, 0x61);
      b.fill(0, 0, 8);
      b[0] = 6;
      b.writeUInt32BE(n, 4);
      return b;
    };
    const ok = cut(MAX_CUT_TEXT_BYTES);
    const chunks: Buffer[] = [head];
    for (let i = 0; i < ok.length; i += 4096) chunks.push(ok.subarray(i, i + 4096));
    assert.deepEqual(parseAll(chunks).at(-1)?.message, {
      type: 'cut-text',
      length: MAX_CUT_TEXT_BYTES,
      extended: false,
    });
    throwsProtocol([head, cut(MAX_CUT_TEXT_BYTES + 1).subarray(0, 8)], 1009, /over the 1048576 limit/);
    // The extended form's negative length counts the same.
    const extended = Buffer.from([6, 0, 0, 0, 0, 0, 0, 0]);
    extended.writeUInt32BE(0x1_0000_0000 - (MAX_CUT_TEXT_BYTES + 1), 4);
    throwsProtocol([head, extended], 1009, /over the/);
  });

  test('anything else closes: an unknown message, another version or security type, a bad QEMU subtype or fence', () => {
    const head = Buffer.concat(session.slice(0, 3).map((m) => m.bytes));
    throwsProtocol([head, Buffer.from([7, 0, 0, 0])], 1002, /client message type 7/);
    throwsProtocol([head, Buffer.from([255, 1, 0, 0])], 1002, /QEMU message subtype 1/);
    throwsProtocol([head, Buffer.from([248, 0, 0, 0, 0, 0, 0, 0, 65])], 1002, /fence payload of 65/);
    throwsProtocol([Buffer.from('RFB 003.003\n', 'latin1')], 1002, /version/);
    throwsProtocol([Buffer.from('RFB 003.008\n\x02', 'latin1')], 1002, /security type 2/);
  });
});

describe('which keysyms type a character', () => {
  test('printable Latin-1, legacy character sets, keypad digits, Unicode; not modifiers, function or control keys', () => {
    const yes = { space: 0x20, a: 0x61, tilde: 0x7e, eacute: 0xe9, ydiaeresis: 0xff, Cyrillic_zhe: 0x6d6 };
    const yes2 = {
      Greek_alpha: 0x7e1,
      EuroSign: 0x20ac,
      KP_5: 0xffb5,
      KP_Add: 0xffab,
      U20AC: 0x010020ac,
      U1F600: 0x0101f600,
    };
    for (const [name, keysym] of Object.entries({ ...yes, ...yes2 })) assert.ok(isCharacterKeysym(keysym), name);
    const no = { Shift_L: 0xffe1, Control_R: 0xffe4, Return: 0xff0d, BackSpace: 0xff08, Tab: 0xff09, F1: 0xffbe };
    const no2 = { Left: 0xff51, dead_acute: 0xfe51, ISO_Level3_Shift: 0xfe03, U001B: 0x0100001b, U0085: 0x01000085 };
    for (const [name, keysym] of Object.entries({ ...no, ...no2, nul: 0, del: 0x7f })) {
      assert.ok(!isCharacterKeysym(keysym), name);
    }
  });
});

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

/** System V shared memory segments made by `pid` (/proc/sysvipc/shm). */
function sharedMemoryOf(pid: number): string[] {
  const [head, ...rows] = readFileSync('/proc/sysvipc/shm', 'utf8')
    .trim()
    .split('\n')
    .map((l) => l.trim().split(/\s+/));
  const id = head!.indexOf('shmid');
  const cpid = head!.indexOf('cpid');
  return rows.filter((r) => Number(r[cpid]) === pid).map((r) => r[id]!);
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
    const { c } = await open(false);
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

describe('x11vnc outlives no owner', () => {
  let display: VirtualDisplay;
  before(async () => {
    display = await startTestDisplay({ width: WIDTH, height: HEIGHT });
  });
  after(() => display?.stop());

  /** Starts test/fixtures/vnc-child.ts; resolves with it and its x11vnc's pid. */
  async function child(dir: string): Promise<{ proc: ChildProcess; pid: number; gone: Promise<void> }> {
    const proc = spawn(
      process.execPath,
      ['--import', 'tsx', CHILD, JSON.stringify({ display: display.display, xauthority: display.xauthority, dir })],
      { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] },
    );
    const gone = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    let out = '';
    proc.stdout!.setEncoding('utf8');
    proc.stdout!.on('data', (chunk: string) => (out += chunk));
    const line = await until('the child to report x11vnc started', () => /^\{.*\}\n/.exec(out), {
      timeoutMs: 30_000,
      seen: () => ({ out, exitCode: proc.exitCode }),
    });
    const { pid } = JSON.parse(line[0]) as { pid: number };
    assert.match(readFileSync(`/proc/${pid}/cmdline`, 'latin1'), /x11vnc/);
    return { proc, pid, gone };
  }

  test('a process that exits without stop() takes its x11vnc and its shared memory with it', async () => {
    const dir = privateDir();
    try {
      const { proc, pid, gone } = await child(dir);
      await until('x11vnc to have shared memory for its screen reads', () => sharedMemoryOf(pid).length > 0);
      proc.stdin!.end('exit\n');
      await within(gone, 'the child to exit');
      await until('x11vnc to be gone', () => !isRunning(pid));
      assert.deepEqual(sharedMemoryOf(pid), [], 'its shared memory is removed');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a process killed with SIGKILL takes its x11vnc with it (setpriv --pdeathsig)', async () => {
    const dir = privateDir();
    try {
      const { proc, pid, gone } = await child(dir);
      const segments = sharedMemoryOf(pid);
      proc.kill('SIGKILL');
      await within(gone, 'the child to die');
      await until('x11vnc to be gone', () => !isRunning(pid));
      // Nothing of the owner runs any more to remove x11vnc's shared memory: the test does.
      if (segments.length)
        execFileSync(
          'ipcrm',
          segments.flatMap((id) => ['-m', id]),
        );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('x11vnc that cannot start', () => {
  test('bad options: a folder others can read, a relative folder, a display name that is not one', async () => {
    const dir = privateDir();
    try {
      chmodSync(dir, 0o755);
      const start = (o: Partial<Parameters<typeof startVncServer>[0]>): Promise<VncServer> =>
        startVncServer({ display: ':0', dir, log, ...o });
      await assert.rejects(start({}), (e: unknown) => e instanceof VncError && e.code === 'bad_options');
      chmodSync(dir, 0o700);
      await assert.rejects(
        start({ dir: 'relative' }),
        (e: unknown) => e instanceof VncError && e.code === 'bad_options',
      );
      await assert.rejects(
        start({ display: ':0; rm' }),
        (e: unknown) => e instanceof VncError && e.code === 'bad_options',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('no X server on the display: start_failed, quoting x11vnc, and nothing left running', async () => {
    const dir = privateDir();
    try {
      await assert.rejects(
        startVncServer({ display: ':4999', dir, log }),
        (e: unknown) => e instanceof VncError && e.code === 'start_failed' && /exited with code 1/.test(e.message),
      );
      assert.deepEqual(processesMentioning(join(dir, 'vnc.sock')), []);
      assert.ok(!existsSync(join(dir, 'vnc.sock')));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('x11vnc not on the PATH: not_installed', async () => {
    const dir = privateDir();
    const path = process.env.PATH;
    process.env.PATH = dir;
    try {
      await assert.rejects(
        startVncServer({ display: ':4999', dir, log }),
        (e: unknown) => e instanceof VncError && e.code === 'not_installed',
      );
    } finally {
      process.env.PATH = path;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
