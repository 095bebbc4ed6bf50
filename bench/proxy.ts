/**
 * Proxy: the container gateway's transparent proxy (`GET /api/v1/r/containers/{slug}/hello` with
 * an sk- credential: client -> Gantry node (uWS) -> the agent's gRPC stream -> agent program ->
 * local HTTP to the container -> back) against the same container reached directly and through
 * nginx (a stock reverse proxy, keep-alive upstream), all three measured in the same run.
 *
 *   npm run bench:proxy         (DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/postgres)
 *   env: BENCH_CONNS (32), BENCH_DURATION_S (10), BENCH_WARMUP_S (2), BENCH_LAT_CONNS (1),
 *        BENCH_RATE (1000 requests/s), BENCH_RATE_S (10), BENCH_RATE_CONNS (16);
 *        BENCH_NODE_ARGS / BENCH_AGENT_NODE_ARGS: extra node flags for the node / the agent (profiling);
 *        BENCH_AGENT_TRANSPORT (`grpc,ws`): the agent transports measured, each as its own gantry
 *        target (`gantry(grpc)`: `--server HOST:GRPC_PORT`; `gantry(ws)`: `--server ws://HOST:HTTP_PORT`)
 *
 * Processes: the Gantry node (`node bin/gantry.mjs serve`, fresh database), one agent program per
 * transport (`node bin/gantry.mjs agent --executor simulate --container-runtime exec --labels
 * bench-<transport>`), one container per transport (its exec runtime runs bench/proc/echo-server.mjs:
 * plain node:http, a fixed 1 KB body), nginx (`worker_processes 1`, upstream keepalive 64, config
 * generated in a temp dir) and wrk. Each service (`bench-echo-<transport>`, required_labels
 * bench-<transport>, so it lands on that transport's agent) is created and deployed through the API
 * with 1 replica; the echo server writes its port to PORT_FILE (passed through env_config), which
 * gives the direct URL of the very process the gateway reaches (direct and nginx use the first
 * transport's container; the containers are the same program).
 *
 * Three passes, each target with a warm-up then one measured run, same settings for all three:
 *   - throughput: wrk BENCH_CONNS connections (rps, p50, p99): ratio = gantry / direct rps; the
 *     node's and the agent's CPU per proxied request (utime+stime from /proc/<pid>/stat over the
 *     measured run, divided by the requests wrk completed);
 *   - latency: wrk BENCH_LAT_CONNS connections (default 1): added p50/p99 over direct without the
 *     queueing that dominates latency at saturation on a small machine;
 *   - fixed rate: BENCH_RATE requests/s offered open-loop over BENCH_RATE_CONNS keep-alive
 *     connections (bench/proc/rate.ts, its own process; latency from each request's scheduled send
 *     time): added p50/p99 over direct at that rate.
 * Targets (issue 31 §4): gantry >= 0.5 x nginx's throughput; added p50 <= 1 ms at 1,000 requests/s;
 * node CPU <= 60 us and agent CPU <= 50 us per proxied request (throughput pass). Also printed:
 * gantry/direct >= 0.4 (the earlier target). Non-2xx responses fail the bench.
 * Last line: `PROXY gantry_rps=... direct_rps=... nginx_rps=... ratio=... gantry_nginx_ratio=...
 * rate_added_p50_ms=... node_us_per_req=... agent_us_per_req=... ...` (key=value).
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import {
  BenchError,
  envNum,
  fmt,
  freePort,
  jsonLines,
  machineLine,
  onCleanup,
  procCpuS,
  requireTool,
  root,
  runBench,
  sleep,
  spawnChild,
  startGantry,
  waitUntil,
  wrk,
  type GantryProcess,
  type WrkResult,
} from './lib/harness.js';

const SECONDS = envNum('BENCH_DURATION_S', 10);
const CONNS = envNum('BENCH_CONNS', 32);
const LAT_CONNS = envNum('BENCH_LAT_CONNS', 1);
const WARMUP_S = envNum('BENCH_WARMUP_S', 2);
const RATE = envNum('BENCH_RATE', 1000);
const RATE_S = envNum('BENCH_RATE_S', 10);
const RATE_CONNS = envNum('BENCH_RATE_CONNS', 16);
const TRANSPORTS = (process.env.BENCH_AGENT_TRANSPORT ?? 'grpc,ws').split(',').map((t) => t.trim()).filter(Boolean);
for (const t of TRANSPORTS) if (t !== 'grpc' && t !== 'ws') throw new Error(`BENCH_AGENT_TRANSPORT: ${t} is neither grpc nor ws`);
if (TRANSPORTS.length === 0) throw new Error('BENCH_AGENT_TRANSPORT names no transport');
const slugOf = (transport: string): string => `bench-echo-${transport}`;

interface Target {
  name: string;
  url: string;
  headers?: Record<string, string>;
  /** processes whose CPU share is reported for this target */
  pids: Array<[string, number]>;
}

