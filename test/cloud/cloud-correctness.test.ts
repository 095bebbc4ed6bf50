/**
 * Comfy Cloud correctness (issue 25), against the cloud stand-in as Comfy-Org/docs describe the real
 * service: several jobs of one account run at once, POST /api/interrupt cancels ALL of them, the
 * per-job cancel is POST /api/v2/jobs/{id}/cancel (Bearer), 429 means "subscription inactive", a
 * submit can time out after creating its job, GET /api/user answers {status: waitlisted}, uploads are
 * capped at 50 MB / 16384 px per edge / 64 MP. A Gantry node with real PostgreSQL; every log line it
 * writes is searched for the key.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import pg from 'pg';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, type TestUser } from '../helpers/identity.js';
import { startComfyStandin, type ComfyStandin } from '../fixtures/comfyui-standin.js';
import { makePki, type Pki } from '../events/helpers.js';
import { tinyGraph } from '../agents/helpers.js';
import { createLogger } from '../../src/shared/logger.js';
import { ComfyCloudClient } from '../../src/cloud/comfy-cloud.js';
import { ProviderError } from '../../src/cloud/provider.js';
import { OutboundGuard, outboundCa } from '../../src/events/outbound.js';
import { cloudUploadProblem, imageDimensions } from '../../src/cloud/limits.js';

const KEY = 'comfyui-9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d';
let pki: Pki;
let cloud: ComfyStandin;
let t: TestNode;
let sql: pg.Client;
let owner: TestUser;
let logs = '';

before(async () => {
  pki = makePki();
  cloud = await startComfyStandin({ tickDelayMs: 15, cloud: { apiKey: KEY, tls: { key: pki.key.toString(), cert: pki.cert.toString() }, concurrency: 5 } });
  const sink = new PassThrough();
  sink.on('data', (c: Buffer) => (logs += c.toString('utf8')));
  t = await startTestNode(
    // a 3 s request timeout (enough under load): the stand-in's "submit that times out after creating the job" trips it
    { GANTRY_OUTBOUND_CA_FILE: pki.caFile, GANTRY_CLOUD_POLL_MS: 100, GANTRY_CLOUD_BUSY_RETRY_MS: 50, GANTRY_CLOUD_TIMEOUT_MS: 3000, GANTRY_RETRY_BACKOFF_BASE_S: 0 },
    'cloud_fix',
    { logger: createLogger('debug', sink) },
  );
  sql = new pg.Client({ connectionString: t.db.url });
  await sql.connect();
  owner = await registerUser(t.http);
  const put = await t.http.put('/cloud-providers/comfy_cloud', { api_key: KEY, base_url: cloud.url, max_concurrent_jobs: 3 }, as(owner));
  assert.equal(put.status, 200, put.text);
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

async function waitFor<T>(fn: () => T | undefined | null | false | Promise<T | undefined | null | false>, what: string, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((res) => setTimeout(res, 25));
  }
}

async function workflow(graph: Record<string, unknown>, o: Record<string, unknown> = {}): Promise<string> {
  const r = await t.http.post('/workflows', { workflow_slug: `fix-${Math.random().toString(36).slice(2, 9)}`, display_name: 'cloud wf', workflow_json: graph, max_retries: 0, default_dispatch_target: 'comfy_cloud', ...o }, as(owner));
  assert.equal(r.status, 200, r.text);
  return r.body.id;
}

async function run(wfId: string, parameters: Record<string, unknown> = {}): Promise<string> {
  const r = await t.http.post(`/r/workflows/${wfId}/run`, { parameters }, as(owner));
  assert.equal(r.status, 202, r.text);
  return r.body.task_id;
}

const promptOf = async (taskId: string): Promise<string> => (await sql.query('select prompt_id from cloud_jobs where task_id = $1', [taskId])).rows[0]?.prompt_id;
const promptCalls = (): number => cloud.cloud!.observed.api.filter((a) => a.method === 'POST' && a.path === '/api/prompt').length;

test('cancelling one cloud task while two others of the same key run: only its job is cancelled (per-job cancel), the two others run on and complete', async () => {
  const wf = await workflow(tinyGraph(60));
  const interrupts = cloud.received.interrupts;
  const [a, b, c] = [await run(wf), await run(wf), await run(wf)];
  for (const id of [a, b, c]) await waitTask(id, (x) => x.task_status === 'running' && (x.progress?.step_current ?? 0) >= 2, `${id} running`);
  const [pa, pb, pc] = [await promptOf(a), await promptOf(b), await promptOf(c)];
  assert.equal(new Set([pa, pb, pc]).size, 3, 'three provider jobs of the same account run at once');

  const r = await t.http.post(`/r/tasks/${b}/cancel`, undefined, as(owner));
  assert.equal(r.status, 200, r.text);
  assert.equal((await waitTask(b, (x) => terminal.includes(x.task_status), 'b terminal')).task_status, 'cancelled');
  for (const id of [a, c]) {
    const done = await waitTask(id, (x) => terminal.includes(x.task_status), `${id} terminal`, 30_000);
    assert.equal(done.task_status, 'completed', `the other task ${id} completed: ${JSON.stringify(done)}`);
  }
  await waitFor(() => cloud.cloud!.observed.cancels.includes(pb), 'the per-job cancel of b');
  assert.ok(cloud.cloud!.observed.api.some((x) => x.method === 'POST' && x.path === `/api/v2/jobs/${pb}/cancel` && x.keyOk), 'POST /api/v2/jobs/{id}/cancel with Authorization: Bearer <key>');
  assert.equal(cloud.history.get(pa)?.status.status_str, 'success');
  assert.equal(cloud.history.get(pc)?.status.status_str, 'success');
  await waitFor(() => cloud.history.get(pb)?.status.messages.some((m) => m[0] === 'execution_interrupted'), 'the cancelled job ended interrupted at the provider');
  assert.equal(cloud.received.interrupts, interrupts, 'POST /api/interrupt (account-wide) was never called');
});

test('a task timeout cancels only its own job: another job of the key runs on and completes', async () => {
  const long = await workflow(tinyGraph(400), { task_timeout: 1 });
  const other = await workflow(tinyGraph(90));
  const interrupts = cloud.received.interrupts;
  const o = await run(other);
  await waitTask(o, (x) => x.task_status === 'running', 'other running');
  const l = await run(long);
  const timedOut = await waitTask(l, (x) => terminal.includes(x.task_status), 'timed out');
  assert.equal(timedOut.task_status, 'failed');
  assert.match(timedOut.task_error, /task timed out after 1 s/);
  const otherTask = await waitTask(o, (x) => terminal.includes(x.task_status), 'other terminal', 30_000);
  assert.equal(otherTask.task_status, 'completed', `the other task completed: ${JSON.stringify(otherTask)}`);
  const pl = await promptOf(l);
  await waitFor(() => cloud.cloud!.observed.cancels.includes(pl), 'per-job cancel of the timed-out job');
  assert.equal(cloud.received.interrupts, interrupts, 'POST /api/interrupt was never called');
});

test('429 on submit (subscription inactive / not paid): the task fails at once with cloud_provider_unavailable naming the cause, one submission only, and the provider record shows it', async () => {
  const wf = await workflow(tinyGraph(2));
  const calls = promptCalls();
  cloud.cloud!.account.subscription = 'inactive';
  try {
    const started = Date.now();
    const taskId = await run(wf);
    const done = await waitTask(taskId, (x) => terminal.includes(x.task_status), 'terminal', 10_000);
    assert.equal(done.task_status, 'failed', JSON.stringify(done));
    assert.match(done.task_error, /^cloud_provider_unavailable: Comfy Cloud refused the job because this account's subscription is inactive or not paid \(429: Payment required - User has not paid\)/);
    assert.ok(Date.now() - started < 5_000, `failed in ${Date.now() - started} ms`);
    assert.equal(promptCalls() - calls, 1, 'submitted once: no resubmission loop');
    const rec = await t.http.get('/cloud-providers/comfy_cloud', as(owner));
    assert.equal(rec.status, 200, rec.text);
    assert.equal(rec.body.provider_status, 'subscription_inactive');
    assert.match(rec.body.last_error, /subscription is inactive/);
    assert.ok(!rec.text.includes(KEY));
  } finally {
    cloud.cloud!.account.subscription = 'active';
  }
  // paid again: the next task runs and the record is active again
  const next = await run(wf);
  assert.equal((await waitTask(next, (x) => terminal.includes(x.task_status), 'terminal')).task_status, 'completed');
  assert.equal((await t.http.get('/cloud-providers/comfy_cloud', as(owner))).body.provider_status, 'active');
  assert.equal((await t.http.get('/cloud-providers/nope', as(owner))).status, 404);
});

test('a submit that times out after creating the job: the retry looks the job up by its prompt_id and follows it; no second job', async () => {
  const wf = await workflow(tinyGraph(3));
  const prompts = cloud.received.prompts.length;
  cloud.cloud!.faults.prompt.push({ hang: 4_000 });
  const taskId = await run(wf);
  const done = await waitTask(taskId, (x) => terminal.includes(x.task_status), 'terminal', 30_000);
  assert.equal(done.task_status, 'completed', JSON.stringify(done));
  const sent = cloud.received.prompts.slice(prompts);
  assert.equal(sent.length, 1, `one job at the provider, got ${sent.length}`);
  assert.equal(await promptOf(taskId), sent[0]!.prompt_id, 'the task follows the job its lost submission created');
  assert.ok(cloud.cloud!.observed.api.some((a) => a.path === `/api/jobs/${sent[0]!.prompt_id}`), 'looked up before resubmitting');

  // a 502 answered after the job was created: same
  const before2 = cloud.received.prompts.length;
  cloud.cloud!.faults.prompt.push({ status: 502, body: { code: 'bad_gateway', message: 'upstream' }, createJob: true });
  const t2 = await run(wf);
  assert.equal((await waitTask(t2, (x) => terminal.includes(x.task_status), 'terminal', 30_000)).task_status, 'completed');
  assert.equal(cloud.received.prompts.length - before2, 1, 'no second job after a 5xx');
});

test('PUT /cloud-providers: a key whose account is waitlisted (GET /api/user {status: "waitlisted"}) or whose subscription is inactive (429) is refused with 400 and not stored', async () => {
  const before = (await t.http.get('/cloud-providers/comfy_cloud', as(owner))).body;
  cloud.cloud!.account.status = 'waitlisted';
  try {
    const r = await t.http.put('/cloud-providers/comfy_cloud', { api_key: KEY, base_url: cloud.url, max_concurrent_jobs: 7 }, as(owner));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body.error_code, 'cloud_provider_account_inactive');
    assert.match(r.body.error_message, /waitlisted/);
    assert.ok(!r.text.includes(KEY));
  } finally {
    cloud.cloud!.account.status = 'active';
  }
  cloud.cloud!.account.subscription = 'inactive';
  try {
    const r = await t.http.put('/cloud-providers/comfy_cloud', { api_key: KEY, base_url: cloud.url, max_concurrent_jobs: 7 }, as(owner));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body.error_code, 'cloud_provider_account_inactive');
    assert.match(r.body.error_message, /subscription is inactive or not paid \(429/);
  } finally {
    cloud.cloud!.account.subscription = 'active';
  }
  const after = (await t.http.get('/cloud-providers/comfy_cloud', as(owner))).body;
  assert.equal(after.max_concurrent_jobs, before.max_concurrent_jobs, 'the refused PUTs changed nothing');
  assert.equal(after.updated_at, before.updated_at);
});

/** A PNG header claiming width x height (the rest of the file is irrelevant to the limit). */
function pngClaiming(width: number, height: number): Buffer {
  const ihdr = Buffer.alloc(25);
  ihdr.writeUInt32BE(13, 0);
  ihdr.write('IHDR', 4, 'latin1');
  ihdr.writeUInt32BE(width, 8);
  ihdr.writeUInt32BE(height, 12);
  ihdr[16] = 8;
  ihdr[17] = 2;
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), ihdr, Buffer.from([0, 0, 0, 0, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82])]);
}

