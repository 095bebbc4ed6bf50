/**
 * The agent's output-upload retry policy (src/agent/upload-retry.ts) against a real HTTP server
 * (node:http) that fails the first PUTs the way a restarting node or store does: which answers are
 * retried, which present a fresh URL first (the "presign" here hands out URLs of the same server,
 * numbered so the test sees which one each PUT used), which give up, and that the task's abort and
 * deadline stop it. The PUTs go through the agent's real uploadFile.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { putWithRetry, uploadVerdict, type PutTarget, type UploadRetryOptions } from '../../src/agent/upload-retry.js';
import { SMALL_UPLOAD_BYTES, TransferError, uploadFile } from '../../src/agent/transfer.js';
import { tmpDir } from './helpers.js';

/** How the server answers the n-th PUT (0-based): an HTTP status, 'reset' (the socket dropped), or 'hold' (never answers). */
type Answer = number | 'reset' | 'hold';

interface Seen {
  url: string;
  bytes: number;
  contentLength: string | undefined;
  chunked: boolean;
}

let server: Server;
let base = '';
let script: (n: number) => Answer = () => 200;
let seen: Seen[] = [];
let stored: Buffer | null = null;

before(async () => {
  server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const n = seen.length;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      seen.push({ url: req.url ?? '', bytes: body.length, contentLength: req.headers['content-length'], chunked: req.headers['transfer-encoding'] !== undefined });
      const a = script(n);
      if (a === 'hold') return;
      if (a === 'reset') return void req.socket.destroy();
      if (a === 200) stored = body;
      res.writeHead(a, { 'content-type': 'application/xml', connection: 'close' }).end(a === 200 ? '' : `<Error><Code>X${a}</Code></Error>`);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

const file = join(tmpDir('gantry-upload-retry-'), 'output.bin');
const content = randomBytes(64 * 1024);
writeFileSync(file, content);

/** Runs putWithRetry against the server with `answers` for the first PUTs (then 200). */
async function run(answers: Answer[], o: Partial<UploadRetryOptions> = {}): Promise<{ result: PutTarget | Error; presigns: number; urls: string[] }> {
  seen = [];
  stored = null;
  script = (n) => answers[n] ?? 200;
  let presigns = 0;
  const target = (i: number): PutTarget => ({ url: `${base}/storage/out?sig=${i}`, headers: { 'Content-Type': 'application/octet-stream' }, storageKey: 'k' });
  const put = (t: PutTarget): Promise<void> => uploadFile(t.url, t.headers, file, 'application/octet-stream', o.signal ?? new AbortController().signal);
  const represign = async (): Promise<PutTarget> => target(++presigns);
  const result = await putWithRetry(target(0), put, represign, { until: Date.now() + 60_000, signal: new AbortController().signal, initialMs: 5, maxMs: 20, ...o }).catch((e: unknown) => e as Error);
  return { result, presigns, urls: seen.map((s) => s.url.slice(s.url.indexOf('sig='))) };
}

test('a small file is sent whole, a large one streamed from disk: both with the exact Content-Length, never chunked', async () => {
  const dir = tmpDir('gantry-upload-sizes-');
  for (const size of [0, 1, 64 * 1024, SMALL_UPLOAD_BYTES, SMALL_UPLOAD_BYTES + 1, SMALL_UPLOAD_BYTES * 2 + 12_345]) {
    const f = join(dir, `out-${size}.bin`);
    const bytes = randomBytes(size);
    writeFileSync(f, bytes);
    seen = [];
    stored = null;
    script = () => 200;
    await uploadFile(`${base}/storage/out-${size}`, { 'Content-Type': 'application/octet-stream' }, f, 'application/octet-stream', new AbortController().signal);
    assert.equal(seen.length, 1, `size ${size}: one PUT`);
    assert.equal(seen[0]?.contentLength, String(size), `size ${size}: Content-Length`);
    assert.equal(seen[0]?.chunked, false, `size ${size}: not chunked`);
    assert.ok(stored !== null && (stored as Buffer).equals(bytes), `size ${size}: the bytes landed as written`);
  }
});

test('5xx and dropped connections are retried, each time with a freshly presigned URL; the file lands whole', async () => {
  const r = await run([503, 'reset', 502, 500]);
  assert.ok(!(r.result instanceof Error), String(r.result));
  assert.deepEqual(r.urls, ['sig=0', 'sig=1', 'sig=2', 'sig=3', 'sig=4']);
  assert.equal(r.presigns, 4);
  assert.ok(stored?.equals(content), 'the stored body is the file');
});

test('408 and 429 are retried on the same URL (no new presign)', async () => {
  const r = await run([429, 408]);
  assert.ok(!(r.result instanceof Error), String(r.result));
  assert.deepEqual(r.urls, ['sig=0', 'sig=0', 'sig=0']);
  assert.equal(r.presigns, 0);
});

test('403 (expired URL, bad signature) presigns again once; a second 403 gives up with it', async () => {
  const once = await run([403]);
  assert.ok(!(once.result instanceof Error), String(once.result));
  assert.deepEqual(once.urls, ['sig=0', 'sig=1']);

  const twice = await run([403, 403, 403, 403]);
  assert.ok(twice.result instanceof TransferError, String(twice.result));
  assert.equal(twice.result.status, 403);
  assert.deepEqual(twice.urls, ['sig=0', 'sig=1'], 'one re-presign, then no more tries');

  // a 403 after the server was failing is still allowed its one re-presign, and only one
  const mixed = await run([503, 403, 503, 403]);
  assert.ok(mixed.result instanceof TransferError);
  assert.equal(mixed.result.status, 403);
  assert.equal(mixed.urls.length, 4);
});

test('400, 411 and 413 give up at once: one PUT, no presign', async () => {
  for (const status of [400, 411, 413]) {
    const r = await run([status]);
    assert.ok(r.result instanceof TransferError, `${status}: ${String(r.result)}`);
    assert.equal(r.result.status, status);
    assert.match(r.result.message, new RegExp(`HTTP ${status}`));
    assert.equal(r.urls.length, 1, `${status}: one PUT`);
    assert.equal(r.presigns, 0);
  }
});

test('412 (an earlier try already landed) is done, not retried', async () => {
  const r = await run([412]);
  assert.ok(!(r.result instanceof Error), String(r.result));
  assert.equal(r.urls.length, 1);
});

test('the deadline bounds it: no try starts after `until`; the last error is thrown', async () => {
  // the first wait (>= 50 % of 60 s) would end past a deadline 5 s away: the first 503 is final
  const r = await run([503, 503], { until: Date.now() + 5_000, initialMs: 60_000, maxMs: 60_000 });
  assert.ok(r.result instanceof TransferError, String(r.result));
  assert.equal(r.result.status, 503);
  assert.equal(r.urls.length, 1);
});

test('an abort stops it at once: while it waits to retry, and in the middle of a PUT', async () => {
  // waiting: a 10-minute backoff that only the abort can end (the test's own timeout fails it otherwise)
  const ac = new AbortController();
  seen = [];
  script = () => 503;
  const waiting = putWithRetry(
    { url: `${base}/storage/out?sig=0`, headers: {}, storageKey: 'k' },
    (t) => uploadFile(t.url, t.headers, file, 'application/octet-stream', ac.signal),
    async () => ({ url: `${base}/storage/out?sig=1`, headers: {}, storageKey: 'k' }),
    { until: Date.now() + 3_600_000, signal: ac.signal, initialMs: 600_000, maxMs: 600_000, onRetry: () => setImmediate(() => ac.abort(new Error('task cancelled'))) },
  );
  await assert.rejects(waiting, /task cancelled/);
  assert.equal(seen.length, 1, 'no PUT after the abort');

  // mid-PUT: the server never answers; the abort ends the PUT and nothing is retried
  const ac2 = new AbortController();
  seen = [];
  let arrived!: () => void;
  const got = new Promise<void>((r) => (arrived = r));
  script = () => (arrived(), 'hold');
  let represigned = 0;
  const holding = putWithRetry(
    { url: `${base}/storage/out?sig=0`, headers: {}, storageKey: 'k' },
    (t) => uploadFile(t.url, t.headers, file, 'application/octet-stream', ac2.signal),
    async () => (represigned++, { url: `${base}/storage/out?sig=1`, headers: {}, storageKey: 'k' }),
    { until: Date.now() + 3_600_000, signal: ac2.signal, initialMs: 5, maxMs: 5 },
  );
  await got;
  ac2.abort(new Error('task cancelled'));
  await assert.rejects(holding, /task cancelled|abort/i);
  assert.equal(represigned, 0);
  assert.equal(seen.length, 1);
});

test('uploadVerdict: what each failure calls for', () => {
  assert.equal(uploadVerdict(new TypeError('fetch failed')), 'represign');
  assert.equal(uploadVerdict(new DOMException('timed out', 'TimeoutError')), 'represign');
  for (const s of [500, 502, 503, 504]) assert.equal(uploadVerdict(new TransferError('x', s)), 'represign', String(s));
  for (const s of [408, 429]) assert.equal(uploadVerdict(new TransferError('x', s)), 'retry', String(s));
  assert.equal(uploadVerdict(new TransferError('x', 403)), 'represign_once');
  for (const s of [400, 401, 404, 411, 413]) assert.equal(uploadVerdict(new TransferError('x', s)), 'give_up', String(s));
});
