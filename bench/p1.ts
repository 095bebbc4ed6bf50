/**
 * P1: authenticated GET /api/v1/r/workflows/{id} with an sk- credential, against a bare
 * uWebSockets.js "hello" server measured the same way in the same run.
 *
 *   npm run bench:p1            (DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/postgres)
 *   env: BENCH_DURATION_S (10), BENCH_CONNS (64), BENCH_WARMUP_S (2)
 *
 * Processes: the Gantry node (`node bin/gantry.mjs serve`, fresh database), the uWS hello server
 * (bench/proc/uws-hello.ts) and wrk (the load generator, threads = cores). Each target gets a
 * warm-up run, then one measured run. Target: ratio >= 0.3 (aim 0.5).
 * Last line: `P1 gantry_rps=... uws_rps=... ratio=...`.
 */
import { fmt, jsonLines, machineLine, procCpuS, requireTool, runBench, spawnChild, startGantry, envNum, wrk, BenchError, type WrkResult } from './lib/harness.js';

const SECONDS = envNum('BENCH_DURATION_S', 10);
const CONNS = envNum('BENCH_CONNS', 64);
const WARMUP_S = envNum('BENCH_WARMUP_S', 2);

function line(name: string, r: WrkResult, cpu: number): string {
  return `${name.padEnd(24)} ${fmt(r.okRps).padStart(8)} rps  p50 ${fmt(r.p50Ms, 2)} ms  p99 ${fmt(r.p99Ms, 2)} ms  (${r.requests} requests in ${fmt(r.seconds, 1)} s, non-2xx ${r.non2xx}, socket errors ${r.socketErrors}; server CPU ${fmt(cpu)}% of one core)`;
}

/** wrk against url, with the server process's CPU share over the run. */
async function measured(pid: number, url: string, headers?: Record<string, string>): Promise<[WrkResult, number]> {
  const c0 = procCpuS(pid);
  const t0 = performance.now();
  const r = await wrk(url, { conns: CONNS, seconds: SECONDS, ...(headers ? { headers } : {}) });
  return [r, ((procCpuS(pid) - c0) / ((performance.now() - t0) / 1000)) * 100];
}

function check(name: string, r: WrkResult): void {
  if (r.non2xx > 0) throw new BenchError(`${name}: ${r.non2xx} of ${r.requests} responses were not 2xx`);
}

runBench('P1', async () => {
  requireTool('wrk', 'apt-get install -y wrk');
  console.log(`P1: authenticated GET /r/workflows/{id} (sk-) vs bare uWebSockets.js hello; wrk ${CONNS} conns, ${SECONDS} s each`);
  console.log(await machineLine());

  const g = await startGantry('p1');
  const url = `${g.apiBase}/r/workflows/${g.workflowId}`;
  const auth = { authorization: `Bearer ${g.sk}` };
  const probe = await fetch(url, { headers: auth });
  if (probe.status !== 200) throw new BenchError(`GET ${url} answered ${probe.status}: ${await probe.text()}`);

  const hello = spawnChild(process.execPath, ['--import', 'tsx', 'bench/proc/uws-hello.ts', '0']);
  const { port } = await jsonLines(hello).next((o) => typeof o.port === 'number', 'the uWS hello server to listen', 30_000);
  const helloUrl = `http://127.0.0.1:${port}/`;

  await wrk(url, { conns: CONNS, seconds: WARMUP_S, headers: auth });
  await wrk(helloUrl, { conns: CONNS, seconds: WARMUP_S });

  const [gantry, gantryCpu] = await measured(g.pid, url, auth);
  console.log(line('gantry GET (sk-)', gantry, gantryCpu));
  check('gantry GET', gantry);
  const [uws, uwsCpu] = await measured(hello.pid as number, helloUrl);
  console.log(line('uWS hello', uws, uwsCpu));
  check('uWS hello', uws);

  const ratio = gantry.okRps / uws.okRps;
  console.log(`target: ratio >= 0.3 (aim 0.5): ${ratio >= 0.3 ? 'met' : 'NOT met'}`);
  console.log(`P1 gantry_rps=${fmt(gantry.okRps)} uws_rps=${fmt(uws.okRps)} ratio=${fmt(ratio, 3)} gantry_p99_ms=${fmt(gantry.p99Ms, 2)} conns=${CONNS} duration_s=${SECONDS}`);
}, 300);
