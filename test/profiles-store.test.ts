/**
 * Named browser profiles (docs/PROTOCOL.md "Profiles"), the store half: a
 * real daemon with a key file, and real HTTP requests with its token (raw,
 * and through the client library). Profiles round-trip whole; on disk they
 * are sealed (0600 files in a 0700 folder, no cookie in clear); a changed
 * byte, another key, or another profile's file is refused and nothing of it
 * handed out; bounds refuse a write and leave the stored state as it was;
 * leases are exclusive read-write and shared read-only; retention removes a
 * profile not saved or used for too long; without a key every route answers
 * `profiles_off`. A real Chromium's `storageState({ indexedDB: true })` is
 * stored and restored into a new context. Only loopback is bound, and every
 * folder made here is removed.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, copyFile, mkdtemp, readFile, readdir, rm, stat, symlink, utimes, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { chromium, type Browser } from 'playwright';
import { ConfigError, resolveConfig } from '../src/base/config.ts';
import { createLogger } from '../src/base/log.ts';
import { startDaemon } from '../src/daemon.ts';
import type { ProfileList } from '../src/base/protocol.ts';
import type { StorageState } from '../src/base/storage-state.ts';
import { DeskbatchClient } from '../src/client/client.ts';
import { ProfileRefusedError } from '../src/client/profiles.ts';
import { ProfileRefusal, ProfileStore, type ProfileLease } from '../src/profiles/index.ts';
import {
  KEY_BYTES,
  SEAL_OVERHEAD,
  SealError,
  loadProfileKey,
  profileKey,
  seal,
  unseal,
} from '../src/profiles/sealed.ts';
import { FolderStorage } from '../src/profiles/storage.ts';
import { ensureBuilt } from '../testkit/build.ts';
import { CHROMIUM_PATH } from '../testkit/chromium.ts';
import { TEST_TOKEN, startTestDaemon, type TestDaemon } from '../testkit/daemon.ts';
import { rawRequest } from '../testkit/raw-http.ts';
import { within } from '../testkit/wait.ts';
import { startWebServer, type WebServer } from '../testkit/web.ts';

const KiB = 1024;
const DAY_MS = 86_400_000;
const LIMITS = { maxProfiles: 4, maxProfileBytes: 64 * KiB, maxAgeMs: 2 * DAY_MS };
/** A value that must never be found on disk in clear. */
const SECRET = `session-${randomBytes(12).toString('hex')}`;

/** A storage state as Playwright 1.65 returns it, with the fields its public type leaves out. */
function stateWith(marker: string, extra: Partial<StorageState> = {}): StorageState {
  return {
    cookies: [
      {
        name: 'sid',
        value: `${SECRET}-${marker}`,
        domain: 'app.example',
        path: '/',
        expires: -1,
        httpOnly: true,
        secure: true,
        sameSite: 'Lax',
        _crHasCrossSiteAncestor: false,
      },
      {
        name: 'chip',
        value: 'c1',
        domain: 'embed.example',
        path: '/',
        expires: 1_900_000_000.5,
        httpOnly: false,
        secure: true,
        sameSite: 'None',
        partitionKey: 'https://top.example',
      },
    ],
    origins: [
      {
        origin: 'https://app.example',
        localStorage: [{ name: 'token', value: `ls-${SECRET}-${marker}` }],
        indexedDB: [
          {
            name: 'auth',
            version: 1,
            stores: [
              {
                name: 'kv',
                autoIncrement: false,
                records: [{ key: 'user', value: { id: 7 } }],
                indexes: [],
              },
            ],
          },
        ],
      },
    ],
    ...extra,
  };
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: unknown;
}

/** One request to the daemon's port, as a harness without the client library sends it (`path` sent as is). */
async function http(
  d: TestDaemon,
  method: string,
  path: string,
  options: { body?: string | Buffer; headers?: Record<string, string>; token?: string | null } = {},
): Promise<Answer> {
  const token = options.token === undefined ? TEST_TOKEN : options.token;
  const res = await rawRequest(Number(new URL(d.url).port), path, {
    method,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...options.headers },
    ...(options.body !== undefined ? { body: options.body } : {}),
  });
  let json: unknown;
  try {
    json = JSON.parse(res.body);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text: res.body, json };
}

const put = (d: TestDaemon, name: string, state: unknown, headers: Record<string, string> = {}): Promise<Answer> =>
  http(d, 'PUT', `/v1/profiles/${name}`, {
    body: JSON.stringify(state),
    headers: { 'content-type': 'application/json', ...headers },
  });

/** Asserts a refusal: its status and code, a message, and nothing of any profile in it. */
function refused(a: Answer, status: number, code: string, message?: RegExp): { message: string; holder?: string } {
  assert.equal(a.status, status, a.text);
  const body = a.json as { error: string; message: string; holder?: string };
  assert.equal(body.error, code, a.text);
  assert.ok(body.message, a.text);
  if (message) assert.match(body.message, message);
  assert.deepEqual(Object.keys(body).sort(), body.holder ? ['error', 'holder', 'message'] : ['error', 'message']);
  assert.ok(!a.text.includes(SECRET), 'a refusal carries nothing of a profile');
  return body;
}

async function writeKey(dir: string, name: string, content: string | Buffer, mode = 0o600): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, content, { mode });
  await chmod(path, mode);
  return path;
}

/** Every file in the profiles folder. */
const filesIn = async (dir: string): Promise<string[]> => (await readdir(dir)).sort();

