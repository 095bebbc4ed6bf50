import type { AgentInfo, TaskRecord } from '../ports.js';

export interface AgentSlot extends AgentInfo {
  /** Free execution slots (slots minus tasks assigned to it). */
  free: number;
  /** Clock time of the last assignment (least recently used wins ties). */
  lastAssignedAt: number;
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
  const pref = task.preferredGpu?.toLowerCase() ?? null;
  const score = (a: AgentSlot): number => (pref !== null && (a.gpuType ?? '').toLowerCase() === pref ? 0 : 1);
  for (const a of agents) {
    if (ineligibility(task, a) !== null) continue;
    if (
      best === null ||
      score(a) < score(best) ||
      (score(a) === score(best) && (a.lastAssignedAt < best.lastAssignedAt || (a.lastAssignedAt === best.lastAssignedAt && a.agentId < best.agentId)))
    )
      best = a;
  }
  return best;
}

/** Scheduling one pass: which tasks (in FIFO order) go to which agent, which must wait. */
export interface PlanStep {
  taskId: string;
  agentId: string | null;
}

export function plan(queue: readonly TaskRecord[], agents: Map<string, AgentSlot>, activeCount: number, maxConcurrent: number): { assign: PlanStep[]; wait: string[] } {
  const assign: PlanStep[] = [];
  const wait: string[] = [];
  const sim = new Map([...agents].map(([k, v]) => [k, { ...v }]));
  let active = activeCount;
  for (const t of queue) {
    if (t.dispatchTarget !== 'agent') {
      if (t.status === 'pending') wait.push(t.id);
      continue;
    }
    if (maxConcurrent > 0 && active >= maxConcurrent) {
      if (t.status === 'pending') wait.push(t.id);
      continue;
    }
    const a = pickAgent(t, sim.values());
    if (!a) {
      if (t.status === 'pending') wait.push(t.id);
      continue;
    }
    a.free -= 1;
    a.lastAssignedAt = Number.MAX_SAFE_INTEGER - 1e6 + assign.length; // assigned in this pass: now the most recently used
    active += 1;
    assign.push({ taskId: t.id, agentId: a.agentId });
  }
  return { assign, wait };
}
