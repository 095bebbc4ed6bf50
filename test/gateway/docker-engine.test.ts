/**
 * Container services on a real Docker Engine, the whole path: a node, a `gantry agent
 * --container-runtime docker` child process on the run's throwaway dockerd (GANTRY_TEST_DOCKER_HOST,
 * scripts/run-tests.mjs), the busybox httpd image. Deploy (port binding, env, labels as the daemon
 * records them), health, proxy and invoke through the gateway, a killed container replaced, an
 * agent restart adopting its containers, stop, undeploy removing every container (the daemon's
 * list by label), and deploys that cannot succeed ending `failed` with the daemon's words: an image
 * that does not exist, a GPU device request on a host without the nvidia runtime, a container that
 * crashes at start (its log lines in instance_error). Skipped, naming dockerd, without a daemon.
 */
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { setupTeam, spawnAgent, tmpDir, waitFor, type AgentProcess, type TeamSetup } from '../agents/helpers.js';
import { busyboxImage, containersByLabel, docker, dockerSkip, dockerSocket } from '../helpers/dockerd.js';
import { LABEL_INSTANCE, LABEL_SERVICE } from '../../src/agent/containers/docker.js';

let t: TestNode;
let s: TeamSetup;
let agent: AgentProcess;
const createdIds: string[] = [];
const stateDir = dockerSkip ? '' : tmpDir('gw-dockerd-agent-');
const mgmt = () => ({ token: s.user.accessToken, team: s.user.teamId });
const auth = () => ({ authorization: `Bearer ${s.sk.value}` });

function startAgent(): AgentProcess {
  // DOCKER_HOST (a unix:// URL) is the agent's default socket when --docker-socket is not given
  return spawnAgent(
    ['--server', `127.0.0.1:${t.node.grpcPort}`, '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', stateDir, '--gpu', 'NVIDIA L40S:48', '--gpu', 'NVIDIA L40S:48', '--container-runtime', 'docker', '--container-health-interval-ms', '200', '--tunnel-url', 'none'],
    { DOCKER_HOST: `unix://${dockerSocket}`, LOG_LEVEL: 'info' },
  );
}

async function service(id: string): Promise<Record<string, any>> {
  const r = await t.http.get(`/containers/${id}`, mgmt());
  assert.equal(r.status, 200, r.text);
  return r.body;
}

async function create(slug: string, over: Record<string, unknown> = {}): Promise<string> {
  const r = await t.http.post(
    '/containers',
    { service_slug: slug, display_name: slug, docker_image: busyboxImage, exposed_port: 8080, health_path: '/health', env_config: [{ env_name: 'MODEL', env_value: 'tiny' }], ...over },
    mgmt(),
  );
  assert.equal(r.status, 200, r.text);
  createdIds.push(r.body.id as string);
  return r.body.id as string;
}

async function deploy(id: string): Promise<void> {
  const r = await t.http.post(`/containers/${id}/deploy`, {}, mgmt());
  assert.equal(r.status, 200, r.text);
}

const running = async (serviceId: string) => (await containersByLabel(docker(), LABEL_SERVICE, serviceId)).filter((c) => c.State === 'running');

