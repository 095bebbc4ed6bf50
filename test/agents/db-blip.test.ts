/**
 * A 10-second database outage does not fail running tasks (issue 29, point 3). A real agent process
 * (`gantry agent --executor simulate`, five slots) runs five tasks; the node's PostgreSQL (this
 * file's own database, reached through a TCP proxy the test cuts: listener closed, every connection
 * reset) is unavailable for 10 s while they run and finish. The agent's output presign calls get
 * UNAVAILABLE database_unavailable meanwhile and retry until the database is back (before the fix
 * they gave up after five tries and failed the task), the node keeps the agent's stream open
 * through heartbeats it cannot record (before, it ended the stream with database_unavailable), and
 * every task completes once the database answers again. On both agent transports (AGENT_TRANSPORTS):
 * over the WebSocket the presign calls are request frames answered with UnaryError 14.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../src/shared/config.js';
import { createLogger } from '../../src/shared/logger.js';
import { startNode } from '../../src/main.js';
import { HttpClient, type TestNode } from '../helpers/node.js';
import { adminUrl, createTestDatabase } from '../helpers/pg.js';
import { PgProxy } from '../helpers/pg-proxy.js';
import { AGENT_TRANSPORTS, agentServer, setupTeam, createWorkflow, runWorkflow, spawnAgent, tinyGraph, tmpDir, waitFor, getTask, type AgentProcess } from './helpers.js';

/** How long the database is away: the scenario's own length (the issue's 10 s), not a wait for a condition. */
const OUTAGE_MS = 10_000;

for (const transport of AGENT_TRANSPORTS) {
  test(`[${transport}] a 10 s database outage while five tasks run: every task completes, no task fails, the agent stream stays up`, { timeout: 120_000 }, async () => {
    const db = await createTestDatabase(`dbblip_${transport}`);
    const admin = new URL(adminUrl());
    const proxy = new PgProxy(admin.hostname, Number(admin.port || 5432));
    await proxy.start();
    const url = new URL(db.url);
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    const dataDir = mkdtempSync(join(tmpdir(), 'gantry-blip-'));
    const config = loadConfig(
      {},
      {
        DATABASE_URL: url.toString(),
        GANTRY_DATA_DIR: dataDir,
        GANTRY_HTTP_HOST: '127.0.0.1',
        GANTRY_HTTP_PORT: 0,
        GANTRY_GRPC_HOST: '127.0.0.1',
        GANTRY_GRPC_PORT: 0,
        GANTRY_DB_POOL_MAX: 5,
        // heartbeats every second: the node sees several it cannot record during the outage
        GANTRY_HEARTBEAT_INTERVAL_S: 1,
      },
    );
    const node = await startNode(config, { logger: createLogger(process.env.TEST_LOG_LEVEL ?? 'silent') });
    const http = new HttpClient(node.baseUrl);
    const t = { http } as unknown as TestNode;
    let agent: AgentProcess | null = null;
    try {
      const s = await setupTeam(t);
      agent = spawnAgent([
        '--server',
        agentServer(node, transport),
        '--credential',
        s.ak.value,
        '--executor',
        'simulate',
        '--state-dir',
        tmpDir('gantry-agent-state-'),
        '--concurrency',
        '5',
        '--simulate-duration-ms',
        '5000',
        '--simulate-steps',
        '10',
      ]);
      await agent.waitLine((l) => l.msg === 'connected to the server', 'the agent connected', 30_000);
      const wf = await createWorkflow(t, s, tinyGraph());
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) ids.push(await runWorkflow(t, s, wf, { prompt: `blip ${i}` }));
      await waitFor('all five tasks running', async () => (await Promise.all(ids.map((id) => getTask(t, s, id)))).every((x) => x.task_status === 'running'), 30_000);

      // the tasks finish (5 s of simulated work) while the database is away
      await proxy.cut();
      await new Promise((r) => setTimeout(r, OUTAGE_MS));
      await proxy.start();

      const done = await waitFor(
        'every task terminal',
        async () => {
          const rows = await Promise.all(ids.map((id) => getTask(t, s, id)));
          return rows.every((x) => ['completed', 'failed', 'cancelled'].includes(x.task_status)) ? rows : null;
        },
        60_000,
        250,
      );
      assert.deepEqual(
        done.map((x) => `${x.task_status}${x.task_error ? `: ${x.task_error}` : ''}`),
        ids.map(() => 'completed'),
        'every running task completed',
      );
      const lines = agent.lines.join('\n');
      assert.match(lines, /"msg":"server call unavailable; retrying"/, 'the output presign calls met the outage (and were retried)');
      assert.doesNotMatch(lines, /"msg":"task failed"/, 'the agent failed no task');
      assert.doesNotMatch(lines, /agent stream ended; reconnecting/, 'the node kept the agent stream open through the outage');
    } finally {
      agent?.kill('SIGKILL');
      await agent?.exited;
      await node.close();
      await proxy.stop();
      await db.drop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
}
