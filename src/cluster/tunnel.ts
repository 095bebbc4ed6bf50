/**
 * Gateway tunnel streams forwarded between nodes (proto/cluster/v1/remoting.proto, Remoting.Tunnel):
 * a proxy request that lands on a node without the agent's stream is carried, one gRPC call per
 * request, to the node that holds it, which relays the frames to and from the agent unchanged.
 * HTTP/2 flow control on the call and the tunnel's own byte windows bound what is in flight.
 */
import type * as grpc from '@grpc/grpc-js';
import type { TunnelChunk, TunnelChunk__Output } from '../gen/gantry/cluster/v1/TunnelChunk.js';
import type { RemotingClient } from '../gen/gantry/cluster/v1/Remoting.js';
import type { Logger } from '../shared/logger.js';
import { dispatchToHandlers, openFrame, wsFrame, type OpenTunnel, type TunnelChannel, type TunnelHandlers, type TunnelOpenInfo } from '../gateway/tunnel.js';

type ServerCall = grpc.ServerDuplexStream<TunnelChunk__Output, TunnelChunk>;
type ClientCall = grpc.ClientDuplexStream<TunnelChunk, TunnelChunk__Output>;

const ID = 1;

/** The receiving node: opens the tunnel on the local agent stream and relays both ways. */
export function serveTunnel(call: ServerCall, open: OpenTunnel | null, logger: Logger): void {
  let channel: TunnelChannel | null = null;
  let done = false;
  const finish = (): void => {
    if (done) return;
    done = true;
    try {
      call.end();
    } catch {
      /* gone */
    }
  };
  const send = (c: TunnelChunk): void => {
    if (!done) call.write(c);
  };
  call.on('data', (c: TunnelChunk__Output) => {
    const f = c.frame;
    if (!f) return;
    if (!channel) {
      if (f.frame !== 'open' || !f.open) return finish();
      const o = f.open;
      const info: TunnelOpenInfo = {
        instanceId: o.instance_id,
        method: o.method,
        path: o.path,
        headers: o.headers.map((h): [string, string] => [h.name, h.value]),
        body: o.body,
        end: o.end,
        websocket: o.websocket,
        window: o.window,
        timeoutMs: o.timeout_ms,
      };
      const h: TunnelHandlers = {
        head: (x) => send({ frame: { stream_id: ID, head: { status: x.status, headers: x.headers.map(([name, value]) => ({ name, value })), body: x.body, end: x.end, window: x.window } } }),
        data: (chunk, end) => send({ frame: { stream_id: ID, data: { data: chunk, end } } }),
        window: (n) => send({ frame: { stream_id: ID, window: { bytes: n } } }),
        ws: (m) => send({ frame: wsFrame(ID, m) }),
        reset: (code, message) => {
          send({ frame: { stream_id: ID, reset: { code, message } } });
          finish();
        },
      };
      channel = open?.(c.agent_id, c.team_id, info, h) ?? null;
      if (!channel) {
        send({ frame: { stream_id: ID, reset: { code: 'agent_unreachable', message: 'the agent stream is not on this node any more' } } });
        finish();
      }
      return;
    }
    switch (f.frame) {
      case 'data':
        if (f.data) channel.data(f.data.data, f.data.end);
        return;
      case 'window':
        channel.window(f.window?.bytes ?? 0);
        return;
      case 'ws':
        if (f.ws) channel.ws({ data: f.ws.data, binary: f.ws.binary, close: f.ws.close, closeCode: f.ws.close_code, closeReason: f.ws.close_reason });
        return;
      case 'reset':
        channel.reset(f.reset?.code ?? 'cancelled', f.reset?.message ?? '');
        finish();
        return;
      default:
        return;
    }
  });
  const gone = (): void => {
    if (!done) channel?.reset('cancelled', 'the forwarding node went away');
    done = true;
  };
  call.on('cancelled', gone);
  call.on('error', (e: Error) => {
    logger.debug({ err_message: e.message }, 'cluster tunnel: call error');
    gone();
  });
  call.on('end', finish);
}

/** The forwarding node: one call to the node holding the agent's stream. */
export function openRemoteTunnel(client: RemotingClient, agentId: string, teamId: string, open: TunnelOpenInfo, h: TunnelHandlers): TunnelChannel {
  const call: ClientCall = client.Tunnel();
  let done = false;
  const finish = (): void => {
    if (done) return;
    done = true;
    call.end();
  };
  call.on('data', (c: TunnelChunk__Output) => {
    if (done || !c.frame) return;
    const ended = dispatchToHandlers(h, c.frame);
    if (c.frame.frame === 'reset' || (c.frame.frame === 'ws' && c.frame.ws?.close)) finish();
    else if (ended) {
      /* response complete; the other side ends the call */
    }
  });
  const broken = (why: string): void => {
    if (done) return;
    done = true;
    h.reset('node_unreachable', `the node holding the agent's stream could not be reached: ${why}`);
  };
  call.on('error', (e: Error) => broken(e.message));
  call.on('end', () => {
    if (!done) {
      done = true;
    }
  });
  call.write({ agent_id: agentId, team_id: teamId, frame: openFrame(ID, open) });
  return {
    data: (chunk, end) => {
      if (!done) call.write({ frame: { stream_id: ID, data: { data: chunk, end } } });
    },
    window: (n) => {
      if (!done && n > 0) call.write({ frame: { stream_id: ID, window: { bytes: n } } });
    },
    ws: (m) => {
      if (done) return;
      call.write({ frame: wsFrame(ID, m) });
      if (m.close) finish();
    },
    reset: (code, message) => {
      if (done) return;
      call.write({ frame: { stream_id: ID, reset: { code, message } } });
      finish();
    },
  };
}
