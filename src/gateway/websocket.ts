/**
 * The WebSocket bridge: one client WebSocket relayed on one tunnel stream to the container (or to
 * an agent's tunnel target), frames passed through both ways with their close codes.
 */
import type { TunnelChannel, TunnelHandlers, WsFrame } from './tunnel.js';

/** The client's socket, as the bridge uses it (a uWS WebSocket fits). */
export interface WsPeer {
  send(data: Buffer, binary: boolean): unknown;
  end(code: number, reason: string): void;
}

/** What a WebSocket goes to: a container service by slug, or an agent's tunnel target. */
export type WsTarget = { kind: 'service'; slug: string } | { kind: 'agent'; agentId: string };

export class WsBridge {
  /** The tunnel stream (set when it opens, before the client's socket is upgraded). */
  channel: TunnelChannel | null = null;
  private peer: WsPeer | null = null;
  /** Messages from the container that arrived before uWS opened the socket. */
  private readonly pending: WsFrame[] = [];
  private closed = false;
  /** Frees the instance's slot, once (set when the stream is opened). */
  release: () => void = () => undefined;

  /** What the container says on the tunnel stream. */
  readonly handlers: TunnelHandlers = {
    head: () => undefined,
    data: () => undefined,
    window: () => undefined,
    ws: (msg) => {
      if (this.peer) this.deliver(msg);
      else this.pending.push(msg);
    },
    reset: () => {
      if (this.peer && !this.closed) this.peer.end(1011, 'the tunnel to the container failed');
      this.release();
    },
  };

  /** The client's socket opened: what the container already said goes out. */
  opened(peer: WsPeer): void {
    this.peer = peer;
    for (const m of this.pending.splice(0)) this.deliver(m);
  }

  /** A message from the client. */
  fromClient(data: Buffer, binary: boolean): void {
    this.channel?.ws({ data, binary, close: false, closeCode: 0, closeReason: '' });
  }

  /** The client's socket closed. */
  clientClosed(code: number, reason: string): void {
    this.closed = true;
    this.peer = null;
    this.channel?.ws({ data: Buffer.alloc(0), binary: false, close: true, closeCode: code, closeReason: reason });
    this.release();
  }

  private deliver(m: WsFrame): void {
    const ws = this.peer;
    if (!ws || this.closed) return;
    if (m.close) {
      this.closed = true;
      const code = m.closeCode >= 1000 && m.closeCode !== 1005 && m.closeCode !== 1006 ? m.closeCode : 1000;
      ws.end(code, m.closeReason);
      this.release();
    } else ws.send(m.data, m.binary);
  }
}
