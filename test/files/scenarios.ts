/**
 * Driver-agnostic scenarios of the files module, run by local.test.ts (built-in store through the
 * uWS edge) and s3.test.ts (Ceph RGW): the spec's input file flow step by step, and multipart.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import type { TestNode } from '../helpers/node.js';
import { registerUser, type TestUser } from '../helpers/identity.js';
import { FakeAgent } from '../helpers/fake-agent.js';
import { httpRequest, patternChunks, sha256Of } from '../helpers/s3.js';
import { comfyBody } from '../workflows-api/fixtures.js';
import { readFileSync } from 'node:fs';

export const as = (u: { accessToken: string; teamId: string }) => ({ token: u.accessToken, team: u.teamId });

export const img2img = JSON.parse(readFileSync(new URL('../fixtures/comfy/img2img.json', import.meta.url), 'utf8')) as Record<string, any>;

/** A workflow whose `image` parameter is a file (LoadImage 10.image); runs on any agent. */
export async function createFileWorkflow(t: TestNode, u: TestUser): Promise<string> {
  const r = await t.http.post(
    '/workflows',
    comfyBody({
      workflow_json: structuredClone(img2img),
      parameters: [{ key: 'image', node_id: '10', field: 'image', type: 'file', required: true, accept: ['image/png'] }],
      required_labels: [],
      required_models: [],
      min_vram_gb: 0,
      max_retries: 0,
    }),
    as(u),
  );
  assert.equal(r.status, 200, r.text);
  return r.body.id as string;
}

export async function put(url: string, headers: Record<string, string>, body: Buffer): Promise<{ status: number; headers: Record<string, string>; body: Buffer }> {
  return httpRequest(url, { method: 'PUT', headers, body });
}

export async function fetchBytes(url: string): Promise<Buffer> {
  const r = await httpRequest(url, { method: 'GET' });
  assert.equal(r.status, 200, `GET ${url}: ${r.status} ${r.body.toString().slice(0, 300)}`);
  return r.body;
}

/** Presign + upload (every header) as the given caller; returns the file_key. */
export async function stageInput(t: TestNode, auth: { token: string; team?: string }, body: Buffer, name = 'photo.png', contentType = 'image/png'): Promise<string> {
  const pre = await t.http.post('/r/files/presign', { file_name: name, file_size: body.length, content_type: contentType }, auth);
  assert.equal(pre.status, 200, pre.text);
  const r = await put(pre.body.upload_url, pre.body.upload_headers, body);
  assert.equal(r.status, 200, r.body.toString());
  return pre.body.file_key as string;
}

/**
 * The spec's input file flow: presign, PUT with every header (200), PUT again (412), PUT missing
 * a signed header (403), wrong Content-Length (403), then run a workflow with the file_key as a
 * file parameter and see the agent receive it; its bytes come back through a presigned GET.
 */
export async function inputFileFlow(t: TestNode): Promise<void> {
  const u = await registerUser(t.http);
  const bytes = Buffer.concat([Buffer.from('\x89PNG\r\n\x1a\n', 'binary'), randomBytes(70_000)]);

  const pre = await t.http.post('/r/files/presign', { file_name: 'My Photo (1).png', file_size: bytes.length, content_type: 'image/png' }, as(u));
  assert.equal(pre.status, 200, pre.text);
  const { file_key: fileKey, upload_url: url, upload_headers: headers } = pre.body as { file_key: string; upload_url: string; upload_headers: Record<string, string> };
  assert.ok(fileKey.startsWith(`teams/${u.teamId}/inputs/`), fileKey);
  assert.match(fileKey, /\/My_Photo_1_\.png$/);
  const names = Object.keys(headers).map((h) => h.toLowerCase());
  for (const h of ['content-length', 'if-none-match', 'content-type']) assert.ok(names.includes(h), `upload_headers has ${h}: ${JSON.stringify(headers)}`);

  const without = (name: string): Record<string, string> => Object.fromEntries(Object.entries(headers).filter(([k]) => k.toLowerCase() !== name));
  // a signed header missing: 403, nothing stored
  assert.equal((await put(url, without('if-none-match'), bytes)).status, 403, 'missing If-None-Match');
  assert.equal((await put(url, without('content-type'), bytes)).status, 403, 'missing Content-Type');
  // Content-Length other than the presigned file_size: 403
  const longer = Buffer.concat([bytes, Buffer.from('x')]);
  const clKey = Object.keys(headers).find((k) => k.toLowerCase() === 'content-length') as string;
  assert.equal((await put(url, { ...headers, [clKey]: String(longer.length) }, longer)).status, 403, 'wrong Content-Length');
  // not uploaded yet: refused at run time like an unknown key
  const wf = await createFileWorkflow(t, u);
  const early = await t.http.post(`/r/workflows/${wf}/run`, { parameters: { image: fileKey } }, as(u));
  assert.equal(early.status, 400, early.text);
  assert.match(early.body.error_message, /not found/);
  // every header: 200; again: 412
  assert.equal((await put(url, headers, bytes)).status, 200);
  assert.equal((await put(url, headers, bytes)).status, 412);

  const agent = await new FakeAgent(t.node, { teamId: u.teamId }).connect();
  const run = await t.http.post(`/r/workflows/${wf}/run`, { parameters: { image: fileKey } }, as(u));
  assert.equal(run.status, 202, run.text);
  const a = await agent.assignment(run.body.task_id);
  assert.equal(a.assignment.inputFiles.length, 1);
  assert.equal(a.assignment.inputFiles[0]?.fileKey, fileKey);
  assert.equal(a.assignment.inputFiles[0]?.key, 'image');
  assert.equal(a.assignment.inputFiles[0]?.fileName, 'My_Photo_1_.png');
  assert.equal((a.assignment.workflow as any)['10'].inputs.image, fileKey);
  // what the agent stream presigns for it (presignInputs): the same bytes
  const got = await fetchBytes(await t.node.objectStore.presignGet(fileKey, { expiresInS: 300 }));
  assert.equal(createHash('sha256').update(got).digest('hex'), createHash('sha256').update(bytes).digest('hex'));
  await agent.disconnect();
}

