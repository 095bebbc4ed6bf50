import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { startTestNode, type TestNode, type HttpResult } from '../helpers/node.js';
import { registerUser, createCredential, type TestUser } from '../helpers/identity.js';
import { FakeClock } from '../../src/shared/clock.js';

/**
 * Per credential and per team request limits over real HTTP, with low limits and the node's
 * injectable clock (time moves only when the test says so, so no bucket refills by accident).
 * Runtime: 3 per credential, 5 per team. Management: 4 per credential (JWT user + team), no team limit.
 */
let t: TestNode;
let clock: FakeClock;
let ownerA: TestUser;
let ownerB: TestUser;
let a1: string;
let a2: string;
let b1: string;

before(async () => {
  clock = new FakeClock(Date.now());
  t = await startTestNode(
    {
      GANTRY_AUTH_RATE_LIMIT_PER_MIN: 1_000_000,
      GANTRY_RATE_LIMIT_RUNTIME_PER_MIN: 3,
      GANTRY_RATE_LIMIT_RUNTIME_TEAM_PER_MIN: 5,
      GANTRY_RATE_LIMIT_MANAGEMENT_PER_MIN: 4,
    },
    'ratelimits',
    { clock },
  );
  ownerA = await registerUser(t.http);
  ownerB = await registerUser(t.http);
  a1 = (await createCredential(t.http, ownerA, 'integration')).value;
  a2 = (await createCredential(t.http, ownerA, 'integration')).value;
  b1 = (await createCredential(t.http, ownerB, 'integration')).value;
});
after(async () => {
  await t.stop();
});

const runtime = (token: string): Promise<HttpResult> => t.http.get('/r/workflows', { token });

function assertLimited(r: HttpResult, scope: 'credential' | 'team', limit: number, retryAfter?: number): void {
  assert.equal(r.status, 429, r.text);
  assert.equal(r.body.error_code, 'rate_limited');
  assert.match(r.body.error_message, new RegExp(`${scope} rate limit of ${limit} requests per minute`));
  const ra = Number(r.headers.get('retry-after'));
  assert.ok(Number.isInteger(ra) && ra >= 1 && ra <= 60, `Retry-After ${r.headers.get('retry-after')}`);
  if (retryAfter !== undefined) assert.equal(ra, retryAfter);
  assert.equal(r.headers.get('ratelimit-limit'), String(limit));
  assert.equal(r.headers.get('ratelimit-remaining'), '0');
  const reset = Number(r.headers.get('ratelimit-reset'));
  assert.ok(reset >= ra && reset <= 60, `RateLimit-Reset ${reset} between Retry-After and the window`);
  assert.equal(r.headers.get('ratelimit-policy'), `${limit};w=60;scope=${scope}`);
}

test('runtime: per credential, per team, other teams unaffected, refill with time', async () => {
  // a1: 3 requests pass, the 4th is refused by its credential bucket (1 token every 20 s)
  for (let i = 0; i < 3; i++) assert.equal((await runtime(a1)).status, 200, `a1 request ${i + 1}`);
  const over = await runtime(a1);
  assertLimited(over, 'credential', 3, 20);
  assert.equal(over.headers.get('ratelimit-reset'), '60');

  // the refused request took no team token: a2 (same team) gets exactly the 2 left of 5
  assert.equal((await runtime(a2)).status, 200);
  assert.equal((await runtime(a2)).status, 200);
  assertLimited(await runtime(a2), 'team', 5, 12);

  // the SSE stream route is limited too (429 before the handler would answer 404)
  assertLimited(await t.http.get(`/r/tasks/${randomUUID()}/events`, { token: a2 }), 'team', 5);

  // another team is not affected
  for (let i = 0; i < 3; i++) assert.equal((await runtime(b1)).status, 200, `b1 request ${i + 1}`);
  assertLimited(await runtime(b1), 'credential', 3);

  // 21 s later: a1's bucket holds 1.05 tokens, the team's 1.75: one request passes, the next does not
  clock.advance(21_000);
  assert.equal((await runtime(a1)).status, 200, 'refilled');
  assertLimited(await runtime(a1), 'credential', 3, 19);
  // the team has 0.75 left: a2 (whose own bucket has 1.05) is refused by the team
  assertLimited(await runtime(a2), 'team', 5);

  // a full minute later everything is back to a full burst
  clock.advance(60_000);
  for (let i = 0; i < 3; i++) assert.equal((await runtime(a1)).status, 200, `a1 after refill ${i + 1}`);
  assert.equal((await runtime(a2)).status, 200);
  assert.equal((await runtime(a2)).status, 200);
  assertLimited(await runtime(a2), 'team', 5);
});

test('management: per JWT user and team, separate from the runtime surface', async () => {
  const u = await registerUser(t.http);
  const other = await registerUser(t.http);
  const asU = { token: u.accessToken, team: u.teamId };
  for (let i = 0; i < 4; i++) assert.equal((await t.http.get('/credentials', asU)).status, 200, `management request ${i + 1}`);
  assertLimited(await t.http.get('/credentials', asU), 'credential', 4, 15);
  // a failing route is counted after authentication too: the limit answers first
  assertLimited(await t.http.get(`/workflows/${randomUUID()}`, asU), 'credential', 4);

  // the runtime surface has its own buckets for the same caller
  assert.equal((await t.http.get('/r/workflows', asU)).status, 200);
  // another user is not affected
  assert.equal((await t.http.get('/credentials', { token: other.accessToken, team: other.teamId })).status, 200);

  clock.advance(16_000);
  assert.equal((await t.http.get('/credentials', asU)).status, 200, 'one token back after 16 s');
  assertLimited(await t.http.get('/credentials', asU), 'credential', 4);
});

test('unauthenticated requests are not counted against anyone, and are answered as before', async () => {
  const r = await t.http.get('/r/workflows');
  assert.equal(r.status, 401);
  assert.equal(r.headers.get('ratelimit-limit'), null);
});
