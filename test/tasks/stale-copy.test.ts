/**
 * A task actor's copy of its row can be behind PostgreSQL: during a cluster membership change two
 * nodes can briefly each hold an activation of the same task, and the one that recorded the ACK is
 * not always the one that receives the result. These tests move the row on behind the actor's back
 * (as that other activation would) and check that the agent's reports are decided against the row,
 * not against the copy: the rolling-upgrade test once found a run left `running` forever because a
 * result was answered "stale" by such a copy and the agent had already handed it over.
 */
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
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 5, GANTRY_TASK_TIMEOUT_MAX_S: 3600, GANTRY_ACK_TIMEOUT_S: 30, GANTRY_RETRY_BACKOFF_BASE_S: 0 }, 'stalecopy', { clock });
  sql = new pg.Client({ connectionString: t.db.url });
  await sql.connect();
});
after(async () => {
  await sql.end();
  await t.stop();
});

const row = async (taskId: string) => (await sql.query('select * from tasks where id = $1', [taskId])).rows[0];
const completedEvents = async (taskId: string) => Number((await sql.query(`select count(*) as n from task_events where task_id = $1 and event_type = 'completed'`, [taskId])).rows[0].n);
const settle = async (taskId: string) => t.node.actors.ask({ kind: 'task', id: taskId }, { type: 'get' });
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
