/**
 * Local-driver specifics, through handleLocalStorageRequest directly (no HTTP server): signature
 * tampering, body framing, ranges, HEAD, concurrent If-None-Match, body channel backpressure,
 * factory parsing.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LocalObjectStore, parseRange } from '../../src/storage/local.js';
import { createBodyChannel, handleLocalStorageRequest } from '../../src/storage/local-http.js';
import type { LocalStorageResponse } from '../../src/storage/local-http.js';
import { createObjectStore, parseS3Url } from '../../src/storage/index.js';
import { keyProblem } from '../../src/storage/port.js';

let dir = '';
let store: LocalObjectStore;
let now = Date.UTC(2026, 0, 1);

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gantry-local-'));
  store = new LocalObjectStore({ rootDir: dir, publicBaseUrl: 'http://127.0.0.1:8080/', secret: randomBytes(32), clock: { now: () => now } });
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Sends a request to a presigned URL through the handler. */
async function call(url: string, method: string, headers: Record<string, string>, body?: Buffer | Buffer[]): Promise<LocalStorageResponse & { text: string }> {
  const u = new URL(url);
  assert.ok(u.pathname.startsWith('/storage/'));
  const lower: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) lower[k.toLowerCase()] = v;
  const chunks = body === undefined ? null : Array.isArray(body) ? body : [body];
  const iter = chunks === null ? null : (async function* () { yield* chunks; })();
  const r = await handleLocalStorageRequest(store, { method, path: u.pathname.slice('/storage/'.length), query: u.searchParams, headers: lower }, iter);
  let text = typeof r.body === 'string' ? r.body : (r.body?.toString() ?? '');
  if (r.stream) {
    const parts: Buffer[] = [];
    for await (const c of r.stream) parts.push(c as Buffer);
    text = Buffer.concat(parts).toString('latin1');
  }
  return { ...r, text };
}

async function tmpEmpty(): Promise<boolean> {
  const ents = await readdir(join(dir, 'tmp')).catch(() => []);
  return ents.length === 0;
}

