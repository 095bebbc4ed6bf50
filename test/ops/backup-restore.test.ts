/**
 * Backup and restore drill (issue 33 §4), with the real CLI (`node bin/gantry.mjs backup|restore`),
 * pg_dump/pg_restore and child-process agents (`gantry agent --executor simulate`):
 * - a node with two agents runs a workflow under continuous submits; `gantry backup` runs while the
 *   submits go on;
 * - `gantry restore` puts the backup into a fresh database and a fresh data directory (local object
 *   store), and refuses to run again into that (now non-empty) database;
 * - a node started on the restored database answers, with the same credentials, every task
 *   acknowledged (202) before the backup started: its record, every event it had, and for the tasks
 *   completed by then their outputs, downloaded byte for byte from the restored node.
 * The embedded (PGlite) database is refused by both commands with the data-directory advice.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startTestNode, type TestNode } from '../helpers/node.js';
import pg from 'pg';
import { adminUrl, createTestDatabase } from '../helpers/pg.js';
import { freePort, runGantryCli } from '../helpers/child-node.js';
import { agentServer, createWorkflow, setupTeam, spawnAgent, tinyGraph, tmpDir, waitFor, type AgentProcess } from '../agents/helpers.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const SECRET = 'backup-drill-secret-0123456789abcdef0123456789';

/** `node bin/gantry.mjs <args>` with only the given configuration (no REDIS_URL: a single node). */
function gantry(args: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const base: NodeJS.ProcessEnv = { ...process.env, LOG_LEVEL: 'warn', GANTRY_SECRET_KEY: SECRET, ...env };
  delete base.REDIS_URL;
  if (!('DATABASE_URL' in env)) delete base.DATABASE_URL;
  return runGantryCli(args, base);
}

interface EventRow {
  id: string;
  event_type: string;
  payload: unknown;
}
const eventsOf = async (t: TestNode, ids: string[]): Promise<Map<string, EventRow[]>> => {
  const rows = await t.node.db.execute<EventRow & { task_id: string }>(`select id::text as id, task_id::text as task_id, event_type, payload from task_events where task_id = any(?::uuid[]) order by id`, [`{${ids.join(',')}}`]);
  const m = new Map<string, EventRow[]>();
  for (const r of rows) m.set(r.task_id, [...(m.get(r.task_id) ?? []), { id: r.id, event_type: r.event_type, payload: r.payload }]);
  return m;
};

/** Why the drill cannot run here: pg_dump/pg_restore missing, or older than the server (pg_dump refuses a newer server). */
async function pgToolsMissing(): Promise<string | false> {
  const v = spawnSync('pg_dump', ['--version'], { encoding: 'utf8' });
  const r = spawnSync('pg_restore', ['--version'], { encoding: 'utf8' });
  if (v.status !== 0 || r.status !== 0) return 'pg_dump/pg_restore not installed (Debian package postgresql-client)';
  const c = new pg.Client({ connectionString: adminUrl() });
  await c.connect();
  try {
    const server = Number((await c.query<{ v: string }>(`select current_setting('server_version_num') as v`)).rows[0]?.v) / 10000;
    const tools = Number(/(\d+)\./.exec(v.stdout)?.[1]);
    return tools >= Math.floor(server) ? false : `pg_dump ${tools} is older than the PostgreSQL server ${Math.floor(server)} (Debian package postgresql-client-${Math.floor(server)})`;
  } finally {
    await c.end();
  }
}

