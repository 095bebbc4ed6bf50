import type { AgentInfo } from '../ports.js';
import type { AgentRow } from '../../domain/agents/record.js';

/** What the scheduler and the agent actor know of an agent, from its record. */
export const agentInfoOf = (a: AgentRow, needsSync = false): AgentInfo => ({
  agentId: a.id,
  teamId: a.teamId,
  labels: a.labels,
  gpuType: a.gpuType,
  gpuCount: a.gpuCount,
  vramTotalGb: a.vramTotalGb,
  models: a.models,
  slots: a.slots,
  draining: a.agentStatus === 'draining',
  needsSync,
  ...(a.toolTypes && a.toolTypes.length > 0 ? { toolTypes: a.toolTypes } : {}),
});
