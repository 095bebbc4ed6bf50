/**
 * End to end with `gantry agent --executor nerfstudio` (the fake ns-* toolchain of test/fixtures/
 * ns-bin) as a child process of a real node: a training killed at 60% with the agent (SIGKILL)
 * dies with it; the restarted agent reaps what was left of its process group; the retry resumes
 * from the checkpoint the first attempt uploaded (--load-dir), runs fewer than 1.5x the configured
 * steps in all, and its export is downloadable.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { renderSeededPng } from '../../src/agent/png.js';
import { AGENT_TRANSPORTS, agentServer, setupTeam, spawnAgent, tmpDir, waitFor, waitTask, type AgentProcess, type AgentTransportKind, type TeamSetup } from './helpers.js';

const binDir = fileURLToPath(new URL('../fixtures/ns-bin/', import.meta.url));
const hasSetpriv = ['/usr/bin/setpriv', '/bin/setpriv', '/usr/sbin/setpriv'].some((p) => existsSync(p));

let t: TestNode;
const procs: AgentProcess[] = [];
before(async () => {
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1, GANTRY_RETRY_BACKOFF_BASE_S: 0 }, 'agents_ns');
});
after(async () => {
  for (const p of procs) p.kill('SIGKILL');
  await Promise.all(procs.map((p) => p.exited));
  await t.stop();
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return st.slice(st.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

function agent(s: TeamSetup, stateDir: string, env: Record<string, string>, transport: AgentTransportKind): AgentProcess {
  const p = spawnAgent(['--server', agentServer(t.node, transport), '--credential', s.ak.value, '--executor', 'nerfstudio', '--ns-bin-dir', binDir, '--state-dir', stateDir, '--gpu', 'NVIDIA RTX 4090:24'], env);
  procs.push(p);
  return p;
}

// The killed agent and the restarted one use the first and the last of the suite's transports (gRPC
// then WebSocket by default): the checkpoint calls are made on both.
const firstTransport = AGENT_TRANSPORTS[0]!;
const secondTransport = AGENT_TRANSPORTS[AGENT_TRANSPORTS.length - 1]!;

test(`[${firstTransport} -> ${secondTransport}] a training killed with its agent at 60% is retried and resumes from the last uploaded checkpoint; the export is downloadable`, { timeout: 120_000 }, async (tc) => {
  const s = await setupTeam(t);
  const capture = tmpDir('gantry-ns-capture-');
  await mkdir(capture, { recursive: true });
  for (const n of ['1.png', '2.png', '3.png']) await writeFile(path.join(capture, n), renderSeededPng(n, { width: 8, height: 8 }));
  const total = 800;
  const r = await t.http.post(
    '/workflows',
    {
      workflow_slug: `ns-${Math.random().toString(36).slice(2, 10)}`,
      display_name: 'splat resume',
      tool_type: 'nerfstudio',
      workflow_json: { method: 'splatfacto', data: { source: 'path', path: capture }, process_data: { input_type: 'images' }, train: { max_num_iterations: total, steps_per_save: 100 }, export: { format: 'gaussian-splat' } },
      parameters: [],
      max_retries: 1,
    },
    { token: s.user.accessToken, team: s.user.teamId },
  );
  assert.equal(r.status, 200, r.text);
  const stateDir = tmpDir('gantry-ns-agent-state-');
  const stepsLog = path.join(tmpDir('gantry-ns-steps-'), 'steps.log');
  const workerPidFile = path.join(tmpDir('gantry-ns-worker-'), 'worker.pid');
  const env = { NS_FAKE_STEP_MS: '6', NS_FAKE_STEPS_LOG: stepsLog, NS_FAKE_WORKER_PIDFILE: workerPidFile };

  const a1 = agent(s, stateDir, env, firstTransport);
  await a1.waitLine((l) => l.msg === 'connected to the server', 'connected', 30_000);
  const run = await t.http.post(`/r/workflows/${r.body.id as string}/run`, { parameters: {} }, { token: s.sk.value });
  assert.equal(run.status, 202, run.text);
  const taskId = run.body.task_id as string;

  // a checkpoint is uploaded while it trains; then the agent dies at 60%
  await a1.waitLine((l) => typeof l.msg === 'string' && /^nerfstudio: checkpoint of step \d+ uploaded$/.test(l.msg), 'a checkpoint uploaded', 60_000);
  await waitTask(t, s, taskId, (x) => (x.progress?.step_current ?? 0) >= total * 0.6, '60% trained', 60_000);
  const workerPid = Number(readFileSync(workerPidFile, 'utf8'));
  const trainerPid = Number(readFileSync(`/proc/${workerPid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
  assert.ok(alive(trainerPid) && alive(workerPid));
  a1.kill('SIGKILL');
  await a1.exited;
  if (hasSetpriv) await waitFor('ns-train to die with its agent (setpriv --pdeathsig)', () => !alive(trainerPid), 5_000, 20);

  // the first attempt fails (agent lost after the grace period) and its retry is created
  const failed = await waitTask(t, s, taskId, (x) => x.task_status === 'failed', 'failed', 30_000);
  const retryId = failed.retry_task_id as string;
  assert.ok(retryId, JSON.stringify(failed));

  // the restarted agent stops what the dead one left running, then runs the retry from the checkpoint
  const a2 = agent(s, stateDir, { ...env, NS_FAKE_WORKER_PIDFILE: `${workerPidFile}.2` }, secondTransport);
  await waitFor('the leftover process group to be reaped', () => !alive(workerPid), 15_000, 20);
  const done = await waitTask(t, s, retryId, (x) => ['completed', 'failed', 'cancelled'].includes(x.task_status as string), 'retry terminal', 60_000);
  assert.equal(done.task_status, 'completed', JSON.stringify(done));
  const trainCmd = a2.lines.find((l) => l.includes('nerfstudio: ns-train '));
  assert.match(trainCmd ?? '', /--load-dir \S+\/resume\/nerfstudio_models/, 'the retry loaded the checkpoint');
  const rows = readFileSync(stepsLog, 'utf8').trim().split('\n').map(Number);
  const resumedAt = rows.findIndex((v, i) => i > 0 && v < (rows[i - 1] ?? 0));
  assert.ok(resumedAt > 0 && (rows[resumedAt] ?? 0) > 100, `the second run started after a checkpoint (rows ${rows.slice(Math.max(0, resumedAt - 2), resumedAt + 2).join(',')})`);
  assert.ok(rows.length * 10 < total * 1.5, `steps run in all: about ${rows.length * 10} for ${total} configured`);
  tc.diagnostic(`first attempt killed at step ~${rows[resumedAt - 1]}, retry resumed at step ${rows[resumedAt]}; about ${rows.length * 10} steps run for ${total} configured`);

  const res = await t.http.get(`/r/tasks/${retryId}/result`, { token: s.sk.value });
  assert.equal(res.status, 200, res.text);
  const url = res.body.download_url as string;
  assert.match(String(res.body.output?.storage_key ?? ''), /\/splat\.ply$/);
  const ply = Buffer.from(await (await fetch(url)).arrayBuffer());
  assert.match(ply.subarray(0, 40).toString('latin1'), /^ply\nformat binary_little_endian/);
  // bounded: one checkpoint object remains for the chain (the retry's latest replaced the first attempt's)
  const dataDir = t.dataDir;
  const found: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (p.includes(`${path.sep}checkpoints${path.sep}`) && p.endsWith('.tar')) found.push(p);
    }
  };
  walk(dataDir);
  assert.ok(found.length <= 1, `checkpoint objects left: ${found.join(', ')}`);
});
