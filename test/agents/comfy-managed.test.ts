/**
 * A managed, self-healing ComfyUI on every agent (issue 25): a real node, `gantry agent --executor
 * comfyui --comfy-cmd "<the ComfyUI stand-in>"` child processes, the stand-in as the agent's own
 * child (it imports custom_nodes at start-up like nodes.py), the fake Python for pip.
 *  - ComfyUI killed mid-run: restarted, the attempt fails with a clear error, the retry completes;
 *  - watchdog: a prompt that stops progressing, and a ComfyUI that stops answering, are restarted;
 *  - a synced custom node is advertised only once ComfyUI loaded it; the task needing it runs only then
 *    (managed: provisioning waits for the restart; external: it fails with the reason until a restart);
 *    a sync while a task runs restarts ComfyUI only once the task has ended;
 *  - optional restarts after N runs and above a VRAM threshold;
 *  - requirements.txt is installed with --comfy-python; a failure fails only tasks needing the package;
 *  - models outside ComfyUI's known folders/extensions are not advertised, extra_model_paths.yaml dirs are;
 *  - no ComfyUI outlives a SIGKILLed agent, and a restarted agent reaps one left by a dead agent;
 *    ComfyUI does not inherit the agent's GANTRY_* variables (its credential).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { httpRequest } from '../helpers/s3.js';
import { startComfyStandin } from '../fixtures/comfyui-standin.js';
import { AGENT_TRANSPORTS, agentServer, agentsOf, createWorkflow, runWorkflow, setupTeam, spawnAgent, tinyGraph, tmpDir, waitFor, waitTask, type AgentProcess, type AgentTransportKind, type TeamSetup } from './helpers.js';
import { parseAgentArgs } from '../../src/agent/main.js';
import { readExtraModelPaths, scanComfyModels } from '../../src/agent/comfy-models.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const FAKE_PYTHON = join(root, 'test/fixtures/fake-python/python');
const STANDIN = join(root, 'test/fixtures/comfyui-standin.ts');

let t: TestNode;
let sql: pg.Client;
const procs: AgentProcess[] = [];
before(async () => {
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1, GANTRY_RETRY_BACKOFF_BASE_S: 0 }, 'agents_comfy_managed');
  sql = new pg.Client({ connectionString: t.db.url });
  await sql.connect();
});
after(async () => {
  for (const p of procs) p.kill('SIGTERM');
  await Promise.all(procs.map((p) => p.exited));
  await sql.end();
  await t.stop();
});

const terminal = (x: Record<string, any>): boolean => ['completed', 'failed', 'cancelled'].includes(x.task_status);
const as = (s: TeamSetup) => ({ token: s.user.accessToken, team: s.user.teamId });
const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });

/** Alive and not a zombie (an orphan is reaped by init, which may be slow or absent in a container). */
const pidAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return st.slice(st.lastIndexOf(')') + 2).split(' ')[0] !== 'Z';
  } catch {
    return false;
  }
};

interface Managed {
  agent: AgentProcess;
  base: string;
  state: string;
  url: string;
  machineId: string;
  /** The pid of the stand-in ComfyUI of the n-th start (1-based), from the agent's relayed output. */
  standinPid(n: number): Promise<number>;
  /** Log lines (parsed) in order. */
  parsed(): Array<Record<string, any>>;
}

const parse = (l: string): Record<string, any> => {
  try {
    return JSON.parse(l) as Record<string, any>;
  } catch {
    return { msg: l };
  }
};

