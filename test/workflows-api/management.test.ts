import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode, type HttpResult } from '../helpers/node.js';
import { registerUser, addMember, type TestUser } from '../helpers/identity.js';
import { comfyBody, nerfBody, uniqueSlug, READ_FIELDS } from './fixtures.js';

let t: TestNode;
let owner: TestUser;
let member: TestUser;
let auth: { token: string; team: string };

before(async () => {
  t = await startTestNode({}, 'wfapi');
  owner = await registerUser(t.http);
  member = await registerUser(t.http);
  await addMember(t.http, t.node, owner, member, 'member');
  auth = { token: owner.accessToken, team: owner.teamId };
});
after(async () => {
  await t.stop();
});

const create = (body: unknown): Promise<HttpResult> => t.http.post('/workflows', body, auth);

function expect400(r: HttpResult, mentions: string): void {
  assert.equal(r.status, 400, `expected 400 for ${mentions}, got ${r.status} ${r.text}`);
  assert.equal(r.body.error_code, 'invalid_parameter', r.text);
  assert.ok(String(r.body.error_message).includes(mentions), `error_message ${JSON.stringify(r.body.error_message)} lacks ${JSON.stringify(mentions)}`);
}
async function expectOk(body: unknown, what: string): Promise<string> {
  const r = await create(body);
  assert.equal(r.status, 200, `${what}: ${r.status} ${r.text}`);
  assert.deepEqual(Object.keys(r.body), ['id']);
  return r.body.id as string;
}

