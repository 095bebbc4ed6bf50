import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, createCredential, pairDevice, addMember, type TestUser } from '../helpers/identity.js';
import type { RouteDef } from '../../src/edge/http.js';
import type { PrincipalKind, RouteAuth } from '../../src/edge/principal.js';

/**
 * The auth matrix: every registered route (t.node.routes(), so routes added later are covered
 * automatically) x every kind of caller, asserting the status the route's RouteAuth and the spec
 * require. An allowed caller is only asserted "not 401/403" (handlers may 400/404 on fake params);
 * allowed callers use a team and credentials of their own, checked before each use and recreated
 * when a destructive route (DELETE /teams/current, POST /auth/device/revoke) spoiled them.
 */
let t: TestNode;
let owner: TestUser;
let outsider: TestUser;
let member: TestUser;
let sk: string;
let skRevoked: string;
let skExpired: string;
let ak: string;
let dk: string;

before(async () => {
  t = await startTestNode({ GANTRY_AUTH_RATE_LIMIT_PER_MIN: 1_000_000 }, 'authmatrix');
  owner = await registerUser(t.http);
  outsider = await registerUser(t.http);
  member = await registerUser(t.http);
  await addMember(t.http, t.node, owner, member, 'member');
  sk = (await createCredential(t.http, owner, 'integration')).value;
  const r = await createCredential(t.http, owner, 'integration');
  assert.equal((await t.http.del(`/credentials/${r.id}`, { token: owner.accessToken, team: owner.teamId })).status, 200);
  skRevoked = r.value;
  const e = await createCredential(t.http, owner, 'integration', { expiresInDays: 1 });
  await t.node.db.execute(`update credentials set expires_at = now() - interval '1 minute' where id = ?`, [e.id]);
  skExpired = e.value;
  const paired = await pairDevice(t.http, owner);
  ak = paired.agentCredential;
  dk = paired.deviceCredential;
});
after(async () => {
  await t.stop();
});

type Expect = { status: number; code?: string } | 'allowed';

/**
 * Fixtures for calls that may succeed, one pool per worker: checked before each use and recreated
 * when a previous call (DELETE /teams/current, POST /auth/device/revoke...) spoiled them.
 */
interface Pool {
  team?: string;
  sk?: string;
  dk?: string;
}

interface Case {
  name: string;
  /** fresh: the call may succeed, so use the worker's own team and credentials. */
  headers: (fresh: boolean, pool: Pool) => Promise<Record<string, string>>;
  expect: (a: RouteAuth) => Expect;
}

const has = (a: RouteAuth, k: PrincipalKind): boolean => a.kinds !== 'public' && a.kinds.includes(k);
const bearer = (tok: string): Record<string, string> => ({ authorization: `Bearer ${tok}` });
const elevated = (a: RouteAuth): boolean => a.role === 'admin' || a.role === 'owner';

async function freshTeam(): Promise<string> {
  const r = await t.http.post('/teams', { display_name: `matrix ${randomUUID().slice(0, 8)}` }, { token: owner.accessToken });
  assert.equal(r.status, 200, r.text);
  return r.body.id;
}

async function poolTeam(pool: Pool): Promise<string> {
  if (pool.team && (await t.http.get('/teams/current', { token: owner.accessToken, team: pool.team })).status === 200) return pool.team;
  return (pool.team = await freshTeam());
}

async function poolSk(pool: Pool): Promise<string> {
  if (pool.sk && (await t.http.get('/_debug/r/whoami', { token: pool.sk })).status === 200) return pool.sk;
  const team = await freshTeam();
  return (pool.sk = (await createCredential(t.http, { accessToken: owner.accessToken, teamId: team }, 'integration')).value);
}

async function poolDk(pool: Pool): Promise<string> {
  if (pool.dk && (await t.http.get('/_debug/r/whoami', { token: pool.dk })).status === 200) return pool.dk;
  const team = await freshTeam();
  return (pool.dk = (await pairDevice(t.http, { accessToken: owner.accessToken, teamId: team })).deviceCredential);
}

