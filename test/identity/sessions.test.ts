import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT } from 'jose';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, login, emailToken, nodeSigningKey, pairDevice, createCredential, type TestUser } from '../helpers/identity.js';
import { CachedAuthLookup } from '../../src/identity/auth-cache.js';
import { InMemoryInvalidation } from '../../src/identity/invalidation.js';
import type { AuthLookup } from '../../src/identity/authenticator.js';
import type { SessionAuthRow } from '../../src/identity/store.js';
import { FakeClock } from '../../src/shared/clock.js';

/**
 * Access tokens end with their session (issue 12, fault 7), over real HTTP against a real node with
 * a warm identity cache: logout, refresh-token reuse (family revoked) and a password reset end the
 * session's access tokens on the very next request; a token issued in the future is refused.
 */
let t: TestNode;

before(async () => {
  t = await startTestNode({ GANTRY_AUTH_RATE_LIMIT_PER_MIN: 1_000_000 }, 'sessions');
});
after(async () => {
  await t.stop();
});

const stats = () => ({ ...t.node.identity.authCache.stats });

/** Two successful calls with this access token (user-level and team-level): the second pair is answered from the warm cache. */
async function warm(token: string, teamId: string): Promise<void> {
  for (let i = 0; i < 2; i++) {
    assert.equal((await t.http.get('/users/me', { token })).status, 200);
    assert.equal((await t.http.get('/teams/current', { token, team: teamId })).status, 200);
  }
}

async function refused(token: string, teamId: string, code: string, what: string): Promise<void> {
  const me = await t.http.get('/users/me', { token });
  assert.equal(me.status, 401, `${what}: /users/me ${me.text}`);
  assert.equal(me.body.error_code, code, what);
  const team = await t.http.get('/teams/current', { token, team: teamId });
  assert.equal(team.status, 401, `${what}: /teams/current ${team.text}`);
  assert.equal(team.body.error_code, code, what);
}

async function refresh(refreshToken: string): Promise<{ accessToken: string; refreshToken: string }> {
  const r = await t.http.post('/auth/refresh', { refresh_token: refreshToken });
  assert.equal(r.status, 200, r.text);
  return { accessToken: r.body.access_token, refreshToken: r.body.refresh_token };
}

const claimsOf = (jwt: string): Record<string, unknown> => JSON.parse(Buffer.from(jwt.split('.')[1] as string, 'base64url').toString('utf8')) as Record<string, unknown>;

test('logout ends the access tokens of that session on the next request (warm cache); other sessions live on', async () => {
  const u: TestUser = await registerUser(t.http);
  const other = await login(t.http, u.email, u.password);
  await warm(u.accessToken, u.teamId);
  await warm(other.accessToken, u.teamId);

  const s0 = stats();
  assert.equal((await t.http.get('/users/me', { token: u.accessToken })).status, 200);
  assert.ok(stats().sessionHits > s0.sessionHits, 'the session check of a warm request is a cache hit');
  assert.equal(stats().sessionLookups, s0.sessionLookups, 'no session lookup on a warm request');

  const out = await t.http.post('/auth/logout', { refresh_token: u.refreshToken }, { token: u.accessToken });
  assert.equal(out.status, 200, out.text);
  await refused(u.accessToken, u.teamId, 'credential_revoked', 'after logout');
  const again = await t.http.post('/auth/refresh', { refresh_token: u.refreshToken });
  assert.equal(again.status, 401);
  assert.equal(again.body.error_code, 'refresh_token_revoked');

  // the other login of the same user is another session
  await warm(other.accessToken, u.teamId);
});

test('logout of a rotated session ends the access tokens issued by every rotation of it', async () => {
  const u = await registerUser(t.http);
  const second = await refresh(u.refreshToken);
  await warm(u.accessToken, u.teamId);
  await warm(second.accessToken, u.teamId);
  assert.equal((await t.http.post('/auth/logout', { refresh_token: second.refreshToken }, { token: second.accessToken })).status, 200);
  await refused(second.accessToken, u.teamId, 'credential_revoked', 'latest token after logout');
  await refused(u.accessToken, u.teamId, 'credential_revoked', 'first token after logout');
});

