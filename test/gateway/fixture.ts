/**
 * The container the gateway tests deploy with the exec runtime: a small HTTP + WebSocket server
 * written for the tests (listens on $PORT). Routes:
 *   GET /health                  200 (503 while $CRASH_FILE exists... no: startup exits then)
 *   GET /whoami                  {port, pid}
 *   ANY /echo                    {method, path, query, headers, body (utf8), bytes}
 *   GET /status/{code}           that status, body "status {code}"
 *   POST /upload                 {bytes, sha256} of the streamed body
 *   GET /download?bytes=N        N deterministic bytes (Content-Length), sha256 in x-sha256
 *   GET /sse?n=N&ms=M            N events (3), M ms apart (300), then ends (chunked)
 *   GET /slow?ms=N               answers after N ms
 *   POST /invoke                 {own_invoke: true} (the container's own /invoke)
 *   GET /headers                 the request headers
 *   WS  /ws                      echoes every message (text stays text, binary stays binary)
 * Startup: exits with code 3 at once when the file named by $CRASH_FILE exists.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';

const wsModule = createRequire(import.meta.url).resolve('ws');

export const APP = `
const http = require('node:http');
const fs = require('node:fs');
const crypto = require('node:crypto');
const { WebSocketServer } = require(${JSON.stringify(wsModule)});
if (process.env.CRASH_FILE && fs.existsSync(process.env.CRASH_FILE)) { console.error('crash file present: exiting'); process.exit(3); }
const port = Number(process.env.PORT);
const block = Buffer.alloc(64 * 1024);
for (let i = 0; i < block.length; i++) block[i] = (i * 31 + 7) & 0xff;
const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  const p = url.pathname;
  if (p === '/health') return res.end('ok');
  if (p === '/whoami') { res.setHeader('content-type', 'application/json'); return res.end(JSON.stringify({ port, pid: process.pid })); }
  if (p === '/headers') { res.setHeader('content-type', 'application/json'); return res.end(JSON.stringify(req.headers)); }
  if (p.startsWith('/status/')) { res.statusCode = Number(p.slice(8)); res.setHeader('x-app', 'yes'); return res.end('status ' + p.slice(8)); }
  if (p === '/invoke') { res.setHeader('content-type', 'application/json'); return res.end(JSON.stringify({ own_invoke: true, method: req.method })); }
  if (p === '/slow') { setTimeout(() => res.end('slow done'), Number(url.searchParams.get('ms') || '1000')); return; }
  if (p === '/upload') {
    const h = crypto.createHash('sha256'); let n = 0;
    req.on('data', (c) => { n += c.length; h.update(c); });
    req.on('end', () => { res.setHeader('content-type', 'application/json'); res.statusCode = 201; res.end(JSON.stringify({ bytes: n, sha256: h.digest('hex') })); });
    return;
  }
  if (p === '/download') {
    const total = Number(url.searchParams.get('bytes') || '0');
    const h = crypto.createHash('sha256');
    for (let left = total; left > 0; left -= block.length) h.update(left >= block.length ? block : block.subarray(0, left));
    res.setHeader('content-length', String(total)); res.setHeader('content-type', 'application/octet-stream'); res.setHeader('x-sha256', h.digest('hex'));
    let left = total;
    const pump = () => { while (left > 0) { const c = left >= block.length ? block : block.subarray(0, left); left -= c.length; if (!res.write(c)) return res.once('drain', pump); } res.end(); };
    return pump();
  }
  if (p === '/sse') {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    let i = 0;
    const n = Number(url.searchParams.get('n') || '3'), gap = Number(url.searchParams.get('ms') || '300');
    const tick = () => { i++; res.write('event: tick\\ndata: ' + JSON.stringify({ i, at: Date.now(), port }) + '\\n\\n'); if (i < n) setTimeout(tick, gap); else res.end(); };
    return tick();
  }
  if (p === '/echo') {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      res.setHeader('content-type', 'application/json');
      res.setHeader('set-cookie', ['a=1', 'b=2']);
      res.statusCode = req.method === 'POST' ? 201 : 200;
      res.end(JSON.stringify({ method: req.method, path: p, query: Object.fromEntries(url.searchParams), headers: req.headers, body: body.toString('utf8'), bytes: body.length }));
    });
    return;
  }
  res.statusCode = 404; res.end('no route ' + p);
});
const wss = new WebSocketServer({ noServer: true });
server.on('upgrade', (req, socket, head) => {
  if (new URL(req.url, 'http://x').pathname !== '/ws') { socket.destroy(); return; }
  wss.handleUpgrade(req, socket, head, (ws) => ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary })));
});
server.listen(port, '127.0.0.1', () => console.log('app listening on ' + port));
`;

export function writeApp(): { dir: string; script: string; crashFile: string } {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'gantry-gw-app-'));
  const script = path.join(dir, 'app.cjs');
  writeFileSync(script, APP);
  return { dir, script, crashFile: path.join(dir, 'crash') };
}

export const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
