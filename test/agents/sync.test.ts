/**
 * Model and custom node sync end to end: a real node, real gRPC, `gantry agent --executor simulate`
 * child processes with temp models dirs. A model marked active reaches the agent's models dir with
 * the right SHA-256 (through provisioning: the first task sent to an agent that lacks it goes
 * provisioning -> queued -> running), a workflow requiring it is only scheduled once the agent has
 * it, disabling it excludes it from the next manifest and from a fresh agent's sync, a custom node
 * package is unpacked into custom_nodes/<package_name> on a server hint and reported as
 * <package_name>@<node_version>, and a model that cannot be synced (corrupted object, a legacy path
 * agents refuse) is skipped: it fails only the tasks whose workflow requires it, with a clear error.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type * as grpc from '@grpc/grpc-js';
import pg from 'pg';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { httpRequest } from '../helpers/s3.js';
import { AGENT_TRANSPORTS, agentServer, bearer, createWorkflow, rawClient, runWorkflow, setupTeam, spawnAgent, tinyGraph, tmpDir, waitFor, waitTask, type AgentProcess, type TeamSetup } from './helpers.js';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ModelSyncer, customNodeInventory, resolveInside } from '../../src/agent/sync.js';
import { createLogger } from '../../src/shared/logger.js';
import type { SyncManifest__Output } from '../../src/gen/gantry/agent/v1/SyncManifest.js';

let t: TestNode;
let sql: pg.Client;
const procs: AgentProcess[] = [];
before(async () => {
  t = await startTestNode({ GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1 }, 'agents_sync');
  sql = new pg.Client({ connectionString: t.db.url });
  await sql.connect();
});
after(async () => {
  for (const p of procs) p.kill('SIGKILL');
  await Promise.all(procs.map((p) => p.exited));
  await sql.end();
  await t.stop();
});

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const as = (s: TeamSetup) => ({ token: s.user.accessToken, team: s.user.teamId });

/** The transport the agents of the next test use (the model sync tests run once per transport). */
let transport: (typeof AGENT_TRANSPORTS)[number] = 'grpc';

function agent(s: TeamSetup, extra: string[]): AgentProcess {
  const p = spawnAgent([
    '--server',
    agentServer(t.node, transport),
    '--credential',
    s.ak.value,
    '--executor',
    'simulate',
    '--state-dir',
    tmpDir('gantry-agent-state-'),
    '--gpu',
    'NVIDIA RTX 4090:24',
    '--simulate-duration-ms',
    '100',
    '--simulate-steps',
    '2',
    ...extra,
  ]);
  procs.push(p);
  return p;
}

/** Presign, PUT (every signed header), POST /models: an active model with these bytes. */
async function createModel(s: TeamSetup, modelPath: string, bytes: Buffer): Promise<{ id: string; storageKey: string }> {
  const pre = await t.http.post('/models/presign', { file_name: modelPath.split('/').pop(), file_size: bytes.length, content_type: 'application/octet-stream' }, as(s));
  assert.equal(pre.status, 200, pre.text);
  const put = await httpRequest(pre.body.upload_url, { method: 'PUT', headers: pre.body.upload_headers, body: bytes });
  assert.equal(put.status, 200, put.body.toString());
  const r = await t.http.post('/models', { display_name: modelPath, model_type: 'checkpoints', model_path: modelPath, storage_key: pre.body.storage_key, file_size: bytes.length, sha256: sha256(bytes) }, as(s));
  assert.equal(r.status, 200, r.text);
  return { id: r.body.id as string, storageKey: pre.body.storage_key as string };
}

async function createNode(s: TeamSetup, packageName: string, nodeVersion: string, archive: Buffer): Promise<string> {
  const pre = await t.http.post('/nodes/presign', { file_name: `${packageName}.tar.gz`, file_size: archive.length, content_type: 'application/gzip' }, as(s));
  assert.equal(pre.status, 200, pre.text);
  const put = await httpRequest(pre.body.upload_url, { method: 'PUT', headers: pre.body.upload_headers, body: archive });
  assert.equal(put.status, 200, put.body.toString());
  const r = await t.http.post('/nodes', { display_name: packageName, package_name: packageName, node_version: nodeVersion, storage_key: pre.body.storage_key, file_size: archive.length }, as(s));
  assert.equal(r.status, 200, r.text);
  return r.body.id as string;
}

const statusEvents = async (taskId: string): Promise<Array<{ status: string; at: number }>> =>
  (await sql.query(`select payload, created_at from task_events where task_id = $1 and event_type = 'status' order by id`, [taskId])).rows.map((r: { payload: { status: string; timestamp?: string }; created_at: Date }) => ({
    status: r.payload.status,
    at: r.payload.timestamp ? Date.parse(r.payload.timestamp) : new Date(r.created_at).getTime(),
  }));

