/**
 * ContainerManager (src/agent/containers/manager.ts) driving real runtimes: ExecRuntime with a
 * small HTTP service script, and DockerRuntime against the Docker Engine API stand-in for adopt.
 */
import assert from 'node:assert/strict';
import { rm } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { DockerRuntime, containerName } from '../../src/agent/containers/docker.js';
import { ExecRuntime } from '../../src/agent/containers/exec.js';
import { HealthChecker } from '../../src/agent/containers/health.js';
import { ContainerManager, type ContainerManagerOptions } from '../../src/agent/containers/manager.js';
import type { ContainerRuntime, ContainerSpec, ExitInfo, InstanceAddress, InstanceReport } from '../../src/agent/containers/types.js';
import { createLogger } from '../../src/shared/logger.js';
import { httpServiceFactory, startDockerEngineStandin } from '../helpers/docker-engine-standin.js';
import { httpRequest, waitFor, writeServiceScript, serviceSpec } from './helpers.js';

const logger = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');
let dir = '';
let script = '';
const managers: ContainerManager[] = [];

before(async () => {
  ({ dir, script } = await writeServiceScript());
});
after(async () => {
  await Promise.all(managers.map((m) => m.close()));
  await rm(dir, { recursive: true, force: true });
});

const spec = (over: Partial<ContainerSpec> = {}): ContainerSpec => serviceSpec(script, over);

function manager(o: Partial<ContainerManagerOptions> = {}): { m: ContainerManager; reports: InstanceReport[]; of: (id: string) => InstanceReport[] } {
  const reports: InstanceReport[] = [];
  const m = new ContainerManager({ runtime: new ExecRuntime({ logger, cwd: dir }), report: (r) => reports.push(r), healthIntervalMs: 30, healthTimeoutMs: 500, logger, ...o });
  managers.push(m);
  return { m, reports, of: (id) => reports.filter((r) => r.instanceId === id) };
}

const brief = (r: InstanceReport) => `${r.state}${r.state === 'running' ? `:${r.healthy ? 'healthy' : 'unhealthy'}` : ''}`;

test('start reports starting, running (unhealthy), then running (healthy); address; stop and remove', async () => {
  const { m, of } = manager();
  const s = spec();
  m.start(s);
  await waitFor(() => of(s.instanceId).some((r) => r.healthy), 'a healthy report');
  assert.deepEqual(of(s.instanceId).map(brief), ['starting', 'running:unhealthy', 'running:healthy']);
  assert.ok(of(s.instanceId).every((r) => r.serviceId === 'svc-1' && r.error === ''));
  const addr = m.address(s.instanceId);
  assert.ok(addr);
  assert.equal((await httpRequest(addr.host, addr.port, '/')).status, 200);
  assert.deepEqual(m.reports(), [{ instanceId: s.instanceId, serviceId: 'svc-1', state: 'running', healthy: true, error: '' }]);

  m.stop(s.instanceId);
  await waitFor(() => of(s.instanceId).at(-1)?.state === 'stopped', 'stopped');
  assert.equal(m.address(s.instanceId), null);
  await assert.rejects(httpRequest(addr.host, addr.port, '/'), /ECONNREFUSED/);
  assert.equal(m.reports()[0]?.state, 'stopped');

  m.remove(s.instanceId);
  await waitFor(() => of(s.instanceId).at(-1)?.state === 'removed', 'removed');
  assert.deepEqual(m.reports(), []);
  assert.deepEqual(of(s.instanceId).map(brief), ['starting', 'running:unhealthy', 'running:healthy', 'stopped', 'removed']);

  // unknown ids: reported as removed
  m.stop('ghost');
  m.remove('ghost2');
  assert.deepEqual(of('ghost'), [{ instanceId: 'ghost', serviceId: '', state: 'removed', healthy: false, error: '' }]);
  assert.equal(of('ghost2')[0]?.state, 'removed');
});

