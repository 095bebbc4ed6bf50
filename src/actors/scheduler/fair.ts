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
 * free, a later task of the same submitter and level (at most `warmLookahead` places behind it,
 * submitted less than BYPASS_INTERVALS aging intervals after it) that does may go first; when none
 * does, the cold start goes to the task of that same window whose warm key (workflow version and
 * models) has the most tasks left per agent already warm for it (the head on ties), so a
 * submitter's agents spread over its checkpoints instead of all reloading the head's. Only a
 * bounded number of tasks can ever overtake a task, so it cannot starve. A task submitted less
 * than `warmWaitS` ago that no free agent is warm for, but a busy eligible one is, waits for that
 * one instead of starting cold (the submitter's later tasks wait behind it; the decision says when
 * the wait ends, `wakeAt`, so the caller runs a pass then).
 */
import type { TaskRecord } from '../ports.js';
import type { AgentSlot, PlanStep } from './fifo-lru.js';

export const DEFAULT_PRIORITY = 3;

/**
 * The look-ahead may take a task only if it was submitted less than this many aging intervals after
 * the submitter's oldest waiting task of the level: so a task is overtaken by a bounded number of
 * tasks (those submitted in that time) and cannot starve.
 */
export const BYPASS_INTERVALS = 2;

/** At most this many look-ahead tasks are examined per pass (then placement is by the heads only). */
const PROBE_BUDGET = 20_000;

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
  /**
   * A submitter of the same level whose usage is at most this many tasks' worth (quantumS) above
   * the least one's may take a free slot its warm task fits, instead of a cold start; 0 = never.
   */
  warmSlackTasks: number;
  /**
   * A task younger than this (seconds since it was submitted) that no free agent is warm for, but a
   * busy eligible agent is, waits for that agent instead of a cold start elsewhere; 0 = never.
   */
  warmWaitS: number;
  /** The team's held tasks and quota (0 = unlimited). */
  teamActive: number;
  teamMax: number;
}

/**
 * Aging lifts a task at most to this level: priority 1 stays for runs submitted at 1, so an aged
 * backlog never overtakes urgent work (at level 2 it competes by fair share, where a heavy
 * submitter's usage puts it behind the light ones).
 */
export const AGED_PRIORITY_CAP = 2;

