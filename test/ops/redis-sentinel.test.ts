/**
 * Redis behind Sentinel (issue 33 §2): three nodes with REDIS_SENTINELS / REDIS_SENTINEL_MASTER (no
 * REDIS_URL) on a master, a replica and three sentinels (redis-server processes on free ports in a
 * temp dir), two simulate agents and continuous submits. The master is killed (SIGKILL) under load:
 * the sentinels promote the replica, every node logs the new master, the membership keeps working on
 * it (a node killed afterwards is removed from the other nodes' view, which needs heartbeats, the
 * dead-member script and the change channel on the promoted replica), a credential revoked during
 * the switch is refused on every node at once and after it, an event stream opened after
 * the switch follows a new task to its end, and no accepted task is lost (each ends with exactly one
 * terminal event). A second test (its own Redis, sentinels and three nodes with a small per-credential
 * limit) checks the request rate limits across the same failover: while no master answers each node
 * counts on its own (fail open up to the limit per node, then 429 with Retry-After), and once the
 * nodes follow the promoted replica the count is shared there again (refused on every node past the
 * limit; a limiter left on the dead master, or still counting per node, fails it).
 * Skipped, naming the package, when redis-server/redis-cli are missing (Debian: redis-server; the
 * sentinel mode is the same binary, packaged as a service by redis-sentinel).
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { startCluster, agentsOnline, type TestCluster, type ClusterNodeProc } from '../helpers/cluster.js';
import { setupTeam, createWorkflow, spawnAgent, tmpDir, tinyGraph, waitFor, type AgentProcess } from '../agents/helpers.js';
import type { HttpClient, TestNode } from '../helpers/node.js';
import { createCredential } from '../helpers/identity.js';
import { ConfigError, loadConfig } from '../../src/shared/config.js';
import { nodeSettings } from '../../src/node/settings.js';

const hasRedis = spawnSync('sh', ['-c', 'command -v redis-server && command -v redis-cli']).status === 0;
const MASTER = 'gantry-ha';

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const a = s.address();
  await new Promise<void>((r) => s.close(() => r()));
  if (!a || typeof a !== 'object') throw new Error('no port');
  return a.port;
}

const cli = (port: number, ...args: string[]): string => spawnSync('redis-cli', ['-p', String(port), ...args], { encoding: 'utf8' }).stdout.trim();

const procs: ChildProcess[] = [];
const agents: AgentProcess[] = [];
const clusters: TestCluster[] = [];
const dirs: string[] = [];
after(async () => {
  for (const p of agents) p.kill('SIGKILL');
  await Promise.all(agents.map((p) => p.exited));
  for (const cl of clusters) await cl.stop();
  for (const p of procs)
    if (p.exitCode === null && p.signalCode === null) {
      const gone = new Promise((r) => p.once('exit', r));
      p.kill('SIGKILL');
      await gone;
    }
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function redis(args: string[]): ChildProcess {
  const p = spawn('redis-server', args, { stdio: 'ignore' });
  procs.push(p);
  return p;
}

interface SentinelRedis {
  master: ChildProcess;
  mPort: number;
  rPort: number;
  sPorts: number[];
}

/** A master, its replica and three sentinels (quorum 2, master down after 1 s) in a new temp dir. */
async function startSentinelRedis(): Promise<SentinelRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-sentinel-'));
  dirs.push(dir);
  const [mPort, rPort] = [await freePort(), await freePort()];
  const master = redis(['--port', String(mPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir]);
  redis(['--port', String(rPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--replicaof', '127.0.0.1', String(mPort)]);
  await waitFor('the replica in sync', () => /master_link_status:up/.test(cli(rPort, 'info', 'replication')), 15_000, 100);
  const sPorts = [await freePort(), await freePort(), await freePort()];
  for (const p of sPorts) {
    const conf = join(dir, `sentinel-${p}.conf`);
    writeFileSync(conf, [`port ${p}`, 'bind 127.0.0.1', `dir ${dir}`, `sentinel monitor ${MASTER} 127.0.0.1 ${mPort} 2`, `sentinel down-after-milliseconds ${MASTER} 1000`, `sentinel failover-timeout ${MASTER} 5000`, `sentinel parallel-syncs ${MASTER} 1`, ''].join('\n'));
    redis([conf, '--sentinel']);
  }
  await waitFor('the sentinels agree (quorum reachable, replica known)', () => sPorts.every((p) => /^OK/.test(cli(p, 'sentinel', 'ckquorum', MASTER)) && cli(p, 'sentinel', 'replicas', MASTER).includes(String(rPort))), 30_000, 200);
  return { master, mPort, rPort, sPorts };
}

const sentinelEnv = (sPorts: number[], extra: Record<string, string> = {}): Record<string, string> => ({ REDIS_URL: '', REDIS_SENTINELS: sPorts.map((p) => `127.0.0.1:${p}`).join(','), REDIS_SENTINEL_MASTER: MASTER, ...extra });

/**
 * Waits until every node counting `key` has read its count back from the Redis on `port` after
 * now: MONITOR lists the window counters' syncs (EVAL) per client address in the order Redis runs
 * them. After a marker command, two syncs of the key from each of the `nodes` addresses (each node
 * has one command connection) mean the first of the two, run after the marker, has been applied (a
 * node starts a sync only once the previous one is done), so each node's next decision uses a count
 * read after the marker.
 */
async function nodesReadBack(port: number, key: string, nodes: number): Promise<void> {
  const mon = spawn('redis-cli', ['-p', String(port), 'monitor'], { stdio: ['ignore', 'pipe', 'ignore'] });
  procs.push(mon);
  const lines: string[] = [];
  let rest = '';
  mon.stdout.setEncoding('utf8').on('data', (d: string) => {
    const parts = (rest + d).split('\n');
    rest = parts.pop() ?? '';
    lines.push(...parts);
  });
  try {
    await waitFor('MONITOR started', () => {
      cli(port, 'ping');
      return lines.some((l) => l.includes('"ping"') || l.includes('"PING"'));
    }, 10_000, 50);
    const marker = `read-back-${randomUUID()}`;
    cli(port, 'echo', marker);
    const addrOf = (l: string): string | null => (/\] "eval"/i.test(l) && l.includes(key) ? (/\[\d+ ([^\]]+)\]/.exec(l)?.[1] ?? null) : null);
    await waitFor(`every node read the count of ${key} back from :${port}`, () => {
      const at = lines.findIndex((l) => l.includes(marker));
      if (at < 0) return false;
      const after = new Map<string, number>();
      for (const a of lines.slice(at + 1).map(addrOf)) if (a !== null) after.set(a, (after.get(a) ?? 0) + 1);
      return [...after.values()].filter((n) => n >= 2).length >= nodes;
    }, 15_000, 50);
  } finally {
    const gone = new Promise((r) => mon.once('exit', r));
    mon.kill('SIGKILL');
    await gone;
  }
}

test('Redis master killed under load behind Sentinel: the nodes follow the promoted replica, membership and events continue, no task lost', { skip: hasRedis ? false : 'redis-server/redis-cli not installed (Debian packages redis-server, redis-sentinel)', timeout: 240_000 }, async () => {
  const { master, mPort, rPort, sPorts } = await startSentinelRedis();
  const cl = await startCluster({ nodes: 3, leaseMs: 1500, redisUrl: 'redis://sentinel-mode.invalid', env: sentinelEnv(sPorts) });
  clusters.push(cl);
  // the cluster runs on the master: its membership hash is there
  await waitFor('membership on the master', () => cli(mPort, 'hlen', `${cl.prefix}members`) === '3', 30_000, 100);
  const s = await setupTeam({ http: cl.nodes[0]?.http } as unknown as TestNode);
  const servers = cl.nodes.map((n) => `127.0.0.1:${n.grpcPort}`).join(',');
  for (let i = 0; i < 2; i++) agents.push(spawnAgent(['--server', servers, '--credential', s.ak.value, '--executor', 'simulate', '--state-dir', tmpDir('gantry-sentinel-agent-'), '--simulate-duration-ms', '300', '--simulate-steps', '3', '--concurrency', '2']));
  await agentsOnline(cl.nodes[0] as ClusterNodeProc, s.user, 2);
  const wf = await createWorkflow({ http: cl.nodes[0]?.http } as unknown as TestNode, s, tinyGraph(), { max_retries: 2 });

  const accepted: string[] = [];
  const refusals = new Map<string, number>();
  let submitting = true;
  let k = 0;
  const submitter = (async () => {
    while (submitting) {
      const nd = cl.nodes[k++ % 2]; // nodes 0 and 1 (node 2 is killed later)
      try {
        const res = await nd?.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: `s ${k}` } }, { token: s.sk.value });
        if (res?.status === 202) accepted.push(res.body.task_id as string);
        else refusals.set(String(res?.status), (refusals.get(String(res?.status)) ?? 0) + 1);
      } catch {
        refusals.set('network', (refusals.get('network') ?? 0) + 1);
      }
      await new Promise((res) => setTimeout(res, 100));
    }
  })();
  const db = new pg.Client({ connectionString: cl.db.url });
  await db.connect();
  try {
    const completed = async (): Promise<number> => (await db.query<{ n: number }>(`select count(*)::int as n from tasks where id = any($1::uuid[]) and task_status = 'completed'`, [accepted])).rows[0]?.n ?? 0;
    await waitFor('load running (5 completed)', async () => (await completed()) >= 5, 60_000, 100);

    // a second sk-, verified (and cached) by every node, to revoke during the switch
    const sk2 = await createCredential(cl.nodes[0]?.http as HttpClient, s.user, 'integration');
    const probe = `/r/tasks/${randomUUID()}`;
    for (const nd of cl.nodes) assert.equal((await nd.http.get(probe, { token: sk2.value })).status, 404, `${nd.name} accepts the second key`);

    // the failover: the master dies, the sentinels promote the replica, every node follows
    const marks = cl.nodes.map((n) => n.lines.length);
    const acceptedBefore = accepted.length;
    const dead = new Promise((r) => master.once('exit', r));
    master.kill('SIGKILL');
    await dead;
    // during the switch (no master yet): once a node sees the outage its identity cache is bypassed,
    // so a revocation (which cannot be broadcast now) is effective on every node's next request
    for (const [i, n] of cl.nodes.entries()) await n.waitLine((l) => l.msg.startsWith('invalidation broadcast: subscription lost') && n.lines.indexOf(l) >= (marks[i] as number), `${n.name} sees the outage`, 30_000);
    const switching = cli(sPorts[0] as number, 'sentinel', 'get-master-addr-by-name', MASTER).split('\n')[1] === String(mPort);
    const del = await cl.nodes[0]?.http.del(`/credentials/${sk2.id}`, { token: s.user.accessToken, team: s.user.teamId });
    assert.ok(del && del.status < 300, `revoke during the switch: ${del?.status} ${del?.text}`);
    for (const nd of cl.nodes) assert.equal((await nd.http.get(probe, { token: sk2.value })).status, 401, `${nd.name} refuses the key revoked during the switch`);
    await waitFor('the sentinels promote the replica', () => sPorts.every((p) => cli(p, 'sentinel', 'get-master-addr-by-name', MASTER).split('\n')[1] === String(rPort)), 60_000, 200);
    for (const [i, n] of cl.nodes.entries()) await n.waitLine((l) => l.msg === 'redis master changed (sentinel failover)' && l.master === `127.0.0.1:${rPort}` && n.lines.indexOf(l) >= (marks[i] as number), `${n.name} follows the new master`, 60_000);
    assert.match(cli(rPort, 'role'), /^master/);
    // on the new master: the revoked key stays refused everywhere, the other one still works
    for (const nd of cl.nodes) {
      assert.equal((await nd.http.get(probe, { token: sk2.value })).status, 401, `${nd.name} still refuses the revoked key`);
      assert.equal((await nd.http.get(probe, { token: s.sk.value })).status, 404, `${nd.name} accepts the other key`);
    }

    // load continues on the promoted replica
    const doneAtSwitch = await completed();
    await waitFor('tasks accepted and completed after the switch', async () => accepted.length > acceptedBefore + 10 && (await completed()) > doneAtSwitch + 5, 60_000, 100);

    // membership on the new master: node 2 dies, nodes 0 and 1 drop it from their view
    await cl.kill(2);
    for (const n of cl.nodes.slice(0, 2))
      await n.waitLine((l) => l.msg === 'cluster membership changed' && ((Array.isArray(l.members) && l.members.length === 2) || l.members === 2), `${n.name} sees 2 members`, 30_000);
    await waitFor('the membership hash on the promoted replica', () => cli(rPort, 'hlen', `${cl.prefix}members`) === '2', 30_000, 100);

    // an event stream opened on node 1 follows a task submitted on node 0 to its end
    const r = await cl.nodes[0]?.http.post(`/r/workflows/${wf}/run`, { parameters: { prompt: 'after the switch' } }, { token: s.sk.value });
    assert.equal(r?.status, 202, r?.text);
    const id = r?.body.task_id as string;
    accepted.push(id);
    const sse = await fetch(`${cl.nodes[1]?.baseUrl}/r/tasks/${id}/events`, { headers: { authorization: `Bearer ${s.sk.value}` }, signal: AbortSignal.timeout(60_000) });
    assert.equal(sse.status, 200);
    assert.match(await sse.text(), /event: completed/);

    submitting = false;
    await submitter;
    await waitFor(`all ${accepted.length} tasks terminal`, async () => {
      const res = await db.query<{ n: number }>(`select count(*)::int as n from tasks where id = any($1::uuid[]) and task_status not in ('completed','failed','cancelled')`, [accepted]);
      return res.rows[0]?.n === 0;
    }, 120_000, 500);
    const term = await db.query<{ task_id: string; n: number }>(`select task_id, count(*)::int as n from task_events where task_id = any($1::uuid[]) and event_type in ('completed','failed','cancelled') group by task_id`, [accepted]);
    const byTask = new Map(term.rows.map((x) => [x.task_id, x.n]));
    for (const t of accepted) assert.equal(byTask.get(t), 1, `task ${t}: exactly one terminal event`);
    const done = await completed();
    console.log(`sentinel failover: revocation issued ${switching ? 'before' : 'after'} the promotion; ${accepted.length} accepted (${acceptedBefore} before the kill), ${done} completed; refused: ${JSON.stringify(Object.fromEntries(refusals))}`);
    assert.ok(accepted.length > 30, `load ran (${accepted.length} accepted)`);
  } finally {
    submitting = false;
    await submitter;
    await db.end();
  }
});

