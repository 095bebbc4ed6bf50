import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, addMember, pairDevice } from '../helpers/identity.js';

let t: TestNode;
before(async () => {
  t = await startTestNode({ GANTRY_PAIRING_POLL_INTERVAL_S: 1, GANTRY_AUTH_RATE_LIMIT_PER_MIN: 10_000 }, 'idpair');
});
after(async () => {
  await t.stop();
});

const poll = (p: { pairing_id: string; poll_secret: string }) => t.http.post('/desktop/pair/poll', { pairing_id: p.pairing_id, poll_secret: p.poll_secret });

test('pairing end to end: pending, slow_down, confirm once, credentials exactly once, dk- works, device revoke kills dk- and ak-', async () => {
  const u = await registerUser(t.http);
  const start = await t.http.post('/desktop/pair/start', { device_name: 'Studio workstation' });
  assert.equal(start.status, 200, start.text);
  assert.deepEqual(Object.keys(start.body).sort(), ['expires_in', 'pairing_id', 'poll_interval', 'poll_secret', 'user_code']);
  assert.match(start.body.user_code, /^[A-HJ-NP-Z2-9]{4}-[A-HJ-NP-Z2-9]{4}$/);
  assert.equal(start.body.expires_in, 600);
  assert.equal(start.body.poll_interval, 1);

  const p1 = await poll(start.body);
  assert.deepEqual([p1.status, p1.body], [200, { pairing_status: 'pending' }]);
  const fast = await poll(start.body);
  assert.equal(fast.status, 429);
  assert.equal(fast.body.error_code, 'slow_down');
  assert.ok(Number(fast.headers.get('retry-after')) >= 1);
  const wrongSecret = await t.http.post('/desktop/pair/poll', { pairing_id: start.body.pairing_id, poll_secret: 'x'.repeat(43) });
  assert.equal(wrongSecret.status, 404);

  // confirm: JWT + X-Team-ID; the code is accepted in any case and without the hyphen; single use
  const sloppy = (start.body.user_code as string).replace('-', '').toLowerCase();
  const c = await t.http.post('/desktop/pair/confirm', { user_code: sloppy }, { token: u.accessToken, team: u.teamId });
  assert.deepEqual([c.status, c.body], [200, { is_success: true }]);
  const c2 = await t.http.post('/desktop/pair/confirm', { user_code: start.body.user_code }, { token: u.accessToken, team: u.teamId });
  assert.equal(c2.status, 404);
  assert.equal((await t.http.post('/desktop/pair/confirm', { user_code: start.body.user_code }, { token: u.accessToken })).status, 400, 'X-Team-ID required');

  await sleep(1050);
  const got = await poll(start.body);
  assert.equal(got.status, 200, got.text);
  assert.equal(got.body.pairing_status, 'confirmed');
  assert.equal(got.body.team_id, u.teamId);
  assert.match(got.body.device_credential, /^dk-/);
  assert.match(got.body.agent_credential, /^ak-/);
  const dk = got.body.device_credential as string;
  const ak = got.body.agent_credential as string;
  await sleep(1050);
  const again = await poll(start.body);
  assert.deepEqual([again.status, again.body], [200, { pairing_status: 'expired' }], 'credentials are delivered once');

  // dk- behaves as the user's JWT with the team from the credential (X-Team-ID ignored)
  const rt = await t.http.get('/_debug/r/whoami', { token: dk, team: '00000000-0000-7000-8000-000000000000' });
  assert.equal(rt.status, 200);
  assert.equal(rt.body.kind, 'device');
  assert.equal(rt.body.user_id, u.userId);
  assert.equal(rt.body.team_id, u.teamId);
  assert.equal(rt.body.member_role, 'owner');
  const mgmt = await t.http.get('/teams/current', { token: dk });
  assert.equal(mgmt.status, 200);
  assert.equal(mgmt.body.id, u.teamId);
  assert.equal((await t.http.get('/teams/current/members', { token: dk })).status, 200);
  assert.equal((await t.http.get('/users/me', { token: dk })).body.id, u.userId);
  // a dk- behaves as the JWT (the contract): the credentials endpoints too; the JWT-only ones refuse it
  const creds = await t.http.get('/credentials', { token: dk });
  assert.equal(creds.status, 200, creds.text);
  assert.ok(Array.isArray(creds.body.credential_list) && creds.body.page_meta);
  const confirmByDevice = await t.http.post('/desktop/pair/confirm', { user_code: 'ABCD-2345' }, { token: dk });
  assert.equal(confirmByDevice.status, 403, 'J-only endpoints refuse dk-');
  assert.equal(confirmByDevice.body.error_code, 'device_credential_not_allowed');
  // the ak- is for the agent stream only
  assert.equal((await t.http.get('/_debug/r/whoami', { token: ak })).status, 401);
  const agent = await t.node.identity.verifyAgentCredential(ak);
  assert.equal(agent.teamId, u.teamId);
  assert.equal(agent.linkedTo, start.body.pairing_id);
  // both are listed for the team, with the device name
  const list = await t.http.get('/credentials', { token: u.accessToken, team: u.teamId });
  assert.deepEqual(list.body.credential_list.map((x: any) => `${x.credential_type}:${x.display_name}`).sort(), ['agent:Studio workstation', 'device:Studio workstation']);

  // device revoke: the calling dk- and its linked ak- are dead on the next use
  const revoked: string[][] = [];
  t.node.identity.onCredentialsRevoked((ids) => revoked.push(ids));
  assert.equal((await t.http.post('/auth/device/revoke', undefined, { token: u.accessToken })).status, 403, 'JWT cannot call device revoke');
  const rv = await t.http.post('/auth/device/revoke', undefined, { token: dk });
  assert.deepEqual([rv.status, rv.body], [200, { is_success: true }]);
  assert.equal(revoked[0]?.length, 2);
  const dead = await t.http.get('/_debug/r/whoami', { token: dk });
  assert.equal(dead.status, 401);
  assert.equal(dead.body.error_code, 'credential_revoked');
  await assert.rejects(t.node.identity.verifyAgentCredential(ak), (e: any) => e.code === 'credential_revoked');
});

