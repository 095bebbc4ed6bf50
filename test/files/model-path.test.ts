/**
 * Issue 12, fault 2: model paths the server accepted but every agent refused (`loras/.`,
 * `loras//x`, `a/./b`, ` x `, `.hidden`...). One rule (src/protocol/model-path.ts) decides for the
 * API (POST/PUT /models, workflows' required_models) and for the agent's sync: the API answers 400
 * invalid_parameter naming model_path, and whatever the API accepts the agent's syncer places.
 */
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, type TestUser } from '../helpers/identity.js';
import { as, put } from './scenarios.js';
import { modelPathProblem } from '../../src/protocol/model-path.js';
import { modelCreateSchema } from '../../src/files/registry.js';
import { ModelSyncer } from '../../src/agent/sync.js';
import { createLogger } from '../../src/shared/logger.js';

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** Paths the agent refused although the API accepted them before the fix, and the classic bad ones. */
const BAD = [
  'loras/.',
  'loras//x',
  'a/./b',
  ' x ',
  '.hidden',
  'loras/.hidden.safetensors',
  'loras/ x.safetensors',
  'loras/x.safetensors ',
  'loras/',
  '..',
  '../x',
  'a/../b',
  '/abs/x.safetensors',
  'a\\b',
  'a\u0000b',
  '.gantry-tmp/x',
  '.gantry-sync.json',
  '',
  'x'.repeat(513),
  `a/${'y'.repeat(256)}`,
  'a/b$.x',
];
const GOOD = ['checkpoints/sd15.safetensors', 'loras/detail v2.safetensors', 'a b/c-d_e.1.bin', 'x', 'vae/x.', 'deep/er/still/ok.pt'];

describe('the rule', () => {
  test('refuses every path an agent could not place, accepts ordinary ones', () => {
    for (const p of BAD) assert.notEqual(modelPathProblem(p), null, JSON.stringify(p));
    for (const p of GOOD) assert.equal(modelPathProblem(p), null, JSON.stringify(p));
  });

  test('the API schema and the agent syncer agree on every path (one rule, both ends)', async () => {
    const bytes = randomBytes(1000);
    const srv: Server = createServer((_req, res) => res.writeHead(200, { 'content-length': bytes.length }).end(bytes));
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}/m`;
      const all = [...BAD, ...GOOD];
      const modelsDir = join(mkdtempSync(join(tmpdir(), 'gantry-model-path-')), 'models');
      const syncer = new ModelSyncer({
        modelsDir,
        customNodesDir: undefined,
        logger: createLogger('silent'),
        afterSync: async () => undefined,
        fetchManifest: async () => ({
          expires_at_ms: Date.now() + 60_000,
          models: all.map((p, i) => ({ id: String(i), model_path: p, model_type: 'x', size: bytes.length, sha256: sha(bytes), download_url: url })),
          custom_nodes: [],
        }),
      });
      const report = await syncer.request();
      const refusedByAgent = new Set(report.skipped.map((s) => s.name));
      for (const p of all) {
        const api = modelCreateSchema.safeParse({ display_name: 'm', model_type: 'x', model_path: p, storage_key: 'k', file_size: 1 }).success;
        assert.equal(api, !refusedByAgent.has(p), `${JSON.stringify(p)}: API ${api ? 'accepts' : 'refuses'}, agent ${refusedByAgent.has(p) ? 'refuses' : 'places'} it`);
      }
      for (const p of GOOD) assert.deepEqual(readFileSync(join(modelsDir, p)), bytes, p);
      assert.equal(existsSync(join(modelsDir, 'loras', 'x')), false);
    } finally {
      srv.close();
    }
  });
});

describe('the API', () => {
  let t: TestNode;
  let admin: TestUser;
  before(async () => {
    t = await startTestNode({ GANTRY_AUTH_RATE_LIMIT_PER_MIN: 1_000_000 }, 'files_model_path');
    admin = await registerUser(t.http);
  });
  after(async () => {
    await t.stop();
  });

  async function stage(bytes: Buffer): Promise<string> {
    const pre = await t.http.post('/models/presign', { file_name: 'm.safetensors', file_size: bytes.length, content_type: 'application/octet-stream' }, as(admin));
    assert.equal(pre.status, 200, pre.text);
    assert.equal((await put(pre.body.upload_url, pre.body.upload_headers, bytes)).status, 200);
    return pre.body.storage_key as string;
  }

  const expectModelPath400 = (r: { status: number; text: string; body: any }, p: string): void => {
    assert.equal(r.status, 400, `${JSON.stringify(p)}: ${r.status} ${r.text}`);
    assert.equal(r.body.error_code, 'invalid_parameter', `${JSON.stringify(p)}: ${r.text}`);
    assert.ok(String(r.body.error_message).startsWith('model_path: '), `${JSON.stringify(p)}: ${r.body.error_message}`);
  };

  test('POST and PUT /models answer 400 invalid_parameter naming model_path; nothing is stored', { timeout: 60_000 }, async () => {
    const bytes = randomBytes(2048);
    const key = await stage(bytes);
    const base = { display_name: 'm', model_type: 'loras', storage_key: key, file_size: bytes.length };
    for (const p of BAD) expectModelPath400(await t.http.post('/models', { ...base, model_path: p }, as(admin)), p);
    const list = await t.http.get('/models', as(admin));
    assert.equal(list.status, 200, list.text);
    assert.equal(list.body.page_meta.total_count, 0, 'no model was created');

    // the staged file is still usable with a good path
    const created = await t.http.post('/models', { ...base, model_path: 'loras/good.safetensors' }, as(admin));
    assert.equal(created.status, 200, created.text);
    const id = created.body.id as string;
    for (const p of BAD) expectModelPath400(await t.http.put(`/models/${id}`, { model_path: p }, as(admin)), p);
    const got = await t.http.get(`/models/${id}`, as(admin));
    assert.equal(got.body.model_path, 'loras/good.safetensors', 'unchanged');
    const moved = await t.http.put(`/models/${id}`, { model_path: 'loras/sub dir/good-v2.safetensors' }, as(admin));
    assert.equal(moved.status, 200, moved.text);
    assert.equal((await t.http.get(`/models/${id}`, as(admin))).body.model_path, 'loras/sub dir/good-v2.safetensors');
  });

  test("a workflow's required_models follow the same rule", async () => {
    const graph = { '1': { class_type: 'CLIPTextEncode', inputs: { text: 'x' } } };
    for (const p of ['loras/.', 'loras//x', '.hidden']) {
      const r = await t.http.post('/workflows', { workflow_slug: `wf-${randomBytes(4).toString('hex')}`, display_name: 'w', workflow_json: graph, required_models: [p] }, as(admin));
      assert.equal(r.status, 400, `${p}: ${r.text}`);
      assert.ok(String(r.body.error_message).startsWith('required_models.0: '), r.body.error_message);
    }
  });
});
