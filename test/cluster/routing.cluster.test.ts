// Three node processes on one PostgreSQL and one Redis: a run submitted on node A, its agent
// connected to node B, its SSE client on node C sees every event once, in order; a revoked sk- is
// refused on every node on its next request.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { startCluster, clusterSkipReason, type TestCluster } from '../helpers/cluster.js';
import { setupTeam, createWorkflow, runWorkflow, spawnAgent, tmpDir, tinyGraph, waitFor, type AgentProcess, type TeamSetup } from '../agents/helpers.js';
import { SseClient } from '../events/helpers.js';
import { pairDevice } from '../helpers/identity.js';
import type { TestNode } from '../helpers/node.js';

const skip = clusterSkipReason();
let c: TestCluster;
const procs: AgentProcess[] = [];
const asNode = (i: number): TestNode => ({ http: c.nodes[i]?.http }) as unknown as TestNode;

before(async () => {
  if (skip) return;
  c = await startCluster({ nodes: 3 });
});

after(async () => {
  for (const p of procs) p.kill('SIGKILL');
  await Promise.all(procs.map((p) => p.exited));
  await c?.stop();
});

function agentOn(i: number, s: TeamSetup, extra: string[] = []): AgentProcess {
  const p = spawnAgent([
    '--server',
    `127.0.0.1:${c.nodes[i]?.grpcPort}`,
    '--credential',
    s.ak.value,
    '--executor',
    'simulate',
    '--state-dir',
    tmpDir('gantry-agent-state-'),
    '--simulate-duration-ms',
    '1500',
    '--simulate-steps',
    '6',
    ...extra,
  ]);
  procs.push(p);
  return p;
}

test('a run submitted on node A, run by an agent on node B, followed over SSE on node C: every event once, in order', { skip: skip ?? false, timeout: 120_000 }, async () => {
  const A = asNode(0);
  const s = await setupTeam(A);
  agentOn(1, s);
  await waitFor('the agent online (seen from node C)', async () => {
    const r = await c.nodes[2]?.http.get('/agents', { token: s.user.accessToken, team: s.user.teamId });
    return r?.status === 200 && (r.body.agent_list as Array<Record<string, any>>).some((a) => a.agent_status === 'online');
  }, 30_000);
  const wf = await createWorkflow(A, s, tinyGraph());

  // several runs, so that their task actors are owned by different nodes (rendezvous placement)
  const ids: string[] = [];
  for (let k = 0; k < 6; k++) ids.push(await runWorkflow(A, s, wf, { prompt: `run ${k}` }));
  const streams = await Promise.all(ids.map((id) => SseClient.connect(`${c.nodes[2]?.baseUrl}/r/tasks/${id}/events`, { Authorization: `Bearer ${s.sk.value}`, 'Last-Event-ID': '0' })));
  await Promise.all(streams.map((sse) => sse.until((x) => x.ended, 90_000, 'the stream ends after the terminal event')));

  for (const [k, sse] of streams.entries()) {
    const id = ids[k] as string;
    const rows = await queryEvents(id);
    const sent = sse.messages.map((m) => Number(m.id));
    // once and in order: strictly increasing ids; every transition row of the task was sent
    for (let i = 1; i < sent.length; i++) assert.ok((sent[i] as number) > (sent[i - 1] as number), `task ${id}: ids strictly increase: ${sent.join(',')}`);
    const transitions = rows.filter((r) => r.event_type !== 'progress').map((r) => Number(r.id));
    for (const tid of transitions) assert.ok(sent.includes(tid), `task ${id}: transition event ${tid} was sent (sent ${sent.join(',')})`);
    assert.equal(sse.messages.at(-1)?.event, 'completed', `task ${id} completed`);
  }
  // the work was spread: the task actors ran on more than one node (each node logs the transitions it makes)
  const writers = new Set<number>();
  for (const nd of c.nodes) for (const l of nd.lines) if (l.msg === 'task transition' && ids.includes(l.task_id)) writers.add(nd.index);
  assert.ok(writers.size >= 2, `task transitions were made on ${writers.size} node(s)`);
});

test('a revoked sk- is refused on every node on its next request', { skip: skip ?? false, timeout: 60_000 }, async () => {
  const A = asNode(0);
  const s = await setupTeam(A);
  // every node has verified (and cached) the key
  const probe = `/r/tasks/${randomUUID()}`;
  for (const nd of c.nodes) assert.equal((await nd.http.get(probe, { token: s.sk.value })).status, 404, `${nd.name} accepts the key (an unknown task is a 404)`);
  const del = await c.nodes[1]?.http.del(`/credentials/${s.sk.id}`, { token: s.user.accessToken, team: s.user.teamId });
  assert.ok(del && del.status < 300, `revoke on node B: ${del?.status} ${del?.text}`);
  // the very next request on every node is refused
  for (const nd of c.nodes) {
    const r = await nd.http.get(probe, { token: s.sk.value });
    assert.equal(r.status, 401, `${nd.name} refuses the revoked key at once (got ${r.status})`);
  }
});

test('an SSE stream opened with an sk- on node C ends (final comment credential_revoked) when the sk- is revoked through node B', { skip: skip ?? false, timeout: 60_000 }, async () => {
  const A = asNode(0);
  const s = await setupTeam(A);
  const wf = await createWorkflow(A, s, tinyGraph());
  const id = await runWorkflow(A, s, wf, { prompt: 'nobody runs this' }); // no agent: it waits
  const sse = await SseClient.connect(`${c.nodes[2]?.baseUrl}/r/tasks/${id}/events`, { Authorization: `Bearer ${s.sk.value}` });
  assert.equal(sse.status, 200, sse.body);
  await sse.until((x) => x.messages.length >= 1, 10_000, 'the current status');
  const del = await c.nodes[1]?.http.del(`/credentials/${s.sk.id}`, { token: s.user.accessToken, team: s.user.teamId });
  assert.ok(del && del.status < 300, `revoke on node B: ${del?.status} ${del?.text}`);
  await sse.until((x) => x.ended, 10_000, 'the stream on node C ends');
  assert.ok(sse.comments.includes('stream ended: credential_revoked'), JSON.stringify(sse.comments));
});