describe('POST /workflows: create rules over HTTP (boundary on each side)', () => {
  test('workflow_slug: 1 vs 2 chars, 100 vs 101, format', async () => {
    expect400(await create(comfyBody({ workflow_slug: 'a' })), 'workflow_slug');
    await expectOk(comfyBody({ workflow_slug: 'zq' }), '2 chars');
    const hundred = `s${uniqueSlug('h').replace(/-/g, '')}`.padEnd(100, 'a');
    assert.equal(hundred.length, 100);
    await expectOk(comfyBody({ workflow_slug: hundred }), '100 chars');
    expect400(await create(comfyBody({ workflow_slug: `${hundred.slice(0, 99)}ab` })), 'workflow_slug');
    for (const bad of ['Upper-case', 'double--hyphen', '-lead', 'trail-', 'under_score', 'sp ace']) {
      expect400(await create(comfyBody({ workflow_slug: bad })), 'workflow_slug');
    }
  });

  test('display_name 0/1 and 255/256; description 2000/2001; preferred_gpu 100/101', async () => {
    expect400(await create(comfyBody({ display_name: '' })), 'display_name');
    await expectOk(comfyBody({ display_name: 'x' }), 'display_name 1');
    await expectOk(comfyBody({ display_name: 'd'.repeat(255) }), 'display_name 255');
    expect400(await create(comfyBody({ display_name: 'd'.repeat(256) })), 'display_name');
    await expectOk(comfyBody({ description: 'e'.repeat(2000) }), 'description 2000');
    expect400(await create(comfyBody({ description: 'e'.repeat(2001) })), 'description');
    await expectOk(comfyBody({ preferred_gpu: 'g'.repeat(100) }), 'preferred_gpu 100');
    expect400(await create(comfyBody({ preferred_gpu: 'g'.repeat(101) })), 'preferred_gpu');
  });

  test('numbers: task_timeout/max_retries -1 vs 0; min_vram_gb 2048 vs 2048.1, -0.1 vs 0', async () => {
    expect400(await create(comfyBody({ task_timeout: -1 })), 'task_timeout');
    expect400(await create(comfyBody({ task_timeout: 1.5 })), 'task_timeout');
    await expectOk(comfyBody({ task_timeout: 0, max_retries: 0, min_vram_gb: 0 }), 'zeros');
    expect400(await create(comfyBody({ max_retries: -1 })), 'max_retries');
    await expectOk(comfyBody({ min_vram_gb: 2048 }), 'min_vram_gb 2048');
    expect400(await create(comfyBody({ min_vram_gb: 2048.1 })), 'min_vram_gb');
    expect400(await create(comfyBody({ min_vram_gb: -0.1 })), 'min_vram_gb');
    expect400(await create(comfyBody({ min_vram_gb: '8' })), 'min_vram_gb');
  });

  test('enums: tool_type and default_dispatch_target', async () => {
    expect400(await create(comfyBody({ tool_type: 'blender' })), 'tool_type');
    expect400(await create(comfyBody({ default_dispatch_target: 'lambda' })), 'default_dispatch_target');
    await expectOk(comfyBody({ default_dispatch_target: 'comfy_cloud' }), 'comfy_cloud');
    await expectOk(nerfBody(), 'nerfstudio');
  });

  test('required_models: 512 vs 513 entries, path 512 vs 513 chars, unsafe paths', async () => {
    const paths = (n: number): string[] => Array.from({ length: n }, (_, i) => `loras/m${i}.safetensors`);
    await expectOk(comfyBody({ required_models: paths(512) }), '512 entries');
    expect400(await create(comfyBody({ required_models: paths(513) })), 'required_models');
    // segments are at most 255 characters (the shared model-path rule): a long path is several of them
    const long = (len: number): string => {
      const head = `checkpoints/${'a'.repeat(200)}/${'b'.repeat(200)}/`;
      return head + 'm'.repeat(len - head.length);
    };
    await expectOk(comfyBody({ required_models: [long(512)] }), 'path 512');
    expect400(await create(comfyBody({ required_models: [long(513)] })), 'required_models.0');
    for (const bad of ['/abs/model.ckpt', 'loras/../../etc/passwd', 'loras\\x.safetensors']) {
      expect400(await create(comfyBody({ required_models: [bad] })), 'required_models.0');
    }
  });

  test('unknown fields are rejected (no mass assignment), at the top level and in a ParameterDef', async () => {
    for (const extra of [{ id: '0193a1b2-0000-7000-8000-000000000000' }, { version: 7 }, { workflow_status: 'archived' }, { team_id: owner.teamId }]) {
      expect400(await create(comfyBody(extra)), 'unknown field');
    }
    const body = comfyBody();
    body.parameters[0].widget = 'textarea';
    expect400(await create(body), 'unknown field(s): widget');
  });

  test('graph and parameter errors name the node / parameter', async () => {
    const g = comfyBody();
    delete g.workflow_json['3'].class_type;
    expect400(await create(g), '"3"');
    const p = comfyBody();
    p.parameters[0].node_id = '42';
    expect400(await create(p), 'node "42" does not exist');
    const f = comfyBody();
    f.parameters[1].field = 'stepz';
    expect400(await create(f), 'has no input "stepz"');
    const ns = nerfBody();
    ns.workflow_json.train.iterations = 5;
    expect400(await create(ns), 'workflow_json.train: unknown field(s): iterations');
  });

  test('nerfstudio: every input type and export format either runs or is refused at create/update naming the field', async () => {
    const ns = (wf: Record<string, unknown>): Record<string, any> => {
      const b = nerfBody();
      b.workflow_json = { ...b.workflow_json, ...wf };
      return b;
    };
    // these run end to end on the fake toolchain (test/agent-executors/nerfstudio.test.ts)
    for (const input_type of ['images', 'video', 'polycam', 'record3d', 'metashape', 'realitycapture', 'odm']) await expectOk(ns({ process_data: { input_type, num_downscales: 1 } }), input_type);
    await expectOk(ns({ method: 'nerfacto', export: { format: 'pointcloud' } }), 'nerfacto pointcloud');
    await expectOk(ns({ method: 'nerfacto', export: { format: 'mesh' } }), 'nerfacto mesh (poisson)');
    await expectOk(ns({ method: 'nerfacto', export: { format: 'mesh', mesh_method: 'tsdf' } }), 'nerfacto mesh (tsdf)');
    await expectOk(ns({ export: undefined }), 'no export: the checkpoint');
    // these cannot: 400 naming the field, before any run
    expect400(await create(ns({ export: { format: 'pointcloud' } })), 'workflow_json.export.format: pointcloud cannot export a splatfacto run');
    expect400(await create(ns({ method: 'nerfacto', export: { format: 'gaussian-splat' } })), 'workflow_json.export.format: gaussian-splat needs a splatfacto-family method');
    expect400(await create(ns({ method: 'nerfacto', export: { format: 'mesh', mesh_method: 'marching-cubes' } })), 'workflow_json.export.mesh_method: marching-cubes needs an SDF method');
    expect400(await create(ns({ process_data: { input_type: 'polycam', matching_method: 'exhaustive' } })), 'workflow_json.process_data.matching_method: only applies to process_data.input_type images or video');
    expect400(await create(ns({ method: 'dnerf' })), 'workflow_json.method: dnerf cannot train on a capture');
    const id = await expectOk(ns({}), 'splat');
    expect400(await t.http.put(`/workflows/${id}`, { workflow_json: ns({ method: 'nerfacto', export: { format: 'mesh', mesh_method: 'tsdf', normal_method: 'open3d' } }).workflow_json }, auth), 'workflow_json.export.normal_method: ns-export tsdf has no normal method');
  });

  test('malformed JSON and a non-object body are 400', async () => {
    const r = await t.http.req('POST', '/workflows', { ...auth, rawBody: '{"workflow_slug":', headers: { 'content-type': 'application/json' } });
    assert.equal(r.status, 400);
    expect400(await create([1, 2]), '');
  });

  test('409 slug_taken, including across teams', async () => {
    const body = comfyBody();
    await expectOk(body, 'first');
    const again = await create({ ...comfyBody(), workflow_slug: body.workflow_slug });
    assert.equal(again.status, 409, again.text);
    assert.equal(again.body.error_code, 'slug_taken');
    const other = await registerUser(t.http);
    const foreign = await t.http.post('/workflows', { ...comfyBody(), workflow_slug: body.workflow_slug }, { token: other.accessToken, team: other.teamId });
    assert.equal(foreign.status, 409);
    assert.equal(foreign.body.error_code, 'slug_taken');
  });
});

