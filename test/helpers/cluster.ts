// A cluster of real node processes on loopback (`bin/gantry.mjs serve`), one PostgreSQL database and
// one Redis (its own key prefix per fixture, or a dedicated redis-server the test can restart). Each
// node keeps its ports across restarts, so agents and clients reconnect to the same addresses.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { createClient } from 'redis';
import { createTestDatabase, type TestDatabase } from './pg.js';
import { freePort } from './child-node.js';
import { HttpClient } from './node.js';

const root = new URL('../..', import.meta.url).pathname;

export interface ClusterNodeProc {
  name: string;
  index: number;
  httpPort: number;
  grpcPort: number;
  clusterPort: number;
  baseUrl: string;
  http: HttpClient;
  child: ChildProcess | null;
  /** JSON log lines of every incarnation. */
  lines: Array<Record<string, any>>;
  alive(): boolean;
  /** Resolves with the first log line (of this incarnation on) matching pred. */
  waitLine(pred: (l: Record<string, any>) => boolean, what: string, timeoutMs?: number): Promise<Record<string, any>>;
}

export interface TestCluster {
  db: TestDatabase;
  redisUrl: string;
  prefix: string;
  nodes: ClusterNodeProc[];
  leaseMs: number;
  /** Starts node i (again); `root`: the checkout whose bin/gantry.mjs it runs (default: the previous one, else this one). */
  start(i: number, o?: { root?: string }): Promise<void>;
  kill(i: number, sig?: NodeJS.Signals): Promise<void>;
  signal(i: number, sig: NodeJS.Signals): void;
  /** Live member ids per Redis (the membership hash). */
  stop(): Promise<void>;
}

export interface ClusterOptions {
  nodes?: number;
  leaseMs?: number;
  /** Use this Redis (e.g. a dedicated server the test restarts); default REDIS_URL. */
  redisUrl?: string;
  env?: Record<string, string>;
  /** The DATABASE_URL the nodes use, from the fixture database's (e.g. through a TCP proxy the caller cuts). */
  databaseUrl?: (url: string) => string;
  /** The checkout the nodes run bin/gantry.mjs from (e.g. a worktree of a previous release); default this one. */
  root?: string;
  /** How long a node may take to start (default 60 s; a loaded machine migrating a fresh database may need more). */
  readyTimeoutMs?: number;
}

const redisBin = (): string | null => ['/usr/bin/redis-server', '/usr/local/bin/redis-server'].find((p) => existsSync(p)) ?? null;

/** Whether the cluster fixture can run here (a Redis to use), or why not. */
export function clusterSkipReason(): string | null {
  if (!process.env.REDIS_URL && !redisBin()) return 'redis-server not installed and REDIS_URL unset';
  return null;
}

/** A dedicated redis-server on a free port (for tests that restart or flush it). */
export async function startRedisServer(): Promise<{ url: string; port: number; stop(): Promise<void>; restart(): Promise<void> } | null> {
  const bin = redisBin();
  if (!bin) return null;
  const port = await freePort();
  let proc: ChildProcess | null = null;
  const up = async (): Promise<void> => {
    proc = spawn(bin, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
    for (let i = 0; i < 100; i++) {
      const r = spawnSync('redis-cli', ['-p', String(port), 'ping'], { encoding: 'utf8' });
      if (r.stdout?.trim() === 'PONG') return;
      await new Promise((res) => setTimeout(res, 50));
    }
    throw new Error('redis-server did not start');
  };
  const down = async (): Promise<void> => {
    const p = proc;
    proc = null;
    if (!p || p.exitCode !== null) return;
    const exited = new Promise((r) => p.once('exit', r));
    p.kill('SIGKILL');
    await exited;
  };
  await up();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    stop: down,
    async restart() {
      await down();
      await up();
    },
  };
}

