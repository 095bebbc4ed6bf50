/**
 * Gateway tunnel streams over an agent's gRPC stream (proto/agent/v1/agent.proto, TunnelFrame):
 * one stream per proxied request or WebSocket, multiplexed by stream id, each with its own byte
 * window in both directions. TunnelMux is the server end on one agent connection; the gateway
 * drives a stream through the TunnelChannel it returns and hears the agent through TunnelHandlers.
 * The same two interfaces front a stream forwarded from another cluster node (cluster/tunnel.ts).
 */
import { z } from 'zod';
import type { TunnelFrame } from '../gen/gantry/agent/v1/TunnelFrame.js';
import type { TunnelFrame__Output } from '../gen/gantry/agent/v1/TunnelFrame.js';

/** Body bytes a side may have in flight on one stream before the peer returns credit. */
export const TUNNEL_WINDOW = 1024 * 1024;
/** A body up to this size travels inside the open/head frame. */
export const INLINE_BODY_MAX = 64 * 1024;
/** Largest data frame either side sends. */
export const MAX_CHUNK = 256 * 1024;

export type HeaderList = Array<[string, string]>;

export interface TunnelOpenInfo {
  /** '' = the agent's own tunnel target. */
  instanceId: string;
  method: string;
  path: string;
  headers: HeaderList;
  body: Buffer;
  end: boolean;
  websocket: boolean;
  window: number;
  timeoutMs: number;
}

export interface TunnelHeadInfo {
  status: number;
  headers: HeaderList;
  body: Buffer;
  end: boolean;
  window: number;
}

export interface WsFrame {
  data: Buffer;
  binary: boolean;
  close: boolean;
  closeCode: number;
  closeReason: string;
}

/** What the agent says on one stream. */
export interface TunnelHandlers {
  head(h: TunnelHeadInfo): void;
  data(chunk: Buffer, end: boolean): void;
  window(bytes: number): void;
  ws(m: WsFrame): void;
  reset(code: string, message: string): void;
}

/** What the gateway says on one stream. */
export interface TunnelChannel {
  data(chunk: Buffer, end: boolean): void;
  window(bytes: number): void;
  ws(m: WsFrame): void;
  reset(code: string, message: string): void;
}

/** Opens a stream to an agent wherever its gRPC stream is; null when no node holds it. */
export type OpenTunnel = (agentId: string, teamId: string, open: TunnelOpenInfo, h: TunnelHandlers) => TunnelChannel | null;

const u32 = z.number().int().min(0).max(0xffff_ffff);
const bytes = (max: number) => z.instanceof(Buffer).refine((b) => b.length <= max, `at most ${max} bytes`);
const headers = z
  .array(z.object({ name: z.string().min(1).max(256), value: z.string().max(16 * 1024) }))
  .max(500)
  .transform((hs) => hs.map((h): [string, string] => [h.name, h.value]));

/** What an agent may send on a tunnel stream (decoded once here, whoever relays it). */
export const TunnelFrameFromAgent = z.discriminatedUnion('frame', [
  z.object({ frame: z.literal('head'), stream_id: z.number().int().min(1), head: z.object({ status: u32.min(100).max(599), headers, body: bytes(INLINE_BODY_MAX * 2), end: z.boolean(), window: u32 }) }),
  z.object({ frame: z.literal('data'), stream_id: z.number().int().min(1), data: z.object({ data: bytes(MAX_CHUNK * 4), end: z.boolean() }) }),
  z.object({ frame: z.literal('window'), stream_id: z.number().int().min(1), window: z.object({ bytes: u32 }) }),
  z.object({ frame: z.literal('reset'), stream_id: z.number().int().min(1), reset: z.object({ code: z.string().max(100), message: z.string().max(4000) }) }),
  z.object({ frame: z.literal('ws'), stream_id: z.number().int().min(1), ws: z.object({ data: bytes(16 * 1024 * 1024), binary: z.boolean(), close: z.boolean(), close_code: u32, close_reason: z.string().max(1000) }) }),
]);

export const openFrame = (id: number, o: TunnelOpenInfo): TunnelFrame => ({
  stream_id: id,
  open: { instance_id: o.instanceId, method: o.method, path: o.path, headers: o.headers.map(([name, value]) => ({ name, value })), body: o.body, end: o.end, websocket: o.websocket, window: o.window, timeout_ms: o.timeoutMs },
});

export const wsFrame = (id: number, m: WsFrame): TunnelFrame => ({ stream_id: id, ws: { data: m.data, binary: m.binary, close: m.close, close_code: m.closeCode, close_reason: m.closeReason } });

