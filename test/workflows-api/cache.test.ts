/**
 * The workflow definition cache on the run path: a warm resolveForRun reads nothing from
 * PostgreSQL (proved by closing the store's own database), writes through any WorkflowStore of the
 * process invalidate at once, and a write made elsewhere (another process) is seen after the TTL.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, createCredential, type TestUser } from '../helpers/identity.js';
import { WorkflowStore } from '../../src/persistence/workflow-store.js';
import { WorkflowCache } from '../../src/persistence/workflow-cache.js';
import { Database } from '../../src/persistence/db.js';
import { createLogger } from '../../src/shared/logger.js';
import { AppError } from '../../src/shared/errors.js';
import { comfyBody } from './fixtures.js';

let t: TestNode;
let alice: TestUser;
let sk: string;
before(async () => {
  t = await startTestNode({}, 'wfcache');
  alice = await registerUser(t.http);
  sk = (await createCredential(t.http, alice, 'integration')).value;
});
after(async () => {
  await t.stop();
});

const as = (u: TestUser) => ({ token: u.accessToken, team: u.teamId });
const runnableBody = (over: Record<string, unknown> = {}) => comfyBody({ required_labels: [], required_models: [], min_vram_gb: 0, preferred_gpu: undefined, max_retries: 0, ...over });

async function create(body: Record<string, unknown>): Promise<string> {
  const r = await t.http.post('/workflows', body, as(alice));
  assert.equal(r.status, 200, r.text);
  return r.body.id as string;
}

const openOwnDb = () => Database.open({ databaseUrl: t.db.url, dataDir: t.dataDir, poolMax: 2, logger: createLogger('silent') });

test('a warm resolveForRun (by id, slug, slug@version) does no PostgreSQL read: it still answers after its database is closed', async () => {
  const body = runnableBody();
  const id = await create(body);
  const other = await create(runnableBody());
  assert.equal((await t.http.put(`/workflows/${id}`, { description: 'v2' }, as(alice))).status, 200);
  const db = await openOwnDb();
  const store = new WorkflowStore(db, { cache: new WorkflowCache() });
  const cold = {
    byId: await store.resolveForRun(alice.teamId, { id }),
    bySlug: await store.resolveForRun(alice.teamId, { slug: body.workflow_slug }),
    pinned: await store.resolveForRun(alice.teamId, { slug: body.workflow_slug, version: 1 }),
  };
  assert.equal(cold.byId.version, 2);
  assert.equal(cold.pinned.version, 1);
  await db.close();
  // nothing can reach PostgreSQL through this store now
  await assert.rejects(store.resolveForRun(alice.teamId, { id: other }));
  assert.deepEqual(await store.resolveForRun(alice.teamId, { id }), cold.byId);
  assert.deepEqual(await store.resolveForRun(alice.teamId, { slug: body.workflow_slug }), cold.bySlug);
  assert.deepEqual(await store.resolveForRun(alice.teamId, { slug: body.workflow_slug, version: 1 }), cold.pinned);
  assert.equal(cold.byId.workflow.description, 'v2');
  assert.equal(cold.pinned.workflow.description, body.description);
  // team scope holds in the cache: another team does not get a hit (it goes to the closed database)
  await assert.rejects(store.resolveForRun('00000000-0000-7000-8000-000000000000', { id }));
});

test('PUT, archive, DELETE and import through the API invalidate the cached workflow at once (runs see the change on the next request)', async () => {
  const body = runnableBody();
  const slug = body.workflow_slug;
  const id = await create(body);
  const shared = new WorkflowStore(t.node.db); // the node's cache (one per database per process)
  const run = (ref: string, parameters: Record<string, unknown> = { prompt: 'p' }) => t.http.post(ref, { parameters }, { token: sk });
  const taskVersion = async (taskId: string) => (await t.http.get(`/r/tasks/${taskId}`, { token: sk })).body.workflow_version as number;

  const r1 = await run(`/r/workflows/slug/${slug}/run`, { prompt: 'p', steps: 5 });
  assert.equal(r1.status, 202, r1.text);
  const hits = shared.cache.stats.hits;
  const r1b = await run(`/r/workflows/${id}/run`, { prompt: 'p', steps: 5 });
  assert.equal(r1b.status, 202);
  assert.ok(shared.cache.stats.hits > hits, 'the second run was served from the cache');

  // update: the current version no longer has `steps`
  assert.equal((await t.http.put(`/workflows/${id}`, { parameters: [{ key: 'prompt', node_id: '6', field: 'text', required: true }] }, as(alice))).status, 200);
  const r2 = await run(`/r/workflows/slug/${slug}/run`, { prompt: 'p', steps: 5 });
  assert.equal(r2.status, 400, r2.text);
  const r3 = await run(`/r/workflows/${id}/run`);
  assert.equal(r3.status, 202);
  assert.equal(await taskVersion(r3.body.task_id), 2);
  const pinned = await run(`/r/workflows/slug/${slug}@1/run`, { prompt: 'p', steps: 5 });
  assert.equal(pinned.status, 202, 'version 1 is still runnable pinned');
  assert.equal(await taskVersion(pinned.body.task_id), 1);

  // archive: 409 right away, pinned or not; unarchive: runnable again
  assert.equal((await t.http.put(`/workflows/${id}`, { workflow_status: 'archived' }, as(alice))).status, 200);
  assert.equal((await run(`/r/workflows/${id}/run`)).status, 409);
  assert.equal((await run(`/r/workflows/slug/${slug}@1/run`, { prompt: 'p', steps: 5 })).status, 409);
  assert.equal((await t.http.put(`/workflows/${id}`, { workflow_status: 'active' }, as(alice))).status, 200);
  assert.equal((await run(`/r/workflows/${id}/run`)).status, 202);

  // delete: 404 by id and by slug at once (GET too)
  assert.equal((await t.http.del(`/workflows/${id}`, as(alice))).status, 200);
  assert.equal((await run(`/r/workflows/${id}/run`)).status, 404);
  assert.equal((await run(`/r/workflows/slug/${slug}/run`)).status, 404);
  assert.equal((await run(`/r/workflows/slug/${slug}@1/run`, { prompt: 'p', steps: 5 })).status, 404);
  assert.equal((await t.http.get(`/r/workflows/${id}`, { token: sk })).status, 404);

  // import under the freed slug: the slug now names the new workflow
  const imp = await t.http.post('/workflows/import', { ...runnableBody(), workflow_slug: slug, description: 'imported' }, as(alice));
  assert.equal(imp.status, 200, imp.text);
  const r4 = await run(`/r/workflows/slug/${slug}/run`);
  assert.equal(r4.status, 202);
  assert.equal((await t.http.get(`/r/tasks/${r4.body.task_id}`, { token: sk })).body.workflow_id, imp.body.id);
});

test('a write made by another process is seen once the head TTL has passed (the backstop); versions stay cached', async () => {
  const body = runnableBody();
  const id = await create(body);
  let now = 1_000_000;
  // this store plays a second node: its own cache, its own clock, not invalidated by the API's writes
  const elsewhere = new WorkflowStore(t.node.db, { cache: new WorkflowCache({ ttlMs: 2_000, maxEntries: 100, now: () => now }) });
  assert.equal((await elsewhere.resolveForRun(alice.teamId, { id })).version, 1);
  assert.equal((await t.http.put(`/workflows/${id}`, { description: 'changed elsewhere' }, as(alice))).status, 200);
  now += 1_999;
  assert.equal((await elsewhere.resolveForRun(alice.teamId, { id })).version, 1, 'within the TTL the head is served from memory');
  now += 2;
  const fresh = await elsewhere.resolveForRun(alice.teamId, { id });
  assert.equal(fresh.version, 2);
  assert.equal(fresh.workflow.description, 'changed elsewhere');
  // archived elsewhere: refused after the TTL
  assert.equal((await t.http.put(`/workflows/${id}`, { workflow_status: 'archived' }, as(alice))).status, 200);
  now += 2_001;
  await assert.rejects(elsewhere.resolveForRun(alice.teamId, { id }), (e: unknown) => e instanceof AppError && e.code === 'workflow_archived');
});
