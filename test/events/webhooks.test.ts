import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { verify } from '@octokit/webhooks-methods';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, addMember, type TestUser } from '../helpers/identity.js';
import { FakeAgent } from '../helpers/fake-agent.js';
import { waitForStatus } from '../helpers/tasks.js';
import { FakeClock } from '../../src/shared/clock.js';
import { startNode, type GantryNode } from '../../src/main.js';
import { createLogger } from '../../src/shared/logger.js';
import { makePki, Receiver, submitAs, type Pki } from './helpers.js';

let pki: Pki;
let t: TestNode;
let clock: FakeClock;
let owner: TestUser;
let member: TestUser;

before(async () => {
  pki = makePki();
  clock = new FakeClock(Date.now());
  t = await startTestNode({ GANTRY_OUTBOUND_CA_FILE: pki.caFile }, 'webhooks', { clock });
  owner = await registerUser(t.http);
  member = await registerUser(t.http);
  await addMember(t.http, t.node, owner, member, 'member');
});
after(async () => {
  await t.stop();
  pki.cleanup();
});

const as = (u: TestUser) => ({ token: u.accessToken, team: u.teamId });

async function createHook(node: { http: TestNode['http'] }, u: TestUser, url: string, events = ['task.completed', 'task.failed']): Promise<{ id: string; secret: string }> {
  const r = await node.http.post('/webhooks', { display_name: 'receiver', webhook_url: url, webhook_events: events }, as(u));
  assert.equal(r.status, 200, r.text);
  const d = await node.http.get(`/webhooks/${r.body.id}`, as(u));
  assert.equal(d.status, 200, d.text);
  assert.match(d.body.signing_secret, /^whsec_[0-9a-f]{64}$/);
  return { id: r.body.id, secret: d.body.signing_secret };
}

/** Runs a task to completion (or failure) on a fake agent in the team. */
async function runTask(node: GantryNode, teamId: string, outcome: 'completed' | 'failed' = 'completed'): Promise<string> {
  const agent = await new FakeAgent(node, { teamId }).connect();
  const id = await submitAs(node, teamId, null);
  const a = await agent.assignment(id);
  agent.ack(a);
  await waitForStatus(node, id, 'running');
  if (outcome === 'completed') agent.finish(a, { storage_key: `outputs/${id}/x.png`, image_count: 1 });
  else agent.fail(a, 'CUDA out of memory');
  await waitForStatus(node, id, outcome);
  await agent.disconnect();
  return id;
}

const deliveries = async (node: GantryNode, webhookId: string) =>
  node.db.execute<Record<string, any>>('select * from webhook_deliveries where webhook_id = ? order by created_at, id', [webhookId]);

test('CRUD: create, list, detail with secret, update, delete; members read the list but cannot write', async () => {
  const r = await t.http.post('/webhooks', { display_name: 'ci', webhook_url: 'https://127.0.0.1:9/x', webhook_events: ['task.completed'] }, as(owner));
  assert.equal(r.status, 200, r.text);
  const id = r.body.id;
  const list = await t.http.get('/webhooks', { token: member.accessToken, team: owner.teamId });
  assert.equal(list.status, 200);
  assert.ok(list.body.webhook_list.some((w: any) => w.id === id && w.webhook_status === 'active' && w.signing_secret === undefined));
  assert.deepEqual(Object.keys(list.body.page_meta).sort(), ['current_page', 'per_page', 'total_count']);
  const asMember = { token: member.accessToken, team: owner.teamId };
  assert.equal((await t.http.post('/webhooks', { display_name: 'x', webhook_url: 'https://127.0.0.1/', webhook_events: ['task.failed'] }, asMember)).status, 403);
  assert.equal((await t.http.get(`/webhooks/${id}`, asMember)).status, 403, 'the detail carries the secret: admins only');
  const up = await t.http.put(`/webhooks/${id}`, { webhook_status: 'disabled', display_name: 'ci 2' }, as(owner));
  assert.equal(up.status, 200, up.text);
  assert.deepEqual(up.body, { id });
  const d = await t.http.get(`/webhooks/${id}`, as(owner));
  assert.equal(d.body.webhook_status, 'disabled');
  assert.equal(d.body.display_name, 'ci 2');
  assert.deepEqual(d.body.webhook_events, ['task.completed']);
  assert.equal((await t.http.put(`/webhooks/${id}`, {}, as(owner))).status, 400);
  assert.equal((await t.http.put(`/webhooks/${id}`, { webhook_status: 'paused' }, as(owner))).status, 400);
  assert.equal((await t.http.put(`/webhooks/${id}`, { secret: 'x' }, as(owner))).status, 400);
  // a foreign team does not see it
  const stranger = await registerUser(t.http);
  assert.equal((await t.http.get(`/webhooks/${id}`, as(stranger))).status, 404);
  assert.equal((await t.http.del(`/webhooks/${id}`, as(stranger))).status, 404);
  assert.equal((await t.http.del(`/webhooks/${id}`, as(owner))).status, 200);
  assert.equal((await t.http.get(`/webhooks/${id}`, as(owner))).status, 404);
});

