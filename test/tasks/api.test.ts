import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, createCredential, type TestUser } from '../helpers/identity.js';
import { FakeAgent } from '../helpers/fake-agent.js';
import { waitForStatus } from '../helpers/tasks.js';
import { comfyBody } from '../workflows-api/fixtures.js';

let t: TestNode;
let sql: pg.Client;
let alice: TestUser;
let bob: TestUser;
let wfId: string;
let slug: string;
before(async () => {
  t = await startTestNode({}, 'taskapi');
  sql = new pg.Client({ connectionString: t.db.url });
  await sql.connect();
  alice = await registerUser(t.http);
  bob = await registerUser(t.http);
  const body = comfyBody({ required_labels: [], required_models: [], min_vram_gb: 0, preferred_gpu: undefined, max_retries: 0 });
  slug = body.workflow_slug;
  const r = await t.http.post('/workflows', body, { token: alice.accessToken, team: alice.teamId });
  assert.equal(r.status, 200, r.text);
  wfId = r.body.id;
});
after(async () => {
  await sql.end();
  await t.stop();
});

const as = (u: TestUser) => ({ token: u.accessToken, team: u.teamId });

test('run answers 202 {task_id} only after the task row is committed; GET returns the task record', async () => {
  const r = await t.http.post(`/r/workflows/${wfId}/run`, { parameters: { prompt: 'a red fox', steps: 30 } }, as(alice));
  assert.equal(r.status, 202, r.text);
  assert.deepEqual(Object.keys(r.body), ['task_id']);
  const row = (await sql.query('select task_status, resolved_workflow, parameters from tasks where id = $1', [r.body.task_id])).rows[0];
  assert.ok(row, 'the row exists as soon as 202 is received');
  assert.equal(row.resolved_workflow['6'].inputs.text, 'a red fox');
  assert.equal(row.resolved_workflow['3'].inputs.steps, 30);
  const g = await t.http.get(`/r/tasks/${r.body.task_id}`, as(alice));
  assert.equal(g.status, 200);
  for (const k of ['task_id', 'workflow_id', 'workflow_slug', 'workflow_version', 'task_status', 'dispatch_target', 'agent_id', 'parameters', 'progress', 'attempt', 'parent_task_id', 'retry_task_id', 'task_error', 'created_at', 'updated_at', 'queued_at', 'started_at', 'finished_at'])
    assert.ok(k in g.body, k);
  assert.ok(['pending', 'waiting'].includes(g.body.task_status));
  assert.equal(g.body.workflow_version, 1);
  assert.deepEqual(g.body.parameters, { prompt: 'a red fox', steps: 30 });
});

test('run validation: unknown key, missing required and bad values are 400 naming the parameter; unknown body field 400', async () => {
  const bad = [
    [{ parameters: { prompt: 'x', nope: 1 } }, 'nope'],
    [{ parameters: {} }, 'prompt'],
    [{ parameters: { prompt: 'x', steps: 151 } }, 'steps'],
    [{ parameters: { prompt: 'x', sampler: 'ddim' } }, 'sampler'],
  ] as const;
  for (const [body, key] of bad) {
    const r = await t.http.post(`/r/workflows/${wfId}/run`, body, as(alice));
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.match(r.body.error_message, new RegExp(key));
  }
  const u = await t.http.post(`/r/workflows/${wfId}/run`, { parameters: { prompt: 'x' }, urgency: 1 }, as(alice));
  assert.equal(u.status, 400);
  assert.equal((await t.http.post(`/r/workflows/${wfId}/run`, { parameters: { prompt: 'x' }, dispatch_target: 'mars' }, as(alice))).status, 400);
});

