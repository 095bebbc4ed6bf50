import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { addMember, createCredential, pairDevice, registerUser, type TestUser } from '../helpers/identity.js';
import { FakeAgent } from '../helpers/fake-agent.js';
import { submitTask, waitForStatus } from '../helpers/tasks.js';
import { as, createFileWorkflow, fetchBytes, inputFileFlow, multipartAbort, multipartFlow, put, stageInput } from './scenarios.js';
import { partSizing } from '../../src/files/staging.js';
import { sanitizeFileName } from '../../src/files/keys.js';
import { outputEntries } from '../../src/files/outputs.js';
import { SCHEDULER } from '../../src/actors/index.js';

/** The files module on the built-in local store, through the real uWS edge. */
let t: TestNode;
let owner: TestUser;

before(async () => {
  t = await startTestNode({ GANTRY_AUTH_RATE_LIMIT_PER_MIN: 1_000_000 }, 'fileslocal');
  owner = await registerUser(t.http);
});
after(async () => {
  await t.stop();
});

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

describe('units', () => {
  test('part sizing: at least 8 MiB, at most 10,000 parts', () => {
    assert.deepEqual(partSizing(1), { partSize: 8 * 1024 * 1024, partCount: 1 });
    assert.deepEqual(partSizing(64 * 1024 * 1024), { partSize: 8 * 1024 * 1024, partCount: 8 });
    const big = 200 * 1024 ** 3;
    const s = partSizing(big);
    assert.ok(s.partCount <= 10_000 && s.partSize * s.partCount >= big && s.partSize % (1024 * 1024) === 0, JSON.stringify(s));
    const max = partSizing(5 * 1024 ** 4);
    assert.ok(max.partCount <= 10_000 && max.partSize <= 5 * 1024 ** 3);
  });

  test('file names are reduced to the key alphabet', () => {
    assert.equal(sanitizeFileName('My Photo (1).png'), 'My_Photo_1_.png');
    assert.equal(sanitizeFileName('../../etc/passwd'), 'passwd');
    assert.equal(sanitizeFileName('C:\\Users\\me\\x.jpg'), 'x.jpg');
    assert.equal(sanitizeFileName('..'), 'file');
    assert.equal(sanitizeFileName('.hidden'), 'hidden');
    assert.equal(sanitizeFileName('日本語.png'), 'png');
    assert.equal(sanitizeFileName('café.png'), 'cafe.png');
    const long = sanitizeFileName(`${'a'.repeat(300)}.safetensors`);
    assert.ok(long.length <= 150 && long.endsWith('.safetensors'));
  });

  test('output entries only take keys under the task prefix', () => {
    const team = '00000000-0000-7000-8000-000000000001';
    const task = '00000000-0000-7000-8000-000000000002';
    const p = `teams/${team}/outputs/${task}/1`;
    const e = outputEntries(team, task, {
      storage_key: `${p}/a.png`,
      storage_keys: [`${p}/a.png`, `${p}/b.png`, `teams/${team}/outputs/other/1/c.png`, 'teams/x/outputs/y/z.png'],
      outputs: [{ name: 'a.png', storage_key: `${p}/a.png` }],
    });
    assert.equal(e.primary, `${p}/a.png`);
    assert.deepEqual(e.entries, [
      ['a.png', `${p}/a.png`],
      ['b.png', `${p}/b.png`],
    ]);
    assert.deepEqual(outputEntries(team, task, { storage_key: 'teams/x/outputs/y/z.png' }), { primary: null, entries: [] });
  });
});

