/**
 * The `fair` strategy (the default): one scheduling pass as a pure function.
 *
 * Order: effective priority first (1 highest; a waiting task rises one level per aging interval),
 * then, among tasks of the same effective priority, the submitter (credential, else user) with the
 * least weighted GPU-seconds over the fair-share window (each assignment made within the pass
 * charges the submitter one `quantumS`, so a burst of free slots is shared too), FIFO within a
 * submitter. A credential at its max_concurrent_tasks is skipped (its tasks wait).
 *
 * Placement: among eligible agents (the tool type is a constraint: an agent that advertises tool
 * types runs only those) the warm one (it last ran the same workflow version, or holds one of the
 * task's required models loaded), then the preferred GPU (a case-insensitive substring of the
 * agent's GPU name), then the least recently used. When a submitter's next task has no warm agent
 * free, a later task of the same submitter and level (at most `warmLookahead` places behind it) that
 * does may go first, unless the head has waited an aging interval already (so it cannot starve).
 */
import type { TaskRecord } from '../ports.js';
import type { AgentSlot, PlanStep } from './fifo-lru.js';

export const DEFAULT_PRIORITY = 3;

export interface SubmitterLimits {
  /** Fair-share weight (> 0): usage is divided by it. */
  weight: number;
  /** Tasks it may hold at once; null = no cap. */
  maxConcurrent: number | null;
}

/** What the scheduler knows of the team's recent use, for one pass. */
export interface FairUsage {
  /** GPU-seconds per submitter over the window (held tasks count their time so far). */
  gpuSeconds: ReadonlyMap<string, number>;
  /** Tasks each submitter holds now (provisioning/queued/running). */
  active: ReadonlyMap<string, number>;
  /** Per-credential weight and cap (absent = weight 1, no cap). */
  limits: ReadonlyMap<string, SubmitterLimits>;
  /** GPU-seconds charged per assignment within the pass (about one task's worth). */
  quantumS: number;
}

export interface FairSettings {
  /** Seconds per level of aging; 0 = no aging. */
  agingS: number;
  /** How far behind its head a submitter's task may be taken to land on a warm agent; 0 = strict FIFO. */
  warmLookahead: number;
  /** The team's held tasks and quota (0 = unlimited). */
  teamActive: number;
  teamMax: number;
}

/** The task's priority after aging: one level up per agingS waited, never above 1. */
export function effectivePriority(t: TaskRecord, now: number, agingS: number): number {
  const p = t.priority ?? DEFAULT_PRIORITY;
  if (agingS <= 0 || p <= 1) return p;
  const levels = Math.floor(Math.max(0, now - t.createdAt) / (agingS * 1000));
  return Math.max(1, p - levels);
}

/** Case-insensitive substring: "A100" matches "NVIDIA A100-SXM4-80GB". */
export const gpuMatches = (pref: string | null | undefined, gpuType: string | null): boolean => !!pref && (gpuType ?? '').toLowerCase().includes(pref.toLowerCase());

/** Whether the agent's executor runs this tool type (an agent that says nothing runs any). */
export const runsTool = (a: Pick<AgentSlot, 'toolTypes'>, toolType: string): boolean => !a.toolTypes || a.toolTypes.length === 0 || a.toolTypes.includes(toolType);

/** Whether the agent is warm for the task: it last ran the same workflow version, or holds one of its models loaded. */
export function isWarm(t: TaskRecord, a: Pick<AgentSlot, 'lastWorkflow' | 'loaded'>): boolean {
  if (t.workflowKey && a.lastWorkflow === t.workflowKey) return true;
  if (!a.loaded || a.loaded.length === 0) return false;
  for (const m of t.requiredModels) if (a.loaded.includes(m)) return true;
  return false;
}

interface Sim extends AgentSlot {
  modelSet: Set<string> | null;
  pref: string;
}

interface Group {
  sub: string;
  tasks: TaskRecord[];
  next: number;
  /** Indices behind `next` taken by the warm look-ahead. */
  taken: Set<number> | null;
  weight: number;
  cap: number | null;
}

