/**
 * The container gateway end to end on one node: two `gantry agent --container-runtime exec` child
 * processes, a service (the test app in fixture.ts) deployed with 2 replicas, and real HTTP,
 * WebSocket and SSE through /r/containers/{slug}/* and /r/invoke/{slug}. The two agents use the two
 * agent transports (AGENT_TRANSPORTS: one over gRPC, one over the WebSocket on the HTTP port), so the
 * replicas' tunnels run over both.
 */
import net from 'node:net';
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import WebSocket from 'ws';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { pairDevice } from '../helpers/identity.js';
import { AGENT_TRANSPORTS, agentServer, setupTeam, spawnAgent, tmpDir, waitFor, type AgentProcess, type TeamSetup } from '../agents/helpers.js';
import { writeApp, sha256 } from './fixture.js';

let t: TestNode;
let s: TeamSetup;
const procs: AgentProcess[] = [];
const app = writeApp();
const appPids = new Set<number>();
let serviceId = '';
const machines = ['gw-agent-a', 'gw-agent-b'];

const json = (o: unknown) => JSON.stringify(o);
const mgmt = () => ({ token: s.user.accessToken, team: s.user.teamId });

const stateDirs = new Map<string, string>();
/** Agent i speaks transport i (of the ones under test). */
const transportOf = (machineId: string) => AGENT_TRANSPORTS[machines.indexOf(machineId) % AGENT_TRANSPORTS.length] ?? 'grpc';
function agent(machineId: string): AgentProcess {
  if (!stateDirs.has(machineId)) stateDirs.set(machineId, tmpDir('gw-agent-'));
  const p = spawnAgent(
    ['--server', agentServer(t.node, transportOf(machineId)), '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', stateDirs.get(machineId) as string, '--machine-id', machineId, '--container-runtime', 'exec', '--container-health-interval-ms', '200', '--tunnel-url', 'none'],
    { LOG_LEVEL: 'info' },
  );
  procs.push(p);
  return p;
}

async function service(id: string): Promise<Record<string, any>> {
  const r = await t.http.get(`/containers/${id}`, mgmt());
  assert.equal(r.status, 200, r.text);
  return r.body;
}

async function createService(slug: string, over: Record<string, unknown> = {}): Promise<string> {
  const r = await t.http.post(
    '/containers',
    {
      service_slug: slug,
      display_name: `test ${slug}`,
      docker_image: json(['node', app.script]),
      exposed_port: 8080,
      health_path: '/health',
      replica_count: 2,
      env_config: [
        { env_name: 'CRASH_FILE', env_value: app.crashFile },
        { env_name: 'API_TOKEN', env_value: 'secret-value-123' },
      ],
      usage_prompt: 'echo service for tests',
      ...over,
    },
    mgmt(),
  );
  assert.equal(r.status, 200, r.text);
  return r.body.id as string;
}

const healthyCount = async (id: string): Promise<number> => (await service(id)).deploy_status.healthy as number;

async function deployAndWait(id: string, healthy: number): Promise<Record<string, any>> {
  const r = await t.http.post(`/containers/${id}/deploy`, {}, mgmt());
  assert.equal(r.status, 200, r.text);
  return waitFor('service running with healthy replicas', async () => {
    const sv = await service(id);
    return sv.service_status === 'running' && sv.deploy_status.healthy >= healthy && sv;
  }, 30_000);
}

const proxyUrl = (slug: string, rest: string) => `${t.baseUrl}/r/containers/${slug}${rest}`;
const auth = (token: string, team?: string): Record<string, string> => ({ authorization: `Bearer ${token}`, ...(team ? { 'x-team-id': team } : {}) });

before(async () => {
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1, GANTRY_PROXY_TIMEOUT_MS: 5_000 }, 'gateway');
  s = await setupTeam(t);
  agent(machines[0] as string);
  agent(machines[1] as string);
  await waitFor('two agents with the exec runtime', async () => {
    const r = await t.http.get('/agents', mgmt());
    return (r.body.agent_list as Array<Record<string, any>>).filter((a) => a.agent_status !== 'offline' && a.container_runtime === 'exec').length === 2;
  }, 30_000);
  serviceId = await createService('echo');
  await deployAndWait(serviceId, 2);
});

