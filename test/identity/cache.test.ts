import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, createCredential, addMember, pairDevice, emailToken, type TestUser } from '../helpers/identity.js';
import { FakeClock } from '../../src/shared/clock.js';
import type { GantryNode } from '../../src/main.js';

/**
 * The identity cache with real PostgreSQL and real HTTP: every case first uses the credential (so
 * the cache is warm and the later request is a hit), then changes identity data through the API and
 * proves the very next request sees the change.
 */
let t: TestNode;
let clock: FakeClock;

before(async () => {
  clock = new FakeClock(Date.now());
  t = await startTestNode({ GANTRY_AUTH_RATE_LIMIT_PER_MIN: 1_000_000 }, 'authcache', { clock });
});
after(async () => {
  await t.stop();
});

const IDENTITY_TABLES = /\b(credentials|users|team_members|teams)\b/i;

/** Counts SQL statements sent by the node (wraps the MikroORM connection, as bench BENCH_PROFILE does). */
function sqlCounter(node: GantryNode): { identity(): string[]; all(): string[]; reset(): void; restore(): void } {
  const conn = node.db.orm.em.getConnection() as unknown as { execute: (...a: unknown[]) => Promise<unknown> };
  const orig = conn.execute;
  let seen: string[] = [];
  conn.execute = function (this: unknown, ...a: unknown[]) {
    seen.push(String(a[0]).replace(/\s+/g, ' '));
    return orig.apply(this, a);
  };
  return {
    identity: () => seen.filter((s) => IDENTITY_TABLES.test(s)),
    all: () => [...seen],
    reset: () => {
      seen = [];
    },
    restore: () => {
      conn.execute = orig;
    },
  };
}

const stats = () => ({ ...t.node.identity.authCache.stats });
const asUser = (u: TestUser, team = u.teamId) => ({ token: u.accessToken, team });

/** Two successful calls: the first fills the cache, the second must be a hit. */
async function warm(path: string, o: { token: string; team?: string }, hit: 'credentialHits' | 'userHits'): Promise<void> {
  assert.equal((await t.http.get(path, o)).status, 200);
  const s0 = stats();
  assert.equal((await t.http.get(path, o)).status, 200);
  assert.ok(stats()[hit] > s0[hit], `second ${path} is a cache hit`);
}

test('(e) a warm authenticated GET sends no identity query to PostgreSQL; a cold one does', async () => {
  const owner = await registerUser(t.http);
  const sk = await createCredential(t.http, owner, 'integration');
  const counter = sqlCounter(t.node);
  try {
    // cold: the credential is read from PostgreSQL (the counter sees it, so it can see a regression)
    counter.reset();
    assert.equal((await t.http.get('/r/workflows', { token: sk.value })).status, 200);
    assert.ok(counter.identity().some((q) => /from credentials/i.test(q)), `cold request reads the credential: ${counter.all().join(' | ')}`);

    // warm: no statement on credentials, users, team_members or teams
    const s0 = stats();
    counter.reset();
    for (let i = 0; i < 5; i++) assert.equal((await t.http.get('/r/workflows', { token: sk.value })).status, 200);
    assert.deepEqual(counter.identity(), [], 'warm sk- requests query no identity table');
    assert.equal(stats().credentialHits - s0.credentialHits, 5);
    assert.equal(stats().credentialLookups, s0.credentialLookups, 'no lookup on a hit');

    // a route that reads nothing else: a warm request sends no SQL at all
    assert.equal((await t.http.get('/_debug/r/whoami', { token: sk.value })).status, 200);
    counter.reset();
    assert.equal((await t.http.get('/_debug/r/whoami', { token: sk.value })).status, 200);
    assert.deepEqual(counter.all(), [], 'warm whoami: no PostgreSQL query at all');

    // JWT user with X-Team-ID: the session version and the role come from the cache too
    await t.http.get('/_debug/r/whoami', asUser(owner));
    counter.reset();
    const r = await t.http.get('/_debug/r/whoami', asUser(owner));
    assert.equal(r.status, 200);
    assert.equal(r.body.member_role, 'owner');
    assert.deepEqual(counter.all(), [], 'warm JWT + X-Team-ID: no PostgreSQL query at all');

    // last_used_at is not written per request: it is flushed in one batched statement
    counter.reset();
    await t.node.identity.lastUsed.flush();
    const flushes = counter.identity().filter((q) => /update credentials/i.test(q));
    assert.equal(flushes.length, 1, 'one batched last_used_at statement for all the uses above');
    const row = (await t.node.db.execute<{ last_used_at: Date | null }>(`select last_used_at from credentials where id = ?`, [sk.id]))[0];
    assert.ok(row?.last_used_at, 'last_used_at written by the flush');
  } finally {
    counter.restore();
  }
});

test('(a) a revoked sk- is refused on the very next request while the cache is warm', async () => {
  const owner = await registerUser(t.http);
  const sk = await createCredential(t.http, owner, 'integration');
  await warm('/r/workflows', { token: sk.value }, 'credentialHits');
  assert.equal((await t.http.del(`/credentials/${sk.id}`, asUser(owner))).status, 200);
  const r = await t.http.get('/r/workflows', { token: sk.value });
  assert.equal(r.status, 401);
  assert.equal(r.body.error_code, 'credential_revoked');
});

