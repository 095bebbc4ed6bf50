/**
 * ExecRuntime (src/agent/containers/exec.ts) against real processes: a small HTTP service script
 * written to a temp dir, listening on the PORT the runtime chose.
 */
import assert from 'node:assert/strict';
import { rm } from 'node:fs/promises';
import { after, before, test } from 'node:test';
import { ExecRuntime, LineRing, parseCommand } from '../../src/agent/containers/exec.js';
import type { ContainerSpec, ExitInfo } from '../../src/agent/containers/types.js';
import { createLogger } from '../../src/shared/logger.js';
import { alive, httpRequest, waitFor, writeServiceScript, serviceSpec } from './helpers.js';

const logger = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');
let dir = '';
let script = '';
const runtimes: ExecRuntime[] = [];

before(async () => {
  ({ dir, script } = await writeServiceScript());
});
after(async () => {
  await Promise.all(runtimes.map((r) => r.close()));
  await rm(dir, { recursive: true, force: true });
});

function runtime(o: { startTimeoutMs?: number } = {}): ExecRuntime {
  const r = new ExecRuntime({ logger, cwd: dir, ...o });
  runtimes.push(r);
  return r;
}

const spec = (over: Partial<ContainerSpec> = {}): ContainerSpec => serviceSpec(script, over);

test('parseCommand: JSON argv or a whitespace-split command line; bad input rejected', () => {
  assert.deepEqual(parseCommand('["node", "server.js", "a b"]'), ['node', 'server.js', 'a b']);
  assert.deepEqual(parseCommand('  python3 -m   http.server  '), ['python3', '-m', 'http.server']);
  assert.throws(() => parseCommand('[1, 2]'), /JSON array of strings/);
  assert.throws(() => parseCommand('[]'), /non-empty/);
  assert.throws(() => parseCommand('["node"'), /not a valid JSON array/);
  assert.throws(() => parseCommand('   '), /empty/);
});

test('LineRing keeps the last lines of both streams, partial lines included', () => {
  const r = new LineRing(3);
  r.write('stdout', 'a\nb\n');
  r.write('stderr', 'err1\nerr');
  r.write('stdout', 'c\n');
  assert.deepEqual(r.tail(10), ['err1', 'c', 'err']);
  r.write('stderr', '2\n');
  assert.deepEqual(r.tail(2), ['c', 'err2']);
});

test('start: the address answers, env is passed (GANTRY_* stripped, spec env wins), logs, stop', async () => {
  process.env.GANTRY_SECRET_FOR_TEST = 'server-secret';
  process.env.GANTRY_TEST_INHERITED = 'x';
  process.env.PLAIN_INHERITED_FOR_TEST = 'inherited';
  const rt = runtime();
  const s = spec({ env: [{ name: 'MODEL', value: 'llama' }, { name: 'PLAIN_INHERITED_FOR_TEST', value: 'overridden' }] });
  const exits: ExitInfo[] = [];
  try {
    const addr = await rt.start(s, (i) => exits.push(i));
    assert.equal(addr.host, '127.0.0.1');
    assert.equal(addr.instanceId, s.instanceId);
    assert.ok(addr.port > 0);
    const hello = await httpRequest(addr.host, addr.port, '/');
    assert.equal(hello.body, `hello from ${addr.port}`);
    assert.equal((await httpRequest(addr.host, addr.port, '/env/PORT')).body, String(addr.port));
    assert.equal((await httpRequest(addr.host, addr.port, '/env/MODEL')).body, 'llama');
    assert.equal((await httpRequest(addr.host, addr.port, '/env/PLAIN_INHERITED_FOR_TEST')).body, 'overridden');
    assert.equal((await httpRequest(addr.host, addr.port, '/env/GANTRY_SECRET_FOR_TEST')).status, 404);
    assert.equal((await httpRequest(addr.host, addr.port, '/env/GANTRY_TEST_INHERITED')).status, 404);
    assert.ok((await httpRequest(addr.host, addr.port, '/env/PATH')).body.length > 0, 'the agent environment is inherited');

    const logs = await waitFor(async () => {
      const l = await rt.logs(s.instanceId, 50);
      return l.includes(`listening on ${addr.port}`) ? l : '';
    }, 'the listening log line');
    assert.match(logs, /service booting on port/);
    assert.match(logs, /stderr: warming up/);
    assert.equal((await rt.logs(s.instanceId, 1)).split('\n').length, 1);

    const listed = await rt.list();
    assert.deepEqual(listed.find((x) => x.instanceId === s.instanceId), { instanceId: s.instanceId, host: '127.0.0.1', port: addr.port, serviceId: 'svc-1', running: true, healthPath: '/health' });

    const pid = rt.pid(s.instanceId);
    assert.ok(pid && alive(pid));
    await rt.stop(s.instanceId);
    assert.equal(alive(pid), false);
    assert.equal(rt.pid(s.instanceId), undefined);
    assert.equal((await rt.list()).find((x) => x.instanceId === s.instanceId)?.running, false);
    assert.deepEqual(exits, [], 'onExit is not called after stop()');
    await rt.remove(s.instanceId);
    assert.equal((await rt.list()).some((x) => x.instanceId === s.instanceId), false);
    // unknown ids are no-ops
    await rt.stop('nope');
    await rt.remove('nope');
    assert.equal(await rt.logs('nope', 10), '');
  } finally {
    delete process.env.GANTRY_SECRET_FOR_TEST;
    delete process.env.GANTRY_TEST_INHERITED;
    delete process.env.PLAIN_INHERITED_FOR_TEST;
  }
});

