import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decide, initialState, type SchedulerEffect, type SchedulerInput, type SchedulerState } from '../../src/actors/scheduler/decide.js';
import { retryDelayMs } from '../../src/actors/task/decide.js';
import { agentInfo, task, TEAM } from './fixtures.js';

const id = (n: number) => `00000000-0000-7000-8000-${String(n).padStart(12, '0')}`;
const run = (s: SchedulerState, now: number, ...msgs: SchedulerInput[]): SchedulerEffect[] => msgs.flatMap((m) => decide(s, m, { now, maxConcurrent: 0 }).effects);
const of = <T extends SchedulerEffect['type']>(effects: SchedulerEffect[], type: T) => effects.filter((e): e is Extract<SchedulerEffect, { type: T }> => e.type === type);

test('retryDelayMs: exponential cap min(base * 2^(attempt-1), max), scaled by the jitter draw (full jitter)', () => {
  assert.equal(retryDelayMs(1, 1000, 60_000, 0), 0, 'a draw of 0 is no delay');
  assert.equal(retryDelayMs(1, 1000, 60_000, 0.5), 500);
  assert.equal(retryDelayMs(2, 1000, 60_000, 0.5), 1000);
  assert.equal(retryDelayMs(3, 1000, 60_000, 0.5), 2000);
  assert.equal(retryDelayMs(4, 1000, 60_000, 0.999), 7992);
  assert.equal(retryDelayMs(10, 1000, 60_000, 0.5), 30_000, 'capped at max');
  assert.equal(retryDelayMs(10_000, 1000, 60_000, 0.5), 30_000, 'huge attempts do not overflow');
  assert.equal(retryDelayMs(3, 0, 60_000, 0.9), 0, 'base 0: at once');
  assert.equal(retryDelayMs(3, 1000, 0, 0.9), 0, 'max 0: at once');
  // every draw stays within [0, cap)
  for (let i = 0; i < 200; i++) {
    const d = retryDelayMs(2, 1000, 60_000, Math.random());
    assert.ok(d >= 0 && d < 2000, `delay ${d}`);
  }
});

test('scheduler: a retry in its backoff is not assigned; a timer is armed for the earliest not_before; once due it is assigned', () => {
  const now = 1_000_000;
  const s = initialState(TEAM, [], [], [agentInfo({ slots: 2 })]);
  const later = task({ id: id(1), seq: 1, attempt: 2, notBefore: now + 5000 });
  const sooner = task({ id: id(2), seq: 2, attempt: 2, notBefore: now + 3000 });
  const pass = run(s, now, { type: 'task_submitted', taskId: id(1), task: later }, { type: 'task_submitted', taskId: id(2), task: sooner }, { type: 'kick' });
  assert.equal(of(pass, 'assign').length, 0, 'nothing in backoff is assigned although both slots are free');
  assert.deepEqual(of(pass, 'set_timer'), [{ type: 'set_timer', ms: 3000 }], 'the timer is for the earliest not_before');
  assert.deepEqual(of(pass, 'mark_waiting').map((e) => e.ids.sort()), [[id(1), id(2)]], 'pending retries in backoff are waiting');
  run(s, now, { type: 'waiting_marked', ids: [id(1), id(2)], moved: [id(1), id(2)], events: [] }, { type: 'kick' });

  // one millisecond early: still nothing; the timer is re-armed for the rest
  const early = run(s, now + 2999, { type: 'kick' });
  assert.equal(of(early, 'assign').length, 0);
  assert.deepEqual(of(early, 'set_timer'), [{ type: 'set_timer', ms: 1 }]);

  // due: the sooner one is assigned (FIFO does not let the later one's backoff block it), timer for the other
  const due = run(s, now + 3000, { type: 'kick' });
  assert.deepEqual(of(due, 'assign').map((a) => a.taskId), [id(2)]);
  assert.deepEqual(of(due, 'set_timer'), [{ type: 'set_timer', ms: 2000 }]);
  const last = run(s, now + 5000, { type: 'kick' });
  assert.deepEqual(of(last, 'assign').map((a) => a.taskId), [id(1)]);
  assert.equal(of(last, 'set_timer').length, 0, 'no timer when nothing is in backoff');
});

test('scheduler: a task without not_before (or one in the past) runs at once, ahead of a later retry still in backoff', () => {
  const now = 50_000;
  const s = initialState(TEAM, [task({ id: id(1), seq: 1, notBefore: now + 60_000 }), task({ id: id(2), seq: 2 }), task({ id: id(3), seq: 3, notBefore: now - 1 })], [], [agentInfo({ slots: 2 })]);
  const pass = run(s, now, { type: 'kick' });
  assert.deepEqual(of(pass, 'assign').map((a) => a.taskId), [id(2), id(3)]);
  assert.deepEqual(of(pass, 'set_timer'), [{ type: 'set_timer', ms: 60_000 }]);
});