test('a pairing that asks for no agent credential (the CLI: agent_credential false) gets only its dk-; nothing else is listed', async () => {
  const u = await registerUser(t.http);
  const bad = await t.http.post('/desktop/pair/start', { device_name: 'laptop', agent_credential: 'no' });
  assert.equal(bad.status, 400, bad.text);
  const start = await t.http.post('/desktop/pair/start', { device_name: 'gantry CLI on laptop', agent_credential: false });
  assert.equal(start.status, 200, start.text);
  assert.equal((await t.http.post('/desktop/pair/confirm', { user_code: start.body.user_code }, { token: u.accessToken, team: u.teamId })).status, 200);
  const got = await poll(start.body);
  assert.equal(got.status, 200, got.text);
  assert.equal(got.body.pairing_status, 'confirmed');
  assert.match(got.body.device_credential, /^dk-/);
  assert.equal(got.body.agent_credential, undefined, 'no ak- minted');
  const list = await t.http.get('/credentials', { token: u.accessToken, team: u.teamId });
  assert.deepEqual(list.body.credential_list.map((x: any) => `${x.credential_type}:${x.display_name}`), ['device:gantry CLI on laptop']);
});

test('pairing codes expire after 10 minutes', async () => {
  const u = await registerUser(t.http);
  const start = await t.http.post('/desktop/pair/start', { device_name: 'laptop' });
  await t.node.db.execute(`update device_pairings set expires_at = now() - interval '1 second' where id = ?`, [start.body.pairing_id]);
  const c = await t.http.post('/desktop/pair/confirm', { user_code: start.body.user_code }, { token: u.accessToken, team: u.teamId });
  assert.equal(c.status, 410);
  assert.equal(c.body.error_code, 'pairing_expired');
  assert.deepEqual((await poll(start.body)).body, { pairing_status: 'expired' });
  const bad = await t.http.post('/desktop/pair/confirm', { user_code: 'O0O0-I1I1' }, { token: u.accessToken, team: u.teamId });
  assert.equal(bad.status, 400);
});

test("a dk- follows its user's current role; after leaving the team it gets 403", async () => {
  const owner = await registerUser(t.http);
  const m = await registerUser(t.http);
  await addMember(t.http, t.node, owner, m, 'member');
  const d = await pairDevice(t.http, m, { teamId: owner.teamId });
  assert.equal(d.teamId, owner.teamId);
  assert.equal((await t.http.get('/teams/current', { token: d.deviceCredential })).status, 200);
  const admin = await t.http.get('/teams/current/invitations', { token: d.deviceCredential });
  assert.equal(admin.status, 403);
  assert.equal(admin.body.error_code, 'insufficient_role');
  assert.equal((await t.http.put(`/teams/current/members/${m.userId}`, { member_role: 'admin' }, { token: owner.accessToken, team: owner.teamId })).status, 200);
  assert.equal((await t.http.get('/teams/current/invitations', { token: d.deviceCredential })).status, 200);
  assert.equal((await t.http.del(`/teams/current/members/${m.userId}`, { token: owner.accessToken, team: owner.teamId })).status, 200);
  const gone = await t.http.get('/teams/current', { token: d.deviceCredential });
  assert.equal(gone.status, 403);
  assert.equal(gone.body.error_code, 'not_a_member');
});
