/**
 * Shared plumbing for the figure benches (bench/p1.ts, p2.ts, p4.ts): a Gantry node as its own
 * process (`node bin/gantry.mjs serve`) on a fresh PostgreSQL database, child processes that are
 * always cleaned up, tool checks that fail loudly, wrk output parsing and the machine line.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createWriteStream, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { HttpClient } from '../../test/helpers/node.js';
import { createTestDatabase, type TestDatabase } from '../../test/helpers/pg.js';
import { createCredential, registerUser, type TestUser } from '../../test/helpers/identity.js';
import { tinyGraph } from '../../test/agents/helpers.js';

export const root = fileURLToPath(new URL('../../', import.meta.url));
export const DEFAULT_ADMIN_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

/** The PostgreSQL admin URL (DATABASE_URL, else the local server); each bench creates and drops its own databases on it. */
export function adminUrl(): string {
  process.env.DATABASE_URL ??= DEFAULT_ADMIN_URL;
  return process.env.DATABASE_URL;
}

export class BenchError extends Error {}

/** Fails loudly when a required executable is not on PATH. */
export function requireTool(name: string, install: string): string {
  const r = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
  const path = r.stdout.trim();
  if (r.status !== 0 || !path) throw new BenchError(`required tool "${name}" not found on PATH (install it: ${install})`);
  return path;
}

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const a = s.address() as net.AddressInfo;
      s.close(() => resolve(a.port));
    });
    s.on('error', reject);
  });

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export function envNum(name: string, dflt: number): number {
  const v = process.env[name];
  if (v === undefined || v === '') return dflt;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new BenchError(`${name}=${v}: expected a positive number`);
  return n;
}