test('refresh-token reuse revokes the family and ends its access tokens on the next request; other sessions live on', async () => {
  const u = await registerUser(t.http);
  const other = await login(t.http, u.email, u.password);
  const rotated = await refresh(u.refreshToken);
  await warm(u.accessToken, u.teamId);
  await warm(rotated.accessToken, u.teamId);
  await warm(other.accessToken, u.teamId);

  // the first refresh token was rotated: presenting it again is reuse (a stolen token)
  const reuse = await t.http.post('/auth/refresh', { refresh_token: u.refreshToken });
  assert.equal(reuse.status, 401);
  assert.equal(reuse.body.error_code, 'refresh_token_reused');
  await refused(rotated.accessToken, u.teamId, 'credential_revoked', 'latest access token of the reused family');
  await refused(u.accessToken, u.teamId, 'credential_revoked', 'first access token of the reused family');
  const latest = await t.http.post('/auth/refresh', { refresh_token: rotated.refreshToken });
  assert.equal(latest.status, 401);
  assert.equal(latest.body.error_code, 'refresh_token_revoked');

  await warm(other.accessToken, u.teamId);
});

test('a password reset ends every session of the user (all families, rotated ones included) on the next request', async () => {
  const u = await registerUser(t.http);
  const other = await login(t.http, u.email, u.password);
  const rotated = await refresh(other.refreshToken);
  await warm(u.accessToken, u.teamId);
  await warm(rotated.accessToken, u.teamId);
  const bystander = await registerUser(t.http);
  await warm(bystander.accessToken, bystander.teamId);

  assert.equal((await t.http.post('/auth/password/forgot', { email_address: u.email })).status, 200);
  const token = await emailToken(t.node, u.email, 'password_reset');
  assert.equal((await t.http.post('/auth/password/reset', { reset_token: token, new_password: 'a brand new password' })).status, 200);
  await refused(u.accessToken, u.teamId, 'credential_revoked', 'first session after reset');
  await refused(rotated.accessToken, u.teamId, 'credential_revoked', 'rotated session after reset');
  const r = await t.http.post('/auth/refresh', { refresh_token: rotated.refreshToken });
  assert.equal(r.status, 401);
  assert.equal(r.body.error_code, 'refresh_token_revoked');

  // a new login works, and another user was not touched
  const fresh = await login(t.http, u.email, 'a brand new password');
  await warm(fresh.accessToken, u.teamId);
  await warm(bystander.accessToken, bystander.teamId);
});

test("a password reset ends the user's device credentials (dk-) and the ak- paired with each, on the next request; team sk- live on", async () => {
  const u = await registerUser(t.http);
  const dev = await pairDevice(t.http, u);
  const dev2 = await pairDevice(t.http, u, { deviceName: 'laptop' });
  const sk = await createCredential(t.http, u, 'integration');
  const bystander = await registerUser(t.http);
  const other = await pairDevice(t.http, bystander);
  for (const dk of [dev.deviceCredential, dev2.deviceCredential, other.deviceCredential])
    for (let i = 0; i < 2; i++) {
      assert.equal((await t.http.get('/users/me', { token: dk })).status, 200);
      assert.equal((await t.http.get('/r/tasks', { token: dk })).status, 200);
    }
  assert.equal((await t.node.identity.verifyAgentCredential(dev.agentCredential)).teamId, u.teamId);
  const streamsEnded: string[][] = [];
  const off = t.node.identity.onCredentialsRevoked((ids) => streamsEnded.push(ids));

  assert.equal((await t.http.post('/auth/password/forgot', { email_address: u.email })).status, 200);
  const token = await emailToken(t.node, u.email, 'password_reset');
  assert.equal((await t.http.post('/auth/password/reset', { reset_token: token, new_password: 'a brand new password' })).status, 200);
  off();
  for (const dk of [dev.deviceCredential, dev2.deviceCredential])
    for (const path of ['/users/me', '/r/tasks']) {
      const r = await t.http.get(path, { token: dk });
      assert.equal(r.status, 401, `dk- on ${path} after reset: ${r.text}`);
      assert.equal(r.body.error_code, 'credential_revoked');
    }
  for (const ak of [dev.agentCredential, dev2.agentCredential]) await assert.rejects(t.node.identity.verifyAgentCredential(ak), (e: { code?: string }) => e.code === 'credential_revoked');
  // the revocation went through the invalidation port (what drops live agent streams and SSE)
  assert.equal(streamsEnded.flat().length, 4, `four credentials revoked: ${JSON.stringify(streamsEnded)}`);
  // the team's sk- is not a session credential; another user's device is untouched
  assert.equal((await t.http.get('/r/tasks', { token: sk.value })).status, 200);
  assert.equal((await t.http.get('/users/me', { token: other.deviceCredential })).status, 200);
  assert.equal((await t.node.identity.verifyAgentCredential(other.agentCredential)).teamId, bystander.teamId);
});

