/**
 * End to end on one node with `gantry agent --executor simulate` as a child process: register,
 * create an ak-, run a workflow, poll until completed, fetch the PNG; kill -9 mid-task and restart
 * (same agent id); graceful drain on SIGTERM; DELETE /agents/{id} and credential revocation end the
 * stream; GET /r/agents with sk- shows reduced stats. Every test runs on both transports
 * (AGENT_TRANSPORTS): `--server HOST:PORT` (gRPC) and `--server ws://HOST:PORT` (WebSocket on the HTTP port).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { AGENT_TRANSPORTS, agentServer, agentsOf, createWorkflow, runWorkflow, setupTeam, spawnAgent, tinyGraph, tmpDir, waitFor, waitTask, type AgentProcess, type TeamSetup } from './helpers.js';

const PNG_SIG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

let t: TestNode;
const procs: AgentProcess[] = [];
before(async () => {
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1 }, 'agents_sim');
});
after(async () => {
  for (const p of procs) p.kill('SIGKILL');
  await Promise.all(procs.map((p) => p.exited));
  await t.stop();
});

for (const transport of AGENT_TRANSPORTS) {
  function agent(s: TeamSetup, extra: string[] = [], opts: { stateDir?: string; credential?: string } = {}): AgentProcess {
    const p = spawnAgent([
      '--server',
      agentServer(t.node, transport),
      '--credential',
      opts.credential ?? s.ak.value,
      '--executor',
      'simulate',
      '--state-dir',
      opts.stateDir ?? tmpDir('gantry-agent-state-'),
      '--gpu',
      'NVIDIA RTX 4090:24',
      '--simulate-duration-ms',
      '200',
      '--simulate-steps',
      '4',
      ...extra,
    ]);
    procs.push(p);
    return p;
  }

  const onlineAgent = (s: TeamSetup, pred: (a: Record<string, any>) => boolean = () => true) =>
    waitFor('an online agent', async () => (await agentsOf(t, s)).find((a) => a.agent_status !== 'offline' && pred(a)), 30_000);

  test(`[${transport}] simulate end to end: run a workflow on a child-process agent, poll until completed, fetch the PNG`, async () => {
    const s = await setupTeam(t);
    const p = agent(s, ['--labels', 'sim,fast', '--name', 'sim-box']);
    const a = await onlineAgent(s);
    // on the transport the --server entry names (the node logs the same)
    await p.waitLine((l) => l.msg === 'connected to the server' && l.transport === transport, `connected over ${transport}`);
    assert.equal(a.display_name, 'sim-box');
    assert.deepEqual(a.labels, ['sim', 'fast']);
    assert.equal(a.gpu_type, 'NVIDIA RTX 4090');
    assert.equal(a.vram_total_gb, 24);

    const wf = await createWorkflow(t, s, tinyGraph(), { required_labels: ['sim'], min_vram_gb: 16 });
    const taskId = await runWorkflow(t, s, wf, { prompt: 'a red fox' });
    const done = await waitTask(t, s, taskId, (x) => ['completed', 'failed', 'cancelled'].includes(x.task_status), 'terminal');
    assert.equal(done.task_status, 'completed', JSON.stringify(done));
    assert.equal(done.agent_id, a.id);
    const output = done.output ?? (await t.http.get(`/r/tasks/${taskId}/result`, { token: s.sk.value })).body.output;
    const prefix = `teams/${s.user.teamId}/outputs/${taskId}/1/`;
    assert.equal(output.storage_key, `${prefix}output.png`);
    assert.deepEqual(output.storage_keys, [`${prefix}output.png`]);
    assert.equal(output.image_count, 1);
    assert.equal(output.outputs[0].content_type, 'image/png');

    // the object really is in the store (uploaded by the agent through a presigned PUT)
    const chunks: Buffer[] = [];
    for await (const c of await t.node.objectStore.get(output.storage_key)) chunks.push(Buffer.from(c as Buffer));
    const stored = Buffer.concat(chunks);
    assert.ok(stored.subarray(0, 8).equals(PNG_SIG), 'stored output is a PNG');
    assert.equal(stored.length, output.outputs[0].size);

    // ... and the result's download_url serves it
    const res = await t.http.get(`/r/tasks/${taskId}/result`, { token: s.sk.value });
    assert.equal(res.status, 200, res.text);
    assert.equal(typeof res.body.download_url, 'string', `result has no download_url: ${res.text}`);
    const dl = await fetch(res.body.download_url);
    assert.equal(dl.status, 200);
    const bytes = Buffer.from(await dl.arrayBuffer());
    assert.ok(bytes.subarray(0, 8).equals(PNG_SIG), 'download_url serves the PNG');

    // graceful stop with nothing running: exit 0
    p.kill('SIGTERM');
    assert.deepEqual(await p.exited, { code: 0, signal: null });
  });

  test(`[${transport}] a file parameter: the agent fetches it through PresignInputs (on WebSocket a call on the socket) before it runs`, async () => {
    const s = await setupTeam(t);
    const p = agent(s);
    await onlineAgent(s);
    const bytes = Buffer.from('input bytes for the agent');
    const pre = await t.http.post('/r/files/presign', { file_name: 'source.bin', file_size: bytes.length, content_type: 'application/octet-stream' }, { token: s.sk.value });
    assert.equal(pre.status, 200, pre.text);
    assert.ok((await fetch(pre.body.upload_url, { method: 'PUT', headers: pre.body.upload_headers, body: new Uint8Array(bytes) })).ok);
    const r = await t.http.post(
      '/workflows',
      { workflow_slug: `wf-in-${Math.random().toString(36).slice(2, 8)}`, display_name: 'file input', workflow_json: tinyGraph(2, { '11': { class_type: 'LoadImage', inputs: { image: 'x' } } }), parameters: [{ key: 'image', type: 'file', node_id: '11', field: 'image' }], max_retries: 0 },
      { token: s.user.accessToken, team: s.user.teamId },
    );
    assert.equal(r.status, 200, r.text);
    const taskId = await runWorkflow(t, s, r.body.id as string, { image: pre.body.file_key });
    const done = await waitTask(t, s, taskId, (x) => ['completed', 'failed', 'cancelled'].includes(x.task_status), 'terminal');
    // a failed presign or download fails the task (download_failed) before the executor runs
    assert.equal(done.task_status, 'completed', JSON.stringify(done));
    p.kill('SIGTERM');
    await p.exited;
  });

  test(`[${transport}] SIGTERM mid-task: the agent drains (no new tasks), finishes the running task, then exits 0`, async () => {
    const s = await setupTeam(t);
    const p = agent(s, ['--simulate-duration-ms', '1500', '--simulate-steps', '5']);
    await onlineAgent(s);
    const wf = await createWorkflow(t, s, tinyGraph());
    const taskId = await runWorkflow(t, s, wf);
    await waitTask(t, s, taskId, (x) => x.task_status === 'running', 'running');
    p.kill('SIGTERM');
    await waitFor('agent draining', async () => (await agentsOf(t, s))[0]?.agent_status === 'draining', 10_000);
    const done = await waitTask(t, s, taskId, (x) => ['completed', 'failed'].includes(x.task_status), 'terminal');
    assert.equal(done.task_status, 'completed');
    assert.deepEqual(await p.exited, { code: 0, signal: null });
  });

  test(`[${transport}] kill -9 mid-task: the task fails after the grace period; a restart re-registers as the same agent`, async () => {
    const s = await setupTeam(t);
    const state = tmpDir('gantry-agent-state-');
    const p1 = agent(s, ['--simulate-duration-ms', '30000', '--simulate-steps', '30'], { stateDir: state });
    const a1 = await onlineAgent(s);
    const wf = await createWorkflow(t, s, tinyGraph(), { max_retries: 0 });
    const taskId = await runWorkflow(t, s, wf);
    await waitTask(t, s, taskId, (x) => x.task_status === 'running' && (x.progress?.step_current ?? 0) >= 1, 'running with progress');
    p1.kill('SIGKILL');
    await p1.exited;
    const failed = await waitTask(t, s, taskId, (x) => x.task_status === 'failed', 'failed after the grace period', 20_000);
    assert.match(String(failed.task_error), /agent/i);
    await waitFor('agent offline', async () => (await agentsOf(t, s))[0]?.agent_status === 'offline', 10_000);

    const p2 = agent(s, [], { stateDir: state });
    const a2 = await onlineAgent(s);
    assert.equal(a2.id, a1.id, 'same machine_id -> same agent record');
    assert.equal((await agentsOf(t, s)).length, 1);
    // and it works again
    const t2 = await runWorkflow(t, s, await createWorkflow(t, s, tinyGraph()));
    assert.equal((await waitTask(t, s, t2, (x) => ['completed', 'failed'].includes(x.task_status), 'terminal')).task_status, 'completed');
    p2.kill('SIGTERM');
    assert.equal((await p2.exited).code, 0);
  });

  test(`[${transport}] kill -9 mid-task with max_retries 1: the task fails and its retry runs on the restarted agent`, async () => {
    const s = await setupTeam(t);
    const state = tmpDir('gantry-agent-state-');
    const p1 = agent(s, ['--simulate-duration-ms', '30000', '--simulate-steps', '30'], { stateDir: state });
    await onlineAgent(s);
    const wf = await createWorkflow(t, s, tinyGraph(), { max_retries: 1 });
    const taskId = await runWorkflow(t, s, wf, { prompt: 'x' });
    await waitTask(t, s, taskId, (x) => x.task_status === 'running', 'running');
    p1.kill('SIGKILL');
    const failed = await waitTask(t, s, taskId, (x) => x.task_status === 'failed', 'failed', 20_000);
    assert.ok(failed.retry_task_id, 'a retry task was created');
    const p2 = agent(s, ['--simulate-duration-ms', '100', '--simulate-steps', '2'], { stateDir: state });
    const retry = await waitTask(t, s, failed.retry_task_id, (x) => ['completed', 'failed'].includes(x.task_status), 'retry terminal', 30_000);
    assert.equal(retry.task_status, 'completed');
    assert.equal(retry.attempt, 2);
    const rr = await t.http.get(`/r/tasks/${failed.retry_task_id}/result`, { token: s.sk.value });
    assert.match(rr.body.output.storage_key, new RegExp(`/outputs/${failed.retry_task_id}/2/output\\.png$`));
    p2.kill('SIGTERM');
    await p2.exited;
  });

  test(`[${transport}] DELETE /agents/{id} ends its stream (the agent exits) and removes the record`, async () => {
    const s = await setupTeam(t);
    const p = agent(s);
    const a = await onlineAgent(s);
    const del = await t.http.del(`/agents/${a.id}`, { token: s.user.accessToken, team: s.user.teamId });
    assert.equal(del.status, 200, del.text);
    assert.deepEqual(del.body, { is_success: true });
    const ex = await p.exited;
    assert.equal(ex.code, 3);
    await p.waitLine((l) => l.code === 'agent_deleted', 'agent_deleted', 1000);
    assert.equal((await t.http.get(`/agents/${a.id}`, { token: s.user.accessToken, team: s.user.teamId })).status, 404);
    assert.equal(t.node.sessions.session(a.id), null);
  });

  test(`[${transport}] revoking the ak- ends the live stream; a new connection with it is refused (UNAUTHENTICATED)`, async () => {
    const s = await setupTeam(t);
    const p = agent(s);
    const a = await onlineAgent(s);
    const rev = await t.http.del(`/credentials/${s.ak.id}`, { token: s.user.accessToken, team: s.user.teamId });
    assert.equal(rev.status, 200, rev.text);
    assert.equal((await p.exited).code, 3);
    await p.waitLine((l) => l.code === 'credential_revoked', 'credential_revoked', 1000);
    await waitFor('agent offline', async () => (await agentsOf(t, s)).find((x) => x.id === a.id)?.agent_status === 'offline', 10_000);

    const p2 = agent(s);
    assert.equal((await p2.exited).code, 3);
    await p2.waitLine((l) => /UNAUTHENTICATED|unauthenticated|credential/i.test(`${l.code} ${l.message}`), 'refusal', 1000);
  });

  test(`[${transport}] GET /r/agents: full system_stats for a user, reduced for an sk- caller`, async () => {
    const s = await setupTeam(t);
    const p = agent(s);
    const a = await onlineAgent(s);
    // wait for a heartbeat to land
    await waitFor('system stats', async () => (await agentsOf(t, s))[0]?.system_stats?.cpu_percent !== undefined, 10_000);
    const full = await t.http.get('/r/agents', { token: s.user.accessToken, team: s.user.teamId });
    assert.equal(full.status, 200, full.text);
    const fa = full.body.agent_list.find((x: any) => x.id === a.id);
    assert.ok(fa.system_stats.ram_total_bytes > 0);
    assert.equal(fa.system_stats.gpus[0].name, 'NVIDIA RTX 4090');
    assert.equal(typeof fa.machine_id, 'string');
    assert.ok(full.body.page_meta);

    const red = await t.http.get('/r/agents', { token: s.sk.value });
    assert.equal(red.status, 200, red.text);
    const ra = red.body.agent_list.find((x: any) => x.id === a.id);
    assert.deepEqual(Object.keys(ra.system_stats).sort(), ['gpu_count', 'gpu_utilization_percent', 'vram_total_gb']);
    assert.equal(ra.system_stats.gpu_count, 1);
    assert.equal(ra.system_stats.vram_total_gb, 24);
    assert.equal(ra.machine_id, undefined);
    assert.ok(['online', 'busy'].includes(ra.agent_status));

    // management surface: sk- is rejected there; the tunnel status reflects the live stream
    assert.equal((await t.http.get('/agents', { token: s.sk.value })).status, 403);
    const tun = await t.http.get(`/agents/${a.id}/tunnel`, { token: s.user.accessToken, team: s.user.teamId });
    assert.equal(tun.status, 200);
    assert.equal(tun.body.is_active, true);
    assert.equal(typeof tun.body.session_id, 'string');
    p.kill('SIGTERM');
    await p.exited;
  });
}
