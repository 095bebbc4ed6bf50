/** `gantry` CLI: help and version on every command, doing nothing else; usage errors exit 2. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('../..', import.meta.url).pathname;
const pkgVersion = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version;

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `node bin/gantry.mjs ...args` on an embedded database in a data dir that does not exist yet
 * (so "nothing was touched" is "the data dir was never created"). A child still running after 30 s
 * (a node that started instead of printing help) is killed and reported with code null.
 */
function gantry(args: string[], dataDir: string, extraEnv: Record<string, string> = {}): Promise<Ran> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('GANTRY_') && k !== 'DATABASE_URL' && k !== 'REDIS_URL') env[k] = v;
  Object.assign(env, { GANTRY_DATA_DIR: dataDir, GANTRY_HTTP_PORT: '0', GANTRY_GRPC_PORT: '0', GANTRY_HTTP_HOST: '127.0.0.1', GANTRY_GRPC_HOST: '127.0.0.1', LOG_LEVEL: 'info', ...extraEnv });
  const child = spawn(process.execPath, ['bin/gantry.mjs', ...args], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const guard = setTimeout(() => child.kill('SIGKILL'), 30_000);
  return new Promise((resolve) =>
    child.on('exit', (code) => {
      clearTimeout(guard);
      resolve({ code, stdout, stderr });
    }),
  );
}

function scratch(): { base: string; dataDir: string } {
  const base = mkdtempSync(join(tmpdir(), 'gantry-cli-'));
  return { base, dataDir: join(base, 'data') };
}

for (const args of [['serve', '--help'], ['serve', '-h'], ['migrate', '--help'], ['migrate', '-h'], ['help', 'serve'], ['help', 'migrate']]) {
  test(`gantry ${args.join(' ')} prints the command's usage, exits 0 and touches nothing`, { timeout: 60_000 }, async () => {
    const { base, dataDir } = scratch();
    try {
      const r = await gantry(args, dataDir);
      assert.equal(r.code, 0, r.stderr);
      const cmd = args[0] === 'help' ? args[1] : args[0];
      assert.match(r.stdout, new RegExp(`^gantry ${cmd} `));
      assert.match(r.stdout, /--help/);
      assert.equal(r.stderr, '');
      // no node started, no migration ran: the embedded database's data dir was never created
      assert.equal(existsSync(dataDir), false, 'data dir created');
      assert.doesNotMatch(r.stdout, /"msg":/, "a log line was written");
    } finally {
      rmSync(base, { recursive: true, force: true });
    }
  });
}

for (const args of [['--version'], ['-V'], ['version'], ['serve', '--version'], ['migrate', '-V'], ['agent', '--version']]) {
  test(`gantry ${args.join(' ')} prints the package version and exits 0`, { timeout: 60_000 }, async () => {
    const { base, dataDir } = scratch();
    try {
      const r = await gantry(args, dataDir);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, `gantry ${pkgVersion}\n`);
      assert.equal(existsSync(dataDir), false, 'data dir created');
    } finally {
      rmSync(base, { recursive: true, force: true });
    }
  });
}

test('gantry --help and gantry agent --help print usage and exit 0', { timeout: 60_000 }, async () => {
  const { base, dataDir } = scratch();
  try {
    const top = await gantry(['--help'], dataDir);
    assert.equal(top.code, 0);
    assert.match(top.stdout, /^gantry <command>/);
    for (const c of ['serve', 'migrate', 'agent', 'version']) assert.match(top.stdout, new RegExp(`\\n  ${c} `));
    const agent = await gantry(['agent', '--help'], dataDir);
    assert.equal(agent.code, 0, agent.stderr);
    assert.match(agent.stdout, /^gantry agent /);
    assert.equal(existsSync(dataDir), false);
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});

test('an unknown option, argument or command is a usage error (exit 2) and starts nothing', { timeout: 60_000 }, async () => {
  const { base, dataDir } = scratch();
  try {
    const opt = await gantry(['serve', '--bogus'], dataDir);
    assert.equal(opt.code, 2);
    assert.match(opt.stderr, /^gantry serve: unknown option "--bogus"\n/);
    const arg = await gantry(['migrate', 'now'], dataDir);
    assert.equal(arg.code, 2);
    assert.match(arg.stderr, /^gantry migrate: unknown argument "now"\n/);
    const cmd = await gantry(['sevre'], dataDir);
    assert.equal(cmd.code, 2);
    assert.match(cmd.stderr, /^gantry: unknown command "sevre"\n/);
    const none = await gantry([], dataDir);
    assert.equal(none.code, 2);
    assert.match(none.stderr, /^gantry <command>/);
    assert.equal(existsSync(dataDir), false);
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});