test('an access token issued in the future (beyond 60 s of clock skew) is 401 credential_invalid', async () => {
  const u = await registerUser(t.http);
  const key = await nodeSigningKey(t);
  const real = claimsOf(u.accessToken);
  const sign = (iat: number, extra: Record<string, unknown> = {}): Promise<string> => {
    const { iat: _i, exp: _e, ...rest } = real;
    return new SignJWT({ ...rest, ...extra }).setProtectedHeader({ alg: 'EdDSA', typ: 'JWT' }).setIssuedAt(iat).setExpirationTime(iat + 900).sign(key);
  };
  const now = Math.floor(Date.now() / 1000);

  // control: the same claims signed with the node's key now (and 30 s ahead, within the skew) are accepted
  assert.equal((await t.http.get('/users/me', { token: await sign(now) })).status, 200);
  assert.equal((await t.http.get('/users/me', { token: await sign(now + 30) })).status, 200);

  for (const ahead of [3600, 600, 120]) {
    const r = await t.http.get('/users/me', { token: await sign(now + ahead) });
    assert.equal(r.status, 401, `iat ${ahead} s ahead: ${r.text}`);
    assert.equal(r.body.error_code, 'credential_invalid');
  }
});

test('an access token signed with the real key for longer than the access TTL (exp - iat) is 401 credential_invalid', async () => {
  const u = await registerUser(t.http);
  const key = await nodeSigningKey(t);
  const real = claimsOf(u.accessToken);
  const ttl = (real.exp as number) - (real.iat as number);
  assert.equal(ttl, t.node.identity.jwt.ttlS, 'issued tokens live exactly the access TTL');
  const { iat: _i, exp: _e, ...rest } = real;
  const now = Math.floor(Date.now() / 1000);
  const sign = (iat: number, exp: number): Promise<string> => new SignJWT(rest).setProtectedHeader({ alg: 'EdDSA', typ: 'JWT' }).setIssuedAt(iat).setExpirationTime(exp).sign(key);

  // control: exactly the TTL, and shorter, are accepted
  assert.equal((await t.http.get('/users/me', { token: await sign(now, now + ttl) })).status, 200);
  assert.equal((await t.http.get('/users/me', { token: await sign(now, now + 60) })).status, 200);
  for (const [what, iat, exp] of [
    ['ten years', now, now + 10 * 365 * 86_400],
    ['one second over the TTL', now, now + ttl + 1],
    ['an old iat with a long exp', now - 3600, now + 600],
  ] as const) {
    const r = await t.http.get('/users/me', { token: await sign(iat, exp) });
    assert.equal(r.status, 401, `${what}: ${r.text}`);
    assert.equal(r.body.error_code, 'credential_invalid', what);
  }
});

