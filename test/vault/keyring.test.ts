import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { ConfigError } from '../../src/shared/config.js';
import { DERIVED_KID, VaultConfigError, VaultDecryptError, VaultKeyring, vaultAad } from '../../src/vault/keyring.js';

const key = (): string => randomBytes(32).toString('base64');
const SECRET = 'deployment-secret-for-tests';
const TEAM = '0190a1b2-0000-7000-8000-000000000001';
const OTHER_TEAM = '0190a1b2-0000-7000-8000-000000000002';
const CRED = '0190a1b2-0000-7000-8000-0000000000aa';

test('round trip under the derived key (no GANTRY_VAULT_KEYS): v1.<kid>.<iv>.<ct>.<tag>, random IV', () => {
  const ring = VaultKeyring.fromConfig({ fallbackSecret: SECRET });
  assert.equal(ring.activeKid, DERIVED_KID);
  const aad = vaultAad(TEAM, CRED);
  const a = ring.encrypt('Bearer s3cr3t-value', aad);
  const b = ring.encrypt('Bearer s3cr3t-value', aad);
  assert.match(a, /^v1\.d0\.[A-Za-z0-9_-]{16}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{22}$/);
  assert.notEqual(a, b, 'a fresh IV each time');
  assert.ok(!a.includes('s3cr3t'));
  assert.equal(ring.decrypt(a, aad), 'Bearer s3cr3t-value');
  assert.equal(ring.decrypt(b, aad), 'Bearer s3cr3t-value');
  // unicode (Latin-1 and beyond) and the empty string survive
  assert.equal(ring.decrypt(ring.encrypt('ünïcødé ✓', aad), aad), 'ünïcødé ✓');
  assert.equal(ring.decrypt(ring.encrypt('', aad), aad), '');
  // the same deployment secret derives the same key on another node
  assert.equal(VaultKeyring.fromConfig({ fallbackSecret: SECRET }).decrypt(a, aad), 'Bearer s3cr3t-value');
  assert.throws(() => VaultKeyring.fromConfig({ fallbackSecret: 'another secret' }).decrypt(a, aad), (e: unknown) => e instanceof VaultDecryptError && e.reason === 'auth_failed');
});

test('aad binds the ciphertext to (team, credential): another team or id does not decrypt', () => {
  const ring = VaultKeyring.fromConfig({ keys: `k1:${key()}`, fallbackSecret: SECRET });
  const s = ring.encrypt('token-123456789', vaultAad(TEAM, CRED));
  assert.throws(() => ring.decrypt(s, vaultAad(OTHER_TEAM, CRED)), (e: unknown) => e instanceof VaultDecryptError && e.reason === 'auth_failed');
  assert.throws(() => ring.decrypt(s, vaultAad(TEAM, '0190a1b2-0000-7000-8000-0000000000ab')), VaultDecryptError);
  // case of the uuid does not matter
  assert.equal(ring.decrypt(s, vaultAad(TEAM.toUpperCase(), CRED.toUpperCase())), 'token-123456789');
});

test('tampering with any part fails; malformed strings are named as such', () => {
  const ring = VaultKeyring.fromConfig({ keys: `k1:${key()}`, fallbackSecret: SECRET });
  const aad = vaultAad(TEAM, CRED);
  const s = ring.encrypt('the secret value', aad);
  const parts = s.split('.');
  const flip = (b64: string): string => {
    const buf = Buffer.from(b64, 'base64url');
    buf[0] = (buf[0] as number) ^ 1;
    return buf.toString('base64url');
  };
  for (const i of [2, 3, 4]) {
    const t = [...parts];
    t[i] = flip(t[i] as string);
    assert.throws(() => ring.decrypt(t.join('.'), aad), VaultDecryptError, `part ${i}`);
  }
  // truncated ciphertext
  const t = [...parts];
  t[3] = (t[3] as string).slice(0, -2);
  assert.throws(() => ring.decrypt(t.join('.'), aad), VaultDecryptError);
  for (const bad of ['', 'plain text', 'v2.k1.a.b.c', 'v1.k1.a.b', `${s}.x`, 'v1..aaaa.bbbb.cccc']) {
    assert.throws(() => ring.decrypt(bad, aad), (e: unknown) => e instanceof VaultDecryptError && e.reason === 'malformed', JSON.stringify(bad));
  }
});