test('backup under load, restore into an empty database: every task acknowledged before the backup is there with its events and downloadable outputs', async (t) => {
  const skip = await pgToolsMissing();
  if (skip) return t.skip(skip);
  const a = await startTestNode({ GANTRY_SECRET_KEY: SECRET, GANTRY_AGENT_GRACE_S: 1, GANTRY_HEARTBEAT_INTERVAL_S: 1 }, 'backup-src');
  const agents: AgentProcess[] = [];
  const backupDir = join(mkdtempSync(join(tmpdir(), 'gantry-backup-')), 'b');
  const restoredDb = await createTestDatabase('restored');
  const restoredDir = mkdtempSync(join(tmpdir(), 'gantry-restored-'));
  let b: TestNode | null = null;
  let stopLoad = false;
  const load: Array<Promise<void>> = [];
  try {
    const s = await setupTeam(a);
    const wf = await createWorkflow(a, s, tinyGraph(), { required_labels: ['sim'] });
    for (let i = 0; i < 2; i++)
      agents.push(
        spawnAgent(['--server', agentServer(a.node, 'grpc'), '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-agent-state-'), '--gpu', 'NVIDIA RTX 4090:24', '--labels', 'sim', '--simulate-duration-ms', '100', '--simulate-steps', '2']),
      );
    await Promise.all(agents.map((p) => p.waitLine((l) => l.msg === 'connected to the server', 'connected')));

    // continuous submits (two clients): every 202 is recorded in the order it arrived
    const acked: string[] = [];
    const refused: string[] = [];
    for (let c = 0; c < 2; c++)
      load.push(
        (async () => {
          for (let i = 0; !stopLoad; i++) {
            const r = await a.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: `p${c}-${i}` } }, { token: s.sk.value });
            if (r.status === 202) acked.push(r.body.task_id as string);
            else refused.push(`${r.status} ${r.text}`);
          }
        })(),
      );
    const completed = async (): Promise<number> => (await a.node.db.execute<{ n: number }>(`select count(*)::int as n from tasks where task_status = 'completed'`))[0]?.n ?? 0;
    await waitFor('10 completed tasks', async () => (await completed()) >= 10, 60_000, 100);

    // the tasks acknowledged before the backup starts, as node A serves them (events committed now are in the dump)
    const before = [...acked];
    const tasksA = new Map<string, Record<string, any>>();
    const outputsA = new Map<string, Buffer>();
    for (const id of before) {
      const r = await a.http.get(`/r/tasks/${id}`, { token: s.sk.value });
      assert.equal(r.status, 200, r.text);
      tasksA.set(id, r.body);
    }
    const eventsA = await eventsOf(a, before);
    for (const [id, task] of tasksA) {
      if (task.task_status !== 'completed') continue;
      const r = await a.http.get(`/r/tasks/${id}/result`, { token: s.sk.value });
      assert.equal(r.status, 200, r.text);
      const bytes = Buffer.from(await (await fetch(r.body.download_url as string)).arrayBuffer());
      assert.equal(bytes.length, r.body.output.outputs[0].size);
      outputsA.set(id, bytes);
    }
    assert.ok(outputsA.size >= 10, `${outputsA.size} completed tasks with outputs before the backup`);

    // the backup, while the submits go on
    const ackedAtStart = acked.length;
    const backup = await gantry(['backup', '--out', backupDir], { DATABASE_URL: a.db.url, GANTRY_DATA_DIR: a.dataDir });
    const ackedDuring = acked.length - ackedAtStart;
    assert.equal(backup.code, 0, backup.stderr + backup.stdout);
    assert.match(backup.stdout, /object store \(local\): \d+ objects, \d+ bytes copied/);
    assert.ok(ackedDuring > 0, 'submits were acknowledged while the backup ran');
    stopLoad = true;
    await Promise.all(load);
    assert.deepEqual(refused, [], 'no submit refused');
    const manifest = JSON.parse(readFileSync(join(backupDir, 'manifest.json'), 'utf8')) as Record<string, any>;
    assert.equal(manifest.format, 'gantry-backup');
    assert.ok(manifest.database.migrations.length > 0);
    assert.ok(manifest.database.server_version.length > 0);
    assert.equal(statSync(join(backupDir, 'database.dump')).mode & 0o077, 0, 'the dump is readable by its owner only');
    const objects = JSON.parse(readFileSync(join(backupDir, 'objects.json'), 'utf8')) as Array<{ key: string; size: number; sha256?: string }>;
    for (const [id, task] of tasksA)
      if (outputsA.has(id)) {
        const key = task.output?.storage_key ?? `teams/${s.user.teamId}/outputs/${id}/1/output.png`;
        const entry = objects.find((o) => o.key === key);
        assert.ok(entry?.sha256, `the manifest lists ${key} with its hash`);
        assert.equal(entry.size, outputsA.get(id)?.length);
      }
    for (const p of agents) p.kill('SIGKILL');
    await Promise.all(agents.map((p) => p.exited));
    await a.stop();

    // restore into the fresh database and data directory; a second restore finds it non-empty
    const restoreEnv = { DATABASE_URL: restoredDb.url, GANTRY_DATA_DIR: restoredDir };
    const restored = await gantry(['restore', '--from', backupDir], restoreEnv);
    assert.equal(restored.code, 0, restored.stderr + restored.stdout);
    assert.match(restored.stdout, /object store \(local\): \d+ objects restored/);
    const again = await gantry(['restore', '--from', backupDir], restoreEnv);
    assert.equal(again.code, 78, again.stderr);
    assert.match(again.stderr, /is not empty .*restore only into an empty database/);

    // a node on the restored database: same credentials, every task acknowledged before the backup
    const nb = await startTestNode({ GANTRY_SECRET_KEY: SECRET, DATABASE_URL: restoredDb.url, GANTRY_DATA_DIR: restoredDir, GANTRY_AGENT_GRACE_S: 60 }, 'backup-dst');
    b = nb;
    const eventsB = await eventsOf(nb, before);
    let outputsChecked = 0;
    for (const id of before) {
      const r = await nb.http.get(`/r/tasks/${id}`, { token: s.sk.value });
      assert.equal(r.status, 200, `task ${id} acknowledged before the backup: ${r.status} ${r.text}`);
      const was = tasksA.get(id) as Record<string, any>;
      assert.equal(r.body.workflow_id, was.workflow_id);
      assert.deepEqual(r.body.parameters, was.parameters);
      // every event the task had is there, unchanged (ids included)
      const have = eventsB.get(id) ?? [];
      for (const e of eventsA.get(id) ?? []) assert.deepEqual(have.find((x) => x.id === e.id), e, `task ${id} event ${e.id}`);
      assert.ok((eventsA.get(id) ?? []).length > 0, `task ${id} had events`);
      if (!outputsA.has(id)) continue;
      assert.equal(r.body.task_status, 'completed');
      const res = await nb.http.get(`/r/tasks/${id}/result`, { token: s.sk.value });
      assert.equal(res.status, 200, res.text);
      assert.ok(String(res.body.download_url).startsWith(nb.origin), res.body.download_url);
      const dl = await fetch(res.body.download_url as string);
      assert.equal(dl.status, 200);
      assert.ok(Buffer.from(await dl.arrayBuffer()).equals(outputsA.get(id) as Buffer), `task ${id}: the same output bytes`);
      outputsChecked++;
    }
    assert.equal(outputsChecked, outputsA.size);
    // the event stream of a restored completed task replays its events and ends on the terminal one
    const done = [...outputsA.keys()][0] as string;
    const sse = await fetch(`${nb.baseUrl}/r/tasks/${done}/events?last_event_id=0`, { headers: { authorization: `Bearer ${s.sk.value}` } });
    assert.equal(sse.status, 200);
    const text = await sse.text();
    assert.match(text, /event: completed/);
    for (const e of eventsA.get(done) ?? []) assert.ok(text.includes(`id: ${e.id}\n`), `SSE replays event ${e.id}`);
  } finally {
    stopLoad = true;
    await Promise.allSettled(load);
    for (const p of agents) p.kill('SIGKILL');
    await Promise.all(agents.map((p) => p.exited));
    await a.stop().catch(() => undefined);
    if (b) {
      await b.node.close().catch(() => undefined);
      await b.db.drop();
      rmSync(b.dataDir, { recursive: true, force: true });
    }
    await restoredDb.drop();
    rmSync(restoredDir, { recursive: true, force: true });
    rmSync(join(backupDir, '..'), { recursive: true, force: true });
  }
});