test('an access token that names no session, or a session of another user, is refused', async () => {
  const u = await registerUser(t.http);
  const v = await registerUser(t.http);
  const key = await nodeSigningKey(t);
  const now = Math.floor(Date.now() / 1000);
  const sign = (claims: Record<string, unknown>): Promise<string> => {
    const { iat: _i, exp: _e, ...rest } = claims;
    return new SignJWT(rest).setProtectedHeader({ alg: 'EdDSA', typ: 'JWT' }).setIssuedAt(now).setExpirationTime(now + 900).sign(key);
  };
  const { sid: _sid, ...noSession } = claimsOf(u.accessToken);
  const a = await t.http.get('/users/me', { token: await sign(noSession) });
  assert.equal(a.status, 401, a.text);
  assert.equal(a.body.error_code, 'credential_invalid');

  // u's claims with v's session id: a session belongs to one user
  const b = await t.http.get('/users/me', { token: await sign({ ...claimsOf(u.accessToken), sid: claimsOf(v.accessToken).sid }) });
  assert.equal(b.status, 401, b.text);
  assert.equal(b.body.error_code, 'credential_revoked');
  // an unknown session id
  const c = await t.http.get('/users/me', { token: await sign({ ...claimsOf(u.accessToken), sid: '0195f0c2-7a4e-7000-8000-000000000001' }) });
  assert.equal(c.status, 401, c.text);
  assert.equal(c.body.error_code, 'credential_revoked');
  // both users' own tokens still work
  assert.equal((await t.http.get('/users/me', { token: u.accessToken })).status, 200);
  assert.equal((await t.http.get('/users/me', { token: v.accessToken })).status, 200);
});

test('session cache: a session read in flight when the session ends is not stored; session and user events drop entries', async () => {
  const rows = new Map<string, SessionAuthRow>();
  let reads = 0;
  let gate: Promise<void> | null = null;
  const lookup: AuthLookup = {
    async credentialByHash() {
      return null;
    },
    async userAuth() {
      return null;
    },
    async sessionAuth(id) {
      reads++;
      const r = rows.get(id);
      const snapshot = r ? { ...r } : null;
      if (gate) await gate;
      return snapshot;
    },
    async flushLastUsed() {},
  };
  const bus = new InMemoryInvalidation();
  const cache = new CachedAuthLookup(lookup, bus, { maxEntries: 10, ttlMs: 3_600_000, clock: new FakeClock() });
  const sid = '0195f0c2-7a4e-7000-8000-000000000010';
  const other = '0195f0c2-7a4e-7000-8000-000000000011';
  rows.set(sid, { id: sid, user_id: 'u1', ended: false });
  rows.set(other, { id: other, user_id: 'u2', ended: false });

  // a read that began before the logout committed holds the live row: it must not be cached
  let release: () => void = () => undefined;
  gate = new Promise<void>((r) => (release = r));
  const early = cache.sessionAuth(sid);
  rows.set(sid, { id: sid, user_id: 'u1', ended: true });
  bus.publish({ type: 'session', ids: [sid] });
  gate = null;
  release();
  assert.equal((await early)?.ended, false, 'the early read saw the live row');
  assert.equal((await cache.sessionAuth(sid))?.ended, true, 'the next request reads the ended session');
  const n = reads;
  assert.equal((await cache.sessionAuth(sid))?.ended, true);
  assert.equal(reads, n, 'an ended session is answered from the cache');

  // warm entries: a session event drops only its ids; a user event drops that user's sessions
  assert.equal((await cache.sessionAuth(other))?.ended, false);
  assert.equal((await cache.sessionAuth(other))?.ended, false);
  assert.equal(cache.stats.sessionHits >= 2, true);
  rows.set(other, { id: other, user_id: 'u2', ended: true });
  bus.publish({ type: 'session', ids: [sid] });
  assert.equal((await cache.sessionAuth(other))?.ended, false, 'another session stays cached');
  bus.publish({ type: 'user', userId: 'u2' });
  assert.equal((await cache.sessionAuth(other))?.ended, true, "the user's sessions are read again");

  // an unknown session is never cached
  const m = reads;
  assert.equal(await cache.sessionAuth('0195f0c2-7a4e-7000-8000-000000000012'), null);
  assert.equal(await cache.sessionAuth('0195f0c2-7a4e-7000-8000-000000000012'), null);
  assert.equal(reads, m + 2);
  cache.close();
});
