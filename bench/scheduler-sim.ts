/**
 * bench:scheduler — a discrete-event simulation in virtual time that drives the real scheduling
 * policy (src/actors/scheduler/policy.ts `schedule`, with the real fair-share ledger) for the
 * `fifo-lru` and `fair` strategies on the same workload, and the cost of one pass.
 *
 * Workload (seeded, identical for both strategies):
 * - 200 agents, 1 GPU and 1 slot each, 4 GPU types (50 each); every agent holds all 40 checkpoint
 *   files and has one of them loaded (initially random); running a task whose checkpoint is not the
 *   loaded one first costs that checkpoint's load time (5-60 s), and then it is the loaded one.
 * - 50,000 tasks: 30% interactive (priority 2) from 20 users, Poisson arrivals over 3 h, checkpoints
 *   Zipf-distributed; 70% batch (priority 4) from 2 heavy submitters that submit jobs of 50 tasks on
 *   one checkpoint whenever their backlog falls below a window (3,000 tasks for the first, 1,000 for
 *   the second: both always backlogged, the first three times as pushy), until 35,000 are submitted.
 *   Durations log-normal (median 30 s, sigma 0.8); 20% of tasks prefer a GPU type ("A100"/"H100").
 * - The fleet is saturated: the work offered exceeds 200 GPUs over the 3 h measurement window.
 * - A scheduling pass runs once per virtual second while a task waits and an agent is free (the
 *   team scheduler coalesces bursts the same way).
 *
 * Figures: interactive queue wait p50/p95, and queue wait plus the checkpoint load before the run
 * starts (what a user waits for the first step); batch tasks finished per hour and GPU utilisation
 * (allocated, and useful = minus checkpoint loads) over the 3 h window; checkpoint loads over all
 * 50,000 tasks (and how many of them for interactive tasks); Jain's fairness index of the GPU-seconds received by equal-priority submitters
 * (the 2 batch submitters while both are backlogged; the 20 interactive users over the window).
 * Targets (fair): interactive p95 wait <= median task duration; loads <= 0.3x fifo-lru's;
 * utilisation >= fifo-lru's - 2 points; Jain >= 0.9; one pass over 10,000 waiting tasks and 1,000
 * agents <= 5 ms.
 *
 *   npm run bench:scheduler
 */
import { performance } from 'node:perf_hooks';
import type { TaskRecord } from '../src/actors/ports.js';
import type { AgentSlot } from '../src/actors/scheduler/fifo-lru.js';
import { UsageLedger } from '../src/actors/scheduler/ledger.js';
import { DEFAULT_POLICY, schedule, type PolicySettings, type Strategy } from '../src/actors/scheduler/policy.js';

// ---------------------------------------------------------------------------------------------
// seeded randomness

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const normal = (r: () => number): number => Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
const logNormal = (r: () => number, median: number, sigma: number): number => median * Math.exp(sigma * normal(r));

// ---------------------------------------------------------------------------------------------
// workload

const AGENTS = 200;
const GPU_TYPES = ['NVIDIA A100-SXM4-80GB', 'NVIDIA H100 80GB HBM3', 'NVIDIA L40S', 'NVIDIA GeForce RTX 4090'];
const CKPTS = 40;
const TOTAL = 50_000;
const INTERACTIVE = Math.round(TOTAL * 0.3);
const BATCH = TOTAL - INTERACTIVE;
const USERS = 20;
const HORIZON_S = 3 * 3600;
const MEDIAN_S = 30;
const SIGMA = 0.8;
const JOB = 50;
const WINDOWS = [3000, 1000];
const TEAM = 'team';

const ckptPath = (c: number): string => `checkpoints/ckpt-${c}.safetensors`;
const ALL_MODELS = Array.from({ length: CKPTS }, (_, c) => ckptPath(c));

interface SimTask {
  rec: TaskRecord;
  kind: 'interactive' | 'batch';
  submitter: string;
  ckpt: number;
  durationS: number;
  submitAt: number;
  startAt: number;
}

