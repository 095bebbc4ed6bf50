/**
 * Failed credential checks are throttled (issue 29, point 6), over real HTTP against a real node:
 * well-formed sk- guesses (valid checksum, no such credential) from one IP get 401 up to the limit,
 * then 429 with Retry-After and no database lookup; a repeated guess is answered from the negative
 * cache; guesses of one prefix from many IPs are limited per prefix; a valid credential the node
 * knows keeps working from the refused IP. Then the cluster half: two limiters counting in one
 * Redis window refuse an IP together.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, createCredential } from '../helpers/identity.js';
import { generateCredential, checksumOf } from '../../src/identity/credentials.js';
import { AuthFailureLimiter } from '../../src/identity/failure-limit.js';
import { RedisWindowCounter } from '../../src/cluster/rate-limit-redis.js';
import { connectRedis } from '../../src/cluster/redis.js';
import { createLogger } from '../../src/shared/logger.js';

const PER_IP = 8;
const PER_PREFIX = 4;
let t: TestNode;

before(async () => {
  t = await startTestNode({ GANTRY_AUTH_FAILURE_LIMIT_PER_MIN: PER_IP, GANTRY_AUTH_FAILURE_PREFIX_LIMIT_PER_MIN: PER_PREFIX, GANTRY_AUTH_RATE_LIMIT_PER_MIN: 1_000_000 }, 'authfail');
});
after(async () => {
  await t.stop();
});

/** GET from a chosen loopback source address (127.0.0.0/8 is all loopback on Linux). */
function getFrom(from: string, path: string, token: string): Promise<{ status: number; body: Record<string, unknown>; retryAfter: string | undefined }> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${t.baseUrl}${path}`, { localAddress: from, headers: { authorization: `Bearer ${token}` }, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text ? (JSON.parse(text) as Record<string, unknown>) : {}, retryAfter: res.headers['retry-after'] }));
    });
    req.on('error', reject);
  });
}

const lookups = (): number => t.node.identity.authCache.stats.credentialLookups;
/** A well-formed integration value with a chosen 12-character prefix (valid checksum, names nothing). */
function withPrefix(prefix: string): string {
  const head = prefix + generateCredential('integration').value.slice(prefix.length, 46);
  return head + checksumOf(head);
}

test('well-formed sk- guesses from one IP: 401 up to the limit, then 429 + Retry-After without a lookup; a warm sk- still works from that IP; another IP is not affected', async () => {
  const u = await registerUser(t.http);
  const sk = await createCredential(t.http, u, 'integration');
  const ip = '127.0.0.11';
  assert.equal((await getFrom(ip, '/r/tasks', sk.value)).status, 200, 'warm the valid key');

  const before = lookups();
  for (let i = 0; i < PER_IP; i++) {
    const r = await getFrom(ip, '/r/tasks', generateCredential('integration').value);
    assert.equal(r.status, 401, `guess ${i + 1}`);
    assert.equal(r.body.error_code, 'credential_invalid');
  }
  assert.equal(lookups() - before, PER_IP, 'each guess under the limit cost one lookup');
  const atLimit = lookups();
  for (let i = 0; i < 20; i++) {
    const r = await getFrom(ip, '/r/tasks', generateCredential('integration').value);
    assert.equal(r.status, 429, `guess ${PER_IP + i + 1} over the limit`);
    assert.equal(r.body.error_code, 'rate_limited');
    assert.ok(Number(r.retryAfter) >= 1, `Retry-After: ${r.retryAfter}`);
  }
  assert.equal(lookups(), atLimit, 'no lookup for a refused guess');
  // the known key is answered from the cache, not throttled
  assert.equal((await getFrom(ip, '/r/tasks', sk.value)).status, 200);
  // another address has its own count
  const other = await getFrom('127.0.0.12', '/r/tasks', generateCredential('integration').value);
  assert.equal(other.status, 401);
});

test('a repeated failed value is answered from the negative cache (no second lookup) and still counts', async () => {
  const ip = '127.0.0.21';
  const guess = generateCredential('integration').value;
  const before = lookups();
  const first = await getFrom(ip, '/r/tasks', guess);
  assert.equal(first.status, 401);
  assert.equal(lookups() - before, 1);
  for (let i = 1; i < PER_IP; i++) assert.equal((await getFrom(ip, '/r/tasks', guess)).status, 401);
  assert.equal(lookups() - before, 1, 'repeats read no PostgreSQL');
  assert.ok(t.node.identity.failures.stats.negativeHits >= PER_IP - 1);
  assert.equal((await getFrom(ip, '/r/tasks', generateCredential('integration').value)).status, 429, 'the repeats counted for the IP');
});

test('guesses of one credential prefix from many IPs are limited per prefix; other prefixes are not', async () => {
  const prefix = `sk-${randomBytes(6).toString('hex').slice(0, 9)}`;
  for (let i = 0; i < PER_PREFIX; i++) assert.equal((await getFrom(`127.0.1.${i + 1}`, '/r/tasks', withPrefix(prefix))).status, 401, `prefix guess ${i + 1}`);
  const r = await getFrom('127.0.1.200', '/r/tasks', withPrefix(prefix));
  assert.equal(r.status, 429, 'a fresh IP guessing the same prefix is refused');
  assert.equal((await getFrom('127.0.1.201', '/r/tasks', generateCredential('integration').value)).status, 401, 'another prefix from a fresh IP is looked up');
});

test('cluster: two nodes counting in one Redis window refuse an IP together', { skip: process.env.REDIS_URL ? false : 'REDIS_URL unset (needs a Redis)' }, async () => {
  const prefix = `gantry-test:${process.pid}:${randomBytes(4).toString('hex')}:`;
  const logger = createLogger('silent');
  const [ca, cb] = [await connectRedis(process.env.REDIS_URL as string, prefix, logger), await connectRedis(process.env.REDIS_URL as string, prefix, logger)];
  try {
    const a = new AuthFailureLimiter({ perIp: 6, perPrefix: 0 }, { shared: new RedisWindowCounter(ca) });
    const b = new AuthFailureLimiter({ perIp: 6, perPrefix: 0 }, { shared: new RedisWindowCounter(cb) });
    const ip = '198.51.100.7';
    for (let i = 0; i < 3; i++) a.failed(ip, `sk-a${i}`, `ha${i}`);
    for (let i = 0; i < 3; i++) b.failed(ip, `sk-b${i}`, `hb${i}`);
    assert.equal(a.refusal(ip, 'sk-x'), null, 'each node alone is under the limit');
    assert.equal(b.refusal(ip, 'sk-x'), null);
    await a.sync();
    await b.sync();
    await a.sync();
    assert.ok((a.refusal(ip, 'sk-x') ?? 0) >= 1, 'node A sees the cluster-wide count');
    assert.ok((b.refusal(ip, 'sk-x') ?? 0) >= 1, 'node B sees the cluster-wide count');
    assert.equal(a.refusal('198.51.100.8', 'sk-x'), null, 'another IP is not refused');
  } finally {
    await ca.close();
    await cb.close();
  }
});
