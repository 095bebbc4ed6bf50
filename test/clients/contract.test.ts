/**
 * Contract conformance of the response envelopes, checked generically over the OpenAPI document
 * (GET /api/v1/openapi.json), so a route added later cannot drift from interface-spec.md
 * "Common envelopes":
 *   - Paginated list: a named array (`*_list`) plus page_meta {current_page, per_page, total_count},
 *     current_page and per_page query parameters ("all list endpoints").
 *   - Create/update result: {id: <uuid>}.
 *   - Action result: {is_success: boolean}, always true on success.
 * Every JSON operation of the document is classified from its method and path alone (never from
 * its response, which is what is checked): a GET is a list unless its last path segment is a
 * parameter or it is a named singleton; a POST to a collection (a path that also has a list GET) or
 * to `/import` is a create; a PUT is an update; any other POST, PATCH or DELETE is an action. The
 * few operations whose result shape the contract (or api-decisions.md) defines otherwise are listed
 * with the fields of that shape. An operation that fits no class fails the test: a new route is
 * either one of these or added to a table on purpose. Live calls then check real answers.
 * Plus the other points of issue 28 section 2 that are visible on the wire: info.version 1.0.0,
 * dk- behaving as the JWT on /credentials, the 500 MB single-part limit, "" for unset strings.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { pairDevice, registerUser, type TestUser } from '../helpers/identity.js';
import { loadConfig } from '../../src/shared/config.js';

type Json = Record<string, any>;

let t: TestNode;
let doc: Json;
let owner: TestUser;
before(async () => {
  t = await startTestNode({}, 'clients_contract');
  const r = await fetch(`${t.baseUrl}/openapi.json`);
  assert.equal(r.status, 200);
  doc = (await r.json()) as Json;
  owner = await registerUser(t.http);
});
after(async () => {
  await t.stop();
});

const as = (u: TestUser) => ({ token: u.accessToken, team: u.teamId });
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** Resolves $ref (and a single allOf) to the schema object. */
function resolve(s: Json | undefined): Json | undefined {
  if (!s) return s;
  if (typeof s.$ref === 'string') return resolve(doc.components.schemas[s.$ref.split('/').pop() as string]);
  if (Array.isArray(s.allOf) && s.allOf.length === 1) return resolve(s.allOf[0]);
  return s;
}

/** The JSON schema of the operation's success answer, or null when it answers no JSON (SSE, proxy, HTML, bytes). */
function successSchema(op: Json): { status: string; schema: Json } | null {
  for (const status of ['200', '201', '202']) {
    const c = op.responses?.[status]?.content;
    if (!c) continue;
    if (!c['application/json']) return null;
    return { status, schema: resolve(c['application/json'].schema) ?? {} };
  }
  return null;
}

const isParam = (seg: string): boolean => /^\{.+\}$/.test(seg);
const lastSeg = (path: string): string => path.split('/').filter(Boolean).at(-1) ?? '';

/** Operations outside the three envelopes (not JSON APIs of the contract's kind). */
const SKIP = new Set(['GET /openapi.json', 'POST /mcp', 'GET /mcp', 'DELETE /mcp']);

/** GETs whose last segment is a literal but which read one record, not a list. */
const SINGLETONS: Record<string, string> = {
  'GET /server-info': 'server info (contract)',
  'GET /healthz': 'liveness probe',
  'GET /readyz': 'readiness probe',
  'GET /users/me': 'user profile (contract)',
  'GET /teams/current': 'the X-Team-ID team',
  'GET /r/tasks/{taskId}/result': 'result record (contract)',
  'GET /agents/{agentId}/tunnel': 'tunnel status (contract)',
  'GET /credentials/{credentialId}/scheduling': "a credential's scheduling settings (one record per credential)",
  'GET /workflows/{workflowId}/export': 'the create request shape (contract)',
};

