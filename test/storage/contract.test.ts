/**
 * The ObjectStore contract, run against both drivers: the local store served over real HTTP
 * (handleLocalStorageRequest mounted on node:http) and the S3 driver against a real
 * S3-compatible server (Ceph RGW, see test/helpers/s3.ts; skipped when none is available).
 */
import { after, before, describe, test } from 'node:test';
import type { TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LocalObjectStore } from '../../src/storage/local.js';
import { localStorageListener } from '../../src/storage/node-http.js';
import type { ObjectStore } from '../../src/storage/port.js';
import { isAppError } from '../../src/shared/errors.js';
import { httpRequest, patternChunks, s3SkipReason, sha256Of, startS3OrSkip } from '../helpers/s3.js';
import type { S3TestServer } from '../helpers/s3.js';

interface Harness {
  store: ObjectStore;
  /** Lets `ms` of (store-visible) time pass. */
  elapse(ms: number): Promise<void>;
}

const MiB = 1024 * 1024;

async function rejectsKind(p: Promise<unknown>, kind: string): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(isAppError(e), `expected AppError, got ${String(e)}`);
    assert.equal(e.kind, kind, `${e.code}: ${e.message}`);
    return true;
  });
}

function contract(name: string, get: () => Harness | null, skipReason: () => string): void {
  describe(`ObjectStore contract: ${name}`, () => {
    const h = (t: TestContext): Harness | null => {
      const x = get();
      if (!x) t.skip(skipReason());
      return x;
    };
    const run = `r${Date.now().toString(36)}`;

    test('input file flow: PUT with every header 200, again 412, missing header 403, wrong Content-Length 403, GET returns the bytes', async (t) => {
      const x = h(t);
      if (!x) return;
      const key = `${run}/flow/in put(1).png`.replace(/ /g, '_');
      const data = randomBytes(3000);
      const p = await x.store.presignPut(key, { contentLength: data.length, contentType: 'image/png', expiresInS: 300 });
      assert.deepEqual(Object.keys(p.headers).sort(), ['Content-Length', 'Content-Type', 'If-None-Match']);
      assert.equal(p.headers['If-None-Match'], '*');
      assert.equal(p.headers['Content-Length'], '3000');
      assert.ok(p.expiresAt > Date.now() + 200_000);

      // each signed header missing -> 403, nothing stored
      for (const drop of ['If-None-Match', 'Content-Type']) {
        const headers = { ...p.headers };
        delete headers[drop];
        const r = await httpRequest(p.url, { method: 'PUT', headers, body: data });
        assert.equal(r.status, 403, `without ${drop}: ${r.body.toString()}`);
        assert.match(r.body.toString(), /<Error><Code>(AccessDenied|SignatureDoesNotMatch)<\/Code>/);
      }
      // altered header value -> 403
      const alt = await httpRequest(p.url, { method: 'PUT', headers: { ...p.headers, 'Content-Type': 'text/html' }, body: data });
      assert.equal(alt.status, 403);
      // wrong Content-Length (a shorter body, honestly framed) -> 403
      const short = data.subarray(0, 2999);
      const wl = await httpRequest(p.url, { method: 'PUT', headers: { ...p.headers, 'Content-Length': String(short.length) }, body: short });
      assert.equal(wl.status, 403, wl.body.toString());
      assert.equal(await x.store.head(key), null, 'rejected uploads store nothing');

      const ok = await httpRequest(p.url, { method: 'PUT', headers: p.headers, body: data });
      assert.equal(ok.status, 200, ok.body.toString());
      const md5 = createHash('md5').update(data).digest('hex');
      assert.equal(ok.headers['etag'], `"${md5}"`);

      const again = await httpRequest(p.url, { method: 'PUT', headers: p.headers, body: data });
      assert.equal(again.status, 412, again.body.toString());
      assert.match(again.body.toString(), /<Code>PreconditionFailed<\/Code>/);

      const info = await x.store.head(key);
      assert.ok(info);
      assert.equal(info.size, 3000);
      assert.equal(info.etag, md5);
      assert.equal(info.contentType, 'image/png');

      const url = await x.store.presignGet(key, { expiresInS: 60, downloadName: 'résumé "1".png' });
      const g = await httpRequest(url, { method: 'GET' });
      assert.equal(g.status, 200);
      assert.deepEqual(g.body, data);
      assert.equal(g.headers['content-length'], '3000');
      assert.equal(g.headers['content-type'], 'image/png');
      assert.equal(g.headers['etag'], `"${md5}"`);
      assert.match(g.headers['content-disposition'] ?? '', /^attachment; filename="r_sum_ _1_.png"; filename\*=UTF-8''r%C3%A9sum%C3%A9%20%221%22.png$/);
    });

    test('presigned PUT without a content type signs only Content-Length and If-None-Match', async (t) => {
      const x = h(t);
      if (!x) return;
      const key = `${run}/noct/a.bin`;
      const p = await x.store.presignPut(key, { contentLength: 4, expiresInS: 60 });
      assert.deepEqual(Object.keys(p.headers).sort(), ['Content-Length', 'If-None-Match']);
      const r = await httpRequest(p.url, { method: 'PUT', headers: { ...p.headers, 'Content-Type': 'text/plain' }, body: 'abcd' });
      assert.equal(r.status, 200, r.body.toString());
      assert.equal((await x.store.head(key))?.size, 4);
      const r2 = await httpRequest(p.url, { method: 'PUT', headers: { 'Content-Length': '4' }, body: 'abcd' });
      assert.equal(r2.status, 403, 'If-None-Match is required');
    });

    test('expired URLs -> 403', async (t) => {
      const x = h(t);
      if (!x) return;
      const key = `${run}/exp/a.bin`;
      const p = await x.store.presignPut(key, { contentLength: 3, expiresInS: 1 });
      await x.store.put(`${run}/exp/b.bin`, Buffer.from('xyz'), { contentLength: 3 });
      const g = await x.store.presignGet(`${run}/exp/b.bin`, { expiresInS: 1 });
      await x.elapse(2500);
      const r = await httpRequest(p.url, { method: 'PUT', headers: p.headers, body: 'abc' });
      assert.equal(r.status, 403, r.body.toString());
      assert.match(r.body.toString(), /<Code>AccessDenied<\/Code>/);
      const rg = await httpRequest(g, { method: 'GET' });
      assert.equal(rg.status, 403);
      assert.equal(await x.store.head(key), null);
    });

    test('server-side put/get/head/delete, streaming', async (t) => {
      const x = h(t);
      if (!x) return;
      const key = `${run}/srv/out.bin`;
      assert.equal(await x.store.head(key), null);
      await rejectsKind(x.store.get(key), 'not_found');
      const n = 3 * MiB + 17;
      const want = await sha256Of(patternChunks(0, n));
      const { Readable } = await import('node:stream');
      await x.store.put(key, Readable.from(patternChunks(0, n)), { contentLength: n, contentType: 'application/x-test' });
      const info = await x.store.head(key);
      assert.equal(info?.size, n);
      assert.equal(info?.contentType, 'application/x-test');
      assert.deepEqual(await sha256Of((await x.store.get(key)) as AsyncIterable<Buffer>), want);
      // overwrite (server-side put has no If-None-Match)
      await x.store.put(key, Buffer.from('small'), { contentLength: 5 });
      assert.equal((await x.store.head(key))?.size, 5);
      await x.store.delete(key);
      await x.store.delete(key); // idempotent
      assert.equal(await x.store.head(key), null);
      await rejectsKind(x.store.presignPut('../etc/passwd', { contentLength: 1, expiresInS: 60 }), 'bad_request');
      await rejectsKind(x.store.presignPut(`${run}/big`, { contentLength: 5 * 1024 ** 3 + 1, expiresInS: 60 }), 'bad_request');
    });

    test('multipart: 64 MB in 6 parts (12 MiB each, last smaller) completes with the right bytes', async (t) => {
      const x = h(t);
      if (!x) return;
      const key = `${run}/mp/big.bin`;
      const total = 64 * MiB + 12345;
      const partSize = 12 * MiB;
      const count = Math.ceil(total / partSize);
      assert.equal(count, 6);
      const { uploadId } = await x.store.createMultipart(key, { contentType: 'application/zip' });
      const parts: Array<{ partNumber: number; etag: string }> = [];
      const t0 = Date.now();
      for (let i = 0; i < count; i++) {
        const start = i * partSize;
        const end = Math.min(total, start + partSize);
        const p = await x.store.presignPart(key, uploadId, i + 1, { contentLength: end - start, expiresInS: 600 });
        assert.deepEqual(p.headers, { 'Content-Length': String(end - start) });
        const r = await httpRequest(p.url, { method: 'PUT', headers: p.headers, body: patternChunks(start, end) });
        assert.equal(r.status, 200, r.body.toString());
        const etag = r.headers['etag'];
        assert.ok(etag, 'part PUT answers with an ETag');
        parts.push({ partNumber: i + 1, etag });
      }
      const info = await x.store.completeMultipart(key, uploadId, parts);
      assert.equal(info.size, total);
      assert.match(info.etag ?? '', /^[0-9a-f]{32}-6$/);
      const head = await x.store.head(key);
      assert.equal(head?.size, total);
      assert.equal(head?.contentType, 'application/zip');
      const want = await sha256Of(patternChunks(0, total));
      const g = await httpRequest(await x.store.presignGet(key, { expiresInS: 60 }), { method: 'GET', stream: true });
      assert.equal(g.status, 200);
      assert.equal(g.headers['content-length'], String(total));
      assert.deepEqual(await sha256Of(g.stream as AsyncIterable<Buffer>), want);
      console.log(`[${name}] multipart 64 MiB: upload+complete+download in ${Date.now() - t0} ms`);
    });

    test('multipart: a wrong etag and a too-small non-last part are refused', async (t) => {
      const x = h(t);
      if (!x) return;
      const key = `${run}/mp/aborted.bin`;
      const { uploadId } = await x.store.createMultipart(key, {});
      const etags: string[] = [];
      for (const [n, size] of [[1, 1024], [2, 10]] as const) {
        const p = await x.store.presignPart(key, uploadId, n, { contentLength: size, expiresInS: 60 });
        const r = await httpRequest(p.url, { method: 'PUT', headers: p.headers, body: randomBytes(size) });
        assert.equal(r.status, 200);
        etags.push(r.headers['etag'] ?? '');
      }
      await rejectsKind(x.store.completeMultipart(key, uploadId, [{ partNumber: 1, etag: '"00000000000000000000000000000000"' }]), 'bad_request');
      await rejectsKind(
        x.store.completeMultipart(key, uploadId, [
          { partNumber: 1, etag: etags[0] ?? '' },
          { partNumber: 2, etag: etags[1] ?? '' },
        ]),
        'bad_request', // EntityTooSmall: part 1 is under 5 MiB
      );
      await x.store.abortMultipart(key, uploadId);
      assert.equal(await x.store.head(key), null);
    });

    test('multipart: abort discards the upload and its parts', async (t) => {
      const x = h(t);
      if (!x) return;
      const key = `${run}/mp/aborted2.bin`;
      const { uploadId } = await x.store.createMultipart(key, {});
      const p1 = await x.store.presignPart(key, uploadId, 1, { contentLength: 100, expiresInS: 60 });
      const r1 = await httpRequest(p1.url, { method: 'PUT', headers: p1.headers, body: randomBytes(100) });
      assert.equal(r1.status, 200);
      const p2 = await x.store.presignPart(key, uploadId, 2, { contentLength: 3, expiresInS: 60 });
      await x.store.abortMultipart(key, uploadId);
      await rejectsKind(x.store.completeMultipart(key, uploadId, [{ partNumber: 1, etag: r1.headers['etag'] ?? '' }]), 'not_found');
      const r2 = await httpRequest(p2.url, { method: 'PUT', headers: p2.headers, body: 'abc' });
      assert.equal(r2.status, 404, r2.body.toString());
      assert.match(r2.body.toString(), /<Code>NoSuchUpload<\/Code>/);
      assert.equal(await x.store.head(key), null);
    });

    test('deletePrefix removes exactly the keys under the prefix', async (t) => {
      const x = h(t);
      if (!x) return;
      const base = `${run}/dp`;
      const keys = [`${base}/team1/a.txt`, `${base}/team1/sub/b.txt`, `${base}/team1/sub/deeper/c.txt`, `${base}/team10/x.txt`, `${base}/team2/y.txt`];
      for (const k of keys) await x.store.put(k, Buffer.from(k), { contentLength: Buffer.byteLength(k) });
      assert.equal(await x.store.deletePrefix(`${base}/team1/`), 3);
      for (const k of keys.slice(0, 3)) assert.equal(await x.store.head(k), null, k);
      assert.ok(await x.store.head(`${base}/team10/x.txt`));
      assert.equal(await x.store.deletePrefix(`${base}/team`), 2);
      assert.equal(await x.store.deletePrefix(`${base}/team`), 0);
      assert.equal(await x.store.head(`${base}/team2/y.txt`), null);
    });

    test('listKeys lists exactly the keys under a prefix, and every key with the empty prefix (gantry backup\'s manifest)', async (t) => {
      const x = h(t);
      if (!x) return;
      const base = `${run}/lk`;
      const keys = [`${base}/team1/a.txt`, `${base}/team1/sub/b.txt`, `${base}/team10/x.txt`, `${base}/team2/y.txt`];
      for (const k of keys) await x.store.put(k, Buffer.from(k), { contentLength: Buffer.byteLength(k) });
      assert.deepEqual((await x.store.listKeys(`${base}/team1/`)).sort(), keys.slice(0, 2));
      assert.deepEqual((await x.store.listKeys(`${base}/team1`)).sort(), keys.slice(0, 3));
      const all = await x.store.listKeys('');
      for (const k of keys) assert.ok(all.includes(k), k);
      assert.deepEqual(await x.store.listKeys(`${base}/none/`), []);
      await x.store.deletePrefix(`${base}/`);
    });
  });
}

