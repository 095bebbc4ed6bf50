import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, createCredential, addMember, emailToken, readOutbox, login } from '../helpers/identity.js';

let t: TestNode;
before(async () => {
  t = await startTestNode({ GANTRY_AUTH_RATE_LIMIT_PER_MIN: 10_000 }, 'idflows');
});
after(async () => {
  await t.stop();
});

const as = (u: { accessToken: string; teamId: string }, team = u.teamId) => ({ token: u.accessToken, team });

test('register: personal team owned by the caller, display_name defaults to first + last name', async () => {
  const r = await t.http.post('/auth/register', { email_address: 'Ada.Lovelace@Example.test', password: 'correct horse battery', first_name: 'Ada', last_name: 'Lovelace' });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(Object.keys(r.body), ['id']);
  const tok = await login(t.http, 'ada.lovelace@example.test', 'correct horse battery');
  const me = await t.http.get('/users/me', { token: tok.accessToken });
  assert.equal(me.status, 200);
  assert.deepEqual(Object.keys(me.body).sort(), ['display_name', 'email_address', 'feature_flags', 'first_name', 'id', 'last_name', 'team_list']);
  assert.equal(me.body.id, r.body.id);
  assert.equal(me.body.display_name, 'Ada Lovelace');
  assert.equal(me.body.email_address, 'Ada.Lovelace@Example.test');
  assert.equal(me.body.team_list.length, 1);
  assert.deepEqual(Object.keys(me.body.team_list[0]).sort(), ['display_name', 'id']);
  const ff = me.body.feature_flags;
  assert.deepEqual(Object.keys(ff).sort(), ['account', 'global', 'teams']);
  assert.deepEqual(Object.keys(ff.global.features).sort(), ['auto_team', 'email', 'mcp_server', 'notifications', 'oauth', 'oidc_provider', 'registration']);
  for (const v of Object.values(ff.global.features)) assert.equal(typeof v, 'boolean');
  assert.deepEqual(Object.keys(ff.global.quotas).sort(), ['max_agents', 'max_concurrent_tasks', 'max_teams', 'max_users']);
  for (const v of Object.values(ff.global.quotas)) assert.equal(typeof v, 'number');
  assert.deepEqual(ff.account.features, { manual_team_creation: true, team_invitation_accept: true });
  assert.deepEqual(ff.account.quotas, { max_owned_teams: 0 });
  const teamId = me.body.team_list[0].id;
  assert.equal(ff.teams[teamId].member_role, 'owner');
  const cur = await t.http.get('/teams/current', { token: tok.accessToken, team: teamId });
  assert.equal(cur.status, 200);
  assert.equal(cur.body.owner_id, r.body.id);
  assert.equal(cur.body.member_role, 'owner');
  assert.equal(cur.body.is_personal, true);
  // a taken email (any case) is a 409
  const dup = await t.http.post('/auth/register', { email_address: 'ADA.LOVELACE@example.test', password: 'another password', first_name: 'A', last_name: 'L' });
  assert.equal(dup.status, 409);
  assert.equal(dup.body.error_code, 'email_taken');
  // verification email is in the outbox
  assert.equal((await readOutbox(t.node, 'ada.lovelace@example.test', 'email_verification')).length, 1);
});

test('validation: 400 naming the field; wrong password 401', async () => {
  const short = await t.http.post('/auth/register', { email_address: 'x@example.test', password: 'short', first_name: 'A', last_name: 'B' });
  assert.equal(short.status, 400);
  assert.equal(short.body.error_code, 'invalid_parameter');
  assert.match(short.body.error_message, /^password:/);
  const unknown = await t.http.post('/auth/register', { email_address: 'x@example.test', password: 'long enough pw', first_name: 'A', last_name: 'B', is_admin: true });
  assert.equal(unknown.status, 400);
  assert.match(unknown.body.error_message, /is_admin/);
  const badEmail = await t.http.post('/auth/register', { email_address: 'nope', password: 'long enough pw', first_name: 'A', last_name: 'B' });
  assert.match(badEmail.body.error_message, /^email_address:/);
  const u = await registerUser(t.http);
  const bad = await t.http.post('/auth/login', { email_address: u.email, password: 'wrong password!' });
  assert.equal(bad.status, 401);
  assert.equal(bad.body.error_code, 'invalid_login');
  const nobody = await t.http.post('/auth/login', { email_address: 'nobody@example.test', password: 'wrong password!' });
  assert.equal(nobody.status, 401);
  assert.equal(nobody.body.error_code, 'invalid_login');
});

