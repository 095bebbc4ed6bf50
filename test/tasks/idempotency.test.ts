import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, type TestUser } from '../helpers/identity.js';
import { comfyBody } from '../workflows-api/fixtures.js';
import { IdempotencyStore } from '../../src/persistence/idempotency-store.js';

let t: TestNode;
let sql: pg.Client;
let alice: TestUser;
let bob: TestUser;
let wfId: string;
let slug: string;
let bobWf: string;

const wf = () => comfyBody({ required_labels: [], required_models: [], min_vram_gb: 0, preferred_gpu: undefined, max_retries: 0 });

before(async () => {
  t = await startTestNode({}, 'idem');
  sql = new pg.Client({ connectionString: t.db.url });
  await sql.connect();
  alice = await registerUser(t.http);
  bob = await registerUser(t.http);
  const body = wf();
  slug = body.workflow_slug;
  const r = await t.http.post('/workflows', body, { token: alice.accessToken, team: alice.teamId });
  assert.equal(r.status, 200, r.text);
  wfId = r.body.id;
  const b = await t.http.post('/workflows', wf(), { token: bob.accessToken, team: bob.teamId });
  assert.equal(b.status, 200, b.text);
  bobWf = b.body.id;
});
after(async () => {
  await sql.end();
  await t.stop();
});

const as = (u: TestUser, key?: string) => ({ token: u.accessToken, team: u.teamId, ...(key === undefined ? {} : { headers: { 'idempotency-key': key } }) });
const newKey = () => `k-${randomBytes(8).toString('hex')}`;
const uniq = (p: string) => `${p} ${randomBytes(6).toString('hex')}`;
const countPrompt = async (prompt: string) => Number((await sql.query(`select count(*)::int as n from tasks where parameters->>'prompt' = $1`, [prompt])).rows[0].n);
const run = (u: TestUser, body: unknown, key?: string, w = wfId) => t.http.post(`/r/workflows/${w}/run`, body, as(u, key));

test('a retry with the same key and body replays the original 202 (same task_id, no new task); the key is committed with the task', async () => {
  const key = newKey();
  const prompt = uniq('retry');
  const first = await run(alice, { parameters: { prompt, steps: 12 }, dispatch_target: 'agent' }, key);
  assert.equal(first.status, 202, first.text);
  assert.equal(first.headers.get('idempotent-replayed'), null);
  const row = (await sql.query('select task_id, response_status, response_body, fingerprint from idempotency_keys where team_id = $1 and idem_key = $2', [alice.teamId, key])).rows[0];
  assert.ok(row, 'the key row exists as soon as the 202 is received');
  assert.equal(row.task_id, first.body.task_id);
  assert.equal(row.response_status, 202);
  assert.deepEqual(row.response_body, { task_id: first.body.task_id });
  assert.match(row.fingerprint, /^[0-9a-f]{64}$/);
  // the same body with its keys in another order is the same request
  const again = await run(alice, { dispatch_target: 'agent', parameters: { steps: 12, prompt } }, key);
  assert.equal(again.status, 202, again.text);
  assert.deepEqual(again.body, { task_id: first.body.task_id });
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.equal(await countPrompt(prompt), 1);
  // without a key the same body is a new task
  const plain = await run(alice, { parameters: { prompt, steps: 12 }, dispatch_target: 'agent' });
  assert.equal(plain.status, 202);
  assert.notEqual(plain.body.task_id, first.body.task_id);
  assert.equal(await countPrompt(prompt), 2);
});

test('the same key with another body or path is 409 idempotency_key_reused and creates nothing', async () => {
  const key = newKey();
  const prompt = uniq('reuse');
  const first = await run(alice, { parameters: { prompt } }, key);
  assert.equal(first.status, 202, first.text);
  const other = await run(alice, { parameters: { prompt, steps: 3 } }, key);
  assert.equal(other.status, 409, other.text);
  assert.equal(other.body.error_code, 'idempotency_key_reused');
  assert.equal(typeof other.body.error_message, 'string');
  const viaSlug = await t.http.post(`/r/workflows/slug/${slug}/run`, { parameters: { prompt } }, as(alice, key));
  assert.equal(viaSlug.status, 409, viaSlug.text);
  assert.equal(viaSlug.body.error_code, 'idempotency_key_reused');
  assert.equal(await countPrompt(prompt), 1);
  // the slug route keeps its own keys: a fresh key there creates, and its retry replays
  const k2 = newKey();
  const s1 = await t.http.post(`/r/workflows/slug/${slug}/run`, { parameters: { prompt } }, as(alice, k2));
  const s2 = await t.http.post(`/r/workflows/slug/${slug}/run`, { parameters: { prompt } }, as(alice, k2));
  assert.equal(s1.status, 202, s1.text);
  assert.equal(s2.status, 202, s2.text);
  assert.equal(s2.body.task_id, s1.body.task_id);
  assert.equal(await countPrompt(prompt), 2);
});

