/**
 * The MCP endpoint end to end on one node, with the SDK's own client over Streamable HTTP and an
 * sk-: a child-process agent (`--executor simulate --container-runtime exec`) runs the tasks and a
 * deployed container service (the gateway test app) answers the container tools.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { dirname } from 'node:path';
import { existsSync, rmSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { createCredential, pairDevice, registerUser } from '../helpers/identity.js';
import { createWorkflow, setupTeam, spawnAgent, tinyGraph, tmpDir, waitFor, type AgentProcess, type TeamSetup } from '../agents/helpers.js';
import { writeApp } from '../gateway/fixture.js';
import { TOOL_NAMES } from '../../src/mcp/tools.js';

const PNG_SIG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

let t: TestNode;
let s: TeamSetup;
let other: TeamSetup;
let workflowId = '';
let slowWorkflowId = '';
let otherWorkflowId = '';
const procs: AgentProcess[] = [];
const clients: Client[] = [];
const app = writeApp();
const mgmt = () => ({ token: s.user.accessToken, team: s.user.teamId });

async function connect(token: string, o: { sessions?: boolean } = {}): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const url = new URL(`${t.baseUrl}/mcp${o.sessions ? '?sessions=1' : ''}`);
  const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers: { authorization: `Bearer ${token}` } } });
  const client = new Client({ name: 'gantry-test', version: '1.0.0' });
  await client.connect(transport);
  clients.push(client);
  return { client, transport };
}

const call = async (c: Client, name: string, args: Record<string, unknown> = {}, extra: Parameters<Client['callTool']>[2] = {}): Promise<CallToolResult> =>
  (await c.callTool({ name, arguments: args }, undefined, extra)) as CallToolResult;

const data = (r: CallToolResult): any => {
  assert.ok(!r.isError, `tool error: ${JSON.stringify(r.content)}`);
  assert.ok(r.structuredContent, 'structured content');
  return r.structuredContent;
};

const errorOf = (r: CallToolResult): { error_message: string; error_code: string } => {
  assert.equal(r.isError, true, `expected a tool error, got ${JSON.stringify(r.structuredContent ?? r.content)}`);
  const text = (r.content[0] as { text: string }).text;
  return JSON.parse(text) as { error_message: string; error_code: string };
};

before(async () => {
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1, GANTRY_PROXY_TIMEOUT_MS: 3_000 }, 'mcp');
  s = await setupTeam(t);
  other = await setupTeam(t);
  procs.push(
    spawnAgent(
      [
        '--server',
        `127.0.0.1:${t.node.grpcPort}`,
        '--credential',
        s.ak.value,
        '--executor',
        'simulate',
        '--state-dir',
        tmpDir('gantry-mcp-agent-'),
        '--simulate-duration-ms',
        '2500',
        '--simulate-steps',
        '5',
        '--container-runtime',
        'exec',
        '--container-health-interval-ms',
        '200',
        '--tunnel-url',
        'none',
      ],
      { LOG_LEVEL: 'info' },
    ),
  );
  await waitFor('an online agent with the exec runtime', async () => {
    const r = await t.http.get('/agents', mgmt());
    return (r.body.agent_list as Array<Record<string, any>>).some((a) => a.agent_status !== 'offline' && a.container_runtime === 'exec');
  }, 30_000);
  workflowId = await createWorkflow(t, s, tinyGraph(), {
    parameters: [
      { key: 'prompt', node_id: '6', field: 'text', type: 'string', required: true, description: 'What to draw' },
      { key: 'steps', node_id: '3', field: 'steps', type: 'integer', min: 1, max: 50, default: 4 },
    ],
  });
  // runs until cancelled (the simulate executor's per-task override in the graph)
  const hanging = tinyGraph() as Record<string, { inputs: Record<string, unknown> }>;
  (hanging['3'] as { inputs: Record<string, unknown> }).inputs.simulate_hang = true;
  slowWorkflowId = await createWorkflow(t, s, hanging);
  otherWorkflowId = await createWorkflow(t, other, tinyGraph());
});

after(async () => {
  for (const c of clients) await c.close().catch(() => undefined);
  for (const p of procs) p.kill('SIGTERM');
  await Promise.race([Promise.all(procs.map((p) => p.exited)), new Promise((r) => setTimeout(r, 8_000))]);
  for (const p of procs) p.kill('SIGKILL');
  await t.stop();
  rmSync(app.dir, { recursive: true, force: true });
});

test('tools/list returns exactly the 15 tools, each with an input schema and a description', async () => {
  const { client } = await connect(s.sk.value);
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((x) => x.name).sort(), [...TOOL_NAMES].sort());
  assert.equal(tools.length, 15);
  for (const tool of tools) {
    assert.equal(tool.inputSchema.type, 'object', tool.name);
    assert.ok((tool.description ?? '').length > 40, `${tool.name} has a model-oriented description`);
    assert.ok(tool.outputSchema, `${tool.name} declares an output schema`);
  }
});

test('workflows: list_workflows, get_workflow with parameters as JSON Schema, run_workflow_and_wait with progress, the result with an image', async () => {
  const { client } = await connect(s.sk.value);
  const list = data(await call(client, 'list_workflows'));
  assert.equal(list.workflow_list.length, 2);
  assert.ok(list.workflow_list.some((w: any) => w.id === workflowId));
  assert.equal(list.workflow_list[0].workflow_json, undefined, 'sk- callers never see workflow_json');
  assert.equal(list.page_meta.total_count, 2);

  const wf = data(await call(client, 'get_workflow', { workflow_id: workflowId }));
  assert.equal(wf.workflow.id, workflowId);
  assert.deepEqual(wf.parameters_schema.required, ['prompt']);
  assert.deepEqual(wf.parameters_schema.properties.steps, { type: 'integer', minimum: 1, maximum: 50, default: 4 });
  assert.equal(wf.parameters_schema.properties.prompt.type, 'string');
  assert.equal(wf.parameters_schema.properties.prompt.description, 'What to draw');
  const bySlug = data(await call(client, 'get_workflow', { workflow_slug: wf.workflow.workflow_slug }));
  assert.equal(bySlug.workflow.id, workflowId);

  const progress: Array<{ progress: number; total?: number }> = [];
  const r = data(
    await call(client, 'run_workflow_and_wait', { workflow_id: workflowId, parameters: { prompt: 'a red fox' }, timeout_s: 60 }, { onprogress: (p) => progress.push(p), timeout: 90_000, resetTimeoutOnProgress: true }),
  );
  assert.equal(r.timed_out, false);
  assert.equal(r.task.task_status, 'completed', JSON.stringify(r.task));
  assert.ok(progress.length >= 2, `progress notifications received: ${JSON.stringify(progress)}`);
  assert.ok(progress.every((p, i) => i === 0 || p.progress > (progress[i - 1] as { progress: number }).progress), 'progress increases');
  assert.equal(progress.at(-1)?.progress, 100);
  assert.equal(typeof r.result.download_url, 'string');
  const taskId = r.task_id as string;

  // the task tools
  const task = data(await call(client, 'get_task', { task_id: taskId }));
  assert.equal(task.task_status, 'completed');
  assert.equal(task.parameters.prompt, 'a red fox');
  const tasks = data(await call(client, 'list_tasks', { task_status: 'completed' }));
  assert.ok(tasks.task_list.some((x: any) => x.task_id === taskId));
  const waited = data(await call(client, 'wait_for_task', { task_id: taskId, timeout_s: 5 }));
  assert.equal(waited.timed_out, false);
  assert.equal(waited.task.task_status, 'completed');

  const res = await call(client, 'get_task_result', { task_id: taskId });
  const out = data(res);
  assert.equal(typeof out.download_url, 'string');
  const dl = await fetch(out.download_url);
  assert.equal(dl.status, 200);
  assert.ok(Buffer.from(await dl.arrayBuffer()).subarray(0, 8).equals(PNG_SIG));
  const image = res.content.find((c) => c.type === 'image') as { data: string; mimeType: string } | undefined;
  assert.ok(image, 'the small output image is returned as image content');
  assert.equal(image.mimeType, 'image/png');
  assert.ok(Buffer.from(image.data, 'base64').subarray(0, 8).equals(PNG_SIG));
  assert.equal(out.images[0].included, true);
});

test('run_workflow: a validation error is a tool error with the REST message; wait_for_task times out with the current status; cancel_task stops a running task', async () => {
  const { client } = await connect(s.sk.value);
  const bad = errorOf(await call(client, 'run_workflow', { workflow_id: workflowId, parameters: { prompt: 'x', steps: 500 } }));
  assert.equal(bad.error_code, 'invalid_parameter');
  const rest = await t.http.post(`/r/workflows/${workflowId}/run`, { parameters: { prompt: 'x', steps: 500 } }, { token: s.sk.value });
  assert.equal(rest.status, 400);
  assert.equal(bad.error_message, rest.body.error_message, 'the same message as REST');
  // the edge's input hygiene applies too (NUL in a string), with REST's message
  const nul = errorOf(await call(client, 'run_workflow', { workflow_id: workflowId, parameters: { prompt: 'a\u0000b' } }));
  const restNul = await t.http.post(`/r/workflows/${workflowId}/run`, { parameters: { prompt: 'a\u0000b' } }, { token: s.sk.value });
  assert.equal(restNul.status, 400);
  assert.equal(nul.error_message, restNul.body.error_message);
  const missing = errorOf(await call(client, 'run_workflow', { workflow_id: workflowId, parameters: {} }));
  assert.match(missing.error_message, /prompt/);
  const unknownWf = errorOf(await call(client, 'run_workflow', { workflow_id: otherWorkflowId, parameters: {} }));
  assert.equal(unknownWf.error_code, 'workflow_not_found');
  // priority (1-5) as in the REST body: out of range is the same 400 message
  const badPriority = errorOf(await call(client, 'run_workflow', { workflow_id: workflowId, parameters: { prompt: 'x' }, priority: 9 }));
  const restPriority = await t.http.post(`/r/workflows/${workflowId}/run`, { parameters: { prompt: 'x' }, priority: 9 }, { token: s.sk.value });
  assert.equal(restPriority.status, 400);
  assert.equal(badPriority.error_code, 'invalid_parameter');
  assert.equal(badPriority.error_message, restPriority.body.error_message);

  const started = data(await call(client, 'run_workflow', { workflow_slug: (data(await call(client, 'get_workflow', { workflow_id: slowWorkflowId })).workflow.workflow_slug as string), parameters: { prompt: 'slow' } }));
  const taskId = started.task_id as string;
  await waitFor('task running', async () => data(await call(client, 'get_task', { task_id: taskId })).task_status === 'running', 20_000);
  const short = data(await call(client, 'wait_for_task', { task_id: taskId, timeout_s: 1 }));
  assert.equal(short.timed_out, true);
  assert.equal(short.task.task_status, 'running');
  assert.equal(short.result, null);
  // a client that goes away mid-wait: the server's wait ends and leaves no subscription behind
  const byTask = (t.node.events as unknown as { byTask: Map<string, Set<unknown>> }).byTask;
  const leaving = await connect(s.sk.value);
  const pending = call(leaving.client, 'wait_for_task', { task_id: taskId, timeout_s: 120 }).catch(() => null);
  await waitFor('the wait subscribed', () => (byTask.get(taskId)?.size ?? 0) > 0, 5_000, 20);
  await leaving.client.close();
  await pending;
  await waitFor('the wait unsubscribed', () => !byTask.has(taskId), 5_000, 20);

  const c = data(await call(client, 'cancel_task', { task_id: taskId }));
  assert.equal(c.is_success, true);
  const after = data(await call(client, 'wait_for_task', { task_id: taskId, timeout_s: 15 }));
  assert.equal(after.task.task_status, 'cancelled');
  const notDone = errorOf(await call(client, 'get_task_result', { task_id: taskId }));
  assert.equal(notDone.error_code, 'task_not_completed');
});

test('list_agents and create_upload', async () => {
  const { client } = await connect(s.sk.value);
  const agents = data(await call(client, 'list_agents'));
  assert.equal(agents.agent_list.length, 1);
  assert.ok(['online', 'busy'].includes(agents.agent_list[0].agent_status));
  const up = data(await call(client, 'create_upload', { file_name: 'photo.png', file_size: 1234, content_type: 'image/png' }));
  assert.match(up.file_key, /^[^/]/);
  assert.equal(typeof up.upload_url, 'string');
  assert.equal(typeof up.upload_headers, 'object');
  const bad = errorOf(await call(client, 'create_upload', { file_name: 'x.png', file_size: 1e13, content_type: 'image/png' }));
  assert.ok(bad.error_message.length > 0);
});

test('container tools: a clear tool error while the service is not running, then openapi and invoke through the gateway', async () => {
  const { client } = await connect(s.sk.value);
  const created = await t.http.post(
    '/containers',
    { service_slug: 'echo', display_name: 'echo', docker_image: JSON.stringify(['node', app.script]), exposed_port: 8080, health_path: '/health', openapi_url: '/whoami', env_config: [{ env_name: 'CRASH_FILE', env_value: app.crashFile }] },
    mgmt(),
  );
  assert.equal(created.status, 200, created.text);
  const id = created.body.id as string;
  const list = data(await call(client, 'list_container_services'));
  assert.deepEqual(list.container_list.map((x: any) => x.service_slug), ['echo']);
  const one = data(await call(client, 'get_container_service', { service_slug: 'echo' }));
  assert.equal(one.id, id);
  const notRunning = errorOf(await call(client, 'invoke_container_service', { service_slug: 'echo', method: 'GET', path: '/whoami' }));
  assert.equal(notRunning.error_code, 'service_not_running');
  assert.match(notRunning.error_message, /not running/);
  assert.equal(errorOf(await call(client, 'get_container_openapi', { service_slug: 'echo' })).error_code, 'service_not_running');
  assert.equal(errorOf(await call(client, 'get_container_service', { service_slug: 'nope' })).error_code, 'service_not_found');

  assert.equal((await t.http.post(`/containers/${id}/deploy`, {}, mgmt())).status, 200);
  await waitFor('service running', async () => {
    const r = await t.http.get(`/containers/${id}`, mgmt());
    return r.body.service_status === 'running' && r.body.deploy_status.healthy >= 1;
  }, 30_000);
  const doc = data(await call(client, 'get_container_openapi', { service_slug: 'echo' }));
  assert.equal(doc.status_code, 200);
  assert.equal(typeof doc.openapi.port, 'number');
  const inv = data(await call(client, 'invoke_container_service', { service_slug: 'echo', method: 'POST', path: '/echo?x=1', body_json: { hello: 'world' } }));
  assert.equal(inv.status_code, 201);
  const echoed = JSON.parse(inv.body_text);
  assert.equal(echoed.method, 'POST');
  assert.deepEqual(JSON.parse(echoed.body), { hello: 'world' });
  assert.equal(echoed.headers['content-type'], 'application/json');
  assert.equal(echoed.headers.authorization, undefined, "Gantry's credential is not forwarded");
  await t.http.post(`/containers/${id}/stop`, {}, mgmt());
});

test('another team\'s workflow and task are not found through any tool', async () => {
  const { client } = await connect(other.sk.value);
  const mine = await connect(s.sk.value);
  const myTask = data(await call(mine.client, 'list_tasks', { task_status: 'completed' })).task_list[0].task_id as string;
  assert.deepEqual(data(await call(client, 'list_workflows')).workflow_list.map((w: any) => w.id), [otherWorkflowId], 'only its own workflow');
  assert.equal(data(await call(client, 'list_tasks')).task_list.length, 0);
  assert.equal(data(await call(client, 'list_agents')).agent_list.length, 0);
  assert.equal(data(await call(client, 'list_container_services')).container_list.length, 0);
  assert.equal(errorOf(await call(client, 'get_workflow', { workflow_id: workflowId })).error_code, 'workflow_not_found');
  assert.equal(errorOf(await call(client, 'run_workflow', { workflow_id: workflowId, parameters: { prompt: 'x' } })).error_code, 'workflow_not_found');
  assert.equal(errorOf(await call(client, 'run_workflow_and_wait', { workflow_id: workflowId, parameters: { prompt: 'x' } })).error_code, 'workflow_not_found');
  for (const tool of ['get_task', 'wait_for_task', 'get_task_result', 'cancel_task']) assert.equal(errorOf(await call(client, tool, { task_id: myTask })).error_code, 'task_not_found', tool);
  for (const tool of ['get_container_service', 'get_container_openapi']) assert.equal(errorOf(await call(client, tool, { service_slug: 'echo' })).error_code, 'service_not_found', tool);
  assert.equal(errorOf(await call(client, 'invoke_container_service', { service_slug: 'echo', method: 'GET', path: '/' })).error_code, 'service_not_found');
  // and the task is untouched
  assert.equal(data(await call(mine.client, 'get_task', { task_id: myTask })).task_status, 'completed');
});

const initBody = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } });
const post = (headers: Record<string, string>, body = initBody, path = '/mcp') =>
  fetch(`${t.baseUrl}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers }, body });

test('JWT, dk-, ak-, no credential, a revoked or expired sk- are refused with 401, the envelope and WWW-Authenticate before any MCP processing', async () => {
  const owner = await registerUser(t.http);
  const dk = (await pairDevice(t.http, owner)).deviceCredential;
  const ak = await createCredential(t.http, owner, 'agent');
  const revoked = await createCredential(t.http, owner, 'integration');
  assert.equal((await t.http.del(`/credentials/${revoked.id}`, { token: owner.accessToken, team: owner.teamId })).status, 200);
  const expired = await createCredential(t.http, owner, 'integration', { expiresInDays: 1 });
  await t.node.db.execute(`update credentials set expires_at = now() - interval '1 minute' where id = ?`, [expired.id]);
  const codes: Record<string, string> = { JWT: 'integration_credential_required', 'JWT without team': 'integration_credential_required', 'dk-': 'integration_credential_required', 'ak-': 'agent_credential_not_allowed', none: 'credential_missing', 'revoked sk-': 'credential_revoked', 'expired sk-': 'credential_expired' };
  const cases: Array<[string, Record<string, string>]> = [
    ['JWT', { authorization: `Bearer ${owner.accessToken}`, 'x-team-id': owner.teamId }],
    ['JWT without team', { authorization: `Bearer ${owner.accessToken}` }],
    ['dk-', { authorization: `Bearer ${dk}` }],
    ['ak-', { authorization: `Bearer ${ak.value}` }],
    ['none', {}],
    ['garbage', { authorization: 'Bearer sk-nope' }],
    ['revoked sk-', { authorization: `Bearer ${revoked.value}` }],
    ['expired sk-', { authorization: `Bearer ${expired.value}` }],
  ];
  for (const [name, h] of cases) {
    for (const method of ['POST', 'GET', 'DELETE']) {
      const r = method === 'POST' ? await post(h) : await fetch(`${t.baseUrl}/mcp`, { method, headers: { accept: 'text/event-stream', ...h } });
      assert.equal(r.status, 401, `${name} ${method}`);
      assert.equal(r.headers.get('www-authenticate'), 'Bearer', `${name} ${method}`);
      assert.equal(r.headers.get('mcp-session-id'), null);
      const body = (await r.json()) as Record<string, unknown>;
      assert.equal(typeof body.error_message, 'string', `${name}: ${JSON.stringify(body)}`);
      assert.equal(typeof body.error_code, 'string');
      if (codes[name]) assert.equal(body.error_code, codes[name], `${name} ${method}`);
      assert.equal(body.jsonrpc, undefined, 'refused before any MCP processing');
    }
  }
  // and the SDK client itself fails to connect with one
  await assert.rejects(connect(owner.accessToken));

  // revoking the sk- ends its session on the next request
  const live = await createCredential(t.http, owner, 'integration');
  const session = await connect(live.value, { sessions: true });
  assert.equal(data(await call(session.client, 'list_workflows')).workflow_list.length, 0);
  assert.equal((await t.http.del(`/credentials/${live.id}`, { token: owner.accessToken, team: owner.teamId })).status, 200);
  await assert.rejects(call(session.client, 'list_workflows'), /401|credential_revoked|Unauthorized/);
});

test('a session client (two of them) and a stateless client side by side; a session id is bound to its credential', async () => {
  const a = await connect(s.sk.value, { sessions: true });
  const b = await connect(s.sk.value, { sessions: true });
  const plain = await connect(s.sk.value);
  assert.match(a.transport.sessionId ?? '', /^m1\./, 'a session id is issued');
  assert.ok(b.transport.sessionId && b.transport.sessionId !== a.transport.sessionId);
  assert.equal(plain.transport.sessionId, undefined, 'stateless by default');
  const results = await Promise.all([a, b, plain].map(async ({ client }) => data(await call(client, 'list_workflows')).workflow_list.length));
  assert.deepEqual(results, [2, 2, 2]);
  // follow-ups of a session are served by a fresh server (as another node would): tools/list too
  assert.equal((await a.client.listTools()).tools.length, 15);

  // the session id of team A presented with team B's credential: the transport's 404
  const otherClient = await connect(other.sk.value);
  assert.ok(otherClient);
  const listBody = JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} });
  const stolen = await post({ authorization: `Bearer ${other.sk.value}`, 'mcp-session-id': a.transport.sessionId as string, 'mcp-protocol-version': '2025-06-18' }, listBody);
  assert.equal(stolen.status, 404);
  const forged = await post({ authorization: `Bearer ${s.sk.value}`, 'mcp-session-id': `${(a.transport.sessionId as string).slice(0, -3)}AAA`, 'mcp-protocol-version': '2025-06-18' }, listBody);
  assert.equal(forged.status, 404);
  const good = await post({ authorization: `Bearer ${s.sk.value}`, 'mcp-session-id': a.transport.sessionId as string, 'mcp-protocol-version': '2025-06-18' }, listBody);
  assert.equal(good.status, 200);
  await good.text();

  // no standalone SSE stream: GET is the spec's 405 (the SDK client accepts it)
  const get = await fetch(`${t.baseUrl}/mcp`, { headers: { authorization: `Bearer ${s.sk.value}`, accept: 'text/event-stream', 'mcp-session-id': b.transport.sessionId } });
  assert.equal(get.status, 405);
  assert.equal(get.headers.get('allow'), 'POST, DELETE');
  assert.equal(((await get.json()) as { error_code: string }).error_code, 'method_not_allowed');

  // DELETE ends the session as the transport defines it
  await a.transport.terminateSession();
  assert.equal(a.transport.sessionId, undefined);
  assert.equal(data(await call(b.client, 'list_agents')).agent_list.length, 1);
});

test('a malformed JSON-RPC body gets the transport\'s standard 4xx error, never a 5xx', async () => {
  const auth = { authorization: `Bearer ${s.sk.value}` };
  const cases: Array<[string, Record<string, string>, string]> = [
    ['not JSON', {}, '{"jsonrpc": "2.0", '],
    ['not JSON-RPC', {}, '{"hello": "world"}'],
    ['a bare number', {}, '42'],
    ['empty', {}, ''],
    ['wrong content type', { 'content-type': 'text/plain' }, initBody],
    ['no event-stream accept', { accept: 'application/json' }, initBody],
    ['tools/call before initialize in a session', { 'mcp-session-id': 'm1.x.y' }, JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'list_workflows', arguments: {} } })],
  ];
  for (const [name, h, body] of cases) {
    const r = await post({ ...auth, ...h }, body);
    assert.ok(r.status >= 400 && r.status < 500, `${name}: ${r.status}`);
    const text = await r.text();
    if (text) {
      const j = JSON.parse(text) as { jsonrpc?: string; error?: { code: number } };
      assert.equal(j.jsonrpc, '2.0', `${name}: ${text}`);
      assert.equal(typeof j.error?.code, 'number');
    }
  }
  // an unknown tool and bad arguments are answered inside JSON-RPC
  const { client } = await connect(s.sk.value);
  const unknown = await call(client, 'no_such_tool').catch((e: Error) => ({ isError: true, content: [{ type: 'text', text: e.message }] }) as CallToolResult);
  assert.equal(unknown.isError, true);
  const badArgs = await call(client, 'get_task', { task_id: 'not-a-uuid' }).catch((e: Error) => ({ isError: true, content: [{ type: 'text', text: e.message }] }) as CallToolResult);
  assert.equal(badArgs.isError, true);
});

test('the MCP Inspector CLI lists the tools and calls list_workflows', async (ctx) => {
  const require = createRequire(import.meta.url);
  let bin: string | null = null;
  try {
    const pkg = require.resolve('@modelcontextprotocol/inspector-cli/package.json');
    const dir = pkg.slice(0, -'package.json'.length);
    bin = [`${dir}build/index.js`, `${dir}build/cli.js`].find((f) => existsSync(f)) ?? null;
  } catch {
    bin = null;
  }
  if (!bin) {
    ctx.skip('@modelcontextprotocol/inspector-cli (a dev dependency) is not installed here: npm install --save-dev @modelcontextprotocol/inspector-cli');
    return;
  }
  const run = (args: string[]): Promise<{ code: number | null; out: string }> =>
    new Promise((resolve) => {
      // its build/index.js finds its own package.json by a path relative to the working directory
      const p = spawn(process.execPath, [bin as string, `${t.baseUrl}/mcp`, '--transport', 'http', '--header', `Authorization: Bearer ${s.sk.value}`, ...args], { stdio: ['ignore', 'pipe', 'pipe'], cwd: dirname(bin as string) });
      let out = '';
      p.stdout.on('data', (c: Buffer) => (out += c.toString()));
      p.stderr.on('data', (c: Buffer) => (out += c.toString()));
      p.on('exit', (code) => resolve({ code, out }));
    });
  const listed = await run(['--method', 'tools/list']);
  assert.equal(listed.code, 0, listed.out);
  for (const n of TOOL_NAMES) assert.ok(listed.out.includes(n), `${n} in ${listed.out.slice(0, 400)}`);
  const called = await run(['--method', 'tools/call', '--tool-name', 'list_workflows']);
  assert.equal(called.code, 0, called.out);
  assert.ok(called.out.includes(workflowId), called.out.slice(0, 400));
});

test('GANTRY_MCP_ENABLED=false: the endpoint is not served and the feature flag says so', async () => {
  const off = await startTestNode({ GANTRY_MCP_ENABLED: false }, 'mcp_off');
  try {
    const owner = await registerUser(off.http);
    const sk = await createCredential(off.http, owner, 'integration');
    const r = await fetch(`${off.baseUrl}/mcp`, { method: 'POST', headers: { authorization: `Bearer ${sk.value}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: initBody });
    assert.equal(r.status, 404);
    assert.equal(((await r.json()) as { error_code: string }).error_code, 'route_not_found');
    const me = await off.http.get('/users/me', { token: owner.accessToken });
    assert.equal(me.status, 200, me.text);
    assert.match(me.text, /"mcp_server":false/);
  } finally {
    await off.stop();
  }
});
