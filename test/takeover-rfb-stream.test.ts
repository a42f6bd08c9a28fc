/**
 * Human takeover's VNC side, the parts that need no display: the parser of
 * the viewer's RFB stream (src/takeover/rfb-stream.ts), fed a session as
 * noVNC sends it, split at every offset, and what it must refuse; and which
 * keysyms the bridge (src/takeover/vnc-bridge.ts) counts as typed characters.
 *
 * Run: node --import tsx --test --test-concurrency=1 test/takeover-rfb-stream.test.ts
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { MAX_CUT_TEXT_BYTES, RfbClientStream, RfbProtocolError, type RfbSegment } from '../src/takeover/rfb-stream.ts';
import { isCharacterKeysym } from '../src/takeover/vnc-bridge.ts';

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
