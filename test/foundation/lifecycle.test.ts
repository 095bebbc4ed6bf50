import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Lifecycle } from '../../src/node/lifecycle.js';
import { ConfigError } from '../../src/shared/config.js';

test('lifecycle: started in order, stopped in reverse, each once; a failing stop does not keep the others from stopping', async () => {
  const log: string[] = [];
  const life = new Lifecycle();
  const part = (name: string, failStop = false) => ({
    start: () => void log.push(`start ${name}`),
    stop: () => {
      log.push(`stop ${name}`);
      if (failStop) throw new Error(`${name} stop failed`);
    },
  });
  await life.start(part('a'));
  const r = await life.open(
    () => 'resource',
    (t) => void log.push(`release ${t}`),
  );
  await life.start(part('b', true));
  await life.start(part('c'));
  assert.equal(r, 'resource');
  await assert.rejects(life.stopAll(), /b stop failed/);
  assert.deepEqual(log, ['start a', 'start b', 'start c', 'stop c', 'stop b', 'release resource', 'stop a']);
  await life.stopAll();
  assert.equal(log.length, 7);
});

test('lifecycle: a failed start stops what was started (the failing participant too), then throws the one-liner', async () => {
  const log: string[] = [];
  const life = new Lifecycle();
  const err = await life
    .boot(async () => {
      await life.open(
        () => 1,
        () => void log.push('release'),
      );
      await life.start({
        failure: 'cannot listen on gRPC 127.0.0.1:5',
        start: () => Promise.reject(Object.assign(new Error('bind EADDRINUSE 127.0.0.1:5'), { code: 'EADDRINUSE' })),
        stop: () => void log.push('stop grpc'),
      });
      log.push('not reached');
    })
    .catch((e: unknown) => e);
  assert.ok(err instanceof ConfigError);
  assert.equal(err.message, 'cannot listen on gRPC 127.0.0.1:5: address already in use (another node or process listens there)');
  assert.deepEqual(log, ['stop grpc', 'release']);
});

test('lifecycle: an error without a failure label (or a ConfigError) is passed on as it is; a failed acquisition releases nothing of its own', async () => {
  const life = new Lifecycle();
  const log: string[] = [];
  await life.start({ stop: () => void log.push('stop a') });
  const plain = new Error('database unreachable');
  await assert.rejects(
    life.boot(() =>
      life.open(
        () => Promise.reject(plain),
        () => void log.push('release db'),
      ),
    ),
    (e) => e === plain,
  );
  assert.deepEqual(log, ['stop a']);
  const refused = new ConfigError('cannot reach REDIS_URL: ECONNREFUSED');
  await assert.rejects(new Lifecycle().boot(() => new Lifecycle().start({ failure: 'x', start: () => Promise.reject(refused) })), (e) => e === refused);
});
