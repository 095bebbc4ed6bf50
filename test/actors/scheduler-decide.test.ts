import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decide, initialState, type SchedulerEffect, type SchedulerInput, type SchedulerState } from '../../src/actors/scheduler/decide.js';
import { FakeClock } from '../../src/shared/clock.js';
import { agentInfo, task, TEAM } from './fixtures.js';

const id = (n: number) => `00000000-0000-7000-8000-${String(n).padStart(12, '0')}`;

/** Runs messages through decide with a fake clock and collects the effects. */
function run(s: SchedulerState, clock: FakeClock, ...msgs: SchedulerInput[]): SchedulerEffect[] {
  const out: SchedulerEffect[] = [];
  for (const m of msgs) out.push(...decide(s, m, { now: clock.now(), maxConcurrent: 0 }).effects);
  return out;
}
const of = <T extends SchedulerEffect['type']>(effects: SchedulerEffect[], type: T) => effects.filter((e): e is Extract<SchedulerEffect, { type: T }> => e.type === type);

test('a burst of messages coalesces into one pass; the pass assigns FIFO with the record and reserves the slot', () => {
  const clock = new FakeClock(1000);
  const s = initialState(TEAM, [], [], [agentInfo({ slots: 1 })]);
  const e1 = run(s, clock, { type: 'task_submitted', taskId: id(2), task: task({ id: id(2), seq: 2 }) }, { type: 'task_submitted', taskId: id(1), task: task({ id: id(1), seq: 1 }) });
  assert.equal(of(e1, 'kick').length, 1, 'one pass for the burst');
  assert.equal(of(e1, 'assign').length, 0, 'nothing is assigned before the pass');
  const pass = run(s, clock, { type: 'kick' });
  assert.deepEqual(
    of(pass, 'assign').map((a) => [a.taskId, a.agentId, a.task?.id]),
    [[id(1), 'agent-1', id(1)]],
    'the oldest task, with its record riding along',
  );
  assert.deepEqual(of(pass, 'mark_waiting'), [{ type: 'mark_waiting', ids: [id(2)] }], 'the rest goes waiting in one batch');
  assert.equal(s.agents.get('agent-1')?.free, 0);
  assert.equal(s.agents.get('agent-1')?.lastAssignedAt, 1000);
  // the batch write comes back as a message: moved tasks are waiting, their events are published
  const marked = run(s, clock, { type: 'waiting_marked', ids: [id(2)], moved: [id(2)], events: [] });
  assert.equal(s.queue.get(id(2))?.status, 'waiting');
  assert.equal(of(marked, 'mark_waiting').length, 0);
  // a second pass does not mark it again
  assert.equal(of(run(s, clock, { type: 'kick' }), 'mark_waiting').length, 0);
});

test('re-reads are bulk: many requeued tasks are loaded by ONE load at the next pass', () => {
  const clock = new FakeClock(0);
  const s = initialState(TEAM, [], [], []);
  const e = run(s, clock, ...[1, 2, 3, 4, 5].map((n) => ({ type: 'task_requeued' as const, taskId: id(n) })));
  assert.equal(of(e, 'load').length, 0, 'no read per message');
  const pass = run(s, clock, { type: 'kick' });
  const loads = of(pass, 'load');
  assert.equal(loads.length, 1);
  assert.deepEqual(loads[0]?.ids, [1, 2, 3, 4, 5].map(id));
  // the answer fills the queue with the schedulable ones; others leave it
  const token = loads[0]?.token ?? -1;
  const after = run(s, clock, {
    type: 'loaded',
    token,
    ids: [1, 2, 3, 4, 5].map(id),
    records: [task({ id: id(1), status: 'waiting' }), task({ id: id(2), status: 'cancelled' }), task({ id: id(3), status: 'pending', teamId: 'other' })],
  });
  assert.deepEqual([...s.queue.keys()], [id(1)]);
  assert.equal(of(after, 'kick').length, 1, 'a pass follows the refresh');
});

test('a message about a task that arrives while its load is in flight wins over the load\'s answer', () => {
  const clock = new FakeClock(0);
  const s = initialState(TEAM, [], [], []);
  run(s, clock, { type: 'task_requeued', taskId: id(7) });
  const token = of(run(s, clock, { type: 'kick' }), 'load')[0]?.token ?? -1;
  run(s, clock, { type: 'task_removed', taskId: id(7) }); // cancelled meanwhile
  run(s, clock, { type: 'loaded', token, ids: [id(7)], records: [task({ id: id(7), status: 'pending' })] });
  assert.equal(s.queue.has(id(7)), false, 'the stale read does not resurrect a removed task');
});

test('slots: slot_freed and assign_rejected release the reservation; not-moved tasks are re-read', () => {
  const clock = new FakeClock(0);
  const s = initialState(TEAM, [task({ id: id(1) }), task({ id: id(2), seq: 2 })], [], [agentInfo({ slots: 1 })]);
  run(s, clock, { type: 'kick' });
  assert.equal(s.active.get(id(1)), 'agent-1');
  run(s, clock, { type: 'assign_rejected', taskId: id(1), agentId: 'agent-1' });
  assert.equal(s.agents.get('agent-1')?.free, 1, 'the rejected assignment gave its slot back');
  assert.ok(s.toLoad.has(id(1)), 'and the task is re-read');
  const e = run(s, clock, { type: 'waiting_marked', ids: [id(2)], moved: [], events: [] });
  assert.ok(s.toLoad.has(id(2)), 'not moved (no longer pending): re-read');
  assert.equal(of(e, 'kick').length, 0, 'a pass is already pending');
  const pass = run(s, clock, { type: 'kick' });
  assert.deepEqual(of(pass, 'load')[0]?.ids, [id(1), id(2)]);
});

test('quota: at the team limit nothing is assigned; stats answers the view', () => {
  const s = initialState(TEAM, [task({ id: id(1) })], [task({ id: id(9), status: 'running', agentId: 'agent-1' })], [agentInfo({ slots: 4 })]);
  const d = decide(s, { type: 'kick' }, { now: 0, maxConcurrent: 1 });
  assert.equal(of(d.effects, 'assign').length, 0);
  assert.deepEqual(decide(s, { type: 'stats' }, { now: 0, maxConcurrent: 1 }).reply, { queued: 1, active: 1, agents: [{ agentId: 'agent-1', free: 3 }] });
});

test('one bulk read in flight at a time: ids that need a re-read meanwhile go in the next one', () => {
  const clock = new FakeClock(0);
  const s = initialState(TEAM, [], [], []);
  run(s, clock, { type: 'task_requeued', taskId: id(1) });
  const first = of(run(s, clock, { type: 'kick' }), 'load');
  assert.deepEqual(first[0]?.ids, [id(1)]);
  run(s, clock, { type: 'task_requeued', taskId: id(2) }, { type: 'task_requeued', taskId: id(3) });
  assert.equal(of(run(s, clock, { type: 'kick' }), 'load').length, 0, 'waits for the read in flight');
  const after = run(s, clock, { type: 'loaded', token: first[0]?.token ?? -1, ids: [id(1)], records: [] });
  assert.equal(of(after, 'kick').length, 1);
  assert.deepEqual(of(run(s, clock, { type: 'kick' }), 'load')[0]?.ids, [id(2), id(3)], 'the accumulated ids, in one read');
});