test('upload limits: an input over 16384 px per edge or 64 megapixels is refused at the run request (400 cloud_input_too_large) before any provider call; the stand-in refuses such uploads too', async () => {
  const graph = tinyGraph(12, {
    '11': { class_type: 'LoadImage', inputs: { image: 'placeholder.png' } },
    '12': { class_type: 'SaveImage', inputs: { filename_prefix: 'loaded', images: ['11', 0] } },
  });
  const w = await t.http.post(
    '/workflows',
    { workflow_slug: `fix-in-${Math.random().toString(36).slice(2, 8)}`, display_name: 'in', workflow_json: graph, parameters: [{ key: 'image', type: 'file', node_id: '11', field: 'image' }], max_retries: 0, default_dispatch_target: 'comfy_cloud' },
    as(owner),
  );
  assert.equal(w.status, 200, w.text);
  for (const [width, height, why] of [[20_000, 100, /20000x100 px/], [10_000, 8_000, /10000x8000 px \(80\.0 megapixels\)/]] as const) {
    const png = pngClaiming(width, height);
    const pre = await t.http.post('/r/files/presign', { file_name: 'huge.png', file_size: png.length, content_type: 'image/png' }, as(owner));
    assert.equal(pre.status, 200, pre.text);
    assert.ok((await fetch(pre.body.upload_url, { method: 'PUT', headers: pre.body.upload_headers, body: new Uint8Array(png) })).ok);
    const api = cloud.cloud!.observed.api.length;
    const r = await t.http.post(`/r/workflows/${w.body.id}/run`, { parameters: { image: pre.body.file_key } }, as(owner));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body.error_code, 'cloud_input_too_large');
    assert.match(r.body.error_message, why);
    assert.match(r.body.error_message, /parameters\.image \(huge\.png\)/);
    assert.match(r.body.error_message, /50 MB, 16384 px per edge and 64 megapixels/);
    assert.equal(cloud.cloud!.observed.api.length, api, 'no provider call');
  }
  // over 50 MB (known from the object store at the run request)
  {
    const big = Buffer.alloc(50_000_001, 1);
    const pre = await t.http.post('/r/files/presign', { file_name: 'big.bin', file_size: big.length, content_type: 'application/octet-stream' }, as(owner));
    assert.equal(pre.status, 200, pre.text);
    assert.ok((await fetch(pre.body.upload_url, { method: 'PUT', headers: pre.body.upload_headers, body: new Uint8Array(big) })).ok);
    const r = await t.http.post(`/r/workflows/${w.body.id}/run`, { parameters: { image: pre.body.file_key } }, as(owner));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body.error_code, 'cloud_input_too_large');
    assert.match(r.body.error_message, /parameters\.image \(big\.bin\) is 50000001 bytes/);
  }
  // dimensions the run request cannot see (a JPEG whose frame header lies past the first 512 KiB):
  // the dispatcher checks the whole file and fails the task before any provider call
  {
    const app = Buffer.alloc(4 + 65_000, 0);
    app[0] = 0xff;
    app[1] = 0xe1;
    app.writeUInt16BE(65_000 + 2, 2);
    const sof = Buffer.from([0xff, 0xc0, 0x00, 0x11, 0x08, 0x00, 0x64, 0x4e, 0x20, 0x03, 1, 0x11, 0, 2, 0x11, 1, 3, 0x11, 1]);
    const jpeg = Buffer.concat([Buffer.from([0xff, 0xd8]), ...Array.from({ length: 10 }, () => app.subarray(0, 65_002 + 2)), sof, Buffer.from([0xff, 0xd9])]);
    assert.deepEqual(imageDimensions(jpeg), { width: 20_000, height: 100 });
    const pre = await t.http.post('/r/files/presign', { file_name: 'deep.jpg', file_size: jpeg.length, content_type: 'image/jpeg' }, as(owner));
    assert.ok((await fetch(pre.body.upload_url, { method: 'PUT', headers: pre.body.upload_headers, body: new Uint8Array(jpeg) })).ok);
    const uploads = cloud.received.uploads.length;
    const prompts = promptCalls();
    const r = await t.http.post(`/r/workflows/${w.body.id}/run`, { parameters: { image: pre.body.file_key } }, as(owner));
    assert.equal(r.status, 202, r.text);
    const done = await waitTask(r.body.task_id, (x) => terminal.includes(x.task_status), 'terminal');
    assert.equal(done.task_status, 'failed');
    assert.match(done.task_error, /^bad_input: file parameter "image" \(deep\.jpg\) is 20000x100 px; Comfy Cloud accepts uploads up to 50 MB/);
    assert.equal(cloud.received.uploads.length, uploads, 'nothing uploaded');
    assert.equal(promptCalls(), prompts, 'nothing submitted');
  }
  // an image within the limits runs
  const { renderSeededPng } = await import('../../src/agent/png.js');
  const ok = renderSeededPng('fine', { width: 8, height: 8 });
  const pre = await t.http.post('/r/files/presign', { file_name: 'fine.png', file_size: ok.length, content_type: 'image/png' }, as(owner));
  assert.ok((await fetch(pre.body.upload_url, { method: 'PUT', headers: pre.body.upload_headers, body: new Uint8Array(ok) })).ok);
  const fine = await t.http.post(`/r/workflows/${w.body.id}/run`, { parameters: { image: pre.body.file_key } }, as(owner));
  assert.equal(fine.status, 202, fine.text);
  assert.equal((await waitTask(fine.body.task_id, (x) => terminal.includes(x.task_status), 'terminal')).task_status, 'completed');

  // the stand-in refuses what Comfy Cloud refuses (openapi-cloud.yaml uploadImage: 400), and the client says so
  const client = new ComfyCloudClient({ baseUrl: cloud.url, apiKey: KEY, guard: new OutboundGuard({ allowlist: '127.0.0.1' }), ca: outboundCa(pki.caFile) });
  try {
    for (const [bytes, why] of [[pngClaiming(16_385, 16), /16384 px per edge/], [pngClaiming(9_000, 9_000), /64 megapixels/], [Buffer.alloc(50 * 1024 * 1024 + 1), /50 MB/]] as const) {
      await assert.rejects(client.upload(bytes, 'big.png'), (e: unknown) => e instanceof ProviderError && e.kind === 'invalid' && /refused the input file big\.png \(400: /.test(e.message) && why.test(e.message));
    }
  } finally {
    client.close();
  }
  // the checks Gantry makes (the dispatcher repeats them on the whole file before its first provider call)
  assert.deepEqual(imageDimensions(pngClaiming(3, 4)), { width: 3, height: 4 });
  assert.match(cloudUploadProblem('x', 50_000_001, null) ?? '', /50000001 bytes/);
  assert.equal(cloudUploadProblem('x', 50_000_000, { width: 16_384, height: 4_096 }), null, 'exactly 64 MP and 16384 px are allowed');
});