test('rotation: a new first key writes, old kids still decrypt, a removed kid is named; the derived key always decrypts', () => {
  const k1 = key();
  const k2 = key();
  const aad = vaultAad(TEAM, CRED);
  const before = VaultKeyring.fromConfig({ fallbackSecret: SECRET });
  const derived = before.encrypt('v-derived', aad);
  const r1 = VaultKeyring.fromConfig({ keys: `k1:${k1}`, fallbackSecret: SECRET });
  assert.equal(r1.activeKid, 'k1');
  const old = r1.encrypt('v-k1', aad);
  assert.equal(VaultKeyring.kidOf(old), 'k1');
  assert.equal(r1.decrypt(derived, aad), 'v-derived', 'rows from before GANTRY_VAULT_KEYS was set');

  const r2 = VaultKeyring.fromConfig({ keys: ` k2:${k2} , k1:${k1} `, fallbackSecret: SECRET });
  assert.equal(r2.activeKid, 'k2');
  assert.deepEqual(r2.kids(), ['k2', 'k1', DERIVED_KID]);
  assert.equal(r2.decrypt(old, aad), 'v-k1');
  assert.equal(r2.decrypt(derived, aad), 'v-derived');
  const fresh = r2.encrypt('v-k2', aad);
  assert.equal(VaultKeyring.kidOf(fresh), 'k2');
  assert.equal(r2.decrypt(fresh, aad), 'v-k2');

  // k1 dropped from the list before rotating: its rows name the missing kid
  const r3 = VaultKeyring.fromConfig({ keys: `k2:${k2}`, fallbackSecret: SECRET });
  assert.throws(
    () => r3.decrypt(old, aad),
    (e: unknown) => e instanceof VaultDecryptError && e.reason === 'unknown_key' && /key id k1 is not configured/.test(e.message) && /GANTRY_VAULT_KEYS/.test(e.message),
  );
  // the same kid with a different key is an authentication failure, not garbage
  const r4 = VaultKeyring.fromConfig({ keys: `k1:${key()}`, fallbackSecret: SECRET });
  assert.throws(() => r4.decrypt(old, aad), (e: unknown) => e instanceof VaultDecryptError && e.reason === 'auth_failed');
  // base64url keys are accepted too
  const url = VaultKeyring.fromConfig({ keys: `u1:${Buffer.from(k1, 'base64').toString('base64url')}`, fallbackSecret: SECRET });
  assert.equal(url.activeKid, 'u1');
});

test('bad configuration: clear ConfigErrors that never contain key material', () => {
  const short = randomBytes(16).toString('base64');
  const long = randomBytes(48).toString('base64');
  const cases: Array<[string, RegExp, string?]> = [
    [`k1:${short}`, /entry 1 \(key id k1\): the key must be 32 bytes.*got 16 bytes/, short],
    [`k1:${key()},k2:${long}`, /entry 2 \(key id k2\): the key must be 32 bytes.*got 48 bytes/, long],
    ['k1:not*base64!', /not valid base64/, 'not*base64!'],
    [`${key()}`, /entry 1: expected kid:base64key/],
    [`:${key()}`, /expected kid:base64key/],
    [`bad.kid:${key()}`, /key id must be/],
    [`k1:${key()},k1:${key()}`, /key id k1 is listed twice/],
    [`d0:${key()}`, /key id d0 is reserved/],
  ];
  for (const [keys, msg, material] of cases) {
    assert.throws(
      () => VaultKeyring.fromConfig({ keys, fallbackSecret: SECRET }),
      (e: unknown) => {
        assert.ok(e instanceof VaultConfigError && e instanceof ConfigError, `${keys}: ${String(e)}`);
        assert.match(e.message, /^invalid configuration: GANTRY_VAULT_KEYS/);
        assert.match(e.message, msg);
        if (material) assert.ok(!e.message.includes(material), 'no key material in the message');
        assert.ok(!e.message.includes(SECRET));
        return true;
      },
    );
  }
  assert.throws(() => VaultKeyring.fromConfig({ fallbackSecret: '' }), VaultConfigError);
  // empty and whitespace-only lists fall back to the derived key
  assert.equal(VaultKeyring.fromConfig({ keys: '', fallbackSecret: SECRET }).activeKid, DERIVED_KID);
  assert.equal(VaultKeyring.fromConfig({ keys: ' , ', fallbackSecret: SECRET }).activeKid, DERIVED_KID);
});
