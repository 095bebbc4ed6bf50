import { test } from 'node:test';
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { FakeClock } from '../../src/shared/clock.js';
import { createLogger } from '../../src/shared/logger.js';
import { AppError } from '../../src/shared/errors.js';
import { generateCredential, parseCredential, generateUserCode, normalizeUserCode, maskEmail, base62 } from '../../src/identity/credentials.js';
import { hashPassword, verifyPassword } from '../../src/identity/passwords.js';
import { RateLimiter, perMinute } from '../../src/identity/rate-limit.js';
import { GantryAuthenticator, LastUsedTracker, type AuthLookup } from '../../src/identity/authenticator.js';
import { JwtService } from '../../src/identity/tokens.js';
import type { CredentialAuthRow } from '../../src/identity/store.js';

const code = async (p: Promise<unknown>): Promise<string> => {
  try {
    await p;
    return 'ok';
  } catch (e) {
    return e instanceof AppError ? `${e.kind}:${e.code}` : String(e);
  }
};

test('credential values: prefix + 43 base62 + 6-char checksum; parse rejects any typo', () => {
  for (const kind of ['integration', 'agent', 'device'] as const) {
    const c = generateCredential(kind);
    assert.match(c.value, /^(sk|ak|dk)-[0-9A-Za-z]{49}$/);
    assert.equal(c.prefix, c.value.slice(0, 12));
    assert.match(c.hash, /^[0-9a-f]{64}$/);
    assert.equal(parseCredential(c.value), kind);
    // flip each character of the body: the checksum catches it
    for (let i = 3; i < c.value.length; i += 7) {
      const ch = c.value[i] === 'a' ? 'b' : 'a';
      assert.equal(parseCredential(c.value.slice(0, i) + ch + c.value.slice(i + 1)), null);
    }
    assert.equal(parseCredential(c.value + 'x'), null);
  }
  assert.equal(parseCredential('sk-short'), null);
  assert.equal(base62(new Uint8Array([0]), 3), '000');
  assert.equal(base62(new Uint8Array([61]), 1), 'z');
});

test('user codes: 8 chars of an unambiguous alphabet as ABCD-2345; input normalised', () => {
  for (let i = 0; i < 50; i++) assert.match(generateUserCode(), /^[A-HJ-NP-Z2-9]{4}-[A-HJ-NP-Z2-9]{4}$/);
  assert.equal(normalizeUserCode('abcd 2345'), 'ABCD-2345');
  assert.equal(normalizeUserCode('ABCD2345'), 'ABCD-2345');
  assert.equal(normalizeUserCode('ABCD-0345'), null);
  assert.equal(normalizeUserCode('ABC'), null);
  assert.equal(maskEmail('jane.doe@example.com'), 'j***@example.com');
});

test('passwords: scrypt hash verifies, wrong password and garbage do not', async () => {
  const h = await hashPassword('correct horse battery');
  assert.match(h, /^scrypt\$32768\$8\$1\$/);
  assert.equal(await verifyPassword('correct horse battery', h), true);
  assert.equal(await verifyPassword('correct horse batterx', h), false);
  assert.equal(await verifyPassword('x', 'not-a-hash'), false);
});

test('rate limiter: token bucket per route and key, Retry-After until the next token', () => {
  const clock = new FakeClock();
  const rl = new RateLimiter({ login: perMinute(3) }, clock);
  for (let i = 0; i < 3; i++) rl.take('login', '1.2.3.4');
  assert.throws(
    () => rl.take('login', '1.2.3.4'),
    (e: any) => e.kind === 'rate_limited' && e.code === 'rate_limited' && e.retryAfterS === 20,
  );
  rl.take('login', '5.6.7.8'); // another client has its own bucket
  rl.take('other', '1.2.3.4'); // an unconfigured route is not limited
  clock.advance(20_000);
  rl.take('login', '1.2.3.4');
  assert.throws(() => rl.take('login', '1.2.3.4'));
});

const SESSION = '0195f0c2-7a4e-7000-8000-0000000000cc';

function fakeLookup(rows: Record<string, Partial<CredentialAuthRow>>) {
  const calls = { credential: 0, user: 0 };
  const lookup: AuthLookup = {
    async credentialByHash(hash) {
      calls.credential++;
      const r = rows[hash];
      return r ? ({ linked_to: null, expires_at: null, revoked_at: null, team_deleted: false, member_role: null, user_id: null, display_name: 'x', ...r } as CredentialAuthRow) : null;
    },
    async userAuth(userId, teamId) {
      calls.user++;
      return { id: userId, session_version: 0, member_role: teamId ? 'member' : null };
    },
    async sessionAuth(id) {
      return { id, user_id: 'u1', ended: false };
    },
    async flushLastUsed() {},
  };
  return { lookup, calls };
}

