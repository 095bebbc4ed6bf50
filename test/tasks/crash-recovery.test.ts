import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { childNodeSetup, serveChild } from '../helpers/child-node.js';
import { HttpClient } from '../helpers/node.js';
import { registerUser, createCredential } from '../helpers/identity.js';
import { createHash, randomBytes } from 'node:crypto';
import { httpRequest } from '../helpers/s3.js';
import { hello, rawClient, rawStream, spawnAgent, tinyGraph, type AgentProcess } from '../agents/helpers.js';

/**
 * Issue 5: SIGKILL the node process with tasks in every state it can hold at that moment, restart
 * it on the same database and ports: every task still reaches exactly one terminal state.
 */
const TERMINAL = ['completed', 'failed', 'cancelled'];

test('SIGKILL the node with tasks waiting, running, completed and cancelled; restart: every task reaches exactly one terminal state', { timeout: 180_000 }, async () => {
  const { db, dataDir, httpPort, grpcPort, env } = await childNodeSetup('crash', 'crash', {
    GANTRY_AGENT_GRACE_S: '20',
    GANTRY_ACK_TIMEOUT_S: '10',
    GANTRY_HEARTBEAT_INTERVAL_S: '1',
    LOG_LEVEL: 'info',
  });
  const sql = new pg.Client({ connectionString: db.url });
  await sql.connect();
  const agents: AgentProcess[] = [];
  let node = await serveChild(env);
  try {
    const http = new HttpClient(`http://127.0.0.1:${httpPort}/api/v1`);
    const user = await registerUser(http);
    const ak = await createCredential(http, user, 'agent');
    const as = { token: user.accessToken, team: user.teamId };
    const graph = tinyGraph(4, { '10': { class_type: 'GantrySimulate', inputs: { simulate_duration_ms: 6000 } } });
    const mk = async (slug: string, labels: string[]) => {
      const r = await http.post(
        '/workflows',
        { workflow_slug: slug, display_name: slug, workflow_json: graph, required_labels: labels, max_retries: 1, parameters: [{ key: 'duration', node_id: '10', field: 'simulate_duration_ms', type: 'integer', default: 6000 }] },
        as,
      );
      assert.equal(r.status, 200, r.text);
      return r.body.id as string;
    };
    const wfGpu = await mk(`crash-gpu-${Date.now()}`, ['gpu']);
    const wfLate = await mk(`crash-late-${Date.now()}`, ['late']);
    const run = async (wf: string, duration: number) => {
      const r = await http.post(`/r/workflows/${wf}/run`, { parameters: { duration } }, as);
      assert.equal(r.status, 202, r.text);
      return r.body.task_id as string;
    };
    const status = async (id: string) => (await sql.query('select task_status from tasks where id = $1', [id])).rows[0]?.task_status as string;
    /** One pg client runs one query at a time: read the statuses one after another. */
    const statuses = async (ids: string[]) => {
      const out: string[] = [];
      for (const id of ids) out.push(await status(id));
      return out;
    };
    const until = async (what: string, fn: () => Promise<boolean>, ms = 60_000) => {
      const end = Date.now() + ms;
      while (!(await fn())) {
        if (Date.now() > end) {
          const rows = (await sql.query('select id, task_status, agent_id, attempt, lease_epoch, task_error from tasks order by seq')).rows;
          throw new Error(`timed out waiting for ${what}; tasks: ${JSON.stringify(rows)}`);
        }
        await new Promise((r) => setTimeout(r, 100));
      }
    };

    const stateDir = mkdtempSync(join(tmpdir(), 'gantry-crash-agent-'));
    const agentArgs = ['--server', `127.0.0.1:${grpcPort}`, '--credential', ak.value, '--executor', 'simulate', '--state-dir', stateDir, '--simulate-steps', '3'];
    agents.push(spawnAgent([...agentArgs, '--labels', 'gpu', '--concurrency', '2', '--machine-id', 'crash-gpu-box']));

    // completed before the crash
    const done = await run(wfGpu, 0);
    await until('quick task completed', async () => (await status(done)) === 'completed');
    // two running (6 s each) on the agent's two slots
    const running = [await run(wfGpu, 6000), await run(wfGpu, 6000)];
    await until('two tasks running', async () => (await statuses(running)).every((s) => s === 'running'));
    // waiting: no free slot, and no agent with the label at all
    const waiting = [await run(wfGpu, 0), await run(wfLate, 0), await run(wfLate, 0)];
    await until('tasks waiting', async () => (await statuses(waiting)).every((s) => s === 'waiting'));
    // cancelled
    const cancelled = await run(wfLate, 0);
    await until('waiting', async () => (await status(cancelled)) === 'waiting');
    assert.equal((await http.post(`/r/tasks/${cancelled}/cancel`, undefined, as)).status, 200);
    // and one just submitted (pending or waiting) at the moment of the kill
    const fresh = await run(wfLate, 0);

    const before = (await sql.query('select id, task_status from tasks where team_id = $1', [user.teamId])).rows;
    const states = new Set(before.map((r) => r.task_status));
    for (const s of ['completed', 'running', 'waiting', 'cancelled']) assert.ok(states.has(s), `a ${s} task at kill time: ${[...states].join(',')}`);

    node.child.kill('SIGKILL');
    await node.exit;
    node = await serveChild(env);
    // an agent that can take the 'late' tasks joins after the restart
    agents.push(spawnAgent([...agentArgs, '--labels', 'late', '--concurrency', '2', '--machine-id', 'crash-late-box']));

    await until(
      'every task terminal',
      async () => (await sql.query(`select count(*)::int as n from tasks where team_id = $1 and task_status not in ('completed','failed','cancelled')`, [user.teamId])).rows[0].n === 0,
      120_000,
    );

    const rows = (await sql.query('select * from tasks where team_id = $1', [user.teamId])).rows;
    const submitted = [done, ...running, ...waiting, cancelled, fresh];
    for (const id of submitted) assert.ok(rows.some((r) => r.id === id), `task ${id} not lost`);
    // nothing else appeared except linked retries
    for (const r of rows) if (!submitted.includes(r.id)) assert.ok(r.parent_task_id && rows.some((p) => p.id === r.parent_task_id && p.retry_task_id === r.id), `unexpected task ${r.id}`);
    for (const r of rows) {
      assert.ok(TERMINAL.includes(r.task_status));
      const ev = (await sql.query('select event_type, payload from task_events where task_id = $1 order by id', [r.id])).rows;
      const terminal = ev.filter((e) => TERMINAL.includes(e.event_type));
      assert.equal(terminal.length, 1, `task ${r.id} has ${terminal.length} terminal events`);
      assert.equal(terminal[0].event_type, r.task_status);
    }
    // the tasks that were running re-attached after the restart and finished normally
    for (const id of running) assert.equal(await status(id), 'completed', `running task ${id}`);
    assert.equal(await status(cancelled), 'cancelled');
    for (const id of [...waiting, fresh]) assert.equal(await status(id), 'completed');
  } finally {
    for (const a of agents) a.kill('SIGKILL');
    node.child.kill('SIGKILL');
    await node.exit;
    await sql.end();
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

/**
 * Issue 12: the same SIGKILL with one task `queued` (its agent holds the assignment and never ACKs)
 * and one `provisioning` (its agent lacks the team's model and never reports the sync done). Per
 * docs/architecture.md rules 6-8, after the restart each is recovered, its agent (gone with the old
 * node) is lost once the grace period ends, and it goes back to `waiting` with no retry consumed;
 * an agent that joins later runs it to exactly one terminal state as attempt 1.
 */
test('SIGKILL the node with tasks queued (ACK withheld) and provisioning (sync held open); restart: each goes back to waiting and completes once, no retry consumed', { timeout: 180_000 }, async () => {
  const { db, dataDir, httpPort, grpcPort, env } = await childNodeSetup('crash_q', 'crash-q', {
    GANTRY_AGENT_GRACE_S: '2',
    // long enough that the withheld ACK never times out before the kill: the task is queued at the kill
    GANTRY_ACK_TIMEOUT_S: '600',
    GANTRY_HEARTBEAT_INTERVAL_S: '1',
    LOG_LEVEL: 'info',
  });
  const sql = new pg.Client({ connectionString: db.url });
  await sql.connect();
  const agents: AgentProcess[] = [];
  const clients: Array<{ close(): void }> = [];
  let node = await serveChild(env);
  try {
    const http = new HttpClient(`http://127.0.0.1:${httpPort}/api/v1`);
    const user = await registerUser(http);
    const ak = await createCredential(http, user, 'agent');
    const as = { token: user.accessToken, team: user.teamId };
    const status = async (id: string) => (await sql.query('select task_status from tasks where id = $1', [id])).rows[0]?.task_status as string;
    const until = async (what: string, fn: () => Promise<boolean>, ms = 60_000) => {
      const end = Date.now() + ms;
      while (!(await fn())) {
        if (Date.now() > end) {
          const rows = (await sql.query('select id, task_status, agent_id, attempt, lease_epoch, task_error from tasks order by seq')).rows;
          throw new Error(`timed out waiting for ${what}; tasks: ${JSON.stringify(rows)}`);
        }
        await new Promise((r) => setTimeout(r, 100));
      }
    };

    // an active team model: an agent that lacks it gets its tasks with provision=true
    const modelPath = 'checkpoints/crash-sync.safetensors';
    const bytes = randomBytes(64 * 1024);
    const pre = await http.post('/models/presign', { file_name: 'crash-sync.safetensors', file_size: bytes.length, content_type: 'application/octet-stream' }, as);
    assert.equal(pre.status, 200, pre.text);
    const put = await httpRequest(pre.body.upload_url, { method: 'PUT', headers: pre.body.upload_headers, body: bytes });
    assert.equal(put.status, 200, put.body.toString());
    const model = await http.post('/models', { display_name: modelPath, model_type: 'checkpoints', model_path: modelPath, storage_key: pre.body.storage_key, file_size: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex') }, as);
    assert.equal(model.status, 200, model.text);

    const mk = async (slug: string, labels: string[]) => {
      const r = await http.post('/workflows', { workflow_slug: slug, display_name: slug, workflow_json: tinyGraph(), required_labels: labels, max_retries: 1 }, as);
      assert.equal(r.status, 200, r.text);
      return r.body.id as string;
    };
    const wfQ = await mk(`crash-q-${Date.now()}`, ['q']);
    const wfP = await mk(`crash-p-${Date.now()}`, ['p']);

    // two raw gRPC agents that take an assignment and then say nothing
    const holdQ = rawClient(grpcPort);
    const holdP = rawClient(grpcPort);
    clients.push(holdQ, holdP);
    const q = rawStream(holdQ, ak.value);
    const p = rawStream(holdP, ak.value);
    q.call.write(hello(`crash-hold-q-${user.teamId}`, { labels: ['q'], models: [{ path: modelPath, size: bytes.length }] }));
    p.call.write(hello(`crash-hold-p-${user.teamId}`, { labels: ['p'], models: [] }));
    const welcomed = (r: typeof q) => Promise.race([r.next((m) => m.msg === 'welcome', 'welcome'), r.status.then((st) => Promise.reject(new Error(`stream ended before welcome: ${st.code} ${st.details}`)))]);
    await welcomed(q);
    await welcomed(p);

    const run = async (wf: string) => {
      const r = await http.post(`/r/workflows/${wf}/run`, { parameters: {} }, as);
      assert.equal(r.status, 202, r.text);
      return r.body.task_id as string;
    };
    const queuedTask = await run(wfQ);
    const provTask = await run(wfP);
    const aq = (await q.next((m) => m.msg === 'assign', 'assign')).assign!;
    const ap = (await p.next((m) => m.msg === 'assign', 'assign')).assign!;
    assert.equal(aq.task_id, queuedTask);
    assert.equal(aq.provision, false, 'the agent has every model: no provisioning');
    assert.equal(ap.task_id, provTask);
    assert.equal(ap.provision, true, 'the agent lacks the team model: provisioning');
    await until('queued and provisioning', async () => (await status(queuedTask)) === 'queued' && (await status(provTask)) === 'provisioning');

    const before = (await sql.query('select id, task_status, lease_epoch from tasks where team_id = $1', [user.teamId])).rows;
    assert.deepEqual(before.map((r) => r.task_status).sort(), ['provisioning', 'queued'], 'exactly these states at kill time');

    node.child.kill('SIGKILL');
    await node.exit;
    await Promise.all([q.status, p.status]);
    node = await serveChild(env);

    // recovery (rule 8) arms the grace timer; the held agents never come back, so each task is lost
    // before ACK (rule 6) and goes back to waiting, with its agent cleared and no retry task
    await until('both back to waiting', async () => (await status(queuedTask)) === 'waiting' && (await status(provTask)) === 'waiting', 60_000);

    // an agent that can take both joins; it syncs the model while provisioning
    const stateDir = mkdtempSync(join(tmpdir(), 'gantry-crash-q-agent-'));
    agents.push(
      spawnAgent([
        '--server', `127.0.0.1:${grpcPort}`, '--credential', ak.value, '--executor', 'simulate', '--state-dir', stateDir,
        '--models-dir', join(stateDir, 'models'), '--labels', 'q,p', '--concurrency', '2', '--machine-id', `crash-q-box-${Date.now()}`,
        '--simulate-duration-ms', '100', '--simulate-steps', '2',
      ]),
    );
    await until(
      'every task terminal',
      async () => (await sql.query(`select count(*)::int as n from tasks where team_id = $1 and task_status not in ('completed','failed','cancelled')`, [user.teamId])).rows[0].n === 0,
      120_000,
    );

    const rows = (await sql.query('select * from tasks where team_id = $1', [user.teamId])).rows;
    assert.deepEqual(rows.map((r) => r.id).sort(), [queuedTask, provTask].sort(), 'no task lost, no retry task created');
    for (const r of rows) {
      assert.equal(r.task_status, 'completed', `task ${r.id}: ${r.task_error}`);
      assert.equal(r.attempt, 1, 'no retry consumed');
      assert.equal(r.retry_task_id, null);
      const epochBefore = before.find((b) => b.id === r.id)!.lease_epoch;
      assert.ok(r.lease_epoch > epochBefore, `re-assigned with a new epoch (${epochBefore} -> ${r.lease_epoch})`);
      const ev = (await sql.query('select event_type, payload from task_events where task_id = $1 order by id', [r.id])).rows;
      const terminal = ev.filter((e) => TERMINAL.includes(e.event_type));
      assert.equal(terminal.length, 1, `task ${r.id} has ${terminal.length} terminal events`);
      const seq = ev.filter((e) => e.event_type === 'status').map((e) => e.payload.status as string);
      const held = r.id === queuedTask ? 'queued' : 'provisioning';
      const i = seq.indexOf(held);
      assert.ok(i >= 0 && seq[i + 1] === 'waiting', `${held} -> waiting after the restart: ${seq.join(' > ')}`);
      assert.ok(seq.slice(i + 1).includes('running'), `then ran: ${seq.join(' > ')}`);
    }
  } finally {
    for (const c of clients) c.close();
    for (const a of agents) a.kill('SIGKILL');
    node.child.kill('SIGKILL');
    await node.exit;
    await sql.end();
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
