/**
 * bench:agents — 200 simulated agents (in-process gRPC clients: the real AgentClient + AgentRunner
 * with the simulate executor) connected to one node (`gantry serve` as a child process, so its CPU
 * and memory are measured alone). Prints: connect time, node CPU and RSS while idle with heartbeats,
 * and end-to-end tasks/s with instant simulated tasks (run -> assign -> ack -> PNG upload through
 * a presigned PUT -> result -> completed). Figures only, no assertions.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npm run bench:agents
 *   env: BENCH_AGENTS (200), BENCH_TASKS (2000), BENCH_IDLE_S (10), BENCH_HEARTBEAT_S (2), BENCH_INFLIGHT (64),
 *        BENCH_AGENT_TRANSPORT (grpc: the gRPC port; ws: the WebSocket at /api/v1/agents/connect on the HTTP port)
 *   P8 (1,000 idle agents' CPU): BENCH_AGENTS=1000 BENCH_TASKS=0 BENCH_HEARTBEAT_S=10 BENCH_IDLE_S=30, once per transport
 */
import { spawn } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createLogger } from '../src/shared/logger.js';
import { startAgent, type AgentConfig, type RunningAgent } from '../src/agent/main.js';
import { SimulateExecutor } from '../src/agent/executors/index.js';
import { HttpClient } from '../test/helpers/node.js';
import { singleNodeEnv } from './lib/harness.js';
import { createTestDatabase } from '../test/helpers/pg.js';
import { createCredential, registerUser } from '../test/helpers/identity.js';
import { tinyGraph, tmpDir, waitFor } from '../test/agents/helpers.js';

const N_AGENTS = Number(process.env.BENCH_AGENTS ?? 200);
const N_TASKS = Number(process.env.BENCH_TASKS ?? 2000);
const IDLE_S = Number(process.env.BENCH_IDLE_S ?? 10);
const HEARTBEAT_S = Number(process.env.BENCH_HEARTBEAT_S ?? 2);
const INFLIGHT = Number(process.env.BENCH_INFLIGHT ?? 64);
const TRANSPORT = process.env.BENCH_AGENT_TRANSPORT ?? 'grpc';
if (TRANSPORT !== 'grpc' && TRANSPORT !== 'ws') throw new Error(`BENCH_AGENT_TRANSPORT: grpc or ws, got ${TRANSPORT}`);
const root = fileURLToPath(new URL('../', import.meta.url));
const CLK = 100; // USER_HZ on Linux

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const a = s.address() as net.AddressInfo;
      s.close(() => resolve(a.port));
    });
    s.on('error', reject);
  });

/** utime+stime (s) and RSS (MB) of a process, from /proc. */
function procStats(pid: number): { cpuS: number; rssMb: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const cpuS = (Number(f[11]) + Number(f[12])) / CLK;
  const rss = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return { cpuS, rssMb: Math.round(Number(rss?.[1] ?? 0) / 1024) };
}

async function measure<T>(pid: number, fn: () => Promise<T>): Promise<{ r: T; cpuPercent: number; wallS: number; rssMb: number; benchCpuPercent: number }> {
  const a = procStats(pid);
  const ca = process.cpuUsage();
  const t0 = performance.now();
  const r = await fn();
  const wallS = (performance.now() - t0) / 1000;
  const b = procStats(pid);
  const cb = process.cpuUsage(ca);
  const pct = (s: number): number => Math.round((s / wallS) * 1000) / 10;
  return { r, cpuPercent: pct(b.cpuS - a.cpuS), wallS, rssMb: b.rssMb, benchCpuPercent: pct((cb.user + cb.system) / 1e6) };
}

