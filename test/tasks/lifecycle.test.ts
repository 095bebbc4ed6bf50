import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { FakeAgent } from '../helpers/fake-agent.js';
import { submitTask, waitForStatus, newTeam } from '../helpers/tasks.js';
import { FakeClock } from '../../src/shared/clock.js';
import { recoverOwned } from '../../src/actors/index.js';

let t: TestNode;
let clock: FakeClock;
let sql: pg.Client;
before(async () => {
  clock = new FakeClock(Date.now());
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 5, GANTRY_TASK_TIMEOUT_MAX_S: 3600, GANTRY_ACK_TIMEOUT_S: 30, GANTRY_RETRY_BACKOFF_BASE_S: 0 }, 'life', { clock });
  sql = new pg.Client({ connectionString: t.db.url });
  await sql.connect();
});
after(async () => {
  await sql.end();
  await t.stop();
});

const events = async (taskId: string) => (await sql.query('select event_type, payload from task_events where task_id = $1 order by id', [taskId])).rows as Array<{ event_type: string; payload: any }>;
const row = async (taskId: string) => (await sql.query('select * from tasks where id = $1', [taskId])).rows[0];
/** Lets queued actor turns run (they await PostgreSQL) without advancing the fake clock. */
const settle = async (taskId: string) => t.node.actors.ask({ kind: 'task', id: taskId }, { type: 'get' });

test('happy path: pending -> queued -> running -> progress -> completed, every transition has its event row', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team }).connect();
  const id = await submitTask(t.node, team);
  const a = await agent.assignment(id);
  assert.equal(a.epoch, 1);
  assert.equal(a.attempt, 1);
  await waitForStatus(t.node, id, 'queued');
  agent.ack(a);
  await waitForStatus(t.node, id, 'running');
  agent.progress(a, { progress: 0.5, step_current: 10, step_total: 20, current_node: '3 KSampler' });
  await settle(id);
  agent.finish(a);
  await waitForStatus(t.node, id, 'completed');
  const ev = await events(id);
  assert.deepEqual(
    ev.map((e) => (e.event_type === 'status' ? e.payload.status : e.event_type)),
    ['pending', 'queued', 'running', 'progress', 'completed'],
  );
  assert.equal(ev[3]!.payload.step_current, 10);
  assert.deepEqual(ev[4]!.payload.output, { storage_key: `outputs/${id}/output.png`, image_count: 1 });
  assert.equal((await row(id)).agent_id, agent.agentId);
});

test('no eligible agent -> waiting; an agent that connects later gets it', async () => {
  const team = newTeam();
  const id = await submitTask(t.node, team, { requiredLabels: ['a100'] });
  await waitForStatus(t.node, id, 'waiting');
  const wrong = await new FakeAgent(t.node, { teamId: team, labels: ['t4'] }).connect();
  const right = await new FakeAgent(t.node, { teamId: team, labels: ['a100', 'fast'] }).connect();
  const a = await right.assignment(id);
  await waitForStatus(t.node, id, 'queued');
  assert.equal(wrong.inbox.length, 0);
  assert.equal(a.taskId, id);
});

test('timeout counts from ACK, not from submission', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team }).connect();
  const id = await submitTask(t.node, team, { timeoutS: 10 });
  const a = await agent.assignment(id);
  clock.advance(25_000); // 25 s queued (more than task_timeout 10 s, less than the ACK deadline): no timeout before ACK
  await settle(id);
  assert.equal((await row(id)).task_status, 'queued');
  agent.ack(a);
  await waitForStatus(t.node, id, 'running');
  clock.advance(9_000);
  await settle(id);
  assert.equal((await row(id)).task_status, 'running');
  clock.advance(1_500);
  await waitForStatus(t.node, id, 'failed');
  const r = await row(id);
  assert.match(r.task_error, /timed out after 10 s/);
  // the agent was told to interrupt
  await agent.next((m) => m.type === 'cancel' && m.taskId === id);
});

