import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, createCredential, type TestUser } from '../helpers/identity.js';
import { WorkflowStore } from '../../src/persistence/workflow-store.js';
import { AppError } from '../../src/shared/errors.js';
import { comfyBody, nerfBody, uniqueSlug, READ_FIELDS } from './fixtures.js';

let t: TestNode;
let alice: TestUser;
let bob: TestUser;
let aliceSk: string;
const as = (u: TestUser) => ({ token: u.accessToken, team: u.teamId });

before(async () => {
  t = await startTestNode({}, 'wfrt');
  alice = await registerUser(t.http);
  bob = await registerUser(t.http);
  aliceSk = (await createCredential(t.http, alice, 'integration')).value;
});
after(async () => {
  await t.stop();
});

async function createAs(u: TestUser, body: Record<string, unknown>): Promise<string> {
  const r = await t.http.post('/workflows', body, as(u));
  assert.equal(r.status, 200, r.text);
  return r.body.id as string;
}

async function rejectsWith(p: Promise<unknown>, kind: string, code: string): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof AppError, String(e));
    assert.equal(e.kind, kind);
    assert.equal(e.code, code);
    return true;
  });
}

describe('runtime discovery', () => {
  test('sk- callers get the read shape without workflow_json (list, by id, by slug); JWT callers get it', async () => {
    const body = comfyBody();
    const id = await createAs(alice, body);
    const sk = { token: aliceSk };
    const byId = await t.http.get(`/r/workflows/${id}`, sk);
    assert.equal(byId.status, 200, byId.text);
    assert.deepEqual(
      Object.keys(byId.body),
      READ_FIELDS.filter((f) => f !== 'workflow_json'),
    );
    assert.equal(byId.body.parameters.length, 3);
    const bySlug = await t.http.get(`/r/workflows/slug/${body.workflow_slug}`, sk);
    assert.equal(bySlug.status, 200, bySlug.text);
    assert.equal(bySlug.body.workflow_json, undefined);
    assert.equal(bySlug.body.id, id);
    const list = await t.http.get('/r/workflows', sk);
    assert.equal(list.status, 200);
    assert.ok(list.body.workflow_list.length >= 1);
    for (const w of list.body.workflow_list) assert.ok(!('workflow_json' in w));
    const jwt = await t.http.get(`/r/workflows/${id}`, as(alice));
    assert.deepEqual(jwt.body.workflow_json, body.workflow_json);
  });

  test('sk- is rejected on every management endpoint (401/403)', async () => {
    const id = await createAs(alice, comfyBody());
    for (const [m, path] of [
      ['GET', '/workflows'],
      ['POST', '/workflows'],
      ['GET', `/workflows/${id}`],
      ['PUT', `/workflows/${id}`],
      ['DELETE', `/workflows/${id}`],
      ['GET', `/workflows/${id}/snapshots`],
      ['GET', `/workflows/${id}/export`],
      ['POST', '/workflows/import'],
    ] as const) {
      const r = await t.http.req(m, path, { token: aliceSk, body: m === 'POST' || m === 'PUT' ? comfyBody() : undefined });
      assert.ok(r.status === 401 || r.status === 403, `${m} ${path}: ${r.status}`);
    }
    assert.equal((await t.http.get(`/workflows/${id}`, as(alice))).body.version, 1);
  });

  test('cross-team: every read and write of a foreign workflow is 404', async () => {
    const body = comfyBody();
    const id = await createAs(alice, body);
    const b = as(bob);
    for (const [m, path] of [
      ['GET', `/workflows/${id}`],
      ['PUT', `/workflows/${id}`],
      ['DELETE', `/workflows/${id}`],
      ['GET', `/workflows/${id}/snapshots`],
      ['GET', `/workflows/${id}/export`],
      ['GET', `/r/workflows/${id}`],
      ['GET', `/r/workflows/slug/${body.workflow_slug}`],
      ['GET', `/r/workflows/slug/${body.workflow_slug}@1`],
    ] as const) {
      const r = await t.http.req(m, path, { ...b, body: m === 'PUT' ? { display_name: 'hijack' } : undefined });
      assert.equal(r.status, 404, `${m} ${path}: ${r.status} ${r.text}`);
      assert.equal(r.body.error_code, 'workflow_not_found');
    }
    const bobSk = (await createCredential(t.http, bob, 'integration')).value;
    assert.equal((await t.http.get(`/r/workflows/${id}`, { token: bobSk })).status, 404);
    const list = (await t.http.get('/r/workflows?per_page=100', b)).body;
    assert.ok(!list.workflow_list.some((w: any) => w.id === id));
    // X-Team-ID of a team the caller is not in is refused before any lookup
    assert.equal((await t.http.get(`/workflows/${id}`, { token: bob.accessToken, team: alice.teamId })).status, 403);
    const w = (await t.http.get(`/workflows/${id}`, as(alice))).body;
    assert.equal(w.display_name, body.display_name);
    assert.equal(w.version, 1);
  });

  test('slug@version: @1 still resolves to the original after two updates; @99 is 404 workflow_version_not_found', async () => {
    const body = comfyBody();
    const id = await createAs(alice, body);
    const a = as(alice);
    const g2 = structuredClone(body.workflow_json);
    g2['3'].inputs.steps = 30;
    assert.equal((await t.http.put(`/workflows/${id}`, { workflow_json: g2, display_name: 'v2', snapshot_note: 'more steps' }, a)).status, 200);
    assert.equal((await t.http.put(`/workflows/${id}`, { parameters: [{ key: 'prompt', node_id: '6', field: 'text', required: true }] }, a)).status, 200);

    const latest = await t.http.get(`/r/workflows/slug/${body.workflow_slug}`, a);
    assert.equal(latest.body.version, 3);
    assert.equal(latest.body.parameters.length, 1);
    assert.equal(latest.body.workflow_json['3'].inputs.steps, 30);
    assert.deepEqual((await t.http.get(`/r/workflows/slug/${body.workflow_slug}@3`, a)).body, latest.body);

    const v1 = await t.http.get(`/r/workflows/slug/${body.workflow_slug}@1`, a);
    assert.equal(v1.status, 200, v1.text);
    assert.deepEqual(Object.keys(v1.body), READ_FIELDS);
    assert.equal(v1.body.id, id);
    assert.equal(v1.body.version, 1);
    assert.equal(v1.body.display_name, body.display_name);
    assert.deepEqual(v1.body.workflow_json, body.workflow_json);
    assert.deepEqual(
      v1.body.parameters.map((p: any) => p.key),
      ['prompt', 'steps', 'sampler'],
    );
    const v2 = (await t.http.get(`/r/workflows/slug/${body.workflow_slug}@2`, a)).body;
    assert.equal(v2.display_name, 'v2');
    assert.equal(v2.parameters.length, 3);

    for (const v of ['99', '4']) {
      const r = await t.http.get(`/r/workflows/slug/${body.workflow_slug}@${v}`, a);
      assert.equal(r.status, 404, r.text);
      assert.equal(r.body.error_code, 'workflow_version_not_found');
    }
    for (const bad of [`${body.workflow_slug}@0`, `${body.workflow_slug}@x`, `${body.workflow_slug}@`, 'Bad_Slug', `${body.workflow_slug}@1@2`]) {
      const r = await t.http.get(`/r/workflows/slug/${encodeURIComponent(bad)}`, a);
      assert.equal(r.status, 400, `${bad}: ${r.text}`);
      assert.equal(r.body.error_code, 'invalid_parameter');
    }
    const missing = await t.http.get(`/r/workflows/slug/${uniqueSlug('none')}`, a);
    assert.equal(missing.status, 404);
    assert.equal(missing.body.error_code, 'workflow_not_found');

    // export of a pinned version is the original definition too
    const e1 = await t.http.get(`/workflows/${id}/export?version=1`, a);
    assert.equal(e1.status, 200);
    assert.equal(e1.body.display_name, body.display_name);
    assert.equal((await t.http.get(`/workflows/${id}/export?version=99`, a)).body.error_code, 'workflow_version_not_found');
  });
});

