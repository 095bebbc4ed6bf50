import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, createCredential, type TestUser } from '../helpers/identity.js';
import { SseClient, submitAs } from './helpers.js';

let t: TestNode;
let owner: TestUser;
let other: TestUser;

before(async () => {
  t = await startTestNode({ GANTRY_SSE_KEEPALIVE_MS: 100, GANTRY_SSE_MAX_STREAMS_PER_TEAM: 2 }, 'sselimits');
  owner = await registerUser(t.http);
  other = await registerUser(t.http);
});
after(async () => {
  await t.stop();
});

const auth = (u: TestUser): Record<string, string> => ({ authorization: `Bearer ${u.accessToken}`, 'x-team-id': u.teamId });
const url = (taskId: string): string => `${t.baseUrl}/r/tasks/${taskId}/events`;

test('keep-alive comments arrive at the configured interval', async () => {
  const id = await submitAs(t.node, owner.teamId, null);
  const sse = await SseClient.connect(url(id), auth(owner));
  await sse.until((c) => c.comments.filter((x) => x === 'keep-alive').length >= 3, 5_000, 'three keep-alives');
  assert.equal(sse.messages[0]?.event, 'status');
  sse.close();
  await sse.closed;
});

test('per-team cap on open streams: 429 with Retry-After; a closed stream frees its slot; other teams unaffected', async () => {
  const id = await submitAs(t.node, owner.teamId, null);
  const sk = (await createCredential(t.http, owner, 'integration')).value;
  const a = await SseClient.connect(url(id), auth(owner));
  const b = await SseClient.connect(url(id), { authorization: `Bearer ${sk}` }); // sk- counts against the same team
  await a.until((c) => c.messages.length > 0);
  await b.until((c) => c.messages.length > 0);
  const c3 = await SseClient.connect(url(id), auth(owner));
  await c3.closed;
  assert.equal(c3.status, 429);
  assert.ok(Number(c3.headers['retry-after']) >= 1);
  assert.match(c3.body, /open event streams/);

  const otherTask = await submitAs(t.node, other.teamId, null);
  const o = await SseClient.connect(url(otherTask), auth(other));
  assert.equal(o.status, 200);

  a.close();
  await a.closed;
  const deadline = Date.now() + 5_000;
  while (t.node.liveEvents.sse.openStreams(owner.teamId) > 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  const d = await SseClient.connect(url(id), auth(owner));
  assert.equal(d.status, 200);
  b.close();
  d.close();
  o.close();
  await Promise.all([b.closed, d.closed, o.closed]);
});

test('shutdown closes open streams', async () => {
  const id = await submitAs(t.node, owner.teamId, null);
  const sse = await SseClient.connect(url(id), auth(owner));
  await sse.until((c) => c.messages.length > 0);
  await t.node.close();
  await sse.closed;
  assert.ok(sse.ended);
});