test('login shape; refresh rotates; reusing a rotated refresh token revokes the whole family', async () => {
  const u = await registerUser(t.http);
  const l = await t.http.post('/auth/login', { email_address: u.email, password: u.password });
  assert.deepEqual(Object.keys(l.body).sort(), ['access_token', 'expires_in', 'refresh_token', 'token_type']);
  assert.equal(l.body.token_type, 'Bearer');
  assert.equal(l.body.expires_in, 900);
  const r1 = l.body.refresh_token;
  const a = await t.http.post('/auth/refresh', { refresh_token: r1 });
  assert.equal(a.status, 200, a.text);
  assert.notEqual(a.body.refresh_token, r1);
  assert.equal((await t.http.get('/users/me', { token: a.body.access_token })).status, 200);
  const b = await t.http.post('/auth/refresh', { refresh_token: a.body.refresh_token });
  assert.equal(b.status, 200);
  // reuse of r1 (already rotated): 401, and the family is revoked
  const reuse = await t.http.post('/auth/refresh', { refresh_token: r1 });
  assert.equal(reuse.status, 401);
  assert.equal(reuse.body.error_code, 'refresh_token_reused');
  const latest = await t.http.post('/auth/refresh', { refresh_token: b.body.refresh_token });
  assert.equal(latest.status, 401);
  assert.equal(latest.body.error_code, 'refresh_token_revoked');
  // another session (family) of the same user is untouched
  assert.equal((await t.http.post('/auth/refresh', { refresh_token: u.refreshToken })).status, 200);
  assert.equal((await t.http.post('/auth/refresh', { refresh_token: 'garbage' })).status, 401);
});

test('logout revokes the session family', async () => {
  const u = await registerUser(t.http);
  const out = await t.http.post('/auth/logout', { refresh_token: u.refreshToken }, { token: u.accessToken });
  assert.equal(out.status, 200);
  assert.deepEqual(out.body, { is_success: true });
  const r = await t.http.post('/auth/refresh', { refresh_token: u.refreshToken });
  assert.equal(r.status, 401);
});

test('password forgot/reset: no enumeration, single-use token, old sessions end', async () => {
  const u = await registerUser(t.http);
  const none = await t.http.post('/auth/password/forgot', { email_address: 'nobody-here@example.test' });
  assert.deepEqual([none.status, none.body], [200, { is_success: true }]);
  assert.equal((await readOutbox(t.node, 'nobody-here@example.test')).length, 0);
  const f = await t.http.post('/auth/password/forgot', { email_address: u.email.toUpperCase() });
  assert.deepEqual([f.status, f.body], [200, { is_success: true }]);
  const token = await emailToken(t.node, u.email, 'password_reset');
  const weak = await t.http.post('/auth/password/reset', { reset_token: token, new_password: 'short' });
  assert.equal(weak.status, 400);
  assert.match(weak.body.error_message, /^new_password:/);
  const ok = await t.http.post('/auth/password/reset', { reset_token: token, new_password: 'a brand new password' });
  assert.equal(ok.status, 200, ok.text);
  const again = await t.http.post('/auth/password/reset', { reset_token: token, new_password: 'yet another password' });
  assert.equal(again.status, 400);
  assert.equal(again.body.error_code, 'reset_token_invalid');
  assert.equal((await t.http.post('/auth/login', { email_address: u.email, password: u.password })).status, 401);
  assert.equal((await t.http.post('/auth/login', { email_address: u.email, password: 'a brand new password' })).status, 200);
  // the sessions from before the reset are over: access token and refresh token
  const old = await t.http.get('/users/me', { token: u.accessToken });
  assert.equal(old.status, 401);
  assert.equal(old.body.error_code, 'credential_revoked');
  assert.equal((await t.http.post('/auth/refresh', { refresh_token: u.refreshToken })).status, 401);
});

test('email verification token works once', async () => {
  const u = await registerUser(t.http);
  const token = await emailToken(t.node, u.email, 'email_verification');
  assert.equal((await t.http.post('/auth/email/verify', { verification_token: token })).status, 200);
  const again = await t.http.post('/auth/email/verify', { verification_token: token });
  assert.equal(again.status, 400);
  assert.equal(again.body.error_code, 'verification_token_invalid');
  const rows = await t.node.db.execute<{ email_verified_at: unknown }>('select email_verified_at from users where id = ?', [u.userId]);
  assert.ok(rows[0]?.email_verified_at);
});