describe('read, update, snapshots, delete', () => {
  test('GET /workflows/{id} returns exactly the spec fields with inferred parameter types', async () => {
    const body = comfyBody();
    const id = await expectOk(body, 'create');
    const r = await t.http.get(`/workflows/${id}`, auth);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(Object.keys(r.body), READ_FIELDS);
    assert.equal(r.body.id, id);
    assert.equal(r.body.workflow_slug, body.workflow_slug);
    assert.equal(r.body.version, 1);
    assert.equal(r.body.workflow_status, 'active');
    assert.equal(r.body.tool_type, 'comfyui');
    assert.equal(r.body.default_dispatch_target, 'agent');
    assert.deepEqual(r.body.workflow_json, body.workflow_json);
    assert.deepEqual(
      r.body.parameters.map((p: any) => [p.key, p.type]),
      [
        ['prompt', 'string'],
        ['steps', 'integer'],
        ['sampler', 'string'],
      ],
    );
    assert.match(r.body.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });

  test('path ids: not a uuid -> 400 invalid_parameter; unknown -> 404 workflow_not_found', async () => {
    for (const path of ['/workflows/nope', '/r/workflows/123']) {
      const r = await t.http.get(path, auth);
      assert.equal(r.status, 400, path);
      assert.equal(r.body.error_code, 'invalid_parameter');
    }
    const unknown = '0193a1b2-0000-7000-8000-000000000000';
    for (const [m, path] of [
      ['GET', `/workflows/${unknown}`],
      ['PUT', `/workflows/${unknown}`],
      ['DELETE', `/workflows/${unknown}`],
      ['GET', `/workflows/${unknown}/snapshots`],
      ['GET', `/workflows/${unknown}/export`],
      ['GET', `/r/workflows/${unknown}`],
    ] as const) {
      const r = await t.http.req(m, path, { ...auth, body: m === 'PUT' ? { display_name: 'x' } : undefined });
      assert.equal(r.status, 404, `${m} ${path}: ${r.text}`);
      assert.equal(r.body.error_code, 'workflow_not_found');
    }
  });

  test('PUT changes only the given fields, bumps version and writes a snapshot with the note', async () => {
    const body = comfyBody();
    const id = await expectOk(body, 'create');
    const u = await t.http.put(`/workflows/${id}`, { display_name: 'Renamed', snapshot_note: 'rename' }, auth);
    assert.equal(u.status, 200, u.text);
    assert.deepEqual(u.body, { id });
    const r = (await t.http.get(`/workflows/${id}`, auth)).body;
    assert.equal(r.version, 2);
    assert.equal(r.display_name, 'Renamed');
    assert.equal(r.description, body.description);
    assert.deepEqual(r.workflow_json, body.workflow_json);
    assert.equal(r.max_retries, 2);
    assert.ok(r.updated_at >= r.created_at);

    const s = await t.http.get(`/workflows/${id}/snapshots`, auth);
    assert.equal(s.status, 200, s.text);
    assert.deepEqual(Object.keys(s.body), ['snapshot_list', 'page_meta']);
    assert.deepEqual(s.body.page_meta, { current_page: 1, per_page: 20, total_count: 2 });
    assert.deepEqual(
      s.body.snapshot_list.map((x: any) => [x.workflow_version, x.snapshot_note]),
      [
        [2, 'rename'],
        [1, 'created'],
      ],
    );
    for (const x of s.body.snapshot_list) {
      assert.deepEqual(Object.keys(x), ['id', 'workflow_id', 'workflow_version', 'created_at', 'snapshot_note']);
      assert.equal(x.workflow_id, id);
    }
  });

  test('an invalid PUT changes nothing (no version bump, no snapshot)', async () => {
    const id = await expectOk(comfyBody(), 'create');
    expect400(await t.http.put(`/workflows/${id}`, {}, auth), 'at least one field');
    expect400(await t.http.put(`/workflows/${id}`, { version: 9 }, auth), 'unknown field');
    // a new graph that no longer has the parameters' node is checked against the stored parameters
    const g = comfyBody().workflow_json;
    delete g['6'];
    g['3'].inputs.positive = ['7', 0];
    expect400(await t.http.put(`/workflows/${id}`, { workflow_json: g }, auth), 'node "6" does not exist');
    const r = (await t.http.get(`/workflows/${id}`, auth)).body;
    assert.equal(r.version, 1);
    assert.equal((await t.http.get(`/workflows/${id}/snapshots`, auth)).body.page_meta.total_count, 1);
  });

  test('PUT to a slug another workflow has is 409 slug_taken', async () => {
    const a = comfyBody();
    await expectOk(a, 'a');
    const b = await expectOk(comfyBody(), 'b');
    const r = await t.http.put(`/workflows/${b}`, { workflow_slug: a.workflow_slug }, auth);
    assert.equal(r.status, 409);
    assert.equal(r.body.error_code, 'slug_taken');
  });

  test('concurrent PUTs: every success is one version, losers get 409 workflow_version_conflict', async () => {
    const id = await expectOk(comfyBody(), 'create');
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => t.http.put(`/workflows/${id}`, { display_name: `n${i}` }, auth)));
    const ok = results.filter((r) => r.status === 200).length;
    for (const r of results) {
      if (r.status !== 200) {
        assert.equal(r.status, 409, r.text);
        assert.equal(r.body.error_code, 'workflow_version_conflict');
      }
    }
    assert.ok(ok >= 1);
    const w = (await t.http.get(`/workflows/${id}`, auth)).body;
    assert.equal(w.version, 1 + ok);
    const s = (await t.http.get(`/workflows/${id}/snapshots?per_page=100`, auth)).body;
    assert.equal(s.page_meta.total_count, 1 + ok);
    assert.deepEqual(
      s.snapshot_list.map((x: any) => x.workflow_version),
      Array.from({ length: 1 + ok }, (_, i) => 1 + ok - i),
    );
  });

  test('archive via PUT: status visible on reads and filterable; reactivate', async () => {
    const id = await expectOk(comfyBody(), 'create');
    expect400(await t.http.put(`/workflows/${id}`, { workflow_status: 'deleted' }, auth), 'workflow_status');
    const a = await t.http.put(`/workflows/${id}`, { workflow_status: 'archived', snapshot_note: 'retired' }, auth);
    assert.equal(a.status, 200, a.text);
    const w = (await t.http.get(`/workflows/${id}`, auth)).body;
    assert.equal(w.workflow_status, 'archived');
    assert.equal(w.version, 2);
    const rt = (await t.http.get(`/r/workflows/${id}`, auth)).body;
    assert.equal(rt.workflow_status, 'archived');
    const archived = (await t.http.get('/workflows?workflow_status=archived&per_page=100', auth)).body;
    assert.ok(archived.workflow_list.some((x: any) => x.id === id));
    assert.ok(archived.workflow_list.every((x: any) => x.workflow_status === 'archived'));
    const active = (await t.http.get('/workflows?workflow_status=active&per_page=100', auth)).body;
    assert.ok(!active.workflow_list.some((x: any) => x.id === id));
    expect400(await t.http.get('/workflows?workflow_status=gone', auth), 'workflow_status');
    assert.equal((await t.http.put(`/workflows/${id}`, { workflow_status: 'active' }, auth)).status, 200);
    assert.equal((await t.http.get(`/workflows/${id}`, auth)).body.workflow_status, 'active');
  });

  test('DELETE removes the workflow and its snapshots and frees the slug', async () => {
    const body = comfyBody();
    const id = await expectOk(body, 'create');
    await t.http.put(`/workflows/${id}`, { display_name: 'v2' }, auth);
    const d = await t.http.del(`/workflows/${id}`, auth);
    assert.equal(d.status, 200, d.text);
    assert.deepEqual(d.body, { is_success: true });
    assert.equal((await t.http.get(`/workflows/${id}`, auth)).status, 404);
    assert.equal((await t.http.del(`/workflows/${id}`, auth)).status, 404);
    const rows = await t.node.db.execute('select 1 from workflow_snapshots where workflow_id = ?', [id]);
    assert.equal(rows.length, 0);
    await expectOk({ ...comfyBody(), workflow_slug: body.workflow_slug }, 'slug reused');
  });
});

