// Smoke test for the benchmarks in bench/: each one runs as a child process with the smallest
// parameters that still exercise it, and must exit 0 and print its figure lines. No timing
// assertions: the figures are printed so CI logs carry them. DATABASE_URL (set by
// scripts/run-tests.mjs) is passed through; each bench creates and drops its own database.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../', import.meta.url));
const TEST_TIMEOUT_MS = 120_000;
const CHILD_TIMEOUT_MS = 110_000; // kill the bench before the test times out, so its output is still printed

interface BenchRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  seconds: number;
}

function runBench(args: string[], env: Record<string, string> = {}): Promise<BenchRun> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    // its own process group, so a hung bench is killed together with what it started (gantry serve, SSE client workers)
    const child = spawn(process.execPath, args, { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    const killGroup = (): void => {
      try {
        if (child.pid) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(() => {
      stderr += `\nsmoke: killed after ${CHILD_TIMEOUT_MS / 1000} s\n`;
      killGroup();
    }, CHILD_TIMEOUT_MS);
    let settled = false;
    const done = (code: number | null, signal: NodeJS.Signals | null): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, seconds: (performance.now() - t0) / 1000 });
    };
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('exit', (code, signal) => {
      // 'close' waits for the output pipes; a process the bench left behind would hold them open
      const grace = setTimeout(() => {
        stderr += '\nsmoke: the bench exited but left processes holding its output open; killed them\n';
        killGroup();
        child.stdout.destroy();
        child.stderr.destroy();
        done(code === 0 ? 1 : code, signal);
      }, 5_000);
      child.once('close', () => {
        clearTimeout(grace);
        done(code, signal);
      });
    });
  });
}

function check(name: string, r: BenchRun, figures: RegExp[]): void {
  console.log(`--- ${name} (${r.seconds.toFixed(1)} s, exit ${r.code ?? r.signal})\n${r.stdout.trimEnd()}`);
  if (r.stderr.trim()) console.log(`--- ${name} stderr\n${r.stderr.trimEnd()}`);
  assert.equal(r.code, 0, `${name} exited ${r.code ?? r.signal}\n${r.stderr.slice(-4000)}`);
  for (const re of figures) assert.match(r.stdout, re, `${name} did not print a line matching ${re}`);
}

test('bench/tasks.ts runs and prints its figures', { timeout: TEST_TIMEOUT_MS }, async () => {
  // N=20 tasks, C=2 concurrent clients, A=2 fake agents
  const r = await runBench(['--import', 'tsx', 'bench/tasks.ts', '20', '2', '2']);
  check('bench/tasks.ts 20 2 2', r, [
    /^database: .*N=20 tasks, 2 concurrent clients, 2 agents/m,
    /^accepted: [\d.]+ tasks\/s \(202 in [\d.]+ s\)$/m,
    /^202 latency: p50 [\d.]+ ms, p99 [\d.]+ ms$/m,
    /^submit -> dispatch: p50 [\d.]+ ms, p99 [\d.]+ ms$/m,
    /^completed \d+\/20; end-to-end [\d.]+ tasks\/s$/m,
  ]);
});

for (const transport of ['grpc', 'ws']) {
  test(`bench/agents.ts runs and prints its figures (agents over ${transport})`, { timeout: TEST_TIMEOUT_MS }, async () => {
    // heartbeat every 1 s so the 1 s idle window sees heartbeats; few submitters for 10 tasks
    const r = await runBench(['--import', 'tsx', 'bench/agents.ts'], {
      BENCH_AGENTS: '5',
      BENCH_TASKS: '10',
      BENCH_IDLE_S: '1',
      BENCH_HEARTBEAT_S: '1',
      BENCH_INFLIGHT: '4',
      BENCH_AGENT_TRANSPORT: transport,
    });
    check(`bench/agents.ts (5 agents over ${transport}, 10 tasks, 1 s idle)`, r, [
      /^node pid \d+: RSS \d+ MB before agents/m,
      new RegExp(`^connect: 5 agents over ${transport} in [\\d.]+ s; node CPU [\\d.]+% of one core; RSS \\d+ MB`, 'm'),
      new RegExp(`^idle: 5 agents over ${transport}, heartbeat every 1 s .* for 1 s: node CPU [\\d.]+% of one core; RSS \\d+ MB`, 'm'),
      /^tasks: 10 submitted .* completed by agents, .* = [\d.]+ tasks\/s end to end; node CPU [\d.]+% of one core; RSS \d+ MB/m,
    ]);
  });
}