interface Measured {
  r: WrkResult;
  cpu: string;
  /** CPU seconds each of the target's processes used over the measured run, by label. */
  cpuS: Map<string, number>;
}

/** What bench/proc/rate.ts prints. */
interface RateResult {
  sent: number;
  ok: number;
  non2xx: number;
  errors: number;
  unanswered: number;
  seconds: number;
  rps: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
  lateSends: number;
  cpuPercent: number;
}

/** A temp dir removed at the bench's exit. */
function tempDir(prefix: string): string {
  const d = mkdtempSync(join(os.tmpdir(), prefix));
  onCleanup(async () => rmSync(d, { recursive: true, force: true }));
  return d;
}

/** Whether pid is alive and its command line contains `needle` (guards against pid reuse). */
function isProcess(pid: number, needle: string): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(needle);
  } catch {
    return false;
  }
}

/** Starts an agent program over `transport` with the exec container runtime and waits until the node lists it online. */
async function startAgent(g: GantryProcess, transport: string): Promise<number> {
  const ak = await g.agentCredential();
  const dir = tempDir('gantry-proxy-agent-');
  const agent = spawnChild(
    process.execPath,
    [
      // BENCH_AGENT_NODE_ARGS: extra node flags for the agent program (e.g. --cpu-prof --cpu-prof-dir=/tmp/prof)
      ...(process.env.BENCH_AGENT_NODE_ARGS ?? '').split(' ').filter(Boolean),
      join(root, 'bin/gantry.mjs'),
      'agent',
      '--server', transport === 'ws' ? g.origin.replace(/^http/, 'ws') : `127.0.0.1:${g.grpcPort}`,
      '--credential', ak,
      '--executor', 'simulate',
      '--container-runtime', 'exec',
      '--container-health-interval-ms', '500',
      '--machine-id', `bench-proxy-agent-${transport}`,
      '--name', `bench-proxy-agent-${transport}`,
      '--labels', `bench-${transport}`,
      '--state-dir', dir,
      '--work-dir', join(dir, 'work'),
      '--gpu', 'NVIDIA RTX 4090:24',
      '--sync-interval-s', '0',
      '--drain-timeout-s', '5',
      '--tunnel-url', 'none',
      '--log-level', 'warn',
    ],
    { stdout: 'inherit', stderr: 'inherit' },
  );
  let exited = false;
  agent.once('exit', () => (exited = true));
  await waitUntil('the agent to be online', async () => {
    if (exited) throw new BenchError(`the agent program exited (code ${agent.exitCode ?? agent.signalCode}) before it was online`);
    const r = await g.http.get('/agents?per_page=10', { token: g.user.accessToken, team: g.user.teamId });
    const list = (r.body?.agent_list ?? []) as Array<Record<string, unknown>>;
    return r.status === 200 && list.some((a) => Array.isArray(a.labels) && a.labels.includes(`bench-${transport}`) && (a.agent_status === 'online' || a.agent_status === 'busy'));
  }, 60_000, 100).catch((e: unknown) => {
    if (exited) throw new BenchError(`the agent program exited (code ${agent.exitCode ?? agent.signalCode}) before it was online`);
    throw e;
  });
  return agent.pid as number;
}

