/**
 * The agent stream server at the protocol level (a raw client on loopback, real PostgreSQL):
 * authentication, hello/welcome, replacement of an older stream, flow control (credit, window
 * enforcement), missed heartbeats, re-attach within the grace period, presign fencing, quotas.
 * Every test runs on both transports (AGENT_TRANSPORTS): gRPC on the gRPC port, WebSocket at
 * /api/v1/agents/connect on the HTTP port; the WebSocket's end is its close code (4000 + status).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import WebSocket from 'ws';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { createCredential } from '../helpers/identity.js';
import { AGENT_TRANSPORTS, agentsOf, bearer, createWorkflow, hello, rawClient, rawEndpoint, rawWsStream, runWorkflow, setupTeam, tinyGraph, waitFor, waitTask, type RawAgentEndpoint, type RawStream } from './helpers.js';
import { WS_CLOSE_STATUS_BASE, agentFrameCodec, type AgentServiceClient, type ServerMessage__Output } from '../../src/protocol/agent-wire.js';

let t: TestNode;
let client: AgentServiceClient;
const streams: RawStream[] = [];
const endpoints = new Map<string, RawAgentEndpoint>();
before(async () => {
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 2, GANTRY_HEARTBEAT_INTERVAL_S: 1 }, 'agents_grpc');
  client = rawClient(t.node.grpcPort);
  for (const tr of AGENT_TRANSPORTS) endpoints.set(tr, rawEndpoint(t.node, tr));
});
after(async () => {
  for (const s of streams) s.call.cancel();
  client.close();
  for (const e of endpoints.values()) e.close();
  await t.stop();
});

const welcome = (s: RawStream) => s.next((m) => m.msg === 'welcome', 'welcome');
const unique = (p: string) => `${p}-${Math.random().toString(36).slice(2, 10)}`;

for (const transport of AGENT_TRANSPORTS) {
  const open = (cred: string | null): RawStream => {
    const s = (endpoints.get(transport) as RawAgentEndpoint).open(cred);
    streams.push(s);
    return s;
  };

  test(`[${transport}] anything but a valid ak- is UNAUTHENTICATED (none, garbage, sk-, revoked ak-)`, async () => {
    const s = await setupTeam(t);
    const revoked = await createCredential(t.http, s.user, 'agent');
    assert.equal((await t.http.del(`/credentials/${revoked.id}`, { token: s.user.accessToken, team: s.user.teamId })).status, 200);
    for (const cred of [null, 'ak-garbage', s.sk.value, s.user.accessToken, revoked.value]) {
      const st = open(cred);
      assert.equal((await st.status).code, grpc.status.UNAUTHENTICATED, `${cred?.slice(0, 6)}: ${(await st.status).details}`);
      // WebSocket: refused with 401 before the upgrade (never a socket)
      assert.equal(await st.httpStatus, transport === 'ws' ? 401 : null);
    }
    // unary calls too (on WebSocket they travel on a socket that passed the handshake: see the ws-only test)
    if (transport === 'grpc') {
      const err = await new Promise<grpc.ServiceError | null>((r) => client.PresignOutputs({ session_id: 'x', task_id: 'y', attempt: 1, epoch: 1, files: [] }, bearer(s.sk.value), (e) => r(e)));
      assert.equal(err?.code, grpc.status.UNAUTHENTICATED);
    }
  });

  test(`[${transport}] hello -> welcome; the agent record is registered per (team, machine_id); a newer stream replaces the older`, async () => {
    const s = await setupTeam(t);
    const m = unique('box');
    const a = open(s.ak.value);
    a.call.write(hello(m, { labels: ['x', 'y'], slots: 2 }));
    const w = (await welcome(a)).welcome!;
    assert.equal(w.team_id, s.user.teamId);
    assert.equal(w.heartbeat_interval_s, 1);
    assert.equal(w.window, 256);
    const rec = (await agentsOf(t, s)).find((x) => x.id === w.agent_id);
    assert.ok(rec);
    assert.equal(rec.machine_id, m);
    assert.deepEqual(rec.labels, ['x', 'y']);
    await waitFor('online', async () => (await agentsOf(t, s)).find((x) => x.id === w.agent_id)?.agent_status === 'online');

    const b = open(s.ak.value);
    b.call.write(hello(m));
    const w2 = (await welcome(b)).welcome!;
    assert.equal(w2.agent_id, w.agent_id, 'same machine -> same agent');
    assert.notEqual(w2.session_id, w.session_id);
    const err = await a.next((x) => x.msg === 'error', 'error on the replaced stream');
    assert.equal(err.error?.code, 'session_replaced');
    assert.equal(err.error?.fatal, true);
    assert.equal((await a.status).code, grpc.status.ALREADY_EXISTS);
    assert.equal(t.node.sessions.session(w.agent_id)?.sessionId, w2.session_id);
    b.call.cancel();
  });

  test(`[${transport}] the first message must be hello (INVALID_ARGUMENT)`, async () => {
    const s = await setupTeam(t);
    const a = open(s.ak.value);
    a.call.write({ heartbeat: { cpu_percent: 1 } });
    assert.equal((await a.status).code, grpc.status.INVALID_ARGUMENT);
    const b = open(s.ak.value);
    b.call.write(hello('bad machine id with spaces'));
    assert.equal((await b.status).code, grpc.status.INVALID_ARGUMENT);
  });

  test(`[${transport}] flow control: processed messages come back as credit; more than a window in flight ends the stream`, async () => {
    const s = await setupTeam(t);
    const a = open(s.ak.value);
    a.call.write(hello(unique('fc')));
    await welcome(a);
    let granted = 0;
    a.call.on('data', (m: ServerMessage__Output) => {
      if (m.msg === 'credit') granted += m.credit?.grant ?? 0;
    });
    for (let i = 0; i < 100; i++) a.call.write({ progress: { task_id: 'no-such-task', attempt: 1, epoch: 1, progress: i / 100, step_current: i, step_total: 100, current_node: 'n' } });
    await waitFor('100 credits back', () => granted === 100, 10_000);

    // an agent that ignores the window (2000 heartbeats, each a database write, in one burst) is cut off
    const b = open(s.ak.value);
    b.call.write(hello(unique('flood')));
    await welcome(b);
    for (let i = 0; i < 2000; i++) b.call.write({ heartbeat: { cpu_percent: i % 100 } });
    const st = await b.status;
    assert.equal(st.code, grpc.status.RESOURCE_EXHAUSTED, st.details);
    assert.ok(b.inbox.some((m) => m.msg === 'error' && m.error?.code === 'window_exceeded'));
  });

  test(`[${transport}] missed heartbeats (3 intervals) end the stream and the agent goes offline after the grace period`, async () => {
    const s = await setupTeam(t);
    const a = open(s.ak.value);
    a.call.write(hello(unique('quiet')));
    const w = (await welcome(a)).welcome!;
    const st = await a.status;
    assert.equal(st.code, grpc.status.UNAVAILABLE);
    assert.ok(a.inbox.some((m) => m.msg === 'error' && m.error?.code === 'heartbeat_missed' && m.error.fatal === false));
    await waitFor('offline', async () => (await agentsOf(t, s)).find((x) => x.id === w.agent_id)?.agent_status === 'offline', 10_000);
  });

  test(`[${transport}] a reconnect within the grace period re-attaches the running task (hello.running), its result is accepted`, async () => {
    const s = await setupTeam(t);
    const m = unique('reattach');
    const a = open(s.ak.value);
    a.call.write(hello(m));
    await welcome(a);
    const wf = await createWorkflow(t, s, tinyGraph());
    const taskId = await runWorkflow(t, s, wf);
    const asg = (await a.next((x) => x.msg === 'assign', 'assign')).assign!;
    assert.equal(asg.task_id, taskId);
    assert.equal(JSON.parse(asg.workflow_json)['9'].class_type, 'SaveImage');
    const ref = { task_id: asg.task_id, attempt: asg.attempt, epoch: asg.epoch };
    a.call.write({ ack: ref });
    await waitTask(t, s, taskId, (x) => x.task_status === 'running', 'running');
    a.call.cancel(); // the link drops

    const b = open(s.ak.value);
    b.call.write(hello(m, { running: [ref] }));
    const w = (await welcome(b)).welcome!;
    b.call.write({ progress: { ...ref, progress: 0.5, step_current: 1, step_total: 2, current_node: '3' } });
    // a stale epoch is rejected by the actors (fencing): forwarding it changes nothing
    b.call.write({ failure: { ...ref, epoch: ref.epoch + 7, error: 'stale', code: 'tool_error' } });
    // presign is fenced too
    const wrong = await b.presignOutputs({ session_id: w.session_id, ...ref, epoch: ref.epoch + 1, files: [{ name: 'x.png', size: 3, content_type: 'image/png' }] }).then(
      () => null,
      (e: { code: number }) => e,
    );
    assert.equal(wrong?.code, grpc.status.FAILED_PRECONDITION);
    const ok = await b.presignOutputs({ session_id: w.session_id, ...ref, files: [{ name: 'out.png', size: 3, content_type: 'image/png' }] });
    const key = `teams/${s.user.teamId}/outputs/${taskId}/${ref.attempt}/out.png`;
    const up = ok.uploads[0]!;
    assert.equal(up.storage_key, key);
    assert.match(up.upload_url, /^https?:\/\//);
    const put = await fetch(up.upload_url, { method: 'PUT', headers: up.upload_headers, body: Buffer.from('abc') });
    assert.ok(put.ok, `PUT ${put.status}`);
    b.call.write({ result: { ...ref, storage_key: key, storage_keys: [key], image_count: 1, outputs: [{ name: 'out.png', storage_key: key, content_type: 'image/png', size: 3 }] } });
    const done = await waitTask(t, s, taskId, (x) => ['completed', 'failed'].includes(x.task_status), 'terminal');
    assert.equal(done.task_status, 'completed', JSON.stringify(done));
  });

  test(`[${transport}] a result claiming storage keys outside the task prefix fails the task`, async () => {
    const s = await setupTeam(t);
    const a = open(s.ak.value);
    a.call.write(hello(unique('evil')));
    await welcome(a);
    const taskId = await runWorkflow(t, s, await createWorkflow(t, s, tinyGraph()));
    const asg = (await a.next((x) => x.msg === 'assign', 'assign')).assign!;
    const ref = { task_id: asg.task_id, attempt: asg.attempt, epoch: asg.epoch };
    a.call.write({ ack: ref });
    a.call.write({ result: { ...ref, storage_key: 'teams/someone-else/outputs/x/1/a.png', image_count: 1 } });
    const done = await waitTask(t, s, taskId, (x) => ['completed', 'failed'].includes(x.task_status), 'terminal');
    assert.equal(done.task_status, 'failed');
    assert.match(done.task_error, /outside this task's storage prefix/);
  });

  test(`[${transport}] GANTRY_MAX_AGENTS: a new machine beyond the quota is RESOURCE_EXHAUSTED; a known machine still connects`, async () => {
    const q = await startTestNode({ GANTRY_MAX_AGENTS: 1 }, 'agents_quota');
    const c = rawEndpoint(q.node, transport);
    try {
      const s = await setupTeam(q);
      const one = c.open(s.ak.value);
      one.call.write(hello('machine-one'));
      await one.next((m) => m.msg === 'welcome', 'welcome');
      const two = c.open(s.ak.value);
      two.call.write(hello('machine-two'));
      const st = await two.status;
      assert.equal(st.code, grpc.status.RESOURCE_EXHAUSTED);
      assert.match(st.details, /maximum is 1/);
      one.call.cancel();
      const again = c.open(s.ak.value);
      again.call.write(hello('machine-one'));
      await again.next((m) => m.msg === 'welcome', 'welcome again');
      again.call.cancel();
    } finally {
      c.close();
      await q.stop();
    }
  });
}

test('[ws] the handshake is refused before the upgrade: 401 with the JSON error body; frames that are not AgentFrames end the socket (4003); an unknown call is UNIMPLEMENTED', { skip: AGENT_TRANSPORTS.includes('ws') ? false : 'GANTRY_TEST_AGENT_TRANSPORTS excludes ws' }, async () => {
  const s = await setupTeam(t);
  const url = `${t.origin}/api/v1/agents/connect`.replace(/^http/, 'ws');
  const refused = await new Promise<{ status: number; body: string; wwwAuth: string }>((resolve, reject) => {
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${s.sk.value}` } });
    ws.on('open', () => reject(new Error('upgraded with an sk-')));
    ws.on('error', () => undefined);
    ws.on('unexpected-response', (_req, res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString(), wwwAuth: String(res.headers['www-authenticate'] ?? '') }));
    });
  });
  assert.equal(refused.status, 401);
  assert.equal(refused.wwwAuth, 'Bearer');
  const body = JSON.parse(refused.body) as { error_code: string; error_message: string };
  assert.equal(typeof body.error_code, 'string');
  assert.ok(!refused.body.includes(s.sk.value), 'the credential is not echoed');
  // a plain GET (no upgrade) is not the agent route: it is a REST request (GET /agents/{agentId},
  // `connect` is no agent id), and an ak- there is refused as on every REST route
  const plain = await fetch(`${t.origin}/api/v1/agents/connect`, { headers: { authorization: `Bearer ${s.user.accessToken}`, 'x-team-id': s.user.teamId } });
  assert.equal(plain.status, 400, await plain.text());
  const plainAk = await fetch(`${t.origin}/api/v1/agents/connect`, { headers: { authorization: `Bearer ${s.ak.value}` } });
  assert.equal(((await plainAk.json()) as { error_code: string }).error_code, 'agent_credential_not_allowed');

  // a text frame: ServerError invalid_message, then close 4000 + INVALID_ARGUMENT
  const text = await new Promise<{ code: number; inbox: string[] }>((resolve) => {
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${s.ak.value}` } });
    const inbox: string[] = [];
    ws.on('open', () => ws.send('{"hello":{}}'));
    ws.on('message', (d: Buffer) => inbox.push(agentFrameCodec().decodeServerFrame(d).message?.error?.code ?? '?'));
    ws.on('close', (code) => resolve({ code, inbox }));
  });
  assert.equal(text.code, WS_CLOSE_STATUS_BASE + grpc.status.INVALID_ARGUMENT);
  assert.deepEqual(text.inbox, ['invalid_message']);
  // bytes that are not an AgentFrame
  const junk = await new Promise<number>((resolve) => {
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${s.ak.value}` } });
    ws.on('open', () => ws.send(Buffer.from([0xff, 0xff, 0xff, 0xff, 0x0f])));
    ws.on('close', (code) => resolve(code));
  });
  assert.equal(junk, WS_CLOSE_STATUS_BASE + grpc.status.INVALID_ARGUMENT);

  // a request frame naming no call this server knows: answered UNIMPLEMENTED, the socket stays up
  const a = rawWsStream(t.node.httpPort, s.ak.value);
  streams.push(a);
  a.call.write(hello(unique('ws-calls')));
  await welcome(a);
  const answer = await new Promise<{ id: number; status: number }>((resolve) => {
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${s.ak.value}` } });
    ws.on('open', () => ws.send(agentFrameCodec().encodeAgentFrame({ request: { request_id: 7 } })));
    ws.on('message', (d: Buffer) => {
      const f = agentFrameCodec().decodeServerFrame(d);
      if (f.response) {
        resolve({ id: f.response.request_id, status: f.response.error?.status ?? -1 });
        ws.terminate();
      }
    });
  });
  assert.deepEqual(answer, { id: 7, status: grpc.status.UNIMPLEMENTED });
  // and a presign on a live socket is fenced like the gRPC call (no task held: FAILED_PRECONDITION)
  const w = (await welcome(a)).welcome!;
  const fenced = await a.presignOutputs({ session_id: w.session_id, task_id: 'no-such-task', attempt: 1, epoch: 1, files: [{ name: 'a.png', size: 1, content_type: 'image/png' }] }).then(
    () => null,
    (e: { code: number }) => e.code,
  );
  assert.equal(fenced, grpc.status.FAILED_PRECONDITION);
});
