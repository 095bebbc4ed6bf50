/**
 * HTTP load generator for P2 and P4, run as its own process (node:http keep-alive agent).
 * Prints one JSON line with its result on stdout.
 *
 *   open loop:   node --import tsx bench/proc/loadgen.ts open   <url> <token> <rate/s> <seconds> [maxSockets=256]
 *     Requests are sent on a fixed schedule (request i at t0 + i/rate) whether or not earlier ones
 *     were answered; each latency is measured from its scheduled send time, so a stall shows up
 *     as latency of every request scheduled during it (no coordinated omission). Requests still
 *     unanswered 30 s after the last send are counted as `unanswered`, with their latency so far.
 *   closed loop: node --import tsx bench/proc/loadgen.ts closed <url> <token> <count> <conns>
 *     `conns` clients each send their next request when the previous one is answered, until
 *     `count` requests were sent.
 *
 * Every request is POST <url> with {"parameters":{}} and Authorization: Bearer <token>;
 * 202 counts as accepted. Result: {mode, sent, accepted, refused, errors, firstSendAt, lastAcceptAt,
 * seconds, acceptedPerS, p50Ms, p90Ms, p99Ms, maxMs, statuses, lateSends, unanswered, cpuPercent}; times are epoch ms.
 * With LOADGEN_IDS=1 (P3) the result also carries `ids`: [task_id, scheduled send, 202 received] of
 * every accepted request, both as epoch ms (performance.timeOrigin + now: the clock the agents use).
 */
import http from 'node:http';
import { performance } from 'node:perf_hooks';

const [mode, url, token, a, b, c] = process.argv.slice(2);
if ((mode !== 'open' && mode !== 'closed') || !url || !token || !a || !b) {
  console.error('usage: loadgen.ts open <url> <token> <rate> <seconds> [maxSockets] | closed <url> <token> <count> <conns>');
  process.exit(2);
}
const body = Buffer.from(JSON.stringify({ parameters: {} }));
const target = new URL(url);
const agent = new http.Agent({ keepAlive: true, maxSockets: mode === 'open' ? Number(c ?? 256) : Number(b), scheduling: 'fifo' });
const epoch = (t: number): number => performance.timeOrigin + t;

const latencies: number[] = [];
const statuses: Record<string, number> = {};
let sent = 0;
let accepted = 0;
let errors = 0;
let unanswered = 0;
let finished = false;
const DRAIN_S = 30;
let firstSendAt = NaN;
let lastAcceptAt = NaN;
const WANT_IDS = process.env.LOADGEN_IDS === '1';
const ids: Array<[string, number, number]> = [];

function send(scheduledAt: number): Promise<void> {
  sent++;
  if (Number.isNaN(firstSendAt)) firstSendAt = performance.now();
  return new Promise((resolve) => {
    const req = http.request(
      { agent, host: target.hostname, port: target.port, path: target.pathname + target.search, method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': body.length } },
      (res) => {
        let text = '';
        if (WANT_IDS) res.setEncoding('utf8').on('data', (c: string) => (text += c));
        else res.resume();
        res.once('end', () => {
          if (finished) return resolve();
          const now = performance.now();
          const k = String(res.statusCode);
          statuses[k] = (statuses[k] ?? 0) + 1;
          if (res.statusCode === 202) {
            accepted++;
            lastAcceptAt = now;
            latencies.push(now - scheduledAt);
            if (WANT_IDS) ids.push([String((JSON.parse(text) as { task_id?: unknown }).task_id), epoch(scheduledAt), epoch(now)]);
          }
          resolve();
        });
      },
    );
    req.once('error', () => {
      if (!finished) errors++;
      resolve();
    });
    req.end(body);
  });
}

async function openLoop(rate: number, seconds: number): Promise<number> {
  const total = Math.round(rate * seconds);
  const interval = 1000 / rate;
  const inflight: Array<Promise<void>> = [];
  const pending = new Set<number>();
  const t0 = performance.now();
  let i = 0;
  let late = 0;
  await new Promise<void>((resolve) => {
    const tick = (): void => {
      const now = performance.now();
      while (i < total && t0 + i * interval <= now) {
        const at = t0 + i * interval;
        if (now - at > 5) late++;
        pending.add(at);
        inflight.push(send(at).then(() => void pending.delete(at)));
        i++;
      }
      if (i < total) setTimeout(tick, Math.max(0, Math.min(1, t0 + i * interval - performance.now())));
      else resolve();
    };
    tick();
  });
  // bounded drain: a request still unanswered DRAIN_S after the last send is counted as
  // unanswered, with its latency so far (so the percentiles are then lower bounds)
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([Promise.all(inflight), new Promise((r) => (timer = setTimeout(r, DRAIN_S * 1000)))]);
  clearTimeout(timer);
  finished = true;
  const now = performance.now();
  for (const at of pending) latencies.push(now - at);
  unanswered = pending.size;
  return late;
}

async function closedLoop(count: number, conns: number): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: conns }, async () => {
      while (next < count) {
        next++;
        await send(performance.now());
      }
    }),
  );
}

const cpu0 = process.cpuUsage();
const wall0 = performance.now();
const lateSends = mode === 'open' ? await openLoop(Number(a), Number(b)) : (await closedLoop(Number(a), Number(b)), 0);
finished = true;
agent.destroy();
const cpu = process.cpuUsage(cpu0);
const cpuPercent = ((cpu.user + cpu.system) / 1000 / (performance.now() - wall0)) * 100;
latencies.sort((x, y) => x - y);
const pct = (p: number): number => (latencies.length ? (latencies[Math.min(latencies.length - 1, Math.max(0, Math.ceil((p / 100) * latencies.length) - 1))] as number) : NaN);
const seconds = (lastAcceptAt - firstSendAt) / 1000;
process.stdout.write(
  `${JSON.stringify({
    mode,
    sent,
    accepted,
    refused: sent - accepted - errors - unanswered,
    errors,
    unanswered,
    firstSendAt: epoch(firstSendAt),
    lastAcceptAt: epoch(lastAcceptAt),
    seconds,
    acceptedPerS: accepted / seconds,
    p50Ms: pct(50),
    p90Ms: pct(90),
    p99Ms: pct(99),
    maxMs: latencies[latencies.length - 1] ?? NaN,
    statuses,
    lateSends,
    cpuPercent,
    ...(WANT_IDS ? { ids } : {}),
  })}\n`,
);
