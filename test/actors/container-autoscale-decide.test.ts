/**
 * The autoscaler's pure decisions (src/actors/container/autoscale.ts) on a fake clock: scale up on
 * in-flight requests and queue delay, down only after the cool-down, to zero after the idle
 * timeout, and never removing (nor preferring to drain) a replica with requests in flight.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { clusterLoad, decideScale, type LoadSample, type ScaleReplica, type ScaleSettings } from '../../src/actors/container/autoscale.js';

const ST: ScaleSettings = { minReplicas: 1, maxReplicas: 4, targetInflight: 2, idleTimeoutMs: 10_000, cooldownMs: 5_000, queueDelayMs: 500, upWindowMs: 2_000, drainSettleMs: 2_000 };
const T0 = 1_000_000;
const sample = (at: number, inflight: number, o: Partial<LoadSample> = {}): LoadSample => ({ at, inflight, queued: 0, queueDelayMs: 0, requests: inflight > 0 ? 1 : 0, ...o });
const rep = (id: string, inflight = 0, o: Partial<ScaleReplica> = {}): ScaleReplica => ({ id, ready: true, drainingSince: null, inflight, ...o });
/** A sample every second from `from` to `to` (inclusive) with `inflight(at)` requests. */
const series = (from: number, to: number, inflight: (at: number) => number): LoadSample[] => {
  const out: LoadSample[] = [];
  for (let at = from; at <= to; at += 1000) out.push(sample(at, inflight(at)));
  return out;
};
const hist = { observedSince: T0 - 60_000, lastScaleUpAt: T0 - 60_000, lastActiveAt: 0 };

test('scale up at once to ceil(in flight / target), clamped to max_replicas', () => {
  const now = T0;
  const d = decideScale([sample(now, 5)], [rep('a', 5)], ST, hist, now);
  assert.equal(d.desired, 3);
  assert.deepEqual(d.drain, []);
  assert.match(d.reason, /scaling up to 3/);
  assert.equal(decideScale([sample(now, 50)], [rep('a', 50)], ST, hist, now).desired, 4, 'max_replicas caps it');
  assert.equal(decideScale([sample(now, 2)], [rep('a', 2)], ST, hist, now).desired, 1, 'at the target: no change');
});

test('scale up on queue delay: one more replica when requests waited past the threshold, not while one is starting', () => {
  const now = T0;
  const waited = [sample(now - 500, 2, { queueDelayMs: 800, queued: 0 })];
  const two = [rep('a', 1), rep('b', 1)];
  assert.equal(decideScale(waited, two, ST, hist, now).desired, 3);
  assert.equal(decideScale(waited, [...two, rep('c', 0, { ready: false })], ST, hist, now).desired, 3, 'a replica on its way: no extra one (and no scale-down while requests wait)');
  // (a scale-up just happened: the cool-down keeps these from scaling down)
  const justUp = { observedSince: T0 - 60_000, lastScaleUpAt: now, lastActiveAt: 0 };
  assert.equal(decideScale([sample(now, 2, { queueDelayMs: 100 })], two, ST, justUp, now).desired, 2, 'a short wait: nothing');
  assert.equal(decideScale([sample(now - 5_000, 2, { queueDelayMs: 5_000 })], two, ST, justUp, now).desired, 2, 'an old wait (outside the up window): nothing');
});

test('cool-down: no scale-down before the load stayed lower for the whole cool-down; then down to the window\'s largest need', () => {
  const replicas = [rep('a'), rep('b'), rep('c')];
  // busy (6 in flight = 3 replicas) until T0, then 1 in flight
  const samples = series(T0 - 10_000, T0 + 10_000, (at) => (at <= T0 ? 6 : 1));
  const at = (now: number) => decideScale(samples.filter((s) => s.at <= now), replicas, ST, hist, now);
  for (let now = T0 + 1000; now < T0 + ST.cooldownMs; now += 1000) assert.equal(at(now).desired, 3, `still 3 at +${now - T0} ms`);
  const d = at(T0 + ST.cooldownMs);
  assert.equal(d.desired, 1);
  assert.equal(d.drain.length, 2);
  assert.match(d.reason, /scaling down to 1 after the cool-down/);
  // a spike inside the window keeps the replicas it needed
  const spiky = series(T0 - 10_000, T0 + 10_000, (x) => (x === T0 + 3000 ? 4 : 1));
  assert.equal(decideScale(spiky, replicas, ST, hist, T0 + 6000).desired, 2);
  // no scale-down within the cool-down after a scale-up, even with no load
  const idle = series(T0 - 10_000, T0, () => 0);
  assert.equal(decideScale(idle, replicas, ST, { observedSince: T0 - 60_000, lastScaleUpAt: T0 - 1000, lastActiveAt: 0 }, T0).desired, 3);
  // nor right after the actor started observing (no history behind)
  assert.equal(decideScale(idle, replicas, ST, { observedSince: T0 - 1000, lastScaleUpAt: 0, lastActiveAt: 0 }, T0).desired, 3);
  assert.equal(decideScale(idle, replicas, ST, hist, T0).desired, 1, 'min_replicas floors it');
  // max_replicas lowered below the replicas serving: down at once (a setting, not load)
  assert.equal(decideScale(series(T0 - 2000, T0, () => 6), replicas, { ...ST, maxReplicas: 2 }, { observedSince: T0 - 1000, lastScaleUpAt: T0, lastActiveAt: 0 }, T0).desired, 2);
});