/** Result shapes the contract or api-decisions.md defines otherwise: the fields they must require. */
const DEFINED: Record<string, { status: string; fields: string[]; source: string }> = {
  'POST /r/workflows/{workflowId}/run': { status: '202', fields: ['task_id'], source: 'spec: 202 {task_id}' },
  'POST /r/workflows/slug/{workflowSlug}/run': { status: '202', fields: ['task_id'], source: 'spec: 202 {task_id}' },
  'POST /r/files/presign': { status: '200', fields: ['file_key', 'upload_url', 'upload_headers'], source: 'spec' },
  'POST /r/invoke/{serviceSlug}': { status: '200', fields: ['status_code', 'headers', 'body_base64'], source: 'spec' },
  'POST /uploads/multipart/initiate': { status: '200', fields: ['upload_id', 'storage_key', 'part_size', 'part_count'], source: 'spec' },
  'POST /uploads/multipart/presign-parts': { status: '200', fields: ['part_list'], source: 'api-decisions' },
  'POST /uploads/multipart/complete': { status: '200', fields: ['file_key'], source: 'spec: the same file_key shape' },
  'POST /models/presign': { status: '200', fields: ['storage_key', 'upload_url', 'upload_headers'], source: 'api-decisions' },
  'POST /nodes/presign': { status: '200', fields: ['storage_key', 'upload_url', 'upload_headers'], source: 'api-decisions: same shape for /nodes' },
  'POST /auth/register': { status: '200', fields: ['id'], source: 'api-decisions: {id}' },
  'POST /auth/login': { status: '200', fields: ['access_token', 'refresh_token', 'token_type', 'expires_in'], source: 'api-decisions' },
  'POST /auth/refresh': { status: '200', fields: ['access_token', 'refresh_token', 'token_type', 'expires_in'], source: 'api-decisions' },
  'POST /desktop/pair/start': { status: '200', fields: ['pairing_id', 'user_code', 'poll_secret', 'expires_in', 'poll_interval'], source: 'api-decisions' },
  'POST /desktop/pair/poll': { status: '200', fields: ['pairing_status'], source: 'api-decisions' },
  'POST /webhooks/{webhookId}/deliveries/{deliveryId}/redeliver': { status: '200', fields: ['id'], source: 'creates a delivery: {id} of the new one' },
};

type Kind = 'list' | 'detail' | 'create' | 'update' | 'action' | 'defined';

function classify(method: string, path: string, paths: Json): Kind | null {
  const key = `${method} ${path}`;
  if (DEFINED[key]) return 'defined';
  const last = lastSeg(path);
  if (method === 'GET') return isParam(last) || SINGLETONS[key] ? 'detail' : 'list';
  if (method === 'PUT') return 'update';
  if (method === 'POST' && !isParam(last) && (paths[path]?.get || last === 'import')) return 'create';
  if (method === 'POST' || method === 'PATCH' || method === 'DELETE') return 'action';
  return null;
}

interface Op {
  method: string;
  path: string;
  op: Json;
  kind: Kind;
  status: string;
  schema: Json;
}

function operations(): Op[] {
  const out: Op[] = [];
  const unclassified: string[] = [];
  for (const [path, item] of Object.entries(doc.paths as Json)) {
    for (const [m, op] of Object.entries(item as Json)) {
      if (!['get', 'post', 'put', 'patch', 'delete'].includes(m)) continue;
      const method = m.toUpperCase();
      if (SKIP.has(`${method} ${path}`)) continue;
      const ok = successSchema(op as Json);
      if (!ok) continue;
      const kind = classify(method, path, doc.paths);
      if (!kind) unclassified.push(`${method} ${path}`);
      else out.push({ method, path, op: op as Json, kind, ...ok });
    }
  }
  assert.deepEqual(unclassified, [], 'every JSON operation is a list, detail, create, update, action or a defined shape');
  return out;
}

