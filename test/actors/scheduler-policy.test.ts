/**
 * The scheduling policy as a pure function (src/actors/scheduler/policy.ts): the fair strategy's
 * rules one by one, fifo-lru unchanged, and the fair-share ledger.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { TaskRecord } from '../../src/actors/ports.js';
import type { AgentSlot } from '../../src/actors/scheduler/fifo-lru.js';
import { effectivePriority, gpuMatches } from '../../src/actors/scheduler/fair.js';
import { UsageLedger } from '../../src/actors/scheduler/ledger.js';
import { agentInfo, task as fixtureTask, TEAM } from './fixtures.js';
import { decide, initialState, type SchedulerEffect } from '../../src/actors/scheduler/decide.js';
import { DEFAULT_POLICY, noUsage, schedule, type PolicySettings, type PolicyUsage } from '../../src/actors/scheduler/policy.js';

let seq = 0;
const task = (o: Partial<TaskRecord> = {}): TaskRecord => {
  const n = ++seq;
  return fixtureTask({ id: `t${n}`, teamId: 'team', status: 'waiting', maxRetries: 0, timeoutS: 0, seq: n, ...o });
};
const agent = (o: Partial<AgentSlot> = {}): AgentSlot => ({ agentId: 'a1', teamId: 'team', labels: [], gpuType: 'NVIDIA RTX 4090', gpuCount: 1, vramTotalGb: 24, models: [], slots: 1, draining: false, needsSync: false, free: 1, lastAssignedAt: 0, ...o });
const agents = (...as: AgentSlot[]): Map<string, AgentSlot> => new Map(as.map((a) => [a.agentId, a]));
const FAIR: PolicySettings = DEFAULT_POLICY;
const FIFO: PolicySettings = { ...DEFAULT_POLICY, strategy: 'fifo-lru' };
const order = (q: TaskRecord[], n: number, u: PolicyUsage = noUsage(), now = 0, s = FAIR): string[] =>
  schedule(q, agents(agent({ free: n, slots: n })), u, now, s).assign.map((x) => x.taskId);

test('fair: priority first (1 highest), FIFO within a priority; fifo-lru ignores priority', () => {
  const q = [task({ id: 'p5', priority: 5 }), task({ id: 'p3' }), task({ id: 'p1', priority: 1 }), task({ id: 'p3b', priority: 3 })];
  assert.deepEqual(order(q, 4), ['p1', 'p3', 'p3b', 'p5']);
  assert.deepEqual(order(q, 4, noUsage(), 0, FIFO), ['p5', 'p3', 'p1', 'p3b']);
});

test('aging: one level per interval, up to level 2 (level 1 stays for runs submitted at 1)', () => {
  const t = task({ priority: 5, createdAt: 0 });
  assert.equal(effectivePriority(t, 299_999, 300), 5);
  assert.equal(effectivePriority(t, 300_000, 300), 4);
  assert.equal(effectivePriority(t, 10 * 300_000, 300), 2);
  assert.equal(effectivePriority(t, 10 * 300_000, 0), 5, 'aging off');
  const q = [task({ id: 'old5', priority: 5, createdAt: 0 }), task({ id: 'new1', priority: 1, createdAt: 3_000_000 }), task({ id: 'new3', priority: 3, createdAt: 3_000_000 })];
  assert.deepEqual(order(q, 3, noUsage(), 3_000_000), ['new1', 'old5', 'new3']);
});

test('fair share: the submitter with the least weighted GPU-seconds goes first; a burst alternates; weights divide usage', () => {
  const q = [task({ id: 'a1', submitter: 'A' }), task({ id: 'a2', submitter: 'A' }), task({ id: 'a3', submitter: 'A' }), task({ id: 'b1', submitter: 'B' }), task({ id: 'b2', submitter: 'B' })];
  assert.deepEqual(order(q, 4), ['a1', 'b1', 'a2', 'b2']);
  const used = { ...noUsage(), gpuSeconds: new Map([['A', 100], ['B', 150]]) };
  assert.equal(order(q, 1, used)[0], 'a1');
  assert.equal(order(q, 1, { ...used, limits: new Map([['B', { weight: 2, maxConcurrent: null }]]) })[0], 'b1', 'B weighs 2: 75 < 100');
});

test('max_concurrent_tasks: a credential at its cap gets no slot; its tasks wait', () => {
  const q = [task({ id: 'a1', submitter: 'A', status: 'pending' }), task({ id: 'a2', submitter: 'A', status: 'pending' }), task({ id: 'b1', submitter: 'B' })];
  const u = { ...noUsage(), active: new Map([['A', 1]]), limits: new Map([['A', { weight: 1, maxConcurrent: 2 }]]) };
  const p = schedule(q, agents(agent({ free: 3, slots: 3 })), u, 0, FAIR);
  assert.deepEqual(p.assign.map((x) => x.taskId).sort(), ['a1', 'b1']);
  assert.deepEqual(p.wait, ['a2']);
});

test('placement: warm (loaded model or last workflow version) beats preferred GPU beats LRU; preferred_gpu is a case-insensitive substring', () => {
  const cold = agent({ agentId: 'a-cold', lastAssignedAt: 0, gpuType: 'NVIDIA A100-SXM4-80GB', models: ['checkpoints/x.safetensors'] });
  const warm = agent({ agentId: 'b-warm', lastAssignedAt: 99, loaded: ['checkpoints/x.safetensors'], models: ['checkpoints/x.safetensors'] });
  const t = task({ requiredModels: ['checkpoints/x.safetensors'], preferredGpu: 'a100' });
  assert.equal(schedule([t], agents(cold, warm), noUsage(), 0, FAIR).assign[0]?.agentId, 'b-warm');
  assert.equal(schedule([t], agents(cold, warm), noUsage(), 0, FIFO).assign[0]?.agentId, 'a-cold', 'fifo-lru: no warmth, exact GPU match only ("a100" is not the name): LRU');
  const byWf = agent({ agentId: 'c-ran', lastAssignedAt: 99, lastWorkflow: 'wf@2' });
  assert.equal(schedule([task({ workflowKey: 'wf@2' })], agents(agent({ agentId: 'a-lru' }), byWf), noUsage(), 0, FAIR).assign[0]?.agentId, 'c-ran');
  assert.equal(schedule([task({ workflowKey: 'wf@3' })], agents(agent({ agentId: 'a-lru' }), byWf), noUsage(), 0, FAIR).assign[0]?.agentId, 'a-lru', 'another version is not warm');
  assert.equal(schedule([task({ preferredGpu: 'A100' })], agents(agent({ agentId: 'a-rtx' }), agent({ agentId: 'b-a100', lastAssignedAt: 5, gpuType: 'NVIDIA A100-SXM4-80GB' })), noUsage(), 0, FAIR).assign[0]?.agentId, 'b-a100');
  assert.ok(gpuMatches('a100', 'NVIDIA A100-SXM4-80GB'));
  assert.ok(!gpuMatches('H100', 'NVIDIA A100-SXM4-80GB'));
});

test('tool_type constrains placement under fair (an agent without tool types runs any)', () => {
  const comfy = agent({ agentId: 'a-comfy', toolTypes: ['comfyui'] });
  const ns = agent({ agentId: 'b-ns', lastAssignedAt: 9, toolTypes: ['nerfstudio'] });
  assert.equal(schedule([task({ toolType: 'nerfstudio' })], agents(comfy, ns), noUsage(), 0, FAIR).assign[0]?.agentId, 'b-ns');
  const p = schedule([task({ id: 'n', toolType: 'nerfstudio', status: 'pending' })], agents(comfy), noUsage(), 0, FAIR);
  assert.deepEqual([p.assign, p.wait], [[], ['n']]);
  assert.equal(schedule([task({ toolType: 'nerfstudio' })], agents(agent({ agentId: 'any' })), noUsage(), 0, FAIR).assign[0]?.agentId, 'any');
});

test('warm look-ahead: a later task of the same submitter may take a warm agent; not one submitted two aging intervals later', () => {
  const a = agent({ agentId: 'a', loaded: ['m/y'], models: ['m/x', 'm/y'] });
  const q = [task({ id: 'x', requiredModels: ['m/x'], createdAt: 0 }), task({ id: 'y', requiredModels: ['m/y'], createdAt: 1000 })];
  assert.equal(schedule(q, agents(a), noUsage(), 2000, FAIR).assign[0]?.taskId, 'y');
  // priority 2 does not age further: both stay on one level whatever the clock
  const x2 = task({ id: 'x2', priority: 2, requiredModels: ['m/x'], createdAt: 0 });
  const inside = [x2, task({ id: 'y-599', priority: 2, requiredModels: ['m/y'], createdAt: 599_000 })];
  assert.equal(schedule(inside, agents(a), noUsage(), 700_000, FAIR).assign[0]?.taskId, 'y-599');
  const late = [x2, task({ id: 'y-600', priority: 2, requiredModels: ['m/y'], createdAt: 600_000 })];
  assert.equal(schedule(late, agents(a), noUsage(), 700_000, FAIR).assign[0]?.taskId, 'x2');
  assert.equal(schedule(q, agents(a), noUsage(), 2000, { ...FAIR, warmLookahead: 0 }).assign[0]?.taskId, 'x', 'look-ahead off: strict FIFO');
});

test('warm look-ahead: a warm task deep in the queue is taken; the overtaken head still runs once the tasks submitted within two aging intervals after it are gone', () => {
  // one agent, always free and warm for m/y; the head x needs m/x; y1..y9 are submitted 100 s apart after it
  const q = [task({ id: 'x', priority: 2, requiredModels: ['m/x'], createdAt: 0 })];
  for (let i = 1; i <= 9; i++) q.push(task({ id: `y${i}`, priority: 2, requiredModels: ['m/y'], createdAt: i * 100_000 }));
  const deep = [q[0] as TaskRecord, ...Array.from({ length: 400 }, () => task({ priority: 2, requiredModels: ['m/z'], createdAt: 0 })), q[5] as TaskRecord];
  const a = (): AgentSlot => agent({ agentId: 'a', loaded: ['m/y'], lastWorkflow: null, models: ['m/x', 'm/y', 'm/z'] });
  assert.equal(schedule(deep, agents(a()), noUsage(), 1_000_000, FAIR).assign[0]?.taskId, 'y5', '400 places behind the head');
  const ran: string[] = [];
  let left = q;
  while (left.length > 0) {
    const id = schedule(left, agents(a()), noUsage(), 1_000_000, FAIR).assign[0]?.taskId as string;
    ran.push(id);
    left = left.filter((t) => t.id !== id);
  }
  assert.deepEqual(ran, ['y1', 'y2', 'y3', 'y4', 'y5', 'x', 'y6', 'y7', 'y8', 'y9']);
});

test('cold start: the look-ahead task whose checkpoint has the most tasks left per warm agent, the head when that is its own', () => {
  const free = agent({ agentId: 'free', loaded: ['m/c'], models: ['m/a', 'm/b', 'm/c'] });
  const busyOn = (m: string): AgentSlot => agent({ agentId: `busy-${m}`, free: 0, loaded: [m], models: ['m/a', 'm/b', 'm/c'] });
  const q = [task({ id: 'a1', requiredModels: ['m/a'], createdAt: 0 }), task({ id: 'a2', requiredModels: ['m/a'], createdAt: 0 }), task({ id: 'b1', requiredModels: ['m/b'], createdAt: 0 }), task({ id: 'b2', requiredModels: ['m/b'], createdAt: 0 }), task({ id: 'b3', requiredModels: ['m/b'], createdAt: 0 })];
  const first = (...as: AgentSlot[]): string | undefined => schedule(q, agents(free, ...as), noUsage(), 60_000, FAIR).assign[0]?.taskId;
  assert.equal(first(busyOn('m/a')), 'b1', 'm/a has an agent: 2 left / 2 < 3 left / 1');
  assert.equal(first(busyOn('m/b')), 'a1', 'm/b has an agent: 3 / 2 < 2 / 1');
  assert.equal(first(), 'b1', 'no agent warm: the key with more tasks');
  assert.equal(schedule(q, agents(free, busyOn('m/a')), noUsage(), 60_000, { ...FAIR, warmLookahead: 0 }).assign[0]?.taskId, 'a1', 'look-ahead off: the head');
  // a burst of free slots spreads over the keys instead of piling onto the head's
  const two = agent({ agentId: 'free2', loaded: ['m/c'], models: ['m/a', 'm/b', 'm/c'] });
  assert.deepEqual(schedule(q, agents(free, two), noUsage(), 60_000, FAIR).assign.map((x) => x.taskId).sort(), ['a1', 'b1']);
});

test('warm wait: a new task waits (bounded) for a busy warm agent rather than start cold; not when no eligible agent is warm', () => {
  const cold = agent({ agentId: 'cold', models: ['m/x'] });
  const busyWarm = agent({ agentId: 'warm', free: 0, loaded: ['m/x'], models: ['m/x'] });
  const t = task({ id: 'n', status: 'pending', requiredModels: ['m/x'], createdAt: 100_000 });
  const held = schedule([t], agents(cold, busyWarm), noUsage(), 101_000, FAIR);
  assert.deepEqual([held.assign, held.wait, held.wakeAt], [[], ['n'], 115_000], 'waits until 15 s after its submission');
  assert.equal(schedule([t], agents(cold, busyWarm), noUsage(), 115_000, FAIR).assign[0]?.agentId, 'cold', 'then starts cold');
  assert.equal(schedule([t], agents(cold, busyWarm), noUsage(), 101_000, { ...FAIR, warmWaitS: 0 }).assign[0]?.agentId, 'cold', 'warm wait off');
  const freed = schedule([t], agents(cold, { ...busyWarm, free: 1 }), noUsage(), 101_000, FAIR);
  assert.deepEqual([freed.assign[0]?.agentId, freed.wakeAt], ['warm', null], 'the warm agent is free: it takes it');
  const other = agent({ agentId: 'warm-ns', free: 0, loaded: ['m/x'], models: ['m/x'], toolTypes: ['nerfstudio'] });
  assert.equal(schedule([t], agents(cold, other), noUsage(), 101_000, FAIR).assign[0]?.agentId, 'cold', 'the busy warm agent cannot run it: no wait');
  // the submitter's later task waits behind it (FIFO); another submitter's task takes the free agent
  const later = task({ id: 'n2', requiredModels: ['m/y'], createdAt: 100_500 });
  const otherSub = task({ id: 'o', submitter: 'B', requiredModels: ['m/y'], createdAt: 100_500 });
  const p = schedule([t, later, otherSub], agents(agent({ agentId: 'cold', models: ['m/x', 'm/y'] }), busyWarm), noUsage(), 101_000, FAIR);
  assert.deepEqual(p.assign.map((x) => x.taskId), ['o']);
});

test('warm wait: a backlog of the key deeper than the busy warm agents\' slots starts cold on the free agents instead of queueing behind them', () => {
  // one warm agent (2 slots, both busy) and two cold free ones: two young tasks of its key wait for it,
  // a third one would wait behind them with free agents idle, so the head starts cold now
  const warm = agent({ agentId: 'warm', slots: 2, free: 0, loaded: ['m/x'], models: ['m/x'] });
  const cold1 = agent({ agentId: 'cold1', models: ['m/x'] });
  const cold2 = agent({ agentId: 'cold2', models: ['m/x'] });
  const mk = (n: number) => task({ id: `t${n}`, requiredModels: ['m/x'], createdAt: 100_000 + n });
  const two = schedule([mk(1), mk(2)], agents(cold1, cold2, warm), noUsage(), 101_000, FAIR);
  assert.deepEqual([two.assign, two.wakeAt], [[], 115_001], 'a backlog the warm slots absorb waits (until 15 s after the head)');
  const three = schedule([mk(1), mk(2), mk(3)], agents(cold1, cold2, warm), noUsage(), 101_000, FAIR);
  assert.deepEqual(three.assign.map((x) => x.taskId), ['t1'], 'one more than the warm slots: the head starts cold, the rest now fits and waits');
  const five = schedule([1, 2, 3, 4, 5].map(mk), agents(cold1, cold2, warm), noUsage(), 101_000, FAIR);
  assert.deepEqual(five.assign.map((x) => x.taskId), ['t1', 't2'], 'a deeper one spreads over every free agent');
  assert.deepEqual(five.assign.map((x) => x.agentId).sort(), ['cold1', 'cold2']);
});

test('ledger: held time x GPUs, released tasks count while their release is in the window, seeded rows count', () => {
  const l = new UsageLedger(60);
  l.start('t1', 'A', 2, 0);
  assert.equal(l.usage(10_000).gpuSeconds.get('A'), 20);
  assert.equal(l.usage(10_000).active.get('A'), 1);
  l.end('t1', 10_000);
  l.start('t2', 'B', 0, 10_000); // no GPU reported: counts as 1
  l.drop('t2');
  const u = l.usage(20_000);
  assert.equal(u.gpuSeconds.get('A'), 20);
  assert.equal(u.gpuSeconds.get('B'), undefined, 'a refused assignment is not charged');
  assert.equal(l.usage(71_000).gpuSeconds.get('A'), undefined, 'out of the window');
  l.seed([{ taskId: 's1', submitter: 'C', start: 100_000, end: 105_000, gpus: 1 }, { taskId: 's2', submitter: 'C', start: 100_000, end: null, gpus: 1 }]);
  assert.equal(l.usage(110_000).gpuSeconds.get('C'), 15);
});

test('warm wait in the team scheduler: the held-back task is waiting, a timer kicks the pass that starts it cold when its wait is over', () => {
  const id = (n: number): string => `00000000-0000-7000-8000-${String(n).padStart(12, '0')}`;
  const models = ['m/x'];
  const running = fixtureTask({ id: id(1), seq: 1, status: 'running', agentId: 'warm', requiredModels: models });
  const s = initialState(TEAM, [], [running], [agentInfo({ agentId: 'warm', loaded: models, models }), agentInfo({ agentId: 'cold', models })]);
  const env = (now: number) => ({ now, maxConcurrent: 0, policy: FAIR });
  const t = fixtureTask({ id: id(2), seq: 2, requiredModels: models, createdAt: 1_000_000 });
  const first: SchedulerEffect[] = [...decide(s, { type: 'task_submitted', taskId: t.id, task: t }, env(1_002_000)).effects, ...decide(s, { type: 'kick' }, env(1_002_000)).effects];
  assert.deepEqual(first.filter((e) => e.type === 'assign'), []);
  assert.deepEqual(first.filter((e) => e.type === 'set_timer'), [{ type: 'set_timer', ms: 13_000 }], 'until 15 s after its submission');
  assert.deepEqual(first.filter((e) => e.type === 'mark_waiting').map((e) => (e as { ids: string[] }).ids), [[t.id]]);
  decide(s, { type: 'waiting_marked', ids: [t.id], moved: [t.id], events: [] }, env(1_002_000));
  const due = decide(s, { type: 'kick' }, env(1_015_000)).effects;
  assert.deepEqual(due.filter((e) => e.type === 'assign').map((e) => (e as { agentId: string }).agentId), ['cold']);
  assert.equal(due.filter((e) => e.type === 'set_timer').length, 0);
});
