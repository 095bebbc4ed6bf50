/**
 * Heavy: a 1 GiB presigned PUT and GET through the local store mounted on node:http, in this
 * process, must keep RSS growth under 100 MB (the body is streamed to and from disk, never
 * buffered). Skipped with GANTRY_SKIP_HEAVY=1.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LocalObjectStore } from '../../src/storage/local.js';
import { localStorageListener } from '../../src/storage/node-http.js';
import { httpRequest, patternChunks, sha256Of } from '../helpers/s3.js';

const heavySkip = process.env.GANTRY_SKIP_HEAVY === '1' ? 'GANTRY_SKIP_HEAVY=1' : false;

test('1 GiB streaming PUT then GET through node:http keeps RSS growth under 100 MB', { skip: heavySkip, timeout: 300_000 }, async () => {
  const dir = await mkdtemp(join(tmpdir(), 'gantry-heavy-'));
  let store: LocalObjectStore | null = null;
  const server = createServer((req, res) => {
    if (store) localStorageListener(store)(req, res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  store = new LocalObjectStore({ rootDir: dir, publicBaseUrl: `http://127.0.0.1:${port}`, secret: randomBytes(32) });
  try {
    // warm up the code paths so their one-time allocations don't count
    const w = await store.presignPut('warm/up', { contentLength: 4 * 1024 * 1024, expiresInS: 60 });
    await httpRequest(w.url, { method: 'PUT', headers: w.headers, body: patternChunks(0, 4 * 1024 * 1024) });
    await sha256Of((await httpRequest(await store.presignGet('warm/up', { expiresInS: 60 }), { method: 'GET', stream: true })).stream as AsyncIterable<Buffer>);

    const size = 1024 ** 3;
    const base = process.memoryUsage().rss;
    let peak = base;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss);
    }, 25);

    const up = createHash('sha256');
    async function* body(): AsyncGenerator<Buffer> {
      for await (const c of patternChunks(0, size)) {
        up.update(c);
        yield c;
      }
    }
    const t0 = Date.now();
    const p = await store.presignPut('heavy/1g.bin', { contentLength: size, contentType: 'application/octet-stream', expiresInS: 600 });
    const put = await httpRequest(p.url, { method: 'PUT', headers: p.headers, body: body() });
    const tPut = Date.now() - t0;
    assert.equal(put.status, 200, put.body.toString());
    assert.equal((await store.head('heavy/1g.bin'))?.size, size);

    const t1 = Date.now();
    const g = await httpRequest(await store.presignGet('heavy/1g.bin', { expiresInS: 600 }), { method: 'GET', stream: true });
    assert.equal(g.status, 200);
    assert.equal(g.headers['content-length'], String(size));
    const down = await sha256Of(g.stream as AsyncIterable<Buffer>);
    const tGet = Date.now() - t1;
    clearInterval(sampler);
    peak = Math.max(peak, process.memoryUsage().rss);

    assert.equal(down.size, size);
    assert.equal(down.hex, up.digest('hex'));
    const growthMb = (peak - base) / 1e6;
    console.log(
      `[heavy] 1 GiB PUT ${tPut} ms (${((size / 1e6) / (tPut / 1000)).toFixed(0)} MB/s), GET ${tGet} ms (${((size / 1e6) / (tGet / 1000)).toFixed(0)} MB/s); ` +
        `RSS base ${(base / 1e6).toFixed(1)} MB, peak ${(peak / 1e6).toFixed(1)} MB, growth ${growthMb.toFixed(1)} MB (limit 100 MB)`,
    );
    assert.ok(growthMb < 100, `RSS grew by ${growthMb.toFixed(1)} MB`);
  } finally {
    await new Promise<void>((r) => server.close(() => r()));
    await rm(dir, { recursive: true, force: true });
  }
});