describe('export / import', () => {
  test('export is the create shape with types and no ids; import into another team round-trips byte-for-byte', async () => {
    for (const body of [comfyBody(), nerfBody()]) {
      const id = await createAs(alice, body);
      const ex = await t.http.get(`/workflows/${id}/export`, as(alice));
      assert.equal(ex.status, 200, ex.text);
      const doc = ex.body;
      assert.ok(!('id' in doc) && !('version' in doc) && !('workflow_status' in doc) && !('created_at' in doc));
      const order = ['workflow_slug', 'display_name', 'workflow_json', 'description', 'parameters', 'tool_type', 'required_labels', 'task_timeout', 'max_retries', 'preferred_gpu', 'default_dispatch_target', 'min_vram_gb', 'required_models'];
      assert.deepEqual(Object.keys(doc), order.filter((k) => k in doc));
      if (body.tool_type === undefined) assert.equal(Object.keys(doc).length, 13);
      for (const p of doc.parameters) assert.equal(typeof p.type, 'string', JSON.stringify(p));
      assert.deepEqual(doc.workflow_json, body.workflow_json);

      const newSlug = uniqueSlug('imported');
      const imp = await t.http.post('/workflows/import', { ...doc, workflow_slug: newSlug }, as(bob));
      assert.equal(imp.status, 200, imp.text);
      assert.deepEqual(Object.keys(imp.body), ['id']);
      assert.notEqual(imp.body.id, id);
      const ex2 = await t.http.get(`/workflows/${imp.body.id}/export`, as(bob));
      assert.equal(ex2.status, 200);
      // byte-for-byte except the slug (ids are never part of the export)
      assert.equal(ex2.text, ex.text.replace(JSON.stringify(body.workflow_slug), JSON.stringify(newSlug)));
      // a second export of the same workflow is identical (deterministic key order)
      assert.equal((await t.http.get(`/workflows/${id}/export`, as(alice))).text, ex.text);

      const w = (await t.http.get(`/workflows/${imp.body.id}`, as(bob))).body;
      assert.equal(w.version, 1);
      const snaps = (await t.http.get(`/workflows/${imp.body.id}/snapshots`, as(bob))).body;
      assert.deepEqual(
        snaps.snapshot_list.map((s: any) => s.snapshot_note),
        ['imported'],
      );
      // the same document again: slug_taken
      const dup = await t.http.post('/workflows/import', { ...doc, workflow_slug: newSlug }, as(bob));
      assert.equal(dup.status, 409);
      assert.equal(dup.body.error_code, 'slug_taken');
    }
  });

  test('import validates like create', async () => {
    const doc = comfyBody();
    doc.parameters[0].node_id = '404';
    const r = await t.http.post('/workflows/import', doc, as(alice));
    assert.equal(r.status, 400);
    assert.match(r.body.error_message, /node "404" does not exist/);
    const u = await t.http.post('/workflows/import', { ...comfyBody(), id: 'x' }, as(alice));
    assert.equal(u.status, 400);
    assert.match(u.body.error_message, /unknown field/);
  });
});

