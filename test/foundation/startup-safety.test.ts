/**
 * Start-up refusals happen before anything is touched, as one line on stderr and exit 78:
 * a half-set or unusable gRPC TLS pair, a busy gRPC/HTTP port, a DATABASE_URL naming a database
 * that does not exist (unless GANTRY_DB_CREATE / --create-db), and a data dir another node holds.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:net';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { adminUrl, createTestDatabase } from '../helpers/pg.js';
import { loadConfig, ConfigError, type RawConfig } from '../../src/shared/config.js';
import { createLogger } from '../../src/shared/logger.js';
import { startNode } from '../../src/main.js';

const root = new URL('../..', import.meta.url).pathname;

function childEnv(dataDir: string, extraEnv: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('GANTRY_') && k !== 'DATABASE_URL' && k !== 'REDIS_URL') env[k] = v;
  return Object.assign(env, { GANTRY_DATA_DIR: dataDir, GANTRY_HTTP_PORT: '0', GANTRY_GRPC_PORT: '0', GANTRY_HTTP_HOST: '127.0.0.1', GANTRY_GRPC_HOST: '127.0.0.1', LOG_LEVEL: 'info', ...extraEnv });
}

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `node bin/gantry.mjs ...args` to its exit (a child still running after 60 s is killed: code null). */
function gantry(args: string[], dataDir: string, extraEnv: Record<string, string> = {}): Promise<Ran> {
  const child = spawn(process.execPath, ['bin/gantry.mjs', ...args], { cwd: root, env: childEnv(dataDir, extraEnv), stdio: ['ignore', 'pipe', 'pipe'] });
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

interface Serving {
  child: ChildProcess;
  port: number;
  exit: Promise<number | null>;
}

/** `gantry serve` until its "listening" line. */
function serve(dataDir: string, extraEnv: Record<string, string> = {}): Promise<Serving> {
  const child = spawn(process.execPath, ['bin/gantry.mjs', 'serve'], { cwd: root, env: childEnv(dataDir, extraEnv), stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (d) => (stderr += d));
  const exit = new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (l) => {
      let j: { msg?: string; http_port?: number };
      try {
        j = JSON.parse(l) as typeof j;
      } catch {
        return;
      }
      if (j.msg === 'listening') resolve({ child, port: j.http_port!, exit });
    });
    void exit.then((c) => reject(new Error(`node exited early (${c}); stderr: ${stderr}`)));
  });
}

/** One refusal: exit 78, exactly one line on stderr (no stack trace), matching `re`. */
function assertRefused(r: Ran, re: RegExp): void {
  assert.equal(r.code, 78, `exit ${r.code}; stderr: ${r.stderr}`);
  const lines = r.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, `expected one line, got: ${r.stderr}`);
  assert.match(lines[0]!, /^gantry: /);
  assert.match(lines[0]!, re);
  assert.doesNotMatch(r.stderr, /\n\s+at /);
}

function scratch(): { base: string; dataDir: string } {
  const base = mkdtempSync(join(tmpdir(), 'gantry-safety-'));
  return { base, dataDir: join(base, 'data') };
}

function listenOn(host: string): Promise<{ server: Server; port: number }> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, host, () => resolve({ server, port: (server.address() as { port: number }).port }));
  });
}

async function databaseExists(name: string): Promise<boolean> {
  const c = new pg.Client({ connectionString: adminUrl() });
  await c.connect();
  try {
    return (await c.query('select 1 from pg_database where datname = $1', [name])).rowCount === 1;
  } finally {
    await c.end();
  }
}

async function dropDatabase(name: string): Promise<void> {
  const c = new pg.Client({ connectionString: adminUrl() });
  await c.connect();
  try {
    await c.query(`drop database if exists "${name}" with (force)`);
  } finally {
    await c.end();
  }
}

function missingDbUrl(): { url: string; name: string } {
  const name = `gantry_missing_${process.pid}_${randomBytes(4).toString('hex')}`;
  const u = new URL(adminUrl());
  u.pathname = `/${name}`;
  return { url: u.toString(), name };
}

