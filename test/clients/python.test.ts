/**
 * gantry-client (clients/python) with Debian's python3 and pytest against a real node and a
 * simulate agent: the pytest suite (sync and async run-and-wait, SSE resume with Last-Event-ID,
 * presigned upload then a run with the file, result download, GantryError with error_code, webhook
 * signatures produced by Gantry's own signer, the route/field contract against the node's OpenAPI
 * document); the contract check fails on a copy of the client with a bogus field; README's Python
 * example runs verbatim. Skipped, naming python3-httpx and python3-pytest, where /usr/bin/python3
 * cannot import them.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cpSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { signBody } from '../../src/events/index.js';
import { tmpDir } from '../agents/helpers.js';
import { startLiveTeam, TINY_PNG, type LiveTeam } from './live-team.js';

const root = new URL('../..', import.meta.url).pathname;
const PY = process.env.GANTRY_TEST_PYTHON ?? '/usr/bin/python3'; // Debian's interpreter (python3-httpx, python3-pytest)
const clientDir = join(root, 'clients/python');

const probe = existsSync(PY) ? spawnSync(PY, ['-c', 'import httpx, pytest'], { encoding: 'utf8' }) : null;
const skip = probe?.status === 0 ? false : `${PY} cannot import httpx and pytest: apt-get install python3-httpx python3-pytest (${probe ? probe.stderr.trim().split('\n').at(-1) : `no ${PY}`})`;

/** Runs a Python command (asynchronously: the node under test lives in this process). */
function python(args: string[], o: { cwd: string; env: Record<string, string> }): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(PY, args, { cwd: o.cwd, env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp', PYTHONDONTWRITEBYTECODE: '1', ...o.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (c: Buffer) => (out += c.toString()));
    p.stderr.on('data', (c: Buffer) => (out += c.toString()));
    p.on('close', (code) => resolve({ code, out }));
  });
}

let live: LiveTeam | null = null;
before(async () => {
  if (!skip) live = await startLiveTeam('clients_python', 'my-workflow');
});
after(async () => {
  await live?.stop();
});

test('gantry-client: the pytest suite against a real node and a simulate agent', { skip, timeout: 180_000 }, async () => {
  const secret = `whsec-${randomUUID()}`;
  const body = JSON.stringify({ event_type: 'task.completed', task_id: randomUUID(), task_status: 'completed', task_output: { image_count: 1 }, task_error: '', timestamp: new Date().toISOString() });
  const r = await python(['-m', 'pytest', '-q', '-rfEs', '-p', 'no:cacheprovider', 'tests'], {
    cwd: clientDir,
    env: {
      GANTRY_URL: live!.origin,
      GANTRY_API_KEY: live!.s.sk.value,
      GANTRY_TEST_WORKFLOW: live!.slug,
      GANTRY_TEST_WEBHOOK_SECRET: secret,
      GANTRY_TEST_WEBHOOK_BODY: body,
      GANTRY_TEST_WEBHOOK_SIGNATURE: signBody(secret, body),
    },
  });
  assert.equal(r.code, 0, r.out);
  const passed = Number(/(\d+) passed/.exec(r.out)?.[1] ?? 0);
  assert.ok(passed >= 9, r.out);
  assert.doesNotMatch(r.out, /skipped|failed|error/i, r.out);
});

test('gantry-client: the route/field check against the OpenAPI document fails on a bogus field', { skip, timeout: 60_000 }, async () => {
  const copy = tmpDir('gantry-pyclient-');
  cpSync(clientDir, copy, { recursive: true, filter: (p) => !p.includes('__pycache__') });
  // the contract reads the node's document; the copy's tests find the package next to them
  const routes = join(copy, 'gantry_client/routes.py');
  const src = readFileSync(routes, 'utf8');
  const bogus = src.replace('reads=("task_status", "task_error")', 'reads=("task_status", "task_error", "bogus_field")');
  assert.notEqual(bogus, src, 'the get_task route declares its reads');
  const env = { GANTRY_URL: live!.origin };
  const ok = await python(['-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests/test_openapi_contract.py'], { cwd: copy, env });
  assert.equal(ok.code, 0, ok.out);
  writeFileSync(routes, bogus);
  const bad = await python(['-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests/test_openapi_contract.py'], { cwd: copy, env });
  assert.notEqual(bad.code, 0, bad.out);
  assert.match(bad.out, /reads field bogus_field, not in component Task/);
  // a TypedDict key the document lacks fails too
  writeFileSync(routes, src);
  const types = join(copy, 'gantry_client/types.py');
  writeFileSync(types, readFileSync(types, 'utf8').replace('class RunAccepted(TypedDict):\n    task_id: str\n', 'class RunAccepted(TypedDict):\n    task_id: str\n    bogus_key: str\n'));
  const badTd = await python(['-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests/test_openapi_contract.py'], { cwd: copy, env });
  assert.notEqual(badTd.code, 0, badTd.out);
  assert.match(badTd.out, /key bogus_key is not in component RunAccepted/);
});

test("README's Python example runs verbatim", { skip, timeout: 120_000 }, async () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('### Python (ComfyUI users)'));
  const m = /```python\n([\s\S]*?)```/.exec(section);
  assert.ok(m, 'README has a ```python block under "### Python (ComfyUI users)"');
  const lines = m[1]!.trimEnd().split('\n');
  assert.ok(lines.length <= 12, `the example is short (${lines.length} lines)`);
  const dir = tmpDir('gantry-pyexample-');
  writeFileSync(join(dir, 'example.py'), m[1]!);
  writeFileSync(join(dir, 'in.png'), TINY_PNG);
  const r = await python(['example.py'], { cwd: dir, env: { GANTRY_URL: live!.origin, GANTRY_API_KEY: live!.s.sk.value, PYTHONPATH: clientDir } });
  assert.equal(r.code, 0, r.out);
  assert.ok(readFileSync(join(dir, 'output.png')).subarray(0, 8).equals(TINY_PNG.subarray(0, 8)), 'output.png is a PNG');
  assert.match(r.out, /completed/);
});