describe('input files (local store through the uWS edge)', () => {
  test('the spec input file flow step by step', async () => {
    await inputFileFlow(t);
  });

  test('presign validation: size cap points to multipart, fields checked, sk- and dk- may presign', async () => {
    const cap = t.node.config.GANTRY_MAX_UPLOAD_BYTES;
    const big = await t.http.post('/r/files/presign', { file_name: 'a.bin', file_size: cap + 1, content_type: 'application/octet-stream' }, as(owner));
    assert.equal(big.status, 400, big.text);
    assert.equal(big.body.error_code, 'file_too_large');
    assert.match(big.body.error_message, /multipart/);
    const sk = (await createCredential(t.http, owner, 'integration')).value;
    const bigSk = await t.http.post('/r/files/presign', { file_name: 'a.bin', file_size: cap + 1, content_type: 'application/octet-stream' }, { token: sk });
    assert.equal(bigSk.status, 400);
    assert.equal(bigSk.body.error_code, 'file_too_large');
    const mpSk = await t.http.post('/r/files/presign', { file_name: 'a.bin', file_size: cap + 1, content_type: 'application/octet-stream', upload_mode: 'multipart' }, { token: sk });
    assert.equal(mpSk.status, 400);
    assert.equal(mpSk.body.error_code, 'multipart_requires_jwt');
    const mp = await t.http.post('/r/files/presign', { file_name: 'a.bin', file_size: cap + 1, content_type: 'application/octet-stream', upload_mode: 'multipart' }, as(owner));
    assert.equal(mp.status, 200, mp.text);
    assert.equal(mp.body.upload_url, null);
    assert.equal(mp.body.upload_mode, 'multipart');
    for (const bad of [
      { file_name: '', file_size: 1, content_type: 'text/plain' },
      { file_name: 'x'.repeat(256), file_size: 1, content_type: 'text/plain' },
      { file_name: 'a', file_size: 0, content_type: 'text/plain' },
      { file_name: 'a', file_size: 1.5, content_type: 'text/plain' },
      { file_name: 'a', file_size: 1, content_type: '' },
      { file_name: 'a', file_size: 1, content_type: 'text/plain\n' },
      { file_name: 'a', file_size: 1 },
      { file_name: 'a', file_size: 1, content_type: 'text/plain', extra: 1 },
    ]) {
      const r = await t.http.post('/r/files/presign', bad, as(owner));
      assert.equal(r.status, 400, `${JSON.stringify(bad)} -> ${r.status} ${r.text}`);
    }
    // sk- and dk- stage inputs (runtime surface)
    const body = Buffer.from('hello');
    const k1 = await stageInput(t, { token: sk }, body, 'a.txt', 'text/plain');
    assert.ok(k1.startsWith(`teams/${owner.teamId}/inputs/`));
    const dk = (await pairDevice(t.http, owner)).deviceCredential;
    const k2 = await stageInput(t, { token: dk }, body, 'b.txt', 'text/plain');
    assert.ok(k2.startsWith(`teams/${owner.teamId}/inputs/`));
  });

  test("another team's file_key is refused at run time exactly like an unknown one; an expired one too; the sweeper removes it", async () => {
    const alice = await registerUser(t.http);
    const bob = await registerUser(t.http);
    const wf = await createFileWorkflow(t, alice);
    const bobKey = await stageInput(t, as(bob), Buffer.from('bob private bytes'));
    const aliceKey = await stageInput(t, as(alice), Buffer.from('alice bytes'));
    const unknownKey = `teams/${alice.teamId}/inputs/0190a000-0000-7000-8000-000000000000/photo.png`;
    const run = (key: string) => t.http.post(`/r/workflows/${wf}/run`, { parameters: { image: key } }, as(alice));
    const foreign = await run(bobKey);
    const unknown = await run(unknownKey);
    assert.equal(foreign.status, 400, foreign.text);
    assert.equal(unknown.status, 400, unknown.text);
    assert.equal(foreign.body.error_code, unknown.body.error_code);
    assert.equal(foreign.body.error_message.replace(bobKey, 'K'), unknown.body.error_message.replace(unknownKey, 'K'));
    // the same key guessed into alice's namespace is unknown too
    const rewritten = bobKey.replace(bob.teamId, alice.teamId);
    const guessed = await run(rewritten);
    assert.equal(guessed.status, 400);
    assert.equal(guessed.body.error_message.replace(rewritten, 'K'), unknown.body.error_message.replace(unknownKey, 'K'));

    await t.node.db.execute(`update staged_files set expires_at = now() - interval '1 minute' where file_key = ?`, [aliceKey]);
    const expired = await run(aliceKey);
    assert.equal(expired.status, 400, expired.text);
    assert.match(expired.body.error_message, /expired/);
    assert.ok(await t.node.objectStore.head(aliceKey));
    const swept = await t.node.files.sweepers.sweepOnce();
    assert.ok(swept.staged >= 1, JSON.stringify(swept));
    assert.equal(await t.node.objectStore.head(aliceKey), null);
    assert.equal((await t.node.db.execute('select 1 from staged_files where file_key = ?', [aliceKey])).length, 0);
    const gone = await run(aliceKey);
    assert.equal(gone.status, 400);
    assert.equal(gone.body.error_message.replace(aliceKey, 'K'), unknown.body.error_message.replace(unknownKey, 'K'));
    // bob's key is untouched
    assert.ok(await t.node.objectStore.head(bobKey));
  });

  test('an expired input still referenced by an open task is kept until the task ends', async () => {
    const u = await registerUser(t.http);
    const wf = await createFileWorkflow(t, u);
    const key = await stageInput(t, as(u), Buffer.from('queued input'));
    const run = await t.http.post(`/r/workflows/${wf}/run`, { parameters: { image: key } }, as(u));
    assert.equal(run.status, 202, run.text);
    await t.node.db.execute(`update staged_files set expires_at = now() - interval '1 minute' where file_key = ?`, [key]);
    await t.node.files.sweepers.sweepOnce();
    assert.ok(await t.node.objectStore.head(key), 'kept while the task waits');
    assert.equal((await t.http.post(`/r/tasks/${run.body.task_id}/cancel`, {}, as(u))).status, 200);
    await waitForStatus(t.node, run.body.task_id, 'cancelled');
    await t.node.files.sweepers.sweepOnce();
    assert.equal(await t.node.objectStore.head(key), null);
  });
});

