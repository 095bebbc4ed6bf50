/**
 * Agent stream decoding (src/edge/agents/wire-schema.ts). Unit part: messages go through the real
 * protobuf encoding and the server's proto-loader decoding (the exact objects the server sees),
 * then through decodeAgentMessage. Integration part: on a live stream, a message that does not
 * decode ends the stream with INVALID_ARGUMENT and a ServerError invalid_message, after the
 * messages that arrived before it were processed (and credited).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { LOADER_OPTIONS, PROTO_PATH, type AgentMessage, type AgentMessage__Output, type ServerMessage__Output } from '../../src/protocol/agent-wire.js';
import { PresignOutputsRequest, decodeAgentMessage, decodeRequest, type AgentStreamMessage } from '../../src/edge/agents/wire-schema.js';
import { AppError } from '../../src/shared/errors.js';
import { AgentMsg } from '../../src/actors/agent/protocol.js';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { AGENT_TRANSPORTS, hello, rawEndpoint, setupTeam, type RawAgentEndpoint, type RawStream } from './helpers.js';

const def = protoLoader.loadSync(PROTO_PATH, LOADER_OPTIONS);
const connect = (def['gantry.agent.v1.AgentService'] as grpc.ServiceDefinition)['Connect'];
assert.ok(connect);
/** What the server's stream hands to onData for this message (encode, then decode as grpc-js does). */
const overWire = (m: AgentMessage): AgentMessage__Output => connect.requestDeserialize(connect.requestSerialize(m)) as AgentMessage__Output;

const decoded = (m: AgentMessage): AgentStreamMessage => {
  const d = decodeAgentMessage(overWire(m));
  if (!d.ok) assert.fail(`expected ${JSON.stringify(m)} to decode: ${d.error.message}`);
  return d.msg;
};
const rejected = (m: AgentMessage): { code: string; message: string; kind: string } => {
  const d = decodeAgentMessage(overWire(m));
  assert.equal(d.ok, false, `expected ${JSON.stringify(m)} to be rejected`);
  if (d.ok) throw new Error('unreachable');
  return { code: d.error.code, message: d.error.message, kind: d.error.kind };
};
const ref = { task_id: 'task-1', attempt: 2, epoch: 7 };

test('hello: decoded and normalised (labels deduplicated, unnamed GPU, slots 0 = 1, running as task refs)', () => {
  const m = decoded(hello('box-1', { labels: [' a', 'a', 'b', ''], gpus: [{ name: '', vram_gb: 16 }], slots: 0, running: [ref], models: [{ path: 'checkpoints/x.safetensors', size: 3 }, { path: '' }], draining: true }));
  assert.equal(m.msg, 'hello');
  if (m.msg !== 'hello') return;
  assert.equal(m.hello.machine_id, 'box-1');
  assert.deepEqual(m.hello.labels, ['a', 'b']);
  assert.deepEqual(m.hello.gpus, [{ name: 'GPU', vram_gb: 16 }]);
  assert.equal(m.hello.slots, 1);
  assert.deepEqual(m.hello.running, [{ taskId: 'task-1', attempt: 2, epoch: 7 }]);
  assert.deepEqual(m.hello.models, ['checkpoints/x.safetensors']);
  assert.equal(m.hello.draining, true);
  assert.equal(decoded(hello('b', { slots: 9000 })).msg === 'hello' && (decoded(hello('b', { slots: 9000 })) as { hello: { slots: number } }).hello.slots, 256);
});

test('hello: a bad machine_id, a running entry without a task id or attempt, a negative VRAM are rejected as invalid_message', () => {
  for (const bad of [hello('has spaces'), hello(''), hello('x'.repeat(201)), hello('ok', { running: [{ task_id: '', attempt: 1, epoch: 1 }] }), hello('ok', { running: [{ task_id: 't', attempt: 0, epoch: 1 }] }), hello('ok', { gpus: [{ name: 'g', vram_gb: -1 }] })]) {
    const e = rejected(bad);
    assert.equal(e.kind, 'bad_request');
    assert.equal(e.code, 'invalid_message');
    assert.match(e.message, /^hello\./);
  }
});

