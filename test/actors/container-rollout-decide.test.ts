/**
 * The rolling update's pure decisions (src/actors/container/rollout.ts) on a fake clock: one new
 * replica at a time, an old one drained only once a new one is healthy, drained ones removed only
 * when idle, completion, and rollback when a new replica fails or is not healthy in time.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decideRollout, specRevision, type RolloutReplica, type RolloutSettings } from '../../src/actors/container/rollout.js';

const ST: RolloutSettings = { healthTimeoutMs: 10_000, drainSettleMs: 2_000 };
const T0 = 1_000_000;
const OLD = 'r-old';
const NEW = 'r-new';
const rep = (id: string, revision: string, o: Partial<RolloutReplica> = {}): RolloutReplica => ({ id, revision, status: 'running', healthy: true, error: '', placedAt: T0 - 60_000, drainingSince: null, inflight: 0, ...o });
const starting = (id: string, at = T0): RolloutReplica => rep(id, NEW, { status: 'starting', healthy: false, placedAt: at });

test('specRevision: the same spec gives the same revision; image, env, port, health path or GPUs change it', () => {
  const base = { image: 'img:1', exposedPort: 8080, healthPath: '/h', env: [{ env_name: 'A', env_value: '1' }], gpuCount: 0 };
  assert.equal(specRevision(base), specRevision({ ...base, env: [{ env_name: 'A', env_value: '1' }] }));
  const revs = new Set([
    specRevision(base),
    specRevision({ ...base, image: 'img:2' }),
    specRevision({ ...base, exposedPort: 8081 }),
    specRevision({ ...base, healthPath: '/x' }),
    specRevision({ ...base, env: [{ env_name: 'A', env_value: '2' }] }),
    specRevision({ ...base, gpuCount: 1 }),
  ]);
  assert.equal(revs.size, 6);
});

test('2 replicas roll one at a time: start one, drain one old once it is healthy, start the next, complete', () => {
  // step 1: only old replicas serve: start one new (a surge of one)
  let d = decideRollout([rep('a', OLD), rep('b', OLD)], NEW, 2, ST, T0);
  assert.deepEqual({ start: d.start, drain: d.drain, completed: d.completed, rollback: d.rollback }, { start: true, drain: [], completed: false, rollback: '' });
  // the new one is starting: wait (no second start, no drain)
  d = decideRollout([rep('a', OLD), rep('b', OLD), starting('n1')], NEW, 2, ST, T0 + 500);
  assert.equal(d.start, false);
  assert.deepEqual(d.drain, []);
  assert.equal(d.rollback, '');
  // it is healthy: one old replica is drained (the one serving least)
  d = decideRollout([rep('a', OLD, { inflight: 3 }), rep('b', OLD, { inflight: 1 }), rep('n1', NEW)], NEW, 2, ST, T0 + 1_000);
  assert.deepEqual(d.drain, ['b']);
  assert.equal(d.start, false);
  assert.equal(d.updated, 1);
  // the drained one still has a request in flight: kept; the next new replica starts
  d = decideRollout([rep('a', OLD), rep('b', OLD, { drainingSince: T0 + 1_000, inflight: 1 }), rep('n1', NEW)], NEW, 2, ST, T0 + 5_000);
  assert.deepEqual(d.remove, []);
  assert.equal(d.start, true);
  // idle now and settled: removed
  d = decideRollout([rep('a', OLD), rep('b', OLD, { drainingSince: T0 + 1_000 }), rep('n1', NEW), starting('n2', T0 + 5_000)], NEW, 2, ST, T0 + 6_000);
  assert.deepEqual(d.remove, ['b']);
  assert.equal(d.start, false);
  // not before the settle time even when idle
  d = decideRollout([rep('a', OLD, { drainingSince: T0 + 6_000 }), rep('n1', NEW), rep('n2', NEW)], NEW, 2, ST, T0 + 7_000);
  assert.deepEqual(d.remove, []);
  assert.equal(d.completed, false);
  // n2 healthy: the last old one is drained
  d = decideRollout([rep('a', OLD), rep('n1', NEW), rep('n2', NEW)], NEW, 2, ST, T0 + 7_000);
  assert.deepEqual(d.drain, ['a']);
  // it goes: completed
  d = decideRollout([rep('a', OLD, { drainingSince: T0 + 7_000 }), rep('n1', NEW), rep('n2', NEW)], NEW, 2, ST, T0 + 9_000);
  assert.deepEqual(d.remove, ['a']);
  assert.equal(d.completed, true);
  assert.equal(d.updated, 2);
});

test('a new replica that fails rolls back, with its error', () => {
  const d = decideRollout([rep('a', OLD), rep('n1', NEW, { status: 'failed', healthy: false, error: 'exited with code 3\nmore' })], NEW, 1, ST, T0);
  assert.match(d.rollback, /failed: exited with code 3$/);
  assert.equal(d.start, false);
  assert.deepEqual(d.drain, []);
});

test('a new replica not healthy within the health timeout rolls back; before it, the rollout waits', () => {
  const reps = [rep('a', OLD), rep('n1', NEW, { status: 'running', healthy: false, placedAt: T0, error: 'GET /healthz answered 404' })];
  assert.equal(decideRollout(reps, NEW, 1, ST, T0 + 9_999).rollback, '');
  assert.match(decideRollout(reps, NEW, 1, ST, T0 + 10_000).rollback, /not healthy within 10 s: GET \/healthz answered 404/);
});

test('old replicas that are not ready are drained first; unknown revisions count as old', () => {
  const d = decideRollout([rep('a', ''), rep('b', OLD, { healthy: false }), rep('n1', NEW)], NEW, 2, ST, T0);
  assert.deepEqual(d.drain, ['b']);
});

test('nothing to roll (scaled to zero, or every replica already new): completed', () => {
  assert.equal(decideRollout([], NEW, 0, ST, T0).completed, true);
  assert.equal(decideRollout([rep('n1', NEW)], NEW, 1, ST, T0).completed, true);
  assert.equal(decideRollout([rep('n1', NEW), starting('n2')], NEW, 2, ST, T0).completed, false);
});