test('a task_timeout above GANTRY_TASK_TIMEOUT_MAX_S is honoured (not cut to it); 0 is the maximum', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team }).connect();
  // the node's maximum is 3600 s; the workflow asks for 2 h
  const id = await submitTask(t.node, team, { timeoutS: 7200 });
  const a = await agent.assignment(id);
  agent.ack(a);
  await waitForStatus(t.node, id, 'running');
  clock.advance(3_700_000);
  await settle(id);
  assert.equal((await row(id)).task_status, 'running', 'still running after the node maximum');
  clock.advance(3_600_000);
  await waitForStatus(t.node, id, 'failed');
  assert.match((await row(id)).task_error, /timed out after 7200 s/);
  await agent.next((m) => m.type === 'cancel' && m.taskId === id);
  // task_timeout 0: the node's maximum
  const zero = await submitTask(t.node, team, { timeoutS: 0 });
  const z = await agent.assignment(zero);
  agent.ack(z);
  await waitForStatus(t.node, zero, 'running');
  clock.advance(3_600_500);
  await waitForStatus(t.node, zero, 'failed');
  assert.match((await row(zero)).task_error, /timed out after 3600 s/);
});

test('retry: a new task (attempt+1) linked both ways, created in the failing transaction, up to max_retries', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team }).connect();
  const id = await submitTask(t.node, team, { maxRetries: 1 });
  const a1 = await agent.assignment(id);
  agent.ack(a1);
  await waitForStatus(t.node, id, 'running');
  agent.fail(a1, 'CUDA out of memory');
  await waitForStatus(t.node, id, 'failed');
  const first = await row(id);
  assert.ok(first.retry_task_id);
  const ev = await events(id);
  const failed = ev.find((e) => e.event_type === 'failed')!;
  assert.equal(failed.payload.retry_task_id, first.retry_task_id);
  assert.equal(failed.payload.error, 'CUDA out of memory');
  const retry = await row(first.retry_task_id);
  assert.equal(retry.parent_task_id, id);
  assert.equal(retry.attempt, 2);
  const a2 = await agent.assignment(first.retry_task_id);
  assert.equal(a2.attempt, 2);
  agent.ack(a2);
  await waitForStatus(t.node, a2.taskId, 'running');
  agent.fail(a2, 'again');
  await waitForStatus(t.node, a2.taskId, 'failed');
  assert.equal((await row(a2.taskId)).retry_task_id, null, 'max_retries=1 allows one retry only');
});

test('agent lost before ACK -> back to waiting (no retry); after ACK -> failed and retried', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team }).connect();
  const id = await submitTask(t.node, team, { maxRetries: 1 });
  await agent.assignment(id);
  await waitForStatus(t.node, id, 'queued');
  await agent.disconnect();
  clock.advance(5_500); // grace period
  await waitForStatus(t.node, id, 'waiting');
  const r = await row(id);
  assert.equal(r.attempt, 1);
  assert.equal(r.retry_task_id, null);
  assert.equal(r.agent_id, null);
  // reconnect (same machine): gets it again with a new epoch
  const again = await new FakeAgent(t.node, { teamId: team, machineId: agent.machineId }).connect();
  const a = await again.assignment(id);
  assert.equal(a.epoch, 2);
  again.ack(a);
  await waitForStatus(t.node, id, 'running');
  await again.disconnect();
  clock.advance(5_500);
  await waitForStatus(t.node, id, 'failed');
  const f = await row(id);
  assert.equal(f.task_error, 'agent disconnected');
  assert.ok(f.retry_task_id);
});