test('job status comes from GET /api/jobs/{id} only (history_v2 is deprecated); a cloud run sends the team key as extra_data.api_key_comfy_org; the key is in no log line', async () => {
  const wf = await workflow(tinyGraph(2));
  const taskId = await run(wf);
  assert.equal((await waitTask(taskId, (x) => terminal.includes(x.task_status), 'terminal')).task_status, 'completed');
  const pid = await promptOf(taskId);
  const mine = cloud.received.prompts.find((p) => p.prompt_id === pid)!;
  assert.ok(mine);
  assert.deepEqual(mine.body.extra_data, { api_key_comfy_org: KEY }, 'partner (API) nodes bill to the team key');
  const calls = cloud.cloud!.observed.api;
  assert.ok(calls.some((a) => a.path.startsWith('/api/jobs/')), 'GET /api/jobs/{id} polled');
  assert.ok(!calls.some((a) => a.path.startsWith('/api/history_v2')), 'never the deprecated /api/history_v2');
  assert.ok(!calls.some((a) => a.path === '/api/interrupt'), 'never the account-wide interrupt');
  assert.ok(logs.includes('cloud: provider accepted the job'));
  assert.ok(!logs.includes(KEY.slice(8, 30)), 'no part of the key past its prefix is logged');
});

test('outputs of a cloud job: saved files only, never a temp preview (PreviewImage writes to temp, like the agent executor)', async () => {
  const wf = await workflow(tinyGraph(3, { '20': { class_type: 'PreviewImage', inputs: { images: ['8', 0] } } }));
  const taskId = await run(wf);
  const done = await waitTask(taskId, (x) => terminal.includes(x.task_status), 'terminal', 30_000);
  assert.equal(done.task_status, 'completed', JSON.stringify(done));
  const hist = cloud.history.get(await promptOf(taskId))!;
  const temp = Object.values(hist.outputs).flatMap((o: any) => o.images ?? []).filter((i: any) => i.type === 'temp');
  assert.equal(temp.length, 1, 'the provider reported the temp preview');
  const res = await t.http.get(`/r/tasks/${taskId}/result`, as(owner));
  assert.equal(res.status, 200, res.text);
  const names = Object.keys((res.body.download_urls as Record<string, string> | null) ?? {}).concat(res.body.download_url ? [String(res.body.output?.storage_key ?? '').split('/').pop()!] : []);
  assert.ok(names.length >= 1, JSON.stringify(res.body));
  assert.ok(!names.some((n) => n.includes('temp')), `no temp preview among the outputs: ${names.join(', ')}`);
});