describe('multipart (local store)', () => {
  test('a 64 MiB file in 8 parts; abort', { timeout: 120_000 }, async () => {
    await multipartFlow(t, owner);
    await multipartAbort(t, owner);
  });

  test('sk- and dk- get 401 on every multipart endpoint; other teams cannot touch an upload', async () => {
    const sk = (await createCredential(t.http, owner, 'integration')).value;
    const dk = (await pairDevice(t.http, owner)).deviceCredential;
    for (const p of ['initiate', 'presign-parts', 'complete', 'abort']) {
      for (const token of [sk, dk]) {
        const r = await t.http.post(`/uploads/multipart/${p}`, { storage_key: 'x', file_size: 1 }, { token });
        assert.equal(r.status, 401, `${p} with ${token.slice(0, 3)}: ${r.status} ${r.text}`);
      }
    }
    const pre = await t.http.post('/r/files/presign', { file_name: 'x.bin', file_size: 10 * 1024 * 1024, content_type: 'application/octet-stream' }, as(owner));
    const key = pre.body.file_key as string;
    const other = await registerUser(t.http);
    const steal = await t.http.post('/uploads/multipart/initiate', { storage_key: key, file_size: 10 * 1024 * 1024 }, as(other));
    assert.equal(steal.status, 400, steal.text);
    const init = await t.http.post('/uploads/multipart/initiate', { storage_key: key, file_size: 10 * 1024 * 1024 }, as(owner));
    assert.equal(init.status, 200, init.text);
    const pp = await t.http.post('/uploads/multipart/presign-parts', { upload_id: init.body.upload_id, storage_key: key, part_numbers: [1] }, as(other));
    assert.equal(pp.status, 404, pp.text);
    const ab = await t.http.post('/uploads/multipart/abort', { upload_id: init.body.upload_id, storage_key: key }, as(other));
    assert.equal(ab.status, 404, ab.text);
    // the sweeper aborts uploads whose key expired
    await t.node.db.execute(`update multipart_uploads set expires_at = now() - interval '1 minute' where upload_id = ?`, [init.body.upload_id]);
    const s = await t.node.files.sweepers.sweepOnce();
    assert.ok(s.multipart >= 1);
    const after = await t.http.post('/uploads/multipart/presign-parts', { upload_id: init.body.upload_id, storage_key: key, part_numbers: [1] }, as(owner));
    assert.equal(after.status, 404);
  });
});

/** Presign + upload a model/node package file as an admin; returns the storage_key. */
async function stageRegistryFile(kind: 'models' | 'nodes', u: TestUser, bytes: Buffer, name: string): Promise<string> {
  const pre = await t.http.post(`/${kind}/presign`, { file_name: name, file_size: bytes.length, content_type: 'application/octet-stream' }, as(u));
  assert.equal(pre.status, 200, pre.text);
  assert.ok(pre.body.storage_key.startsWith(`teams/${u.teamId}/${kind}/`), pre.body.storage_key);
  assert.equal((await put(pre.body.upload_url, pre.body.upload_headers, bytes)).status, 200);
  return pre.body.storage_key as string;
}

