/**
 * Partner (API) nodes on the team's own agents (issue 25): a local run sends the team's Comfy API
 * key (its Comfy Cloud key) as extra_data.api_key_comfy_org in POST /prompt only when the team
 * turned it on (PUT /cloud-providers/comfy_cloud {partner_nodes_on_agents: true}, audited, the entry
 * never carrying the key). The key reaches the agent in the Assign message (comfy_org_api_key) and
 * is in no log line of the node nor of the agent. Real node (PostgreSQL), `gantry agent --executor
 * comfyui` as a child process, the ComfyUI stand-in (local) recording what POST /prompt carried, and
 * the cloud stand-in answering the key check.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { startComfyStandin, type ComfyStandin } from '../fixtures/comfyui-standin.js';
import { makePki, type Pki } from '../events/helpers.js';
import { createLogger } from '../../src/shared/logger.js';
import { agentsOf, createWorkflow, runWorkflow, setupTeam, spawnAgent, tinyGraph, tmpDir, waitFor, waitTask, type AgentProcess, type TeamSetup } from '../agents/helpers.js';

const KEY = 'comfyui-partner-5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d';
let pki: Pki;
let cloud: ComfyStandin;
let comfy: ComfyStandin;
let t: TestNode;
let s: TeamSetup;
let agent: AgentProcess;
let logs = '';

before(async () => {
  pki = makePki();
  cloud = await startComfyStandin({ cloud: { apiKey: KEY, tls: { key: pki.key.toString(), cert: pki.cert.toString() } } });
  comfy = await startComfyStandin({ tickDelayMs: 5 });
  const sink = new PassThrough();
  sink.on('data', (c: Buffer) => (logs += c.toString('utf8')));
  t = await startTestNode({ GANTRY_OUTBOUND_CA_FILE: pki.caFile, GANTRY_CLOUD_POLL_MS: 100, GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1 }, 'partner_nodes', { logger: createLogger('debug', sink) });
  s = await setupTeam(t);
  agent = spawnAgent(['--server', `127.0.0.1:${t.node.grpcPort}`, '--credential', s.ak.value, '--executor', 'comfyui', '--comfy-url', comfy.url, '--state-dir', tmpDir('gantry-agent-state-'), '--models-dir', tmpDir('gantry-models-'), '--gpu', 'NVIDIA L4:24']);
  await waitFor('comfyui agent online', async () => (await agentsOf(t, s)).find((a) => a.agent_status === 'online'), 30_000);
});
after(async () => {
  agent.kill('SIGTERM');
  await agent.exited;
  await t.stop();
  await comfy.close();
  await cloud.close();
  pki.cleanup();
});

const admin = () => ({ token: s.user.accessToken, team: s.user.teamId });
const terminal = (x: Record<string, any>) => ['completed', 'failed', 'cancelled'].includes(x.task_status);

/** Runs the workflow on the agent; what POST /prompt carried to the local ComfyUI. */
async function localRun(wf: string): Promise<Record<string, unknown>> {
  const taskId = await runWorkflow(t, s, wf, { prompt: 'partner' });
  const done = await waitTask(t, s, taskId, terminal, 'terminal', 30_000);
  assert.equal(done.task_status, 'completed', JSON.stringify(done));
  const sent = comfy.received.prompts.at(-1);
  assert.ok(sent);
  return sent.body;
}

async function put(body: Record<string, unknown>): Promise<Record<string, any>> {
  const r = await t.http.put('/cloud-providers/comfy_cloud', { api_key: KEY, base_url: cloud.url, ...body }, admin());
  assert.equal(r.status, 200, r.text);
  assert.ok(!r.text.includes(KEY));
  return r.body;
}

test('partner-node key on agents: off by default (no extra_data), on after PUT {partner_nodes_on_agents: true} (the key in extra_data.api_key_comfy_org), kept by a PUT that omits it, off again; audited without the key; logged nowhere', async () => {
  const wf = await createWorkflow(t, s, tinyGraph(2));
  // no key at all: nothing to send
  assert.equal('extra_data' in (await localRun(wf)), false);

  // a key, the setting off (the default): local runs still send none
  assert.equal((await put({})).partner_nodes_on_agents, false);
  const off = await localRun(wf);
  assert.equal((off.extra_data as Record<string, unknown> | undefined)?.api_key_comfy_org, undefined, 'setting off: no key to the local ComfyUI');

  // turned on
  assert.equal((await put({ partner_nodes_on_agents: true })).partner_nodes_on_agents, true);
  const on = await localRun(wf);
  assert.deepEqual(on.extra_data, { api_key_comfy_org: KEY }, 'setting on: the team key reaches POST /prompt');

  // a PUT that omits the field (e.g. a key rotation) keeps it; the record shows it
  assert.equal((await put({ max_concurrent_jobs: 2 })).partner_nodes_on_agents, true);
  const rec = await t.http.get('/cloud-providers/comfy_cloud', admin());
  assert.equal(rec.body.partner_nodes_on_agents, true);
  assert.deepEqual((await localRun(wf)).extra_data, { api_key_comfy_org: KEY });

  // turned off again
  assert.equal((await put({ partner_nodes_on_agents: false })).partner_nodes_on_agents, false);
  assert.equal('extra_data' in (await localRun(wf)), false);
  const bad = await t.http.put('/cloud-providers/comfy_cloud', { api_key: KEY, base_url: cloud.url, partner_nodes_on_agents: 'yes' }, admin());
  assert.equal(bad.status, 400);

  // the cloud run always sends it
  const cwf = await createWorkflow(t, s, tinyGraph(2), { default_dispatch_target: 'comfy_cloud' });
  const ct = await runWorkflow(t, s, cwf);
  assert.equal((await waitTask(t, s, ct, terminal, 'cloud terminal', 30_000)).task_status, 'completed');
  assert.deepEqual(cloud.received.prompts.at(-1)?.body.extra_data, { api_key_comfy_org: KEY });

  // audited: each PUT is a cloud_provider.set entry saying the setting and whether it changed, never the key
  const audit = await t.http.get('/audit-log?action=cloud_provider.set&per_page=100', admin());
  assert.equal(audit.status, 200, audit.text);
  const entries = (audit.body.audit_list as Array<Record<string, any>>).slice().reverse();
  assert.deepEqual(
    entries.map((e) => [e.details.partner_nodes_on_agents, e.details.partner_nodes_on_agents_changed]),
    [[false, false], [true, true], [true, false], [false, true]],
  );
  assert.ok(!audit.text.includes(KEY.slice(8)), 'no audit entry carries the key');

  // never logged: not by the node, not by the agent (debug level on both)
  assert.ok(logs.length > 1000 && agent.lines.length > 10, 'logs were captured');
  assert.ok(!logs.includes(KEY.slice(8, 30)), 'the node logged no part of the key');
  assert.ok(!agent.lines.join('\n').includes(KEY.slice(8, 30)), 'the agent logged no part of the key');
});