/** A managed agent: the stand-in runs as its child, under <base>/ (custom_nodes, models, input/output). */
async function managedAgent(s: TeamSetup, extra: string[] = [], o: { env?: Record<string, string>; base?: string; state?: string; tickMs?: number; transport?: AgentTransportKind } = {}): Promise<Managed> {
  const base = o.base ?? tmpDir('gantry-managed-');
  mkdirSync(join(base, 'custom_nodes'), { recursive: true });
  mkdirSync(join(base, 'models', 'checkpoints'), { recursive: true });
  writeFileSync(join(base, 'models', 'checkpoints', 'v1-5-pruned-emaonly.safetensors'), Buffer.alloc(64));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const state = o.state ?? tmpDir('gantry-managed-state-');
  const machineId = `managed-${Math.random().toString(36).slice(2, 10)}`;
  const cmd = `${process.execPath} --import tsx ${STANDIN} --port ${port} --base-directory ${base} --tick-ms ${o.tickMs ?? 40}`;
  const agent = spawnAgent(
    ['--server', agentServer(t.node, o.transport ?? 'grpc'), '--credential', s.ak.value, '--executor', 'comfyui', '--comfy-url', url, '--comfy-cmd', cmd, '--models-dir', join(base, 'models'), '--custom-nodes-dir', join(base, 'custom_nodes'), '--state-dir', state, '--machine-id', machineId, '--gpu', 'NVIDIA L4:24', ...extra],
    { FAKE_PYTHON_SITE: join(base, 'site'), ...(o.env ?? {}) },
  );
  procs.push(agent);
  const parsed = (): Array<Record<string, any>> => agent.lines.map(parse);
  return {
    agent,
    base,
    state,
    url,
    machineId,
    parsed,
    async standinPid(n) {
      await waitFor(`stand-in start #${n}`, () => parsed().filter((l) => /comfyui-standin listening on .*\(pid \d+\)/.test(String(l.line ?? ''))).length >= n, 30_000);
      const lines = parsed().filter((l) => /comfyui-standin listening on .*\(pid \d+\)/.test(String(l.line ?? '')));
      return Number(/\(pid (\d+)\)/.exec(String(lines[n - 1]?.line))?.[1]);
    },
  };
}

const readyCount = (m: Managed): number => m.parsed().filter((l) => l.msg === 'comfyui: ready').length;
const agentRow = async (s: TeamSetup, machineId: string): Promise<{ id: string; models: string[]; custom_nodes: string[] } | undefined> =>
  (await sql.query('select id, models, custom_nodes from agents where team_id = $1 and machine_id = $2', [s.user.teamId, machineId])).rows[0];

/** A custom node package (tar.gz of <name>-main/...) registered with the team. */
async function registerPackage(s: TeamSetup, name: string, version: string, files: Record<string, string>): Promise<void> {
  const src = tmpDir('gantry-pkg-src-');
  const top = join(src, `${name}-main`);
  mkdirSync(top);
  for (const [f, text] of Object.entries(files)) writeFileSync(join(top, f), text);
  execFileSync('tar', ['-czf', join(src, 'pkg.tar.gz'), '-C', src, `${name}-main`]);
  const archive = readFileSync(join(src, 'pkg.tar.gz'));
  const pre = await t.http.post('/nodes/presign', { file_name: `${name}.tar.gz`, file_size: archive.length, content_type: 'application/gzip' }, as(s));
  assert.equal(pre.status, 200, pre.text);
  const put = await httpRequest(pre.body.upload_url, { method: 'PUT', headers: pre.body.upload_headers, body: archive });
  assert.equal(put.status, 200, put.body.toString());
  const r = await t.http.post('/nodes', { display_name: name, package_name: name, node_version: version, storage_key: pre.body.storage_key, file_size: archive.length }, as(s));
  assert.equal(r.status, 200, r.text);
  assert.equal(sha256(archive).length, 64);
}

const withNode = (cls: string, steps = 2): Record<string, unknown> => tinyGraph(steps, { '20': { class_type: cls, inputs: { images: ['8', 0] } } });

test('agent flags: --comfy-cmd needs the comfyui executor; --comfy-python defaults to the command\'s python; the watchdog defaults', () => {
  const base = ['--server', '127.0.0.1:1', '--credential', 'ak-x'];
  assert.throws(() => parseAgentArgs([...base, '--executor', 'simulate', '--comfy-cmd', 'python main.py'], {}), /--comfy-cmd needs --executor comfyui/);
  const c = parseAgentArgs([...base, '--comfy-cmd', '/opt/venv/bin/python3 main.py --port 8188'], {});
  assert.equal(c?.comfyPython, '/opt/venv/bin/python3');
  assert.equal(c?.comfyStallTimeoutS, 600);
  assert.equal(c?.comfyRestartAfterRuns, 0);
  assert.equal(parseAgentArgs([...base, '--comfy-cmd', 'cd /opt/ComfyUI && ./run.sh'], {})?.comfyPython, undefined);
  const e = parseAgentArgs(base, { GANTRY_AGENT_COMFY_CMD: 'python main.py', GANTRY_AGENT_COMFY_PYTHON: '/usr/bin/python3.12', GANTRY_AGENT_COMFY_STALL_TIMEOUT_S: '30' });
  assert.equal(e?.comfyCmd, 'python main.py');
  assert.equal(e?.comfyPython, '/usr/bin/python3.12');
  assert.equal(e?.comfyStallTimeoutS, 30);
  assert.throws(() => parseAgentArgs([...base, '--comfy-restart-vram-percent', '101'], {}), /between 0 and 100/);
});