test('validation: fields are named; unknown fields rejected', async () => {
  const base = { display_name: 'x', webhook_url: 'https://127.0.0.1/hook', webhook_events: ['task.completed'] };
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ ...base, webhook_url: 'http://127.0.0.1/hook' }, /webhook_url: must start with https:\/\//],
    [{ ...base, webhook_url: `https://127.0.0.1/${'a'.repeat(2049 - 'https://127.0.0.1/'.length)}` }, /webhook_url/],
    [{ ...base, webhook_events: [] }, /webhook_events/],
    [{ ...base, webhook_events: ['task.started'] }, /webhook_events/],
    [{ ...base, display_name: '' }, /display_name/],
    [{ ...base, display_name: 'x'.repeat(256) }, /display_name/],
    [{ ...base, extra: 1 }, /unknown field/],
    [{ display_name: 'x', webhook_events: ['task.completed'] }, /webhook_url/],
  ];
  for (const [body, msg] of cases) {
    const r = await t.http.post('/webhooks', body, as(owner));
    assert.equal(r.status, 400, JSON.stringify(body).slice(0, 100));
    assert.match(r.body.error_message, msg);
  }
  // exactly 2048 characters is fine
  const ok = await t.http.post('/webhooks', { ...base, webhook_url: `https://127.0.0.1/${'a'.repeat(2048 - 'https://127.0.0.1/'.length)}` }, as(owner));
  assert.equal(ok.status, 200, ok.text);
  await t.http.del(`/webhooks/${ok.body.id}`, as(owner));
});