test('progress decodes into the agent actor message (its own schema): stage checked by the actor enum, bounds clamped', () => {
  const m = decoded({ progress: { ...ref, progress: 1.0000001, step_current: 3, step_total: 10, current_node: 'n'.repeat(600), stage: 'train', message: '' } });
  assert.equal(m.msg, 'progress');
  if (m.msg !== 'progress') return;
  assert.deepEqual(m.progress, { type: 'progress', taskId: 'task-1', attempt: 2, epoch: 7, progress: { progress: 1, step_current: 3, step_total: 10, current_node: 'n'.repeat(500), stage: 'train' } });
  // what the session hands the actor is a valid AgentMsg
  assert.equal(AgentMsg.safeParse({ ...m.progress, sessionId: 's' }).success, true);
  const none = decoded({ progress: { ...ref, progress: 0.5, stage: '' } });
  assert.ok(none.msg === 'progress' && !('stage' in none.progress.progress));
  const e = rejected({ progress: { ...ref, progress: 0.5, stage: 'bogus' } });
  assert.equal(e.code, 'invalid_message');
  assert.match(e.message, /^progress\./);
  assert.equal(rejected({ progress: { ...ref, progress: Number.NaN } }).code, 'invalid_message');
});

test('ack, provisioned and failure decode into the actor messages; a zero attempt or an empty task id is rejected', () => {
  assert.deepEqual(decoded({ ack: ref }), { msg: 'ack', ack: { type: 'ack', taskId: 'task-1', attempt: 2, epoch: 7 } });
  assert.deepEqual(decoded({ provisioned: ref }), { msg: 'provisioned', provisioned: { type: 'provisioned', taskId: 'task-1', attempt: 2, epoch: 7 } });
  const f = decoded({ failure: { ...ref, error: '', code: 'tool_error' } });
  assert.deepEqual(f, { msg: 'failure', failure: { type: 'failed', taskId: 'task-1', attempt: 2, epoch: 7, error: 'the agent reported a failure without a message' } });
  const long = decoded({ failure: { ...ref, error: 'e'.repeat(5000) } });
  assert.ok(long.msg === 'failure' && long.failure.error.length === 4000);
  for (const bad of [{ ack: { ...ref, attempt: 0 } }, { ack: { ...ref, task_id: '' } }, { provisioned: { ...ref, task_id: 'x'.repeat(101) } }]) assert.equal(rejected(bad).code, 'invalid_message');
});

test('result: outputs and keys typed, extra_json merged only when it is a JSON object', () => {
  const r = decoded({ result: { ...ref, storage_key: 'k0', storage_keys: ['k0'], image_count: 1, outputs: [{ name: 'a.png', storage_key: 'k0', content_type: 'image/png', size: 5 }], extra_json: '{"seed":42}' } });
  assert.ok(r.msg === 'result');
  if (r.msg !== 'result') return;
  assert.deepEqual(r.result.extra_json, { seed: 42 });
  assert.deepEqual(r.result.outputs, [{ name: 'a.png', storage_key: 'k0', content_type: 'image/png', size: 5 }]);
  for (const extra of ['not json', '[1,2]', '"s"', '']) {
    const x = decoded({ result: { ...ref, extra_json: extra } });
    assert.ok(x.msg === 'result' && Object.keys(x.result.extra_json).length === 0, extra);
  }
  const many = decoded({ result: { ...ref, outputs: Array.from({ length: 150 }, (_, i) => ({ name: `${i}.png`, storage_key: `k${i}` })) } });
  assert.ok(many.msg === 'result' && many.result.outputs.length === 100);
});

test('heartbeat: telemetry normalised (NaN counts as 0, utilisation within 0-100); credit, inventory, status; an empty message is the unknown variant', () => {
  const h = decoded({ heartbeat: { cpu_percent: Number.NaN, ram_used_bytes: 10, ram_total_bytes: 20, gpus: [{ index: 0, name: 'g', utilization_percent: 180, vram_used_gb: -1, vram_total_gb: 24, temperature_c: 50 }], running_tasks: 1 } });
  assert.deepEqual(h, { msg: 'heartbeat', heartbeat: { cpu_percent: 0, ram_used_bytes: 10, ram_total_bytes: 20, gpus: [{ index: 0, name: 'g', utilization_percent: 100, vram_used_gb: 0, vram_total_gb: 24, temperature_c: 50 }], running_tasks: 1, loaded_models: [] } });
  // loaded models (warm placement): deduplicated, empty entries dropped
  const w = decoded({ heartbeat: { running_tasks: 0, loaded_models: ['checkpoints/a.safetensors', '', 'checkpoints/a.safetensors'] } });
  assert.deepEqual((w as { heartbeat: { loaded_models: string[] } }).heartbeat.loaded_models, ['checkpoints/a.safetensors']);
  assert.deepEqual(decoded({ credit: { grant: 12 } }), { msg: 'credit', credit: { grant: 12 } });
  // node_classes (an older agent sends none): [] = not reported; duplicates and empty entries dropped
  assert.deepEqual(decoded({ inventory: { models: [{ path: 'a' }, { path: '' }], custom_nodes: ['n@1', ''] } }), { msg: 'inventory', inventory: { models: ['a'], custom_nodes: ['n@1'], node_classes: [] } });
  assert.deepEqual(decoded({ inventory: { models: [], custom_nodes: [], node_classes: ['KSampler', '', 'KSampler', 'SaveImage'] } }), { msg: 'inventory', inventory: { models: [], custom_nodes: [], node_classes: ['KSampler', 'SaveImage'] } });
  assert.deepEqual(decoded({ status: { draining: true } }), { msg: 'status', status: { draining: true } });
  assert.deepEqual(decoded({}), {});
});

