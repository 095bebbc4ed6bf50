// Idempotency-Key on the creating POSTs other than run: one wrapper (src/edge/idempotency.ts) for
// all of them. Replay returns the original response and creates nothing; another body is 409; keys
// are per team; concurrent duplicates create exactly one resource; a secret shown once is never
// stored (its replay is a 409 naming the created id).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, type TestUser } from '../helpers/identity.js';
import { tinyGraph } from '../agents/helpers.js';

let t: TestNode;
let a: TestUser;
let b: TestUser;
before(async () => {
  t = await startTestNode({ GANTRY_AUTH_RATE_LIMIT_PER_MIN: 100_000 }, 'idemcreate');
  a = await registerUser(t.http);
  b = await registerUser(t.http);
});
after(async () => t?.stop());

const key = (): string => `k-${randomBytes(6).toString('hex')}`;
const as = (u: TestUser, k: string) => ({ token: u.accessToken, team: u.teamId, headers: { 'Idempotency-Key': k } });
const count = async (sql: string, params: unknown[]): Promise<number> => Number((await t.node.db.execute<{ n: number }>(sql, params))[0]?.n);

const cases: Array<{ path: string; body: () => Record<string, unknown>; other: () => Record<string, unknown>; rows: (u: TestUser) => Promise<number> }> = [
  {
    path: '/workflows',
    body: () => ({ workflow_slug: `idem-${randomBytes(3).toString('hex')}`, display_name: 'idem', workflow_json: tinyGraph() }),
    other: () => ({ workflow_slug: `idem-other-${randomBytes(3).toString('hex')}`, display_name: 'idem', workflow_json: tinyGraph() }),
    rows: (u) => count('select count(*)::int as n from workflows where team_id = ?', [u.teamId]),
  },
  {
    path: '/webhooks',
    body: () => ({ display_name: 'idem', webhook_url: 'https://127.0.0.1:9/hook', webhook_events: ['task.completed'] }),
    other: () => ({ display_name: 'idem-2', webhook_url: 'https://127.0.0.1:9/hook', webhook_events: ['task.completed'] }),
    rows: (u) => count('select count(*)::int as n from webhooks where team_id = ?', [u.teamId]),
  },
  {
    path: '/teams/current/invitations',
    body: () => ({ email_address: `invitee-${randomBytes(3).toString('hex')}@example.test`, member_role: 'member' }),
    other: () => ({ email_address: `other-${randomBytes(3).toString('hex')}@example.test`, member_role: 'member' }),
    rows: (u) => count('select count(*)::int as n from invitations where team_id = ?', [u.teamId]),
  },
];

for (const c of cases) {
  test(`POST ${c.path}: the same key and body replays the original response and creates nothing; another body is 409`, async () => {
    const k = key();
    const body = c.body();
    const first = await t.http.post(c.path, body, as(a, k));
    assert.equal(first.status, 200, first.text);
    const before = await c.rows(a);
    const again = await t.http.post(c.path, body, as(a, k));
    assert.equal(again.status, first.status);
    assert.deepEqual(again.body, first.body, 'the original response (same id)');
    assert.equal(await c.rows(a), before, 'nothing new');
    const other = await t.http.post(c.path, c.other(), as(a, k));
    assert.equal(other.status, 409);
    assert.equal(other.body.error_code, 'idempotency_key_reused');
    // another team's same key is its own
    const bFirst = await t.http.post(c.path, c.body(), as(b, k));
    assert.equal(bFirst.status, 200, bFirst.text);
  });
}

test('concurrent duplicates (one key, one body) create exactly one workflow', async () => {
  const k = key();
  const body = cases[0]?.body() as Record<string, unknown>;
  const before = await (cases[0] as (typeof cases)[0]).rows(a);
  const rs = await Promise.all(Array.from({ length: 6 }, () => t.http.post('/workflows', body, as(a, k))));
  const ok = rs.filter((r) => r.status === 200);
  const busy = rs.filter((r) => r.status === 409 && r.body.error_code === 'idempotency_key_in_progress');
  assert.equal(ok.length + busy.length, rs.length, JSON.stringify(rs.map((r) => [r.status, r.body.error_code])));
  assert.equal(new Set(ok.map((r) => r.body.id)).size, 1, 'every 200 names the same workflow');
  assert.equal(await (cases[0] as (typeof cases)[0]).rows(a), before + 1, 'exactly one created');
  const later = await t.http.post('/workflows', body, as(a, k));
  assert.equal(later.status, 200);
  assert.equal(later.body.id, ok[0]?.body.id);
});

test('POST /credentials: the secret is shown once and never stored; a replay is 409 naming the created credential', async () => {
  const k = key();
  const body = { credential_type: 'integration', display_name: 'idem' };
  const first = await t.http.post('/credentials', body, as(a, k));
  assert.equal(first.status, 200, first.text);
  assert.match(first.body.credential_value, /^sk-/);
  const stored = await t.node.db.execute<{ response_body: unknown }>('select response_body from idempotency_keys where idem_key = ?', [k]);
  assert.ok(!JSON.stringify(stored).includes(first.body.credential_value), 'the secret is not in the database');
  const again = await t.http.post('/credentials', body, as(a, k));
  assert.equal(again.status, 409);
  assert.equal(again.body.error_code, 'idempotency_replay_unavailable');
  assert.ok(String(again.body.error_message).includes(first.body.id), 'names the created credential');
  assert.equal(await count('select count(*)::int as n from credentials where team_id = ? and display_name = ?', [a.teamId, 'idem']), 1);
});

test('POST /teams (no team yet: keyed per user) and a failed request frees its key', async () => {
  const k = key();
  const first = await t.http.post('/teams', { display_name: 'idem team' }, { token: a.accessToken, headers: { 'Idempotency-Key': k } });
  assert.equal(first.status, 200, first.text);
  const again = await t.http.post('/teams', { display_name: 'idem team' }, { token: a.accessToken, headers: { 'Idempotency-Key': k } });
  assert.deepEqual(again.body, first.body);
  // a request that fails (400) does not keep the key: the corrected request with it runs
  const k2 = key();
  const bad = await t.http.post('/workflows', { workflow_slug: 'NOT A SLUG' }, as(a, k2));
  assert.equal(bad.status, 400);
  const good = await t.http.post('/workflows', cases[0]?.body(), as(a, k2));
  assert.equal(good.status, 200, good.text);
});

test('a key outside visible ASCII or too long is 400, one rule for every route', async () => {
  for (const bad of ['has space', 'x'.repeat(256)]) {
    const r = await t.http.post('/workflows', cases[0]?.body(), as(a, bad));
    assert.equal(r.status, 400, `${JSON.stringify(bad.slice(0, 20))}: ${r.text}`);
  }
});