test('a delivery is signed (verified by @octokit/webhooks-methods) and carries exactly the spec body and headers; disabled webhooks drop events', async () => {
  const team = await registerUser(t.http);
  const rx = await new Receiver(pki, () => clock.now()).start('localhost');
  try {
    const hook = await createHook(t, team, rx.url);
    const failedOnly = await createHook(t, team, rx.url, ['task.failed']);
    const disabled = await createHook(t, team, rx.url);
    assert.equal((await t.http.put(`/webhooks/${disabled.id}`, { webhook_status: 'disabled' }, as(team))).status, 200);

    const taskId = await runTask(t.node, team.teamId, 'completed');
    await rx.waitFor(1);
    await t.node.liveEvents.feeder.scan();
    await t.node.liveEvents.dispatcher.idle();
    assert.equal(rx.received.length, 1, 'only the active task.completed webhook got it');
    const got = rx.received[0]!;
    assert.equal(await verify(hook.secret, got.body, String(got.headers['x-webhook-signature-256'])), true);
    assert.equal(await verify(failedOnly.secret, got.body, String(got.headers['x-webhook-signature-256'])), false);
    assert.match(String(got.headers['x-webhook-signature-256']), /^sha256=[0-9a-f]{64}$/);
    assert.equal(got.headers['content-type'], 'application/json');
    assert.equal(got.headers['x-webhook-event'], 'task.completed');
    const body = JSON.parse(got.body);
    assert.deepEqual(Object.keys(body), ['event_type', 'task_id', 'task_status', 'task_output', 'task_error', 'timestamp']);
    assert.equal(body.event_type, 'task.completed');
    assert.equal(body.task_id, taskId);
    assert.equal(body.task_status, 'completed');
    assert.deepEqual(body.task_output, { storage_key: `outputs/${taskId}/x.png`, image_count: 1 });
    assert.equal(body.task_error, '');
    assert.ok(!Number.isNaN(Date.parse(body.timestamp)));
    const rows = await deliveries(t.node, hook.id);
    assert.equal(rows.length, 1);
    assert.equal(got.headers['x-webhook-delivery'], rows[0]!.id);
    assert.equal((await deliveries(t.node, disabled.id)).length, 0, 'disabled: dropped, not queued');
    assert.equal((await deliveries(t.node, failedOnly.id)).length, 0);

    // the delivery log
    const log = await t.http.get(`/webhooks/${hook.id}/deliveries`, as(team));
    assert.equal(log.status, 200, log.text);
    const d = log.body.delivery_list[0];
    assert.equal(d.delivery_status, 'succeeded');
    assert.equal(d.attempt, 1);
    assert.equal(d.response_code, 200);
    assert.equal(typeof d.latency_ms, 'number');
    assert.equal(d.error, null);
    assert.equal(d.attempts.length, 1);

    // a failed task reaches both task.failed subscribers
    const failedTask = await runTask(t.node, team.teamId, 'failed');
    await rx.waitFor(3);
    const fb = rx.received.slice(1).map((r) => JSON.parse(r.body));
    for (const b of fb) {
      assert.equal(b.event_type, 'task.failed');
      assert.equal(b.task_id, failedTask);
      assert.equal(b.task_status, 'failed');
      assert.equal(b.task_error, 'CUDA out of memory');
      assert.deepEqual(b.task_output, {});
    }
    const secrets = [hook.secret, failedOnly.secret];
    for (const r of rx.received.slice(1)) {
      const ok = await Promise.all(secrets.map((s) => verify(s, r.body, String(r.headers['x-webhook-signature-256']))));
      assert.equal(ok.filter(Boolean).length, 1);
    }

    // redeliver: a new delivery of the same signed body
    const re = await t.http.post(`/webhooks/${hook.id}/deliveries/${rows[0]!.id}/redeliver`, undefined, as(team));
    assert.equal(re.status, 200, re.text);
    await rx.waitFor(4);
    const again = rx.received[3]!;
    assert.equal(again.body, got.body);
    assert.equal(again.headers['x-webhook-delivery'], re.body.id);
    assert.equal(await verify(hook.secret, again.body, String(again.headers['x-webhook-signature-256'])), true);
    // a rescan enqueues nothing twice
    await t.node.liveEvents.feeder.scan();
    await t.node.liveEvents.dispatcher.idle();
    assert.equal(rx.received.length, 4);
  } finally {
    await rx.stop();
  }
});

test('retries at the spec delays: a receiver failing 3 times gets the event on the 4th attempt (0, +0, +5 s, +30 s)', async () => {
  const team = await registerUser(t.http);
  const rx = await new Receiver(pki, () => clock.now()).start('127.0.0.1');
  rx.respond = (n) => (n < 3 ? 503 : 200);
  const dispatcher = t.node.liveEvents.dispatcher;
  try {
    const hook = await createHook(t, team, rx.url, ['task.completed']);
    await runTask(t.node, team.teamId);
    await rx.waitFor(2); // attempt 1 and the immediate retry
    await dispatcher.idle();
    let [row] = await deliveries(t.node, hook.id);
    assert.equal(row!.attempt, 2);
    assert.equal(row!.delivery_status, 'pending');
    assert.equal(new Date(row!.next_attempt_at).getTime(), rx.received[1]!.at + 5_000);
    clock.advance(4_999);
    await dispatcher.idle();
    assert.equal(rx.received.length, 2, 'not before 5 s');
    clock.advance(1);
    await rx.waitFor(3);
    await dispatcher.idle();
    clock.advance(29_999);
    await dispatcher.idle();
    assert.equal(rx.received.length, 3, 'not before 30 s');
    clock.advance(1);
    await rx.waitFor(4);
    await dispatcher.idle();
    const at = rx.received.map((r) => r.at - rx.received[0]!.at);
    assert.deepEqual(at, [0, 0, 5_000, 35_000]);
    assert.deepEqual(
      rx.received.map((r) => r.headers['x-webhook-delivery']),
      Array(4).fill(row!.id),
      'one delivery id across its attempts',
    );
    [row] = await deliveries(t.node, hook.id);
    assert.equal(row!.delivery_status, 'succeeded');
    assert.equal(row!.attempt, 4);
    assert.equal(row!.response_code, 200);
    assert.deepEqual(
      row!.attempt_log.map((a: any) => [a.attempt, a.response_code, a.error]),
      [
        [1, 503, 'HTTP 503'],
        [2, 503, 'HTTP 503'],
        [3, 503, 'HTTP 503'],
        [4, 200, null],
      ],
    );
    for (const r of rx.received) assert.equal(await verify(await secretOf(t, team, hook.id), r.body, String(r.headers['x-webhook-signature-256'])), true);
  } finally {
    await rx.stop();
  }
});

