/**
 * The audit log: every management write route appends exactly one entry (with the caller as actor,
 * the request id and the client IP) in the transaction of the change; a refused or failed write
 * appends none; an entry whose append fails takes the change down with it; admins/owner of the
 * team read it (filters, pagination), nobody else; retention deletes old entries.
 */
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { addMember, emailToken, registerUser, type TestUser } from '../helpers/identity.js';
import { comfyBody, uniqueSlug } from '../workflows-api/fixtures.js';
import { q } from '../../src/persistence/sql.js';
import { startComfyStandin, type ComfyStandin } from '../fixtures/comfyui-standin.js';
import { makePki, type Pki } from '../events/helpers.js';

const CLOUD_KEY = 'zq7-cloudkey-0123456789abcdef0123456789abcdef';
let pki: Pki;
let cloud: ComfyStandin;

let t: TestNode;
let owner: TestUser;
let admin: TestUser;
let member: TestUser;
let stranger: TestUser;
let team: string;

before(async () => {
  // the cloud provider routes check the key against a provider: the ComfyUI stand-in in cloud mode
  pki = makePki();
  cloud = await startComfyStandin({ cloud: { apiKey: CLOUD_KEY, tls: { key: pki.key.toString(), cert: pki.cert.toString() } } });
  t = await startTestNode({ GANTRY_OUTBOUND_CA_FILE: pki.caFile }, 'audit');
  owner = await registerUser(t.http);
  admin = await registerUser(t.http);
  member = await registerUser(t.http);
  stranger = await registerUser(t.http);
  team = owner.teamId;
  await addMember(t.http, t.node, owner, admin, 'admin');
  await addMember(t.http, t.node, owner, member, 'member');
});
after(async () => {
  await t?.stop();
  await cloud?.close();
  pki?.cleanup();
});

const sql = <T = Record<string, any>>(s: string, p: unknown[] = []): Promise<T[]> => q(t.node.db)<T>(s, p);
const as = (u: TestUser, teamId = team) => ({ token: u.accessToken, team: teamId });

interface Who {
  token: string;
  team?: string;
  /** the expected actor */
  kind: 'user' | 'device';
  userId: string;
  credentialId?: string | null;
}
const userActor = (u: TestUser, teamId = team): Who => ({ token: u.accessToken, team: teamId, kind: 'user', userId: u.userId, credentialId: null });

/**
 * Sends one request with its own X-Request-ID and returns the response and the audit entries that
 * request wrote (and how many entries were added in total, so a stray second entry shows up).
 */
async function call(who: Who, method: string, path: string, body?: unknown): Promise<{ status: number; body: any; text: string; entries: any[]; added: number }> {
  const rid = `audit-${randomUUID()}`;
  const before = (await sql<{ n: number }>('select count(*)::int as n from audit_log'))[0]!.n;
  const r = await t.http.req(method, path, { token: who.token, ...(who.team ? { team: who.team } : {}), headers: { 'x-request-id': rid }, ...(body !== undefined ? { body } : {}) });
  const entries = await sql('select * from audit_log where request_id = ?', [rid]);
  const afterN = (await sql<{ n: number }>('select count(*)::int as n from audit_log'))[0]!.n;
  return { status: r.status, body: r.body, text: r.text, entries, added: afterN - before };
}

const covered = new Set<string>();

/** One successful management write: exactly one entry, this action, this actor, this team (and target). */
async function expectOne(who: Who, method: string, route: string, path: string, body: unknown, action: string, o: { teamId?: string | 'new'; targetId?: string | null } = {}): Promise<any> {
  const r = await call(who, method, path, body);
  assert.ok(r.status >= 200 && r.status < 300, `${method} ${path}: ${r.status} ${r.text}`);
  assert.equal(r.added, 1, `${method} ${path}: one entry in total`);
  assert.equal(r.entries.length, 1, `${method} ${path}: one entry with the request id`);
  const e = r.entries[0];
  assert.equal(e.action, action);
  assert.equal(e.outcome, 'succeeded');
  assert.equal(e.actor_kind, who.kind, `${action}: actor kind`);
  assert.equal(e.actor_user_id, who.userId, `${action}: actor user`);
  assert.equal(e.actor_credential_id, who.credentialId ?? null, `${action}: actor credential`);
  if (o.teamId === 'new') assert.equal(e.team_id, r.body.id, `${action}: the new team`);
  else assert.equal(e.team_id, o.teamId ?? who.team ?? team, `${action}: team`);
  assert.ok(e.client_ip === '127.0.0.1' || e.client_ip === '::1' || /127\.0\.0\.1/.test(e.client_ip), `${action}: client ip ${e.client_ip}`);
  const id = r.body?.id;
  if (o.targetId !== undefined) assert.equal(e.target_id, o.targetId, `${action}: target`);
  else if (typeof id === 'string' && method === 'POST') assert.equal(e.target_id, id, `${action}: target is the created id`);
  covered.add(`${method} ${route}`);
  return r.body;
}