/** The task's placement constraints as one string: a pass remembers which found no free agent. */
const sigCache = new WeakMap<TaskRecord, string>();
function sigOf(t: TaskRecord): string {
  let s = sigCache.get(t);
  if (s === undefined) {
    s = `${t.toolType}|${t.minVramGb}|${t.requiredLabels.join('\u0000')}|${t.requiredModels.join('\u0000')}`;
    sigCache.set(t, s);
  }
  return s;
}

function fits(t: TaskRecord, a: Sim): boolean {
  if (a.free <= 0 || a.draining || a.teamId !== t.teamId) return false;
  if (!runsTool(a, t.toolType)) return false;
  for (const l of t.requiredLabels) if (!a.labels.includes(l)) return false;
  if (t.minVramGb > 0 && a.vramTotalGb < t.minVramGb) return false;
  if (t.requiredModels.length > 0) {
    const have = (a.modelSet ??= new Set(a.models));
    for (const m of t.requiredModels) if (!have.has(m)) return false;
  }
  return true;
}

/** Preferred GPU, then least recently used, then the lower id. */
function best(t: TaskRecord, agents: readonly Sim[]): Sim | null {
  let b: Sim | null = null;
  let bScore = 2;
  const pref = t.preferredGpu ? t.preferredGpu.toLowerCase() : null;
  for (const a of agents) {
    if (!fits(t, a)) continue;
    const score = pref !== null && a.pref.includes(pref) ? 0 : 1;
    if (b === null || score < bScore || (score === bScore && (a.lastAssignedAt < b.lastAssignedAt || (a.lastAssignedAt === b.lastAssignedAt && a.agentId < b.agentId)))) {
      b = a;
      bScore = score;
    }
  }
  return b;
}

const EMPTY: readonly Sim[] = [];

