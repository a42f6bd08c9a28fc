import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { test } from 'node:test';
import { silentLogger } from '../src/base/log.ts';
import { ScreenshotStore, sanitizeId } from '../src/base/screenshot-store.ts';

const image = (bytes: number) => ({
  data: Buffer.alloc(bytes, 7),
  mediaType: 'image/png' as const,
  width: 10,
  height: 10,
});

test('ids cannot escape the screenshots directory', async () => {
  const root = await mkdtemp(join(tmpdir(), 'deskbatch-store-'));
  try {
    const store = new ScreenshotStore(root, { maxFiles: 10, maxBytes: 1e6 }, silentLogger);
    await store.init();
    for (const evil of ['../../etc/passwd', '..', '.', '/abs/path', 'a/../../b', 'nul\u0000byte', '']) {
      const file = await store.write(evil, evil, evil, image(5));
      assert.ok(resolve(root, file.path).startsWith(resolve(root) + '/'), file.path);
      assert.match(file.path, /^[A-Za-z0-9_-]+\/[A-Za-z0-9_-]+_[A-Za-z0-9_-]+_\w+\.png$/);
    }
    assert.equal(sanitizeId('..'), '__');
    assert.equal(sanitizeId(''), '_');
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});

test('retention keeps the newest files within the count and byte bounds, across restarts', async () => {
  const root = await mkdtemp(join(tmpdir(), 'deskbatch-store-'));
  try {
    const store = new ScreenshotStore(root, { maxFiles: 3, maxBytes: 250 }, silentLogger);
    await store.init();
    const paths = [];
    for (let i = 0; i < 5; i++) paths.push((await store.write('s', `b${i}`, 't', image(100))).path);
    assert.deepEqual(store.usage, { files: 2, bytes: 200 });
    assert.deepEqual(
      (await readdir(join(root, 's'))).sort(),
      paths
        .slice(3)
        .map((p) => p.split('/')[1])
        .sort(),
    );
    const again = new ScreenshotStore(root, { maxFiles: 1, maxBytes: 1e6 }, silentLogger);
    await again.init();
    assert.deepEqual(again.usage, { files: 1, bytes: 100 });
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});
