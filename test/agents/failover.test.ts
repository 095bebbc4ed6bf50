// An agent given several servers (`--server a,b`: a cluster's nodes) fails over when its node dies:
// a two-node cluster, the agent on the first node with a task running, the first node SIGKILLed;
// the agent reconnects to the second node, its hello reports the running task, which completes
// there, and a task submitted afterwards runs on it too. The list mixes both transports: the first
// node over gRPC and the second over WebSocket, then the other way round (AGENT_TRANSPORTS).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, clusterSkipReason, type TestCluster, type ClusterNodeProc } from '../helpers/cluster.js';
import { AGENT_TRANSPORTS, agentServer, setupTeam, createWorkflow, runWorkflow, spawnAgent, tmpDir, tinyGraph, waitTask, type AgentProcess } from './helpers.js';
import type { TestNode } from '../helpers/node.js';
import { parseAgentArgs, agentUsage, UsageError } from '../../src/agent/main.js';
import { agentWsUrl, isWebSocketServer } from '../../src/agent/transport.js';

let c: TestCluster | null = null;
let agent: AgentProcess | null = null;
after(async () => {
  agent?.kill('SIGKILL');
  await agent?.exited;
  await c?.stop();
});

/** [first node's transport, second node's]: each transport first once, failing over to the other kind (or to itself when only one is tested). */
const pairs = AGENT_TRANSPORTS.map((first, i) => [first, AGENT_TRANSPORTS[(i + 1) % AGENT_TRANSPORTS.length] ?? first] as const);

const skip = clusterSkipReason();

for (const [first, second] of pairs) {
  test(`[${first} -> ${second}] the agent fails over to the next server of its list when its node dies, and keeps working there`, { skip: skip ?? false, timeout: 180_000 }, async () => {
    agent?.kill('SIGKILL');
    await agent?.exited;
    await c?.stop();
    c = await startCluster({ nodes: 2, leaseMs: 1500 });
    const [n0, n1] = c.nodes as [ClusterNodeProc, ClusterNodeProc];
    const via = (n: ClusterNodeProc): TestNode => ({ http: n.http }) as unknown as TestNode;
    const s = await setupTeam(via(n0));
    const wf = await createWorkflow(via(n0), s, tinyGraph(), { max_retries: 0 });
    const a0 = agentServer(n0, first);
    const a1 = agentServer(n1, second);
    agent = spawnAgent(['--server', `${a0},${a1}`, '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-failover-agent-'), '--simulate-duration-ms', '4000', '--simulate-steps', '8']);
    const ag = agent;
    await ag.waitLine((l) => l.msg === 'connected to the server' && l.server === a0 && l.transport === first, 'connected to the first server', 30_000);

    // a task running on the agent while its node dies
    const running = await runWorkflow(via(n1), s, wf, { prompt: 'before' });
    await waitTask(via(n1), s, running, (t) => t.task_status === 'running', 'running');
    const linesBefore = ag.lines.length;
    await c.kill(0, 'SIGKILL');

    const reconnected = await ag.waitLine((l) => l.msg === 'connected to the server' && l.server === a1 && l.transport === second, 'reconnected to the second server', 60_000);
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
}

test('--server takes HOST:PORT (gRPC) or ws[s]://HOST[:PORT] (WebSocket) entries, one or a comma-separated list mixing both; every entry is checked', () => {
  const base = ['--credential', 'ak-x', '--executor', 'simulate'];
  assert.equal(parseAgentArgs(['--server', 'a:50051,b.example:50052', ...base], {})?.server, 'a:50051,b.example:50052');
  assert.equal(parseAgentArgs(base, { GANTRY_AGENT_SERVER: 'a:1,b:2' })?.server, 'a:1,b:2', 'the env var takes the list too');
  for (const good of ['wss://gantry.example.com', 'ws://127.0.0.1:8080', 'wss://gantry.example.com:443/prefix', 'a:50051,wss://b.example', 'ws://[::1]:8080'])
    assert.equal(parseAgentArgs(['--server', good, ...base], {})?.server, good, good);
  for (const bad of ['a:1,,b:2', 'a:1,b', 'a:1,b:x', 'a:1,http://b:2', 'a:1,b:2,', 'ws://', 'wss://user:pw@b.example', 'ws://b.example/?x=1', 'https://b.example'])
    assert.throws(() => parseAgentArgs(['--server', bad, ...base], {}), (e: unknown) => e instanceof UsageError && /HOST:PORT/.test(e.message), bad);
  assert.match(agentUsage(), /--server HOST:PORT\|ws\[s\]:\/\/HOST\[:PORT\]\[,\.\.\.\]/);
});

test('a ws[s]:// entry connects to /api/v1/agents/connect under its path prefix; HOST:PORT entries are gRPC', () => {
  assert.equal(agentWsUrl('wss://gantry.example.com'), 'wss://gantry.example.com/api/v1/agents/connect');
  assert.equal(agentWsUrl('ws://127.0.0.1:8080/'), 'ws://127.0.0.1:8080/api/v1/agents/connect');
  assert.equal(agentWsUrl('wss://corp.example/gantry'), 'wss://corp.example/gantry/api/v1/agents/connect');
  assert.equal(agentWsUrl('wss://h/api/v1/agents/connect'), 'wss://h/api/v1/agents/connect');
  assert.equal(isWebSocketServer('WSS://h'), true);
  assert.equal(isWebSocketServer('h:50051'), false);
});
