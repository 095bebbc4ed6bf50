import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startTestNode, type TestNode, type ReqOptions } from '../helpers/node.js';
import { registerUser, createCredential, pairDevice, addMember, type TestUser } from '../helpers/identity.js';
import { FakeAgent } from '../helpers/fake-agent.js';
import { submitTask, waitForStatus } from '../helpers/tasks.js';
import { tinyGraph } from '../agents/helpers.js';
import { makePki, Receiver, type Pki } from '../events/helpers.js';
import type { RouteDef } from '../../src/edge/http.js';
import type { PrincipalKind } from '../../src/edge/principal.js';

/**
 * Issue 12: a cross-team sweep. Team A owns one real resource of every kind a route addresses by id;
 * team B's callers (owner JWT + X-Team-ID of B, B's dk-, B's sk-, each where the route accepts that
 * kind) call EVERY registered route with a path id (t.node.routes(), so a new route is covered
 * automatically) with A's ids substituted: each answers 404 with the error envelope, and A's
 * resources read back unchanged by A afterwards. The only explicit tables are how to obtain an id
 * per path parameter (RESOURCES) and a valid body per write route (BODIES), so that a body
 * validation 400 cannot hide the ownership check.
 */
let pki: Pki;
let rx: Receiver;
let t: TestNode;
let a: TestUser;
let aMember: TestUser;
let b: TestUser;
let bSk: string;
let bDk: string;
let agent: FakeAgent;
/** A's id per path parameter name. */
const ids: Record<string, string> = {};
/** B's own id per path parameter name (for routes with two ids: A's id in one, B's in the others). */
const own: Record<string, string> = {};

const asA = (): ReqOptions => ({ token: a.accessToken, team: a.teamId });
const asB = (): ReqOptions => ({ token: b.accessToken, team: b.teamId });

async function ok(r: Promise<{ status: number; text: string; body: any }>, what: string): Promise<any> {
  const res = await r;
  assert.equal(res.status, 200, `${what}: ${res.status} ${res.text}`);
  return res.body;
}

/** Presign, PUT the bytes, then the registry create call. */
async function registryItem(u: TestUser, kind: 'models' | 'nodes', body: Record<string, unknown>, fileName: string, bytes: Buffer): Promise<string> {
  const pre = await ok(t.http.post(`/${kind}/presign`, { file_name: fileName, file_size: bytes.length, content_type: 'application/octet-stream' }, { token: u.accessToken, team: u.teamId }), `${kind} presign`);
  const put = await fetch(pre.upload_url, { method: 'PUT', headers: pre.upload_headers, body: new Uint8Array(bytes) });
  assert.equal(put.status, 200, await put.text());
  return (await ok(t.http.post(`/${kind}`, { ...body, storage_key: pre.storage_key, file_size: bytes.length }, { token: u.accessToken, team: u.teamId }), `POST /${kind}`)).id;
}

async function workflow(u: TestUser): Promise<{ id: string; slug: string }> {
  const slug = `xteam-${Math.random().toString(36).slice(2, 10)}`;
  const r = await ok(t.http.post('/workflows', { workflow_slug: slug, display_name: slug, workflow_json: tinyGraph(2), max_retries: 0 }, { token: u.accessToken, team: u.teamId }), 'POST /workflows');
  return { id: r.id, slug };
}

async function webhook(u: TestUser): Promise<string> {
  return (await ok(t.http.post('/webhooks', { display_name: 'xteam', webhook_url: rx.url, webhook_events: ['task.completed'] }, { token: u.accessToken, team: u.teamId }), 'POST /webhooks')).id;
}

/**
 * How to create each id type, by path parameter name. Every resource lives in team A; a few also
 * get a twin in B (own) for the mixed cases.
 */
