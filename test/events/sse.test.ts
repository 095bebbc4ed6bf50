import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, type TestUser } from '../helpers/identity.js';
import { FakeAgent } from '../helpers/fake-agent.js';
import { waitForStatus } from '../helpers/tasks.js';
import { FakeClock } from '../../src/shared/clock.js';
import { SseClient, label, submitAs } from './helpers.js';

let t: TestNode;
let clock: FakeClock;
let owner: TestUser;
let outsider: TestUser;

before(async () => {
  clock = new FakeClock(Date.now());
  t = await startTestNode({}, 'sse', { clock });
  owner = await registerUser(t.http);
  outsider = await registerUser(t.http);
});
after(async () => {
  await t.stop();
});

const auth = (u: TestUser): Record<string, string> => ({ authorization: `Bearer ${u.accessToken}`, 'x-team-id': u.teamId });
const url = (taskId: string): string => `${t.baseUrl}/r/tasks/${taskId}/events`;
const settle = (taskId: string) => t.node.actors.ask({ kind: 'task', id: taskId }, { type: 'get' });
const dbEvents = async (taskId: string) => t.node.db.execute<{ id: string; event_type: string }>('select id, event_type from task_events where task_id = ? order by id', [taskId]);
const progress = (i: number) => ({ progress: i / 10, step_current: i, step_total: 10, current_node: `3 KSampler` });

test('a real SSE client sees pending -> queued -> running -> progress... -> completed in order, then the server closes', async () => {
  const agent = await new FakeAgent(t.node, { teamId: owner.teamId }).connect();
  const id = await submitAs(t.node, owner.teamId, owner.userId);
  // Last-Event-ID 0: everything from the first event, then the live tail
  const sse = await SseClient.connect(url(id), { ...auth(owner), 'last-event-id': '0' });
  assert.equal(sse.status, 200);
  assert.match(String(sse.headers['content-type']), /^text\/event-stream/);
  const a = await agent.assignment(id);
  await waitForStatus(t.node, id, 'queued');
  agent.ack(a);
  await waitForStatus(t.node, id, 'running');
  for (let i = 1; i <= 3; i++) {
    clock.advance(1_000);
    agent.progress(a, progress(i));
    await settle(id);
  }
  await sse.until((c) => c.messages.filter((m) => m.event === 'progress').length === 3, 10_000, 'three progress events');
  clock.advance(1_000);
  agent.finish(a);
  await sse.closed;
  assert.deepEqual(sse.messages.map(label), ['pending', 'queued', 'running', 'progress', 'progress', 'progress', 'completed']);
  // ids are the task_events ids, strictly increasing, and every row was sent exactly once
  const rows = await dbEvents(id);
  assert.deepEqual(
    sse.messages.map((m) => m.id),
    rows.map((r) => String(r.id)),
  );
  const done = sse.messages.at(-1)!;
  assert.deepEqual(Object.keys(done.data).sort(), ['completed_at', 'output', 'status', 'task_id']);
  assert.equal(done.data.status, 'completed');
  assert.deepEqual(done.data.output, { storage_key: `outputs/${id}/output.png`, image_count: 1 });
  const p = sse.messages.find((m) => m.event === 'progress')!;
  assert.deepEqual(Object.keys(p.data).sort(), ['current_node', 'progress', 'step_current', 'step_total', 'task_id', 'timestamp']);
  const s = sse.messages[0]!;
  assert.deepEqual(Object.keys(s.data).sort(), ['status', 'task_id', 'timestamp']);
  assert.ok(sse.ended, 'the server closed the stream after the terminal event');
  await agent.disconnect();
});

test('one progress event per tick (the contract): a 3-step run 100 ms apart sends 3; ticks faster than the 20/s bound keep the latest, written before the status change', async () => {
  const agent = await new FakeAgent(t.node, { teamId: owner.teamId }).connect();
  const id = await submitAs(t.node, owner.teamId, owner.userId);
  const sse = await SseClient.connect(url(id), { ...auth(owner), 'last-event-id': '0' });
  const a = await agent.assignment(id);
  agent.ack(a);
  await waitForStatus(t.node, id, 'running');
  // a 3-step run, one tick every 100 ms (what the simulate executor and a fast ComfyUI graph send)
  for (let i = 1; i <= 3; i++) {
    clock.advance(100);
    agent.progress(a, progress(i));
    await settle(id);
  }
  await sse.until((c) => c.messages.filter((m) => m.event === 'progress').length === 3, 10_000, 'three progress events');
  // a runaway agent: 4 ticks in the same instant, then the result at once (no time passes): the
  // bound holds the later ticks back, and the latest is written before the completion
  clock.advance(100);
  for (let i = 4; i <= 7; i++) agent.progress(a, progress(i));
  agent.finish(a);
  await sse.closed;
  assert.deepEqual(sse.messages.map(label), ['pending', 'queued', 'running', 'progress', 'progress', 'progress', 'progress', 'progress', 'completed']);
  const steps = sse.messages.filter((m) => m.event === 'progress').map((m) => m.data.step_current);
  assert.deepEqual(steps, [1, 2, 3, 4, 7], 'every tick at <= 20/s is an event; the last tick is never dropped');
  await agent.disconnect();
});