async function secretOf(node: TestNode, u: TestUser, id: string): Promise<string> {
  return (await node.http.get(`/webhooks/${id}`, as(u))).body.signing_secret;
}

test('disabling a webhook drops its pending and retrying deliveries: none reaches the old or the new URL, nor after a re-enable; the log says dropped', async () => {
  const team = await registerUser(t.http);
  const oldRx = await new Receiver(pki, () => clock.now()).start('localhost');
  const newRx = await new Receiver(pki, () => clock.now()).start('localhost');
  oldRx.respond = () => 503;
  const dispatcher = t.node.liveEvents.dispatcher;
  try {
    const hook = await createHook(t, team, oldRx.url, ['task.completed', 'task.failed']);
    const tasks = 3;
    for (let i = 0; i < tasks; i++) await runTask(t.node, team.teamId, i % 2 === 0 ? 'completed' : 'failed');
    await oldRx.waitFor(2 * tasks); // attempt 1 and the immediate retry of each
    await dispatcher.idle();
    const before = await deliveries(t.node, hook.id);
    assert.equal(before.length, tasks);
    for (const d of before) assert.equal(d.delivery_status, 'pending', 'each waits for its 5 s retry');
    // a delivery that has not had its first attempt yet (enqueued, not yet claimed)
    await t.node.db.execute(`update webhook_deliveries set attempt = 0, attempt_log = '[]', next_attempt_at = ? where id = ?`, [new Date(clock.now() + 1_000), before[0]!.id]);

    // one PUT disables the webhook and moves it to a new URL
    const put = await t.http.put(`/webhooks/${hook.id}`, { webhook_status: 'disabled', webhook_url: newRx.url }, as(team));
    assert.equal(put.status, 200, put.text);
    const after = await deliveries(t.node, hook.id);
    for (const d of after) {
      assert.equal(d.delivery_status, 'dropped');
      assert.equal(d.next_attempt_at, null);
      assert.ok(d.finished_at, 'a dropped delivery is finished');
      assert.match(String(d.last_error), /dropped/);
    }
    for (const step of [5_000, 30_000, 120_000, 600_000]) {
      clock.advance(step);
      await dispatcher.idle();
    }
    assert.equal(oldRx.received.length, 2 * tasks, 'nothing more to the old URL');
    assert.equal(newRx.received.length, 0, 'nothing to the new URL');

    // re-enabling does not resurrect what was dropped
    assert.equal((await t.http.put(`/webhooks/${hook.id}`, { webhook_status: 'active' }, as(team))).status, 200);
    clock.advance(600_000);
    await dispatcher.idle();
    assert.equal(newRx.received.length, 0);

    // the delivery log: status dropped, filterable
    const log = await t.http.get(`/webhooks/${hook.id}/deliveries?delivery_status=dropped`, as(team));
    assert.equal(log.status, 200, log.text);
    assert.equal(log.body.page_meta.total_count, tasks);
    for (const d of log.body.delivery_list) {
      assert.equal(d.delivery_status, 'dropped');
      assert.equal(d.next_attempt_at, null);
      assert.equal(d.error, 'dropped: the webhook is disabled');
    }
    // a new event after the re-enable goes to the new URL
    await runTask(t.node, team.teamId, 'completed');
    await newRx.waitFor(1);
  } finally {
    await oldRx.stop();
    await newRx.stop();
  }
});