test('a command line split on whitespace works too', async () => {
  const rt = runtime();
  const s = spec({ image: `${process.execPath} service.cjs` });
  const addr = await rt.start(s, () => undefined);
  assert.equal((await httpRequest(addr.host, addr.port, '/')).status, 200);
  await rt.stop(s.instanceId);
});

test('onExit is called once with the exit code when the process exits on its own', async () => {
  const rt = runtime();
  const s = spec();
  const exits: ExitInfo[] = [];
  const addr = await rt.start(s, (i) => exits.push(i));
  await httpRequest(addr.host, addr.port, '/exit?code=7', 'POST');
  await waitFor(() => exits.length > 0, 'onExit');
  assert.deepEqual(exits, [{ code: 7 }]);
  assert.match(await rt.logs(s.instanceId, 5), /exiting with 7 as asked/);
  await rt.stop(s.instanceId); // already exited: a no-op
  assert.equal(exits.length, 1);
});

test('start fails when the command exits before listening: the error holds the last log lines', async () => {
  const rt = runtime();
  const s = spec({ env: [{ name: 'STARTUP', value: 'crash' }] });
  let exited = false;
  await assert.rejects(
    rt.start(s, () => (exited = true)),
    (e: Error) => {
      assert.match(e.message, /exited with code 3 before listening/);
      assert.match(e.message, /fatal: cannot load model weights/);
      assert.match(e.message, /service booting on port/);
      return true;
    },
  );
  assert.equal(exited, false, 'a start failure is not an exit');
});

test('start fails when the executable does not exist', async () => {
  const rt = runtime();
  await assert.rejects(rt.start(spec({ image: '["/nonexistent/gantry-test-binary"]' }), () => undefined), /could not start .*ENOENT/);
});

test('start times out when nothing listens on PORT, and the process is killed', async () => {
  const rt = runtime({ startTimeoutMs: 1500 });
  const s = spec({ image: JSON.stringify([process.execPath, '-e', 'console.log("not listening"); setInterval(() => {}, 1000)']) });
  await assert.rejects(rt.start(s, () => undefined), (e: Error) => /did not listen on port \d+ within 1500 ms/.test(e.message) && /not listening/.test(e.message));
  assert.equal(rt.pid(s.instanceId), undefined);
});

test('stop sends SIGKILL after the timeout when SIGTERM is ignored', async () => {
  const rt = runtime();
  const s = spec({ env: [{ name: 'SIGTERM', value: 'ignore' }] });
  await rt.start(s, () => undefined);
  const pid = rt.pid(s.instanceId);
  assert.ok(pid);
  const t0 = Date.now();
  await rt.stop(s.instanceId, 200);
  assert.ok(Date.now() - t0 >= 190);
  assert.equal(alive(pid), false);
  assert.match(await rt.logs(s.instanceId, 5), /ignoring SIGTERM/);
});

test('close stops every process', async () => {
  const rt = runtime();
  const a = spec();
  const b = spec();
  await Promise.all([rt.start(a, () => undefined), rt.start(b, () => undefined)]);
  const pids = [rt.pid(a.instanceId), rt.pid(b.instanceId)];
  await rt.close();
  for (const p of pids) assert.equal(alive(p!), false);
});
