import type { Database } from './db.js';
import { q, json, ts, TickBatcher, memberFenceSql, type BatcherStats } from './sql.js';
import { isRecord, jsonArrayOf, jsonStrings, type PgTimestamp } from './rows.js';
import { uuidv7 } from '../shared/ids.js';
import { audited } from './audit.js';
import type { AuditNote } from '../shared/audit.js';
import type { AgentInfo, AgentStorePort } from '../actors/ports.js';
import { agentInfoOf } from '../actors/agent/info.js';
import type { AgentRegistration, AgentRow, AgentStatus } from '../domain/agents/record.js';

export { agentJson } from '../domain/agents/record.js';
export type { AgentRegistration, AgentRow, AgentStatus } from '../domain/agents/record.js';
export { agentInfoOf } from '../actors/agent/info.js';


/** An `agents` row (select * / returning *). */
interface AgentTableRow {
  id: string;
  team_id: string;
  machine_id: string;
  display_name: string;
  agent_status: AgentStatus;
  labels: unknown;
  gpu_type: string | null;
  gpu_count: number;
  vram_total_gb: number;
  gpus: unknown;
  models: unknown;
  custom_nodes: unknown;
  slots: number;
  system_stats: unknown;
  current_task_id: string | null;
  last_seen_at: PgTimestamp | null;
  agent_version: string | null;
  credential_id: string | null;
  node_id: string | null;
  session_id: string | null;
  container_runtime: string;
  tunnel: boolean;
  tool_types: unknown;
  created_at: PgTimestamp;
  updated_at: PgTimestamp;
}

type Gpu = AgentRow['gpus'][number];
const isGpu = (x: unknown): x is Gpu => isRecord(x) && typeof x.name === 'string' && typeof x.vram_gb === 'number';

export const rowToAgent = (r: AgentTableRow): AgentRow => ({
  id: r.id,
  teamId: r.team_id,
  machineId: r.machine_id,
  displayName: r.display_name,
  agentStatus: r.agent_status,
  labels: jsonStrings(r.labels),
  gpuType: r.gpu_type ?? null,
  gpuCount: Number(r.gpu_count ?? 0),
  vramTotalGb: Number(r.vram_total_gb ?? 0),
  gpus: jsonArrayOf(r.gpus, isGpu),
  models: jsonStrings(r.models),
  customNodes: jsonStrings(r.custom_nodes),
  slots: Number(r.slots ?? 1),
  systemStats: isRecord(r.system_stats) ? r.system_stats : null,
  currentTaskId: r.current_task_id ?? null,
  lastSeenAt: ts(r.last_seen_at),
  agentVersion: r.agent_version ?? null,
  credentialId: r.credential_id ?? null,
  nodeId: r.node_id ?? null,
  containerRuntime: r.container_runtime ?? '',
  tunnel: Boolean(r.tunnel),
  toolTypes: jsonStrings(r.tool_types),
  createdAt: ts(r.created_at) ?? 0,
});

/** Agent records: one per (team, machine_id); the live view is the agent actor's. */
interface StatusWrite {
  agentId: string;
  status: AgentStatus;
  currentTaskId: string | null | undefined;
}

export class PgAgentStore implements AgentStorePort {
  /** Whether an agent with this inventory still has models or custom nodes to sync (the files module's check); none: never. */
  private readonly syncCheck: ((teamId: string, inventory: { models: string[]; customNodes: string[] }) => Promise<boolean>) | null;

  /**
   * agent_status / current_task_id writes of many agents in one statement per tick (an agent flips
   * busy <-> online once per task, so a fleet finishing many short tasks would otherwise cost one
   * UPDATE per task). Keyed by agent: one agent's writes never share a batch and keep their order.
   */
  private readonly statusWrites: TickBatcher<StatusWrite, undefined>;

  /** Cluster mode: this node's current member id. Only the node holding an agent's stream (agents.node_id = its member id) writes its status, while not fenced. */
  private readonly memberId: () => string | null;

  constructor(
    private readonly db: Database,
    opts: { memberId?: () => string | null; needsSync?: (teamId: string, inventory: { models: string[]; customNodes: string[] }) => Promise<boolean> } = {},
  ) {
    this.memberId = opts.memberId ?? (() => null);
    this.syncCheck = opts.needsSync ?? null;
    this.statusWrites = new TickBatcher((ws) => this.writeStatuses(ws), { maxBatch: 500, maxInFlight: 2, key: (w) => w.agentId });
  }

  /** Status batches written (tests and benches read it). */
  get statusStats(): BatcherStats {
    return this.statusWrites.stats;
  }

  async online(teamId: string): Promise<AgentInfo[]> {
    const rows = await q(this.db)<AgentTableRow>(`select * from agents where team_id = ? and agent_status in ('online','busy','draining')`, [teamId]);
    const out: AgentInfo[] = [];
    for (const a of rows.map(rowToAgent)) out.push(agentInfoOf(a, this.syncCheck ? await this.syncCheck(a.teamId, { models: a.models, customNodes: a.customNodes }) : false));
    return out;
  }

  async setStatus(agentId: string, status: AgentStatus, currentTaskId?: string | null): Promise<void> {
    await this.statusWrites.submit({ agentId, status, currentTaskId });
  }

  private holderFence(): string {
    const m = this.memberId();
    return m === null ? '' : ` and a.node_id = '${m}'${memberFenceSql(m)}`;
  }