// ---------------------------------------------------------------- local driver over node:http

let local: Harness | null = null;
let server: Server | null = null;
let localDir = '';
let offset = 0;

before(async () => {
  localDir = await mkdtemp(join(tmpdir(), 'gantry-local-store-'));
  let store: LocalObjectStore | null = null;
  server = createServer((req, res) => {
    if (store) localStorageListener(store)(req, res);
  });
  await new Promise<void>((r) => server?.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  store = new LocalObjectStore({ rootDir: localDir, publicBaseUrl: `http://127.0.0.1:${port}`, secret: randomBytes(32), clock: { now: () => Date.now() + offset } });
  local = {
    store,
    elapse: async (ms) => {
      offset += ms;
    },
  };
});

after(async () => {
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  if (localDir) await rm(localDir, { recursive: true, force: true });
});

contract('local (node:http)', () => local, () => 'local harness not ready');

// ---------------------------------------------------------------- s3 driver against a real server

let s3srv: S3TestServer | null = null;
let s3: Harness | null = null;

describe('s3 server', () => {
  before(async () => {
    s3srv = await startS3OrSkip();
    if (s3srv) {
      console.log(`[s3] ${s3srv.source} at ${s3srv.endpoint}, bucket ${s3srv.bucket}, ready in ${s3srv.startMs} ms`);
      s3 = { store: s3srv.store('gantry'), elapse: (ms) => new Promise((r) => setTimeout(r, ms)) };
    } else {
      console.log(s3SkipReason());
    }
  });
  after(async () => {
    await s3srv?.stop();
  });
  contract('s3', () => s3, s3SkipReason);
});
