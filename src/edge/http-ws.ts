import uWS from 'uWebSockets.js';
import type { HttpResponse, TemplatedApp } from 'uWebSockets.js';
import { uuidv7 } from '../shared/ids.js';

/** A WebSocket upgrade request, read synchronously from uWS (the request object dies after the callback). */
export interface UpgradeRequest {
  method: string;
  path: string;
  rawQuery: string;
  /** Lower-cased header names. */
  headers: Record<string, string>;
  ip: string;
  requestId: string;
  res: HttpResponse;
  context: uWS.us_socket_context_t;
}

/**
 * Completes a WebSocket upgrade decided after an await (authentication, a tunnel to a container).
 * Deliberately NOT inside res.cork(): in the uWebSockets build we can install (npm uwebsockets@3.0.6),
 * cork() tells that its handler upgraded the socket only by comparing socket pointers, but
 * us_socket_context_adopt_socket() reallocates the poll in place when the WebSocket's extension is
 * not larger than the HTTP response's, so the pointer stays the same; cork() then ran its HTTP
 * "connection close" logic on memory that is now the WebSocket's and, depending on what that memory
 * held, shut the new WebSocket down right after open (the client sees 1006; measured: 2 of 12 fresh
 * nodes dropped one of their first three agent connections). Fixed upstream in uWebSockets
 * fe7c01a (#1929, "Fix cork() closing a WebSocket that was upgraded asynchronously"), which no npm
 * build carries yet. Uncorked, uWS writes the 101 as it goes and prints its "writes must be made
 * from within a corked callback" warning on stderr once per such upgrade (README, Operations).
 */
export function upgradeAfterAwait<U>(r: UpgradeRequest, userData: U, protocol = ''): void {
  r.res.upgrade<U>(userData, r.headers['sec-websocket-key'] ?? '', protocol, '', r.context);
}

/** uWS settings of a WebSocket route. */
export interface WebSocketRouteOptions {
  maxPayloadLength: number;
  maxBackpressure: number;
  idleTimeout: number;
}

/** WebSocket handling (the gateway): upgrade decides (answers or upgrades with userData), the rest relays. */
export interface WebSocketHandler<U = unknown> {
  upgrade(r: UpgradeRequest): void;
  open(ws: uWS.WebSocket<U>): void;
  message(ws: uWS.WebSocket<U>, data: ArrayBuffer, isBinary: boolean): void;
  drain(ws: uWS.WebSocket<U>): void;
  close(ws: uWS.WebSocket<U>, code: number, message: ArrayBuffer): void;
}

/** Registers a WebSocket handler on a path pattern (an exact path, or the catch-all /*). */
export function registerWebSocket(app: TemplatedApp, pattern: string, wsh: WebSocketHandler<never>, opts: WebSocketRouteOptions): void {
  app.ws<never>(pattern, {
    compression: uWS.DISABLED,
    maxPayloadLength: opts.maxPayloadLength,
    maxBackpressure: opts.maxBackpressure,
    idleTimeout: opts.idleTimeout,
    sendPingsAutomatically: true,
    upgrade: (res, req, context) => {
      const headers: Record<string, string> = {};
      req.forEach((k, v) => {
        headers[k] = headers[k] === undefined ? v : `${headers[k]}, ${v}`;
      });
      const rid = headers['x-request-id'];
      wsh.upgrade({
        method: req.getCaseSensitiveMethod().toUpperCase(),
        path: req.getUrl(),
        rawQuery: req.getQuery() ?? '',
        headers,
        ip: Buffer.from(res.getRemoteAddressAsText()).toString(),
        requestId: rid && /^[A-Za-z0-9._:-]{1,128}$/.test(rid) ? rid : uuidv7(),
        res,
        context,
      });
    },
    open: (ws) => wsh.open(ws),
    message: (ws, data, isBinary) => wsh.message(ws, data, isBinary),
    drain: (ws) => wsh.drain(ws),
    close: (ws, code, message) => wsh.close(ws, code, message),
  });
}
