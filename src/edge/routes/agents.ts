import { auditOf, teamPrincipalOf, uuidParam } from '../params.js';
/**
 * Agent records over REST:
 *   GET    /r/agents                  runtime (J, S, D): the team's agents; system_stats reduced for sk-
 *   GET    /agents                    management (J, D): {agent_list, page_meta}
 *   GET    /agents/{agentId}          management (J, D)
 *   DELETE /agents/{agentId}          admin (J, D): ends its stream now (its tasks are released) and deletes the record
 *   GET    /agents/{agentId}/tunnel   management (J, D): {is_active, session_id, tunnel_url}
 * Agents themselves (ak-) never reach REST: they talk gRPC (src/edge/agents/grpc-server.ts). The use
 * cases are src/app/agents.ts.
 */
import type { AgentUseCases } from '../../app/agents.js';
import { parsePage } from '../../shared/pagination.js';
import type { Ctx, RouteDef } from '../http.js';
import type { RouteAuth } from '../principal.js';
import * as D from '../openapi/schemas.js';

const RUNTIME: RouteAuth = { kinds: ['user', 'integration', 'device'], team: true };
const READ: RouteAuth = { kinds: ['user', 'device'], team: true };
const ADMIN: RouteAuth = { kinds: ['user', 'device'], team: true, role: 'admin' };

export function agentRoutes(agents: AgentUseCases): RouteDef[] {
  const list = async (c: Ctx, reduced: boolean) => agents.listAgents(teamPrincipalOf(c), parsePage(c.query), reduced);
  return [
    // sk- callers get system_stats reduced to {gpu_count, vram_total_gb, gpu_utilization_percent} (api-decisions)
    { method: 'GET', path: '/r/agents', auth: RUNTIME, doc: { summary: 'List the team\'s agents (runtime)', tags: ['runtime', 'agents'], paged: true, responses: { 200: D.pageOf('agent_list', D.Agent) } }, handler: async (c) => list(c, c.principal?.kind === 'integration') },
    { method: 'GET', path: '/agents', auth: READ, doc: { summary: 'List agents', tags: ['agents'], paged: true, responses: { 200: D.pageOf('agent_list', D.Agent) } }, handler: async (c) => list(c, false) },
    { method: 'GET', path: '/agents/{agentId}', auth: READ, doc: { summary: 'Get an agent', tags: ['agents'], responses: { 200: D.Agent } }, handler: async (c) => agents.getAgent(teamPrincipalOf(c), uuidParam(c, 'agentId')) },
    {
      method: 'DELETE',
      path: '/agents/{agentId}',
      doc: { summary: 'Delete an agent (ends its stream, releases its tasks)', tags: ['agents'], responses: { 200: D.Success } },
      auth: ADMIN,
      handler: async (c) => agents.deleteAgent(teamPrincipalOf(c), uuidParam(c, 'agentId'), (id) => auditOf(c, 'agent.delete', 'agent', id)),
    },
    { method: 'GET', path: '/agents/{agentId}/tunnel', doc: { summary: 'Agent tunnel status', tags: ['agents'], responses: { 200: D.TunnelStatus } }, auth: READ, handler: async (c) => agents.tunnelStatus(teamPrincipalOf(c), uuidParam(c, 'agentId')) },
  ];
}