describe('local store: signed URLs', () => {
  test('URL shape: base without trailing slash, percent-encoded key, signed query', async () => {
    const p = await store.presignPut('teams/t1/in/a=b@c+d,(e)~f!.png', { contentLength: 3, contentType: 'image/png', expiresInS: 60 });
    const u = new URL(p.url);
    assert.equal(u.origin, 'http://127.0.0.1:8080');
    assert.equal(u.pathname, '/storage/teams/t1/in/a%3Db%40c%2Bd%2C(e)~f!.png');
    assert.equal(u.searchParams.get('X-Gantry-SignedHeaders'), 'content-length;content-type;if-none-match');
    assert.equal(u.searchParams.get('X-Gantry-Expires'), String(now / 1000 + 60));
    assert.equal(p.expiresAt, now + 60_000);
    const r = await call(p.url, 'PUT', p.headers, Buffer.from('abc'));
    assert.equal(r.status, 200, r.text);
    assert.equal((await store.head('teams/t1/in/a=b@c+d,(e)~f!.png'))?.size, 3);
  });

  test('tampering with key, expiry, signed-header list, signature or method -> 403', async () => {
    const p = await store.presignPut('tamper/a.bin', { contentLength: 3, expiresInS: 60 });
    const mut = (f: (u: URL) => void): string => {
      const u = new URL(p.url);
      f(u);
      return u.toString();
    };
    const cases: Array<[string, string, string]> = [
      ['other key', mut((u) => (u.pathname = '/storage/tamper/b.bin')), 'SignatureDoesNotMatch'],
      ['later expiry', mut((u) => u.searchParams.set('X-Gantry-Expires', String(now / 1000 + 999))), 'SignatureDoesNotMatch'],
      ['fewer signed headers', mut((u) => u.searchParams.set('X-Gantry-SignedHeaders', 'content-length')), 'SignatureDoesNotMatch'],
      ['bad signature', mut((u) => u.searchParams.set('X-Gantry-Signature', 'f'.repeat(64))), 'SignatureDoesNotMatch'],
      ['no signature', mut((u) => u.searchParams.delete('X-Gantry-Signature')), 'AccessDenied'],
      ['extra query param', mut((u) => u.searchParams.set('partNumber', '1')), 'SignatureDoesNotMatch'],
    ];
    for (const [name, url, code] of cases) {
      const r = await call(url, 'PUT', p.headers, Buffer.from('abc'));
      assert.equal(r.status, 403, name);
      assert.match(r.text, new RegExp(`<Code>${code}</Code>`), name);
    }
    const asGet = await call(p.url, 'GET', {});
    assert.equal(asGet.status, 403, 'a PUT URL does not authorize GET');
    const missing = await call(p.url, 'PUT', { 'Content-Length': '3' }, Buffer.from('abc'));
    assert.equal(missing.status, 403);
    assert.match(missing.text, /not present: if-none-match/);
    assert.equal(await store.head('tamper/a.bin'), null);
    assert.equal(await store.head('tamper/b.bin'), null);
  });

  test('body shorter or longer than Content-Length -> 400, temp file removed, nothing stored', async () => {
    const p = await store.presignPut('framing/a.bin', { contentLength: 10, expiresInS: 60 });
    const short = await call(p.url, 'PUT', p.headers, [Buffer.from('12345'), Buffer.from('678')]);
    assert.equal(short.status, 400);
    assert.match(short.text, /<Code>IncompleteBody<\/Code>/);
    const long = await call(p.url, 'PUT', p.headers, [Buffer.from('123456'), Buffer.from('78901')]);
    assert.equal(long.status, 400);
    assert.match(long.text, /<Code>InvalidRequest<\/Code>/);
    assert.equal(await store.head('framing/a.bin'), null);
    assert.ok(await tmpEmpty());
    const ok = await call(p.url, 'PUT', p.headers, [Buffer.from('12345'), Buffer.from('67890')]);
    assert.equal(ok.status, 200);
    assert.equal(ok.headers['ETag'], `"${createHash('md5').update('1234567890').digest('hex')}"`);
  });

  test('concurrent PUTs to one key: exactly one 200, the other 412', async () => {
    const p = await store.presignPut('race/a.bin', { contentLength: 4, expiresInS: 60 });
    const slow = (s: string) =>
      (async function* () {
        yield Buffer.from(s.slice(0, 2));
        await new Promise((r) => setTimeout(r, 20));
        yield Buffer.from(s.slice(2));
      })();
    const u = new URL(p.url);
    const req = { method: 'PUT', path: u.pathname.slice(9), query: u.searchParams, headers: { 'content-length': '4', 'if-none-match': '*' } };
    const [a, b] = await Promise.all([handleLocalStorageRequest(store, req, slow('aaaa')), handleLocalStorageRequest(store, req, slow('bbbb'))]);
    assert.deepEqual([a.status, b.status].sort(), [200, 412]);
    assert.ok(await tmpEmpty());
  });

  test('GET: ranges (206, suffix, open-ended, 416), HEAD, download name, expiry', async () => {
    const data = Buffer.from('0123456789abcdef');
    await store.put('get/x.txt', data, { contentLength: data.length, contentType: 'text/plain' });
    const url = await store.presignGet('get/x.txt', { expiresInS: 60, downloadName: 'x.txt' });
    const full = await call(url, 'GET', {});
    assert.equal(full.status, 200);
    assert.equal(full.text, data.toString());
    assert.equal(full.headers['Content-Length'], '16');
    assert.equal(full.headers['Content-Type'], 'text/plain');
    assert.equal(full.headers['Accept-Ranges'], 'bytes');
    assert.match(full.headers['Content-Disposition'] ?? '', /^attachment; filename="x.txt"/);
    const r1 = await call(url, 'GET', { Range: 'bytes=2-5' });
    assert.equal(r1.status, 206);
    assert.equal(r1.text, '2345');
    assert.equal(r1.headers['Content-Range'], 'bytes 2-5/16');
    assert.equal(r1.headers['Content-Length'], '4');
    const r2 = await call(url, 'GET', { Range: 'bytes=-3' });
    assert.equal(r2.text, 'def');
    const r3 = await call(url, 'GET', { Range: 'bytes=10-' });
    assert.equal(r3.text, 'abcdef');
    const r4 = await call(url, 'GET', { Range: 'bytes=16-' });
    assert.equal(r4.status, 416);
    assert.equal(r4.headers['Content-Range'], 'bytes */16');
    const multi = await call(url, 'GET', { Range: 'bytes=0-1,4-5' });
    assert.equal(multi.status, 200, 'multi-range is served whole');
    const head = await call(url, 'HEAD', {});
    assert.equal(head.status, 200);
    assert.equal(head.headers['Content-Length'], '16');
    assert.equal(head.body, undefined);
    const missingUrl = await store.presignGet('get/none.txt', { expiresInS: 60 });
    const nf = await call(missingUrl, 'GET', {});
    assert.equal(nf.status, 404);
    assert.match(nf.text, /<Code>NoSuchKey<\/Code>/);
    assert.equal((await call(missingUrl, 'HEAD', {})).status, 404);
    const wrongMethod = await call(url, 'DELETE', {});
    assert.equal(wrongMethod.status, 405);
    now += 61_000;
    const expired = await call(url, 'GET', {});
    assert.equal(expired.status, 403);
    assert.match(expired.text, /Request has expired/);
    const empty = Buffer.alloc(0);
    await store.put('get/empty', empty, { contentLength: 0 });
    const e = await call(await store.presignGet('get/empty', { expiresInS: 60 }), 'GET', {});
    assert.equal(e.status, 200);
    assert.equal(e.headers['Content-Length'], '0');
    assert.equal(e.text, '');
  });

  test('part PUT without a signed Content-Length still needs one (411) and answers an ETag', async () => {
    const { uploadId } = await store.createMultipart('mp/x.bin', {});
    const p = await store.presignPart('mp/x.bin', uploadId, 1, { expiresInS: 60 });
    assert.deepEqual(p.headers, {});
    const nolen = await call(p.url, 'PUT', {}, Buffer.from('abc'));
    assert.equal(nolen.status, 411);
    const ok = await call(p.url, 'PUT', { 'Content-Length': '3' }, Buffer.from('abc'));
    assert.equal(ok.status, 200);
    assert.equal(ok.headers['ETag'], `"${createHash('md5').update('abc').digest('hex')}"`);
    const info = await store.completeMultipart('mp/x.bin', uploadId, [{ partNumber: 1, etag: ok.headers['ETag'] ?? '' }]);
    assert.equal(info.size, 3);
    await assert.rejects(store.presignPart('mp/other.bin', uploadId, 1, { expiresInS: 60 }), /upload does not exist/);
    await assert.rejects(store.presignPart('mp/x.bin', '../../etc', 1, { expiresInS: 60 }), /upload does not exist/);
  });

  test('objects whose key is a prefix of another key coexist; sweepStale drops abandoned uploads', async () => {
    await store.put('nest/a', Buffer.from('1'), { contentLength: 1 });
    await store.put('nest/a/b', Buffer.from('22'), { contentLength: 2 });
    assert.equal((await store.head('nest/a'))?.size, 1);
    assert.equal((await store.head('nest/a/b'))?.size, 2);
    assert.deepEqual((await store.listKeys('nest/')).sort(), ['nest/a', 'nest/a/b']);
    await store.createMultipart('nest/abandoned', {});
    now += 2 * 24 * 3600 * 1000;
    assert.ok((await store.sweepStale(24 * 3600 * 1000)) >= 1);
    assert.equal(await store.deletePrefix('nest/a'), 2);
  });
});

