/**
 * The fair scheduler (issue 30) on a real node with real `gantry agent --executor simulate` child
 * processes: priority order, aging (a node with GANTRY_PRIORITY_AGING_S=1), a credential's
 * max_concurrent_tasks (PUT /credentials/{id}/scheduling; tasks wait, no 429), fair share between
 * two submitters, warm placement (an agent reporting the task's model loaded, and the agent that
 * last ran the workflow version), tool_type as a placement constraint, and preferred_gpu as a
 * case-insensitive substring of the GPU name. The run order is read from the tasks' started_at:
 * tasks are submitted before the one agent (one slot) connects, so every pass places one task.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { createCredential } from '../helpers/identity.js';
import { AGENT_TRANSPORTS, agentServer, agentsOf, createWorkflow, setupTeam, spawnAgent, tinyGraph, tmpDir, waitFor, waitTask, type AgentProcess, type AgentTransportKind, type TeamSetup } from './helpers.js';

let t: TestNode;
let tAging: TestNode;
const procs: AgentProcess[] = [];
before(async () => {
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1 }, 'sched_fair');
  tAging = await startTestNode({ GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1, GANTRY_PRIORITY_AGING_S: 1 }, 'sched_aging');
});
after(async () => {
  for (const p of procs) p.kill('SIGKILL');
  await Promise.all(procs.map((p) => p.exited));
  await t.stop();
  await tAging.stop();
});

function agent(node: TestNode, s: TeamSetup, extra: string[] = [], transport: AgentTransportKind = 'grpc'): AgentProcess {
  const p = spawnAgent(['--server', agentServer(node.node, transport), '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-agent-state-'), '--simulate-duration-ms', '300', '--simulate-steps', '2', ...(extra.includes('--gpu') ? [] : ['--gpu', 'NVIDIA RTX 4090:24']), ...extra]);
  procs.push(p);
  return p;
}

const online = (node: TestNode, s: TeamSetup, n: number): Promise<Array<Record<string, any>>> =>
  waitFor(`${n} online agent(s)`, async () => {
    const on = (await agentsOf(node, s)).filter((a) => a.agent_status !== 'offline');
    return on.length >= n ? on : null;
  }, 30_000);

async function run(node: TestNode, token: string, wf: string, body: Record<string, unknown> = {}): Promise<string> {
  const r = await node.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'x' }, ...body }, { token });
  assert.equal(r.status, 202, r.text);
  return r.body.task_id as string;
}

const done = (node: TestNode, s: TeamSetup, id: string): Promise<Record<string, any>> => waitTask(node, s, id, (x) => ['completed', 'failed', 'cancelled'].includes(x.task_status), 'terminal', 60_000);

/** Task ids in the order they started running. */
async function runOrder(node: TestNode, s: TeamSetup, ids: string[]): Promise<string[]> {
  const tasks = await Promise.all(ids.map((id) => done(node, s, id)));
  for (const x of tasks) assert.equal(x.task_status, 'completed', JSON.stringify(x));
  return [...tasks].sort((a, b) => Date.parse(a.started_at) - Date.parse(b.started_at)).map((x) => x.task_id as string);
}

test('priority: higher priority (lower number) runs first, FIFO within a priority; out-of-range priority is 400; a workflow default applies', async () => {
  const s = await setupTeam(t);
  const wf = await createWorkflow(t, s, tinyGraph());
  const wfLow = await createWorkflow(t, s, tinyGraph(), { default_priority: 5 });
  for (const bad of [0, 6, 2.5, 'high']) {
    const r = await t.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'x' }, priority: bad }, { token: s.sk.value });
    assert.equal(r.status, 400, `priority ${JSON.stringify(bad)}: ${r.text}`);
    assert.equal(r.body.error_code, 'invalid_parameter', r.text);
  }
  const p5 = await run(t, s.sk.value, wf, { priority: 5 });
  const wdef = await run(t, s.sk.value, wfLow); // the workflow's default_priority 5
  const p3 = await run(t, s.sk.value, wf, { priority: 3 });
  const p1 = await run(t, s.sk.value, wf, { priority: 1 });
  const def = await run(t, s.sk.value, wf); // 3
  const p2 = await run(t, s.sk.value, wf, { priority: 2 });
  agent(t, s);
  assert.deepEqual(await runOrder(t, s, [p5, wdef, p3, p1, def, p2]), [p1, p2, p3, def, p5, wdef]);
  const w = await t.http.get(`/workflows/${wfLow}`, { token: s.user.accessToken, team: s.user.teamId });
  assert.equal(w.body.default_priority, 5);
});

