/**
 * A node crash mid-job does not lose a cloud task: SIGKILL the node (a child process) while its
 * Comfy Cloud job runs, restart it on the same database; the dispatcher re-attaches to the
 * provider's job by its recorded prompt_id (polling), without submitting it again, and the task
 * completes with its outputs.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { childNodeSetup, serveChild } from '../helpers/child-node.js';
import { HttpClient } from '../helpers/node.js';
import { registerUser } from '../helpers/identity.js';
import { startComfyStandin } from '../fixtures/comfyui-standin.js';
import { makePki } from '../events/helpers.js';
import { tinyGraph } from '../agents/helpers.js';

const KEY = 'comfyui-crash-0123456789abcdef0123456789';

async function scenario(sig: 'SIGKILL' | 'SIGTERM'): Promise<void> {
  const pki = makePki();
  const cloud = await startComfyStandin({ tickDelayMs: 40, cloud: { apiKey: KEY, tls: { key: pki.key.toString(), cert: pki.cert.toString() } } });
  const { db, dataDir, httpPort, env } = await childNodeSetup('cloudcrash', 'cloudcrash', {
    GANTRY_OUTBOUND_ALLOWLIST: '127.0.0.1,localhost',
    GANTRY_OUTBOUND_CA_FILE: pki.caFile,
    GANTRY_CLOUD_POLL_MS: '100',
    LOG_LEVEL: 'info',
  });
  let node = await serveChild(env);
  try {
    const http = new HttpClient(`http://127.0.0.1:${httpPort}/api/v1`);
    const user = await registerUser(http);
    const as = { token: user.accessToken, team: user.teamId };
    assert.equal((await http.put('/cloud-providers/comfy_cloud', { api_key: KEY, base_url: cloud.url }, as)).status, 200);
    const wf = await http.post('/workflows', { workflow_slug: 'cloud-crash', display_name: 'crash', workflow_json: tinyGraph(sig === 'SIGTERM' ? 500 : 120), max_retries: 0, default_dispatch_target: 'comfy_cloud' }, as);
    assert.equal(wf.status, 200, wf.text);
    const run = await http.post(`/r/workflows/${wf.body.id}/run`, { parameters: {} }, as);
    assert.equal(run.status, 202, run.text);
    const taskId: string = run.body.task_id;
    const waitTask = async (pred: (x: Record<string, any>) => boolean, what: string, timeoutMs = 30_000): Promise<Record<string, any>> => {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const r = await http.get(`/r/tasks/${taskId}`, as).catch(() => null);
        if (r && r.status === 200 && pred(r.body)) return r.body;
        if (Date.now() > deadline) throw new Error(`${what}: ${JSON.stringify(r?.body)}`);
        await new Promise((res) => setTimeout(res, 50));
      }
    };
    await waitTask((x) => x.task_status === 'running' && (x.progress?.step_current ?? 0) >= 3, 'running with progress');
    const promptsBefore = cloud.received.prompts.length;
    const stopping = Date.now();
    node.child.kill(sig);
    await node.exit;
    // a graceful stop does not wait for the provider's job: it stops following it
    if (sig === 'SIGTERM') assert.ok(Date.now() - stopping < 10_000, `the node stopped in ${Date.now() - stopping} ms`);
    assert.equal(cloud.received.interrupts, 0, 'the provider job was not cancelled by the stop');
    // the provider goes on executing while no node follows the job
    node = await serveChild(env);
    const done = await waitTask((x) => ['completed', 'failed', 'cancelled'].includes(x.task_status), 'terminal after restart', 60_000);
    assert.equal(done.task_status, 'completed', JSON.stringify(done));
    assert.equal(cloud.received.prompts.length, promptsBefore, 'the job was re-attached, not submitted again');
    const res = await http.get(`/r/tasks/${taskId}/result`, as);
    assert.equal(res.status, 200, res.text);
    const urls = Object.values(res.body.download_urls as Record<string, string>);
    assert.equal(urls.length, 1);
    const got = await fetch(urls[0]!);
    assert.equal(got.status, 200);
    assert.equal(got.headers.get('content-type'), 'image/png');
  } finally {
    node.child.kill('SIGKILL');
    await node.exit;
    await cloud.close();
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
    pki.cleanup();
  }
}

test('SIGKILL the node while its cloud job runs; after the restart the task re-attaches to the same provider job and completes', { timeout: 120_000 }, () => scenario('SIGKILL'));

test('a graceful stop (SIGTERM) mid-job does not wait for the job nor cancel it; the restarted node re-attaches and completes it', { timeout: 120_000 }, () => scenario('SIGTERM'));
