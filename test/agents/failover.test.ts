// An agent given several servers (`--server a,b`: a cluster's nodes) fails over when its node dies:
// a two-node cluster, the agent on the first node with a task running, the first node SIGKILLed;
// the agent reconnects to the second node, its hello reports the running task, which completes
// there, and a task submitted afterwards runs on it too.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, clusterSkipReason, type TestCluster, type ClusterNodeProc } from '../helpers/cluster.js';
import { setupTeam, createWorkflow, runWorkflow, spawnAgent, tmpDir, tinyGraph, waitTask, type AgentProcess } from './helpers.js';
import type { TestNode } from '../helpers/node.js';
import { parseAgentArgs, agentUsage, UsageError } from '../../src/agent/main.js';

let c: TestCluster | null = null;
let agent: AgentProcess | null = null;
after(async () => {
  agent?.kill('SIGKILL');
  await agent?.exited;
  await c?.stop();
});

const skip = clusterSkipReason();

test('the agent fails over to the next server of its list when its node dies, and keeps working there', { skip: skip ?? false, timeout: 180_000 }, async () => {
  c = await startCluster({ nodes: 2, leaseMs: 1500 });
  const [n0, n1] = c.nodes as [ClusterNodeProc, ClusterNodeProc];
  const via = (n: ClusterNodeProc): TestNode => ({ http: n.http }) as unknown as TestNode;
  const s = await setupTeam(via(n0));
  const wf = await createWorkflow(via(n0), s, tinyGraph(), { max_retries: 0 });
  const a0 = `127.0.0.1:${n0.grpcPort}`;
  const a1 = `127.0.0.1:${n1.grpcPort}`;
  agent = spawnAgent(['--server', `${a0},${a1}`, '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-failover-agent-'), '--simulate-duration-ms', '4000', '--simulate-steps', '8']);
  const ag = agent;
  await ag.waitLine((l) => l.msg === 'connected to the server' && l.server === a0, 'connected to the first server', 30_000);

  // a task running on the agent while its node dies
  const running = await runWorkflow(via(n1), s, wf, { prompt: 'before' });
  await waitTask(via(n1), s, running, (t) => t.task_status === 'running', 'running');
  const linesBefore = ag.lines.length;
  await c.kill(0, 'SIGKILL');

  const reconnected = await ag.waitLine((l) => l.msg === 'connected to the server' && l.server === a1, 'reconnected to the second server', 60_000);
  assert.ok(typeof reconnected.session_id === 'string');
  assert.ok(
    ag.lines.slice(linesBefore).some((l) => l.includes('agent stream ended; reconnecting') && l.includes(a0)),
    'the agent saw its stream to the first server end',
  );
  assert.equal(n0.alive(), false, 'the first node is gone');

  // the task that was running survives the failover (max_retries 0: not re-run elsewhere) and completes
  const t1 = await waitTask(via(n1), s, running, (t) => ['completed', 'failed', 'cancelled'].includes(t.task_status as string), 'terminal', 60_000);
  assert.equal(t1.task_status, 'completed', `the running task: ${JSON.stringify(t1)}`);
  // and the agent takes new work through the surviving node
  const next = await runWorkflow(via(n1), s, wf, { prompt: 'after' });
  const t2 = await waitTask(via(n1), s, next, (t) => ['completed', 'failed', 'cancelled'].includes(t.task_status as string), 'terminal', 60_000);
  assert.equal(t2.task_status, 'completed', `the new task: ${JSON.stringify(t2)}`);
});

test('--server takes one HOST:PORT or a comma-separated list of them; every entry is checked', () => {
  const base = ['--credential', 'ak-x', '--executor', 'simulate'];
  assert.equal(parseAgentArgs(['--server', 'a:50051,b.example:50052', ...base], {})?.server, 'a:50051,b.example:50052');
  assert.equal(parseAgentArgs(base, { GANTRY_AGENT_SERVER: 'a:1,b:2' })?.server, 'a:1,b:2', 'the env var takes the list too');
  for (const bad of ['a:1,,b:2', 'a:1,b', 'a:1,b:x', 'a:1,http://b:2', 'a:1,b:2,'])
    assert.throws(() => parseAgentArgs(['--server', bad, ...base], {}), (e: unknown) => e instanceof UsageError && /HOST:PORT/.test(e.message), bad);
  assert.match(agentUsage(), /--server HOST:PORT\[,HOST:PORT\.\.\.\]/);
});