const RESOURCES: Record<string, () => Promise<void>> = {
  workflowId: async () => {
    const w = await workflow(a);
    ids.workflowId = w.id;
    ids.workflowSlug = w.slug;
  },
  workflowSlug: async () => {
    /* created with workflowId */
  },
  credentialId: async () => {
    ids.credentialId = (await createCredential(t.http, a, 'integration')).id;
  },
  userId: async () => {
    ids.userId = aMember.userId;
  },
  invitationId: async () => {
    ids.invitationId = (await ok(t.http.post('/teams/current/invitations', { email_address: `xteam-${Date.now()}@example.test`, member_role: 'member' }, asA()), 'invite')).id;
  },
  webhookId: async () => {
    ids.webhookId = await webhook(a);
    own.webhookId = await webhook(b);
  },
  agentId: async () => {
    agent = await new FakeAgent(t.node, { teamId: a.teamId }).connect();
    ids.agentId = agent.agentId;
  },
  /** A completed task run by A's owner: a webhook delivery (to A's webhook) and a notification for A's owner. */
  deliveryId: async () => {
    assert.ok(ids.webhookId && agent, 'webhookId and agentId first');
    const done = await submitTask(t.node, a.teamId, { createdByUserId: a.userId });
    const asg = await agent.assignment(done);
    agent.ack(asg);
    await waitForStatus(t.node, done, 'running');
    agent.finish(asg, { storage_key: `outputs/${done}/x.png`, image_count: 1 });
    await waitForStatus(t.node, done, 'completed');
    await rx.waitFor(1);
    await t.node.liveEvents.dispatcher.idle();
    const d = await t.node.db.execute<{ id: string }>(`select id from webhook_deliveries where webhook_id = ? and delivery_status = 'succeeded'`, [ids.webhookId]);
    assert.equal(d.length, 1, 'A has one succeeded delivery');
    ids.deliveryId = d[0]!.id;
  },
  notificationId: async () => {
    assert.ok(ids.deliveryId, 'the completed task first');
    const n = await t.node.db.execute<{ id: string }>('select id from notifications where team_id = ? and user_id = ? and read_at is null', [a.teamId, a.userId]);
    assert.ok(n.length >= 1, 'A owner has an unread notification');
    ids.notificationId = n[0]!.id;
  },
  /** A task that stays waiting (no agent has the label), so a leaked cancel would show. */
  taskId: async () => {
    ids.taskId = await submitTask(t.node, a.teamId, { createdByUserId: a.userId, requiredLabels: ['xteam-never'] });
    await waitForStatus(t.node, ids.taskId, 'waiting');
  },
  serviceId: async () => {
    const slug = `xteam-svc-${Math.random().toString(36).slice(2, 8)}`;
    ids.serviceId = (await ok(t.http.post('/containers', { service_slug: slug, display_name: 'xteam', docker_image: 'img', exposed_port: 80 }, asA()), 'POST /containers')).id;
    ids.serviceSlug = slug;
  },
  serviceSlug: async () => {
    /* created with serviceId */
  },
  vaultCredentialId: async () => {
    ids.vaultCredentialId = (await ok(t.http.post('/vault/credentials', { display_name: 'xteam', header_name: 'X-Key', header_value: 'xteam-secret-value-123' }, asA()), 'POST /vault/credentials')).id;
    own.vaultCredentialId = (await ok(t.http.post('/vault/credentials', { display_name: 'xteam', header_name: 'X-Key', header_value: 'b-secret-value-12345' }, asB()), 'POST /vault/credentials (B)')).id;
  },
  /**
   * A's Comfy Cloud key (written to its table directly: PUT checks the key against the provider,
   * which test/cloud stands in for). The path names a provider, not an id: B's PUT would set B's own
   * key (excluded from the sweep below); B's DELETE must be 404 and leave A's key in place.
   */
  provider_slug: async () => {
    await t.node.db.execute(`insert into cloud_providers (team_id, provider_slug, base_url, key_enc, key_id, key_prefix) values (?, 'comfy_cloud', 'https://cloud.comfy.org', 'v1.d0.x.y.z', 'd0', 'comfyui-')`, [a.teamId]);
    ids.provider_slug = 'comfy_cloud';
  },
  /** Registry items last: a team with custom nodes provisions its agents before running tasks. */
  modelId: async () => {
    const bytes = Buffer.from('xteam model bytes');
    ids.modelId = await registryItem(a, 'models', { display_name: 'xteam model', model_type: 'checkpoints', model_path: 'checkpoints/xteam.safetensors', sha256: createHash('sha256').update(bytes).digest('hex') }, 'xteam.safetensors', bytes);
  },
  nodeId: async () => {
    ids.nodeId = await registryItem(a, 'nodes', { display_name: 'xteam-node', package_name: 'xteam-node', node_version: '1.0.0' }, 'xteam-node.tar.gz', Buffer.from('xteam node archive'));
  },
};

