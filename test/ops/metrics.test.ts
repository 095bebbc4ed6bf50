// Metrics for operators and autoscalers, read from a live /metrics: the queue-depth gauge of a
// required-label set rises with waiting tasks and falls when an agent with those labels connects;
// tasks by state, oldest-waiting age, agents by status and GPU type, this node's streams, the
// scheduler's queue-wait histogram and finished-task counter.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { FakeAgent } from '../helpers/fake-agent.js';
import { newTeam, submitTask, waitForStatus } from '../helpers/tasks.js';
import { SCHEDULER } from '../../src/actors/index.js';

let t: TestNode;
const agents: FakeAgent[] = [];

before(async () => {
  // no cache between scrapes: each read below sees PostgreSQL as it is
  t = await startTestNode({ GANTRY_METRICS_CACHE_MS: 0 }, 'ops-metrics');
});

after(async () => {
  for (const a of agents) await a.disconnect().catch(() => undefined);
  await t?.stop();
});

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

async function scrape(): Promise<Sample[]> {
  const r = await fetch(`${t.origin}/metrics`);
  assert.equal(r.status, 200);
  const out: Sample[] = [];
  for (const line of (await r.text()).split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[k as string] = v as string;
    out.push({ name: m[1] as string, labels, value: Number(m[3]) });
  }
  return out;
}

const value = (samples: Sample[], name: string, labels: Record<string, string>): number | undefined =>
  samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;

/** Asks the team's scheduler for its stats: answered once it is quiescent (every pass done). */
const settled = (team: string): Promise<unknown> => t.node.actors.ask({ kind: SCHEDULER, id: team }, { type: 'stats' });

test('queue depth per team and label set: rises with waiting tasks, falls when an agent with those labels connects', async () => {
  const team = newTeam();
  const gpu = { team_id: team, required_labels: 'a100,fast' };
  const other = { team_id: team, required_labels: 'cpu' };
  const before = await scrape();
  assert.equal(value(before, 'gantry_queue_depth', gpu), undefined, 'no series before any task');

  const ids: string[] = [];
  // the labels as the workflow lists them (unsorted): the series names them sorted
  for (let i = 0; i < 3; i++) ids.push(await submitTask(t.node, team, { requiredLabels: ['fast', 'a100'] }));
  await submitTask(t.node, team, { requiredLabels: ['cpu'] });
  await settled(team);
  let s = await scrape();
  assert.equal(value(s, 'gantry_queue_depth', gpu), 3, 'three tasks wait for a100+fast');
  assert.equal(value(s, 'gantry_queue_depth', other), 1);
  assert.equal((value(s, 'gantry_tasks', { team_id: team, task_status: 'waiting' }) ?? 0) + (value(s, 'gantry_tasks', { team_id: team, task_status: 'pending' }) ?? 0), 4, 'tasks by state');
  const oldest = value(s, 'gantry_queue_oldest_waiting_seconds', gpu) ?? -1;
  assert.ok(oldest >= 0 && oldest < 60, `oldest waiting age in seconds (${oldest})`);

  // an agent with only one of the two labels takes none of them
  const partial = await new FakeAgent(t.node, { teamId: team, labels: ['a100'], slots: 3 }).connect();
  agents.push(partial);
  await settled(team);
  s = await scrape();
  assert.equal(value(s, 'gantry_queue_depth', gpu), 3, 'an agent lacking a label does not drain the queue');

  // one with both labels (and room for all three) does
  const full = await new FakeAgent(t.node, { teamId: team, labels: ['a100', 'fast', 'extra'], slots: 3, gpus: [{ name: 'NVIDIA A100-SXM4-80GB', vram_gb: 80 }] }).connect();
  agents.push(full);
  for (const id of ids) await waitForStatus(t.node, id, 'queued');
  s = await scrape();
  assert.equal(value(s, 'gantry_queue_depth', gpu), 0, 'the label set\'s queue drained (the series stays, at 0)');
  assert.equal(value(s, 'gantry_queue_oldest_waiting_seconds', gpu), 0);
  assert.equal(value(s, 'gantry_queue_depth', other), 1, 'another label set is unaffected');
  assert.equal(value(s, 'gantry_tasks', { team_id: team, task_status: 'queued' }), 3);
  assert.ok((value(s, 'gantry_agents', { gpu_type: 'NVIDIA A100-SXM4-80GB', agent_status: 'online' }) ?? value(s, 'gantry_agents', { gpu_type: 'NVIDIA A100-SXM4-80GB', agent_status: 'busy' }) ?? 0) >= 1, 'agents by status and GPU type');
  assert.ok((value(s, 'gantry_agent_streams', {}) ?? 0) >= 2, 'agent streams held by this node');
  const waits = value(s, 'gantry_scheduler_queue_wait_seconds_count', {}) ?? 0;
  assert.ok(waits >= 3, `scheduler latency observed per assignment (${waits})`);

  // the agent runs them: finished tasks are counted, the queued ones leave the state gauge
  const finishedBefore = value(s, 'gantry_tasks_finished_total', { task_status: 'completed' }) ?? 0;
  for (const id of ids) {
    const a = await full.assignment(id);
    full.ack(a);
    await waitForStatus(t.node, id, 'running');
    full.finish(a);
    await waitForStatus(t.node, id, 'completed');
  }
  s = await scrape();
  assert.equal(value(s, 'gantry_tasks_finished_total', { task_status: 'completed' }), finishedBefore + 3);
  assert.equal(value(s, 'gantry_tasks', { team_id: team, task_status: 'queued' }) ?? 0, 0);
  assert.equal(value(s, 'gantry_tasks', { team_id: team, task_status: 'running' }) ?? 0, 0);
});

test('the PostgreSQL-derived figures are cached for GANTRY_METRICS_CACHE_MS between scrapes; the node\'s own are live', async () => {
  const c = await startTestNode({ GANTRY_METRICS_CACHE_MS: 60_000 }, 'ops-metrics-cache');
  try {
    const team = newTeam();
    const read = async (): Promise<number | undefined> => {
      const text = await (await fetch(`http://127.0.0.1:${c.node.httpPort}/metrics`)).text();
      const m = new RegExp(`^gantry_queue_depth\\{team_id="${team}",required_labels=""\\} (\\d+)$`, 'm').exec(text);
      return m ? Number(m[1]) : undefined;
    };
    await read();
    await submitTask(c.node, team);
    assert.equal(await read(), undefined, 'within the cache window the earlier snapshot is served');
  } finally {
    await c.stop();
  }
});