test('rate limits across the Sentinel failover: each node counts on its own while no master answers, cluster-wide again on the promoted replica', { skip: hasRedis ? false : 'redis-server/redis-cli not installed (Debian packages redis-server, redis-sentinel)', timeout: 120_000 }, async () => {
  const L = 9; // per credential per minute on the runtime surface; 3 per node when spread over 3 nodes
  const { master, mPort, rPort, sPorts } = await startSentinelRedis();
  const cl = await startCluster({ nodes: 3, leaseMs: 1500, redisUrl: 'redis://sentinel-mode.invalid', env: sentinelEnv(sPorts, { GANTRY_RATE_LIMIT_RUNTIME_PER_MIN: String(L) }) });
  clusters.push(cl);
  const s = await setupTeam({ http: cl.nodes[0]?.http } as unknown as TestNode);
  const probe = `/r/tasks/${randomUUID()}`; // 404 when admitted: costs one request of the limit
  // the credential's count in a Redis (all its slots): what the nodes synced there
  const countIn = (port: number, credId: string): number => Number(cli(port, 'eval', "local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do n = n + tonumber(redis.call('GET', k)) end return n", '0', `${cl.prefix}rl:r:c:*:${credId}:*`));
  /** Requests on one node until it refuses (at most `max`): each is admitted (404) or 429 with the limit's headers, never anything else. */
  const untilRefused = async (n: ClusterNodeProc, token: string, max: number): Promise<number> => {
    for (let admitted = 0; admitted <= max; admitted++) {
      const r = await n.http.get(probe, { token });
      if (r.status === 429) {
        assert.equal(r.body.error_code, 'rate_limited', r.text);
        assert.ok(Number(r.headers.get('retry-after')) >= 1, `${n.name}: Retry-After on the 429 (${r.headers.get('retry-after')})`);
        assert.equal(r.headers.get('ratelimit-limit'), String(L));
        return admitted;
      }
      assert.equal(r.status, 404, `${n.name}: admitted or refused, nothing else: ${r.status} ${r.text}`);
    }
    assert.fail(`${n.name}: still admitting after ${max} requests over a limit of ${L}`);
  };
  /** L requests spread evenly over the nodes (all admitted: the cluster's count stays under L), then every node refuses the next one once it synced; returns each node's own count. */
  const spendLimit = async (cred: { id: string; value: string }, redisPort: number, where: string): Promise<number[]> => {
    const own = cl.nodes.map(() => 0);
    for (let i = 0; i < L; i++) {
      const n = cl.nodes[i % cl.nodes.length] as ClusterNodeProc;
      const r = await n.http.get(probe, { token: cred.value });
      assert.equal(r.status, 404, `${where}: request ${i + 1} of ${L} on ${n.name} admitted: ${r.status} ${r.text}`);
      own[n.index] = (own[n.index] as number) + 1;
    }
    // every node's requests reached this Redis (a node counting on its own, or syncing with another Redis, never adds them here)
    await waitFor(`${where}: the ${L} requests counted in Redis :${redisPort}`, () => countIn(redisPort, cred.id) === L, 15_000, 50);
    // once each node has read that count back (its next sync), every node refuses the next request:
    // the count is shared. Counting per node, each would admit L - 3 = 6 more.
    await nodesReadBack(redisPort, cred.id, cl.nodes.length);
    for (const n of cl.nodes) {
      const more = await untilRefused(n, cred.value, L);
      own[n.index] = (own[n.index] as number) + more;
      assert.equal(more, 0, `${where}: ${n.name} admitted ${more} beyond the cluster-wide limit of ${L} (shared count); per node: ${JSON.stringify(own)}`);
    }
    return own;
  };

  // on the master: the limit holds cluster-wide
  const a = await createCredential(cl.nodes[0]?.http as HttpClient, s.user, 'integration');
  const ownA = await spendLimit(a, mPort, 'before the failover');

  // the switch, held open: the sentinels wait 60 s before calling the dead master down, so no master
  // answers until they are told 1 s again (then the replica is promoted). Keep the hold short: a
  // sentinel skips a replica cut off from its master for over 10 x down-after-milliseconds.
  for (const p of sPorts) assert.equal(cli(p, 'sentinel', 'set', MASTER, 'down-after-milliseconds', '60000'), 'OK');
  const marks = cl.nodes.map((n) => n.lines.length);
  const dead = new Promise((r) => master.once('exit', r));
  master.kill('SIGKILL');
  await dead;
  for (const [i, n] of cl.nodes.entries()) await n.waitLine((l) => l.msg.startsWith('rate limits: Redis unreachable') && n.lines.indexOf(l) >= (marks[i] as number), `${n.name} counts on its own`, 30_000);
  // (a) the documented degraded behaviour: requests are still answered (no 503), each node counting
  // its own requests of the last minute only: a credential refused everywhere a moment ago is
  // admitted again, up to the limit on each node, then 429 with Retry-After
  assert.equal(cli(sPorts[0] as number, 'sentinel', 'get-master-addr-by-name', MASTER).split('\n')[1], String(mPort), 'still no promotion');
  for (const n of cl.nodes) {
    const more = await untilRefused(n, a.value, L);
    assert.equal(more, L - (ownA[n.index] as number), `${n.name}: during the switch it admits up to the limit on its own count (${ownA[n.index]} before)`);
  }
  assert.equal(cli(sPorts[0] as number, 'sentinel', 'get-master-addr-by-name', MASTER).split('\n')[1], String(mPort), 'the switch lasted through the requests');

  // the promotion; every node follows the new master
  for (const p of sPorts) assert.equal(cli(p, 'sentinel', 'set', MASTER, 'down-after-milliseconds', '1000'), 'OK');
  await waitFor('the sentinels promote the replica', () => sPorts.every((p) => cli(p, 'sentinel', 'get-master-addr-by-name', MASTER).split('\n')[1] === String(rPort)), 60_000, 200);
  for (const [i, n] of cl.nodes.entries()) await n.waitLine((l) => l.msg === 'redis master changed (sentinel failover)' && l.master === `127.0.0.1:${rPort}` && n.lines.indexOf(l) >= (marks[i] as number), `${n.name} follows the new master`, 60_000);

  // (b) on the promoted replica: a new credential's limit holds cluster-wide again, counted there
  const b = await createCredential(cl.nodes[0]?.http as HttpClient, s.user, 'integration');
  const ownB = await spendLimit(b, rPort, 'after the failover');
  console.log(`rate limits across the failover (limit ${L}/min): admitted per node before ${JSON.stringify(ownA)}, after ${JSON.stringify(ownB)}`);
});

