/**
 * The project's Dockerfile, built for real on the run's throwaway dockerd (GANTRY_TEST_DOCKER_HOST,
 * scripts/run-tests.mjs) from a Node base made on this host (test/helpers/dockerd.ts importNodeBase:
 * the host's node, its libraries, npm and busybox, `docker import`ed: no registry image) through the
 * BASE_IMAGE build argument; the image then starts a node (embedded PGlite, as `docker run` does
 * with no configuration) that answers /readyz. The Dockerfile's `npm ci` stages fetch packages from
 * the npm registry (the build uses the host's network), as a real build does: the test skips,
 * naming it, when the registry does not answer. Heavy (minutes: two npm installs and the console
 * build): skipped with GANTRY_SKIP_HEAVY=1.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import { docker, dockerSkip, importNodeBase } from '../helpers/dockerd.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const run = Date.now().toString(36);
const base = `gantry-test/node-base:${run}`;
const image = `gantry-test/gantry:${run}`;

function skipReason(): string | false {
  if (dockerSkip) return dockerSkip;
  if (process.env.GANTRY_SKIP_HEAVY) return 'GANTRY_SKIP_HEAVY is set (this test builds the image: minutes)';
  const ping = spawnSync('npm', ['ping'], { encoding: 'utf8', timeout: 20_000 });
  if (ping.status !== 0) return `the npm registry does not answer \`npm ping\` (the Dockerfile's npm ci stages need it): ${(ping.stderr || '').trim().split('\n').at(-1)}`;
  return false;
}

function readyz(port: number): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/readyz', agent: false, timeout: 5000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('no answer within 5 s')));
    req.on('error', reject);
  });
}

const sh = (args: string[], timeout: number) => spawnSync('docker', args, { cwd: root, env: { ...process.env, DOCKER_HOST: process.env.GANTRY_TEST_DOCKER_HOST }, encoding: 'utf8', timeout, maxBuffer: 64 * 1024 * 1024 });

test('the Dockerfile builds on a locally made base (BASE_IMAGE) and the image serves /readyz', { skip: skipReason(), timeout: 20 * 60_000 }, async () => {
  const d = docker();
  let container = '';
  const alive = setInterval(() => undefined, 1000);
  try {
    const made = importNodeBase(base);
    assert.equal(made, null, made ?? '');
    const build = sh(['build', '--network', 'host', '--build-arg', `BASE_IMAGE=${base}`, '-t', image, '.'], 18 * 60_000);
    assert.equal(build.status, 0, `docker build failed (${build.status ?? build.signal}):\n${`${build.stdout}\n${build.stderr}`.slice(-4000)}`);

    const info = await d.getImage(image).inspect();
    assert.equal(info.Config.User, '10001:10001', 'runs as the non-root gantry user');
    assert.deepEqual(info.Config.Entrypoint, ['node', 'bin/gantry.mjs']);

    const c = await d.createContainer({ Image: image, name: `gantry-dockerfile-${run}`, ExposedPorts: { '8080/tcp': {} }, HostConfig: { PortBindings: { '8080/tcp': [{ HostIp: '127.0.0.1', HostPort: '' }] } } });
    container = c.id;
    await c.start();
    const port = Number((await c.inspect()).NetworkSettings.Ports['8080/tcp']?.[0]?.HostPort);
    assert.ok(port > 0);
    const deadline = Date.now() + 120_000;
    let last = '';
    for (;;) {
      // plain http with a deadline (the published port accepts before the node listens inside)
      const r = await readyz(port).catch((e: Error) => e);
      if (!(r instanceof Error)) {
        if (r.status === 200) {
          assert.equal(JSON.parse(r.body).status, 'ready');
          break;
        }
        last = `${r.status} ${r.body}`;
      } else last = r.message;
      const state = (await c.inspect()).State;
      if (!state.Running) {
        const logs = (await c.logs({ stdout: true, stderr: true, tail: 40 })).toString();
        assert.fail(`the node exited (code ${state.ExitCode}) before /readyz answered:\n${logs}`);
      }
      if (Date.now() > deadline) assert.fail(`no ready /readyz within 120 s (last: ${last})`);
      await new Promise((res) => setTimeout(res, 500));
    }
  } finally {
    clearInterval(alive);
    if (container) await d.getContainer(container).remove({ force: true }).catch(() => undefined);
    for (const i of [image, base]) await d.getImage(i).remove({ force: true }).catch(() => undefined);
  }
});