test('keys are per team: another team using the same key gets its own task', async () => {
  const key = newKey();
  const prompt = uniq('teams');
  const a = await run(alice, { parameters: { prompt } }, key);
  const b = await run(bob, { parameters: { prompt } }, key, bobWf);
  assert.equal(a.status, 202, a.text);
  assert.equal(b.status, 202, b.text);
  assert.notEqual(a.body.task_id, b.body.task_id);
  assert.equal(await countPrompt(prompt), 2);
  // bob's key never replays alice's task
  const b2 = await run(bob, { parameters: { prompt } }, key, bobWf);
  assert.equal(b2.body.task_id, b.body.task_id);
});

test('an invalid Idempotency-Key is 400 and creates nothing', async () => {
  const prompt = uniq('badkey');
  for (const key of ['', 'has space', 'x'.repeat(256), 'tab\there']) {
    const r = await run(alice, { parameters: { prompt } }, key);
    assert.equal(r.status, 400, `${JSON.stringify(key)}: ${r.text}`);
    assert.equal(r.body.error_code, 'invalid_parameter');
    assert.match(r.body.error_message, /Idempotency-Key/);
  }
  assert.equal(await countPrompt(prompt), 0);
  const ok = await run(alice, { parameters: { prompt } }, 'x'.repeat(255));
  assert.equal(ok.status, 202, ok.text);
});

test('a request that failed (400) records no key: the corrected request with that key creates the task', async () => {
  const key = newKey();
  const prompt = uniq('fixed');
  const bad = await run(alice, { parameters: { prompt, steps: 999 } }, key);
  assert.equal(bad.status, 400);
  assert.equal((await sql.query('select 1 from idempotency_keys where team_id = $1 and idem_key = $2', [alice.teamId, key])).rowCount, 0);
  const good = await run(alice, { parameters: { prompt } }, key);
  assert.equal(good.status, 202, good.text);
  assert.equal(await countPrompt(prompt), 1);
});

test('20 concurrent identical requests with one key create exactly one task and all answer its task_id', async () => {
  const key = newKey();
  const prompt = uniq('burst');
  const rs = await Promise.all(Array.from({ length: 20 }, () => run(alice, { parameters: { prompt } }, key)));
  for (const r of rs) assert.equal(r.status, 202, r.text);
  assert.equal(new Set(rs.map((r) => r.body.task_id)).size, 1);
  assert.equal(await countPrompt(prompt), 1);
  const row = (await sql.query('select id from tasks where parameters->>$1 = $2', ['prompt', prompt])).rows[0];
  assert.equal(row.id, rs[0]!.body.task_id);
});

test('duplicates inside ONE group-commit batch: the first wins, identical ones replay it, a different body is 409', async () => {
  const key = newKey();
  const prompt = uniq('batch');
  const batcher = t.node.taskQueries.submitBatcher;
  const statsBefore = { ...t.node.taskQueries.submitStats };
  const release = batcher.hold();
  const bodies = [...Array.from({ length: 10 }, () => ({ parameters: { prompt } })), { parameters: { prompt, steps: 7 } }];
  const responses = Promise.all(bodies.map((b) => run(alice, b, key)));
  try {
    await Promise.race([batcher.whenQueued(bodies.length), responses]);
    assert.equal(batcher.queued, bodies.length, 'all requests wait in the held batch');
  } finally {
    release();
  }
  const rs = await responses;
  const statsAfter = t.node.taskQueries.submitStats;
  assert.ok(statsAfter.maxBatch >= bodies.length, JSON.stringify(statsAfter));
  assert.equal(statsAfter.failedBatches, statsBefore.failedBatches);
  const same = rs.slice(0, 10);
  const odd = rs[10]!;
  const created = (await sql.query('select id, parameters from tasks where parameters->>$1 = $2', ['prompt', prompt])).rows;
  assert.equal(created.length, 1, 'exactly one task for the key');
  if (odd.status === 202) {
    // the odd body was first in the batch: it owns the key, the others are 409
    assert.equal(odd.body.task_id, created[0].id);
    for (const r of same) assert.equal(r.status, 409, r.text);
  } else {
    assert.equal(odd.status, 409, odd.text);
    assert.equal(odd.body.error_code, 'idempotency_key_reused');
    for (const r of same) {
      assert.equal(r.status, 202, r.text);
      assert.equal(r.body.task_id, created[0].id);
    }
  }
});

