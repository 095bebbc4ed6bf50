/**
 * Shared pieces of the agent container tests: a small HTTP service script (what an exec instance
 * runs), polling with a deadline, and a plain HTTP GET.
 */
import http from 'node:http';
import { mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { ContainerSpec } from '../../src/agent/containers/types.js';

/**
 * The service script: listens on process.env.PORT (or argv[2]); GET /health 200 (503 after
 * POST /fail-health, 200 again after POST /heal-health); GET /env/NAME the variable's value (404
 * when unset); POST /exit?code=N exits with N; prints lines to stdout and stderr at start.
 * STARTUP=crash exits at once with code 3 after printing; SIGTERM=ignore ignores SIGTERM.
 */
export const SERVICE_SCRIPT = `
const http = require('node:http');
const port = Number(process.env.PORT || process.argv[2]);
console.log('service booting on port ' + port);
console.error('stderr: warming up');
if (process.env.STARTUP === 'crash') {
  console.error('fatal: cannot load model weights');
  process.exit(3);
}
if (process.env.SIGTERM === 'ignore') process.on('SIGTERM', () => console.log('ignoring SIGTERM'));
let healthy = true;
const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  if (url.pathname === '/health') { res.statusCode = healthy ? 200 : 503; return res.end(healthy ? 'ok' : 'sick'); }
  if (url.pathname === '/fail-health') { healthy = false; console.log('health now failing'); return res.end('ok'); }
  if (url.pathname === '/heal-health') { healthy = true; console.log('health restored'); return res.end('ok'); }
  if (url.pathname.startsWith('/env/')) {
    const v = process.env[decodeURIComponent(url.pathname.slice(5))];
    if (v === undefined) { res.statusCode = 404; return res.end(''); }
    return res.end(v);
  }
  if (url.pathname === '/exit') {
    const code = Number(url.searchParams.get('code') || '0');
    console.error('exiting with ' + code + ' as asked');
    res.end('bye', () => process.exit(code));
    return;
  }
  res.end('hello from ' + port);
});
server.listen(port, '127.0.0.1', () => console.log('listening on ' + port));
`;

export async function writeServiceScript(): Promise<{ dir: string; script: string }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'gantry-containers-test-'));
  const script = path.join(dir, 'service.cjs');
  await writeFile(script, SERVICE_SCRIPT);
  return { dir, script };
}

/** Polls fn every intervalMs until it returns a truthy value; fails after timeoutMs. */
export async function waitFor<T>(fn: () => T | Promise<T>, what: string, timeoutMs = 10_000, intervalMs = 20): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v as NonNullable<T>;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

export function httpRequest(host: string, port: number, urlPath: string, method = 'GET'): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host, port, path: urlPath, method, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

/** Whether process pid is alive. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

let specSeq = 0;
/** A ContainerSpec running the service script with the exec runtime (a fresh instance id each call). */
export function serviceSpec(script: string, over: Partial<ContainerSpec> = {}): ContainerSpec {
  specSeq++;
  return {
    instanceId: `inst-${specSeq}-${Date.now()}`,
    serviceId: 'svc-1',
    serviceSlug: 'echo',
    image: JSON.stringify([process.execPath, script]),
    exposedPort: 8000,
    env: [],
    volumes: [],
    gpuCount: 0,
    healthPath: '/health',
    ...over,
  };
}