describe('container services on the run\'s dockerd', { skip: dockerSkip, timeout: 240_000 }, () => {
  let busy = '';

  before(async () => {
    t = await startTestNode({ GANTRY_AGENT_GRACE_S: 60, GANTRY_HEARTBEAT_INTERVAL_S: 1, GANTRY_PROXY_TIMEOUT_MS: 10_000 }, 'gw_dockerd');
    s = await setupTeam(t);
    agent = startAgent();
    await agent.waitLine((l) => l.msg === 'connected to the server', 'the agent to connect', 30_000);
  });

  after(async () => {
    agent?.kill('SIGTERM');
    await Promise.race([agent?.exited, new Promise((r) => setTimeout(r, 8_000))]);
    agent?.kill('SIGKILL');
    await t?.stop();
    // nothing of this file's services is left on the daemon when a test failed half-way
    for (const id of createdIds) for (const c of await containersByLabel(docker(), LABEL_SERVICE, id)) await docker().getContainer(c.Id).remove({ force: true }).catch(() => undefined);
  });

  test('deploy 2 replicas: created with port binding, env and labels; healthy; proxy and invoke through the gateway', async () => {
    busy = await create('busy', { replica_count: 2 });
    await deploy(busy);
    const sv = await waitFor('busy running with 2 healthy replicas', async () => {
      const x = await service(busy);
      return x.service_status === 'running' && x.deploy_status.healthy === 2 && x;
    }, 60_000);
    const containers = await running(busy);
    assert.equal(containers.length, 2, 'the daemon runs 2 containers labelled with the service');
    assert.deepEqual(containers.map((c) => c.Labels[LABEL_INSTANCE]).sort(), (sv.instance_list as Array<Record<string, string>>).map((i) => i.instance_id).sort());
    for (const c of containers) {
      const info = await docker().getContainer(c.Id).inspect();
      assert.equal(info.Config.Image, busyboxImage);
      assert.ok(info.Config.Env.includes('MODEL=tiny'));
      assert.equal(info.Config.Labels['gantry.service_slug'], 'busy');
      assert.equal(info.Config.Labels['gantry.health_path'], '/health');
      assert.deepEqual(info.HostConfig.PortBindings, { '8080/tcp': [{ HostIp: '127.0.0.1', HostPort: '' }] });
    }
    // proxy: the container's / and its environment (a CGI of busybox httpd)
    const root = await fetch(`${t.baseUrl}/r/containers/busy/`, { headers: auth() });
    assert.equal(root.status, 200);
    assert.equal(await root.text(), 'hello from busybox\n');
    const env = await fetch(`${t.baseUrl}/r/containers/busy/cgi-bin/env`, { headers: auth() });
    assert.match(await env.text(), /^MODEL=tiny$/m);
    // invoke: the structured call reaches the container's CGI with method and body
    const inv = await t.http.post('/r/invoke/busy', { method: 'POST', path: '/cgi-bin/invoke', headers: { 'content-type': 'text/plain' }, body_base64: Buffer.from('payload').toString('base64') }, { token: s.sk.value });
    assert.equal(inv.status, 200, inv.text);
    assert.equal(inv.body.status_code, 200);
    assert.deepEqual(JSON.parse(Buffer.from(inv.body.body_base64, 'base64').toString()), { invoked_by: 'busybox', method: 'POST', model: 'tiny', body_bytes: 7 });
  });

  test('a container killed through the daemon is replaced by a new one; the service stays running', async () => {
    const before = await service(busy);
    const [victim] = await running(busy);
    assert.ok(victim);
    const victimInstance = victim.Labels[LABEL_INSTANCE] as string;
    await docker().getContainer(victim.Id).kill({ signal: 'SIGKILL' });
    const after = await waitFor('a replacement healthy in place of the killed replica', async () => {
      const x = await service(busy);
      const ids = (x.instance_list as Array<Record<string, any>>).map((i) => i.instance_id as string);
      // two replicas listed, none of them the victim (deploy_status alone may still count the victim for a moment)
      return ids.length === 2 && !ids.includes(victimInstance) && x.deploy_status.healthy === 2 && x;
    }, 60_000);
    assert.equal(after.service_status, 'running');
    const kept = (before.instance_list as Array<Record<string, string>>).map((i) => i.instance_id).filter((id) => id !== victimInstance);
    assert.ok(kept.every((id) => (after.instance_list as Array<Record<string, string>>).some((i) => i.instance_id === id)), 'the other replica was left alone');
    await waitFor('the killed container removed from the daemon', async () => (await containersByLabel(docker(), LABEL_INSTANCE, victimInstance)).length === 0, 20_000);
    await waitFor('two containers of the service running in the daemon', async () => (await running(busy)).length === 2, 20_000);
    assert.equal((await fetch(`${t.baseUrl}/r/containers/busy/health`, { headers: auth() })).status, 200);
  });

  test('an agent restart adopts its running containers: same instances, same containers, still served', async () => {
    const before = (await running(busy)).map((c) => c.Id).sort();
    const instances = ((await service(busy)).instance_list as Array<Record<string, string>>).map((i) => i.instance_id).sort();
    agent.kill('SIGKILL');
    await agent.exited;
    assert.deepEqual((await running(busy)).map((c) => c.Id).sort(), before, 'the containers outlive the agent');
    agent = startAgent();
    await agent.waitLine((l) => l.msg === 'connected to the server', 'the restarted agent to connect', 30_000);
    await agent.waitLine((l) => l.msg === 'container manager: adopted instance', 'an adopted instance', 30_000);
    const sv = await waitFor('busy healthy on its adopted replicas', async () => {
      const x = await service(busy);
      return x.deploy_status.healthy === 2 && x;
    }, 60_000);
    assert.deepEqual((sv.instance_list as Array<Record<string, string>>).map((i) => i.instance_id).sort(), instances);
    assert.deepEqual((await running(busy)).map((c) => c.Id).sort(), before, 'no container was recreated');
    assert.equal((await fetch(`${t.baseUrl}/r/containers/busy/`, { headers: auth() })).status, 200);
  });

  test('stop keeps the stopped containers; undeploy removes every container of the service', async () => {
    assert.equal((await t.http.post(`/containers/${busy}/stop`, {}, mgmt())).status, 200);
    await waitFor('stopped', async () => (await service(busy)).service_status === 'stopped', 60_000);
    const all = await containersByLabel(docker(), LABEL_SERVICE, busy);
    assert.equal(all.length, 2);
    assert.ok(all.every((c) => c.State !== 'running'), 'stopped, not removed');
    assert.equal((await fetch(`${t.baseUrl}/r/containers/busy/`, { headers: auth() })).status, 400);
    assert.equal((await t.http.post(`/containers/${busy}/undeploy`, {}, mgmt())).status, 200);
    await waitFor('created again', async () => (await service(busy)).service_status === 'created', 60_000);
    assert.deepEqual(await containersByLabel(docker(), LABEL_SERVICE, busy), [], 'the daemon has no container of the service left');
  });

  test('deploys that cannot succeed end failed with the reason: a missing image, GPUs without the nvidia runtime, a crash at start', async () => {
    const missing = await create('missing', { docker_image: 'gantry-test/does-not-exist:9' });
    const gpu = await create('gpu', { gpu_count: 1 });
    const crash = await create('crash', { env_config: [{ env_name: 'CRASH', env_value: 'weights missing' }] });
    await Promise.all([missing, gpu, crash].map(deploy));
    const failed = (id: string) =>
      waitFor(`${id} failed`, async () => {
        const x = await service(id);
        return x.service_status === 'failed' && x;
      }, 60_000);
    const [m, g, c] = await Promise.all([failed(missing), failed(gpu), failed(crash)]);

    // the image: named, with the daemon's reason (offline: a DNS error naming the registry; online: pull access denied)
    assert.match(m.deploy_status.message, /failed: image gantry-test\/does-not-exist:9 is not on this host and could not be pulled: \S/);
    assert.equal(m.instance_list.length, 1);
    assert.match(m.instance_list[0].instance_error, /^image gantry-test\/does-not-exist:9 is not on this host and could not be pulled: \S/);

    // GPUs: the create carried the device request; the daemon (no nvidia runtime) refused the start
    assert.match(g.deploy_status.message, /could not select device driver "nvidia" with capabilities: \[\[gpu\]\]/);
    const [gc] = await containersByLabel(docker(), LABEL_SERVICE, gpu);
    assert.ok(gc, 'the created container is kept for inspection until undeploy');
    const gi = await docker().getContainer(gc.Id).inspect();
    assert.deepEqual(gi.HostConfig.DeviceRequests?.map((r) => ({ Driver: r.Driver, Count: r.Count, Capabilities: r.Capabilities })), [{ Driver: 'nvidia', Count: 1, Capabilities: [['gpu']] }]);

    // the crash: exit code and the container's own log lines (stdout and stderr) in instance_error;
    // the exit is seen at start (DockerRuntime.addressOf) or, when the container was still running at
    // its inspect, by the exit watcher (ContainerManager.onExited): both name the code
    assert.match(c.deploy_status.message, /exited( at start)? with code 3/);
    assert.match(c.instance_list[0].instance_error, /app: crashing as asked \(weights missing\)/);
    assert.match(c.instance_list[0].instance_error, /app: booting with MODEL=/);

    // a failed service stays failed (no re-placement) and undeploy clears the daemon
    for (const id of [missing, gpu, crash]) assert.equal((await service(id)).instance_list.length, 1);
    for (const id of [missing, gpu, crash]) assert.equal((await t.http.post(`/containers/${id}/undeploy`, {}, mgmt())).status, 200);
    await waitFor('all undeployed', async () => (await Promise.all([missing, gpu, crash].map(service))).every((x) => x.service_status === 'created'), 60_000);
    for (const id of [missing, gpu, crash]) assert.deepEqual(await containersByLabel(docker(), LABEL_SERVICE, id), []);
  });
});