  private async writeStatuses(ws: StatusWrite[]): Promise<Array<{ value: undefined }>> {
    const rows = ws.map((w) => ({ id: w.agentId, status: w.status, set_task: w.currentTaskId !== undefined, task: w.currentTaskId ?? null }));
    await q(this.db)(
      `update agents a set agent_status = v.status,
         current_task_id = case when v.set_task then v.task else a.current_task_id end,
         last_seen_at = now(), updated_at = now()
       from jsonb_to_recordset(?::jsonb) as v(id uuid, status text, set_task boolean, task uuid)
       where a.id = v.id${this.holderFence()}`,
      [JSON.stringify(rows)],
    );
    return ws.map(() => ({ value: undefined }));
  }

  /** Registers or updates the agent for (team, machine_id); the same machine keeps its id. */
  async register(r: AgentRegistration): Promise<AgentRow> {
    const vram = r.gpus.reduce((s, g) => s + (g.vram_gb || 0), 0);
    const gpuType = r.gpus[0]?.name ?? null;
    const rows = await q(this.db)<AgentTableRow>(
      `insert into agents (id, team_id, machine_id, display_name, agent_status, labels, gpu_type, gpu_count, vram_total_gb, gpus, models, custom_nodes, slots, agent_version, credential_id, node_id, last_seen_at, tool_types, node_classes)
       values (?, ?, ?, ?, 'offline', ?::jsonb, ?, ?, ?, ?::jsonb, ?::jsonb, ?::jsonb, ?, ?, ?, ?, now(), ?::jsonb, ?::jsonb)
       on conflict (team_id, machine_id) do update set display_name = excluded.display_name, labels = excluded.labels, gpu_type = excluded.gpu_type,
         gpu_count = excluded.gpu_count, vram_total_gb = excluded.vram_total_gb, gpus = excluded.gpus, models = excluded.models,
         custom_nodes = excluded.custom_nodes, slots = excluded.slots, agent_version = excluded.agent_version, credential_id = excluded.credential_id,
         node_id = excluded.node_id, last_seen_at = now(), updated_at = now(), tool_types = excluded.tool_types, node_classes = excluded.node_classes
       returning *`,
      [uuidv7(), r.teamId, r.machineId, r.displayName, json(r.labels), gpuType, r.gpus.length, vram, json(r.gpus), json(r.models), json(r.customNodes), r.slots, r.agentVersion, r.credentialId, r.nodeId, json(r.toolTypes ?? []), json(r.nodeClasses ?? [])],
    );
    const row = rows[0];
    if (!row) throw new Error('agent upsert returned no row');
    return rowToAgent(row);
  }

  async updateInventory(agentId: string, models: string[], customNodes: string[], nodeClasses: string[] = []): Promise<void> {
    await q(this.db)('update agents set models = ?::jsonb, custom_nodes = ?::jsonb, node_classes = ?::jsonb, updated_at = now() where id = ?', [json(models), json(customNodes), json(nodeClasses), agentId]);
  }

  /**
   * The node class_types the team's agents list (the union over every agent that reported its
   * ComfyUI's /object_info, online or not); null when none has (nothing to compare a push with).
   */
  async teamNodeClasses(teamId: string): Promise<Set<string> | null> {
    const rows = await q(this.db)<{ c: string }>(
      "select distinct jsonb_array_elements_text(node_classes) as c from agents where team_id = ? and jsonb_typeof(node_classes) = 'array' and jsonb_array_length(node_classes) > 0",
      [teamId],
    );
    return rows.length === 0 ? null : new Set(rows.map((r) => r.c));
  }

  async heartbeat(agentId: string, stats: Record<string, unknown>): Promise<void> {
    await q(this.db)('update agents set system_stats = ?::jsonb, last_seen_at = now() where id = ?', [json(stats), agentId]);
  }

  async get(teamId: string, agentId: string): Promise<AgentRow | null> {
    const rows = await q(this.db)<AgentTableRow>('select * from agents where team_id = ? and id = ?', [teamId, agentId]);
    return rows[0] ? rowToAgent(rows[0]) : null;
  }

  async byId(agentId: string): Promise<AgentRow | null> {
    const rows = await q(this.db)<AgentTableRow>('select * from agents where id = ?', [agentId]);
    return rows[0] ? rowToAgent(rows[0]) : null;
  }

  async list(teamId: string, limit: number, offset: number): Promise<{ rows: AgentRow[]; total: number }> {
    const qq = q(this.db);
    const rows = await qq<AgentTableRow>('select * from agents where team_id = ? order by created_at limit ? offset ?', [teamId, limit, offset]);
    const c = await qq<{ n: number }>('select count(*)::int as n from agents where team_id = ?', [teamId]);
    return { rows: rows.map(rowToAgent), total: Number(c[0]?.n ?? 0) };
  }

  async count(teamId: string): Promise<number> {
    const c = await q(this.db)<{ n: number }>('select count(*)::int as n from agents where team_id = ?', [teamId]);
    return Number(c[0]?.n ?? 0);
  }

  async delete(teamId: string, agentId: string, audit?: AuditNote): Promise<boolean> {
    return audited(this.db, audit, async (tq, record) => {
      const rows = await tq('delete from agents where team_id = ? and id = ? returning id', [teamId, agentId]);
      if (rows.length > 0) await record();
      return rows.length > 0;
    });
  }

  /** On start: agents this node held (or all, single node) have no live stream any more. */
  async markAllOffline(nodeId: string | null): Promise<void> {
    if (nodeId === null) await q(this.db)(`update agents set agent_status = 'offline' where agent_status <> 'offline'`);
    else await q(this.db)(`update agents set agent_status = 'offline' where node_id = ? and agent_status <> 'offline'`, [nodeId]);
  }
}