test('a second start of a running instance only re-reports it', async () => {
  const { m, of } = manager();
  const s = spec();
  m.start(s);
  m.start(s); // while starting
  await waitFor(() => of(s.instanceId).some((r) => r.healthy), 'healthy');
  const pid = (m as unknown as { runtime: ExecRuntime }).runtime.pid(s.instanceId);
  m.start(s);
  assert.deepEqual(of(s.instanceId).at(-1), { instanceId: s.instanceId, serviceId: 'svc-1', state: 'running', healthy: true, error: '' });
  assert.equal((m as unknown as { runtime: ExecRuntime }).runtime.pid(s.instanceId), pid, 'same process');
  assert.deepEqual(of(s.instanceId).map(brief), ['starting', 'starting', 'running:unhealthy', 'running:healthy', 'running:healthy']);
  m.remove(s.instanceId);
  await waitFor(() => of(s.instanceId).at(-1)?.state === 'removed', 'removed');
});

test('health flips to unhealthy when /health fails (after the threshold) and back', async () => {
  const { m, of } = manager({ unhealthyThreshold: 2 });
  const s = spec();
  m.start(s);
  await waitFor(() => of(s.instanceId).some((r) => r.healthy), 'healthy');
  const addr = m.address(s.instanceId)!;
  await httpRequest(addr.host, addr.port, '/fail-health', 'POST');
  await waitFor(() => of(s.instanceId).at(-1)?.healthy === false, 'unhealthy');
  assert.deepEqual(of(s.instanceId).at(-1), { instanceId: s.instanceId, serviceId: 'svc-1', state: 'running', healthy: false, error: '' });
  await httpRequest(addr.host, addr.port, '/heal-health', 'POST');
  await waitFor(() => of(s.instanceId).at(-1)?.healthy === true, 'healthy again');
  assert.deepEqual(of(s.instanceId).map(brief), ['starting', 'running:unhealthy', 'running:healthy', 'running:unhealthy', 'running:healthy']);
  m.remove(s.instanceId);
  await waitFor(() => of(s.instanceId).at(-1)?.state === 'removed', 'removed');
});

test('healthPath "": a TCP connect decides', async () => {
  const { m, of } = manager();
  const s = spec({ healthPath: '' });
  m.start(s);
  await waitFor(() => of(s.instanceId).some((r) => r.healthy), 'healthy by TCP');
  m.remove(s.instanceId);
  await waitFor(() => of(s.instanceId).at(-1)?.state === 'removed', 'removed');
});

test('an instance that crashes is reported failed with the exit code and the log tail; a new start restarts it', async () => {
  // checks 1 s apart: the exit is reported before two failed checks could mark it unhealthy
  const { m, of } = manager({ healthIntervalMs: 1000 });
  const s = spec();
  m.start(s);
  await waitFor(() => of(s.instanceId).some((r) => r.healthy), 'healthy');
  const addr = m.address(s.instanceId)!;
  await httpRequest(addr.host, addr.port, '/exit?code=5', 'POST');
  const failed = await waitFor(() => of(s.instanceId).find((r) => r.state === 'failed'), 'failed');
  assert.match(failed.error, /exited with code 5/);
  assert.match(failed.error, /exiting with 5 as asked/);
  assert.equal(failed.healthy, false);
  assert.equal(m.address(s.instanceId), null);

  m.start(s);
  await waitFor(() => of(s.instanceId).at(-1)?.healthy === true, 'healthy after the restart');
  assert.deepEqual(of(s.instanceId).map(brief), ['starting', 'running:unhealthy', 'running:healthy', 'failed', 'starting', 'running:unhealthy', 'running:healthy']);
  m.remove(s.instanceId);
  await waitFor(() => of(s.instanceId).at(-1)?.state === 'removed', 'removed');
});

