/**
 * The agent end of the gateway tunnel (proto/agent/v1/agent.proto, TunnelFrame): each stream the
 * server opens becomes a local HTTP request (or WebSocket) to a container instance on this host, or
 * to the agent's own tunnel target; the response comes back on the same stream. Body bytes flow
 * under a per-stream byte window both ways: credit for request bytes is returned once they were
 * written to the local socket; response bytes wait for the server's credit (the socket is paused).
 * The gateway never dials the agent: everything rides on the agent's outbound gRPC stream.
 */
import http from 'node:http';
import WebSocket from 'ws';
import type { Logger } from '../shared/logger.js';
import type { TunnelFrame } from '../gen/gantry/agent/v1/TunnelFrame.js';
import type { TunnelFrame__Output } from '../gen/gantry/agent/v1/TunnelFrame.js';
import type { TunnelOpen__Output } from '../gen/gantry/agent/v1/TunnelOpen.js';
import { Http1Pool, leanRequestHead, type Http1Exchange } from './http1.js';

const INLINE_BODY_MAX = 64 * 1024;
const MAX_CHUNK = 256 * 1024;
const WINDOW = 1024 * 1024;
/** Headers that describe one hop (RFC 9110 §7.6.1) and are never relayed. */
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'host', 'proxy-authenticate', 'proxy-authorization']);
const WS_OWN = new Set(['sec-websocket-key', 'sec-websocket-version', 'sec-websocket-extensions', 'sec-websocket-accept', 'sec-websocket-protocol', 'content-length']);

export interface TunnelTarget {
  host: string;
  port: number;
}

export interface AgentTunnelOptions {
  /** Writes a frame on the agent's stream; false when the stream is down. */
  send(f: TunnelFrame): boolean;
  /** Where an instance is reachable on this host ('' = the agent's own tunnel target); null when unknown or not running. */
  target(instanceId: string): TunnelTarget | null;
  logger: Logger;
}

interface Stream {
  id: number;
  /** Response body bytes we may still send before the server's credit. */
  credit: number;
  waiters: Array<() => void>;
  req: http.ClientRequest | null;
  res: http.IncomingMessage | null;
  ws: WebSocket | null;
  /** The request on the lean client (http1.ts) instead of req/res. */
  lean: Http1Exchange | null;
  /** The lean client's response head came. */
  answered: boolean;
  /** Lean response bytes waiting for the server's credit (the socket is paused), and whether the body ended after them. */
  held: Buffer | null;
  heldEnd: boolean;
  done: boolean;
  timer: NodeJS.Timeout | null;
}