const required = (s: Json): string[] => (Array.isArray(s.required) ? (s.required as string[]) : []);
const props = (s: Json): Json => (s.properties ?? {}) as Json;

test('OpenAPI: every list answers a named *_list array and page_meta {current_page, per_page, total_count}, and takes current_page and per_page', () => {
  const bad: string[] = [];
  const lists = operations().filter((o) => o.kind === 'list');
  assert.ok(lists.length >= 20, `lists found: ${lists.length}`);
  for (const o of lists) {
    const s = o.schema;
    const where = `${o.method} ${o.path}`;
    if (s.type !== 'object') {
      bad.push(`${where}: answers ${s.type ?? 'an untyped value'}, not {*_list, page_meta}`);
      continue;
    }
    const arrays = Object.entries(props(s)).filter(([, v]) => resolve(v as Json)?.type === 'array');
    const named = arrays.filter(([k]) => k.endsWith('_list'));
    if (named.length !== 1 || arrays.length !== 1) bad.push(`${where}: one named *_list array expected, found ${arrays.map(([k]) => k).join(', ') || 'none'}`);
    for (const [k] of named) if (!required(s).includes(k)) bad.push(`${where}: ${k} is not required`);
    const meta = resolve(props(s).page_meta as Json | undefined);
    if (!meta || !required(s).includes('page_meta')) bad.push(`${where}: no required page_meta`);
    else {
      for (const f of ['current_page', 'per_page', 'total_count']) {
        if (resolve(props(meta)[f] as Json)?.type !== 'integer' || !required(meta).includes(f)) bad.push(`${where}: page_meta.${f} is not a required integer`);
      }
    }
    const q = ((o.op.parameters ?? []) as Json[]).filter((p) => p.in === 'query').map((p) => p.name as string);
    for (const p of ['current_page', 'per_page']) if (!q.includes(p)) bad.push(`${where}: no ${p} query parameter`);
  }
  assert.deepEqual(bad, []);
});

test('OpenAPI: no answer outside the lists carries an unpaged top-level array (a list hidden as a record)', () => {
  const bad: string[] = [];
  for (const o of operations()) {
    if (o.kind === 'list') continue;
    if (o.schema.type === 'array') bad.push(`${o.method} ${o.path}: a bare array`);
    // a record may hold a list field (team_list, instance_list); a singleton holds its contract's fields (oauth_providers)
    if (o.method !== 'GET' || props(o.schema).id || SINGLETONS[`${o.method} ${o.path}`]) continue;
    for (const [k, v] of Object.entries(props(o.schema))) if (resolve(v as Json)?.type === 'array') bad.push(`${o.method} ${o.path}: top-level array ${k} without page_meta`);
  }
  assert.deepEqual(bad, []);
});

test('OpenAPI: every create and update answers {id} (required), every action {is_success: true}, defined shapes their fields', () => {
  const bad: string[] = [];
  const ops = operations();
  const count = (k: Kind): number => ops.filter((o) => o.kind === k).length;
  assert.ok(count('create') >= 8 && count('update') >= 6 && count('action') >= 20, `creates ${count('create')}, updates ${count('update')}, actions ${count('action')}`);
  for (const o of ops) {
    const where = `${o.method} ${o.path}`;
    const s = o.schema;
    if (o.kind === 'create' || o.kind === 'update') {
      if (o.status !== '200') bad.push(`${where}: answers ${o.status}, not 200`);
      const id = resolve(props(s).id as Json | undefined);
      if (!id || id.type !== 'string' || !required(s).includes('id')) bad.push(`${where}: no required string id`);
    } else if (o.kind === 'action') {
      if (o.status !== '200') bad.push(`${where}: answers ${o.status}, not 200`);
      const ok = resolve(props(s).is_success as Json | undefined);
      if (!ok || ok.type !== 'boolean' || ok.const !== true || !required(s).includes('is_success')) bad.push(`${where}: no required is_success: true`);
    } else if (o.kind === 'defined') {
      const d = DEFINED[where]!;
      if (o.status !== d.status) bad.push(`${where}: answers ${o.status}, not ${d.status} (${d.source})`);
      for (const f of d.fields) if (!props(s)[f] || !required(s).includes(f)) bad.push(`${where}: ${f} missing or optional (${d.source})`);
    }
  }
  // a defined shape that is no longer in the document is a stale table row
  const inDoc = new Set(ops.map((o) => `${o.method} ${o.path}`));
  for (const k of Object.keys(DEFINED)) if (!inDoc.has(k)) bad.push(`${k}: listed as a defined shape but not in the document`);
  for (const k of Object.keys(SINGLETONS)) if (!doc.paths[k.slice(k.indexOf(' ') + 1)]?.get) bad.push(`${k}: listed as a singleton but not in the document`);
  assert.deepEqual(bad, []);
});