test('an attempt in flight when its webhook is disabled is not retried (dropped), and the dispatcher never claims a disabled webhook\'s delivery', async () => {
  const team = await registerUser(t.http);
  const rx = await new Receiver(pki, () => clock.now()).start('localhost');
  rx.respond = () => 503;
  const dispatcher = t.node.liveEvents.dispatcher;
  const store = t.node.liveEvents.store;
  try {
    const hook = await createHook(t, team, rx.url, ['task.completed']);
    await runTask(t.node, team.teamId);
    await rx.waitFor(2);
    await dispatcher.idle();
    const [row] = await deliveries(t.node, hook.id);
    // the retry is claimed (in flight) as a dispatcher does 5 s later (the node's own dispatcher
    // waits on the fake clock, which stays put) ...
    const now = clock.now() + 5_000;
    const claimed = (await store.claimDue(now, 60_000, 100)).filter((d) => d.webhook_id === hook.id);
    assert.equal(claimed.length, 1);
    // ... the webhook is disabled meanwhile, then the attempt fails: no further retry
    assert.equal((await t.http.put(`/webhooks/${hook.id}`, { webhook_status: 'disabled' }, as(team))).status, 200);
    await store.recordAttempt(row!.id, { attempt: 3, status: 'pending', responseCode: 503, latencyMs: 1, error: 'HTTP 503', startedAt: now, now, nextAt: now + 30_000 });
    let [d] = await deliveries(t.node, hook.id);
    assert.equal(d!.delivery_status, 'dropped');
    assert.equal(d!.attempt_log.length, 3, 'the attempt made is logged');

    // a pending row of a disabled webhook (written by a node of an older version) is dropped at claim, not sent
    await t.node.db.execute(`update webhook_deliveries set delivery_status = 'pending', next_attempt_at = ? where id = ?`, [new Date(clock.now()), row!.id]);
    const again = (await store.claimDue(clock.now(), 60_000, 100)).filter((x) => x.webhook_id === hook.id);
    assert.equal(again.length, 0);
    [d] = await deliveries(t.node, hook.id);
    assert.equal(d!.delivery_status, 'dropped');
    await dispatcher.idle();
    assert.equal(rx.received.length, 2);
  } finally {
    await rx.stop();
  }
});

test('a receiver down for longer gets exactly 5 attempts, and a node restart between attempts loses none; admins get a webhook_failing notification', async () => {
  const team = await registerUser(t.http);
  const rx = await new Receiver(pki, () => clock.now()).start('localhost');
  rx.respond = () => 500;
  let node2: GantryNode | null = null;
  try {
    const hook = await createHook(t, team, rx.url, ['task.completed']);
    await runTask(t.node, team.teamId);
    await rx.waitFor(2);
    await t.node.liveEvents.dispatcher.idle();
    // stop the node between attempts 2 and 3; a new node on the same database takes over
    await t.node.close();
    node2 = await startNode(t.node.config, { logger: createLogger('silent'), clock });
    const d2 = node2.liveEvents.dispatcher;
    await d2.idle();
    assert.equal(rx.received.length, 2);
    for (const step of [5_000, 30_000, 120_000]) {
      clock.advance(step);
      await rx.waitFor(rx.received.length + 1);
      await d2.idle();
    }
    assert.equal(rx.received.length, 5);
    clock.advance(10 * 60_000);
    await d2.idle();
    assert.equal(rx.received.length, 5, 'no sixth attempt');
    const at = rx.received.map((r) => r.at - rx.received[0]!.at);
    assert.deepEqual(at, [0, 0, 5_000, 35_000, 155_000]);
    const [row] = await deliveries(node2, hook.id);
    assert.equal(row!.delivery_status, 'failed');
    assert.equal(row!.attempt, 5);
    assert.equal(row!.last_error, 'HTTP 500');
    const notes = await node2.db.execute<Record<string, any>>(`select * from notifications where user_id = ? and notification_kind = 'webhook_failing'`, [team.userId]);
    assert.equal(notes.length, 1);
    assert.equal(notes[0]!.webhook_id, hook.id);
  } finally {
    await rx.stop();
    await node2?.close();
  }
});