export async function startCluster(o: ClusterOptions = {}): Promise<TestCluster> {
  const n = o.nodes ?? 3;
  const leaseMs = o.leaseMs ?? 1500;
  const redisUrl = o.redisUrl ?? process.env.REDIS_URL;
  if (!redisUrl) throw new Error('no Redis: REDIS_URL unset');
  const db = await createTestDatabase('cluster');
  const prefix = `gantry-test:${process.pid}:${randomBytes(4).toString('hex')}:`;
  // no PEM: the nodes share their token signing keys through PostgreSQL (encrypted with this secret)
  const secretKey = randomBytes(32).toString('hex');
  const dataDirs: string[] = [];
  const nodes: ClusterNodeProc[] = [];
  for (let i = 0; i < n; i++) {
    const [httpPort, grpcPort, clusterPort] = [await freePort(), await freePort(), await freePort()];
    dataDirs.push(mkdtempSync(join(tmpdir(), `gantry-cl${i}-`)));
    const lines: Array<Record<string, any>> = [];
    const waiters: Array<{ pred: (l: Record<string, any>) => boolean; resolve: (l: Record<string, any>) => void; from: number }> = [];
    const node: ClusterNodeProc & { _waiters: typeof waiters; _incarnationStart: number } = {
      name: `n${i}`,
      index: i,
      httpPort,
      grpcPort,
      clusterPort,
      baseUrl: `http://127.0.0.1:${httpPort}/api/v1`,
      http: new HttpClient(`http://127.0.0.1:${httpPort}/api/v1`),
      child: null,
      lines,
      _waiters: waiters,
      _incarnationStart: 0,
      alive() {
        return !!this.child && this.child.exitCode === null && this.child.signalCode === null;
      },
      waitLine(pred, what, timeoutMs = 30_000) {
        const from = node._incarnationStart;
        for (let k = from; k < lines.length; k++) if (pred(lines[k] as Record<string, any>)) return Promise.resolve(lines[k] as Record<string, any>);
        return new Promise((resolve, reject) => {
          const t = setTimeout(() => reject(new Error(`${node.name}: no log line for ${what} in ${timeoutMs} ms; last:\n${lines.slice(-10).map((l) => JSON.stringify(l)).join('\n')}`)), timeoutMs);
          waiters.push({ pred, from, resolve: (l) => (clearTimeout(t), resolve(l)) });
        });
      },
    };
    nodes.push(node);
  }

  const env = (i: number): Record<string, string> => {
    const clean: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('GANTRY_') && k !== 'REDIS_URL' && k !== 'DATABASE_URL') clean[k] = v;
    const nd = nodes[i] as ClusterNodeProc;
    return {
      ...clean,
      LOG_LEVEL: 'info',
      DATABASE_URL: o.databaseUrl ? o.databaseUrl(db.url) : db.url,
      REDIS_URL: redisUrl,
      GANTRY_REDIS_PREFIX: prefix,
      GANTRY_NODE_ID: nd.name,
      GANTRY_DATA_DIR: dataDirs[i] as string,
      GANTRY_HTTP_HOST: '127.0.0.1',
      GANTRY_HTTP_PORT: String(nd.httpPort),
      GANTRY_GRPC_HOST: '127.0.0.1',
      GANTRY_GRPC_PORT: String(nd.grpcPort),
      GANTRY_CLUSTER_HOST: '127.0.0.1',
      GANTRY_CLUSTER_PORT: String(nd.clusterPort),
      GANTRY_CLUSTER_ADVERTISE: `127.0.0.1:${nd.clusterPort}`,
      GANTRY_CLUSTER_LEASE_MS: String(leaseMs),
      GANTRY_SECRET_KEY: secretKey,
      GANTRY_DB_POOL_MAX: '5',
      GANTRY_DEBUG_ROUTES: 'true',
      GANTRY_OUTBOUND_ALLOWLIST: '127.0.0.1,::1,localhost',
      GANTRY_SHUTDOWN_TIMEOUT_MS: '5000',
      ...(o.env ?? {}),
    };
  };

  const roots = nodes.map(() => o.root ?? root);
  const readyMs = o.readyTimeoutMs ?? 60_000;
  const start = async (i: number, so: { root?: string } = {}): Promise<void> => {
    if (so.root) roots[i] = so.root;
    const nd = nodes[i] as ClusterNodeProc & { _waiters: Array<{ pred: (l: Record<string, any>) => boolean; resolve: (l: Record<string, any>) => void; from: number }>; _incarnationStart: number };
    nd._incarnationStart = nd.lines.length;
    const child = spawn(process.execPath, ['bin/gantry.mjs', 'serve'], { cwd: roots[i], env: env(i), stdio: ['ignore', 'pipe', 'pipe'] });
    nd.child = child;
    let buf = '';
    let err = '';
    child.stderr?.on('data', (d) => (err += String(d)).slice(-4000));
    child.stdout?.on('data', (c: Buffer) => {
      buf += c.toString();
      let k;
      while ((k = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, k);
        buf = buf.slice(k + 1);
        if (process.env.CLUSTER_TEST_LOG) process.stderr.write(`[${nd.name}] ${line}\n`);
        let j: Record<string, any>;
        try {
          j = JSON.parse(line) as Record<string, any>;
        } catch {
          j = { msg: line };
        }
        nd.lines.push(j);
        for (const w of [...nd._waiters])
          if (w.pred(j)) {
            nd._waiters.splice(nd._waiters.indexOf(w), 1);
            w.resolve(j);
          }
      }
    });
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    // ready: its "listening" line, or (quieter log levels) its /readyz
    const ready = async (): Promise<void> => {
      const deadline = Date.now() + readyMs;
      while (Date.now() < deadline && child.exitCode === null) {
        const ok = await fetch(`http://127.0.0.1:${nd.httpPort}/readyz`).then((r) => r.ok, () => false);
        if (ok) return;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error(`${nd.name} not ready in ${readyMs / 1000} s`);
    };
    await Promise.race([
      Promise.any([nd.waitLine((l) => l.msg === 'listening', `${nd.name} listening`, readyMs), ready()]),
      exited.then(() => {
        throw new Error(`${nd.name} exited at start: ${err.slice(-2000)}`);
      }),
    ]);
  };

  const kill = async (i: number, sig: NodeJS.Signals = 'SIGKILL'): Promise<void> => {
    const c = (nodes[i] as ClusterNodeProc).child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise((r) => c.once('exit', r));
    c.kill(sig);
    await exited;
  };

  // the first node migrates the database; the others start together after it. A node that cannot
  // start (e.g. a port another test took meanwhile) fails the fixture without leaving the nodes that
  // did start running: a child with piped output keeps the test process alive, so its file never ends
  // The ports were free when picked, but another test file running in parallel can bind one before
  // the node does: a first start that fails on that alone is retried on fresh ports (twice at most).
  const firstStart = async (i: number): Promise<void> => {
    for (let attempt = 0; ; attempt++) {
      try {
        return await start(i);
      } catch (e) {
        if (attempt >= 2 || !/already in use|EADDRINUSE/.test((e as Error).message)) throw e;
        await kill(i);
        const nd = nodes[i] as ClusterNodeProc;
        [nd.httpPort, nd.grpcPort, nd.clusterPort] = [await freePort(), await freePort(), await freePort()];
        nd.baseUrl = `http://127.0.0.1:${nd.httpPort}/api/v1`;
        nd.http = new HttpClient(nd.baseUrl);
      }
    }
  };
  try {
    await firstStart(0);
    await Promise.all(nodes.slice(1).map((_, k) => firstStart(k + 1)));
  } catch (e) {
    await Promise.all(
      nodes.map((nd) => {
        const c = nd.child;
        if (!c || c.exitCode !== null || c.signalCode !== null) return null;
        const gone = new Promise((r) => c.once('exit', r));
        c.kill('SIGKILL');
        return gone;
      }),
    );
    await db.drop().catch(() => undefined);
    for (const d of dataDirs) rmSync(d, { recursive: true, force: true });
    throw e;
  }

  return {
    db,
    redisUrl,
    prefix,
    nodes,
    leaseMs,
    start,
    kill,
    signal(i, sig) {
      (nodes[i] as ClusterNodeProc).child?.kill(sig);
    },
    async stop() {
      for (let i = 0; i < nodes.length; i++) {
        const c = (nodes[i] as ClusterNodeProc).child;
        if (c && c.signalCode === null && c.exitCode === null) {
          c.kill('SIGCONT');
          c.kill('SIGKILL');
        }
      }
      await Promise.all(nodes.map((nd) => (nd.child && nd.child.exitCode === null && nd.child.signalCode === null ? new Promise((r) => nd.child?.once('exit', r)) : null)));
      // drop this fixture's Redis keys (never FLUSHALL: other tests share the server)
      try {
        const c = createClient({ url: redisUrl });
        await c.connect();
        for await (const keys of c.scanIterator({ MATCH: `${prefix}*`, COUNT: 500 })) if (keys.length) await c.del(keys);
        await c.close();
      } catch {
        /* a dedicated server may be gone */
      }
      await db.drop();
      for (const d of dataDirs) rmSync(d, { recursive: true, force: true });
    },
  };
}

/** Waits until `n` of the team's agents are online as the given node sees them (GET /agents). */
export async function agentsOnline(node: ClusterNodeProc, user: { accessToken: string; teamId: string }, n: number, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await node.http.get('/agents?per_page=100', { token: user.accessToken, team: user.teamId }).catch(() => null);
    const online = r?.status === 200 ? (r.body.agent_list as Array<Record<string, any>>).filter((a) => a.agent_status !== 'offline').length : -1;
    if (online === n) return;
    if (Date.now() > deadline) throw new Error(`${node.name}: ${n} agent(s) online not reached in ${timeoutMs} ms (last: ${online})`);
    await new Promise((res) => setTimeout(res, 100));
  }
}
