/**
 * Hybrid dispatch onto Comfy Cloud, end to end on loopback: a Gantry node (real PostgreSQL) and the
 * ComfyUI stand-in in cloud mode (HTTPS with a test CA, /api prefix, X-API-Key, /api/jobs, 302 from
 * /api/view to a signed URL on another origin that refuses the key). Every log line the node writes
 * is captured and searched for the key.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { PassThrough } from 'node:stream';
import pg from 'pg';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, addMember, createCredential, type TestUser } from '../helpers/identity.js';
import { startComfyStandin, type ComfyStandin } from '../fixtures/comfyui-standin.js';
import { makePki, Receiver, SseClient, label, type Pki } from '../events/helpers.js';
import { tinyGraph } from '../agents/helpers.js';
import { createLogger } from '../../src/shared/logger.js';

const KEY = 'comfyui-4f8d2c1b9a7e6d5c4b3a29180716f5e4d3c2b1a0';
let pki: Pki;
let cloud: ComfyStandin;
let t: TestNode;
let sql: pg.Client;
let owner: TestUser;
let member: TestUser;
let other: TestUser;
let logs = '';

before(async () => {
  pki = makePki();
  cloud = await startComfyStandin({ tickDelayMs: 15, cloud: { apiKey: KEY, tls: { key: pki.key.toString(), cert: pki.cert.toString() } } });
  const sink = new PassThrough();
  sink.on('data', (c: Buffer) => (logs += c.toString('utf8')));
  t = await startTestNode(
    { GANTRY_OUTBOUND_CA_FILE: pki.caFile, GANTRY_CLOUD_POLL_MS: 100, GANTRY_CLOUD_BUSY_RETRY_MS: 50, GANTRY_RETRY_BACKOFF_BASE_S: 0 },
    'cloud',
    { logger: createLogger('debug', sink) },
  );
  sql = new pg.Client({ connectionString: t.db.url });
  await sql.connect();
  owner = await registerUser(t.http);
  member = await registerUser(t.http);
  other = await registerUser(t.http);
  await addMember(t.http, t.node, owner, member, 'member');
});
after(async () => {
  await sql.end();
  await t.stop();
  await cloud.close();
  pki.cleanup();
});

const as = (u: TestUser) => ({ token: u.accessToken, team: u.teamId });
const terminal = ['completed', 'failed', 'cancelled'];

async function waitTask(taskId: string, pred: (x: Record<string, any>) => boolean, what: string, timeoutMs = 20_000): Promise<Record<string, any>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await t.http.get(`/r/tasks/${taskId}`, as(owner));
    if (pred(r.body)) return r.body;
    if (Date.now() > deadline) throw new Error(`${what}: task is ${JSON.stringify(r.body)}`);
    await new Promise((res) => setTimeout(res, 50));
  }
}

async function waitFor<T>(fn: () => T | undefined | null | false, what: string, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((res) => setTimeout(res, 25));
  }
}

async function workflow(graph: Record<string, unknown>, o: Record<string, unknown> = {}): Promise<string> {
  const r = await t.http.post('/workflows', { workflow_slug: `cloud-${Math.random().toString(36).slice(2, 9)}`, display_name: 'cloud wf', workflow_json: graph, max_retries: 0, default_dispatch_target: 'comfy_cloud', ...o }, as(owner));
  assert.equal(r.status, 200, r.text);
  return r.body.id;
}

async function run(wfId: string, parameters: Record<string, unknown> = {}, u = owner): Promise<string> {
  const r = await t.http.post(`/r/workflows/${wfId}/run`, { parameters }, as(u));
  assert.equal(r.status, 202, r.text);
  return r.body.task_id;
}

test('without a key a comfy_cloud run is 409 cloud_provider_not_configured; a bad key at PUT is 400 with the provider\'s reason and is not stored', async () => {
  const wf = await workflow(tinyGraph(2));
  const r = await t.http.post(`/r/workflows/${wf}/run`, { parameters: {} }, as(owner));
  assert.equal(r.status, 409, r.text);
  assert.equal(r.body.error_code, 'cloud_provider_not_configured');

  const bad = await t.http.put('/cloud-providers/comfy_cloud', { api_key: 'comfyui-not-the-right-key-000000', base_url: cloud.url }, as(owner));
  assert.equal(bad.status, 400, bad.text);
  assert.equal(bad.body.error_code, 'cloud_provider_key_invalid');
  assert.match(bad.body.error_message, /Invalid API key/);
  assert.match(bad.body.error_message, /401/);
  assert.deepEqual((await t.http.get('/cloud-providers', as(owner))).body.provider_list, []);

  const unknown = await t.http.put('/cloud-providers/other_cloud', { api_key: KEY }, as(owner));
  assert.equal(unknown.status, 404);
  const http = await t.http.put('/cloud-providers/comfy_cloud', { api_key: KEY, base_url: cloud.url.replace('https:', 'http:') }, as(owner));
  assert.equal(http.status, 400, 'base_url must pass the outbound guard (https only)');
  const privateNet = await t.http.put('/cloud-providers/comfy_cloud', { api_key: KEY, base_url: 'https://10.1.2.3' }, as(owner));
  assert.equal(privateNet.status, 400);
  assert.match(privateNet.body.error_message, /GANTRY_OUTBOUND_ALLOWLIST/);
});

test('PUT stores the key encrypted (the column does not contain it), GET never returns it; members cannot set it; another team neither sees nor uses it', async () => {
  const asMember = await t.http.put('/cloud-providers/comfy_cloud', { api_key: KEY, base_url: cloud.url }, { token: member.accessToken, team: owner.teamId });
  assert.equal(asMember.status, 403);
  const put = await t.http.put('/cloud-providers/comfy_cloud', { api_key: KEY, base_url: cloud.url, max_concurrent_jobs: 1 }, as(owner));
  assert.equal(put.status, 200, put.text);
  assert.equal(put.body.provider_status, 'active');
  assert.equal(put.body.key_prefix, KEY.slice(0, 8));
  assert.ok(put.body.last_checked_at);
  assert.ok(!put.text.includes(KEY));
  const list = await t.http.get('/cloud-providers', { token: member.accessToken, team: owner.teamId });
  assert.equal(list.status, 200);
  assert.equal(list.body.provider_list.length, 1);
  assert.equal(list.body.provider_list[0].base_url, cloud.url);
  assert.ok(!list.text.includes(KEY.slice(8)), 'the key is never returned');
  const row = (await sql.query('select * from cloud_providers where team_id = $1', [owner.teamId])).rows[0];
  assert.ok(row);
  assert.ok(!JSON.stringify(row).includes(KEY.slice(8)), 'no column holds the key in clear');
  assert.match(row.key_enc, /^v1\.[A-Za-z0-9_-]+\./);

  // another team: nothing to see, nothing to use, nothing to delete
  assert.deepEqual((await t.http.get('/cloud-providers', as(other))).body.provider_list, []);
  const otherWf = await t.http.post('/workflows', { workflow_slug: `cloud-other-${Math.random().toString(36).slice(2, 8)}`, display_name: 'x', workflow_json: tinyGraph(2), max_retries: 0 }, as(other));
  assert.equal(otherWf.status, 200, otherWf.text);
  const otherRun = await t.http.post(`/r/workflows/${otherWf.body.id}/run`, { parameters: {}, dispatch_target: 'comfy_cloud' }, as(other));
  assert.equal(otherRun.status, 409);
  assert.equal(otherRun.body.error_code, 'cloud_provider_not_configured');
  assert.equal((await t.http.del('/cloud-providers/comfy_cloud', as(other))).status, 404);
  // an integration credential cannot manage keys
  const sk = await createCredential(t.http, owner, 'integration');
  assert.ok([401, 403].includes((await t.http.get('/cloud-providers', { token: sk.value })).status));
});

test('a comfy_cloud run: pending -> provisioning -> running -> completed with progress, a completed webhook, download_urls whose bytes match; the file parameter is uploaded to the provider; the key never leaves its origin', async () => {
  const receiver = await new Receiver(pki, Date.now).start();
  const hook = await t.http.post('/webhooks', { display_name: 'cloud', webhook_url: receiver.url, webhook_events: ['task.completed', 'task.failed'] }, as(owner));
  assert.equal(hook.status, 200, hook.text);

  const { renderSeededPng } = await import('../../src/agent/png.js');
  const png = renderSeededPng('cloud input', { width: 8, height: 8 });
  const pre = await t.http.post('/r/files/presign', { file_name: 'source.png', file_size: png.length, content_type: 'image/png' }, as(owner));
  assert.equal(pre.status, 200, pre.text);
  assert.ok((await fetch(pre.body.upload_url, { method: 'PUT', headers: pre.body.upload_headers, body: new Uint8Array(png) })).ok);
  const graph = tinyGraph(12, {
    '11': { class_type: 'LoadImage', inputs: { image: 'placeholder.png' } },
    '12': { class_type: 'SaveImage', inputs: { filename_prefix: 'loaded', images: ['11', 0] } },
  });
  const r = await t.http.post(
    '/workflows',
    { workflow_slug: `cloud-in-${Math.random().toString(36).slice(2, 8)}`, display_name: 'cloud input', workflow_json: graph, parameters: [{ key: 'image', type: 'file', node_id: '11', field: 'image' }, { key: 'prompt', node_id: '6', field: 'text' }], max_retries: 0, default_dispatch_target: 'comfy_cloud' },
    as(owner),
  );
  assert.equal(r.status, 200, r.text);
  const uploads = cloud.received.uploads.length;
  const apiBefore = cloud.cloud!.observed.api.length;
  const taskId = await run(r.body.id, { image: pre.body.file_key, prompt: 'a lighthouse in the cloud' });
  const sse = await SseClient.connect(`${t.baseUrl}/r/tasks/${taskId}/events`, { authorization: `Bearer ${owner.accessToken}`, 'x-team-id': owner.teamId });
  await sse.until((c) => c.ended, 30_000, 'terminal event');
  const labels = sse.messages.map(label);
  const statuses = labels.filter((l) => !['progress', 'completed'].includes(l));
  assert.deepEqual(statuses.filter((s, i) => statuses.indexOf(s) === i), ['pending', 'provisioning', 'running'], labels.join(','));
  assert.ok(labels.includes('progress'), 'progress events');
  assert.equal(labels.at(-1), 'completed');
  const prog = sse.messages.filter((m) => m.event === 'progress').map((m) => m.data);
  assert.ok(prog.some((p) => p.step_total === 12 && /KSampler/.test(p.current_node)), JSON.stringify(prog.slice(0, 3)));

  // the provider got the upload (byte for byte) and the graph with the parameter and the uploaded name
  const up = cloud.received.uploads.slice(uploads);
  assert.equal(up.length, 1);
  assert.ok(up[0]!.bytes.equals(png));
  const sent = cloud.received.prompts.at(-1)!;
  assert.equal((sent.prompt['6']!.inputs as any).text, 'a lighthouse in the cloud');
  assert.equal((sent.prompt['11']!.inputs as any).image, up[0]!.name);

  const res = await t.http.get(`/r/tasks/${taskId}/result`, as(owner));
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.download_url, null);
  const urls = res.body.download_urls as Record<string, string>;
  assert.equal(Object.keys(urls).length, 2, JSON.stringify(res.body));
  for (const [name, url] of Object.entries(urls)) {
    const got = Buffer.from(await (await fetch(url)).arrayBuffer());
    const hist = cloud.history.get(res.body.output.provider_job_id)!;
    const ref = Object.values(hist.outputs).flatMap((o: any) => o.images).find((i: any) => i.filename === name);
    assert.ok(ref, `output ${name} is one of the provider's`);
    const { readFileSync } = await import('node:fs');
    const want = readFileSync(`${cloud.dataDir}/${ref.type}/${ref.subfolder ? `${ref.subfolder}/` : ''}${name}`);
    assert.equal(createHash('sha256').update(got).digest('hex'), createHash('sha256').update(want).digest('hex'), `bytes of ${name}`);
  }
  assert.ok(res.body.expires_at);

  await receiver.waitFor(1, 15_000);
  const delivery = JSON.parse(receiver.received[0]!.body);
  assert.equal(delivery.event_type, 'task.completed');
  assert.equal(delivery.task_id, taskId);
  await receiver.stop();

  // the key went only to the API origin; the signed URL origin saw no key and served the files
  const signed = cloud.cloud!.observed.signed;
  assert.ok(signed.length >= 2);
  assert.ok(signed.every((s) => !s.carriedKey && s.status === 200), JSON.stringify(signed));
  const calls = cloud.cloud!.observed.api.slice(apiBefore);
  assert.ok(calls.length >= 4 && calls.every((a) => a.keyOk), `every API call of the job carried the key: ${JSON.stringify(calls.filter((a) => !a.keyOk))}`);
  for (const p of ['/api/upload/image', '/api/prompt', '/api/view']) assert.ok(calls.some((a) => a.path === p), `${p} was called`);
  assert.ok(calls.some((a) => a.path.startsWith('/api/jobs/')), 'the job status was polled');
  assert.equal((await sql.query('select prompt_id from cloud_jobs where task_id = $1', [taskId])).rows[0]?.prompt_id, res.body.output.provider_job_id);
});

test('provider 500s on the job status and a refused WebSocket: the task still completes (polling)', async () => {
  const wf = await workflow(tinyGraph(3));
  cloud.cloud!.faults.refuseSockets = true;
  cloud.cloud!.faults.jobs = 3;
  try {
    const taskId = await run(wf);
    const done = await waitTask(taskId, (x) => terminal.includes(x.task_status), 'terminal');
    assert.equal(done.task_status, 'completed', JSON.stringify(done));
    assert.equal(cloud.cloud!.faults.jobs, 0, 'the failing polls happened');
  } finally {
    cloud.cloud!.faults.refuseSockets = false;
    cloud.cloud!.faults.jobs = 0;
  }
});

test('a dropped WebSocket mid-job: polling takes over and the task completes', async () => {
  const wf = await workflow(tinyGraph(40));
  const taskId = await run(wf);
  await waitTask(taskId, (x) => x.task_status === 'running' && (x.progress?.step_current ?? 0) >= 2, 'running with progress');
  cloud.dropSockets();
  const done = await waitTask(taskId, (x) => terminal.includes(x.task_status), 'terminal');
  assert.equal(done.task_status, 'completed', JSON.stringify(done));
});

test('provider 500s at submission: after 3 tries the task fails with a clear message, and the retry (max_retries 1) completes', async () => {
  const wf = await workflow(tinyGraph(2), { max_retries: 1 });
  cloud.cloud!.faults.prompt.push(...[1, 2, 3].map(() => ({ status: 500, body: { error: 'upstream exploded' } })));
  const taskId = await run(wf);
  const failed = await waitTask(taskId, (x) => terminal.includes(x.task_status), 'terminal');
  assert.equal(failed.task_status, 'failed');
  assert.match(failed.task_error, /Comfy Cloud POST \/api\/prompt answered 500: upstream exploded \(3 attempts\)/);
  assert.ok(failed.retry_task_id, 'a retry was created');
  const retry = await waitTask(failed.retry_task_id, (x) => terminal.includes(x.task_status), 'retry terminal');
  assert.equal(retry.task_status, 'completed', JSON.stringify(retry));
  assert.equal(retry.attempt, 2);
  // usage (docs/api.md §16): one row per attempt; a cloud attempt counts run time x 1 GPU (an estimate: the provider reports no GPUs)
  const rows = await t.node.db.execute<{ task_id: string; outcome: string; dispatch_target: string; gpu_count: number; gpu_source: string; run_s: number; gpu_seconds: number }>(
    'select task_id, outcome, dispatch_target, gpu_count, gpu_source, run_s, gpu_seconds from task_attempts where task_id in (?, ?) order by attempt',
    [taskId, failed.retry_task_id],
  );
  assert.deepEqual(rows.map((r) => [r.task_id, r.outcome, r.dispatch_target, r.gpu_count, r.gpu_source]), [
    [taskId, 'failed', 'comfy_cloud', 1, 'estimate'],
    [failed.retry_task_id, 'completed', 'comfy_cloud', 1, 'estimate'],
  ]);
  assert.equal(rows[0]!.run_s, 0, 'the refused submission never ran');
  assert.ok(rows[1]!.run_s > 0 && rows[1]!.gpu_seconds === rows[1]!.run_s, JSON.stringify(rows[1]));
});

test('user-actionable failures: no credits (402), unknown node type, an execution error', async () => {
  const wf = await workflow(tinyGraph(2));
  cloud.cloud!.faults.prompt.push({ status: 402, body: { error: { type: 'insufficient_credits', message: 'Insufficient credits' } } });
  const a = await waitTask(await run(wf), (x) => terminal.includes(x.task_status), 'terminal');
  assert.equal(a.task_status, 'failed');
  assert.match(a.task_error, /no credits left.*402.*Insufficient credits.*top up/);

  const unknown = await workflow(tinyGraph(2, { '20': { class_type: 'FancyUpscaler', inputs: {} } }));
  const b = await waitTask(await run(unknown), (x) => terminal.includes(x.task_status), 'terminal');
  assert.equal(b.task_status, 'failed');
  assert.match(b.task_error, /Comfy Cloud rejected the workflow: Cannot execute because node FancyUpscaler does not exist/);

  const failing = await workflow(tinyGraph(2, { '10': { class_type: 'FailNode', inputs: { message: 'CUDA out of memory (simulated)', images: ['8', 0] } } }));
  const c = await waitTask(await run(failing), (x) => terminal.includes(x.task_status), 'terminal');
  assert.equal(c.task_status, 'failed');
  assert.match(c.task_error, /Comfy Cloud error in node 10 \(FailNode\): RuntimeError: CUDA out of memory \(simulated\)/);
});

// issue 25: cancel and timeout cancel the ONE job (POST /api/v2/jobs/{id}/cancel, Bearer), never
// POST /api/interrupt (it cancels every running job of the account): these two tests assert that now
test('cancel reaches the provider as a per-job cancel of its job (never the account-wide interrupt) and the task ends cancelled', async () => {
  const wf = await workflow(tinyGraph(400));
  const taskId = await run(wf);
  await waitTask(taskId, (x) => x.task_status === 'running' && (x.progress?.step_current ?? 0) >= 2, 'running');
  const promptId: string = (await sql.query('select prompt_id from cloud_jobs where task_id = $1', [taskId])).rows[0].prompt_id;
  const interrupts = cloud.received.interrupts;
  const cancelled = cloud.waitFor<string>('cancel', (id) => id === promptId, 15_000);
  const c = await t.http.post(`/r/tasks/${taskId}/cancel`, undefined, as(owner));
  assert.equal(c.status, 200, c.text);
  await cancelled;
  assert.ok(cloud.cloud!.observed.api.some((a) => a.method === 'POST' && a.path === `/api/v2/jobs/${promptId}/cancel` && a.keyOk), 'per-job cancel with Authorization: Bearer <key>');
  assert.equal((await waitTask(taskId, (x) => terminal.includes(x.task_status), 'terminal')).task_status, 'cancelled');
  // the provider's job ends interrupted; nothing re-opens the task
  await waitFor(() => cloud.history.get(promptId)?.status.messages.some((m) => m[0] === 'execution_interrupted'), 'the provider job ended interrupted');
  assert.equal((await t.http.get(`/r/tasks/${taskId}`, as(owner))).body.task_status, 'cancelled');
  assert.equal(cloud.received.interrupts, interrupts, 'POST /api/interrupt was never called');
});

test('task_timeout: a cloud job that runs too long fails with a clear message and its job (only) is cancelled at the provider', async () => {
  const wf = await workflow(tinyGraph(400), { task_timeout: 1 });
  const interrupts = cloud.received.interrupts;
  const cancels = cloud.cloud!.observed.cancels.length;
  const taskId = await run(wf);
  const done = await waitTask(taskId, (x) => terminal.includes(x.task_status), 'terminal');
  assert.equal(done.task_status, 'failed');
  assert.match(done.task_error, /task timed out after 1 s/);
  const promptId: string = (await sql.query('select prompt_id from cloud_jobs where task_id = $1', [taskId])).rows[0].prompt_id;
  await waitFor(() => cloud.cloud!.observed.cancels.slice(cancels).includes(promptId), 'the per-job cancel of the timed-out job');
  assert.equal(cloud.received.interrupts, interrupts, 'POST /api/interrupt was never called');
});

test('the provider concurrency limit is respected: the second task waits on our side, then runs', async () => {
  const wf = await workflow(tinyGraph(25));
  const first = await run(wf);
  const second = await run(wf);
  await waitTask(first, (x) => x.task_status === 'running', 'first running');
  const s2 = (await t.http.get(`/r/tasks/${second}`, as(owner))).body;
  assert.ok(['pending', 'waiting'].includes(s2.task_status), `second is ${s2.task_status} while the only slot is taken`);
  assert.equal((await waitTask(first, (x) => terminal.includes(x.task_status), 'first done')).task_status, 'completed');
  assert.equal((await waitTask(second, (x) => terminal.includes(x.task_status), 'second done')).task_status, 'completed');
});

test('DELETE removes the key; the API key never appears in any log line', async () => {
  assert.ok(logs.length > 1000, 'logs were captured');
  assert.ok(logs.includes('cloud: provider accepted the job'), 'the cloud dispatcher logged');
  assert.ok(!logs.includes(KEY), 'the key is in no log line');
  assert.ok(!logs.includes(KEY.slice(8, 30)), 'no part of the key past its prefix is logged');
  const d = await t.http.del('/cloud-providers/comfy_cloud', as(owner));
  assert.equal(d.status, 200, d.text);
  assert.deepEqual((await t.http.get('/cloud-providers', as(owner))).body.provider_list, []);
  const wf = await workflow(tinyGraph(2));
  assert.equal((await t.http.post(`/r/workflows/${wf}/run`, { parameters: {} }, as(owner))).status, 409);
});
