/**
 * Hybrid dispatch on a cluster: two node processes, one PostgreSQL, one Redis. The key set through
 * one node is used by the cloud dispatcher wherever placement puts it (one per team and provider:
 * exactly one node follows the job); SIGKILL that node mid-job and the other one takes the
 * dispatcher over and re-attaches to the provider's job by its recorded prompt_id.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, clusterSkipReason, type TestCluster } from '../helpers/cluster.js';
import { registerUser } from '../helpers/identity.js';
import { startComfyStandin, type ComfyStandin } from '../fixtures/comfyui-standin.js';
import { makePki, type Pki } from '../events/helpers.js';
import { tinyGraph } from '../agents/helpers.js';

const KEY = 'comfyui-cluster-0123456789abcdef01234567';
const skip = clusterSkipReason();
let c: TestCluster | null = null;
let cloud: ComfyStandin | null = null;
let pki: Pki | null = null;
after(async () => {
  await c?.stop();
  await cloud?.close();
  pki?.cleanup();
});

test('one dispatcher per (team, provider) in the cluster; SIGKILL of its node mid-job: the other node re-attaches and the task completes', { skip: skip ?? false, timeout: 180_000 }, async () => {
  pki = makePki();
  cloud = await startComfyStandin({ tickDelayMs: 40, cloud: { apiKey: KEY, tls: { key: pki.key.toString(), cert: pki.cert.toString() } } });
  c = await startCluster({ nodes: 2, env: { GANTRY_OUTBOUND_CA_FILE: pki.caFile, GANTRY_CLOUD_POLL_MS: '100' } });
  const cl = c;
  const [n0, n1] = [cl.nodes[0]!, cl.nodes[1]!];
  const user = await registerUser(n0.http);
  const as = { token: user.accessToken, team: user.teamId };
  assert.equal((await n0.http.put('/cloud-providers/comfy_cloud', { api_key: KEY, base_url: cloud.url }, as)).status, 200);
  const wf = await n0.http.post('/workflows', { workflow_slug: 'cloud-cluster', display_name: 'c', workflow_json: tinyGraph(150), max_retries: 0, default_dispatch_target: 'comfy_cloud' }, as);
  assert.equal(wf.status, 200, wf.text);
  // submitted through the other node
  const run = await n1.http.post(`/r/workflows/${wf.body.id}/run`, { parameters: {} }, as);
  assert.equal(run.status, 202, run.text);
  const taskId: string = run.body.task_id;
  const accepted = (l: Record<string, any>) => l.msg === 'cloud: provider accepted the job' && l.task_id === taskId;
  const deadline = Date.now() + 30_000;
  while (!cl.nodes.some((n) => n.lines.some(accepted))) {
    if (Date.now() > deadline) throw new Error('no node submitted the job');
    await new Promise((r) => setTimeout(r, 50));
  }
  const owners = cl.nodes.filter((n) => n.lines.some(accepted));
  assert.equal(owners.length, 1, 'exactly one node runs the dispatcher');
  const owner = owners[0]!;
  const survivor = owner === n0 ? n1 : n0;
  const status = async (): Promise<Record<string, any>> => (await survivor.http.get(`/r/tasks/${taskId}`, as)).body;
  const waitTask = async (pred: (x: Record<string, any>) => boolean, what: string, ms: number): Promise<Record<string, any>> => {
    const end = Date.now() + ms;
    for (;;) {
      const x = await status().catch(() => ({}) as Record<string, any>);
      if (pred(x)) return x;
      if (Date.now() > end) throw new Error(`${what}: ${JSON.stringify(x)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  await waitTask((x) => x.task_status === 'running' && (x.progress?.step_current ?? 0) >= 3, 'running', 30_000);
  const prompts = cloud.received.prompts.length;
  await cl.kill(owner.index, 'SIGKILL');
  await survivor.waitLine((l) => l.msg === 'cloud: re-attaching to the provider job' && l.task_id === taskId, 'the survivor re-attaches', 60_000);
  const done = await waitTask((x) => ['completed', 'failed', 'cancelled'].includes(x.task_status), 'terminal', 60_000);
  assert.equal(done.task_status, 'completed', JSON.stringify(done));
  assert.equal(cloud.received.prompts.length, prompts, 'not submitted twice');
  const res = await survivor.http.get(`/r/tasks/${taskId}/result`, as);
  assert.equal(Object.keys(res.body.download_urls ?? {}).length, 1, res.text);
});