test('a half-set, missing or unusable gRPC TLS pair is refused in configuration before anything is touched', { timeout: 120_000 }, async () => {
  const { base, dataDir } = scratch();
  try {
    const certDir = join(base, 'tls');
    mkdirSync(certDir);
    const gen = (name: string): { cert: string; key: string } => {
      const cert = join(certDir, `${name}.crt`);
      const key = join(certDir, `${name}.key`);
      execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=localhost'], { stdio: 'pipe' });
      return { cert, key };
    };
    const a = gen('a');
    const b = gen('b');
    const garbage = join(certDir, 'garbage.pem');
    writeFileSync(garbage, 'not a certificate\n');

    assertRefused(await gantry(['serve'], dataDir, { GANTRY_GRPC_TLS_CERT: a.cert }), /GANTRY_GRPC_TLS_CERT is set but GANTRY_GRPC_TLS_KEY is not/);
    assertRefused(await gantry(['serve'], dataDir, { GANTRY_GRPC_TLS_KEY: a.key }), /GANTRY_GRPC_TLS_KEY is set but GANTRY_GRPC_TLS_CERT is not/);
    assertRefused(await gantry(['serve'], dataDir, { GANTRY_GRPC_TLS_CERT: join(certDir, 'nope.crt'), GANTRY_GRPC_TLS_KEY: a.key }), /GANTRY_GRPC_TLS_CERT=".*nope\.crt": cannot read the file \(ENOENT\)/);
    assertRefused(await gantry(['serve'], dataDir, { GANTRY_GRPC_TLS_CERT: a.cert, GANTRY_GRPC_TLS_KEY: join(certDir, 'nope.key') }), /GANTRY_GRPC_TLS_KEY=".*nope\.key": cannot read the file/);
    assertRefused(await gantry(['serve'], dataDir, { GANTRY_GRPC_TLS_CERT: garbage, GANTRY_GRPC_TLS_KEY: a.key }), /not a usable PEM certificate and matching key/);
    assertRefused(await gantry(['serve'], dataDir, { GANTRY_GRPC_TLS_CERT: a.cert, GANTRY_GRPC_TLS_KEY: b.key }), /not a usable PEM certificate and matching key/);
    // migrate reads the same configuration
    assertRefused(await gantry(['migrate'], dataDir, { GANTRY_GRPC_TLS_CERT: a.cert }), /GANTRY_GRPC_TLS_CERT is set but GANTRY_GRPC_TLS_KEY is not/);
    // no migration ran and no JWT key was generated: the embedded data dir was never created
    assert.equal(existsSync(dataDir), false);
    // the same check in-process (loadConfig is what every caller goes through)
    assert.throws(() => loadConfig({}, { GANTRY_GRPC_TLS_KEY: a.key }), ConfigError);
    assert.equal(loadConfig({}, { GANTRY_GRPC_TLS_CERT: a.cert, GANTRY_GRPC_TLS_KEY: a.key }).GANTRY_GRPC_TLS_CERT, a.cert);
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});

test('a busy gRPC or HTTP port is refused before the database is opened', { timeout: 120_000 }, async () => {
  const { base, dataDir } = scratch();
  const busy = await listenOn('127.0.0.1');
  try {
    assertRefused(await gantry(['serve'], dataDir, { GANTRY_GRPC_PORT: String(busy.port) }), new RegExp(`GANTRY_GRPC_PORT=${busy.port}: 127\\.0\\.0\\.1:${busy.port} already in use`));
    assertRefused(await gantry(['serve'], dataDir, { GANTRY_HTTP_PORT: String(busy.port) }), new RegExp(`GANTRY_HTTP_PORT=${busy.port}: 127\\.0\\.0\\.1:${busy.port} already in use`));
    assert.equal(existsSync(dataDir), false, 'data dir (embedded database, JWT key) created');
  } finally {
    busy.server.close();
    rmSync(base, { recursive: true, force: true });
  }
});

async function inProcessConfig(overrides: Partial<RawConfig>) {
  return loadConfig({}, { GANTRY_HTTP_HOST: '127.0.0.1', GANTRY_HTTP_PORT: 0, GANTRY_GRPC_HOST: '127.0.0.1', GANTRY_GRPC_PORT: 0, GANTRY_DB_POOL_MAX: 3, ...overrides });
}

test("a second node on a running node's gRPC port is refused and its database stays untouched", { timeout: 120_000 }, async () => {
  const logger = createLogger('silent');
  const dbA = await createTestDatabase('safety_grpc_a');
  const dbB = await createTestDatabase('safety_grpc_b');
  const dirA = mkdtempSync(join(tmpdir(), 'gantry-safety-a-'));
  const dirB = mkdtempSync(join(tmpdir(), 'gantry-safety-b-'));
  const a = await startNode(await inProcessConfig({ DATABASE_URL: dbA.url, GANTRY_DATA_DIR: dirA }), { logger });
  try {
    await assert.rejects(
      startNode(await inProcessConfig({ DATABASE_URL: dbB.url, GANTRY_DATA_DIR: dirB, GANTRY_GRPC_PORT: a.grpcPort }), { logger }),
      (e: unknown) => e instanceof ConfigError && e.message.includes(`GANTRY_GRPC_PORT=${a.grpcPort}`) && e.message.includes('already in use'),
    );
    const c = new pg.Client({ connectionString: dbB.url });
    await c.connect();
    try {
      const tables = await c.query(`select table_name from information_schema.tables where table_schema = 'public'`);
      assert.deepEqual(tables.rows, [], 'migrations ran on the refused node');
    } finally {
      await c.end();
    }
    assert.deepEqual(readdirSync(dirB), [], 'the refused node wrote into its data dir');
  } finally {
    await a.close();
    await dbA.drop();
    await dbB.drop();
    rmSync(dirA, { recursive: true, force: true });
    rmSync(dirB, { recursive: true, force: true });
  }
});

test('a DATABASE_URL naming a missing database is refused; GANTRY_DB_CREATE / --create-db creates it', { timeout: 180_000 }, async () => {
  const { base, dataDir } = scratch();
  const missing = missingDbUrl();
  try {
    for (const cmd of ['serve', 'migrate']) {
      const r = await gantry([cmd], dataDir, { DATABASE_URL: missing.url });
      assertRefused(r, new RegExp(`DATABASE_URL names database "${missing.name}", which does not exist;.*GANTRY_DB_CREATE=true`));
      assert.equal(await databaseExists(missing.name), false, `${cmd} created the database`);
    }

    const m = await gantry(['migrate', '--create-db'], dataDir, { DATABASE_URL: missing.url });
    assert.equal(m.code, 0, m.stderr);
    assert.equal(await databaseExists(missing.name), true);
    assert.match(m.stdout, /database created/);
    await dropDatabase(missing.name);

    const s = await serve(dataDir, { DATABASE_URL: missing.url, GANTRY_DB_CREATE: 'true' });
    assert.equal(await databaseExists(missing.name), true);
    const info = await fetch(`http://127.0.0.1:${s.port}/api/v1/server-info`);
    assert.equal(info.status, 200);
    s.child.kill('SIGTERM');
    assert.equal(await s.exit, 0);
  } finally {
    await dropDatabase(missing.name);
    rmSync(base, { recursive: true, force: true });
  }
});

test('a second node on the same data dir is refused naming the holder; the lock goes with the node and a stale one is taken over', { timeout: 180_000 }, async () => {
  const { base, dataDir } = scratch();
  try {
    const a = await serve(dataDir);
    const lockFile = join(dataDir, 'gantry.lock');
    assert.equal(readFileSync(lockFile, 'utf8').split('\n')[0], String(a.child.pid));

    // embedded database: serve and migrate are both refused while the node runs
    assertRefused(await gantry(['serve'], dataDir), new RegExp(`GANTRY_DATA_DIR=".*" is in use by another gantry process \\(pid ${a.child.pid}\\b`));
    assertRefused(await gantry(['migrate'], dataDir), new RegExp(`in use by another gantry process \\(pid ${a.child.pid}\\b`));
    // the first node is unharmed
    assert.equal((await fetch(`http://127.0.0.1:${a.port}/api/v1/server-info`)).status, 200);
    a.child.kill('SIGTERM');
    assert.equal(await a.exit, 0);
    assert.equal(existsSync(lockFile), false, 'lock left behind by a clean stop');

    // a lock whose pid is gone (a crashed node) is stale: taken over
    const dead = spawn(process.execPath, ['-e', '0']);
    const deadPid = dead.pid!;
    await new Promise((r) => dead.on('exit', r));
    writeFileSync(lockFile, `${deadPid}\nelsewhere\n2020-01-01T00:00:00.000Z\n`);
    const b = await serve(dataDir);
    assert.equal(readFileSync(lockFile, 'utf8').split('\n')[0], String(b.child.pid));
    b.child.kill('SIGINT');
    assert.equal(await b.exit, 0);
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});

test('the data dir lock also holds with DATABASE_URL (local object store) and is released by close()', { timeout: 120_000 }, async () => {
  const logger = createLogger('silent');
  const dbA = await createTestDatabase('safety_lock_a');
  const dbB = await createTestDatabase('safety_lock_b');
  const dir = mkdtempSync(join(tmpdir(), 'gantry-safety-lock-'));
  try {
    const a = await startNode(await inProcessConfig({ DATABASE_URL: dbA.url, GANTRY_DATA_DIR: dir }), { logger });
    let closed = false;
    try {
      await assert.rejects(
        startNode(await inProcessConfig({ DATABASE_URL: dbB.url, GANTRY_DATA_DIR: dir }), { logger }),
        (e: unknown) => e instanceof ConfigError && e.message.includes(`(pid ${process.pid}`),
      );
      await a.close();
      closed = true;
      const b = await startNode(await inProcessConfig({ DATABASE_URL: dbB.url, GANTRY_DATA_DIR: dir }), { logger });
      await b.close();
    } finally {
      if (!closed) await a.close();
    }
  } finally {
    await dbA.drop();
    await dbB.drop();
    rmSync(dir, { recursive: true, force: true });
  }
});
