/**
 * POST|GET|DELETE /api/v1/mcp: the MCP endpoint (Streamable HTTP), docs/api.md "MCP". GET (after
 * authentication) is the spec's 405: no standalone SSE stream is offered.
 *
 * A thin uWebSockets.js adapter around the SDK's web-standard transport (src/mcp/server.ts): the
 * edge authenticates (sk- only; JWT, dk-, ak-, missing, revoked or expired credentials get 401 with
 * the error envelope and `WWW-Authenticate: Bearer` before any MCP processing), the body is read
 * with the route's cap, a web Request is built from the uWS request, and the transport's web
 * Response (JSON or an SSE stream) is written back with backpressure. A client that goes away
 * cancels the response stream, which closes the per-request server (its in-flight tools see the
 * abort signal).
 */
import type { RouteAuth } from '../principal.js';
import type { Ctx, RouteDef, StreamResponse } from '../http.js';
import { teamPrincipalOf } from '../params.js';
import type { McpEndpoint } from '../../mcp/server.js';

export const MCP_AUTH: RouteAuth = { kinds: ['integration'], team: true, integrationOnly401: true };

/** Request headers not handed to the transport (hop-by-hop, and the credential it does not need). */
const DROP = new Set(['authorization', 'connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'te', 'trailer', 'content-length']);
/** Response headers uWS writes itself. */
const OWN = new Set(['content-length', 'transfer-encoding', 'connection', 'date']);

export function mcpRoutes(d: { endpoint: McpEndpoint; maxBodyBytes: number; publicUrl: () => string }): RouteDef[] {
  const serve = async (c: Ctx, res: StreamResponse): Promise<void> => {
    const p = teamPrincipalOf(c);
    if (c.method === 'GET') {
      // the standalone SSE stream is for server-initiated messages, and Gantry sends none (every
      // answer and progress notification travels on the POST's own response): the transport spec's
      // 405 "no SSE stream at this endpoint", so no client holds an idle stream and server open
      res.json(405, { error_message: 'this MCP endpoint offers no standalone SSE stream; POST requests get their answers on their own response', error_code: 'method_not_allowed' }, { Allow: 'POST, DELETE' });
      return;
    }
    const headers = new Headers();
    for (const [k, v] of Object.entries(c.headers)) if (!DROP.has(k)) headers.set(k, v);
    let body: Buffer | undefined;
    const src = res.body();
    if (src && c.method === 'POST') {
      const chunks: Buffer[] = [];
      for await (const ch of src) chunks.push(ch);
      body = Buffer.concat(chunks);
    }
    if (res.aborted) return;
    const url = `${d.publicUrl()}${c.path}${c.rawQuery ? `?${c.rawQuery}` : ''}`;
    const ac = new AbortController();
    res.onAbort(() => ac.abort());
    const req = new Request(url, { method: c.method, headers, signal: ac.signal, ...(body !== undefined ? { body: new Uint8Array(body) } : {}) });
    const sessions = /^(1|true|yes)$/i.test(c.query.get('sessions') ?? '');
    const ex = await d.endpoint.handle(req, p, c.requestId, sessions);
    const reader = ex.response.body?.getReader() ?? null;
    res.onAbort(() => {
      void reader?.cancel().catch(() => undefined);
      void ex.close();
    });
    try {
      const list: Array<[string, string]> = [];
      ex.response.headers.forEach((v, k) => {
        if (!OWN.has(k)) list.push([k, v]);
      });
      if (!reader) {
        res.writeHeadList(ex.response.status, list);
        res.end();
        return;
      }
      const sse = (ex.response.headers.get('content-type') ?? '').startsWith('text/event-stream');
      if (!sse) {
        // a whole JSON answer (or an error): one write
        const chunks: Uint8Array[] = [];
        for (;;) {
          const r = await reader.read();
          if (r.done) break;
          chunks.push(r.value);
        }
        res.sendWhole(ex.response.status, list, Buffer.concat(chunks));
        return;
      }
      if (sse) list.push(['X-Accel-Buffering', 'no']);
      res.writeHeadList(ex.response.status, list);
      for (;;) {
        const r = await reader.read();
        if (r.done || res.aborted) break;
        if (!res.write(r.value)) await res.drained();
      }
      res.end();
    } finally {
      await ex.close();
    }
  };
  return (['POST', 'GET', 'DELETE'] as const).map((method) => ({ method, path: '/mcp', auth: MCP_AUTH, maxBodyBytes: d.maxBodyBytes, stream: serve, tag: 'mcp', doc: { summary: `MCP Streamable HTTP (${method})`, description: 'Model Context Protocol endpoint (sk- only): 15 tools wrapping the runtime operations.', tags: ['mcp'], rawBodyType: method === 'POST' ? 'application/json' : undefined, responses: { 200: { description: 'JSON-RPC response or an event stream', contentType: method === 'DELETE' ? undefined : 'text/event-stream' } } } }));
}