test('credentials: value shown once, list never shows it, revoked sk- is 401 on the very next request', async () => {
  const u = await registerUser(t.http);
  const c = await t.http.post('/credentials', { credential_type: 'integration', display_name: 'CI pipeline', expires_in_days: 30 }, as(u));
  assert.equal(c.status, 200, c.text);
  assert.deepEqual(Object.keys(c.body).sort(), ['credential_prefix', 'credential_value', 'id']);
  assert.match(c.body.credential_value, /^sk-[0-9A-Za-z]{49}$/);
  assert.ok(c.body.credential_value.startsWith(c.body.credential_prefix));
  const sk = c.body.credential_value as string;
  // only the prefix and a hash are stored
  const stored = await t.node.db.execute<Record<string, unknown>>('select * from credentials where id = ?', [c.body.id]);
  assert.ok(!JSON.stringify(stored).includes(sk));
  const who = await t.http.get('/_debug/r/whoami', { token: sk });
  assert.equal(who.status, 200);
  assert.deepEqual(who.body, { kind: 'integration', user_id: null, team_id: u.teamId, member_role: null, credential_id: c.body.id });
  const list = await t.http.get('/credentials', as(u));
  assert.equal(list.status, 200);
  assert.equal(list.body.page_meta.total_count, 1);
  const item = list.body.credential_list[0];
  assert.deepEqual(Object.keys(item).sort(), ['created_at', 'creator_id', 'creator_name', 'credential_prefix', 'credential_type', 'display_name', 'expires_at', 'id', 'last_used_at']);
  assert.equal(item.display_name, 'CI pipeline');
  assert.equal(item.creator_id, u.userId);
  assert.ok(item.expires_at);
  assert.ok(item.last_used_at, 'last use shows (from memory before the flush)');
  assert.ok(!list.text.includes(sk));
  // last_used_at is batched: nothing written per request, the flush writes it
  const before = await t.node.db.execute<{ last_used_at: unknown }>('select last_used_at from credentials where id = ?', [c.body.id]);
  assert.equal(before[0]?.last_used_at, null);
  await t.node.identity.lastUsed.flush();
  const afterFlush = await t.node.db.execute<{ last_used_at: unknown }>('select last_used_at from credentials where id = ?', [c.body.id]);
  assert.ok(afterFlush[0]?.last_used_at);
  // sk- is refused on management endpoints
  const mgmt = await t.http.get('/teams/current', { token: sk });
  assert.equal(mgmt.status, 403);
  assert.equal(mgmt.body.error_code, 'integration_credential_not_allowed');
  // revoke: the very next request is 401
  assert.deepEqual((await t.http.del(`/credentials/${c.body.id}`, as(u))).body, { is_success: true });
  const next = await t.http.get('/_debug/r/whoami', { token: sk });
  assert.equal(next.status, 401);
  assert.equal(next.body.error_code, 'credential_revoked');
  assert.equal((await t.http.get('/credentials', as(u))).body.page_meta.total_count, 0);
  // expiry bounds
  for (const d of [0, 366, 1.5]) {
    const bad = await t.http.post('/credentials', { credential_type: 'integration', display_name: 'x', expires_in_days: d }, as(u));
    assert.equal(bad.status, 400, String(d));
    assert.match(bad.body.error_message, /^expires_in_days:/);
  }
  const dev = await t.http.post('/credentials', { credential_type: 'device', display_name: 'x' }, as(u));
  assert.equal(dev.status, 400, 'device credentials come from pairing only');
});

test('expired sk- is 401 credential_expired; ak- is 401 on REST', async () => {
  const u = await registerUser(t.http);
  const c = await createCredential(t.http, u, 'integration', { expiresInDays: 1 });
  assert.equal((await t.http.get('/_debug/r/whoami', { token: c.value })).status, 200);
  await t.node.db.execute(`update credentials set expires_at = now() - interval '1 second' where id = ?`, [c.id]);
  // a change made in SQL behind the identity service's back must be announced to the (warm) cache
  await t.node.identity.invalidation.publish({ type: 'credential', ids: [c.id] });
  const r = await t.http.get('/_debug/r/whoami', { token: c.value });
  assert.equal(r.status, 401);
  assert.equal(r.body.error_code, 'credential_expired');
  const ak = await createCredential(t.http, u, 'agent');
  assert.match(ak.value, /^ak-/);
  const a = await t.http.get('/_debug/r/whoami', { token: ak.value });
  assert.equal(a.status, 401);
  const agent = await t.node.identity.verifyAgentCredential(ak.value);
  assert.equal(agent.teamId, u.teamId);
  assert.equal(agent.credentialId, ak.id);
  await assert.rejects(t.node.identity.verifyAgentCredential(c.value), (e: any) => e.code === 'credential_invalid');
});