test('slug run with @version pins the snapshot; integration credentials can run; another team gets 404', async () => {
  const upd = await t.http.put(`/workflows/${wfId}`, { description: 'v2', parameters: [{ key: 'prompt', node_id: '6', field: 'text', required: true }] }, as(alice));
  assert.equal(upd.status, 200, upd.text);
  const sk = await createCredential(t.http, alice, 'integration');
  const pinned = await t.http.post(`/r/workflows/slug/${slug}@1/run`, { parameters: { prompt: 'p', steps: 5 } }, { token: sk.value });
  assert.equal(pinned.status, 202, pinned.text);
  const g = await t.http.get(`/r/tasks/${pinned.body.task_id}`, { token: sk.value });
  assert.equal(g.body.workflow_version, 1);
  // the current version no longer has `steps`
  const cur = await t.http.post(`/r/workflows/slug/${slug}/run`, { parameters: { prompt: 'p', steps: 5 } }, { token: sk.value });
  assert.equal(cur.status, 400);
  assert.equal((await t.http.post(`/r/workflows/slug/${slug}@99/run`, { parameters: { prompt: 'p' } }, as(alice))).status, 404);
  // bob: foreign workflow and task are 404
  assert.equal((await t.http.post(`/r/workflows/${wfId}/run`, { parameters: { prompt: 'p' } }, as(bob))).status, 404);
  assert.equal((await t.http.get(`/r/tasks/${pinned.body.task_id}`, as(bob))).status, 404);
  assert.equal((await t.http.post(`/r/tasks/${pinned.body.task_id}/cancel`, undefined, as(bob))).status, 404);
  assert.equal((await t.http.get(`/r/tasks/${pinned.body.task_id}/result`, as(bob))).status, 404);
});

test('list with filters and pagination', async () => {
  const l = await t.http.get('/r/tasks?per_page=2', as(alice));
  assert.equal(l.status, 200);
  assert.equal(l.body.task_list.length, 2);
  assert.ok(l.body.page_meta.total_count >= 2);
  const f = await t.http.get(`/r/tasks?task_status=completed&workflow_id=${wfId}`, as(alice));
  assert.equal(f.status, 200);
  assert.ok(f.body.task_list.every((x: any) => x.task_status === 'completed'));
  assert.equal((await t.http.get('/r/tasks?task_status=done', as(alice))).status, 400);
  assert.equal((await t.http.get('/r/tasks', as(bob))).body.page_meta.total_count, 0);
});

test('result: 409 before completion, 200 after, 410 after output retention; cancel of a terminal task is 409', async () => {
  const agent = await new FakeAgent(t.node, { teamId: alice.teamId, slots: 50 }).connect(); // earlier tests left waiting tasks: FIFO hands those out first
  const r = await t.http.post(`/r/workflows/${wfId}/run`, { parameters: { prompt: 'fox' } }, as(alice));
  const id = r.body.task_id;
  const a = await agent.assignment(id);
  assert.equal((await t.http.get(`/r/tasks/${id}/result`, as(alice))).status, 409);
  agent.ack(a);
  await waitForStatus(t.node, id, 'running');
  agent.finish(a, { storage_key: `teams/${alice.teamId}/outputs/${id}/1/output.png`, image_count: 1 });
  await waitForStatus(t.node, id, 'completed');
  const res = await t.http.get(`/r/tasks/${id}/result`, as(alice));
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.task_status, 'completed');
  assert.equal(res.body.output.image_count, 1);
  assert.ok('download_url' in res.body && 'download_urls' in res.body && 'expires_at' in res.body);
  const c = await t.http.post(`/r/tasks/${id}/cancel`, undefined, as(alice));
  assert.equal(c.status, 409);
  assert.equal(c.body.error_code, 'task_terminal');
  await sql.query(`update tasks set finished_at = now() - interval '8 days' where id = $1`, [id]);
  const old = await t.http.get(`/r/tasks/${id}/result`, as(alice));
  assert.equal(old.status, 410);
  assert.equal(old.body.error_code, 'output_expired');
});

