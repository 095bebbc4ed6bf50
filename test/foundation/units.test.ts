import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Router } from '../../src/edge/router.js';
import { loadConfig, ConfigError } from '../../src/shared/config.js';
import { FakeClock, MAX_TIMER_MS, systemClock } from '../../src/shared/clock.js';
import { uuidv7, isUuid } from '../../src/shared/ids.js';
import { toHttpError } from '../../src/edge/error-map.js';
import { AppError } from '../../src/shared/errors.js';

test('router: static beats param, params decoded, wildcard captures the rest, 405 vs 404', () => {
  const r = new Router<string>();
  r.add('GET', '/api/v1/workflows/{id}', 'byId');
  r.add('GET', '/api/v1/workflows/slug/{slug}', 'bySlug');
  r.add('POST', '/api/v1/workflows/{id}/run', 'run');
  r.add('ANY', '/api/v1/r/containers/{slug}/*', 'proxy');
  r.add('GET', '/api/v1/r/containers/{slug}', 'container');
  assert.deepEqual(r.find('GET', '/api/v1/workflows/abc'), { route: 'byId', params: { id: 'abc' } });
  assert.deepEqual(r.find('GET', '/api/v1/workflows/slug/a%40b'), { route: 'bySlug', params: { slug: 'a@b' } });
  assert.deepEqual(r.find('POST', '/api/v1/workflows/x/run'), { route: 'run', params: { id: 'x' } });
  assert.equal(r.find('DELETE', '/api/v1/workflows/x/run'), 'method_not_allowed');
  assert.equal(r.find('GET', '/api/v1/nothing'), null);
  assert.deepEqual(r.find('PATCH', '/api/v1/r/containers/svc/a/b/c'), { route: 'proxy', params: { slug: 'svc', '*': 'a/b/c' } });
  assert.deepEqual(r.find('GET', '/api/v1/r/containers/svc'), { route: 'container', params: { slug: 'svc' } });
  assert.throws(() => r.add('GET', '/api/v1/workflows/{other}', 'x'));
});

test('config: defaults, and a bad value names the variable', () => {
  const c = loadConfig({});
  assert.equal(c.GANTRY_HTTP_PORT, 8080);
  assert.equal(c.GANTRY_GRPC_PORT, 50051);
  assert.equal(c.GANTRY_DATA_DIR, './data');
  assert.equal(c.DATABASE_URL, undefined);
  assert.equal(c.publicUrl, 'http://127.0.0.1:8080');
  for (const [k, v] of [['GANTRY_HTTP_PORT', '70000'], ['DATABASE_URL', 'mysql://x'], ['LOG_LEVEL', 'loud'], ['GANTRY_STORAGE', 'ftp://x'], ['GANTRY_REGISTRATION_ENABLED', 'maybe']] as const) {
    assert.throws(() => loadConfig({ [k]: v }), (e: unknown) => e instanceof ConfigError && e.message.includes(k), k);
  }
});

test('error map: kinds to statuses, Retry-After, unknown errors are opaque 500s', () => {
  const e = toHttpError(new AppError('rate_limited', 'rate_limited', 'slow down', { retryAfterS: 2.2 }));
  assert.equal(e.status, 429);
  assert.equal(e.headers['Retry-After'], '3');
  const u = toHttpError(new Error('secret detail'));
  assert.equal(u.status, 500);
  assert.equal(u.body.error_message, 'internal server error');
});

test('uuidv7 is a valid, time-ordered uuid', () => {
  const a = uuidv7();
  const b = uuidv7();
  assert.ok(isUuid(a) && isUuid(b));
  assert.equal(a[14], '7');
  assert.ok(a < b);
});

test('FakeClock fires timers in order as time advances', () => {
  const c = new FakeClock(0);
  const seen: number[] = [];
  c.setTimeout(() => seen.push(2), 20);
  c.setTimeout(() => seen.push(1), 10);
  const h = c.setTimeout(() => seen.push(3), 30);
  h.cancel();
  c.advance(25);
  assert.deepEqual(seen, [1, 2]);
  assert.equal(c.now(), 25);
});

test('systemClock: a delay beyond Node\'s 2^31-1 ms timer limit (a task_timeout of weeks) waits, it does not fire at once', async () => {
  let fired = false;
  const h = systemClock.setTimeout(() => (fired = true), MAX_TIMER_MS + 10_000);
  // an overflowing Node timer fires after 1 ms: give it several event-loop turns of real time
  const probe = new Promise<void>((r) => setTimeout(r, 50));
  await probe;
  assert.equal(fired, false);
  h.cancel();
  // a short one still fires (its timer is unref'd: a ref'd one keeps the test's event loop alive)
  const keep = setTimeout(() => undefined, 5_000);
  let short = false;
  await new Promise<void>((r) => systemClock.setTimeout(() => ((short = true), r()), 5));
  clearTimeout(keep);
  assert.equal(short, true);
});