test('a reconnect within the grace period re-attaches the running task', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team }).connect();
  const id = await submitTask(t.node, team);
  const a = await agent.assignment(id);
  agent.ack(a);
  await waitForStatus(t.node, id, 'running');
  await agent.disconnect();
  clock.advance(2_000);
  const back = await new FakeAgent(t.node, { teamId: team, machineId: agent.machineId }).connect([{ taskId: id, attempt: a.attempt, epoch: a.epoch }]);
  clock.advance(10_000);
  await settle(id);
  assert.equal((await row(id)).task_status, 'running');
  back.finish(a);
  await waitForStatus(t.node, id, 'completed');
});

test('stale writers are rejected: old epoch ACK/finish never applied, duplicates idempotent', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team }).connect();
  const id = await submitTask(t.node, team);
  const a = await agent.assignment(id);
  agent.ack({ ...a, epoch: a.epoch + 5 });
  agent.ack({ ...a, attempt: 2 });
  await settle(id);
  assert.equal((await row(id)).task_status, 'queued');
  agent.ack(a);
  agent.ack(a); // duplicate
  await waitForStatus(t.node, id, 'running');
  agent.finish({ ...a, epoch: 0 }, { storage_key: 'evil' });
  await settle(id);
  assert.equal((await row(id)).task_status, 'running');
  agent.finish(a);
  agent.fail(a, 'late failure after completion');
  await waitForStatus(t.node, id, 'completed');
  await settle(id);
  const r = await row(id);
  assert.equal(r.task_status, 'completed');
  assert.equal(r.task_error, null);
  assert.equal((await events(id)).filter((e) => e.event_type === 'completed').length, 1);
});

test('cancel works from every non-terminal state and tells a running agent to interrupt', async () => {
  const team = newTeam();
  // pending/waiting
  const w = await submitTask(t.node, team, { requiredLabels: ['nobody'] });
  await waitForStatus(t.node, w, 'waiting');
  await t.node.actors.ask({ kind: 'task', id: w }, { type: 'cancel' });
  assert.equal((await row(w)).task_status, 'cancelled');
  // queued and running
  const agent = await new FakeAgent(t.node, { teamId: team, slots: 2 }).connect();
  const q = await submitTask(t.node, team);
  await agent.assignment(q);
  await waitForStatus(t.node, q, 'queued');
  await t.node.actors.ask({ kind: 'task', id: q }, { type: 'cancel' });
  await agent.next((m) => m.type === 'cancel' && m.taskId === q);
  const r = await submitTask(t.node, team);
  const ar = await agent.assignment(r);
  agent.ack(ar);
  await waitForStatus(t.node, r, 'running');
  await t.node.actors.ask({ kind: 'task', id: r }, { type: 'cancel' });
  await agent.next((m) => m.type === 'cancel' && m.taskId === r);
  assert.equal((await row(r)).task_status, 'cancelled');
  // terminal: a second cancel is a conflict and nothing changes
  await assert.rejects(t.node.actors.ask({ kind: 'task', id: r }, { type: 'cancel' }), (e: any) => e.kind === 'conflict' && e.code === 'task_terminal');
  // the agent's late completion of a cancelled task is ignored
  agent.finish(ar);
  await settle(r);
  assert.equal((await row(r)).task_status, 'cancelled');
  assert.deepEqual((await events(r)).map((e) => e.event_type).slice(-1), ['cancelled']);
});

test('progress ticks faster than the 20/s bound are coalesced on the server: a burst writes one row, the latest tick wins after the interval', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team }).connect();
  const id = await submitTask(t.node, team);
  const a = await agent.assignment(id);
  agent.ack(a);
  await waitForStatus(t.node, id, 'running');
  for (let i = 1; i <= 100; i++) agent.progress(a, { progress: i / 100, step_current: i, step_total: 100, current_node: '3 KSampler' });
  await settle(id);
  const burst = (await events(id)).filter((e) => e.event_type === 'progress');
  assert.equal(burst.length, 1, 'one persisted tick for the burst');
  clock.advance(1000); // the coalescing interval: the pending latest tick is flushed
  await settle(id);
  const after = (await events(id)).filter((e) => e.event_type === 'progress');
  assert.equal(after.length, 2);
  assert.equal(after[1]!.payload.step_current, 100, 'the latest tick wins');
  assert.equal((await row(id)).progress.step_current, 100);
  agent.finish(a);
  await waitForStatus(t.node, id, 'completed');
});