test('cancel over HTTP from waiting and running; the agent is told to interrupt', async () => {
  const agent = await new FakeAgent(t.node, { teamId: alice.teamId, slots: 50 }).connect(); // earlier tests left waiting tasks: FIFO hands those out first
  // a workflow no agent ran yet (warm placement would send a run of wfId to the agent that ran it last)
  const fresh = await t.http.post('/workflows', comfyBody({ required_labels: [], required_models: [], min_vram_gb: 0 }), as(alice));
  const r = await t.http.post(`/r/workflows/${fresh.body.id}/run`, { parameters: { prompt: 'c' } }, as(alice));
  const a = await agent.assignment(r.body.task_id);
  agent.ack(a);
  await waitForStatus(t.node, r.body.task_id, 'running');
  const c = await t.http.post(`/r/tasks/${r.body.task_id}/cancel`, undefined, as(alice));
  assert.equal(c.status, 200);
  assert.deepEqual(c.body, { is_success: true });
  await agent.next((m) => m.type === 'cancel' && m.taskId === r.body.task_id);
  const g = await t.http.get(`/r/tasks/${r.body.task_id}`, as(alice));
  assert.equal(g.body.task_status, 'cancelled');
});

test('an archived workflow cannot be run (409)', async () => {
  const body = comfyBody({ required_labels: [], required_models: [], min_vram_gb: 0 });
  const w = await t.http.post('/workflows', body, as(alice));
  assert.equal((await t.http.put(`/workflows/${w.body.id}`, { workflow_status: 'archived' }, as(alice))).status, 200);
  const r = await t.http.post(`/r/workflows/${w.body.id}/run`, { parameters: { prompt: 'x' } }, as(alice));
  assert.equal(r.status, 409);
  assert.equal(r.body.error_code, 'workflow_archived');
});

test('comfy_cloud dispatch is refused with 409 while no cloud provider is configured (never a task stuck in waiting)', async () => {
  const r = await t.http.post(`/r/workflows/${wfId}/run`, { parameters: { prompt: 'x' }, dispatch_target: 'comfy_cloud' }, as(alice));
  assert.equal(r.status, 409);
  assert.equal(r.body.error_code, 'cloud_provider_not_configured');
  const before = (await sql.query('select count(*)::int as n from tasks')).rows[0].n;
  const body = comfyBody({ required_labels: [], required_models: [], min_vram_gb: 0, default_dispatch_target: 'comfy_cloud' });
  const w = await t.http.post('/workflows', body, as(alice));
  assert.equal(w.status, 200);
  assert.equal((await t.http.post(`/r/workflows/${w.body.id}/run`, { parameters: { prompt: 'x' } }, as(alice))).status, 409);
  assert.equal((await t.http.post(`/r/workflows/${w.body.id}/run`, { parameters: { prompt: 'x' }, dispatch_target: 'agent' }, as(alice))).status, 202);
  assert.equal((await sql.query('select count(*)::int as n from tasks')).rows[0].n, before + 1);
});

test('a later edit of the workflow never changes a task that is already queued (the run pins its version)', async () => {
  const body = comfyBody({ required_labels: ['pin-test'], required_models: [], min_vram_gb: 0 });
  const w = await t.http.post('/workflows', body, as(alice));
  const r = await t.http.post(`/r/workflows/${w.body.id}/run`, { parameters: { prompt: 'original prompt' } }, as(alice));
  assert.equal(r.status, 202);
  await waitForStatus(t.node, r.body.task_id, 'waiting'); // no agent with the label yet
  const edited = structuredClone(body.workflow_json);
  edited['3'].inputs.steps = 99;
  edited['9'].inputs.filename_prefix = 'edited';
  assert.equal((await t.http.put(`/workflows/${w.body.id}`, { workflow_json: edited }, as(alice))).status, 200);
  const agent = await new FakeAgent(t.node, { teamId: alice.teamId, labels: ['pin-test'], slots: 50 }).connect();
  const a = await agent.assignment(r.body.task_id);
  const graph = a.assignment.workflow as Record<string, any>;
  assert.equal(graph['6'].inputs.text, 'original prompt');
  assert.equal(graph['3'].inputs.steps, body.workflow_json['3'].inputs.steps);
  assert.equal(graph['9'].inputs.filename_prefix, body.workflow_json['9'].inputs.filename_prefix);
  assert.equal((await t.http.get(`/r/tasks/${r.body.task_id}`, as(alice))).body.workflow_version, 1);
});
