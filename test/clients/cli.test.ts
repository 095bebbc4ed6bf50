/**
 * The `gantry` client commands as child processes (bin/gantry.mjs) against a real node and a real
 * simulate agent: login by device pairing (the test confirms the printed code with a JWT), whoami,
 * push a workflow from a file (create, then a new version), run --follow to completion (progress
 * lines printed, the output file downloaded), tasks tail of a finished task, --json output parses,
 * exit codes for a missing login and an API error, logout revokes the dk-.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestNode, type TestNode } from '../helpers/node.js';
import { createCredential, registerUser, type TestUser } from '../helpers/identity.js';
import { spawnAgent, tinyGraph, tmpDir, waitFor, type AgentProcess } from '../agents/helpers.js';

const root = new URL('../..', import.meta.url).pathname;
const PNG_SIG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

let t: TestNode;
let user: TestUser;
let agent: AgentProcess | null = null;
let work: string;
let configDir: string;

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `gantry ...args`; onStdout sees the output as it arrives (the pairing code). */
function gantry(args: string[], o: { onStdout?: (all: string) => void; env?: Record<string, string> } = {}): Promise<Ran> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('GANTRY_')) env[k] = v;
  Object.assign(env, { GANTRY_CONFIG_DIR: configDir, GANTRY_SERVER: t.origin, NO_COLOR: '1', ...o.env });
  const child = spawn(process.execPath, [join(root, 'bin/gantry.mjs'), ...args], { cwd: work, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => {
    stdout += d;
    o.onStdout?.(stdout);
  });
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
  t = await startTestNode({}, 'clients_cli');
  user = await registerUser(t.http);
  work = mkdtempSync(join(tmpdir(), 'gantry-cli-work-'));
  configDir = join(work, 'config');
  const ak = await createCredential(t.http, user, 'agent');
  agent = spawnAgent(['--server', `127.0.0.1:${t.node.grpcPort}`, '--credential', ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-cli-agent-'), '--simulate-duration-ms', '400', '--simulate-steps', '4']);
});
after(async () => {
  agent?.kill('SIGKILL');
  await agent?.exited;
  await t.stop();
  rmSync(work, { recursive: true, force: true });
});

test('gantry CLI: login by pairing, push, run --follow, tasks tail, --json, logout', { timeout: 120_000 }, async () => {
  // not logged in: exit 4
  const anon = await gantry(['whoami']);
  assert.equal(anon.code, 4, anon.stderr);
  assert.match(anon.stderr, /not logged in/);

  // login: the CLI prints the code; the test confirms it as the signed-in user
  let confirmed: Promise<unknown> | null = null;
  const login = await gantry(['login', '--name', 'cli test'], {
    onStdout: (all) => {
      const m = /Your code: (\S+)/.exec(all);
      if (m && !confirmed) confirmed = t.http.post('/desktop/pair/confirm', { user_code: m[1] }, { token: user.accessToken, team: user.teamId });
    },
  });
  assert.equal(login.code, 0, login.stderr + login.stdout);
  assert.ok(confirmed, 'the code was printed');
  assert.equal(((await confirmed) as { status: number }).status, 200);
  assert.match(login.stdout, /Logged in as /);
  // the printed URL is the node's pairing page (sign in, confirm the code): it is served, its script
  // (admitted by its CSP hash) confirms through POST /desktop/pair/confirm
  const pageUrl = /Open (\S+) and sign in/.exec(login.stdout)?.[1];
  assert.ok(pageUrl?.startsWith(`${t.origin}/pair?code=`), login.stdout);
  const page = await fetch(pageUrl!);
  assert.equal(page.status, 200);
  const html = await page.text();
  const script = /<script>([\s\S]*?)<\/script>/.exec(html)?.[1] ?? '';
  assert.match(script, /"\/desktop\/pair\/confirm"/);
  assert.ok((page.headers.get('content-security-policy') ?? '').includes(`'sha256-${createHash('sha256').update(script, 'utf8').digest('base64')}'`));
  const cfgFile = join(configDir, 'credentials.json');
  assert.equal(statSync(cfgFile).mode & 0o777, 0o600, 'credentials.json is 0600');
  const stored = JSON.parse(readFileSync(cfgFile, 'utf8')) as { credential: string; team_id: string };
  assert.match(stored.credential, /^dk-/);
  assert.equal(stored.team_id, user.teamId);
  // the CLI runs no agent: its pairing minted no ak- (nothing the user would find unexplained in the credentials list)
  const creds = await t.http.get('/credentials', { token: user.accessToken, team: user.teamId });
  const listed = creds.body.credential_list as Array<{ credential_type: string; display_name: string }>;
  const device = listed.filter((x) => x.credential_type === 'device');
  assert.equal(device.length, 1, creds.text);
  assert.deepEqual(listed.filter((x) => x.display_name === device[0]?.display_name).map((x) => x.credential_type), ['device'], creds.text);

  const who = await gantry(['whoami', '--json']);
  assert.equal(who.code, 0, who.stderr);
  assert.equal((JSON.parse(who.stdout) as { email_address: string }).email_address, user.email);

  const teams = await gantry(['teams', '--json']);
  assert.equal(teams.code, 0, teams.stderr);
  assert.ok((JSON.parse(teams.stdout) as { team_list: Array<{ id: string }> }).team_list.some((x) => x.id === user.teamId));

  // push a workflow from a file: created, then a new version
  const slug = `cli-${Math.random().toString(36).slice(2, 8)}`;
  const file = join(work, 'wf.json');
  writeFileSync(file, JSON.stringify({ workflow_slug: slug, display_name: 'CLI test', workflow_json: tinyGraph(), parameters: [{ key: 'prompt', node_id: '6', field: 'text' }] }));
  const push1 = await gantry(['workflows', 'push', file, '--json']);
  assert.equal(push1.code, 0, push1.stderr);
  assert.deepEqual({ ...(JSON.parse(push1.stdout) as object), id: undefined }, { action: 'created', id: undefined, workflow_slug: slug, version: 1 });
  const push2 = await gantry(['workflows', 'push', file, '--note', 'second']);
  assert.equal(push2.code, 0, push2.stderr);
  assert.match(push2.stdout, new RegExp(`updated ${slug} to v2`));

  const list = await gantry(['workflows', 'list', '--json']);
  assert.equal(list.code, 0, list.stderr);
  assert.ok((JSON.parse(list.stdout) as { workflow_list: Array<{ workflow_slug: string }> }).workflow_list.some((w) => w.workflow_slug === slug));
  const pull = await gantry(['workflows', 'pull', `${slug}@1`, '-o', 'pulled.json']);
  assert.equal(pull.code, 0, pull.stderr);
  assert.equal((JSON.parse(readFileSync(join(work, 'pulled.json'), 'utf8')) as { workflow_slug: string }).workflow_slug, slug);

  await waitFor('an online agent', async () => {
    const r = await gantry(['agents', 'list', '--json']);
    return r.code === 0 && (JSON.parse(r.stdout) as { agent_list: Array<{ agent_status: string }> }).agent_list.some((a) => a.agent_status !== 'offline');
  }, 30_000, 300);

  // run --follow: progress lines (not a TTY), then the output downloaded
  const outDir = join(work, 'out');
  const run = await gantry(['run', `${slug}@2`, '-p', 'prompt=a red fox', '--follow', '-o', outDir]);
  assert.equal(run.code, 0, run.stderr + run.stdout);
  const taskId = /^task (\S+)$/m.exec(run.stdout)?.[1];
  assert.ok(taskId, run.stdout);
  assert.match(run.stdout, /^progress +\d+% +step \d+\/4/m);
  assert.match(run.stdout, /^status +completed$/m);
  const saved = /^saved (.+)$/m.exec(run.stdout)?.[1];
  assert.ok(saved && existsSync(saved), run.stdout);
  assert.deepEqual(readdirSync(outDir).length, 1);
  assert.ok(readFileSync(saved).subarray(0, 8).equals(PNG_SIG), 'the downloaded output is a PNG');

  // tail of a finished task: the terminal event, exit 0
  const tail = await gantry(['tasks', 'tail', taskId]);
  assert.equal(tail.code, 0, tail.stderr);
  assert.match(tail.stdout, /status +completed/);
  const tailJson = await gantry(['tasks', 'tail', taskId, '--json']);
  const events = tailJson.stdout.trim().split('\n').map((l) => JSON.parse(l) as { event: string; id: string });
  assert.equal(events.at(-1)!.event, 'completed');

  const get = await gantry(['tasks', 'get', taskId, '--json']);
  assert.equal((JSON.parse(get.stdout) as { task_status: string }).task_status, 'completed');
  const tasks = await gantry(['tasks', 'list', '--json']);
  assert.ok((JSON.parse(tasks.stdout) as { task_list: Array<{ task_id: string }> }).task_list.some((x) => x.task_id === taskId));

  // run without --follow prints the task id; --json parses
  const quick = await gantry(['run', slug, '-p', 'prompt=x', '--json']);
  assert.equal(quick.code, 0, quick.stderr);
  assert.match((JSON.parse(quick.stdout) as { task_id: string }).task_id, /^[0-9a-f-]{36}$/);

  // an API error: exit 3 with the error code on stderr
  const bad = await gantry(['run', slug, '-p', 'nope=1']);
  assert.equal(bad.code, 3, bad.stderr);
  assert.match(bad.stderr, /^gantry: 400 \w+: /);
  const missing = await gantry(['workflows', 'get', 'no-such-workflow']);
  assert.equal(missing.code, 3);
  assert.match(missing.stderr, /404 workflow_not_found/);

  const containers = await gantry(['containers', 'list', '--json']);
  assert.equal(containers.code, 0, containers.stderr);
  assert.deepEqual((JSON.parse(containers.stdout) as { container_list: unknown[] }).container_list, []);

  // logout revokes the dk- on the server and removes it locally
  const logout = await gantry(['logout']);
  assert.equal(logout.code, 0, logout.stderr);
  assert.equal(existsSync(cfgFile), false);
  const revoked = await t.http.get('/users/me', { token: stored.credential });
  assert.equal(revoked.status, 401);
});
