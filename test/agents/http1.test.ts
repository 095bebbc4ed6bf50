/**
 * The agent's lean HTTP/1.1 client (src/agent/http1.ts) against real servers on loopback: what it
 * sends (the bytes node:http would send), the response framings it reads, keep-alive reuse,
 * pause/resume, and the failures it reports.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { Http1Pool, leanRequestHead, type Http1Exchange } from '../../src/agent/http1.js';

interface Result {
  status: number;
  raw: string[];
  body: Buffer;
  error: NodeJS.ErrnoException | null;
  started: boolean;
}

function call(pool: Http1Pool, port: number, head: string, body = Buffer.alloc(0), onChunk?: (x: Http1Exchange, c: Buffer) => void): Promise<Result> & { x: Http1Exchange } {
  const r: Result = { status: 0, raw: [], body: Buffer.alloc(0), error: null, started: false };
  const chunks: Buffer[] = [];
  let x!: Http1Exchange;
  const p = new Promise<Result>((resolve) => {
    x = pool.request('127.0.0.1', port, head, body, {
      head: (status, raw) => {
        r.status = status;
        r.raw = raw;
      },
      data: (c) => {
        chunks.push(Buffer.from(c));
        onChunk?.(x, c);
      },
      end: () => {
        r.body = Buffer.concat(chunks);
        resolve(r);
      },
      error: (e, started) => {
        r.error = e;
        r.started = started;
        r.body = Buffer.concat(chunks);
        resolve(r);
      },
    });
  });
  return Object.assign(p, { x });
}

async function listen(server: net.Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return (server.address() as AddressInfo).port;
}

test('lean request head: the bytes node:http writes, or null for what node:http must handle', async () => {
  // what node:http itself writes for the same request, captured by a raw server
  const seen: string[] = [];
  const raw = net.createServer((s) => {
    let buf = '';
    s.on('data', (d) => {
      buf += d.toString('latin1');
      const end = buf.indexOf('\r\n\r\n');
      if (end >= 0) {
        seen.push(buf);
        s.end('HTTP/1.1 204 No Content\r\n\r\n');
      }
    });
  });
  const port = await listen(raw);
  const agent = new http.Agent({ keepAlive: true });
  const headers = { accept: 'text/plain', 'x-multi': ['a', 'b'], 'content-length': '5', host: `127.0.0.1:${port}` };
  await new Promise<void>((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/p?q=1', headers, agent }, (res) => {
      res.resume();
      res.on('end', resolve);
    });
    req.on('error', reject);
    req.write(Buffer.from('hello'));
    req.end();
  });
  agent.destroy();
  raw.close();
  assert.equal(leanRequestHead('POST', '/p?q=1', headers, Buffer.from('hello')) + 'hello', seen[0]);
  // GET without a body: no framing header, as node:http
  assert.equal(leanRequestHead('GET', '/', { host: 'h:1' }, Buffer.alloc(0)), 'GET / HTTP/1.1\r\nhost: h:1\r\nConnection: keep-alive\r\n\r\n');
  // left to node:http: a body without a matching Content-Length, an empty POST, bad header bytes, CONNECT
  assert.equal(leanRequestHead('POST', '/', { host: 'h:1' }, Buffer.from('x')), null);
  assert.equal(leanRequestHead('POST', '/', { host: 'h:1', 'content-length': '2' }, Buffer.from('x')), null);
  assert.equal(leanRequestHead('POST', '/', { host: 'h:1' }, Buffer.alloc(0)), null);
  assert.equal(leanRequestHead('GET', '/', { host: 'h:1', 'x-bad': 'a\r\nb' }, Buffer.alloc(0)), null);
  assert.equal(leanRequestHead('GET', '/', { 'bad name': 'v' }, Buffer.alloc(0)), null);
  assert.equal(leanRequestHead('CONNECT', 'h:1', {}, Buffer.alloc(0)), null);
});

test('lean client: Content-Length, chunked, HEAD, 204, 1xx, close-delimited; keep-alive reuse', async (t) => {
  let connections = 0;
  const server = http.createServer((req, res) => {
    if (req.url === '/len') return res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 5 }).end('hello');
    if (req.url === '/chunked') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('ab');
      setTimeout(() => res.end('cd'), 10);
      return;
    }
    if (req.url === '/204') return res.writeHead(204).end();
    if (req.url === '/early') {
      res.writeEarlyHints({ link: '</a.css>; rel=preload' });
      return res.writeHead(200, { 'content-length': 2 }).end('ok');
    }
    if (req.url === '/echo') {
      const cs: Buffer[] = [];
      req.on('data', (c: Buffer) => cs.push(c));
      req.on('end', () => res.writeHead(201, { 'content-length': Buffer.concat(cs).length, 'x-method': req.method ?? '' }).end(Buffer.concat(cs)));
      return;
    }
    res.writeHead(404, { 'content-length': 0 }).end();
  });
  server.on('connection', () => connections++);
  const port = await listen(server);
  const pool = new Http1Pool({ maxSockets: 8, maxFree: 4, idleMs: 4_000 });
  t.after(() => {
    pool.destroy();
    server.closeAllConnections();
    server.close();
  });
  const head = (method: string, path: string, h: Record<string, string> = {}, body = Buffer.alloc(0)): string => leanRequestHead(method, path, { ...h, host: `127.0.0.1:${port}` }, body) as string;

  const a = await call(pool, port, head('GET', '/len'));
  assert.equal(a.error, null);
  assert.equal(a.status, 200);
  assert.equal(a.body.toString(), 'hello');
  assert.ok(a.raw.includes('content-type') && a.raw.includes('text/plain'));
  const bp = call(pool, port, head('GET', '/chunked'));
  const b = await bp;
  assert.equal(b.body.toString(), 'abcd');
  assert.ok(bp.x.reusedSocket, 'the second request reuses the kept-alive socket');
  const h = await call(pool, port, head('HEAD', '/len'));
  assert.equal(h.status, 200);
  assert.equal(h.body.length, 0);
  const n = await call(pool, port, head('GET', '/204'));
  assert.equal(n.status, 204);
  const e = await call(pool, port, head('GET', '/early'));
  assert.equal(e.status, 200, '1xx interim answers are skipped');
  assert.equal(e.body.toString(), 'ok');
  const body = Buffer.from('{"x":1}');
  const p = await call(pool, port, head('POST', '/echo', { 'content-length': String(body.length) }, body), body);
  assert.equal(p.status, 201);
  assert.equal(p.body.toString(), '{"x":1}');
  assert.equal(connections, 1, 'every request above went on one kept-alive connection');
  // a close-delimited body (no Content-Length, no chunking) ends with the connection
  const raw = net.createServer((s) => s.once('data', () => s.end('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil close')));
  const rport = await listen(raw);
  t.after(() => raw.close());
  const c = await call(pool, rport, leanRequestHead('GET', '/', { host: 'x' }, Buffer.alloc(0)) as string);
  assert.equal(c.error, null);
  assert.equal(c.body.toString(), 'until close');
});

test('lean client: pause holds the body until resume; failures name what happened', async (t) => {
  const big = Buffer.alloc(512 * 1024, 7);
  const server = http.createServer((req, res) => {
    if (req.url === '/big') return res.writeHead(200, { 'content-length': big.length }).end(big);
    if (req.url === '/cut') {
      res.writeHead(200, { 'content-length': 100 });
      res.write('partial');
      setTimeout(() => res.socket?.destroy(), 20);
      return;
    }
    res.writeHead(200, { 'content-length': 0 }).end();
  });
  const port = await listen(server);
  const pool = new Http1Pool({ maxSockets: 8, maxFree: 4, idleMs: 4_000 });
  t.after(() => {
    pool.destroy();
    server.closeAllConnections();
    server.close();
  });
  const head = (path: string): string => leanRequestHead('GET', path, { host: 'x' }, Buffer.alloc(0)) as string;

  let paused = false;
  let duringPause = 0;
  const r = call(pool, port, head('/big'), Buffer.alloc(0), (x) => {
    if (paused) duringPause++;
    else if (!paused && duringPause === 0) {
      paused = true;
      x.pause();
      setTimeout(() => {
        paused = false;
        x.resume();
      }, 100);
    }
  });
  const big1 = await r;
  assert.equal(big1.error, null);
  assert.equal(duringPause, 0, 'no data while paused');
  assert.ok(big1.body.equals(big), 'the whole body, in order, after resume');

  const cut = await call(pool, port, head('/cut'));
  assert.ok(cut.error, 'a body cut short fails');
  assert.equal(cut.started, true);
  assert.equal(cut.body.toString(), 'partial');

  const closed = net.createServer();
  const cport = await listen(closed);
  await new Promise<void>((r2) => closed.close(() => r2()));
  const refused = await call(pool, cport, head('/'));
  assert.equal(refused.error?.code, 'ECONNREFUSED');
  assert.equal(refused.started, false);

  const bad = net.createServer((s) => s.once('data', () => s.end('HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nx')));
  const bport = await listen(bad);
  t.after(() => bad.close());
  const b = await call(pool, bport, head('/'));
  assert.match(String(b.error?.message), /Content-Length/);
});

test('lean client: beyond maxSockets a request waits for a free socket', async (t) => {
  let connections = 0;
  const server = http.createServer((_req, res) => setTimeout(() => res.writeHead(200, { 'content-length': 2 }).end('ok'), 20));
  server.on('connection', () => connections++);
  const port = await listen(server);
  const pool = new Http1Pool({ maxSockets: 1, maxFree: 1, idleMs: 4_000 });
  t.after(() => {
    pool.destroy();
    server.closeAllConnections();
    server.close();
  });
  const head = leanRequestHead('GET', '/', { host: 'x' }, Buffer.alloc(0)) as string;
  const rs = await Promise.all([call(pool, port, head), call(pool, port, head), call(pool, port, head)]);
  for (const r of rs) assert.equal(r.body.toString(), 'ok');
  assert.equal(connections, 1, 'one socket at a time, reused');
});
