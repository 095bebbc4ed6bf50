/**
 * Group commit of submits over real HTTP against a real node and PostgreSQL: concurrent runs share
 * one INSERT statement, every 202 names a committed row, and a batch whose commit PostgreSQL
 * rejects answers 503 to every request in it and 202 to none, leaving none of their rows.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, createCredential, type TestUser } from '../helpers/identity.js';
import { comfyBody } from '../workflows-api/fixtures.js';

let t: TestNode;
let sql: pg.Client;
let alice: TestUser;
let sk: string;
let wfId: string;
let slug: string;

const MARKER = 'reject-me-at-commit';

before(async () => {
  t = await startTestNode({ GANTRY_DB_POOL_MAX: 8 }, 'groupcommit');
  sql = new pg.Client({ connectionString: t.db.url });
  await sql.connect();
  alice = await registerUser(t.http);
  const body = comfyBody({ required_labels: [], required_models: [], min_vram_gb: 0, preferred_gpu: undefined, max_retries: 0 });
  slug = body.workflow_slug;
  const r = await t.http.post('/workflows', body, { token: alice.accessToken, team: alice.teamId });
  assert.equal(r.status, 200, r.text);
  wfId = r.body.id;
  sk = (await createCredential(t.http, alice, 'integration')).value;
  // PostgreSQL itself refuses to commit a transaction that inserted a task carrying the marker
  // prompt: a deferred constraint trigger runs at COMMIT, after the whole batch statement succeeded.
  await sql.query(`create function test_reject_marker() returns trigger language plpgsql as $$
    begin
      if new.parameters->>'prompt' = '${MARKER}' then raise exception 'commit rejected for the marker task'; end if;
      return null;
    end $$`);
  await sql.query(`create constraint trigger test_reject_marker after insert on tasks deferrable initially deferred for each row execute function test_reject_marker()`);
});
after(async () => {
  await sql.end();
  await t.stop();
});

const run = (i: number, prompt: string) =>
  i % 2 === 0 ? t.http.post(`/r/workflows/${wfId}/run`, { parameters: { prompt } }, { token: sk }) : t.http.post(`/r/workflows/slug/${slug}/run`, { parameters: { prompt } }, { token: sk });

/** Fires the requests while the submit batcher is held, so all of them land in ONE batch. */
async function oneBatch(prompts: string[]) {
  const batcher = t.node.taskQueries.submitBatcher;
  const release = batcher.hold();
  const responses = Promise.all(prompts.map((p, i) => run(i, p)));
  try {
    // every request reached the insert (a request answered before it ends the wait, and fails below)
    await Promise.race([batcher.whenQueued(prompts.length), responses]);
    assert.equal(batcher.queued, prompts.length, 'all requests wait in the held batch');
  } finally {
    release();
  }
  return responses;
}

const countPrompts = async (prefix: string) =>
  Number((await sql.query(`select count(*)::int as n from tasks where parameters->>'prompt' like $1`, [`${prefix}%`])).rows[0].n);

test('500 concurrent submits: every 202 names a committed task with its pending event, written in far fewer statements than requests', async () => {
  const before = { ...t.node.taskQueries.submitStats };
  const N = 500;
  const rs = await Promise.all(Array.from({ length: N }, (_, i) => run(i, `burst ${i}`)));
  for (const r of rs) assert.equal(r.status, 202, r.text);
  const ids = rs.map((r) => r.body.task_id as string);
  assert.equal(new Set(ids).size, N);
  const rows = (await sql.query('select id, parameters from tasks where id = any($1::uuid[])', [ids])).rows;
  assert.equal(rows.length, N, 'every 202 task_id is a row in PostgreSQL');
  const prompts = new Map(rows.map((r) => [r.id as string, r.parameters.prompt as string]));
  rs.forEach((r, i) => assert.equal(prompts.get(r.body.task_id), `burst ${i}`, 'each 202 names its own request\'s task'));
  // the first event of every task is its pending status, exactly once
  const ev = (
    await sql.query(
      `select task_id, count(*)::int as n, count(distinct xmin::text)::int as tx from task_events
       where task_id = any($1::uuid[]) and event_type = 'status' and payload->>'status' = 'pending' group by task_id`,
      [ids],
    )
  ).rows;
  assert.equal(ev.length, N);
  for (const e of ev) assert.equal(e.n, 1);
  // rows written by one statement share its transaction id (xmin): far fewer transactions than requests
  const txs = Number(
    (await sql.query(`select count(distinct xmin::text)::int as n from task_events where task_id = any($1::uuid[]) and payload->>'status' = 'pending'`, [ids])).rows[0].n,
  );
  assert.ok(txs < N, `pending events of ${N} submits were written by ${txs} transactions`);
  const after = t.node.taskQueries.submitStats;
  assert.equal(after.items - before.items, N);
  assert.ok(after.batches - before.batches < N, `${N} submits went out in ${after.batches - before.batches} insert statements`);
  assert.ok(after.maxBatch > 1);
  assert.equal(after.failedBatches, before.failedBatches);
});

test('a held batch is one statement: its requests all get 202 and their rows share one transaction', async () => {
  const prompts = Array.from({ length: 12 }, (_, i) => `together ${i}`);
  const rs = await oneBatch(prompts);
  for (const r of rs) assert.equal(r.status, 202, r.text);
  const ids = rs.map((r) => r.body.task_id as string);
  const tx = (await sql.query(`select count(distinct xmin::text)::int as n from task_events where task_id = any($1::uuid[]) and payload->>'status' = 'pending'`, [ids])).rows[0].n;
  assert.equal(tx, 1, 'the 12 tasks and their events were committed by one transaction');
  assert.equal(await countPrompts('together '), 12);
});

test('PostgreSQL rejects the commit of a batch: every request of that batch answers 503 and none is 202; none of its rows exist; the next batch commits', async () => {
  const failedBefore = t.node.taskQueries.submitStats.failedBatches;
  const pendingEvents = async () => Number((await sql.query(`select count(*)::int as n from task_events where payload->>'status' = 'pending'`)).rows[0].n);
  const eventsBefore = await pendingEvents();
  const prompts = Array.from({ length: 20 }, (_, i) => (i === 7 ? MARKER : `doomed ${i}`));
  const rs = await oneBatch(prompts);
  for (const r of rs) {
    assert.equal(r.status, 503, r.text);
    assert.equal(r.body.error_code, 'task_submit_failed');
    assert.equal(typeof r.body.error_message, 'string');
    assert.equal(r.body.task_id, undefined);
  }
  assert.equal(t.node.taskQueries.submitStats.failedBatches, failedBefore + 1);
  assert.equal(await countPrompts('doomed '), 0, 'no row of the rejected batch was committed');
  assert.equal(await countPrompts(MARKER), 0);
  assert.equal(await pendingEvents(), eventsBefore, 'no task event of the rejected batch was committed');
  assert.equal(Number((await sql.query('select count(*)::int as n from task_events e where not exists (select 1 from tasks t where t.id = e.task_id)')).rows[0].n), 0);

  // the failure belonged to that batch only: the same requests without the marker commit
  const again = await oneBatch(prompts.map((p) => (p === MARKER ? 'doomed 7' : p)));
  for (const r of again) assert.equal(r.status, 202, r.text);
  assert.equal(await countPrompts('doomed '), 20);
});