interface Workload {
  loadCostS: number[];
  initialLoaded: number[];
  /** Interactive arrivals (time, user, ckpt, duration, pref) in time order. */
  interactive: Array<{ at: number; user: number; ckpt: number; durationS: number; pref: string | null }>;
  /**
   * A fresh drawer of batch jobs (checkpoint, durations, preferred GPU) in submission order: each
   * strategy gets its own, so both see the same jobs (one shared drawer gave the second strategy
   * the jobs after the first one's).
   */
  batchDraws: () => () => { ckpt: number; durations: number[]; pref: string | null };
  medianS: number;
}

function workload(seed: number): Workload {
  const r = rng(seed);
  const loadCostS = Array.from({ length: CKPTS }, () => 5 + r() * 55);
  const initialLoaded = Array.from({ length: AGENTS }, () => Math.floor(r() * CKPTS));
  // Zipf(1) over the checkpoints for interactive users
  const weights = Array.from({ length: CKPTS }, (_, i) => 1 / (i + 1));
  const wsum = weights.reduce((a, b) => a + b, 0);
  const zipf = (): number => {
    let x = r() * wsum;
    for (let i = 0; i < CKPTS; i++) {
      x -= weights[i] as number;
      if (x <= 0) return i;
    }
    return CKPTS - 1;
  };
  const pref = (): string | null => {
    const x = r();
    return x < 0.1 ? 'A100' : x < 0.2 ? 'H100' : null;
  };
  const interactive: Workload['interactive'] = [];
  const rate = INTERACTIVE / HORIZON_S;
  let t = 0;
  const all: number[] = [];
  for (let i = 0; i < INTERACTIVE; i++) {
    t += -Math.log(1 - r()) / rate;
    const d = logNormal(r, MEDIAN_S, SIGMA);
    all.push(d);
    interactive.push({ at: t, user: Math.floor(r() * USERS), ckpt: zipf(), durationS: d, pref: pref() });
  }
  const batchDraws = (): (() => { ckpt: number; durations: number[]; pref: string | null }) => {
    const br = rng(seed ^ 0x9e3779b9);
    return () => {
      const durations = Array.from({ length: JOB }, () => logNormal(br, MEDIAN_S, SIGMA));
      const x = br();
      return { ckpt: Math.floor(br() * CKPTS), durations, pref: x < 0.2 ? (x < 0.1 ? 'A100' : 'H100') : null };
    };
  };
  const sorted = [...all].sort((a, b) => a - b);
  return { loadCostS, initialLoaded, interactive, batchDraws, medianS: sorted[Math.floor(sorted.length / 2)] as number };
}

// ---------------------------------------------------------------------------------------------
// simulation

class MinHeap<T> {
  private a: Array<[number, T]> = [];
  get size(): number {
    return this.a.length;
  }
  peek(): number {
    return (this.a[0] as [number, T])[0];
  }
  push(k: number, v: T): void {
    const a = this.a;
    a.push([k, v]);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if ((a[p] as [number, T])[0] <= k) break;
      [a[p], a[i]] = [a[i] as [number, T], a[p] as [number, T]];
      i = p;
    }
  }
  pop(): [number, T] {
    const a = this.a;
    const top = a[0] as [number, T];
    const last = a.pop() as [number, T];
    if (a.length > 0) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const rr = l + 1;
        let m = i;
        if (l < a.length && (a[l] as [number, T])[0] < (a[m] as [number, T])[0]) m = l;
        if (rr < a.length && (a[rr] as [number, T])[0] < (a[m] as [number, T])[0]) m = rr;
        if (m === i) break;
        [a[m], a[i]] = [a[i] as [number, T], a[m] as [number, T]];
        i = m;
      }
    }
    return top;
  }
}

