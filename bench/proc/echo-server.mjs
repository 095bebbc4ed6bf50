/**
 * The container of bench/proxy.ts: a plain node:http server (no dependencies), run as a container
 * service instance by the agent's exec runtime. Listens on 127.0.0.1:$PORT.
 *
 *   GET /hello   200, a fixed 1,024-byte text/plain body
 *   GET /health  200 "ok"
 *   otherwise    404
 *
 * When PORT_FILE is set, writes {"port": N, "pid": P} to that file once listening (written to a temp file
 * and renamed, so a reader never sees a partial file), so the bench can measure this same process
 * directly. Stops on SIGTERM/SIGINT.
 */
import http from 'node:http';
import { renameSync, writeFileSync } from 'node:fs';

const port = Number(process.env.PORT ?? 0);
const line = 'hello from the gantry proxy bench echo container, a fixed body of one kilobyte.....\n';
const BODY = Buffer.from(line.repeat(Math.ceil(1024 / line.length)).slice(0, 1024), 'utf8');
const OK = Buffer.from('ok');

const server = http.createServer((req, res) => {
  const path = (req.url ?? '/').split('?')[0];
  if (path === '/hello') {
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': BODY.length });
    res.end(BODY);
  } else if (path === '/health') {
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': OK.length });
    res.end(OK);
  } else {
    res.writeHead(404, { 'content-type': 'text/plain', 'content-length': 9 });
    res.end('not found');
  }
});
server.keepAliveTimeout = 65_000;
server.headersTimeout = 66_000;

server.listen(port, '127.0.0.1', () => {
  const actual = server.address().port;
  const file = process.env.PORT_FILE;
  if (file) {
    writeFileSync(`${file}.tmp`, JSON.stringify({ port: actual, pid: process.pid }));
    renameSync(`${file}.tmp`, file);
  }
  process.stdout.write(`${JSON.stringify({ port: actual })}\n`);
});

const stop = () => {
  server.close();
  server.closeAllConnections();
  process.exit(0);
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