test('gantry backup and restore refuse the embedded database, a non-empty backup directory, a directory that is not a backup and a multi-host URL with no usable host', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'gantry-embedded-'));
  try {
    const b = await gantry(['backup', '--out', join(dataDir, 'b')], { GANTRY_DATA_DIR: dataDir });
    assert.equal(b.code, 78, b.stderr);
    assert.match(b.stderr, /embedded database .*copy its whole data directory/);
    const r = await gantry(['restore', '--from', dataDir], { GANTRY_DATA_DIR: dataDir });
    assert.equal(r.code, 78, r.stderr);
    assert.match(r.stderr, /embedded database/);
    // a non-empty --out is never overwritten; a --from without manifest is refused
    const out = await gantry(['backup', '--out', root], { DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/postgres', GANTRY_DATA_DIR: dataDir });
    assert.equal(out.code, 78, out.stderr);
    assert.match(out.stderr, /exists and is not an empty directory/);
    const notBackup = await gantry(['restore', '--from', dataDir], { DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/postgres', GANTRY_DATA_DIR: dataDir });
    assert.equal(notBackup.code, 78, notBackup.stderr);
    assert.match(notBackup.stderr, /is not a gantry backup/);
    // a multi-host URL none of whose hosts answers: refused, naming each host, before --out is created
    // (the URL with live hosts, a standby among them: test/foundation/pg-failover.test.ts)
    const [q1, q2] = [await freePort(), await freePort()];
    const none = await gantry(['backup', '--out', join(dataDir, 'none')], { DATABASE_URL: `postgres://postgres@127.0.0.1:${q1},127.0.0.1:${q2}/postgres?target_session_attrs=read-write`, GANTRY_DATA_DIR: dataDir });
    assert.equal(none.code, 1, none.stderr);
    assert.match(none.stderr, new RegExp(`no read-write server among the URL's hosts: 127\\.0\\.0\\.1:${q1} .*; 127\\.0\\.0\\.1:${q2} `));
    assert.equal(existsSync(join(dataDir, 'none')), false, 'no backup directory left behind');
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