test('never drains a replica with requests in flight while an idle one can go; never removes one with requests in flight', () => {
  const now = T0;
  const samples = series(T0 - 10_000, T0, () => 2);
  // target 2, 2 in flight: 1 replica is enough; b and c serve nothing, a holds both requests
  const d = decideScale(samples, [rep('a', 2), rep('b', 0), rep('c', 0)], ST, hist, now);
  assert.equal(d.desired, 1);
  assert.deepEqual(d.drain.sort(), ['b', 'c']);
  // a replica still starting goes first
  const d2 = decideScale(series(T0 - 10_000, T0, () => 1), [rep('a', 1), rep('b', 0, { ready: false })], ST, hist, now);
  assert.deepEqual(d2.drain, ['b']);
  // when every replica is busy the least busy is drained (it keeps its requests: only new ones stop)
  const d3 = decideScale(series(T0 - 10_000, T0, () => 2), [rep('a', 1), rep('b', 1)], ST, hist, now);
  assert.equal(d3.drain.length, 1);
  assert.deepEqual(d3.remove, [], 'a drain starts; nothing is removed');
  // a draining replica with a request in flight stays, however long it drains; at 0 it goes (after the settle time)
  const draining = (inflight: number, since: number) => rep('x', inflight, { drainingSince: since });
  assert.deepEqual(decideScale(samples, [rep('a', 1), draining(1, now - 3_600_000)], ST, hist, now).remove, []);
  assert.deepEqual(decideScale(samples, [rep('a', 1), draining(0, now - 1000)], ST, hist, now).remove, [], 'not before the drain reached every node');
  assert.deepEqual(decideScale(samples, [rep('a', 1), draining(0, now - ST.drainSettleMs)], ST, hist, now).remove, ['x']);
  // randomised: whatever the load and replicas, nothing removed has a request in flight
  let seed = 7;
  const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
  for (let k = 0; k < 2000; k++) {
    const rs = Array.from({ length: 1 + rnd(6) }, (_, i) => rep(`r${i}`, rnd(3), { ready: rnd(4) > 0, drainingSince: rnd(2) ? now - rnd(10_000) : null }));
    const ss = series(now - rnd(20_000), now, () => rnd(8));
    const out = decideScale(ss, rs, { ...ST, minReplicas: rnd(2) }, { observedSince: now - rnd(60_000), lastScaleUpAt: now - rnd(60_000), lastActiveAt: now - rnd(60_000) }, now);
    for (const id of out.remove) assert.equal(rs.find((r) => r.id === id)?.inflight, 0, `removed ${id} with requests in flight`);
    for (const id of out.drain) assert.equal(rs.find((r) => r.id === id)?.drainingSince, null);
    assert.ok(out.desired >= 0 && out.desired <= ST.maxReplicas, `desired ${out.desired}`);
  }
});

test('a draining replica is brought back when load returns (before any new one is placed)', () => {
  const now = T0;
  const d = decideScale([sample(now, 4)], [rep('a', 2), rep('b', 0, { drainingSince: now - 500 }), rep('c', 0, { drainingSince: now - 500, ready: false })], ST, hist, now);
  assert.equal(d.desired, 2);
  assert.deepEqual(d.undrain, ['b'], 'the ready one first');
  assert.deepEqual(d.remove, []);
});

test('scale to zero (min_replicas 0): after idle_timeout without requests, not while a request is in flight; a held request wakes it', () => {
  const zero = { ...ST, minReplicas: 0, idleTimeoutMs: 10_000 };
  const lastReq = T0;
  const samples = [sample(lastReq, 1), ...series(lastReq + 1000, lastReq + 20_000, () => 0)];
  const at = (now: number, rs = [rep('a')]) => decideScale(samples.filter((s) => s.at <= now), rs, zero, hist, now);
  assert.equal(at(lastReq + 9_000).desired, 1, 'idle for less than idle_timeout: kept');
  const d = at(lastReq + 10_000);
  assert.equal(d.desired, 0);
  assert.deepEqual(d.drain, ['a']);
  assert.match(d.reason, /scaled to zero/);
  assert.equal(at(lastReq + 12_000, [rep('a', 1)]).desired, 1, 'a request still in flight (a long stream): kept');
  // scaled to zero: a held request (queued) needs one replica at once
  const woken = decideScale([...samples, sample(lastReq + 30_000, 0, { queued: 1, requests: 1 })], [], zero, hist, lastReq + 30_000);
  assert.equal(woken.desired, 1);
  assert.match(woken.reason, /from zero/);
  // with nothing asked, zero stays zero
  assert.equal(decideScale(samples, [], zero, hist, lastReq + 30_000).desired, 0);
  // the samples kept cover the cool-down only: idleness comes from the last active instant
  const quiet = series(lastReq + 5_000, lastReq + 9_000, () => 0);
  assert.equal(decideScale(quiet, [rep('a')], zero, { ...hist, lastActiveAt: lastReq }, lastReq + 9_000).desired, 1);
  assert.equal(decideScale(quiet, [rep('a')], zero, { ...hist, lastActiveAt: lastReq }, lastReq + 10_000).desired, 0);
});

test('clusterLoad sums the nodes\' fresh reports per replica; a node silent past the stale limit counts nothing', () => {
  const nodes = new Map([
    ['n1', { at: T0, instances: new Map([['a', 2], ['b', 1]]), queued: 1 }],
    ['n2', { at: T0 - 500, instances: new Map([['a', 3]]), queued: 0 }],
    ['n3', { at: T0 - 60_000, instances: new Map([['b', 9]]), queued: 4 }],
  ]);
  const l = clusterLoad(nodes, T0, 5_000);
  assert.equal(l.perReplica.get('a'), 5);
  assert.equal(l.perReplica.get('b'), 1);
  assert.equal(l.inflight, 6);
  assert.equal(l.queued, 1);
});
