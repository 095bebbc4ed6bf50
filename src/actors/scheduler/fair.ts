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
import { best, better, ColdIndex, eligibleBusy, runsTool, sigOf, wkeyOf, type Sim } from './fair-agents.js';

export { runsTool };

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


/** Whether the agent is warm for the task: it last ran the same workflow version, or holds one of its models loaded. */
export function isWarm(t: TaskRecord, a: Pick<AgentSlot, 'lastWorkflow' | 'loaded'>): boolean {
  if (t.workflowKey && a.lastWorkflow === t.workflowKey) return true;
  if (!a.loaded || a.loaded.length === 0) return false;
  for (const m of t.requiredModels) if (a.loaded.includes(m)) return true;
  return false;
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

/** Appends v to the list at k. */
function push<V>(m: Map<string, V[]>, k: string, v: V): void {
  const l = m.get(k);
  if (l) l.push(v);
  else m.set(k, [v]);
}

/** One pass of the fair strategy: which tasks go to which agent, which pending ones must wait. */
export function planFair(queue: readonly TaskRecord[], agents: Iterable<AgentSlot>, usage: FairUsage, now: number, s: FairSettings): { assign: PlanStep[]; wait: string[]; wakeAt: number | null } {
  const pass = new FairPass(usage, now, s);
  pass.run(queue, agents);
  const wait: string[] = [];
  for (const t of queue) if (t.status === 'pending' && !pass.placed.has(t.id)) wait.push(t.id);
  return { assign: pass.assign, wait, wakeAt: pass.wakeAt };
}

/** The state of one pass (a class, not closures: this runs for every look-ahead probe). */
class FairPass {
  readonly assign: PlanStep[] = [];
  readonly placed = new Set<string>();
  wakeAt: number | null = null;
  private readonly free: Sim[] = [];
  /** Agents running something (warm ones are worth keeping busy with their key, or waiting for). */
  private readonly busy: AgentSlot[] = [];
  private capacity = 0;
  private active: number;
  /** Warm index: workflow version or loaded model -> free agents. */
  private readonly warm = new Map<string, Sim[]>();
  /** Busy agents by workflow version and by loaded model (built at the first need). */
  private busyWf: Map<string, AgentSlot[]> | null = null;
  private busyModel: Map<string, AgentSlot[]> | null = null;
  private readonly busyWarmKnown = new Map<string, number>();
  /** Tasks placed in this pass per warm key: their agents are warm for that key from now on. */
  private readonly inPassWarm = new Map<string, number>();
  private readonly warmWaitMs: number;
  /**
   * Agents only lose free slots within a pass, so a task that finds no warm agent tells the same for
   * every task of its constraints and warm keys: the look-ahead's later probes of those are one set lookup.
   */
  private readonly noWarm = new Set<string>();
  private readonly inPass = new Map<string, number>();
  private readonly noFit = new Set<string>();
  private readonly bypassMs: number;
  private readonly slack: number;
  /** Look-ahead tasks examined in this pass (bounded: the pass stays cheap with a long queue). */
  private probes = 0;
  private cold: ColdIndex | null = null;

  constructor(
    private readonly usage: FairUsage,
    private readonly now: number,
    private readonly s: FairSettings,
  ) {
    this.active = s.teamActive;
    this.warmWaitMs = s.warmWaitS * 1000;
    this.bypassMs = BYPASS_INTERVALS * (s.agingS > 0 ? s.agingS : 300) * 1000;
    this.slack = s.warmSlackTasks * usage.quantumS;
  }

  run(queue: readonly TaskRecord[], agents: Iterable<AgentSlot>): void {
    for (const a of agents) {
      if (a.draining) continue;
      if (a.free > 0) {
        this.free.push({ ...a, modelSet: null, pref: (a.gpuType ?? '').toLowerCase() });
        this.capacity += a.free;
      }
      if (a.free < a.slots) this.busy.push(a);
    }
    if (this.full()) return;
    for (const a of this.free) {
      if (a.lastWorkflow) push(this.warm, `w:${a.lastWorkflow}`, a);
      for (const m of a.loaded ?? []) push(this.warm, `m:${m}`, a);
    }
    this.cold = new ColdIndex(this.free);
    const levels = this.levels(queue);
    for (let lvl = 1; lvl <= 5 && !this.full(); lvl++) {
      const gs = [...(levels[lvl] as Map<string, Group>).values()];
      while (gs.length > 0 && !this.full()) {
        let bi = 0;
        let bShare = this.share(gs[0] as Group);
        for (let i = 1; i < gs.length; i++) {
          const g = gs[i] as Group;
          const sh = this.share(g);
          const b = gs[bi] as Group;
          if (sh < bShare || (sh === bShare && (g.tasks[g.next]?.seq ?? Infinity) < (b.tasks[b.next]?.seq ?? Infinity))) {
            bi = i;
            bShare = sh;
          }
        }
        const g = gs[bi] as Group;
        if (this.capped(g) || this.headOf(g) === null) {
          gs.splice(bi, 1);
          continue;
        }
        // warm first: this submitter's, else (within the slack of one fair share's worth) another's
        // of the same level, else this submitter's head, cold
        let p = this.findWarm(g);
        for (let i = 0; !p && this.slack > 0 && i < gs.length; i++) {
          const o = gs[i] as Group;
          if (o !== g && this.share(o) <= bShare + this.slack / o.weight && !this.capped(o)) p = this.findWarm(o);
        }
        p ??= this.findCold(g);
        if (p) this.take(p);
        else gs.splice(bi, 1);
      }
    }
  }

  private full(): boolean {
    return this.capacity <= 0 || (this.s.teamMax > 0 && this.active >= this.s.teamMax);
  }

  /** Levels 1..5, each: submitter -> its tasks in FIFO (seq) order. */
  private levels(queue: readonly TaskRecord[]): Array<Map<string, Group>> {
    const levels: Array<Map<string, Group>> = [];
    for (let i = 0; i <= 5; i++) levels.push(new Map());
    let sorted = true;
    for (let i = 1; i < queue.length && sorted; i++) if ((queue[i] as TaskRecord).seq < (queue[i - 1] as TaskRecord).seq) sorted = false;
    const ordered = sorted ? queue : [...queue].sort((x, y) => x.seq - y.seq);
    for (const t of ordered) {
      if (t.dispatchTarget !== 'agent') continue;
      const lvl = levels[Math.min(5, Math.max(1, effectivePriority(t, this.now, this.s.agingS)))] as Map<string, Group>;
      const sub = t.submitter ?? '';
      let g = lvl.get(sub);
      if (!g) {
        const lim = this.usage.limits.get(sub);
        g = { sub, tasks: [], next: 0, taken: null, weight: lim && lim.weight > 0 ? lim.weight : 1, cap: lim?.maxConcurrent ?? null, win: null, winStart: 0, winEnd: 0 };
        lvl.set(sub, g);
      }
      g.tasks.push(t);
    }
    return levels;
  }

  private busyIndex(): { wf: Map<string, AgentSlot[]>; model: Map<string, AgentSlot[]> } {
    if (!this.busyWf || !this.busyModel) {
      this.busyWf = new Map();
      this.busyModel = new Map();
      for (const a of this.busy) {
        if (a.lastWorkflow) push(this.busyWf, a.lastWorkflow, a);
        for (const m of a.loaded ?? []) push(this.busyModel, m, a);
      }
    }
    return { wf: this.busyWf, model: this.busyModel };
  }

  /** How many busy agents are warm for the task (its keys' most; eligibility aside). */
  private busyWarmCount(t: TaskRecord): number {
    const { wf, model } = this.busyIndex();
    let n = t.workflowKey ? (wf.get(t.workflowKey)?.length ?? 0) : 0;
    for (const m of t.requiredModels) n = Math.max(n, model.get(m)?.length ?? 0);
    return n;
  }

  /** Slots of the eligible busy agents warm for the task (the most over its keys; 0 = none is warm). */
  private busyWarmSlots(t: TaskRecord): number {
    const key = `${sigOf(t)}|${t.teamId}|${t.workflowKey ?? ''}`;
    let r = this.busyWarmKnown.get(key);
    if (r === undefined) {
      const { wf, model } = this.busyIndex();
      r = 0;
      for (let i = t.workflowKey ? -1 : 0; i < t.requiredModels.length; i++) {
        const l = i < 0 ? wf.get(t.workflowKey as string) : model.get(t.requiredModels[i] as string);
        let n = 0;
        for (const a of l ?? []) if (eligibleBusy(t, a)) n += a.slots;
        r = Math.max(r, n);
      }
      this.busyWarmKnown.set(key, r);
    }
    return r;
  }

  /** The best free agent warm for the task (same workflow version, or one of its models loaded). */
  private bestWarm(t: TaskRecord): Sim | null {
    const key = `${sigOf(t)}|${t.teamId}|${t.workflowKey ?? ''}`;
    if (this.noWarm.has(key)) return null;
    let b: Sim | null = null;
    for (let i = t.workflowKey ? -1 : 0; i < t.requiredModels.length; i++) {
      const l = this.warm.get(i < 0 ? `w:${t.workflowKey}` : `m:${t.requiredModels[i]}`);
      if (!l || l.length === 0) continue;
      const a = best(t, l);
      if (a && (b === null || better(t, a, b))) b = a;
    }
    if (b === null) this.noWarm.add(key);
    return b;
  }

  private share(g: Group): number {
    return ((this.usage.gpuSeconds.get(g.sub) ?? 0) + (this.inPass.get(g.sub) ?? 0) * this.usage.quantumS) / g.weight;
  }

  private capped(g: Group): boolean {
    return g.cap !== null && (this.usage.active.get(g.sub) ?? 0) + (this.inPass.get(g.sub) ?? 0) >= g.cap;
  }

  /** Skips the group's taken and unplaceable tasks; its head, or null when none is left. */
  private headOf(g: Group): TaskRecord | null {
    while (g.next < g.tasks.length) {
      const h = g.tasks[g.next] as TaskRecord;
      if (g.taken?.has(g.next) || this.noFit.has(sigOf(h))) g.next++;
      else return h;
    }
    return null;
  }

  /** A warm placement in the group: its head, or a task at most warmLookahead behind it. */
  private findWarm(g: Group): Choice | null {
    const h = this.headOf(g);
    if (!h) return null;
    const a = this.bestWarm(h);
    if (a) return { g, t: h, ti: g.next, a };
    const end = Math.min(g.tasks.length, g.next + 1 + this.s.warmLookahead);
    for (let j = g.next + 1; j < end && this.probes < PROBE_BUDGET; j++, this.probes++) {
      if (g.taken?.has(j)) continue;
      const c = g.tasks[j] as TaskRecord;
      if (c.createdAt - h.createdAt >= this.bypassMs) break; // submitted BYPASS_INTERVALS aging intervals later: may not overtake
      if (this.noFit.has(sigOf(c))) continue;
      const wa = this.bestWarm(c);
      if (wa) return { g, t: c, ti: j, a: wa };
    }
    return null;
  }

  /** Whether the look-ahead may consider task j of the group (head h): not taken, not unplaceable, submitted less than bypassMs after h. */
  private inWindow(g: Group, h: TaskRecord, j: number): boolean {
    if (g.taken?.has(j)) return false;
    const c = g.tasks[j] as TaskRecord;
    return c.createdAt - h.createdAt < this.bypassMs && !this.noFit.has(sigOf(c));
  }

  /** The group's look-ahead window (built once per head range): its tasks by warm key. */
  private windowOf(g: Group, h: TaskRecord): Map<string, WinEntry> {
    if (!g.win || g.next >= g.winEnd) {
      g.win = new Map();
      g.winStart = g.next;
      g.winEnd = Math.min(g.tasks.length, g.next + 1 + this.s.warmLookahead);
      for (let j = g.next; j < g.winEnd; j++) {
        const c = g.tasks[j] as TaskRecord;
        if (c.createdAt - h.createdAt >= this.bypassMs) {
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
  }

  /**
   * Which task of the group starts cold: among the look-ahead window's warm keys, the one with the
   * most tasks left per agent already warm for it (busy, or placed in this pass), its oldest task;
   * the head's key wins ties with a later one. So the submitter's agents spread over its window's
   * checkpoints instead of piling onto the head's (each load then serves more tasks). The window
   * is the warm look-ahead's: only tasks submitted less than BYPASS_INTERVALS aging intervals after
   * the head go before it, so the head cannot starve.
   */
  private coldTask(g: Group, h: TaskRecord): { t: TaskRecord; ti: number } {
    if (this.s.warmLookahead <= 0) return { t: h, ti: g.next };
    const win = this.windowOf(g, h);
    let best: { t: TaskRecord; ti: number } | null = null;
    let bestRatio = -1;
    for (const [k, e] of win) {
      if (e.left <= 0) continue;
      while (e.p < e.idx.length && !this.inWindow(g, h, e.idx[e.p] as number)) e.p++;
      if (e.p >= e.idx.length) {
        e.left = 0;
        continue;
      }
      const ti = e.idx[e.p] as number;
      if (ti < g.next) continue;
      const t = g.tasks[ti] as TaskRecord;
      const ratio = e.left / (1 + this.busyWarmCount(t) + (this.inPassWarm.get(k) ?? 0));
      if (ratio > bestRatio || (ratio === bestRatio && best !== null && ti < best.ti)) {
        best = { t, ti };
        bestRatio = ratio;
      }
    }
    return best ?? { t: h, ti: g.next };
  }

  /** The group's waiting tasks of the head's warm key, the head included (its look-ahead window's). */
  private backlogOf(g: Group, h: TaskRecord): number {
    return this.s.warmLookahead > 0 ? (this.windowOf(g, h).get(wkeyOf(h))?.left ?? 1) : 1;
  }

  /** The group's head on the best agent (cold); null (and the head skipped) when no free agent fits it. */
  private findCold(g: Group): Choice | null {
    for (let h = this.headOf(g); h; h = this.headOf(g)) {
      // young, and an eligible agent warm for it is busy: it waits for that one (and so do the
      // submitter's later tasks: FIFO), at most warmWaitS after its submission. Only while its
      // backlog of that key fits the warm agents' slots: a deeper one would wait behind them for
      // longer than a cold start, with free agents idle, so it spreads instead.
      if (this.warmWaitMs > 0 && this.now - h.createdAt < this.warmWaitMs && this.backlogOf(g, h) <= this.busyWarmSlots(h)) {
        this.wakeAt = Math.min(this.wakeAt ?? Infinity, h.createdAt + this.warmWaitMs);
        return null;
      }
      const c = this.coldTask(g, h);
      const a = (this.cold as ColdIndex).pick(c.t);
      if (a) return { g, t: c.t, ti: c.ti, a };
      this.noFit.add(sigOf(c.t)); // agents only lose free slots within a pass: nothing will fit it later
      if (c.ti === g.next) g.next++;
    }
    return null;
  }

  private take(p: Choice): void {
    const { g, t, ti, a } = p;
    if (ti === g.next) g.next++;
    else (g.taken ??= new Set()).add(ti);
    a.free -= 1;
    this.capacity -= 1;
    this.active += 1;
    this.inPass.set(g.sub, (this.inPass.get(g.sub) ?? 0) + 1);
    a.lastAssignedAt = Number.MAX_SAFE_INTEGER - 1e6 + this.assign.length; // assigned in this pass: now the most recently used
    if (t.workflowKey) a.lastWorkflow = t.workflowKey;
    this.placed.add(t.id);
    this.assign.push({ taskId: t.id, agentId: a.agentId });
    const k = wkeyOf(t);
    this.inPassWarm.set(k, (this.inPassWarm.get(k) ?? 0) + 1);
    const e = g.win?.get(k);
    if (e && ti >= g.winStart && ti < g.winEnd) e.left--;
  }
}
