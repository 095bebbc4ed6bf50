/**
 * The agent record use cases: list and read the team's agents, delete one (its stream ends now and
 * its tasks are released), and the status of its tunnel. Agents themselves (ak-) talk gRPC
 * (src/edge/agents/), not these.
 */
import type { TeamPrincipal } from '../identity/principal.js';
import { agentJson, type AgentRow } from '../domain/agents/record.js';
import type { AuditNote } from '../shared/audit.js';
import { notFound } from '../shared/errors.js';
import { paged, type PageRequest } from '../shared/pagination.js';

/** The agent store (src/persistence/agent-store.ts). */
export interface AgentRecords {
  list(teamId: string, limit: number, offset: number): Promise<{ rows: AgentRow[]; total: number }>;
  get(teamId: string, agentId: string): Promise<AgentRow | null>;
  delete(teamId: string, agentId: string, audit?: AuditNote): Promise<boolean>;
}

export interface AgentDeps {
  agents: AgentRecords;
  /** The live stream of an agent on this node, if any. */
  session(agentId: string): { sessionId: string } | null;
  /** Ends the agent's stream (fatal for the agent program) and releases its tasks without grace. */
  kick(agentId: string): void;
  /** The server's public base URL (GANTRY_PUBLIC_URL): tunnel URLs are built on it. */
  publicUrl: () => string;
}

export interface TunnelStatus {
  is_active: boolean;
  session_id: string;
  tunnel_url: string;
}

export class AgentUseCases {
  constructor(private readonly d: AgentDeps) {}

  private async load(p: TeamPrincipal, agentId: string): Promise<AgentRow> {
    const row = await this.d.agents.get(p.teamId, agentId);
    if (!row) throw notFound('agent', 'agent_not_found');
    return row;
  }

  /** The team's agents; `reduced`: system_stats cut to {gpu_count, vram_total_gb, gpu_utilization_percent} (sk- callers of the runtime list). */
  async listAgents(p: TeamPrincipal, page: PageRequest, reduced: boolean): Promise<Record<string, unknown>> {
    const r = await this.d.agents.list(p.teamId, page.perPage, page.offset);
    return paged('agent_list', r.rows.map((a) => agentJson(a, reduced)), page, r.total);
  }

  async getAgent(p: TeamPrincipal, agentId: string): Promise<Record<string, unknown>> {
    return agentJson(await this.load(p, agentId), false);
  }

  /** Ends its stream now (its tasks are released) and deletes the record; `audit` builds the note for the agent's id. */
  async deleteAgent(p: TeamPrincipal, agentId: string, audit: (agentId: string) => AuditNote): Promise<{ is_success: true }> {
    const row = await this.load(p, agentId);
    this.d.kick(row.id);
    await this.d.agents.delete(row.teamId, row.id, audit(row.id));
    return { is_success: true };
  }

  async tunnelStatus(p: TeamPrincipal, agentId: string): Promise<TunnelStatus> {
    const row = await this.load(p, agentId);
    // the tunnel is the agent's own stream (on whichever node holds it): active while the stream
    // is live; the URL is the gateway path that reaches the local port the agent exposes
    // (--tunnel-url, or its ComfyUI) for team members (ANY /agents/{id}/tunnel/*), '' when none
    const s = this.d.session(row.id);
    return { is_active: s !== null, session_id: s?.sessionId ?? '', tunnel_url: row.tunnel ? `${this.d.publicUrl()}/api/v1/agents/${row.id}/tunnel/` : '' };
  }
}
