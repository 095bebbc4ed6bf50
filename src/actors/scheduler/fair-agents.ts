/**
 * The agents' side of a `fair` pass (src/actors/scheduler/fair.ts): the pass's copy of each free
 * agent, the eligibility and ordering rules, and the cold-placement index.
 */
import type { TaskRecord } from '../ports.js';
import type { AgentSlot } from './fifo-lru.js';

/** Whether the agent's executor runs this tool type (an agent that says nothing runs any). */
export const runsTool = (a: Pick<AgentSlot, 'toolTypes'>, toolType: string): boolean => !a.toolTypes || a.toolTypes.length === 0 || a.toolTypes.includes(toolType);

export interface Sim extends AgentSlot {
  modelSet: Set<string> | null;
  pref: string;
}

/** The task's placement constraints as one string: a pass remembers which found no free agent. */
const sigCache = new WeakMap<TaskRecord, string>();
export function sigOf(t: TaskRecord): string {
  let s = sigCache.get(t);
  if (s === undefined) {
    s = `${t.toolType}|${t.minVramGb}|${t.requiredLabels.join('\u0000')}|${t.requiredModels.join('\u0000')}`;
    sigCache.set(t, s);
  }
  return s;
}

/** What makes an agent warm for the task (its workflow version and models): tasks with the same key share warm agents. */
const wkeyCache = new WeakMap<TaskRecord, string>();
export function wkeyOf(t: TaskRecord): string {
  let k = wkeyCache.get(t);
  if (k === undefined) {
    k = `${t.workflowKey ?? ''}|${t.requiredModels.join('\u0000')}`;
    wkeyCache.set(t, k);
  }
  return k;
}

/** Whether a beats b for the task: preferred GPU, then least recently used, then the lower id. */
export function better(t: TaskRecord, a: Sim, b: Sim): boolean {
  const pref = t.preferredGpu ? t.preferredGpu.toLowerCase() : null;
  const sa = pref !== null && a.pref.includes(pref) ? 0 : 1;
  const sb = pref !== null && b.pref.includes(pref) ? 0 : 1;
  return sa < sb || (sa === sb && (a.lastAssignedAt < b.lastAssignedAt || (a.lastAssignedAt === b.lastAssignedAt && a.agentId < b.agentId)));
}

function fits(t: TaskRecord, a: Sim): boolean {
  return a.free > 0 && eligible(t, a);
}

/** Whether a busy agent could run the task once free. */
export function eligibleBusy(t: TaskRecord, a: AgentSlot): boolean {
  if (a.draining || a.teamId !== t.teamId || !runsTool(a, t.toolType)) return false;
  for (const l of t.requiredLabels) if (!a.labels.includes(l)) return false;
  if (t.minVramGb > 0 && a.vramTotalGb < t.minVramGb) return false;
  for (const m of t.requiredModels) if (!a.models.includes(m)) return false;
  return true;
}

/** Whether the agent could run the task (free slot aside). */
function eligible(t: TaskRecord, a: Sim): boolean {
  if (a.draining || a.teamId !== t.teamId) return false;
  if (!runsTool(a, t.toolType)) return false;
  for (const l of t.requiredLabels) if (!a.labels.includes(l)) return false;
  if (t.minVramGb > 0 && a.vramTotalGb < t.minVramGb) return false;
  if (t.requiredModels.length > 0) {
    const have = (a.modelSet ??= new Set(a.models));
    for (const m of t.requiredModels) if (!have.has(m)) return false;
  }
  return true;
}

/**
 * Preferred GPU, then least recently used, then the lower id. Agents whose slots are used up are
 * swap-removed from the list on the way (order does not matter: ties are broken by the fields).
 */
export function best(t: TaskRecord, agents: Sim[]): Sim | null {
  let b: Sim | null = null;
  let bScore = 2;
  const pref = t.preferredGpu ? t.preferredGpu.toLowerCase() : null;
  for (let i = 0; i < agents.length; i++) {
    const a = agents[i] as Sim;
    if (a.free <= 0) {
      agents[i] = agents[agents.length - 1] as Sim;
      agents.pop();
      i--;
      continue;
    }
    if (!fits(t, a)) continue;
    const score = pref !== null && a.pref.includes(pref) ? 0 : 1;
    if (b === null || score < bScore || (score === bScore && (a.lastAssignedAt < b.lastAssignedAt || (a.lastAssignedAt === b.lastAssignedAt && a.agentId < b.agentId)))) {
      b = a;
      bScore = score;
    }
  }
  return b;
}

/** LRU order of agents: least recently used first, then the lower id. */
const lruOrder = (a: Sim, b: Sim): number => a.lastAssignedAt - b.lastAssignedAt || (a.agentId < b.agentId ? -1 : a.agentId > b.agentId ? 1 : 0);

/**
 * The cold choice (`best` over every free agent) without a scan per assignment: per placement key
 * (the task's constraints and preferred GPU), the fitting free agents in `best`'s order, built once
 * per pass from one LRU sort, as two queues (preferred GPU first). An agent assigned in the pass
 * becomes the most recently used: met again at a queue's head with a newer lastAssignedAt than it
 * was queued with, it is queued again in order of that value (binary search; every in-pass value is
 * larger than every value from before the pass), and one with no free slot left is dropped. So a
 * pick costs O(log n) amortised, and picks what `best` picks.
 */
export class ColdIndex {
  /** The free agents in LRU order and each one's lastAssignedAt when sorted (a queue built later starts from these). */
  private lru: Sim[] | null = null;
  private lruAt: number[] = [];
  private readonly queues = new Map<string, Array<{ q: Sim[]; at: number[]; head: number }>>();

  /** Queues a at its current lastAssignedAt, in (at, agentId) order among the unconsumed entries. */
  private static requeue(s: { q: Sim[]; at: number[]; head: number }, a: Sim): void {
    const at = a.lastAssignedAt;
    let lo = s.head;
    let hi = s.q.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const m = s.at[mid] as number;
      if (m < at || (m === at && (s.q[mid] as Sim).agentId < a.agentId)) lo = mid + 1;
      else hi = mid;
    }
    s.q.splice(lo, 0, a);
    s.at.splice(lo, 0, at);
  }

  constructor(private readonly free: Sim[]) {}

  pick(t: TaskRecord): Sim | null {
    const pref = t.preferredGpu ? t.preferredGpu.toLowerCase() : null;
    const key = `${sigOf(t)}|${t.teamId}|${pref ?? ''}`;
    let qs = this.queues.get(key);
    if (!qs) {
      if (!this.lru) {
        this.lru = [...this.free].sort(lruOrder);
        this.lruAt = this.lru.map((a) => a.lastAssignedAt);
      }
      // queued at their sort-time values: one assigned since is requeued when met (below)
      const preferred = { q: [] as Sim[], at: [] as number[], head: 0 };
      const rest = { q: [] as Sim[], at: [] as number[], head: 0 };
      for (let i = 0; i < this.lru.length; i++) {
        const a = this.lru[i] as Sim;
        if (!fits(t, a)) continue;
        const s = pref !== null && a.pref.includes(pref) ? preferred : rest;
        s.q.push(a);
        s.at.push(this.lruAt[i] as number);
      }
      qs = [preferred, rest];
      this.queues.set(key, qs);
    }
    for (const s of qs) {
      while (s.head < s.q.length) {
        const a = s.q[s.head] as Sim;
        const at = s.at[s.head] as number;
        if (a.free <= 0) {
          s.head++;
        } else if (a.lastAssignedAt !== at) {
          s.head++;
          ColdIndex.requeue(s, a);
        } else return a;
      }
    }
    return null;
  }
}