const cases: Case[] = [
  { name: 'no credential', headers: async () => ({}), expect: () => ({ status: 401, code: 'credential_missing' }) },
  { name: 'malformed bearer', headers: async () => bearer('not-a-token'), expect: () => ({ status: 401, code: 'credential_invalid' }) },
  { name: 'not bearer', headers: async () => ({ authorization: 'Basic dXNlcjpwYXNz' }), expect: () => ({ status: 401, code: 'credential_invalid' }) },
  {
    name: 'sk- with a bad checksum',
    headers: async () => bearer(sk.slice(0, -1) + (sk.endsWith('A') ? 'B' : 'A')),
    expect: () => ({ status: 401, code: 'credential_invalid' }),
  },
  { name: 'forged JWT', headers: async () => ({ ...bearer(owner.accessToken.slice(0, -4) + 'AAAA'), 'x-team-id': owner.teamId }), expect: () => ({ status: 401, code: 'credential_invalid' }) },
  { name: 'revoked sk-', headers: async () => bearer(skRevoked), expect: () => ({ status: 401, code: 'credential_revoked' }) },
  { name: 'expired sk-', headers: async () => bearer(skExpired), expect: () => ({ status: 401, code: 'credential_expired' }) },
  { name: 'ak-', headers: async () => bearer(ak), expect: (a) => (has(a, 'agent') ? 'allowed' : { status: 401 }) },
  {
    name: 'JWT (owner) with X-Team-ID',
    headers: async (fresh, pool) => ({ ...bearer(owner.accessToken), 'x-team-id': fresh ? await poolTeam(pool) : owner.teamId }),
    expect: (a) => (has(a, 'user') ? 'allowed' : a.integrationOnly401 ? { status: 401 } : { status: 403 }),
  },
  {
    name: 'JWT without X-Team-ID',
    headers: async () => bearer(owner.accessToken),
    expect: (a) => (!has(a, 'user') ? { status: a.integrationOnly401 ? 401 : 403 } : a.team ? { status: 400, code: 'team_header_missing' } : 'allowed'),
  },
  {
    name: 'JWT with a malformed X-Team-ID',
    headers: async () => ({ ...bearer(owner.accessToken), 'x-team-id': 'team-1' }),
    expect: (a) => (!has(a, 'user') ? { status: a.integrationOnly401 ? 401 : 403 } : a.team ? { status: 400, code: 'team_header_invalid' } : 'allowed'),
  },
  {
    name: 'JWT of a non-member',
    headers: async () => ({ ...bearer(outsider.accessToken), 'x-team-id': owner.teamId }),
    expect: (a) => (!has(a, 'user') ? { status: a.integrationOnly401 ? 401 : 403 } : a.team ? { status: 403, code: 'not_a_member' } : 'allowed'),
  },
  {
    name: 'JWT of a plain member',
    headers: async () => ({ ...bearer(member.accessToken), 'x-team-id': owner.teamId }),
    expect: (a) => (!has(a, 'user') ? { status: a.integrationOnly401 ? 401 : 403 } : a.team && elevated(a) ? { status: 403, code: 'insufficient_role' } : 'allowed'),
  },
  {
    name: 'sk-',
    headers: async (fresh, pool) => ({ ...bearer(fresh ? await poolSk(pool) : sk), 'x-team-id': outsider.teamId /* ignored */ }),
    expect: (a) =>
      !has(a, 'integration')
        ? a.jwtOnly401
          ? { status: 401 }
          : { status: 403, code: 'integration_credential_not_allowed' }
        : a.team && elevated(a)
          ? { status: 403 }
          : 'allowed',
  },
  {
    name: 'dk-',
    headers: async (fresh, pool) => ({ ...bearer(fresh ? await poolDk(pool) : dk), 'x-team-id': outsider.teamId /* ignored */ }),
    expect: (a) => (!has(a, 'device') ? (a.jwtOnly401 || a.integrationOnly401 ? { status: 401 } : { status: 403 }) : 'allowed'),
  },
];

function concretePath(path: string): string {
  return path
    .split('/')
    .map((s) => (/^\{.+\}$/.test(s) ? randomUUID() : s === '*' ? 'x' : s))
    .join('/');
}

async function call(def: RouteDef, headers: Record<string, string>): Promise<{ status: number; body: any }> {
  const method = def.method === 'ANY' ? 'GET' : def.method;
  try {
    const res = await fetch(`${t.origin}${concretePath(def.path)}`, { method, headers, signal: AbortSignal.timeout(3000) });
    const text = await res.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    return { status: res.status, body };
  } catch (e) {
    // a handler that holds the request open (SSE) accepted the caller
    if ((e as Error).name === 'TimeoutError') return { status: 0, body: null };
    throw e;
  }
}

