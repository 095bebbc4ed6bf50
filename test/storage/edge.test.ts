import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startTestNode, type TestNode } from '../helpers/node.js';

/** The built-in object store through the real uWS edge (/storage/*), as clients and agents use it. */
let t: TestNode;
before(async () => {
  t = await startTestNode({}, 'stedge');
});
after(async () => {
  await t.stop();
});

test('presigned PUT through the edge: 200, again 412, missing signed header 403, wrong length 403, GET returns the bytes', async () => {
  const body = Buffer.from('hello gantry object store');
  const p = await t.node.objectStore.presignPut('teams/x/inputs/a.txt', { contentLength: body.length, contentType: 'text/plain', expiresInS: 600 });
  assert.ok(p.url.startsWith(t.origin), p.url);
  const put = (headers: Record<string, string>, b: Buffer = body) => fetch(p.url, { method: 'PUT', headers, body: new Uint8Array(b) });
  const noINM = { ...p.headers };
  delete (noINM as Record<string, string>)['If-None-Match'];
  assert.equal((await put(noINM)).status, 403, 'missing If-None-Match');
  assert.equal((await put({ ...p.headers, 'Content-Length': String(body.length + 1) }, Buffer.concat([body, Buffer.from('!')]))).status, 403, 'wrong length');
  assert.equal((await put(p.headers)).status, 200);
  assert.equal((await put(p.headers)).status, 412);
  const g = await t.node.objectStore.presignGet('teams/x/inputs/a.txt', { expiresInS: 60 });
  const r = await fetch(g);
  assert.equal(r.status, 200);
  assert.equal(Buffer.from(await r.arrayBuffer()).toString(), body.toString());
  const h = await fetch(g, { method: 'HEAD' });
  assert.equal(h.status, 200);
  assert.equal(h.headers.get('content-length'), String(body.length));
});

test('1 GB upload and download through the edge keep RSS growth under 100 MB', { skip: process.env.GANTRY_SKIP_HEAVY === '1' ? 'GANTRY_SKIP_HEAVY=1' : false, timeout: 300_000 }, async () => {
  const size = 1024 * 1024 * 1024;
  const chunk = Buffer.alloc(1024 * 1024, 7);
  global.gc?.();
  const rss0 = process.memoryUsage().rss;
  let peak = rss0;
  const sample = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 50);
  try {
    const p = await t.node.objectStore.presignPut('teams/x/big.bin', { contentLength: size, expiresInS: 600 });
    let sent = 0;
    const src = new ReadableStream({
      pull(c) {
        if (sent >= size) return c.close();
        sent += chunk.length;
        c.enqueue(chunk);
      },
    });
    const put = await fetch(p.url, { method: 'PUT', headers: p.headers, body: src, duplex: 'half' } as RequestInit);
    assert.equal(put.status, 200);
    const g = await fetch(await t.node.objectStore.presignGet('teams/x/big.bin', { expiresInS: 60 }));
    assert.equal(g.status, 200);
    const hash = createHash('sha256');
    let got = 0;
    for await (const part of g.body as unknown as AsyncIterable<Uint8Array>) {
      got += part.length;
      hash.update(part);
    }
    assert.equal(got, size);
    const expect = createHash('sha256');
    for (let i = 0; i < 1024; i++) expect.update(chunk);
    assert.equal(hash.digest('hex'), expect.digest('hex'));
  } finally {
    clearInterval(sample);
  }
  const growth = (peak - rss0) / 1024 / 1024;
  console.log(`1 GB through the uWS edge: RSS ${Math.round(rss0 / 1048576)} MB -> peak ${Math.round(peak / 1048576)} MB (growth ${growth.toFixed(1)} MB)`);
  assert.ok(growth < 100, `RSS grew ${growth.toFixed(1)} MB`);
});
