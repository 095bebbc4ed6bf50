/**
 * Lifecycle write batching against real PostgreSQL: transitions and progress writes of many tasks
 * that arrive in the same tick go out as one statement (one transaction), and each caller still gets
 * exactly its own TransitionResult: fenced per row (a stale epoch or a wrong from-state writes
 * nothing and returns the current record), events appended only for the rows that moved.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { newTeam } from '../helpers/tasks.js';
import { PgTaskStore } from '../../src/persistence/task-store.js';
import type { TaskStatus, TransitionRequest, TransitionResult } from '../../src/actors/ports.js';
import { uuidv7 } from '../../src/shared/ids.js';

let t: TestNode;
let sql: pg.Client;
before(async () => {
  t = await startTestNode({}, 'lifebatch');
  sql = new pg.Client({ connectionString: t.db.url });
  await sql.connect();
});
after(async () => {
  await sql.end();
  await t.stop();
});

/** A pending task of a team no scheduler watches (nothing but this test moves it). */
async function pendingTask(team: string, maxRetries = 0): Promise<string> {
  const id = uuidv7();
  await t.node.taskQueries.insert({
    id,
    teamId: team,
    workflowId: randomUUID(),
    workflowSlug: 'batch-wf',
    workflowVersion: 1,
    snapshotId: null,
    dispatchTarget: 'agent',
    toolType: 'comfyui',
    parameters: { prompt: 'x' },
    resolvedWorkflow: { '1': { class_type: 'SaveImage', inputs: {} } },
    inputFiles: [],
    maxRetries,
    timeoutS: 0,
    requiredLabels: [],
    minVramGb: 0,
    requiredModels: [],
    preferredGpu: null,
    createdByUserId: null,
    createdByCredentialId: null,
  });
  return id;
}

const status = (taskId: string, s: TaskStatus) => ({ type: 'status' as const, data: { task_id: taskId, status: s } });
const row = async (id: string) => (await sql.query('select task_status, lease_epoch, agent_id, progress, task_error, queued_at, started_at from tasks where id = $1', [id])).rows[0];
const eventsOf = async (id: string) => (await sql.query('select id, event_type, payload, xmin::text as tx from task_events where task_id = $1 order by id', [id])).rows;

/** Runs the calls with the store's batcher held, so all of them share one batch. */
async function oneTick<T>(store: PgTaskStore, calls: Array<() => Promise<T>>): Promise<T[]> {
  const b = store.lifecycleBatcher;
  const release = b.hold();
  const all = Promise.all(calls.map((c) => c()));
  try {
    await b.whenQueued(calls.length);
  } finally {
    release();
  }
  return all;
}

const ok = (r: TransitionResult) => {
  assert.ok(r.ok, 'transition applied');
  return r;
};

