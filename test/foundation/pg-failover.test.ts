/**
 * PostgreSQL primary failover under load (issue 33, point 1). The test starts its own primary and
 * a synchronous standby (Debian's PostgreSQL 15 binaries: initdb, pg_basebackup -R, pg_ctl; own
 * data directories and ports in a temp dir, trust auth on 127.0.0.1). Two cluster nodes (child
 * processes, Redis at REDIS_URL) connect through one libpq-style multi-host DATABASE_URL
 * (standby,primary; target_session_attrs=read-write: the host rotation of
 * src/persistence/pg-hosts.ts). While runs are submitted continuously on both nodes and a simulate
 * agent moves the tasks through their transitions, the primary is switched over (see SWITCHES).
 * Then: every run acknowledged with 202 on either node exists on the promoted server and reaches a
 * terminal state, no task has two terminal events, each node's clients got only 202 or 503 with
 * Retry-After, and each node accepts a run again within 30 s of the switch. `gantry backup` and
 * `gantry restore` are run with multi-host URLs around the planned switch.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { TestNode } from '../helpers/node.js';
import { freePort, runGantryCli } from '../helpers/child-node.js';
import { clusterSkipReason, startCluster, type TestCluster } from '../helpers/cluster.js';
import { HostRotation, needsRotation, parseMultiHostUrl } from '../../src/persistence/pg-hosts.js';
import { setupTeam, createWorkflow, spawnAgent, tinyGraph, tmpDir, waitFor, type AgentProcess } from '../agents/helpers.js';

const BIN = '/usr/lib/postgresql/15/bin';
const missing = ['initdb', 'pg_ctl', 'pg_basebackup', 'postgres', 'pg_dump', 'pg_restore'].filter((b) => !existsSync(join(BIN, b)));
const skip = missing.length ? `PostgreSQL 15 server binaries missing (${missing.join(', ')}): apt-get install postgresql-15` : (clusterSkipReason() ?? false);

/** initdb and postgres refuse to run as root: as root they run as the postgres user. */
const asRoot = process.getuid?.() === 0;
function pgRun(bin: string, args: string[]): string {
  const cmd = join(BIN, bin);
  return asRoot ? execFileSync('runuser', ['-u', 'postgres', '--', cmd, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }) : execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}
function pgOwner(): { uid: number; gid: number } | null {
  if (!asRoot) return null;
  const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
  return { uid, gid };
}

const TERMINAL = ['completed', 'failed', 'cancelled'];

test('parseMultiHostUrl: libpq-style host lists, target_session_attrs, the single-host URL handed to the driver', () => {
  const u = parseMultiHostUrl('postgres://u:p%40ss@a:5433,b,[::1]:6000/db?target_session_attrs=read-write&sslmode=disable');
  assert.deepEqual(u?.hosts, [
    { host: 'a', port: 5433 },
    { host: 'b', port: 5432 },
    { host: '::1', port: 6000 },
  ]);
  assert.equal(u?.targetSessionAttrs, 'read-write');
  assert.equal(u?.singleHostUrl, 'postgres://u:p%40ss@a:5433/db?sslmode=disable');
  assert.ok(u && needsRotation(u));
  const one = parseMultiHostUrl('postgresql://u@h:5432/db');
  assert.deepEqual(one?.hosts, [{ host: 'h', port: 5432 }]);
  assert.equal(one?.targetSessionAttrs, 'any');
  assert.ok(one && !needsRotation(one), 'a single host without session attributes keeps the plain driver path');
  assert.throws(() => parseMultiHostUrl('postgres://u@a,b/db?target_session_attrs=standby'), /not supported/);
  assert.equal(parseMultiHostUrl('postgres://u@a,,b/db'), null);
  assert.deepEqual(parseMultiHostUrl('postgres://u:p@ss@a:1,b:2/db')?.hosts, [
    { host: 'a', port: 1 },
    { host: 'b', port: 2 },
  ]);
});

test('HostRotation: a failed host moves new connections to the next one, wrapping around', () => {
  const u = parseMultiHostUrl('postgres://u@a:1,b:2/db')!;
  const r = new HostRotation(u);
  const a = r.host;
  assert.equal(a.host, 'a');
  r.failed(a);
  assert.equal(r.host.host, 'b');
  r.failed(a); // a late failure of the host already left does not skip b
  assert.equal(r.host.host, 'b');
  r.failed(r.host);
  assert.equal(r.host.host, 'a');
});

