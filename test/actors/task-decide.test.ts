import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decide, type Decision } from '../../src/actors/task/decide.js';
import { task } from './fixtures.js';

const cfg = { timeoutMaxS: 3600, ackTimeoutMs: 30_000 };
const NOW = Date.UTC(2026, 0, 1);
const types = (d: Decision) => d.effects.map((e) => (e.type === 'scheduler' ? `scheduler:${e.msg.type}` : e.type === 'set_timer' || e.type === 'cancel_timer' ? `${e.type}:${e.name}` : e.type));

test('assign: pending -> queued with a new epoch, fenced on the old one; dispatch and the ACK timer follow', () => {
  const d = decide(task(), { type: 'assign', agentId: 'a1', provision: false }, NOW, cfg);
  assert.deepEqual(d.transition?.from, ['pending', 'waiting']);
  assert.equal(d.transition?.epoch, 0);
  assert.equal(d.transition?.to, 'queued');
  assert.equal(d.transition?.patch.leaseEpoch, 1);
  assert.deepEqual(types(d), ['dispatch', 'set_timer:ack']);
  assert.deepEqual(d.reply, { ok: true, epoch: 1 });
  const prov = decide(task(), { type: 'assign', agentId: 'a1', provision: true }, NOW, cfg);
  assert.equal(prov.transition?.to, 'provisioning');
  assert.deepEqual(types(prov), ['dispatch'], 'no ACK timer while provisioning');
});

test('assign of a task no longer schedulable is rejected back to the scheduler, without a write', () => {
  const d = decide(task({ status: 'running', leaseEpoch: 2, agentId: 'a0' }), { type: 'assign', agentId: 'a1', provision: false }, NOW, cfg);
  assert.equal(d.transition, undefined);
  assert.deepEqual(types(d), ['scheduler:assign_rejected']);
  assert.deepEqual(d.reply, { ok: false, status: 'running' });
});

test('ack: only for the current epoch and attempt; a duplicate is idempotent; a stale one is reported', () => {
  const q = task({ status: 'queued', leaseEpoch: 3, agentId: 'a1' });
  const d = decide(q, { type: 'ack', attempt: 1, epoch: 3 }, NOW, cfg);
  assert.equal(d.transition?.to, 'running');
  assert.equal(d.transition?.epoch, 3);
  assert.deepEqual(types(d), ['set_timer:timeout', 'cancel_timer:grace', 'cancel_timer:ack']);
  const timer = d.effects[0];
  assert.ok(timer?.type === 'set_timer' && timer.ms === 60_000, 'the task timeout');
  const stale = decide(q, { type: 'ack', attempt: 1, epoch: 2 }, NOW, cfg);
  assert.equal(stale.transition, undefined);
  assert.ok(stale.stale);
  const dup = decide({ ...q, status: 'running' }, { type: 'ack', attempt: 1, epoch: 3 }, NOW, cfg);
  assert.deepEqual(dup, { effects: [] });
});

test('task_timeout is honoured above the default maximum (a 2-day training); 0 is the default maximum', () => {
  const timerOf = (timeoutS: number): number | undefined => {
    const d = decide(task({ status: 'queued', leaseEpoch: 1, agentId: 'a1', timeoutS }), { type: 'ack', attempt: 1, epoch: 1 }, NOW, cfg);
    const e = d.effects.find((x) => x.type === 'set_timer' && x.name === 'timeout');
    return e?.type === 'set_timer' ? e.ms : undefined;
  };
  assert.equal(timerOf(172_800), 172_800_000, 'not cut to GANTRY_TASK_TIMEOUT_MAX_S');
  assert.equal(timerOf(30 * 86_400), 30 * 86_400_000);
  assert.equal(timerOf(0), cfg.timeoutMaxS * 1000);
  assert.equal(timerOf(60), 60_000);
  const r = task({ status: 'running', leaseEpoch: 1, agentId: 'a1', startedAt: NOW - 100_000_000, timeoutS: 172_800 });
  const rec = decide(r, { type: 'recover', graceMs: 5000 }, NOW, cfg);
  assert.ok(rec.effects.some((e) => e.type === 'set_timer' && e.name === 'timeout' && e.ms === 72_800_000), 'a recovered task re-arms the rest of its own timeout');
  assert.equal(decide(r, { type: 'timeout', epoch: 1 }, NOW, cfg).transition?.patch.error, 'task timed out after 172800 s');
});

