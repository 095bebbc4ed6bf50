import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { FakeAgent } from '../helpers/fake-agent.js';
import { submitTask, waitForStatus, newTeam } from '../helpers/tasks.js';
import { ineligibility, pickAgent, plan, type AgentSlot } from '../../src/actors/scheduler/decide.js';
import type { TaskRecord } from '../../src/actors/ports.js';

const task = (o: Partial<TaskRecord> = {}): TaskRecord => ({
  id: o.id ?? 't1',
  teamId: 'team',
  status: 'pending',
  attempt: 1,
  maxRetries: 0,
  leaseEpoch: 0,
  agentId: null,
  dispatchTarget: 'agent',
  toolType: 'comfyui',
  timeoutS: 0,
  requiredLabels: [],
  minVramGb: 0,
  requiredModels: [],
  preferredGpu: null,
  seq: 1,
  startedAt: null,
  createdAt: 0,
  parentTaskId: null,
  retryTaskId: null,
  ...o,
});
const agent = (o: Partial<AgentSlot> = {}): AgentSlot => ({
  agentId: o.agentId ?? 'a1',
  teamId: 'team',
  labels: [],
  gpuType: 'RTX 4090',
  gpuCount: 1,
  vramTotalGb: 24,
  models: [],
  slots: 1,
  draining: false,
  needsSync: false,
  free: 1,
  lastAssignedAt: 0,
  ...o,
});

test('eligibility: labels are ANDed, VRAM, models, draining, free slot, team', () => {
  assert.equal(ineligibility(task({ requiredLabels: ['a', 'b'] }), agent({ labels: ['a', 'b', 'c'] })), null);
  assert.match(ineligibility(task({ requiredLabels: ['a', 'b'] }), agent({ labels: ['a'] }))!, /missing label b/);
  assert.equal(ineligibility(task({ minVramGb: 24 }), agent({ vramTotalGb: 24 })), null);
  assert.match(ineligibility(task({ minVramGb: 24.5 }), agent({ vramTotalGb: 24 }))!, /vram/);
  assert.equal(ineligibility(task({ requiredModels: ['checkpoints/sd15.safetensors'] }), agent({ models: ['checkpoints/sd15.safetensors'] })), null);
  assert.match(ineligibility(task({ requiredModels: ['loras/x.safetensors'] }), agent({ models: [] }))!, /missing model/);
  assert.match(ineligibility(task(), agent({ draining: true }))!, /draining/);
  assert.match(ineligibility(task(), agent({ free: 0 }))!, /slot/);
  assert.match(ineligibility(task(), agent({ teamId: 'other' }))!, /team/);
});

test('pick: preferred GPU first, then least recently used', () => {
  const a = agent({ agentId: 'a', gpuType: 'A100', lastAssignedAt: 50 });
  const b = agent({ agentId: 'b', gpuType: 'RTX 4090', lastAssignedAt: 10 });
  const c = agent({ agentId: 'c', gpuType: 'RTX 4090', lastAssignedAt: 5 });
  assert.equal(pickAgent(task({ preferredGpu: 'a100' }), [a, b, c])?.agentId, 'a');
  assert.equal(pickAgent(task(), [a, b, c])?.agentId, 'c');
  assert.equal(pickAgent(task({ preferredGpu: 'H100' }), [a, b, c])?.agentId, 'c');
});

test('plan: FIFO, the quota caps queued+running, the rest wait, an unplaceable head does not block', () => {
  const agents = new Map([['a', agent({ agentId: 'a', slots: 2, free: 2 })]]);
  const q = [task({ id: 'x', seq: 1, requiredLabels: ['gpu-none'] }), task({ id: 'y', seq: 2 }), task({ id: 'z', seq: 3 }), task({ id: 'w', seq: 4 })];
  const p = plan(q, agents, 0, 0);
  assert.deepEqual(p.assign.map((s) => s.taskId), ['y', 'z']);
  assert.deepEqual(p.wait, ['x', 'w']);
  const capped = plan(q, agents, 1, 2);
  assert.deepEqual(capped.assign.map((s) => s.taskId), ['y']);
  assert.deepEqual(capped.wait, ['x', 'z', 'w']);
});

let t: TestNode;
before(async () => {
  t = await startTestNode({ GANTRY_MAX_CONCURRENT_TASKS: 2 }, 'sched');
});
after(async () => {
  await t.stop();
});

test('end to end: FIFO order on one agent, and the max_concurrent_tasks quota makes the rest wait', async () => {
  const team = newTeam();
  const ids: string[] = [];
  for (let i = 0; i < 4; i++) ids.push(await submitTask(t.node, team));
  for (const id of ids) await waitForStatus(t.node, id, 'waiting');
  const ag = await new FakeAgent(t.node, { teamId: team, slots: 4 }).connect();
  const a0 = await ag.assignment(ids[0]);
  const a1 = await ag.assignment(ids[1]);
  await waitForStatus(t.node, ids[1]!, 'queued');
  // quota 2: the third waits although the agent has free slots
  assert.equal(ag.inbox.filter((m) => m.type === 'assign').length, 2);
  ag.ack(a0);
  await waitForStatus(t.node, ids[0]!, 'running');
  ag.finish(a0);
  const a2 = await ag.assignment(ids[2]);
  assert.equal(a2.taskId, ids[2], 'FIFO: the oldest waiting task goes next');
  ag.ack(a1);
  ag.ack(a2);
  await waitForStatus(t.node, ids[2]!, 'running');
  ag.finish(a1);
  await ag.assignment(ids[3]);
});

test('end to end: preferred GPU and required models pick the right agent', async () => {
  const team = newTeam();
  const small = await new FakeAgent(t.node, { teamId: team, gpus: [{ name: 'T4', vram_gb: 16 }], models: ['checkpoints/sd15.safetensors'] }).connect();
  const big = await new FakeAgent(t.node, { teamId: team, gpus: [{ name: 'A100', vram_gb: 80 }] }).connect();
  const id1 = await submitTask(t.node, team, { preferredGpu: 'A100' });
  await big.assignment(id1);
  const id2 = await submitTask(t.node, team, { requiredModels: ['checkpoints/sd15.safetensors'] });
  await small.assignment(id2);
  const id3 = await submitTask(t.node, team, { minVramGb: 40 });
  await waitForStatus(t.node, id3, 'waiting'); // big is busy (1 slot), small lacks VRAM
  assert.equal(small.inbox.filter((m) => m.type === 'assign').length, 1);
});
