/**
 * Pure cores of hybrid dispatch: the cloud dispatcher's queue against the provider's limit, the
 * task state machine's cloud transitions, the scheduler's hand-over of cloud tasks, and the
 * provider error mapping. No sockets.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decideCloud, initialCloudState } from '../../src/actors/cloud/decide.js';
import { decide as decideTask } from '../../src/actors/task/decide.js';
import { decide as decideScheduler, initialState } from '../../src/actors/scheduler/decide.js';
import { providerErrorFor } from '../../src/cloud/comfy-cloud.js';
import { keyPrefix } from '../../src/cloud/store.js';
import { VaultKeyring, cloudProviderAad } from '../../src/vault/keyring.js';
import { task } from '../actors/fixtures.js';

const NOW = Date.UTC(2026, 0, 1);
const cfg = { timeoutMaxS: 3600, ackTimeoutMs: 30_000 };
const cloudTask = (o: Parameters<typeof task>[0] = {}) => task({ dispatchTarget: 'comfy_cloud', ...o });

test('dispatcher: FIFO starts up to the provider limit, the rest waits on our side; a freed slot starts the next', () => {
  const s = initialCloudState(2);
  const starts: string[] = [];
  for (const [id, seq] of [['c', 3], ['a', 1], ['b', 2]] as const) {
    for (const e of decideCloud(s, { type: 'enqueue', task: cloudTask({ id, seq }) }, NOW).effects) if (e.type === 'start') starts.push(e.taskId);
  }
  assert.deepEqual(starts, ['c', 'a'], 'two slots: the first two arrivals start');
  assert.equal(s.queue.size, 1);
  const next = decideCloud(s, { type: 'ended', taskId: 'a', later: null }, NOW).effects;
  assert.deepEqual(next, [{ type: 'start', taskId: 'b', attempt: 1, epoch: null }]);
  assert.deepEqual(decideCloud(s, { type: 'stats' }, NOW).reply, { queued: 0, running: 2, capacity: 2 });
});

test('dispatcher: a busy provider holds every submission and keeps the task queued in its place; duplicates are ignored', () => {
  const s = initialCloudState(1);
  decideCloud(s, { type: 'enqueue', task: cloudTask({ id: 'a', seq: 1 }) }, NOW);
  decideCloud(s, { type: 'enqueue', task: cloudTask({ id: 'a', seq: 1 }) }, NOW);
  assert.equal(s.running.size + s.queue.size, 1, 'a task handed over twice runs once');
  decideCloud(s, { type: 'enqueue', task: cloudTask({ id: 'b', seq: 2 }) }, NOW);
  const e = decideCloud(s, { type: 'ended', taskId: 'a', later: { retryInMs: 1000 } }, NOW).effects;
  assert.deepEqual(e, [{ type: 'set_timer', ms: 1000 }], 'nothing starts while the provider is busy');
  const after = decideCloud(s, { type: 'kick' }, NOW + 1000).effects;
  assert.deepEqual(after, [{ type: 'start', taskId: 'a', attempt: 1, epoch: null }], 'a keeps its place before b');
});

test('dispatcher: retries in backoff wait for notBefore; cancel aborts a running job and cancels it at the provider; resume re-attaches once', () => {
  const s = initialCloudState(3);
  const e = decideCloud(s, { type: 'enqueue', task: cloudTask({ id: 'r', seq: 1, notBefore: NOW + 500 }) }, NOW).effects;
  assert.deepEqual(e, [{ type: 'set_timer', ms: 500 }]);
  assert.deepEqual(decideCloud(s, { type: 'kick' }, NOW + 500).effects, [{ type: 'start', taskId: 'r', attempt: 1, epoch: null }]);
  assert.deepEqual(decideCloud(s, { type: 'cancel', taskId: 'r' }, NOW).effects, [{ type: 'abort', taskId: 'r' }, { type: 'cancel_job', taskId: 'r' }]);
  assert.deepEqual(decideCloud(s, { type: 'resume', taskId: 'x', epoch: 4 }, NOW).effects, [{ type: 'start', taskId: 'x', attempt: 0, epoch: 4 }]);
  assert.deepEqual(decideCloud(s, { type: 'resume', taskId: 'x', epoch: 4 }, NOW).effects, [], 'already followed here');
});

test('task: cloud_accept pending -> provisioning (new epoch, no agent), cloud_start -> running with the timeout, cloud_reject fails with a retry', () => {
  const acc = decideTask(cloudTask(), { type: 'cloud_accept' }, NOW, cfg);
  assert.equal(acc.transition?.to, 'provisioning');
  assert.deepEqual(acc.transition?.from, ['pending', 'waiting']);
  assert.equal(acc.transition?.patch.leaseEpoch, 1);
  assert.equal(acc.transition?.patch.agentId, null);
  assert.deepEqual(acc.reply, { ok: true, epoch: 1 });
  assert.ok(acc.effects.some((e) => e.type === 'set_timer' && e.name === 'timeout'), 'task_timeout runs from the acceptance');
  assert.deepEqual(decideTask(task(), { type: 'cloud_accept' }, NOW, cfg).reply, { ok: false, status: 'pending' }, 'an agent task is never accepted by a provider');
  assert.deepEqual(decideTask(cloudTask({ status: 'cancelled' }), { type: 'cloud_accept' }, NOW, cfg).reply, { ok: false, status: 'cancelled' });

  const prov = cloudTask({ status: 'provisioning', leaseEpoch: 1 });
  const st = decideTask(prov, { type: 'cloud_start', epoch: 1 }, NOW, cfg);
  assert.equal(st.transition?.to, 'running');
  const stuck = decideTask(prov, { type: 'timeout', epoch: 1 }, NOW, cfg);
  assert.equal(stuck.transition?.to, 'failed', 'a job the provider never starts times out');
  assert.deepEqual(stuck.transition?.from, ['provisioning']);
  assert.ok(decideTask(prov, { type: 'cloud_start', epoch: 0 }, NOW, cfg).stale, 'an old epoch is stale');

  const rej = decideTask(cloudTask({ status: 'waiting' }), { type: 'cloud_reject', error: 'bad key' }, NOW, cfg);
  assert.equal(rej.transition?.to, 'failed');
  assert.equal(rej.transition?.createRetry, true);
});

test('task: cancel and timeout of a cloud task tell its dispatcher to cancel the provider job; recovery re-attaches instead of waiting for an agent', () => {
  const running = cloudTask({ status: 'running', leaseEpoch: 2, startedAt: NOW - 1000 });
  const c = decideTask(running, { type: 'cancel' }, NOW, cfg);
  assert.ok(c.effects.some((e) => e.type === 'cloud' && e.msg.type === 'cancel'));
  const to = decideTask(running, { type: 'timeout', epoch: 2 }, NOW, cfg);
  assert.equal(to.transition?.to, 'failed');
  assert.ok(to.effects.some((e) => e.type === 'cloud' && e.msg.type === 'cancel'));
  const rec = decideTask(running, { type: 'recover', graceMs: 5000 }, NOW, cfg);
  assert.ok(rec.effects.some((e) => e.type === 'cloud' && e.msg.type === 'resume' && e.msg.epoch === 2));
  assert.ok(!rec.effects.some((e) => e.type === 'set_timer' && e.name === 'grace'), 'no agent grace period');
});

test('scheduler: a comfy_cloud task is handed to its dispatcher, never placed on an agent nor marked waiting', () => {
  const s = initialState('team-1', [], [], [{ agentId: 'a1', teamId: 'team-1', labels: [], gpuType: null, gpuCount: 1, vramTotalGb: 24, models: [], slots: 1, draining: false, needsSync: false }]);
  const t = cloudTask({ id: 'c1', teamId: 'team-1' });
  decideScheduler(s, { type: 'task_submitted', taskId: 'c1', task: t }, { now: NOW, maxConcurrent: 0 });
  const d = decideScheduler(s, { type: 'kick' }, { now: NOW, maxConcurrent: 0 });
  assert.deepEqual(d.effects.map((e) => e.type), ['cloud']);
  assert.equal(s.queue.size, 0);
});

test('provider errors map to what a user can act on; key prefixes; the key ciphertext is bound to its team and provider', () => {
  assert.equal(providerErrorFor(401, 'x', 'Invalid API key').kind, 'auth');
  assert.match(providerErrorFor(401, 'x', 'Invalid API key').message, /PUT \/cloud-providers\/comfy_cloud/);
  assert.equal(providerErrorFor(402, 'x', '').kind, 'credits');
  // issue 25: Comfy Cloud's 429 is "subscription inactive / not paid", not a rate limit (development/cloud/overview.mdx)
  assert.equal(providerErrorFor(429, 'x', '').kind, 'subscription');
  assert.equal(providerErrorFor(429, 'x', '').transient, false);
  assert.match(providerErrorFor(429, 'x', 'Payment required').message, /^cloud_provider_unavailable: .*subscription is inactive or not paid \(429: Payment required\)/);
  assert.equal(providerErrorFor(503, 'x', '').transient, true);
  assert.equal(providerErrorFor(400, 'x', '').transient, false);
  assert.equal(keyPrefix('comfyui-0123456789abcdef0123'), 'comfyui-');
  assert.equal(keyPrefix('short'), '');
  const k = VaultKeyring.fromConfig({ fallbackSecret: 'secret-for-tests' });
  const enc = k.encrypt('comfyui-key', cloudProviderAad('team-a', 'comfy_cloud'));
  assert.ok(!enc.includes('comfyui-key'));
  assert.equal(k.decrypt(enc, cloudProviderAad('team-a', 'comfy_cloud')), 'comfyui-key');
  assert.throws(() => k.decrypt(enc, cloudProviderAad('team-b', 'comfy_cloud')), /failed authentication/);
});