test('cross-team: team A resources requested with team B credentials are 404', async () => {
  const a = await registerUser(t.http);
  const b = await registerUser(t.http);
  const credA = await createCredential(t.http, a, 'integration');
  const inv = await t.http.post('/teams/current/invitations', { email_address: 'someone@example.test', member_role: 'member' }, as(a));
  assert.equal(inv.status, 200);
  const del = await t.http.del(`/credentials/${credA.id}`, as(b));
  assert.equal(del.status, 404);
  assert.equal(del.body.error_code, 'credential_not_found');
  assert.equal((await t.http.del(`/teams/current/invitations/${inv.body.id}`, as(b))).status, 404);
  assert.equal((await t.http.put(`/teams/current/members/${a.userId}`, { member_role: 'member' }, as(b))).status, 404);
  assert.equal((await t.http.del(`/teams/current/members/${a.userId}`, as(b))).status, 404);
  assert.equal((await t.http.post('/teams/current/transfer', { new_owner_id: a.userId }, as(b))).status, 404);
  // B's lists never show A's things
  assert.equal((await t.http.get('/credentials', as(b))).body.page_meta.total_count, 0);
  assert.equal((await t.http.get('/teams/current/invitations', as(b))).body.page_meta.total_count, 0);
  // and B cannot even address team A
  const foreign = await t.http.get('/teams/current', as(b, a.teamId));
  assert.equal(foreign.status, 403);
  assert.equal(foreign.body.error_code, 'not_a_member');
  // A's credential still works (nothing above touched it)
  assert.equal((await t.http.get('/_debug/r/whoami', { token: credA.value })).status, 200);
});

