/**
 * Rolling updates of container services end to end on one node (docs/api.md "Rolling updates"):
 * two `gantry agent --container-runtime exec` child processes run a small app that answers its
 * $VERSION; a client sends requests through the real gateway (/r/containers) the whole time.
 *
 * - an env change of a running 2-replica service rolls the replicas one at a time: no request
 *   fails, every replica ends on the new revision answering the new value, and deploy_status.rollout
 *   showed `rolling` then `completed`
 * - an update whose new replica never becomes healthy (a health_path that answers 404; a command
 *   that exits) is rolled back: the old replicas serve throughout, the stored spec is the previous
 *   one again, and deploy_status.rollout is `rolled_back` with the reason
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { AGENT_TRANSPORTS, agentServer, setupTeam, spawnAgent, tmpDir, waitFor, type AgentProcess, type TeamSetup } from '../agents/helpers.js';

const HEALTH_TIMEOUT_MS = 3_000;
let t: TestNode;
let s: TeamSetup;
const procs: AgentProcess[] = [];
/** Clients still sending (a failed test leaves them running): stopped at the end. */
const stops: Array<() => Promise<void>> = [];
const dir = mkdtempSync(path.join(os.tmpdir(), 'gantry-rollout-app-'));
const script = path.join(dir, 'app.cjs');
writeFileSync(
  script,
  `const http = require('node:http');
if (process.env.EXIT_AT_START === '1') { console.error('EXIT_AT_START: exiting'); process.exit(4); }
http.createServer((req, res) => {
  const p = new URL(req.url, 'http://x').pathname;
  if (p === '/health') return res.end('ok');
  if (p === '/version') return setTimeout(() => res.end(process.env.VERSION || ''), 20);
  res.statusCode = 404; res.end('no route ' + p);
}).listen(Number(process.env.PORT), '127.0.0.1');
`,
);
const mgmt = () => ({ token: s.user.accessToken, team: s.user.teamId });
const auth = (): Record<string, string> => ({ authorization: `Bearer ${s.sk.value}` });

async function service(id: string): Promise<Record<string, any>> {
  const r = await t.http.get(`/containers/${id}`, mgmt());
  assert.equal(r.status, 200, r.text);
  return r.body;
}

const live = (sv: Record<string, any>) => (sv.instance_list as Array<Record<string, any>>).filter((i) => ['pending', 'starting', 'running'].includes(i.instance_status as string));

/** A running 2-replica service answering VERSION=v1 on /version. */
async function deployed(slug: string): Promise<string> {
  const r = await t.http.post(
    '/containers',
    { service_slug: slug, display_name: `rollout ${slug}`, docker_image: JSON.stringify(['node', script]), exposed_port: 8080, health_path: '/health', replica_count: 2, env_config: [{ env_name: 'VERSION', env_value: 'v1' }] },
    mgmt(),
  );
  assert.equal(r.status, 200, r.text);
  const id = r.body.id as string;
  assert.equal((await t.http.post(`/containers/${id}/deploy`, {}, mgmt())).status, 200);
  await waitFor('2 healthy replicas', async () => {
    const sv = await service(id);
    return sv.service_status === 'running' && sv.deploy_status.healthy === 2;
  }, 30_000);
  return id;
}

/** Requests through the gateway, 3 at a time, until stopped: every answer's status and body. */
function client(slug: string): { stop(): Promise<void>; failures: string[]; bodies: string[] } {
  let going = true;
  const failures: string[] = [];
  const bodies: string[] = [];
  const loop = async () => {
    while (going) {
      try {
        const r = await fetch(`${t.baseUrl}/r/containers/${slug}/version`, { headers: auth() });
        const text = await r.text();
        if (r.status !== 200) failures.push(`${r.status} ${text}`);
        else bodies.push(text);
      } catch (e) {
        failures.push(String(e));
      }
    }
  };
  const loops = [loop(), loop(), loop()];
  return {
    failures,
    bodies,
    stop: async () => {
      going = false;
      await Promise.all(loops);
    },
  };
}

