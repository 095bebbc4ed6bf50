/**
 * The credential vault routes over real HTTP against PostgreSQL. main.ts does not mount them yet
 * (the integrator wires them), so the test mounts vaultRoutes on an HttpEdge of its own with the
 * test node's real authenticator (users, teams, roles, sk-/dk- credentials come from the node).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { createLogger } from '../../src/shared/logger.js';
import { HttpEdge, type HttpServerHandle } from '../../src/edge/http.js';
import { vaultRoutes } from '../../src/edge/routes/vault.js';
import { VaultStore } from '../../src/vault/store.js';
import { VaultUseCases } from '../../src/app/vault.js';
import { VaultDecryptError, VaultKeyring } from '../../src/vault/keyring.js';
import { HttpClient, startTestNode, type HttpResult, type TestNode } from '../helpers/node.js';
import { addMember, createCredential, pairDevice, registerUser, type TestUser } from '../helpers/identity.js';

const raw: string[] = [];
const dest = new Writable({
  write(chunk: Buffer, _enc, cb) {
    raw.push(String(chunk));
    cb();
  },
});
const logger = createLogger('debug', dest);

const K1 = randomBytes(32).toString('base64');
const K2 = randomBytes(32).toString('base64');
const ring1 = VaultKeyring.fromConfig({ keys: `k1:${K1}`, fallbackSecret: 'test-deployment-secret' });

let t: TestNode;
let handle: HttpServerHandle;
let http: HttpClient;
let vault: VaultStore;
let owner: TestUser;
let admin: TestUser;
let member: TestUser;
let stranger: TestUser;
/** Every secret value sent in this file: none may come back in a response, a log line or a row. */
const secrets: string[] = [];
const responses: string[] = [];

const secret = (label: string): string => {
  const v = `Bearer ${label}-${randomBytes(12).toString('hex')}`;
  secrets.push(v);
  return v;
};

before(async () => {
  t = await startTestNode({}, 'vault', { logger });
  vault = new VaultStore(t.node.db, ring1);
  const edge = new HttpEdge({ host: '127.0.0.1', port: 0, basePath: '/api/v1', maxBodyBytes: 1024 * 1024, logger, authenticator: t.node.identity.authenticator });
  edge.addAll(vaultRoutes(new VaultUseCases(vault)));
  handle = await edge.listen();
  http = new HttpClient(`http://127.0.0.1:${handle.port}/api/v1`);
  // every response of the vault edge is recorded
  const req = http.req.bind(http);
  http.req = async <T>(method: string, path: string, o?: Parameters<HttpClient['req']>[2]): Promise<HttpResult<T>> => {
    const r = await req<T>(method, path, o);
    const hs: string[] = [];
    r.headers.forEach((v, k) => hs.push(`${k}: ${v}`));
    responses.push(r.text, hs.join('\n'));
    return r;
  };
  owner = await registerUser(t.http);
  admin = await registerUser(t.http);
  member = await registerUser(t.http);
  stranger = await registerUser(t.http);
  await addMember(t.http, t.node, owner, admin, 'admin');
  await addMember(t.http, t.node, owner, member, 'member');
});

after(async () => {
  await handle?.shutdown(1000);
  await t?.stop();
});

const as = (u: TestUser, team = owner.teamId) => ({ token: u.accessToken, team });
const create = async (u: TestUser, body: Record<string, unknown>, team = owner.teamId): Promise<HttpResult> => http.post('/vault/credentials', body, as(u, team));

