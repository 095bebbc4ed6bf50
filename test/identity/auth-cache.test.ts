import { test } from 'node:test';
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { FakeClock } from '../../src/shared/clock.js';
import { createLogger } from '../../src/shared/logger.js';
import { AppError } from '../../src/shared/errors.js';
import { generateCredential } from '../../src/identity/credentials.js';
import { CachedAuthLookup } from '../../src/identity/auth-cache.js';
import { InMemoryInvalidation } from '../../src/identity/invalidation.js';
import { GantryAuthenticator, LastUsedTracker, type AuthLookup } from '../../src/identity/authenticator.js';
import { JwtService } from '../../src/identity/tokens.js';
import type { CredentialAuthRow, UserAuthRow } from '../../src/identity/store.js';

/** A lookup over mutable rows that counts reads; `gate` holds reads until released (race tests). */
function source() {
  const creds = new Map<string, CredentialAuthRow>();
  const users = new Map<string, UserAuthRow>();
  const reads = { credential: 0, user: 0 };
  let gate: Promise<void> | null = null;
  const lookup: AuthLookup = {
    async credentialByHash(hash) {
      reads.credential++;
      const snapshot = creds.get(hash);
      const row = snapshot ? { ...snapshot } : null;
      if (gate) await gate;
      return row;
    },
    async userAuth(userId, teamId) {
      reads.user++;
      const u = users.get(`${userId}/${teamId ?? ''}`);
      const row = u ? { ...u } : null;
      if (gate) await gate;
      return row;
    },
    async sessionAuth() {
      return null;
    },
    async flushLastUsed() {},
  };
  const hold = (): (() => void) => {
    let release: () => void = () => undefined;
    gate = new Promise<void>((r) => (release = r));
    return () => {
      gate = null;
      release();
    };
  };
  return { creds, users, reads, lookup, hold };
}

const row = (id: string, over: Partial<CredentialAuthRow> = {}): CredentialAuthRow => ({
  id,
  credential_type: 'integration',
  team_id: 't1',
  user_id: 'u1',
  display_name: id,
  linked_to: null,
  expires_at: null,
  revoked_at: null,
  team_deleted: false,
  member_role: null,
  ...over,
});

test('hits are served from memory; each event type drops exactly what it makes stale', async () => {
  const clock = new FakeClock();
  const src = source();
  const bus = new InMemoryInvalidation();
  const cache = new CachedAuthLookup(src.lookup, bus, { maxEntries: 100, ttlMs: 60_000, clock });
  src.creds.set('h1', row('c1'));
  src.creds.set('h2', row('c2', { team_id: 't2', user_id: 'u2' }));
  src.users.set('u1/t1', { id: 'u1', session_version: 0, member_role: 'admin' });
  src.users.set('u1/', { id: 'u1', session_version: 0, member_role: null });
  src.users.set('u2/t1', { id: 'u2', session_version: 0, member_role: 'member' });
  const touchAll = async () => {
    await cache.credentialByHash('h1');
    await cache.credentialByHash('h2');
    await cache.userAuth('u1', 't1');
    await cache.userAuth('u1', null);
    await cache.userAuth('u2', 't1');
  };
  await touchAll();
  await touchAll();
  assert.deepEqual(src.reads, { credential: 2, user: 3 }, 'second round: all hits');
  assert.equal(cache.stats.credentialHits, 2);
  assert.equal(cache.stats.userHits, 3);

  bus.publish({ type: 'credential', ids: ['c1'] });
  await touchAll();
  assert.deepEqual(src.reads, { credential: 3, user: 3 }, 'credential: only c1 re-read');

  bus.publish({ type: 'membership', teamId: 't1', userId: 'u1' });
  await touchAll();
  assert.deepEqual(src.reads, { credential: 4, user: 4 }, "membership(t1,u1): u1's row in t1 and u1's credentials in t1");

  bus.publish({ type: 'user', userId: 'u1' });
  await touchAll();
  assert.deepEqual(src.reads, { credential: 5, user: 6 }, 'user u1: all of u1');

  bus.publish({ type: 'team', teamId: 't1' });
  await touchAll();
  assert.deepEqual(src.reads, { credential: 6, user: 8 }, 'team t1: everything scoped to t1');
  cache.close();
});

