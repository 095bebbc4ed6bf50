/**
 * The OpenAPI 3.1 document (GET /api/v1/openapi.json): every route of the live route table is
 * documented (routes added without `doc` show up by name), @redocly/cli lint finds no error, the
 * auth schemes, error envelope, 202 run, SSE and webhooks are described, the response validator
 * used by HttpClient catches a body that drifts from the document, and /docs serves the reference.
 * The checked-in SDK document and types (packages/sdk) are regenerated here and must be current.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { ResponseValidator } from '../helpers/openapi-validate.js';
import { docPath } from '../../src/edge/openapi/build.js';
import { deliveryBody } from '../../src/events/store.js';
import { DOC_FILE, TYPES_FILE, docText, typesOf } from '../../scripts/openapi-gen.js';

const root = new URL('../..', import.meta.url).pathname;
let t: TestNode;
let doc: Record<string, any>;
before(async () => {
  t = await startTestNode({}, 'clients_openapi');
  const r = await fetch(`${t.baseUrl}/openapi.json`);
  assert.equal(r.status, 200);
  doc = (await r.json()) as Record<string, any>;
});
after(async () => {
  await t.stop();
});

test('every route of the live route table is in the document (debug routes aside)', () => {
  assert.equal(doc.openapi, '3.1.0');
  const missing: string[] = [];
  for (const def of t.node.routes()) {
    if (def.doc?.hidden) continue;
    const rel = !def.absolute && def.path.startsWith('/api/v1/') ? def.path.slice('/api/v1'.length) : def.path;
    const item = doc.paths[docPath(rel)];
    const method = def.method === 'ANY' ? 'get' : def.method.toLowerCase();
    if (!item?.[method]) missing.push(`${def.method} ${def.path}`);
  }
  assert.deepEqual(missing, [], `routes missing from the OpenAPI document (add a doc next to their RouteDef, docs/api.md "OpenAPI document"): ${missing.join(', ')}`);
  assert.equal(doc['x-undocumented-routes'], undefined);
});

test('auth schemes, error envelope, pagination, 202 run, SSE and webhooks are described', () => {
  assert.deepEqual(Object.keys(doc.components.securitySchemes).sort(), ['agentKey', 'bearerJwt', 'deviceKey', 'integrationKey', 'teamId']);
  const run = doc.paths['/r/workflows/slug/{workflowSlug}/run'].post;
  assert.deepEqual(run.security, [{ bearerJwt: [], teamId: [] }, { integrationKey: [] }, { deviceKey: [] }]);
  assert.equal(run.responses['202'].content['application/json'].schema.$ref, '#/components/schemas/RunAccepted');
  assert.equal(run.responses['200'], undefined);
  assert.equal(doc.paths['/workflows'].post.security.length, 2, 'management: JWT or dk-, no sk-');
  assert.deepEqual(doc.paths['/server-info'].get.security, []);
  assert.deepEqual(doc.components.schemas.Error.required, ['error_message', 'error_code']);
  assert.equal(run.responses.default.$ref, '#/components/responses/Error');
  const list = doc.paths['/r/workflows'].get;
  assert.deepEqual(list.parameters.map((p: { name: string }) => p.name).filter((n: string) => n.endsWith('page')), ['current_page', 'per_page']);
  const sse = doc.paths['/r/tasks/{taskId}/events'].get.responses['200'].content['text/event-stream'];
  assert.deepEqual(Object.keys(sse['x-sse-events']).sort(), ['cancelled', 'completed', 'error', 'failed', 'progress', 'status']);
  assert.ok(doc.components.schemas.TaskEventProgress.properties.progress);
  assert.deepEqual(Object.keys(doc.webhooks).sort(), ['task.completed', 'task.failed']);
  assert.equal(doc.webhooks['task.completed'].post.parameters[0].name, 'X-Webhook-Signature-256');
  assert.equal(doc.webhooks['task.completed'].post.requestBody.content['application/json'].schema.$ref, '#/components/schemas/WebhookPayload');
});

test('@redocly/cli lint: no errors', { timeout: 120_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-openapi-'));
  try {
    const f = join(dir, 'openapi.json');
    writeFileSync(f, JSON.stringify(doc));
    const r = await promisify(execFile)(process.execPath, [join(root, 'node_modules/@redocly/cli/bin/cli.js'), 'lint', f, '--format=json'], { cwd: dir, maxBuffer: 64 * 1024 * 1024, env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' } }).catch((e: { stdout: string; stderr: string; code: number }) => e);
    const out = JSON.parse(r.stdout.slice(r.stdout.indexOf('{'))) as { totals: { errors: number }; problems: Array<{ severity: string; message: string; ruleId: string }> };
    const errors = out.problems.filter((p) => p.severity === 'error');
    assert.equal(out.totals.errors, 0, JSON.stringify(errors.slice(0, 10)));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the response validator (used by every HttpClient) rejects a drifting body and an undocumented status', () => {
  const v = new ResponseValidator(doc);
  const task = { task_id: '0190a5c4-7b1e-7000-8000-000000000001' };
  assert.equal(v.check('POST', '/api/v1/r/workflows/slug/x/run', 202, 'application/json', task), null);
  assert.match(v.check('POST', '/api/v1/r/workflows/slug/x/run', 202, 'application/json', { id: task.task_id }) ?? '', /does not match/);
  assert.match(v.check('POST', '/api/v1/r/workflows/slug/x/run', 200, 'application/json', task) ?? '', /status not documented/);
  assert.equal(v.check('GET', '/api/v1/r/tasks/abc', 404, 'application/json', { error_message: 'x', error_code: 'task_not_found' }), null);
  assert.match(v.check('GET', '/api/v1/r/tasks/abc', 404, 'application/json', { message: 'x' }) ?? '', /does not match/);
  assert.equal(v.check('GET', '/api/v1/not/a/route', 404, 'application/json', {}), null);
});

test('real responses match: a run, a task, a list, an error (through the validating HttpClient)', async () => {
  const anon = await t.http.get('/server-info');
  assert.equal(anon.status, 200);
  const bad = await t.http.post('/auth/login', { email_address: '' });
  assert.equal(bad.status, 400);
  assert.equal(typeof bad.body.error_code, 'string');
});

test('a webhook delivery body (the dispatcher\'s own serializer) matches the documented WebhookPayload', () => {
  const v = new ResponseValidator(doc);
  const taskId = '0190a5c4-7b1e-7000-8000-000000000002';
  const completed = JSON.parse(deliveryBody({ id: 1, taskId, teamId: 't', type: 'completed', data: { task_id: taskId, status: 'completed', completed_at: '2026-01-01T00:00:00.000Z', output: { storage_key: 'k', image_count: 1 } }, createdAt: 0 }));
  assert.equal(v.checkComponent('WebhookPayload', completed), null);
  const failed = JSON.parse(deliveryBody({ id: 2, taskId, teamId: 't', type: 'failed', data: { task_id: taskId, status: 'failed', error: 'boom', timestamp: '2026-01-01T00:00:00.000Z' }, createdAt: 0 }));
  assert.equal(v.checkComponent('WebhookPayload', failed), null);
  assert.match(v.checkComponent('WebhookPayload', { ...failed, extra: 1 }) ?? '', /additional/);
});

test('/docs serves the API reference (Scalar, from the node itself)', async () => {
  const page = await fetch(`${t.origin}/docs`);
  assert.equal(page.status, 200);
  const html = await page.text();
  assert.match(html, /data-url="\/api\/v1\/openapi\.json"/);
  assert.match(html, /<script src="\/docs\/scalar\.js"><\/script>/);
  const js = await fetch(`${t.origin}/docs/scalar.js`);
  assert.equal(js.status, 200);
  assert.match(js.headers.get('content-type') ?? '', /javascript/);
  assert.ok((await js.arrayBuffer()).byteLength > 100_000);
});

test('packages/sdk/openapi.json and src/schema.d.ts are current (npm run gen:openapi)', async () => {
  assert.equal(readFileSync(DOC_FILE, 'utf8'), docText(doc), 'packages/sdk/openapi.json is stale: run npm run gen:openapi');
  assert.equal(readFileSync(TYPES_FILE, 'utf8'), await typesOf(doc), 'packages/sdk/src/schema.d.ts is stale: run npm run gen:openapi');
});