/** One pass of the fair strategy: which tasks go to which agent, which pending ones must wait. */
export function planFair(queue: readonly TaskRecord[], agents: Iterable<AgentSlot>, usage: FairUsage, now: number, s: FairSettings): { assign: PlanStep[]; wait: string[] } {
  const assign: PlanStep[] = [];
  const placed = new Set<string>();
  const free: Sim[] = [];
  let capacity = 0;
  for (const a of agents)
    if (!a.draining && a.free > 0) {
      free.push({ ...a, modelSet: null, pref: (a.gpuType ?? '').toLowerCase() });
      capacity += a.free;
    }
  let active = s.teamActive;
  const full = (): boolean => capacity <= 0 || (s.teamMax > 0 && active >= s.teamMax);
  if (!full()) {
    // warm index: workflow version or loaded model -> free agents
    const warm = new Map<string, Sim[]>();
    const index = (k: string, a: Sim): void => {
      const l = warm.get(k);
      if (l) l.push(a);
      else warm.set(k, [a]);
    };
    for (const a of free) {
      if (a.lastWorkflow) index(`w:${a.lastWorkflow}`, a);
      for (const m of a.loaded ?? []) index(`m:${m}`, a);
    }
    const warmOf = (t: TaskRecord): readonly Sim[] => {
      let out: Sim[] | null = null;
      const add = (l: Sim[] | undefined): void => {
        if (l) out = out ? out.concat(l) : l;
      };
      if (t.workflowKey) add(warm.get(`w:${t.workflowKey}`));
      for (const m of t.requiredModels) add(warm.get(`m:${m}`));
      return out ?? EMPTY;
    };
    // levels 1..5, each: submitter -> its tasks in FIFO (seq) order
    const levels: Array<Map<string, Group>> = [];
    for (let i = 0; i <= 5; i++) levels.push(new Map());
    let sorted = true;
    for (let i = 1; i < queue.length && sorted; i++) if ((queue[i] as TaskRecord).seq < (queue[i - 1] as TaskRecord).seq) sorted = false;
    const ordered = sorted ? queue : [...queue].sort((x, y) => x.seq - y.seq);
    for (const t of ordered) {
      if (t.dispatchTarget !== 'agent') continue;
      const lvl = levels[Math.min(5, Math.max(1, effectivePriority(t, now, s.agingS)))] as Map<string, Group>;
      const sub = t.submitter ?? '';
      let g = lvl.get(sub);
      if (!g) {
        const lim = usage.limits.get(sub);
        g = { sub, tasks: [], next: 0, taken: null, weight: lim && lim.weight > 0 ? lim.weight : 1, cap: lim?.maxConcurrent ?? null };
        lvl.set(sub, g);
      }
      g.tasks.push(t);
    }
    const inPass = new Map<string, number>();
    const noFit = new Set<string>();
    const bypassMs = (s.agingS > 0 ? s.agingS : 300) * 1000;
    const share = (g: Group): number => ((usage.gpuSeconds.get(g.sub) ?? 0) + (inPass.get(g.sub) ?? 0) * usage.quantumS) / g.weight;
    const capped = (g: Group): boolean => g.cap !== null && (usage.active.get(g.sub) ?? 0) + (inPass.get(g.sub) ?? 0) >= g.cap;

    /** Places the group's next placeable task (or a warm one just behind it); false when none is left. */
    const placeNext = (g: Group): boolean => {
      while (g.next < g.tasks.length) {
        if (g.taken?.has(g.next)) {
          g.next++;
          continue;
        }
        const h = g.tasks[g.next] as TaskRecord;
        if (noFit.has(sigOf(h))) {
          g.next++;
          continue;
        }
        let t = h;
        let ti = g.next;
        let a = best(h, warmOf(h));
        if (!a && s.warmLookahead > 0 && now - h.createdAt < bypassMs) {
          const end = Math.min(g.tasks.length, g.next + 1 + s.warmLookahead);
          for (let j = g.next + 1; j < end; j++) {
            if (g.taken?.has(j)) continue;
            const c = g.tasks[j] as TaskRecord;
            if (noFit.has(sigOf(c))) continue;
            const wa = best(c, warmOf(c));
            if (wa) {
              a = wa;
              t = c;
              ti = j;
              break;
            }
          }
        }
        a ??= best(h, free);
        if (!a) {
          noFit.add(sigOf(h)); // agents only lose free slots within a pass: nothing will fit it later
          g.next++;
          continue;
        }
        if (ti === g.next) g.next++;
        else (g.taken ??= new Set()).add(ti);
        a.free -= 1;
        capacity -= 1;
        active += 1;
        inPass.set(g.sub, (inPass.get(g.sub) ?? 0) + 1);
        a.lastAssignedAt = Number.MAX_SAFE_INTEGER - 1e6 + assign.length; // assigned in this pass: now the most recently used
        if (t.workflowKey) a.lastWorkflow = t.workflowKey;
        placed.add(t.id);
        assign.push({ taskId: t.id, agentId: a.agentId });
        return true;
      }
      return false;
    };

    for (let lvl = 1; lvl <= 5 && !full(); lvl++) {
      const gs = [...(levels[lvl] as Map<string, Group>).values()];
      while (gs.length > 0 && !full()) {
        let bi = 0;
        let bShare = share(gs[0] as Group);
        for (let i = 1; i < gs.length; i++) {
          const g = gs[i] as Group;
          const sh = share(g);
          const b = gs[bi] as Group;
          if (sh < bShare || (sh === bShare && (g.tasks[g.next]?.seq ?? Infinity) < (b.tasks[b.next]?.seq ?? Infinity))) {
            bi = i;
            bShare = sh;
          }
        }
        const g = gs[bi] as Group;
        if (capped(g) || !placeNext(g)) gs.splice(bi, 1);
      }
    }
  }
  const wait: string[] = [];
  for (const t of queue) if (t.status === 'pending' && !placed.has(t.id)) wait.push(t.id);
  return { assign, wait };
}