test('extra_model_paths.yaml as utils/extra_config.py reads it: base_path with ~ and $VARS, paths relative to the file, legacy folder names, bad entries skipped', () => {
  const dir = tmpDir('gantry-extra-');
  const file = join(dir, 'extra.yaml');
  writeFileSync(
    file,
    ['envbase:', '  base_path: $GANTRY_TEST_EXTRA_BASE/models', '  is_default: true', '  unet: u', 'home:', '  base_path: ~/m', '  vae: v', 'relative:', '  clip: |', '    rel/a', '    /abs/b', 'odd: [1, 2]', 'nums:', '  loras: 3', ''].join('\n'),
  );
  const r = readExtraModelPaths(file, { GANTRY_TEST_EXTRA_BASE: '/srv/base' });
  assert.deepEqual(r.dirs, [
    { key: 'unet', dir: '/srv/base/models/u' },
    { key: 'vae', dir: join(os.homedir(), 'm', 'v') },
    { key: 'clip', dir: join(dir, 'rel/a') },
    { key: 'clip', dir: '/abs/b' },
  ]);
  assert.deepEqual(r.ignored, ['odd', 'nums.loras']);
  writeFileSync(file, 'a: [unclosed\n');
  assert.throws(() => readExtraModelPaths(file), new RegExp(`${file.replace(/[/.]/g, '\\$&')}: `));
});