test('REDIS_SENTINELS configuration: host:port list and master name together, not with REDIS_URL, and the cluster secret required', () => {
  const ok = loadConfig({ REDIS_SENTINELS: 's1:26379,10.0.0.2:26380', REDIS_SENTINEL_MASTER: 'gantry', GANTRY_SECRET_KEY: 'k'.repeat(40) });
  assert.deepEqual(nodeSettings(ok).redisSentinel, { master: 'gantry', sentinels: [{ host: 's1', port: 26379 }, { host: '10.0.0.2', port: 26380 }] });
  assert.equal(nodeSettings(ok).schedulerResyncMs > 0, true, 'cluster mode');
  const refused = (env: Record<string, string>, re: RegExp): void => assert.throws(() => loadConfig(env), (e: unknown) => e instanceof ConfigError && re.test(e.message));
  refused({ REDIS_SENTINELS: 's1', REDIS_SENTINEL_MASTER: 'gantry', GANTRY_SECRET_KEY: 'k'.repeat(40) }, /REDIS_SENTINELS=.*host:port/);
  refused({ REDIS_SENTINELS: 's1:26379', GANTRY_SECRET_KEY: 'k'.repeat(40) }, /REDIS_SENTINELS and REDIS_SENTINEL_MASTER go together/);
  refused({ REDIS_SENTINEL_MASTER: 'gantry', GANTRY_SECRET_KEY: 'k'.repeat(40) }, /go together/);
  refused({ REDIS_SENTINELS: 's1:26379', REDIS_SENTINEL_MASTER: 'gantry', REDIS_URL: 'redis://x:6379', GANTRY_SECRET_KEY: 'k'.repeat(40) }, /REDIS_URL or REDIS_SENTINELS .*not both/);
  refused({ REDIS_SENTINELS: 's1:26379', REDIS_SENTINEL_MASTER: 'gantry' }, /GANTRY_SECRET_KEY is required in cluster mode/);
});
