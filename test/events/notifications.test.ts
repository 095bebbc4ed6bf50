import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, addMember, createCredential, type TestUser } from '../helpers/identity.js';
import { FakeAgent } from '../helpers/fake-agent.js';
import { waitForStatus } from '../helpers/tasks.js';
import { FakeClock } from '../../src/shared/clock.js';
import { submitAs } from './helpers.js';

let t: TestNode;
let clock: FakeClock;
let owner: TestUser;
let admin: TestUser;
let member: TestUser;

before(async () => {
  clock = new FakeClock(Date.now());
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 5 }, 'notify', { clock });
  owner = await registerUser(t.http);
  admin = await registerUser(t.http);
  member = await registerUser(t.http);
  await addMember(t.http, t.node, owner, admin, 'admin');
  await addMember(t.http, t.node, owner, member, 'member');
});
after(async () => {
  await t.stop();
});

const as = (u: TestUser) => ({ token: u.accessToken, team: owner.teamId });
const list = async (u: TestUser, q = '') => {
  const r = await t.http.get(`/notifications${q}`, as(u));
  assert.equal(r.status, 200, r.text);
  return r.body;
};

async function run(userId: string | null, outcome: 'completed' | 'failed'): Promise<string> {
  const agent = await new FakeAgent(t.node, { teamId: owner.teamId }).connect();
  const id = await submitAs(t.node, owner.teamId, userId);
  const a = await agent.assignment(id);
  agent.ack(a);
  await waitForStatus(t.node, id, 'running');
  if (outcome === 'completed') agent.finish(a);
  else agent.fail(a, 'tool error');
  await waitForStatus(t.node, id, outcome);
  await t.node.liveEvents.feeder.scan();
  await agent.disconnect();
  return id;
}

test('a terminal task notifies the user who ran it; an sk- run (no user) notifies the owner and admins', async () => {
  const mine = await run(member.userId, 'completed');
  const m = await list(member);
  assert.equal(m.notification_list.length, 1);
  const n = m.notification_list[0];
  assert.deepEqual(Object.keys(n).sort(), ['agent_id', 'created_at', 'id', 'is_read', 'message', 'notification_kind', 'read_at', 'task_id', 'title', 'webhook_id']);
  assert.equal(n.notification_kind, 'task_completed');
  assert.equal(n.task_id, mine);
  assert.equal(n.is_read, false);
  assert.equal(m.unread_count, 1);
  assert.deepEqual(Object.keys(m.page_meta).sort(), ['current_page', 'per_page', 'total_count']);
  assert.equal((await list(owner)).notification_list.length, 0, 'not the owner: the member ran it');

  const skRun = await run(null, 'failed');
  for (const u of [owner, admin]) {
    const l = await list(u);
    assert.equal(l.notification_list.length, 1);
    assert.equal(l.notification_list[0].notification_kind, 'task_failed');
    assert.equal(l.notification_list[0].task_id, skRun);
    assert.match(l.notification_list[0].message, /tool error/);
  }
  assert.equal((await list(member)).notification_list.length, 1, 'members do not get sk- runs');
  // a rescan does not duplicate
  await t.node.liveEvents.feeder.scan();
  assert.equal((await list(owner)).notification_list.length, 1);
  // other teams see nothing (the member's personal team)
  const personal = await t.http.get('/notifications', { token: member.accessToken, team: member.teamId });
  assert.equal(personal.body.notification_list.length, 0);
});

test('unread_only, PATCH read, read-all; foreign ids are 404; sk- callers are refused', async () => {
  await run(admin.userId, 'completed');
  await run(admin.userId, 'completed');
  let l = await list(admin);
  assert.equal(l.notification_list.length, 3);
  assert.equal(l.unread_count, 3);
  const first = l.notification_list[0].id;
  const r = await t.http.patch(`/notifications/${first}/read`, undefined, as(admin));
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.body, { is_success: true });
  l = await list(admin, '?unread_only=true');
  assert.equal(l.notification_list.length, 2);
  assert.ok(l.notification_list.every((n: any) => !n.is_read));
  assert.equal(l.page_meta.total_count, 2);
  const paged = await list(admin, '?per_page=1&current_page=2');
  assert.equal(paged.notification_list.length, 1);
  assert.equal(paged.page_meta.total_count, 3);
  assert.equal((await t.http.patch(`/notifications/${first}/read`, undefined, as(owner))).status, 404, "another user's notification");
  assert.equal((await t.http.get('/notifications?unread_only=maybe', as(admin))).status, 400);
  const all = await t.http.post('/notifications/read-all', undefined, as(admin));
  assert.equal(all.status, 200);
  assert.equal(all.body.is_success, true);
  l = await list(admin, '?unread_only=true');
  assert.equal(l.notification_list.length, 0);
  assert.equal((await list(admin)).notification_list.every((n: any) => n.is_read && n.read_at), true);
  const sk = (await createCredential(t.http, owner, 'integration')).value;
  assert.ok([401, 403].includes((await t.http.get('/notifications', { token: sk })).status), 'no user behind an sk- credential');
});

test('system alerts: an agent that went offline notifies the owner and admins; notifySystem for other alerts', async () => {
  const agent = await new FakeAgent(t.node, { teamId: owner.teamId }).connect();
  await t.node.liveEvents.agentWatcher.scan(); // sees it online
  await agent.disconnect();
  clock.advance(6_000); // grace period
  const deadline = Date.now() + 10_000;
  for (;;) {
    const [row] = await t.node.db.execute<{ agent_status: string }>('select agent_status from agents where id = ?', [agent.agentId]);
    if (row?.agent_status === 'offline') break;
    if (Date.now() > deadline) throw new Error('agent not offline');
    await new Promise((r) => setTimeout(r, 20));
  }
  await t.node.liveEvents.agentWatcher.scan();
  await t.node.liveEvents.agentWatcher.scan();
  for (const u of [owner, admin]) {
    const l = await list(u);
    const n = l.notification_list.filter((x: any) => x.notification_kind === 'agent_offline');
    // the agents of the earlier tests were lost in the same grace period: one alert per agent
    assert.equal(n.filter((x: any) => x.agent_id === agent.agentId).length, 1);
    assert.equal(new Set(n.map((x: any) => x.agent_id)).size, n.length, 'no duplicate alerts');
  }
  assert.equal((await list(member)).notification_list.filter((x: any) => x.notification_kind === 'agent_offline').length, 0);
  assert.equal(await t.node.liveEvents.notifySystem(owner.teamId, 'maintenance', { title: 'Maintenance', message: 'db upgrade tonight' }), 2, 'owner and admin');
  assert.equal((await list(owner)).notification_list[0].notification_kind, 'maintenance');
});