interface Result {
  strategy: Strategy;
  interactiveP50: number;
  interactiveP95: number;
  /** Interactive wait plus the checkpoint load before it runs (what the user waits for the first step). */
  startP50: number;
  startP95: number;
  batchPerHour: number;
  utilisation: number;
  useful: number;
  loads: number;
  loadsInteractive: number;
  jainBatch: number;
  jainInteractive: number;
  batchShares: number[];
  makespanS: number;
  passes: number;
  passMsAvg: number;
}

const jain = (xs: number[]): number => {
  const s = xs.reduce((a, b) => a + b, 0);
  const q = xs.reduce((a, b) => a + b * b, 0);
  return q === 0 ? 1 : (s * s) / (xs.length * q);
};
const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? 0;
};

/** GPU-seconds of [a, b) inside [0, limit). */
const clip = (a: number, b: number, limit: number): number => Math.max(0, Math.min(b, limit) - Math.min(a, limit));

function simulate(strategy: Strategy, w: Workload): Result {
  const settings: PolicySettings = { ...DEFAULT_POLICY, strategy, ...(process.env.LOOKAHEAD ? { warmLookahead: Number(process.env.LOOKAHEAD) } : {}), ...(process.env.SLACK ? { warmSlackTasks: Number(process.env.SLACK) } : {}) };
  const ledger = new UsageLedger(3600);
  const agents = new Map<string, AgentSlot>();
  const loaded = new Map<string, number>();
  for (let i = 0; i < AGENTS; i++) {
    const id = `agent-${String(i).padStart(3, '0')}`;
    const ck = w.initialLoaded[i] as number;
    loaded.set(id, ck);
    agents.set(id, {
      agentId: id,
      teamId: TEAM,
      labels: [],
      gpuType: GPU_TYPES[i % GPU_TYPES.length] as string,
      gpuCount: 1,
      vramTotalGb: 80,
      models: ALL_MODELS,
      slots: 1,
      draining: false,
      needsSync: false,
      toolTypes: ['comfyui'],
      loaded: [ckptPath(ck)],
      free: 1,
      lastAssignedAt: 0,
      lastWorkflow: `wf-${ck}@1`,
    });
  }
  const queue = new Map<string, SimTask>();
  const byId = new Map<string, SimTask>();
  type Ev = { type: 'arrive'; i: number } | { type: 'finish'; task: SimTask; agentId: string };
  const events = new MinHeap<Ev>();
  for (let i = 0; i < w.interactive.length; i++) events.push((w.interactive[i] as Workload['interactive'][number]).at, { type: 'arrive', i });
  let seq = 0;
  let nextId = 0;
  const add = (kind: SimTask['kind'], submitter: string, ckpt: number, durationS: number, at: number, priority: number, pref: string | null): void => {
    const id = `t${nextId++}`;
    const rec: TaskRecord = {
      id,
      teamId: TEAM,
      status: 'waiting',
      attempt: 1,
      maxRetries: 0,
      leaseEpoch: 0,
      agentId: null,
      dispatchTarget: 'agent',
      toolType: 'comfyui',
      timeoutS: 0,
      requiredLabels: [],
      minVramGb: 0,
      requiredModels: [ckptPath(ckpt)],
      preferredGpu: pref,
      seq: ++seq,
      startedAt: null,
      createdAt: at * 1000,
      parentTaskId: null,
      retryTaskId: null,
      priority,
      submitter,
      workflowKey: `wf-${ckpt}@1`,
    };
    const t: SimTask = { rec, kind, submitter, ckpt, durationS, submitAt: at, startAt: -1 };
    queue.set(id, t);
    byId.set(id, t);
  };
  // batch submitters: keep their backlog at their window, in jobs of JOB tasks
  const batchDraw = w.batchDraws();
  let batchSubmitted = 0;
  let batchStopAt = Infinity;
  const backlog = [0, 0];
  const topUp = (now: number): void => {
    for (let b = 0; b < WINDOWS.length; b++)
      while ((backlog[b] as number) < (WINDOWS[b] as number) && batchSubmitted < BATCH) {
        const job = batchDraw();
        for (const d of job.durations) {
          if (batchSubmitted >= BATCH) break;
          add('batch', `batch-${b}`, job.ckpt, d, now, 4, job.pref);
          backlog[b] = (backlog[b] as number) + 1;
          batchSubmitted++;
        }
        if (batchSubmitted >= BATCH) batchStopAt = Math.min(batchStopAt, now);
      }
  };
  topUp(0);

  const waits: number[] = [];
  const starts: number[] = [];
  let loads = 0;
  let loadsInteractive = 0;
  let batchDoneInHorizon = 0;
  let allocS = 0;
  let usefulS = 0;
  const gpuS = new Map<string, number>();
  const gpuSBatchContended = [0, 0];
  let done = 0;
  let passes = 0;
  let passMs = 0;
  let now = 0;
  const freeCount = (): number => {
    let n = 0;
    for (const a of agents.values()) n += a.free;
    return n;
  };
  let free = freeCount();
  let active = 0;
  while (done < TOTAL) {
    // scheduling pass (once per virtual second while something waits and an agent is free)
    if (queue.size > 0 && free > 0 && Number.isInteger(now)) {
      const q = [...queue.values()].map((t) => t.rec);
      const u = ledger.usage(now * 1000);
      const t0 = performance.now();
      const p = schedule(q, agents, { ...u, limits: new Map(), teamActive: active, teamMax: 0 }, now * 1000, settings);
      passMs += performance.now() - t0;
      passes++;
      for (const step of p.assign) {
        const t = queue.get(step.taskId) as SimTask;
        const a = agents.get(step.agentId as string) as AgentSlot;
        queue.delete(step.taskId);
        if (t.kind === 'batch') backlog[Number(t.submitter.slice(6))] = (backlog[Number(t.submitter.slice(6))] as number) - 1;
        a.free -= 1;
        free -= 1;
        active += 1;
        a.lastAssignedAt = now * 1000;
        const cold = loaded.get(a.agentId) !== t.ckpt;
        const loadS = cold ? (w.loadCostS[t.ckpt] as number) : 0;
        if (cold) {
          loads++;
          if (t.kind === 'interactive') loadsInteractive++;
          loaded.set(a.agentId, t.ckpt);
          a.loaded = [ckptPath(t.ckpt)];
        }
        a.lastWorkflow = t.rec.workflowKey ?? null;
        t.startAt = now;
        if (t.kind === 'interactive') {
          waits.push(now - t.submitAt);
          starts.push(now + loadS - t.submitAt);
        }
        ledger.start(t.rec.id, t.submitter, 1, now * 1000);
        const end = now + loadS + t.durationS;
        allocS += clip(now, end, HORIZON_S);
        usefulS += clip(now + loadS, end, HORIZON_S);
        gpuS.set(t.submitter, (gpuS.get(t.submitter) ?? 0) + clip(now, end, HORIZON_S));
        if (t.kind === 'batch') {
          const bi = Number(t.submitter.slice(6));
          gpuSBatchContended[bi] = (gpuSBatchContended[bi] as number) + clip(now, end, Math.min(batchStopAt, HORIZON_S));
        }
        events.push(end, { type: 'finish', task: t, agentId: a.agentId });
      }
      topUp(now);
    }
    // advance: to the next event, or the next second when a pass may place something
    const nextPass = queue.size > 0 && free > 0 ? (Number.isInteger(now) ? now + 1 : Math.ceil(now)) : Infinity;
    const nextEv = events.size > 0 ? events.peek() : Infinity;
    const next = Math.min(nextPass, nextEv);
    if (next === Infinity) break;
    now = next;
    while (events.size > 0 && events.peek() <= now) {
      const [, ev] = events.pop();
      if (ev.type === 'arrive') {
        const a = w.interactive[ev.i] as Workload['interactive'][number];
        add('interactive', `user-${a.user}`, a.ckpt, a.durationS, a.at, 2, a.pref);
      } else {
        const a = agents.get(ev.agentId) as AgentSlot;
        a.free += 1;
        free += 1;
        active -= 1;
        ledger.end(ev.task.rec.id, now * 1000);
        done++;
        if (ev.task.kind === 'batch' && now <= HORIZON_S) batchDoneInHorizon++;
      }
    }
    topUp(now);
  }
  const users = Array.from({ length: USERS }, (_, i) => gpuS.get(`user-${i}`) ?? 0);
  return {
    strategy,
    interactiveP50: pct(waits, 0.5),
    interactiveP95: pct(waits, 0.95),
    startP50: pct(starts, 0.5),
    startP95: pct(starts, 0.95),
    batchPerHour: batchDoneInHorizon / (HORIZON_S / 3600),
    utilisation: allocS / (AGENTS * HORIZON_S),
    useful: usefulS / (AGENTS * HORIZON_S),
    loads,
    loadsInteractive,
    jainBatch: jain(gpuSBatchContended),
    jainInteractive: jain(users),
    batchShares: gpuSBatchContended.map((x) => x / Math.max(1, gpuSBatchContended.reduce((a, b) => a + b, 0))),
    makespanS: now,
    passes,
    passMsAvg: passMs / Math.max(1, passes),
  };
}

