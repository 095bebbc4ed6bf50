/**
 * WebSocket to an external container service (service_type external): the client's WebSocket is
 * relayed to the service's external_url (wss:, the path after the slug joined as for HTTP), with
 * the team's vault header injected, through the outbound guard (the socket connects only to
 * addresses the guard's lookup checked; an IP literal is checked before). It speaks the tunnel's
 * channel/handlers shape, so the gateway's WsBridge relays it like a container's WebSocket:
 * `head` carries the service's answer to the upgrade (101, or its refusal with the body), then
 * frames both ways with their close codes. Redirects are not followed on an upgrade (the answer
 * is relayed as is). Frames the client sends before the service's socket is open are queued.
 */
import type { IncomingMessage } from 'node:http';
import WebSocket from 'ws';
import { OutboundRefused, type OutboundGuard } from '../events/outbound.js';
import { ExternalError, checkHop, joinExternalUrl } from './external.js';
import type { HeaderList, TunnelChannel, TunnelHandlers, WsFrame } from './tunnel.js';

/** What one external WebSocket needs; resolved asynchronously (the vault header is read first). */
export interface ExternalWsRequest {
  baseUrl: string;
  /** The path after the slug incl. query; starts with '/'. */
  path: string;
  /** The client's headers as the gateway forwards them (hop-by-hop and Gantry's own already dropped). */
  headers: HeaderList;
  inject: { name: string; value: string } | null;
  /** Until the service answers the upgrade. */
  timeoutMs: number;
  ca?: string[];
}

/** Largest body of a refused upgrade relayed to the client (the rest is cut). */
const REFUSAL_BODY_MAX = 64 * 1024;
/** Largest message relayed from the service (as the tunnel's frame limit). */
const MAX_PAYLOAD = 16 * 1024 * 1024;
/** Headers the ws client writes itself (the handshake's own). */
const HANDSHAKE_OWN = new Set(['host', 'connection', 'upgrade', 'sec-websocket-key', 'sec-websocket-version', 'sec-websocket-extensions', 'sec-websocket-protocol']);

const rawHeaders = (res: IncomingMessage): HeaderList => {
  const out: HeaderList = [];
  for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) out.push([res.rawHeaders[i] as string, res.rawHeaders[i + 1] as string]);
  return out;
};

/** A close code the client may be sent (RFC 6455 §7.4: 1005/1006/1015 are never on the wire). */
const sendableClose = (code: number): number => (code === 1000 || (code >= 1001 && code <= 1014 && code !== 1005 && code !== 1006) || (code >= 3000 && code <= 4999) ? code : 1000);

/**
 * Opens the WebSocket to the external service: throws an ExternalError when the URL or its IP
 * literal is refused, else returns the channel at once; `h.head` follows when the service answers
 * the upgrade, `h.reset(code, message)` when it cannot be reached (code: an ExternalErrorCode:
 * refused by the guard's lookup, timeout, connect).
 */
export async function openExternalWebSocket(guard: OutboundGuard, r: ExternalWsRequest, h: TunnelHandlers): Promise<TunnelChannel> {
  const url = joinExternalUrl(r.baseUrl, r.path);
  await checkHop(guard, url);
  url.protocol = 'wss:';
  let socket: WebSocket | null = null;
  let open = false;
  let done = false;
  const queued: WsFrame[] = [];
  const fail = (e: unknown): void => {
    if (done) return;
    done = true;
    const code = e instanceof ExternalError ? e.code : e instanceof OutboundRefused ? 'refused' : 'connect';
    h.reset(code, e instanceof Error ? e.message : String(e));
  };
  const toService = (m: WsFrame): void => {
    const ws = socket;
    if (!ws || !open) {
      queued.push(m);
      return;
    }
    if (m.close) ws.close(sendableClose(m.closeCode), m.closeReason.slice(0, 123));
    else ws.send(m.data, { binary: m.binary });
  };
  const connect = (): void => {
    const headers: Record<string, string> = {};
    let protocols: string[] = [];
    for (const [k, v] of r.headers) {
      const key = k.toLowerCase();
      if (key === 'sec-websocket-protocol') protocols = v.split(',').map((p) => p.trim()).filter(Boolean);
      else if (!HANDSHAKE_OWN.has(key)) headers[key] = v;
    }
    if (r.inject) {
      // the caller cannot send its own value under the vault header's name
      delete headers[r.inject.name.toLowerCase()];
      headers[r.inject.name.toLowerCase()] = r.inject.value;
    }
    const ws = new WebSocket(url, protocols, {
      headers,
      handshakeTimeout: r.timeoutMs,
      followRedirects: false,
      perMessageDeflate: false,
      maxPayload: MAX_PAYLOAD,
      rejectUnauthorized: true,
      ...(r.ca ? { ca: r.ca } : {}),
      // every connection resolves through the guard (no DNS-rebinding window)
      lookup: guard.lookup as never,
    });
    socket = ws;
    let upgrade: IncomingMessage | null = null;
    ws.on('upgrade', (res) => {
      upgrade = res;
    });
    ws.on('open', () => {
      open = true;
      h.head({ status: 101, headers: upgrade ? rawHeaders(upgrade) : [], body: Buffer.alloc(0), end: false, window: 0 });
      for (const m of queued.splice(0)) toService(m);
    });
    ws.on('unexpected-response', (req, res) => {
      // the service refused the upgrade: its answer goes back to the client as is (body bounded)
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        if (size < REFUSAL_BODY_MAX) chunks.push(c.subarray(0, REFUSAL_BODY_MAX - size));
        size += c.length;
      });
      const finish = (): void => {
        if (done) return;
        done = true;
        h.head({ status: res.statusCode ?? 502, headers: rawHeaders(res), body: Buffer.concat(chunks), end: true, window: 0 });
        req.destroy();
      };
      res.on('end', finish);
      res.on('error', finish);
    });
    ws.on('message', (data: Buffer, isBinary: boolean) => h.ws({ data, binary: isBinary, close: false, closeCode: 0, closeReason: '' }));
    ws.on('close', (code: number, reason: Buffer) => {
      if (!open) return fail(new ExternalError('connect', `the external service closed the connection before the upgrade (${code})`));
      if (done) return;
      done = true;
      h.ws({ data: Buffer.alloc(0), binary: false, close: true, closeCode: code, closeReason: reason.toString('utf8') });
    });
    ws.on('error', (e: Error) => {
      if (open) {
        if (!done) {
          done = true;
          h.reset('connect', e.message);
        }
        return;
      }
      const timeout = /timed out/i.test(e.message);
      fail(e instanceof ExternalError || e instanceof OutboundRefused ? e : new ExternalError(timeout ? 'timeout' : 'connect', timeout ? `no answer to the upgrade from ${url.origin} within ${r.timeoutMs} ms` : `${url.origin}: ${e.message}`, { cause: e }));
    });
  };
  try {
    connect();
  } catch (e) {
    // the ws client refuses a header value or option synchronously
    throw new ExternalError('invalid_request', (e as Error).message, { cause: e });
  }
  return {
    data: () => undefined,
    window: () => undefined,
    ws: toService,
    reset: () => {
      done = true;
      socket?.terminate();
    },
  };
}