test('finish and fail: one terminal transition fenced by epoch; fail asks for the retry task', () => {
  const r = task({ status: 'running', leaseEpoch: 1, agentId: 'a1', startedAt: NOW - 1000 });
  const done = decide(r, { type: 'finish', epoch: 1, output: { k: 1 } }, NOW, cfg);
  assert.equal(done.transition?.to, 'completed');
  assert.deepEqual(types(done), ['cancel_timer:timeout', 'scheduler:slot_freed', 'stop']);
  const failed = decide(r, { type: 'fail', epoch: 1, error: 'oom' }, NOW, cfg);
  assert.equal(failed.transition?.to, 'failed');
  assert.equal(failed.transition?.createRetry, true);
  assert.deepEqual(failed.transition?.from, ['provisioning', 'queued', 'running']);
  assert.ok(decide(r, { type: 'finish', epoch: 0, output: {} }, NOW, cfg).stale, 'an old epoch never completes the task');
  assert.deepEqual(decide({ ...r, status: 'completed' }, { type: 'finish', epoch: 1, output: {} }, NOW, cfg), { effects: [] }, 'duplicate result');
});

test('agent loss: before the ACK back to waiting (no retry); after it, a failure; another agent\'s loss is stale', () => {
  const q = task({ status: 'queued', leaseEpoch: 1, agentId: 'a1' });
  const back = decide(q, { type: 'agent_lost', agentId: 'a1', epoch: 1 }, NOW, cfg);
  assert.equal(back.transition?.to, 'waiting');
  assert.equal(back.transition?.createRetry, undefined);
  assert.deepEqual(types(back), ['cancel_timer:grace', 'scheduler:slot_freed', 'scheduler:task_requeued']);
  const r = { ...q, status: 'running' as const };
  const lost = decide(r, { type: 'grace_expired', epoch: 1 }, NOW, cfg);
  assert.equal(lost.transition?.to, 'failed');
  assert.equal(lost.transition?.patch.error, 'agent disconnected');
  assert.ok(decide(r, { type: 'agent_lost', agentId: 'a2', epoch: 1 }, NOW, cfg).stale);
});

test('cancel: any open status -> cancelled (an agent is told); a terminal task is a conflict', () => {
  const r = task({ status: 'running', leaseEpoch: 1, agentId: 'a1' });
  const d = decide(r, { type: 'cancel' }, NOW, cfg);
  assert.equal(d.transition?.to, 'cancelled');
  assert.deepEqual(d.transition?.from, ['pending', 'waiting', 'provisioning', 'queued', 'running']);
  assert.ok(d.effects.some((e) => e.type === 'tell_agent' && e.msg.type === 'cancel' && e.msg.epoch === 1));
  const pending = decide(task(), { type: 'cancel' }, NOW, cfg);
  assert.deepEqual(types(pending).filter((t) => t.startsWith('scheduler')), ['scheduler:task_removed']);
  assert.deepEqual(decide(task({ status: 'failed' }), { type: 'cancel' }, NOW, cfg).conflict?.code, 'task_terminal');
});

test('timeout and recover re-arm timers from the record and the fake clock', () => {
  const r = task({ status: 'running', leaseEpoch: 4, agentId: 'a1', startedAt: NOW - 50_000, timeoutS: 60 });
  const rec = decide(r, { type: 'recover', graceMs: 5000 }, NOW, cfg);
  assert.deepEqual(
    rec.effects.map((e) => (e.type === 'set_timer' ? [e.name, e.ms, e.msg] : e.type)),
    [
      ['grace', 5000, { type: 'grace_expired', epoch: 4 }],
      ['timeout', 10_000, { type: 'timeout', epoch: 4 }],
    ],
  );
  const to = decide(r, { type: 'timeout', epoch: 4 }, NOW, cfg);
  assert.equal(to.transition?.to, 'failed');
  assert.equal(to.transition?.patch.error, 'task timed out after 60 s');
  assert.deepEqual(decide(r, { type: 'timeout', epoch: 3 }, NOW, cfg), { effects: [] });
});

test('a result or progress for the current epoch while still queued implies the lost ACK (cluster: the ACK went to a node that died)', () => {
  const queued = task({ status: 'queued', leaseEpoch: 3, agentId: 'a1' });
  const fin = decide(queued, { type: 'finish', epoch: 3, output: { outputs: [] } }, NOW, cfg);
  assert.deepEqual(fin.transition?.from, ['queued']);
  assert.equal(fin.transition?.to, 'completed');
  assert.equal(fin.transition?.epoch, 3, 'still fenced on the epoch');
  assert.deepEqual(fin.transition?.events.map((e) => (e.type === 'status' ? `status:${String(e.data.status)}` : e.type)), ['status:running', 'completed']);
  assert.equal(fin.transition?.patch.startedAt, NOW);
  assert.ok(types(fin).includes('cancel_timer:ack'));
  const prog = decide(queued, { type: 'progress', epoch: 3, progress: { progress: 0.5, step_current: 1, step_total: 2, current_node: 'n' } }, NOW, cfg);
  assert.equal(prog.transition?.to, 'running');
  // another epoch stays stale
  assert.ok(decide(queued, { type: 'finish', epoch: 2, output: {} }, NOW, cfg).stale);
  assert.ok(decide(queued, { type: 'progress', epoch: 4, progress: { progress: 0.5, step_current: 1, step_total: 2, current_node: 'n' } }, NOW, cfg).stale);
});