/**
 * Dispatches an agent frame to a stream's handlers; true when the stream is finished. The frequent
 * frames (head, data, window) are checked by hand on this hot path, with the same bounds as the
 * schema; the others go through TunnelFrameFromAgent.
 */
export function dispatchToHandlers(h: TunnelHandlers, raw: TunnelFrame__Output): boolean {
  switch (raw.frame) {
    case 'data': {
      const d = raw.data;
      if (!d || !Buffer.isBuffer(d.data) || d.data.length > MAX_CHUNK * 4) break;
      h.data(d.data, d.end === true);
      return d.end === true;
    }
    case 'window': {
      const n = raw.window?.bytes;
      if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > 0xffff_ffff) break;
      h.window(n);
      return false;
    }
    case 'head': {
      const x = raw.head;
      if (!x || !Number.isInteger(x.status) || x.status < 100 || x.status > 599 || !Buffer.isBuffer(x.body) || x.body.length > INLINE_BODY_MAX * 2 || !Array.isArray(x.headers) || x.headers.length > 500) break;
      const headers: HeaderList = [];
      let bad = false;
      for (const e of x.headers) {
        if (typeof e.name !== 'string' || typeof e.value !== 'string' || e.name.length === 0 || e.name.length > 256 || e.value.length > 16 * 1024) {
          bad = true;
          break;
        }
        headers.push([e.name, e.value]);
      }
      if (bad) break;
      h.head({ status: x.status, headers, body: x.body, end: x.end === true, window: x.window >>> 0 });
      return x.end === true;
    }
    default: {
      const r = TunnelFrameFromAgent.safeParse(raw);
      if (!r.success) break;
      const f = r.data;
      if (f.frame === 'reset') {
        h.reset(f.reset.code || 'reset', f.reset.message);
        return true;
      }
      if (f.frame === 'ws') {
        h.ws({ data: f.ws.data, binary: f.ws.binary, close: f.ws.close, closeCode: f.ws.close_code, closeReason: f.ws.close_reason });
        return false;
      }
      break;
    }
  }
  h.reset('protocol_error', 'the agent sent an invalid tunnel frame');
  return true;
}

/** The gateway's side of one stream of a TunnelMux (a class: no closures per proxied request). */
class MuxChannel implements TunnelChannel {
  constructor(
    private readonly id: number,
    private readonly streams: Map<number, TunnelHandlers>,
    private readonly write: (f: TunnelFrame) => boolean,
  ) {}

  private live(): boolean {
    return this.streams.has(this.id);
  }

  data(chunk: Buffer, end: boolean): void {
    if (this.live()) this.write({ stream_id: this.id, data: { data: chunk, end } });
  }

  window(n: number): void {
    if (this.live() && n > 0) this.write({ stream_id: this.id, window: { bytes: n } });
  }

  ws(m: WsFrame): void {
    if (this.live()) this.write(wsFrame(this.id, m));
    if (m.close) this.streams.delete(this.id);
  }

  reset(code: string, message: string): void {
    if (!this.live()) return;
    this.streams.delete(this.id);
    this.write({ stream_id: this.id, reset: { code, message } });
  }
}

/**
 * The server end of the tunnel streams on one agent connection. `write` puts a frame on the
 * agent's stream (outside the message window).
 */
export class TunnelMux {
  private readonly streams = new Map<number, TunnelHandlers>();
  private nextId = 1;
  private closed = false;

  constructor(private readonly write: (f: TunnelFrame) => boolean) {}

  get size(): number {
    return this.streams.size;
  }

  open(o: TunnelOpenInfo, h: TunnelHandlers): TunnelChannel | null {
    if (this.closed) return null;
    const id = this.nextId++;
    this.streams.set(id, h);
    if (!this.write(openFrame(id, o))) {
      this.streams.delete(id);
      return null;
    }
    return new MuxChannel(id, this.streams, this.write);
  }

  /** A tunnel frame from the agent. */
  onFrame(f: TunnelFrame__Output): void {
    const h = this.streams.get(f.stream_id);
    if (!h) return;
    if (dispatchToHandlers(h, f) || (f.frame === 'ws' && f.ws?.close)) this.streams.delete(f.stream_id);
  }

  /** The agent's stream ended: every open tunnel stream fails. */
  closeAll(code: string, message: string): void {
    this.closed = true;
    const hs = [...this.streams.values()];
    this.streams.clear();
    for (const h of hs) h.reset(code, message);
  }
}
