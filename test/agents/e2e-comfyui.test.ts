/**
 * `gantry agent --executor comfyui` (child process) against the ComfyUI stand-in (real HTTP and
 * WebSocket): a run completes with its image uploaded; cancel mid-run reaches ComfyUI as
 * POST /interrupt; an execution_error fails the task with ComfyUI's exception message; a ComfyUI
 * restart mid-run (history and queue lost) fails the attempt within --comfy-liveness-s and the retry
 * completes. Each on both agent transports (AGENT_TRANSPORTS: gRPC and WebSocket), one team each.
 */
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { startComfyStandin, type ComfyStandin } from '../fixtures/comfyui-standin.js';
import { AGENT_TRANSPORTS, agentServer, agentsOf, createWorkflow, runWorkflow, setupTeam, spawnAgent, tinyGraph, tmpDir, waitFor, waitTask, type AgentProcess, type TeamSetup } from './helpers.js';

let t: TestNode;
let comfy: ComfyStandin;
before(async () => {
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1 }, 'agents_comfy');
  comfy = await startComfyStandin({ tickDelayMs: 40 });
});
after(async () => {
  await comfy.close();
  await t.stop();
});

for (const transport of AGENT_TRANSPORTS) {
  describe(`[${transport}]`, () => {
    let s: TeamSetup;
    let agent: AgentProcess;
    before(async () => {
      s = await setupTeam(t);
      const models = tmpDir('gantry-models-');
      const { mkdirSync, writeFileSync } = await import('node:fs');
      mkdirSync(`${models}/checkpoints`);
      writeFileSync(`${models}/checkpoints/v1-5-pruned-emaonly.safetensors`, Buffer.alloc(1024));
      agent = spawnAgent(['--server', agentServer(t.node, transport), '--credential', s.ak.value, '--executor', 'comfyui', '--comfy-url', comfy.url, '--state-dir', tmpDir('gantry-agent-state-'), '--models-dir', models, '--gpu', 'NVIDIA L4:24', '--comfy-liveness-s', '3']);
      await waitFor('comfyui agent online', async () => (await agentsOf(t, s)).find((a) => a.agent_status === 'online'), 30_000);
    });
    after(async () => {
      agent.kill('SIGTERM');
      await agent.exited;
    });

    const terminal = (x: Record<string, any>) => ['completed', 'failed', 'cancelled'].includes(x.task_status);

    test('comfyui: the graph runs on ComfyUI, progress carries steps and node, the image is uploaded', async () => {
      // required_models matches the scanned models dir (relative path)
      const wf = await createWorkflow(t, s, tinyGraph(30), { required_models: ['checkpoints/v1-5-pruned-emaonly.safetensors'] });
      const taskId = await runWorkflow(t, s, wf, { prompt: `a lighthouse at dusk [${transport}]` });
      const seen = await waitTask(t, s, taskId, (x) => terminal(x) || (x.task_status === 'running' && x.progress?.step_total === 30), 'sampler progress');
      assert.equal(seen.task_status, 'running', 'sampler progress was visible while running');
      assert.ok(seen.progress.step_current >= 1 && seen.progress.step_current <= 30);
      assert.match(seen.progress.current_node, /3|KSampler/);
      const done = await waitTask(t, s, taskId, terminal, 'terminal');
      assert.equal(done.task_status, 'completed', JSON.stringify(done));
      const prompt = comfy.received.prompts.at(-1);
      assert.equal((prompt?.prompt['6']?.inputs as any).text, `a lighthouse at dusk [${transport}]`, 'the parameter reached ComfyUI');
      const res = await t.http.get(`/r/tasks/${taskId}/result`, { token: s.sk.value });
      assert.equal(res.body.output.image_count, 1);
      assert.equal(res.body.output.outputs[0].content_type, 'image/png');
      assert.ok(await t.node.objectStore.head(res.body.output.storage_key), 'the output is in the object store');
    });

    test('comfyui: cancel mid-run sends POST /interrupt to ComfyUI and the task ends cancelled', async () => {
      const wf = await createWorkflow(t, s, tinyGraph(400));
      const interrupts = comfy.received.interrupts;
      const taskId = await runWorkflow(t, s, wf);
      await waitTask(t, s, taskId, (x) => x.task_status === 'running' && (x.progress?.step_current ?? 0) >= 2, 'running with progress');
      const interrupted = comfy.waitFor('interrupt', undefined, 15_000);
      const c = await t.http.post(`/r/tasks/${taskId}/cancel`, undefined, { token: s.sk.value });
      assert.equal(c.status, 200, c.text);
      await interrupted;
      assert.ok(comfy.received.interrupts > interrupts);
      assert.equal((await waitTask(t, s, taskId, terminal, 'terminal')).task_status, 'cancelled');
      // the agent is free again: the next task runs
      await waitFor('agent idle', async () => (await agentsOf(t, s))[0]?.agent_status === 'online', 10_000);
    });

    test("comfyui: an execution_error fails the task with ComfyUI's exception message", async () => {
      const graph = tinyGraph(2, { '10': { class_type: 'FailNode', inputs: { message: 'CUDA out of memory (simulated)', images: ['8', 0] } } });
      const wf = await createWorkflow(t, s, graph);
      const taskId = await runWorkflow(t, s, wf);
      const done = await waitTask(t, s, taskId, terminal, 'terminal');
      assert.equal(done.task_status, 'failed');
      assert.match(String(done.task_error), /CUDA out of memory \(simulated\)/);
    });

    test('comfyui: a file parameter is staged, downloaded by the agent (PresignInputs) and uploaded to ComfyUI', async () => {
      const { renderSeededPng } = await import('../../src/agent/png.js');
      const png = renderSeededPng('input image', { width: 8, height: 8 });
      const pre = await t.http.post('/r/files/presign', { file_name: 'source.png', file_size: png.length, content_type: 'image/png' }, { token: s.sk.value });
      assert.equal(pre.status, 200, pre.text);
      const put = await fetch(pre.body.upload_url, { method: 'PUT', headers: pre.body.upload_headers, body: new Uint8Array(png) });
      assert.ok(put.ok, `PUT ${put.status}`);
      const graph = tinyGraph(2, {
        '11': { class_type: 'LoadImage', inputs: { image: 'placeholder.png' } },
        '12': { class_type: 'SaveImage', inputs: { filename_prefix: 'loaded', images: ['11', 0] } },
      });
      const r = await t.http.post(
        '/workflows',
        { workflow_slug: `wf-in-${Math.random().toString(36).slice(2, 8)}`, display_name: 'img input', workflow_json: graph, parameters: [{ key: 'image', type: 'file', node_id: '11', field: 'image' }], max_retries: 0 },
        { token: s.user.accessToken, team: s.user.teamId },
      );
      assert.equal(r.status, 200, r.text);
      const uploads = comfy.received.uploads.length;
      const taskId = await runWorkflow(t, s, r.body.id, { image: pre.body.file_key });
      const done = await waitTask(t, s, taskId, terminal, 'terminal');
      assert.equal(done.task_status, 'completed', JSON.stringify(done));
      const up = comfy.received.uploads.slice(uploads);
      assert.equal(up.length, 1, 'the input reached ComfyUI through /upload/image');
      assert.ok(up[0]?.bytes.equals(png), 'byte for byte');
    });

    test('comfyui: ComfyUI restarts mid-run (history and queue lost): the attempt fails within the liveness timeout and the retry completes', async (tc) => {
      const wf = await createWorkflow(t, s, tinyGraph(300), { max_retries: 1 });
      const taskId = await runWorkflow(t, s, wf, { prompt: `ComfyUI restarts during this one [${transport}]` });
      await waitTask(t, s, taskId, (x) => x.task_status === 'running' && (x.progress?.step_current ?? 0) >= 2, 'running with progress');
      const t0 = Date.now();
      await comfy.restart();
      comfy.options.tickDelayMs = 2;
      try {
        const failed = await waitTask(t, s, taskId, terminal, 'terminal', 30_000);
        assert.equal(failed.task_status, 'failed');
        assert.match(String(failed.task_error), /neither running, pending nor in history/);
        assert.ok(Date.now() - t0 < 15_000, `failed ${Date.now() - t0} ms after the restart`);
        tc.diagnostic(`--comfy-liveness-s 3: the task failed ${Date.now() - t0} ms after the restart`);
        assert.ok(failed.retry_task_id, 'a retry task was created');
        const retry = await waitTask(t, s, failed.retry_task_id, terminal, 'retry terminal', 30_000);
        assert.equal(retry.task_status, 'completed', JSON.stringify(retry));
        assert.equal(retry.attempt, 2);
      } finally {
        comfy.options.tickDelayMs = 40;
      }
    });
  });
}
