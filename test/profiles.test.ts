/**
 * Named browser profiles in use (docs/PROTOCOL.md "Profiles"), end to end: a
 * real daemon and real (headless) Chromium, and a local site with a cookie
 * login. Session 1 logs in (the site sets an HttpOnly session cookie, a
 * localStorage item and an IndexedDB record) and ends; session 2 names the
 * same profile and `get_page_text` shows the signed-in page with all three.
 * A read-only session never changes the stored profile; a second read-write
 * session is refused, naming the holder, and gets it once the first ends;
 * two profiles never see each other's cookies; a profile that cannot be read
 * (tampered, another key) is refused and loads nothing; a state over the
 * byte bound is refused and the stored one stays.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { BatchResult, ErrorMessage, ProfileRequest, Welcome } from '../src/base/protocol.ts';
import { assertApiValid } from '../testkit/api-rules.ts';
import { TEST_TOKEN, startTestDaemon, type TestClient, type TestDaemon } from '../testkit/daemon.ts';
import { rawRequest, type RawResponse } from '../testkit/raw-http.ts';
import { until, within } from '../testkit/wait.ts';
import { browserUse as use } from '../testkit/web.ts';

/** The site: /login signs in (cookie, localStorage, IndexedDB), /account says who is signed in, as the server and the page see it. */
interface Site {
  origin: string;
  close(): Promise<void>;
}

const LOGIN_PAGE = `<!doctype html><meta charset=utf-8><title>login</title><p id=o>signing in</p><script>
localStorage.setItem('token', 'ls-' + new URLSearchParams(location.search).get('user'));
const r = indexedDB.open('app', 1);
r.onupgradeneeded = () => r.result.createObjectStore('kv');
r.onsuccess = () => {
  const tx = r.result.transaction('kv', 'readwrite');
  tx.objectStore('kv').put({ user: new URLSearchParams(location.search).get('user') }, 'me');
  tx.oncomplete = () => { document.getElementById('o').textContent = 'signed in'; };
};
</script>`;

function accountPage(user: string | undefined): string {
  return `<!doctype html><meta charset=utf-8><title>account</title>
<p>server: ${user ? `signed in as ${user}` : 'signed out'}</p><p id=ls></p><p id=idb>idb: pending</p><script>
document.getElementById('ls').textContent = 'local: ' + (localStorage.getItem('token') || 'none');
const r = indexedDB.open('app', 1);
r.onupgradeneeded = () => r.result.createObjectStore('kv');
r.onsuccess = () => {
  const g = r.result.transaction('kv').objectStore('kv').get('me');
  g.onsuccess = () => { document.getElementById('idb').textContent = 'idb: ' + (g.result ? g.result.user : 'none'); };
};
</script>`;
}

async function startSite(): Promise<Site> {
  const sessions = new Map<string, string>();
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const sid = /(?:^|;\s*)sid=([^;]+)/.exec(req.headers.cookie ?? '')?.[1];
    if (url.pathname === '/login') {
      const id = randomBytes(8).toString('hex');
      sessions.set(id, url.searchParams.get('user') ?? 'nobody');
      res.writeHead(200, {
        'content-type': 'text/html; charset=utf-8',
        'set-cookie': `sid=${id}; HttpOnly; Path=/; Max-Age=3600; SameSite=Lax`,
      });
      return void res.end(LOGIN_PAGE);
    }
    if (url.pathname === '/big') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      return void res.end(
        `<!doctype html><title>big</title><p>big</p><script>localStorage.setItem('big', 'x'.repeat(100 * 1024));</script>`,
      );
    }
    if (url.pathname === '/account') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      return void res.end(accountPage(sid ? sessions.get(sid) : undefined));
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** The text of a result's text blocks. */
function textOf(result: BatchResult): string {
  return result.tool_results
    .flatMap((r) => (Array.isArray(r.content) ? r.content : []))
    .map((b) => (b.type === 'text' ? b.text : ''))
    .join('\n');
}

