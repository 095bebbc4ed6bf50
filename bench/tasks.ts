/**
 * Task submission benchmark (issue 5): submits N tasks through HTTP (POST /r/workflows/{id}/run)
 * with C concurrent clients and drives A in-process fake agents (instant ACK + finish). Prints
 * accepted tasks/s, 202 latency p50/p99 and submit-to-dispatch latency p50/p99.
 *   node --import tsx bench/tasks.ts [N=2000] [C=32] [A=16]
 * Uses DATABASE_URL (a fresh database is created on it) or, when unset, the embedded PGlite.
 * GANTRY_DB_POOL_MAX overrides the pool size. BENCH_PROFILE=1 also prints where the time goes:
 * per-query-shape latency and count, transactions, DB pool waiters, actor turn time and mailbox
 * depth per actor kind.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { loadConfig } from '../src/shared/config.js';
import { createLogger } from '../src/shared/logger.js';
import { startNode } from '../src/main.js';
import { HttpClient } from '../test/helpers/node.js';
import { createTestDatabase } from '../test/helpers/pg.js';
import { registerUser, createCredential } from '../test/helpers/identity.js';
import { FakeAgent } from '../test/helpers/fake-agent.js';
import { comfyBody } from '../test/workflows-api/fixtures.js';
import { registry } from '../src/edge/metrics.js';

const [N = 2000, C = 32, A = 16] = process.argv.slice(2).map(Number);
const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};

const db = process.env.DATABASE_URL ? await createTestDatabase('bench') : null;
const dataDir = mkdtempSync(join(tmpdir(), 'gantry-bench-'));
const config = loadConfig({}, {
  DATABASE_URL: db?.url,
  GANTRY_DATA_DIR: dataDir,
  GANTRY_HTTP_HOST: '127.0.0.1',
  GANTRY_HTTP_PORT: 0,
  GANTRY_GRPC_PORT: 0,
  GANTRY_AUTH_RATE_LIMIT_PER_MIN: 100000,
  ...(process.env.GANTRY_DB_POOL_MAX ? { GANTRY_DB_POOL_MAX: Number(process.env.GANTRY_DB_POOL_MAX) } : {}),
} as never);
const node = await startNode(config, { logger: createLogger('warn') });
const profile = process.env.BENCH_PROFILE === '1' ? startProfile() : null;
const http = new HttpClient(node.baseUrl);
try {
  const user = await registerUser(http);
  const sk = await createCredential(http, user, 'integration');
  const wf = await http.post('/workflows', comfyBody({ required_labels: [], required_models: [], min_vram_gb: 0 }), { token: user.accessToken, team: user.teamId });
  if (wf.status !== 200) throw new Error(wf.text);

  const acceptedAt = new Map<string, number>();
  const dispatchLat: number[] = [];
  const assignedAt = new Map<string, number>();
  let completed = 0;
  let allDone: () => void = () => undefined;
  const done = new Promise<void>((r) => (allDone = r));
  for (let i = 0; i < A; i++) {
    const ag = new FakeAgent(node, { teamId: user.teamId, slots: 4 });
    await ag.connect();
    const origPush = ag.inbox.push.bind(ag.inbox);
    ag.inbox.push = (...msgs) => {
      for (const m of msgs)
        if (m.type === 'assign') {
          // the assignment can beat the 202 to the client (embedded database): settle whichever comes second
          const t0 = acceptedAt.get(m.taskId);
          if (t0 !== undefined) dispatchLat.push(performance.now() - t0);
          else assignedAt.set(m.taskId, performance.now());
          ag.ack(m);
          ag.finish(m);
          if (++completed === N) allDone();
        }
      return origPush(...msgs);
    };
  }

  const lat: number[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: C }, async () => {
      while (next < N) {
        next++;
        const s = performance.now();
        const r = await http.post(`/r/workflows/${wf.body.id}/run`, { parameters: { prompt: 'bench' } }, { token: sk.value });
        const e = performance.now();
        if (r.status !== 202) throw new Error(`run: ${r.status} ${r.text}`);
        acceptedAt.set(r.body.task_id, s);
        const early = assignedAt.get(r.body.task_id);
        if (early !== undefined) dispatchLat.push(early - s);
        lat.push(e - s);
      }
    }),
  );
  const tAccepted = performance.now() - t0;
  let giveUp: NodeJS.Timeout | undefined;
  await Promise.race([done, new Promise((r) => (giveUp = setTimeout(r, 120_000)))]);
  clearTimeout(giveUp);
  const tAll = performance.now() - t0;
  console.log(`database: ${db ? 'PostgreSQL server' : 'embedded PGlite'}; N=${N} tasks, ${C} concurrent clients, ${A} agents x 4 slots`);
  console.log(`accepted: ${(N / (tAccepted / 1000)).toFixed(0)} tasks/s (202 in ${(tAccepted / 1000).toFixed(2)} s)`);
  console.log(`202 latency: p50 ${pct(lat, 50).toFixed(1)} ms, p99 ${pct(lat, 99).toFixed(1)} ms`);
  console.log(`submit -> dispatch: p50 ${pct(dispatchLat, 50).toFixed(1)} ms, p99 ${pct(dispatchLat, 99).toFixed(1)} ms`);
  console.log(`completed ${completed}/${N}; end-to-end ${(completed / (tAll / 1000)).toFixed(0)} tasks/s`);
  if (profile) await profile.report(tAll);
} finally {
  await node.close();
  await db?.drop();
  rmSync(dataDir, { recursive: true, force: true });
}

/** Opt-in instrumentation (BENCH_PROFILE=1): wraps the MikroORM connection and samples the pool and mailboxes. */
function startProfile(): { report: (wallMs: number) => Promise<void> } {
  const conn = node.db.orm.em.getConnection() as unknown as {
    execute: (...a: unknown[]) => Promise<unknown>;
    begin: (...a: unknown[]) => Promise<unknown>;
    commit: (...a: unknown[]) => Promise<unknown>;
    getKnex: () => { client: { pool?: { numPendingAcquires(): number; numUsed(): number } } };
  };
  const byShape = new Map<string, { n: number; ms: number; max: number }>();
  const note = (k: string, ms: number): void => {
    const e = byShape.get(k) ?? { n: 0, ms: 0, max: 0 };
    e.n++;
    e.ms += ms;
    e.max = Math.max(e.max, ms);
    byShape.set(k, e);
  };
  const wrap = (name: 'execute' | 'begin' | 'commit', label: (a: unknown[]) => string): void => {
    const orig = conn[name].bind(conn);
    conn[name] = async (...a: unknown[]) => {
      const t = performance.now();
      try {
        return await orig(...a);
      } finally {
        note(label(a), performance.now() - t);
      }
    };
  };
  wrap('execute', (a) => `sql ${String(a[0]).replace(/\s+/g, ' ').slice(0, 60)}`);
  wrap('begin', () => 'tx BEGIN (incl. pool acquire)');
  wrap('commit', () => 'tx COMMIT');
  const pool = conn.getKnex().client.pool;
  const cpu0 = process.cpuUsage();
  const pgCpu = async (): Promise<number> => {
    // CPU (utime+stime, ms) of the PostgreSQL backends serving this database (same host only)
    if (!db) return NaN;
    const rows = await node.db.execute<{ pid: number }>('select pid from pg_stat_activity where datname = current_database()');
    let ticks = 0;
    for (const r of rows) {
      try {
        const f = readFileSync(`/proc/${r.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
        ticks += Number(f[11]) + Number(f[12]);
      } catch {
        return NaN;
      }
    }
    return ticks * 10;
  };
  const pg0 = pgCpu();
  let samples = 0;
  let waitSum = 0;
  let waitMax = 0;
  let usedSum = 0;
  const depthMax = new Map<string, number>();
  const timer = setInterval(() => {
    samples++;
    if (pool) {
      const w = pool.numPendingAcquires();
      waitSum += w;
      waitMax = Math.max(waitMax, w);
      usedSum += pool.numUsed();
    }
    void registry.getSingleMetric('gantry_actor_mailbox_depth')?.get().then((m) => {
      for (const v of m.values) depthMax.set(String(v.labels.kind), Math.max(depthMax.get(String(v.labels.kind)) ?? 0, v.value));
    });
  }, 20);
  return {
    async report(wallMs: number) {
      clearInterval(timer);
      const cpu = process.cpuUsage(cpu0);
      const pgMs = (await pgCpu()) - (await pg0);
      console.log(`-- profile (wall ${(wallMs / 1000).toFixed(2)} s)`);
      console.log(`cpu per task: node ${((cpu.user + cpu.system) / 1000 / N).toFixed(2)} ms, postgres backends ${(pgMs / N).toFixed(2)} ms`);
      if (pool) console.log(`db pool: used avg ${(usedSum / samples).toFixed(1)}, waiting for a connection avg ${(waitSum / samples).toFixed(1)}, max ${waitMax}`);
      const rows = [...byShape.entries()].sort((a, b) => b[1].ms - a[1].ms).slice(0, 16);
      for (const [k, e] of rows) console.log(`  ${String(e.n).padStart(6)} x avg ${(e.ms / e.n).toFixed(1).padStart(6)} ms max ${e.max.toFixed(0).padStart(5)} ms  total ${(e.ms / 1000).toFixed(1).padStart(6)} s  ${k}`);
      const turns = await registry.getSingleMetric('gantry_actor_turn_seconds')?.get();
      const agg = new Map<string, { n: number; s: number }>();
      for (const v of turns?.values ?? []) {
        const kind = String(v.labels.kind);
        const e = agg.get(kind) ?? { n: 0, s: 0 };
        const name = (v as { metricName?: string }).metricName ?? '';
        if (name.endsWith('_count')) e.n += v.value;
        if (name.endsWith('_sum')) e.s += v.value;
        agg.set(kind, e);
      }
      for (const [kind, e] of agg)
        console.log(`actor ${kind}: ${e.n} turns, avg ${((e.s / Math.max(1, e.n)) * 1000).toFixed(1)} ms, busy ${e.s.toFixed(1)} s; mailbox depth max ${depthMax.get(kind) ?? 0}`);
    },
  };
}