test('authenticator: checksum before any lookup; ak- refused on REST without a lookup; route rules', async () => {
  const clock = new FakeClock(Date.UTC(2026, 5, 1));
  const sk = generateCredential('integration');
  const ak = generateCredential('agent');
  const { lookup, calls } = fakeLookup({ [sk.hash]: { id: 'c1', credential_type: 'integration', team_id: 't1' }, [ak.hash]: { id: 'c2', credential_type: 'agent', team_id: 't1' } });
  const { privateKey } = generateKeyPairSync('ed25519');
  const jwt = new JwtService(privateKey, { issuer: 'gantry', audience: 'gantry-api', ttlS: 900, now: () => clock.now() });
  const tracker = new LastUsedTracker(lookup, createLogger('silent'));
  const a = new GantryAuthenticator(lookup, jwt, tracker, clock);
  const runtime = { kinds: ['user', 'integration', 'device'] as const, team: true };
  const mgmt = { kinds: ['user', 'device'] as const, team: true };
  const multipart = { kinds: ['user'] as const, team: true, jwtOnly401: true };
  const req = (tok?: string, team?: string) => ({ ip: '127.0.0.1', headers: { ...(tok ? { authorization: `Bearer ${tok}` } : {}), ...(team ? { 'x-team-id': team } : {}) } });

  const typo = sk.value.slice(0, -1) + (sk.value.endsWith('0') ? '1' : '0');
  assert.equal(await code(a.authenticate(req(typo), runtime)), 'unauthorized:credential_invalid');
  assert.equal(await code(a.authenticate(req(ak.value), runtime)), 'unauthorized:agent_credential_not_allowed');
  assert.equal(calls.credential, 0, 'no database lookup for a bad checksum or an ak- on REST');
  assert.equal(await code(a.authenticate(req(), runtime)), 'unauthorized:credential_missing');
  assert.equal(await code(a.authenticate(req(), { kinds: 'public' })), 'ok');

  const p = await a.authenticate(req(sk.value, '00000000-0000-7000-8000-000000000000'), runtime);
  assert.deepEqual(p, { kind: 'integration', teamId: 't1', credentialId: 'c1' }, 'X-Team-ID ignored for sk-');
  assert.equal(await code(a.authenticate(req(sk.value), mgmt)), 'forbidden:integration_credential_not_allowed');
  assert.equal(await code(a.authenticate(req(sk.value), multipart)), 'unauthorized:user_session_required');
  assert.equal(await code(a.authenticate(req(sk.value), { ...runtime, role: 'admin' })), 'forbidden:insufficient_role');
  assert.equal(calls.credential, 4, 'one lookup per credential request (no cache)');
  assert.ok(tracker.peek('c1'), 'last use is kept in memory');

  const { token } = await jwt.issue('u1', 0, SESSION);
  assert.equal(await code(a.authenticate(req(token), mgmt)), 'bad_request:team_header_missing');
  assert.equal(await code(a.authenticate(req(token, 'nope'), mgmt)), 'bad_request:team_header_invalid');
  assert.deepEqual(await a.authenticate(req(token, '01a201c1-b671-7557-96da-42cf69746fdd'), mgmt), { kind: 'user', userId: 'u1', teamId: '01a201c1-b671-7557-96da-42cf69746fdd', role: 'member', sessionId: SESSION });
  assert.equal(await code(a.authenticate(req(token, '01a201c1-b671-7557-96da-42cf69746fdd'), { ...mgmt, role: 'owner' })), 'forbidden:insufficient_role');
  assert.equal(await code(a.authenticate(req(token), { kinds: ['integration'] })), 'forbidden:integration_credential_required');
  clock.advance(901_000);
  assert.equal(await code(a.authenticate(req(token, '01a201c1-b671-7557-96da-42cf69746fdd'), mgmt)), 'unauthorized:credential_expired');

  // another issuer / audience / algorithm: invalid
  const other = new JwtService(privateKey, { issuer: 'someone-else', audience: 'gantry-api', ttlS: 900, now: () => clock.now() });
  assert.equal(await code(a.authenticate(req((await other.issue('u1', 0, SESSION)).token), { kinds: ['user'] })), 'unauthorized:credential_invalid');
  const none = `${Buffer.from('{"alg":"none"}').toString('base64url')}.${Buffer.from('{"sub":"u1"}').toString('base64url')}.x`;
  assert.equal(await code(a.authenticate(req(none), { kinds: ['user'] })), 'unauthorized:credential_invalid');

  // agent stream verification
  assert.equal((await a.verifyAgentCredential(ak.value)).teamId, 't1');
  assert.equal(await code(a.verifyAgentCredential(sk.value)), 'unauthorized:credential_invalid');
});