after(async () => {
  for (const p of procs) p.kill('SIGTERM');
  await Promise.race([Promise.all(procs.map((p) => p.exited)), new Promise((r) => setTimeout(r, 8_000))]);
  for (const p of procs) p.kill('SIGKILL');
  for (const pid of appPids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  await t.stop();
  rmSync(app.dir, { recursive: true, force: true });
});

test('deployed with 2 replicas on 2 agents; the record shows both instances and hides env values from sk-', async () => {
  for (const [i, m] of machines.entries())
    await (procs[i] as AgentProcess).waitLine((l) => l.msg === 'connected to the server' && l.transport === transportOf(m), `${m} connected over ${transportOf(m)}`);
  const sv = await service(serviceId);
  assert.equal(sv.service_status, 'running');
  assert.equal(sv.instance_list.length, 2);
  assert.equal(new Set(sv.instance_list.map((i: any) => i.agent_id)).size, 2, 'one replica per agent');
  assert.ok(sv.instance_list.every((i: any) => i.instance_status === 'running' && i.healthy));
  assert.equal(sv.env_config.find((e: any) => e.env_name === 'API_TOKEN').env_value, 'secret-value-123');
  const rt = await t.http.get('/r/containers/echo', { token: s.sk.value });
  assert.equal(rt.status, 200, rt.text);
  assert.equal(rt.body.env_config.find((e: any) => e.env_name === 'API_TOKEN').env_value, '', 'sk- callers never see env values');
  assert.ok(!rt.text.includes('secret-value-123'));
  const list = await t.http.get('/r/containers', { token: s.sk.value });
  assert.equal(list.status, 200);
  assert.ok(!list.text.includes('secret-value-123'));
  assert.equal(list.body.container_list.length, 1);
});

test('proxy: GET/POST/PUT/DELETE with query strings, statuses relayed, Set-Cookie kept, Gantry credential not forwarded', async () => {
  for (const method of ['GET', 'POST', 'PUT', 'DELETE']) {
    const body = method === 'GET' || method === 'DELETE' ? undefined : json({ hello: method });
    const r = await fetch(proxyUrl('echo', '/echo?a=1&b=two%20words&a=3'), { method, headers: { ...auth(s.sk.value), 'content-type': 'application/json', 'x-custom': 'kept' }, body });
    assert.equal(r.status, method === 'POST' ? 201 : 200, method);
    const j = (await r.json()) as Record<string, any>;
    assert.equal(j.method, method);
    assert.equal(j.path, '/echo');
    assert.equal(j.query.b, 'two words');
    assert.equal(j.headers['x-custom'], 'kept');
    assert.equal(j.headers.authorization, undefined, 'the caller\'s Gantry credential is not forwarded');
    assert.ok(j.headers['x-forwarded-for']);
    assert.equal(j.headers['x-forwarded-prefix'], '/api/v1/r/containers/echo');
    if (body) assert.equal(j.body, body);
    assert.deepEqual(r.headers.getSetCookie(), ['a=1', 'b=2']);
  }
  for (const code of [201, 404, 500]) {
    const r = await fetch(proxyUrl('echo', `/status/${code}`), { headers: auth(s.sk.value) });
    assert.equal(r.status, code);
    assert.equal(r.headers.get('x-app'), 'yes');
    assert.equal(await r.text(), `status ${code}`);
  }
  // 204 and 304 carry no body and no bogus length: the next request on the same kept-alive
  // connection is answered normally
  for (const code of [204, 304]) {
    const head = (p: string): string => `GET /api/v1/r/containers/echo${p} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${s.sk.value}\r\n\r\n`;
    const sock = net.connect(Number(new URL(t.baseUrl).port), '127.0.0.1');
    let data = '';
    sock.on('data', (d: Buffer) => (data += d.toString('latin1')));
    const until = async (pred: () => boolean, what: string): Promise<void> => {
      const deadline = Date.now() + 5_000;
      while (!pred()) {
        if (Date.now() > deadline || sock.destroyed) throw new Error(`${code}: ${what}; got ${JSON.stringify(data)}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    };
    sock.write(head(`/status/${code}`));
    await until(() => data.includes('\r\n\r\n'), 'no answer');
    const first = data;
    assert.match(first, new RegExp(`^HTTP/1\\.1 ${code} `), first);
    assert.doesNotMatch(first, /content-length: [1-9]/i, `${code}: no length`);
    sock.write(head('/status/201'));
    await until(() => data.endsWith('status 201'), 'the next request on the connection was not answered');
    assert.match(data.slice(first.length), /^HTTP\/1\.1 201 /);
    sock.destroy();
  }
  const missing = await fetch(proxyUrl('echo', '/nowhere'), { headers: auth(s.sk.value) });
  assert.equal(missing.status, 404);
  assert.equal(await missing.text(), 'no route /nowhere', 'the container\'s own 404, not the gateway\'s');
  // the container's root through a trailing slash
  const root = await fetch(proxyUrl('echo', '/'), { headers: auth(s.sk.value) });
  assert.equal(root.status, 404);
  assert.equal(await root.text(), 'no route /');
  const head = await fetch(proxyUrl('echo', '/whoami'), { method: 'HEAD', headers: auth(s.sk.value) });
  assert.equal(head.status, 200);
});

test('proxy: a 50 MB upload and a 50 MB download stream through intact', async () => {
  const size = 50 * 1024 * 1024;
  const big = Buffer.alloc(size);
  for (let i = 0; i < size; i += 4096) big.writeUInt32LE(i, i);
  const up = await fetch(proxyUrl('echo', '/upload'), { method: 'POST', headers: { ...auth(s.sk.value), 'content-type': 'application/octet-stream' }, body: big });
  assert.equal(up.status, 201);
  const uj = (await up.json()) as { bytes: number; sha256: string };
  assert.equal(uj.bytes, size);
  assert.equal(uj.sha256, sha256(big));
  const down = await fetch(proxyUrl('echo', `/download?bytes=${size}`), { headers: auth(s.sk.value) });
  assert.equal(down.status, 200);
  assert.equal(down.headers.get('content-length'), String(size));
  const got = Buffer.from(await down.arrayBuffer());
  assert.equal(got.length, size);
  assert.equal(sha256(got), down.headers.get('x-sha256'));
});

test('proxy: an SSE response streams event by event (not buffered to the end)', async () => {
  const r = await fetch(proxyUrl('echo', '/sse'), { headers: auth(s.sk.value) });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('content-type'), 'text/event-stream');
  const reader = (r.body as ReadableStream<Uint8Array>).getReader();
  const arrivals: number[] = [];
  let text = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    const chunk = Buffer.from(value).toString();
    for (let i = 0; i < (chunk.match(/event: tick/g) ?? []).length; i++) arrivals.push(Date.now());
    text += chunk;
  }
  assert.equal((text.match(/event: tick/g) ?? []).length, 3);
  assert.ok((arrivals[2] as number) - (arrivals[0] as number) >= 400, `events arrived as they were sent (${arrivals.join(', ')})`);
});

test('proxy: a WebSocket echo (text and binary) through the gateway', async () => {
  const ws = new WebSocket(`${proxyUrl('echo', '/ws').replace(/^http/, 'ws')}`, { headers: auth(s.sk.value) });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
    ws.once('unexpected-response', (_q, res) => reject(new Error(`upgrade answered ${res.statusCode}`)));
  });
  const next = () => new Promise<{ data: Buffer; binary: boolean }>((resolve) => ws.once('message', (data: Buffer, binary: boolean) => resolve({ data, binary })));
  let m = next();
  ws.send('hello through the tunnel');
  let got = await m;
  assert.equal(got.binary, false);
  assert.equal(got.data.toString(), 'hello through the tunnel');
  m = next();
  ws.send(Buffer.from([1, 2, 3, 250]));
  got = await m;
  assert.equal(got.binary, true);
  assert.deepEqual([...got.data], [1, 2, 3, 250]);
  const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
  ws.close(1000, 'bye');
  assert.equal(await closed, 1000);
  // no credential: refused before any upgrade
  const bad = new WebSocket(`${proxyUrl('echo', '/ws').replace(/^http/, 'ws')}`);
  const status = await new Promise<number>((resolve) => {
    bad.once('unexpected-response', (_q, res) => resolve(res.statusCode ?? 0));
    bad.once('open', () => resolve(101));
    bad.once('error', () => resolve(-1));
  });
  assert.equal(status, 401);
});

test('the container\'s own /invoke is reachable through the proxy; invoke answers the structured call', async () => {
  const own = await fetch(proxyUrl('echo', '/invoke'), { method: 'POST', headers: auth(s.sk.value) });
  assert.equal(own.status, 200);
  assert.deepEqual(await own.json(), { own_invoke: true, method: 'POST' });

  const r = await t.http.post('/r/invoke/echo', { method: 'POST', path: '/echo?x=1', headers: { 'content-type': 'text/plain', 'x-k': 'v' }, body_base64: Buffer.from('payload').toString('base64') }, { token: s.sk.value });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body.status_code, 201);
  const inner = JSON.parse(Buffer.from(r.body.body_base64, 'base64').toString()) as Record<string, any>;
  assert.equal(inner.body, 'payload');
  assert.equal(inner.query.x, '1');
  assert.equal(inner.headers['x-k'], 'v');
  assert.equal(r.body.headers['content-type'], 'application/json');
  const g = await t.http.post('/r/invoke/echo', { method: 'GET', path: '/status/404' }, { token: s.sk.value });
  assert.equal(g.status, 200);
  assert.equal(g.body.status_code, 404);
  assert.equal(Buffer.from(g.body.body_base64, 'base64').toString(), 'status 404');
  // a container's own /invoke through invoke
  const o = await t.http.post('/r/invoke/echo', { method: 'POST', path: '/invoke' }, { token: s.sk.value });
  assert.equal(JSON.parse(Buffer.from(o.body.body_base64, 'base64').toString()).own_invoke, true);
});

test('invoke validation: each case is a 400 naming the field; hop-by-hop headers are stripped', async () => {
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ path: '/echo' }, 'method'],
    [{ method: 'TRACE', path: '/echo' }, 'method'],
    [{ method: 'GET' }, 'path'],
    [{ method: 'GET', path: 'echo' }, 'path'],
    [{ method: 'GET', path: 'http://evil.example/x' }, 'path'],
    [{ method: 'GET', path: '//evil.example/x' }, 'path'],
    [{ method: 'GET', path: '/a b' }, 'path'],
    [{ method: 'GET', path: '/echo', body_base64: 'aGk=' }, 'body_base64'],
    [{ method: 'POST', path: '/echo', body_base64: 'not base64!' }, 'body_base64'],
    [{ method: 'POST', path: '/echo', headers: { 'bad header': 'x' } }, 'headers'],
    [{ method: 'POST', path: '/echo', headers: { 'x-a': 'v\r\ninjected: 1' } }, 'headers'],
    [{ method: 'POST', path: '/echo', extra: 1 }, 'extra'],
  ];
  for (const [body, field] of cases) {
    const r = await t.http.post('/r/invoke/echo', body, { token: s.sk.value });
    assert.equal(r.status, 400, `${json(body)}: ${r.text}`);
    assert.ok(r.body.error_code, r.text);
    assert.ok(r.text.includes(field), `${json(body)} names ${field}: ${r.text}`);
  }
  const bad = await t.http.req('POST', '/r/invoke/echo', { rawBody: '{not json', token: s.sk.value, headers: { 'content-type': 'application/json' } });
  assert.equal(bad.status, 400);
  const r = await t.http.post(
    '/r/invoke/echo',
    { method: 'get', path: '/headers', headers: { Host: 'evil.example', Connection: 'x-drop', 'X-Drop': 'no', Upgrade: 'websocket', 'Transfer-Encoding': 'chunked', TE: 'trailers', Trailer: 'x', 'X-Keep': 'yes' } },
    { token: s.sk.value },
  );
  assert.equal(r.status, 200, r.text);
  const seen = JSON.parse(Buffer.from(r.body.body_base64, 'base64').toString()) as Record<string, string>;
  assert.equal(seen['x-keep'], 'yes');
  assert.notEqual(seen.host, 'evil.example');
  for (const h of ['upgrade', 'transfer-encoding', 'te', 'trailer']) assert.equal(seen[h], undefined, h);
});

test('callers: sk-, dk- and JWT reach the service; another team gets 404; no credential 401', async () => {
  const dev = await pairDevice(t.http, s.user);
  for (const [name, h] of [
    ['sk-', auth(s.sk.value)],
    ['dk-', auth(dev.deviceCredential)],
    ['jwt', auth(s.user.accessToken, s.user.teamId)],
  ] as const) {
    const r = await fetch(proxyUrl('echo', '/whoami'), { headers: h });
    assert.equal(r.status, 200, name);
    const inv = await t.http.post('/r/invoke/echo', { method: 'GET', path: '/whoami' }, { headers: h });
    assert.equal(inv.status, 200, `${name}: ${inv.text}`);
  }
  const other = await setupTeam(t);
  const r = await fetch(proxyUrl('echo', '/whoami'), { headers: auth(other.sk.value) });
  assert.equal(r.status, 404);
  assert.equal(((await r.json()) as Record<string, string>).error_code, 'service_not_found');
  assert.equal((await t.http.post('/r/invoke/echo', { method: 'GET', path: '/' }, { token: other.sk.value })).status, 404);
  assert.equal((await t.http.get(`/containers/${serviceId}`, { token: other.user.accessToken, team: other.user.teamId })).status, 404);
  assert.equal((await fetch(proxyUrl('echo', '/whoami'))).status, 401);
  const unknown = await fetch(proxyUrl('no-such-service', '/x'), { headers: auth(s.sk.value) });
  assert.equal(unknown.status, 404);
});

test('load balancing: requests spread over both replicas', async () => {
  const ports = new Map<number, number>();
  for (let i = 0; i < 20; i++) {
    const r = await fetch(proxyUrl('echo', '/whoami'), { headers: auth(s.sk.value) });
    const j = (await r.json()) as { port: number; pid: number };
    appPids.add(j.pid);
    ports.set(j.port, (ports.get(j.port) ?? 0) + 1);
  }
  assert.equal(ports.size, 2, `both replicas served: ${json([...ports])}`);
  for (const n of ports.values()) assert.ok(n >= 5, `balanced: ${json([...ports])}`);
});

test('session affinity: by header (the same replica for the same key) and by cookie (pinned to the replica that answered first); off again: balanced', async () => {
  const whoami = async (headers: Record<string, string>): Promise<{ port: number; setCookie: string | null }> => {
    const r = await fetch(proxyUrl('echo', '/whoami'), { headers: { ...auth(s.sk.value), ...headers } });
    assert.equal(r.status, 200);
    const j = (await r.json()) as { port: number; pid: number };
    appPids.add(j.pid);
    return { port: j.port, setCookie: r.headers.get('set-cookie') };
  };
  const bad = await t.http.put(`/containers/${serviceId}`, { session_affinity: { mode: 'header', header_name: 'bad header' } }, mgmt());
  assert.equal(bad.status, 400, bad.text);
  const up = await t.http.put(`/containers/${serviceId}`, { session_affinity: { mode: 'header', header_name: 'X-Session-ID' } }, mgmt());
  assert.equal(up.status, 200, up.text);
  assert.deepEqual((await service(serviceId)).session_affinity, { mode: 'header', header_name: 'X-Session-ID' });
  // the routing table is dropped on the change; each key keeps its replica, and the keys spread over both
  const byKey = new Map<string, Set<number>>();
  await waitFor('the new setting in the routing table', async () => {
    const a = await whoami({ 'x-session-id': 'probe' });
    const b = await whoami({ 'x-session-id': 'probe' });
    const c = await whoami({ 'x-session-id': 'probe' });
    return a.port === b.port && b.port === c.port;
  }, 10_000);
  for (let k = 0; k < 12; k++) for (let i = 0; i < 4; i++) {
    const key = `user-${k}`;
    const set = byKey.get(key) ?? new Set<number>();
    set.add((await whoami({ 'x-session-id': key })).port);
    byKey.set(key, set);
  }
  for (const [k, ports] of byKey) assert.equal(ports.size, 1, `${k} stayed on one replica: ${json([...ports])}`);
  assert.equal(new Set([...byKey.values()].map((p) => [...p][0])).size, 2, 'the keys spread over both replicas');
  const noKey = new Set<number>();
  for (let i = 0; i < 8; i++) noKey.add((await whoami({})).port);
  assert.equal(noKey.size, 2, 'without the header: balanced as usual');

  // cookie mode: the first answer pins the client; the cookie holds it there
  assert.equal((await t.http.put(`/containers/${serviceId}`, { session_affinity: { mode: 'cookie' } }, mgmt())).status, 200);
  let first!: { port: number; setCookie: string | null };
  await waitFor('cookie mode in the routing table', async () => {
    first = await whoami({});
    return first.setCookie !== null;
  }, 10_000);
  assert.match(first.setCookie ?? '', /^gantry_affinity_echo=[0-9a-f-]+; Path=\/; HttpOnly; SameSite=Lax$/);
  const cookie = (first.setCookie as string).split(';')[0] as string;
  for (let i = 0; i < 10; i++) {
    const r = await whoami({ cookie: `theme=dark; ${cookie}` });
    assert.equal(r.port, first.port, 'pinned');
    assert.equal(r.setCookie, null, 'already pinned: no new cookie');
  }
  // a cookie naming no live instance is replaced
  const stale = await whoami({ cookie: 'gantry_affinity_echo=00000000-0000-0000-0000-000000000000' });
  assert.match(stale.setCookie ?? '', /^gantry_affinity_echo=/);

  assert.equal((await t.http.put(`/containers/${serviceId}`, { session_affinity: null }, mgmt())).status, 200);
  await waitFor('affinity off: balanced again', async () => {
    const ports = new Set<number>();
    for (let i = 0; i < 8; i++) ports.add((await whoami({ cookie })).port);
    return ports.size === 2;
  }, 10_000);
});

test('a container that does not answer within GANTRY_PROXY_TIMEOUT_MS of the request: 502 upstream_timeout', async () => {
  const started = Date.now();
  const r = await fetch(proxyUrl('echo', '/slow?ms=9000'), { headers: auth(s.sk.value) });
  assert.equal(r.status, 502);
  assert.equal(((await r.json()) as Record<string, string>).error_code, 'upstream_timeout');
  assert.ok(Date.now() - started >= 4_900 && Date.now() - started < 8_500, `after the 5 s timeout (${Date.now() - started} ms)`);
  const inv = await t.http.post('/r/invoke/echo', { method: 'GET', path: '/slow?ms=9000' }, { token: s.sk.value });
  assert.equal(inv.status, 502);
  assert.equal(inv.body.error_code, 'upstream_timeout');
});

test('management: 409 for operations the state disallows; validation of the definition', async () => {
  const r = await t.http.post(`/containers/${serviceId}/start`, {}, mgmt());
  assert.equal(r.status, 409);
  assert.equal(r.body.error_code, 'invalid_state');
  assert.equal((await t.http.del(`/containers/${serviceId}`, mgmt())).status, 409);
  const dup = await t.http.post('/containers', { service_slug: 'echo', display_name: 'dup', docker_image: 'x', exposed_port: 1 }, mgmt());
  assert.equal(dup.status, 409);
  for (const [body, field] of [
    [{ service_slug: 'Bad Slug', display_name: 'x', docker_image: 'x', exposed_port: 80 }, 'service_slug'],
    [{ service_slug: 'no-image', display_name: 'x', exposed_port: 80 }, 'docker_image'],
    [{ service_slug: 'ext', display_name: 'x', service_type: 'external', external_url: 'http://plain.example' }, 'external_url'],
    [{ service_slug: 'gpu', display_name: 'x', docker_image: 'x', exposed_port: 80, gpu_count: -2 }, 'gpu_count'],
    [{ service_slug: 'vol', display_name: 'x', docker_image: 'x', exposed_port: 80, volume_config: [{ host_path: 'rel', container_path: '/c' }] }, 'volume_config'],
  ] as const) {
    const x = await t.http.post('/containers', body, mgmt());
    assert.equal(x.status, 400, x.text);
    assert.ok(x.text.includes(field), x.text);
  }
  const sk = await t.http.post('/containers', { service_slug: 'via-sk', display_name: 'x', docker_image: 'x', exposed_port: 80 }, { token: s.sk.value });
  assert.equal(sk.status, 403, 'management routes refuse integration credentials');
});

test('an agent stream cut while a request waits for its response: 502', async () => {
  const id = await createService('slowpoke', { replica_count: 1 });
  const sv = await deployAndWait(id, 1);
  const agentId = sv.instance_list[0].agent_id as string;
  const agents = (await t.http.get('/agents', mgmt())).body.agent_list as Array<Record<string, any>>;
  const machine = agents.find((a) => a.id === agentId)?.machine_id as string;
  const victim = procs[machines.indexOf(machine)] as AgentProcess;
  const who = (await (await fetch(proxyUrl('slowpoke', '/whoami'), { headers: auth(s.sk.value) })).json()) as { pid: number };
  appPids.add(who.pid);
  const pending = fetch(proxyUrl('slowpoke', '/slow?ms=5000'), { headers: auth(s.sk.value) });
  await new Promise((r) => setTimeout(r, 300));
  victim.kill('SIGKILL');
  const r = await pending;
  assert.equal(r.status, 502, await r.clone().text());
  assert.equal(((await r.json()) as Record<string, string>).error_code, 'tunnel_failed');
  // the agent comes back (same machine id and state dir): what its killed run left behind is
  // stopped, and the echo replica it had is re-placed (a new instance)
  const echoBefore = (await service(serviceId)).instance_list.find((i: any) => i.agent_id === agentId)?.instance_id as string;
  await victim.exited;
  const back = agent(machine);
  procs[machines.indexOf(machine)] = back;
  await back.waitLine((l) => l.msg === 'connected to the server', 'the restarted agent to connect', 30_000);
  await waitFor('echo healthy on 2 replicas again, the lost one replaced', async () => {
    const sv = await service(serviceId);
    const ok = sv.instance_list.filter((i: any) => i.instance_status === 'running' && i.healthy);
    return ok.length >= 2 && !ok.some((i: any) => i.instance_id === echoBefore);
  }, 30_000);
});

test('killing one instance: traffic continues on the other with no 5xx after ejection; both: 503', async () => {
  await waitFor('echo healthy on 2 replicas', async () => (await healthyCount(serviceId)) >= 2, 30_000);
  const before = await service(serviceId);
  const pids = new Set<number>();
  for (let i = 0; i < 10 && pids.size < 2; i++) pids.add(((await (await fetch(proxyUrl('echo', '/whoami'), { headers: auth(s.sk.value) })).json()) as { pid: number }).pid);
  assert.equal(pids.size, 2, json(before.instance_list));
  for (const p of pids) appPids.add(p);
  const [first, second] = [...pids] as [number, number];
  // replacements crash at start from now on: a killed replica stays dead
  writeFileSync(app.crashFile, 'x');
  process.kill(first, 'SIGKILL');
  const statuses: number[] = [];
  for (let i = 0; i < 40; i++) {
    const r = await fetch(proxyUrl('echo', '/whoami'), { headers: auth(s.sk.value) });
    statuses.push(r.status);
    if (r.status === 200) assert.equal(((await r.json()) as { pid: number }).pid, second);
    else await r.text();
  }
  assert.deepEqual(statuses.filter((x) => x >= 500), [], `no 5xx: the failed request was retried on the healthy replica (${json(statuses)})`);
  process.kill(second, 'SIGKILL');
  const r503 = await waitFor('503 once no replica is healthy', async () => {
    const r = await fetch(proxyUrl('echo', '/whoami'), { headers: auth(s.sk.value) });
    const b = (await r.json()) as Record<string, string>;
    return r.status === 503 && b;
  }, 20_000);
  assert.equal(r503.error_code, 'no_healthy_instance');
  const inv = await t.http.post('/r/invoke/echo', { method: 'GET', path: '/whoami' }, { token: s.sk.value });
  assert.equal(inv.status, 503);
  const after = await service(serviceId);
  assert.equal(after.service_status, 'running', 'a running service whose replicas died stays running (503) while it re-places');
  assert.ok(after.deploy_status.message.length > 0);
  void before;
  // the replacements can start again
  rmSync(app.crashFile, { force: true });
  assert.ok(!existsSync(app.crashFile));
  await waitFor('echo healthy again after re-placement', async () => (await healthyCount(serviceId)) >= 1, 60_000);
});

test('a stopped service answers 400 on proxy and invoke; undeploy removes every instance; delete', async () => {
  const stop = await t.http.post(`/containers/${serviceId}/stop`, {}, mgmt());
  assert.equal(stop.status, 200, stop.text);
  await waitFor('stopped', async () => (await service(serviceId)).service_status === 'stopped', 30_000);
  const r = await fetch(proxyUrl('echo', '/whoami'), { headers: auth(s.sk.value) });
  assert.equal(r.status, 400);
  assert.equal(((await r.json()) as Record<string, string>).error_code, 'service_not_running');
  assert.equal((await t.http.post('/r/invoke/echo', { method: 'GET', path: '/' }, { token: s.sk.value })).status, 400);
  const un = await t.http.post(`/containers/${serviceId}/undeploy`, {}, mgmt());
  assert.equal(un.status, 200, un.text);
  await waitFor('undeployed: created, no instances', async () => {
    const sv = await service(serviceId);
    return sv.service_status === 'created' && sv.instance_list.length === 0;
  }, 30_000);
  // every app process of the service is gone
  await waitFor('instances removed on their agents', () =>
    [...appPids].every((pid) => {
      try {
        process.kill(pid, 0);
        return false;
      } catch {
        return true;
      }
    }), 20_000);
  assert.equal((await t.http.del(`/containers/${serviceId}`, mgmt())).status, 200);
  assert.equal((await t.http.get(`/containers/${serviceId}`, mgmt())).status, 404);
});