// ---------------------------------------------------------------------------------------------
// the cost of one pass: 10,000 waiting tasks, 1,000 agents

function passCost(strategy: Strategy, freeFraction: number): { p50: number; p95: number; assigned: number } {
  const r = rng(7);
  const agents = new Map<string, AgentSlot>();
  for (let i = 0; i < 1000; i++) {
    const ck = Math.floor(r() * CKPTS);
    const id = `agent-${String(i).padStart(4, '0')}`;
    agents.set(id, {
      agentId: id,
      teamId: TEAM,
      labels: i % 10 === 0 ? ['big'] : [],
      gpuType: GPU_TYPES[i % GPU_TYPES.length] as string,
      gpuCount: 1,
      vramTotalGb: i % 2 ? 80 : 24,
      models: ALL_MODELS,
      slots: 1,
      draining: false,
      needsSync: false,
      toolTypes: i % 20 === 0 ? ['nerfstudio'] : ['comfyui'],
      loaded: [ckptPath(ck)],
      free: r() < freeFraction ? 1 : 0,
      lastAssignedAt: Math.floor(r() * 1e6),
      lastWorkflow: `wf-${ck}@1`,
    });
  }
  const now = 10_000_000;
  const queue: TaskRecord[] = [];
  for (let i = 0; i < 10_000; i++) {
    const ck = Math.floor(r() * CKPTS);
    queue.push({
      id: `t${i}`,
      teamId: TEAM,
      status: 'waiting',
      attempt: 1,
      maxRetries: 0,
      leaseEpoch: 0,
      agentId: null,
      dispatchTarget: 'agent',
      toolType: i % 50 === 0 ? 'nerfstudio' : 'comfyui',
      timeoutS: 0,
      requiredLabels: i % 25 === 0 ? ['big'] : [],
      minVramGb: i % 3 === 0 ? 40 : 0,
      requiredModels: [ckptPath(ck)],
      preferredGpu: i % 5 === 0 ? 'A100' : null,
      seq: i + 1,
      startedAt: null,
      createdAt: now - Math.floor(r() * 3_600_000),
      parentTaskId: null,
      retryTaskId: null,
      priority: 1 + Math.floor(r() * 5),
      submitter: `sub-${Math.floor(r() * 50)}`,
      workflowKey: `wf-${ck}@1`,
    });
  }
  const gpuSeconds = new Map<string, number>();
  for (let i = 0; i < 50; i++) gpuSeconds.set(`sub-${i}`, r() * 100_000);
  const usage = { gpuSeconds, active: new Map<string, number>(), limits: new Map([['sub-3', { weight: 2, maxConcurrent: 5 }]]), quantumS: 60, teamActive: 0, teamMax: 0 };
  const settings: PolicySettings = { ...DEFAULT_POLICY, strategy };
  const times: number[] = [];
  let assigned = 0;
  for (let i = 0; i < 60; i++) {
    const t0 = performance.now();
    const p = schedule(queue, agents, usage, now, settings);
    times.push(performance.now() - t0);
    assigned = p.assign.length;
  }
  const steady = times.slice(10);
  return { p50: pct(steady, 0.5), p95: pct(steady, 0.95), assigned };
}