test('many tasks in one tick: one statement; each caller gets its own result; stale writers write nothing', async () => {
  const team = newTeam();
  const store = new PgTaskStore(t.node.db);
  const agent = randomUUID();
  const ids = await Promise.all(Array.from({ length: 6 }, () => pendingTask(team)));
  const [assignA, assignB, staleEpoch, wrongFrom, toWaiting, cancel] = ids as [string, string, string, string, string, string];
  const now = Date.now();
  const assign = (id: string, epoch: number): TransitionRequest => ({ taskId: id, from: ['pending', 'waiting'], epoch, to: 'queued', patch: { agentId: agent, leaseEpoch: epoch + 1, queuedAt: now }, events: [status(id, 'queued')] });
  const before = { ...store.lifecycleStats };
  const results = await oneTick(store, [
    () => store.transition(assign(assignA, 0)),
    () => store.transition(assign(assignB, 0)),
    () => store.transition(assign(staleEpoch, 7)), // the row's epoch is 0: a stale writer
    () => store.transition({ taskId: wrongFrom, from: ['running'], epoch: 0, to: 'completed', patch: { finishedAt: now }, events: [{ type: 'completed', data: { task_id: wrongFrom } }] }),
    () => store.transition({ taskId: toWaiting, from: ['pending'], to: 'waiting', patch: {}, events: [status(toWaiting, 'waiting')] }),
    () => store.transition({ taskId: cancel, from: ['pending', 'waiting'], to: 'cancelled', patch: { finishedAt: now, error: 'by user' }, events: [{ type: 'cancelled', data: { task_id: cancel, status: 'cancelled' } }] }),
  ]);
  assert.equal(store.lifecycleStats.batches - before.batches, 1, 'six transitions, one batch');
  assert.equal(store.lifecycleStats.maxBatch, 6);

  const [rA, rB, rStale, rWrong, rWait, rCancel] = results as [TransitionResult, TransitionResult, TransitionResult, TransitionResult, TransitionResult, TransitionResult];
  for (const [r, id] of [[rA, assignA], [rB, assignB]] as const) {
    const a = ok(r);
    assert.equal(a.task.id, id);
    assert.equal(a.task.status, 'queued');
    assert.equal(a.task.leaseEpoch, 1);
    assert.equal(a.task.agentId, agent);
    assert.equal(a.retryTaskId, null);
    // the assigning transition carries what the agent needs, read by the same statement
    assert.equal(a.assignment?.taskId, id);
    assert.deepEqual(a.assignment?.workflow, { '1': { class_type: 'SaveImage', inputs: {} } });
    assert.deepEqual(a.assignment?.parameters, { prompt: 'x' });
    assert.equal(a.events.length, 1);
    assert.equal(a.events[0]?.taskId, id);
    assert.equal((a.events[0]?.data as { status: string }).status, 'queued');
  }
  for (const [r, id] of [[rStale, staleEpoch], [rWrong, wrongFrom]] as const) {
    assert.equal(r.ok, false);
    if (r.ok) continue;
    assert.equal(r.current?.id, id, 'a rejected writer gets the current record');
    assert.equal(r.current?.status, 'pending');
    assert.equal(r.current?.leaseEpoch, 0);
    assert.equal((await row(id)).task_status, 'pending', 'nothing was written');
    assert.deepEqual((await eventsOf(id)).map((e) => e.payload.status), ['pending'], 'no event appended for a stale writer');
  }
  assert.equal(ok(rWait).task.status, 'waiting');
  assert.equal(ok(rCancel).task.status, 'cancelled');
  assert.equal((await row(cancel)).task_error, 'by user');
  assert.equal((await row(assignA)).queued_at.getTime(), now);
  // every row that moved, and its event, were written by the same transaction
  const txs = new Set<string>();
  for (const id of [assignA, assignB, toWaiting, cancel]) {
    const ev = await eventsOf(id);
    assert.equal(ev.length, 2);
    assert.ok(Number(ev[1].id) > Number(ev[0].id), 'event ids increase per task');
    txs.add(ev[1].tx);
  }
  assert.equal(txs.size, 1, 'one transaction for the whole batch');
});