test('every route declares its auth, and every kind of caller gets the status the spec requires', { timeout: 120_000 }, async () => {
  const routes = t.node.routes();
  assert.ok(routes.length >= 30, `expected the identity routes at least (got ${routes.length})`);
  const failures: string[] = [];
  let checked = 0;
  const checkRoute = async (def: RouteDef, pool: Pool): Promise<void> => {
    assert.ok(def.auth && (def.auth.kinds === 'public' || def.auth.kinds.length > 0), `${def.method} ${def.path} declares no auth`);
    const label = `${def.method} ${def.path}`;
    if (def.auth.kinds === 'public') {
      const base = await call(def, {});
      if (base.status === 401) failures.push(`${label}: public route answered 401 without a credential`);
      for (const c of cases) {
        const r = await call(def, await c.headers(false, pool));
        checked++;
        if ((r.status === 401 || r.status === 403) && r.status !== base.status) failures.push(`${label} [${c.name}]: public route answered ${r.status} (${r.body?.error_code}) but ${base.status} without a credential`);
      }
      return;
    }
    for (const c of cases) {
      const expect = c.expect(def.auth);
      const headers = await c.headers(expect === 'allowed', pool);
      const r = await call(def, headers);
      checked++;
      if (expect === 'allowed') {
        if (r.status === 401 || r.status === 403) failures.push(`${label} [${c.name}]: expected an allowed caller, got ${r.status} ${r.body?.error_code}`);
      } else {
        if (r.status !== expect.status) failures.push(`${label} [${c.name}]: expected ${expect.status}${expect.code ? ` ${expect.code}` : ''}, got ${r.status} ${r.body?.error_code ?? ''}`);
        else if (expect.code && r.body?.error_code !== expect.code) failures.push(`${label} [${c.name}]: expected error_code ${expect.code}, got ${r.body?.error_code}`);
        else if (typeof r.body?.error_message !== 'string') failures.push(`${label} [${c.name}]: error without the envelope`);
      }
    }
  };
  // a few routes at a time, each worker with its own fixtures
  const queue = [...routes];
  await Promise.all(
    Array.from({ length: 6 }, async () => {
      const pool: Pool = {};
      for (let def = queue.shift(); def; def = queue.shift()) await checkRoute(def, pool);
    }),
  );
  console.log(`auth matrix: ${routes.length} routes, ${checked} checks`);
  assert.deepEqual(failures, [], `${failures.length} of ${checked} checks failed:\n${failures.join('\n')}`);
  // the shared fixtures are still intact (nothing above revoked them)
  assert.equal((await t.http.get('/_debug/r/whoami', { token: sk })).status, 200);
  assert.equal((await t.http.get('/_debug/r/whoami', { token: dk })).status, 200);
});

test('the matrix reaches each kind of caller somewhere (routes accepting sk-, dk- and JWT exist)', () => {
  const routes = t.node.routes();
  for (const k of ['user', 'integration', 'device'] as const) assert.ok(routes.some((r) => has(r.auth, k)), `no route accepts ${k}`);
  assert.ok(routes.some((r) => r.auth.kinds !== 'public' && r.auth.team), 'no team-scoped route');
});

test("the spec's surface rules hold for every route: sk- only on /r/* (and /mcp), multipart JWT-only with 401, ak- nowhere", () => {
  for (const r of t.node.routes()) {
    if (r.auth.kinds === 'public') continue;
    const where = `${r.method} ${r.path}`;
    if (r.auth.kinds.includes('integration')) assert.match(r.path, /^\/api\/v1\/(r\/|mcp$|_debug\/r\/)/, `${where} accepts sk- outside the runtime surface`);
    assert.ok(!r.auth.kinds.includes('agent'), `${where} accepts ak- on REST`);
    if (r.path.startsWith('/api/v1/uploads/multipart/')) {
      assert.equal(r.auth.jwtOnly401, true, `${where} must answer 401 to sk-/dk-`);
      assert.deepEqual([...r.auth.kinds], ['user'], `${where} is JWT only`);
    }
    if (r.path.startsWith('/api/v1/r/')) assert.equal(r.auth.team, true, `${where} is team-scoped`);
    if (r.path === '/api/v1/mcp') {
      assert.deepEqual([...r.auth.kinds], ['integration'], `${where} is sk- only`);
      assert.equal(r.auth.integrationOnly401, true, `${where} must answer 401 to JWT and dk-`);
    }
  }
});

test('sk- and dk- take the team from the credential and ignore a foreign X-Team-ID', async () => {
  const me = await registerUser(t.http);
  const other = await registerUser(t.http);
  const key = await createCredential(t.http, me, 'integration');
  const r = await t.http.get('/_debug/r/whoami', { token: key.value, team: other.teamId });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body.team_id, me.teamId);
  assert.equal(r.body.kind, 'integration');
  const device = await pairDevice(t.http, me);
  const d = await t.http.get('/_debug/r/whoami', { token: device.deviceCredential, team: other.teamId });
  assert.equal(d.status, 200, d.text);
  assert.equal(d.body.team_id, me.teamId);
  assert.equal(d.body.kind, 'device');
  assert.equal(d.body.user_id, me.userId);
});