describe('roles and credentials on the management surface', () => {
  test('a member reads but cannot create, update, delete or import (403)', async () => {
    const id = await expectOk(comfyBody(), 'create');
    const m = { token: member.accessToken, team: owner.teamId };
    assert.equal((await t.http.get(`/workflows/${id}`, m)).status, 200);
    assert.equal((await t.http.get('/workflows', m)).status, 200);
    assert.equal((await t.http.get(`/workflows/${id}/snapshots`, m)).status, 200);
    assert.equal((await t.http.get(`/workflows/${id}/export`, m)).status, 200);
    for (const [method, path, body] of [
      ['POST', '/workflows', comfyBody()],
      ['POST', '/workflows/import', comfyBody()],
      ['PUT', `/workflows/${id}`, { display_name: 'nope' }],
      ['DELETE', `/workflows/${id}`, undefined],
    ] as const) {
      const r = await t.http.req(method, path, { ...m, body });
      assert.equal(r.status, 403, `${method} ${path}: ${r.text}`);
    }
    assert.equal((await t.http.get(`/workflows/${id}`, auth)).body.version, 1);
  });

  test('no credential -> 401; JWT without X-Team-ID -> 400', async () => {
    assert.equal((await t.http.get('/workflows')).status, 401);
    const r = await t.http.get('/workflows', { token: owner.accessToken });
    assert.equal(r.status, 400, r.text);
  });
});

