import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { FakeAgent } from '../helpers/fake-agent.js';
import { submitTask, waitForStatus, newTeam } from '../helpers/tasks.js';
import { FakeClock } from '../../src/shared/clock.js';
import { SCHEDULER } from '../../src/actors/index.js';

/**
 * Issue 12: retry backoff. A retry created by a failure waits out
 * random(0, min(BASE * 2^(attempt-1), MAX)) before it may be scheduled; the node's clock is fake,
 * so "waits" is checked at exact instants, never with sleeps.
 */
const BASE_S = 10;
const MAX_S = 15;
let t: TestNode;
let clock: FakeClock;
let sql: pg.Client;
before(async () => {
  clock = new FakeClock(Date.now());
  t = await startTestNode({ GANTRY_RETRY_BACKOFF_BASE_S: BASE_S, GANTRY_RETRY_BACKOFF_MAX_S: MAX_S, GANTRY_TASK_TIMEOUT_MAX_S: 3600, GANTRY_ACK_TIMEOUT_S: 3600 }, 'backoff', { clock });
  sql = new pg.Client({ connectionString: t.db.url });
  await sql.connect();
});
after(async () => {
  await sql.end();
  await t.stop();
});

const row = async (taskId: string) => (await sql.query('select * from tasks where id = $1', [taskId])).rows[0];
/** The scheduler has decided everything in its mailbox and has no I/O in flight. */
const schedulerSettled = (team: string) => t.node.actors.ask({ kind: SCHEDULER, id: team }, { type: 'stats' });

/** Fails the running attempt `a` and returns the retry's id and its backoff (not_before - failed_at). */
async function failAndGetRetry(agent: FakeAgent, a: { taskId: string; attempt: number; epoch: number }): Promise<{ retryId: string; delayMs: number }> {
  agent.ack(a);
  await waitForStatus(t.node, a.taskId, 'running');
  agent.fail(a, 'CUDA out of memory');
  await waitForStatus(t.node, a.taskId, 'failed');
  const failed = await row(a.taskId);
  assert.ok(failed.retry_task_id, 'a retry was created');
  const retry = await row(failed.retry_task_id);
  assert.ok(retry.not_before, 'the retry carries not_before');
  return { retryId: failed.retry_task_id, delayMs: retry.not_before.getTime() - failed.finished_at.getTime() };
}

test('a retry is not scheduled before failed_at + its jittered backoff, then runs; the cap doubles per attempt and is clamped at MAX', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team, slots: 1 }).connect();
  const id = await submitTask(t.node, team, { maxRetries: 2 });
  const a1 = await agent.assignment(id);

  const r1 = await failAndGetRetry(agent, a1);
  assert.ok(r1.delayMs >= 0 && r1.delayMs < BASE_S * 1000, `first retry delay ${r1.delayMs} ms within [0, ${BASE_S} s)`);
  await schedulerSettled(team);
  // the agent's slot is free, yet the retry is held back until its instant
  if (r1.delayMs > 0) {
    clock.advance(r1.delayMs - 1);
    await schedulerSettled(team);
    assert.ok(!agent.inbox.some((m) => m.type === 'assign' && m.taskId === r1.retryId), 'not assigned before not_before');
    assert.ok(['pending', 'waiting'].includes((await row(r1.retryId)).task_status));
  }
  clock.advance(1);
  const a2 = await agent.assignment(r1.retryId);
  assert.equal(a2.attempt, 2);

  // second failure: cap = min(BASE * 2, MAX) = MAX
  const r2 = await failAndGetRetry(agent, a2);
  assert.ok(r2.delayMs >= 0 && r2.delayMs < MAX_S * 1000, `second retry delay ${r2.delayMs} ms within [0, ${MAX_S} s)`);
  if (r2.delayMs > 0) {
    clock.advance(r2.delayMs - 1);
    await schedulerSettled(team);
    assert.ok(!agent.inbox.some((m) => m.type === 'assign' && m.taskId === r2.retryId), 'not assigned before not_before');
  }
  clock.advance(1);
  const a3 = await agent.assignment(r2.retryId);
  assert.equal(a3.attempt, 3);
  agent.ack(a3);
  await waitForStatus(t.node, a3.taskId, 'running');
  agent.finish(a3);
  await waitForStatus(t.node, a3.taskId, 'completed');
});

test('a retry in backoff does not hold back a fresh task submitted after it', async () => {
  const team = newTeam();
  const agent = await new FakeAgent(t.node, { teamId: team, slots: 1 }).connect();
  const id = await submitTask(t.node, team, { maxRetries: 1 });
  const a1 = await agent.assignment(id);
  const r = await failAndGetRetry(agent, a1);
  const fresh = await submitTask(t.node, team);
  const af = await agent.assignment(fresh);
  if (r.delayMs > 0) assert.ok(!agent.inbox.some((m) => m.type === 'assign' && m.taskId === r.retryId), 'the fresh task went first');
  agent.ack(af);
  await waitForStatus(t.node, fresh, 'running');
  agent.finish(af);
  await waitForStatus(t.node, fresh, 'completed');
  clock.advance(r.delayMs);
  const ar = await agent.assignment(r.retryId);
  assert.equal(ar.attempt, 2);
});