/** A valid body per write route (keyed by method and path without the /api/v1 prefix). */
const BODIES: Record<string, unknown> = {
  'PUT /credentials/{credentialId}/scheduling': { scheduling_weight: 2 },
  'PUT /workflows/{workflowId}': { display_name: 'stolen' },
  'POST /r/workflows/{workflowId}/run': { parameters: {} },
  'POST /r/workflows/slug/{workflowSlug}/run': { parameters: {} },
  'PUT /models/{modelId}': { display_name: 'stolen' },
  'PUT /teams/current/members/{userId}': { member_role: 'admin' },
  'PUT /webhooks/{webhookId}': { webhook_status: 'disabled' },
  'PUT /containers/{serviceId}': { display_name: 'stolen' },
  'POST /r/invoke/{serviceSlug}': { method: 'GET', path: '/' },
  'PUT /vault/credentials/{vaultCredentialId}': { display_name: 'stolen' },
};

/** What A reads back (before and after the sweep) to prove nothing changed. */
const READS = [
  '/workflows/{workflowId}',
  '/workflows/{workflowId}/snapshots',
  '/r/workflows/slug/{workflowSlug}',
  '/r/tasks/{taskId}',
  '/models/{modelId}',
  '/nodes/{nodeId}',
  '/agents/{agentId}',
  '/webhooks/{webhookId}',
  '/webhooks/{webhookId}/deliveries',
  '/containers/{serviceId}',
  '/r/containers/{serviceSlug}',
  '/vault/credentials/{vaultCredentialId}',
  '/cloud-providers',
  '/teams/current/members',
  '/teams/current/invitations',
  '/credentials',
  '/notifications',
];

/** Fields that move on their own (heartbeats, clocks), not through a caller. */
const VOLATILE = /^(last_seen_at|last_heartbeat_at|updated_at|uptime_s|server_time|connected_at)$/;
function stable(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(stable);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).filter(([k]) => !VOLATILE.test(k)).map(([k, x]) => [k, stable(x)]));
  return v;
}

const fill = (path: string, pick: (name: string) => string | undefined): string =>
  path.replace(/\{(\w+)\}/g, (_, name: string) => {
    const v = pick(name);
    if (v === undefined) throw new Error(`no id for {${name}} in ${path}: add it to RESOURCES`);
    return v;
  });

async function snapshot(): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const p of READS) {
    const r = await t.http.get(fill(p, (n) => ids[n]), asA());
    assert.equal(r.status, 200, `A reads ${p}: ${r.status} ${r.text}`);
    out[p] = stable(r.body);
  }
  return out;
}

before(async () => {
  pki = makePki();
  rx = await new Receiver(pki, () => Date.now()).start('127.0.0.1');
  t = await startTestNode({ GANTRY_OUTBOUND_CA_FILE: pki.caFile, GANTRY_AUTH_RATE_LIMIT_PER_MIN: 1_000_000 }, 'xteam');
  a = await registerUser(t.http);
  aMember = await registerUser(t.http);
  await addMember(t.http, t.node, a, aMember, 'member');
  b = await registerUser(t.http);
  bSk = (await createCredential(t.http, b, 'integration')).value;
  bDk = (await pairDevice(t.http, b)).deviceCredential;
  // in dependency order: the table's insertion order
  for (const make of Object.values(RESOURCES)) await make();
});
after(async () => {
  await agent?.disconnect();
  await t?.stop();
  await rx?.stop();
  pki?.cleanup();
});

interface Caller {
  kind: PrincipalKind;
  name: string;
  opts: () => ReqOptions;
}
const callers: Caller[] = [
  { kind: 'user', name: "B's JWT + X-Team-ID of B", opts: asB },
  { kind: 'device', name: "B's dk-", opts: () => ({ token: bDk }) },
  { kind: 'integration', name: "B's sk-", opts: () => ({ token: bSk }) },
];

