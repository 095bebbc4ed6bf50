/**
 * The scheduling policy as one pure function: (queue, agents, usage, now, settings) -> which task
 * goes to which agent, which pending tasks must wait. No I/O, no clock, no state: the team
 * scheduler (decide.ts) runs it on its view; bench/scheduler-sim.ts drives it in virtual time.
 * Two named strategies: `fair` (the default: priority with aging, fair share, per-credential caps,
 * warm placement; fair.ts) and `fifo-lru` (the scheduler before priorities, unchanged; fifo-lru.ts).
 */
import type { TaskRecord } from '../ports.js';
import { plan, type AgentSlot, type PlanStep } from './fifo-lru.js';
import { planFair, type FairUsage } from './fair.js';

export const STRATEGIES = ['fair', 'fifo-lru'] as const;
export type Strategy = (typeof STRATEGIES)[number];

export interface PolicySettings {
  strategy: Strategy;
  /** GANTRY_PRIORITY_AGING_S: seconds a waiting task needs to rise one priority level (0 = never). */
  agingS: number;
  /** GANTRY_SCHEDULER_WARM_LOOKAHEAD: how far a warm task may overtake its submitter's head (0 = strict FIFO). */
  warmLookahead: number;
  /** How many tasks' worth of fair share a submitter may be ahead and still take a slot its warm task fits (0 = never). */
  warmSlackTasks: number;
  /** Seconds a young task may wait for a busy warm agent instead of a cold start (absent: DEFAULT_WARM_WAIT_S; 0 = never). */
  warmWaitS?: number;
}

export const DEFAULT_WARM_WAIT_S = 15;

export const DEFAULT_POLICY: PolicySettings = { strategy: 'fair', agingS: 300, warmLookahead: 1000, warmSlackTasks: 20, warmWaitS: DEFAULT_WARM_WAIT_S };

export interface PolicyUsage extends FairUsage {
  /** Tasks the team holds now, and its quota (0 = unlimited). */
  teamActive: number;
  teamMax: number;
}

export interface PolicyDecision {
  assign: PlanStep[];
  wait: string[];
  /** When a task held back for a busy warm agent stops waiting for it (epoch ms): run a pass then; absent = nothing held back. */
  wakeAt?: number | null;
}

/** No usage known (fifo-lru ignores it; fair then orders by priority and FIFO). */
export const noUsage = (teamActive = 0, teamMax = 0): PolicyUsage => ({ gpuSeconds: new Map(), active: new Map(), limits: new Map(), quantumS: 60, teamActive, teamMax });

/** One scheduling pass. `queue` in FIFO (seq) order; agents with their free slots (not modified). */
export function schedule(queue: readonly TaskRecord[], agents: ReadonlyMap<string, AgentSlot>, usage: PolicyUsage, now: number, settings: PolicySettings): PolicyDecision {
  if (settings.strategy === 'fifo-lru') return plan(queue, agents, usage.teamActive, usage.teamMax);
  return planFair(queue, agents.values(), usage, now, { agingS: settings.agingS, warmLookahead: settings.warmLookahead, warmSlackTasks: settings.warmSlackTasks, warmWaitS: settings.warmWaitS ?? DEFAULT_WARM_WAIT_S, teamActive: usage.teamActive, teamMax: usage.teamMax });
}