describe('resolveForRun (the run endpoint contract)', () => {
  test('pins the version, returns the snapshot id; archived -> 409 workflow_archived; foreign -> 404', async () => {
    const store = new WorkflowStore(t.node.db);
    const body = comfyBody();
    const id = await createAs(alice, body);
    const r1 = await store.resolveForRun(alice.teamId, { id });
    assert.equal(r1.workflowId, id);
    assert.equal(r1.workflowSlug, body.workflow_slug);
    assert.equal(r1.version, 1);
    assert.equal(r1.status, 'active');
    assert.deepEqual(r1.workflow.workflow_json, body.workflow_json);
    assert.equal(r1.workflow.parameters[1]?.type, 'integer');

    const g2 = structuredClone(body.workflow_json);
    g2['3'].inputs.cfg = 5;
    assert.equal((await t.http.put(`/workflows/${id}`, { workflow_json: g2 }, as(alice))).status, 200);
    const latest = await store.resolveForRun(alice.teamId, { slug: body.workflow_slug });
    assert.equal(latest.version, 2);
    assert.notEqual(latest.snapshotId, r1.snapshotId);
    assert.equal((latest.workflow.workflow_json['3'] as any).inputs.cfg, 5);
    const pinned = await store.resolveForRun(alice.teamId, { slug: body.workflow_slug, version: 1 });
    assert.equal(pinned.snapshotId, r1.snapshotId);
    assert.deepEqual(pinned.workflow, r1.workflow);
    const snaps = (await t.http.get(`/workflows/${id}/snapshots`, as(alice))).body.snapshot_list;
    assert.deepEqual(
      snaps.map((s: any) => s.id),
      [latest.snapshotId, r1.snapshotId],
    );

    await rejectsWith(store.resolveForRun(alice.teamId, { slug: body.workflow_slug, version: 99 }), 'not_found', 'workflow_version_not_found');
    await rejectsWith(store.resolveForRun(bob.teamId, { id }), 'not_found', 'workflow_not_found');
    await rejectsWith(store.resolveForRun(bob.teamId, { slug: body.workflow_slug }), 'not_found', 'workflow_not_found');

    assert.equal((await t.http.put(`/workflows/${id}`, { workflow_status: 'archived' }, as(alice))).status, 200);
    await rejectsWith(store.resolveForRun(alice.teamId, { id }), 'conflict', 'workflow_archived');
    await rejectsWith(store.resolveForRun(alice.teamId, { slug: body.workflow_slug, version: 1 }), 'conflict', 'workflow_archived');
  });
});