async function main(): Promise<void> {
  const db = await createTestDatabase('bench_agents');
  const dataDir = tmpDir('gantry-bench-');
  const httpPort = await freePort();
  const grpcPort = await freePort();
  const node = spawn(process.execPath, [join(root, 'bin/gantry.mjs'), 'serve'], {
    cwd: root,
    env: {
      ...singleNodeEnv(),
      DATABASE_URL: db.url,
      GANTRY_DATA_DIR: dataDir,
      GANTRY_HTTP_HOST: '127.0.0.1',
      GANTRY_HTTP_PORT: String(httpPort),
      GANTRY_GRPC_HOST: '127.0.0.1',
      GANTRY_GRPC_PORT: String(grpcPort),
      GANTRY_HEARTBEAT_INTERVAL_S: String(HEARTBEAT_S),
      GANTRY_DB_POOL_MAX: '20',
      GANTRY_AUTH_RATE_LIMIT_PER_MIN: '100000',
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const agents: RunningAgent[] = [];
  const stateDir = tmpDir('gantry-bench-state-');
  try {
    const http = new HttpClient(`http://127.0.0.1:${httpPort}/api/v1`);
    await waitFor('node up', async () => (await fetch(`http://127.0.0.1:${httpPort}/healthz`)).ok, 60_000, 200);
    const pid = node.pid as number;
    const user = await registerUser(http);
    const ak = await createCredential(http, user, 'agent');
    const sk = await createCredential(http, user, 'integration');
    const wf = await http.post('/workflows', { workflow_slug: `bench-${Date.now().toString(36)}`, display_name: 'bench', workflow_json: tinyGraph(), max_retries: 0 }, { token: user.accessToken, team: user.teamId });
    if (wf.status !== 200) throw new Error(`create workflow: ${wf.status} ${wf.text}`);
    const base = procStats(pid);
    console.log(`node pid ${pid}: RSS ${base.rssMb} MB before agents; ${os.cpus().length} CPUs on this host (agents share them)`);

    // --- connect
    const logger = createLogger('silent');
    const conn = await measure(pid, async () => {
      for (let i = 0; i < N_AGENTS; i++) {
        const cfg: AgentConfig = {
          server: TRANSPORT === 'ws' ? `ws://127.0.0.1:${httpPort}` : `127.0.0.1:${grpcPort}`,
          credential: ak.value,
          labels: ['bench'],
          modelsDir: undefined,
          customNodesDir: undefined,
          executor: 'simulate',
          comfyUrl: '',
          nsBinDir: undefined,
          concurrency: 1,
          machineId: `bench-${i}`,
          stateDir,
          name: `bench-${i}`,
          tls: false,
          caFile: undefined,
          gpus: [{ name: 'NVIDIA RTX 4090', vram_gb: 24 }],
          workDir: join(dataDir, 'agent-work', String(i)),
          drainTimeoutS: 10,
          simulateDurationMs: 0,
          simulateSteps: 0,
          window: 256,
          containerRuntime: 'none',
          dockerSocket: '/var/run/docker.sock',
          tunnelUrl: '',
          containerHealthIntervalMs: 5000,
          logLevel: 'silent',
          tracing: 'off',
        };
        agents.push(await startAgent(cfg, { logger, executor: new SimulateExecutor({ durationMs: 0, steps: 0, imageSize: 16 }), noGpuProbe: true, rescanMs: 0 }));
      }
      await waitFor('all agents connected', () => agents.every((a) => a.client.connected), 60_000, 20);
      await waitFor('all agents online', async () => {
        const r = await http.get('/agents?per_page=1', { token: user.accessToken, team: user.teamId });
        return r.body.page_meta?.total_count === N_AGENTS;
      }, 60_000, 200);
    });
    console.log(`connect: ${N_AGENTS} agents over ${TRANSPORT} in ${conn.wallS.toFixed(2)} s; node CPU ${conn.cpuPercent}% of one core; RSS ${conn.rssMb} MB (agents process CPU ${conn.benchCpuPercent}%)`);

    // --- idle with heartbeats
    const idle = await measure(pid, () => new Promise((r) => setTimeout(r, IDLE_S * 1000)));
    console.log(`idle: ${N_AGENTS} agents over ${TRANSPORT}, heartbeat every ${HEARTBEAT_S} s (${Math.round(N_AGENTS / HEARTBEAT_S)} heartbeats/s) for ${IDLE_S} s: node CPU ${idle.cpuPercent}% of one core; RSS ${idle.rssMb} MB (agents process CPU ${idle.benchCpuPercent}%)`);

    // --- end-to-end throughput with instant simulated tasks
    const before = agents.reduce((s, a) => s + a.runner.completed, 0);
    let submitted = 0;
    let submitErrors = 0;
    const run = await measure(pid, async () => {
      const submit = async (): Promise<void> => {
        while (submitted < N_TASKS) {
          submitted++;
          const r = await http.post(`/r/workflows/${wf.body.id}/run`, { parameters: {} }, { token: sk.value });
          if (r.status !== 202) submitErrors++;
        }
      };
      await Promise.all(Array.from({ length: INFLIGHT }, submit));
      await waitFor('all tasks completed', async () => {
        const r = await http.get('/r/tasks?task_status=completed&per_page=1', { token: sk.value });
        return r.body.page_meta?.total_count >= N_TASKS - submitErrors;
      }, 600_000, 100);
    });
    const done = agents.reduce((s, a) => s + a.runner.completed, 0) - before;
    const failed = await http.get('/r/tasks?task_status=failed&per_page=1', { token: sk.value });
    console.log(
      `tasks: ${N_TASKS} submitted (${INFLIGHT} concurrent submitters, ${submitErrors} refused), ${done} completed by agents, ${failed.body.page_meta?.total_count ?? '?'} failed, in ${run.wallS.toFixed(2)} s = ${(done / run.wallS).toFixed(1)} tasks/s end to end; node CPU ${run.cpuPercent}% of one core; RSS ${run.rssMb} MB (agents + submitters process CPU ${run.benchCpuPercent}%)`,
    );
  } finally {
    await Promise.all(agents.map((a) => a.stop().catch(() => undefined)));
    node.kill('SIGTERM');
    await new Promise((r) => node.once('exit', r));
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(stateDir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    console.error(e);
    process.exit(1);
  },
);