test('live: every list the team can read answers page_meta (defaults 1/20, echoes the page asked), creates answer {id}, actions {is_success: true}', async () => {
  // resources for the lists under a parameter, made through the API (creates checked on the way)
  const created: Record<string, string> = {};
  const mk = async (path: string, body: Json, param: string): Promise<void> => {
    const r = await t.http.post(path, body, as(owner));
    assert.equal(r.status, 200, `${path}: ${r.text}`);
    assert.deepEqual(Object.keys(r.body), ['id'], `${path} answers exactly {id}`);
    assert.match(r.body.id, UUID, path);
    created[param] = r.body.id;
  };
  await mk('/workflows', { workflow_slug: `contract-${Date.now().toString(36)}`, display_name: 'contract', workflow_json: { '1': { class_type: 'SaveImage', inputs: {} } } }, 'workflowId');
  await mk('/webhooks', { display_name: 'contract', webhook_url: 'https://127.0.0.1:9/hook', webhook_events: ['task.completed'] }, 'webhookId');

  const lists = operations().filter((o) => o.kind === 'list' && o.method === 'GET');
  const called: string[] = [];
  for (const o of lists) {
    const params = [...o.path.matchAll(/\{(\w+)\}/g)].map((m) => m[1] as string);
    if (params.some((p) => !created[p])) continue;
    const path = o.path.replace(/\{(\w+)\}/g, (_m, p: string) => created[p] as string);
    const r = await t.http.get(path, as(owner));
    assert.equal(r.status, 200, `${path}: ${r.text}`);
    assert.deepEqual(r.body.page_meta, { current_page: 1, per_page: 20, total_count: r.body.page_meta?.total_count }, path);
    assert.equal(typeof r.body.page_meta.total_count, 'number', path);
    const name = Object.keys(r.body).find((k) => k.endsWith('_list'));
    assert.ok(name && Array.isArray(r.body[name]), `${path}: a named *_list array`);
    const p2 = await t.http.get(`${path}${path.includes('?') ? '&' : '?'}current_page=2&per_page=1`, as(owner));
    assert.equal(p2.status, 200, `${path} page 2: ${p2.text}`);
    assert.deepEqual({ current_page: p2.body.page_meta.current_page, per_page: p2.body.page_meta.per_page }, { current_page: 2, per_page: 1 }, path);
    assert.ok(p2.body[name].length <= 1, path);
    called.push(o.path);
  }
  for (const must of ['/cloud-providers', '/workflows/{workflowId}/snapshots', '/webhooks/{webhookId}/deliveries', '/credentials', '/r/agents', '/audit-log']) assert.ok(called.includes(must), `${must} was called live`);

  // an update and actions, live
  const up = await t.http.put(`/webhooks/${created.webhookId}`, { webhook_status: 'disabled' }, as(owner));
  assert.deepEqual(up.body, { id: created.webhookId });
  const del = await t.http.del(`/webhooks/${created.webhookId}`, as(owner));
  assert.deepEqual(del.body, { is_success: true });
  const readAll = await t.http.post('/notifications/read-all', undefined, as(owner));
  assert.equal(readAll.status, 200, readAll.text);
  assert.equal(readAll.body.is_success, true);
});