/**
 * Multipart of a 64 MiB file: initiate (8 parts of 8 MiB), presign-parts, PUT each part
 * (Content-Length signed), complete -> file_key; the object has the exact bytes.
 */
export async function multipartFlow(t: TestNode, u: TestUser, size = 64 * 1024 * 1024): Promise<string> {
  const pre = await t.http.post('/r/files/presign', { file_name: 'scan.zip', file_size: size, content_type: 'application/zip' }, as(u));
  assert.equal(pre.status, 200, pre.text);
  const key = pre.body.file_key as string;
  const init = await t.http.post('/uploads/multipart/initiate', { storage_key: key, file_size: size }, as(u));
  assert.equal(init.status, 200, init.text);
  assert.equal(init.body.storage_key, key);
  const { upload_id: uploadId, part_size: partSize, part_count: partCount } = init.body as { upload_id: string; part_size: number; part_count: number };
  assert.ok(partSize >= 8 * 1024 * 1024, `part_size ${partSize}`);
  assert.equal(partCount, Math.ceil(size / partSize));
  assert.ok(partCount >= 5, `part_count ${partCount}`);

  const wrongSize = await t.http.post('/uploads/multipart/initiate', { storage_key: key, file_size: size + 1 }, as(u));
  assert.equal(wrongSize.status, 400, wrongSize.text);

  const nums = Array.from({ length: partCount }, (_, i) => i + 1);
  const pp = await t.http.post('/uploads/multipart/presign-parts', { upload_id: uploadId, storage_key: key, part_numbers: nums }, as(u));
  assert.equal(pp.status, 200, pp.text);
  assert.equal(pp.body.part_list.length, partCount);
  const oob = await t.http.post('/uploads/multipart/presign-parts', { upload_id: uploadId, storage_key: key, part_numbers: [partCount + 1] }, as(u));
  assert.equal(oob.status, 400, oob.text);

  const etags = new Map<number, string>();
  const queue = [...(pp.body.part_list as Array<{ part_number: number; upload_url: string; upload_headers: Record<string, string> }>)];
  const worker = async (): Promise<void> => {
    for (let p = queue.shift(); p; p = queue.shift()) {
      const start = (p.part_number - 1) * partSize;
      const end = Math.min(size, start + partSize);
      const r = await httpRequest(p.upload_url, { method: 'PUT', headers: p.upload_headers, body: patternChunks(start, end) });
      assert.equal(r.status, 200, `part ${p.part_number}: ${r.status} ${r.body.toString().slice(0, 300)}`);
      assert.ok(r.headers.etag, `part ${p.part_number} has an ETag`);
      etags.set(p.part_number, r.headers.etag as string);
    }
  };
  await Promise.all([worker(), worker(), worker()]);

  const missing = await t.http.post('/uploads/multipart/complete', { upload_id: uploadId, storage_key: key, parts: nums.slice(1).map((n) => ({ part_number: n, etag: etags.get(n) })) }, as(u));
  assert.equal(missing.status, 400, missing.text);
  const done = await t.http.post('/uploads/multipart/complete', { upload_id: uploadId, storage_key: key, parts: nums.map((n) => ({ part_number: n, etag: etags.get(n) })) }, as(u));
  assert.equal(done.status, 200, done.text);
  assert.equal(done.body.file_key, key);
  const head = await t.node.objectStore.head(key);
  assert.equal(head?.size, size);
  const want = await sha256Of(patternChunks(0, size));
  const have = await sha256Of((await t.node.objectStore.get(key)) as AsyncIterable<Buffer>);
  assert.equal(have.size, size);
  assert.equal(have.hex, want.hex);
  // the upload is finished: further calls on it are 404
  const again = await t.http.post('/uploads/multipart/complete', { upload_id: uploadId, storage_key: key, parts: nums.map((n) => ({ part_number: n, etag: etags.get(n) })) }, as(u));
  assert.equal(again.status, 404, again.text);
  // the key now has an object: a new multipart on it is refused
  const dup = await t.http.post('/uploads/multipart/initiate', { storage_key: key, file_size: size }, as(u));
  assert.equal(dup.status, 409, dup.text);
  return key;
}

/** Initiate then abort: the upload is gone afterwards (presign-parts 404). */
export async function multipartAbort(t: TestNode, u: TestUser): Promise<void> {
  const size = 20 * 1024 * 1024;
  const pre = await t.http.post('/models/presign', { file_name: 'big.safetensors', file_size: size, content_type: 'application/octet-stream' }, as(u));
  assert.equal(pre.status, 200, pre.text);
  const key = pre.body.storage_key as string;
  const init = await t.http.post('/uploads/multipart/initiate', { storage_key: key, file_size: size }, as(u));
  assert.equal(init.status, 200, init.text);
  const ab = await t.http.post('/uploads/multipart/abort', { upload_id: init.body.upload_id, storage_key: key }, as(u));
  assert.equal(ab.status, 200, ab.text);
  const pp = await t.http.post('/uploads/multipart/presign-parts', { upload_id: init.body.upload_id, storage_key: key, part_numbers: [1] }, as(u));
  assert.equal(pp.status, 404, pp.text);
}
