// The PostgreSQL member fence: once a cluster member is fenced (declared dead, or it left), every
// task and agent write it attempts matches nothing, whatever its in-memory state believes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { submitTask, newTeam } from '../helpers/tasks.js';
import { PgTaskStore } from '../../src/persistence/task-store.js';
import { PgAgentStore } from '../../src/persistence/agent-store.js';
import { ClusterMemberStore } from '../../src/persistence/cluster-store.js';
import { memberFenceSql } from '../../src/persistence/sql.js';

let t: TestNode;
before(async () => {
  t = await startTestNode({}, 'fence');
});
after(async () => t?.stop());

const cancel = (taskId: string) => ({ taskId, from: ['pending', 'waiting'] as const, to: 'cancelled' as const, patch: { finishedAt: Date.now() }, events: [{ type: 'cancelled' as const, data: { task_id: taskId, status: 'cancelled' } }] });

test('a fenced member writes nothing; an unfenced one does; a member unknown to PostgreSQL writes nothing', async () => {
  const members = new ClusterMemberStore(t.node.db);
  await members.register({ memberId: 'n1/aaaa', nodeId: 'n1', address: '127.0.0.1:1' });
  await members.register({ memberId: 'n2/bbbb', nodeId: 'n2', address: '127.0.0.1:2' });
  await members.fence('n1/aaaa');
  assert.equal(await members.isFenced('n1/aaaa'), true);
  assert.equal(await members.isFenced('n2/bbbb'), false);
  assert.equal(await members.isFenced('n3/cccc'), true, 'unknown members count as fenced');

  const team = newTeam();
  // hold the scheduler off these tasks: they stay pending
  const a = await submitTask(t.node, team, { requiredLabels: ['nowhere'] });
  const b = await submitTask(t.node, team, { requiredLabels: ['nowhere'] });
  const c = await submitTask(t.node, team, { requiredLabels: ['nowhere'] });

  const fenced = new PgTaskStore(t.node.db, { memberId: () => 'n1/aaaa' });
  const live = new PgTaskStore(t.node.db, { memberId: () => 'n2/bbbb' });
  const unknown = new PgTaskStore(t.node.db, { memberId: () => 'n3/cccc' });
  const r1 = await fenced.transition({ ...cancel(a), from: ['pending', 'waiting'] });
  assert.equal(r1.ok, false, 'the fenced member\'s transition is rejected');
  assert.notEqual((await t.node.taskStore.load(a))?.status, 'cancelled');
  const r3 = await unknown.transition({ ...cancel(c), from: ['pending', 'waiting'] });
  assert.equal(r3.ok, false, 'an unregistered member writes nothing');
  const r2 = await live.transition({ ...cancel(b), from: ['pending', 'waiting'] });
  assert.equal(r2.ok, true, 'the live member\'s transition applies');
  assert.equal((await t.node.taskStore.load(b))?.status, 'cancelled');
  // the batch path (markWaiting) is fenced too
  assert.deepEqual((await fenced.markWaiting(team, [a])).moved, []);
});

test('agent status: only the member holding the stream (agents.node_id) writes it, and only while unfenced', async () => {
  const members = new ClusterMemberStore(t.node.db);
  await members.register({ memberId: 'n4/dddd', nodeId: 'n4', address: '127.0.0.1:4' });
  await members.register({ memberId: 'n5/eeee', nodeId: 'n5', address: '127.0.0.1:5' });
  const team = newTeam();
  const row = await t.node.agentStore.register({ teamId: team, machineId: 'm-1', displayName: 'm', labels: [], gpus: [], models: [], customNodes: [], slots: 1, agentVersion: 't', credentialId: null, nodeId: 'n4/dddd' });
  const holder = new PgAgentStore(t.node.db, { memberId: () => 'n4/dddd' });
  const other = new PgAgentStore(t.node.db, { memberId: () => 'n5/eeee' });
  await other.setStatus(row.id, 'busy');
  assert.equal((await t.node.agentStore.byId(row.id))?.agentStatus, 'offline', 'a member not holding the stream does not write');
  await holder.setStatus(row.id, 'online');
  assert.equal((await t.node.agentStore.byId(row.id))?.agentStatus, 'online');
  await members.fence('n4/dddd');
  assert.equal((await t.node.agentStore.byId(row.id))?.agentStatus, 'offline', 'fencing marks its agents offline');
  await holder.setStatus(row.id, 'online');
  assert.equal((await t.node.agentStore.byId(row.id))?.agentStatus, 'offline', 'the fenced holder writes nothing');
});

test('member ids are validated before they reach SQL', () => {
  assert.throws(() => memberFenceSql("n1'; drop table tasks; --"));
  assert.equal(memberFenceSql(null), '');
});
