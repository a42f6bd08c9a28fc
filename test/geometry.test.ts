import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { fitSize, isInside, regionToDisplay, toDisplay, toScreenshot, visualTokens } from '../src/base/geometry.ts';

const API = { maxSidePx: 2000, maxVisualTokens: 4784 };

describe('screenshot geometry', () => {
  test('common displays', () => {
    assert.deepEqual(fitSize({ width: 1280, height: 800 }, API), { width: 1280, height: 800 });
    assert.deepEqual(fitSize({ width: 1920, height: 1080 }, API), { width: 1920, height: 1080 });
    assert.deepEqual(fitSize({ width: 2560, height: 1440 }, API), { width: 2000, height: 1125 });
    assert.deepEqual(fitSize({ width: 2560, height: 1440 }, { ...API, maxSidePx: 1024 }), { width: 1024, height: 576 });
  });

  test('the token budget binds before the side limit on large square displays', () => {
    const size = fitSize({ width: 3000, height: 3000 }, API);
    assert.ok(visualTokens(size) <= 4784, JSON.stringify(size));
    assert.ok(visualTokens({ width: size.width + 28, height: size.height + 28 }) > 4784, 'not needlessly small');
  });

  test('any display fits the limits, keeps its aspect ratio and is never upscaled', () => {
    fc.assert(
      fc.property(fc.integer({ min: 16, max: 8000 }), fc.integer({ min: 16, max: 8000 }), (width, height) => {
        const s = fitSize({ width, height }, API);
        assert.ok(s.width <= 2000 && s.height <= 2000 && visualTokens(s) <= 4784);
        assert.ok(s.width <= width && s.height <= height);
        const ratio = width / height;
        assert.ok(Math.abs(s.width / s.height - ratio) / ratio < 0.05 || s.width < 40 || s.height < 40);
      }),
    );
  });

  test('screenshot → display → screenshot returns the same pixel, and lands within the pixel', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 100, max: 6000 }),
        fc.integer({ min: 100, max: 6000 }),
        fc.double({ min: 0, max: 0.9999, noNaN: true }),
        fc.double({ min: 0, max: 0.9999, noNaN: true }),
        (width, height, fx, fy) => {
          const g = { display: { width, height }, screenshot: fitSize({ width, height }, API) };
          const p = { x: Math.floor(fx * g.screenshot.width), y: Math.floor(fy * g.screenshot.height) };
          const d = toDisplay(p, g);
          assert.ok(isInside(d, g.display));
          const centre = ((p.x + 0.5) * width) / g.screenshot.width - 0.5;
          assert.ok(Math.abs(d.x - centre) <= 0.5 + 1e-9);
          assert.deepEqual(toScreenshot(d, g), p);
        },
      ),
    );
  });

  test('a region maps to the display rectangle it covers', () => {
    const g = { display: { width: 2560, height: 1440 }, screenshot: { width: 2000, height: 1125 } };
    assert.deepEqual(regionToDisplay([0, 0, 2000, 1125], g), { x: 0, y: 0, width: 2560, height: 1440 });
    assert.deepEqual(regionToDisplay([100, 100, 200, 150], g), { x: 128, y: 128, width: 128, height: 64 });
  });
});
