/**
 * The docker runtime end to end on the Engine API stand-in (test/helpers/docker-engine-standin.ts:
 * the Engine API's paths and JSON shapes; "containers" are real local HTTP servers), for what a
 * real daemon here cannot do on demand: a pull that downloads the image, and a GPU service that
 * starts (no nvidia runtime on this host: the real daemon refuses GPU device requests at start,
 * test/gateway/docker-engine.test.ts). Placement honours gpu_count against the agent's GPUs; the
 * gateway reaches the container through the agent's stream.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { setupTeam, spawnAgent, tmpDir, waitFor, type AgentProcess, type TeamSetup } from '../agents/helpers.js';
import { httpServiceFactory, startDockerEngineStandin, type DockerEngineStandin } from '../helpers/docker-engine-standin.js';

let t: TestNode;
let s: TeamSetup;
let engine: DockerEngineStandin;
let agent: AgentProcess;
const mgmt = () => ({ token: s.user.accessToken, team: s.user.teamId });

before(async () => {
  engine = await startDockerEngineStandin({ socketPath: path.join(tmpDir('gw-docker-'), 'docker.sock'), images: { 'acme/llm:1.0': httpServiceFactory('acme/llm:1.0') } });
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1 }, 'gw_docker');
  s = await setupTeam(t);
  agent = spawnAgent(['--server', `127.0.0.1:${t.node.grpcPort}`, '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gw-docker-agent-'), '--gpu', 'NVIDIA L40S:48', '--gpu', 'NVIDIA L40S:48', '--container-runtime', 'docker', '--docker-socket', engine.socketPath as string, '--container-health-interval-ms', '200', '--labels', 'inference']);
  await agent.waitLine((l) => l.msg === 'connected to the server', 'the agent to connect', 30_000);
});

after(async () => {
  agent?.kill('SIGKILL');
  await agent?.exited;
  await t?.stop();
  await engine?.close();
});

async function service(id: string): Promise<Record<string, any>> {
  return (await t.http.get(`/containers/${id}`, mgmt())).body;
}

test('a docker service with 2 GPUs: pulled, created with the device request, env, labels and port binding; reachable through the proxy; undeploy removes it', async () => {
  const r = await t.http.post(
    '/containers',
    { service_slug: 'llm', display_name: 'LLM', docker_image: 'acme/llm:1.0', exposed_port: 8000, health_path: '/health', gpu_count: 2, required_labels: ['inference'], env_config: [{ env_name: 'MODEL', env_value: 'tiny' }], volume_config: [{ host_path: '/srv/models', container_path: '/models' }] },
    mgmt(),
  );
  assert.equal(r.status, 200, r.text);
  const id = r.body.id as string;
  assert.equal((await t.http.post(`/containers/${id}/deploy`, {}, mgmt())).status, 200);
  await waitFor('running', async () => (await service(id)).deploy_status.healthy === 1, 30_000);
  assert.deepEqual(engine.pulls.map((p) => `${p.fromImage}:${p.tag}`), ['acme/llm:1.0']);
  const create = engine.creates.at(-1)!.body;
  assert.deepEqual(create.HostConfig.DeviceRequests, [{ Driver: 'nvidia', Count: 2, Capabilities: [['gpu']] }]);
  assert.ok((create.Env as string[]).includes('MODEL=tiny'));
  assert.deepEqual(create.HostConfig.Binds, ['/srv/models:/models']);
  assert.equal(create.HostConfig.PortBindings['8000/tcp'][0].HostIp, '127.0.0.1');
  assert.equal(create.Labels['gantry.service_id'], id);
  const p = await fetch(`${t.baseUrl}/r/containers/llm/v1/models`, { headers: { authorization: `Bearer ${s.sk.value}` } });
  assert.equal(p.status, 200);
  assert.equal(await p.text(), 'hello from acme/llm:1.0');
  const env = await fetch(`${t.baseUrl}/r/containers/llm/env/MODEL`, { headers: { authorization: `Bearer ${s.sk.value}` } });
  assert.equal(await env.text(), 'tiny');

  // a second service asking for 2 more GPUs does not fit on the 2-GPU agent: failed, with the reason
  const more = await t.http.post('/containers', { service_slug: 'llm2', display_name: 'LLM 2', docker_image: 'acme/llm:1.0', exposed_port: 8000, gpu_count: 1 }, mgmt());
  assert.equal((await t.http.post(`/containers/${more.body.id}/deploy`, {}, mgmt())).status, 200);
  const failed = await waitFor('failed for lack of GPUs', async () => {
    const sv = await service(more.body.id as string);
    return sv.service_status === 'failed' && sv;
  }, 20_000);
  assert.match(failed.deploy_status.message, /GPU/);

  assert.equal((await t.http.post(`/containers/${id}/undeploy`, {}, mgmt())).status, 200);
  await waitFor('undeployed', async () => (await service(id)).service_status === 'created', 30_000);
  await waitFor('the container removed from the engine', () => engine.containerCount() === 0, 10_000);
});
