/**
 * Issue 33: a node restart while an agent uploads a finished run's output does not cost the run.
 * A real node (child process, local object store) behind a TCP front proxy (GANTRY_PUBLIC_URL
 * points at it, as at a load balancer: the presigned PUT URLs name it), a real simulate agent. The
 * proxy holds the first output PUT that reaches it (its bytes are not passed on), the node is
 * SIGKILLed, which drops that PUT ("fetch failed" at the agent), and started again on the same
 * ports and database. The agent presigns again once its stream is back and PUTs again: the run
 * completes as attempt 1 (no retry task) and its output downloads.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import pg from 'pg';
import { childNodeSetup, serveChild, type ChildNodeSetup } from '../helpers/child-node.js';
import { HttpClient, type TestNode } from '../helpers/node.js';
import { PgProxy } from '../helpers/pg-proxy.js';
import { AGENT_TRANSPORTS, agentServer, createWorkflow, runWorkflow, setupTeam, spawnAgent, tinyGraph, tmpDir, waitTask, type AgentProcess } from './helpers.js';

const PNG_SIG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/**
 * A TCP proxy in front of the node's HTTP port (PgProxy with a hold rule). With holdUpload() armed,
 * the next connection whose request starts with `PUT /storage/` gets nothing passed upstream: it
 * stays pending until its upstream goes away.
 */
class FrontProxy {
  private arm: (() => void) | null = null;
  /** Request lines of the PUTs to /storage/ that reached the proxy. */
  storagePuts: string[] = [];
  private readonly tcp = new PgProxy('127.0.0.1', 0, (d, first) => {
    if (!first) return false;
    const line = d.subarray(0, Math.max(0, d.indexOf('\r\n'))).toString('latin1');
    if (!line.startsWith('PUT /storage/')) return false;
    this.storagePuts.push(line);
    const a = this.arm;
    if (!a) return false;
    this.arm = null;
    a();
    return true;
  });

  get port(): number {
    return this.tcp.port;
  }
  set targetPort(p: number) {
    this.tcp.targetPort = p;
  }

  start(): Promise<void> {
    return this.tcp.start();
  }

  /** Resolves when the next output PUT arrives (and is being held). */
  holdUpload(): Promise<void> {
    return new Promise((resolve) => (this.arm = resolve));
  }

  stop(): Promise<void> {
    return this.tcp.stop();
  }
}

const proxy = new FrontProxy();
let setup: ChildNodeSetup;
let node: Awaited<ReturnType<typeof serveChild>> | null = null;
let sql: pg.Client;
const agents: AgentProcess[] = [];

before(async () => {
  await proxy.start();
  setup = await childNodeSetup('upload_restart', 'upload-restart', {
    GANTRY_PUBLIC_URL: `http://127.0.0.1:${proxy.port}`,
    // longer than the restart: the agent is not declared lost meanwhile
    GANTRY_AGENT_GRACE_S: '60',
    GANTRY_HEARTBEAT_INTERVAL_S: '1',
    LOG_LEVEL: 'info',
  });
  proxy.targetPort = setup.httpPort;
  node = await serveChild(setup.env);
  sql = new pg.Client({ connectionString: setup.db.url });
  await sql.connect();
});

after(async () => {
  for (const a of agents) a.kill('SIGKILL');
  await Promise.all(agents.map((a) => a.exited));
  node?.child.kill('SIGKILL');
  await node?.exit;
  await proxy.stop();
  await sql?.end();
  await setup?.db.drop();
  if (setup) rmSync(setup.dataDir, { recursive: true, force: true });
});

for (const transport of AGENT_TRANSPORTS) {
  test(`[${transport}] the node the agent uploads an output to is killed and restarted mid-upload: the run completes as attempt 1, its output downloads`, { timeout: 180_000 }, async () => {
    const http = new HttpClient(`http://127.0.0.1:${setup.httpPort}/api/v1`);
    const t = { http } as unknown as TestNode;
    const s = await setupTeam(t);
    // a retry is allowed: without the agent's upload retry, the failed attempt's retry is what would complete
    const wf = await createWorkflow(t, s, tinyGraph(), { max_retries: 1 });
    const agent = spawnAgent(['--server', agentServer(setup, transport), '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-upload-restart-agent-'), '--simulate-duration-ms', '300', '--simulate-steps', '3']);
    agents.push(agent);
    await agent.waitLine((l) => l.msg === 'connected to the server' && l.transport === transport, 'connected', 30_000);

    const putsBefore = proxy.storagePuts.length;
    const held = proxy.holdUpload();
    const taskId = await runWorkflow(t, s, wf, { prompt: `upload restart ${transport}` });
    await held;

    // the node goes away with the PUT pending, and comes back on the same ports and database
    const old = node as NonNullable<typeof node>;
    old.child.kill('SIGKILL');
    await old.exit;
    node = await serveChild(setup.env);

    const done = await waitTask(t, s, taskId, (x) => ['completed', 'failed', 'cancelled'].includes(x.task_status as string), 'terminal', 120_000);
    const rows = (await sql.query('select id, task_status, attempt, retry_task_id, task_error from tasks where team_id = $1', [s.user.teamId])).rows;
    assert.equal(done.task_status, 'completed', `task: ${JSON.stringify(done)}; rows: ${JSON.stringify(rows)}`);
    assert.equal(rows.length, 1, `one task row, no retry: ${JSON.stringify(rows)}`);
    assert.equal(rows[0].attempt, 1);
    assert.equal(rows[0].retry_task_id, null);

    // the agent saw the PUT fail and tried again (through the proxy: the held PUT and at least one more)
    assert.ok(agent.lines.some((l) => l.includes('output upload failed; retrying') && l.includes(taskId)), 'the agent logged the failed upload it retried');
    assert.ok(proxy.storagePuts.length - putsBefore >= 2, `PUTs through the proxy: ${JSON.stringify(proxy.storagePuts.slice(putsBefore))}`);

    // the output is in the store, under attempt 1's key, and its download URL serves it
    const res = await http.get(`/r/tasks/${taskId}/result`, { token: s.sk.value });
    assert.equal(res.status, 200, res.text);
    const out = res.body.output;
    assert.equal(out.storage_key, `teams/${s.user.teamId}/outputs/${taskId}/1/output.png`);
    const dl = await fetch(res.body.download_url as string);
    assert.equal(dl.status, 200);
    const bytes = Buffer.from(await dl.arrayBuffer());
    assert.ok(bytes.subarray(0, 8).equals(PNG_SIG), 'the download is the PNG');
    assert.equal(bytes.length, out.outputs[0].size);

    agent.kill('SIGKILL');
    await agent.exited;
  });
}