async function call(def: RouteDef, path: string, c: Caller): Promise<{ status: number; body: any }> {
  const method = def.method === 'ANY' ? 'GET' : def.method;
  const rel = path.replace(/^\/api\/v1/, '');
  const body = BODIES[`${def.method} ${def.path.replace(/^\/api\/v1/, '')}`];
  const o = c.opts();
  const headers: Record<string, string> = { authorization: `Bearer ${o.token}` };
  if (o.team) headers['x-team-id'] = o.team;
  if (body !== undefined) headers['content-type'] = 'application/json';
  try {
    const res = await fetch(`${t.baseUrl}${rel}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: AbortSignal.timeout(5000) });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    return { status: res.status, body: parsed };
  } catch (e) {
    // a handler that holds the request open (SSE) served B a stream of A's task
    if ((e as Error).name === 'TimeoutError') return { status: 0, body: 'held open (a stream was served)' };
    throw e;
  }
}

test("team B's callers get 404 on every id route addressing team A's resources, and A's resources are unchanged", { timeout: 90_000 }, async () => {
  // PUT /cloud-providers/{provider_slug} names a provider, not one of A's resources: B's PUT sets B's own key
  const routes = t.node.routes().filter((r) => r.auth.kinds !== 'public' && /\{\w+\}/.test(r.path) && !(r.method === 'PUT' && r.path.endsWith('/cloud-providers/{provider_slug}')));
  assert.ok(routes.length >= 25, `id routes: ${routes.length}`);
  const beforeSweep = await snapshot();
  const failures: string[] = [];
  let checked = 0;
  for (const def of routes) {
    const kinds = def.auth.kinds === 'public' ? [] : def.auth.kinds;
    const params = [...def.path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]!);
    // all of A's ids; and with two ids or more, A's id in one and B's own in the others where B has one
    const variants: Array<{ label: string; path: string }> = [{ label: "A's ids", path: fill(def.path, (n) => ids[n]) }];
    if (params.length > 1)
      for (const p of params) if (params.some((q) => q !== p && own[q] && own[q] !== ids[q])) variants.push({ label: `A's ${p}, B's other ids`, path: fill(def.path, (n) => (n === p ? ids[n] : (own[n] ?? ids[n]))) });
    for (const c of callers) {
      if (!kinds.includes(c.kind)) continue;
      for (const v of variants) {
        const r = await call(def, v.path, c);
        checked++;
        const where = `${def.method} ${def.path} [${c.name}, ${v.label}]`;
        if (r.status === 400) failures.push(`${where}: 400 ${r.body?.error_message} (give the route a valid body in BODIES)`);
        else if (r.status !== 404) failures.push(`${where}: expected 404, got ${r.status} ${r.body?.error_code ?? '(a body, not an error: not printed, it may hold secrets)'}`);
        else if (typeof r.body?.error_code !== 'string' || typeof r.body?.error_message !== 'string') failures.push(`${where}: 404 without the error envelope`);
      }
    }
  }
  console.log(`cross-team sweep: ${routes.length} id routes, ${checked} calls`);
  assert.deepEqual(failures, [], `${failures.length} of ${checked} calls failed:\n${failures.join('\n')}`);
  // A reads everything back as it was; nothing was cancelled, revoked, removed or redelivered
  assert.deepEqual(await snapshot(), beforeSweep);
  assert.equal((await t.http.get(`/r/tasks/${ids.taskId}`, asA())).body.task_status, 'waiting');
  assert.equal(rx.received.length, 1, 'no redelivery to A receiver');
  // the sweep is not vacuous: A's own callers reach the same resources
  for (const p of ['/workflows/{workflowId}', '/models/{modelId}', '/nodes/{nodeId}', '/webhooks/{webhookId}', '/agents/{agentId}', '/r/tasks/{taskId}']) {
    assert.equal((await t.http.get(fill(p, (n) => ids[n]), asA())).status, 200, p);
  }
});

test('every path parameter of a registered route has a way to create its resource', () => {
  const names = new Set(t.node.routes().flatMap((r) => [...r.path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]!)));
  for (const n of names) assert.ok(n in RESOURCES && ids[n], `{${n}}: add a creator to RESOURCES`);
});