test('PresignOutputs requests: decoded by the same schemas; bad file lists are INVALID_ARGUMENT naming the field', () => {
  const base = { session_id: 's', ...ref };
  const ok = decodeRequest(PresignOutputsRequest, { ...base, files: [{ name: 'a.png', size: 3, content_type: '' }] });
  assert.deepEqual(ok.files, [{ name: 'a.png', size: 3, content_type: 'application/octet-stream' }]);
  const bad: Array<[unknown[], RegExp]> = [
    [[], /^files: must list 1-100 files/],
    [[{ name: '..', size: 1, content_type: '' }], /^files\.0\.name: must not be \. or \.\./],
    [[{ name: 'a/b.png', size: 1, content_type: '' }], /^files\.0\.name: must be 1-200 characters/],
    [[{ name: 'a.png', size: 5 * 1024 ** 3 + 1, content_type: '' }], /^files\.0\.size: must be at most 5 GB/],
    [[{ name: 'a.png', size: 1, content_type: '' }, { name: 'a.png', size: 2, content_type: '' }], /^files: a file name appears twice/],
  ];
  for (const [files, says] of bad) {
    assert.throws(
      () => decodeRequest(PresignOutputsRequest, { ...base, files } as never),
      (e: unknown) => e instanceof AppError && e.kind === 'bad_request' && says.test(e.message),
      String(says),
    );
  }
});

// ---------------------------------------------------------------------------------------------
// on a live stream

let t: TestNode;
const endpoints: RawAgentEndpoint[] = [];
const streams: RawStream[] = [];
before(async () => {
  t = await startTestNode({ GANTRY_HEARTBEAT_INTERVAL_S: 5 }, 'agents_decoding');
});
after(async () => {
  for (const s of streams) s.call.cancel();
  for (const e of endpoints) e.close();
  await t.stop();
});

for (const transport of AGENT_TRANSPORTS) {
  test(`[${transport}] a message that does not decode ends the stream: INVALID_ARGUMENT, ServerError invalid_message, after the messages before it`, async () => {
    const s = await setupTeam(t);
    const ep = rawEndpoint(t.node, transport);
    endpoints.push(ep);
    const a = ep.open(s.ak.value);
    streams.push(a);
    a.call.write(hello(`decode-${Math.random().toString(36).slice(2, 10)}`));
    const agentId = (await a.next((m) => m.msg === 'welcome', 'welcome')).welcome?.agent_id ?? '';
    let granted = 0;
    a.call.on('data', (m: ServerMessage__Output) => {
      if (m.msg === 'credit') granted += m.credit?.grant ?? 0;
    });
    // three valid messages, then one whose stage is not a stage
    for (let i = 0; i < 3; i++) a.call.write({ progress: { task_id: 'no-such-task', attempt: 1, epoch: 1, progress: i / 3, stage: 'train' } });
    a.call.write({ progress: { task_id: 'no-such-task', attempt: 1, epoch: 1, progress: 0.9, stage: 'compile' } });
    const st = await a.status;
    assert.equal(st.code, grpc.status.INVALID_ARGUMENT, st.details);
    assert.match(st.details, /progress\.stage/);
    const err = a.inbox.find((m) => m.msg === 'error');
    assert.equal(err?.error?.code, 'invalid_message');
    assert.equal(err?.error?.fatal, false);
    // the three valid ones were processed and credited before the bad one ended the stream
    assert.ok(granted >= 3, `credit returned for the valid messages: ${granted}`);
    // the session closed: its agent actor has seen the disconnect (nothing left running at shutdown)
    await t.node.actors.ask({ kind: 'agent', id: agentId }, { type: 'get' });
  });
}
