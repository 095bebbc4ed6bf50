/** Pure parts of the agent program: discovery parsing, flags/env, backoff, flow-control primitives, outbound coalescing. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseGpuFlag, parseNvidiaSmi, resolveMachineId, scanCustomNodes, scanModels } from '../../src/agent/discovery.js';
import { parseAgentArgs, UsageError } from '../../src/agent/main.js';
import { AgentClient, backoffDelay } from '../../src/agent/client.js';
import { CreditGate, CreditReturner } from '../../src/protocol/agent-wire.js';
import { createLogger } from '../../src/shared/logger.js';
import { tmpDir } from './helpers.js';

test('nvidia-smi csv (noheader, nounits) -> GPUs in decimal GB', () => {
  const g = parseNvidiaSmi('NVIDIA GeForce RTX 4090, 24564, 37, 2048, 51\nNVIDIA A100-SXM4-80GB, 81920, 0, 0, 33\n\n');
  assert.equal(g.length, 2);
  assert.deepEqual(g[0], { index: 0, name: 'NVIDIA GeForce RTX 4090', vram_total_gb: 25.8, utilization_percent: 37, vram_used_gb: 2.1, temperature_c: 51 });
  assert.equal(g[1]?.vram_total_gb, 85.9);
  assert.deepEqual(parseNvidiaSmi(''), []);
  assert.equal(parseNvidiaSmi('Tesla T4, [N/A], [N/A], [N/A], [N/A]')[0]?.vram_total_gb, 0);
});

test('--gpu NAME:VRAM', () => {
  assert.deepEqual(parseGpuFlag('NVIDIA RTX 4090:24'), { name: 'NVIDIA RTX 4090', vram_gb: 24 });
  assert.deepEqual(parseGpuFlag('L4'), { name: 'L4', vram_gb: 0 });
  assert.throws(() => parseGpuFlag(':24'));
  assert.throws(() => parseGpuFlag('X:lots'));
});

test('flags win over env; required values and bad values are usage errors', () => {
  const env = { GANTRY_AGENT_SERVER: 'env-host:1', GANTRY_AGENT_CREDENTIAL: 'ak-env', GANTRY_AGENT_LABELS: 'a, b,a', GANTRY_AGENT_GPUS: 'T4:16,L4:24', GANTRY_AGENT_CONCURRENCY: '3' };
  const c = parseAgentArgs(['--server', 'flag-host:50051', '--executor', 'simulate'], env);
  assert.ok(c);
  assert.equal(c.server, 'flag-host:50051');
  assert.equal(c.credential, 'ak-env');
  assert.deepEqual(c.labels, ['a', 'b']);
  assert.deepEqual(c.gpus, [{ name: 'T4', vram_gb: 16 }, { name: 'L4', vram_gb: 24 }]);
  assert.equal(c.concurrency, 3);
  assert.equal(c.executor, 'simulate');
  assert.equal(c.tls, false);
  const d = parseAgentArgs(['--server', 'h:1', '--credential', 'ak-x', '--gpu', 'A:1', '--gpu', 'B:2', '--ca', '/etc/ca.pem'], {});
  assert.deepEqual(d?.gpus.map((g) => g.name), ['A', 'B']);
  assert.equal(d?.tls, true, '--ca implies TLS');
  assert.equal(d?.executor, 'comfyui', 'comfyui is the default executor');
  assert.equal(parseAgentArgs(['--help'], {}), null);
  assert.throws(() => parseAgentArgs([], {}), UsageError);
  assert.throws(() => parseAgentArgs(['--server', 'h:1', '--credential', 'sk-nope'], {}), /ak-/);
  assert.throws(() => parseAgentArgs(['--server', 'nohostport', '--credential', 'ak-x'], {}), /HOST:PORT/);
  assert.throws(() => parseAgentArgs(['--server', 'h:1', '--credential', 'ak-x', '--executor', 'gpu'], {}), /executor/);
  assert.throws(() => parseAgentArgs(['--server', 'h:1', '--credential', 'ak-x', '--concurrency', '0'], {}), /concurrency/);
  assert.throws(() => parseAgentArgs(['--server', 'h:1', '--credential', 'ak-x', '--bogus'], {}), UsageError);
});

test('machine id: given, else generated once and persisted in the state dir', () => {
  const dir = tmpDir('gantry-state-');
  assert.equal(resolveMachineId('my-box', dir), 'my-box');
  const a = resolveMachineId(undefined, join(dir, 'sub'));
  assert.equal(resolveMachineId(undefined, join(dir, 'sub')), a);
  assert.equal(readFileSync(join(dir, 'sub', 'agent-id'), 'utf8').trim(), a);
  assert.throws(() => resolveMachineId('has space', dir));
});

test('model inventory: relative paths and sizes, dot files skipped; custom nodes listed', async () => {
  const root = tmpDir('gantry-models-');
  mkdirSync(join(root, 'models/checkpoints'), { recursive: true });
  mkdirSync(join(root, 'models/loras/style'), { recursive: true });
  writeFileSync(join(root, 'models/checkpoints/sd15.safetensors'), Buffer.alloc(10));
  writeFileSync(join(root, 'models/loras/style/ink.safetensors'), Buffer.alloc(3));
  writeFileSync(join(root, 'models/.DS_Store'), 'x');
  mkdirSync(join(root, 'custom_nodes/ComfyUI-Manager'), { recursive: true });
  mkdirSync(join(root, 'custom_nodes/__pycache__'), { recursive: true });
  writeFileSync(join(root, 'custom_nodes/single_node.py'), '');
  assert.deepEqual(await scanModels(join(root, 'models')), [
    { path: 'checkpoints/sd15.safetensors', size: 10 },
    { path: 'loras/style/ink.safetensors', size: 3 },
  ]);
  assert.deepEqual(await scanModels(join(root, 'nope')), []);
  assert.deepEqual(await scanCustomNodes(join(root, 'custom_nodes')), ['ComfyUI-Manager', 'single_node.py']);
});

test('backoff: exponential with 50-100% jitter, capped', () => {
  assert.equal(backoffDelay(0, 500, 30_000, () => 1), 500);
  assert.equal(backoffDelay(0, 500, 30_000, () => 0), 250);
  assert.equal(backoffDelay(3, 500, 30_000, () => 1), 4000);
  assert.equal(backoffDelay(20, 500, 30_000, () => 1), 30_000);
  for (let i = 0; i < 100; i++) {
    const d = backoffDelay(5, 500, 30_000);
    assert.ok(d >= 8000 && d <= 16_000);
  }
});

test('credit gate and returner', async () => {
  const g = new CreditGate(3);
  assert.ok(g.take() && g.take() && g.take());
  assert.equal(g.take(), false);
  g.grant(2);
  assert.equal(g.available, 2);
  g.grant(100);
  assert.equal(g.available, 3, 'never above the window');
  assert.equal(g.grantedTotal, 102);
  const sent: number[] = [];
  const r = new CreditReturner(16, (n) => sent.push(n));
  r.processed();
  r.processed();
  assert.deepEqual(sent, [], 'batched until the end of the I/O turn');
  await new Promise((res) => setImmediate(res));
  assert.deepEqual(sent, [2]);
  for (let i = 0; i < 4; i++) r.processed();
  assert.deepEqual(sent, [2, 4], 'a quarter window owed is returned at once');
});

test('outbound queue (window full or offline): progress coalesces per task (latest wins), transitions are kept in order', () => {
  const c = new AgentClient({ server: '127.0.0.1:1', credential: 'ak-x', hello: () => ({}), onMessage: () => undefined, onFatal: () => undefined, logger: createLogger('silent') });
  const ref = { task_id: 't1', attempt: 1, epoch: 4 };
  c.send({ ack: ref }, 'transition', ref);
  for (let i = 1; i <= 50; i++) c.send({ progress: { ...ref, step_current: i, step_total: 50 } }, 'progress', ref);
  c.send({ progress: { task_id: 't2', attempt: 1, epoch: 1, step_current: 1 } }, 'progress', { task_id: 't2', attempt: 1, epoch: 1 });
  c.send({ heartbeat: { cpu_percent: 1 } }, 'heartbeat');
  c.send({ heartbeat: { cpu_percent: 2 } }, 'heartbeat');
  c.send({ result: { ...ref, storage_key: 'k' } }, 'transition', ref);
  const q = (c as unknown as { queue: Array<{ msg: Record<string, any> }> }).queue.map((x) => x.msg);
  assert.deepEqual(
    q.map((m) => Object.keys(m)[0]),
    ['ack', 'progress', 'progress', 'heartbeat', 'result'],
  );
  assert.equal(q[1]?.progress.step_current, 50);
  assert.equal(q[3]?.heartbeat.cpu_percent, 2);
  assert.deepEqual(c.pendingTerminal(), [ref], 'a task with an unsent result is still held (reported in hello.running)');
  c.dropProgress('t1');
  assert.equal((c as unknown as { queue: unknown[] }).queue.length, 4);
  void c.close();
});