test('(b) a removed member (JWT + X-Team-ID, and their dk-) is refused on the next request', async () => {
  const owner = await registerUser(t.http);
  const member = await registerUser(t.http);
  await addMember(t.http, t.node, owner, member, 'member');
  const device = await pairDevice(t.http, member, { teamId: owner.teamId });
  await warm('/teams/current', asUser(member, owner.teamId), 'userHits');
  await warm('/_debug/r/whoami', { token: device.deviceCredential }, 'credentialHits');

  assert.equal((await t.http.del(`/teams/current/members/${member.userId}`, asUser(owner))).status, 200);

  const r = await t.http.get('/teams/current', asUser(member, owner.teamId));
  assert.equal(r.status, 403);
  assert.equal(r.body.error_code, 'not_a_member');
  const d = await t.http.get('/_debug/r/whoami', { token: device.deviceCredential });
  assert.equal(d.status, 403);
  assert.equal(d.body.error_code, 'not_a_member');
});

test('(c) a role change (admin -> member, and back) is effective on the next request for an admin-only route', async () => {
  const owner = await registerUser(t.http);
  const admin = await registerUser(t.http);
  await addMember(t.http, t.node, owner, admin, 'admin');
  await warm('/teams/current/invitations', asUser(admin, owner.teamId), 'userHits');

  assert.equal((await t.http.put(`/teams/current/members/${admin.userId}`, { member_role: 'member' }, asUser(owner))).status, 200);
  const r = await t.http.get('/teams/current/invitations', asUser(admin, owner.teamId));
  assert.equal(r.status, 403);
  assert.equal(r.body.error_code, 'insufficient_role');
  // the demoted role is cached now; promoting again is just as immediate
  assert.equal((await t.http.get('/teams/current/invitations', asUser(admin, owner.teamId))).status, 403);
  assert.equal((await t.http.put(`/teams/current/members/${admin.userId}`, { member_role: 'admin' }, asUser(owner))).status, 200);
  assert.equal((await t.http.get('/teams/current/invitations', asUser(admin, owner.teamId))).status, 200);
});

test('(d) an expired credential is refused on the next request although its cache entry is warm', async () => {
  const owner = await registerUser(t.http);
  const sk = await createCredential(t.http, owner, 'integration', { expiresInDays: 1 });
  await warm('/r/workflows', { token: sk.value }, 'credentialHits');
  const listed = await t.http.get('/credentials', asUser(owner));
  const expiresAt = Date.parse(listed.body.credential_list.find((c: { id: string }) => c.id === sk.id).expires_at);
  // the node's clock (the credential's expiry was set from wall time, which has moved on since);
  // this jump outlives the entry's TTL, so the request re-reads and re-caches the row
  clock.advance(expiresAt - clock.now() - 1_000);
  assert.equal((await t.http.get('/r/workflows', { token: sk.value })).status, 200, 'one second before expiry');
  const s0 = stats();
  clock.advance(2_000);
  const r = await t.http.get('/r/workflows', { token: sk.value });
  assert.equal(r.status, 401);
  assert.equal(r.body.error_code, 'credential_expired');
  // decided on the cached row (the TTL of the entry is not what refused it)
  assert.equal(stats().credentialLookups, s0.credentialLookups, 'expiry is checked against the clock on the cached entry');
});

test('a non-member who joins is admitted on the next request', async () => {
  const owner = await registerUser(t.http);
  const outsider = await registerUser(t.http);
  for (let i = 0; i < 2; i++) {
    const r = await t.http.get('/teams/current', asUser(outsider, owner.teamId));
    assert.equal(r.status, 403);
    assert.equal(r.body.error_code, 'not_a_member');
  }
  await addMember(t.http, t.node, owner, outsider, 'member');
  const r = await t.http.get('/teams/current', asUser(outsider, owner.teamId));
  assert.equal(r.status, 200);
  assert.equal(r.body.member_role, 'member');
});

test('team deletion refuses its warm sk-, ak- and member sessions; a password reset ends warm sessions', async () => {
  const owner = await registerUser(t.http);
  const team = await t.http.post('/teams', { display_name: 'doomed' }, { token: owner.accessToken });
  assert.equal(team.status, 200);
  const teamId: string = team.body.id;
  const sk = await createCredential(t.http, owner, 'integration', { teamId });
  const ak = await createCredential(t.http, owner, 'agent', { teamId });
  await warm('/r/workflows', { token: sk.value }, 'credentialHits');
  await warm('/teams/current', asUser(owner, teamId), 'userHits');
  assert.equal((await t.node.identity.verifyAgentCredential(ak.value)).teamId, teamId);

  assert.equal((await t.http.del('/teams/current', asUser(owner, teamId))).status, 200);
  const s = await t.http.get('/r/workflows', { token: sk.value });
  assert.equal(s.status, 401);
  assert.equal(s.body.error_code, 'credential_revoked');
  await assert.rejects(t.node.identity.verifyAgentCredential(ak.value), (e: any) => e.code === 'credential_revoked');
  const u = await t.http.get('/teams/current', asUser(owner, teamId));
  assert.equal(u.status, 403);
  assert.equal(u.body.error_code, 'not_a_member');

  // password reset: the session version is cached with the user and bumped by the reset
  await warm('/teams/current', asUser(owner), 'userHits');
  assert.equal((await t.http.post('/auth/password/forgot', { email_address: owner.email })).status, 200);
  const token = await emailToken(t.node, owner.email, 'password_reset');
  assert.equal((await t.http.post('/auth/password/reset', { reset_token: token, new_password: 'a brand new password' })).status, 200);
  const old = await t.http.get('/teams/current', asUser(owner));
  assert.equal(old.status, 401);
  assert.equal(old.body.error_code, 'credential_revoked');
});