/** Simulated agent sync: download what the manifest lists, verify size + SHA-256, place at model_path. */
async function agentSync(teamId: string, modelsDir: string, have: string[]): Promise<string[]> {
  const m = await t.node.files.sync.syncManifest(teamId, { missingFor: { models: have, customNodes: [] } });
  const placed = [];
  for (const f of m.models) {
    const bytes = await fetchBytes(f.download_url);
    assert.equal(bytes.length, f.size);
    assert.equal(sha(bytes), f.sha256);
    const dest = join(modelsDir, f.model_path);
    mkdirSync(dirname(dest), { recursive: true });
    writeFileSync(dest, bytes);
    placed.push(f.model_path);
  }
  return placed;
}

const sessionInfo = (agentId: string) => t.node.sessions.session(agentId)?.info;
/** Waits until the agent actor and the team scheduler processed what was told so far. */
async function settle(agentId: string, teamId: string): Promise<void> {
  await t.node.actors.ask({ kind: 'agent', id: agentId }, { type: 'get' });
  await t.node.actors.ask({ kind: SCHEDULER, id: teamId }, { type: 'stats' });
}
async function until(pred: () => boolean | Promise<boolean>, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await pred())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('models', () => {
  test('create (sha256 verified), list, get, update, disable, delete; sync manifest and needsSync follow', { timeout: 60_000 }, async () => {
    const admin = await registerUser(t.http);
    const team = admin.teamId;
    const bytes = randomBytes(300_000);
    const path = 'checkpoints/sd15 pruned.safetensors';
    const key = await stageRegistryFile('models', admin, bytes, 'sd15.safetensors');

    const base = { display_name: 'SD 1.5', model_type: 'checkpoints', model_path: path, storage_key: key, file_size: bytes.length };
    for (const [bad, field] of [
      [{ ...base, model_path: '/abs/x.safetensors' }, 'model_path'],
      [{ ...base, model_path: 'a/../b' }, 'model_path'],
      [{ ...base, model_path: 'a\\b' }, 'model_path'],
      [{ ...base, model_path: 'a/b$.x' }, 'model_path'],
      [{ ...base, model_type: '' }, 'model_type'],
      [{ ...base, model_type: 'x'.repeat(51) }, 'model_type'],
      [{ ...base, display_name: '' }, 'display_name'],
      [{ ...base, display_name: 'x'.repeat(256) }, 'display_name'],
      [{ ...base, file_size: bytes.length + 1 }, 'file_size'],
      [{ ...base, storage_key: `teams/${team}/models/nope/x` }, 'storage_key'],
      [{ ...base, sha256: 'abc' }, 'sha256'],
    ] as const) {
      const r = await t.http.post('/models', bad, as(admin));
      assert.equal(r.status, 400, `${field}: ${r.status} ${r.text}`);
      assert.ok(r.body.error_message.startsWith(field), `${field}: ${r.body.error_message}`);
    }
    const wrongSha = await t.http.post('/models', { ...base, sha256: 'a'.repeat(64) }, as(admin));
    assert.equal(wrongSha.status, 400);
    assert.equal(wrongSha.body.error_code, 'checksum_mismatch');
    const member = await registerUser(t.http);
    await addMember(t.http, t.node, admin, member, 'member');
    const inTeam = { token: member.accessToken, team: team };
    const asMember = await t.http.post('/models', base, inTeam);
    assert.equal(asMember.status, 403, asMember.text);

    const created = await t.http.post('/models', { ...base, sha256: sha(bytes).toUpperCase() }, as(admin));
    assert.equal(created.status, 200, created.text);
    const id = created.body.id as string;
    const reuse = await t.http.post('/models', { ...base, model_path: 'checkpoints/other.safetensors' }, as(admin));
    assert.equal(reuse.status, 400, 'the staged key was consumed');
    const again = await t.http.post('/models', { ...base, storage_key: await stageRegistryFile('models', admin, bytes, 'x.bin') }, as(admin));
    assert.equal(again.status, 409);
    assert.equal(again.body.error_code, 'model_path_taken');

    const got = await t.http.get(`/models/${id}`, inTeam);
    assert.equal(got.status, 200);
    assert.deepEqual(
      { ...got.body, created_at: undefined, updated_at: undefined },
      { id, display_name: 'SD 1.5', model_type: 'checkpoints', model_path: path, model_status: 'active', file_size: bytes.length, sha256: sha(bytes), created_at: undefined, updated_at: undefined },
    );
    const list = await t.http.get('/models?per_page=10', inTeam);
    assert.equal(list.status, 200);
    assert.equal(list.body.page_meta.total_count, 1);
    assert.equal(list.body.model_list[0].id, id);
    assert.equal((await t.http.get(`/models/${id}`, as(owner))).status, 404, 'another team');

    // sync: active -> in the manifest with the right checksum; an agent lacking it needs sync
    const manifest = await t.node.files.sync.syncManifest(team);
    assert.equal(manifest.models.length, 1);
    assert.equal(manifest.models[0]?.model_path, path);
    assert.equal(manifest.models[0]?.sha256, sha(bytes));
    assert.equal(manifest.models[0]?.size, bytes.length);
    assert.equal(await t.node.files.sync.needsSync(team, { models: [], customNodes: [] }), true);
    assert.equal(await t.node.files.sync.needsSync(team, { models: [path], customNodes: [] }), false);

    // a connected simulated agent lacking it: needsSync, a task goes through provisioning; it syncs
    const modelsDir = mkdtempSync(join(tmpdir(), 'gantry-models-'));
    try {
      const agent = await new FakeAgent(t.node, { teamId: team }).connect();
      await until(() => sessionInfo(agent.agentId)?.needsSync === true, 'needsSync on the live session');
      await settle(agent.agentId, team);
      const online = await t.node.agentStore.online(team);
      assert.equal(online.find((a) => a.agentId === agent.agentId)?.needsSync, true);
      const taskId = await submitTask(t.node, team);
      const a = await agent.assignment(taskId);
      assert.equal(a.provision, true);
      await waitForStatus(t.node, taskId, 'provisioning');
      const placed = await agentSync(team, modelsDir, []);
      assert.deepEqual(placed, [path]);
      assert.equal(sha(readFileSync(join(modelsDir, path))), sha(bytes));
      // the agent reports its inventory (what the gRPC server does on Inventory)
      await t.node.agentStore.updateInventory(agent.agentId, [path], []);
      const info = sessionInfo(agent.agentId);
      assert.ok(info);
      t.node.sessions.update(agent.agentId, agent.sessionId, { ...info, models: [path] });
      await until(() => sessionInfo(agent.agentId)?.needsSync === false, 'needsSync cleared after inventory');
      t.node.sessions.fromAgent(agent.agentId, agent.sessionId, { type: 'provisioned', taskId, attempt: a.attempt, epoch: a.epoch });
      await waitForStatus(t.node, taskId, 'queued');
      agent.ack(a);
      await waitForStatus(t.node, taskId, 'running');
      agent.finish(a);
      await waitForStatus(t.node, taskId, 'completed');
      assert.deepEqual(await agentSync(team, modelsDir, [path]), [], 'nothing left to sync');

      // disable: excluded from the manifest; nobody needs sync for it
      const dis = await t.http.put(`/models/${id}`, { model_status: 'disabled' }, as(admin));
      assert.equal(dis.status, 200, dis.text);
      assert.deepEqual(dis.body, { id });
      const after = await t.http.get(`/models/${id}`, as(admin));
      assert.equal(after.body.model_status, 'disabled');
      assert.equal(after.body.display_name, 'SD 1.5', 'only the provided fields change');
      assert.equal(after.body.model_path, path);
      assert.equal((await t.node.files.sync.syncManifest(team)).models.length, 0);
      assert.equal(await t.node.files.sync.needsSync(team, { models: [], customNodes: [] }), false);
      const filtered = await t.http.get('/models?model_status=active', as(admin));
      assert.equal(filtered.body.page_meta.total_count, 0);
      // re-enable: a second agent that lacks it needs sync again (refresh on registry change)
      const lacking = await new FakeAgent(t.node, { teamId: team }).connect();
      await until(() => sessionInfo(lacking.agentId)?.needsSync === false, 'no sync needed while disabled');
      assert.equal((await t.http.put(`/models/${id}`, { model_status: 'active', display_name: 'SD 1.5 pruned' }, as(admin))).status, 200);
      await until(() => sessionInfo(lacking.agentId)?.needsSync === true, 'needsSync after re-enable');
      assert.equal(sessionInfo(agent.agentId)?.needsSync, false);
      assert.equal((await t.http.put(`/models/${id}`, { model_status: 'gone' }, as(admin))).status, 400);
      assert.equal((await t.http.put(`/models/${id}`, { model_path: '../x' }, as(admin))).status, 400);
      await agent.disconnect();
      await lacking.disconnect();

      // delete: the object goes too
      const storageKey = (await t.node.db.execute<{ storage_key: string }>('select storage_key from models where id = ?', [id]))[0]?.storage_key as string;
      assert.equal((await t.http.del(`/models/${id}`, as(admin))).status, 200);
      assert.equal((await t.http.get(`/models/${id}`, as(admin))).status, 404);
      assert.equal(await t.node.objectStore.head(storageKey), null);
      assert.equal((await t.node.files.sync.syncManifest(team)).models.length, 0);
    } finally {
      rmSync(modelsDir, { recursive: true, force: true });
    }
  });

  test('a workflow requiring a model is only scheduled on agents whose inventory has it', async () => {
    const admin = await registerUser(t.http);
    const path = 'loras/detail.safetensors';
    const bytes = randomBytes(1000);
    const key = await stageRegistryFile('models', admin, bytes, 'detail.safetensors');
    assert.equal((await t.http.post('/models', { display_name: 'detail', model_type: 'loras', model_path: path, storage_key: key, file_size: bytes.length }, as(admin))).status, 200);
    const without = await new FakeAgent(t.node, { teamId: admin.teamId, slots: 4 }).connect();
    const withIt = await new FakeAgent(t.node, { teamId: admin.teamId, models: [path], slots: 4 }).connect();
    await until(() => sessionInfo(without.agentId)?.needsSync === true, 'needsSync for the agent without it');
    assert.equal(sessionInfo(withIt.agentId)?.needsSync, false);
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push(await submitTask(t.node, admin.teamId, { requiredModels: [path] }));
    for (const id of ids) {
      const a = await withIt.assignment(id);
      assert.equal(a.provision, false, 'the agent that has every active model needs no provisioning');
    }
    assert.equal(without.inbox.filter((m) => m.type === 'assign').length, 0);
    // a model nobody has: waits
    const missing = await submitTask(t.node, admin.teamId, { requiredModels: ['checkpoints/nobody.safetensors'] });
    await waitForStatus(t.node, missing, 'waiting');
    await without.disconnect();
    await withIt.disconnect();
  });
});

