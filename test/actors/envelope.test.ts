import { test } from 'node:test';
import assert from 'node:assert/strict';
import { envelopes } from '../../src/actors/index.js';
import { decodeError, encodeError, errorFromWire, errorToWire } from '../../src/actors/runtime/envelope.js';
import { AppError, conflict, rateLimited } from '../../src/shared/errors.js';
import { task } from './fixtures.js';

test('envelope round trip: target, message, deadline and reply correlation survive JSON', () => {
  const rec = task();
  const text = envelopes.encode({ target: { kind: 'team-scheduler', id: rec.teamId }, msg: { type: 'task_submitted', taskId: rec.id, task: rec }, deadline_ms: 1234, reply: 'r-1' });
  assert.equal(typeof text, 'string');
  const env = envelopes.decode(text);
  assert.deepEqual(env, { target: { kind: 'team-scheduler', id: rec.teamId }, msg: { type: 'task_submitted', taskId: rec.id, task: rec }, deadline_ms: 1234, reply: 'r-1' });
  // the decoded union narrows the message by the target kind
  if (env.target.kind === 'team-scheduler') assert.equal(env.msg.type, 'task_submitted');
  const tell = envelopes.decode(envelopes.encode({ target: { kind: 'task', id: 't' }, msg: { type: 'ack', attempt: 1, epoch: 2 } }));
  assert.deepEqual(tell, { target: { kind: 'task', id: 't' }, msg: { type: 'ack', attempt: 1, epoch: 2 } });
});

test('decode validates the message by its TARGET kind: another kind\'s message is rejected', () => {
  // 'kick' is a scheduler message; a task actor does not accept it
  const wrongKind = JSON.stringify({ target: { kind: 'task', id: 't' }, msg: { type: 'kick' } });
  assert.throws(() => envelopes.decode(wrongKind), (e: unknown) => e instanceof AppError && e.kind === 'bad_request' && e.code === 'invalid_message');
  // a right type with a wrong shape
  assert.throws(() => envelopes.decode(JSON.stringify({ target: { kind: 'task', id: 't' }, msg: { type: 'ack', attempt: 'one', epoch: 1 } })), (e: any) => e.code === 'invalid_message');
  assert.throws(() => envelopes.decode(JSON.stringify({ target: { kind: 'nobody', id: 't' }, msg: { type: 'get' } })), (e: any) => e.code === 'unknown_actor_kind');
  assert.throws(() => envelopes.decode('{not json'), (e: any) => e.code === 'invalid_envelope');
  assert.throws(() => envelopes.decode(JSON.stringify({ target: { kind: 'task' }, msg: { type: 'get' } })), (e: any) => e.code === 'invalid_envelope');
  // the agent's server_msg carries a real ServerToAgent union now
  assert.throws(() => envelopes.decodeMsg('agent', { type: 'server_msg', msg: { type: 'explode' } }), (e: any) => e.code === 'invalid_message');
  assert.deepEqual(envelopes.decodeMsg('agent', { type: 'server_msg', msg: { type: 'drain' } }), { type: 'server_msg', msg: { type: 'drain' } });
});

test('error codec: an AppError survives the round trip with kind, code, message and retry-after', () => {
  const back = decodeError(encodeError(conflict('task_terminal', 'task is already completed')));
  assert.ok(back instanceof AppError);
  assert.equal(back.kind, 'conflict');
  assert.equal(back.code, 'task_terminal');
  assert.equal(back.message, 'task is already completed');
  const rl = decodeError(encodeError(rateLimited(7)));
  assert.equal(rl.kind, 'rate_limited');
  assert.equal(rl.retryAfterS, 7);
  assert.deepEqual(errorToWire(rateLimited(7)), { kind: 'rate_limited', code: 'rate_limited', message: 'too many requests; retry later', retry_after_s: 7 });
});

test('error codec: an unknown error becomes internal_error without leaking its message; malformed wire errors too', () => {
  const w = errorToWire(new Error('password=hunter2 at db.internal:5432'));
  assert.deepEqual(w, { kind: 'internal', code: 'internal_error', message: 'internal error' });
  assert.equal(JSON.stringify(w).includes('hunter2'), false);
  for (const bad of [null, 'x', { kind: 'nonsense', code: 'c', message: 'm' }, { kind: 'conflict', code: 1, message: 'm' }]) {
    const e = errorFromWire(bad);
    assert.equal(e.kind, 'internal');
    assert.equal(e.code, 'internal_error');
  }
  assert.equal(decodeError('not json').code, 'internal_error');
});