// ---------------------------------------------------------------------------------------------

const started = performance.now();
const w = workload(42);
const results = (['fifo-lru', 'fair'] as const).map((s) => simulate(s, w));
const f = (x: number, d = 1): string => x.toFixed(d);
console.log(`scheduler simulation: ${AGENTS} agents (4 GPU types), ${CKPTS} checkpoints (load 5-60 s), ${TOTAL} tasks (${INTERACTIVE} interactive p2 from ${USERS} users, ${BATCH} batch p4 from 2 submitters), log-normal durations (median ${f(w.medianS)} s), window ${HORIZON_S / 3600} h`);
console.log('strategy  | inter. wait p50 / p95 (s) | + ckpt load p50 / p95 (s) | batch done/h | GPU util (alloc / useful) | ckpt loads (interactive) | Jain batch (shares) | Jain interactive | passes (avg ms)');
for (const r of results)
  console.log(
    `${r.strategy.padEnd(9)} | ${f(r.interactiveP50).padStart(9)} / ${f(r.interactiveP95).padEnd(13)} | ${f(r.startP50).padStart(9)} / ${f(r.startP95).padEnd(13)} | ${f(r.batchPerHour, 0).padStart(12)} | ${`${f(100 * r.utilisation)}% / ${f(100 * r.useful)}%`.padEnd(25)} | ${`${r.loads} (${r.loadsInteractive})`.padStart(24)} | ${`${f(r.jainBatch, 3)} (${r.batchShares.map((x) => f(x, 2)).join('/')})`.padEnd(19)} | ${f(r.jainInteractive, 3).padStart(16)} | ${r.passes} (${f(r.passMsAvg, 2)})`,
  );