describe('custom nodes', () => {
  test('create, list (node_list + page_meta, spec fields), manifest + needsSync, delete', async () => {
    const admin = await registerUser(t.http);
    const zip = randomBytes(5000);
    const key = await stageRegistryFile('nodes', admin, zip, 'comfyui-impact-pack.zip');
    const body = { display_name: 'Impact Pack', package_name: 'ComfyUI-Impact-Pack', node_version: '8.1.0', storage_key: key, file_size: zip.length };
    assert.equal((await t.http.post('/nodes', { ...body, package_name: '../x' }, as(admin))).status, 400);
    assert.equal((await t.http.post('/nodes', { ...body, node_version: '' }, as(admin))).status, 400);
    const c = await t.http.post('/nodes', body, as(admin));
    assert.equal(c.status, 200, c.text);
    const dup = await t.http.post('/nodes', { ...body, storage_key: await stageRegistryFile('nodes', admin, zip, 'again.zip') }, as(admin));
    assert.equal(dup.status, 409);
    const list = await t.http.get('/nodes', as(admin));
    assert.equal(list.status, 200);
    assert.deepEqual(list.body.page_meta, { current_page: 1, per_page: 20, total_count: 1 });
    const item = list.body.node_list[0];
    for (const f of ['id', 'display_name', 'package_name', 'file_size', 'node_version', 'node_status', 'created_at']) assert.ok(f in item, f);
    assert.equal(item.node_status, 'active');
    assert.equal(item.file_size, zip.length);
    const m = await t.node.files.sync.syncManifest(admin.teamId);
    assert.equal(m.custom_nodes.length, 1);
    assert.equal(m.custom_nodes[0]?.inventory_name, 'ComfyUI-Impact-Pack@8.1.0');
    assert.equal(m.custom_nodes[0]?.sha256, sha(zip));
    assert.equal(sha(await fetchBytes(m.custom_nodes[0]?.download_url as string)), sha(zip));
    assert.equal(await t.node.files.sync.needsSync(admin.teamId, { models: [], customNodes: [] }), true);
    assert.equal(await t.node.files.sync.needsSync(admin.teamId, { models: [], customNodes: ['ComfyUI-Impact-Pack@8.0.0'] }), true);
    assert.equal(await t.node.files.sync.needsSync(admin.teamId, { models: [], customNodes: ['ComfyUI-Impact-Pack@8.1.0'] }), false);
    const sk = (await createCredential(t.http, admin, 'integration')).value;
    assert.equal((await t.http.get('/nodes', { token: sk })).status, 403, 'management surface rejects sk-');
    assert.equal((await t.http.del(`/nodes/${item.id}`, as(admin))).status, 200);
    assert.equal((await t.http.get('/nodes', as(admin))).body.page_meta.total_count, 0);
    assert.equal(await t.node.files.sync.needsSync(admin.teamId, { models: [], customNodes: [] }), false);
  });
});