test('aging: a priority-5 task that waited rises above later priority-3 tasks (GANTRY_PRIORITY_AGING_S=1)', async () => {
  const s = await setupTeam(tAging);
  const wf = await createWorkflow(tAging, s, tinyGraph());
  const low = await run(tAging, s.sk.value, wf, { priority: 5 });
  await new Promise((r) => setTimeout(r, 3500)); // three aging intervals: 5 -> 2
  const high = [await run(tAging, s.sk.value, wf, { priority: 3 }), await run(tAging, s.sk.value, wf, { priority: 3 })];
  agent(tAging, s);
  const order = await runOrder(tAging, s, [low, ...high]);
  assert.equal(order[0], low, `the aged task runs first: ${JSON.stringify(order)}`);
});

test('per-credential max_concurrent_tasks: its tasks wait (202, no 429) and never run two at once; other submitters use the free slots', async () => {
  const s = await setupTeam(t);
  const sk2 = await createCredential(t.http, s.user, 'integration');
  const put = await t.http.put(`/credentials/${s.sk.id}/scheduling`, { max_concurrent_tasks: 1 }, { token: s.user.accessToken, team: s.user.teamId });
  assert.equal(put.status, 200, put.text);
  assert.deepEqual(put.body, { id: s.sk.id });
  const got = await t.http.get(`/credentials/${s.sk.id}/scheduling`, { token: s.user.accessToken, team: s.user.teamId });
  assert.deepEqual(got.body, { credential_id: s.sk.id, scheduling_weight: 1, max_concurrent_tasks: 1 });
  assert.equal((await t.http.put(`/credentials/${s.sk.id}/scheduling`, { max_concurrent_tasks: 0 }, { token: s.user.accessToken, team: s.user.teamId })).status, 400);
  assert.equal((await t.http.put(`/credentials/${s.ak.id}/scheduling`, { scheduling_weight: 2 }, { token: s.user.accessToken, team: s.user.teamId })).status, 404, 'agent credentials submit no tasks');
  assert.equal((await t.http.get(`/credentials/${s.sk.id}/scheduling`, { token: s.sk.value })).status, 403, 'sk- may not read it');
  const wf = await createWorkflow(t, s, tinyGraph());
  const capped = [await run(t, s.sk.value, wf), await run(t, s.sk.value, wf), await run(t, s.sk.value, wf)];
  const other = [await run(t, sk2.value, wf), await run(t, sk2.value, wf)];
  agent(t, s, ['--concurrency', '4', '--simulate-duration-ms', '800']);
  const tasks = await Promise.all([...capped, ...other].map((id) => done(t, s, id)));
  for (const x of tasks) assert.equal(x.task_status, 'completed');
  const spans = tasks.slice(0, 3).map((x) => [Date.parse(x.started_at), Date.parse(x.finished_at)] as const).sort((a, b) => a[0] - b[0]);
  for (let i = 1; i < spans.length; i++) assert.ok((spans[i] as readonly number[])[0]! >= (spans[i - 1] as readonly number[])[1]!, `the capped credential's tasks overlap: ${JSON.stringify(spans)}`);
  // the other submitter did not wait behind the capped one: both its tasks started before the capped one's last
  const lastCapped = Math.max(...tasks.slice(0, 3).map((x) => Date.parse(x.started_at)));
  for (const x of tasks.slice(3)) assert.ok(Date.parse(x.started_at) < lastCapped);
});

test('fair share: a second submitter is not starved behind a first one that queued earlier (FIFO within a submitter)', async () => {
  const s = await setupTeam(t);
  const sk2 = await createCredential(t.http, s.user, 'integration');
  const wf = await createWorkflow(t, s, tinyGraph());
  const heavy: string[] = [];
  for (let i = 0; i < 6; i++) heavy.push(await run(t, s.sk.value, wf));
  const light = [await run(t, sk2.value, wf), await run(t, sk2.value, wf), await run(t, sk2.value, wf)];
  agent(t, s);
  const order = await runOrder(t, s, [...heavy, ...light]);
  // alternating by GPU-seconds used: the light submitter's three run among the first six
  const firstSix = order.slice(0, 6);
  for (const id of light) assert.ok(firstSix.includes(id), `light task ${id} ran late: ${JSON.stringify(order.map((x) => (light.includes(x) ? 'L' : 'H')))}`);
  // FIFO within each submitter
  assert.deepEqual(order.filter((x) => heavy.includes(x)), heavy);
  assert.deepEqual(order.filter((x) => light.includes(x)), light);
  // what a restarted scheduler seeds its fair-share ledger with: every run, its submitter, released
  const seed = await t.node.taskStore.recentUsage(s.user.teamId, Date.now() - 3600_000);
  const bySub = new Map<string, number>();
  for (const r of seed) {
    assert.ok(r.end !== null && r.end >= r.start && r.gpus === 1, JSON.stringify(r));
    bySub.set(r.submitter, (bySub.get(r.submitter) ?? 0) + 1);
  }
  assert.deepEqual(Object.fromEntries(bySub), { [s.sk.id]: 6, [sk2.id]: 3 });
});

