/**
 * DockerRuntime against a real Docker Engine: the run's throwaway dockerd (GANTRY_TEST_DOCKER_HOST,
 * started by scripts/run-tests.mjs with the busybox httpd image imported from a rootfs). Create
 * with port binding, env and labels as the daemon records them; logs; stop; remove; a container
 * that exits or is killed reports its exit; a fresh runtime (agent restart) finds and watches its
 * containers; GPU device requests are accepted by create and refused at start by a daemon without
 * the nvidia runtime (the failure carries the daemon's words); a missing image fails naming it.
 * Skipped, naming dockerd, when the run has no daemon.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { DockerRuntime, LABEL_INSTANCE, containerName } from '../../src/agent/containers/docker.js';
import type { ContainerSpec, ExitInfo } from '../../src/agent/containers/types.js';
import { createLogger } from '../../src/shared/logger.js';
import { parseAgentArgs } from '../../src/agent/config.js';
import { busyboxImage, containersByLabel, docker, dockerSkip, dockerSocket } from '../helpers/dockerd.js';
import { httpRequest, waitFor } from './helpers.js';

const logger = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');
const run = Date.now().toString(36);
let seq = 0;

function spec(over: Partial<ContainerSpec> = {}): ContainerSpec {
  seq++;
  return {
    instanceId: `${String(seq).padStart(4, '0')}real-${run}`,
    serviceId: `svc-real-${run}`,
    serviceSlug: 'busy',
    image: busyboxImage,
    exposedPort: 8080,
    env: [{ name: 'MODEL', value: 'tiny' }, { name: 'HF_TOKEN', value: 'hf_secret' }],
    volumes: [],
    gpuCount: 0,
    healthPath: '/health',
    ...over,
  };
}

describe('against the real Docker Engine (the run\'s dockerd)', { skip: dockerSkip, timeout: 120_000 }, () => {
  const rt = dockerSkip ? (null as unknown as DockerRuntime) : new DockerRuntime({ logger, socketPath: dockerSocket });
  const started: string[] = [];
  after(async () => {
    if (!rt) return;
    for (const id of started) await rt.remove(id).catch(() => undefined);
    await rt.close();
  });
  const start = async (s: ContainerSpec, onExit: (i: ExitInfo) => void = () => undefined) => {
    started.push(s.instanceId);
    return rt.start(s, onExit);
  };

  test('create: port bound on 127.0.0.1, env and labels as the daemon records them; serves; logs; list; stop; remove', async () => {
    const s = spec();
    const exits: ExitInfo[] = [];
    const addr = await start(s, (i) => exits.push(i));
    assert.equal(addr.host, '127.0.0.1');
    const info = await docker().getContainer(containerName(s)).inspect();
    assert.equal(info.Name, `/gantry-busy-${s.instanceId}`);
    assert.equal(info.Config.Image, busyboxImage);
    assert.ok(info.Config.Env.includes('MODEL=tiny') && info.Config.Env.includes('HF_TOKEN=hf_secret'));
    assert.deepEqual(
      Object.fromEntries(Object.entries(info.Config.Labels).filter(([k]) => k.startsWith('gantry.'))),
      { 'gantry.instance_id': s.instanceId, 'gantry.service_id': s.serviceId, 'gantry.service_slug': 'busy', 'gantry.health_path': '/health' },
    );
    assert.deepEqual(info.HostConfig.PortBindings, { '8080/tcp': [{ HostIp: '127.0.0.1', HostPort: '' }] });
    assert.deepEqual(info.HostConfig.RestartPolicy?.Name, 'no');
    assert.equal(info.NetworkSettings.Ports['8080/tcp']?.[0]?.HostPort, String(addr.port));
    // busybox httpd answers on the published port, with the env the spec gave
    const health = await waitFor(() => httpRequest(addr.host, addr.port, '/health').catch(() => null), 'the container to answer', 20_000, 100);
    assert.equal(health.status, 200);
    assert.match((await httpRequest(addr.host, addr.port, '/cgi-bin/env')).body, /^MODEL=tiny$/m);
    // logs: stdout and stderr of the container, demultiplexed
    const logs = await waitFor(async () => ((await rt.logs(s.instanceId, 20)).includes('app: warming up') ? rt.logs(s.instanceId, 20) : null), 'the logs');
    assert.match(logs, /app: booting with MODEL=tiny/);
    assert.match(logs, /app: warming up/);
    assert.deepEqual((await rt.list()).find((x) => x.instanceId === s.instanceId), { instanceId: s.instanceId, host: '127.0.0.1', port: addr.port, serviceId: s.serviceId, running: true, healthPath: '/health' });
    // stop: the container is stopped (not removed), no onExit; stopping again is fine
    await rt.stop(s.instanceId, 5000);
    await rt.stop(s.instanceId, 5000);
    assert.equal((await docker().getContainer(containerName(s)).inspect()).State.Running, false);
    assert.deepEqual(exits, []);
    await rt.remove(s.instanceId);
    await rt.remove(s.instanceId);
    assert.deepEqual(await containersByLabel(docker(), LABEL_INSTANCE, s.instanceId), [], 'no container left for the instance');
  });

  test('a container that exits on its own (crash at start) and one killed through the daemon report their exit once', async () => {
    const crash = spec({ env: [{ name: 'CRASH', value: 'weights missing' }] });
    const crashExits: ExitInfo[] = [];
    // it may exit before start() has inspected it (start fails) or after (onExit): either names code 3
    const early = await start(crash, (i) => crashExits.push(i)).then(
      () => null,
      (e: Error) => e.message,
    );
    if (early !== null) assert.equal(early, `the container of ${busyboxImage} exited at start with code 3`);
    else {
      await waitFor(() => crashExits.length > 0, 'the crash to be reported', 20_000);
      assert.deepEqual(crashExits, [{ code: 3 }]);
    }
    assert.match(await rt.logs(crash.instanceId, 5), /app: crashing as asked \(weights missing\)/);

    const killed = spec();
    const exits: ExitInfo[] = [];
    await start(killed, (i) => exits.push(i));
    await docker().getContainer(containerName(killed)).kill({ signal: 'SIGKILL' });
    await waitFor(() => exits.length > 0, 'the kill to be reported', 20_000);
    assert.deepEqual(exits, [{ code: 137 }]);
    assert.equal((await rt.list()).find((x) => x.instanceId === killed.instanceId)?.running, false);
  });

  test('a fresh runtime (agent restart) finds its running containers, reuses them and watches them for exits', async () => {
    const s = spec();
    const addr = await start(s);
    const rt2 = new DockerRuntime({ logger, socketPath: dockerSocket });
    try {
      assert.deepEqual((await rt2.list()).find((x) => x.instanceId === s.instanceId), { instanceId: s.instanceId, host: '127.0.0.1', port: addr.port, serviceId: s.serviceId, running: true, healthPath: '/health' });
      const again = await rt2.start(s, () => undefined);
      assert.equal(again.port, addr.port, 'the running container is reused, not recreated');
      // one wait per container: the latest caller hears the exit
      const exits: ExitInfo[] = [];
      await rt2.watch(s.instanceId, (i) => exits.push(i));
      assert.equal((await containersByLabel(docker(), LABEL_INSTANCE, s.instanceId)).length, 1);
      await docker().getContainer(containerName(s)).kill({ signal: 'SIGKILL' });
      await waitFor(() => exits.length > 0, 'the adopted container\'s exit', 20_000);
      assert.equal(exits[0]?.code, 137);
      await rt2.remove(s.instanceId);
      assert.deepEqual(await containersByLabel(docker(), LABEL_INSTANCE, s.instanceId), []);
    } finally {
      await rt2.close();
    }
  });

  test('GPU device requests: create carries them to the daemon; a daemon without the nvidia runtime refuses the start, in its own words', async () => {
    const s = spec({ gpuCount: 2 });
    await assert.rejects(start(s), (e: Error) => {
      assert.match(e.message, new RegExp(`the daemon could not start the container of ${busyboxImage.replace(/[/.]/g, '\\$&')}: could not select device driver "nvidia" with capabilities: \\[\\[gpu\\]\\]`));
      return true;
    });
    const info = await docker().getContainer(containerName(s)).inspect();
    assert.deepEqual(info.HostConfig.DeviceRequests?.map((r) => ({ Driver: r.Driver, Count: r.Count, Capabilities: r.Capabilities })), [{ Driver: 'nvidia', Count: 2, Capabilities: [['gpu']] }]);
    const all = spec({ gpuCount: -1 });
    await assert.rejects(start(all), /could not select device driver "nvidia"/);
    assert.equal((await docker().getContainer(containerName(all)).inspect()).HostConfig.DeviceRequests?.[0]?.Count, -1);
  });

  test('an image that does not exist fails the start naming the image and the daemon\'s reason', async () => {
    // a registry that refuses at once (no network needed): the daemon's reason names only the registry
    const image = '127.0.0.1:9/gantry-test/no-such-image:404';
    await assert.rejects(start(spec({ image })), (e: Error) => {
      assert.match(e.message, /^image 127\.0\.0\.1:9\/gantry-test\/no-such-image:404 is not on this host and could not be pulled: /);
      assert.match(e.message, /127\.0\.0\.1:9.*connection refused/);
      return true;
    });
  });
});

test('agent configuration: the docker socket from --docker-socket (a path or unix://), else a unix:// DOCKER_HOST, else /var/run/docker.sock', () => {
  const base = ['--server', '127.0.0.1:1', '--credential', 'ak-x', '--container-runtime', 'docker'];
  const sock = (argv: string[], env: Record<string, string>) => parseAgentArgs([...base, ...argv], env)?.dockerSocket;
  assert.equal(sock([], {}), '/var/run/docker.sock');
  assert.equal(sock([], { DOCKER_HOST: 'unix:///run/user/1000/docker.sock' }), '/run/user/1000/docker.sock');
  assert.equal(sock([], { DOCKER_HOST: 'tcp://10.0.0.1:2375' }), '/var/run/docker.sock', 'a tcp DOCKER_HOST is not used');
  assert.equal(sock(['--docker-socket', 'unix:///tmp/d.sock'], { DOCKER_HOST: 'unix:///other.sock' }), '/tmp/d.sock');
  assert.equal(sock([], { GANTRY_AGENT_DOCKER_SOCKET: '/srv/docker.sock', DOCKER_HOST: 'unix:///other.sock' }), '/srv/docker.sock');
});