test('CRUD: create, list, detail, update (re-encrypts), delete; the value is never returned', async () => {
  const value = secret('crud');
  const c = await create(owner, { display_name: 'OpenAI', header_name: 'Authorization', header_value: value });
  assert.equal(c.status, 200, c.text);
  assert.deepEqual(Object.keys(c.body), ['id']);
  const id = c.body.id as string;

  const list = await http.get('/vault/credentials', as(member));
  assert.equal(list.status, 200, list.text);
  assert.deepEqual(Object.keys(list.body.page_meta).sort(), ['current_page', 'per_page', 'total_count']);
  const item = list.body.credential_list.find((x: any) => x.id === id);
  assert.ok(item);
  assert.deepEqual(Object.keys(item).sort(), ['created_at', 'display_name', 'header_name', 'id', 'key_id', 'updated_at', 'value_hint']);
  assert.equal(item.display_name, 'OpenAI');
  assert.equal(item.header_name, 'Authorization');
  assert.equal(item.key_id, 'k1');
  assert.equal(item.value_hint, value.slice(-4));
  assert.match(item.created_at, /Z$/);

  const d = await http.get(`/vault/credentials/${id}`, as(member));
  assert.equal(d.status, 200, d.text);
  assert.deepEqual(d.body, item);
  assert.deepEqual(await vault.resolveHeader(owner.teamId, id), { name: 'Authorization', value });

  // a short secret shows no hint
  const short = secret('s').slice(0, 11);
  secrets.push(short);
  const s = await create(admin, { display_name: 'short one', header_name: 'X-Api-Key', header_value: short });
  assert.equal(s.status, 200, s.text);
  assert.equal((await http.get(`/vault/credentials/${s.body.id}`, as(owner))).body.value_hint, '');

  // update: any of the three fields; a new value is encrypted again
  const before = (await t.node.db.execute<{ secret_enc: string }>('select secret_enc from vault_credentials where id = ?', [id]))[0]?.secret_enc;
  const value2 = secret('crud2');
  const up = await http.put(`/vault/credentials/${id}`, { header_value: value2 }, as(admin));
  assert.equal(up.status, 200, up.text);
  assert.deepEqual(up.body, { id });
  const after1 = (await t.node.db.execute<{ secret_enc: string }>('select secret_enc from vault_credentials where id = ?', [id]))[0]?.secret_enc;
  assert.notEqual(after1, before);
  assert.deepEqual(await vault.resolveHeader(owner.teamId, id), { name: 'Authorization', value: value2 });
  const up2 = await http.put(`/vault/credentials/${id}`, { display_name: 'OpenAI prod', header_name: 'X-Api-Key' }, as(owner));
  assert.equal(up2.status, 200, up2.text);
  const d2 = await http.get(`/vault/credentials/${id}`, as(owner));
  assert.equal(d2.body.display_name, 'OpenAI prod');
  assert.equal(d2.body.header_name, 'X-Api-Key');
  assert.equal(d2.body.value_hint, value2.slice(-4));
  assert.deepEqual(await vault.resolveHeader(owner.teamId, id), { name: 'X-Api-Key', value: value2 });

  // paging
  const p = await http.get('/vault/credentials?per_page=1&current_page=2', as(owner));
  assert.equal(p.status, 200);
  assert.equal(p.body.credential_list.length, 1);
  assert.deepEqual(p.body.page_meta, { current_page: 2, per_page: 1, total_count: 2 });
  assert.equal((await http.get('/vault/credentials?per_page=101', as(owner))).status, 400);

  const del = await http.del(`/vault/credentials/${id}`, as(owner));
  assert.equal(del.status, 200, del.text);
  assert.deepEqual(del.body, { is_success: true });
  assert.equal((await http.get(`/vault/credentials/${id}`, as(owner))).status, 404);
  assert.equal((await http.del(`/vault/credentials/${id}`, as(owner))).status, 404);
  assert.equal(await vault.resolveHeader(owner.teamId, id), null);
  assert.equal((await http.del(`/vault/credentials/${s.body.id}`, as(owner))).status, 200);
});

test('409 on a duplicate display_name (create and rename), per team', async () => {
  const a = await create(owner, { display_name: 'dup', header_name: 'X-Key', header_value: secret('dup-a') });
  assert.equal(a.status, 200, a.text);
  const b = await create(owner, { display_name: 'dup', header_name: 'X-Key', header_value: secret('dup-b') });
  assert.equal(b.status, 409, b.text);
  assert.equal(b.body.error_code, 'credential_name_taken');
  assert.match(b.body.error_message, /dup/);
  const c = await create(owner, { display_name: 'dup 2', header_name: 'X-Key', header_value: secret('dup-c') });
  assert.equal(c.status, 200);
  const r = await http.put(`/vault/credentials/${c.body.id}`, { display_name: 'dup' }, as(owner));
  assert.equal(r.status, 409, r.text);
  assert.equal(r.body.error_code, 'credential_name_taken');
  // another team may use the same name
  const other = await create(stranger, { display_name: 'dup', header_name: 'X-Key', header_value: secret('dup-d') }, stranger.teamId);
  assert.equal(other.status, 200, other.text);
});