/**
 * Two switches: a planned one (the standby promoted, then the primary stopped fast: commits waiting
 * for the synchronous standby in between fail at the stop, unacknowledged) and a crash (the primary
 * killed with -m immediate, then the standby promoted: in between, the nodes find no read-write host).
 * Both run a cluster of two node processes (test/helpers/cluster.ts, Redis at REDIS_URL) on the same
 * multi-host DATABASE_URL, a client submitting on each node and one simulate agent on the second
 * node: each node must follow the promotion on its own. The planned switch also takes a
 * `gantry backup` with that URL before the switch (under load: it must pick the primary, not the
 * standby listed first) and restores it, with the multi-host URL too, into a new database on the
 * promoted server after it.
 */
const SWITCHES = [
  { name: 'promote, then stop the primary (fast)', crash: false, backup: true },
  { name: 'the primary crashes (immediate), then promote', crash: true, backup: false },
];
const NODES = 2;

interface Answer {
  status: number;
  retryAfter: string | null;
  sent: number;
  at: number;
  text: string;
}

/** `node bin/gantry.mjs <args>` with only the given configuration (the PostgreSQL 15 client tools first on the PATH). */
function gantry(args: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const base: NodeJS.ProcessEnv = { ...process.env, LOG_LEVEL: 'warn', PATH: `${BIN}:${process.env.PATH ?? ''}`, GANTRY_SECRET_KEY: randomBytes(32).toString('hex'), ...env };
  delete base.REDIS_URL;
  return runGantryCli(args, base);
}