test('teams, invitations, roles and ownership transfer', async () => {
  const owner = await registerUser(t.http);
  const admin = await registerUser(t.http);
  const member = await registerUser(t.http);
  const stranger = await registerUser(t.http);
  // a second team; the user is in several teams
  const team = await t.http.post('/teams', { display_name: 'Render farm' }, { token: owner.accessToken });
  assert.equal(team.status, 200);
  const T = team.body.id as string;
  const teams = await t.http.get('/teams', { token: owner.accessToken });
  assert.equal(teams.body.page_meta.total_count, 2);
  assert.deepEqual(teams.body.team_list.map((x: any) => x.member_role), ['owner', 'owner']);

  // invitations: sent to an address, accepted by that address only
  const inv = await t.http.post('/teams/current/invitations', { email_address: member.email, member_role: 'member' }, as(owner, T));
  assert.equal(inv.status, 200);
  const tok = await emailToken(t.node, member.email, 'invitation');
  const wrong = await t.http.post('/invitations/accept', { invitation_token: tok }, { token: stranger.accessToken });
  assert.equal(wrong.status, 403);
  assert.equal(wrong.body.error_code, 'invitation_email_mismatch');
  assert.equal((await t.http.post('/invitations/accept', { invitation_token: tok }, { token: member.accessToken })).status, 200);
  assert.equal((await t.http.post('/invitations/accept', { invitation_token: tok }, { token: member.accessToken })).status, 404);
  await addMember(t.http, t.node, { accessToken: owner.accessToken, teamId: T }, admin, 'admin');
  const invs = await t.http.get('/teams/current/invitations', as(owner, T));
  assert.deepEqual(invs.body.invitation_list.map((i: any) => i.invitation_status), ['accepted', 'accepted']);
  const dupInvite = await t.http.post('/teams/current/invitations', { email_address: member.email }, as(owner, T));
  assert.equal(dupInvite.status, 409);

  const members = await t.http.get('/teams/current/members', as(member, T));
  assert.equal(members.status, 200);
  assert.equal(members.body.page_meta.total_count, 3);
  const roleOf = async (uid: string) => (await t.http.get('/teams/current/members', as(owner, T))).body.member_list?.find((m: any) => m.user_id === uid)?.member_role;
  assert.equal(await roleOf(member.userId), 'member');
  assert.equal(await roleOf(admin.userId), 'admin');
  const meMember = await t.http.get('/users/me', { token: member.accessToken });
  assert.equal(meMember.body.team_list.length, 2);
  assert.equal(meMember.body.feature_flags.teams[T].member_role, 'member');

  // role rules: members cannot manage; admins manage members but not the owner
  const rename = await t.http.put('/teams/current', { display_name: 'X' }, as(member, T));
  assert.equal(rename.status, 403);
  assert.equal(rename.body.error_code, 'insufficient_role');
  assert.equal((await t.http.put('/teams/current', { display_name: 'Render farm 2' }, as(admin, T))).status, 200);
  assert.equal((await t.http.put(`/teams/current/members/${owner.userId}`, { member_role: 'member' }, as(admin, T))).status, 403);
  assert.equal((await t.http.put(`/teams/current/members/${member.userId}`, { member_role: 'owner' }, as(owner, T))).status, 400);
  assert.equal((await t.http.del(`/teams/current/members/${admin.userId}`, as(member, T))).status, 403);

  // transfer: only the owner; the new owner must be a member
  for (const who of [member, admin]) {
    const r = await t.http.post('/teams/current/transfer', { new_owner_id: member.userId }, as(who, T));
    assert.equal(r.status, 403, 'non-owner transfer');
  }
  assert.equal((await t.http.post('/teams/current/transfer', { new_owner_id: stranger.userId }, as(owner, T))).status, 404);
  const tr = await t.http.post('/teams/current/transfer', { new_owner_id: member.userId }, as(owner, T));
  assert.equal(tr.status, 200, tr.text);
  assert.deepEqual(tr.body, { is_success: true });
  assert.equal(await roleOf(member.userId), 'owner');
  assert.equal(await roleOf(owner.userId), 'admin');
  assert.equal(await roleOf(admin.userId), 'admin');
  assert.equal((await t.http.get('/teams/current', as(member, T))).body.owner_id, member.userId);
  // the previous owner is an admin now: no more transfer, no delete
  assert.equal((await t.http.post('/teams/current/transfer', { new_owner_id: owner.userId }, as(owner, T))).status, 403);
  assert.equal((await t.http.del('/teams/current', as(owner, T))).status, 403);

  // leaving: any non-owner may leave; the owner may not
  const ownerLeaves = await t.http.del(`/teams/current/members/${member.userId}`, as(member, T));
  assert.equal(ownerLeaves.status, 409);
  assert.equal((await t.http.del(`/teams/current/members/${admin.userId}`, as(admin, T))).status, 200);
  assert.equal((await t.http.get('/teams/current', as(admin, T))).status, 403);

  // deleting the team: owner only; then its credentials stop working
  const sk = await createCredential(t.http, { accessToken: member.accessToken, teamId: T }, 'integration');
  assert.equal((await t.http.del('/teams/current', as(member, T))).status, 200);
  assert.equal((await t.http.get('/teams/current', as(member, T))).status, 403);
  assert.equal((await t.http.get('/_debug/r/whoami', { token: sk.value })).status, 401);
  assert.equal((await t.http.get('/teams', { token: owner.accessToken })).body.page_meta.total_count, 1);
});

test('members may create integration credentials and revoke their own, not agents or others', async () => {
  const owner = await registerUser(t.http);
  const m = await registerUser(t.http);
  await addMember(t.http, t.node, owner, m, 'member');
  const agent = await t.http.post('/credentials', { credential_type: 'agent', display_name: 'gpu box' }, as(m, owner.teamId));
  assert.equal(agent.status, 403);
  const mine = await createCredential(t.http, m, 'integration', { teamId: owner.teamId });
  const theirs = await createCredential(t.http, owner, 'integration');
  assert.equal((await t.http.del(`/credentials/${theirs.id}`, as(m, owner.teamId))).status, 403);
  assert.equal((await t.http.del(`/credentials/${mine.id}`, as(m, owner.teamId))).status, 200);
  assert.equal((await t.http.del(`/credentials/${randomUUID()}`, as(owner))).status, 404);
  assert.equal((await t.http.del('/credentials/not-a-uuid', as(owner))).status, 400);
});