const agentRow = async (s: TeamSetup, machineId: string): Promise<{ id: string; models: string[]; custom_nodes: string[]; agent_status: string } | undefined> =>
  (await sql.query('select id, models, custom_nodes, agent_status from agents where team_id = $1 and machine_id = $2', [s.user.teamId, machineId])).rows[0];

const fileSha = (p: string): string | null => (existsSync(p) ? sha256(readFileSync(p)) : null);

function manifestOf(s: TeamSetup): Promise<SyncManifest__Output> {
  const c = rawClient(t.node.grpcPort);
  return new Promise<SyncManifest__Output>((resolve, reject) =>
    c.GetSyncManifest({}, bearer(s.ak.value), (err: grpc.ServiceError | null, res?: SyncManifest__Output) => {
      c.close();
      if (err) reject(err);
      else resolve(res as SyncManifest__Output);
    }),
  );
}

test('sync paths: anything that could land outside the root is refused', () => {
  const root = '/srv/models';
  assert.equal(resolveInside(root, 'checkpoints/sd15.safetensors', 'model_path'), '/srv/models/checkpoints/sd15.safetensors');
  assert.equal(resolveInside(root, 'a b/c-d_e.1.bin', 'model_path'), '/srv/models/a b/c-d_e.1.bin');
  for (const bad of ['../etc/passwd', 'a/../../x', '/etc/passwd', 'a\\b', 'a//b', './a', 'a/.', 'a/', '', '.gantry-tmp/x', '.gantry-sync.json', 'x\0y'])
    assert.throws(() => resolveInside(root, bad, 'model_path'), /refused/, JSON.stringify(bad));
});

