/**
 * The `fifo-lru` strategy: the scheduler as it was before priorities (kept unchanged as a named
 * strategy, for comparison and as a fallback): FIFO over the queue, each task to the eligible agent
 * with the workflow's preferred GPU (exact, case-insensitive), then the least recently used.
 */
import type { AgentInfo, TaskRecord } from '../ports.js';

export interface AgentSlot extends AgentInfo {
  /** Free execution slots (slots minus tasks assigned to it). */
  free: number;
  /** Clock time of the last assignment (least recently used wins ties). */
  lastAssignedAt: number;
  /** `<workflow id>@<version>` of the last task assigned to it (the scheduler's own record; warm placement). */
  lastWorkflow?: string | null;
}

/** Why an agent cannot take a task; null when it can. */
export function ineligibility(task: TaskRecord, a: AgentSlot): string | null {
  if (a.teamId !== task.teamId) return 'other team';
  if (a.draining) return 'draining';
  if (a.free <= 0) return 'no free slot';
  for (const l of task.requiredLabels) if (!a.labels.includes(l)) return `missing label ${l}`;
  if (task.minVramGb > 0 && a.vramTotalGb < task.minVramGb) return `vram ${a.vramTotalGb} < ${task.minVramGb}`;
  if (task.requiredModels.length > 0) {
    const have = new Set(a.models);
    for (const m of task.requiredModels) if (!have.has(m)) return `missing model ${m}`;
  }
  return null;
}

/**
 * Among eligible agents: prefer the workflow's preferred GPU type, then the least recently used
 * (then the lower id, so the choice is deterministic).
 */
export function pickAgent(task: TaskRecord, agents: Iterable<AgentSlot>): AgentSlot | null {
  let best: AgentSlot | null = null;
  let bestScore = 2;
  const pref = task.preferredGpu?.toLowerCase() ?? null;
  for (const a of agents) {
    if (ineligibility(task, a) !== null) continue;
    const score = pref !== null && (a.gpuType ?? '').toLowerCase() === pref ? 0 : 1;
    if (best === null || score < bestScore || (score === bestScore && (a.lastAssignedAt < best.lastAssignedAt || (a.lastAssignedAt === best.lastAssignedAt && a.agentId < best.agentId)))) {
      best = a;
      bestScore = score;
    }
  }
  return best;
}

/** Scheduling one pass: which tasks (in FIFO order) go to which agent, which must wait. */
export interface PlanStep {
  taskId: string;
  agentId: string | null;
}

/**
 * One pass in FIFO order. Only agents with a free slot are considered, and once every free slot
 * (or the team's quota) is used up the rest of the queue is only checked for `pending` tasks to
 * move to `waiting`: a long backlog with a busy fleet costs one cheap scan, not a search per task.
 */
export function plan(queue: readonly TaskRecord[], agents: ReadonlyMap<string, AgentSlot>, activeCount: number, maxConcurrent: number): { assign: PlanStep[]; wait: string[] } {
  const assign: PlanStep[] = [];
  const wait: string[] = [];
  const sim: AgentSlot[] = [];
  let capacity = 0;
  for (const a of agents.values())
    if (!a.draining && a.free > 0) {
      sim.push({ ...a });
      capacity += a.free;
    }
  let active = activeCount;
  for (const t of queue) {
    const full = capacity <= 0 || (maxConcurrent > 0 && active >= maxConcurrent);
    const a = full || t.dispatchTarget !== 'agent' ? null : pickAgent(t, sim);
    if (!a) {
      if (t.status === 'pending') wait.push(t.id);
      continue;
    }
    a.free -= 1;
    capacity -= 1;
    a.lastAssignedAt = Number.MAX_SAFE_INTEGER - 1e6 + assign.length; // assigned in this pass: now the most recently used
    active += 1;
    assign.push({ taskId: t.id, agentId: a.agentId });
  }
  return { assign, wait };
}

