/**
 * bench:sse — N concurrent SSE streams (GET /r/tasks/{id}/events) on one node, one event per second
 * on each stream, published through the node's event bus (synthetic progress events for N running
 * tasks). Prints the node's RSS per open stream and the publish -> client delivery latency p50/p99.
 * Figures only, no assertions.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npm run bench:sse -- 5000
 *   DATABASE_URL=... npm run bench:sse -- 20000 [seconds=10]
 *
 * Layout: the node runs in this process (with the publisher); the clients are raw-TCP HTTP/1.1
 * readers in child processes (5,000 sockets each), so the node's sockets are its own.
 *
 * File descriptors: the node needs one per stream plus ~50. The soft RLIMIT_NOFILE of this process
 * must exceed N + 100: run `ulimit -n 65536` (as root, or with a hard limit that allows it) before
 * `npm run bench:sse`. When the limit is lower the bench caps N and says so (a container with a
 * 20,000 hard limit cannot hold 20,000 streams in one process; that cap is reported).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync, rmSync, mkdtempSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const PER_WORKER = 5_000;

function fdLimit(): number {
  const m = /Max open files\s+(\d+|unlimited)/.exec(readFileSync('/proc/self/limits', 'utf8'));
  return m?.[1] === 'unlimited' ? Infinity : Number(m?.[1] ?? 1024);
}

const now = (): number => performance.timeOrigin + performance.now();

// ------------------------------------------------------------------------------------------
// client worker: opens its share of streams, reports latencies

interface WorkerArgs {
  port: number;
  token: string;
  team: string;
  idsFile: string;
  from: number;
  to: number;
}

async function clientWorker(a: WorkerArgs): Promise<void> {
  const ids = (JSON.parse(readFileSync(a.idsFile, 'utf8')) as string[]).slice(a.from, a.to);
  const latencies: number[] = [];
  let ready = 0;
  let failed = 0;
  let closed = 0;
  let measuring = false;
  const sockets: net.Socket[] = [];
  const open = (id: string): Promise<void> =>
    new Promise((resolve) => {
      const s = net.connect({ host: '127.0.0.1', port: a.port });
      sockets.push(s);
      let gotFirst = false;
      let carry = '';
      s.setEncoding('utf8');
      s.on('connect', () => {
        s.write(`GET /api/v1/r/tasks/${id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${a.token}\r\nX-Team-ID: ${a.team}\r\nAccept: text/event-stream\r\n\r\n`);
      });
      s.on('data', (chunk: string) => {
        const t = now();
        if (!gotFirst) {
          carry += chunk;
          if (carry.length >= 12 && !carry.startsWith('HTTP/1.1 200')) {
            if (failed === 0) console.error(`bench:sse client: first refused stream: ${carry.slice(0, 300).replace(/\r\n/g, ' | ')}`);
            failed++;
            gotFirst = true; // counted once
            s.destroy();
            resolve();
            return;
          }
          const i = carry.indexOf('event: status');
          if (i >= 0) {
            gotFirst = true;
            ready++;
            carry = '';
            resolve();
          }
          return;
        }
        carry += chunk;
        const end = carry.lastIndexOf('\n\n');
        if (end < 0) return;
        const text = carry.slice(0, end);
        carry = carry.slice(end + 2);
        if (!measuring) return;
        for (const m of text.matchAll(/"sent_at":([0-9.]+)/g)) latencies.push(t - Number(m[1]));
      });
      s.on('error', (e) => {
        if (failed === 0) console.error(`bench:sse client: ${e.message}`);
      });
      s.on('close', () => {
        closed++;
        if (!gotFirst) {
          failed++;
          resolve();
        }
      });
    });
  const CONCURRENCY = 200;
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < ids.length) await open(ids[next++] as string);
    }),
  );
  process.send?.({ type: 'ready', ready, failed });
  process.on('message', (m: { type: string }) => {
    if (m.type === 'measure') measuring = true;
    if (m.type === 'report') {
      measuring = false;
      process.send?.({ type: 'report', latencies, closed }, () => {
        for (const s of sockets) s.destroy();
        setTimeout(() => process.exit(0), 100);
      });
    }
  });
}

// ------------------------------------------------------------------------------------------
// main: the node, the tasks, the publisher

const pct = (sorted: number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? NaN;
const mb = (b: number): number => Math.round(b / 1024 / 1024);

async function main(): Promise<void> {
  const { startNode } = await import('../src/main.js');
  const { loadConfig } = await import('../src/shared/config.js');
  const { createLogger } = await import('../src/shared/logger.js');
  const { createTestDatabase } = await import('../test/helpers/pg.js');
  const { HttpClient } = await import('../test/helpers/node.js');
  const { registerUser } = await import('../test/helpers/identity.js');

  const wanted = Number(process.argv[2] ?? 5000);
  const seconds = Number(process.argv[3] ?? 10);
  const limit = fdLimit();
  const N = Math.min(wanted, Math.max(0, limit - 150));
  console.log(`bench:sse  streams wanted=${wanted}  RLIMIT_NOFILE=${limit}${N < wanted ? `  -> capped at ${N} (raise with \`ulimit -n ${wanted + 1000}\`)` : ''}`);

  const db = await createTestDatabase('benchsse');
  const dataDir = mkdtempSync(join(tmpdir(), 'gantry-bench-sse-'));
  const node = await startNode(
    loadConfig(
      {},
      {
        DATABASE_URL: db.url,
        GANTRY_DATA_DIR: dataDir,
        GANTRY_HTTP_HOST: '127.0.0.1',
        GANTRY_HTTP_PORT: 0,
        GANTRY_GRPC_HOST: '127.0.0.1',
        GANTRY_GRPC_PORT: 0,
        GANTRY_SSE_MAX_STREAMS_PER_TEAM: 1_000_000,
        GANTRY_DB_POOL_MAX: 20,
        GANTRY_AUTH_RATE_LIMIT_PER_MIN: 1_000_000,
      },
    ),
    { logger: createLogger('silent') },
  );
  const workers: ChildProcess[] = [];
  const tmp = mkdtempSync(join(tmpdir(), 'gantry-bench-ids-'));
  try {
    const user = await registerUser(new HttpClient(node.baseUrl));
    const team = user.teamId;
    // N running tasks with their first status event (bulk SQL)
    const rows = await node.db.execute<{ id: string }>(
      `insert into tasks (id, team_id, workflow_id, workflow_slug, workflow_version, task_status, resolved_workflow, agent_id, lease_epoch)
       select gen_random_uuid(), ?, gen_random_uuid(), 'bench', 1, 'running', '{}'::jsonb, null, 1 from generate_series(1, ?) returning id`,
      [team, N],
    );
    const ids = rows.map((r) => r.id);
    await node.db.execute(
      `insert into task_events (task_id, team_id, event_type, payload)
       select id, team_id, 'status', jsonb_build_object('task_id', id, 'status', 'running', 'timestamp', now()) from tasks where team_id = ?`,
      [team],
    );
    const idsFile = join(tmp, 'ids.json');
    writeFileSync(idsFile, JSON.stringify(ids));

    globalThis.gc?.();
    const rssBase = process.memoryUsage().rss;
    const memBase = process.memoryUsage();
    const heapBase = memBase.heapUsed;

    const t0 = performance.now();
    const self = fileURLToPath(import.meta.url);
    const readyAll = [];
    for (let from = 0; from < N; from += PER_WORKER) {
      const w = fork(self, ['--client', JSON.stringify({ port: node.httpPort, token: user.accessToken, team, idsFile, from, to: Math.min(N, from + PER_WORKER) } satisfies WorkerArgs)], {
        execArgv: ['--import', 'tsx'],
        stdio: 'inherit',
      });
      workers.push(w);
      readyAll.push(new Promise<{ ready: number; failed: number }>((r) => w.once('message', (m: { ready: number; failed: number }) => r(m))));
    }
    const ready = await Promise.all(readyAll);
    const connectS = (performance.now() - t0) / 1000;
    const open = ready.reduce((s, r) => s + r.ready, 0);
    const failed = ready.reduce((s, r) => s + r.failed, 0);
    console.log(`connected ${open}/${N} streams in ${connectS.toFixed(1)} s (${failed} failed); hub reports ${node.liveEvents.sse.openStreams()} open`);

    // steady state: the connection storm's garbage collected and the heap shrunk back (V8 returns
    // pages to the OS after full collections; right after the storm RSS still holds its garbage)
    await new Promise((r) => setTimeout(r, 1000));
    for (let i = 0; i < 3; i++) {
      globalThis.gc?.();
      await new Promise((r) => setTimeout(r, 1000));
    }
    const rssStreams = process.memoryUsage().rss;
    const memStreams = process.memoryUsage();
    const heapStreams = memStreams.heapUsed;
    // BENCH_HEAP_SNAPSHOT=path: a heap snapshot with the streams open (what each stream holds)
    if (process.env.BENCH_HEAP_SNAPSHOT) (await import('node:v8')).writeHeapSnapshot(process.env.BENCH_HEAP_SNAPSHOT);

    // publish: each task gets one event per second, spread over 20 ticks per second
    for (const w of workers) w.send({ type: 'measure' });
    const TICK = 50;
    const perTick = Math.ceil(open / (1000 / TICK));
    let seq = 1_000_000_000;
    let published = 0;
    let cursor = 0;
    const cpu0 = process.cpuUsage();
    const p0 = performance.now();
    const lag: number[] = [];
    await new Promise<void>((resolve) => {
      const start = performance.now();
      let tickNo = 0;
      const tick = (): void => {
        const due = start + tickNo * TICK;
        lag.push(performance.now() - due);
        const evs = [];
        for (let i = 0; i < perTick; i++) {
          const taskId = ids[cursor % ids.length] as string;
          cursor++;
          evs.push({ id: seq++, taskId, teamId: team, type: 'progress' as const, createdAt: Date.now(), data: { task_id: taskId, progress: 0.5, step_current: 5, step_total: 10, current_node: 'bench', timestamp: new Date().toISOString(), sent_at: now() } });
        }
        node.events.publish(evs);
        published += evs.length;
        tickNo++;
        if (performance.now() - start >= seconds * 1000) return resolve();
        setTimeout(tick, Math.max(0, start + tickNo * TICK - performance.now()));
      };
      tick();
    });
    const wallS = (performance.now() - p0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    await new Promise((r) => setTimeout(r, 1000)); // let the last events arrive

    const reports = await Promise.all(
      workers.map((w) => {
        const p = new Promise<{ latencies: number[]; closed: number }>((r) => w.on('message', (m: { type: string; latencies: number[]; closed: number }) => m.type === 'report' && r(m)));
        w.send({ type: 'report' });
        return p;
      }),
    );
    const lat = reports.flatMap((r) => r.latencies).sort((a, b) => a - b);
    const rssAfter = process.memoryUsage().rss;
    const cpuPct = Math.round(((cpu.user + cpu.system) / 1e6 / wallS) * 1000) / 10;
    console.log('');
    console.log(`streams                    ${open}`);
    console.log(`node RSS before streams    ${mb(rssBase)} MB`);
    console.log(`node RSS with streams      ${mb(rssStreams)} MB  ->  ${((rssStreams - rssBase) / Math.max(1, open) / 1024).toFixed(1)} KB per stream`);
    const perStream = (a: number, b: number): string => `${((b - a) / Math.max(1, open) / 1024).toFixed(1)} KB`;
    console.log(`node JS heap per stream    ${perStream(heapBase, heapStreams)} used, ${perStream(memBase.heapTotal, memStreams.heapTotal)} heap committed, ${perStream(memBase.external, memStreams.external)} external (the rest of RSS is native: uWS's sockets, the allocator)`);
    console.log(`node RSS after publishing  ${mb(rssAfter)} MB`);
    console.log(`events published           ${published} in ${wallS.toFixed(1)} s (${Math.round(published / wallS)}/s), delivered ${lat.length} (${((lat.length / Math.max(1, published)) * 100).toFixed(1)}%)`);
    console.log(`delivery latency           p50 ${pct(lat, 50).toFixed(2)} ms   p99 ${pct(lat, 99).toFixed(2)} ms   max ${(lat.at(-1) ?? NaN).toFixed(1)} ms`);
    console.log(`publisher timer lag        p50 ${pct([...lag].sort((a, b) => a - b), 50).toFixed(1)} ms   p99 ${pct([...lag].sort((a, b) => a - b), 99).toFixed(1)} ms`);
    console.log(`node process CPU           ${cpuPct}% of one core while publishing (includes the publisher)`);
  } finally {
    for (const w of workers) w.kill();
    await node.close();
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(tmp, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--client') await clientWorker(JSON.parse(process.argv[3] ?? '{}') as WorkerArgs);
else await main();
