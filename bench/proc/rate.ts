/**
 * Fixed-rate (open-loop) HTTP GET load generator for bench/proxy.ts, run as its own process so its
 * work is not the measured node's. wrk has no rate option: this sends request i at t0 + i/rate
 * whether or not earlier ones were answered, over `conns` keep-alive connections, and measures each
 * latency from its scheduled send time (a stall shows up in the latency of every request scheduled
 * during it: no coordinated omission). A request due while every connection is busy waits for the
 * first free one (that wait is part of its latency).
 *
 *   node --import tsx bench/proc/rate.ts <url> <rate/s> <seconds> [conns=16] [header: value]...
 *
 * Plain sockets and a minimal HTTP/1.1 response reader (status line, Content-Length or chunked
 * framing), so the generator's own cost per request stays small. Prints one JSON line:
 * {sent, ok, non2xx, errors, unanswered, seconds, rps, p50Ms, p90Ms, p99Ms, maxMs, lateSends, cpuPercent}.
 * ok = 2xx answers; lateSends = requests sent more than 1 ms after their scheduled time (the
 * generator's own lag, part of the figures).
 */
import net from 'node:net';
import { performance } from 'node:perf_hooks';

const [url, rateArg, secondsArg, connsArg, ...headerArgs] = process.argv.slice(2);
if (!url || !rateArg || !secondsArg) {
  console.error('usage: rate.ts <url> <rate/s> <seconds> [conns] [header: value]...');
  process.exit(2);
}
const rate = Number(rateArg);
const seconds = Number(secondsArg);
const connCount = Number(connsArg ?? 16);
const target = new URL(url);
const extra = headerArgs.map((h) => `${h}\r\n`).join('');
const REQUEST = Buffer.from(`GET ${target.pathname}${target.search} HTTP/1.1\r\nHost: ${target.host}\r\n${extra}\r\n`, 'latin1');
const DRAIN_S = 10;

interface Conn {
  sock: net.Socket;
  buf: Buffer;
  /** Scheduled time of the request in flight on this connection (NaN = idle). */
  due: number;
  ready: boolean;
}

const latencies: number[] = [];
let sent = 0;
let ok = 0;
let non2xx = 0;
let errors = 0;
let late = 0;
let answered = 0;
const queue: number[] = [];
const idle: Conn[] = [];
const conns: Conn[] = [];

/** Length of a complete response at the start of buf, with its status; null while incomplete. */
function complete(buf: Buffer): { status: number; length: number } | null {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const head = buf.toString('latin1', 0, end);
  const status = Number(head.slice(9, 12));
  const cl = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (cl) {
    const total = end + 4 + Number(cl[1]);
    return buf.length >= total ? { status, length: total } : null;
  }
  if (/\r\ntransfer-encoding:\s*chunked/i.test(head)) {
    // walk the chunks: size line, data, CRLF ... until the 0-size chunk and its trailing CRLF
    let off = end + 4;
    for (;;) {
      const lineEnd = buf.indexOf('\r\n', off);
      if (lineEnd < 0) return null;
      const size = parseInt(buf.toString('latin1', off, lineEnd), 16);
      if (size === 0) {
        const fin = buf.indexOf('\r\n\r\n', lineEnd);
        return fin < 0 ? null : { status, length: fin + 4 };
      }
      off = lineEnd + 2 + size + 2;
      if (off > buf.length) return null;
    }
  }
  // no framing (e.g. 204/304): head only
  return { status, length: end + 4 };
}

function dispatch(c: Conn, due: number): void {
  c.due = due;
  sent++;
  if (performance.now() - due > 1) late++;
  c.sock.write(REQUEST);
}

function release(c: Conn): void {
  const next = queue.shift();
  if (next !== undefined) dispatch(c, next);
  else {
    c.due = NaN;
    idle.push(c);
  }
}

function onData(c: Conn, chunk: Buffer): void {
  c.buf = c.buf.length ? Buffer.concat([c.buf, chunk]) : chunk;
  for (;;) {
    const r = complete(c.buf);
    if (!r) return;
    c.buf = c.buf.subarray(r.length);
    const now = performance.now();
    answered++;
    if (r.status >= 200 && r.status < 300) {
      ok++;
      latencies.push(now - c.due);
    } else non2xx++;
    release(c);
  }
}

function connect(): Promise<Conn> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: target.hostname, port: Number(target.port), noDelay: true });
    const c: Conn = { sock, buf: Buffer.alloc(0), due: NaN, ready: false };
    sock.once('connect', () => {
      c.ready = true;
      resolve(c);
    });
    sock.on('data', (d: Buffer) => onData(c, d));
    sock.on('error', (e) => {
      if (!c.ready) return reject(e);
      errors++;
    });
    sock.on('close', () => {
      // a request in flight on a closed connection is lost: counted as an error
      if (!Number.isNaN(c.due)) errors++;
      c.due = NaN;
      const i = idle.indexOf(c);
      if (i >= 0) idle.splice(i, 1);
    });
  });
}

const pct = (sorted: number[], p: number): number => (sorted.length ? (sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] as number) : NaN);

async function main(): Promise<void> {
  for (let i = 0; i < connCount; i++) conns.push(await connect());
  idle.push(...conns);
  const total = Math.round(rate * seconds);
  const interval = 1000 / rate;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now() + 5;
  let i = 0;
  await new Promise<void>((resolve) => {
    const tick = (): void => {
      const now = performance.now();
      while (i < total && t0 + i * interval <= now) {
        const due = t0 + i * interval;
        i++;
        const c = idle.pop();
        if (c) dispatch(c, due);
        else queue.push(due);
      }
      if (i >= total) return resolve();
      setTimeout(tick, Math.max(0, t0 + i * interval - performance.now()));
    };
    setTimeout(tick, 5);
  });
  const sendEnd = performance.now();
  while (answered + errors < total && performance.now() - sendEnd < DRAIN_S * 1000) await new Promise((r) => setTimeout(r, 5));
  const wall = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  latencies.sort((a, b) => a - b);
  const unanswered = total - answered - errors;
  for (const c of conns) c.sock.destroy();
  process.stdout.write(
    `${JSON.stringify({
      sent,
      ok,
      non2xx,
      errors,
      unanswered,
      seconds: wall,
      rps: ok / wall,
      p50Ms: pct(latencies, 50),
      p90Ms: pct(latencies, 90),
      p99Ms: pct(latencies, 99),
      maxMs: latencies.length ? latencies[latencies.length - 1] : NaN,
      lateSends: late,
      cpuPercent: ((cpu.user + cpu.system) / 1000 / (wall * 1000)) * 100,
    })}\n`,
  );
}

main().catch((e: unknown) => {
  console.error(`rate.ts: ${(e as Error).message}`);
  process.exit(1);
});
