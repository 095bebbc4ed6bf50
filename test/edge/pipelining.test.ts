/**
 * Pipelined requests (issue 29, point 5), raw TCP against a real node. This uWebSockets.js build
 * closes a connection when a request arrives while the previous answer is still pending (async
 * handlers; HttpContext.h "denying async pipelining"), in C++, before JavaScript sees it. So the
 * node cannot answer them in order; what it guarantees is that nothing is committed unanswered:
 * three runs in one TCP write get no answer, the connection is closed and no task exists (before
 * the fix one of them was committed, so a client retrying created a duplicate). Sync answers
 * pipeline fine, and one request per write on a keep-alive connection is served as usual.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { setupTeam, createWorkflow, tinyGraph, type TeamSetup } from '../agents/helpers.js';
import { rawHttp, statuses } from './raw-http.js';

let t: TestNode;
let s: TeamSetup;
let wf: string;
const BOUND_MS = 5_000;

before(async () => {
  t = await startTestNode({}, 'pipelining');
  s = await setupTeam(t);
  wf = await createWorkflow(t, s, tinyGraph());
  // a warm identity cache: authentication resolves without I/O (the fast path that reached PostgreSQL before the close)
  assert.equal((await t.http.get('/r/tasks', { token: s.sk.value })).status, 200);
});
after(async () => {
  await t.stop();
});

const run = (prompt: string): string => {
  const body = JSON.stringify({ parameters: { prompt } });
  return `POST /api/v1/r/workflows/${wf}/run HTTP/1.1\r\nHost: gantry.test\r\nAuthorization: Bearer ${s.sk.value}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
};
const tasks = async (): Promise<string[]> => (await t.node.db.execute<{ id: string }>('select id from tasks where team_id = ? order by id', [s.user.teamId])).map((r) => r.id);

test('three POST runs in one TCP write: no answer, the connection closed, and no task committed', async () => {
  const before = await tasks();
  const r = await rawHttp(t.node.httpPort, [run('a') + run('b') + run('c')], BOUND_MS);
  assert.equal(r.timedOut, false, 'the connection is closed, not left hanging');
  assert.equal(r.closed, true);
  assert.deepEqual(statuses(r.data), [], `nothing answered: ${JSON.stringify(r.data.slice(0, 200))}`);
  // a barrier: a run sent normally afterwards is committed and answered; only it is new
  const one = await t.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'after' } }, { token: s.sk.value });
  assert.equal(one.status, 202, one.text);
  const after = await tasks();
  assert.deepEqual(
    after.filter((id) => !before.includes(id)),
    [one.body.task_id],
    'the pipelined runs committed nothing',
  );
});

test('a write pipelined behind a read (GET then POST) commits nothing either; sync answers still pipeline', async () => {
  const before = await tasks();
  const get = `GET /api/v1/r/tasks HTTP/1.1\r\nHost: gantry.test\r\nAuthorization: Bearer ${s.sk.value}\r\n\r\n`;
  const r = await rawHttp(t.node.httpPort, [run('x') + get], BOUND_MS);
  assert.equal(r.closed, true);
  assert.deepEqual(statuses(r.data), []);
  const one = await t.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'after 2' } }, { token: s.sk.value });
  assert.equal(one.status, 202);
  assert.deepEqual((await tasks()).filter((id) => !before.includes(id)), [one.body.task_id]);

  // requests answered synchronously (health) pipeline and are answered in order
  const health = 'GET /healthz HTTP/1.1\r\nHost: gantry.test\r\n\r\n';
  const h = await rawHttp(t.node.httpPort, [health + health + health.replace('\r\n\r\n', '\r\nConnection: close\r\n\r\n')], BOUND_MS);
  assert.deepEqual(statuses(h.data), [200, 200, 200]);
});

test('one request per write on a keep-alive connection: every run answered 202 and committed once', async () => {
  const before = await tasks();
  const r = await rawHttp(t.node.httpPort, [run('k1')], BOUND_MS, true);
  assert.deepEqual(statuses(r.data), [202]);
  assert.equal((await tasks()).length, before.length + 1);
});