for (const transport of AGENT_TRANSPORTS)
  test(`[${transport}] warm placement: the agent reporting the task's model loaded wins over the least recently used; then the agent that last ran the workflow version`, async () => {
    const s = await setupTeam(t);
    const models = tmpDir('gantry-models-');
    mkdirSync(join(models, 'checkpoints'), { recursive: true });
    writeFileSync(join(models, 'checkpoints', 'warm.safetensors'), 'x');
    // the cold agent registers first: with no warmth it would win the tie (lower id, equally unused)
    agent(t, s, ['--models-dir', models, '--name', 'cold'], transport);
    await online(t, s, 1);
    agent(t, s, ['--models-dir', models, '--name', 'warm', '--simulate-loaded', 'checkpoints/warm.safetensors'], transport);
    const agents = await online(t, s, 2);
    const warm = agents.find((a) => a.display_name === 'warm')!;
    const cold = agents.find((a) => a.display_name === 'cold')!;
    const wf = await createWorkflow(t, s, tinyGraph(), { required_models: ['checkpoints/warm.safetensors'] });
    const first = await done(t, s, await run(t, s.sk.value, wf));
    assert.equal(first.agent_id, warm.id, `placed on ${first.agent_id === cold.id ? 'the cold agent' : first.agent_id}`);
    // a workflow with no model: its second run goes where its first ran (not to the least recently used)
    const wf2 = await createWorkflow(t, s, tinyGraph());
    const a1 = (await done(t, s, await run(t, s.sk.value, wf2))).agent_id;
    const a2 = (await done(t, s, await run(t, s.sk.value, wf2))).agent_id;
    assert.equal(a2, a1, 'the agent that last ran the workflow version is preferred');
  });

test('tool_type is a placement constraint: a nerfstudio task goes only to an agent whose executor runs nerfstudio', async () => {
  const s = await setupTeam(t);
  agent(t, s, ['--simulate-tool-types', 'comfyui', '--name', 'comfy-only']);
  await online(t, s, 1);
  agent(t, s, ['--simulate-tool-types', 'nerfstudio', '--name', 'ns']);
  const agents = await online(t, s, 2);
  const ns = agents.find((a) => a.display_name === 'ns')!;
  const r = await t.http.post(
    '/workflows',
    { workflow_slug: `ns-${Math.random().toString(36).slice(2, 10)}`, display_name: 'splat', tool_type: 'nerfstudio', workflow_json: { method: 'splatfacto', data: { source: 'path', path: '/data/capture' }, process_data: { input_type: 'images' }, train: { max_num_iterations: 100 }, export: { format: 'gaussian-splat' } }, parameters: [] },
    { token: s.user.accessToken, team: s.user.teamId },
  );
  assert.equal(r.status, 200, r.text);
  for (let i = 0; i < 2; i++) {
    const x = await done(t, s, (await t.http.post(`/r/workflows/${r.body.id}/run`, {}, { token: s.sk.value })).body.task_id);
    assert.equal(x.task_status, 'completed', JSON.stringify(x));
    assert.equal(x.agent_id, ns.id);
  }
});

test('preferred_gpu matches case-insensitively as a substring of the GPU name ("a100" matches "NVIDIA A100-SXM4-80GB")', async () => {
  const s = await setupTeam(t);
  agent(t, s, ['--name', 'rtx']);
  await online(t, s, 1);
  agent(t, s, ['--name', 'a100', '--gpu', 'NVIDIA A100-SXM4-80GB:80']);
  const agents = await online(t, s, 2);
  const a100 = agents.find((a) => a.display_name === 'a100')!;
  const wf = await createWorkflow(t, s, tinyGraph(), { preferred_gpu: 'a100' });
  for (let i = 0; i < 2; i++) assert.equal((await done(t, s, await run(t, s.sk.value, wf))).agent_id, a100.id);
});
