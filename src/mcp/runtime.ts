/**
 * The MCP tools reach Gantry through the REST runtime surface's own route handlers, not through a
 * second implementation: a tool names a runtime route (method + path under /api/v1, e.g.
 * `GET /r/tasks/{id}`), the edge resolves it with the same router as an HTTP request, and the
 * route's handler runs with the MCP caller's principal. Validation, team scoping, not-found rules,
 * idempotency and the response shapes are therefore exactly REST's. Only routes whose auth accepts
 * integration credentials (the runtime surface, `/r/...`) can be called: anything else is a wiring
 * bug and fails loudly.
 */
import type { Logger } from '../shared/logger.js';
import { AppError } from '../shared/errors.js';
import { checkJsonValue, checkPairs, parseQuery } from '../shared/input-hygiene.js';
import { Reply, type Ctx, type RouteDef } from '../edge/http.js';
import type { TeamPrincipal } from '../edge/principal.js';

export type RouteLookup = (method: string, path: string) => { def: RouteDef; params: Record<string, string> } | null;

export interface RuntimeCallOptions {
  query?: Record<string, string | number | undefined>;
  body?: unknown;
  headers?: Record<string, string>;
}

export interface RuntimeResult {
  status: number;
  body: unknown;
}

const EMPTY = Buffer.alloc(0);

export class RuntimeCaller {
  constructor(
    private readonly lookup: RouteLookup,
    private readonly basePath: string,
    private readonly logger: Logger,
  ) {}

  /** Runs the runtime route's handler for this caller; a refusal is thrown as the route's AppError. */
  async call(p: TeamPrincipal, method: 'GET' | 'POST', path: string, o: RuntimeCallOptions = {}, requestId = ''): Promise<RuntimeResult> {
    const full = `${this.basePath}${path}`;
    const m = this.lookup(method, full);
    if (!m || !m.def.handler) throw new Error(`mcp: no JSON runtime route for ${method} ${path}`);
    const auth = m.def.auth;
    if (auth.kinds === 'public' || !auth.kinds.includes('integration') || auth.team !== true) throw new Error(`mcp: ${method} ${path} is not a runtime route`);
    // the edge's input hygiene, once for every route (the transport parsed the JSON, not the edge)
    const bad = checkPairs(Object.entries(m.params), 'path parameter') ?? (o.body === undefined ? null : checkJsonValue(o.body));
    if (bad) throw bad;
    const qs = new URLSearchParams();
    for (const [k, v] of Object.entries(o.query ?? {})) if (v !== undefined) qs.set(k, String(v));
    const rawQuery = qs.toString();
    let log: Logger | null = null;
    const logger = this.logger;
    const ctx: Ctx = {
      method,
      path: full,
      rawQuery,
      params: m.params,
      query: parseQuery(rawQuery),
      headers: Object.fromEntries(Object.entries(o.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v])),
      ip: '',
      requestId,
      get log(): Logger {
        return (log ??= logger.child({ request_id: requestId, via: 'mcp' }));
      },
      principal: p,
      body: o.body,
      rawBody: EMPTY,
    };
    const out = await m.def.handler(ctx);
    if (out instanceof Reply) return { status: out.status, body: out.body };
    return { status: 200, body: out ?? { is_success: true } };
  }
}

/** Error text for a tool result: the REST error's message and code. */
export function errorText(e: unknown): string | null {
  if (e instanceof AppError) return `${e.message} (error_code ${e.code})`;
  return null;
}