for (const sw of SWITCHES)
test(`PostgreSQL failover under load (${NODES} nodes on one multi-host DATABASE_URL; ${sw.name}): no acknowledged run lost, no double terminal event, only 202/503 during the switch, service back on every node`, { skip, timeout: 150_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-pgfo-'));
  const owner = pgOwner();
  if (owner) chownSync(dir, owner.uid, owner.gid);
  const [p1, p2] = [await freePort(), await freePort()];
  const d1 = join(dir, 'primary');
  const d2 = join(dir, 'standby');
  const opts = (port: number): string => `-p ${port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=${dir} -c fsync=off -c max_connections=100`;
  const started: string[] = [];
  const t0 = Date.now();
  let cluster: TestCluster | null = null;
  let agent: AgentProcess | null = null;
  const scratch: string[] = [];
  // the load's clients: stopped (and awaited) before the nodes are, also when an assertion failed
  let stopLoad = false;
  let clients: Array<Promise<void>> = [];
  try {
    pgRun('initdb', ['-D', d1, '-U', 'postgres', '--auth=trust', '--locale=C', '--encoding=UTF8', '--no-sync']);
    pgRun('pg_ctl', ['-D', d1, '-l', join(dir, 'primary.log'), '-w', '-o', `${opts(p1)} -c wal_level=replica -c max_wal_senders=5`, 'start']);
    started.push(d1);
    const c = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${p1}/postgres` });
    await c.connect();
    await c.query('create database gantry');
    await c.end();
    pgRun('pg_basebackup', ['-h', '127.0.0.1', '-p', String(p1), '-U', 'postgres', '-D', d2, '-R', '-X', 'stream', '-c', 'fast', '--no-sync']);
    pgRun('pg_ctl', ['-D', d2, '-l', join(dir, 'standby.log'), '-w', '-o', opts(p2), 'start']);
    started.push(d2);
    const setupMs = Date.now() - t0;

    // the standby first: every node must skip it (in recovery) and write to the primary
    const multiUrl = (db: string): string => `postgres://postgres@127.0.0.1:${p2},127.0.0.1:${p1}/${db}?target_session_attrs=read-write`;
    cluster = await startCluster({
      nodes: NODES,
      databaseUrl: () => multiUrl('gantry'),
      env: { GANTRY_DB_POOL_MAX: '8', GANTRY_DB_ACQUIRE_TIMEOUT_MS: '2000', GANTRY_DB_STATEMENT_TIMEOUT_MS: '3000', GANTRY_HEARTBEAT_INTERVAL_S: '1' },
      readyTimeoutMs: 90_000,
    });
    const nodes = cluster.nodes;
    const nodeMs = Date.now() - t0 - setupMs;
    // the standby becomes synchronous once the schema is in (commits on the primary wait for it
    // from now on): every run acknowledged below is on the standby before its 202
    const check = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${p1}/postgres` });
    await check.connect();
    await check.query(`alter system set synchronous_standby_names = '*'`);
    await check.query('select pg_reload_conf()');
    await waitFor('the standby streams synchronously', async () => (await check.query(`select 1 from pg_stat_replication where sync_state = 'sync'`)).rowCount === 1, 30_000, 100);
    await check.end();
    const asNode = (i: number): TestNode => ({ http: nodes[i]!.http }) as unknown as TestNode;
    const s = await setupTeam(asNode(0));
    agent = spawnAgent(['--server', `127.0.0.1:${nodes[NODES - 1]!.grpcPort}`, '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-pgfo-agent-'), '--concurrency', '8', '--simulate-duration-ms', '300', '--simulate-steps', '3']);
    await agent.waitLine((l) => l.msg === 'connected to the server', 'the agent connected', 30_000);
    const wf = await createWorkflow(asNode(0), s, tinyGraph());

    // the load: one client per node submitting one run after another, recording every answer
    const acked: string[][] = nodes.map(() => []);
    const answers: Answer[][] = nodes.map(() => []);
    const allAcked = (): number => acked.reduce((n, a) => n + a.length, 0);
    const client = async (i: number): Promise<void> => {
      while (!stopLoad) {
        const sent = Date.now();
        const r = await nodes[i]!.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: `failover n${i}` } }, { token: s.sk.value });
        answers[i]!.push({ status: r.status, retryAfter: r.headers.get('retry-after'), sent, at: Date.now(), text: r.status === 202 ? '' : r.text });
        if (r.status === 202) acked[i]!.push(r.body.task_id as string);
        else await new Promise((res) => setTimeout(res, 100));
      }
    };
    clients = nodes.map((_, i) => client(i));
    await waitFor('10 runs acknowledged on each node before the switch', () => acked.every((a) => a.length >= 10), 30_000);

    // a backup with the nodes' multi-host URL, under load: it must dump the primary (p1), not the standby listed first
    let backupOf: { dir: string; acked: string[] } | null = null;
    if (sw.backup) {
      const out = join(mkdtempSync(join(tmpdir(), 'gantry-pgfo-backup-')), 'b');
      scratch.push(join(out, '..'));
      const ackedAtStart = acked.flat();
      const dataDir = tmpDir('gantry-pgfo-bdata-');
      scratch.push(dataDir);
      const b = await gantry(['backup', '--out', out], { DATABASE_URL: multiUrl('gantry'), GANTRY_DATA_DIR: dataDir });
      assert.equal(b.code, 0, b.stderr + b.stdout);
      assert.match(b.stdout, new RegExp(`database gantry on 127\\.0\\.0\\.1:${p1}: \\d+ bytes dumped`), 'the backup names the primary it dumped');
      backupOf = { dir: out, acked: ackedAtStart };
    }

    // the switch: promote the standby, stop the primary
    if (!sw.crash) pgRun('pg_ctl', ['-D', d2, '-w', 'promote']);
    pgRun('pg_ctl', ['-D', d1, '-m', sw.crash ? 'immediate' : 'fast', '-w', 'stop']);
    started.splice(started.indexOf(d1), 1);
    const stoppedAt = Date.now();
    if (sw.crash) {
      // the nodes meet the missing primary before the standby is promoted
      await waitFor('a 503 after the crash', () => answers.some((an) => an.some((a) => a.at > stoppedAt && a.status === 503)), 30_000);
      pgRun('pg_ctl', ['-D', d2, '-w', 'promote']);
    }
    const switchedAt = Date.now();
    const ackedBefore = allAcked();
    const ackedAtSwitch = acked.map((a) => a.length);
    // on each node, a run submitted after the switch is accepted (within 30 s)
    const back = await waitFor(
      'a run accepted on every node after the switch',
      () => {
        const firsts = answers.map((an) => an.find((a) => a.sent > switchedAt && a.status === 202));
        return firsts.every(Boolean) ? (firsts as Answer[]) : null;
      },
      30_000,
    );
    await waitFor('10 more runs acknowledged on each node after the switch', () => acked.every((a, i) => a.length >= ackedAtSwitch[i]! + 10), 30_000);
    stopLoad = true;
    await Promise.all(clients);

    // the promoted server has every acknowledged run, each terminal, each with one terminal event
    const promoted = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${p2}/gantry` });
    await promoted.connect();
    try {
      const all = acked.flat();
      const rows = await waitFor(
        'every acknowledged run terminal on the promoted server',
        async () => {
          const r = await promoted.query<{ id: string; task_status: string }>('select id::text, task_status from tasks where id = any($1::uuid[])', [all]);
          return r.rows.length === all.length && r.rows.every((x) => TERMINAL.includes(x.task_status)) ? r.rows : null;
        },
        60_000,
        250,
      );
      const statuses = rows.reduce<Record<string, number>>((m, x) => ((m[x.task_status] = (m[x.task_status] ?? 0) + 1), m), {});
      const doubles = await promoted.query<{ task_id: string; n: number }>(`select task_id::text, count(*)::int as n from task_events where event_type = any($1) group by task_id having count(*) > 1`, [TERMINAL]);
      const perNode = nodes.map((nd, i) => `${nd.name}: ${acked[i]!.length} acknowledged, ${answers[i]!.filter((a) => a.status === 503).length} answered 503, back ${back[i]!.at - stoppedAt} ms after the primary stopped (${back[i]!.at - switchedAt} ms after the switch ended)`);
      console.log(`pg failover (${sw.name}): ${all.length} runs acknowledged (${ackedBefore} before the switch); ${perNode.join('; ')}; terminal: ${JSON.stringify(statuses)}; servers up in ${setupMs} ms, ${NODES} nodes started in ${nodeMs} ms, whole run ${Date.now() - t0} ms`);
      assert.equal(rows.length, all.length, 'every acknowledged run is on the promoted server');
      assert.deepEqual(doubles.rows, [], 'no task has two terminal events');
      for (const [i, nd] of nodes.entries()) {
        const an = answers[i]!;
        assert.deepEqual(an.filter((a) => a.status !== 202 && a.status !== 503).map((a) => `${a.status} ${a.text}`), [], `${nd.name}: clients got only 202 or 503`);
        assert.equal(an.filter((a) => a.status === 503 && !a.retryAfter).length, 0, `${nd.name}: every 503 carries Retry-After`);
        assert.ok(acked[i]!.length > 0 && back[i], `${nd.name} acknowledged runs before and after the switch`);
      }

      // the backup taken before the switch restores (multi-host URL: the stopped old primary is skipped)
      if (backupOf) {
        await promoted.query('create database restored');
        const dataDir = tmpDir('gantry-pgfo-rdata-');
        scratch.push(dataDir);
        const r = await gantry(['restore', '--from', backupOf.dir], { DATABASE_URL: `postgres://postgres@127.0.0.1:${p1},127.0.0.1:${p2}/restored?target_session_attrs=read-write`, GANTRY_DATA_DIR: dataDir });
        assert.equal(r.code, 0, r.stderr + r.stdout);
        assert.match(r.stdout, new RegExp(`database restored on 127\\.0\\.0\\.1:${p2}: restored`));
        const rc = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${p2}/restored` });
        await rc.connect();
        try {
          const have = await rc.query<{ n: number }>('select count(*)::int as n from tasks where id = any($1::uuid[])', [backupOf.acked]);
          assert.equal(have.rows[0]?.n, backupOf.acked.length, 'every run acknowledged before the backup is in the restored database');
        } finally {
          await rc.end();
        }
      }
    } finally {
      await promoted.end();
    }
  } finally {
    stopLoad = true;
    await Promise.allSettled(clients);
    agent?.kill('SIGKILL');
    await agent?.exited;
    await cluster?.stop().catch(() => {});
    for (const d of started) {
      try {
        pgRun('pg_ctl', ['-D', d, '-m', 'immediate', '-w', 'stop']);
      } catch {
        /* already stopped */
      }
    }
    for (const d of scratch) rmSync(d, { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
  }
});