describe('profiles over HTTP, sealed on disk', () => {
  let tmp: string;
  let dir: string;
  let keyFile: string;
  let d: TestDaemon;

  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'deskbatch-profiles-test-'));
    dir = join(tmp, 'profiles');
    keyFile = await writeKey(tmp, 'key.hex', `${randomBytes(KEY_BYTES).toString('hex')}\n`);
    d = await startTestDaemon({ display: undefined, browser: 'off', profiles: { keyFile, dir, ...LIMITS } });
  });
  after(async () => {
    await d?.close();
    await rm(tmp, { recursive: true, force: true });
  });

  /** Deletes every profile, so each test starts from an empty store. */
  const empty = async (): Promise<void> => {
    for (const p of await d.daemon.profiles.list()) await d.daemon.profiles.delete(p.name);
  };

  test('import, export, list and delete: the state comes back as it went, Playwright fields and all', async () => {
    await empty();
    const state = stateWith('a');
    const created = await put(d, 'alice', state);
    assert.equal(created.status, 201, created.text);
    const stored = created.json as { name: string; bytes: number; created: boolean; updated_at: string };
    assert.equal(stored.name, 'alice');
    assert.equal(stored.created, true);
    assert.equal(stored.bytes, Buffer.byteLength(JSON.stringify(state)));
    assert.ok(!Number.isNaN(Date.parse(stored.updated_at)));

    const replaced = await put(d, 'alice', stateWith('b'));
    assert.equal(replaced.status, 200, replaced.text);
    assert.equal((replaced.json as { created: boolean }).created, false);

    const exported = await http(d, 'GET', '/v1/profiles/alice');
    assert.equal(exported.status, 200, exported.text);
    assert.equal(exported.headers['cache-control'], 'no-store');
    assert.equal(exported.headers['content-type'], 'application/json');
    assert.deepEqual(exported.json, stateWith('b'));

    assert.equal((await put(d, 'bob.work_2-x', stateWith('c'))).status, 201);
    const list = await http(d, 'GET', '/v1/profiles');
    assert.equal(list.status, 200, list.text);
    assert.equal(list.headers['cache-control'], 'no-store');
    const body = list.json as ProfileList;
    assert.deepEqual(
      body.profiles.map((p) => [p.name, p.bytes, p.held, p.readers]),
      [
        ['alice', Buffer.byteLength(JSON.stringify(stateWith('b'))), null, 0],
        ['bob.work_2-x', Buffer.byteLength(JSON.stringify(stateWith('c'))), null, 0],
      ],
    );
    for (const p of body.profiles) assert.ok(Math.abs(Date.parse(p.updated_at) - Date.now()) < 60_000, p.updated_at);
    assert.deepEqual(body.limits, { max_profiles: 4, max_profile_bytes: 64 * KiB, max_age_ms: 2 * DAY_MS });
    assert.ok(!list.text.includes(SECRET), 'the list carries no content');

    const removed = await http(d, 'DELETE', '/v1/profiles/alice');
    assert.equal(removed.status, 204, removed.text);
    refused(await http(d, 'GET', '/v1/profiles/alice'), 404, 'not_found');
    refused(await http(d, 'DELETE', '/v1/profiles/alice'), 404, 'not_found');
    assert.deepEqual(await filesIn(dir), ['bob.work_2-x.profile']);
  });

  test('on disk: the folder is 0700, each file 0600 and sealed, with no cookie or localStorage value in clear', async () => {
    await empty();
    assert.equal((await put(d, 'alice', stateWith('disk'))).status, 201);
    assert.equal((await stat(dir)).mode & 0o777, 0o700);
    assert.deepEqual(await filesIn(dir), ['alice.profile'], 'one file, and no temporary file left');
    const file = join(dir, 'alice.profile');
    assert.equal((await stat(file)).mode & 0o777, 0o600);
    const bytes = await readFile(file);
    assert.equal(bytes.subarray(0, 4).toString('latin1'), 'DBPF');
    assert.equal(bytes.length, Buffer.byteLength(JSON.stringify(stateWith('disk'))) + SEAL_OVERHEAD);
    for (const clear of [SECRET, 'app.example', 'localStorage', 'sid']) {
      assert.ok(!bytes.includes(Buffer.from(clear)), `"${clear}" is not on disk in clear`);
    }
  });

  test('a changed byte, a file copied to another name, or content that is no storage state: refused, nothing handed out', async () => {
    await empty();
    assert.equal((await put(d, 'alice', stateWith('t'))).status, 201);
    const file = join(dir, 'alice.profile');
    const good = await readFile(file);

    // Another profile's file under this name: it authenticates only under its own.
    await copyFile(file, join(dir, 'mallory.profile'));
    refused(await http(d, 'GET', '/v1/profiles/mallory'), 422, 'unreadable', /does not authenticate/);
    await assert.rejects(d.daemon.profiles.lease('mallory', 'read_only', 's_reader'), { code: 'unreadable' });
    await assert.rejects(d.daemon.profiles.lease('mallory', 'read_write', 's_writer'), { code: 'unreadable' });
    assert.equal((await http(d, 'GET', '/v1/profiles/alice')).status, 200, 'the original still opens');

    // One byte flipped, in the ciphertext, then in the tag.
    for (const at of [good.length >> 1, good.length - 1]) {
      const bad = Buffer.from(good);
      bad[at] = bad[at]! ^ 0x01;
      await writeFile(file, bad);
      refused(await http(d, 'GET', '/v1/profiles/alice'), 422, 'unreadable', /does not authenticate/);
      await assert.rejects(d.daemon.profiles.lease('alice', 'read_only', 's_reader'), (err: unknown) => {
        assert.ok(err instanceof ProfileRefusal);
        assert.equal(err.code, 'unreadable');
        assert.equal(err.status, 422);
        return true;
      });
    }
    // A read-write lease of an unreadable profile is refused too, and holds nothing.
    await assert.rejects(d.daemon.profiles.lease('alice', 'read_write', 's_writer'), { code: 'unreadable' });
    const list = (await http(d, 'GET', '/v1/profiles')).json as ProfileList;
    assert.deepEqual(
      list.profiles.map((p) => [p.name, p.held, p.readers]),
      [
        ['alice', null, 0],
        ['mallory', null, 0],
      ],
    );

    // Not a profile at all.
    await writeFile(file, Buffer.from('{"cookies":[],"origins":[]}'));
    refused(await http(d, 'GET', '/v1/profiles/alice'), 422, 'unreadable', /not a sealed profile/);

    // Sealed with this daemon's key and name, but its content is not a storage state.
    const key = await loadProfileKey(keyFile);
    const notState = Buffer.from(JSON.stringify({ cookies: [{ name: 'sid', value: SECRET }], origins: [] }));
    await writeFile(file, seal(key, 'alice', notState));
    refused(await http(d, 'GET', '/v1/profiles/alice'), 422, 'unreadable', /not a storage state.*cookies\.0\.domain/);
    await writeFile(file, seal(key, 'alice', Buffer.from('{"cookies":')));
    refused(await http(d, 'GET', '/v1/profiles/alice'), 422, 'unreadable', /not JSON/);

    // The good file back: it opens again.
    await writeFile(file, good);
    assert.deepEqual((await http(d, 'GET', '/v1/profiles/alice')).json, stateWith('t'));
  });

  test('a daemon with another key lists the profiles but opens none, saying the key differs', async () => {
    await empty();
    assert.equal((await put(d, 'alice', stateWith('k'))).status, 201);
    const otherKey = await writeKey(tmp, 'other.key', randomBytes(KEY_BYTES));
    const other = await startTestDaemon({
      display: undefined,
      browser: 'off',
      profiles: { keyFile: otherKey, dir, ...LIMITS },
    });
    try {
      const list = (await http(other, 'GET', '/v1/profiles')).json as ProfileList;
      assert.deepEqual(
        list.profiles.map((p) => p.name),
        ['alice'],
      );
      const answer = refused(await http(other, 'GET', '/v1/profiles/alice'), 422, 'unreadable', /another key/);
      assert.ok(answer.message.includes(d.daemon.profiles.keyId!), answer.message);
      assert.ok(answer.message.includes(other.daemon.profiles.keyId!), answer.message);
      assert.notEqual(d.daemon.profiles.keyId, other.daemon.profiles.keyId);
      await assert.rejects(other.daemon.profiles.lease('alice', 'read_only', 's_x'), { code: 'unreadable' });
    } finally {
      await other.close();
    }
    assert.deepEqual(
      (await http(d, 'GET', '/v1/profiles/alice')).json,
      stateWith('k'),
      'its own daemon still opens it',
    );
  });

  test('over the bytes bound: refused with the bound named, the stored state intact (import and save)', async () => {
    await empty();
    assert.equal((await put(d, 'alice', stateWith('small'))).status, 201);
    const big = stateWith('big', {
      origins: [{ origin: 'https://big.example', localStorage: [{ name: 'blob', value: 'x'.repeat(64 * KiB) }] }],
    });
    refused(await put(d, 'alice', big), 413, 'too_large', /65536.*--max-profile-bytes/);
    refused(await put(d, 'newcomer', big), 413, 'too_large');
    // Indentation is not counted: a state that fits, sent indented, is taken.
    const indented = JSON.stringify(stateWith('indented'), undefined, 8);
    assert.equal(
      (await http(d, 'PUT', '/v1/profiles/alice', { body: indented, headers: { 'content-type': 'application/json' } }))
        .status,
      200,
    );
    // A body past twice the bound is refused unread.
    refused(
      await http(d, 'PUT', '/v1/profiles/alice', {
        body: Buffer.alloc(128 * KiB + 1, 0x20),
        headers: { 'content-type': 'application/json' },
      }),
      413,
      'too_large',
    );
    assert.deepEqual((await http(d, 'GET', '/v1/profiles/alice')).json, stateWith('indented'));
    assert.deepEqual(await filesIn(dir), ['alice.profile'], 'nothing written for newcomer');

    const lease = await d.daemon.profiles.lease('alice', 'read_write', 's_big');
    try {
      await assert.rejects(lease.save(big), (err: unknown) => {
        assert.ok(err instanceof ProfileRefusal);
        assert.equal(err.code, 'too_large');
        assert.equal(err.status, 413);
        return true;
      });
      assert.deepEqual(lease.state, stateWith('indented'), 'the lease keeps the state it had');
    } finally {
      lease.release();
    }
    assert.deepEqual((await http(d, 'GET', '/v1/profiles/alice')).json, stateWith('indented'));
  });

  test('over the count: a new profile is refused, a stored one may still be replaced', async () => {
    await empty();
    for (const name of ['p1', 'p2', 'p3', 'p4']) assert.equal((await put(d, name, stateWith(name))).status, 201);
    refused(await put(d, 'p5', stateWith('p5')), 409, 'too_many', /4 profiles.*--max-profiles/);
    await assert.rejects(d.daemon.profiles.lease('p5', 'read_write', 's_new'), { code: 'too_many' });
    assert.equal((await put(d, 'p2', stateWith('p2b'))).status, 200);
    assert.deepEqual(
      (await filesIn(dir)).filter((f) => f.startsWith('p')),
      ['p1.profile', 'p2.profile', 'p3.profile', 'p4.profile'],
    );
    assert.deepEqual((await http(d, 'GET', '/v1/profiles/p2')).json, stateWith('p2b'));

    // A read-write lease taken while there was room: its first save is refused once the store is full.
    await http(d, 'DELETE', '/v1/profiles/p4');
    const lease = await d.daemon.profiles.lease('p5', 'read_write', 's_new');
    assert.equal((await put(d, 'p4', stateWith('p4'))).status, 201);
    await assert.rejects(lease.save(stateWith('p5')), { code: 'too_many' });
    lease.release();
    refused(await http(d, 'GET', '/v1/profiles/p5'), 404, 'not_found');
  });

  test('bad names are refused, and never reach a path', async () => {
    await empty();
    const long = `a${'b'.repeat(64)}`;
    for (const path of ['/v1/profiles/../x', '/v1/profiles/..%2Fx', '/v1/profiles/', `/v1/profiles/${long}`]) {
      for (const method of ['GET', 'DELETE']) refused(await http(d, method, path), 400, 'bad_name');
      refused(
        await http(d, 'PUT', path, {
          body: JSON.stringify(stateWith('n')),
          headers: { 'content-type': 'application/json' },
        }),
        400,
        'bad_name',
        /1-64 letters, digits/,
      );
    }
    for (const name of ['.hidden', '-x', 'a/b', 'a b', 'é', '', long, '..']) {
      await assert.rejects(d.daemon.profiles.lease(name, 'read_write', 's_1'), { code: 'bad_name' });
      await assert.rejects(d.daemon.profiles.import(name, stateWith('n')), { code: 'bad_name' });
    }
    // 64 characters is the longest name.
    assert.equal((await put(d, long.slice(0, 64), stateWith('n'))).status, 201);
    assert.deepEqual(await filesIn(dir), [`${long.slice(0, 64)}.profile`]);
    assert.ok(!(await readdir(tmp)).includes('x.profile'), 'nothing written beside the folder');
  });

  test('a body that is no storage state, or not JSON, or not application/json, is refused and nothing stored', async () => {
    await empty();
    const bad = { cookies: [{ ...stateWith('x').cookies[0], sameSite: 'lax' }], origins: [] };
    refused(
      await put(d, 'alice', bad),
      422,
      'bad_state',
      /cookies\.0\.sameSite: expected one of "Strict", "Lax", "None"/,
    );
    refused(await put(d, 'alice', { cookies: [] }), 422, 'bad_state', /origins: required/);
    const noStores = {
      cookies: [],
      origins: [{ origin: 'https://a.example', localStorage: [], indexedDB: [{ name: 'db' }] }],
    };
    refused(await put(d, 'alice', noStores), 422, 'bad_state', /origins\.0\.indexedDB\.0\.version: required/);
    refused(
      await http(d, 'PUT', '/v1/profiles/alice', {
        body: '{"cookies":',
        headers: { 'content-type': 'application/json' },
      }),
      422,
      'bad_state',
      /not JSON/,
    );
    refused(await put(d, 'alice', stateWith('x'), { 'content-type': 'text/plain' }), 415, 'bad_media_type');
    assert.deepEqual(await filesIn(dir), []);
    const head = await http(d, 'HEAD', '/v1/profiles/alice');
    assert.equal(head.status, 405);
  });

  test('without the token every route answers 401', async () => {
    await empty();
    assert.equal((await put(d, 'alice', stateWith('tok'))).status, 201);
    for (const token of [null, 'wrong-token-0123456789abcdef-0123456789']) {
      for (const [method, path] of [
        ['GET', '/v1/profiles'],
        ['GET', '/v1/profiles/alice'],
        ['PUT', '/v1/profiles/alice'],
        ['DELETE', '/v1/profiles/alice'],
      ] as const) {
        const a = await http(d, method, path, {
          token,
          body: JSON.stringify(stateWith('evil')),
          headers: { 'content-type': 'application/json' },
        });
        assert.equal(a.status, 401, `${method} ${path}`);
        assert.ok(!a.text.includes(SECRET));
      }
    }
    assert.deepEqual((await http(d, 'GET', '/v1/profiles/alice')).json, stateWith('tok'), 'nothing changed');
  });

  test('leases: one read-write at a time, naming its holder; read-only ones share and read their own snapshot', async () => {
    await empty();
    const store = d.daemon.profiles;
    assert.equal((await put(d, 'alice', stateWith('v1'))).status, 201);

    // Two read-write leases asked at once: exactly one gets it.
    const both = await Promise.allSettled([
      store.lease('alice', 'read_write', 's_one'),
      store.lease('alice', 'read_write', 's_two'),
    ]);
    const won = both.filter((r): r is PromiseFulfilledResult<ProfileLease> => r.status === 'fulfilled');
    assert.equal(won.length, 1);
    const writer = won[0]!.value;
    const loser = both.find((r) => r.status === 'rejected')!;
    const refusal = (loser as PromiseRejectedResult).reason as ProfileRefusal;
    assert.ok(refusal instanceof ProfileRefusal);
    assert.equal(refusal.code, 'held');
    assert.equal(refusal.status, 409);
    assert.equal(refusal.holder, writer.sessionId);
    assert.ok(refusal.message.includes(writer.sessionId), refusal.message);
    assert.deepEqual(writer.state, stateWith('v1'));
    assert.equal(writer.bytes, Buffer.byteLength(JSON.stringify(stateWith('v1'))));

    // While it is held: a reader shares; import and delete are refused, naming the holder.
    const reader = await store.lease('alice', 'read_only', 's_reader');
    assert.deepEqual(reader.state, stateWith('v1'));
    const listed = ((await http(d, 'GET', '/v1/profiles')).json as ProfileList).profiles[0]!;
    assert.deepEqual(listed.held, { session_id: writer.sessionId, mode: 'read_write' });
    assert.equal(listed.readers, 1);
    const putHeld = refused(await put(d, 'alice', stateWith('x')), 409, 'held');
    assert.equal(putHeld.holder, writer.sessionId);
    assert.equal(refused(await http(d, 'DELETE', '/v1/profiles/alice'), 409, 'held').holder, writer.sessionId);

    // The writer saves; the reader keeps the state it leased; a new reader reads the saved one.
    const saved = await writer.save(stateWith('v2'));
    assert.equal(saved.bytes, Buffer.byteLength(JSON.stringify(stateWith('v2'))));
    assert.ok(saved.ms >= 0);
    assert.deepEqual(writer.state, stateWith('v2'));
    assert.deepEqual(reader.state, stateWith('v1'));
    const reader2 = await store.lease('alice', 'read_only', 's_reader2');
    assert.deepEqual(reader2.state, stateWith('v2'));
    await assert.rejects(reader.save(stateWith('v3')), /read-only lease .* cannot save/);
    assert.deepEqual((await http(d, 'GET', '/v1/profiles/alice')).json, stateWith('v2'));

    // Released (twice: idempotent) without saving: the stored state stays; another session may now lease it.
    writer.release();
    writer.release();
    await assert.rejects(writer.save(stateWith('v3')), /released/);
    await store.sweep(); // every write asked before it has landed
    assert.deepEqual((await http(d, 'GET', '/v1/profiles/alice')).json, stateWith('v2'));
    const next = await store.lease('alice', 'read_write', 's_two');
    assert.deepEqual(next.state, stateWith('v2'));
    next.release();
    // Readers still hold it: delete is refused, and allowed once they let go.
    refused(await http(d, 'DELETE', '/v1/profiles/alice'), 409, 'held');
    reader.release();
    reader2.release();
    assert.equal((await http(d, 'DELETE', '/v1/profiles/alice')).status, 204);
  });

  test('a missing profile: read-only is refused, read-write starts empty and its first save creates it', async () => {
    await empty();
    const store = d.daemon.profiles;
    await assert.rejects(store.lease('fresh', 'read_only', 's_r'), (err: unknown) => {
      assert.ok(err instanceof ProfileRefusal);
      assert.equal(err.code, 'not_found');
      assert.equal(err.status, 404);
      return true;
    });
    const lease = await store.lease('fresh', 'read_write', 's_w');
    assert.equal(lease.state, undefined);
    assert.equal(lease.bytes, 0);
    assert.deepEqual(await filesIn(dir), [], 'nothing stored before the first save');
    // Released without a save: still nothing (a sweep waits for every write asked before it).
    lease.release();
    await store.sweep();
    refused(await http(d, 'GET', '/v1/profiles/fresh'), 404, 'not_found');
    const again = await store.lease('fresh', 'read_write', 's_w');
    await again.save(stateWith('first'));
    again.release();
    assert.deepEqual((await http(d, 'GET', '/v1/profiles/fresh')).json, stateWith('first'));
    await assert.rejects(
      (async () => {
        const l = await store.lease('fresh', 'read_write', 's_w2');
        try {
          await l.save({ cookies: 'none' } as unknown as StorageState);
        } finally {
          l.release();
        }
      })(),
      { code: 'bad_state' },
    );
    assert.deepEqual(
      (await http(d, 'GET', '/v1/profiles/fresh')).json,
      stateWith('first'),
      'a refused save changes nothing',
    );
  });

  test('retention: a profile neither saved nor leased for longer than --profile-max-age is removed; a held one is not', async () => {
    await empty();
    const store = d.daemon.profiles;
    for (const name of ['old', 'older-held', 'used', 'fresh'])
      assert.equal((await put(d, name, stateWith(name))).status, 201);
    // Held longer than the bound (its clock set back while held), and two last saved long ago.
    const held = await store.lease('older-held', 'read_only', 's_hold');
    const longAgo = new Date(Date.now() - 3 * DAY_MS);
    for (const name of ['old', 'older-held', 'used']) await utimes(join(dir, `${name}.profile`), longAgo, longAgo);
    // A lease is a use: it moves the retention's clock, at once (a daemon that dies holding it has no release).
    const use = await store.lease('used', 'read_only', 's_use');
    assert.ok(Date.now() - (await stat(join(dir, 'used.profile'))).mtimeMs < 60_000);
    use.release();
    assert.deepEqual(await store.sweep(), ['old']);
    assert.deepEqual(await filesIn(dir), ['fresh.profile', 'older-held.profile', 'used.profile']);
    // Released: it was in use until now, so it stays.
    held.release();
    assert.deepEqual(await store.sweep(), []);
    assert.deepEqual(await store.sweep(Date.now() + 3 * DAY_MS), ['fresh', 'older-held', 'used']);
    assert.deepEqual(await filesIn(dir), []);
    refused(await http(d, 'GET', '/v1/profiles/old'), 404, 'not_found');
  });

  test('the client library: profiles(), importProfile(), exportProfile(), deleteProfile(), ProfileRefusedError', async () => {
    await empty();
    const client = await DeskbatchClient.connect(d.url, { token: TEST_TOKEN, reconnect: false });
    try {
      const stored = await client.importProfile('carol', stateWith('client'));
      assert.deepEqual([stored.name, stored.created], ['carol', true]);
      assert.deepEqual(await client.exportProfile('carol'), stateWith('client'));
      assert.deepEqual(
        (await client.profiles()).map((p) => [p.name, p.held]),
        [['carol', null]],
      );
      const lease = await d.daemon.profiles.lease('carol', 'read_write', 's_client');
      await assert.rejects(client.importProfile('carol', stateWith('x')), (err: unknown) => {
        assert.ok(err instanceof ProfileRefusedError);
        assert.equal(err.code, 'held');
        assert.equal(err.status, 409);
        assert.equal(err.holder, 's_client');
        return true;
      });
      lease.release();
      await client.deleteProfile('carol');
      await assert.rejects(client.exportProfile('carol'), { name: 'ProfileRefusedError', code: 'not_found' });
      await assert.rejects(client.importProfile('../x', stateWith('x')), { code: 'bad_name', status: 400 });
    } finally {
      await client.close();
    }
  });

  test("the daemon's log names profiles and sizes, never a profile's content or the key", async () => {
    await empty();
    assert.equal((await put(d, 'logged', stateWith('log'))).status, 201);
    (await d.daemon.profiles.lease('logged', 'read_only', 's_log')).release();
    refused(await put(d, 'logged', stateWith('log', { cookies: 'none' } as never)), 422, 'bad_state');
    const key = (await readFile(keyFile, 'utf8')).trim();
    const lines = (await readFile(d.logFile, 'utf8')).split('\n').filter(Boolean);
    const events = lines.map((l) => JSON.parse(l) as { msg: string; name?: string; bytes?: number });
    const imported = events.find((e) => e.msg === 'profile imported' && e.name === 'logged');
    assert.equal(imported?.bytes, Buffer.byteLength(JSON.stringify(stateWith('log'))));
    assert.ok(events.some((e) => e.msg === 'profile leased' && e.name === 'logged'));
    assert.ok(events.some((e) => e.msg === 'profile refused'));
    assert.ok(events.some((e) => e.msg === 'profiles: kept sealed in ' + dir));
    for (const line of lines) {
      assert.ok(!line.includes(SECRET), `a profile's content in the log: ${line.slice(0, 200)}`);
      assert.ok(!line.includes(key), 'the key in the log');
    }
  });

  test('time to seal and write, and to read and open, a 10 KiB and a 1 MiB state (measured, not bounded)', async (t) => {
    // This daemon's bound is 64 KiB: a store of the test's own, over a folder of its own, with the default bound.
    const timingDir = join(tmp, 'timing');
    const storage = await FolderStorage.open(timingDir);
    const key = await loadProfileKey(keyFile);
    const big = await ProfileStore.open({
      storage,
      key,
      limits: { maxProfiles: 10, maxProfileBytes: 8 * 1024 * KiB, maxAgeMs: DAY_MS },
    });
    const median = (xs: number[]): string => [...xs].sort((a, b) => a - b)[xs.length >> 1]!.toFixed(1);
    const timed = async (f: () => Promise<unknown>, into: number[]): Promise<void> => {
      const t0 = performance.now();
      await f();
      into.push(performance.now() - t0);
    };
    try {
      for (const [label, size] of [
        ['10 KiB', 10 * KiB],
        ['1 MiB', 1024 * KiB],
      ] as const) {
        const state = stateWith(label, {
          origins: [{ origin: 'https://x.example', localStorage: [{ name: 'v', value: 'y'.repeat(size) }] }],
        });
        const json = Buffer.from(JSON.stringify(state));
        const sealWrite: number[] = [];
        const readOpen: number[] = [];
        const imports: number[] = [];
        const exports: number[] = [];
        for (let i = 0; i < 9; i++) {
          await timed(() => storage.write('raw', seal(key, 'raw', json)), sealWrite);
          await timed(async () => unseal(key, 'raw', (await storage.read('raw'))!), readOpen);
          await timed(() => big.import('timed', state), imports);
          await timed(() => big.export('timed'), exports);
        }
        t.diagnostic(
          `${label} (${json.length} bytes of JSON), median of 9: seal+write(fsync, rename) ${median(sealWrite)} ms, ` +
            `read+open ${median(readOpen)} ms; the store's import (check, serialise, seal, write) ${median(imports)} ms, ` +
            `export (read, open, parse, check) ${median(exports)} ms`,
        );
      }
    } finally {
      big.close();
      await rm(timingDir, { recursive: true, force: true });
    }
  });
});