test('a start failure is reported failed with the runtime error and the last log lines', async () => {
  const { m, of } = manager();
  const s = spec({ env: [{ name: 'STARTUP', value: 'crash' }, { name: 'API_KEY', value: 'sk-very-secret' }] });
  m.start(s);
  const failed = await waitFor(() => of(s.instanceId).find((r) => r.state === 'failed'), 'failed');
  assert.match(failed.error, /exited with code 3 before listening/);
  assert.match(failed.error, /fatal: cannot load model weights/);
  assert.doesNotMatch(failed.error, /sk-very-secret/);
  assert.deepEqual(of(s.instanceId).map(brief), ['starting', 'failed']);
  m.remove(s.instanceId);
  await waitFor(() => of(s.instanceId).at(-1)?.state === 'removed', 'removed');
});

/** A runtime whose start is held until released (an image pull in progress). */
class HeldRuntime implements ContainerRuntime {
  readonly name = 'exec' as const;
  readonly calls: string[] = [];
  private release: (() => void) | null = null;
  private readonly inner: ExecRuntime;
  constructor() {
    this.inner = new ExecRuntime({ logger, cwd: dir });
  }
  releaseStart(): void {
    this.release?.();
  }
  get holding(): boolean {
    return this.release !== null;
  }
  async start(s: ContainerSpec, onExit: (i: ExitInfo) => void): Promise<InstanceAddress> {
    this.calls.push('start');
    await new Promise<void>((r) => (this.release = r));
    const a = await this.inner.start(s, onExit);
    this.calls.push('started');
    return a;
  }
  async stop(id: string, t?: number): Promise<void> {
    this.calls.push('stop');
    await this.inner.stop(id, t);
  }
  async remove(id: string): Promise<void> {
    this.calls.push('remove');
    await this.inner.remove(id);
  }
  logs(id: string, n: number): Promise<string> {
    return this.inner.logs(id, n);
  }
  list() {
    return this.inner.list();
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

test('commands are serialized per instance: a stop during a slow start waits, then stops', async () => {
  const runtime = new HeldRuntime();
  const { m, of } = manager({ runtime });
  const s = spec();
  m.start(s);
  await waitFor(() => runtime.holding, 'the start to be in progress');
  m.stop(s.instanceId);
  assert.deepEqual(runtime.calls, ['start']);
  runtime.releaseStart();
  await waitFor(() => of(s.instanceId).at(-1)?.state === 'stopped', 'stopped');
  assert.deepEqual(runtime.calls, ['start', 'started', 'stop']);
  assert.deepEqual(of(s.instanceId).map(brief), ['starting', 'running:unhealthy', 'stopped']);
  assert.equal(m.address(s.instanceId), null);
  assert.deepEqual(await runtime.list().then((l) => l.map((x) => x.running)), [false]);
});

test('adopt: containers already running on the docker stand-in become running instances with health checks', async () => {
  const engine = await startDockerEngineStandin({ images: { 'gantry/svc:1': httpServiceFactory('svc') } });
  try {
    // a previous agent process started two instances and stopped one
    const before = new DockerRuntime({ logger, host: engine.host, port: engine.port });
    const a = spec({ image: 'gantry/svc:1', healthPath: '/health' });
    const b = spec({ image: 'gantry/svc:1', serviceId: 'svc-2' });
    const c = spec({ image: 'gantry/svc:1', healthPath: '' });
    const addrA = await before.start(a, () => undefined);
    await before.start(b, () => undefined);
    await before.start(c, () => undefined);
    await before.stop(b.instanceId);
    await before.close();

    const reports: InstanceReport[] = [];
    const m = new ContainerManager({ runtime: new DockerRuntime({ logger, host: engine.host, port: engine.port }), report: (r) => reports.push(r), healthIntervalMs: 30, logger });
    managers.push(m);
    await m.adopt();
    const byId = (id: string) => reports.filter((r) => r.instanceId === id);
    await waitFor(() => byId(a.instanceId).some((r) => r.healthy), 'the adopted instance to turn healthy');
    assert.deepEqual(byId(a.instanceId).map(brief), ['running:unhealthy', 'running:healthy']);
    assert.deepEqual(byId(b.instanceId), [{ instanceId: b.instanceId, serviceId: 'svc-2', state: 'stopped', healthy: false, error: '' }]);
    assert.deepEqual(m.address(a.instanceId), { instanceId: a.instanceId, host: '127.0.0.1', port: addrA.port });
    assert.equal(m.reports().length, 3);
    await waitFor(() => byId(c.instanceId).some((r) => r.healthy), 'the TCP-checked adopted instance to turn healthy');

    // an adopted container that exits on its own is reported failed (the runtime watches it)
    engine.exitContainer(containerName(c), 4);
    const failed = await waitFor(() => byId(c.instanceId).find((r) => r.state === 'failed'), 'the adopted container to fail');
    assert.match(failed.error, /exited with code 4/);
    assert.match(failed.error, /process exited with code 4/);
    assert.equal(m.address(c.instanceId), null);

    // health is checked on the adopted container for real
    await httpRequest(addrA.host, addrA.port, '/fail-health', 'POST');
    await waitFor(() => byId(a.instanceId).at(-1)?.healthy === false, 'unhealthy');

    // adopting again adds nothing; stop and remove work on adopted instances
    await m.adopt();
    assert.equal(reports.filter((r) => r.instanceId === a.instanceId).length, 3);
    m.remove(a.instanceId);
    m.remove(b.instanceId);
    m.remove(c.instanceId);
    await waitFor(() => [a, b, c].every((x) => byId(x.instanceId).at(-1)?.state === 'removed'), 'removed');
    assert.equal(engine.containerCount(), 0);
    await m.close();
  } finally {
    await engine.close();
  }
});

test('close stops health checks and the exec processes', async () => {
  const { m, of } = manager();
  const s = spec();
  m.start(s);
  await waitFor(() => of(s.instanceId).some((r) => r.healthy), 'healthy');
  const addr = m.address(s.instanceId)!;
  const n = of(s.instanceId).length;
  await m.close();
  await assert.rejects(httpRequest(addr.host, addr.port, '/'), /ECONNREFUSED/);
  assert.equal(of(s.instanceId).length, n, 'no reports after close');
  m.start(spec());
  assert.equal(of(s.instanceId).length, n);
});

test('HealthChecker: 200-399 pass, other statuses and timeouts fail; thresholds; onChange on changes only', async () => {
  let status = 302;
  let hang = false;
  const server = http.createServer((req, res) => {
    if (hang) return; // never answers: the check times out
    res.statusCode = req.url === '/ready' ? status : 404;
    res.end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  const changes: boolean[] = [];
  const h = new HealthChecker({ host: '127.0.0.1', port, healthPath: '/ready', intervalMs: 20, timeoutMs: 100, healthyThreshold: 2, unhealthyThreshold: 3, onChange: (x) => changes.push(x) });
  try {
    await waitFor(() => changes.length === 1, 'healthy after two passes');
    assert.deepEqual(changes, [true]);
    assert.equal(h.healthy, true);
    status = 500;
    await waitFor(() => changes.length === 2, 'unhealthy after three failures');
    status = 200;
    await waitFor(() => changes.length === 3, 'healthy again');
    hang = true;
    await waitFor(() => changes.length === 4, 'unhealthy on timeouts');
    assert.deepEqual(changes, [true, false, true, false]);
  } finally {
    h.stop();
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  }
  // nothing listening: a TCP check never turns healthy, and stop() ends the checks
  const tcp: boolean[] = [];
  const h2 = new HealthChecker({ host: '127.0.0.1', port, healthPath: '', intervalMs: 10, onChange: (x) => tcp.push(x) });
  await waitFor(() => (h2 as unknown as { failures: number }).failures >= 3, 'three failed TCP checks');
  h2.stop();
  assert.deepEqual(tcp, []);
});