test('a tick held back by the rate bound is written before the status change that follows it (failure, cancel)', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team }).connect();
  for (const end of ['failed', 'cancelled'] as const) {
    const id = await submitTask(t.node, team, { maxRetries: 0 });
    const a = await agent.assignment(id);
    agent.ack(a);
    await waitForStatus(t.node, id, 'running');
    agent.progress(a, { progress: 0.1, step_current: 1, step_total: 10, current_node: '3 KSampler' });
    agent.progress(a, { progress: 0.9, step_current: 9, step_total: 10, current_node: '3 KSampler' });
    if (end === 'failed') agent.fail(a, 'boom');
    else await t.node.actors.ask({ kind: 'task', id }, { type: 'cancel' });
    await waitForStatus(t.node, id, end);
    const ev = (await events(id)).map((e) => (e.event_type === 'progress' ? `progress ${e.payload.step_current}` : e.event_type === 'status' ? e.payload.status : e.event_type));
    assert.deepEqual(ev.slice(-3), ['progress 1', 'progress 9', end], end);
    if (end === 'cancelled') await agent.next((m) => m.type === 'cancel' && m.taskId === id);
  }
});

test('an assignment the agent never acknowledges goes back to waiting after the ACK deadline and is assigned again', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team }).connect();
  const id = await submitTask(t.node, team);
  const a1 = await agent.assignment(id);
  await waitForStatus(t.node, id, 'queued');
  clock.advance(29_000);
  await settle(id);
  assert.equal((await row(id)).task_status, 'queued');
  clock.advance(2_000); // past GANTRY_ACK_TIMEOUT_S=30
  await agent.next((m) => m.type === 'cancel' && m.taskId === id && m.epoch === a1.epoch);
  const a2 = await agent.next((m) => m.type === 'assign' && m.taskId === id && m.epoch === a1.epoch + 1);
  assert.equal((a2 as { attempt: number }).attempt, 1, 'no retry consumed');
  agent.ack(a1); // the late ACK of the old epoch is stale
  await settle(id);
  assert.equal((await row(id)).task_status, 'queued');
  agent.ack(a2 as never);
  await waitForStatus(t.node, id, 'running');
  agent.finish(a2 as never);
  await waitForStatus(t.node, id, 'completed');
  const statuses = (await events(id)).filter((e) => e.event_type === 'status').map((e) => e.payload.status);
  assert.deepEqual(statuses, ['pending', 'queued', 'waiting', 'queued', 'running']);
});

// ---------------------------------------------------------------------------------------------
// A task actor's copy of its row can be behind PostgreSQL: during a cluster membership change two
// nodes can briefly each hold an activation of the same task, and the one that recorded the ACK is
// not always the one that receives the result. These tests move the row on behind the actor's back
// (as that other activation would) and check that the agent's reports are decided against the row,
// not against the copy: the rolling-upgrade test once found a run left `running` forever because a
// result was answered "stale" by such a copy and the agent had already handed it over.

const completedEvents = async (taskId: string) => Number((await sql.query(`select count(*) as n from task_events where task_id = $1 and event_type = 'completed'`, [taskId])).rows[0].n);
/** What another node's activation does when it records the agent's ACK. */
const ackElsewhere = (taskId: string) => sql.query(`update tasks set task_status = 'running', started_at = $2 where id = $1 and task_status = 'queued'`, [taskId, new Date(clock.now())]);

