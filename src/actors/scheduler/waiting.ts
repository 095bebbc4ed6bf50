/**
 * Why a queued task waits, in words, from the scheduler's own view and its own eligibility rules
 * (`ineligibility` of fifo-lru, and the tool types the fair policy checks): no agent online, no agent
 * that can ever run it (with what each lacks), every agent that can run it busy, a retry's backoff,
 * the team's or the submitter's concurrency cap. A query, never a decision (it changes nothing the
 * scheduler decides with).
 */
import type { TaskRecord } from '../ports.js';
import { ineligibility, type AgentSlot } from './fifo-lru.js';
import { runsTool } from './fair.js';
import type { SchedulerState } from './decide.js';

/** Why one agent can never take the task, whatever its load, completing "N agents …" (null: it can, once a slot is free). */
function cannotRun(t: TaskRecord, a: AgentSlot): string | null {
  if (a.draining) return 'draining';
  if (!runsTool(a, t.toolType)) return `that cannot run ${t.toolType} workflows`;
  // ineligibility with a free slot: what remains is what the agent lacks (label, VRAM, model)
  const r = ineligibility(t, { ...a, free: Math.max(1, a.free) });
  if (r === null) return null;
  if (r.startsWith('vram ')) return `with ${a.vramTotalGb} GB of VRAM (the workflow needs ${t.minVramGb} GB)`;
  if (r.startsWith('missing label ')) return `without the label ${r.slice('missing label '.length)}`;
  if (r.startsWith('missing model ')) return `without the model ${r.slice('missing model '.length)}`;
  return `(${r})`;
}

const agentsN = (n: number): string => `${n} agent${n === 1 ? '' : 's'}`;

/**
 * Why the task waits; null when the scheduler does not hold it (not queued, not loaded yet, or a
 * cloud task, whose provider's dispatcher queues it).
 */
export function waitingReason(s: SchedulerState, taskId: string, env: { now: number; maxConcurrent: number }): string | null {
  const t = s.queue.get(taskId);
  if (!t || t.dispatchTarget !== 'agent') return null;
  if (t.notBefore && t.notBefore > env.now) return `a retry: it waits out its backoff (${Math.ceil((t.notBefore - env.now) / 1000)} s left)`;
  const agents = [...s.agents.values()].filter((a) => a.teamId === t.teamId);
  if (agents.length === 0) return 'no agent of the team is online';
  const why = new Map<string, number>();
  const able: AgentSlot[] = [];
  for (const a of agents) {
    const r = cannotRun(t, a);
    if (r === null) able.push(a);
    else why.set(r, (why.get(r) ?? 0) + 1);
  }
  if (able.length === 0) return `no online agent can run it: ${[...why].map(([r, n]) => `${agentsN(n)} ${r}`).join('; ')}`;
  if (env.maxConcurrent > 0 && s.active.size >= env.maxConcurrent) return `the team runs its maximum of ${env.maxConcurrent} concurrent tasks`;
  const cap = t.submitter ? s.limits.get(t.submitter)?.maxConcurrent : null;
  if (cap && t.submitter && (s.ledger.usage(env.now).active.get(t.submitter) ?? 0) >= cap) return `its credential runs its maximum of ${cap} concurrent tasks`;
  if (able.every((a) => a.free <= 0)) return `every agent that can run it is busy (${agentsN(able.length)})`;
  const ahead = [...s.queue.values()].filter((o) => o.id !== t.id && o.seq < t.seq).length;
  return ahead > 0 ? `waiting for its turn (${ahead} task${ahead === 1 ? '' : 's'} ahead in the queue)` : 'about to be assigned';
}
