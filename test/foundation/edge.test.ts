import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';

let t: TestNode;
before(async () => {
  t = await startTestNode({ GANTRY_MAX_BODY_BYTES: 2048 }, 'edge');
});
after(async () => {
  await t.stop();
});

const isEnvelope = (b: any) => typeof b?.error_message === 'string' && typeof b?.error_code === 'string';

test('GET /server-info returns the spec fields (and the agent gRPC port, an extension)', async () => {
  const r = await t.http.get('/server-info');
  assert.equal(r.status, 200);
  assert.deepEqual(Object.keys(r.body).sort(), ['agent_grpc_port', 'agent_grpc_tls', 'oauth_enabled', 'oauth_providers', 'registration_enabled']);
  assert.equal(r.body.agent_grpc_port, t.node.grpcPort);
  assert.equal(typeof r.body.registration_enabled, 'boolean');
  assert.ok(Array.isArray(r.body.oauth_providers));
  assert.ok(r.headers.get('x-request-id'));
});

test('malformed JSON is a 400 with the envelope', async () => {
  const r = await t.http.req('POST', '/_debug/echo', { rawBody: '{"a":', headers: { 'content-type': 'application/json' } });
  assert.equal(r.status, 400);
  assert.ok(isEnvelope(r.body));
  assert.equal(r.body.error_code, 'malformed_json');
});

test('a well-formed JSON body reaches the handler', async () => {
  const r = await t.http.post('/_debug/echo', { hello: 'world' });
  assert.equal(r.status, 200);
  assert.deepEqual(r.body, { body: { hello: 'world' } });
});

test('unknown route is a 404 and wrong method a 405, both with the envelope', async () => {
  const r = await t.http.get('/no/such/route');
  assert.equal(r.status, 404);
  assert.ok(isEnvelope(r.body));
  const m = await t.http.req('DELETE', '/server-info');
  assert.equal(m.status, 405);
  assert.ok(isEnvelope(m.body));
});

test('oversized body is a 413 (declared and streamed)', async () => {
  const big = JSON.stringify({ x: 'y'.repeat(5000) });
  const r = await t.http.req('POST', '/_debug/echo', { rawBody: big, headers: { 'content-type': 'application/json' } });
  assert.equal(r.status, 413);
  assert.ok(isEnvelope(r.body));
  // chunked (no Content-Length): the cap applies while reading
  const stream = new ReadableStream({
    start(c) {
      c.enqueue(new TextEncoder().encode(big));
      c.close();
    },
  });
  const res = await fetch(`${t.baseUrl}/_debug/echo`, { method: 'POST', body: stream, headers: { 'content-type': 'application/json' }, duplex: 'half' } as RequestInit);
  assert.equal(res.status, 413);
  assert.ok(isEnvelope(await res.json()));
  // the node still serves
  assert.equal((await t.http.get('/server-info')).status, 200);
});

test('pagination: defaults, bounds and 400s', async () => {
  const d = await t.http.get('/_debug/items');
  assert.equal(d.status, 200);
  assert.deepEqual(d.body.page_meta, { current_page: 1, per_page: 20, total_count: 45 });
  assert.equal(d.body.item_list.length, 20);
  const last = await t.http.get('/_debug/items?current_page=3&per_page=20');
  assert.equal(last.body.item_list.length, 5);
  for (const q of ['per_page=0', 'per_page=101', 'current_page=0', 'per_page=abc', 'current_page=-1', 'per_page=1.5']) {
    const r = await t.http.get(`/_debug/items?${q}`);
    assert.equal(r.status, 400, q);
    assert.ok(isEnvelope(r.body), q);
    assert.equal(r.body.error_code, 'invalid_parameter');
  }
  for (const q of ['per_page=1', 'per_page=100', 'current_page=1']) assert.equal((await t.http.get(`/_debug/items?${q}`)).status, 200, q);
});

test('an unexpected exception is a 500 envelope and the node keeps serving', async () => {
  const r = await t.http.get('/_debug/throw', { headers: { 'x-request-id': 'req-boom-1' } });
  assert.equal(r.status, 500);
  assert.ok(isEnvelope(r.body));
  assert.equal(r.body.error_code, 'internal_error');
  assert.equal(r.headers.get('x-request-id'), 'req-boom-1');
  assert.ok(!r.text.includes('boom'), 'internal details are not leaked');
  assert.equal((await t.http.get('/server-info')).status, 200);
});

test('health and readiness live outside /api/v1', async () => {
  const h = await fetch(`${t.origin}/healthz`);
  assert.equal(h.status, 200);
  const r = await fetch(`${t.origin}/readyz`);
  assert.equal(r.status, 200);
  assert.equal(((await r.json()) as any).checks.database, true);
});

test('GET /metrics serves Prometheus text with the actor metrics', async () => {
  const r = await fetch(`${t.origin}/metrics`);
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type') ?? '', /text\/plain/);
  const text = await r.text();
  assert.match(text, /gantry_actor_turn_seconds/);
  assert.match(text, /process_resident_memory_bytes/);
});