async function remove(id: string): Promise<void> {
  assert.equal((await t.http.post(`/containers/${id}/undeploy`, {}, mgmt())).status, 200);
  await waitFor('undeployed', async () => (await service(id)).service_status === 'created', 20_000);
  assert.equal((await t.http.del(`/containers/${id}`, mgmt())).status, 200);
}

before(async () => {
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1, GANTRY_PROXY_TIMEOUT_MS: 10_000, GANTRY_AUTOSCALE_INTERVAL_MS: 100, GANTRY_ROLLOUT_HEALTH_TIMEOUT_MS: HEALTH_TIMEOUT_MS }, 'rollout');
  s = await setupTeam(t);
  for (const [n, machine] of ['ro-agent-a', 'ro-agent-b'].entries()) {
    procs.push(
      spawnAgent(
        ['--server', agentServer(t.node, AGENT_TRANSPORTS[n % AGENT_TRANSPORTS.length] ?? 'grpc'), '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('ro-agent-'), '--machine-id', machine, '--container-runtime', 'exec', '--container-health-interval-ms', '100', '--tunnel-url', 'none'],
        { LOG_LEVEL: 'info' },
      ),
    );
  }
  await waitFor('two agents with the exec runtime', async () => {
    const r = await t.http.get('/agents', mgmt());
    return (r.body.agent_list as Array<Record<string, any>>).filter((a) => a.agent_status !== 'offline' && a.container_runtime === 'exec').length === 2;
  }, 30_000);
});

after(async () => {
  for (const stop of stops) await stop();
  for (const p of procs) p.kill('SIGTERM');
  await Promise.race([Promise.all(procs.map((p) => p.exited)), new Promise((r) => setTimeout(r, 8_000))]);
  for (const p of procs) p.kill('SIGKILL');
  await t.stop();
  rmSync(dir, { recursive: true, force: true });
});

test('an env change rolls 2 replicas one at a time under load: no request fails, every replica ends on the new value, the status shows rolling then completed', async () => {
  const id = await deployed('ro-env');
  const before = await service(id);
  const oldIds = new Set(live(before).map((i) => i.instance_id as string));
  const oldRevision = live(before)[0]?.spec_revision as string;
  assert.ok(oldRevision, JSON.stringify(before));
  const c = client('ro-env');
  stops.push(c.stop);
  await waitFor('the client got answers', () => c.bodies.length >= 5, 10_000);
  const put = await t.http.put(`/containers/${id}`, { env_config: [{ env_name: 'VERSION', env_value: 'v2' }] }, mgmt());
  assert.equal(put.status, 200, put.text);
  // follow the rollout: the states seen, and never more than one new replica starting
  const states: string[] = [];
  let last: unknown = null;
  const end = await waitFor('the rollout completed', async () => {
    const sv = await service(id);
    const ro = sv.deploy_status.rollout as Record<string, any> | undefined;
    if (ro && states[states.length - 1] !== ro.state) states.push(ro.state as string);
    const starting = live(sv).filter((i) => i.spec_revision !== oldRevision && !(i.instance_status === 'running' && i.healthy));
    assert.ok(starting.length <= 1, `one new replica at a time: ${JSON.stringify(sv.instance_list)}`);
    last = sv;
    return ro?.state === 'completed' && sv;
  }, 40_000, 20).catch((e: unknown) => {
    throw new Error(`${String(e)}: ${JSON.stringify(last)}`);
  });
  // requests keep flowing after it, then stop
  const after = c.bodies.length;
  await waitFor('answers after the rollout', () => c.bodies.length >= after + 10, 10_000);
  await c.stop();
  assert.deepEqual(c.failures, [], 'no request failed during the rollout');
  assert.deepEqual(states, ['rolling', 'completed']);
  const ro = end.deploy_status.rollout as Record<string, any>;
  assert.equal(ro.from_revision, oldRevision);
  assert.notEqual(ro.to_revision, oldRevision);
  assert.deepEqual([ro.updated, ro.total], [2, 2]);
  // every replica is new, on the new revision, and answers v2
  const replicas = live(end);
  assert.equal(replicas.length, 2, JSON.stringify(end.instance_list));
  for (const i of replicas) {
    assert.ok(!oldIds.has(i.instance_id as string), 'the old replicas are gone');
    assert.equal(i.spec_revision, ro.to_revision);
  }
  assert.equal(end.deploy_status.healthy, 2);
  assert.ok(c.bodies.includes('v1') && c.bodies.includes('v2'), 'the client saw both versions');
  assert.equal(c.bodies[c.bodies.length - 1], 'v2');
  const answers = await Promise.all(Array.from({ length: 10 }, () => fetch(`${t.baseUrl}/r/containers/ro-env/version`, { headers: auth() }).then((r) => r.text())));
  assert.deepEqual(new Set(answers), new Set(['v2']));
  await remove(id);
});

