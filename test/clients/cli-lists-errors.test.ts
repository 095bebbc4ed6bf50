/**
 * The CLI's lists page (--page, --per-page, --all; a hint when more pages exist; tasks list
 * --workflow takes a slug) and its errors say what went wrong where: the URL it could not reach,
 * the line and column of a JSON syntax error, the slug of an unknown workflow. Child processes
 * (bin/gantry.mjs) against a real node, authenticated by a paired device's dk-.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { pairDevice, registerUser } from '../helpers/identity.js';
import { comfyBody } from '../workflows-api/fixtures.js';

const root = new URL('../..', import.meta.url).pathname;
let t: TestNode;
let work: string;
let env: Record<string, string>;

function gantry(args: string[], extra: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [join(root, 'bin/gantry.mjs'), ...args], { cwd: work, env: { ...env, ...extra }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const guard = setTimeout(() => child.kill('SIGKILL'), 60_000);
  return new Promise((resolve) =>
    child.on('exit', (code) => {
      clearTimeout(guard);
      resolve({ code, stdout, stderr });
    }),
  );
}

before(async () => {
  t = await startTestNode({}, 'clients_cli_lists');
  const user = await registerUser(t.http);
  const dev = await pairDevice(t.http, user);
  work = mkdtempSync(join(tmpdir(), 'gantry-cli-lists-'));
  env = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('GANTRY_')) env[k] = v;
  Object.assign(env, { GANTRY_CONFIG_DIR: join(work, 'config'), GANTRY_SERVER: t.origin, GANTRY_TOKEN: dev.deviceCredential, GANTRY_TEAM_ID: dev.teamId, NO_COLOR: '1' });
  for (const slug of ['list-a', 'list-b', 'list-c']) {
    const r = await t.http.post('/workflows', comfyBody({ workflow_slug: slug }), { token: user.accessToken, team: user.teamId });
    assert.equal(r.status, 200, JSON.stringify(r.body));
  }
});
after(async () => {
  await t.stop();
  rmSync(work, { recursive: true, force: true });
});

test('workflows list pages: --per-page shows one page and says where the next is, --page N, --all', { timeout: 120_000 }, async () => {
  const first = await gantry(['workflows', 'list', '--per-page', '2']);
  assert.equal(first.code, 0, first.stderr);
  assert.equal((first.stdout.match(/^list-[abc] /gm) ?? []).length, 2, first.stdout);
  assert.match(first.stdout, /page 1 of 2 \(3 in all\): --page 2 for the next, --all for every one/);
  const second = await gantry(['workflows', 'list', '--per-page', '2', '--page', '2', '--json']);
  assert.equal(second.code, 0, second.stderr);
  const p2 = JSON.parse(second.stdout) as { workflow_list: unknown[]; page_meta: { current_page: number; total_count: number } };
  assert.equal(p2.workflow_list.length, 1);
  assert.deepEqual([p2.page_meta.current_page, p2.page_meta.total_count], [2, 3]);
  const all = await gantry(['workflows', 'list', '--per-page', '1', '--all', '--json']);
  assert.equal(all.code, 0, all.stderr);
  const every = JSON.parse(all.stdout) as { workflow_list: Array<{ workflow_slug: string }> };
  assert.deepEqual(every.workflow_list.map((w) => w.workflow_slug).sort(), ['list-a', 'list-b', 'list-c']);
  for (const cmd of [['teams'], ['agents', 'list'], ['containers', 'list'], ['tasks', 'list']]) {
    const r = await gantry([...cmd, '--all', '--json']);
    assert.equal(r.code, 0, `${cmd.join(' ')}: ${r.stderr}`);
    const bad = await gantry([...cmd, '--page', '0']);
    assert.equal(bad.code, 2, `${cmd.join(' ')} --page 0: ${bad.stderr}`);
  }
});

test('tasks list --workflow takes a slug; an unknown one is named', async () => {
  const r = await gantry(['tasks', 'list', '--workflow', 'list-a', '--json']);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual((JSON.parse(r.stdout) as { task_list: unknown[] }).task_list, []);
  const unknown = await gantry(['tasks', 'list', '--workflow', 'no-such-flow']);
  assert.equal(unknown.code, 3);
  assert.match(unknown.stderr, /no workflow "no-such-flow"/);
});

test('run of an unknown workflow names the slug', async () => {
  const r = await gantry(['run', 'no-such-flow', '-p', 'prompt=x']);
  assert.equal(r.code, 3);
  assert.match(r.stderr, /no workflow "no-such-flow" in this team on http:\/\/127\.0\.0\.1:\d+/);
});

test('a JSON syntax error names the file, line and column', async () => {
  const f = join(work, 'broken.json');
  writeFileSync(f, '{\n  "workflow_slug": "x",\n  "display_name": "y"\n  "parameters": []\n}\n');
  const r = await gantry(['workflows', 'push', f]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /broken\.json: invalid JSON at line 4, column 3/);
});

test('an unreachable server is named by its URL', async () => {
  const port = await new Promise<number>((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
  const r = await gantry(['workflows', 'list', '--server', `http://127.0.0.1:${port}`]);
  assert.equal(r.code, 3);
  assert.match(r.stderr, new RegExp(`cannot reach http://127\\.0\\.0\\.1:${port} `));
});