describe('profiles off, and key files refused at start', () => {
  let tmp: string;
  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'deskbatch-profiles-key-'));
  });
  after(() => rm(tmp, { recursive: true, force: true }));

  test('without --profile-key every route answers 404 profiles_off, a lease is refused, and no folder is made', async () => {
    const dir = join(tmp, 'never-made');
    const d = await startTestDaemon({ display: undefined, browser: 'off', profiles: { dir } });
    try {
      refused(await http(d, 'GET', '/v1/profiles'), 404, 'profiles_off', /--profile-key/);
      refused(await http(d, 'GET', '/v1/profiles/alice'), 404, 'profiles_off');
      refused(await put(d, 'alice', stateWith('off')), 404, 'profiles_off');
      refused(await http(d, 'DELETE', '/v1/profiles/alice'), 404, 'profiles_off');
      // Off is said before a name is looked at.
      refused(await http(d, 'GET', '/v1/profiles/../x'), 404, 'profiles_off');
      assert.equal(d.daemon.profiles.enabled, false);
      await assert.rejects(d.daemon.profiles.lease('alice', 'read_write', 's_1'), (err: unknown) => {
        assert.ok(err instanceof ProfileRefusal);
        assert.equal(err.code, 'profiles_off');
        assert.equal(err.status, 404);
        return true;
      });
      assert.deepEqual(await d.daemon.profiles.sweep(), []);
      await assert.rejects(stat(dir), { code: 'ENOENT' });
    } finally {
      await d.close();
    }
  });

  test('a key file readable by others (also through a link), of the wrong length, missing or a folder: the daemon does not start, and says why', async () => {
    const dir = join(tmp, 'profiles');
    // startDaemon itself: the refusal comes before anything is started, so there is nothing to close; a daemon
    // that starts all the same is closed, and fails the test.
    const start = async (keyFile: string): Promise<void> => {
      const config = resolveConfig({
        port: 0,
        token: TEST_TOKEN,
        tokenConfigured: true,
        browser: 'off',
        profiles: { keyFile, dir },
      });
      const daemon = await startDaemon(config, createLogger('silent'));
      await daemon.close();
      throw new Error(`the daemon started with the key file ${keyFile}`);
    };
    const good = randomBytes(KEY_BYTES).toString('hex');
    for (const [mode, shown] of [
      [0o640, '0640'],
      [0o604, '0604'],
      [0o620, '0620'],
    ] as const) {
      const path = await writeKey(tmp, `open-${shown}`, good, mode);
      await assert.rejects(start(path), (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.match(err.message, new RegExp(`--profile-key .*: its mode is ${shown}: group and others may not`));
        assert.ok(!err.message.includes(good));
        return true;
      });
    }
    for (const content of [randomBytes(31), randomBytes(33), 'ab'.repeat(31), 'not a key', '']) {
      const path = await writeKey(tmp, 'short', content);
      await assert.rejects(start(path), /--profile-key .*which is not a key: give 32 bytes raw, 64 hex/);
    }
    await assert.rejects(start(join(tmp, 'missing')), /--profile-key .*missing: cannot read it \(ENOENT\)/);
    // A link (as a mounted secret's file often is) is followed, and the file it leads to is the one checked.
    await symlink(await writeKey(tmp, 'shared', good, 0o644), join(tmp, 'link-open'));
    await assert.rejects(start(join(tmp, 'link-open')), /link-open: its mode is 0644/);
    await assert.rejects(start(tmp), /is not a regular file/);
    await assert.rejects(stat(dir), { code: 'ENOENT' }, 'no folder made for a refused key');
  });

  test('deskbatch serve with a bad key file exits 2 with the reason', async () => {
    await ensureBuilt();
    const path = await writeKey(tmp, 'serve-key', randomBytes(KEY_BYTES), 0o644);
    const child = spawn(
      process.execPath,
      ['bin/deskbatch.js', 'serve', '--port', '0', '--browser', 'off', '--profile-key', path],
      { env: { ...process.env, DESKBATCH_TOKEN: 'a'.repeat(40), DISPLAY: '' }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let err = '';
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const code = await within(new Promise((resolve) => child.once('exit', resolve)), 'serve to refuse the key', 60_000);
    assert.equal(code, 2, err);
    assert.match(err, /deskbatch: --profile-key .*serve-key: its mode is 0644/);
    const bad = spawn(process.execPath, ['bin/deskbatch.js', 'serve', '--profile-max-age', '30 days'], {
      env: { ...process.env, DESKBATCH_TOKEN: 'a'.repeat(40) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err2 = '';
    bad.stderr.on('data', (c: Buffer) => (err2 += c.toString()));
    assert.equal(
      await within(new Promise((resolve) => bad.once('exit', resolve)), 'serve to refuse the age', 60_000),
      2,
    );
    assert.match(err2, /--profile-max-age takes a duration such as 30d/);
  });
});

describe('sealed files', () => {
  let tmp: string;
  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'deskbatch-sealed-'));
  });
  after(() => rm(tmp, { recursive: true, force: true }));

  test('the three key forms give the same key; trailing newlines are fine', async () => {
    const raw = randomBytes(KEY_BYTES);
    const ids = new Set<string>();
    for (const [name, content] of [
      ['raw', raw],
      ['hex', `${raw.toString('hex')}\n`],
      ['HEX', raw.toString('hex').toUpperCase()],
      ['b64', `${raw.toString('base64')}\r\n`],
      ['b64url', raw.toString('base64url')],
    ] as const) {
      ids.add((await loadProfileKey(await writeKey(tmp, name, content, 0o400))).id);
    }
    assert.equal(ids.size, 1);
    assert.equal([...ids][0], profileKey(raw).id);
    // Through a link (a Kubernetes secret's file is one): the file it leads to is read.
    await symlink(join(tmp, 'hex'), join(tmp, 'via-link'));
    assert.equal((await loadProfileKey(join(tmp, 'via-link'))).id, profileKey(raw).id);
    assert.match([...ids][0]!, /^[0-9a-f]{16}$/);
  });

  test('a sealed file opens only with its key, under its name, unchanged', () => {
    const key = profileKey(randomBytes(KEY_BYTES));
    const plain = Buffer.from(JSON.stringify(stateWith('unit')));
    const sealed = seal(key, 'alice', plain);
    assert.equal(sealed.length, plain.length + SEAL_OVERHEAD);
    assert.deepEqual(unseal(key, 'alice', sealed), plain);
    assert.notDeepEqual(seal(key, 'alice', plain).subarray(13, 25), sealed.subarray(13, 25), 'a fresh IV each time');
    const reason = (f: () => unknown): string => {
      try {
        f();
      } catch (err) {
        assert.ok(err instanceof SealError);
        assert.ok(!err.message.includes(SECRET));
        return err.reason;
      }
      return 'opened';
    };
    assert.equal(
      reason(() => unseal(key, 'alicf', sealed)),
      'damaged',
    );
    assert.equal(
      reason(() => unseal(profileKey(randomBytes(KEY_BYTES)), 'alice', sealed)),
      'other_key',
    );
    for (let at = 0; at < sealed.length; at += 7) {
      const bad = Buffer.from(sealed);
      bad[at] = bad[at]! ^ 0x80;
      assert.notEqual(
        reason(() => unseal(key, 'alice', bad)),
        'opened',
        `byte ${at} changed`,
      );
    }
    const v2 = Buffer.from(sealed);
    v2[4] = 2;
    assert.equal(
      reason(() => unseal(key, 'alice', v2)),
      'version',
    );
    assert.equal(
      reason(() => unseal(key, 'alice', sealed.subarray(0, 20))),
      'not_sealed',
    );
  });

  test('FolderStorage: a write is whole or not at all, temporary files of dead writers are swept at open', async () => {
    const dir = join(tmp, 'store');
    const storage = await FolderStorage.open(dir);
    await storage.write('a', Buffer.from('one'));
    await storage.write('a', Buffer.from('two'));
    assert.deepEqual(await storage.read('a'), Buffer.from('two'));
    assert.equal(await storage.read('b'), undefined);
    assert.equal(await storage.remove('b'), false);
    await assert.rejects(storage.read('../a'), /not a profile name/);
    // A dead writer's temporary file (a pid that cannot run), another host's fresh one, another host's stale one.
    const dead = join(dir, `.${hostname().replace(/[^A-Za-z0-9-]/g, '-')}.999999999.AAAAAAAAAAAA.tmp`);
    const live = join(dir, '.other-host.12.BBBBBBBBBBBB.tmp');
    const stale = join(dir, '.other-host.13.CCCCCCCCCCCC.tmp');
    for (const f of [dead, live, stale]) await writeFile(f, 'partial');
    const hourAgo = new Date(Date.now() - 2 * 3_600_000);
    await utimes(stale, hourAgo, hourAgo);
    await chmod(dir, 0o755);
    const reopened = await FolderStorage.open(dir);
    assert.equal((await stat(dir)).mode & 0o777, 0o700, 'the folder is made private again');
    assert.deepEqual(await filesIn(dir), ['.other-host.12.BBBBBBBBBBBB.tmp', 'a.profile']);
    assert.deepEqual(
      (await reopened.list()).map((p) => [p.name, p.bytes]),
      [['a', 3]],
    );
  });
});