/**
 * Creates and deploys the echo service (1 replica, exec command = the echo server with PORT_FILE)
 * and waits until it is running and the port file is written. Returns the container's port and pid.
 */
async function deployEcho(g: GantryProcess, transport: string, portFile: string): Promise<{ port: number; pid: number }> {
  const auth = { token: g.user.accessToken, team: g.user.teamId };
  const create = await g.http.post(
    '/containers',
    {
      service_slug: slugOf(transport),
      display_name: `proxy bench echo (${transport})`,
      required_labels: [`bench-${transport}`],
      service_type: 'deployed',
      docker_image: JSON.stringify([process.execPath, join(root, 'bench/proc/echo-server.mjs')]),
      exposed_port: 8080,
      replica_count: 1,
      gpu_count: 0,
      health_path: '/health',
      env_config: [{ env_name: 'PORT_FILE', env_value: portFile }],
    },
    auth,
  );
  if (create.status !== 200 || !create.body?.id) throw new BenchError(`POST /containers: ${create.status} ${create.text}`);
  const id = String(create.body.id);
  const deploy = await g.http.post(`/containers/${id}/deploy`, {}, auth);
  if (deploy.status !== 200) throw new BenchError(`POST /containers/${id}/deploy: ${deploy.status} ${deploy.text}`);
  let last = '';
  await waitUntil('the echo service to be running', async () => {
    const r = await g.http.get(`/containers/${id}`, auth);
    if (r.status !== 200) throw new BenchError(`GET /containers/${id}: ${r.status} ${r.text}`);
    last = r.text;
    if (r.body.service_status === 'failed') throw new BenchError(`the echo service failed to deploy: ${r.text}`);
    return r.body.service_status === 'running';
  }, 60_000, 100).catch((e: unknown) => {
    if (e instanceof BenchError && e.message.startsWith('timed out')) throw new BenchError(`${e.message}; last GET /containers/${id}: ${last}`);
    throw e;
  });
  await waitUntil('the echo server port file', () => existsSync(portFile), 10_000, 50);
  const { port, pid } = JSON.parse(readFileSync(portFile, 'utf8')) as { port: number; pid: number };
  return { port, pid };
}

