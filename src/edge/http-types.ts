/**
 * The edge's route contract (src/edge/http.ts serves it): the request context a handler sees, the
 * replies it may return and a route's definition.
 */
import type { Logger } from '../shared/logger.js';
import type { Method } from './router.js';
import type { Principal, RouteAuth, TeamPrincipal } from './principal.js';
import type { RouteDoc } from './openapi/types.js';
import type { StreamResponse } from './http-stream.js';

export interface Ctx {
  method: string;
  path: string;
  /** The raw query string (without '?'), as the client sent it. */
  rawQuery: string;
  params: Record<string, string>;
  query: URLSearchParams;
  /** Lower-cased header names. */
  headers: Record<string, string>;
  ip: string;
  requestId: string;
  log: Logger;
  principal: Principal | null;
  /** Parsed JSON body (json routes); undefined when the request had none. */
  body: unknown;
  rawBody: Buffer;
}

export interface TeamCtx extends Ctx {
  principal: TeamPrincipal;
}

export class Reply {
  constructor(
    readonly status: number,
    readonly body: unknown,
    readonly headers: Record<string, string> = {},
  ) {}
}

/** A reply whose body is text of the given content type (e.g. GET /usage's CSV export), not JSON. */
export class TextReply {
  constructor(
    readonly status: number,
    readonly contentType: string,
    readonly text: string,
    readonly headers: Record<string, string> = {},
  ) {}
}

export type JsonHandler = (ctx: Ctx) => Promise<unknown>;
export type StreamHandler = (ctx: Ctx, res: StreamResponse) => Promise<void>;

export interface RouteDef {
  method: Method;
  path: string;
  auth: RouteAuth;
  /** json (default): the body is read (with the cap) and parsed before the handler runs. */
  handler?: JsonHandler;
  /** stream: the handler owns the response and may read the body as a stream. */
  stream?: StreamHandler;
  /** Raw body routes: body kept as bytes, not parsed (e.g. MCP parses itself). */
  rawBody?: boolean;
  /** Override of the body cap for this route. */
  maxBodyBytes?: number;
  /** Routes outside /api/v1 (health, storage) set this. */
  absolute?: boolean;
  /** Extra tag for the route table test and docs. */
  tag?: string;
  /** OpenAPI documentation of the route (src/edge/openapi/types.ts; docs/api.md "OpenAPI document"). */
  doc?: RouteDoc;
}