export async function waitUntil(what: string, fn: () => Promise<boolean> | boolean, timeoutMs: number, everyMs = 50): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      if (await fn()) return;
    } catch {
      // not up yet
    }
    if (Date.now() > end) throw new BenchError(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

// ------------------------------------------------------------------------------------------
// cleanup: every process and database a bench starts is registered here and removed on exit,
// on error and on SIGINT/SIGTERM

type Cleanup = () => Promise<void>;
const cleanups: Cleanup[] = [];
export function onCleanup(fn: Cleanup): void {
  cleanups.push(fn);
}
async function runCleanups(): Promise<void> {
  while (cleanups.length) {
    const fn = cleanups.pop() as Cleanup;
    try {
      await fn();
    } catch (e) {
      console.error(`cleanup: ${(e as Error).message}`);
    }
  }
}

/** Runs a bench's main with cleanup on every path, a hard wall-clock bound, and exit code 0/1. */
export function runBench(name: string, main: () => Promise<void>, maxSeconds: number): void {
  let stopping = false;
  const stop = (code: number): void => {
    if (stopping) return;
    stopping = true;
    void runCleanups().finally(() => process.exit(code));
  };
  const hard = setTimeout(() => {
    console.error(`${name}: FAILED: exceeded its ${maxSeconds} s bound`);
    stop(1);
  }, maxSeconds * 1000);
  hard.unref();
  process.once('SIGINT', () => stop(130));
  process.once('SIGTERM', () => stop(143));
  main().then(
    () => stop(0),
    (e: unknown) => {
      if (stopping) return; // interrupted: the cleanup already running ended the processes this error came from
      for (const note of failureNotes) {
        const t = note();
        if (t) console.error(t);
      }
      console.error(`${name}: FAILED: ${e instanceof BenchError ? e.message : e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
      stop(1);
    },
  );
}

/** Terminates a child (SIGTERM, then SIGKILL after graceMs) and waits for its exit. */
export async function stopChild(child: ChildProcess, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill('SIGTERM');
  const t = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(t);
}

/** Spawns a child whose lifetime is bound to the bench (killed in cleanup). */
export function spawnChild(cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; stdout?: 'pipe' | 'inherit' | 'ignore'; stderr?: 'pipe' | 'inherit' } = {}): ChildProcess {
  const child = spawn(cmd, args, { cwd: root, env: opts.env ?? process.env, stdio: ['ignore', opts.stdout ?? 'pipe', opts.stderr ?? 'inherit'] });
  onCleanup(() => stopChild(child));
  return child;
}

/** Keeps the last `max` lines a child writes (stdout and stderr); printed when the bench fails. */
function keepTail(child: ChildProcess, label: string, max = 40): void {
  const tail: string[] = [];
  const take = (c: Buffer): void => {
    for (const l of c.toString('utf8').split('\n')) if (l) tail.push(l.length > 600 ? `${l.slice(0, 600)}...` : l);
    if (tail.length > max) tail.splice(0, tail.length - max);
  };
  child.stdout?.on('data', take);
  child.stderr?.on('data', take);
  failureNotes.push(() => (tail.length ? `--- last ${tail.length} log lines of ${label} (pid ${child.pid})\n${tail.join('\n')}` : ''));
}
const failureNotes: Array<() => string> = [];

/** Runs a command to completion and returns its stdout; throws with its stderr when it fails. */
export function runCapture(cmd: string, args: string[], timeoutMs: number, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
    onCleanup(() => stopChild(child, 1000));
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (err += c));
    const t = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (e) => reject(new BenchError(`${cmd}: ${e.message}`)));
    child.on('close', (code, signal) => {
      clearTimeout(t);
      if (code === 0) resolve(out);
      else reject(new BenchError(`${cmd} ${args.join(' ')} exited ${code ?? signal}\n${err.trim()}\n${out.trim().slice(-2000)}`));
    });
  });
}

/** Reads newline-delimited JSON from a child's stdout; resolves with the first object matching pred. */
export function jsonLines(child: ChildProcess): {
  next(pred: (o: Record<string, any>) => boolean, what: string, timeoutMs: number): Promise<Record<string, any>>;
  /** Hands every object from now on to fn; an object fn returns true for is not kept for next(). */
  each(fn: (o: Record<string, any>) => boolean): void;
} {
  const seen: Array<Record<string, any>> = [];
  const consumers: Array<(o: Record<string, any>) => boolean> = [];
  const waiters: Array<{ pred: (o: Record<string, any>) => boolean; resolve: (o: Record<string, any>) => void }> = [];
  let buf = '';
  let exited = false;
  const failers: Array<() => void> = [];
  child.stdout?.setEncoding('utf8').on('data', (c: string) => {
    buf += c;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      let o: Record<string, any>;
      try {
        o = JSON.parse(line) as Record<string, any>;
      } catch {
        process.stdout.write(`${line}\n`);
        continue;
      }
      if (consumers.some((fn) => fn(o))) continue;
      seen.push(o);
      for (const w of [...waiters])
        if (w.pred(o)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(o);
        }
    }
  });
  child.once('exit', () => {
    exited = true;
    for (const f of failers) f();
  });
  return {
    each(fn) {
      consumers.push(fn);
    },
    next(pred, what, timeoutMs) {
      const hit = seen.find(pred);
      if (hit) return Promise.resolve(hit);
      return new Promise((resolve, reject) => {
        const fail = (why: string): void => reject(new BenchError(`child ${child.pid}: ${why} waiting for ${what}`));
        if (exited) return fail('exited');
        const t = setTimeout(() => fail(`no answer in ${timeoutMs} ms`), timeoutMs);
        failers.push(() => {
          clearTimeout(t);
          fail(`exited (code ${child.exitCode ?? child.signalCode})`);
        });
        waiters.push({ pred, resolve: (o) => (clearTimeout(t), resolve(o)) });
      });
    },
  };
}

// ------------------------------------------------------------------------------------------
// the Gantry node under test, as its own process

/** The bench's environment for a single node: REDIS_URL (cluster mode) is left out. */
export function singleNodeEnv(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const { REDIS_URL: _redis, ...rest } = env;
  return rest;
}

export interface GantryProcess {
  pid: number;
  origin: string;
  apiBase: string;
  grpcPort: number;
  db: TestDatabase;
  http: HttpClient;
  user: TestUser;
  sk: string;
  workflowId: string;
  /** Creates an ak- credential (P4's agents). */
  agentCredential(): Promise<string>;
}

/**
 * Starts `node bin/gantry.mjs serve` on free ports against a fresh database, registers a user,
 * creates an sk- credential and one workflow. Everything is removed at the bench's exit.
 */
export async function startGantry(label: string, env: Record<string, string> = {}): Promise<GantryProcess> {
  adminUrl();
  const db = await createTestDatabase(label);
  onCleanup(() => db.drop());
  const dataDir = mkdtempSync(join(os.tmpdir(), 'gantry-bench-'));
  onCleanup(async () => rmSync(dataDir, { recursive: true, force: true }));
  const httpPort = await freePort();
  const grpcPort = await freePort();
  // BENCH_NODE_ARGS: extra node flags for the node under test (e.g. --cpu-prof --cpu-prof-dir=/tmp/prof)
  const nodeArgs = (process.env.BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const child = spawnChild(process.execPath, [...nodeArgs, join(root, 'bin/gantry.mjs'), 'serve'], {
    env: {
      ...singleNodeEnv(),
      DATABASE_URL: db.url,
      GANTRY_DATA_DIR: dataDir,
      GANTRY_HTTP_HOST: '127.0.0.1',
      GANTRY_HTTP_PORT: String(httpPort),
      GANTRY_GRPC_HOST: '127.0.0.1',
      GANTRY_GRPC_PORT: String(grpcPort),
      GANTRY_DB_POOL_MAX: '20',
      GANTRY_AUTH_RATE_LIMIT_PER_MIN: '1000000',
      LOG_LEVEL: process.env.BENCH_NODE_LOG ? 'info' : 'warn',
      ...env,
    },
    stdout: 'pipe',
    stderr: 'pipe',
  });
  keepTail(child, 'gantry serve');
  if (process.env.BENCH_NODE_LOG) child.stdout?.pipe(createWriteStream(process.env.BENCH_NODE_LOG));
  let died = false;
  child.once('exit', () => (died = true));
  const origin = `http://127.0.0.1:${httpPort}`;
  await waitUntil('gantry serve to answer /healthz', async () => {
    if (died) throw new BenchError(`gantry serve exited (code ${child.exitCode ?? child.signalCode}) before it was up`);
    return (await fetch(`${origin}/healthz`)).ok;
  }, 60_000, 100).catch((e: unknown) => {
    if (died) throw new BenchError(`gantry serve exited (code ${child.exitCode ?? child.signalCode}) before it was up`);
    throw e;
  });
  const apiBase = `${origin}/api/v1`;
  const http = new HttpClient(apiBase);
  const user = await registerUser(http);
  const sk = (await createCredential(http, user, 'integration')).value;
  const wf = await http.post('/workflows', { workflow_slug: `bench-${Date.now().toString(36)}`, display_name: 'bench', workflow_json: tinyGraph(), max_retries: 0 }, { token: user.accessToken, team: user.teamId });
  if (wf.status !== 200) throw new BenchError(`create workflow: ${wf.status} ${wf.text}`);
  return {
    pid: child.pid as number,
    origin,
    apiBase,
    grpcPort,
    db,
    http,
    user,
    sk,
    workflowId: String(wf.body.id),
    agentCredential: async () => (await createCredential(http, user, 'agent')).value,
  };
}

/** utime+stime of a process in seconds (Linux /proc; USER_HZ = 100). */
/**
 * Waits until the node has stopped storing tasks (the count is unchanged over 500 ms), so a phase
 * does not inherit the backlog of the previous one.
 */
export async function quiesce(g: GantryProcess, timeoutMs = 60_000): Promise<void> {
  let last = -1;
  await waitUntil('the node to finish its submit backlog', async () => {
    const r = await g.http.get('/r/tasks?per_page=1', { token: g.sk });
    const n = Number(r.body.page_meta?.total_count);
    const same = n === last;
    last = n;
    return same;
  }, timeoutMs, 500);
}

export function procCpuS(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

// ------------------------------------------------------------------------------------------
// wrk

export interface WrkResult {
  requests: number;
  seconds: number;
  non2xx: number;
  socketErrors: number;
  rps: number;
  /** 2xx responses per second */
  okRps: number;
  p50Ms: number;
  p99Ms: number;
}

function durationMs(v: string, unit: string): number {
  const n = Number(v);
  return unit === 'us' ? n / 1000 : unit === 'ms' ? n : unit === 's' ? n * 1000 : unit === 'm' ? n * 60_000 : NaN;
}

export function parseWrk(out: string): WrkResult {
  const done = /(\d+) requests in ([\d.]+)(us|ms|s|m),/.exec(out);
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(out);
  if (!done || !rps) throw new BenchError(`could not parse wrk output:\n${out}`);
  const requests = Number(done[1]);
  const seconds = durationMs(done[2] as string, done[3] as string) / 1000;
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0);
  const se = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const socketErrors = se ? se.slice(1).reduce((s, x) => s + Number(x), 0) : 0;
  const pctl = (p: string): number => {
    const m = new RegExp(`^\\s+${p}%\\s+([\\d.]+)(us|ms|s|m)\\s*$`, 'm').exec(out);
    return m ? durationMs(m[1] as string, m[2] as string) : NaN;
  };
  return { requests, seconds, non2xx, socketErrors, rps: Number(rps[1]), okRps: (requests - non2xx) / seconds, p50Ms: pctl('50'), p99Ms: pctl('99') };
}

/** Runs wrk (threads = cores, --latency) and parses it. */
export async function wrk(url: string, o: { conns: number; seconds: number; headers?: Record<string, string>; script?: string }): Promise<WrkResult> {
  const threads = Math.max(1, Math.min(os.availableParallelism(), o.conns));
  const args = [`-t${threads}`, `-c${o.conns}`, `-d${o.seconds}s`, '--latency', '--timeout', '10s'];
  for (const [k, v] of Object.entries(o.headers ?? {})) args.push('-H', `${k}: ${v}`);
  if (o.script) args.push('-s', o.script);
  args.push(url);
  return parseWrk(await runCapture('wrk', args, (o.seconds + 30) * 1000));
}

// ------------------------------------------------------------------------------------------
// reporting

export async function pgVersion(): Promise<string> {
  const c = new pg.Client({ connectionString: adminUrl() });
  try {
    await c.connect();
  } catch (e) {
    const u = new URL(adminUrl());
    if (u.password) u.password = '***';
    throw new BenchError(`cannot reach PostgreSQL at ${u.toString()} (${(e as Error).message}); set DATABASE_URL to an admin URL of a running server`);
  }
  try {
    const r = await c.query<{ server_version: string }>('show server_version');
    return (r.rows[0]?.server_version ?? '?').split(' ')[0] as string;
  } finally {
    await c.end();
  }
}

/** One line naming the date, the machine and the versions, printed by every bench. */
export async function machineLine(): Promise<string> {
  const cpu = os.cpus()[0]?.model.replace(/\s+/g, ' ').trim() ?? '?';
  return `date=${new Date().toISOString()} nproc=${os.availableParallelism()} cpu="${cpu}" node=${process.version} postgresql=${await pgVersion()}`;
}

export const fmt = (n: number, digits = 0): string => (Number.isFinite(n) ? n.toFixed(digits) : 'NaN');

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] as number;
}