describe('lists and pagination', () => {
  test('workflow_list: envelope, newest first, bounds', async () => {
    const u = await registerUser(t.http);
    const a = { token: u.accessToken, team: u.teamId };
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await t.http.post('/workflows', comfyBody({ display_name: `w${i}` }), a);
      assert.equal(r.status, 200, r.text);
      ids.push(r.body.id);
    }
    const p1 = await t.http.get('/workflows?per_page=2', a);
    assert.equal(p1.status, 200);
    assert.deepEqual(Object.keys(p1.body), ['workflow_list', 'page_meta']);
    assert.deepEqual(p1.body.page_meta, { current_page: 1, per_page: 2, total_count: 5 });
    assert.deepEqual(
      p1.body.workflow_list.map((w: any) => w.id),
      [ids[4], ids[3]],
    );
    const p3 = await t.http.get('/workflows?per_page=2&current_page=3', a);
    assert.deepEqual(
      p3.body.workflow_list.map((w: any) => w.id),
      [ids[0]],
    );
    const beyond = await t.http.get('/workflows?per_page=2&current_page=9', a);
    assert.deepEqual(beyond.body.workflow_list, []);
    assert.equal(beyond.body.page_meta.total_count, 5);
    const rt = await t.http.get('/r/workflows', a);
    assert.deepEqual(rt.body.page_meta, { current_page: 1, per_page: 20, total_count: 5 });
    assert.deepEqual(Object.keys(rt.body.workflow_list[0]), READ_FIELDS);
    for (const q of ['per_page=0', 'per_page=101', 'current_page=0', 'tool_type=blender']) {
      assert.equal((await t.http.get(`/workflows?${q}`, a)).status, 400, q);
    }
    const ns = await t.http.get('/workflows?tool_type=nerfstudio', a);
    assert.equal(ns.body.page_meta.total_count, 0);
  });
});
