/**
 * DockerRuntime (src/agent/containers/docker.ts) through dockerode against the Docker Engine API
 * stand-in (test/helpers/docker-engine-standin.ts), whose containers run real local HTTP servers:
 * what a real daemon cannot be made to do on demand here (a pull that downloads, the exact request
 * bodies, a 304 on a second stop, the TCP transport). The same runtime against the real daemon:
 * docker-engine.test.ts.
 */
import assert from 'node:assert/strict';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import Dockerode from 'dockerode';
import { DockerRuntime, containerName, demuxLogs, deviceRequests } from '../../src/agent/containers/docker.js';
import type { ContainerSpec, ExitInfo } from '../../src/agent/containers/types.js';
import { createLogger } from '../../src/shared/logger.js';
import { httpServiceFactory, startDockerEngineStandin, type DockerEngineStandin } from '../helpers/docker-engine-standin.js';
import { httpRequest, waitFor } from './helpers.js';

const logger = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');
let seq = 0;

function spec(over: Partial<ContainerSpec> = {}): ContainerSpec {
  seq++;
  return {
    instanceId: `${String(seq).padStart(4, '0')}abcd-${Date.now().toString(36)}`,
    serviceId: 'svc-7',
    serviceSlug: 'llm-api',
    image: 'gantry/test-service:1.0',
    exposedPort: 8000,
    env: [{ name: 'MODEL', value: 'llama' }, { name: 'HF_TOKEN', value: 'hf_secret' }],
    volumes: [{ hostPath: '/data/models', containerPath: '/models' }],
    gpuCount: 0,
    healthPath: '/health',
    ...over,
  };
}

test('helpers: container names, device requests, log demultiplexing', () => {
  assert.equal(containerName({ serviceSlug: 'llm-api', instanceId: '01a21820-afb3-73e5-aa27-81185d4503e5' }), 'gantry-llm-api-01a21820-afb3-73e5-aa27-81185d4503e5');
  assert.notEqual(containerName({ serviceSlug: 's', instanceId: '01a21820-afb3-73e5-aa27-81185d4503e5' }), containerName({ serviceSlug: 's', instanceId: '01a21820-afb6-75e8-953a-c3b6e4885de8' }), 'replicas placed in the same minute');
  assert.equal(containerName({ serviceSlug: 'Bad Slug!', instanceId: 'x' }), 'gantry-Bad-Slug-x');
  assert.deepEqual(deviceRequests(0), []);
  assert.deepEqual(deviceRequests(-1), [{ Driver: 'nvidia', Count: -1, Capabilities: [['gpu']] }]);
  assert.deepEqual(deviceRequests(2), [{ Driver: 'nvidia', Count: 2, Capabilities: [['gpu']] }]);
  const frame = (t: number, s: string) => {
    const d = Buffer.from(s);
    const h = Buffer.alloc(8);
    h.writeUInt8(t, 0);
    h.writeUInt32BE(d.length, 4);
    return Buffer.concat([h, d]);
  };
  assert.equal(demuxLogs(Buffer.concat([frame(1, 'out 1\n'), frame(2, 'err 1\n'), frame(1, 'out 2\n')])), 'out 1\nerr 1\nout 2\n');
  assert.equal(demuxLogs(Buffer.from('plain tty output\n')), 'plain tty output\n');
  assert.equal(demuxLogs(Buffer.alloc(0)), '');
});

