// The container gateway on a 3-node cluster: the agent (exec runtime, and a tunnel target) holds its
// stream on node A; the service is created on node B; proxy, invoke, WebSocket and the agent tunnel
// are called on node C, which forwards each request node to node to A.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { rmSync } from 'node:fs';
import WebSocket from 'ws';
import { startCluster, clusterSkipReason, type TestCluster } from '../helpers/cluster.js';
import { setupTeam, spawnAgent, tmpDir, waitFor, type AgentProcess, type TeamSetup } from '../agents/helpers.js';
import type { TestNode } from '../helpers/node.js';
import { writeApp, sha256 } from '../gateway/fixture.js';

const skip = clusterSkipReason();
let c: TestCluster;
let s: TeamSetup;
const procs: AgentProcess[] = [];
const app = writeApp();
let ui: http.Server;
let uiPort = 0;
const asNode = (i: number): TestNode => ({ http: c.nodes[i]?.http }) as unknown as TestNode;
const mgmt = () => ({ token: s.user.accessToken, team: s.user.teamId });

before(async () => {
  if (skip) return;
  ui = http.createServer((req, res) => res.end(`agent ui ${req.method} ${req.url}`));
  await new Promise<void>((r) => ui.listen(0, '127.0.0.1', () => r()));
  uiPort = (ui.address() as { port: number }).port;
  c = await startCluster({ nodes: 3 });
  s = await setupTeam(asNode(0));
  const p = spawnAgent(['--server', `127.0.0.1:${c.nodes[0]?.grpcPort}`, '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gw-cluster-agent-'), '--container-runtime', 'exec', '--container-health-interval-ms', '200', '--tunnel-url', `http://127.0.0.1:${uiPort}`]);
  procs.push(p);
  await p.waitLine((l) => l.msg === 'connected to the server', 'the agent to connect to node A', 60_000);
});

after(async () => {
  for (const p of procs) p.kill('SIGTERM');
  await Promise.race([Promise.all(procs.map((p) => p.exited)), new Promise((r) => setTimeout(r, 8_000))]);
  for (const p of procs) p.kill('SIGKILL');
  await c?.stop();
  ui?.close();
  rmSync(app.dir, { recursive: true, force: true });
});

test('a proxy request to node C reaches an instance whose agent is on node A', { skip: skip ?? false, timeout: 180_000 }, async () => {
  const B = c.nodes[1]!;
  const C = c.nodes[2]!;
  const created = await B.http.post('/containers', { service_slug: 'echo', display_name: 'echo', docker_image: JSON.stringify(['node', app.script]), exposed_port: 8080, health_path: '/health', replica_count: 1 }, mgmt());
  assert.equal(created.status, 200, created.text);
  const id = created.body.id as string;
  const dep = await B.http.post(`/containers/${id}/deploy`, {}, mgmt());
  assert.equal(dep.status, 200, dep.text);
  await waitFor('running, seen from node C', async () => {
    const r = await C.http.get(`/containers/${id}`, mgmt());
    return r.body.service_status === 'running' && r.body.deploy_status.healthy === 1;
  }, 60_000);
  const auth = { authorization: `Bearer ${s.sk.value}` };
  const base = `${C.baseUrl}/r/containers/echo`;
  // node C answers (through A) for a while: its routing table reloads from the change broadcast
  const who = await waitFor('node C proxies', async () => {
    const r = await fetch(`${base}/whoami`, { headers: auth });
    return r.status === 200 && ((await r.json()) as { pid: number });
  }, 20_000);
  assert.ok(who.pid > 0);
  const post = await fetch(`${base}/echo?via=c`, { method: 'POST', headers: { ...auth, 'content-type': 'text/plain' }, body: 'across nodes' });
  assert.equal(post.status, 201);
  const pj = (await post.json()) as Record<string, any>;
  assert.equal(pj.body, 'across nodes');
  assert.equal(pj.query.via, 'c');
  const size = 8 * 1024 * 1024;
  const down = await fetch(`${base}/download?bytes=${size}`, { headers: auth });
  const got = Buffer.from(await down.arrayBuffer());
  assert.equal(got.length, size);
  assert.equal(sha256(got), down.headers.get('x-sha256'));
  const big = Buffer.alloc(3 * 1024 * 1024, 7);
  const up = await fetch(`${base}/upload`, { method: 'POST', headers: auth, body: big });
  assert.equal(((await up.json()) as { sha256: string }).sha256, sha256(big));
  const inv = await C.http.post('/r/invoke/echo', { method: 'GET', path: '/whoami' }, { token: s.sk.value });
  assert.equal(inv.status, 200, inv.text);
  assert.equal(inv.body.status_code, 200);
  // WebSocket through node C
  const ws = new WebSocket(`${base.replace(/^http/, 'ws')}/ws`, { headers: auth });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('unexpected-response', (_q, res) => reject(new Error(`upgrade answered ${res.statusCode}`)));
    ws.once('error', reject);
  });
  const echoed = new Promise<string>((resolve) => ws.once('message', (d: Buffer) => resolve(d.toString())));
  ws.send('ping via C');
  assert.equal(await echoed, 'ping via C');
  ws.close();
});

test('the agent tunnel: status and the agent\'s local port through node C', { skip: skip ?? false, timeout: 60_000 }, async () => {
  const C = c.nodes[2]!;
  const agents = await C.http.get('/agents', mgmt());
  const agentId = (agents.body.agent_list as Array<Record<string, any>>)[0]?.id as string;
  const st = await waitFor('tunnel active', async () => {
    const r = await C.http.get(`/agents/${agentId}/tunnel`, mgmt());
    return r.status === 200 && r.body.is_active && r.body;
  }, 20_000);
  assert.ok(st.tunnel_url.endsWith(`/api/v1/agents/${agentId}/tunnel/`), st.tunnel_url);
  const r = await fetch(`${C.baseUrl}/agents/${agentId}/tunnel/some/page?x=1`, { headers: { authorization: `Bearer ${s.user.accessToken}`, 'x-team-id': s.user.teamId } });
  assert.equal(r.status, 200);
  assert.equal(await r.text(), 'agent ui GET /some/page?x=1');
  // sk- callers may not use agent tunnels (management surface: J, D)
  const sk = await fetch(`${C.baseUrl}/agents/${agentId}/tunnel/`, { headers: { authorization: `Bearer ${s.sk.value}` } });
  assert.equal(sk.status, 403);
});
