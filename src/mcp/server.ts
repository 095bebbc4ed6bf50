/**
 * The MCP endpoint's protocol side: for every HTTP request a new McpServer (the 15 tools, bound to
 * the caller's principal) and a new WebStandardStreamableHTTPServerTransport, the SDK's documented
 * stateless pattern. The SDK does all of JSON-RPC and Streamable HTTP (status codes, SSE responses,
 * protocol errors); this module only decides the session mode:
 *
 * - stateless (the default): no Mcp-Session-Id is issued; every request stands alone.
 * - sessions (`?sessions=1` on the endpoint URL, or any request that carries an Mcp-Session-Id):
 *   initialize issues a signed session id (src/mcp/session.ts) bound to the sk- credential. A
 *   follow-up carrying it is served by any node: the id is verified (signature, age, same
 *   credential), a fresh transport is re-initialized in process with that id (an initialize
 *   message handed to the transport, its answer discarded), then the request is handled, so the
 *   SDK's own session checks apply unchanged. An id that does not verify re-initializes with a
 *   throwaway id instead, and the transport answers its standard 404 "Session not found".
 */
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS, type InitializeRequest, type JSONRPCRequest } from '@modelcontextprotocol/sdk/types.js';
import type { TeamPrincipal } from '../identity/principal.js';
import { registerTools, type McpToolDeps } from './tools.js';
import type { SessionTokens } from './session.js';

export interface McpEndpointDeps extends McpToolDeps {
  sessions: SessionTokens;
  /** The server version announced at initialize. */
  version: string;
}

export interface McpExchange {
  response: Response;
  /** Closes the server and transport (call when the response was written or the client left). */
  close(): Promise<void>;
}

const INSTRUCTIONS =
  'Gantry runs GPU workflows (ComfyUI graphs, nerfstudio jobs) on the team\'s agents. Typical flow: list_workflows -> get_workflow (parameters_schema) -> run_workflow_and_wait (or run_workflow + wait_for_task) -> get_task_result. Input files: create_upload, PUT the bytes to upload_url, pass file_key as the parameter value. Container services: list_container_services -> get_container_openapi -> invoke_container_service.';

export class McpEndpoint {
  constructor(private readonly d: McpEndpointDeps) {}

  async handle(req: Request, p: TeamPrincipal, requestId: string, wantSessions: boolean): Promise<McpExchange> {
    const presented = req.headers.get('mcp-session-id');
    const server = new McpServer({ name: 'gantry', version: this.d.version }, { capabilities: { tools: {} }, instructions: INSTRUCTIONS });
    registerTools(server, p, this.d, requestId);
    let transport: WebStandardStreamableHTTPServerTransport;
    if (presented !== null) {
      const claims = this.d.sessions.verify(presented);
      const valid = claims !== null && claims.credentialId === p.credentialId && claims.teamId === p.teamId;
      const sid = valid ? presented : `invalid-${randomUUID()}`;
      transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: () => sid });
      await server.connect(transport);
      await this.rehydrate(transport, req);
    } else if (wantSessions) {
      transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: () => this.d.sessions.issue({ credentialId: p.credentialId ?? '', teamId: p.teamId }) });
      await server.connect(transport);
    } else {
      transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined });
      await server.connect(transport);
    }
    let closed = false;
    const close = async (): Promise<void> => {
      if (closed) return;
      closed = true;
      await server.close().catch(() => undefined);
    };
    try {
      const response = await transport.handleRequest(req, { authInfo: { token: '', clientId: p.credentialId ?? '', scopes: [], extra: { teamId: p.teamId } } });
      return { response, close };
    } catch (e) {
      await close();
      throw e;
    }
  }

  /** Puts a fresh session-mode transport in the initialized state for its session id (see the module doc). */
  private async rehydrate(transport: WebStandardStreamableHTTPServerTransport, req: Request): Promise<void> {
    const asked = req.headers.get('mcp-protocol-version');
    const protocolVersion = asked && SUPPORTED_PROTOCOL_VERSIONS.includes(asked) ? asked : LATEST_PROTOCOL_VERSION;
    const init: InitializeRequest & Pick<JSONRPCRequest, 'jsonrpc' | 'id'> = {
      jsonrpc: '2.0',
      id: `gantry-rehydrate-${randomUUID()}`,
      method: 'initialize',
      params: { protocolVersion, capabilities: {}, clientInfo: { name: 'gantry-session', version: this.d.version } },
    };
    const r = await transport.handleRequest(
      new Request(req.url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' } }),
      { parsedBody: init },
    );
    await r.text();
  }
}