/** Starts nginx (worker_processes 1, keep-alive upstream) in front of 127.0.0.1:upstreamPort. */
async function startNginx(upstreamPort: number): Promise<{ url: string; pids: Array<[string, number]> }> {
  const dir = tempDir('gantry-proxy-nginx-');
  const port = await freePort();
  // run as root (containers, CI): the worker would drop to nobody and could not use the 0700 temp dir
  const user = process.getuid?.() === 0 ? 'user root;\n' : '';
  const conf = `${user}worker_processes 1;
daemon off;
master_process on;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 75s;
  upstream echo {
    server 127.0.0.1:${upstreamPort};
    keepalive 64;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://echo;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`;
  writeFileSync(join(dir, 'nginx.conf'), conf);
  const nginx = spawnChild('nginx', ['-p', dir, '-c', join(dir, 'nginx.conf'), '-e', join(dir, 'error.log')], { stdout: 'inherit', stderr: 'inherit' });
  let exited = false;
  nginx.once('exit', () => (exited = true));
  const url = `http://127.0.0.1:${port}/hello`;
  const errLog = (): string => (existsSync(join(dir, 'error.log')) ? readFileSync(join(dir, 'error.log'), 'utf8').trim() : '');
  await waitUntil('nginx to answer', async () => {
    if (exited) throw new BenchError(`nginx exited (code ${nginx.exitCode ?? nginx.signalCode}): ${errLog()}`);
    return (await fetch(url)).ok;
  }, 15_000, 50).catch((e: unknown) => {
    if (exited) throw new BenchError(`nginx exited (code ${nginx.exitCode ?? nginx.signalCode}): ${errLog()}`);
    throw e;
  });
  const pids: Array<[string, number]> = [['nginx master', nginx.pid as number]];
  // the worker: the master's only child
  try {
    const kids = readFileSync(`/proc/${nginx.pid}/task/${nginx.pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
    for (const k of kids) pids.push(['nginx worker', k]);
  } catch {
    // no children file: the master's share alone
  }
  return { url, pids };
}

/** GET url once: status 200 and the same body as the direct request (relayed unchanged). */
async function probe(name: string, url: string, expect: string, headers?: Record<string, string>): Promise<void> {
  const r = await fetch(url, headers ? { headers } : {});
  const text = await r.text();
  if (r.status !== 200) throw new BenchError(`${name}: GET ${url} answered ${r.status}: ${text.slice(0, 500)}`);
  if (text !== expect) throw new BenchError(`${name}: GET ${url}: the body differs from the container's (${text.length} vs ${expect.length} bytes): ${text.slice(0, 200)}`);
}

/** All cores' busy and total jiffies since boot (/proc/stat, first line). */
function machineJiffies(): { busy: number; total: number } {
  const f = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '').trim().split(/\s+/).slice(1, 9).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return { busy: total - (f[3] ?? 0) - (f[4] ?? 0), total };
}

async function measure(t: Target, conns: number, seconds: number): Promise<Measured> {
  const c0 = t.pids.map(([, pid]) => procCpuS(pid));
  const m0 = machineJiffies();
  const t0 = performance.now();
  const r = await wrk(t.url, { conns, seconds, ...(t.headers ? { headers: t.headers } : {}) });
  const wall = (performance.now() - t0) / 1000;
  const m1 = machineJiffies();
  const machine = `whole machine ${fmt(((m1.busy - m0.busy) / Math.max(1, m1.total - m0.total)) * 100)}% busy of ${os.availableParallelism()} cores`;
  const cpuS = new Map<string, number>(t.pids.map(([label, pid], i) => [label, procCpuS(pid) - (c0[i] as number)]));
  const cpu = [...t.pids.map(([label]) => `${label} ${fmt(((cpuS.get(label) as number) / wall) * 100)}%`), machine].join(', ');
  if (r.non2xx > 0) throw new BenchError(`${t.name} (wrk -c${conns}): ${r.non2xx} of ${r.requests} responses were not 2xx`);
  if (r.requests === 0) throw new BenchError(`${t.name} (wrk -c${conns}): no request completed`);
  return { r, cpu, cpuS };
}

/** Runs bench/proc/rate.ts against a target: `rate` requests/s for `seconds`, open loop. */
async function fixedRate(t: Target, rate: number, seconds: number): Promise<{ r: RateResult; cpuS: Map<string, number> }> {
  const headers = Object.entries(t.headers ?? {}).map(([k, v]) => `${k}: ${v}`);
  const c0 = t.pids.map(([, pid]) => procCpuS(pid));
  const child = spawnChild(process.execPath, ['--import', 'tsx', 'bench/proc/rate.ts', t.url, String(rate), String(seconds), String(RATE_CONNS), ...headers]);
  const r = (await jsonLines(child).next((o) => typeof o.sent === 'number', `the fixed-rate result (${t.name})`, (seconds + 60) * 1000)) as unknown as RateResult;
  const cpuS = new Map<string, number>(t.pids.map(([label, pid], i) => [label, procCpuS(pid) - (c0[i] as number)]));
  if (r.non2xx > 0 || r.errors > 0 || r.unanswered > 0) throw new BenchError(`${t.name} (fixed rate ${rate}/s): ${r.sent} sent, ${r.ok} 2xx, ${r.non2xx} non-2xx, ${r.errors} errors, ${r.unanswered} unanswered`);
  return { r, cpuS };
}

function line(name: string, m: Measured): string {
  const r = m.r;
  return `${name.padEnd(12)} ${fmt(r.okRps).padStart(7)} rps  p50 ${fmt(r.p50Ms, 3)} ms  p99 ${fmt(r.p99Ms, 3)} ms  (${r.requests} requests in ${fmt(r.seconds, 1)} s, non-2xx ${r.non2xx}, socket errors ${r.socketErrors}; CPU, % of one core: ${m.cpu})`;
}

/** Warm-up then one measured run per target, in order. */
async function pass(targets: Target[], conns: number): Promise<Map<string, Measured>> {
  const out = new Map<string, Measured>();
  for (const t of targets) {
    const w = await wrk(t.url, { conns, seconds: WARMUP_S, ...(t.headers ? { headers: t.headers } : {}) });
    if (w.non2xx > 0) throw new BenchError(`${t.name} warm-up (wrk -c${conns}): ${w.non2xx} of ${w.requests} responses were not 2xx`);
    const m = await measure(t, conns, SECONDS);
    console.log(line(t.name, m));
    out.set(t.name, m);
  }
  return out;
}

const get = (m: Map<string, Measured>, name: string): WrkResult => (m.get(name) as Measured).r;
const signed = (n: number, digits = 3): string => `${n >= 0 ? '+' : ''}${fmt(n, digits)}`;

runBench('PROXY', async () => {
  requireTool('wrk', 'apt-get install -y wrk');
  requireTool('nginx', 'apt-get install -y nginx-light');
  console.log(`PROXY: GET /r/containers/{slug}/hello (sk-, via the agent's stream: ${TRANSPORTS.join(' and ')}) vs the same container direct and through nginx; wrk ${CONNS} conns (throughput) and ${LAT_CONNS} (latency), ${SECONDS} s each after ${WARMUP_S} s warm-ups`);
  console.log(await machineLine());
  console.log(`load average before the run: ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} (other work on the machine shares the cores: compare the ratios)`);

  const g = await startGantry('proxy');
  // the containers are the agents' children; if an agent does not stop its own, this does (registered first, so it runs after the agents stopped)
  const echoPids: number[] = [];
  onCleanup(async () => {
    for (const pid of echoPids) {
      if (!isProcess(pid, 'echo-server.mjs')) continue;
      process.kill(pid, 'SIGTERM');
      await waitUntil('the echo server to exit', () => !isProcess(pid, 'echo-server.mjs'), 5_000, 50).catch(() => process.kill(pid, 'SIGKILL'));
    }
  });
  const auth = { authorization: `Bearer ${g.sk}` };
  const gantries: Array<{ transport: string; target: Target; echo: { port: number; pid: number } }> = [];
  for (const transport of TRANSPORTS) {
    const agentPid = await startAgent(g, transport);
    const echo = await deployEcho(g, transport, join(tempDir('gantry-proxy-echo-'), 'port.json'));
    echoPids.push(echo.pid);
    const url = `${g.apiBase}/r/containers/${slugOf(transport)}/hello`;
    gantries.push({ transport, echo, target: { name: `gantry(${transport})`, url, headers: auth, pids: [['node', g.pid], ['agent', agentPid], ['echo', echo.pid]] } });
  }
  const echo = (gantries[0] as (typeof gantries)[number]).echo;
  const directUrl = `http://127.0.0.1:${echo.port}/hello`;
  const expected = await (await fetch(directUrl)).text();
  if (expected.length < 1000) throw new BenchError(`direct: GET ${directUrl}: unexpected body (${expected.length} bytes)`);

  const ng = await startNginx(echo.port);
  await probe('direct', directUrl, expected);
  await probe('nginx', ng.url, expected);
  for (const { target: t } of gantries) {
    // the service may be "running" a moment before the node routes to the instance: retry 503s briefly
    await waitUntil('the gateway to route to the instance', async () => (await fetch(t.url, { headers: auth }).then((r) => r.text().then(() => r.status))) !== 503, 10_000, 100);
    await probe(t.name, t.url, expected, auth);
  }

  const echoPid: Array<[string, number]> = [['echo', echo.pid]];
  const targets: Target[] = [{ name: 'direct', url: directUrl, pids: echoPid }, { name: 'nginx', url: ng.url, pids: [...ng.pids, ...echoPid] }, ...gantries.map((x) => x.target)];

  console.log(`-- throughput: wrk -c${CONNS}`);
  const tp = await pass(targets, CONNS);
  await sleep(500);
  console.log(`-- latency: wrk -c${LAT_CONNS}`);
  const lat = await pass(targets, LAT_CONNS);
  await sleep(500);
  console.log(`-- fixed rate: ${RATE} requests/s offered for ${RATE_S} s over ${RATE_CONNS} keep-alive connections (bench/proc/rate.ts, latency from the scheduled send time)`);
  const fr = new Map<string, RateResult>();
  for (const t of targets) {
    await fixedRate(t, RATE, Math.min(2, RATE_S));
    const { r, cpuS } = await fixedRate(t, RATE, RATE_S);
    fr.set(t.name, r);
    const perReq = [...cpuS].map(([label, s]) => `${label} ${fmt((s * 1e6) / Math.max(1, r.ok))} us`).join(', ');
    console.log(`${t.name.padEnd(12)} ${fmt(r.rps).padStart(7)} rps  p50 ${fmt(r.p50Ms, 3)} ms  p90 ${fmt(r.p90Ms, 3)} ms  p99 ${fmt(r.p99Ms, 3)} ms  max ${fmt(r.maxMs, 1)} ms  (${r.ok} requests in ${fmt(r.seconds, 1)} s, late sends ${r.lateSends}, generator CPU ${fmt(r.cpuPercent)}%; CPU per request: ${perReq})`);
  }

  const [d, n] = [get(tp, 'direct'), get(tp, 'nginx')];
  const [ld, ln] = [get(lat, 'direct'), get(lat, 'nginx')];
  const [rd, rn] = [fr.get('direct') as RateResult, fr.get('nginx') as RateResult];
  const nginxRatio = n.okRps / d.okRps;
  const nginxAdded = { p50: n.p50Ms - d.p50Ms, p99: n.p99Ms - d.p99Ms };
  const latNginxAdded = { p50: ln.p50Ms - ld.p50Ms, p99: ln.p99Ms - ld.p99Ms };
  const rateNginxAdded = { p50: rn.p50Ms - rd.p50Ms, p99: rn.p99Ms - rd.p99Ms };
  const nm = tp.get('nginx') as Measured;
  const nginxUs = ((nm.cpuS.get('nginx worker') ?? nm.cpuS.get('nginx master') ?? NaN) * 1e6) / n.requests;
  const met = (ok: boolean): string => (ok ? 'met' : 'NOT met');

  console.log('-- figures');
  console.log(`nginx/direct rps     ${fmt(nginxRatio, 3)}   (nginx ${fmt(n.okRps)} / direct ${fmt(d.okRps)}); nginx added p50 ${signed(nginxAdded.p50)} ms at -c${CONNS}, ${signed(latNginxAdded.p50)} ms at -c${LAT_CONNS}, ${signed(rateNginxAdded.p50)} ms at ${RATE}/s; nginx worker ${fmt(nginxUs)} us per request`);
  const keys: string[] = [];
  for (const { transport, target } of gantries) {
    const name = target.name;
    const [gw, lg, rg] = [get(tp, name), get(lat, name), fr.get(name) as RateResult];
    const ratio = gw.okRps / d.okRps;
    const gantryNginx = gw.okRps / n.okRps;
    const added = { p50: gw.p50Ms - d.p50Ms, p99: gw.p99Ms - d.p99Ms };
    const latAdded = { p50: lg.p50Ms - ld.p50Ms, p99: lg.p99Ms - ld.p99Ms };
    const rateAdded = { p50: rg.p50Ms - rd.p50Ms, p99: rg.p99Ms - rd.p99Ms };
    const gm = tp.get(name) as Measured;
    const nodeUs = ((gm.cpuS.get('node') as number) * 1e6) / gw.requests;
    const agentUs = ((gm.cpuS.get('agent') as number) * 1e6) / gw.requests;
    console.log(`${name}: gantry/nginx ${fmt(gantryNginx, 3)} (${fmt(gw.okRps)} rps; proxied/direct ${fmt(ratio, 3)}); CPU per proxied request at -c${CONNS}: node ${fmt(nodeUs)} us, agent ${fmt(agentUs)} us; added p50/p99 at -c${CONNS} ${signed(added.p50)}/${signed(added.p99)} ms, at -c${LAT_CONNS} ${signed(latAdded.p50)}/${signed(latAdded.p99)} ms, at ${RATE}/s ${signed(rateAdded.p50)}/${signed(rateAdded.p99)} ms`);
    console.log(`target ${name}: gantry/nginx rps >= 0.5: ${met(gantryNginx >= 0.5)} (${fmt(gantryNginx, 3)}); added p50 <= 1 ms at ${RATE}/s: ${met(rateAdded.p50 <= 1)} (${fmt(rateAdded.p50, 3)} ms); node <= 60 us: ${met(nodeUs <= 60)} (${fmt(nodeUs)}); agent <= 50 us: ${met(agentUs <= 50)} (${fmt(agentUs)}); proxied/direct >= 0.4: ${met(ratio >= 0.4)} (${fmt(ratio, 3)})`);
    // the first transport's keys are unprefixed (the line's earlier form), the others carry `<transport>_`
    const p = transport === gantries[0]?.transport ? '' : `${transport}_`;
    keys.push(
      `${p}transport=${transport} ${p}gantry_rps=${fmt(gw.okRps)} ${p}ratio=${fmt(ratio, 3)} ${p}gantry_nginx_ratio=${fmt(gantryNginx, 3)} ${p}added_p50_ms=${fmt(added.p50, 3)} ${p}added_p99_ms=${fmt(added.p99, 3)} ` +
        `${p}lat_added_p50_ms=${fmt(latAdded.p50, 3)} ${p}lat_added_p99_ms=${fmt(latAdded.p99, 3)} ${p}rate_added_p50_ms=${fmt(rateAdded.p50, 3)} ${p}rate_added_p99_ms=${fmt(rateAdded.p99, 3)} ${p}rate_gantry_p50_ms=${fmt(rg.p50Ms, 3)} ` +
        `${p}node_us_per_req=${fmt(nodeUs)} ${p}agent_us_per_req=${fmt(agentUs)}`,
    );
  }
  console.log(
    `PROXY ${keys.join(' ')} direct_rps=${fmt(d.okRps)} nginx_rps=${fmt(n.okRps)} nginx_ratio=${fmt(nginxRatio, 3)} nginx_added_p50_ms=${fmt(nginxAdded.p50, 3)} nginx_added_p99_ms=${fmt(nginxAdded.p99, 3)} ` +
      `lat_nginx_added_p50_ms=${fmt(latNginxAdded.p50, 3)} lat_nginx_added_p99_ms=${fmt(latNginxAdded.p99, 3)} rate=${RATE} rate_nginx_added_p50_ms=${fmt(rateNginxAdded.p50, 3)} rate_direct_p50_ms=${fmt(rd.p50Ms, 3)} ` +
      `nginx_us_per_req=${fmt(nginxUs)} conns=${CONNS} lat_conns=${LAT_CONNS} duration_s=${SECONDS} rate_s=${RATE_S}`,
  );
}, 540);
