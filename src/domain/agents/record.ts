/**
 * The agent record as the node keeps it (one per team and machine_id; the live view is the agent
 * actor's), what an agent registers with, and its JSON as callers see it (sk- callers get
 * system_stats reduced to {gpu_count, vram_total_gb, gpu_utilization_percent}).
 */
import { iso } from '../../shared/time.js';
import { isRecord } from '../../shared/is-record.js';


export type AgentStatus = 'online' | 'busy' | 'draining' | 'offline';

export interface AgentRow {
  id: string;
  teamId: string;
  machineId: string;
  displayName: string;
  agentStatus: AgentStatus;
  labels: string[];
  gpuType: string | null;
  gpuCount: number;
  vramTotalGb: number;
  gpus: Array<{ name: string; vram_gb: number }>;
  models: string[];
  customNodes: string[];
  slots: number;
  systemStats: Record<string, unknown> | null;
  currentTaskId: string | null;
  lastSeenAt: number | null;
  agentVersion: string | null;
  credentialId: string | null;
  nodeId: string | null;
  /** Container runtime it offers ('' none) and whether it exposes a tunnel target. */
  containerRuntime: string;
  tunnel: boolean;
  /** Tool types its executor runs; [] = any (an older agent). */
  toolTypes?: string[];
  createdAt: number;
}

export interface AgentRegistration {
  teamId: string;
  machineId: string;
  displayName: string;
  labels: string[];
  gpus: Array<{ name: string; vram_gb: number }>;
  models: string[];
  customNodes: string[];
  slots: number;
  agentVersion: string;
  credentialId: string | null;
  nodeId: string;
  /** Tool types its executor runs (hello.tool_types, else derived from the executor); [] = any. */
  toolTypes?: string[];
  /** ComfyUI node class_types its /object_info lists ([]: not ComfyUI or not read yet). */
  nodeClasses?: string[];
}

export const agentJson = (a: AgentRow, reduced: boolean): Record<string, unknown> => {
  const stats = a.systemStats ?? {};
  const gpus = Array.isArray(stats.gpus) ? stats.gpus : [];
  const util = gpus.length ? gpus.reduce((s: number, g: unknown) => s + (Number(isRecord(g) ? g.utilization_percent : undefined) || 0), 0) / gpus.length : 0;
  return {
    id: a.id,
    display_name: a.displayName,
    agent_status: a.agentStatus,
    labels: a.labels,
    gpu_type: a.gpuType,
    gpu_count: a.gpuCount,
    vram_total_gb: a.vramTotalGb,
    current_task_id: a.currentTaskId,
    system_stats: reduced ? { gpu_count: a.gpuCount, vram_total_gb: a.vramTotalGb, gpu_utilization_percent: Math.round(util * 10) / 10 } : stats,
    last_seen_at: iso(a.lastSeenAt),
    agent_version: a.agentVersion,
    machine_id: reduced ? undefined : a.machineId,
    container_runtime: a.containerRuntime,
    created_at: iso(a.createdAt),
  };
};
