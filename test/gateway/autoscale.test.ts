/**
 * Autoscaling of container services end to end on one node (docs/api.md "Autoscaling"): two
 * `gantry agent --container-runtime exec` child processes run the gateway test app (fixture.ts);
 * load goes through the real gateway (/r/containers, /r/invoke); the node's intervals are small
 * (GANTRY_AUTOSCALE_INTERVAL_MS 100, cool-down 1.5 s) so each scenario takes seconds.
 *
 * - load scales a service from min_replicas up, and back down after the cool-down; a long SSE
 *   stream on a replica chosen for scale-down is not cut (the replica drains, then goes)
 * - requests beyond the replicas' concurrency cap are queued (held) and their wait adds a replica
 * - scale to zero: idle -> no replica; the next request (proxy, then invoke) is held, answered 200;
 *   the cold start shows in deploy_status.last_cold_start_ms and gantry_container_cold_start_seconds
 * - with no eligible agent the held request ends in 503 no_eligible_agent + Retry-After; a
 *   replica that never becomes healthy ends it in 503 cold_start_timeout at the hold bound
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync, writeFileSync } from 'node:fs';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { AGENT_TRANSPORTS, agentServer, setupTeam, spawnAgent, tmpDir, waitFor, type AgentProcess, type TeamSetup } from '../agents/helpers.js';
import { writeApp } from './fixture.js';

const HOLD_TIMEOUT_MS = 6_000;
let t: TestNode;
let s: TeamSetup;
const procs: AgentProcess[] = [];
const app = writeApp();
const mgmt = () => ({ token: s.user.accessToken, team: s.user.teamId });
const auth = (): Record<string, string> => ({ authorization: `Bearer ${s.sk.value}` });
const proxyUrl = (slug: string, rest: string) => `${t.baseUrl}/r/containers/${slug}${rest}`;

async function service(id: string): Promise<Record<string, any>> {
  const r = await t.http.get(`/containers/${id}`, mgmt());
  assert.equal(r.status, 200, r.text);
  return r.body;
}

async function createService(slug: string, over: Record<string, unknown>): Promise<string> {
  const r = await t.http.post(
    '/containers',
    { service_slug: slug, display_name: `autoscale ${slug}`, docker_image: JSON.stringify(['node', app.script]), exposed_port: 8080, health_path: '/health', env_config: [{ env_name: 'CRASH_FILE', env_value: app.crashFile }], ...over },
    mgmt(),
  );
  assert.equal(r.status, 200, r.text);
  return r.body.id as string;
}

async function deployAndWait(id: string): Promise<void> {
  const r = await t.http.post(`/containers/${id}/deploy`, {}, mgmt());
  assert.equal(r.status, 200, r.text);
  await waitFor('service running with a healthy replica', async () => {
    const sv = await service(id);
    return sv.service_status === 'running' && sv.deploy_status.healthy >= 1;
  }, 30_000);
}

const live = (sv: Record<string, any>) => (sv.instance_list as Array<Record<string, any>>).filter((i) => ['pending', 'starting', 'running'].includes(i.instance_status as string));

async function scaledToZero(id: string): Promise<Record<string, any>> {
  return waitFor('the service scaled to zero', async () => {
    const sv = await service(id);
    return sv.service_status === 'running' && sv.deploy_status.desired === 0 && sv.deploy_status.healthy === 0 && sv.deploy_status.draining === 0 && (sv.instance_list as unknown[]).length === 0 && sv;
  }, 30_000);
}

async function coldStartCount(): Promise<number> {
  const text = await (await fetch(`${t.origin}/metrics`)).text();
  const m = /^gantry_container_cold_start_seconds_count (\d+)/m.exec(text);
  return m ? Number(m[1]) : 0;
}

before(async () => {
  t = await startTestNode(
    // at most 4 requests at once per replica on this node: beyond, autoscaled services queue (held)
    { GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1, GANTRY_PROXY_TIMEOUT_MS: 10_000, GANTRY_PROXY_MAX_INFLIGHT: 4, GANTRY_AUTOSCALE_INTERVAL_MS: 100, GANTRY_AUTOSCALE_COOLDOWN_MS: 1_500, GANTRY_AUTOSCALE_QUEUE_DELAY_MS: 300, GANTRY_AUTOSCALE_HOLD_TIMEOUT_MS: HOLD_TIMEOUT_MS },
    'autoscale',
  );
  s = await setupTeam(t);
  for (const [n, machine] of ['as-agent-a', 'as-agent-b'].entries()) {
    const p = spawnAgent(
      ['--server', agentServer(t.node, AGENT_TRANSPORTS[n % AGENT_TRANSPORTS.length] ?? 'grpc'), '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('as-agent-'), '--machine-id', machine, '--container-runtime', 'exec', '--container-health-interval-ms', '100', '--tunnel-url', 'none'],
      { LOG_LEVEL: 'info' },
    );
    procs.push(p);
  }
  await waitFor('two agents with the exec runtime', async () => {
    const r = await t.http.get('/agents', mgmt());
    return (r.body.agent_list as Array<Record<string, any>>).filter((a) => a.agent_status !== 'offline' && a.container_runtime === 'exec').length === 2;
  }, 30_000);
});

after(async () => {
  for (const p of procs) p.kill('SIGTERM');
  await Promise.race([Promise.all(procs.map((p) => p.exited)), new Promise((r) => setTimeout(r, 8_000))]);
  for (const p of procs) p.kill('SIGKILL');
  await t.stop();
  rmSync(app.dir, { recursive: true, force: true });
});

test('validation: min_replicas > max_replicas, autoscaling fields without max_replicas, on an external service: 400 naming the field; PUT checks the merged record', async () => {
  const bad = async (body: Record<string, unknown>, field: string) => {
    const r = await t.http.post('/containers', { service_slug: 'bad-as', display_name: 'x', docker_image: 'img', exposed_port: 80, ...body }, mgmt());
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body.error_code, 'invalid_parameter', r.text);
    assert.match(r.body.error_message as string, new RegExp(field), r.text);
  };
  await bad({ min_replicas: 3, max_replicas: 2 }, 'min_replicas');
  await bad({ min_replicas: 0 }, 'min_replicas');
  await bad({ idle_timeout_s: 60 }, 'idle_timeout_s');
  await bad({ max_replicas: 0 }, 'max_replicas');
  await bad({ max_replicas: 2, target_inflight_per_replica: 0 }, 'target_inflight_per_replica');
  const ext = await t.http.post('/containers', { service_slug: 'bad-ext', display_name: 'x', service_type: 'external', external_url: 'https://example.com', max_replicas: 2 }, mgmt());
  assert.equal(ext.status, 400, ext.text);
  assert.match(ext.body.error_message as string, /max_replicas/);
  // defaults: min 1, target 8, idle 300 s; a fixed-size service shows nulls
  const id = await createService('as-defaults', { max_replicas: 4 });
  const sv = await service(id);
  assert.deepEqual([sv.min_replicas, sv.max_replicas, sv.target_inflight_per_replica, sv.idle_timeout_s], [1, 4, 8, 300]);
  const put = await t.http.put(`/containers/${id}`, { min_replicas: 5 }, mgmt());
  assert.equal(put.status, 400, put.text);
  assert.match(put.body.error_message as string, /must not exceed max_replicas/);
  const off = await t.http.put(`/containers/${id}`, { max_replicas: null, min_replicas: null }, mgmt());
  assert.equal(off.status, 200, off.text);
  const fixed = await service(id);
  assert.deepEqual([fixed.min_replicas, fixed.max_replicas, fixed.target_inflight_per_replica, fixed.idle_timeout_s], [null, null, null, null]);
  assert.equal((await t.http.del(`/containers/${id}`, mgmt())).status, 200);
});

test('load through the gateway scales from min_replicas up, and after the cool-down back down; a long stream on a draining replica is not cut', async () => {
  const id = await createService('as-load', { min_replicas: 1, max_replicas: 3, target_inflight_per_replica: 2 });
  await deployAndWait(id);
  const first = await service(id);
  assert.equal(live(first).length, 1, `starts at min_replicas: ${JSON.stringify(first)}`);
  // 6 concurrent slow requests (target 2 per replica): 3 replicas, kept up until all are healthy
  let loading = true;
  const failures: string[] = [];
  const loadLoop = (async () => {
    while (loading) {
      const rs = await Promise.all(Array.from({ length: 6 }, () => fetch(proxyUrl('as-load', '/slow?ms=400'), { headers: auth() }).then(async (r) => ({ status: r.status, text: await r.text() }))));
      for (const r of rs) if (r.status !== 200) failures.push(`${r.status} ${r.text}`);
    }
  })();
  const up = await waitFor('3 healthy replicas under load', async () => {
    const sv = await service(id);
    return sv.deploy_status.desired === 3 && sv.deploy_status.healthy === 3 && sv;
  }, 30_000);
  loading = false;
  await loadLoop;
  assert.deepEqual(failures, [], 'no request failed while scaling up');
  assert.equal(live(up).length, 3);

  // two long streams, on two different replicas (least outstanding): 2 in flight = 1 replica's worth
  const stream = async (): Promise<{ status: number; events: number; ports: Set<number> }> => {
    const r = await fetch(proxyUrl('as-load', '/sse?n=50&ms=100'), { headers: auth() });
    const text = await r.text();
    const ports = new Set([...text.matchAll(/"port":(\d+)/g)].map((m) => Number(m[1])));
    return { status: r.status, events: (text.match(/event: tick/g) ?? []).length, ports };
  };
  let streamsDone = false;
  const streams = Promise.all([stream(), stream()]).finally(() => (streamsDone = true));
  // after the cool-down: desired 1; the idle replica goes; of the two streaming ones, one drains and stays while its stream runs
  const draining = await waitFor('scale-down: one replica draining with its stream in flight', async () => {
    const sv = await service(id);
    const l = live(sv);
    return sv.deploy_status.desired === 1 && sv.deploy_status.draining === 1 && l.length === 2 && l.filter((i) => i.draining === true).length === 1 && sv;
  }, 30_000);
  assert.equal(streamsDone, false, 'observed while both streams were still open');
  assert.equal(draining.deploy_status.healthy, 2);
  const done = await streams;
  for (const r of done) {
    assert.equal(r.status, 200);
    assert.equal(r.events, 50, 'the stream ran to its end');
    assert.equal(r.ports.size, 1);
  }
  assert.notDeepEqual([...(done[0] as { ports: Set<number> }).ports], [...(done[1] as { ports: Set<number> }).ports], 'the streams were on two replicas');
  // once its stream ended the drained replica is removed
  const after = await waitFor('the drained replica removed', async () => {
    const sv = await service(id);
    return live(sv).length === 1 && (sv.instance_list as unknown[]).length === 1 && sv.deploy_status.draining === 0 && sv.deploy_status.healthy === 1 && sv;
  }, 30_000);
  assert.equal(after.deploy_status.desired, 1);
  assert.equal((await t.http.post(`/containers/${id}/undeploy`, {}, mgmt())).status, 200);
});

test('queue delay: requests beyond every replica\'s concurrency cap wait in the gateway\'s queue (held, then answered) and the wait adds a replica', async () => {
  // target 100 in flight per replica: the in-flight count alone never asks for a second replica
  const id = await createService('as-queue', { min_replicas: 1, max_replicas: 2, target_inflight_per_replica: 100 });
  await deployAndWait(id);
  const rs = await Promise.all(Array.from({ length: 8 }, () => fetch(proxyUrl('as-queue', '/slow?ms=1500'), { headers: auth() }).then(async (r) => ({ status: r.status, text: await r.text() }))));
  for (const r of rs) assert.equal(r.status, 200, r.text);
  const sv = await waitFor('a second replica for the queue delay', async () => {
    const x = await service(id);
    return x.deploy_status.desired === 2 && x.deploy_status.healthy === 2 && x;
  }, 30_000);
  assert.equal(live(sv).length, 2);
  assert.equal((await t.http.post(`/containers/${id}/undeploy`, {}, mgmt())).status, 200);
});

test('scale to zero: idle -> no replica; the next proxied and invoked requests are held while a replica starts, then answered 200; cold start in the status and the metric', async (ctx) => {
  const id = await createService('as-zero', { min_replicas: 0, max_replicas: 1, idle_timeout_s: 1 });
  await deployAndWait(id);
  const before = await coldStartCount();
  const zero = await scaledToZero(id);
  assert.equal(zero.deploy_status.healthy, 0);
  assert.equal(zero.deploy_status.last_cold_start_ms, null, 'no cold start yet (the deploy is not one)');
  // proxy: held, then forwarded
  const r = await fetch(proxyUrl('as-zero', '/whoami'), { headers: auth() });
  assert.equal(r.status, 200, await r.clone().text());
  assert.ok(typeof ((await r.json()) as { pid: number }).pid === 'number');
  const sv = await service(id);
  assert.equal(typeof sv.deploy_status.last_cold_start_ms, 'number');
  assert.ok(sv.deploy_status.last_cold_start_ms > 0);
  assert.equal(typeof sv.deploy_status.last_cold_start_at, 'string');
  ctx.diagnostic(`cold start (proxy): ${sv.deploy_status.last_cold_start_ms} ms`);
  assert.equal(await coldStartCount(), before + 1);
  // invoke: idle again -> zero, then a structured call is held and answered too
  await scaledToZero(id);
  const inv = await t.http.post('/r/invoke/as-zero', { method: 'GET', path: '/whoami' }, { token: s.sk.value });
  assert.equal(inv.status, 200, inv.text);
  assert.equal(inv.body.status_code, 200);
  assert.equal(await coldStartCount(), before + 2);
  ctx.diagnostic(`cold start (invoke): ${(await service(id)).deploy_status.last_cold_start_ms} ms`);
  assert.equal((await t.http.post(`/containers/${id}/undeploy`, {}, mgmt())).status, 200);
});

test('scaled to zero with no eligible agent: the held request ends in 503 no_eligible_agent with Retry-After; a replica that never gets healthy: 503 cold_start_timeout at the bound', async () => {
  const id = await createService('as-nowhere', { min_replicas: 0, max_replicas: 1, idle_timeout_s: 1 });
  await deployAndWait(id);
  await scaledToZero(id);
  assert.equal((await t.http.put(`/containers/${id}`, { required_labels: ['no-agent-has-this'] }, mgmt())).status, 200);
  const r = await fetch(proxyUrl('as-nowhere', '/whoami'), { headers: auth() });
  const body = (await r.json()) as { error_code: string; error_message: string };
  assert.equal(r.status, 503);
  assert.equal(body.error_code, 'no_eligible_agent');
  assert.match(body.error_message, /required labels/);
  assert.ok(Number(r.headers.get('retry-after')) >= 1);
  assert.equal((await t.http.post(`/containers/${id}/undeploy`, {}, mgmt())).status, 200);

  // a replica that crashes at start (the app exits when its crash file exists): held until the bound
  const crashFile = `${app.dir}/crash-late`;
  const cid = await createService('as-crashy', { min_replicas: 0, max_replicas: 1, idle_timeout_s: 1, env_config: [{ env_name: 'CRASH_FILE', env_value: crashFile }] });
  await deployAndWait(cid);
  await scaledToZero(cid);
  writeFileSync(crashFile, 'x');
  const c = await fetch(proxyUrl('as-crashy', '/whoami'), { headers: auth() });
  const cb = (await c.json()) as { error_code: string; error_message: string };
  assert.equal(c.status, 503);
  assert.equal(cb.error_code, 'cold_start_timeout');
  assert.match(cb.error_message, new RegExp(`within ${HOLD_TIMEOUT_MS} ms`));
  assert.ok(Number(c.headers.get('retry-after')) >= 1);
  assert.equal((await t.http.post(`/containers/${cid}/undeploy`, {}, mgmt())).status, 200);
});