test('validation: header_name a token and not hop-by-hop/Host/Content-Length; header_value 1-8192 chars without CR/LF/NUL; messages never quote the value', async () => {
  const ok = { display_name: 'v', header_name: 'X-Key', header_value: 'abc' };
  const crlf = secret('crlf');
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ ...ok, header_name: 'X Key' }, /header_name: must be a valid HTTP header name/],
    [{ ...ok, header_name: 'X-Key:' }, /header_name/],
    [{ ...ok, header_name: '' }, /header_name/],
    [{ ...ok, header_name: 'Host' }, /header_name: must not be a hop-by-hop/],
    [{ ...ok, header_name: 'content-length' }, /header_name: must not be a hop-by-hop/],
    [{ ...ok, header_name: 'Connection' }, /header_name/],
    [{ ...ok, header_name: 'Transfer-Encoding' }, /header_name/],
    [{ ...ok, header_name: 'x'.repeat(129) }, /header_name/],
    [{ ...ok, header_value: `${crlf}\r\nX-Injected: 1` }, /header_value: must not contain CR, LF, NUL/],
    [{ ...ok, header_value: `${crlf}\n` }, /header_value/],
    [{ ...ok, header_value: `${crlf}\u0000` }, /header_value/],
    [{ ...ok, header_value: '' }, /header_value: must not be empty/],
    [{ ...ok, header_value: `${crlf}${'x'.repeat(8193)}` }, /header_value: must be at most 8192 characters/],
    [{ ...ok, header_value: 42 }, /header_value/],
    [{ ...ok, display_name: '' }, /display_name/],
    [{ ...ok, display_name: 'x'.repeat(256) }, /display_name/],
    [{ ...ok, extra: 1 }, /unknown field/],
    [{ display_name: 'v', header_name: 'X-Key' }, /header_value/],
  ];
  for (const [body, msg] of cases) {
    const r = await create(owner, body);
    assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 80)} -> ${r.text}`);
    assert.equal(typeof r.body.error_code, 'string');
    assert.match(r.body.error_message, msg);
    assert.ok(!r.text.includes(crlf), 'the error never quotes the value');
  }
  const max = `k${'x'.repeat(8191)}`;
  const big = await create(owner, { display_name: 'max', header_name: 'X-Max', header_value: max });
  assert.equal(big.status, 200, big.text);
  const id = big.body.id as string;
  assert.equal((await vault.resolveHeader(owner.teamId, id))?.value, max);
  assert.equal((await http.put(`/vault/credentials/${id}`, {}, as(owner))).status, 400);
  assert.equal((await http.put(`/vault/credentials/${id}`, { header_value: 'a\rb' }, as(owner))).status, 400);
  assert.equal((await http.put(`/vault/credentials/${id}`, { header_name: 'Upgrade' }, as(owner))).status, 400);
  assert.equal((await http.get('/vault/credentials/not-a-uuid', as(owner))).status, 400);
  assert.equal((await http.del(`/vault/credentials/${id}`, as(owner))).status, 200);
});

test('auth: sk- refused, members cannot write, JWT needs X-Team-ID, dk- of an admin works, another team gets 404', async () => {
  const c = await create(owner, { display_name: 'auth', header_name: 'X-Key', header_value: secret('auth') });
  assert.equal(c.status, 200, c.text);
  const id = c.body.id as string;

  const sk = await createCredential(t.http, owner, 'integration');
  for (const [method, path, body] of [
    ['GET', '/vault/credentials', undefined],
    ['GET', `/vault/credentials/${id}`, undefined],
    ['POST', '/vault/credentials', { display_name: 'sk', header_name: 'X-Key', header_value: 'abcdef' }],
    ['PUT', `/vault/credentials/${id}`, { display_name: 'sk' }],
    ['DELETE', `/vault/credentials/${id}`, undefined],
  ] as const) {
    const r = await http.req(method, path, { token: sk.value, body });
    assert.ok(r.status === 401 || r.status === 403, `${method} ${path} with sk-: ${r.status} ${r.text}`);
    assert.equal(typeof r.body.error_code, 'string');
  }
  assert.equal((await http.get('/vault/credentials')).status, 401);
  assert.equal((await http.get('/vault/credentials', { token: owner.accessToken })).status, 400, 'JWT without X-Team-ID');

  // a member reads but does not write
  assert.equal((await http.get(`/vault/credentials/${id}`, as(member))).status, 200);
  assert.equal((await create(member, { display_name: 'm', header_name: 'X-Key', header_value: secret('member') })).status, 403);
  assert.equal((await http.put(`/vault/credentials/${id}`, { display_name: 'm' }, as(member))).status, 403);
  assert.equal((await http.del(`/vault/credentials/${id}`, as(member))).status, 403);

  // a dk- behaves as its user (the owner: admin rights); X-Team-ID is ignored for it
  const dev = await pairDevice(t.http, owner);
  const viaDk = await http.post('/vault/credentials', { display_name: 'from desktop', header_name: 'X-Key', header_value: secret('dk') }, { token: dev.deviceCredential, team: stranger.teamId });
  assert.equal(viaDk.status, 200, viaDk.text);
  assert.equal((await vault.get(owner.teamId, viaDk.body.id))?.display_name, 'from desktop');

  // another team: not found, nothing changes
  const s = as(stranger, stranger.teamId);
  assert.equal((await http.get(`/vault/credentials/${id}`, s)).status, 404);
  assert.equal((await http.put(`/vault/credentials/${id}`, { header_value: 'hijack' }, s)).status, 404);
  assert.equal((await http.del(`/vault/credentials/${id}`, s)).status, 404);
  assert.ok(!(await http.get('/vault/credentials', s)).body.credential_list.some((x: any) => x.id === id));
  assert.equal(await vault.resolveHeader(stranger.teamId, id), null);
  // a JWT naming a team the user is not in is refused
  assert.equal((await http.get('/vault/credentials', as(stranger, owner.teamId))).status, 403);
  assert.equal((await vault.get(owner.teamId, id))?.display_name, 'auth');
});

test('rows in PostgreSQL hold no plaintext; a row copied to another team does not decrypt', async () => {
  const value = secret('rows');
  const a = await create(owner, { display_name: 'rows', header_name: 'X-Key', header_value: value });
  assert.equal(a.status, 200);
  const rows = await t.node.db.execute<Record<string, unknown>>('select * from vault_credentials');
  assert.ok(rows.length > 0);
  for (const r of rows) {
    const text = JSON.stringify(r);
    for (const s of secrets) assert.ok(!text.includes(s), 'no plaintext in the table');
    assert.match(String(r.secret_enc), /^v1\.k1\./);
    assert.equal(r.key_id, 'k1');
  }
  // another team's credential gets this row's ciphertext: it does not decrypt there
  const b = await create(stranger, { display_name: 'victim', header_name: 'X-Key', header_value: secret('victim') }, stranger.teamId);
  assert.equal(b.status, 200);
  await t.node.db.execute('update vault_credentials set secret_enc = (select secret_enc from vault_credentials where id = ?) where id = ?', [a.body.id, b.body.id]);
  await assert.rejects(vault.resolveHeader(stranger.teamId, b.body.id), (e: unknown) => e instanceof VaultDecryptError && e.reason === 'auth_failed');
  assert.equal((await http.del(`/vault/credentials/${b.body.id}`, as(stranger, stranger.teamId))).status, 200);
});

test('rotate(): re-encrypts every row not under the active key, idempotent; old rows readable meanwhile', async () => {
  const value = secret('rotate');
  const a = await create(owner, { display_name: 'rotate', header_name: 'X-Key', header_value: value });
  assert.equal(a.status, 200);
  const stale = Number((await t.node.db.execute<{ n: number }>("select count(*)::int as n from vault_credentials where key_id <> 'k2'"))[0]?.n);
  assert.ok(stale >= 2);
  const ring2 = VaultKeyring.fromConfig({ keys: `k2:${K2},k1:${K1}`, fallbackSecret: 'test-deployment-secret' });
  const v2 = new VaultStore(t.node.db, ring2);
  // before the rotation the new keyring reads the old rows, and writes under k2
  assert.deepEqual(await v2.resolveHeader(owner.teamId, a.body.id), { name: 'X-Key', value });
  assert.equal(await v2.rotate(1), stale, 'every stale row, in batches');
  assert.equal(await v2.rotate(), 0, 'nothing left');
  const rows = await t.node.db.execute<{ key_id: string; secret_enc: string }>('select key_id, secret_enc from vault_credentials');
  for (const r of rows) {
    assert.equal(r.key_id, 'k2');
    assert.match(r.secret_enc, /^v1\.k2\./);
  }
  // k1 can now be removed from the list
  const only2 = new VaultStore(t.node.db, VaultKeyring.fromConfig({ keys: `k2:${K2}`, fallbackSecret: 'test-deployment-secret' }));
  assert.deepEqual(await only2.resolveHeader(owner.teamId, a.body.id), { name: 'X-Key', value });
  // and the records say so
  assert.equal((await http.get(`/vault/credentials/${a.body.id}`, as(owner))).body.key_id, 'k2');
  // the old keyring cannot read them
  await assert.rejects(vault.resolveHeader(owner.teamId, a.body.id), (e: unknown) => e instanceof VaultDecryptError && e.reason === 'unknown_key');
});

test('no secret value in any response or log line', () => {
  assert.ok(secrets.length >= 10);
  assert.ok(responses.length > 20);
  const logs = raw.join('');
  assert.match(logs, /vault credential created/, 'the capture works');
  for (const s of secrets) {
    for (const r of responses) assert.ok(!r.includes(s), 'a response carries a secret');
    assert.ok(!logs.includes(s), 'a log line carries a secret');
  }
});
