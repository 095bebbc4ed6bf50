// Token signing keys shared through PostgreSQL: nodes agree without a PEM, rotation keeps the
// previous key verifiable through its grace period, a wrong deployment secret is refused.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateKeyPairSync } from 'node:crypto';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { PgSigningKeys } from '../../src/identity/signing-keys.js';
import { JwtService, JWT_KEY_FILE } from '../../src/identity/tokens.js';
import { ConfigError } from '../../src/shared/config.js';
import { createLogger } from '../../src/shared/logger.js';

const logger = createLogger('silent');
const SECRET = 'a-deployment-secret-of-at-least-32-characters';
const SID = '01a20000-0000-7000-8000-000000000001';
let t: TestNode;
let dir: string;
before(async () => {
  t = await startTestNode({ GANTRY_SECRET_KEY: SECRET }, 'sigkeys');
  dir = mkdtempSync(join(tmpdir(), 'gantry-keys-'));
});
after(async () => {
  await t?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const ring = (o: { now?: () => number; secret?: string; rotateDays?: number } = {}) =>
  PgSigningKeys.open({ db: t.node.db, secret: o.secret ?? SECRET, dataDir: dir, rotateDays: o.rotateDays ?? 30, accessTokenTtlS: 900, logger, ...(o.now ? { now: o.now } : {}) });
const jwtOf = (keyring: PgSigningKeys, now?: () => number) => new JwtService(null, { issuer: 'gantry', audience: 'gantry-api', ttlS: 900, keyring, ...(now ? { now } : {}) });

test('the node keeps its signing key in PostgreSQL, encrypted; a second node with the same secret signs and verifies with it', async () => {
  const rows = await t.node.db.execute<{ kid: string; private_enc: string }>('select kid, private_enc from signing_keys');
  assert.equal(rows.length, 1, 'the test node created one key at start');
  assert.ok(!rows[0]?.private_enc.includes('PRIVATE KEY'), 'the private key is not stored in clear');
  const a = await ring();
  const b = await ring();
  assert.deepEqual(a.kids(), b.kids());
  const { token } = await jwtOf(a).issue('u1', 0, SID);
  assert.equal((await jwtOf(b).verify(token)).userId, 'u1');
  // the test node itself verifies it too (same table)
  const header = JSON.parse(Buffer.from(token.split('.')[0] as string, 'base64url').toString()) as { kid: string };
  assert.equal(header.kid, rows[0]?.kid);
});

test('rotation on one node: its new tokens verify on another at once (unknown kid re-read), the old key verifies through its grace period, then not', async () => {
  let now = Date.now();
  const clock = () => now;
  const a = await ring({ now: clock });
  const b = await ring({ now: clock });
  const old = (await jwtOf(a, clock).issue('u-old', 0, SID)).token;
  now += 2000; // past the re-read throttle
  await a.rotate();
  assert.notEqual(a.active().kid, b.active().kid, 'b has not re-read yet');
  const fresh = (await jwtOf(a, clock).issue('u-new', 0, SID)).token;
  assert.equal((await jwtOf(b, clock).verify(fresh)).userId, 'u-new', 'the new kid is fetched on demand');
  assert.equal((await jwtOf(b, clock).verify(old)).userId, 'u-old', 'the previous key still verifies');
  // past the grace period (two token lifetimes after the new key): the old key is gone
  now += 2 * 900_000 + 1000;
  await b.reload();
  await assert.rejects(jwtOf(b, () => now - 2 * 900_000).verify(old), /credential_invalid|invalid access token/);
});

test('a node whose GANTRY_SECRET_KEY differs refuses to start, naming the variable', async () => {
  await assert.rejects(ring({ secret: 'another-secret-of-at-least-32-characters!!' }), (e: unknown) => e instanceof ConfigError && /GANTRY_SECRET_KEY/.test(e.message));
});

test('an install from before (a PEM in the data dir) is imported as the first key: its tokens keep verifying', async () => {
  const legacy = await startTestNode({}, 'sigkeys2');
  try {
    await legacy.node.db.execute('delete from signing_keys');
    const d = mkdtempSync(join(tmpdir(), 'gantry-legacy-'));
    const pk = generateKeyPairSync('ed25519').privateKey;
    writeFileSync(join(d, JWT_KEY_FILE), pk.export({ type: 'pkcs8', format: 'pem' }).toString());
    const before = await new JwtService(pk, { issuer: 'gantry', audience: 'gantry-api', ttlS: 900 }).issue('u-legacy', 0, SID);
    const r = await PgSigningKeys.open({ db: legacy.node.db, secret: SECRET, dataDir: d, rotateDays: 30, accessTokenTtlS: 900, logger });
    assert.equal((await jwtOf(r).verify(before.token)).userId, 'u-legacy');
    rmSync(d, { recursive: true, force: true });
  } finally {
    await legacy.stop();
  }
});

test('GANTRY_JWT_PRIVATE_KEY overrides: that key signs and nothing is stored', async () => {
  const pem = generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const n = await startTestNode({ GANTRY_JWT_PRIVATE_KEY: pem }, 'sigkeys3');
  try {
    assert.equal((await n.node.db.execute('select kid from signing_keys')).length, 0);
    const r = await n.http.post('/auth/register', { email_address: 'pem@example.test', password: 'correct horse battery staple', first_name: 'P', last_name: 'K' });
    assert.ok(r.status < 300, r.text);
  } finally {
    await n.stop();
  }
});

test('cluster mode (REDIS_URL) without GANTRY_SECRET_KEY (and no PEM) is a configuration error naming it', async () => {
  const { loadConfig } = await import('../../src/shared/config.js');
  assert.throws(() => loadConfig({ REDIS_URL: 'redis://127.0.0.1:6379' }), (e: unknown) => e instanceof ConfigError && /GANTRY_SECRET_KEY is required in cluster mode/.test(e.message));
  assert.throws(() => loadConfig({ GANTRY_SECRET_KEY: 'short' }), (e: unknown) => e instanceof ConfigError && /GANTRY_SECRET_KEY/.test(e.message));
  assert.doesNotThrow(() => loadConfig({ REDIS_URL: 'redis://127.0.0.1:6379', GANTRY_SECRET_KEY: SECRET }));
});