// The agent's ComfyUI supervision on both agent transports (AGENT_TRANSPORTS): the stream only carries
// it, and each scenario's reports and retries cross whichever transport the agent uses.
for (const transport of AGENT_TRANSPORTS) {
  const agentOn = (s: TeamSetup, extra: string[] = [], o: Parameters<typeof managedAgent>[2] = {}): Promise<Managed> => managedAgent(s, extra, { ...o, transport });

  test(`[${transport}] managed: ComfyUI killed mid-run is restarted, the attempt fails with a clear error, the retry completes on the new ComfyUI`, async () => {
    const s = await setupTeam(t);
    const m = await agentOn(s, [], { tickMs: 15 });
    await m.agent.waitLine((l) => l.msg === 'comfyui: ready', 'ComfyUI ready', 30_000);
    const first = await m.standinPid(1);
    const wf = await createWorkflow(t, s, tinyGraph(300), { max_retries: 1 });
    const taskId = await runWorkflow(t, s, wf, { prompt: 'killed' });
    await waitTask(t, s, taskId, (x) => x.task_status === 'running' && (x.progress?.step_current ?? 0) >= 2, 'running with sampler progress', 30_000);
    process.kill(first, 'SIGKILL');
    const failed = await waitTask(t, s, taskId, terminal, 'the attempt ends', 20_000);
    assert.equal(failed.task_status, 'failed', JSON.stringify(failed));
    assert.match(String(failed.task_error), /ComfyUI exited unexpectedly \(.+\) while this task ran; the agent restarted it/);
    assert.ok(failed.retry_task_id, 'a retry was created');
    const retry = await waitTask(t, s, failed.retry_task_id, terminal, 'the retry ends', 40_000);
    assert.equal(retry.task_status, 'completed', JSON.stringify(retry));
    assert.equal(retry.attempt, 2);
    const second = await m.standinPid(2);
    assert.notEqual(second, first, 'a new ComfyUI process');
    assert.equal(pidAlive(first), false);
    assert.ok(readyCount(m) >= 2, 'ComfyUI became ready again');
  });

  test(`[${transport}] managed watchdog: a prompt that stops progressing, and a ComfyUI that stops answering, are restarted; the attempt fails and its retry completes`, async () => {
    const s = await setupTeam(t);
    const m = await agentOn(s, ['--comfy-stall-timeout-s', '2'], { tickMs: 10 });
    await m.agent.waitLine((l) => l.msg === 'comfyui: ready', 'ComfyUI ready', 30_000);
    const wf = await createWorkflow(t, s, tinyGraph(400), { max_retries: 1 });
    const taskId = await runWorkflow(t, s, wf, { prompt: 'stalls' });
    await waitTask(t, s, taskId, (x) => x.task_status === 'running' && (x.progress?.step_current ?? 0) >= 2, 'running with sampler progress', 30_000);
    // the stand-in's hook: the sampler stops between two steps, HTTP still answers
    process.kill(await m.standinPid(1), 'SIGUSR1');
    const failed = await waitTask(t, s, taskId, terminal, 'the stalled attempt ends', 20_000);
    assert.equal(failed.task_status, 'failed', JSON.stringify(failed));
    assert.match(String(failed.task_error), /ComfyUI made no progress on the running prompt for 2 s \(watchdog, --comfy-stall-timeout-s\); the agent restarted it/);
    const retry = await waitTask(t, s, failed.retry_task_id, terminal, 'the retry ends', 40_000);
    assert.equal(retry.task_status, 'completed', JSON.stringify(retry));

    // a ComfyUI that stops answering at all (SIGSTOP: frozen, port open) is killed and started again
    await waitFor('ready after the stall restart', () => readyCount(m) >= 2, 20_000);
    const frozen = await m.standinPid(2);
    process.kill(frozen, 'SIGSTOP');
    await m.agent.waitLine((l) => l.msg === 'comfyui watchdog: restarting ComfyUI' && /stopped answering/.test(String(l.why)), 'the unanswered watchdog', 20_000);
    await waitFor('ready after the freeze', () => readyCount(m) >= 3, 30_000);
    await waitFor('the frozen ComfyUI is gone', () => !pidAlive(frozen), 10_000);
    const after = await runWorkflow(t, s, wf, { prompt: 'after the freeze' });
    assert.equal((await waitTask(t, s, after, terminal, 'a task after the freeze', 30_000)).task_status, 'completed');
  });

  test(`[${transport}] managed: a synced custom node is advertised only after ComfyUI loaded it, and the task needing it runs only then`, async () => {
    const s = await setupTeam(t);
    const m = await agentOn(s, ['--sync-interval-s', '0']);
    await m.agent.waitLine((l) => l.msg === 'comfyui: ready', 'ComfyUI ready', 30_000);
    await waitFor('agent online', async () => (await agentsOf(t, s)).find((a) => a.agent_status === 'online'), 20_000);
    await registerPackage(s, 'GantryPkg', '1.0.0', { '__init__.py': 'from .nodes import GantryTestNode\nNODE_CLASS_MAPPINGS = {"GantryTestNode": GantryTestNode}\n', 'nodes.py': 'class GantryTestNode:\n    pass\n' });
    const wf = await createWorkflow(t, s, withNode('GantryTestNode'), { max_retries: 0 });
    const taskId = await runWorkflow(t, s, wf, { prompt: 'needs the custom node' });
    const done = await waitTask(t, s, taskId, terminal, 'terminal', 45_000);
    assert.equal(done.task_status, 'completed', JSON.stringify(done));
    assert.equal(done.attempt, 1, 'the first attempt ran it: never sent to a ComfyUI without the node');
    const lines = m.parsed();
    const idx = (pred: (l: Record<string, any>) => boolean, what: string): number => {
      const i = lines.findIndex(pred);
      assert.ok(i >= 0, `no log line for ${what}`);
      return i;
    };
    const synced = idx((l) => l.msg === 'sync: downloading custom node package' && l.package_name === 'GantryPkg', 'the sync');
    const imported = idx((l) => /0\.0 seconds: .*custom_nodes\/GantryPkg$/.test(String(l.line ?? '')), 'ComfyUI importing it');
    const ready2 = lines.findIndex((l, i) => i > imported && l.msg === 'comfyui: ready');
    const advertised = idx((l) => l.msg === 'inventory changed' && (l.custom_node_names ?? []).includes('GantryPkg@1.0.0'), 'the inventory with it');
    const queued = idx((l) => l.msg === 'comfyui: prompt queued', 'the prompt reaching ComfyUI');
    assert.ok(synced < imported && imported < ready2 && ready2 <= advertised && advertised < queued, `order: sync ${synced} < import ${imported} < ready ${ready2} <= advertised ${advertised} < prompt ${queued}`);
    assert.ok(!lines.slice(0, advertised).some((l) => l.msg === 'inventory changed' && JSON.stringify(l.custom_node_names ?? []).includes('GantryPkg')), 'not advertised before');
    assert.ok(lines.slice(synced, ready2).some((l) => l.msg === 'custom nodes not advertised: ComfyUI has not loaded them'), 'held back between install and load');
    assert.ok((await agentRow(s, m.machineId))?.custom_nodes.includes('GantryPkg@1.0.0'));
    const events = (await sql.query(`select payload from task_events where task_id = $1 and event_type = 'status' order by id`, [taskId])).rows.map((r: { payload: { status: string } }) => r.payload.status);
    assert.ok(events.includes('provisioning'), `provisioned first: ${events.join(' > ')}`);
  });

  test(`[${transport}] managed: a package synced while a task runs restarts ComfyUI only when that task has ended`, async () => {
    const s = await setupTeam(t);
    const m = await agentOn(s, [], { tickMs: 15 });
    await m.agent.waitLine((l) => l.msg === 'comfyui: ready', 'ComfyUI ready', 30_000);
    const long = await runWorkflow(t, s, await createWorkflow(t, s, tinyGraph(300), { max_retries: 0 }), { prompt: 'long' });
    await waitTask(t, s, long, (x) => x.task_status === 'running' && (x.progress?.step_current ?? 0) >= 2, 'running', 30_000);
    // the registry change hints the agent: it syncs now, while the task runs
    await registerPackage(s, 'LatePkg', '1.0', { '__init__.py': 'NODE_CLASS_MAPPINGS = {"LateNode": object}\n' });
    await m.agent.waitLine((l) => l.msg === 'comfyui: restart requested; it happens when the running tasks end', 'the deferred restart', 30_000);
    const done = await waitTask(t, s, long, terminal, 'the long task', 30_000);
    assert.equal(done.task_status, 'completed', JSON.stringify(done));
    await waitFor('advertised after the restart', async () => (await agentRow(s, m.machineId))?.custom_nodes.includes('LatePkg@1.0'), 30_000);
    // the task was not killed (it completed at its first attempt), and the one restart came after the deferral
    assert.equal(done.attempt, 1);
    const lines = m.parsed();
    const deferred = lines.findIndex((l) => l.msg === 'comfyui: restart requested; it happens when the running tasks end');
    const restarting = lines.findIndex((l) => l.msg === 'comfyui: restarting');
    assert.ok(deferred >= 0 && restarting > deferred, `restarted (${restarting}) after the deferral (${deferred})`);
    assert.equal(readyCount(m), 2);
  });

  test(`[${transport}] external ComfyUI: a package synced while it runs is not advertised (a task needing it fails with the reason) until ComfyUI restarts`, async () => {
    const s = await setupTeam(t);
    const base = tmpDir('gantry-external-');
    const nodesDir = join(base, 'custom_nodes');
    mkdirSync(nodesDir, { recursive: true });
    mkdirSync(join(base, 'models'), { recursive: true });
    let comfy = await startComfyStandin({ customNodesDir: nodesDir, dataDir: join(base, 'data'), tickDelayMs: 20 });
    const port = comfy.port;
    const machineId = `external-${s.user.teamId}`;
    const agent = spawnAgent(['--server', agentServer(t.node, transport), '--credential', s.ak.value, '--executor', 'comfyui', '--comfy-url', comfy.url, '--models-dir', join(base, 'models'), '--custom-nodes-dir', nodesDir, '--state-dir', tmpDir('gantry-ext-state-'), '--machine-id', machineId, '--gpu', 'NVIDIA L4:24']);
    procs.push(agent);
    try {
      await agent.waitLine((l) => l.msg === 'comfyui: connected', 'connected to ComfyUI', 20_000);
      await waitFor('the agent row', async () => (await agentRow(s, machineId)) !== undefined);
      // registered now: the server's sync hint makes the agent install it; the running ComfyUI does not import it
      await registerPackage(s, 'ExtPkg', '2.0', { '__init__.py': 'NODE_CLASS_MAPPINGS = {"ExtNode": object}\n' });
      await waitFor('unpacked', () => existsSync(join(nodesDir, 'ExtPkg', '__init__.py')), 20_000);
      const held = await agent.waitLine((l) => l.msg === 'custom nodes not advertised: ComfyUI has not loaded them' && JSON.stringify(l.not_loaded).includes('ExtPkg@2.0'), 'held back', 20_000);
      assert.match(JSON.stringify(held.not_loaded), /installed after ComfyUI started/);
      await waitFor('the agent row', async () => (await agentRow(s, machineId)) !== undefined);
      assert.ok(!(await agentRow(s, machineId))?.custom_nodes.includes('ExtPkg@2.0'), 'not advertised');
      const wf = await createWorkflow(t, s, withNode('ExtNode'), { max_retries: 0 });
      const before1 = comfy.received.prompts.length;
      const t1 = await runWorkflow(t, s, wf, { prompt: 'too early' });
      const f1 = await waitTask(t, s, t1, terminal, 'terminal', 30_000);
      assert.equal(f1.task_status, 'failed');
      assert.match(String(f1.task_error), /node class\(es\) ComfyUI does not have \(ExtNode\); custom node package ExtPkg@2\.0 \(node class ExtNode\) is not loaded: it was installed after ComfyUI started/);
      assert.equal(comfy.received.prompts.length, before1, 'the prompt never reached ComfyUI');
      // a task that does not need it runs
      const plain = await runWorkflow(t, s, await createWorkflow(t, s, tinyGraph(2)), { prompt: 'plain' });
      assert.equal((await waitTask(t, s, plain, terminal, 'plain', 30_000)).task_status, 'completed');
      // the operator restarts ComfyUI: it imports the package, the agent sees the new start and advertises it
      await comfy.close();
      comfy = await startComfyStandin({ port, customNodesDir: nodesDir, dataDir: join(base, 'data'), tickDelayMs: 20 });
      assert.deepEqual(comfy.customNodeImports.map((i) => [i.module, i.ok]), [['ExtPkg', true]]);
      await waitFor('advertised after the restart', async () => (await agentRow(s, machineId))?.custom_nodes.includes('ExtPkg@2.0'), 20_000);
      const t2 = await runWorkflow(t, s, wf, { prompt: 'now' });
      assert.equal((await waitTask(t, s, t2, terminal, 'terminal', 30_000)).task_status, 'completed');
    } finally {
      agent.kill('SIGTERM');
      await agent.exited;
      await comfy.close();
    }
  });

  test(`[${transport}] managed: requirements.txt is installed with --comfy-python; a failed install fails only the tasks using that package`, async () => {
    const s = await setupTeam(t);
    await registerPackage(s, 'PkgOk', '1.0', { '__init__.py': 'import gantry_ok_dep\nNODE_CLASS_MAPPINGS = {"OkNode": object}\n', 'requirements.txt': 'gantry-ok-dep==1.2\n' });
    await registerPackage(s, 'PkgBad', '1.0', { '__init__.py': 'import gantry_missing_dep\nNODE_CLASS_MAPPINGS = {"BadNode": object}\n', 'requirements.txt': '# needs\ngantry-missing-dep>=2\n' });
    const m = await agentOn(s, ['--comfy-python', FAKE_PYTHON], { env: { FAKE_PIP_UNAVAILABLE: 'gantry-missing-dep' } });
    await waitFor('PkgOk advertised', async () => (await agentRow(s, m.machineId))?.custom_nodes.includes('PkgOk@1.0'), 45_000);
    assert.ok(!(await agentRow(s, m.machineId))?.custom_nodes.includes('PkgBad@1.0'), 'the package whose requirements failed is not advertised');
    const site = join(m.base, 'site');
    const calls = readFileSync(join(site, '.invocations.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { argv: string[]; cwd: string; exit: number });
    const ok = calls.find((c) => c.cwd.endsWith('/custom_nodes/PkgOk'));
    const bad = calls.find((c) => c.cwd.endsWith('/custom_nodes/PkgBad'));
    assert.deepEqual(ok?.argv, ['-m', 'pip', 'install', '-r', join(m.base, 'custom_nodes', 'PkgOk', 'requirements.txt')]);
    assert.equal(ok?.exit, 0);
    assert.equal(bad?.exit, 1);
    assert.ok(existsSync(join(site, 'gantry_ok_dep-1.2.dist-info')), 'installed into the Python ComfyUI runs with');
    assert.ok(m.parsed().some((l) => l.msg === 'comfyui output' && /IMPORT FAILED\): .*PkgBad$/.test(String(l.line))), 'ComfyUI failed to import PkgBad');
    assert.ok(m.parsed().some((l) => l.msg === 'pip output' && /No matching distribution found for gantry-missing-dep/.test(String(l.line))), 'pip output logged');

    const okTask = await runWorkflow(t, s, await createWorkflow(t, s, withNode('OkNode'), { max_retries: 0 }), { prompt: 'ok' });
    const badTask = await runWorkflow(t, s, await createWorkflow(t, s, withNode('BadNode'), { max_retries: 0 }), { prompt: 'bad' });
    const plainTask = await runWorkflow(t, s, await createWorkflow(t, s, tinyGraph(2), { max_retries: 0 }), { prompt: 'plain' });
    assert.equal((await waitTask(t, s, okTask, terminal, 'ok', 30_000)).task_status, 'completed');
    const b = await waitTask(t, s, badTask, terminal, 'bad', 30_000);
    assert.equal(b.task_status, 'failed');
    assert.match(String(b.task_error), /custom node package PkgBad@1\.0 \(node class BadNode\) is not loaded: its requirements could not be installed: python -m pip install -r requirements\.txt failed \(exit 1\): .*No matching distribution found for gantry-missing-dep/);
    assert.doesNotMatch(String(b.task_error), /PkgOk/);
    assert.equal((await waitTask(t, s, plainTask, terminal, 'plain', 30_000)).task_status, 'completed');
  });

  test(`[${transport}] models: only what ComfyUI sees is advertised (known folders and extensions, extra_model_paths.yaml dirs), and a workflow can require an extra-dir model`, async () => {
    const s = await setupTeam(t);
    const base = tmpDir('gantry-models-');
    const models = join(base, 'models');
    const put = (rel: string): void => {
      mkdirSync(join(rel, '..'), { recursive: true });
      writeFileSync(rel, 'x');
    };
    for (const f of ['checkpoints/v1-5-pruned-emaonly.safetensors', 'checkpoints/sdxl/base.CKPT', 'checkpoints/readme.txt', 'loras/style.pt', 'unet/flux.sft', 'clip/t5.bin', 'configs/v1.yaml', 'configs/v1.safetensors', 'random/thing.safetensors', 'classifiers/noext', 'classifiers/x.bin', '.hidden/a.safetensors', 'top.safetensors'])
      put(join(models, f));
    const a1111 = join(base, 'a1111');
    for (const f of ['models/Stable-diffusion/ext-model.safetensors', 'models/Stable-diffusion/notes.md', 'models/Lora/l1.safetensors', 'models/LyCORIS/l2.safetensors', 'mine/anything.gguf']) put(join(a1111, f));
    // the default location: <models-dir>/../extra_model_paths.yaml
    writeFileSync(
      join(base, 'extra_model_paths.yaml'),
      `a111:\n    base_path: ${a1111}\n    checkpoints: models/Stable-diffusion\n    loras: |\n         models/Lora\n         models/LyCORIS\n    my_models: mine\n    custom_nodes: nodes\nbroken: ~\n`,
    );
    const expected = [
      'checkpoints/ext-model.safetensors',
      'checkpoints/sdxl/base.CKPT',
      'checkpoints/v1-5-pruned-emaonly.safetensors',
      'classifiers/noext',
      'clip/t5.bin',
      'configs/v1.yaml',
      'loras/l1.safetensors',
      'loras/l2.safetensors',
      'loras/style.pt',
      'my_models/anything.gguf',
      'unet/flux.sft',
    ];
    // in process, then through a real agent and node
    assert.deepEqual((await scanComfyModels(models, readExtraModelPaths(join(base, 'extra_model_paths.yaml')).dirs)).map((e) => e.path), expected);
    const comfy = await startComfyStandin({ tickDelayMs: 10 });
    const machineId = `models-${s.user.teamId}`;
    const agent = spawnAgent(['--server', agentServer(t.node, transport), '--credential', s.ak.value, '--executor', 'comfyui', '--comfy-url', comfy.url, '--models-dir', models, '--state-dir', tmpDir('gantry-models-state-'), '--machine-id', machineId, '--gpu', 'NVIDIA L4:24']);
    procs.push(agent);
    try {
      const row = await waitFor('the agent row', () => agentRow(s, machineId), 20_000);
      assert.deepEqual([...row.models].sort(), expected);
      const wf = await createWorkflow(t, s, tinyGraph(2), { required_models: ['checkpoints/ext-model.safetensors'], max_retries: 0 });
      const task = await runWorkflow(t, s, wf, { prompt: 'extra dir' });
      const done = await waitTask(t, s, task, terminal, 'terminal', 30_000);
      assert.equal(done.task_status, 'completed', JSON.stringify(done));
      assert.equal(done.agent_id, row.id);
      // a workflow requiring a file ComfyUI cannot see waits: no agent has it
      const hidden = await runWorkflow(t, s, await createWorkflow(t, s, tinyGraph(2), { required_models: ['random/thing.safetensors'] }), { prompt: 'x' });
      await waitTask(t, s, hidden, (x) => x.task_status === 'waiting', 'waiting');
      await t.http.post(`/r/tasks/${hidden}/cancel`, undefined, { token: s.sk.value });
    } finally {
      agent.kill('SIGTERM');
      await agent.exited;
      await comfy.close();
    }
  });

  test(`[${transport}] managed: no ComfyUI outlives a SIGKILLed agent, and a restarted agent kills one a dead agent left (pid file)`, async () => {
    const s = await setupTeam(t);
    const m = await agentOn(s, [], { env: { GANTRY_AGENT_CREDENTIAL: s.ak.value } });
    await m.agent.waitLine((l) => l.msg === 'comfyui: ready', 'ComfyUI ready', 30_000);
    const pid = await m.standinPid(1);
    // third-party code never sees the agent's credential
    const environ = readFileSync(`/proc/${pid}/environ`, 'utf8');
    assert.ok(environ.includes('FAKE_PYTHON_SITE='), 'the rest of the environment is passed on');
    assert.ok(!environ.includes(s.ak.value) && !environ.includes('GANTRY_AGENT_'), 'no GANTRY_* variable reaches ComfyUI');
    const pidFile = JSON.parse(readFileSync(join(m.state, 'comfyui.pid'), 'utf8')) as { pid: number; start: string };
    assert.ok(pidFile.pid > 0 && pidFile.start.length > 0);
    m.agent.kill('SIGKILL');
    await m.agent.exited;
    await waitFor('the ComfyUI of the killed agent exits', () => !pidAlive(pid), 10_000);
    // a leftover the pipe watcher could not take down (e.g. it was killed itself): same pid and start time as the pid file
    const leftover = spawn('/bin/sh', ['-c', 'sleep 300'], { detached: true, stdio: 'ignore' });
    leftover.unref();
    const lpid = leftover.pid as number;
    const stat = readFileSync(`/proc/${lpid}/stat`, 'utf8');
    writeFileSync(join(m.state, 'comfyui.pid'), JSON.stringify({ pid: lpid, start: stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] }));
    const m2 = await agentOn(s, [], { base: m.base, state: m.state });
    await m2.agent.waitLine((l) => l.msg === 'comfyui: killing the ComfyUI a previous agent process left running' && l.pid === lpid, 'the reap', 20_000);
    await waitFor('the leftover is gone', () => !pidAlive(lpid), 10_000);
    await m2.agent.waitLine((l) => l.msg === 'comfyui: ready', 'ComfyUI ready again', 30_000);
  });

  test(`[${transport}] managed: --comfy-restart-after-runs and --comfy-restart-vram-percent restart ComfyUI between runs`, async () => {
    const s = await setupTeam(t);
    // the stand-in's /system_stats: 25.39 GB total, 24.02 GB free = 5.4 % used
    const vram = await agentOn(s, ['--comfy-restart-vram-percent', '5'], { tickMs: 5 });
    const team2 = await setupTeam(t);
    const runs = await agentOn(team2, ['--comfy-restart-after-runs', '2'], { tickMs: 5 });
    await vram.agent.waitLine((l) => l.msg === 'comfyui: ready', 'ComfyUI ready', 30_000);
    const wf = await createWorkflow(t, s, tinyGraph(2), { max_retries: 0 });
    assert.equal((await waitTask(t, s, await runWorkflow(t, s, wf), terminal, 'a run', 30_000)).task_status, 'completed');
    const r = await vram.agent.waitLine((l) => l.msg === 'comfyui: restarting', 'the VRAM restart', 20_000);
    assert.match(String(r.why), /uses 5\.\d% of its VRAM after a run \(--comfy-restart-vram-percent 5\)/);
    await waitFor('ready again', () => readyCount(vram) >= 2, 30_000);

    await runs.agent.waitLine((l) => l.msg === 'comfyui: ready', 'ComfyUI ready', 30_000);
    const wf2 = await createWorkflow(t, team2, tinyGraph(2), { max_retries: 0 });
    assert.equal((await waitTask(t, team2, await runWorkflow(t, team2, wf2), terminal, 'run 1', 30_000)).task_status, 'completed');
    assert.ok(!runs.parsed().some((l) => l.msg === 'comfyui: restarting'), 'no restart after one run');
    assert.equal((await waitTask(t, team2, await runWorkflow(t, team2, wf2), terminal, 'run 2', 30_000)).task_status, 'completed');
    const r2 = await runs.agent.waitLine((l) => l.msg === 'comfyui: restarting', 'the restart after 2 runs', 20_000);
    assert.match(String(r2.why), /2 run\(s\) since the last start \(--comfy-restart-after-runs\)/);
    await waitFor('ready again', () => readyCount(runs) >= 2, 30_000);
  });
}
