import { teamOf, uuidParam } from '../params.js';
/**
 * Agent records over REST:
 *   GET    /r/agents                  runtime (J, S, D): the team's agents; system_stats reduced for sk-
 *   GET    /agents                    management (J, D): {agent_list, page_meta}
 *   GET    /agents/{agentId}          management (J, D)
 *   DELETE /agents/{agentId}          admin (J, D): ends its stream now (its tasks are released) and deletes the record
 *   GET    /agents/{agentId}/tunnel   management (J, D): {is_active, session_id, tunnel_url}
 * Agents themselves (ak-) never reach REST: they talk gRPC (src/edge/agents/grpc-server.ts).
 */
import type { AgentRow } from '../../persistence/agent-store.js';
import { agentJson } from '../../persistence/agent-store.js';
import { notFound } from '../../shared/errors.js';
import { paged, parsePage } from '../../shared/pagination.js';
import type { Ctx, RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import * as D from '../openapi/schemas.js';

const RUNTIME: RouteAuth = { kinds: ['user', 'integration', 'device'], team: true };
const READ: RouteAuth = { kinds: ['user', 'device'], team: true };
const ADMIN: RouteAuth = { kinds: ['user', 'device'], team: true, role: 'admin' };

export interface AgentRouteDeps {
  agents: {
    list(teamId: string, limit: number, offset: number): Promise<{ rows: AgentRow[]; total: number }>;
    get(teamId: string, agentId: string): Promise<AgentRow | null>;
    delete(teamId: string, agentId: string): Promise<boolean>;
  };
  /** The live stream of an agent on this node, if any. */
  session(agentId: string): { sessionId: string } | null;
  /** Ends the agent's stream (fatal for the agent program) and releases its tasks without grace. */
  kick(agentId: string): void;
  /** The server's public base URL (GANTRY_PUBLIC_URL): tunnel URLs are built on it. */
  publicUrl: () => string;
}



export function agentRoutes(d: AgentRouteDeps): RouteDef[] {
  const load = async (c: Ctx): Promise<AgentRow> => {
    const row = await d.agents.get(teamOf(c), uuidParam(c, 'agentId'));
    if (!row) throw notFound('agent', 'agent_not_found');
    return row;
  };
  const list = async (c: Ctx, reduced: boolean) => {
    const pg = parsePage(c.query);
    const r = await d.agents.list(teamOf(c), pg.perPage, pg.offset);
    return paged('agent_list', r.rows.map((a) => agentJson(a, reduced)), pg, r.total);
  };
  return [
    // sk- callers get system_stats reduced to {gpu_count, vram_total_gb, gpu_utilization_percent} (api-decisions)
    { method: 'GET', path: '/r/agents', auth: RUNTIME, doc: { summary: 'List the team\'s agents (runtime)', tags: ['runtime', 'agents'], paged: true, responses: { 200: D.pageOf('agent_list', D.Agent) } }, handler: async (c) => list(c, c.principal?.kind === 'integration') },
    { method: 'GET', path: '/agents', auth: READ, doc: { summary: 'List agents', tags: ['agents'], paged: true, responses: { 200: D.pageOf('agent_list', D.Agent) } }, handler: async (c) => list(c, false) },
    { method: 'GET', path: '/agents/{agentId}', auth: READ, doc: { summary: 'Get an agent', tags: ['agents'], responses: { 200: D.Agent } }, handler: async (c) => agentJson(await load(c), false) },
    {
      method: 'DELETE',
      path: '/agents/{agentId}',
      doc: { summary: 'Delete an agent (ends its stream, releases its tasks)', tags: ['agents'], responses: { 200: D.Success } },
      auth: ADMIN,
      handler: async (c) => {
        const row = await load(c);
        d.kick(row.id);
        await d.agents.delete(row.teamId, row.id);
        return { is_success: true };
      },
    },
    {
      method: 'GET',
      path: '/agents/{agentId}/tunnel',
      doc: { summary: 'Agent tunnel status', tags: ['agents'], responses: { 200: D.TunnelStatus } },
      auth: READ,
      handler: async (c) => {
        const row = await load(c);
        // the tunnel is the agent's own stream (on whichever node holds it): active while the stream
        // is live; the URL is the gateway path that reaches the local port the agent exposes
        // (--tunnel-url, or its ComfyUI) for team members (ANY /agents/{id}/tunnel/*), '' when none
        const s = d.session(row.id);
        return { is_active: s !== null, session_id: s?.sessionId ?? '', tunnel_url: row.tunnel ? `${d.publicUrl()}/api/v1/agents/${row.id}/tunnel/` : '' };
      },
    },
  ];
}
