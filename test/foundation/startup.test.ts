import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const root = new URL('../..', import.meta.url).pathname;

interface Started {
  child: ChildProcess;
  port: number;
  lines: any[];
  exit: Promise<number | null>;
}

/** `npm start` is `node bin/gantry.mjs serve`; spawn exactly that on the embedded defaults. */
function startServe(dataDir: string, extraEnv: Record<string, string> = {}): Promise<Started> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('GANTRY_') && k !== 'DATABASE_URL' && k !== 'REDIS_URL') env[k] = v;
  Object.assign(env, { GANTRY_DATA_DIR: dataDir, GANTRY_HTTP_PORT: '0', GANTRY_GRPC_PORT: '0', GANTRY_HTTP_HOST: '127.0.0.1', GANTRY_DEBUG_ROUTES: 'true', LOG_LEVEL: 'info', ...extraEnv });
  const child = spawn(process.execPath, ['bin/gantry.mjs', 'serve'], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: any[] = [];
  let stderr = '';
  child.stderr?.on('data', (d) => (stderr += d));
  const exit = new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      // a node that did not start in time is stopped, so the test's clean-up does not race its writes
      child.kill('SIGKILL');
      reject(new Error(`node did not start within 60 s; stderr: ${stderr}`));
    }, 60_000);
    createInterface({ input: child.stdout! }).on('line', (l) => {
      let j: any;
      try {
        j = JSON.parse(l);
      } catch {
        return;
      }
      lines.push(j);
      if (j.msg === 'listening') {
        clearTimeout(timer);
        resolve({ child, port: j.http_port, lines, exit });
      }
    });
    void exit.then((c) => reject(new Error(`node exited early (${c}); stderr: ${stderr}`)));
  });
}

// the start-up time is printed, not asserted (a figure, not a test: README's quick start quotes it); 60 s
// bounds a node that never starts
test('npm start on embedded defaults serves /server-info and reuses its data on restart', { timeout: 180_000 }, async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'gantry-start-'));
  try {
    const t0 = Date.now();
    const a = await startServe(dataDir);
    const r = await fetch(`http://127.0.0.1:${a.port}/api/v1/server-info`);
    const elapsed = Date.now() - t0;
    assert.equal(r.status, 200);
    assert.equal(typeof ((await r.json()) as any).registration_enabled, 'boolean');
    console.log(`first start to /server-info: ${elapsed} ms`);
    const ready1 = a.lines.find((l) => l.msg === 'database ready');
    assert.equal(ready1.embedded, true);
    assert.ok(ready1.migrations_applied > 0);

    // SIGTERM with a request in flight: it completes, the process exits 0.
    const slow = fetch(`http://127.0.0.1:${a.port}/api/v1/_debug/sleep?ms=1500`);
    await new Promise((res) => setTimeout(res, 300));
    a.child.kill('SIGTERM');
    const sr = await slow;
    assert.equal(sr.status, 200);
    assert.deepEqual(await sr.json(), { slept_ms: 1500 });
    assert.equal(await a.exit, 0);

    // second start: same installation, no migration applied again
    const t1 = Date.now();
    const b = await startServe(dataDir);
    console.log(`second start to listening: ${Date.now() - t1} ms`);
    const ready2 = b.lines.find((l) => l.msg === 'database ready');
    assert.equal(ready2.installation_id, ready1.installation_id);
    assert.equal(ready2.migrations_applied, 0);
    b.child.kill('SIGINT');
    assert.equal(await b.exit, 0);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('a bad configuration value stops start-up with one line naming the variable', async () => {
  const child = spawn(process.execPath, ['bin/gantry.mjs', 'serve'], { cwd: root, env: { ...process.env, GANTRY_HTTP_PORT: 'eighty' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const code = await new Promise((r) => child.on('exit', r));
  assert.equal(code, 78);
  const lines = err.trim().split('\n');
  assert.equal(lines.length, 1);
  assert.match(lines[0]!, /GANTRY_HTTP_PORT/);
});