test('progress writes batch with transitions and are fenced on running + epoch', async () => {
  const team = newTeam();
  const store = new PgTaskStore(t.node.db);
  const [a, b, c] = await Promise.all([pendingTask(team), pendingTask(team), pendingTask(team)]);
  const now = Date.now();
  for (const id of [a, b]) {
    ok(await store.transition({ taskId: id!, from: ['pending'], epoch: 0, to: 'queued', patch: { agentId: randomUUID(), leaseEpoch: 1, queuedAt: now }, events: [status(id!, 'queued')] }));
    ok(await store.transition({ taskId: id!, from: ['queued'], epoch: 1, to: 'running', patch: { startedAt: now }, events: [status(id!, 'running')] }));
  }
  const p = { progress: 0.5, step_current: 5, step_total: 10, current_node: '3' };
  const before = store.lifecycleStats.batches;
  const [pa, pb, pStale, tc] = await oneTick<unknown>(store, [
    () => store.progress(a!, 1, p, { type: 'progress', data: { task_id: a, ...p } }),
    () => store.progress(b!, 1, p, null),
    () => store.progress(c!, 1, p, { type: 'progress', data: { task_id: c } }), // c is pending: not running
    () => store.transition({ taskId: c!, from: ['pending'], to: 'waiting', patch: {}, events: [status(c!, 'waiting')] }),
  ]);
  assert.equal(store.lifecycleStats.batches - before, 2, 'two ops of the same task never share a batch: c\'s transition went in the next one');
  const r1 = pa as { ok: boolean; event: { taskId: string; type: string } | null };
  assert.equal(r1.ok, true);
  assert.equal(r1.event?.taskId, a);
  assert.equal(r1.event?.type, 'progress');
  assert.deepEqual(pb, { ok: true, event: null });
  assert.deepEqual(pStale, { ok: false, event: null });
  assert.equal((tc as TransitionResult).ok, true, 'the same task\'s later op ran after the first, in order');
  assert.equal((await row(a!)).progress.step_current, 5);
  assert.equal((await row(b!)).progress.step_current, 5);
  assert.equal((await row(c!)).progress, null);
  assert.deepEqual((await eventsOf(c!)).map((e) => e.event_type === 'status' ? e.payload.status : e.event_type), ['pending', 'waiting']);
  // stale epoch: nothing written
  assert.deepEqual(await store.progress(a!, 9, { ...p, step_current: 9 }, { type: 'progress', data: {} }), { ok: false, event: null });
  assert.equal((await row(a!)).progress.step_current, 5);
});

test('one op the database refuses does not fail its batch neighbours (the batch falls back to one statement each); retry-creating transitions ride along', async () => {
  const team = newTeam();
  const store = new PgTaskStore(t.node.db);
  const [good, bad, retry] = await Promise.all([pendingTask(team), pendingTask(team), pendingTask(team, 1)]);
  const now = Date.now();
  const before = store.lifecycleStats.batches;
  const settled = await oneTick<PromiseSettledResult<TransitionResult>>(store, [
    () => store.transition({ taskId: good!, from: ['pending'], to: 'waiting', patch: {}, events: [status(good!, 'waiting')] }).then((value) => ({ status: 'fulfilled', value }) as const, (reason: unknown) => ({ status: 'rejected', reason }) as const),
    // violates tasks_status_ck: PostgreSQL rejects the statement carrying it
    () => store.transition({ taskId: bad!, from: ['pending'], to: 'exploded' as TaskStatus, patch: {}, events: [] }).then((value) => ({ status: 'fulfilled', value }) as const, (reason: unknown) => ({ status: 'rejected', reason }) as const),
    () =>
      store
        .transition({ taskId: retry!, from: ['pending'], to: 'failed', patch: { finishedAt: now, error: 'boom' }, events: [{ type: 'failed', data: { task_id: retry, error: 'boom' } }], createRetry: true })
        .then((value) => ({ status: 'fulfilled', value }) as const, (reason: unknown) => ({ status: 'rejected', reason }) as const),
  ]);
  assert.equal(store.lifecycleStats.batches - before, 1);
  const [g, bd, rt] = settled as [PromiseSettledResult<TransitionResult>, PromiseSettledResult<TransitionResult>, PromiseSettledResult<TransitionResult>];
  assert.equal(g.status, 'fulfilled');
  assert.equal(g.status === 'fulfilled' && g.value.ok && g.value.task.status, 'waiting');
  assert.equal(bd.status, 'rejected', 'only the refused op fails');
  assert.equal((await row(bad!)).task_status, 'pending');
  assert.equal(rt.status, 'fulfilled');
  const r = rt.status === 'fulfilled' ? ok(rt.value) : null;
  assert.ok(r?.retryTaskId, 'the retry task was created in the same statement as the failure');
  assert.equal((await row(r.retryTaskId)).task_status, 'pending');
  assert.equal((await eventsOf(retry!)).at(-1)?.payload.retry_task_id, r.retryTaskId);
});
