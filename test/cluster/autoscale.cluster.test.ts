// Autoscaling counts are cluster-wide: on a 2-node cluster, each node carries at most one request
// in flight to an autoscaled service (target 1 in flight per replica), so neither node alone
// needs a second replica; the service's actor (one in the cluster, on whichever node owns it)
// sums both nodes' reports and scales to 2. Then, idle, it scales back to 1 after the cool-down.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { startCluster, clusterSkipReason, type TestCluster } from '../helpers/cluster.js';
import { setupTeam, spawnAgent, tmpDir, waitFor, type AgentProcess, type TeamSetup } from '../agents/helpers.js';
import type { TestNode } from '../helpers/node.js';
import { writeApp } from '../gateway/fixture.js';

const skip = clusterSkipReason();
let c: TestCluster;
let s: TeamSetup;
const procs: AgentProcess[] = [];
const app = writeApp();
const asNode = (i: number): TestNode => ({ http: c.nodes[i]?.http }) as unknown as TestNode;
const mgmt = () => ({ token: s.user.accessToken, team: s.user.teamId });

before(async () => {
  if (skip) return;
  c = await startCluster({ nodes: 2, env: { GANTRY_AUTOSCALE_INTERVAL_MS: '100', GANTRY_AUTOSCALE_COOLDOWN_MS: '1500' } });
  s = await setupTeam(asNode(0));
  const p = spawnAgent(['--server', `127.0.0.1:${c.nodes[0]?.grpcPort}`, '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('as-cluster-agent-'), '--container-runtime', 'exec', '--container-health-interval-ms', '100', '--tunnel-url', 'none']);
  procs.push(p);
  await p.waitLine((l) => l.msg === 'connected to the server', 'the agent to connect to node A', 60_000);
});

after(async () => {
  for (const p of procs) p.kill('SIGTERM');
  await Promise.race([Promise.all(procs.map((p) => p.exited)), new Promise((r) => setTimeout(r, 8_000))]);
  for (const p of procs) p.kill('SIGKILL');
  await c?.stop();
  rmSync(app.dir, { recursive: true, force: true });
});

test('one request in flight on each of two nodes scales a target-1 service to 2 replicas; idle, back to 1', { skip: skip ?? false, timeout: 180_000 }, async () => {
  const [A, B] = [c.nodes[0]!, c.nodes[1]!];
  const created = await B.http.post('/containers', { service_slug: 'as-echo', display_name: 'as-echo', docker_image: JSON.stringify(['node', app.script]), exposed_port: 8080, health_path: '/health', min_replicas: 1, max_replicas: 3, target_inflight_per_replica: 1 }, mgmt());
  assert.equal(created.status, 200, created.text);
  const id = created.body.id as string;
  assert.equal((await B.http.post(`/containers/${id}/deploy`, {}, mgmt())).status, 200);
  const get = async () => (await A.http.get(`/containers/${id}`, mgmt())).body as Record<string, any>;
  await waitFor('running with 1 replica', async () => {
    const sv = await get();
    return sv.service_status === 'running' && sv.deploy_status.healthy === 1;
  }, 60_000);
  const auth = { authorization: `Bearer ${s.sk.value}` };
  // both nodes route it (their routing tables reload from the change broadcast)
  for (const n of [A, B]) await waitFor(`node ${n.name} proxies`, async () => (await fetch(`${n.baseUrl}/r/containers/as-echo/whoami`, { headers: auth })).status === 200, 20_000);
  // one request at a time per node, on both nodes at once
  let loading = true;
  const statuses: number[] = [];
  const oneAtATime = async (base: string) => {
    while (loading) {
      const r = await fetch(`${base}/r/containers/as-echo/slow?ms=300`, { headers: auth });
      await r.text();
      statuses.push(r.status);
    }
  };
  const loops = Promise.all([oneAtATime(A.baseUrl), oneAtATime(B.baseUrl)]);
  try {
    const up = await waitFor('2 replicas from the two nodes\' summed load', async () => {
      const sv = await get();
      return sv.deploy_status.desired >= 2 && sv.deploy_status.healthy >= 2 && sv;
    }, 60_000);
    assert.equal(up.deploy_status.desired, 2, 'two requests in flight cluster-wide, target 1: two replicas (not three)');
  } finally {
    loading = false;
    await loops;
  }
  assert.ok(statuses.length > 0 && statuses.every((x) => x === 200), `every request answered 200 (${[...new Set(statuses)].join(',')})`);
  await waitFor('back to 1 replica after the cool-down', async () => {
    const sv = await get();
    return sv.deploy_status.desired === 1 && sv.deploy_status.draining === 0 && (sv.instance_list as unknown[]).length === 1;
  }, 60_000);
  assert.equal((await A.http.post(`/containers/${id}/undeploy`, {}, mgmt())).status, 200);
});