/** The task's priority after aging: one level up per agingS waited, up to AGED_PRIORITY_CAP. */
export function effectivePriority(t: TaskRecord, now: number, agingS: number): number {
  const p = t.priority ?? DEFAULT_PRIORITY;
  if (agingS <= 0 || p <= AGED_PRIORITY_CAP) return p;
  const levels = Math.floor(Math.max(0, now - t.createdAt) / (agingS * 1000));
  return Math.max(AGED_PRIORITY_CAP, p - levels);
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

interface Choice {
  g: Group;
  t: TaskRecord;
  ti: number;
  a: Sim;
}

interface Group {
  sub: string;
  tasks: TaskRecord[];
  next: number;
  /** Indices behind `next` taken by the warm look-ahead. */
  taken: Set<number> | null;
  weight: number;
  cap: number | null;
  /** The look-ahead window's tasks by warm key (built at the group's first cold start in the pass), and its range. */
  win: Map<string, WinEntry> | null;
  winStart: number;
  winEnd: number;
}

/** Tasks of one warm key in a group's window: their indices in order, the first maybe untaken, how many are left. */
interface WinEntry {
  idx: number[];
  p: number;
  left: number;
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

/** What makes an agent warm for the task (its workflow version and models): tasks with the same key share warm agents. */
const wkeyCache = new WeakMap<TaskRecord, string>();
function wkeyOf(t: TaskRecord): string {
  let k = wkeyCache.get(t);
  if (k === undefined) {
    k = `${t.workflowKey ?? ''}|${t.requiredModels.join('\u0000')}`;
    wkeyCache.set(t, k);
  }
  return k;
}

/** Whether a beats b for the task: preferred GPU, then least recently used, then the lower id. */
function better(t: TaskRecord, a: Sim, b: Sim): boolean {
  const pref = t.preferredGpu ? t.preferredGpu.toLowerCase() : null;
  const sa = pref !== null && a.pref.includes(pref) ? 0 : 1;
  const sb = pref !== null && b.pref.includes(pref) ? 0 : 1;
  return sa < sb || (sa === sb && (a.lastAssignedAt < b.lastAssignedAt || (a.lastAssignedAt === b.lastAssignedAt && a.agentId < b.agentId)));
}

function fits(t: TaskRecord, a: Sim): boolean {
  return a.free > 0 && eligible(t, a);
}

/** Whether a busy agent could run the task once free. */
function eligibleBusy(t: TaskRecord, a: AgentSlot): boolean {
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
function best(t: TaskRecord, agents: Sim[]): Sim | null {
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
class ColdIndex {
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

/** One pass of the fair strategy: which tasks go to which agent, which pending ones must wait. */
export function planFair(queue: readonly TaskRecord[], agents: Iterable<AgentSlot>, usage: FairUsage, now: number, s: FairSettings): { assign: PlanStep[]; wait: string[]; wakeAt: number | null } {
  const assign: PlanStep[] = [];
  const placed = new Set<string>();
  const free: Sim[] = [];
  /** Agents running something (warm ones are worth keeping busy with their key, or waiting for). */
  const busy: AgentSlot[] = [];
  let capacity = 0;
  let wakeAt: number | null = null;
  for (const a of agents) {
    if (a.draining) continue;
    if (a.free > 0) {
      free.push({ ...a, modelSet: null, pref: (a.gpuType ?? '').toLowerCase() });
      capacity += a.free;
    }
    if (a.free < a.slots) busy.push(a);
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
    // busy agents by workflow version and by loaded model (built at the first need)
    let busyWf: Map<string, AgentSlot[]> | null = null;
    let busyModel: Map<string, AgentSlot[]> | null = null;
    const busyIndex = (): void => {
      busyWf = new Map();
      busyModel = new Map();
      const add = (m: Map<string, AgentSlot[]>, k: string, a: AgentSlot): void => {
        const l = m.get(k);
        if (l) l.push(a);
        else m.set(k, [a]);
      };
      for (const a of busy) {
        if (a.lastWorkflow) add(busyWf, a.lastWorkflow, a);
        for (const m of a.loaded ?? []) add(busyModel, m, a);
      }
    };
    /** How many busy agents are warm for the task (its keys' most; eligibility aside). */
    const busyWarmCount = (t: TaskRecord): number => {
      if (!busyWf) busyIndex();
      let n = t.workflowKey ? (busyWf?.get(t.workflowKey)?.length ?? 0) : 0;
      for (const m of t.requiredModels) n = Math.max(n, busyModel?.get(m)?.length ?? 0);
      return n;
    };
    const busyWarmKnown = new Map<string, number>();
    /** Slots of the eligible busy agents warm for the task (the most over its keys; 0 = none is warm). */
    const busyWarmSlots = (t: TaskRecord): number => {
      const key = `${sigOf(t)}|${t.teamId}|${t.workflowKey ?? ''}`;
      let r = busyWarmKnown.get(key);
      if (r === undefined) {
        if (!busyWf) busyIndex();
        r = 0;
        for (let i = t.workflowKey ? -1 : 0; i < t.requiredModels.length; i++) {
          const l = i < 0 ? busyWf?.get(t.workflowKey as string) : busyModel?.get(t.requiredModels[i] as string);
          let n = 0;
          for (const a of l ?? []) if (eligibleBusy(t, a)) n += a.slots;
          r = Math.max(r, n);
        }
        busyWarmKnown.set(key, r);
      }
      return r;
    };
    /** Tasks placed in this pass per warm key: their agents are warm for that key from now on. */
    const inPassWarm = new Map<string, number>();
    const warmWaitMs = s.warmWaitS * 1000;
    /** The best free agent warm for the task (same workflow version, or one of its models loaded). */
    // (no closure per call: this runs for every look-ahead probe). Agents only lose free slots within
    // a pass, so a task that finds no warm agent tells the same for every task of its constraints and
    // warm keys: the look-ahead's later probes of those are one set lookup.
    const noWarm = new Set<string>();
    const bestWarm = (t: TaskRecord): Sim | null => {
      const key = `${sigOf(t)}|${t.teamId}|${t.workflowKey ?? ''}`;
      if (noWarm.has(key)) return null;
      let b: Sim | null = null;
      for (let i = t.workflowKey ? -1 : 0; i < t.requiredModels.length; i++) {
        const l = warm.get(i < 0 ? `w:${t.workflowKey}` : `m:${t.requiredModels[i]}`);
        if (!l || l.length === 0) continue;
        const a = best(t, l);
        if (a && (b === null || better(t, a, b))) b = a;
      }
      if (b === null) noWarm.add(key);
      return b;
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
        g = { sub, tasks: [], next: 0, taken: null, weight: lim && lim.weight > 0 ? lim.weight : 1, cap: lim?.maxConcurrent ?? null, win: null, winStart: 0, winEnd: 0 };
        lvl.set(sub, g);
      }
      g.tasks.push(t);
    }
    const inPass = new Map<string, number>();
    const noFit = new Set<string>();
    const bypassMs = BYPASS_INTERVALS * (s.agingS > 0 ? s.agingS : 300) * 1000;
    const slack = s.warmSlackTasks * usage.quantumS;
    let probes = 0; // look-ahead tasks examined in this pass (bounded: the pass stays cheap with a long queue)
    const share = (g: Group): number => ((usage.gpuSeconds.get(g.sub) ?? 0) + (inPass.get(g.sub) ?? 0) * usage.quantumS) / g.weight;
    const capped = (g: Group): boolean => g.cap !== null && (usage.active.get(g.sub) ?? 0) + (inPass.get(g.sub) ?? 0) >= g.cap;

    /** Skips the group's taken and unplaceable tasks; its head, or null when none is left. */
    const headOf = (g: Group): TaskRecord | null => {
      while (g.next < g.tasks.length) {
        const h = g.tasks[g.next] as TaskRecord;
        if (g.taken?.has(g.next) || noFit.has(sigOf(h))) g.next++;
        else return h;
      }
      return null;
    };
    /** A warm placement in the group: its head, or a task at most warmLookahead behind it. */
    const findWarm = (g: Group): Choice | null => {
      const h = headOf(g);
      if (!h) return null;
      const a = bestWarm(h);
      if (a) return { g, t: h, ti: g.next, a };
      const end = Math.min(g.tasks.length, g.next + 1 + s.warmLookahead);
      for (let j = g.next + 1; j < end && probes < PROBE_BUDGET; j++, probes++) {
        if (g.taken?.has(j)) continue;
        const c = g.tasks[j] as TaskRecord;
        if (c.createdAt - h.createdAt >= bypassMs) break; // submitted BYPASS_INTERVALS aging intervals later: may not overtake
        if (noFit.has(sigOf(c))) continue;
        const wa = bestWarm(c);
        if (wa) return { g, t: c, ti: j, a: wa };
      }
      return null;
    };
    /** The group's head on the best agent (cold); null (and the head skipped) when no free agent fits it. */
    const cold = new ColdIndex(free);
    /** Whether the look-ahead may consider task j of the group (head h): not taken, not unplaceable, submitted less than bypassMs after h. */
    const inWindow = (g: Group, h: TaskRecord, j: number): boolean => {
      if (g.taken?.has(j)) return false;
      const c = g.tasks[j] as TaskRecord;
      return c.createdAt - h.createdAt < bypassMs && !noFit.has(sigOf(c));
    };
    /** The group's look-ahead window (built once per head range): its tasks by warm key. */
    const windowOf = (g: Group, h: TaskRecord): Map<string, WinEntry> => {
      if (!g.win || g.next >= g.winEnd) {
        g.win = new Map();
        g.winStart = g.next;
        g.winEnd = Math.min(g.tasks.length, g.next + 1 + s.warmLookahead);
        for (let j = g.next; j < g.winEnd; j++) {
          const c = g.tasks[j] as TaskRecord;
          if (c.createdAt - h.createdAt >= bypassMs) {
            g.winEnd = j;
            break;
          }
          if (g.taken?.has(j)) continue;
          const k = wkeyOf(c);
          const e = g.win.get(k);
          if (e) {
            e.idx.push(j);
            e.left++;
          } else g.win.set(k, { idx: [j], p: 0, left: 1 });
        }
      }
      return g.win;
    };
    /**
     * Which task of the group starts cold: among the look-ahead window's warm keys, the one with the
     * most tasks left per agent already warm for it (busy, or placed in this pass), its oldest task;
     * the head's key wins ties with a later one. So the submitter's agents spread over its window's
     * checkpoints instead of piling onto the head's (each load then serves more tasks). The window
     * is the warm look-ahead's: only tasks submitted less than BYPASS_INTERVALS aging intervals after
     * the head go before it, so the head cannot starve.
     */
    const coldTask = (g: Group, h: TaskRecord): { t: TaskRecord; ti: number } => {
      if (s.warmLookahead <= 0) return { t: h, ti: g.next };
      const win = windowOf(g, h);
      let best: { t: TaskRecord; ti: number } | null = null;
      let bestRatio = -1;
      for (const [k, e] of win) {
        if (e.left <= 0) continue;
        while (e.p < e.idx.length && !inWindow(g, h, e.idx[e.p] as number)) e.p++;
        if (e.p >= e.idx.length) {
          e.left = 0;
          continue;
        }
        const ti = e.idx[e.p] as number;
        if (ti < g.next) continue;
        const t = g.tasks[ti] as TaskRecord;
        const ratio = e.left / (1 + busyWarmCount(t) + (inPassWarm.get(k) ?? 0));
        if (ratio > bestRatio || (ratio === bestRatio && best !== null && ti < best.ti)) {
          best = { t, ti };
          bestRatio = ratio;
        }
      }
      return best ?? { t: h, ti: g.next };
    };
    /** The group's waiting tasks of the head's warm key, the head included (its look-ahead window's). */
    const backlogOf = (g: Group, h: TaskRecord): number => (s.warmLookahead > 0 ? (windowOf(g, h).get(wkeyOf(h))?.left ?? 1) : 1);
    const findCold = (g: Group): Choice | null => {
      for (let h = headOf(g); h; h = headOf(g)) {
        // young, and an eligible agent warm for it is busy: it waits for that one (and so do the
        // submitter's later tasks: FIFO), at most warmWaitS after its submission
        // Only while its backlog of that key fits the warm agents' slots: a deeper one would wait
        // behind them for longer than a cold start, with free agents idle, so it spreads instead.
        if (warmWaitMs > 0 && now - h.createdAt < warmWaitMs && backlogOf(g, h) <= busyWarmSlots(h)) {
          wakeAt = Math.min(wakeAt ?? Infinity, h.createdAt + warmWaitMs);
          return null;
        }
        const c = coldTask(g, h);
        const a = cold.pick(c.t);
        if (a) return { g, t: c.t, ti: c.ti, a };
        noFit.add(sigOf(c.t)); // agents only lose free slots within a pass: nothing will fit it later
        if (c.ti === g.next) g.next++;
      }
      return null;
    };
    const take = (p: Choice): void => {
      const { g, t, ti, a } = p;
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
        const k = wkeyOf(t);
        inPassWarm.set(k, (inPassWarm.get(k) ?? 0) + 1);
        const e = g.win?.get(k);
        if (e && ti >= g.winStart && ti < g.winEnd) e.left--;
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
        if (capped(g) || headOf(g) === null) {
          gs.splice(bi, 1);
          continue;
        }
        // warm first: this submitter's, else (within the slack of one fair share's worth) another's
        // of the same level, else this submitter's head, cold
        let p = findWarm(g);
        for (let i = 0; !p && slack > 0 && i < gs.length; i++) {
          const o = gs[i] as Group;
          if (o !== g && share(o) <= bShare + slack / o.weight && !capped(o)) p = findWarm(o);
        }
        p ??= findCold(g);
        if (p) take(p);
        else gs.splice(bi, 1);
      }
    }
  }
  const wait: string[] = [];
  for (const t of queue) if (t.status === 'pending' && !placed.has(t.id)) wait.push(t.id);
  return { assign, wait, wakeAt };
}
