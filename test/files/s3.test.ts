import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { registerUser, type TestUser } from '../helpers/identity.js';
import { startS3OrSkip, s3SkipReason, type S3TestServer } from '../helpers/s3.js';
import { as, fetchBytes, inputFileFlow, multipartAbort, multipartFlow, put } from './scenarios.js';

/** The files module on the s3 driver against a real S3-compatible server (Ceph RGW). */
let s3: S3TestServer | null = null;
let t: TestNode | null = null;
let owner: TestUser;

before(async () => {
  s3 = await startS3OrSkip();
  if (!s3) return;
  t = await startTestNode(
    {
      GANTRY_STORAGE: `s3://${s3.bucket}`,
      S3_ENDPOINT: s3.endpoint,
      S3_REGION: s3.region,
      S3_ACCESS_KEY_ID: s3.accessKeyId,
      S3_SECRET_ACCESS_KEY: s3.secretAccessKey,
    },
    'filess3',
  );
  owner = await registerUser(t.http);
});
after(async () => {
  await t?.stop();
  await s3?.stop();
});

const node = (c: { skip(m: string): void }): TestNode | null => {
  if (!t) c.skip(s3SkipReason());
  return t;
};

describe('files on the s3 driver', { timeout: 300_000 }, () => {
  test('the node uses the s3 driver', (c) => {
    const n = node(c);
    if (!n) return;
    assert.equal(n.node.objectStore.driver, 's3');
  });

  test('the spec input file flow step by step', async (c) => {
    const n = node(c);
    if (!n) return;
    await inputFileFlow(n);
  });

  test('multipart of a 64 MiB file in 8 parts; abort', { timeout: 240_000 }, async (c) => {
    const n = node(c);
    if (!n) return;
    await multipartFlow(n, owner);
    await multipartAbort(n, owner);
  });

  test('a model on s3: sha256 measured by streaming, manifest URL serves the bytes', async (c) => {
    const n = node(c);
    if (!n) return;
    const bytes = randomBytes(100_000);
    const pre = await n.http.post('/models/presign', { file_name: 'v.safetensors', file_size: bytes.length, content_type: 'application/octet-stream' }, as(owner));
    assert.equal(pre.status, 200, pre.text);
    assert.equal((await put(pre.body.upload_url, pre.body.upload_headers, bytes)).status, 200);
    const r = await n.http.post('/models', { display_name: 'v', model_type: 'vae', model_path: 'vae/v.safetensors', storage_key: pre.body.storage_key, file_size: bytes.length }, as(owner));
    assert.equal(r.status, 200, r.text);
    const m = await n.node.files.sync.syncManifest(owner.teamId);
    const hex = createHash('sha256').update(bytes).digest('hex');
    assert.equal(m.models[0]?.sha256, hex);
    assert.equal(createHash('sha256').update(await fetchBytes(m.models[0]?.download_url as string)).digest('hex'), hex);
  });
});
