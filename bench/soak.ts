/**
 * Soak: one node under a steady load for a long time; nothing may grow without bound.
 *
 *   npm run bench:soak          (DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/postgres; not in CI)
 *   env: BENCH_SOAK_MIN (30 minutes of load), BENCH_SOAK_EVERY_S (60: one sample line per interval),
 *        BENCH_SOAK_RATE (20 runs/s, open loop), BENCH_SOAK_FOLLOWERS (3 SSE followers),
 *        BENCH_SOAK_FOLLOW_EVERY_S (2: each follower starts at most one followed run per interval),
 *        BENCH_AGENTS (4), BENCH_SLOTS (8 per agent)
 *
 * Processes besides this one: the Gantry node (`node bin/gantry.mjs serve`, fresh database), the
 * agents (bench/proc/agents.ts: the real agent program over gRPC, simulate executor, instant tasks
 * with one small PNG upload each) and the submitter (bench/proc/loadgen.ts open loop: run i is sent
 * at t0 + i/rate whether or not earlier ones were answered). This process also runs
 * BENCH_SOAK_FOLLOWERS SSE followers, each in a loop (at most one run per BENCH_SOAK_FOLLOW_EVERY_S):
 * submit one run, follow GET /r/tasks/{id}/events until the server closes it after the terminal event.
 * No webhook receiver: webhook_url must be https:// and the outbound rules refuse loopback.
 *
 * Every BENCH_SOAK_EVERY_S it prints one line: the node's RSS (/proc/<pid>/status VmRSS), open fds
 * (/proc/<pid>/fd), and from its /metrics (prom-client defaults): JS heap used
 * (nodejs_heap_size_used_bytes) and event-loop delay p99/max over the interval since the previous
 * scrape (nodejs_eventloop_lag_p99_seconds / _max_seconds: the histogram resets at each scrape);
 * pg_total_relation_size of the tables that grow with tasks and pg_database_size; tasks completed.
 *
 * Verdict per series over the second half of the run (the first half is warm-up): least-squares
 * slope per minute. RSS and heap are GROWING when the slope is > 0.5 MB/min and the fitted growth
 * over the second half is > 10% of the series' mean there; fds when the slope is > 0.2/min and the
 * fitted growth is > 5 fds; with fewer than 6 samples in the second half there is no verdict. Table growth is expected to be proportional to tasks: bytes per task are
 * reported for each half; a table whose second-half bytes per task exceed 2x its first half is flagged.
 * Last line: `SOAK minutes=... tasks=... rss_mb_start=... rss_mb_end=... rss_slope_mb_per_min=...
 * fds_start=... fds_end=... eld_p99_ms=... bytes_per_task=...` (rss_mb_start: the first sample under
 * load; eld_p99_ms: the highest per-interval p99; bytes_per_task: database bytes added per completed
 * task over the whole run).
 */
import { readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import pg from 'pg';
import { BenchError, envNum, fmt, jsonLines, machineLine, onCleanup, runBench, sleep, spawnChild, startGantry, waitUntil, type GantryProcess } from './lib/harness.js';

const MINUTES = envNum('BENCH_SOAK_MIN', 30);
const EVERY_S = envNum('BENCH_SOAK_EVERY_S', 60);
const RATE = envNum('BENCH_SOAK_RATE', 20);
const FOLLOWERS = Math.floor(Number(process.env.BENCH_SOAK_FOLLOWERS ?? 3));
const FOLLOW_EVERY_S = envNum('BENCH_SOAK_FOLLOW_EVERY_S', 2);
const AGENTS = envNum('BENCH_AGENTS', 4);
const SLOTS = envNum('BENCH_SLOTS', 8);
const TABLES = ['tasks', 'task_events', 'task_attempts', 'staged_files', 'idempotency_keys', 'webhook_deliveries', 'notifications', 'audit_log', 'event_cursors'];
const SHORT: Record<string, string> = { tasks: 'tasks', task_events: 'events', task_attempts: 'attempts', staged_files: 'staged', idempotency_keys: 'idem', webhook_deliveries: 'wh_deliv', notifications: 'notif', audit_log: 'audit', event_cursors: 'cursors' };
const MB = 1024 * 1024;
/** Below this many samples in the second half a slope is GC noise: no GROWING/flat verdict. */
const MIN_VERDICT_SAMPLES = 6;

interface Sample {
  tMin: number;
  tasks: number;
  rssMb: number;
  heapMb: number;
  fds: number;
  eldP99Ms: number;
  eldMaxMs: number;
  dbBytes: number;
  tables: Record<string, number>;
}

async function count(g: GantryProcess, status: string): Promise<number> {
  const r = await g.http.get(`/r/tasks?task_status=${status}&per_page=1`, { token: g.sk });
  if (r.status !== 200) throw new BenchError(`GET /r/tasks?task_status=${status}: ${r.status} ${r.text}`);
  return Number(r.body.page_meta?.total_count);
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new BenchError(`no VmRSS in /proc/${pid}/status`);
  return Number(m[1]) / 1024;
}

function metric(text: string, name: string): number {
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.eE+-]+|NaN)$`, 'm').exec(text);
  if (!m) throw new BenchError(`/metrics has no ${name}`);
  return Number(m[1]);
}

/** Least-squares slope of value per minute. */
function slope(points: Array<[number, number]>): number {
  const n = points.length;
  if (n < 2) return NaN;
  const mx = points.reduce((s, p) => s + p[0], 0) / n;
  const my = points.reduce((s, p) => s + p[1], 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? NaN : num / den;
}

/** SSE followers: submit a run, follow its events until the server closes the stream after the terminal event. */
function startFollowers(g: GantryProcess, n: number): { stop(): Promise<void>; stats: { streams: number; terminal: number; events: number; errors: number } } {
  const stats = { streams: 0, terminal: 0, events: 0, errors: 0 };
  let stopped = false;
  const ctl = new AbortController();
  const one = async (): Promise<void> => {
    while (!stopped) {
      const cycleStart = Date.now();
      try {
        const r = await fetch(`${g.apiBase}/r/workflows/${g.workflowId}/run`, { method: 'POST', headers: { authorization: `Bearer ${g.sk}`, 'content-type': 'application/json' }, body: '{"parameters":{}}', signal: ctl.signal });
        const body = (await r.json()) as { task_id?: string };
        if (r.status !== 202 || !body.task_id) throw new Error(`run: ${r.status}`);
        const s = await fetch(`${g.apiBase}/r/tasks/${body.task_id}/events`, { headers: { authorization: `Bearer ${g.sk}`, accept: 'text/event-stream' }, signal: AbortSignal.any([ctl.signal, AbortSignal.timeout(60_000)]) });
        if (s.status !== 200 || !s.body) throw new Error(`events: ${s.status}`);
        stats.streams++;
        let text = '';
        const dec = new TextDecoder();
        const reader = s.body.getReader();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          text += dec.decode(value, { stream: true });
        }
        stats.events += (text.match(/^event:/gm) ?? []).length;
        if (/^event: (completed|failed|cancelled)$/m.test(text)) stats.terminal++;
        else stats.errors++;
      } catch {
        if (stopped) return;
        stats.errors++;
      }
      // one followed run per follower per FOLLOW_EVERY_S at most: the followers add a small, known load
      const wait = cycleStart + FOLLOW_EVERY_S * 1000 - Date.now();
      if (wait > 0 && !stopped) await sleep(wait);
    }
  };
  const loops = Array.from({ length: n }, () => one());
  return {
    stats,
    async stop() {
      stopped = true;
      ctl.abort();
      await Promise.all(loops);
    },
  };
}

runBench('SOAK', async () => {
  console.log(`SOAK: ${MINUTES} min at ${RATE} runs/s (open loop) + ${FOLLOWERS} SSE followers (one run each per ${FOLLOW_EVERY_S} s), ${AGENTS} agents x ${SLOTS} slots over gRPC, one sample every ${EVERY_S} s`);
  console.log(await machineLine());
  const g = await startGantry('soak');
  const pool = new pg.Pool({ connectionString: g.db.url, max: 1 });
  onCleanup(() => pool.end());
  const ak = await g.agentCredential();
  const agents = spawnChild(process.execPath, ['--import', 'tsx', 'bench/proc/agents.ts', `127.0.0.1:${g.grpcPort}`, ak, String(AGENTS), String(SLOTS)]);
  await jsonLines(agents).next((o) => typeof o.ready === 'number', 'the agents to connect', 90_000);
  await waitUntil(`${AGENTS} agents online`, async () => {
    const r = await g.http.get('/agents?per_page=1', { token: g.user.accessToken, team: g.user.teamId });
    return r.body.page_meta?.total_count === AGENTS;
  }, 60_000, 100);

  const t0 = Date.now();
  const sample = async (): Promise<Sample> => {
    const m = await fetch(`${g.origin}/metrics`);
    if (!m.ok) throw new BenchError(`GET /metrics: ${m.status}`);
    const text = await m.text();
    const sizes = await pool.query<{ t: string; b: string }>(`select t, pg_total_relation_size(t::regclass) as b from unnest($1::text[]) as t where to_regclass(t) is not null`, [TABLES]);
    const db = await pool.query<{ b: string }>('select pg_database_size(current_database()) as b');
    const tables: Record<string, number> = {};
    for (const r of sizes.rows) tables[r.t] = Number(r.b);
    return {
      tMin: (Date.now() - t0) / 60_000,
      tasks: await count(g, 'completed'),
      rssMb: rssMb(g.pid),
      heapMb: metric(text, 'nodejs_heap_size_used_bytes') / MB,
      fds: readdirSync(`/proc/${g.pid}/fd`).length,
      eldP99Ms: metric(text, 'nodejs_eventloop_lag_p99_seconds') * 1000,
      eldMaxMs: metric(text, 'nodejs_eventloop_lag_max_seconds') * 1000,
      dbBytes: Number(db.rows[0]?.b),
      tables,
    };
  };
  const print = (s: Sample): void => {
    const t = TABLES.filter((k) => k in s.tables).map((k) => `${SHORT[k]}=${fmt((s.tables[k] as number) / MB, 1)}`).join(' ');
    console.log(`t=${fmt(s.tMin, 1).padStart(5)}min tasks=${String(s.tasks).padStart(7)} rss=${fmt(s.rssMb, 1)}MB heap=${fmt(s.heapMb, 1)}MB fds=${s.fds} eld_p99=${fmt(s.eldP99Ms, 1)}ms eld_max=${fmt(s.eldMaxMs, 1)}ms db=${fmt(s.dbBytes / MB, 1)}MB [MB: ${t}]`);
  };
  const samples: Sample[] = [];
  const idle = await sample(); // before any load (resets the event-loop histogram too)
  console.log('idle (before load):');
  print(idle);

  const url = `${g.apiBase}/r/workflows/${g.workflowId}/run`;
  const loadS = Math.round(MINUTES * 60);
  const loadgen = spawnChild(process.execPath, ['--import', 'tsx', 'bench/proc/loadgen.ts', 'open', url, g.sk, String(RATE), String(loadS), '64']);
  let result: Record<string, any> | null = null;
  let failure: unknown = null;
  jsonLines(loadgen)
    .next((o) => o.mode === 'open', 'the submitter result', (loadS + 120) * 1000)
    .then((o) => (result = o), (e: unknown) => (failure = e));
  const followers = startFollowers(g, FOLLOWERS);

  const end = t0 + loadS * 1000;
  for (let k = 1; ; k++) {
    const at = t0 + k * EVERY_S * 1000;
    if (at > end + 500) break;
    while (Date.now() < at) {
      if (failure) throw failure;
      await sleep(Math.min(1000, at - Date.now()));
    }
    const s = await sample();
    samples.push(s);
    print(s);
  }
  await followers.stop();
  await waitUntil('the submitter result', () => result !== null || failure !== null, 120_000, 100);
  if (failure) throw failure;
  const r = result as unknown as Record<string, any>;
  // the backlog: every accepted run (and every follower run) terminal
  const submitted = Number(r.accepted) + followers.stats.streams;
  await waitUntil('every accepted run to finish', async () => (await count(g, 'completed')) + (await count(g, 'failed')) >= submitted, 120_000, 500).catch(() => undefined);
  const last = await sample();
  const failed = await count(g, 'failed');
  console.log('after the load (backlog drained):');
  print(last);
  console.log(`submitter   ${r.accepted}/${r.sent} accepted (${r.errors} errors, ${r.unanswered} unanswered, statuses ${JSON.stringify(r.statuses)}), 202 p50 ${fmt(r.p50Ms, 1)} ms p99 ${fmt(r.p99Ms, 1)} ms max ${fmt(r.maxMs, 1)} ms, late sends ${r.lateSends}`);
  console.log(`followers   ${followers.stats.streams} SSE streams followed to the end, ${followers.stats.terminal} with their terminal event, ${followers.stats.events} events, ${followers.stats.errors} errors`);
  console.log(`tasks       ${last.tasks} completed, ${failed} failed`);

  // ---- verdicts over the second half
  if (samples.length < 4) throw new BenchError(`only ${samples.length} samples: run longer or sample more often (BENCH_SOAK_EVERY_S)`);
  const half = samples.filter((s) => s.tMin >= MINUTES / 2 - 1e-9);
  const first = samples.filter((s) => s.tMin <= MINUTES / 2 + 1e-9);
  const span = (half.at(-1) as Sample).tMin - (half[0] as Sample).tMin;
  console.log(`verdicts (slope = least squares over the ${half.length} samples from t=${fmt((half[0] as Sample).tMin, 1)} min; the first half is warm-up):`);
  const judge = (name: string, unit: string, v: (s: Sample) => number, minSlope: number, minGrowth: (mean: number) => number): number => {
    const sl = slope(half.map((s) => [s.tMin, v(s)]));
    const mean = half.reduce((a, s) => a + v(s), 0) / half.length;
    const growth = sl * span;
    const growing = sl > minSlope && growth > minGrowth(mean);
    const verdict = half.length < MIN_VERDICT_SAMPLES ? `no verdict (${half.length} samples in the second half, ${MIN_VERDICT_SAMPLES} needed)` : growing ? 'GROWING' : 'flat';
    console.log(`  ${name.padEnd(10)} ${fmt(v(samples[0] as Sample), 1)} -> ${fmt(v(samples.at(-1) as Sample), 1)} ${unit}, slope ${fmt(sl, 3)} ${unit}/min (fitted ${fmt(growth, 1)} ${unit} over ${fmt(span, 1)} min): ${verdict}`);
    return sl;
  };
  const rssSlope = judge('rss', 'MB', (s) => s.rssMb, 0.5, (m) => 0.1 * m);
  judge('heap', 'MB', (s) => s.heapMb, 0.5, (m) => 0.1 * m);
  judge('fds', 'fds', (s) => s.fds, 0.2, () => 5);
  const eldP99 = Math.max(...samples.map((s) => s.eldP99Ms));
  const eldSorted = samples.map((s) => s.eldP99Ms).sort((a, b) => a - b);
  console.log(`  eld        per-interval p99: median ${fmt(eldSorted[Math.floor(eldSorted.length / 2)] as number, 1)} ms, highest ${fmt(eldP99, 1)} ms; highest max ${fmt(Math.max(...samples.map((s) => s.eldMaxMs)), 1)} ms; second-half slope of p99 ${fmt(slope(half.map((s) => [s.tMin, s.eldP99Ms])), 2)} ms/min`);
  const perTask = (a: Sample, b: Sample, v: (s: Sample) => number): number => (b.tasks > a.tasks ? (v(b) - v(a)) / (b.tasks - a.tasks) : NaN);
  const h0 = samples[0] as Sample;
  const hm = first.at(-1) as Sample;
  const h1 = samples.at(-1) as Sample;
  for (const t of TABLES) {
    if (!(t in h1.tables)) continue;
    const v = (s: Sample): number => s.tables[t] ?? 0;
    const a = perTask(idle, hm, v);
    const b = perTask(hm, h1, v);
    const flag = v(h1) - v(h0) > 1 * MB && b > 2 * a ? 'per-task cost RISING' : 'proportional to tasks (or flat)';
    console.log(`  ${t.padEnd(18)} ${fmt(v(idle) / MB, 1)} -> ${fmt(v(h1) / MB, 1)} MB, ${fmt(slope(half.map((s) => [s.tMin, v(s) / MB])), 2)} MB/min; bytes/task first half ${fmt(a)}, second half ${fmt(b)}: ${flag}`);
  }
  const bytesPerTask = perTask(idle, last, (s) => s.dbBytes);
  console.log(`  database           ${fmt(idle.dbBytes / MB, 1)} -> ${fmt(last.dbBytes / MB, 1)} MB, ${fmt(bytesPerTask)} bytes per completed task`);
  if (failed > 0) console.log(`note: ${failed} tasks failed`);
  console.log(
    `SOAK minutes=${MINUTES} tasks=${last.tasks} rss_mb_start=${fmt(h0.rssMb, 1)} rss_mb_end=${fmt(h1.rssMb, 1)} rss_slope_mb_per_min=${fmt(rssSlope, 3)} heap_mb_end=${fmt(h1.heapMb, 1)} fds_start=${h0.fds} fds_end=${h1.fds} eld_p99_ms=${fmt(eldP99, 1)} bytes_per_task=${fmt(bytesPerTask)} rate=${RATE} agents=${AGENTS} nproc=${os.availableParallelism()} date=${new Date().toISOString().slice(0, 10)}`,
  );
}, MINUTES * 60 + 600);
