/**
 * The console's static serving (src/edge/routes/console.ts) on a real node, without a browser:
 * index.html at `/` and at client-side routes (no-cache, ETag, CSP), hashed assets cached for a year
 * (immutable) in brotli/gzip/identity by Accept-Encoding, 304 on If-None-Match, 404 for unknown
 * assets, and the API's own 404/405 answers untouched by the console's routes.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { request } from 'node:http';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { startTestNode, type TestNode } from '../helpers/node.js';

const root = fileURLToPath(new URL('../../', import.meta.url));

interface Raw {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** A raw GET (node:http: no automatic decompression, the exact bytes and headers). */
function get(origin: string, path: string, headers: Record<string, string> = {}, method = 'GET'): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const req = request(`${origin}${path}`, { method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

let t: TestNode;
let off: TestNode;
before(async () => {
  // the console is built by `npm ci` (the prepare script); build it here when a checkout skipped that
  const b = spawnSync(process.execPath, ['scripts/build-console.mjs', '--if-missing'], { cwd: root, encoding: 'utf8' });
  assert.equal(b.status, 0, b.stderr);
  [t, off] = await Promise.all([startTestNode({}, 'console_serving'), startTestNode({ GANTRY_CONSOLE_ENABLED: false }, 'console_off')]);
});
after(async () => {
  await Promise.all([t?.stop(), off?.stop()]);
});

let assetPaths: string[] = [];

test('GET / is the console shell: no-cache, an ETag, a strict CSP, hashed asset references', async () => {
  const r = await get(t.origin, '/');
  assert.equal(r.status, 200);
  assert.match(String(r.headers['content-type']), /^text\/html/);
  assert.equal(r.headers['cache-control'], 'no-cache');
  assert.match(String(r.headers.etag), /^"[A-Za-z0-9_-]+"$/);
  const csp = String(r.headers['content-security-policy']);
  assert.match(csp, /script-src 'self'(;|$)/);
  assert.match(csp, /frame-ancestors 'none'/);
  assert.equal(r.headers['x-frame-options'], 'DENY');
  const html = r.body.toString('utf8');
  assert.match(html, /<div id="app"><\/div>/);
  assetPaths = [...html.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((m) => m[1] as string);
  assert.ok(assetPaths.some((p) => /\/assets\/index-[A-Za-z0-9_-]+\.js$/.test(p)), `a hashed script in ${html}`);
  assert.ok(assetPaths.some((p) => p.endsWith('.css')), 'a hashed stylesheet');
  // no inline script: the CSP allows only 'self'
  assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/);

  const again = await get(t.origin, '/', { 'if-none-match': String(r.headers.etag) });
  assert.equal(again.status, 304);
  assert.equal(again.body.length, 0);
});

test('client-side routes get the same shell; unknown root paths, the API and other root routes are untouched', async () => {
  const shell = (await get(t.origin, '/')).body.toString('utf8');
  for (const p of ['/login', '/register', '/devices', '/workflows', '/workflows/0190a3c1-0000-7000-8000-000000000000', '/tasks/abc?x=1', '/agents', '/webhooks/x', '/credentials', '/members', '/notifications', '/services/y']) {
    const r = await get(t.origin, p);
    assert.equal(r.status, 200, p);
    assert.equal(r.headers['cache-control'], 'no-cache', p);
    assert.equal(r.body.toString('utf8'), shell, p);
  }
  const api404 = await get(t.origin, '/api/v1/no-such-thing');
  assert.equal(api404.status, 404);
  assert.match(String(api404.headers['content-type']), /json/);
  assert.equal(JSON.parse(api404.body.toString()).error_code, 'route_not_found');
  // GET on a POST-only API route is still a 405, not the console
  const api405 = await get(t.origin, '/api/v1/auth/login');
  assert.equal(api405.status, 405);
  const rootUnknown = await get(t.origin, '/no-such-page');
  assert.equal(rootUnknown.status, 404);
  const health = await get(t.origin, '/healthz');
  assert.equal(health.status, 200);
  assert.deepEqual(JSON.parse(health.body.toString()), { status: 'ok' });
  // the node's standalone pairing page keeps /pair (the console's pairing page is /devices)
  const pair = await get(t.origin, '/pair');
  assert.equal(pair.status, 200);
  assert.notEqual(pair.body.toString('utf8'), shell);
  const verify = await get(t.origin, '/verify-email');
  assert.equal(verify.status, 200);
  assert.match(verify.body.toString(), /Verify your email address/);
});

test('hashed assets: immutable for a year, brotli or gzip by Accept-Encoding, identical after decoding, 304 on the ETag', async () => {
  assert.ok(assetPaths.length >= 2);
  for (const p of assetPaths) {
    const plain = await get(t.origin, p);
    assert.equal(plain.status, 200, p);
    assert.equal(plain.headers['cache-control'], 'public, max-age=31536000, immutable');
    assert.equal(plain.headers['content-encoding'], undefined);
    assert.equal(plain.headers.vary, 'Accept-Encoding');
    assert.match(String(plain.headers['content-type']), p.endsWith('.js') ? /^text\/javascript/ : /^text\/css/);

    const br = await get(t.origin, p, { 'accept-encoding': 'gzip, deflate, br' });
    assert.equal(br.headers['content-encoding'], 'br', p);
    assert.ok(br.body.length < plain.body.length);
    assert.ok(brotliDecompressSync(br.body).equals(plain.body));

    const gz = await get(t.origin, p, { 'accept-encoding': 'gzip' });
    assert.equal(gz.headers['content-encoding'], 'gzip');
    assert.ok(gunzipSync(gz.body).equals(plain.body));

    const refused = await get(t.origin, p, { 'accept-encoding': 'br;q=0, gzip;q=0' });
    assert.equal(refused.headers['content-encoding'], undefined);

    const cached = await get(t.origin, p, { 'if-none-match': String(plain.headers.etag), 'accept-encoding': 'br' });
    assert.equal(cached.status, 304);
  }
  const js = assetPaths.find((p) => p.endsWith('.js')) as string;
  const size = (await get(t.origin, js, { 'accept-encoding': 'br' })).body.length;
  assert.ok(size < 60_000, `the console's script is small (${size} bytes brotli)`);
});

test('unknown or malformed asset names are 404s, never index.html or a file outside the build', async () => {
  for (const p of ['/assets/index-nothere.js', '/assets/..%2Fpackage.json', '/assets/../index.html', '/assets/', '/assets/sub/dir.js']) {
    const r = await get(t.origin, p);
    assert.equal(r.status, 404, p);
    assert.doesNotMatch(r.body.toString(), /<div id="app">/);
  }
});

test('GANTRY_CONSOLE_ENABLED=false: the node serves no console', async () => {
  assert.equal((await get(off.origin, '/')).status, 404);
  assert.equal((await get(off.origin, '/workflows')).status, 404);
  assert.equal((await get(off.origin, '/healthz')).status, 200);
});