test('an update whose new replica never becomes healthy (health_path 404; a command that exits) is rolled back: the old replicas serve throughout, the previous spec is stored again', async () => {
  const id = await deployed('ro-bad');
  const before = await service(id);
  const oldIds = live(before).map((i) => i.instance_id as string).sort();
  const oldRevision = live(before)[0]?.spec_revision as string;
  const c = client('ro-bad');
  stops.push(c.stop);
  await waitFor('the client got answers', () => c.bodies.length >= 5, 10_000);

  // 1. the new health path answers 404: not healthy within GANTRY_ROLLOUT_HEALTH_TIMEOUT_MS
  let put = await t.http.put(`/containers/${id}`, { health_path: '/nope' }, mgmt());
  assert.equal(put.status, 200, put.text);
  await waitFor('rolling', async () => (await service(id)).deploy_status.rollout?.state === 'rolling', 10_000, 20);
  let sv = await waitFor('rolled back', async () => {
    const x = await service(id);
    return x.deploy_status.rollout?.state === 'rolled_back' && live(x).every((i) => i.spec_revision === oldRevision) && x;
  }, 30_000, 20);
  assert.match(sv.deploy_status.rollout.message as string, /^rolled back to revision \w+: new replica \w+ was not healthy within 3 s/);
  assert.equal(sv.deploy_status.rollout.from_revision, oldRevision);
  assert.equal(sv.health_path, '/health', 'the stored spec is the previous one again');
  assert.deepEqual(live(sv).map((i) => i.instance_id as string).sort(), oldIds, 'the old replicas kept serving');
  assert.equal(sv.service_status, 'running');

  // 2. the new command exits at start: the failed replica rolls it back
  put = await t.http.put(`/containers/${id}`, { env_config: [{ env_name: 'VERSION', env_value: 'v3' }, { env_name: 'EXIT_AT_START', env_value: '1' }] }, mgmt());
  assert.equal(put.status, 200, put.text);
  sv = await waitFor('rolled back again', async () => {
    const x = await service(id);
    const ro = x.deploy_status.rollout as Record<string, any> | undefined;
    return ro?.state === 'rolled_back' && ro.to_revision !== sv.deploy_status.rollout.to_revision && live(x).every((i) => i.spec_revision === oldRevision) && x;
  }, 30_000, 20);
  assert.match(sv.deploy_status.rollout.message as string, /new replica \w+ failed: /);
  assert.deepEqual(sv.env_config, [{ env_name: 'VERSION', env_value: 'v1' }], 'the stored env is the previous one again');
  assert.deepEqual(live(sv).map((i) => i.instance_id as string).sort(), oldIds);

  const n = c.bodies.length;
  await waitFor('answers after the rollbacks', () => c.bodies.length >= n + 10, 10_000);
  await c.stop();
  assert.deepEqual(c.failures, [], 'no request failed');
  assert.deepEqual(new Set(c.bodies), new Set(['v1']), 'only the old replicas answered');
  await remove(id);
});
