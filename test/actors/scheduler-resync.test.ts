/**
 * A team scheduler whose tasks wait rebuilds its view from PostgreSQL after 5 s without activity:
 * an agent that came online without the scheduler hearing of it (its agent_up was lost with a dead
 * cluster node) is found, instead of the tasks waiting forever.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { submitTask, waitForStatus, newTeam } from '../helpers/tasks.js';
import { FakeClock } from '../../src/shared/clock.js';
import { waitFor } from '../agents/helpers.js';

let t: TestNode;
const clock = new FakeClock(Date.now());
before(async () => {
  t = await startTestNode({ GANTRY_SCHEDULER_RESYNC_MS: 5_000 }, 'resync', { clock });
});
after(async () => {
  await t.stop();
});

test('waiting tasks: after 5 s of silence the scheduler re-reads agents and tasks from PostgreSQL', async () => {
  const team = newTeam();
  const id = await submitTask(t.node, team);
  await waitForStatus(t.node, id, 'waiting');
  const sched = { kind: 'team-scheduler', id: team } as const;
  assert.deepEqual((await t.node.actors.ask(sched, { type: 'stats' })).agents, []);
  // an agent row goes online behind the scheduler's back (no agent_up reaches it)
  const row = await t.node.agentStore.register({ teamId: team, machineId: 'm-resync', displayName: 'm', labels: [], gpus: [], models: [], customNodes: [], slots: 1, agentVersion: 't', credentialId: null, nodeId: 'test' });
  await t.node.agentStore.setStatus(row.id, 'online');
  clock.advance(4_000);
  assert.deepEqual((await t.node.actors.ask(sched, { type: 'stats' })).agents, [], 'not before the resync period');
  clock.advance(1_500);
  await waitFor('the scheduler found the agent', async () => (await t.node.actors.ask(sched, { type: 'stats' })).agents.some((a) => a.agentId === row.id), 5_000, 20);
});