/** One request to the daemon's HTTP port with the token. */
function raw(d: TestDaemon, method: string, path: string, body?: string): Promise<RawResponse> {
  return rawRequest(Number(new URL(d.url).port), path, {
    method,
    headers: {
      authorization: `Bearer ${TEST_TOKEN}`,
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { body } : {}),
  });
}

describe('named browser profiles', { timeout: 300_000 }, () => {
  let site: Site;
  let d: TestDaemon;
  let dataDir: string;
  let keyFile: string;
  let n = 0;

  before(async () => {
    site = await startSite();
    dataDir = await mkdtemp(join(tmpdir(), 'deskbatch-profiles-test-'));
    keyFile = join(dataDir, 'profile.key');
    await writeFile(keyFile, randomBytes(32).toString('hex'), { mode: 0o600 });
    d = await startTestDaemon({
      display: undefined,
      browser: 'headless',
      // A closed client's session ends (and saves its profile) soon, not after the usual resume window.
      sessionGraceMs: 200,
      profiles: { keyFile, dir: join(dataDir, 'profiles'), maxProfiles: 10, maxProfileBytes: 64 * 1024 },
    } as Parameters<typeof startTestDaemon>[0]);
  });
  after(async () => {
    await d?.close();
    await site?.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  /** A new session naming `profile`: its client and welcome, or the error that refused it. */
  async function open(
    profile: ProfileRequest,
  ): Promise<{ client: TestClient; welcome?: Welcome; error?: ErrorMessage }> {
    const client = await d.connect();
    client.send({ type: 'hello', client: 'profiles-test', profile });
    const answer = await client.next((m): m is Welcome | ErrorMessage => m.type === 'welcome' || m.type === 'error');
    return answer.type === 'welcome' ? { client, welcome: answer } : { client, error: answer };
  }

  /** Ends a session and waits until it closed: its profile saved (read-write) and its lease given back. */
  async function end(client: TestClient, welcome: Welcome): Promise<void> {
    const closed = new Promise<void>((resolve) => {
      const stop = d.daemon.activity.subscribe((a) => {
        if (a.type === 'session_closed' && a.session === welcome.session_id) {
          stop();
          resolve();
        }
      });
    });
    client.close();
    await within(closed, `session ${welcome.session_id} to close`, 60_000);
  }

  async function pageText(client: TestClient, path: string): Promise<string> {
    const id = `b${n++}`;
    const { result } = await client.batch(id, [use('navigate', { url: `${site.origin}${path}` })]);
    assert.equal(result.tool_results[0]?.is_error, undefined, textOf(result));
    // The page reads IndexedDB after its load: wait for its answer in the page's text.
    return until(`${path}'s text to settle`, async () => {
      const read = [use('get_page_text')];
      const { result: r } = await client.batch(`b${n++}`, read);
      assertApiValid(read, r);
      const text = textOf(r);
      return !text.includes('idb: pending') && text;
    });
  }

  async function login(client: TestClient, user: string): Promise<void> {
    const { result } = await client.batch(`b${n++}`, [use('navigate', { url: `${site.origin}/login?user=${user}` })]);
    assert.equal(result.tool_results[0]?.is_error, undefined, textOf(result));
    await until(`the login of ${user} to finish`, async () => {
      const { result: r } = await client.batch(`b${n++}`, [use('get_page_text')]);
      return textOf(r).includes('signed in');
    });
  }

  test('a login survives the session: cookie, localStorage and IndexedDB come back in the next one', async () => {
    const first = await open({ name: 'shop', mode: 'read_write' });
    assert.ok(first.welcome, JSON.stringify(first.error));
    assert.deepEqual(first.welcome.profile, { name: 'shop', mode: 'read_write', bytes: 0, existed: false });
    await login(first.client, 'alice');
    await end(first.client, first.welcome);

    const second = await open({ name: 'shop', mode: 'read_write' });
    assert.ok(second.welcome, JSON.stringify(second.error));
    assert.equal(second.welcome.profile?.existed, true);
    assert.ok(second.welcome.profile!.bytes > 0);
    const text = await pageText(second.client, '/account');
    assert.match(text, /server: signed in as alice/);
    assert.match(text, /local: ls-alice/);
    assert.match(text, /idb: alice/);
    await end(second.client, second.welcome);

    // The harness reads what the profile holds (the export), and the file on disk holds none of it in clear.
    const exported = await raw(d, 'GET', '/v1/profiles/shop');
    assert.equal(exported.status, 200, exported.body);
    const state = JSON.parse(exported.body) as { cookies: { name: string; value: string }[] };
    const sid = state.cookies.find((c) => c.name === 'sid');
    assert.ok(sid, exported.body);
    const files = await readdir(join(dataDir, 'profiles'));
    for (const f of files) {
      const bytes = await readFile(join(dataDir, 'profiles', f));
      assert.ok(!bytes.includes(sid.value), `${f} holds the session cookie in clear`);
      assert.ok(!bytes.includes('ls-alice'), `${f} holds the localStorage item in clear`);
    }
  });
  test('a read-only session starts logged in and never changes the stored profile', async () => {
    const before = await raw(d, 'GET', '/v1/profiles/shop');
    assert.equal(before.status, 200, before.body);
    const reader = await open({ name: 'shop', mode: 'read_only' });
    assert.ok(reader.welcome, JSON.stringify(reader.error));
    assert.equal(reader.welcome.profile?.mode, 'read_only');
    assert.match(await pageText(reader.client, '/account'), /server: signed in as alice/);
    // It logs in as someone else, asks for a save (refused) and ends: the stored state is the one before.
    await login(reader.client, 'mallory');
    const save = await raw(d, 'POST', `/v1/sessions/${reader.welcome.session_id}/profile`);
    assert.equal(save.status, 409, save.body);
    assert.equal((JSON.parse(save.body) as { error: string }).error, 'read_only');
    await end(reader.client, reader.welcome);
    const after = await raw(d, 'GET', '/v1/profiles/shop');
    assert.deepEqual(JSON.parse(after.body), JSON.parse(before.body));
    // A read-only session of a profile never stored is refused.
    const missing = await open({ name: 'nothing-here', mode: 'read_only' });
    assert.equal(missing.error?.code, 'profile_unavailable', JSON.stringify(missing));
    missing.client.close();
  });

  test('one read-write session at a time: a second is refused naming the holder, and gets it after', async () => {
    const holder = await open({ name: 'shop', mode: 'read_write' });
    assert.ok(holder.welcome, JSON.stringify(holder.error));
    const second = await open({ name: 'shop', mode: 'read_write' });
    assert.equal(second.error?.code, 'profile_held', JSON.stringify(second));
    assert.ok(second.error.message.includes(holder.welcome.session_id), second.error.message);
    second.client.close();
    // Read-only sessions may share it meanwhile.
    const reader = await open({ name: 'shop', mode: 'read_only' });
    assert.ok(reader.welcome, JSON.stringify(reader.error));
    await end(reader.client, reader.welcome);
    await end(holder.client, holder.welcome);
    const third = await open({ name: 'shop', mode: 'read_write' });
    assert.ok(third.welcome, JSON.stringify(third.error));
    await end(third.client, third.welcome);
  });

  test('two profiles never see each other: cookies, localStorage, IndexedDB', async () => {
    const bob = await open({ name: 'bob', mode: 'read_write' });
    assert.ok(bob.welcome, JSON.stringify(bob.error));
    // Beside it, at the same time, the shop profile's session, in the same browser.
    const alice = await open({ name: 'shop', mode: 'read_only' });
    assert.ok(alice.welcome, JSON.stringify(alice.error));
    const bobText = await pageText(bob.client, '/account');
    assert.match(bobText, /server: signed out/);
    assert.match(bobText, /local: none/);
    assert.match(bobText, /idb: none/);
    await login(bob.client, 'bob');
    assert.match(
      await pageText(alice.client, '/account'),
      /server: signed in as alice[\s\S]*local: ls-alice[\s\S]*idb: alice/,
    );
    // An explicit save, then the end: bob's profile holds bob's login, shop's still alice's.
    const saved = await raw(d, 'POST', `/v1/sessions/${bob.welcome.session_id}/profile`);
    assert.equal(saved.status, 200, saved.body);
    assert.ok((JSON.parse(saved.body) as { bytes: number }).bytes > 0);
    await end(bob.client, bob.welcome);
    await end(alice.client, alice.welcome);
    const again = await open({ name: 'bob', mode: 'read_only' });
    assert.ok(again.welcome, JSON.stringify(again.error));
    assert.match(
      await pageText(again.client, '/account'),
      /server: signed in as bob[\s\S]*local: ls-bob[\s\S]*idb: bob/,
    );
    await end(again.client, again.welcome);
  });

  test('a profile that cannot be read is refused and loads nothing; the session starts nothing', async () => {
    // One byte of the sealed file changed, as a disk or a person might.
    const file = join(dataDir, 'profiles', 'bob.profile');
    const good = await readFile(file);
    const bad = Buffer.from(good);
    bad[bad.length - 20] = bad[bad.length - 20]! ^ 0x01;
    await writeFile(file, bad);
    try {
      const sessions = d.daemon.server.sessionCount;
      const refused = await open({ name: 'bob', mode: 'read_write' });
      assert.equal(refused.error?.code, 'profile_unavailable', JSON.stringify(refused));
      refused.client.close();
      assert.equal(d.daemon.server.sessionCount, sessions);
      // The lease went with the refusal: the profile is not held.
      const listed = JSON.parse((await raw(d, 'GET', '/v1/profiles')).body) as {
        profiles: { name: string; held: unknown }[];
      };
      assert.equal(listed.profiles.find((p) => p.name === 'bob')?.held, null);
    } finally {
      await writeFile(file, good);
    }
  });

  test('a save over the byte bound is refused and the stored state stays', async () => {
    const before = (await raw(d, 'GET', '/v1/profiles/bob')).body;
    const s = await open({ name: 'bob', mode: 'read_write' });
    assert.ok(s.welcome, JSON.stringify(s.error));
    // The page stores 100 KiB in localStorage: over this daemon's 64 KiB per profile.
    const { result } = await s.client.batch(`b${n++}`, [use('navigate', { url: `${site.origin}/big` })]);
    assert.equal(result.tool_results[0]?.is_error, undefined, textOf(result));
    const saved = await until('a save over the bound to be refused', async () => {
      const r = await raw(d, 'POST', `/v1/sessions/${s.welcome!.session_id}/profile`);
      return r.status === 413 && r;
    });
    assert.equal((JSON.parse(saved.body) as { error: string }).error, 'too_large');
    await end(s.client, s.welcome);
    assert.equal((await raw(d, 'GET', '/v1/profiles/bob')).body, before);
  });

  test('a daemon without a key refuses a hello naming a profile, and starts no session', async () => {
    const off = await startTestDaemon({ display: undefined, browser: 'headless' });
    try {
      const client = await off.connect();
      client.send({ type: 'hello', profile: { name: 'shop', mode: 'read_write' } });
      const answer = await client.next((m): m is Welcome | ErrorMessage => m.type === 'welcome' || m.type === 'error');
      assert.equal(answer.type, 'error');
      assert.equal((answer as ErrorMessage).code, 'profile_unavailable');
      assert.match((answer as ErrorMessage).message, /profile/);
      assert.equal(off.daemon.server.sessionCount, 0);
    } finally {
      await off.close();
    }
  });
});
