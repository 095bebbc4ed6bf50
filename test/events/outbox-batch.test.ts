import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, addMember, type TestUser } from '../helpers/identity.js';
import { FakeClock } from '../../src/shared/clock.js';
import type { TaskEvent } from '../../src/actors/ports.js';
import { submitAs } from './helpers.js';

let t: TestNode;
let clock: FakeClock;
let owner: TestUser;
let admin: TestUser;
let member: TestUser;

before(async () => {
  clock = new FakeClock(Date.now());
  t = await startTestNode({}, 'outbox-batch', { clock });
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

async function hook(events: string[], disabled = false): Promise<string> {
  const r = await t.http.post('/webhooks', { display_name: 'rx', webhook_url: 'https://127.0.0.1:9/hook', webhook_events: events }, as(owner));
  assert.equal(r.status, 200, r.text);
  if (disabled) assert.equal((await t.http.put(`/webhooks/${r.body.id}`, { webhook_status: 'disabled' }, as(owner))).status, 200);
  return r.body.id;
}

// synthetic terminal events far above the real ids (task_event_id is not a foreign key)
let nextId = 9_000_000_000;
const ev = (taskId: string, type: 'completed' | 'failed' | 'cancelled', data: Record<string, unknown> = {}): TaskEvent => ({
  id: nextId++,
  taskId,
  teamId: owner.teamId,
  type,
  data: { status: type, ...data },
  createdAt: Date.now(),
});

test('one statement for a batch: deliveries per matching active webhook, notifications per recipient, all idempotent', async () => {
  const store = t.node.liveEvents.store;
  const notifier = t.node.liveEvents.notifier;
  const both = await hook(['task.completed', 'task.failed']);
  const failedOnly = await hook(['task.failed']);
  const disabled = await hook(['task.completed', 'task.failed'], true);

  const byMember = await submitAs(t.node, owner.teamId, member.userId);
  const skRun = await submitAs(t.node, owner.teamId, null);
  const cancelled = await submitAs(t.node, owner.teamId, member.userId);
  const events = [ev(byMember, 'completed', { output: { k: 1 } }), ev(skRun, 'failed', { error: 'boom', retry_task_id: 'r1' }), ev(cancelled, 'cancelled')];
  const items = events.map((e) => ({ e, notice: notifier.terminalNotice(e) }));

  const first = await store.enqueueTerminal(items, clock.now(), 5);
  // completed -> both; failed -> both + failedOnly; cancelled -> none
  assert.equal(first.deliveries, 3);
  // member (own run), owner + admin (sk- run), member (cancelled)
  assert.equal(first.notifications, 4);
  const again = await store.enqueueTerminal(items, clock.now(), 5);
  assert.deepEqual(again, { deliveries: 0, notifications: 0 }, 'replaying the batch adds nothing');

  const rows = await t.node.db.execute<Record<string, any>>('select * from webhook_deliveries where task_event_id = any(?::bigint[]) order by task_event_id, webhook_id', [`{${events.map((e) => e.id).join(',')}}`]);
  assert.equal(rows.filter((r) => r.webhook_id === disabled).length, 0, 'disabled webhooks drop');
  assert.deepEqual(rows.map((r) => [Number(r.task_event_id), r.webhook_id, r.event_type, r.delivery_status, r.attempt, r.max_attempts]).sort(), [
    [events[0]!.id, both, 'task.completed', 'pending', 0, 5],
    [events[1]!.id, both, 'task.failed', 'pending', 0, 5],
    [events[1]!.id, failedOnly, 'task.failed', 'pending', 0, 5],
  ].sort());
  for (const r of rows) assert.equal(new Date(r.next_attempt_at).getTime(), clock.now());
  const completedBody = JSON.parse(rows.find((r) => r.event_type === 'task.completed')!.body);
  assert.deepEqual(Object.keys(completedBody), ['event_type', 'task_id', 'task_status', 'task_output', 'task_error', 'timestamp']);
  assert.deepEqual(completedBody.task_output, { k: 1 });

  const notes = await t.node.db.execute<Record<string, any>>('select * from notifications where task_id in (?, ?, ?) order by id', [byMember, skRun, cancelled]);
  assert.equal(notes.length, 4);
  assert.equal(new Set(notes.map((n) => n.id)).size, 4);
  for (const n of notes) assert.match(n.id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, 'uuidv7');
  const of = (taskId: string) => notes.filter((n) => n.task_id === taskId);
  assert.deepEqual(of(byMember).map((n) => [n.user_id, n.notification_kind, n.title, n.message, n.dedupe_key]), [
    [member.userId, 'task_completed', 'Task completed', `events-wf task ${byMember} completed.`, `task:${byMember}:completed`],
  ]);
  assert.deepEqual(of(skRun).map((n) => n.user_id).sort(), [owner.userId, admin.userId].sort());
  for (const n of of(skRun)) assert.equal(n.message, `events-wf task ${skRun} failed: boom (retrying as task r1)`);
  assert.deepEqual(of(cancelled).map((n) => [n.user_id, n.notification_kind, n.message]), [[member.userId, 'task_cancelled', `events-wf task ${cancelled} was cancelled.`]]);

  // a webhook created after the events gets none of them
  const late = await hook(['task.completed', 'task.failed']);
  assert.deepEqual(await store.enqueueTerminal(items, clock.now(), 5), { deliveries: 0, notifications: 0 });
  assert.equal((await t.node.db.execute('select 1 from webhook_deliveries where webhook_id = ?', [late])).length, 0);
  for (const id of [both, failedOnly, disabled, late]) await t.http.del(`/webhooks/${id}`, as(owner));
});

test('a burst on the bus is written by the bus path alone; re-published events add nothing', async () => {
  const receiverless = await hook(['task.completed']);
  const tasks = await Promise.all(Array.from({ length: 5 }, () => submitAs(t.node, owner.teamId, member.userId)));
  const events = tasks.map((id) => ev(id, 'completed'));
  t.node.events.publish(events);
  const deadline = Date.now() + 10_000;
  for (;;) {
    const n = await t.node.db.execute<{ n: number }>('select count(*)::int as n from notifications where task_id = any(?::uuid[])', [`{${tasks.join(',')}}`]);
    if (Number(n[0]?.n) === 5) break;
    if (Date.now() > deadline) throw new Error(`notifications: ${n[0]?.n} of 5`);
    await new Promise((r) => setTimeout(r, 20));
  }
  const d = await t.node.db.execute('select 1 from webhook_deliveries where webhook_id = ?', [receiverless]);
  assert.equal(d.length, 5);
  // re-publishing the same events enqueues nothing twice
  t.node.events.publish(events);
  await new Promise((r) => setTimeout(r, 100));
  assert.equal((await t.node.db.execute('select 1 from webhook_deliveries where webhook_id = ?', [receiverless])).length, 5);
  await t.http.del(`/webhooks/${receiverless}`, as(owner));
});