test('bounded: least recently used entries are evicted; entries expire after the TTL', async () => {
  const clock = new FakeClock();
  const src = source();
  const cache = new CachedAuthLookup(src.lookup, new InMemoryInvalidation(), { maxEntries: 2, ttlMs: 1_000, clock });
  for (const h of ['a', 'b', 'c']) src.creds.set(h, row(h));
  await cache.credentialByHash('a');
  await cache.credentialByHash('b');
  await cache.credentialByHash('a'); // a is now the most recent
  await cache.credentialByHash('c'); // evicts b
  assert.equal(cache.stats.evictions, 1);
  assert.deepEqual(cache.size(), { credentials: 2, users: 0, sessions: 0 });
  const n = src.reads.credential;
  await cache.credentialByHash('a');
  await cache.credentialByHash('c');
  assert.equal(src.reads.credential, n, 'a and c still cached');
  await cache.credentialByHash('b');
  assert.equal(src.reads.credential, n + 1, 'b was evicted');

  clock.advance(999);
  const m = src.reads.credential;
  await cache.credentialByHash('b');
  assert.equal(src.reads.credential, m, 'within the TTL');
  clock.advance(1);
  await cache.credentialByHash('b');
  assert.equal(src.reads.credential, m + 1, 'TTL reached: read again');

  // unknown hashes and "not a member of that team" are not cached (garbage cannot push good entries out)
  await cache.credentialByHash('nope');
  await cache.credentialByHash('nope');
  assert.equal(src.reads.credential, m + 3);
  src.users.set('u9/t-other', { id: 'u9', session_version: 0, member_role: null });
  await cache.userAuth('u9', 't-other');
  await cache.userAuth('u9', 't-other');
  assert.equal(src.reads.user, 2);
  assert.equal(cache.size().users, 0);
  cache.close();
});

test('a read in flight when an invalidation arrives is neither stored nor shared with later requests', async () => {
  const src = source();
  const bus = new InMemoryInvalidation();
  const cache = new CachedAuthLookup(src.lookup, bus, { maxEntries: 10, ttlMs: 60_000, clock: new FakeClock() });
  src.creds.set('h', row('c1'));

  // concurrent misses share one read
  const release0 = src.hold();
  const both = Promise.all([cache.credentialByHash('h'), cache.credentialByHash('h')]);
  release0();
  await both;
  assert.equal(src.reads.credential, 1, 'one read for two concurrent misses');
  bus.publish({ type: 'credential', ids: ['c1'] });

  // a read starts (sees the row before the revoke), the revoke commits and is published, then the
  // read returns: its old answer must not be stored
  const release1 = src.hold();
  const early1 = cache.credentialByHash('h');
  src.creds.set('h', row('c1', { revoked_at: new Date() }));
  bus.publish({ type: 'credential', ids: ['c1'] });
  release1();
  assert.equal((await early1)?.revoked_at, null, 'the early read saw the old row');
  assert.ok((await cache.credentialByHash('h'))?.revoked_at, 'the next request reads the revoked row');

  // the same, with a request arriving after the revoke while the early read is still in flight:
  // it must not join the early read
  bus.publish({ type: 'credential', ids: ['c1'] });
  src.creds.set('h', row('c1'));
  const release2 = src.hold();
  const early2 = cache.credentialByHash('h');
  src.creds.set('h', row('c1', { revoked_at: new Date() }));
  bus.publish({ type: 'credential', ids: ['c1'] });
  const late = cache.credentialByHash('h');
  release2();
  assert.equal((await early2)?.revoked_at, null);
  assert.ok((await late)?.revoked_at, 'the later request read the revoked row');
  assert.ok((await cache.credentialByHash('h'))?.revoked_at, 'and the cache holds the revoked row');
  cache.close();
});

test('authenticator over the cache: a warm hit still checks expiry against the clock and the stored role', async () => {
  const clock = new FakeClock(Date.UTC(2026, 5, 1));
  const src = source();
  const bus = new InMemoryInvalidation();
  const cache = new CachedAuthLookup(src.lookup, bus, { maxEntries: 10, ttlMs: 3_600_000, clock });
  const sk = generateCredential('integration');
  src.creds.set(sk.hash, row('c1', { expires_at: new Date(clock.now() + 60_000) }));
  const { privateKey } = generateKeyPairSync('ed25519');
  const jwt = new JwtService(privateKey, { issuer: 'gantry', audience: 'gantry-api', ttlS: 900, now: () => clock.now() });
  const a = new GantryAuthenticator(cache, jwt, new LastUsedTracker(cache, createLogger('silent')), clock);
  const req = { ip: '127.0.0.1', headers: { authorization: `Bearer ${sk.value}` } };
  const runtime = { kinds: ['user', 'integration', 'device'] as const, team: true };
  assert.equal((await a.authenticate(req, runtime))?.credentialId, 'c1');
  assert.equal((await a.authenticate(req, runtime))?.credentialId, 'c1');
  clock.advance(60_000);
  await assert.rejects(a.authenticate(req, runtime), (e: unknown) => e instanceof AppError && e.code === 'credential_expired');
  assert.equal(src.reads.credential, 1, 'expired on the cached row, without a read');
  cache.close();
});

test('ttlMs 0 turns the cache off: every call reads', async () => {
  const src = source();
  const cache = new CachedAuthLookup(src.lookup, new InMemoryInvalidation(), { maxEntries: 10, ttlMs: 0, clock: new FakeClock() });
  src.creds.set('h', row('c1'));
  await cache.credentialByHash('h');
  await cache.credentialByHash('h');
  assert.equal(src.reads.credential, 2);
  cache.close();
});