describe('local store: helpers', () => {
  test('key rules', () => {
    for (const bad of ['', '/a', 'a/', 'a//b', '../a', 'a/./b', 'a/../b', 'a\\b', 'a b', 'a#b', 'a?b', 'a%2e', 'é']) assert.ok(keyProblem(bad), bad);
    for (const good of ['a', 'teams/t1/inputs/0f/file.name-1_2.png', 'a=b@c+d,(e)~f!', '..a', 'a..b']) assert.equal(keyProblem(good), null, good);
  });

  test('parseRange', () => {
    assert.deepEqual(parseRange('bytes=0-0', 10), [0, 0]);
    assert.deepEqual(parseRange('bytes=5-100', 10), [5, 9]);
    assert.deepEqual(parseRange('bytes=-100', 10), [0, 9]);
    assert.equal(parseRange('bytes=10-', 10), 'unsatisfiable');
    assert.equal(parseRange('items=0-1', 10), null);
    assert.equal(parseRange('bytes=5-2', 10), null);
  });

  test('createBodyChannel pauses above the high-water mark and resumes once drained', async () => {
    const events: string[] = [];
    const ch = createBodyChannel({ highWaterMark: 10, pause: () => events.push('pause'), resume: () => events.push('resume') });
    const ab = new Uint8Array(6).fill(1).buffer;
    ch.push(ab, false);
    ch.push(ab, false);
    assert.deepEqual(events, ['pause']);
    new Uint8Array(ab).fill(9); // uWS reuses its buffer: pushed chunks must be copies
    const it = ch.iterable[Symbol.asyncIterator]();
    const first = await it.next();
    assert.deepEqual([...(first.value as Buffer)], [1, 1, 1, 1, 1, 1]);
    assert.deepEqual(events, ['pause'], '6 bytes still queued: above half the high-water mark');
    const second = await it.next();
    assert.deepEqual([...(second.value as Buffer)], [1, 1, 1, 1, 1, 1]);
    assert.deepEqual(events, ['pause', 'resume']);
    ch.push(new Uint8Array([7]), true);
    const rest: number[] = [];
    for (let r = await it.next(); !r.done; r = await it.next()) rest.push(...r.value);
    assert.deepEqual(rest, [7]);
    const ch2 = createBodyChannel();
    const it2 = ch2.iterable[Symbol.asyncIterator]();
    const pending = it2.next();
    ch2.fail(new Error('aborted'));
    await assert.rejects(pending, /aborted/);
  });

  test('createObjectStore: local by default, s3://bucket/prefix', async () => {
    const base = { dataDir: dir, publicBaseUrl: 'http://h', secret: randomBytes(32), s3: {} };
    assert.equal(createObjectStore(base).driver, 'local');
    assert.equal(createObjectStore({ ...base, storage: 'local' }).driver, 'local');
    const s = createObjectStore({ ...base, storage: 's3://my-bucket/gantry/prod/', s3: { endpoint: 'http://127.0.0.1:1', region: 'eu-west-1', accessKeyId: 'a', secretAccessKey: 'b' } });
    assert.equal(s.driver, 's3');
    const p = await s.presignPut('k/a.bin', { contentLength: 1, expiresInS: 60 });
    assert.match(p.url, /^http:\/\/127\.0\.0\.1:1\/my-bucket\/gantry\/prod\/k\/a\.bin\?/);
    assert.match(p.url, /X-Amz-SignedHeaders=content-length%3Bhost%3Bif-none-match/);
    assert.doesNotMatch(p.url, /checksum/i);
    await s.close?.();
    assert.deepEqual(parseS3Url('s3://b-1'), { bucket: 'b-1' });
    assert.throws(() => createObjectStore({ ...base, storage: 'gs://x' }), /GANTRY_STORAGE/);
    assert.throws(() => parseS3Url('s3://'), /GANTRY_STORAGE/);
  });
});
