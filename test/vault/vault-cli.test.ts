/** `gantry vault rotate`: after a new first key in GANTRY_VAULT_KEYS, every secret is re-encrypted with it and still resolves. */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser } from '../helpers/identity.js';
import { VaultKeyring } from '../../src/vault/keyring.js';
import { VaultStore } from '../../src/vault/store.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const SECRET_KEY = 'vault-cli-test-secret-key-0123456789abcdef';
let t: TestNode | null = null;
after(async () => t?.stop());

test('gantry vault rotate re-encrypts with the new active key; the value is unchanged', async () => {
  t = await startTestNode({ GANTRY_SECRET_KEY: SECRET_KEY }, 'vault_cli');
  const u = await registerUser(t.http);
  const created = await t.http.post('/vault/credentials', { display_name: 'k', header_name: 'X-Api-Key', header_value: 'the-value-1234567890' }, { token: u.accessToken, team: u.teamId });
  assert.equal(created.status, 200, created.text);
  const newKey = `k2:${randomBytes(32).toString('base64')}`;
  const run = await promisify(execFile)(process.execPath, [join(root, 'bin/gantry.mjs'), 'vault', 'rotate'], {
    cwd: root,
    env: { ...process.env, DATABASE_URL: t.db.url, GANTRY_DATA_DIR: t.dataDir, GANTRY_SECRET_KEY: SECRET_KEY, GANTRY_VAULT_KEYS: newKey, LOG_LEVEL: 'silent' },
  });
  assert.match(run.stdout, /re-encrypted 1 vault credential\(s\) and 0 cloud provider key\(s\) with key k2/);
  const rows = await t.node.db.execute<{ key_id: string }>('select key_id from vault_credentials', []);
  assert.deepEqual(rows.map((r) => r.key_id), ['k2']);
  const store = new VaultStore(t.node.db, VaultKeyring.fromConfig({ keys: newKey, fallbackSecret: SECRET_KEY }));
  assert.deepEqual(await store.resolveHeader(u.teamId, created.body.id as string), { name: 'X-Api-Key', value: 'the-value-1234567890' });
  // a bad invocation is a usage error
  await assert.rejects(promisify(execFile)(process.execPath, [join(root, 'bin/gantry.mjs'), 'vault', 'spin'], { cwd: root }), (e: { code?: number }) => e.code === 2);
});