describe('a real browser profile: Chromium storageState({ indexedDB: true }) stored, and restored into a new context', () => {
  let tmp: string;
  let d: TestDaemon;
  let web: WebServer;
  let browser: Browser;
  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'deskbatch-profiles-pw-'));
    const keyFile = await writeKey(tmp, 'key', randomBytes(KEY_BYTES).toString('base64'));
    d = await startTestDaemon({
      display: undefined,
      browser: 'off',
      profiles: { keyFile, dir: join(tmp, 'profiles') },
    });
    web = await startWebServer();
    web.route('/login', {
      headers: { 'set-cookie': `sid=${SECRET}; HttpOnly; Path=/; SameSite=Lax` },
      body: '<!doctype html><title>in</title>',
    });
    web.route('/app', '<!doctype html><title>app</title>');
    browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true });
  });
  after(async () => {
    await browser?.close();
    await web?.close();
    await d?.close();
    await rm(tmp, { recursive: true, force: true });
  });

  test('cookies, localStorage and IndexedDB come back in a new context', async () => {
    const first = await browser.newContext();
    const page = await first.newPage();
    await page.goto(`${web.origin}/login`);
    // Strings, not functions: they run in the page, whose globals (document, indexedDB) this file's types lack.
    await page.evaluate(`(async () => {
      document.cookie = 'pref=dark; path=/; max-age=86400';
      localStorage.setItem('token', 'ls-${SECRET}');
      await new Promise((resolve, reject) => {
        const open = indexedDB.open('auth', 3);
        open.onupgradeneeded = () => {
          const store = open.result.createObjectStore('kv', { keyPath: 'id' });
          store.createIndex('byUser', 'user', { unique: false });
        };
        open.onsuccess = () => {
          const tx = open.result.transaction('kv', 'readwrite');
          tx.objectStore('kv').put({ id: 'me', user: 7, at: new Date(0), bytes: new Uint8Array([1, 2, 3]) });
          tx.oncomplete = () => resolve();
          tx.onerror = () => reject(tx.error);
        };
        open.onerror = () => reject(open.error);
      });
    })()`);
    const state = await first.storageState({ indexedDB: true });
    await first.close();
    assert.ok(state.cookies.some((c) => c.name === 'sid' && c.httpOnly));

    const client = await DeskbatchClient.connect(d.url, { token: TEST_TOKEN, reconnect: false });
    try {
      await client.importProfile('real', state);
      const back = await client.exportProfile('real');
      assert.deepEqual(back, JSON.parse(JSON.stringify(state)), 'what Playwright returned, whole');
      const restored = await browser.newContext({ storageState: back });
      try {
        const cookies = await restored.cookies(web.origin);
        assert.deepEqual(cookies.map((c) => [c.name, c.value, c.httpOnly]).sort(), [
          ['pref', 'dark', false],
          ['sid', SECRET, true],
        ]);
        const again = await restored.newPage();
        await again.goto(`${web.origin}/app`);
        const seen = await again.evaluate(`new Promise((resolve, reject) => {
          const open = indexedDB.open('auth');
          open.onsuccess = () => {
            const get = open.result.transaction('kv').objectStore('kv').get('me');
            get.onsuccess = () =>
              resolve({
                token: localStorage.getItem('token'),
                version: open.result.version,
                user: get.result.user,
                at: get.result.at instanceof Date ? get.result.at.getTime() : 'not a date',
                bytes: Array.from(get.result.bytes),
                index: [...open.result.transaction('kv').objectStore('kv').indexNames],
              });
            get.onerror = () => reject(get.error);
          };
          open.onerror = () => reject(open.error);
        })`);
        assert.deepEqual(seen, {
          token: `ls-${SECRET}`,
          version: 3,
          user: 7,
          at: 0,
          bytes: [1, 2, 3],
          index: ['byUser'],
        });
      } finally {
        await restored.close();
      }
    } finally {
      await client.close();
    }
  });
});
