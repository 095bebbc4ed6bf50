import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decide, initialAgentState, type AgentEffect, type AgentInput, type AgentState } from '../../src/actors/agent/decide.js';
import type { TaskAssignment } from '../../src/actors/task-record.js';
import { agentInfo } from './fixtures.js';

const env = { now: 0, graceMs: 30_000 };
const assignment = (taskId: string): TaskAssignment => ({ taskId, attempt: 1, toolType: 'comfyui', workflow: {}, parameters: {}, inputFiles: [], timeoutS: 60 });

function run(s: AgentState, ...msgs: AgentInput[]): AgentEffect[] {
  const out: AgentEffect[] = [];
  for (const m of msgs) out.push(...decide(s, m, env).effects);
  return out;
}
const of = <T extends AgentEffect['type']>(effects: AgentEffect[], type: T) => effects.filter((e): e is Extract<AgentEffect, { type: T }> => e.type === type);

function connected(): AgentState {
  const s = initialAgentState('agent-1');
  const e = run(s, { type: 'connected', sessionId: 's1', info: agentInfo(), running: [] });
  const w = of(e, 'write_status')[0];
  if (w) run(s, { type: 'status_written', row: w.row, ok: true });
  const load = of(e, 'load_active')[0];
  if (load) run(s, { type: 'active_loaded', sessionId: 's1', reported: load.reported, rows: [] });
  return s;
}

test('connected: writes the row, re-attaches what it reports, loses what it does not, and announces itself after the read of its tasks', () => {
  const s = initialAgentState('agent-1');
  s.tasks.set('t-old', { attempt: 1, epoch: 4 });
  const e = run(s, { type: 'connected', sessionId: 's1', info: agentInfo(), running: [{ taskId: 't-run', attempt: 1, epoch: 2 }] });
  assert.deepEqual(of(e, 'write_status').map((w) => w.row), [{ status: 'online', currentTaskId: null }]);
  assert.deepEqual(
    of(e, 'tell_task').map((t) => [t.taskId, t.msg.type]),
    [
      ['t-run', 'reattach'],
      ['t-old', 'agent_lost'],
    ],
  );
  assert.equal(of(e, 'tell_scheduler').length, 0, 'agent_up waits for the read of its tasks');
  assert.deepEqual(of(e, 'load_active'), [{ type: 'load_active', sessionId: 's1', teamId: agentInfo().teamId, reported: ['t-run'] }]);
  const after = run(s, {
    type: 'active_loaded',
    sessionId: 's1',
    reported: ['t-run'],
    rows: [
      { id: 't-run', agentId: 'agent-1', leaseEpoch: 2 },
      { id: 't-db', agentId: 'agent-1', leaseEpoch: 7 },
      { id: 't-other', agentId: 'agent-2', leaseEpoch: 1 },
    ],
  });
  assert.deepEqual(
    of(after, 'tell_task').map((t) => [t.taskId, t.msg]),
    [['t-db', { type: 'agent_lost', agentId: 'agent-1', epoch: 7 }]],
    'PostgreSQL says it holds t-db, the agent does not: lost',
  );
  assert.deepEqual(of(after, 'tell_scheduler').map((t) => t.msg.type), ['agent_up']);
});

test('dispatch: sends the assignment; a refused send loses the task; the row goes busy with one write at a time', () => {
  const s = connected();
  const e = run(s, { type: 'dispatch', taskId: 't1', attempt: 1, epoch: 1, provision: false, assignment: assignment('t1') });
  const send = of(e, 'send')[0];
  assert.equal(send?.msg.type, 'assign');
  assert.deepEqual(send?.report, { taskId: 't1', epoch: 1 });
  const ok = run(s, { type: 'send_result', taskId: 't1', epoch: 1, ok: true });
  assert.deepEqual(of(ok, 'write_status').map((w) => w.row), [{ status: 'busy', currentTaskId: 't1' }]);
  // a second dispatch while that write is in flight: wanted, not written concurrently
  run(s, { type: 'dispatch', taskId: 't2', attempt: 1, epoch: 1, provision: false, assignment: assignment('t2') });
  const failed = run(s, { type: 'send_result', taskId: 't2', epoch: 1, ok: false });
  assert.deepEqual(of(failed, 'tell_task').map((t) => t.msg), [{ type: 'agent_lost', agentId: 'agent-1', epoch: 1 }]);
  assert.equal(of(failed, 'write_status').length, 0);
  assert.deepEqual([...s.tasks.keys()], ['t1']);
  // the finished result frees it: the idle row is written after the busy one landed
  const fin = run(s, { type: 'finished', sessionId: 's1', taskId: 't1', attempt: 1, epoch: 1, output: {} });
  assert.deepEqual(of(fin, 'tell_task').map((t) => t.msg.type), ['finish']);
  assert.equal(of(fin, 'write_status').length, 0, 'one write at a time');
  const landed = run(s, { type: 'status_written', row: { status: 'busy', currentTaskId: 't1' }, ok: true });
  assert.deepEqual(of(landed, 'write_status').map((w) => w.row), [{ status: 'online', currentTaskId: null }]);
});

test('a dispatch without its payload reads it; a cancel that arrives before the read wins', () => {
  const s = connected();
  const e = run(s, { type: 'dispatch', taskId: 't1', attempt: 1, epoch: 3, provision: true });
  assert.deepEqual(of(e, 'load_assignment'), [{ type: 'load_assignment', taskId: 't1', attempt: 1, epoch: 3, provision: true }]);
  run(s, { type: 'server_msg', msg: { type: 'cancel', taskId: 't1', attempt: 1, epoch: 3 } });
  const late = run(s, { type: 'assignment_loaded', taskId: 't1', attempt: 1, epoch: 3, provision: true, assignment: assignment('t1') });
  assert.equal(of(late, 'send').length, 0, 'not sent: the task was cancelled meanwhile');
});

test('messages of a superseded session are rejected; disconnect arms the grace timer; lost releases every task and stops', () => {
  const s = connected();
  run(s, { type: 'dispatch', taskId: 't1', attempt: 1, epoch: 1, provision: false, assignment: assignment('t1') }, { type: 'send_result', taskId: 't1', epoch: 1, ok: true });
  const stale = decide(s, { type: 'ack', sessionId: 'old', taskId: 't1', attempt: 1, epoch: 1 }, env);
  assert.deepEqual(stale.reply, { ok: false });
  assert.equal(of(stale.effects, 'tell_task').length, 0);
  const d = run(s, { type: 'disconnected', sessionId: 's1' });
  assert.deepEqual(of(d, 'set_timer'), [{ type: 'set_timer', name: 'grace', ms: 30_000, msg: { type: 'lost', sessionId: 's1' } }]);
  assert.deepEqual(of(d, 'tell_scheduler').map((t) => t.msg.type), ['agent_down']);
  const lost = run(s, { type: 'lost', sessionId: 's1' });
  assert.deepEqual(of(lost, 'tell_task').map((t) => [t.taskId, t.msg.type]), [['t1', 'agent_lost']]);
  assert.ok(lost.some((e) => e.type === 'stop'));
  assert.equal(s.tasks.size, 0);
  // a reconnect within the grace period would have cancelled it: lost of an older session is ignored
  const s2 = connected();
  assert.deepEqual(decide(s2, { type: 'lost', sessionId: 'x' }, env).reply, { ok: false });
});