export class AgentTunnel {
  private readonly streams = new Map<number, Stream>();
  /**
   * Keep-alive to the instances. An idle socket is closed after 4 s, before the common server idle
   * timeouts (Node's 5 s): a request written on a socket the server is closing at that instant fails
   * with ECONNRESET. If it still happens on a reused socket, a request whose whole body is at hand is
   * sent again once on a fresh connection (as Node's documentation recommends).
   */
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 256, maxFreeSockets: 64, timeout: 4_000 });
  /** The same limits for the lean client, which takes the requests whose whole body came in the open frame. */
  private readonly pool = new Http1Pool({ maxSockets: 256, maxFree: 64, idleMs: 4_000 });

  constructor(private readonly o: AgentTunnelOptions) {}

  get active(): number {
    return this.streams.size;
  }

  onFrame(f: TunnelFrame__Output): void {
    const id = f.stream_id;
    if (f.frame === 'open' && f.open) return this.open(id, f.open);
    const s = this.streams.get(id);
    if (!s) return;
    switch (f.frame) {
      case 'data': {
        const d = f.data;
        if (!d || !s.req) return;
        const n = d.data.length;
        if (n > 0) s.req.write(d.data, () => this.send(s, { window: { bytes: n } }));
        if (d.end) s.req.end();
        return;
      }
      case 'window':
        s.credit += f.window?.bytes ?? 0;
        for (const w of s.waiters.splice(0)) w();
        if (s.held) this.leanFlush(s);
        return;
      case 'reset':
        this.finish(s, null);
        return;
      case 'ws': {
        const m = f.ws;
        if (!m || !s.ws) return;
        if (m.close) {
          s.ws.close(validCloseCode(m.close_code), m.close_reason.slice(0, 120));
          this.finish(s, null);
        } else if (s.ws.readyState === WebSocket.OPEN) s.ws.send(m.data, { binary: m.binary });
        return;
      }
      default:
        return;
    }
  }

  /** The agent's stream ended: every tunnel stream is dropped (the gateway answers 502 for them). */
  resetAll(): void {
    for (const s of [...this.streams.values()]) this.finish(s, null);
  }

  close(): void {
    this.resetAll();
    this.agent.destroy();
    this.pool.destroy();
  }

  // ---------------------------------------------------------------------------------------------

  private open(id: number, o: TunnelOpen__Output): void {
    const target = this.o.target(o.instance_id);
    if (!target) {
      this.o.send({ stream_id: id, reset: { code: 'instance_not_found', message: o.instance_id ? `instance ${o.instance_id} is not running on this agent` : 'this agent exposes no tunnel target' } });
      return;
    }
    const s: Stream = { id, credit: o.window || WINDOW, waiters: [], req: null, res: null, ws: null, lean: null, answered: false, held: null, heldEnd: false, done: false, timer: null };
    this.streams.set(id, s);
    if (o.timeout_ms > 0)
      s.timer = setTimeout(() => {
        if (!s.res && !s.answered && !s.done) this.finish(s, { code: 'timeout', message: `the instance did not answer within ${o.timeout_ms} ms` });
      }, o.timeout_ms);
    if (o.websocket) return this.openWs(s, target, o);
    const headers: Record<string, string | string[]> = {};
    for (const h of o.headers) {
      const k = h.name.toLowerCase();
      if (HOP.has(k)) continue;
      const prev = headers[k];
      headers[k] = prev === undefined ? h.value : Array.isArray(prev) ? [...prev, h.value] : [prev, h.value];
    }
    headers.host = `${target.host}:${target.port}`;
    // the common case (the whole body in the open frame) goes on the lean client; the rest on node:http
    const leanHead = o.end ? leanRequestHead(o.method, o.path, headers, o.body) : null;
    if (leanHead !== null) return this.sendLean(s, target, o.method, leanHead, o.body, true);
    const send = (retry: boolean): void => {
      const req = http.request({ host: target.host, port: target.port, method: o.method, path: o.path, headers, agent: this.agent });
      s.req = req;
      req.on('error', (e: NodeJS.ErrnoException) => {
        if (s.req !== req) return;
        if (retry && req.reusedSocket && !s.res && !s.done && (e.code === 'ECONNRESET' || e.code === 'EPIPE')) return send(false);
        this.finish(s, { code: 'connect_failed', message: `the instance could not be reached: ${e.message}` });
      });
      req.on('response', (res) => this.onResponse(s, o.method, res));
      if (o.body.length > 0) req.write(o.body);
      if (o.end) req.end();
    };
    // only a request complete in the open frame can be sent again
    send(o.end);
  }

  private onResponse(s: Stream, method: string, res: http.IncomingMessage): void {
    if (s.done) {
      res.destroy();
      return;
    }
    s.res = res;
    if (s.timer) clearTimeout(s.timer);
    const headers = relayedHeaders(res.rawHeaders);
    const status = res.statusCode ?? 502;
    const len = Number(res.headers['content-length'] ?? NaN);
    const noBody = method === 'HEAD' || status === 204 || status === 304 || (status >= 100 && status < 200);
    const small = noBody || (Number.isFinite(len) && len <= INLINE_BODY_MAX);
    if (small) {
      // the whole response in one frame (a single chunk, the common case, is not copied)
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        if (s.done) return;
        this.send(s, { head: { status, headers, body: chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks), end: true, window: 0 } });
        this.finish(s, null, false);
      });
      res.on('error', (e) => this.finish(s, { code: 'upstream_error', message: e.message }));
      return;
    }
    this.send(s, { head: { status, headers, body: EMPTY, end: false, window: WINDOW } });
    void this.pump(s, res);
  }

  /** A request on the lean client; `retry`: sent once more on a fresh connection if a reused one fails before any answer. */
  private sendLean(s: Stream, target: TunnelTarget, method: string, head: string, body: Buffer, retry: boolean): void {
    let small = false;
    const chunks: Buffer[] = [];
    let pendingHead: { status: number; headers: Array<{ name: string; value: string }> } | null = null;
    const x = this.pool.request(
      target.host,
      target.port,
      head,
      body,
      {
        head: (status, raw) => {
          if (s.done) return x.destroy();
          s.answered = true;
          if (s.timer) clearTimeout(s.timer);
          const headers = relayedHeaders(raw);
          let len = NaN;
          for (let i = 0; i + 1 < raw.length; i += 2) if ((raw[i] as string).toLowerCase() === 'content-length') len = Number(raw[i + 1]);
          const noBody = method === 'HEAD' || status === 204 || status === 304 || (status >= 100 && status < 200);
          small = noBody || (Number.isFinite(len) && len <= INLINE_BODY_MAX);
          if (small) {
            // the whole response in one frame, sent at the end
            pendingHead = { status, headers };
            return;
          }
          this.send(s, { head: { status, headers, body: EMPTY, end: false, window: WINDOW } });
        },
        data: (chunk) => {
          if (s.done) return;
          if (small) chunks.push(chunk);
          else this.leanData(s, chunk);
        },
        end: () => {
          if (s.done) return;
          if (small) {
            const h = pendingHead as { status: number; headers: Array<{ name: string; value: string }> };
            this.send(s, { head: { status: h.status, headers: h.headers, body: chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks), end: true, window: 0 } });
            this.finish(s, null, false);
            return;
          }
          if (s.held) s.heldEnd = true;
          else this.leanEnd(s);
        },
        error: (e, started) => {
          if (s.done || s.lean !== x) return;
          if (!started) {
            if (retry && x.reusedSocket && (e.code === 'ECONNRESET' || e.code === 'EPIPE')) return this.sendLean(s, target, method, head, body, false);
            return this.finish(s, { code: 'connect_failed', message: `the instance could not be reached: ${e.message}` });
          }
          this.finish(s, { code: 'upstream_error', message: small ? e.message : `the instance's response broke off: ${e.message}` });
        },
      },
      !retry,
    );
    s.lean = x;
  }

  /** A lean response chunk out under the server's credit; what the credit does not cover waits (socket paused). */
  private leanData(s: Stream, chunk: Buffer): void {
    for (let off = 0; off < chunk.length; ) {
      if (s.done) return;
      if (s.credit <= 0) {
        s.held = chunk.subarray(off);
        s.lean?.pause();
        return;
      }
      const n = Math.min(chunk.length - off, s.credit, MAX_CHUNK);
      this.send(s, { data: { data: chunk.subarray(off, off + n), end: false } });
      s.credit -= n;
      off += n;
    }
  }

  /** Credit came back: the held bytes go out, then the socket reads on (or the body's end goes out). */
  private leanFlush(s: Stream): void {
    const h = s.held as Buffer;
    s.held = null;
    this.leanData(s, h);
    if (s.held || s.done) return;
    if (s.heldEnd) this.leanEnd(s);
    else s.lean?.resume();
  }

  private leanEnd(s: Stream): void {
    this.send(s, { data: { data: EMPTY, end: true } });
    this.finish(s, null, false);
  }

  /** Streams the response body under the server's credit. */
  private async pump(s: Stream, res: http.IncomingMessage): Promise<void> {
    try {
      for await (const chunk of res as AsyncIterable<Buffer>) {
        for (let off = 0; off < chunk.length; ) {
          if (s.done) return;
          while (s.credit <= 0 && !s.done) await new Promise<void>((r) => s.waiters.push(r));
          if (s.done) return;
          const n = Math.min(chunk.length - off, s.credit, MAX_CHUNK);
          this.send(s, { data: { data: chunk.subarray(off, off + n), end: false } });
          s.credit -= n;
          off += n;
        }
      }
      if (s.done) return;
      this.send(s, { data: { data: Buffer.alloc(0), end: true } });
      this.finish(s, null, false);
    } catch (e) {
      this.finish(s, { code: 'upstream_error', message: `the instance's response broke off: ${(e as Error).message}` });
    }
  }

  private openWs(s: Stream, target: TunnelTarget, o: TunnelOpen__Output): void {
    const headers: Record<string, string> = {};
    let protocols: string[] = [];
    for (const h of o.headers) {
      const k = h.name.toLowerCase();
      if (k === 'sec-websocket-protocol') protocols = h.value.split(',').map((p) => p.trim()).filter(Boolean);
      else if (!HOP.has(k) && !WS_OWN.has(k)) headers[k] = h.value;
    }
    const ws = new WebSocket(`ws://${target.host}:${target.port}${o.path}`, protocols, { headers, perMessageDeflate: false, handshakeTimeout: o.timeout_ms || 30_000 });
    s.ws = ws;
    ws.on('upgrade', (res) => {
      if (s.timer) clearTimeout(s.timer);
      s.res = res;
    });
    ws.on('open', () => {
      this.send(s, { head: { status: 101, headers: ws.protocol ? [{ name: 'sec-websocket-protocol', value: ws.protocol }] : [], body: Buffer.alloc(0), end: false, window: 0 } });
    });
    ws.on('unexpected-response', (_req, res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        if (s.done) return;
        this.send(s, { head: { status: res.statusCode ?? 502, headers: relayedHeaders(res.rawHeaders), body: Buffer.concat(chunks), end: true, window: 0 } });
        this.finish(s, null, false);
      });
    });
    ws.on('message', (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => {
      const buf = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
      this.send(s, { ws: { data: buf, binary: isBinary, close: false, close_code: 0, close_reason: '' } });
    });
    ws.on('close', (code: number, reason: Buffer) => {
      if (s.done) return;
      this.send(s, { ws: { data: Buffer.alloc(0), binary: false, close: true, close_code: code, close_reason: reason.toString('utf8') } });
      this.finish(s, null, false);
    });
    ws.on('error', (e) => {
      if (!s.res) this.finish(s, { code: 'connect_failed', message: `the instance's WebSocket could not be opened: ${e.message}` });
    });
  }

  private send(s: Stream, f: Omit<TunnelFrame, 'stream_id'>): void {
    if (s.done) return;
    if (!this.o.send({ stream_id: s.id, ...f })) this.finish(s, null);
  }

  /** Ends a stream: with reset (tells the server why), or quietly (done, or the server reset it). */
  private finish(s: Stream, reset: { code: string; message: string } | null, destroy = true): void {
    if (s.done) return;
    if (reset) this.o.send({ stream_id: s.id, reset });
    s.done = true;
    this.streams.delete(s.id);
    if (s.timer) clearTimeout(s.timer);
    for (const w of s.waiters.splice(0)) w();
    if (destroy) {
      s.lean?.destroy();
      s.req?.destroy();
      s.res?.destroy();
      if (s.ws && s.ws.readyState !== WebSocket.CLOSED) s.ws.terminate();
    }
  }
}

const EMPTY = Buffer.alloc(0);
/** A response's raw headers (name, value, name, value...) minus hop-by-hop, in the wire form, in one pass. */
function relayedHeaders(raw: string[]): Array<{ name: string; value: string }> {
  const out: Array<{ name: string; value: string }> = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i] as string;
    if (!HOP.has(name.toLowerCase())) out.push({ name, value: raw[i + 1] as string });
  }
  return out;
}
/** Close codes a peer may send (RFC 6455 §7.4): 1000-1014 except the reserved ones, and 3000-4999. */
const validCloseCode = (c: number): number => ((c >= 1000 && c <= 1014 && c !== 1004 && c !== 1005 && c !== 1006) || (c >= 3000 && c <= 4999) ? c : 1000);