test('syncer (in process): zip and unknown-format packages, refused paths and size mismatches are skipped and reported, the rest is installed', async () => {
  const blobs = new Map<string, Buffer>();
  const srv: Server = createServer((req, res) => {
    const b = blobs.get(req.url ?? '');
    if (!b) return res.writeHead(404).end();
    res.writeHead(200, { 'content-length': b.length }).end(b);
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const url = (k: string): string => `http://127.0.0.1:${(srv.address() as AddressInfo).port}/${k}`;
  try {
    const src = tmpDir('gantry-zip-src-');
    mkdirSync(join(src, 'Repo-main', 'js'), { recursive: true });
    writeFileSync(join(src, 'Repo-main', '__init__.py'), 'X = 1\n');
    writeFileSync(join(src, 'Repo-main', 'js', 'ui.js'), '//\n');
    execFileSync('python3', ['-m', 'zipfile', '-c', join(src, 'pkg.zip'), join(src, 'Repo-main')]);
    const zip = readFileSync(join(src, 'pkg.zip'));
    const raw = Buffer.from('not an archive at all');
    const good = randomBytes(4096);
    blobs.set('/zip', zip).set('/raw', raw).set('/good', good).set('/short', good.subarray(0, 100));
    const base = tmpDir('gantry-syncer-');
    const modelsDir = join(base, 'models');
    const nodesDir = join(base, 'custom_nodes');
    let reported = 0;
    const syncer = new ModelSyncer({
      modelsDir,
      customNodesDir: nodesDir,
      logger: createLogger('silent'),
      afterSync: async () => void reported++,
      fetchManifest: async () => ({
        expires_at_ms: Date.now() + 60_000,
        models: [
          { id: '1', model_path: 'vae/good.bin', model_type: 'vae', size: good.length, sha256: sha256(good), download_url: url('good') },
          { id: '2', model_path: '../escape.bin', model_type: 'vae', size: good.length, sha256: sha256(good), download_url: url('good') },
          { id: '3', model_path: 'vae/short.bin', model_type: 'vae', size: good.length, sha256: sha256(good), download_url: url('short') },
        ],
        custom_nodes: [
          { id: '4', package_name: 'Zipped', node_version: '2.0', inventory_name: 'Zipped@2.0', size: zip.length, sha256: sha256(zip), download_url: url('zip') },
          { id: '5', package_name: 'Raw', node_version: '1', inventory_name: 'Raw@1', size: raw.length, sha256: sha256(raw), download_url: url('raw') },
        ],
      }),
    });
    const r1 = await syncer.request();
    assert.deepEqual(
      r1.skipped.map((x) => [x.kind, x.name]),
      [
        ['model', '../escape.bin'],
        ['model', 'vae/short.bin'],
      ],
    );
    assert.match(r1.skipped[0]?.error ?? '', /model_path "\.\.\/escape\.bin" refused/);
    assert.match(r1.skipped[1]?.error ?? '', /vae\/short\.bin: size mismatch/);
    // provisioning fails only for a task that requires a skipped model
    const r2 = await syncer.provision(['vae/good.bin']);
    assert.equal(r2.skipped.length, 2);
    await assert.rejects(syncer.provision(['vae/good.bin', 'vae/short.bin']), (e: Error) => /requires: model vae\/short\.bin: size mismatch/.test(e.message) && !/escape/.test(e.message));
    assert.equal(reported, 3, 'the inventory is reported after every sync, also one that skipped entries');
    assert.equal(fileSha(join(modelsDir, 'vae/good.bin')), sha256(good));
    assert.equal(existsSync(join(base, 'escape.bin')), false);
    assert.equal(existsSync(join(modelsDir, 'vae/short.bin')), false);
    assert.equal(readFileSync(join(nodesDir, 'Zipped', '__init__.py'), 'utf8'), 'X = 1\n', 'descended through the single top-level folder');
    assert.ok(existsSync(join(nodesDir, 'Zipped', 'js', 'ui.js')));
    assert.deepEqual(readFileSync(join(nodesDir, 'Raw', 'Raw.pkg')), raw, 'an unknown format is placed as is');
    assert.deepEqual(await customNodeInventory(nodesDir), ['Raw@1', 'Zipped@2.0']);
    // a second sync downloads nothing that is already in place (hash remembered by size and mtime)
    blobs.delete('/good');
    blobs.delete('/zip');
    const r4 = await syncer.request();
    assert.deepEqual(
      r4.skipped.map((x) => x.name),
      ['../escape.bin', 'vae/short.bin'],
    );
    assert.equal(r4.downloaded.length, 0);
    assert.equal(syncer.syncs, 4);
    // the manifest itself failing still fails the sync
    const broken = new ModelSyncer({ modelsDir, customNodesDir: nodesDir, logger: createLogger('silent'), afterSync: async () => undefined, fetchManifest: () => Promise.reject(new Error('unavailable')) });
    await assert.rejects(broken.provision([]), /could not fetch the sync manifest: unavailable/);
  } finally {
    srv.close();
  }
});

test('GetSyncManifest needs an ak-', async () => {
  const s = await setupTeam(t);
  const c = rawClient(t.node.grpcPort);
  const code = await new Promise<number>((resolve) => c.GetSyncManifest({}, bearer(s.sk.value), (err: grpc.ServiceError | null) => resolve(err?.code ?? 0)));
  c.close();
  assert.equal(code, 16, 'UNAUTHENTICATED');
  assert.deepEqual((await manifestOf(s)).models, []);
});

for (const tr of AGENT_TRANSPORTS) {
  test(`[${tr}] model sync: an active model reaches the agent through provisioning; a workflow requiring it runs only once the agent has it; disabled models are not synced; custom nodes install on a hint`, async () => {
    transport = tr;
    const s = await setupTeam(t);
    const modelPath = 'checkpoints/sync-test.safetensors';
    const bytes = randomBytes(3 * 1024 * 1024);
    const model = await createModel(s, modelPath, bytes);

    // the manifest lists it (full active set, presigned URL)
    const m1 = await manifestOf(s);
    assert.equal(m1.models.length, 1);
    assert.equal(m1.models[0]?.model_path, modelPath);
    assert.equal(m1.models[0]?.sha256, sha256(bytes));
    assert.equal(m1.models[0]?.size, bytes.length);
    assert.match(m1.models[0]?.download_url ?? '', /^http/);
    assert.ok(m1.expires_at_ms > Date.now());

    // two tasks wait before any agent exists: the OLDER one requires the model, the newer one does not
    const wfNeeds = await createWorkflow(t, s, tinyGraph(), { required_models: [modelPath] });
    const wfPlain = await createWorkflow(t, s, tinyGraph());
    const needsTask = await runWorkflow(t, s, wfNeeds, { prompt: 'needs the model' });
    const plainTask = await runWorkflow(t, s, wfPlain, { prompt: 'plain' });
    await waitTask(t, s, needsTask, (x) => x.task_status === 'waiting', 'waiting (no agent)');

    // an agent with an empty models dir that syncs only when a task provisions
    const modelsDir = join(tmpDir('gantry-sync-a-'), 'models');
    const a1 = agent(s, ['--models-dir', modelsDir, '--machine-id', `sync-a-${s.user.teamId}`, '--sync-interval-s', '0']);
    // the hello carried no model, so the first AgentInfo already says needsSync: the plain task is
    // assigned with provision=true (the one requiring the model cannot go to this agent yet)
    const plain = await waitTask(t, s, plainTask, (x) => ['completed', 'failed', 'cancelled'].includes(x.task_status), 'terminal', 30_000);
    assert.equal(plain.task_status, 'completed', JSON.stringify(plain));
    const plainStatuses = await statusEvents(plainTask);
    const seq = plainStatuses.map((e) => e.status);
    assert.ok(seq.includes('provisioning'), `status sequence ${seq.join(' > ')} passes through provisioning`);
    assert.deepEqual(seq.slice(seq.indexOf('provisioning')), ['provisioning', 'queued', 'running'], `after provisioning: ${seq.join(' > ')}`);
    await a1.waitLine((l) => l.msg === 'sync done' && Array.isArray(l.downloaded) && l.downloaded.includes(modelPath), 'sync done');

    // the file is in place with the registry's checksum, and the inventory says so
    assert.equal(fileSha(join(modelsDir, modelPath)), sha256(bytes));
    const row = await waitFor('the agent inventory with the model', async () => {
      const r = await agentRow(s, `sync-a-${s.user.teamId}`);
      return r?.models.includes(modelPath) ? r : null;
    });
    const api = await t.http.get(`/agents/${row.id}`, as(s));
    assert.equal(api.status, 200, api.text);

    // the older task requiring the model was skipped until then, and now runs on that agent
    const needs = await waitTask(t, s, needsTask, (x) => ['completed', 'failed', 'cancelled'].includes(x.task_status), 'terminal', 30_000);
    assert.equal(needs.task_status, 'completed', JSON.stringify(needs));
    assert.equal(needs.agent_id, row.id);
    const needsStatuses = await statusEvents(needsTask);
    const provisioningAt = plainStatuses.find((e) => e.status === 'provisioning')?.at ?? 0;
    const needsAssignedAt = needsStatuses.find((e) => e.status === 'queued' || e.status === 'provisioning')?.at ?? 0;
    assert.ok(needsAssignedAt >= provisioningAt, `the task requiring the model was assigned (${needsAssignedAt}) only after the plain task provisioned the agent (${provisioningAt})`);
    assert.ok(!needsStatuses.some((e) => e.status === 'provisioning'), 'the agent had synced: no provisioning for the second task');

    // disable it: the next manifest excludes it
    const dis = await t.http.put(`/models/${model.id}`, { model_status: 'disabled' }, as(s));
    assert.equal(dis.status, 200, dis.text);
    const small = randomBytes(100_000);
    const smallPath = 'loras/small-lora.safetensors';
    await createModel(s, smallPath, small);
    const m2 = await manifestOf(s);
    assert.deepEqual(
      m2.models.map((x) => x.model_path),
      [smallPath],
    );

    // a fresh agent with an empty models dir (default: syncs at start) downloads only the active one
    const base = tmpDir('gantry-sync-b-');
    const modelsDir2 = join(base, 'models');
    const nodesDir2 = join(base, 'custom_nodes');
    const machine2 = `sync-b-${s.user.teamId}`;
    const a2 = agent(s, ['--models-dir', modelsDir2, '--machine-id', machine2]);
    await waitFor('the small model on the fresh agent', () => fileSha(join(modelsDir2, smallPath)) === sha256(small), 20_000);
    await waitFor('the fresh agent inventory', async () => (await agentRow(s, machine2))?.models.includes(smallPath));
    assert.equal(existsSync(join(modelsDir2, modelPath)), false, 'the disabled model was not synced');
    assert.ok(!(await agentRow(s, machine2))?.models.includes(modelPath));
    // nothing left behind by the download
    assert.equal(existsSync(join(modelsDir2, '.gantry-tmp')), false);

    // a custom node package: the registry change hints this node's agents, which install it at once
    const src = tmpDir('gantry-node-src-');
    mkdirSync(join(src, 'ComfyUI-Sync-Test-main'));
    writeFileSync(join(src, 'ComfyUI-Sync-Test-main', '__init__.py'), 'NODE_CLASS_MAPPINGS = {}\n');
    writeFileSync(join(src, 'ComfyUI-Sync-Test-main', 'nodes.py'), '# nodes\n');
    execFileSync('tar', ['-czf', join(src, 'pkg.tar.gz'), '-C', src, 'ComfyUI-Sync-Test-main']);
    await createNode(s, 'ComfyUI-Sync-Test', '1.2.0', readFileSync(join(src, 'pkg.tar.gz')));
    await waitFor('the package unpacked into custom_nodes/ComfyUI-Sync-Test', () => existsSync(join(nodesDir2, 'ComfyUI-Sync-Test', '__init__.py')), 20_000);
    assert.equal(readFileSync(join(nodesDir2, 'ComfyUI-Sync-Test', 'nodes.py'), 'utf8'), '# nodes\n');
    await waitFor('the inventory with ComfyUI-Sync-Test@1.2.0', async () => (await agentRow(s, machine2))?.custom_nodes.includes('ComfyUI-Sync-Test@1.2.0'));
    const m3 = await manifestOf(s);
    assert.deepEqual(
      m3.custom_nodes.map((n) => n.inventory_name),
      ['ComfyUI-Sync-Test@1.2.0'],
    );
    await a2.waitLine((l) => l.msg === 'sync requested' && l.why === 'server hint', 'a sync hint');
    // the agent that syncs only when provisioning ignored the hint
    assert.equal(existsSync(join(modelsDir, '..', 'custom_nodes', 'ComfyUI-Sync-Test')), false);
  });
}

for (const tr of AGENT_TRANSPORTS) {
  test(`[${tr}] model sync: a model that cannot be synced (checksum mismatch, a legacy path agents refuse) fails only the tasks whose workflow requires it`, async () => {
    transport = tr;
    const s = await setupTeam(t);
    const modelPath = 'checkpoints/corrupt.safetensors';
    const bytes = randomBytes(200_000);
    const model = await createModel(s, modelPath, bytes);
    // the stored object changes behind the registry's back (same size, other bytes)
    await t.node.objectStore.put(model.storageKey, randomBytes(bytes.length), { contentLength: bytes.length });
    // a row accepted before the API applied the agents' path rule (issue 12): every agent refuses it
    const legacy = await createModel(s, 'loras/legacy.safetensors', randomBytes(1000));
    await sql.query(`update models set model_path = 'loras/.' where id = $1`, [legacy.id]);
    assert.deepEqual((await manifestOf(s)).models.map((m) => m.model_path).sort(), [modelPath, 'loras/.']);

    // the agent has an older copy of the corrupt model (so a workflow requiring it can be scheduled on it)
    const modelsDir = join(tmpDir('gantry-sync-c-'), 'models');
    mkdirSync(join(modelsDir, 'checkpoints'), { recursive: true });
    const stale = randomBytes(bytes.length);
    writeFileSync(join(modelsDir, modelPath), stale);
    const a = agent(s, ['--models-dir', modelsDir, '--sync-interval-s', '0']);

    // a workflow that needs no model: provisioned (the agent lacks loras/.), both entries skipped, completed
    const wf = await createWorkflow(t, s, tinyGraph());
    const taskId = await runWorkflow(t, s, wf, { prompt: 'x' });
    const done = await waitTask(t, s, taskId, (x) => ['completed', 'failed', 'cancelled'].includes(x.task_status), 'terminal', 30_000);
    assert.equal(done.task_status, 'completed', JSON.stringify(done));
    assert.ok((await statusEvents(taskId)).some((e) => e.status === 'provisioning'), 'it went through provisioning');
    const skipped = await a.waitLine((l) => String(l.msg).startsWith('sync: entries skipped'), 'the skipped entries logged');
    const errors = (skipped.skipped as string[]).join(' | ');
    assert.match(errors, /model checkpoints\/corrupt\.safetensors: checksum mismatch/);
    assert.match(errors, /model_path "loras\/\." refused/);

    // a workflow requiring the corrupt model fails with a clear error naming it (not the unrelated one)
    const wfNeeds = await createWorkflow(t, s, tinyGraph(), { required_models: [modelPath] });
    const needsId = await runWorkflow(t, s, wfNeeds, { prompt: 'y' });
    const failed = await waitTask(t, s, needsId, (x) => ['completed', 'failed', 'cancelled'].includes(x.task_status), 'terminal', 30_000);
    assert.equal(failed.task_status, 'failed', JSON.stringify(failed));
    const msg = String(failed.error ?? failed.error_message ?? JSON.stringify(failed));
    assert.match(msg, /provisioning failed: .*requires: model checkpoints\/corrupt\.safetensors: checksum mismatch/);
    assert.doesNotMatch(msg, /loras/);
    await a.waitLine((l) => l.msg === 'task failed' && l.code === 'download_failed' && l.task_id === needsId, 'the failure log line');
    assert.deepEqual(readFileSync(join(modelsDir, modelPath)), stale, 'the older copy was left in place');
    assert.equal(existsSync(join(modelsDir, '.gantry-tmp')), false, 'no temp file left');
  });
}
