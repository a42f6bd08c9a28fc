/**
 * The B,G,R,X → R,G,B copy every screenshot goes through
 * (src/desktop-driver/worker/screen.ts `bgrxToRgb`): its word-at-a-time path
 * for whole rows and its byte path for a region or an unaligned buffer give
 * the same pixels as the definition, whatever the pixel count's remainder.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bgrxToRgb, type BgrxImage } from '../src/desktop-driver/worker/screen.ts';

function image(width: number, height: number, offset = 0): BgrxImage {
  const backing = Buffer.alloc(offset + width * height * 4);
  for (let i = 0; i < backing.length; i++) backing[i] = (i * 131 + 7) & 0xff;
  return { data: backing.subarray(offset), width, height, byteWidth: width * 4 };
}

/** What the copy means, pixel by pixel. */
function expected(img: BgrxImage, x: number, y: number, width: number, height: number): Buffer {
  const out = Buffer.alloc(width * height * 3);
  let o = 0;
  for (let row = y; row < y + height; row++) {
    for (let col = x; col < x + width; col++) {
      const at = row * img.byteWidth + col * 4;
      out[o++] = img.data[at + 2]!;
      out[o++] = img.data[at + 1]!;
      out[o++] = img.data[at]!;
    }
  }
  return out;
}

test('whole rows, four pixels at a time and the rest one by one: the same pixels as the definition', () => {
  for (const [w, h] of [
    [1280, 800],
    [7, 5],
    [3, 1],
    [1, 1],
    [9, 3],
  ] as const) {
    const img = image(w, h);
    assert.ok(bgrxToRgb(img).equals(expected(img, 0, 0, w, h)), `${w}x${h}`);
    // A band of whole rows below the top.
    if (h > 2) assert.ok(bgrxToRgb(img, { x: 0, y: 1, width: w, height: h - 2 }).equals(expected(img, 0, 1, w, h - 2)));
  }
});

test('a region, or a buffer that does not start on a word, takes the byte path to the same pixels', () => {
  const img = image(11, 6);
  assert.ok(bgrxToRgb(img, { x: 2, y: 1, width: 5, height: 4 }).equals(expected(img, 2, 1, 5, 4)));
  const unaligned = image(11, 6, 1);
  assert.ok(bgrxToRgb(unaligned).equals(expected(unaligned, 0, 0, 11, 6)));
});