describe('against the Docker Engine API stand-in', () => {
  let engine: DockerEngineStandin;
  let rt: DockerRuntime;

  before(async () => {
    engine = await startDockerEngineStandin({ images: { 'gantry/test-service:1.0': httpServiceFactory('test-service') } });
    rt = new DockerRuntime({ logger, host: engine.host, port: engine.port });
  });
  after(async () => {
    await rt.close();
    await engine.close();
  });

  test('start pulls the missing image, creates the container with the right body, publishes the port', async () => {
    const s = spec();
    const exits: ExitInfo[] = [];
    const addr = await rt.start(s, (i) => exits.push(i));
    assert.deepEqual(engine.pulls, [{ fromImage: 'gantry/test-service', tag: '1.0' }]);
    assert.equal(addr.host, '127.0.0.1');
    assert.equal(addr.instanceId, s.instanceId);
    const c = engine.container(containerName(s));
    assert.ok(c, 'container named gantry-<slug>-<id prefix>');
    assert.equal(addr.port, c.hostPort);
    assert.equal((await httpRequest(addr.host, addr.port, '/')).body, 'hello from test-service');
    assert.equal((await httpRequest(addr.host, addr.port, '/env/MODEL')).body, 'llama');

    const created = engine.creates.at(-1)!;
    assert.equal(created.name, `gantry-llm-api-${s.instanceId}`);
    assert.equal(created.body['Image'], 'gantry/test-service:1.0');
    assert.deepEqual(created.body['Env'], ['MODEL=llama', 'HF_TOKEN=hf_secret']);
    assert.deepEqual(created.body['Labels'], { 'gantry.instance_id': s.instanceId, 'gantry.service_id': 'svc-7', 'gantry.service_slug': 'llm-api', 'gantry.health_path': '/health' });
    assert.deepEqual(created.body['ExposedPorts'], { '8000/tcp': {} });
    const hc = created.body['HostConfig'] as Record<string, unknown>;
    assert.deepEqual(hc['PortBindings'], { '8000/tcp': [{ HostIp: '127.0.0.1', HostPort: '' }] });
    assert.deepEqual(hc['Binds'], ['/data/models:/models']);
    assert.deepEqual(hc['RestartPolicy'], { Name: 'no' });
    assert.equal(hc['DeviceRequests'], undefined, 'gpuCount 0: no device requests');

    // a second instance: the image is there now, no pull
    const s2 = spec({ gpuCount: 2 });
    await rt.start(s2, () => undefined);
    assert.equal(engine.pulls.length, 1);
    assert.deepEqual((engine.creates.at(-1)!.body['HostConfig'] as Record<string, unknown>)['DeviceRequests'], [{ Driver: 'nvidia', Count: 2, Capabilities: [['gpu']] }]);
    const s3 = spec({ gpuCount: -1 });
    await rt.start(s3, () => undefined);
    assert.deepEqual((engine.creates.at(-1)!.body['HostConfig'] as Record<string, unknown>)['DeviceRequests'], [{ Driver: 'nvidia', Count: -1, Capabilities: [['gpu']] }]);

    // logs: demultiplexed stdout and stderr
    const logs = await rt.logs(s.instanceId, 10);
    assert.equal(logs, 'test-service: listening on 8000\ntest-service: warming up');
    assert.equal(await rt.logs(s.instanceId, 1), 'test-service: warming up');

    // list: labels and the published port
    const listed = await rt.list();
    assert.deepEqual(
      listed.find((x) => x.instanceId === s.instanceId),
      { instanceId: s.instanceId, host: '127.0.0.1', port: addr.port, serviceId: 'svc-7', running: true, healthPath: '/health' },
    );
    assert.ok(engine.requests.some((r) => r === 'GET /containers/json'));

    // stop: no onExit, a second stop (304) is fine; remove; removing again (404) is fine
    for (const x of [s, s2, s3]) {
      await rt.stop(x.instanceId, 1000);
      await rt.stop(x.instanceId, 1000);
      assert.equal(engine.container(containerName(x))?.status, 'exited');
      await rt.remove(x.instanceId);
      await rt.remove(x.instanceId);
      assert.equal(engine.container(containerName(x)), undefined);
    }
    assert.deepEqual(exits, []);
    assert.equal(await rt.logs(s.instanceId, 5), '');
  });

  test('a container that exits on its own: wait returns and onExit gets the status code once', async () => {
    const s = spec();
    const exits: ExitInfo[] = [];
    const addr = await rt.start(s, (i) => exits.push(i));
    await httpRequest(addr.host, addr.port, '/exit?code=9', 'POST');
    await waitFor(() => exits.length > 0, 'onExit');
    assert.deepEqual(exits, [{ code: 9 }]);
    assert.match(await rt.logs(s.instanceId, 5), /exiting with 9 as asked/);
    assert.equal((await rt.list()).find((x) => x.instanceId === s.instanceId)?.running, false);
    await rt.stop(s.instanceId);
    await rt.remove(s.instanceId);
    assert.equal(exits.length, 1);
  });

  test('an unknown image fails the start with the engine message', async () => {
    await assert.rejects(rt.start(spec({ image: 'gantry/does-not-exist:2' }), () => undefined), /pull access denied/);
  });

  test('a runtime on a fresh client finds existing containers (agent restart) and can stop them', async () => {
    const s = spec();
    const addr = await rt.start(s, () => undefined);
    const rt2 = new DockerRuntime({ logger, docker: new Dockerode({ host: engine.host, port: engine.port, protocol: 'http' }) });
    try {
      const found = (await rt2.list()).find((x) => x.instanceId === s.instanceId);
      assert.deepEqual(found, { instanceId: s.instanceId, host: '127.0.0.1', port: addr.port, serviceId: 'svc-7', running: true, healthPath: '/health' });
      assert.match(await rt2.logs(s.instanceId, 5), /listening on 8000/);
      // starting the same instance again reuses the running container
      const again = await rt2.start(s, () => undefined);
      assert.equal(again.port, addr.port);
      assert.equal(engine.creates.filter((c) => c.name === containerName(s)).length, 1);
      await rt2.stop(s.instanceId);
      await rt2.remove(s.instanceId);
      assert.equal(engine.container(containerName(s)), undefined);
    } finally {
      await rt2.close();
    }
  });

  test('the stand-in also listens on a unix socket (the default transport)', async () => {
    const socketPath = path.join(os.tmpdir(), `gantry-docker-standin-${process.pid}-${Date.now()}.sock`);
    const e2 = await startDockerEngineStandin({ socketPath, images: { 'busybox-http': httpServiceFactory('busybox-http') }, pulled: ['busybox-http'] });
    const r = new DockerRuntime({ logger, socketPath });
    try {
      const s = spec({ image: 'busybox-http' });
      const addr = await r.start(s, () => undefined);
      assert.equal(e2.pulls.length, 0, 'already pulled');
      assert.equal((await httpRequest(addr.host, addr.port, '/health')).status, 200);
      await r.remove(s.instanceId);
      assert.equal(e2.containerCount(), 0);
    } finally {
      await r.close();
      await e2.close();
    }
  });
});