async function stage(u: TestUser, kind: 'models' | 'nodes', name: string): Promise<{ storage_key: string; file_size: number; sha256: string }> {
  const bytes = randomBytes(256);
  const pre = await t.http.post(`/${kind}/presign`, { file_name: name, file_size: bytes.length, content_type: 'application/octet-stream' }, as(u));
  assert.equal(pre.status, 200, pre.text);
  const put = await fetch(pre.body.upload_url, { method: 'PUT', headers: pre.body.upload_headers, body: new Uint8Array(bytes) });
  assert.equal(put.status, 200);
  return { storage_key: pre.body.storage_key, file_size: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex') };
}

/**
 * Routes that write but are not management writes of a team resource (so not audited), each with
 * its reason. Everything else the node serves with a write method and a credential is covered below.
 */
const NOT_AUDITED: Record<string, string> = {
  'POST /api/v1/models/presign': 'stages an upload; the model exists (and is audited) once POST /models consumes it',
  'POST /api/v1/nodes/presign': 'stages an upload; audited at POST /nodes',
  'POST /api/v1/uploads/multipart/initiate': 'upload staging',
  'POST /api/v1/uploads/multipart/presign-parts': 'upload staging',
  'POST /api/v1/uploads/multipart/complete': 'upload staging',
  'POST /api/v1/uploads/multipart/abort': 'upload staging',
  'POST /api/v1/auth/logout': "ends the caller's own session (a user's, not a team's)",
};

const isManagementWrite = (r: { method: string; path: string; auth: { kinds: unknown }; tag?: string }): boolean =>
  ['POST', 'PUT', 'PATCH', 'DELETE'].includes(r.method) &&
  r.auth.kinds !== 'public' &&
  r.path.startsWith('/api/v1/') &&
  !r.path.startsWith('/api/v1/r/') &&
  !r.path.startsWith('/api/v1/_debug') &&
  r.path !== '/api/v1/mcp' &&
  r.tag !== 'gateway';

test('every management write route appends exactly one entry with the right actor', async () => {
  const U = userActor(owner);
  const A = userActor(admin);

  // ---- workflows
  const wf = await expectOne(A, 'POST', '/workflows', '/workflows', comfyBody({ workflow_slug: uniqueSlug('aud') }), 'workflow.create');
  const imp = await expectOne(A, 'POST', '/workflows/import', '/workflows/import', comfyBody({ workflow_slug: uniqueSlug('imp') }), 'workflow.import');
  await expectOne(A, 'PUT', '/workflows/{workflowId}', `/workflows/${wf.id}`, { display_name: 'renamed' }, 'workflow.update', { targetId: wf.id });
  await expectOne(A, 'DELETE', '/workflows/{workflowId}', `/workflows/${imp.id}`, undefined, 'workflow.delete', { targetId: imp.id });

  // ---- device credential (dk-) acting for its user: actor kind device, the credential named
  const dev = await expectOnePairing(U);
  const creds = await t.http.get('/credentials?per_page=100', as(owner));
  const dk = creds.body.credential_list.find((c: any) => c.credential_type === 'device');
  assert.ok(dk);
  const D: Who = { token: dev.deviceCredential, kind: 'device', userId: owner.userId, credentialId: dk.id };
  await expectOne(D, 'POST', '/workflows', '/workflows', comfyBody({ workflow_slug: uniqueSlug('dev') }), 'workflow.create');

  // ---- models and custom nodes
  const st = await stage(admin, 'models', 'a.safetensors');
  const model = await expectOne(A, 'POST', '/models', '/models', { display_name: 'm', model_type: 'checkpoints', model_path: 'checkpoints/a.safetensors', ...st }, 'model.create');
  await expectOne(A, 'PUT', '/models/{modelId}', `/models/${model.id}`, { model_status: 'disabled' }, 'model.update', { targetId: model.id });
  await expectOne(A, 'DELETE', '/models/{modelId}', `/models/${model.id}`, undefined, 'model.delete', { targetId: model.id });
  const sn = await stage(admin, 'nodes', 'pkg.tar.gz');
  const node = await expectOne(A, 'POST', '/nodes', '/nodes', { display_name: 'n', package_name: 'comfyui-audit-pack', node_version: '1.0.0', ...sn }, 'node.create');
  await expectOne(A, 'DELETE', '/nodes/{nodeId}', `/nodes/${node.id}`, undefined, 'node.delete', { targetId: node.id });

  // ---- webhooks (and a redelivery)
  const hook = await expectOne(A, 'POST', '/webhooks', '/webhooks', { display_name: 'h', webhook_url: 'https://127.0.0.1:9/hook', webhook_events: ['task.completed'] }, 'webhook.create');
  await expectOne(A, 'PUT', '/webhooks/{webhookId}', `/webhooks/${hook.id}`, { webhook_status: 'active', display_name: 'h2' }, 'webhook.update', { targetId: hook.id });
  const delivery = randomUUID();
  await sql(`insert into webhook_deliveries (id, webhook_id, team_id, task_event_id, task_id, event_type, body, delivery_status) values (?, ?, ?, 1, ?, 'task.completed', '{}', 'failed')`, [delivery, hook.id, team, randomUUID()]);
  await expectOne(A, 'POST', '/webhooks/{webhookId}/deliveries/{deliveryId}/redeliver', `/webhooks/${hook.id}/deliveries/${delivery}/redeliver`, undefined, 'webhook.redeliver', { targetId: hook.id });
  await expectOne(A, 'DELETE', '/webhooks/{webhookId}', `/webhooks/${hook.id}`, undefined, 'webhook.delete', { targetId: hook.id });

  // ---- notifications (read, read-all)
  await t.node.liveEvents.notifySystem(team, 'audit_test', { title: 'one', message: 'first' });
  await t.node.liveEvents.notifySystem(team, 'audit_test_2', { title: 'two', message: 'second' });
  const notes = await t.http.get('/notifications', as(owner));
  assert.ok(notes.body.notification_list.length >= 2, notes.text);
  const nid = notes.body.notification_list[0].id;
  await expectOne(U, 'PATCH', '/notifications/{notificationId}/read', `/notifications/${nid}/read`, undefined, 'notification.read', { targetId: nid });
  await expectOne(U, 'POST', '/notifications/read-all', '/notifications/read-all', undefined, 'notification.read_all', { targetId: null });

  // ---- vault
  const vc = await expectOne(A, 'POST', '/vault/credentials', '/vault/credentials', { display_name: 'api', header_name: 'X-Api-Key', header_value: 'secret-value-123456' }, 'vault_credential.create');
  await expectOne(A, 'PUT', '/vault/credentials/{vaultCredentialId}', `/vault/credentials/${vc.id}`, { header_value: 'another-secret-987654' }, 'vault_credential.update', { targetId: vc.id });
  const leaked = await sql(`select 1 from audit_log where details::text like '%secret-value%' or details::text like '%another-secret%'`);
  assert.equal(leaked.length, 0, 'no vault value in the audit log');

  // ---- containers and their lifecycle operations (an external service needs no agent)
  const svc = await expectOne(A, 'POST', '/containers', '/containers', { service_slug: uniqueSlug('svc'), display_name: 'ext', service_type: 'external', external_url: 'https://127.0.0.1:9/', external_auth_credential_id: vc.id }, 'container.create');
  await expectOne(A, 'PUT', '/containers/{serviceId}', `/containers/${svc.id}`, { display_name: 'ext 2' }, 'container.update', { targetId: svc.id });
  for (const op of ['deploy', 'stop', 'start', 'undeploy'] as const) await expectOne(A, 'POST', `/containers/{serviceId}/${op}`, `/containers/${svc.id}/${op}`, undefined, `container.${op}`, { targetId: svc.id });
  await expectOne(A, 'DELETE', '/containers/{serviceId}', `/containers/${svc.id}`, undefined, 'container.delete', { targetId: svc.id });
  await expectOne(A, 'DELETE', '/vault/credentials/{vaultCredentialId}', `/vault/credentials/${vc.id}`, undefined, 'vault_credential.delete', { targetId: vc.id });

  // ---- cloud provider keys: the entry never carries the key (nor its prefix)
  await expectOne(A, 'PUT', '/cloud-providers/{provider_slug}', '/cloud-providers/comfy_cloud', { api_key: CLOUD_KEY, base_url: cloud.url }, 'cloud_provider.set', { targetId: 'comfy_cloud' });
  const keyRows = await sql(`select action, details::text as d from audit_log where details::text like ?`, [`%${CLOUD_KEY.slice(0, 8)}%`]);
  assert.deepEqual(keyRows, [], 'no cloud key in the audit log');
  await expectOne(A, 'DELETE', '/cloud-providers/{provider_slug}', '/cloud-providers/comfy_cloud', undefined, 'cloud_provider.delete', { targetId: 'comfy_cloud' });

  // ---- monthly GPU budgets
  const budget = await expectOne(A, 'PUT', '/usage/budgets', '/usage/budgets', { gpu_hours: 12 }, 'usage_budget.set');
  await expectOne(A, 'DELETE', '/usage/budgets', '/usage/budgets', undefined, 'usage_budget.delete', { targetId: budget.id });

  // ---- agents
  const agentId = randomUUID();
  await sql(`insert into agents (id, team_id, machine_id, display_name) values (?, ?, ?, 'box')`, [agentId, team, `m-${agentId}`]);
  await expectOne(A, 'DELETE', '/agents/{agentId}', `/agents/${agentId}`, undefined, 'agent.delete', { targetId: agentId });

  // ---- credentials
  const sk = await expectOne(U, 'POST', '/credentials', '/credentials', { credential_type: 'integration', display_name: 'ci' }, 'credential.create');
  await expectOne(U, 'PUT', '/credentials/{credentialId}/scheduling', `/credentials/${sk.id}/scheduling`, { scheduling_weight: 2, max_concurrent_tasks: 3 }, 'credential.scheduling_update', { targetId: sk.id });
  await expectOne(U, 'DELETE', '/credentials/{credentialId}', `/credentials/${sk.id}`, undefined, 'credential.revoke', { targetId: sk.id });
  await expectOne(D, 'POST', '/auth/device/revoke', '/auth/device/revoke', undefined, 'credential.revoke', { targetId: dk.id });

  // ---- teams, members, invitations, transfer
  const t2 = await expectOne({ ...U, team: undefined }, 'POST', '/teams', '/teams', { display_name: 'second' }, 'team.create', { teamId: 'new' });
  const T2 = t2.id as string;
  const created = await sql('select * from audit_log where action = ? and target_id = ?', ['team.create', T2]);
  assert.equal(created[0]!.team_id, T2, 'team.create belongs to the new team');
  await expectOne(userActor(owner, T2), 'PUT', '/teams/current', '/teams/current', { display_name: 'second, renamed' }, 'team.update', { targetId: T2 });
  const inv = await expectOne(userActor(owner, T2), 'POST', '/teams/current/invitations', '/teams/current/invitations', { email_address: member.email, member_role: 'admin' }, 'invitation.create');
  const tok = await emailToken(t.node, member.email, 'invitation');
  await expectOne({ token: member.accessToken, kind: 'user', userId: member.userId }, 'POST', '/invitations/accept', '/invitations/accept', { invitation_token: tok }, 'invitation.accept', { teamId: T2, targetId: inv.id });
  const inv2 = await t.http.post('/teams/current/invitations', { email_address: 'nobody@example.test', member_role: 'member' }, as(owner, T2));
  await expectOne(userActor(owner, T2), 'DELETE', '/teams/current/invitations/{invitationId}', `/teams/current/invitations/${inv2.body.id}`, undefined, 'invitation.revoke', { targetId: inv2.body.id });
  await expectOne(userActor(owner, T2), 'PUT', '/teams/current/members/{userId}', `/teams/current/members/${member.userId}`, { member_role: 'member' }, 'member.role_change', { targetId: member.userId });
  await addMember(t.http, t.node, owner, admin, 'admin', T2);
  await expectOne(userActor(owner, T2), 'DELETE', '/teams/current/members/{userId}', `/teams/current/members/${admin.userId}`, undefined, 'member.remove', { targetId: admin.userId });
  await expectOne(userActor(owner, T2), 'POST', '/teams/current/transfer', '/teams/current/transfer', { new_owner_id: member.userId }, 'team.transfer', { targetId: T2 });
  await expectOne(userActor(member, T2), 'DELETE', '/teams/current', '/teams/current', undefined, 'team.delete', { targetId: T2 });

  // ---- the route table: every management write route is covered above or listed as not audited
  const routes = t.node.routes().filter(isManagementWrite).map((r) => `${r.method} ${r.path}`);
  const missing = routes.filter((k) => !NOT_AUDITED[k] && !covered.has(k.replace('/api/v1', '')));
  assert.deepEqual(missing, [], 'management write routes without an audit case');
  // and the list cannot drift: every covered case is a real route
  for (const k of covered) assert.ok(routes.includes(k.replace(' /', ' /api/v1/')), `covered ${k} is a route`);
});

/** POST /desktop/pair/confirm through the pairing flow (the confirm is the audited write). */
async function expectOnePairing(U: Who): Promise<{ deviceCredential: string }> {
  const start = await t.http.post('/desktop/pair/start', { device_name: 'audit desktop' });
  assert.equal(start.status, 200);
  const conf = await expectOne(U, 'POST', '/desktop/pair/confirm', '/desktop/pair/confirm', { user_code: start.body.user_code }, 'device_pairing.confirm', { targetId: start.body.pairing_id });
  assert.deepEqual(conf, { is_success: true });
  const poll = await t.http.post('/desktop/pair/poll', { pairing_id: start.body.pairing_id, poll_secret: start.body.poll_secret });
  assert.equal(poll.body.pairing_status, 'confirmed');
  return { deviceCredential: poll.body.device_credential };
}

test('a refused or failed write appends nothing; a failed append takes the change down with it', async () => {
  const A = userActor(admin);
  const slug = uniqueSlug('dup');
  await expectOne(A, 'POST', '/workflows', '/workflows', comfyBody({ workflow_slug: slug }), 'workflow.create');
  // 409 (slug taken: the insert failed inside the transaction)
  const dup = await call(A, 'POST', '/workflows', comfyBody({ workflow_slug: slug }));
  assert.equal(dup.status, 409);
  assert.equal(dup.added, 0);
  // 400, 404, 403
  assert.equal((await call(A, 'POST', '/workflows', { workflow_slug: 'x' })).added, 0);
  const nf = await call(A, 'DELETE', `/webhooks/${randomUUID()}`);
  assert.equal(nf.status, 404);
  assert.equal(nf.added, 0);
  const forbidden = await call(userActor(member), 'POST', '/webhooks', { display_name: 'h', webhook_url: 'https://127.0.0.1:9/x', webhook_events: ['task.failed'] });
  assert.equal(forbidden.status, 403);
  assert.equal(forbidden.added, 0);
  // 409 invalid_state from the container actor: nothing recorded
  const svc = await t.http.post('/containers', { service_slug: uniqueSlug('st'), display_name: 'x', service_type: 'external', external_url: 'https://127.0.0.1:9/' }, as(admin));
  assert.equal(svc.status, 200, svc.text);
  const bad = await call(A, 'POST', `/containers/${svc.body.id}/stop`);
  assert.equal(bad.status, 409);
  assert.equal(bad.added, 0);

  // same transaction: when the entry cannot be appended, the change is rolled back
  const hook = await t.http.post('/webhooks', { display_name: 'keep', webhook_url: 'https://127.0.0.1:9/keep', webhook_events: ['task.failed'] }, as(admin));
  assert.equal(hook.status, 200);
  await sql(`alter table audit_log add constraint audit_test_refuse check (action <> 'webhook.delete') not valid`);
  try {
    const del = await call(A, 'DELETE', `/webhooks/${hook.body.id}`);
    assert.equal(del.status, 500, del.text);
    assert.equal(del.added, 0);
    assert.equal((await t.http.get(`/webhooks/${hook.body.id}`, as(admin))).status, 200, 'the webhook is still there');
  } finally {
    await sql('alter table audit_log drop constraint audit_test_refuse');
  }
});

test('GET /audit-log: admins and the owner of the team only, filters and pagination; other teams see nothing', async () => {
  const wf = await t.http.post('/workflows', comfyBody({ workflow_slug: uniqueSlug('read') }), as(admin));
  assert.equal(wf.status, 200);
  await t.http.put(`/workflows/${wf.body.id}`, { display_name: 'r2' }, as(owner));

  const all = await t.http.get('/audit-log?per_page=5', as(owner));
  assert.equal(all.status, 200, all.text);
  assert.equal(all.body.audit_list.length, 5);
  assert.ok(all.body.page_meta.total_count > 5);
  assert.deepEqual(Object.keys(all.body.page_meta).sort(), ['current_page', 'per_page', 'total_count']);
  const times = all.body.audit_list.map((e: any) => Date.parse(e.created_at));
  assert.deepEqual(times, [...times].sort((a: number, b: number) => b - a), 'newest first');
  assert.ok(all.body.audit_list.every((e: any) => e.team_id === team));
  const page2 = await t.http.get('/audit-log?per_page=5&current_page=2', as(owner));
  assert.equal(page2.body.audit_list.length, 5);
  assert.notEqual(page2.body.audit_list[0].id, all.body.audit_list[0].id);

  // filters: action, action prefix, actor, target, time window
  const upd = await t.http.get(`/audit-log?action=workflow.update&target_id=${wf.body.id}`, as(admin));
  assert.equal(upd.status, 200);
  assert.equal(upd.body.audit_list.length, 1);
  assert.equal(upd.body.audit_list[0].actor_user_id, owner.userId);
  const prefix = await t.http.get('/audit-log?action=workflow.&per_page=100', as(admin));
  assert.ok(prefix.body.audit_list.length >= 2 && prefix.body.audit_list.every((e: any) => e.action.startsWith('workflow.')));
  const byActor = await t.http.get(`/audit-log?actor=${admin.userId}&per_page=100`, as(admin));
  assert.ok(byActor.body.audit_list.length > 0 && byActor.body.audit_list.every((e: any) => e.actor_user_id === admin.userId));
  const future = await t.http.get(`/audit-log?since=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`, as(admin));
  assert.equal(future.body.audit_list.length, 0);
  const past = await t.http.get(`/audit-log?until=${encodeURIComponent(new Date(Date.now() - 3_600_000).toISOString())}`, as(admin));
  assert.equal(past.body.page_meta.total_count, 0);
  assert.equal((await t.http.get('/audit-log?since=yesterday', as(admin))).status, 400);
  assert.equal((await t.http.get('/audit-log?actor=nobody', as(admin))).status, 400);
  assert.equal((await t.http.get('/audit-log?bogus=1', as(admin))).status, 400);

  // a member of the team may not read it; a stranger is not a member; sk- is refused
  assert.equal((await t.http.get('/audit-log', as(member))).status, 403);
  assert.equal((await t.http.get('/audit-log', as(stranger))).status, 403);
  const sk = await t.http.post('/credentials', { credential_type: 'integration', display_name: 'reader' }, as(owner));
  assert.equal((await t.http.get('/audit-log', { token: sk.body.credential_value })).status, 403);
  // the stranger's own team: its own entries only, none of this team's
  await t.http.post('/workflows', comfyBody({ workflow_slug: uniqueSlug('other') }), as(stranger, stranger.teamId));
  const own = await t.http.get('/audit-log?per_page=100', as(stranger, stranger.teamId));
  assert.equal(own.status, 200);
  assert.ok(own.body.audit_list.length >= 1);
  assert.ok(own.body.audit_list.every((e: any) => e.team_id === stranger.teamId));
});

test('retention: entries older than GANTRY_AUDIT_RETENTION_DAYS are swept, newer ones stay', async () => {
  const old = randomUUID();
  const recent = randomUUID();
  const days = t.node.config.GANTRY_AUDIT_RETENTION_DAYS;
  await sql(`insert into audit_log (id, team_id, actor_kind, action, target_type, created_at) values (?, ?, 'system', 'test.old', 'test', now() - make_interval(days => ?))`, [old, team, days + 1]);
  await sql(`insert into audit_log (id, team_id, actor_kind, action, target_type, created_at) values (?, ?, 'system', 'test.recent', 'test', now() - make_interval(days => ?))`, [recent, team, days - 1]);
  const n = await t.node.auditRetention.sweepOnce();
  assert.ok(n >= 1);
  assert.equal((await sql('select 1 from audit_log where id = ?', [old])).length, 0);
  assert.equal((await sql('select 1 from audit_log where id = ?', [recent])).length, 1);
});