/** Waits until the submit statement (it starts `with v as (`; pg_stat_activity keeps only its first 1 KB) is blocked on another transaction's lock. */
async function untilBlockedOnKey(): Promise<void> {
  for (;;) {
    const n = Number(
      (await sql.query(`select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and query like 'with v as (%jsonb_to_recordset%' and pid <> pg_backend_pid()`)).rows[0].n,
    );
    if (n > 0) return;
    await new Promise((r) => setImmediate(r));
  }
}

test('a concurrent transaction holding the key: the run waits for it; after its rollback the run creates, after its commit the run answers from it', async () => {
  const other = new pg.Client({ connectionString: t.db.url });
  await other.connect();
  try {
    // rollback: the key was never committed, so this run owns it
    const k1 = newKey();
    const p1 = uniq('rolledback');
    await other.query('begin');
    await other.query(`insert into idempotency_keys (team_id, idem_key, fingerprint, response_status, response_body) values ($1, $2, 'x', 202, '{}')`, [alice.teamId, k1]);
    const r1 = run(alice, { parameters: { prompt: p1 } }, k1);
    await untilBlockedOnKey();
    await other.query('rollback');
    const res1 = await r1;
    assert.equal(res1.status, 202, res1.text);
    assert.equal(await countPrompt(p1), 1);
    assert.equal((await sql.query('select task_id from idempotency_keys where team_id = $1 and idem_key = $2', [alice.teamId, k1])).rows[0].task_id, res1.body.task_id);

    // commit of another request's key (another fingerprint): the waiting run is 409, nothing inserted
    const k2 = newKey();
    const p2 = uniq('committed');
    await other.query('begin');
    await other.query(`insert into idempotency_keys (team_id, idem_key, fingerprint, response_status, response_body) values ($1, $2, 'another-request', 202, '{"task_id":"x"}')`, [alice.teamId, k2]);
    const r2 = run(alice, { parameters: { prompt: p2 } }, k2);
    await untilBlockedOnKey();
    await other.query('commit');
    const res2 = await r2;
    assert.equal(res2.status, 409, res2.text);
    assert.equal(res2.body.error_code, 'idempotency_key_reused');
    assert.equal(await countPrompt(p2), 0);
  } finally {
    await other.end();
  }
});

test('keys expire after 24 h: an expired key is not replayed (a new task is created) and the sweep deletes expired keys', async () => {
  const key = newKey();
  const prompt = uniq('expiry');
  const first = await run(alice, { parameters: { prompt } }, key);
  assert.equal(first.status, 202);
  await sql.query(`update idempotency_keys set created_at = now() - interval '24 hours 1 minute' where team_id = $1 and idem_key = $2`, [alice.teamId, key]);
  const second = await run(alice, { parameters: { prompt } }, key);
  assert.equal(second.status, 202, second.text);
  assert.notEqual(second.body.task_id, first.body.task_id);
  assert.equal(await countPrompt(prompt), 2);
  // the key now names the new task and replays it
  const third = await run(alice, { parameters: { prompt } }, key);
  assert.equal(third.body.task_id, second.body.task_id);

  // a key just inside 24 h is still replayed
  await sql.query(`update idempotency_keys set created_at = now() - interval '23 hours 59 minutes' where team_id = $1 and idem_key = $2`, [alice.teamId, key]);
  assert.equal((await run(alice, { parameters: { prompt } }, key)).body.task_id, second.body.task_id);

  const stale = newKey();
  await sql.query(`insert into idempotency_keys (team_id, idem_key, fingerprint, response_status, response_body, created_at) values ($1, $2, 'f', 202, '{}', now() - interval '25 hours')`, [bob.teamId, stale]);
  const swept = await new IdempotencyStore(t.node.db).sweep();
  assert.ok(swept >= 1);
  assert.equal((await sql.query('select 1 from idempotency_keys where idem_key = $1', [stale])).rowCount, 0);
  assert.equal((await sql.query('select 1 from idempotency_keys where idem_key = $1', [key])).rowCount, 1, 'live keys stay');
});