test('bench/sse.ts runs and prints its figures', { timeout: TEST_TIMEOUT_MS }, async () => {
  // N=50 streams for 2 s, with --expose-gc as `npm run bench:sse` does
  const r = await runBench(['--expose-gc', '--import', 'tsx', 'bench/sse.ts', '50', '2']);
  check('bench/sse.ts 50 2', r, [
    /^connected \d+\/50 streams in [\d.]+ s/m,
    /^streams\s+\d+$/m,
    /^node RSS with streams\s+\d+ MB\s+->\s+-?[\d.]+ KB per stream$/m,
    /^events published\s+\d+ in [\d.]+ s .*delivered \d+/m,
    /^delivery latency\s+p50 [\d.]+ ms\s+p99 [\d.]+ ms/m,
    /^publisher timer lag\s+p50 -?[\d.]+ ms\s+p99 -?[\d.]+ ms$/m,
    /^node process CPU\s+[\d.]+% of one core/m,
  ]);
});

test('bench/soak.ts runs and prints its figure line', { timeout: TEST_TIMEOUT_MS }, async () => {
  // 30 s of load sampled every 6 s (the real run is 30 minutes, not in CI): the machinery, not a verdict
  const r = await runBench(['--import', 'tsx', 'bench/soak.ts'], { BENCH_SOAK_MIN: '0.5', BENCH_SOAK_EVERY_S: '6', BENCH_SOAK_RATE: '5', BENCH_SOAK_FOLLOWERS: '1', BENCH_AGENTS: '1', BENCH_SLOTS: '4' });
  check('bench/soak.ts (30 s, 5 runs/s)', r, [/^SOAK minutes=[\d.]+ tasks=\d+ rss_mb_start=[\d.]+ rss_mb_end=[\d.]+ .*fds_start=\d+ fds_end=\d+ /m]);
});

const hasTool = (name: string): boolean => spawnSync('sh', ['-c', `command -v ${name}`]).status === 0;

// The issue 11 figure benches, at the smallest settings. P1 and P2 need wrk (and P2 pgbench), which
// .ci/run installs; where one is missing the test says so and skips.
test('bench/p1.ts runs and prints its figure line', { timeout: TEST_TIMEOUT_MS }, async (t) => {
  if (!hasTool('wrk')) return t.skip('wrk is not installed (apt-get install -y wrk)');
  const r = await runBench(['--import', 'tsx', 'bench/p1.ts'], { BENCH_DURATION_S: '1', BENCH_WARMUP_S: '1', BENCH_CONNS: '4' });
  check('bench/p1.ts (1 s, 4 conns)', r, [/^P1 gantry_rps=\d+ uws_rps=\d+ ratio=[\d.]+ /m]);
});

test('bench/p2.ts runs and prints its figure line', { timeout: TEST_TIMEOUT_MS }, async (t) => {
  if (!hasTool('wrk') || !hasTool('pgbench')) return t.skip('wrk or pgbench is not installed (apt-get install -y wrk postgresql-client)');
  const r = await runBench(['--import', 'tsx', 'bench/p2.ts'], { BENCH_DURATION_S: '1', BENCH_WARMUP_S: '1', BENCH_CONNS: '4', BENCH_RATE: '50', BENCH_PGBENCH_CLIENTS: '2' });
  check('bench/p2.ts (1 s, 50/s offered, 4 conns)', r, [/^P2 sat_submits_per_s=\d+ .*open_accepted_per_s=\d+ .*pgbench_tps=\d+ ratio=[\d.]+ /m]);
});

test('bench/p4.ts runs and prints its figure line', { timeout: TEST_TIMEOUT_MS }, async () => {
  const r = await runBench(['--import', 'tsx', 'bench/p4.ts'], { BENCH_TASKS: '20', BENCH_CONNS: '4', BENCH_AGENTS: '2', BENCH_SLOTS: '2', BENCH_WARMUP_TASKS: '0' });
  check('bench/p4.ts (20 tasks, 2 agents x 2 slots)', r, [/^P4 tasks_per_s=\d+ submits_per_s=\d+ .*tasks=20 /m]);
});

test('bench/p3.ts runs and prints its figure line', { timeout: TEST_TIMEOUT_MS }, async () => {
  // two phases of 1 s (20 and 40 runs/s offered), 2 agents x 2 slots, no warm-up: the shape of the line, no times
  const r = await runBench(['--import', 'tsx', 'bench/p3.ts'], { BENCH_RATES: '20,40', BENCH_DURATION_S: '1', BENCH_AGENTS: '2', BENCH_SLOTS: '2', BENCH_WARMUP_S: '0' });
  check('bench/p3.ts (20 and 40 runs/s for 1 s, 2 agents x 2 slots)', r, [
    /^rate 20\/s offered {2}20\/20 202, 20 ACKed, \d+ were waiting at some point;/m,
    /^P3 rate=20 ack_p50_ms=[\d.]+ ack_p99_ms=[\d.]+ ack_mean_ms=[\d.]+ accept_p50_ms=[\d.]+ accept_p99_ms=[\d.]+ acked=20\/20 waited=\d+ rate=40 ack_p50_ms=[\d.]+ ack_p99_ms=[\d.]+ .*acked=40\/40 waited=\d+ warm_wait_s=\d+ agents=2 slots=2 .*hatchet_avg_ms=40 /m,
  ]);
});