describe('outputs', () => {
  test('result download_url(s) from the output keys; 410 after retention; the sweeper deletes the objects', async () => {
    const u = await registerUser(t.http);
    const agent = await new FakeAgent(t.node, { teamId: u.teamId }).connect();
    const taskId = await submitTask(t.node, u.teamId);
    const a = await agent.assignment(taskId);
    agent.ack(a);
    await waitForStatus(t.node, taskId, 'running');
    const prefix = `teams/${u.teamId}/outputs/${taskId}/${a.attempt}`;
    const img = randomBytes(4000);
    const img2 = randomBytes(3000);
    await t.node.objectStore.put(`${prefix}/ComfyUI_00001_.png`, img, { contentLength: img.length, contentType: 'image/png' });
    await t.node.objectStore.put(`${prefix}/ComfyUI_00002_.png`, img2, { contentLength: img2.length, contentType: 'image/png' });
    agent.finish(a, {
      storage_key: `${prefix}/ComfyUI_00001_.png`,
      storage_keys: [`${prefix}/ComfyUI_00001_.png`, `${prefix}/ComfyUI_00002_.png`],
      image_count: 2,
      outputs: [
        { name: 'ComfyUI_00001_.png', storage_key: `${prefix}/ComfyUI_00001_.png`, content_type: 'image/png', size: img.length },
        { name: 'ComfyUI_00002_.png', storage_key: `${prefix}/ComfyUI_00002_.png`, content_type: 'image/png', size: img2.length },
      ],
    });
    await waitForStatus(t.node, taskId, 'completed');
    const r = await t.http.get(`/r/tasks/${taskId}/result`, as(u));
    assert.equal(r.status, 200, r.text);
    assert.equal(sha(await fetchBytes(r.body.download_url)), sha(img));
    assert.deepEqual(Object.keys(r.body.download_urls).sort(), ['ComfyUI_00001_.png', 'ComfyUI_00002_.png']);
    assert.equal(sha(await fetchBytes(r.body.download_urls['ComfyUI_00002_.png'])), sha(img2));
    const exp = Date.parse(r.body.expires_at) - Date.now();
    assert.ok(exp > 6.9 * 86400_000 && exp <= 7 * 86400_000 + 5000, `expires in ${exp} ms`);
    assert.equal((await t.http.get(`/r/tasks/${taskId}/result`, as(owner))).status, 404, 'another team');

    // a day before the end: the URL lives only as long as the retention left
    await t.node.db.execute(`update tasks set finished_at = now() - interval '6 days' where id = ?`, [taskId]);
    const late = await t.http.get(`/r/tasks/${taskId}/result`, as(u));
    const left = Date.parse(late.body.expires_at) - Date.now();
    assert.ok(left > 0.9 * 86400_000 && left <= 86400_000 + 5000, `expires in ${left} ms`);

    await t.node.db.execute(`update tasks set finished_at = now() - interval '7 days 1 minute' where id = ?`, [taskId]);
    const gone = await t.http.get(`/r/tasks/${taskId}/result`, as(u));
    assert.equal(gone.status, 410, gone.text);
    const s = await t.node.files.sweepers.sweepOnce();
    assert.ok(s.outputs >= 1, JSON.stringify(s));
    assert.equal(await t.node.objectStore.head(`${prefix}/ComfyUI_00001_.png`), null);
    assert.equal(await t.node.objectStore.head(`${prefix}/ComfyUI_00002_.png`), null);
    const row = (await t.node.db.execute<{ output_expires_at: Date | null }>('select output_expires_at from tasks where id = ?', [taskId]))[0];
    assert.ok(row?.output_expires_at, 'output_expires_at marked');
    await agent.disconnect();
  });
});