test('a result reaching an activation whose copy still says queued (the ACK was recorded by another) completes the run', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team }).connect();
  const id = await submitTask(t.node, team);
  const a = await agent.assignment(id);
  await waitForStatus(t.node, id, 'queued');
  await ackElsewhere(id);
  // the copy says queued: the result's "implicit ACK" transition is fenced out by the row (running);
  // the result is then decided again against the row read back, and applies
  agent.finish(a);
  await waitForStatus(t.node, id, 'completed');
  assert.equal((await row(id)).task_status, 'completed');
  assert.equal(await completedEvents(id), 1);
});

test('an ACK reaching an activation whose copy is older than the assignment (stale by the copy) is applied after a re-read', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team, labels: ['t4'] }).connect();
  const id = await submitTask(t.node, team, { requiredLabels: ['a100'] });
  await waitForStatus(t.node, id, 'waiting');
  // another activation assigned it (epoch 1) to this agent
  await sql.query(`update tasks set task_status = 'queued', agent_id = $2, lease_epoch = 1 where id = $1`, [id, agent.agentId]);
  const a = { taskId: id, attempt: 1, epoch: 1 };
  agent.ack(a);
  await waitForStatus(t.node, id, 'running');
  agent.finish(a);
  await waitForStatus(t.node, id, 'completed');
  assert.equal(await completedEvents(id), 1);
});

test('a report still stale after the re-read is rejected (old epoch), and the row is read once for it', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team }).connect();
  const id = await submitTask(t.node, team);
  const a = await agent.assignment(id);
  agent.ack(a);
  await waitForStatus(t.node, id, 'running');
  agent.finish({ ...a, epoch: a.epoch + 3 }, { storage_key: 'evil' });
  await settle(id);
  assert.equal((await row(id)).task_status, 'running');
  agent.finish(a);
  await waitForStatus(t.node, id, 'completed');
  assert.equal((await row(id)).output.storage_key, `outputs/${id}/output.png`);
});

test('an activation that learns from the row that its task is running arms the task timeout', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team }).connect();
  const id = await submitTask(t.node, team, { timeoutS: 10 });
  const a = await agent.assignment(id);
  await waitForStatus(t.node, id, 'queued');
  await ackElsewhere(id);
  // a progress tick: its implicit ACK is fenced out, the re-read shows running
  agent.progress(a, { progress: 0.5, step_current: 10, step_total: 20, current_node: '3 KSampler' });
  await settle(id);
  await settle(id);
  assert.equal((await row(id)).task_status, 'running');
  clock.advance(10_500);
  await waitForStatus(t.node, id, 'failed');
  assert.match((await row(id)).task_error, /timed out after 10 s/);
});

test('after a membership change, an open task whose actor this node already runs is confirmed with its agent too: not held, it fails over after the grace period', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team }).connect();
  const id = await submitTask(t.node, team, { maxRetries: 1 });
  const a = await agent.assignment(id);
  agent.ack(a);
  await waitForStatus(t.node, id, 'running');
  // the agent's actor stops holding the run without the task actor hearing of it: what happens when
  // the agent's result went to another activation of the task, whose stale copy rejected it
  t.node.actors.tell({ kind: 'agent', id: agent.agentId }, { type: 'server_msg', msg: { type: 'cancel', taskId: id, attempt: a.attempt, epoch: a.epoch } });
  await t.node.actors.ask({ kind: 'agent', id: agent.agentId }, { type: 'get' });
  assert.equal(t.node.actors.isActive({ kind: 'task', id }), true);
  const newlyRecovered = await recoverOwned(t.node.actors, t.node.taskStore, 5_000, () => true);
  assert.equal(newlyRecovered, 0);
  await settle(id);
  await t.node.actors.ask({ kind: 'agent', id: agent.agentId }, { type: 'get' });
  await settle(id);
  assert.equal((await row(id)).task_status, 'running');
  clock.advance(5_500);
  await waitForStatus(t.node, id, 'failed');
  const r = await row(id);
  assert.equal(r.task_error, 'agent disconnected');
  assert.ok(r.retry_task_id, 'the attempt is retried');
});