test('the interface description is at version 1.0.0 (info.version)', () => {
  assert.equal(doc.info.version, '1.0.0');
});

test('GET /cloud-providers has page_meta; PUT /cloud-providers/{slug} answers {id} (documented; the live PUT is in test/cloud)', () => {
  const list = resolve(doc.paths['/cloud-providers'].get.responses['200'].content['application/json'].schema)!;
  assert.ok(required(list).includes('page_meta') && required(list).includes('provider_list'));
  const put = resolve(doc.paths['/cloud-providers/{provider_slug}'].put.responses['200'].content['application/json'].schema)!;
  assert.ok(required(put).includes('id'));
});

test('a dk- behaves as the JWT on /credentials: list, create, revoke', async () => {
  const u = await registerUser(t.http);
  const dev = await pairDevice(t.http, u);
  const dk = { token: dev.deviceCredential };
  const list = await t.http.get('/credentials', dk);
  assert.equal(list.status, 200, list.text);
  assert.ok(list.body.page_meta);
  const made = await t.http.post('/credentials', { credential_type: 'integration', display_name: 'made by a device' }, dk);
  assert.equal(made.status, 200, made.text);
  assert.match(made.body.credential_value, /^sk-/);
  const after = await t.http.get('/credentials', { token: u.accessToken, team: u.teamId });
  const row = after.body.credential_list.find((c: Json) => c.id === made.body.id);
  assert.equal(row?.creator_id, u.userId, 'created as the device\'s user');
  const rev = await t.http.del(`/credentials/${made.body.id}`, dk);
  assert.deepEqual(rev.body, { is_success: true });
  assert.equal((await t.http.get('/r/workflows', { token: made.body.credential_value })).status, 401, 'revoked');
});

test('the single-part upload limit defaults to the contract\'s 500 MB (500,000,000 bytes), live at presign', async () => {
  assert.equal(loadConfig({}, {}).GANTRY_MAX_UPLOAD_BYTES, 500_000_000);
  const cap = t.node.config.GANTRY_MAX_UPLOAD_BYTES;
  assert.equal(cap, 500_000_000, 'the test node runs the default');
  const at = await t.http.post('/r/files/presign', { file_name: 'a.bin', file_size: 500_000_000, content_type: 'application/octet-stream' }, as(owner));
  assert.equal(at.status, 200, at.text);
  const over = await t.http.post('/r/files/presign', { file_name: 'a.bin', file_size: 500_000_001, content_type: 'application/octet-stream' }, as(owner));
  assert.equal(over.status, 400, over.text);
  assert.equal(over.body.error_code, 'file_too_large');
});

test('description and preferred_gpu read as strings ("" when unset), never null; the document types them as strings', async () => {
  const slug = `contract-empty-${Date.now().toString(36)}`;
  const c = await t.http.post('/workflows', { workflow_slug: slug, display_name: 'no description', workflow_json: { '1': { class_type: 'SaveImage', inputs: {} } } }, as(owner));
  assert.equal(c.status, 200, c.text);
  for (const path of [`/workflows/${c.body.id}`, `/r/workflows/${c.body.id}`, `/r/workflows/slug/${slug}`]) {
    const r = await t.http.get(path, as(owner));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.description, '', path);
    assert.equal(r.body.preferred_gpu, '', path);
  }
  const listed = (await t.http.get('/workflows?per_page=100', as(owner))).body.workflow_list.find((w: Json) => w.id === c.body.id);
  assert.equal(listed.description, '');
  const wf = resolve(doc.components.schemas.Workflow)!;
  for (const f of ['description', 'preferred_gpu']) assert.equal(props(wf)[f].type, 'string', f);
});