test('the first message without Last-Event-ID is the current status; a terminal task sends its terminal event and closes', async () => {
  const id = await submitAs(t.node, owner.teamId, owner.userId);
  await waitForStatus(t.node, id, 'waiting'); // no agent in this team right now
  const sse = await SseClient.connect(url(id), auth(owner));
  await sse.until((c) => c.messages.length >= 1);
  assert.equal(sse.messages[0]!.event, 'status');
  assert.equal(sse.messages[0]!.data.status, 'waiting');
  // the live tail follows: cancel it
  const r = await t.http.post(`/r/tasks/${id}/cancel`, undefined, { token: owner.accessToken, team: owner.teamId });
  assert.equal(r.status, 200, r.text);
  await sse.closed;
  assert.deepEqual(sse.messages.map(label), ['waiting', 'cancelled']);
  assert.deepEqual(Object.keys(sse.messages[1]!.data).sort(), ['status', 'task_id']);

  const again = await SseClient.connect(url(id), auth(owner));
  await again.closed;
  assert.deepEqual(again.messages.map(label), ['cancelled']);
  // resuming after the terminal event: nothing new, the stream closes at once
  const resumed = await SseClient.connect(url(id), { ...auth(owner), 'last-event-id': again.messages[0]!.id! });
  await resumed.closed;
  assert.deepEqual(resumed.messages, []);
});

test('disconnect mid-run and reconnect with Last-Event-ID: every missed event exactly once, then the live tail', async () => {
  const agent = await new FakeAgent(t.node, { teamId: owner.teamId }).connect();
  const id = await submitAs(t.node, owner.teamId, owner.userId);
  const first = await SseClient.connect(url(id), { ...auth(owner), 'last-event-id': '0' });
  const a = await agent.assignment(id);
  agent.ack(a);
  await waitForStatus(t.node, id, 'running');
  clock.advance(1_000);
  agent.progress(a, progress(1));
  await settle(id);
  await first.until((c) => c.messages.some((m) => m.event === 'progress'));
  first.close();
  await first.closed;
  const lastSeen = first.messages.at(-1)!.id!;

  // missed while disconnected
  for (let i = 2; i <= 4; i++) {
    clock.advance(1_000);
    agent.progress(a, progress(i));
    await settle(id);
  }
  const second = await SseClient.connect(url(id), { ...auth(owner), 'last-event-id': lastSeen });
  await second.until((c) => c.messages.length >= 3, 10_000, 'the replay');
  clock.advance(1_000);
  agent.finish(a);
  await second.closed;

  const all = [...first.messages, ...second.messages];
  const rows = await dbEvents(id);
  assert.deepEqual(
    all.map((m) => m.id),
    rows.map((r) => String(r.id)),
    'the two connections together saw every event exactly once, in order',
  );
  assert.deepEqual(second.messages.map((m) => (m.event === 'progress' ? m.data.step_current : label(m))), [2, 3, 4, 'completed']);
  // ?last_event_id works too (clients that cannot set headers)
  const viaQuery = await SseClient.connect(`${url(id)}?last_event_id=${lastSeen}`, auth(owner));
  await viaQuery.closed;
  assert.deepEqual(
    viaQuery.messages.map((m) => m.id),
    second.messages.map((m) => m.id),
  );
  await agent.disconnect();
});

test('team scope: a foreign or unknown task is a 404; bad ids are 400; no credential is 401', async () => {
  const id = await submitAs(t.node, owner.teamId, owner.userId);
  const foreign = await SseClient.connect(url(id), auth(outsider));
  await foreign.closed;
  assert.equal(foreign.status, 404);
  assert.match(foreign.body, /task not found/);
  const unknown = await SseClient.connect(url('01930000-0000-7000-8000-000000000000'), auth(owner));
  await unknown.closed;
  assert.equal(unknown.status, 404);
  const bad = await SseClient.connect(url('nope'), auth(owner));
  await bad.closed;
  assert.equal(bad.status, 400);
  const badId = await SseClient.connect(url(id), { ...auth(owner), 'last-event-id': 'abc' });
  await badId.closed;
  assert.equal(badId.status, 400);
  const anon = await SseClient.connect(url(id), {});
  await anon.closed;
  assert.equal(anon.status, 401);
  assert.equal(t.node.liveEvents.sse.openStreams(owner.teamId), 0, 'failed requests hold no stream slot');
  // polling fallback keeps working
  const poll = await t.http.get(`/r/tasks/${id}`, { token: owner.accessToken, team: owner.teamId });
  assert.equal(poll.status, 200);
});