test("a password reset through node C ends the user's dk- on every node and the paired ak-'s agent stream on node B", { skip: skip ?? false, timeout: 60_000 }, async () => {
  const A = asNode(0);
  const s = await setupTeam(A);
  const dev = await pairDevice(c.nodes[0]!.http, s.user);
  const p = agentOn(1, { ...s, ak: { id: '', value: dev.agentCredential } });
  await waitFor('the paired agent online', async () => {
    const r = await c.nodes[0]?.http.get('/agents', { token: s.user.accessToken, team: s.user.teamId });
    return (r?.body.agent_list as Array<Record<string, any>> | undefined)?.some((a) => a.agent_status === 'online');
  }, 30_000);
  // every node has verified (and cached) the dk-
  for (const nd of c.nodes) {
    assert.equal((await nd.http.get('/users/me', { token: dev.deviceCredential })).status, 200, `${nd.name} accepts the dk-`);
    assert.equal((await nd.http.get('/r/tasks', { token: dev.deviceCredential })).status, 200, `${nd.name} accepts the dk- on /r/tasks`);
  }
  assert.equal((await c.nodes[0]?.http.post('/auth/password/forgot', { email_address: s.user.email }))?.status, 200);
  const token = await resetToken(s.user.email);
  const reset = await c.nodes[2]?.http.post('/auth/password/reset', { reset_token: token, new_password: 'a brand new password' });
  assert.equal(reset?.status, 200, reset?.text);
  for (const nd of c.nodes)
    for (const path of ['/users/me', '/r/tasks']) {
      const r = await nd.http.get(path, { token: dev.deviceCredential });
      assert.equal(r.status, 401, `${nd.name} refuses the dk- on ${path} at once (got ${r.status})`);
      assert.equal(r.body.error_code, 'credential_revoked');
    }
  const exit = await Promise.race([p.exited, new Promise<null>((r) => setTimeout(() => r(null), 20_000))]);
  assert.ok(exit, 'the paired agent was disconnected and refused for good');
  assert.equal(exit?.code, 3, 'exit 3: refused by the server');
});

async function resetToken(email: string): Promise<string> {
  const pg = await import('pg');
  const client = new pg.default.Client({ connectionString: c.db.url });
  await client.connect();
  try {
    const r = await client.query<{ body_text: string }>(`select body_text from email_outbox where lower(to_address) = lower($1) and email_kind = 'password_reset' order by created_at desc limit 1`, [email]);
    const t = /token=([0-9A-Za-z]+)/.exec(r.rows[0]?.body_text ?? '')?.[1];
    if (!t) throw new Error(`no password reset email to ${email}`);
    return t;
  } finally {
    await client.end();
  }
}

async function queryEvents(taskId: string): Promise<Array<{ id: string; event_type: string }>> {
  const pg = await import('pg');
  const client = new pg.default.Client({ connectionString: c.db.url });
  await client.connect();
  try {
    return (await client.query<{ id: string; event_type: string }>('select id, event_type from task_events where task_id = $1 order by id', [taskId])).rows;
  } finally {
    await client.end();
  }
}

test('an agent deleted through node A while its stream is on node B is disconnected for good', { skip: skip ?? false, timeout: 60_000 }, async () => {
  const A = asNode(0);
  const s = await setupTeam(A);
  const p = agentOn(1, s);
  const agent = await waitFor('the agent online', async () => {
    const r = await c.nodes[0]?.http.get('/agents', { token: s.user.accessToken, team: s.user.teamId });
    return (r?.body.agent_list as Array<Record<string, any>> | undefined)?.find((a) => a.agent_status === 'online');
  }, 30_000);
  const tunnel = await c.nodes[0]?.http.get(`/agents/${agent.id}/tunnel`, { token: s.user.accessToken, team: s.user.teamId });
  assert.equal(tunnel?.body.is_active, true, 'node A knows the stream is live on node B');
  const del = await c.nodes[0]?.http.del(`/agents/${agent.id}`, { token: s.user.accessToken, team: s.user.teamId });
  assert.equal(del?.status, 200, del?.text);
  const exit = await Promise.race([p.exited, new Promise<null>((r) => setTimeout(() => r(null), 20_000))]);
  assert.ok(exit, 'the agent process was refused for good and exited');
  assert.equal(exit?.code, 3, 'exit 3: refused by the server');
});

test('a workflow updated through node A is served updated by node C at once (its warm cache was invalidated before the PUT answered)', { skip: skip ?? false, timeout: 60_000 }, async () => {
  const A = asNode(0);
  const s = await setupTeam(A);
  const wf = await createWorkflow(A, s, tinyGraph(), { display_name: 'before' });
  const C = c.nodes[2];
  // warm node C's cache (the runtime read is served from it)
  for (let i = 0; i < 3; i++) assert.equal((await C?.http.get(`/r/workflows/${wf}`, { token: s.sk.value }))?.body.display_name, 'before');
  const put = await c.nodes[0]?.http.put(`/workflows/${wf}`, { display_name: 'after' }, { token: s.user.accessToken, team: s.user.teamId });
  assert.equal(put?.status, 200, put?.text);
  const r = await C?.http.get(`/r/workflows/${wf}`, { token: s.sk.value });
  assert.equal(r?.body.display_name, 'after', 'no stale head on another node');
  assert.equal(r?.body.version, 2);
});