const [fifo, fair] = results as [Result, Result];
const pass = passCost('fair', 0.05);
const passAll = passCost('fair', 1);
const passFifo = passCost('fifo-lru', 0.05);
console.log(`one pass, 10,000 waiting tasks x 1,000 agents: fair ${f(pass.p50, 2)} ms p50 / ${f(pass.p95, 2)} ms p95 (5% of agents free, ${pass.assigned} assigned); every agent free: ${f(passAll.p50, 2)} / ${f(passAll.p95, 2)} ms (${passAll.assigned} assigned); fifo-lru ${f(passFifo.p50, 2)} / ${f(passFifo.p95, 2)} ms`);
const check = (ok: boolean, what: string): string => `${ok ? 'PASS' : 'FAIL'}  ${what}`;
console.log('targets (fair):');
console.log(check(fair.interactiveP95 <= w.medianS, `interactive p95 wait ${f(fair.interactiveP95)} s <= median task duration ${f(w.medianS)} s`));
console.log(check(fair.loads <= 0.3 * fifo.loads, `checkpoint loads ${fair.loads} <= 0.3 x fifo-lru's ${fifo.loads} (${f(fair.loads / fifo.loads, 3)}x)`));
console.log(check(fair.utilisation >= fifo.utilisation - 0.02, `GPU utilisation ${f(100 * fair.utilisation)}% >= fifo-lru's ${f(100 * fifo.utilisation)}% - 2`));
console.log(check(fair.jainBatch >= 0.9 && fair.jainInteractive >= 0.9, `Jain ${f(fair.jainBatch, 3)} (batch) and ${f(fair.jainInteractive, 3)} (interactive) >= 0.9`));
console.log(check(pass.p95 <= 5, `one pass ${f(pass.p95, 2)} ms (p95) <= 5 ms`));
console.log(`(ran in ${f((performance.now() - started) / 1000)} s)`);
