/**
 * Egress to external services (src/gateway/external.ts) against local HTTPS servers with a test CA
 * (openssl), through an OutboundGuard that allowlists 127.0.0.1 only.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import https from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { readFileSync } from 'node:fs';
import { OutboundGuard } from '../../src/events/outbound.js';
import { ExternalError, closeExternalAgents, externalRequest, joinExternalUrl, type ExternalRequest } from '../../src/gateway/external.js';
import { makePki, type Pki } from '../events/helpers.js';

const hasOpenssl = spawnSync('openssl', ['version'], { stdio: 'ignore' }).status === 0;
const skip = hasOpenssl ? false : 'openssl is not installed: the test cannot make its TLS certificates';

interface Seen {
  server: 'a' | 'b';
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

let pki: Pki;
let ca: string[];
let a: https.Server;
let b: https.Server;
let aPort = 0;
let bPort = 0;
let seen: Seen[] = [];
let connections = 0;
let release: (() => void) | null = null;
const guard = new OutboundGuard({
  allowlist: '127.0.0.1',
  resolver: async (host) => {
    if (host === 'localhost') return [{ address: '127.0.0.1', family: 4 }];
    if (host === 'blocked.test') return [{ address: '10.20.30.40', family: 4 }];
    throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
  },
});

const SECRET = 'Bearer vault-secret-0123456789';

function handler(server: 'a' | 'b') {
  return (req: IncomingMessage, res: ServerResponse): void => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = req.url ?? '';
      seen.push({ server, method: req.method ?? '', url, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      const u = new URL(url, 'https://x');
      const p = u.pathname;
      const to = u.searchParams.get('to');
      if (p.endsWith('/redirect')) {
        res.writeHead(Number(u.searchParams.get('code') ?? 302), { location: to ?? (u.searchParams.has('loop') ? url : '/base/echo'), 'content-type': 'text/plain' });
        res.end('moved');
        return;
      }
      if (p.endsWith('/slow')) {
        setTimeout(() => {
          if (!res.destroyed) res.end('late');
        }, 3000).unref();
        return;
      }
      if (p.endsWith('/stream')) {
        res.writeHead(200, { 'content-type': 'text/plain', 'x-multi': ['1', '2'] });
        res.write('first chunk;');
        release = () => res.end('last chunk');
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json', 'x-server': server });
      res.end(JSON.stringify({ server, method: req.method, url }));
    });
  };
}

async function listen(s: https.Server): Promise<number> {
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return (s.address() as AddressInfo).port;
}

before(async () => {
  if (skip) return;
  pki = makePki();
  ca = [readFileSync(pki.caFile, 'utf8')];
  a = https.createServer({ key: pki.key, cert: pki.cert }, handler('a'));
  b = https.createServer({ key: pki.key, cert: pki.cert }, handler('b'));
  a.on('secureConnection', (_s: Socket) => connections++);
  aPort = await listen(a);
  bPort = await listen(b);
});

after(async () => {
  if (skip) return;
  closeExternalAgents(guard);
  for (const s of [a, b]) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
  pki.cleanup();
});

const base = (): string => `https://127.0.0.1:${aPort}/base`;
const req = (o: Partial<ExternalRequest>): ExternalRequest => ({ baseUrl: base(), path: '/echo', method: 'GET', headers: {}, body: null, inject: { name: 'X-Api-Key', value: SECRET }, timeoutMs: 5000, ca, ...o });

async function text(s: NodeJS.ReadableStream): Promise<string> {
  const out: Buffer[] = [];
  for await (const c of s as AsyncIterable<Buffer | string>) out.push(Buffer.from(c));
  return Buffer.concat(out).toString('utf8');
}

async function* chunks(parts: string[]): AsyncIterable<Buffer> {
  for (const p of parts) {
    await new Promise((r) => setImmediate(r));
    yield Buffer.from(p);
  }
}

const isExternal = (code: string, msg?: RegExp) => (e: unknown) => {
  assert.ok(e instanceof ExternalError, String(e));
  assert.equal(e.code, code, e.message);
  if (msg) assert.match(e.message, msg);
  assert.ok(!e.message.includes(SECRET));
  return true;
};

test('GET: base path prefix and query kept, the vault header injected (replacing a caller value), hop-by-hop dropped, TLS verified', { skip }, async () => {
  seen = [];
  const r = await externalRequest(guard, req({ path: '/echo?a=1&b=two', headers: { accept: 'application/json', 'x-api-key': 'caller-forged', connection: 'close', host: 'evil.example' } }));
  assert.equal(r.status, 200);
  assert.equal(r.headers['x-server'], 'a');
  assert.deepEqual(JSON.parse(await text(r.body)), { server: 'a', method: 'GET', url: '/base/echo?a=1&b=two' });
  const s = seen[0] as Seen;
  assert.equal(s.headers['x-api-key'], SECRET);
  assert.equal(s.headers.accept, 'application/json');
  assert.equal(s.headers.host, `127.0.0.1:${aPort}`);
  // without the test CA the certificate is not trusted
  await assert.rejects(externalRequest(guard, req({ ca: undefined as never })), isExternal('connect'));
  // a base URL with a trailing slash joins the same way
  const r2 = await externalRequest(guard, req({ baseUrl: `${base()}/`, path: '/echo' }));
  assert.equal(JSON.parse(await text(r2.body)).url, '/base/echo');
});

test('POST with a streamed body and with a buffer; pooled keep-alive connections are reused', { skip }, async () => {
  seen = [];
  const r = await externalRequest(guard, req({ method: 'POST', path: '/echo', headers: { 'content-type': 'text/plain' }, body: chunks(['hello ', 'streamed ', 'world']) }));
  assert.equal(r.status, 200);
  await text(r.body);
  assert.equal(seen[0]?.body, 'hello streamed world');
  assert.equal(seen[0]?.headers['transfer-encoding'], 'chunked');
  assert.equal(seen[0]?.headers['x-api-key'], SECRET);
  const before = connections;
  for (let i = 0; i < 3; i++) {
    const x = await externalRequest(guard, req({ method: 'PUT', body: Buffer.from(`buffer ${i}`) }));
    assert.equal(x.status, 200);
    await text(x.body);
  }
  assert.equal(seen[3]?.body, 'buffer 2');
  assert.equal(seen[3]?.headers['content-length'], '8');
  assert.ok(connections - before <= 1, `connections reused (${connections - before} new)`);
});

test('the response body streams (not buffered): the first chunk arrives before the server ends', { skip }, async () => {
  release = null;
  const r = await externalRequest(guard, req({ path: '/stream' }));
  assert.equal(r.status, 200);
  assert.deepEqual(r.headers['x-multi'], ['1', '2']);
  const it = (r.body as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
  const first = await it.next();
  assert.equal(String(first.value), 'first chunk;');
  assert.ok(release, 'the server has not ended the response yet');
  (release as () => void)();
  let rest = '';
  for (let n = await it.next(); !n.done; n = await it.next()) rest += String(n.value);
  assert.equal(rest, 'last chunk');
  // the signal also ends a response that is streaming
  release = null;
  const ac = new AbortController();
  const s = await externalRequest(guard, req({ path: '/stream', signal: ac.signal }));
  const it2 = (s.body as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
  assert.equal(String((await it2.next()).value), 'first chunk;');
  ac.abort();
  await assert.rejects(it2.next(), isExternal('aborted'));
  (release as (() => void) | null)?.();
});

test('same-origin redirects are followed with the header; 303 and POST 301/302 become GET; 307/308 keep a buffered body', { skip }, async () => {
  seen = [];
  const r = await externalRequest(guard, req({ path: '/redirect?code=302' }));
  assert.equal(r.status, 200);
  assert.equal(JSON.parse(await text(r.body)).url, '/base/echo');
  assert.deepEqual(
    seen.map((s) => [s.url, s.headers['x-api-key']]),
    [
      ['/base/redirect?code=302', SECRET],
      ['/base/echo', SECRET],
    ],
  );
  for (const [code, method, expectMethod, expectBody] of [
    [303, 'POST', 'GET', ''],
    [301, 'POST', 'GET', ''],
    [302, 'POST', 'GET', ''],
    [307, 'POST', 'POST', 'payload'],
    [308, 'PUT', 'PUT', 'payload'],
    [303, 'PUT', 'GET', ''],
  ] as const) {
    seen = [];
    const x = await externalRequest(guard, req({ method, path: `/redirect?code=${code}`, headers: { 'content-type': 'text/plain' }, body: Buffer.from('payload') }));
    assert.equal(x.status, 200, `${code} ${method}`);
    await text(x.body);
    const last = seen[1] as Seen;
    assert.equal(last.method, expectMethod, `${code} ${method}`);
    assert.equal(last.body, expectBody, `${code} ${method}`);
    assert.equal(last.headers['content-type'], expectBody ? 'text/plain' : undefined);
    assert.equal(last.headers['x-api-key'], SECRET);
  }
  // a streamed body cannot be replayed: the 307 comes back as is
  seen = [];
  const s = await externalRequest(guard, req({ method: 'POST', path: '/redirect?code=307', body: chunks(['a', 'b']) }));
  assert.equal(s.status, 307);
  assert.equal(s.headers.location, '/base/echo');
  assert.equal(await text(s.body), 'moved');
  assert.equal(seen.length, 1);
  // at most maxRedirects hops, then the 3xx as is
  seen = [];
  const loop = '/redirect?code=302&loop=1';
  const m = await externalRequest(guard, req({ path: loop, maxRedirects: 2 }));
  assert.equal(m.status, 302);
  await text(m.body);
  assert.equal(seen.length, 3);
  // maxRedirects 0: nothing followed
  const z = await externalRequest(guard, req({ path: '/redirect?code=302', maxRedirects: 0 }));
  assert.equal(z.status, 302);
  await text(z.body);
});

test('a cross-origin redirect drops the vault header (and Authorization/Cookie), also on the way back', { skip }, async () => {
  seen = [];
  const toB = `https://localhost:${bPort}/elsewhere/redirect?code=302&to=${encodeURIComponent(`https://127.0.0.1:${aPort}/base/echo`)}`;
  const r = await externalRequest(guard, req({ path: `/redirect?code=302&to=${encodeURIComponent(toB)}`, headers: { authorization: 'Bearer caller', cookie: 'a=b', accept: '*/*' } }));
  assert.equal(r.status, 200);
  await text(r.body);
  assert.deepEqual(
    seen.map((s) => [s.server, s.headers['x-api-key'] ?? null, s.headers.authorization ?? null, s.headers.cookie ?? null, s.headers.accept]),
    [
      ['a', SECRET, 'Bearer caller', 'a=b', '*/*'],
      ['b', null, null, null, '*/*'],
      ['a', null, null, null, '*/*'],
    ],
  );
  // the same host under another port is another origin too
  seen = [];
  const x = await externalRequest(guard, req({ path: `/redirect?code=307&to=${encodeURIComponent(`https://127.0.0.1:${bPort}/echo`)}` }));
  assert.equal(x.status, 200);
  await text(x.body);
  assert.equal(seen[1]?.server, 'b');
  assert.equal(seen[1]?.headers['x-api-key'], undefined);
});

test('redirects to a blocked address or a non-https URL are refused', { skip }, async () => {
  for (const to of [`https://127.0.0.2:${aPort}/x`, 'https://blocked.test/x', 'https://169.254.169.254/latest/meta-data', `http://127.0.0.1:${aPort}/base/echo`, 'https://user:pw@127.0.0.1/x']) {
    seen = [];
    await assert.rejects(externalRequest(guard, req({ path: `/redirect?code=302&to=${encodeURIComponent(to)}` })), isExternal('refused'), to);
    assert.equal(seen.length, 1, 'only the first hop reached a server');
  }
  // the base URL itself
  await assert.rejects(externalRequest(guard, req({ baseUrl: 'https://blocked.test/api' })), isExternal('refused', /10\.20\.30\.40/));
  await assert.rejects(externalRequest(guard, req({ baseUrl: 'https://10.0.0.1/api' })), isExternal('refused'));
  await assert.rejects(externalRequest(guard, req({ baseUrl: `http://127.0.0.1:${aPort}/base` })), isExternal('refused', /https/));
  await assert.rejects(externalRequest(guard, req({ baseUrl: 'https://nowhere.invalid/' })), isExternal('refused', /does not resolve/));
});

test('paths that would change scheme or host, or leave the base path, are refused before any connection', { skip }, async () => {
  seen = [];
  for (const path of ['//evil.example', '//evil.example/x', 'http://evil.example/', 'https://evil.example', 'evil', '', '/\\evil.example', '/a b', '/x\r\nHost: evil', '/../other', '/a/../../other', '/%2e%2e/other', '/%2E%2E/%2e%2e/x']) {
    await assert.rejects(externalRequest(guard, req({ path })), isExternal('refused'), JSON.stringify(path));
  }
  assert.equal(seen.length, 0);
  // what stays inside is fine, and normalised
  assert.equal(joinExternalUrl(base(), '/a/../echo?x=1').href, `${base()}/echo?x=1`);
  assert.equal(joinExternalUrl(`https://127.0.0.1:${aPort}`, '/echo').href, `https://127.0.0.1:${aPort}/echo`);
  assert.equal(joinExternalUrl(`https://127.0.0.1:${aPort}/v1?key=k`, '/echo?x=1').href, `https://127.0.0.1:${aPort}/v1/echo?key=k&x=1`);
  assert.equal(joinExternalUrl(base(), '/echo#frag').href, `${base()}/echo`);
  assert.equal(joinExternalUrl(base(), '/@evil.example').host, `127.0.0.1:${aPort}`);
});

test('timeout until the response headers; connect errors; abort', { skip }, async () => {
  const started = Date.now();
  await assert.rejects(externalRequest(guard, req({ path: '/slow', timeoutMs: 300 })), isExternal('timeout', /300 ms/));
  assert.ok(Date.now() - started < 2500);
  // nothing listens there
  const closed = https.createServer();
  const port = await listen(closed);
  await new Promise((r) => closed.close(r));
  await assert.rejects(externalRequest(guard, req({ baseUrl: `https://127.0.0.1:${port}` })), isExternal('connect'));
  const ac = new AbortController();
  const p = externalRequest(guard, req({ path: '/slow', signal: ac.signal }));
  setTimeout(() => ac.abort(), 100);
  await assert.rejects(p, isExternal('aborted'));
  // a header value Node cannot send
  await assert.rejects(externalRequest(guard, req({ headers: { 'x-bad': 'a\nb' } })), isExternal('invalid_request'));
});
