// MCP sessions in a cluster: two node processes on one PostgreSQL and one Redis. A session
// initialized on node A has its follow-up requests served by node B and back (the session id is a
// signed token, no node keeps session state), and run_workflow_and_wait on node B follows a task run
// by an agent connected to node A (events cross nodes over the bus) with progress notifications.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { startCluster, startRedisServer, clusterSkipReason, type TestCluster } from '../helpers/cluster.js';
import { setupTeam, createWorkflow, spawnAgent, tmpDir, tinyGraph, waitFor, type AgentProcess } from '../agents/helpers.js';
import type { TestNode } from '../helpers/node.js';

const skip = clusterSkipReason();
let c: TestCluster;
let redis: Awaited<ReturnType<typeof startRedisServer>> = null;
const procs: AgentProcess[] = [];

before(async () => {
  if (skip) return;
  if (!process.env.REDIS_URL) redis = await startRedisServer();
  c = await startCluster({ nodes: 2, ...(redis ? { redisUrl: redis.url } : {}) });
});

after(async () => {
  for (const p of procs) p.kill('SIGKILL');
  await Promise.all(procs.map((p) => p.exited));
  await c?.stop();
  await redis?.stop();
});

test('a session started on node A is served by node B and back; waiting on B follows a task run through A', { skip: skip ?? false, timeout: 120_000 }, async () => {
  const A = { http: c.nodes[0]?.http } as unknown as TestNode;
  const s = await setupTeam(A);
  procs.push(spawnAgent(['--server', `127.0.0.1:${c.nodes[0]?.grpcPort}`, '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-mcp-cl-'), '--simulate-duration-ms', '2000', '--simulate-steps', '5']));
  await waitFor('the agent online (seen from node B)', async () => {
    const r = await c.nodes[1]?.http.get('/agents', { token: s.user.accessToken, team: s.user.teamId });
    return r?.status === 200 && (r.body.agent_list as Array<Record<string, any>>).some((a) => a.agent_status === 'online');
  }, 30_000);
  const wf = await createWorkflow(A, s, tinyGraph());

  // every request of the client goes to the next node in turn (initialize on A)
  const served: string[] = [];
  let turn = 0;
  const roundRobin: typeof fetch = (input, init) => {
    const node = c.nodes[turn++ % 2] as (typeof c.nodes)[number];
    const url = new URL(input instanceof Request ? input.url : String(input));
    url.port = String(node.httpPort);
    served.push(`${node.name}:${init?.method ?? 'GET'}`);
    return fetch(url, init);
  };
  const transport = new StreamableHTTPClientTransport(new URL(`${c.nodes[0]?.baseUrl}/mcp?sessions=1`), { fetch: roundRobin, requestInit: { headers: { authorization: `Bearer ${s.sk.value}` } } });
  const client = new Client({ name: 'cluster-test', version: '1.0.0' });
  await client.connect(transport);
  try {
    assert.match(transport.sessionId ?? '', /^m1\./);
    for (let i = 0; i < 4; i++) assert.equal((await client.listTools()).tools.length, 15);
    const progress: number[] = [];
    const r = (await client.callTool({ name: 'run_workflow_and_wait', arguments: { workflow_id: wf, parameters: { prompt: 'cluster' }, timeout_s: 60 } }, undefined, { onprogress: (p) => progress.push(p.progress), timeout: 90_000 })) as CallToolResult;
    assert.ok(!r.isError, JSON.stringify(r.content));
    const out = r.structuredContent as Record<string, any>;
    assert.equal(out.task.task_status, 'completed');
    assert.ok(progress.length >= 2, `progress notifications: ${progress.join(',')}`);
    const nodesUsed = new Set(served.map((x) => x.split(':')[0]));
    assert.equal(nodesUsed.size, 2, `requests went to both nodes: ${served.join(' ')}`);
  } finally {
    await client.close();
  }
});
